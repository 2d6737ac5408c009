"""Loading a real Qwen3-VL checkpoint without torchvision is one clear line."""

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
