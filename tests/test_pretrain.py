"""Pretraining: the schedule, packing and loss bookkeeping by hand, and a short real run of the
``pretrain`` command whose output loads with ``from_pretrained``."""

from __future__ import annotations

import csv
import json
import math

import pytest

torch = pytest.importorskip("torch")

from vsearcher_lite.cli import main  # noqa: E402
from vsearcher_lite.model.tokenizer import build_tokenizer  # noqa: E402
from vsearcher_lite.recipes.pretraining.corpus import ROLE_IDS, Doc  # noqa: E402
from vsearcher_lite.recipes.pretraining.packing import Packer, encode_doc, role_means, token_losses  # noqa: E402
from vsearcher_lite.recipes.pretraining.pretrain import PretrainConfig, lr_at  # noqa: E402
from vsearcher_lite.recipes.pretraining.probes import PROBE_KINDS, generated_matches  # noqa: E402


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(
        ["Orsk Bridge was built in 1874. Velna: 1900. Again: Orsk, Velna"] * 20, vocab_size=300
    )


def test_lr_schedule_warms_up_then_follows_a_cosine_to_the_floor():
    assert lr_at(0.0, 0, 1e-3, 4) == pytest.approx(2.5e-4)
    assert lr_at(0.0, 3, 1e-3, 4) == pytest.approx(1e-3)
    assert lr_at(0.0, 10, 1e-3, 4) == pytest.approx(1e-3)
    assert lr_at(0.5, 10, 1e-3, 4, min_ratio=0.1) == pytest.approx(1e-4 + 0.9e-3 * 0.5)
    assert lr_at(1.0, 10, 1e-3, 4, min_ratio=0.1) == pytest.approx(1e-4)
    assert lr_at(7.0, 10, 1e-3, 4, min_ratio=0.1) == pytest.approx(1e-4)  # progress is clamped


