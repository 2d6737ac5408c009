"""The tiny Qwen3-VL: built from the repo's config, saved, and loaded back through the ordinary
``AutoModelForImageTextToText`` / ``AutoProcessor`` code path, images included, no torchvision."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
from PIL import Image  # noqa: E402

from vsearcher_lite.model import tiny  # noqa: E402
from vsearcher_lite.model.tokenizer import build_tokenizer, vision_token_ids  # noqa: E402
from vsearcher_lite.runio import InputError  # noqa: E402

TEXT = [
    'Orsk Bridge was built in 1874. Results for "Orsk": 1. Orsk Bridge URL: https://wiki.sandbox.test/wiki/Orsk'
] * 30


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    tok = build_tokenizer(TEXT, vocab_size=400)
    processor = tiny.build_processor(tok)
    model = tiny.build_tiny_model(tok, seed=3)
    out = tmp_path_factory.mktemp("tiny") / "base"
    tiny.save_base(model, processor, out, extra_files={"NOTE.md": "hello"})
    return model, processor, out


def test_config_is_the_measured_tiny_one(saved):
    model, processor, out = saved
    cfg = json.loads((out / "config.json").read_text())
    t, v = cfg["text_config"], cfg["vision_config"]
    assert (
        t["hidden_size"],
        t["num_hidden_layers"],
        t["num_attention_heads"],
        t["num_key_value_heads"],
        t["head_dim"],
    ) == (256, 4, 8, 8, 32)
    assert sum(t["rope_parameters"]["mrope_section"]) == t["head_dim"] // 2
    assert (v["depth"], v["hidden_size"], v["patch_size"], v["spatial_merge_size"]) == (
        2,
        128,
        16,
        2,
    )
    assert t["vocab_size"] == len(processor.tokenizer)
    counts = tiny.count_parameters(model)
    assert 4_000_000 < counts["total"] < 7_000_000 and counts["vision"] > 1_000_000
    assert tiny.read_config_summary(out) == tiny.read_config_summary_from_model(model)


def test_saved_folder_loads_with_the_auto_classes(saved):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    model, processor, out = saved
    assert (out / "model.safetensors").is_file() and (out / "NOTE.md").read_text() == "hello"
    loaded = AutoModelForImageTextToText.from_pretrained(out)
    proc = AutoProcessor.from_pretrained(out)
    assert type(proc).__name__ == "Qwen3VLImageOnlyProcessor"
    assert proc.chat_template == tiny.trl_qwen3_vl_template()
    ids = proc.tokenizer("Orsk Bridge 1874", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, loaded(input_ids=ids).logits)
    assert loaded.generation_config.suppress_tokens == vision_token_ids(proc.tokenizer)
    via_load_base, proc2 = tiny.load_base(out)
    assert type(via_load_base).__name__ == "Qwen3VLForConditionalGeneration"
    assert proc2.tokenizer.get_vocab() == proc.tokenizer.get_vocab()


def test_an_image_goes_through_the_processor_and_the_model(saved):
    model, _, out = saved
    _, proc = tiny.load_base(out)
    img = Image.new("RGB", (160, 120), (200, 40, 10))
    messages = [
        {
            "role": "user",
            "content": [{"type": "image", "image": img}, {"type": "text", "text": "Which bridge?"}],
        }
    ]
    enc = proc.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
    )
    n_image_tokens = int((enc["input_ids"] == proc.image_token_id).sum())
    assert n_image_tokens == 6  # 160x120 -> 64x96 pixels -> 4x6 patches -> 2x3 merged tokens
    # TRL calls the processor without return_tensors: pixels must still be torch tensors.
    raw = proc(images=[img], text=["<|vision_start|><|image_pad|><|vision_end|>x"])
    assert isinstance(raw["pixel_values"], torch.Tensor) and isinstance(
        raw["image_grid_thw"], torch.Tensor
    )
    with torch.no_grad():
        out_ids = model.generate(**enc, max_new_tokens=12, do_sample=True, temperature=5.0)
    new = out_ids[0, enc["input_ids"].shape[1] :].tolist()
    # suppressed even when sampling wildly
    assert not set(new) & set(vision_token_ids(proc.tokenizer))


def test_videos_are_refused_with_a_clear_error(saved):
    _, processor, _ = saved
    with pytest.raises(ValueError, match="images only"):
        processor(text=["x"], videos=[[Image.new("RGB", (32, 32))]])


def test_missing_folder_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="no config.json"):
        tiny.load_base(tmp_path / "nothing-here")


def test_a_failed_save_leaves_the_old_checkpoint_in_place(saved, tmp_path):
    model, processor, _ = saved
    target = tmp_path / "ckpt"
    tiny.save_base(model, processor, target)
    before = sorted(p.name for p in target.iterdir())

    class Broken:
        def save_pretrained(self, path):
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        tiny.save_base(model, Broken(), target)
    assert sorted(p.name for p in target.iterdir()) == before
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]  # no temporary folder left behind


def test_unseen_markup_tokens_start_at_their_plain_text_cues(saved):
    model, processor, out = saved
    fresh, proc = tiny.load_base(out)
    tok = proc.tokenizer
    used = tiny.init_unseen_token_embeddings(fresh, tok)
    emb = fresh.get_input_embeddings().weight
    answer_cue = tok("Answer: ", add_special_tokens=False)["input_ids"]
    assert used["<answer>"] == answer_cue
    assert torch.allclose(emb[tok.convert_tokens_to_ids("<answer>")], emb[answer_cue].mean(0))
    assert torch.equal(
        emb[tok.convert_tokens_to_ids("<|im_end|>")],
        emb[tok.convert_tokens_to_ids("<|endoftext|>")],
    )
    assert torch.equal(fresh.lm_head.weight, emb)  # tied: the output side moved too
    untouched = tok.convert_tokens_to_ids("1874")
    assert torch.equal(emb[untouched], model.get_input_embeddings().weight[untouched])

