"""The shipped tiny base (``data/tiny_base``): its card states what its config and weights are,
it is small enough to ship, and it meets the copy-probe target it was trained for."""

from __future__ import annotations

import json
import re

import pytest

from vsearcher_lite.model.tiny import default_base_dir, read_config_summary

BASE = default_base_dir()
REQUIRED = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "processor_config.json",
    "chat_template.jinja",
    "MODEL_CARD.md",
    "metrics.json",
    "train_log.csv",
)


@pytest.fixture(scope="module")
def card() -> str:
    return (BASE / "MODEL_CARD.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def metrics() -> dict:
    return json.loads((BASE / "metrics.json").read_text(encoding="utf-8"))


def test_the_base_ships_every_file_and_stays_small():
    missing = [name for name in REQUIRED if not (BASE / name).is_file()]
    assert not missing, (
        f"data/tiny_base lacks {missing}; "
        "rebuild it with `vsearcher-lite pretrain --out data/tiny_base`"
    )
    total = sum(p.stat().st_size for p in BASE.iterdir() if p.is_file())
    assert total <= 25_000_000


def test_the_card_states_the_shipped_architecture(card):
    arch = read_config_summary(BASE)
    assert f"Vocabulary: {arch['vocab_size']} tokens" in card
    assert (
        f"Text: hidden {arch['hidden_size']}, {arch['num_hidden_layers']} layers, "
        f"{arch['num_attention_heads']} heads, {arch['num_key_value_heads']} kv heads, "
        f"head_dim {arch['head_dim']}, intermediate {arch['intermediate_size']}"
    ) in card
    assert (
        f"Vision: depth {arch['vision_depth']}, hidden {arch['vision_hidden_size']}, "
        f"patch {arch['patch_size']}, merge {arch['spatial_merge_size']}"
    ) in card


def test_the_card_parameter_count_is_the_checkpoints(card, metrics):
    from safetensors import safe_open

    with safe_open(str(BASE / "model.safetensors"), framework="numpy") as f:
        stored = sum(int(__import__("math").prod(f.get_slice(k).get_shape())) for k in f.keys())
    stated = int(re.search(r"Parameters: ([\d,]+)", card).group(1).replace(",", ""))
    # tied embeddings: the checkpoint stores the embedding once, as does the count
    assert stated == metrics["parameters"]["total"] == stored


def test_the_card_reports_the_run_that_made_it(card, metrics):
    # written there by its command, or copied there unchanged, which its card then says
    copied = "copied to data/tiny_base, unchanged" in metrics.get("note", "")
    assert f"Command: `{metrics['command']}`" in card
    assert "--out data/tiny_base" in metrics["command"] or (copied and metrics["note"] in card)
    assert f"Seed: {metrics['seed']}" in card
    assert f"Steps: {metrics['total_steps']}" in card
    for kind, result in metrics["copy_probes"].items():
        assert f"| {kind} | {result['accuracy']:.3f} | {result['n']} |" in card
    log_lines = (BASE / "train_log.csv").read_text().splitlines()
    assert int(log_lines[-1].split(",")[1]) == metrics["total_steps"]


def test_the_shipped_command_builds_the_recorded_config(metrics, monkeypatch):
    """The card's command, parsed by the real CLI, builds exactly the config the run recorded."""
    import shlex

    from vsearcher_lite.cli import build_parser
    from vsearcher_lite.recipes.pretraining.commands import canonical_command, config_from_args

    argv = shlex.split(metrics["command"])
    assert argv[:2] == ["vsearcher-lite", "pretrain"]
    monkeypatch.chdir(BASE.parents[1])  # the command's paths are relative to the repository
    args = build_parser().parse_args(argv[1:])
    assert canonical_command(args) == metrics["command"]
    built = json.loads(json.dumps(config_from_args(args).to_dict()))
    recorded = dict(metrics["config"])
    # progress lines only: --quiet is not part of the run
    (
        built.pop("progress"),
        recorded.pop("progress"),
    )
    if (
        "device" not in recorded
    ):  # made before --device existed; the card's hardware line says where it ran
        built.pop("device")
    # made before runs were resumable: where and how often the state is saved changes no weight
    for key in ("state_dir", "save_every"):
        if key not in recorded:
            built.pop(key)
    # made before a stage could set its own: None is "the run's", what every stage then used
    recorded["stages"] = [
        {"fresh_names": None, "copy_weight": None, **stage} for stage in recorded["stages"]
    ]
    assert built == recorded


def test_the_probes_cover_every_kind_and_the_agent(metrics):
    from vsearcher_lite.recipes.pretraining.probes import PROBE_KINDS

    assert set(metrics["copy_probes"]) == set(PROBE_KINDS)
    assert metrics["agent_probe"]["measured"] is True and metrics["agent_probe"]["n_tasks"] > 0
    assert metrics["probes"]["agent_accuracy"] == metrics["agent_probe"]["accuracy"]


def test_the_shipped_base_copies(metrics):
    """The copy target: lookup-probe accuracy >= 0.9 on names it never saw."""
    assert metrics["probes"]["lookup"] >= 0.9


def test_the_card_says_plainly_when_the_target_is_missed(card, metrics):
    missed = metrics["probes"]["lookup"] < 0.9
    assert ("Below the copy target" in card) == missed
    if (
        missed
    ):  # the copy probe's other readings (recall, repeat) are stated beside the lookup number
        for kind in ("recall", "repeat"):
            assert f"{kind} {metrics['probes'][kind]:.3f}" in card