def test_global_caps_are_shared_out_between_the_stages():
    cfg = PretrainConfig(max_minutes=12.0, max_steps=130)
    scaled, full = cfg.scaled_stages(), PretrainConfig().stages
    a, b = scaled[:2]
    assert sum(s.minutes for s in scaled) == pytest.approx(12.0)
    assert a.minutes / b.minutes == pytest.approx(full[0].minutes / full[1].minutes)
    assert sum(s.max_steps for s in scaled) in (128, 129, 130, 131, 132)
    assert a.max_steps > b.max_steps
    assert all(s.warmup_steps <= s.max_steps // 10 + 1 for s in scaled)


def test_the_full_recipe_makes_the_base_from_scratch_in_five_stages():
    from vsearcher_lite.recipes.pretraining.pretrain import LONG_SEQ_LEN, default_stages

    stages = default_stages()
    assert [s.name for s in stages] == ["A", "B", "C", "D", "E"]
    assert [s.seq_len for s in stages] == [512, 1024, 512, 1024, LONG_SEQ_LEN]
    # names drawn afresh, copies weighed x2, only in the last two stages
    assert [s.fresh_names for s in stages] == [None, None, None, True, True]
    assert [s.copy_weight for s in stages] == [None, None, None, 2.0, 2.0]
    assert sum(s.max_steps for s in stages) == 6000 and PretrainConfig().init_from is None
    assert "restate" in stages[3].mix and "restate" not in stages[2].mix


class Interrupted(Exception):
    pass


def interrupt_at(prefix):
    def log(message):
        if message.startswith(prefix):
            raise Interrupted(message)

    return log


@pytest.mark.parametrize("prefix,resumed_at", [("[A] step 3", {"stage": 0, "step": 2}),
                                               ("[B] step 5", {"stage": 1, "step": 0})])
def test_an_interrupted_run_resumes_to_the_weights_of_an_uninterrupted_one(tmp_path, prefix,
                                                                          resumed_at):
    from safetensors.torch import load_file

    from vsearcher_lite.recipes.pretraining.pretrain import pretrain
    from vsearcher_lite.runio import InputError

    def config(name, **overrides):
        return PretrainConfig.smoke(str(tmp_path / name), threads=1, save_every=2,
                                    state_dir=str(tmp_path / f"{name}-state"), **overrides)

    whole = pretrain(config("whole"))
    with pytest.raises(Interrupted):
        pretrain(config("resumed"), log=interrupt_at(prefix))
    assert (tmp_path / "resumed-state" / "state.json").is_file()
    assert not (tmp_path / "resumed").exists()  # no half-written base
    with pytest.raises(InputError, match="resumed-state: a pretraining run of other settings.*"
                                         "seed differ"):
        pretrain(config("resumed", seed=1))
    again = pretrain(config("resumed"))
    a = load_file(tmp_path / "whole" / "model.safetensors")
    b = load_file(tmp_path / "resumed" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (whole["resumed_at"], again["resumed_at"]) == ([], [resumed_at])
    assert again["total_steps"] == whole["total_steps"] == 6
    log_a = (tmp_path / "whole" / "train_log.csv").read_text().splitlines()
    log_b = (tmp_path / "resumed" / "train_log.csv").read_text().splitlines()
    assert [line.split(",")[:2] + line.split(",")[4:] for line in log_a] == [
        line.split(",")[:2] + line.split(",")[4:] for line in log_b]  # all but seconds and lr
    assert again["corpus"]["dropped_docs"] == whole["corpus"]["dropped_docs"]
    assert not (tmp_path / "resumed-state").exists()  # finished: nothing left to resume
    assert "Resumed 1 time(s)" in (tmp_path / "resumed" / "MODEL_CARD.md").read_text()


def docs_cycle(docs):
    while True:
        yield from docs


def test_packer_keeps_copy_documents_whole_and_pads_the_rest(tok):
    kv = Doc(
        "kv", [("Orsk: 1874\nVelna: 1900\n", ""), ("Orsk: ", ""), ("1874", "recall"), ("\n", "")]
    )
    page = Doc("page", [("Orsk Bridge was built in 1874. " * 20, "")])
    packer = Packer(tok, docs_cycle([kv, kv, page]))
    n_kv = len(encode_doc(tok, kv)[0]) + 1  # + separator
    ids, roles, mask = packer.row(2 * n_kv + 3)
    sep = tok.convert_tokens_to_ids("<|endoftext|>")
    assert ids[n_kv - 1] == sep and ids[2 * n_kv - 1] == sep
    # a page fills only >= 32 free slots
    assert sum(mask) == 2 * n_kv and ids[2 * n_kv :] == [tok.pad_token_id] * 3
    assert roles.count(ROLE_IDS["recall"]) == 2
    ids2, _, mask2 = packer.row(40)
    assert sum(mask2) == 40  # the page that did not fit starts the next row, cut to fit
    too_long = Packer(
        tok, docs_cycle([Doc("kv", [("Orsk Velna " * 30, ""), ("1874", "recall")]), kv])
    )
    row, _, m = too_long.row(n_kv)
    assert too_long.skipped == 1 and sum(m) == n_kv


def test_losses_by_role_are_means_over_the_marked_targets():
    ids = torch.tensor([[1, 2, 3, 0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    roles = torch.tensor([[0, 0, ROLE_IDS["repeat"], 0]])
    logits = torch.zeros(1, 4, 5)
    logits[0, 0, 2] = math.log(3.0)  # p(token 2) = 3/7 at position 0
    losses, valid = token_losses(logits, ids, mask)
    assert valid.tolist() == [[True, True, False]]
    means = role_means(losses, valid, roles)
    assert means["loss_repeat"] == pytest.approx(math.log(5.0))  # uniform over 5 at position 1
    assert means["loss"] == pytest.approx((math.log(7 / 3) + math.log(5.0)) / 2)
    assert means["loss_recall"] is None and means["loss_answer"] is None


def test_generated_matches_needs_the_exact_copy_then_a_stop():
    assert generated_matches("Orsk Bridge\nQ:", "Orsk Bridge")
    assert generated_matches("1874", "1874")
    assert not generated_matches("Orsk Bridges", "Orsk Bridge")
    assert not generated_matches(" Orsk Bridge", "Orsk Bridge")


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """One short real run of the command (a few steps on two small worlds), shared by the tests
    below."""
    import contextlib
    import io

    tmp = tmp_path_factory.mktemp("pretrain")
    out = tmp / "base"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        # one thread: on a shared 2-core machine two threads per job oversubscribe it (measured 6x
        # slower)
        code = main(
            [
                "pretrain",
                "--smoke",
                "--out",
                str(out),
                "--quiet",
                "--run-dir",
                str(tmp / "run"),
                "--threads",
                "1",
            ]
        )
    return code, json.loads(stdout.getvalue()), out, tmp


def test_the_pretrain_command_writes_a_loadable_base_with_card_log_and_metrics(smoke_run):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    import vsearcher_lite.model.tiny  # noqa: F401  (registers the image-only processor)

    code, summary, out, tmp_path = smoke_run
    assert code == 0
    assert summary["out_dir"] == str(out) and summary["total_steps"] == 6
    model = AutoModelForImageTextToText.from_pretrained(out)
    processor = AutoProcessor.from_pretrained(out)
    assert type(processor).__name__ == "Qwen3VLImageOnlyProcessor"
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["parameters"]["total"] == sum(p.numel() for p in model.parameters())
    assert set(metrics["probes"]) == {*PROBE_KINDS, "agent_accuracy"}
    assert {"lookup", "recall", "repeat", "page_reading", "restate"} <= set(PROBE_KINDS)
    assert all(
        0.0 <= metrics["probes"][k] <= 1.0
        for k in ("lookup", "recall", "repeat", "pick", "page_reading")
    )
    assert metrics["loss_last"] < metrics["loss_first"]  # even six steps learn something
    # the smoke run skips the agent probe, and says so
    assert metrics["agent_probe"]["measured"] is False
    rows = list(csv.DictReader((out / "train_log.csv").open()))
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4, 5, 6] and {r["stage"] for r in rows} == {
        "A",
        "B",
    }
    card = (out / "MODEL_CARD.md").read_text()
    assert "vsearcher-lite pretrain --out" in card and "--smoke" in card
    assert f"{metrics['parameters']['total']:,}" in card
    assert not (tmp_path / "run" / "pretrain").exists()  # --out wins over the run folder


def test_default_output_is_the_run_folder_not_the_shipped_base(tmp_path):
    from vsearcher_lite.cli import build_parser
    from vsearcher_lite.recipes.pretraining.commands import config_from_args

    args = build_parser().parse_args(
        ["pretrain", "--run-dir", str(tmp_path / "r"), "--minutes", "3"]
    )
    config = config_from_args(args)
    assert config.out_dir == str(tmp_path / "r" / "pretrain")
    assert config.max_minutes == 3.0 and "data/tiny_base" not in config.out_dir
    assert config.command == f"vsearcher-lite pretrain --run-dir {tmp_path / 'r'} --minutes 3"


def test_a_bad_number_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["pretrain", "--minutes", "-2"])
    assert exc.value.code == 2
    assert "expected a positive number, got '-2'" in capsys.readouterr().err


def test_init_continues_a_checkpoint_and_the_card_keeps_its_history(smoke_run, tmp_path, capsys):
    first, second = smoke_run[2], tmp_path / "second"
    assert (
        main(
            [
                "pretrain",
                "--smoke",
                "--init",
                str(first),
                "--out",
                str(second),
                "--quiet",
                "--threads",
                "1",
            ]
        )
        == 0
    )
    capsys.readouterr()
    m1 = json.loads((first / "metrics.json").read_text())
    m2 = json.loads((second / "metrics.json").read_text())
    assert m2["init_from"] == str(first) and m2["previous_runs"][0]["command"] == m1["command"]
    # it starts where the first run ended, not from scratch
    assert m2["loss_first"] < m1["loss_first"]
    assert (first / "tokenizer.json").read_text() == (second / "tokenizer.json").read_text()
    card = (second / "MODEL_CARD.md").read_text()
    assert f"Continued from run 1: `{m1['command']}`" in card and "--init" in m2["command"]
    assert (
        main(
            [
                "pretrain",
                "--smoke",
                "--init",
                str(tmp_path / "nothing"),
                "--out",
                str(tmp_path / "x"),
            ]
        )
        == 2
    )
    assert "no checkpoint there" in capsys.readouterr().err


def parse(argv):
    from vsearcher_lite.cli import build_parser

    return build_parser().parse_args(argv)


def test_the_continue_recipe_is_one_stage_a_from_the_init_checkpoint(smoke_run):
    from vsearcher_lite.recipes.pretraining.commands import config_from_args
    from vsearcher_lite.recipes.pretraining.corpus import DEFAULT_MIX
    from vsearcher_lite.recipes.pretraining.pretrain import continue_stages, default_stages

    base = str(smoke_run[2])
    full = config_from_args(parse(["pretrain", "--init", base, "--out", "x"]))
    cont = config_from_args(
        parse(["pretrain", "--init", base, "--recipe", "continue", "--out", "x"])
    )
    assert [s.name for s in full.stages] == ["A", "B", "C", "D", "E"]
    assert full.stages == default_stages()
    assert full.state_dir == "runs/default/pretrain_state"  # resumable in the run folder
    assert cont.stages == continue_stages() and cont.init_from == base
    (a,) = cont.stages
    assert (a.max_steps, a.minutes, a.lr, a.warmup_steps, a.seq_len, a.batch_size) == (
        2400,
        30.0,
        2e-3,
        50,
        512,
        8,
    )
    assert a.mix == {**DEFAULT_MIX, "lookup": 3.0, "pageqa": 1.5} and DEFAULT_MIX["lookup"] != 3.0
    assert (
        cont.probes.agent_tasks == 0
        and cont.probes.agent_run_dir is None
        and full.probes.agent_tasks == 20
    )
    assert cont.command == f"vsearcher-lite pretrain --out x --init {base} --recipe continue"
    assert "--recipe" not in full.command  # full is the default and is not spelled out
    capped = config_from_args(
        parse(
            [
                "pretrain",
                "--init",
                base,
                "--recipe",
                "continue",
                "--out",
                "x",
                "--max-steps",
                "100",
                "--agent-tasks",
                "5",
            ]
        )
    )
    assert capped.scaled_stages()[0].max_steps == 100 and capped.probes.agent_tasks == 5
    assert capped.probes.agent_run_dir == "runs/default"


def test_the_fresh_recipe_continues_on_fresh_names_with_weighted_copies(smoke_run):
    from vsearcher_lite.recipes.pretraining.commands import config_from_args
    from vsearcher_lite.recipes.pretraining.pretrain import fresh_stages

    base = str(smoke_run[2])
    fresh = config_from_args(parse(["pretrain", "--init", base, "--recipe", "fresh", "--out", "x"]))
    cont = config_from_args(
        parse(["pretrain", "--init", base, "--recipe", "continue", "--out", "x"])
    )
    assert fresh.stages == fresh_stages() and fresh.init_from == base
    (a,) = fresh.stages
    assert (a.minutes, a.lr, a.seq_len, a.batch_size) == (40.0, 1e-3, 1024, 4)
    assert (fresh.fresh_names, fresh.copy_weight) == (True, 2.0) and (
        cont.fresh_names,
        cont.copy_weight,
    ) == (False, 1.0)
    assert fresh.probes.agent_tasks == 0
    assert fresh.command == f"vsearcher-lite pretrain --out x --init {base} --recipe fresh"


def test_the_long_recipe_trains_rows_of_4096_tokens_and_declares_those_positions(smoke_run):
    from vsearcher_lite.model.tiny import load_base
    from vsearcher_lite.recipes.pretraining.commands import config_from_args
    from vsearcher_lite.recipes.pretraining.pretrain import (
        LONG_SEQ_LEN,
        declare_positions,
        long_stages,
    )

    base = str(smoke_run[2])
    long = config_from_args(parse(["pretrain", "--init", base, "--recipe", "long", "--out", "x"]))
    assert long.stages == long_stages() and long.init_from == base
    (a,) = long.stages
    assert (a.seq_len, a.batch_size, a.max_steps, a.lr) == (LONG_SEQ_LEN, 1, 1000, 5e-4)
    assert (long.fresh_names, long.copy_weight, long.probes.agent_tasks) == (True, 2.0, 0)
    model, _ = load_base(base)
    text = model.config.get_text_config(decoder=True)
    before = text.max_position_embeddings
    assert declare_positions(model, 256) == before  # shorter rows never lower the field
    assert declare_positions(model, before + 4096) == before + 4096 == text.max_position_embeddings


def test_copy_targets_weigh_more_in_the_loss():
    import torch

    from vsearcher_lite.recipes.pretraining.packing import weighted_mean

    losses = torch.tensor([[1.0, 2.0, 6.0, 3.0]])
    valid = torch.tensor([[True, True, True, False]])
    # the target of position t is token t + 1
    roles = torch.tensor([[0, 0, 0, ROLE_IDS["answer"], 0]])
    assert float(weighted_mean(losses, valid, roles)) == pytest.approx(3.0)
    assert float(weighted_mean(losses, valid, roles, 2.0)) == pytest.approx((1 + 2 + 2 * 6) / 4)


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--recipe", "continue"],
            "--recipe continue continues a checkpoint: give it one with --init DIR",
        ),
        (
            ["--recipe", "fresh"],
            "--recipe fresh continues a checkpoint: give it one with --init DIR",
        ),
        (
            ["--recipe", "long"],
            "--recipe long continues a checkpoint: give it one with --init DIR",
        ),
        (
            ["--recipe", "continue", "--smoke", "--init", "{base}"],
            "does not combine with --recipe continue",
        ),
        (["--probe-only"], "--probe-only probes an existing checkpoint: give it with --init DIR"),
        (
            ["--probe-only", "--init", "{base}", "--out", "y", "--minutes", "2"],
            "trains nothing; drop --out, --minutes",
        ),
        (["--probe-only", "--init", "{tmp}"], "no metrics.json there"),
    ],
)
def test_recipe_and_probe_only_misuse_is_a_one_line_error(
    smoke_run, tmp_path, capsys, argv, message
):
    argv = [a.format(base=smoke_run[2], tmp=tmp_path) for a in argv]
    if "{tmp}" in " ".join(argv) or str(tmp_path) in argv:
        # a folder with a config but no pretrain records
        (tmp_path / "config.json").write_text("{}")
    assert main(["pretrain", *argv, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_probe_only_rewrites_the_probes_and_card_in_place_and_keeps_the_training_records(
    smoke_run, tmp_path, capsys
):
    import shutil

    base = tmp_path / "base"
    shutil.copytree(smoke_run[2], base)
    before = json.loads((base / "metrics.json").read_text())
    kept = {
        name: (base / name).read_bytes()
        for name in ("model.safetensors", "tokenizer.json", "train_log.csv")
    }
    assert (
        main(
            [
                "pretrain",
                "--probe-only",
                "--init",
                str(base),
                "--probe-n",
                "2",
                "--agent-tasks",
                "0",
                "--threads",
                "1",
                "--quiet",
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    after = json.loads((base / "metrics.json").read_text())
    assert summary["probes"] == after["probes"] and summary["out_dir"] == str(base)
    assert {k: v["n"] for k, v in after["copy_probes"].items()} == {
        k: 2 for k in before["copy_probes"]
    }
    assert before["copy_probes"]["lookup"]["n"] == 4  # the smoke run's own probes, now replaced
    assert "lookup_far" in after["probes"] and after["agent_probe"]["measured"] is False
    for key in (
        "command",
        "stages",
        "total_steps",
        "loss_first",
        "loss_last",
        "train_seconds",
        "config",
        "seed",
    ):
        assert after[key] == before[key], key
    assert all((base / name).read_bytes() == data for name, data in kept.items())
    run = after["probe_run"]
    assert (
        run["command"]
        == "vsearcher-lite pretrain --probe-only --run-dir runs/default "
        + f"--init {base} --threads 1 --probe-n 2 --agent-tasks 0"
    )
    assert run["n_per_kind"] == 2 and run["seed"] == before["seed"] and run["agent_run_dir"] is None
    card = (base / "MODEL_CARD.md").read_text()
    assert f"Probes re-run on this checkpoint by `{run['command']}`" in card
    # the training command is still the card's command
    assert f"Command: `{before['command']}`" in card
    for kind, res in after["copy_probes"].items():
        assert f"| {kind} | {res['accuracy']:.3f} | 2 |" in card
    # no temporary folder left behind
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
