"""TransformersChat on tiny models built here from configs (no downloads): a 2-layer Qwen2 causal
LM with a byte-level BPE tokenizer trained on a few sentences, and a tiny Qwen2-VL."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from PIL import Image  # noqa: E402
from servers import (  # noqa: E402
    TINY_CHAT_TEMPLATE,
    TINY_SPECIAL_TOKENS,
    build_tiny_causal_lm,
    build_tiny_tokenizer,
)

from vsearcher_lite.backends.chat import make_chat  # noqa: E402
from vsearcher_lite.chat import ChatError  # noqa: E402
from vsearcher_lite.chat.local import TransformersChat  # noqa: E402
from vsearcher_lite.runio import InputError  # noqa: E402


@pytest.fixture(scope="module")
def tiny_lm_dir(tmp_path_factory):
    return build_tiny_causal_lm(tmp_path_factory.mktemp("tiny-lm"))


@pytest.fixture(scope="module")
def lm(tiny_lm_dir):
    return TransformersChat(tiny_lm_dir)


USER = [{"role": "user", "content": "Where is the Eiffel Tower?"}]


def test_greedy_is_deterministic_and_counts_usage(tiny_lm_dir):
    bot = TransformersChat(tiny_lm_dir)
    first = bot.chat(USER, max_tokens=12)
    second = bot.chat(USER, max_tokens=12, temperature=0)
    assert first == second and first.strip()
    assert bot.usage["requests"] == 2
    assert 0 < bot.usage["completion_tokens"] <= 24
    prompt_len = len(
        bot.tokenizer.apply_chat_template(
            USER, add_generation_prompt=True, tokenize=True, return_dict=True
        )["input_ids"]
    )
    assert bot.usage["prompt_tokens"] == 2 * prompt_len


def test_seeded_sampling_repeats_and_leaves_global_rng_alone(lm):
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    a = lm.chat(USER, temperature=1.0, max_tokens=16, seed=7)
    b = lm.chat(USER, temperature=1.0, max_tokens=16, seed=7)
    c = lm.chat(USER, temperature=1.0, max_tokens=16, seed=8)
    assert a == b and a != c
    assert torch.equal(torch.rand(1), expected_next)


def test_stop_string_ends_generation_and_is_cut(lm):
    full = lm.chat(USER, temperature=1.0, max_tokens=40, seed=3)
    # Pick a stop string from the middle of what the model says anyway.
    candidates = [
        full[i : i + 2]
        for i in range(len(full) // 3, len(full) - 2)
        if full[i : i + 2].isascii() and full[i : i + 2].strip() == full[i : i + 2]
    ]
    assert candidates, f"no ASCII stop candidate in {full!r}"
    stop = candidates[0]
    before = lm.usage["completion_tokens"]
    cut = lm.chat(USER, temperature=1.0, max_tokens=40, seed=3, stop=[stop])
    used = lm.usage["completion_tokens"] - before
    assert cut == full[: full.find(stop)]
    assert used < 40  # generation stopped early, not just trimmed afterwards


def test_text_only_model_refuses_images(lm, tmp_path):
    image = tmp_path / "x.png"
    Image.new("RGB", (8, 8)).save(image)
    with pytest.raises(ChatError, match="text-only"):
        lm.chat(
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "image": str(image)},
                        {"type": "text", "text": "?"},
                    ],
                }
            ]
        )


def test_unknown_sampling_option_is_an_error(lm):
    with pytest.raises(ChatError, match="reasoning_effort"):
        lm.chat(USER, reasoning_effort="high")


def test_make_chat_builds_transformers_backends(tiny_lm_dir):
    assert isinstance(make_chat(f"transformers:{tiny_lm_dir}"), TransformersChat)
    bot = make_chat(
        {"backend": "transformers", "model": str(tiny_lm_dir), "defaults": {"max_tokens": 3}}
    )
    bot.chat(USER)
    assert bot.usage["completion_tokens"] <= 3


def test_missing_model_path_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot load model"):
        TransformersChat(tmp_path / "no-such-model")


@pytest.fixture(scope="module")
def tiny_vl():
    """A tiny Qwen2-VL model and its real processor (built in memory)."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    from transformers.processing_utils import ProcessorMixin

    tok = build_tiny_tokenizer()
    ids = {t: tok.convert_tokens_to_ids(t) for t in TINY_SPECIAL_TOKENS[3:]}
    config = Qwen2VLConfig(
        text_config=dict(
            vocab_size=len(tok),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=512,
            rope_scaling={"type": "mrope", "mrope_section": [2, 1, 1]},
            bos_token_id=None,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            initializer_range=0.5,
        ),
        vision_config=dict(
            depth=1,
            embed_dim=32,
            hidden_size=32,
            num_heads=2,
            mlp_ratio=2,
            patch_size=14,
            spatial_merge_size=2,
            temporal_patch_size=2,
            in_channels=3,
        ),
        image_token_id=ids["<|image_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        video_token_id=ids["<|image_pad|>"],
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = Qwen2VLForConditionalGeneration(config)
    # Without torchvision the processor's class check cannot import the video processor base
    # class; skip only that check (the processor itself is the real one, with no video processor).
    original = ProcessorMixin.check_argument_for_proper_class
    ProcessorMixin.check_argument_for_proper_class = lambda self, name, arg: None
    try:
        processor = Qwen2VLProcessor(
            image_processor=Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=112 * 112),
            tokenizer=tok,
            video_processor=None,
            chat_template=TINY_CHAT_TEMPLATE,
        )
    finally:
        ProcessorMixin.check_argument_for_proper_class = original
    return model, processor


def test_image_text_model_sees_the_image(tiny_vl, tmp_path):
    model, processor = tiny_vl
    bot = TransformersChat(model, processor=processor)
    assert bot.accepts_images
    calls: list[tuple] = []
    hook = model.model.visual.register_forward_hook(
        lambda mod, args, out: calls.append(args[0].shape)
    )
    try:
        bot.chat([{"role": "user", "content": "What is shown?"}], max_tokens=4)
        text_only_prompt = bot.usage["prompt_tokens"]
        assert calls == []
        path = tmp_path / "q.png"
        Image.new("RGB", (64, 48), (10, 200, 30)).save(path)
        reply = bot.chat(
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "image": str(path)},
                        {"type": "text", "text": "What is shown?"},
                    ],
                }
            ],
            max_tokens=4,
        )
    finally:
        hook.remove()
    assert isinstance(reply, str)
    assert len(calls) == 1  # the vision tower ran once, on the prompt
    # 64x48 is resized to 56x56: 4x4 patches merged 2x2 = 4 image tokens, plus start/end markers.
    image_prompt = bot.usage["prompt_tokens"] - text_only_prompt
    assert image_prompt - text_only_prompt == 4 + 2  # the image adds exactly its tokens


