"""The cpu profile's tiny Qwen3-VL: its config, an image-only processor, building, saving, loading.

An ordinary ``Qwen3VLForConditionalGeneration`` (hidden 256, 4 layers, 8 heads of 32, a vision
tower of depth 2: about 5M parameters) saved as an ordinary Hugging Face folder, so the
``Auto*`` classes and ``load_base`` load it as they load a real Qwen3-VL. Three differences:

- **No video processor** (every one needs torchvision, which has no CPU wheel here):
  ``Qwen3VLImageOnlyProcessor`` leaves it out, returns torch tensors even without
  ``return_tensors`` (TRL calls it so) and is registered with ``AutoProcessor`` on import.
- **TRL's own ``qwen3_vl.jinja`` chat template, byte for byte**: TRL recognises templates by
  exact comparison before it swaps in its training template and tool-call parser.
- **``suppress_tokens``** for the vision placeholders: a weak model that samples
  ``<|image_pad|>`` breaks the next forward pass.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from vsearcher_lite.model.tokenizer import EOS_TOKEN, PAD_TOKEN, token_id, vision_token_ids
from vsearcher_lite.runio import InputError, replace_dir

#: The text model, written out (4 layers x 8 heads are enough to form a copy circuit).
TEXT_CONFIG: dict[str, Any] = {
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "head_dim": 32,
    "hidden_act": "silu",
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6,
    "initializer_range": 0.02,
    # mrope_section sums to head_dim / 2 (temporal, height, width rotary pairs).
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [6, 5, 5],
                        "mrope_interleaved": True},
}
#: The vision tower: 16-pixel patches merged 2x2, so a 64x96 picture is 6 tokens.
VISION_CONFIG: dict[str, Any] = {
    "depth": 2,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_heads": 4,
    "patch_size": 16,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "out_hidden_size": 256,
    "num_position_embeddings": 256,  # a 16x16 grid of learned positions, interpolated
    "deepstack_visual_indexes": [0],
}
#: The image processor: small pictures keep episodes short (the sandbox's 160x120 -> 64x96).
IMAGE_PROCESSOR: dict[str, Any] = {
    "patch_size": 16,
    "merge_size": 2,
    "temporal_patch_size": 2,
    "min_pixels": 32 * 32,
    "max_pixels": 64 * 128,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
}

_registered = False


def trl_qwen3_vl_template() -> str:
    """TRL's ``qwen3_vl.jinja`` as installed, byte for byte."""
    from trl.chat_template_utils import qwen3_vl_chat_template

    return qwen3_vl_chat_template


def _processor_class():
    from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor
    from transformers.processing_utils import ProcessorMixin

    class Qwen3VLImageOnlyProcessor(Qwen3VLProcessor):
        """``Qwen3VLProcessor`` without a video processor; pixel tensors are always torch."""

        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            # Qwen3VLProcessor.__init__ passes a video processor positionally; set its attributes
            # and call ProcessorMixin directly with the two parts this processor has.
            self.image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
            self.video_token = getattr(tokenizer, "video_token", None) or "<|video_pad|>"
            self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
            self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
            ProcessorMixin.__init__(self, image_processor, tokenizer,
                                    chat_template=chat_template, **kwargs)
            self.vision_start_token = "<|vision_start|>"
            self.vision_end_token = "<|vision_end|>"
            self.vision_start_token_id = tokenizer.convert_tokens_to_ids(self.vision_start_token)
            self.vision_end_token_id = tokenizer.convert_tokens_to_ids(self.vision_end_token)

        def __call__(self, images=None, text=None, videos=None, **kwargs):
            if videos is not None:
                raise ValueError("this processor reads images only "
                                 "(no video processor: torchvision is not installed)")
            out = super().__call__(images=images, text=text, **kwargs)
            import numpy as np
            import torch

            for key in ("pixel_values", "image_grid_thw"):
                if key in out and isinstance(out[key], np.ndarray):
                    out[key] = torch.from_numpy(out[key])
            return out

        def _adjust_assistant_masks_indices(self, processed_dict, generation_indices):
            # the same walk over nested lists as over the offset tensor, several times faster
            offsets = processed_dict.get("offset_mapping")
            if hasattr(offsets, "tolist"):
                processed_dict["offset_mapping"] = offsets.tolist()
            return super()._adjust_assistant_masks_indices(processed_dict, generation_indices)

    Qwen3VLImageOnlyProcessor.__module__ = __name__
    Qwen3VLImageOnlyProcessor.__qualname__ = "Qwen3VLImageOnlyProcessor"
    return Qwen3VLImageOnlyProcessor


