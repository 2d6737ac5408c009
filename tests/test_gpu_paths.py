"""GPU paths that fail before training starts: a missing torchvision or vllm is one line."""

import pytest

from vsearcher_lite.model import tiny
from vsearcher_lite.runio import InputError


def test_processor_without_torchvision_is_one_line(monkeypatch):
    import transformers

    def no_torchvision(*args, **kwargs):
        raise ImportError("Qwen3VLVideoProcessor requires the Torchvision library")

    monkeypatch.setattr(transformers.AutoProcessor, "from_pretrained", no_torchvision)
    with pytest.raises(InputError) as err:
        tiny.load_base(None)
    message = str(err.value)
    assert "\n" not in message
    assert "torchvision" in message and str(tiny.default_base_dir()) in message
    assert "pip install -e \".[gpu]\"" in message


@pytest.mark.parametrize("flags, expected", [([], True), (["--no-vllm"], False),
                                             (["--vllm"], True)])
def test_the_vllm_switch_sets_use_vllm(flags, expected):
    from vsearcher_lite.cli import build_parser
    from vsearcher_lite.rl.commands import config_from_args

    args = build_parser().parse_args(["grpo", "--profile", "multi_gpu", *flags])
    assert config_from_args(args).use_vllm is expected


def test_a_vllm_run_without_vllm_is_refused_in_one_line(monkeypatch):
    import importlib.util

    from vsearcher_lite.rl.config import GRPOConfig
    from vsearcher_lite.rl.trl_engine import check_vllm

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "vllm" else real_find_spec(name, *a))
    with pytest.raises(InputError, match="--no-vllm") as err:
        check_vllm(GRPOConfig(use_vllm=True))
    assert "\n" not in str(err.value)
    check_vllm(GRPOConfig(use_vllm=False))  # decoding with the training model needs no vllm


def test_colocated_vllm_gets_the_episode_window_and_a_memory_share():
    from vsearcher_lite.rl import trl_engine
    from vsearcher_lite.rl.config import GRPOConfig

    config = GRPOConfig.for_profile("multi_gpu", device="cpu", dtype="float32")
    args = trl_engine.trl_args(config, "unused")
    # 2K prompt + 28K response (paper A.4), not the checkpoint's 262,144 positions
    assert args.use_vllm and args.vllm_max_model_length == 2048 + 28_672
    assert args.vllm_gpu_memory_utilization == config.vllm_gpu_memory_utilization
    plain = trl_engine.trl_args(GRPOConfig.for_profile("multi_gpu", device="cpu",
                                                       dtype="float32", use_vllm=False), "unused")
    assert not plain.use_vllm


def test_qlora_keeps_the_vision_tower_and_the_output_layer_unquantised():
    from transformers.quantizers.quantizers_utils import should_convert_module

    from vsearcher_lite.training.checkpoint import quantization_config
    from vsearcher_lite.training.config import SFTConfig

    assert quantization_config(SFTConfig.for_profile("single_gpu")) is None  # LoRA
    q = quantization_config(SFTConfig.for_profile("single_gpu", method="qlora"))
    assert q.load_in_4bit and q.bnb_4bit_quant_type == "nf4"
    skip = q.llm_int8_skip_modules
    assert not should_convert_module("model.visual.blocks.0.attn.qkv", skip)
    assert not should_convert_module("lm_head", skip)
    assert should_convert_module("model.language_model.layers.0.mlp.up_proj", skip)


def test_several_processes_without_vllm_are_refused_in_one_line(monkeypatch):
    import importlib.util

    from vsearcher_lite.rl.config import GRPOConfig
    from vsearcher_lite.rl.trl_engine import check_vllm

    with pytest.raises(InputError, match="--no-vllm on 2 processes") as err:
        check_vllm(GRPOConfig(use_vllm=False), world_size=2)
    assert "\n" not in str(err.value)
    monkeypatch.setenv("WORLD_SIZE", "8")  # as accelerate launch and torchrun set it
    with pytest.raises(InputError, match="on 8 processes"):
        check_vllm(GRPOConfig(use_vllm=False))
    check_vllm(GRPOConfig(use_vllm=False), world_size=1)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "vllm" else real_find_spec(name, *a))
    check_vllm(GRPOConfig(use_vllm=True))  # vLLM generates for every process


def test_only_the_main_process_writes_the_step_log(tmp_path):
    from types import SimpleNamespace

    from vsearcher_lite.rl.trl_engine import step_logger

    rollout = {"groups": 2, "reward": 0.5}
    for rank, main in ((1, False), (0, True)):
        out = tmp_path / f"rank{rank}"
        out.mkdir()
        callback = step_logger(out, [rollout], budget_s=None)
        state = SimpleNamespace(global_step=1, is_world_process_zero=main)
        callback.on_log(None, state, None, logs={"loss": 0.1, "reward": 0.5})
        assert len(callback.rows) == 1  # every process keeps its rows for its own summary
        assert (out / "steps.csv").is_file() is main


def test_gpu_rollouts_end_near_the_model_length_not_the_teachers_context():
    from vsearcher_lite.rl.config import GRPOConfig

    for profile in ("single_gpu", "multi_gpu"):
        c = GRPOConfig.for_profile(profile)
        window = c.max_prompt_tokens + c.max_response_tokens  # 2K + 28K (paper A.4)
        assert c.max_context_chars <= 4 * window, profile