def test_image_text_model_reads_data_urls_and_pil_images(tiny_vl):
    model, processor = tiny_vl
    bot = TransformersChat(model, processor=processor)
    img = Image.new("RGB", (60, 60), (1, 2, 3))
    from vsearcher_lite.chat import image_to_url

    pixels: list = []
    hook = model.model.visual.register_forward_hook(
        lambda mod, args, out: pixels.append(args[0].clone())
    )
    try:
        bot.chat([{"role": "user", "content": "?"}], max_tokens=5)
        text_only = bot.usage["prompt_tokens"]
        a = bot.chat(
            [
                {
                    "role": "user",
                    "content": [{"type": "image", "image": img}, {"type": "text", "text": "?"}],
                }
            ],
            max_tokens=5,
        )
        after_a = bot.usage["prompt_tokens"]
        b = bot.chat(
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": image_to_url(img)}},
                        {"type": "text", "text": "?"},
                    ],
                }
            ],
            max_tokens=5,
        )
    finally:
        hook.remove()
    assert a == b
    # Both calls ran the vision tower on the same pixels, and each prompt grew by the image's
    # tokens.
    assert (
        len(pixels) == 2
        and pixels[0].shape == pixels[1].shape
        and bool((pixels[0] == pixels[1]).all())
    )
    assert after_a - 2 * text_only == bot.usage["prompt_tokens"] - after_a - text_only > 0


def test_tiny_checkpoint_loads_in_a_fresh_interpreter():
    """``make_chat("transformers:<tiny base>")`` as the first thing a script does: the processor the
    folder names must be found without importing ``vsearcher_lite.model.tiny`` by hand first."""
    import subprocess
    import sys
    from pathlib import Path

    base = Path(__file__).resolve().parents[1] / "data" / "tiny_base"
    code = (
        "import sys\nfrom vsearcher_lite.backends.chat import make_chat\n"
        f"chat = make_chat('transformers:{base}')\n"
        "print(type(chat.processor).__name__, 'vsearcher_lite.model.tiny' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["Qwen3VLImageOnlyProcessor", "True"]