def _register() -> None:
    """Register ``Qwen3VLImageOnlyProcessor`` with ``AutoProcessor`` under a private config
    class, so real Qwen3-VL checkpoints still get transformers' own processor."""
    global _registered, Qwen3VLImageOnlyProcessor
    if _registered:
        return
    from transformers import AutoProcessor, Qwen3VLConfig

    class _ImageOnlyProcessorKey(Qwen3VLConfig):
        model_type = "vsearcher_tiny_qwen3_vl"

    Qwen3VLImageOnlyProcessor = _processor_class()
    AutoProcessor.register(_ImageOnlyProcessorKey, Qwen3VLImageOnlyProcessor, exist_ok=True)
    _registered = True


Qwen3VLImageOnlyProcessor: Any = None


def image_only_processor_class():
    """The registered ``Qwen3VLImageOnlyProcessor`` class."""
    _register()
    return Qwen3VLImageOnlyProcessor


def build_processor(tokenizer, image_processor: dict | None = None):
    """The image-only processor over ``tokenizer`` with TRL's qwen3_vl chat template."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    settings = {**IMAGE_PROCESSOR, **(image_processor or {})}
    tokenizer.chat_template = trl_qwen3_vl_template()
    cls = image_only_processor_class()
    return cls(image_processor=Qwen2VLImageProcessorPil(**settings), tokenizer=tokenizer,
               chat_template=trl_qwen3_vl_template())


def tiny_config(tokenizer, text: dict | None = None, vision: dict | None = None):
    """The tiny model's ``Qwen3VLConfig`` for ``tokenizer`` (vocabulary and token ids from it)."""
    from transformers import Qwen3VLConfig

    text_cfg = copy.deepcopy({**TEXT_CONFIG, **(text or {})})
    text_cfg.update(vocab_size=len(tokenizer), pad_token_id=token_id(tokenizer, PAD_TOKEN),
                    eos_token_id=token_id(tokenizer, EOS_TOKEN), bos_token_id=None)
    vision_cfg = copy.deepcopy({**VISION_CONFIG, **(vision or {})})
    vision_cfg["out_hidden_size"] = text_cfg["hidden_size"]
    return Qwen3VLConfig(
        text_config=text_cfg,
        vision_config=vision_cfg,
        image_token_id=token_id(tokenizer, "<|image_pad|>"),
        video_token_id=token_id(tokenizer, "<|video_pad|>"),
        vision_start_token_id=token_id(tokenizer, "<|vision_start|>"),
        vision_end_token_id=token_id(tokenizer, "<|vision_end|>"),
        tie_word_embeddings=True,
    )


def generation_defaults(model, tokenizer) -> None:
    """Stop at ``<|im_end|>`` or ``<|endoftext|>``, pad with the latter, never emit vision ids."""
    gc = model.generation_config
    gc.eos_token_id = [token_id(tokenizer, EOS_TOKEN), token_id(tokenizer, PAD_TOKEN)]
    gc.pad_token_id = token_id(tokenizer, PAD_TOKEN)
    gc.bos_token_id = None
    gc.suppress_tokens = vision_token_ids(tokenizer)
    gc.do_sample = False
    gc.temperature = None
    gc.top_p = None
    gc.top_k = None


def build_tiny_model(tokenizer, *, seed: int = 0, text: dict | None = None,
                     vision: dict | None = None):
    """A freshly initialised tiny ``Qwen3VLForConditionalGeneration`` (fp32), fixed by ``seed``."""
    import torch
    from transformers import Qwen3VLForConditionalGeneration

    config = tiny_config(tokenizer, text, vision)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3VLForConditionalGeneration(config)
    model.to(torch.float32)
    generation_defaults(model, tokenizer)
    return model


#: Plain-text cues for the markup tokens pretraining never shows (their embeddings are random).
MARKUP_CUES: dict[str, str] = {
    "<answer>": "Answer: ",
    "</answer>": "\n",
    "<think>": "\n",
    "</think>": "\n",
    "<tool_call>": "\n",
    "</tool_call>": "\n",
    "<tool_response>": "\n",
    "</tool_response>": "\n",
    "<|im_start|>": "\n",
    "<|im_end|>": "<|endoftext|>",
}


def init_unseen_token_embeddings(model, tokenizer,
                                 cues: dict[str, str] | None = None) -> dict[str, list[int]]:
    """Set each token in ``cues`` to the mean embedding of its cue text's tokens; returns the cue
    ids used. Starting ``<answer>`` where "Answer: " is lets the base's plain-text habit
    ("Answer: X" then a copy) carry over into SFT."""
    import torch

    cues = MARKUP_CUES if cues is None else cues
    emb = model.get_input_embeddings().weight
    used: dict[str, list[int]] = {}
    with torch.no_grad():
        for token, cue in cues.items():
            target = token_id(tokenizer, token)
            ids = tokenizer(cue, add_special_tokens=False)["input_ids"]
            if not ids:
                raise ValueError(f"the cue {cue!r} for {token} has no tokens")
            emb[target] = emb[ids].mean(dim=0)
            used[token] = list(ids)
    return used


