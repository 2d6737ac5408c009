"""The command line: every stage is a subcommand with the common options."""

import subprocess
import sys

import pytest

from vsearcher_lite.cli import build_parser, main

STAGES = [
    "world",
    "seeds",
    "inject-text",
    "inject-image",
    "filter",
    "trajectories",
    "format-check",
    "eval",
    "tools",
    "pretrain",
    "bench",
    "reproduce",
]


def test_every_stage_has_a_subcommand_with_the_common_options():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert set(STAGES) <= set(sub.choices)
    for name in STAGES:
        options = {o for a in sub.choices[name]._actions for o in a.option_strings}
        assert {"--run-dir", "--profile", "--world", "--seed"} <= options, name


def test_python_dash_m_is_the_same_command():
    out = subprocess.run(
        [sys.executable, "-m", "vsearcher_lite", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "inject-text" in out.stdout and "reproduce" in out.stdout


def test_no_command_prints_help_and_fails(capsys):
    assert main([]) == 2
    assert "usage: vsearcher-lite" in capsys.readouterr().out


def test_a_bad_profile_is_rejected_by_argparse():
    with pytest.raises(SystemExit) as exc:
        main(["world", "--profile", "tpu"])
    assert exc.value.code == 2


COMMON = ["-h", "--help", "--run-dir", "--profile", "--world", "--seed"]
SEED_FLAGS = ["--sitelinks-max", "--statements-min", "--limit", "--exam-share", "--heldout-share",
              "--entities", "--kiwix-url", "--kiwix-book"]
INJECT_FLAGS = ["--n-train", "--n-heldout", "--n-exam", "--exam-size", "--mix", "--exam-rounds",
                "--onehop-train", "--onehop-heldout", "--onehop-seeds-only", "--exam-seeds-only",
                "--warmup-levels", "--writer", "--chat", "--concurrency", "--max-attempts"]
FILTER_FLAGS = ["--filter-mode", "--filter-chat", "--filter-vlm", "--judge", "--short-circuit",
                "--rl-tasks", "--rl-max-share", "--validation-tasks"]
PRETRAIN_FLAGS = ["--out", "--minutes", "--max-steps", "--threads", "--save-every", "--device",
                  "--probe-n", "--agent-tasks", "--init", "--recipe", "--probe-only", "--smoke",
                  "--quiet"]


@pytest.mark.parametrize("name, flags", [
    ("seeds", SEED_FLAGS),
    ("inject-text", INJECT_FLAGS + SEED_FLAGS),
    ("inject-image", INJECT_FLAGS + SEED_FLAGS),
    ("filter", FILTER_FLAGS + INJECT_FLAGS + SEED_FLAGS),
    ("pretrain", PRETRAIN_FLAGS),
])
def test_commands_built_from_config_fields_keep_their_flags(name, flags):
    """The options built from config fields are the hand-written ones they replaced, in order."""
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert [o for a in sub.choices[name]._actions for o in a.option_strings] == COMMON + flags
