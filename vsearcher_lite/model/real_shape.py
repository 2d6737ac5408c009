"""A local folder laid out like a published Qwen3-VL-*-Thinking checkpoint, at toy widths.

The GPU profiles train real Qwen3-VL checkpoints, which cannot be downloaded here. This folder
has what their loading, templating and training paths touch, so those paths run on a CPU in
seconds: the published config fields (``qwen3_vl``, the special-token and vision-token ids,
151,936 vocabulary rows, 262,144 positions, interleaved M-RoPE), the published file layout
(``preprocessor_config.json``, ``video_preprocessor_config.json``, ``chat_template.json``,
``tokenizer.json`` with ``vocab.json`` / ``merges.txt``, sharded safetensors with their index)
and the Thinking chat template (``thinking_template``). Only the widths are toys, and the
tokenizer: a byte-level BPE with Qwen2's pre-tokenizer, trained here on a few sentences, padded
with unreachable entries to Qwen's 151,643 so that the 26 added tokens sit at their published
ids (``<|im_end|>`` 151645, ``<|image_pad|>`` 151655, ``<think>`` 151667).

Qwen3-VL's processor includes a video processor that needs torchvision; without it the folder
names the project's image-only processor (``tiny.Qwen3VLImageOnlyProcessor``) instead, and
everything else stays as published.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from vsearcher_lite.model.thinking_template import thinking_template
from vsearcher_lite.runio import replace_dir

VOCAB_SIZE = 151_936  # the embedding rows of every Qwen3-VL checkpoint
FIRST_ADDED_ID = 151_643  # Qwen's byte-level BPE entries come first
#: Qwen's added tokens in id order from ``FIRST_ADDED_ID``, with whether each is special
#: (dropped by ``skip_special_tokens``); the agent's tags are not, so replies keep them.
ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
    ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False),
    ("</tool_call>", False), ("<|fim_prefix|>", False), ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False), ("<|fim_pad|>", False), ("<|repo_name|>", False),
    ("<|file_sep|>", False), ("<tool_response>", False), ("</tool_response>", False),
    ("<think>", False), ("</think>", False),
)
PUBLISHED_IDS = {token: FIRST_ADDED_ID + i for i, (token, _) in enumerate(ADDED_TOKENS)}

#: The text model's fields every size shares (the published ``text_config``).
TEXT_COMMON: dict[str, Any] = {
    "vocab_size": VOCAB_SIZE, "max_position_embeddings": 262_144, "hidden_act": "silu",
    "rms_norm_eps": 1e-6, "attention_bias": False, "attention_dropout": 0.0,
    "initializer_range": 0.02, "bos_token_id": PUBLISHED_IDS["<|endoftext|>"],
    "eos_token_id": PUBLISHED_IDS["<|im_end|>"], "use_cache": True,
}
#: The vision tower's shared fields.
VISION_COMMON: dict[str, Any] = {
    "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2, "in_channels": 3,
    "num_position_embeddings": 2304, "hidden_act": "gelu_pytorch_tanh",
    "initializer_range": 0.02,
}
#: Widths by size: the published 2B and 8B, and the toy this module builds.
SHAPES: dict[str, dict[str, Any]] = {
    "2B": {"text": {"hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 28,
                    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128},
           "vision": {"depth": 24, "hidden_size": 1024, "intermediate_size": 4096,
                      "num_heads": 16, "deepstack_visual_indexes": [5, 11, 17]},
           "tie_word_embeddings": True},
    "8B": {"text": {"hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
                    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128},
           "vision": {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304,
                      "num_heads": 16, "deepstack_visual_indexes": [8, 16, 24]},
           "tie_word_embeddings": False},
    "toy": {"text": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
                     "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16},
            "vision": {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
                       "deepstack_visual_indexes": [0]},
            "tie_word_embeddings": True},
}
#: The published image processor: at least 65,536 pixels (a 256 x 256 picture is 64 tokens).
IMAGE_PROCESSOR: dict[str, Any] = {
    "size": {"longest_edge": 16_777_216, "shortest_edge": 65_536}, "patch_size": 16,
    "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5], "do_convert_rgb": True, "do_normalize": True,
    "do_rescale": True, "do_resize": True, "rescale_factor": 1 / 255, "resample": 3,
}
VIDEO_PROCESSOR: dict[str, Any] = {
    **{k: v for k, v in IMAGE_PROCESSOR.items() if k != "size"},
    "size": {"longest_edge": 25_165_824, "shortest_edge": 4096}, "fps": 2, "do_sample_frames": True,
}
#: What the toy tokenizer is trained on: sentences of the agent's protocol, so episodes stay short.
CORPUS = (
    "You are a research agent that answers hard questions about images and the world by "
    "searching the web. Think first, then call one tool or give the answer.\n\n"
    "In which year was the bridge in the image built? The image shows a bridge over a river. "
    "Search for the page of the town, read it and find the year it was founded.\n\n"
    '{"name": "image_search", "arguments": {}}\n{"name": "text_search", "arguments": '
    '{"query": "bridge built"}}\n{"name": "visit", "arguments": {"url": '
    '"https://wiki.sandbox.test/wiki/Page", "goal": "the year"}}\n\n'
    "1. Title: Page\n   URL: https://wiki.sandbox.test/wiki/Page\n   Snippet: it was built in"
)


def mrope_section(head_dim: int) -> list[int]:
    """Rotary pairs per axis (time, height, width), split of ``head_dim / 2`` as the published
    24:20:20 of 64.

    >>> mrope_section(128), mrope_section(16)
    ([24, 20, 20], [4, 2, 2])
    """
    half = head_dim // 2
    height = width = half * 20 // 64
    return [half - height - width, height, width]


def shape_config(size: str = "toy", **text: Any):
    """The ``Qwen3VLConfig`` of ``size`` (``SHAPES``) with the published ids and fields;
    ``text`` overrides the text model's widths (``num_hidden_layers=2``)."""
    from transformers import Qwen3VLConfig

    shape = copy.deepcopy(SHAPES[size])
    text_cfg = {**TEXT_COMMON, **shape["text"], **text}
    text_cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": 5_000_000.0,
                                   "mrope_section": mrope_section(text_cfg["head_dim"]),
                                   "mrope_interleaved": True}
    vision_cfg = {**VISION_COMMON, **shape["vision"], "out_hidden_size": text_cfg["hidden_size"]}
    return Qwen3VLConfig(
        text_config=text_cfg, vision_config=vision_cfg,
        image_token_id=PUBLISHED_IDS["<|image_pad|>"],
        video_token_id=PUBLISHED_IDS["<|video_pad|>"],
        vision_start_token_id=PUBLISHED_IDS["<|vision_start|>"],
        vision_end_token_id=PUBLISHED_IDS["<|vision_end|>"],
        tie_word_embeddings=shape["tie_word_embeddings"],
        architectures=["Qwen3VLForConditionalGeneration"])


