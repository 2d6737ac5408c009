"""The profile files give every stage exactly the settings the presets in code gave.

``fixtures/profile_configs.json`` holds each stage config's ``to_dict()`` per profile (plus the
single_gpu QLoRA variant and the full-length reference run) as the if/elif presets resolved them,
recorded before the presets moved to ``vsearcher_lite/profiles/*.toml``. The shape changed in one
place: SFT's ``eval_max_tokens``, ``eval_max_tool_calls``, ``eval_max_context_chars``,
``eval_wall_clock_s`` and GRPO's ``eval_max_tokens``, ``eval_max_tool_calls``,
``eval_max_context_chars`` are now the embedded ``eval`` (an ``EvalConfig``). ``flatten`` maps
each old name to its new place (``eval_max_tokens`` -> ``eval.max_tokens``); an old ``None``
meant "the evaluation profile's", so those are compared through the resolved evaluation settings
(``sft_eval``, ``grpo_eval``), recorded too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vsearcher_lite.config import EvalConfig
from vsearcher_lite.evaluation.comparison import ComparisonConfig
from vsearcher_lite.profiles import load_profile
from vsearcher_lite.reference import (
    REFERENCE_COMPARISON,
    REFERENCE_GRPO,
    REFERENCE_PASSK,
    REFERENCE_SFT,
    REFERENCE_TRAJECTORIES,
)
from vsearcher_lite.reference_run import full_length
from vsearcher_lite.rl.config import GRPOConfig
from vsearcher_lite.synthesis.inject import InjectConfig
from vsearcher_lite.synthesis.trajectories import TrajectoryConfig
from vsearcher_lite.training.config import SFTConfig

RECORDED = json.loads((Path(__file__).parent / "fixtures" / "profile_configs.json").read_text())
#: Old field -> its setting in the embedded ``eval``.
MOVED = {
    "eval_max_tokens": "max_tokens",
    "eval_max_tool_calls": "max_tool_calls",
    "eval_max_context_chars": "max_context_chars",
    "eval_wall_clock_s": "wall_clock_s",
}


def flatten(new: dict, old: dict) -> dict:
    """``new`` (a ``to_dict()`` with ``eval`` nested) in the old shape: each moved name back at
    the top, with the value the old field had where it was set (``None`` stood for the same)."""
    flat = {k: v for k, v in new.items() if k != "eval"}
    for name, inner in MOVED.items():
        if name in old:
            flat[name] = new["eval"][inner] if old[name] is not None else None
    return json.loads(json.dumps(flat))


def as_json(d: dict) -> dict:
    return json.loads(json.dumps(d))


@pytest.mark.parametrize("profile", ["cpu", "single_gpu", "multi_gpu"])
def test_each_profile_resolves_to_the_recorded_settings(profile):
    old = RECORDED[profile]
    sft, grpo, comparison = (
        SFTConfig.for_profile(profile),
        GRPOConfig.for_profile(profile),
        ComparisonConfig.for_profile(profile),
    )
    assert flatten(sft.to_dict(), old["sft"]) == old["sft"]
    assert as_json(sft.eval_config().to_dict()) == old["sft_eval"]
    for name, inner in MOVED.items():  # where the old field was set, the embedded one holds it
        if old["sft"].get(name) is not None:
            assert getattr(sft.eval, inner) == old["sft"][name]
    assert flatten(grpo.to_dict(), old["grpo"]) == old["grpo"]
    assert as_json(grpo.eval_config().to_dict()) == old["grpo_eval"]
    assert as_json(EvalConfig.for_profile(profile).to_dict()) == old["eval"]
    assert as_json(TrajectoryConfig.for_profile(profile).to_dict()) == old["trajectories"]
    assert as_json(comparison.to_dict()) == old["comparison"]
    assert as_json(comparison.heldout_eval_config().to_dict()) == old["comparison_heldout_eval"]
    assert as_json(comparison.exam_eval_config().to_dict()) == old["comparison_exam_eval"]
    from dataclasses import asdict

    assert as_json(asdict(InjectConfig.for_profile(profile))) == old["inject"]


def test_method_variants_and_the_reference_run_resolve_to_the_recorded_settings():
    old = RECORDED["single_gpu-qlora"]
    assert (
        flatten(SFTConfig.for_profile("single_gpu", method="qlora").to_dict(), old["sft"])
        == old["sft"]
    )
    assert (
        flatten(GRPOConfig.for_profile("single_gpu", method="qlora").to_dict(), old["grpo"])
        == old["grpo"]
    )
    old = RECORDED["reference"]
    assert as_json(REFERENCE_SFT) == old["REFERENCE_SFT"]
    assert as_json(REFERENCE_GRPO) == old["REFERENCE_GRPO"]
    assert as_json(REFERENCE_COMPARISON) == old["REFERENCE_COMPARISON"]
    assert as_json(REFERENCE_PASSK) == old["REFERENCE_PASSK"]
    assert as_json(REFERENCE_TRAJECTORIES) == old["REFERENCE_TRAJECTORIES"]
    sft = full_length(SFTConfig.for_profile("cpu"), REFERENCE_SFT)
    grpo = full_length(GRPOConfig.for_profile("cpu"), REFERENCE_GRPO)
    assert flatten(sft.to_dict(), old["sft"]) == old["sft"]
    assert as_json(sft.eval_config().to_dict()) == old["sft_eval"]
    assert flatten(grpo.to_dict(), old["grpo"]) == old["grpo"]
    assert as_json(grpo.eval_config().to_dict()) == old["grpo_eval"]
    comparison = full_length(ComparisonConfig.for_profile("cpu"), REFERENCE_COMPARISON)
    assert as_json(comparison.to_dict()) == old["comparison"]


def test_profile_files_name_only_known_settings_and_unset_reads_as_none():
    """Every key of every profile file is a field of its stage's dataclass (a typo would otherwise
    only show when that profile runs)."""
    from dataclasses import fields

    stages = {
        "sft": SFTConfig,
        "grpo": GRPOConfig,
        "eval": EvalConfig,
        "trajectories": TrajectoryConfig,
        "comparison": ComparisonConfig,
        "inject": InjectConfig,
    }
    passk = {"samples", "temperature", "levels", "max_tasks"}  # the reference's Pass@k (run_passk)
    for name in ("cpu", "single_gpu", "multi_gpu", "reference"):
        settings = load_profile(name)
        for stage, table in settings.items():
            if not isinstance(table, dict):
                assert stage == "prompt_variant"
                continue
            known = passk if stage == "passk" else {f.name for f in fields(stages[stage])}
            assert set(table) <= known, (name, stage, set(table) - known)
            for sub, inner in (
                (k, v) for k, v in table.items() if isinstance(v, dict) and k == "eval"
            ):
                assert set(inner) <= {f.name for f in fields(EvalConfig)}, (name, stage, sub)
    assert (
        load_profile("cpu")["sft"]["base"] is None
        and load_profile("reference")["sft"]["max_steps"] is None
    )
    with pytest.raises(ValueError, match="unknown profile 'laptop'"):
        SFTConfig.for_profile("laptop")


def test_a_flat_eval_setting_and_a_nested_one_reach_the_same_place():
    flat = SFTConfig.for_profile("cpu", eval_max_tokens=16, eval_top_k=7)
    nested = SFTConfig.for_profile("cpu", eval={"max_tokens": 16, "top_k": 7})
    assert (
        flat.eval == nested.eval and flat.eval.max_tokens == 16 and flat.eval.max_tool_calls == 18
    )
    grpo = GRPOConfig.for_profile("cpu", eval_max_tokens=24, eval_batch=4)
    assert (
        grpo.eval.max_tokens == 24 and grpo.eval_batch == 4 and grpo.eval_config().concurrency == 4
    )


def test_runs_saved_with_the_old_flat_settings_still_resume():
    """An interrupted run's saved settings (SFT: ``trainer/settings.json``; GRPO: ``resume.pt``)
    hold the old flat ``eval_*`` fields; evaluation settings do not change what is trained, so
    the resume compares the rest, which is unchanged."""
    from vsearcher_lite.rl.cpu_engine import RESUME_FREE as GRPO_FREE
    from vsearcher_lite.runio import resume_identity
    from vsearcher_lite.training.sft import RESUME_FREE as SFT_FREE

    for profile in ("cpu", "single_gpu"):
        old = RECORDED[profile]
        new_sft = as_json(SFTConfig.for_profile(profile).to_dict())
        new_grpo = as_json(GRPOConfig.for_profile(profile).to_dict())
        assert resume_identity(old["sft"], SFT_FREE) == resume_identity(new_sft, SFT_FREE)
        assert resume_identity(old["grpo"], GRPO_FREE) == resume_identity(new_grpo, GRPO_FREE)
