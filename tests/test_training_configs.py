"""The multi_gpu profile's accelerate configs parse, name real classes, and launch (2 CPU
processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs" / "accelerate"


def load_yaml(name: str) -> dict:
    return yaml.safe_load((CONFIGS / name).read_text(encoding="utf-8"))


def test_fsdp_config_is_bf16_fsdp_wrapping_real_layers():
    import transformers.models.qwen3_vl.modeling_qwen3_vl as qwen3_vl

    cfg = load_yaml("fsdp.yaml")
    assert (
        cfg["distributed_type"] == "FSDP"
        and cfg["mixed_precision"] == "bf16"
        and cfg["use_cpu"] is False
    )
    fsdp = cfg["fsdp_config"]
    assert fsdp["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    for name in fsdp["fsdp_transformer_layer_cls_to_wrap"].split(","):
        assert hasattr(qwen3_vl, name), f"{name} is not a Qwen3-VL class"
    assert fsdp["fsdp_state_dict_type"] == "FULL_STATE_DICT"  # save_pretrained gets whole weights


def test_zero3_config_points_at_a_stage3_deepspeed_json():
    cfg = load_yaml("zero3.yaml")
    assert cfg["distributed_type"] == "DEEPSPEED"
    ds_path = ROOT / cfg["deepspeed_config"]["deepspeed_config_file"]
    ds = json.loads(ds_path.read_text(encoding="utf-8"))
    zero = ds["zero_optimization"]
    assert zero["stage"] == 3 and zero["stage3_gather_16bit_weights_on_model_save"] is True
    assert zero["overlap_comm"] is False  # as the paper's released ds_z3_config
    # batch sizes come from the trainer ("auto"), so the SFT preset (1 x 2) is the one source.
    assert (
        ds["train_micro_batch_size_per_gpu"] == "auto"
        and ds["gradient_accumulation_steps"] == "auto"
    )


@pytest.mark.parametrize("name", ["fsdp.yaml", "zero3.yaml"])
def test_accelerate_reads_the_configs(name):
    from accelerate.commands.config.config_args import load_config_from_file

    cfg = load_config_from_file(str(CONFIGS / name))
    assert cfg.num_processes == 8
    assert str(cfg.distributed_type).endswith("FSDP" if name == "fsdp.yaml" else "DEEPSPEED")


def test_multi_gpu_preset_matches_the_paper():
    from vsearcher_lite.training.config import SFTConfig

    c = SFTConfig.for_profile("multi_gpu")
    assert (
        c.learning_rate,
        c.epochs,
        c.max_length,
        c.batch_size,
        c.grad_accum,
        c.warmup_ratio,
    ) == (1e-5, 5.0, 20480, 1, 2, 0.1)
    assert c.method == "full" and c.freeze_vision and c.dtype == "bfloat16"


def test_settings_are_shown_as_their_differences_from_the_paper():
    from vsearcher_lite.evaluation.comparison import PAPER_EVAL, ComparisonConfig
    from vsearcher_lite.rl.config import PAPER_DEFAULTS, GRPOConfig
    from vsearcher_lite.training.config import (
        PAPER_SFT,
        SFTConfig,
        paper_differences,
        settings_html,
    )

    assert paper_differences(SFTConfig.for_profile("multi_gpu").to_dict(), PAPER_SFT) == []
    cpu = SFTConfig.for_profile("cpu").to_dict()
    differ = {r["setting"]: (r["paper"], r["this run"]) for r in paper_differences(cpu, PAPER_SFT)}
    assert differ["learning_rate"] == (1e-5, 1e-3) and differ["answer_weight"] == (1.0, 10.0)
    assert (
        "scheduler" not in differ and "warmup_ratio" not in differ and "freeze_vision" not in differ
    )
    page = settings_html(cpu, PAPER_SFT, title="SFT <cpu>")
    assert f"{len(differ)} of the {len(PAPER_SFT)} settings compared with the paper differ" in page
    assert "SFT &lt;cpu&gt;" in page
    assert (
        page.count("<tr>") == len(differ) + 1
        and "<details>" in page
        and '"eval_max_tasks": 24' in page
    )

    rl = {
        r["setting"]
        for r in paper_differences(GRPOConfig.for_profile("cpu").to_dict(), PAPER_DEFAULTS)
    }
    assert {
        "prompts_per_step",
        "learning_rate",
        "beta",
        "difficulty_mix",
    } <= rl and "generations" not in rl
    assert paper_differences(GRPOConfig.for_profile("multi_gpu").to_dict(), PAPER_DEFAULTS) == []
    exam = ComparisonConfig.for_profile("multi_gpu").eval_config("exam").result_settings()
    # offline: the match judge
    assert [r["setting"] for r in paper_differences(exam, PAPER_EVAL)] == ["judge"]


@pytest.mark.slow
def test_two_process_cpu_launch(tmp_path):
    """`accelerate launch --num_processes 2 --cpu` of two SFT steps: both ranks train, rank 0
    saves."""
    from test_sft import _image, trl_record

    rows = [
        trl_record(_image(tmp_path / f"q{i}.png", (60 * i, 90, 30)), f"Bridge {n}", str(1800 + i))
        for i, n in enumerate(["Ola", "Kesh", "Varn", "Tilo"])
    ]
    data = tmp_path / "sft_trl.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = tmp_path / "run"
    launcher = Path(sys.executable).with_name("accelerate")
    cmd = [
        str(launcher),
        "launch",
        "--num_processes",
        "2",
        "--cpu",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "-m",
        "vsearcher_lite",
        "sft",
        "--run-dir",
        str(run),
        "--train-file",
        str(data),
        "--max-steps",
        "2",
        "--batch-size",
        "1",
        "--no-eval",
        "--threads",
        "1",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((run / "sft" / "metrics.json").read_text())
    assert metrics["steps"] == 2
    assert (run / "sft" / "checkpoint" / "model.safetensors").is_file()


@pytest.mark.parametrize("profile", ["cpu", "multi_gpu"])
def test_trl_arguments_use_the_current_checkpointing_name_without_a_warning(profile, tmp_path):
    import warnings

    from vsearcher_lite.rl import trl_engine
    from vsearcher_lite.rl.config import GRPOConfig
    from vsearcher_lite.training import sft_trainer
    from vsearcher_lite.training.config import SFTConfig

    sft_config = SFTConfig.for_profile(profile, device="cpu", dtype="float32")
    grpo_config = GRPOConfig.for_profile(profile, device="cpu", dtype="float32", use_vllm=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        sft_args = sft_trainer.trl_args(sft_config, tmp_path / "sft")
        grpo_args = trl_engine.trl_args(grpo_config, tmp_path / "grpo")
    assert (
        sft_args.activation_checkpointing
        is sft_config.gradient_checkpointing
        is (profile == "multi_gpu")
    )
    assert (
        grpo_args.activation_checkpointing
        is grpo_config.gradient_checkpointing
        is (profile == "multi_gpu")
    )