def _byte_level(text: str) -> str:
    """``text`` in the byte-level alphabet BPE entries are written in (a space is ``Ġ``)."""
    from tokenizers import pre_tokenizers

    pieces = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False).pre_tokenize_str(
        text)
    return "".join(piece for piece, _ in pieces)


def build_tokenizer(texts: tuple[str, ...] = (CORPUS,), vocab_size: int = 600):
    """A Qwen2-style byte-level BPE (``tokenizers.Tokenizer``) trained on ``texts``, padded to
    ``FIRST_ADDED_ID`` entries with ones no merge reaches, then Qwen's added tokens: every id
    of ``PUBLISHED_IDS`` as published."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        trainers,
    )
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    def blank(model):
        tok = Tokenizer(model)
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        return tok

    # 1. the merges, learnt from the texts (every byte is in the alphabet)
    trained = blank(models.BPE())
    trained.train_from_iterator(list(texts), trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    model = json.loads(trained.to_str())["model"]
    vocab: dict[str, int] = dict(model["vocab"])
    # 2. unreachable entries up to Qwen's BPE size, so the added tokens get the published ids
    for i in range(len(vocab), FIRST_ADDED_ID):
        vocab[_byte_level(f"<|unused_{i}|>")] = i
    merges = [tuple(m) for m in model["merges"]]
    tok = blank(models.BPE(vocab=vocab, merges=merges))
    # 3. the added tokens, in Qwen's order
    tok.add_tokens([AddedToken(t, special=special, normalized=False)
                    for t, special in ADDED_TOKENS])
    if tok.token_to_id("</think>") != PUBLISHED_IDS["</think>"]:
        raise RuntimeError("the added tokens did not take their published ids")
    return tok


def tokenizer_config(template: str) -> dict[str, Any]:
    """``tokenizer_config.json`` as a Qwen3-VL checkpoint ships it (``Qwen2Tokenizer``)."""
    decoder = {str(PUBLISHED_IDS[t]): {"content": t, "lstrip": False, "normalized": False,
                                       "rstrip": False, "single_word": False, "special": special}
               for t, special in ADDED_TOKENS}
    extra = [t for t, special in ADDED_TOKENS if special and t not in ("<|endoftext|>",
                                                                       "<|im_end|>")]
    return {"add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": decoder,
            "additional_special_tokens": extra, "bos_token": None, "chat_template": template,
            "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>", "errors": "replace",
            "model_max_length": TEXT_COMMON["max_position_embeddings"],
            "pad_token": "<|endoftext|>", "split_special_tokens": False,
            "tokenizer_class": "Qwen2Tokenizer", "unk_token": None}


def torchvision_installed() -> bool:
    return importlib.util.find_spec("torchvision") is not None


def write_processor_files(folder: Path, template: str, image_only: bool) -> None:
    """The tokenizer's files, ``chat_template.json`` and the image and video processor configs,
    in the published layout; ``image_only`` names the project's processor and leaves the video
    processor out."""
    from vsearcher_lite.model.tiny import image_only_processor_class

    tok = build_tokenizer()
    tok.save(str(folder / "tokenizer.json"))
    tok.model.save(str(folder))  # vocab.json and merges.txt, as published beside it
    processor = (image_only_processor_class().__name__ if image_only else "Qwen3VLProcessor")
    files: dict[str, Any] = {
        "tokenizer_config.json": {**tokenizer_config(template), "processor_class": processor},
        "chat_template.json": {"chat_template": template},
        "preprocessor_config.json": {**IMAGE_PROCESSOR, "processor_class": processor,
                                     "image_processor_type": "Qwen2VLImageProcessor"},
    }
    if not image_only:
        files["video_preprocessor_config.json"] = {
            **VIDEO_PROCESSOR, "processor_class": processor,
            "video_processor_type": "Qwen3VLVideoProcessor"}
    for name, data in files.items():
        (folder / name).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n",
                                   encoding="utf-8")


def build_real_shape_checkpoint(out_dir: str | Path, *, layers: int | None = 1,
                                size: str = "toy", seed: int = 0, image_only: bool | None = None,
                                shard_size: str = "16MB", device: str | None = None) -> Path:
    """Write a checkpoint folder like a published Qwen3-VL Thinking one at ``out_dir``: random
    bf16 weights of ``size`` (``SHAPES``; ``layers`` text layers, ``None`` for the size's own),
    initialised on ``device`` (``cuda`` makes an 8B one in seconds), and the files of the module
    docstring; ``image_only`` defaults to whether torchvision is missing. Built in a temporary
    sibling folder that replaces ``out_dir``. Returns ``out_dir``, to load with
    ``tiny.load_base``."""
    import torch
    from transformers import GenerationConfig, Qwen3VLForConditionalGeneration

    out_dir = Path(out_dir)
    image_only = not torchvision_installed() if image_only is None else image_only
    config = shape_config(size, **({} if layers is None else {"num_hidden_layers": layers}))
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        with torch.random.fork_rng(devices=[]), torch.device(device or "cpu"):
            torch.manual_seed(seed)
            model = Qwen3VLForConditionalGeneration._from_config(config, dtype=torch.bfloat16)
        end, pad = PUBLISHED_IDS["<|im_end|>"], PUBLISHED_IDS["<|endoftext|>"]
        model.generation_config = GenerationConfig(
            bos_token_id=pad, pad_token_id=pad, eos_token_id=[end, pad], do_sample=True,
            temperature=1.0, top_p=0.95, top_k=20)
        model.save_pretrained(tmp, safe_serialization=True, max_shard_size=shard_size)
        del model
        write_processor_files(tmp, thinking_template(), image_only)
        tmp.chmod(0o755)
        replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir
