"""The model both trainers train: loaded, frozen where it should be, wrapped in LoRA, saved.

SFT and both GRPO engines load, freeze, adapt and save the model the same way; the module sits
below both stages, so the RL stage does not import the SFT stage. ``config`` is an ``SFTConfig``
or a ``GRPOConfig`` (the fields read here are common to both).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from vsearcher_lite.runio import replace_dir

#: What QLoRA leaves in the training dtype: the vision tower (frozen and untouched by the adapters:
#: quantising it would only blur the image features) and the output layer (its logits feed the
#: loss).
QLORA_SKIP_MODULES = ("model.visual", "lm_head")


def quantization_config(config):
    """The 4-bit NF4 settings of a QLoRA run (``None`` for another method)."""
    if config.method != "qlora":
        return None
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=config.torch_dtype(),
        llm_int8_skip_modules=list(QLORA_SKIP_MODULES))


def load_model(config):
    """``(model, processor)`` for training: the base in the config's dtype (4-bit NF4 for qlora),
    its chat template one that marks the assistant's tokens (``data.mark_assistant_turns``)."""
    from vsearcher_lite.model.tiny import load_base
    from vsearcher_lite.training.data import mark_assistant_turns

    kwargs: dict[str, Any] = {}
    if (quantised := quantization_config(config)) is not None:
        kwargs["quantization_config"] = quantised
    model, processor = load_base(config.base, dtype=config.torch_dtype(), **kwargs)
    mark_assistant_turns(processor)
    return model, processor


def suppress_vision_tokens(model, tokenizer) -> list[int]:
    """Never generate a vision placeholder (a sampled ``<|image_pad|>`` breaks the next forward
    pass)."""
    names = ("<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>",
             "<|video_pad|>")
    vocab = tokenizer.get_vocab()
    ids = sorted({vocab[n] for n in names if n in vocab})
    model.generation_config.suppress_tokens = ids or None
    return ids


def freeze_vision(model) -> int:
    """Freeze the vision tower and its projector; returns how many parameters were frozen."""
    params = [p for p in model.model.visual.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    return sum(p.numel() for p in params)


def lora_config(config):
    from peft import LoraConfig

    return LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha,
                      lora_dropout=config.lora_dropout,
                      target_modules=config.lora_target, bias="none", task_type="CAUSAL_LM")


def save_checkpoint(trainer, processor, out_dir: Path, config) -> Path:
    """Save the trained model as a plain Hugging Face folder at ``out_dir``, atomically.

    LoRA / QLoRA: the adapter goes to ``out_dir.parent / "adapter"`` and ``out_dir`` gets it merged
    into the base (reloaded unquantised for QLoRA), so later stages load it like any checkpoint.
    FSDP / DeepSpeed go through ``trainer.save_model``, which gathers the shards.
    """
    from vsearcher_lite.model.tiny import save_base

    model = trainer.model
    if trainer.is_fsdp_enabled or trainer.is_deepspeed_enabled:
        tmp = out_dir.with_name(f".{out_dir.name}.tmp-shared")
        trainer.save_model(str(tmp))  # every rank takes part in gathering the weights
        if trainer.is_world_process_zero():
            processor.save_pretrained(tmp)
            replace_dir(tmp, out_dir)
        return out_dir
    # plain data parallel: every rank holds the same weights
    if not trainer.is_world_process_zero():
        return out_dir
    if hasattr(model, "peft_config"):
        adapter_dir = out_dir.parent / "adapter"
        tmp = Path(tempfile.mkdtemp(prefix=".adapter.tmp-", dir=out_dir.parent))
        model.save_pretrained(tmp)
        replace_dir(tmp, adapter_dir)
        if config.method == "qlora":
            from peft import PeftModel

            base, _ = load_base_unquantised(config)
            merged = PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()
        else:
            merged = model.merge_and_unload()
        merged.generation_config = model.generation_config
        return save_base(merged, processor, out_dir)
    return save_base(model, processor, out_dir)


def load_base_unquantised(config):
    from vsearcher_lite.model.tiny import load_base

    return load_base(config.base, dtype=config.torch_dtype())
