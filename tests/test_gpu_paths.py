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