def declare_positions(model, trained: int) -> int:
    """Raise the text config's ``max_position_embeddings`` to the longest rows trained on (the
    rotary positions themselves have no limit; the field tells later stages what was trained)."""
    text = model.config.get_text_config(decoder=True)
    text.max_position_embeddings = max(int(text.max_position_embeddings), int(trained))
    return text.max_position_embeddings


def count_parameters(model) -> dict[str, int]:
    """``{"total", "vision", "text"}`` parameter counts (tied embeddings counted once)."""
    total = sum(p.numel() for p in model.parameters())
    vision = sum(p.numel() for p in model.model.visual.parameters())
    return {"total": int(total), "vision": int(vision), "text": int(total - vision)}


def save_base(model, processor, out_dir: str | os.PathLike,
              extra_files: dict[str, str] | None = None) -> Path:
    """Save model (safetensors), processor, tokenizer and ``extra_files`` (name -> text) into a
    temporary sibling folder that replaces ``out_dir``: a crash never leaves half a checkpoint."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        processor.save_pretrained(tmp)
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text, encoding="utf-8")
        os.chmod(tmp, 0o755)  # mkdtemp makes the folder private; a checkpoint is meant to be shared
        for f in tmp.iterdir():
            os.chmod(f, 0o644)
        replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def default_base_dir() -> Path:
    """The shipped base: ``data/tiny_base`` of the repository."""
    return Path(__file__).resolve().parents[2] / "data" / "tiny_base"


#: transformers' "no limit" for a tokenizer's length check.
NO_LENGTH_LIMIT = int(1e30)


def without_length_check(tokenizer):
    """Lift ``tokenizer``'s length check for generation: an episode's context is bounded by the
    episode's own limits (``max_context_chars``), and rotary positions have no hard end, so the
    check would only warn of indexing errors that cannot happen. Returns the tokenizer."""
    tokenizer.model_max_length = NO_LENGTH_LIMIT
    return tokenizer


def load_base(path_or_id: str | os.PathLike | None = None, *, device: str | None = None,
              dtype: Any = None, **kwargs: Any):
    """``(model, processor)`` for the shipped tiny base (``None``), a local folder or a hub id,
    through the ordinary ``Auto*`` classes; ``kwargs`` go to the model's ``from_pretrained``."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    _register()
    source = str(default_base_dir() if path_or_id is None else path_or_id)
    looks_local = os.path.sep in source or source.startswith(".") or Path(source).exists()
    if looks_local and not (Path(source) / "config.json").is_file():
        raise InputError(f"{source}: no model here (no config.json); "
                         f"run `vsearcher-lite pretrain --out {source}` or give a hub id")
    if dtype is not None:
        kwargs["dtype"] = dtype
    try:
        model = AutoModelForImageTextToText.from_pretrained(source, **kwargs)
        processor = AutoProcessor.from_pretrained(source)
    except OSError as exc:
        raise InputError(f"cannot load model {source!r}: {str(exc).splitlines()[0]}") from None
    except ImportError:  # Qwen3-VL's video processor needs torchvision
        raise InputError(f"cannot load the processor of {source!r}: it needs torchvision "
                         "(pip install -e \".[gpu]\" installs the release paired with torch "
                         "2.13.0)") from None
    if device is not None:
        model.to(device)
    return model, processor


def read_config_summary(path: str | os.PathLike) -> dict:
    """Key numbers of a saved tiny model's ``config.json`` (what the model card states)."""
    cfg = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    return config_summary(cfg["text_config"], cfg["vision_config"])


def read_config_summary_from_model(model) -> dict:
    """The same numbers as ``read_config_summary``, from a model in memory."""
    return config_summary(model.config.text_config.to_dict(), model.config.vision_config.to_dict())


def config_summary(t: dict, v: dict) -> dict:
    return {
        "vocab_size": t["vocab_size"],
        "hidden_size": t["hidden_size"],
        "num_hidden_layers": t["num_hidden_layers"],
        "num_attention_heads": t["num_attention_heads"],
        "num_key_value_heads": t["num_key_value_heads"],
        "head_dim": t["head_dim"],
        "intermediate_size": t["intermediate_size"],
        "vision_depth": v["depth"],
        "vision_hidden_size": v["hidden_size"],
        "patch_size": v["patch_size"],
        "spatial_merge_size": v["spatial_merge_size"],
    }


_register()
