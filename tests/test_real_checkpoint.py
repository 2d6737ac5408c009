"""The GPU profiles' paths on a checkpoint shaped like a published Qwen3-VL Thinking one
(``model.real_shape``: the published ids, vocabulary, file layout and chat template at toy widths,
random weights), on the CPU: loading, the Thinking template through the SFT collator and the
format check, one SFT step, one TRL GRPO step and one evaluated task.

The random weights write garbage, so these tests check the mechanics (what loads, what is
trained, what the format check reads), not learning.
"""

from __future__ import annotations

import json
import math

import pytest
from agent_fakes import (
    answer,
    call,
    make_images,
    make_toolbox,
    scripted_batcher,
    write_sft_file,
)

from vsearcher_lite.model import real_shape
from vsearcher_lite.model.thinking_template import thinking_template
from vsearcher_lite.runio import InputError

NO_TORCHVISION = "Qwen3-VL's video processor needs torchvision, which is not installed here"


@pytest.fixture(scope="module")
def real_dir(tmp_path_factory):
    return real_shape.build_real_shape_checkpoint(tmp_path_factory.mktemp("real") / "thinking")


@pytest.fixture(scope="module")
def loaded(real_dir):
    from vsearcher_lite.model.tiny import load_base

    return load_base(real_dir)


def assistant_texts(record: dict) -> list[str]:
    return [m["content"][0]["text"] for m in record["messages"] if m["role"] == "assistant"]


@pytest.fixture(scope="module")
def train_file(tmp_path_factory):
    return write_sft_file(tmp_path_factory.mktemp("sft_data"), 2)


# ---------------------------------------------------------------------------------------------
# Loading


def test_the_folder_is_laid_out_and_numbered_like_a_published_checkpoint(real_dir, loaded):
    model, processor = loaded
    names = {p.name for p in real_dir.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors.index.json",
            "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
            "chat_template.json", "preprocessor_config.json"} <= names
    assert any(n.startswith("model-00001-of-") for n in names)  # sharded, with its index
    config = json.loads((real_dir / "config.json").read_text())
    assert config["model_type"] == "qwen3_vl"
    assert (config["image_token_id"], config["video_token_id"]) == (151655, 151656)
    assert (config["vision_start_token_id"], config["vision_end_token_id"]) == (151652, 151653)
    text = config["text_config"]
    assert (text["vocab_size"], text["max_position_embeddings"]) == (151_936, 262_144)
    assert text["rope_parameters"]["mrope_interleaved"] and text["eos_token_id"] == 151645
    tokenizer = processor.tokenizer
    assert type(tokenizer).__name__ == "Qwen2Tokenizer"
    assert {t: tokenizer.convert_tokens_to_ids(t) for t in real_shape.PUBLISHED_IDS} == \
        real_shape.PUBLISHED_IDS
    ids = tokenizer("<think>\nx\n</think>\n\n<tool_call>{}</tool_call><|im_end|>",
                    add_special_tokens=False)["input_ids"]
    # the agent's tags are plain added tokens (kept by skip_special_tokens), the chat's special
    kept = tokenizer.decode(ids, skip_special_tokens=True)
    assert kept == "<think>\nx\n</think>\n\n<tool_call>{}</tool_call>"
    assert model.config.text_config.vocab_size == 151_936
    assert processor.chat_template == thinking_template()


def test_without_torchvision_the_published_processor_fails_in_one_line(tmp_path):
    if real_shape.torchvision_installed():
        pytest.skip("torchvision is installed: the published processor loads (next test)")
    from vsearcher_lite.model.tiny import load_base

    folder = real_shape.build_real_shape_checkpoint(tmp_path / "published", image_only=False)
    assert (folder / "video_preprocessor_config.json").is_file()
    with pytest.raises(InputError, match="needs torchvision") as err:
        load_base(folder)
    assert "\n" not in str(err.value)


@pytest.mark.skipif(not real_shape.torchvision_installed(), reason=NO_TORCHVISION)
def test_with_torchvision_the_published_processor_loads(tmp_path):
    from vsearcher_lite.model.tiny import load_base

    folder = real_shape.build_real_shape_checkpoint(tmp_path / "published", image_only=False)
    _, processor = load_base(folder)
    assert type(processor).__name__ == "Qwen3VLProcessor"
    assert processor.video_processor is not None
    assert processor.chat_template == thinking_template()


# ---------------------------------------------------------------------------------------------
# The Thinking template through the SFT collator and the format check


def test_the_generation_prompt_opens_the_reasoning(loaded):
    from vsearcher_lite.chat.base import reply_opening
    from vsearcher_lite.chat.batched import BatchedTransformersChat
    from vsearcher_lite.chat.local import TransformersChat
    from vsearcher_lite.model.tiny import load_base

    model, processor = loaded
    messages = [{"role": "user", "content": [{"type": "text", "text": "Which year?"}]}]
    prompt = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>assistant\n<think>\n")
    assert reply_opening(processor) == "<think>\n"
    assert BatchedTransformersChat(model, processor).reply_prefix == "<think>\n"
    assert TransformersChat(model, processor=processor).reply_prefix == "<think>\n"
    assert reply_opening(load_base()[1]) == ""  # the tiny base's prompt ends at the header


def test_the_sft_collator_trains_exactly_what_the_model_writes(real_dir, loaded, train_file):
    from transformers import AutoProcessor
    from trl.chat_template_utils import get_training_chat_template

    from vsearcher_lite.training.data import (
        decode_trained,
        load_sft_records,
        make_collator,
        mark_assistant_turns,
        to_dataset,
        training_chat_template,
    )

    _, processor = loaded
    with pytest.raises(ValueError):  # TRL has no training variant of this template
        get_training_chat_template(processor)
    assert training_chat_template(processor) == thinking_template(training=True)
    records = load_sft_records(train_file)
    rows = [to_dataset(records)[i] for i in range(2)]
    batch = make_collator(processor)(rows)
    pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    for row, record in enumerate(records):
        ids, labels = batch["input_ids"][row].tolist(), batch["labels"][row].tolist()
        trained = decode_trained(processor.tokenizer, ids, labels)
        # each assistant turn after the prompt's "<think>\n", as the template renders it
        expected = [t.removeprefix("<think>\n").replace("</think>\n", "</think>\n\n")
                    + "<|im_end|>\n" for t in assistant_texts(record)]
        assert trained == expected
        joined = "".join(trained)
        assert "<tool_response>" not in joined and "search agent" not in joined
        assert all(label == -100 for i, label in zip(ids, labels) if i == pad)
        assert ids.count(pad) > 0  # both images (the question's, the tool's) are in the row
    # the training twin renders the text of the checkpoint's own template
    messages = rows[0]["messages"]
    assert processor.apply_chat_template(messages, tokenize=False) == \
        processor.apply_chat_template(messages, tokenize=False,
                                      chat_template=thinking_template(training=True))
    fresh = AutoProcessor.from_pretrained(real_dir)
    assert mark_assistant_turns(fresh)  # what training loads: SFTTrainer takes it as it is
    assert fresh.chat_template == fresh.tokenizer.chat_template == thinking_template(True)
    assert not mark_assistant_turns(fresh)  # once marked, left as it is


class ThinkingScript:
    """Scripted replies after a Thinking generation prompt: they start inside the reasoning."""

    name = "scripted-thinking"

    def __init__(self, replies, reply_prefix):
        self.replies, self.reply_prefix = list(replies), reply_prefix

    def chat(self, messages, **sampling):
        return self.replies.pop(0).removeprefix("<think>\n")


def test_the_format_check_reads_the_reasoning_the_prompt_opened(tmp_path):
    from vsearcher_lite.agent.loop import run_episode
    from vsearcher_lite.agent.task import Task

    question, hits = make_images(tmp_path, n_hits=1)
    task = Task(id="t", question="In which year?", answer="1874", image_path=question)
    turns = [call("image_search"), answer("1874")]
    opened = run_episode(ThinkingScript(turns, "<think>\n"), make_toolbox(hits), task)
    assert opened.termination == "answer" and opened.prediction == "1874"
    assert all(t.verdict["ok"] and t.text.startswith("<think>\n") for t in opened.turns)
    # without the prompt's opening the same replies lack their <think>: every turn would fail
    bare = run_episode(ThinkingScript(turns, ""), make_toolbox(hits), task)
    assert bare.termination == "format_error"
    assert bare.turns[0].verdict["code"] == "unclosed_think"


# ---------------------------------------------------------------------------------------------
# One step of each stage


def test_one_sft_step_trains_lora_on_the_real_shape(real_dir, train_file, tmp_path):
    from vsearcher_lite.model.tiny import load_base
    from vsearcher_lite.training.config import SFTConfig
    from vsearcher_lite.training.sft import run_sft

    config = SFTConfig.for_profile(
        "single_gpu", base=str(real_dir), method="lora", device="cpu", dtype="float32",
        max_steps=1, batch_size=1, grad_accum=2, evaluate=False, progress=False,
        train_file=str(train_file), lora_r=4, lora_alpha=8, gradient_checkpointing=False)
    m = run_sft(tmp_path / "run", config, log=lambda s: None)
    assert m["steps"] == 1 and math.isfinite(m["train_loss_last"]) and m["train_loss_last"] > 0
    assert (tmp_path / "run" / "sft" / "adapter" / "adapter_config.json").is_file()
    model, processor = load_base(tmp_path / "run" / "sft" / "checkpoint")
    assert model.config.text_config.vocab_size == 151_936
    # the saved template marks the assistant turns and still renders the published text
    assert processor.chat_template == thinking_template(training=True)
    assert model.generation_config.suppress_tokens  # the vision placeholders are never sampled


@pytest.fixture(scope="module")
def grpo_dir(tmp_path_factory, real_dir):
    """A GRPO-ready sandbox run whose "SFT checkpoint" is the real-shape folder."""
    from agent_fakes import build_sandbox_run, grpo_run

    run = grpo_run(build_sandbox_run(tmp_path_factory.mktemp("grpo_base")),
                   tmp_path_factory.mktemp("grpo") / "run")
    (run / "sft" / "checkpoint").unlink()
    (run / "sft" / "checkpoint").symlink_to(real_dir)
    return run


def scripted_policy_reply(messages):
    """Image search first (its results bring images into the later turn), then an answer; as
    written after the Thinking prompt, inside the opened reasoning."""
    seen = sum(1 for m in messages[2:] if m["role"] == "user")
    turn = call("image_search") if seen == 0 else answer("1874")
    return turn.removeprefix("<think>\n")


@pytest.mark.parametrize("scripted", [True, False], ids=["tool-image", "model-writes"])
def test_one_trl_grpo_step_on_the_real_shape(grpo_dir, real_dir, monkeypatch, scripted):
    """TRL's GRPOTrainer, one step of 1 prompt x 2 generations, on the single_gpu profile's
    LoRA path: a scripted policy's image search brings tool images into the completions; the
    random model's own replies end without closing the reasoning, the case whose first reply
    token merges with the prompt's last."""
    from vsearcher_lite.rl import trl_engine
    from vsearcher_lite.rl.config import GRPOConfig
    from vsearcher_lite.rl.grpo import run_grpo

    if scripted:
        monkeypatch.setattr(trl_engine, "BatchedTransformersChat",
                            scripted_batcher(scripted_policy_reply, reply_prefix="<think>\n"))
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    name = f"grpo-real-{'scripted' if scripted else 'model'}"
    config = GRPOConfig.for_profile(
        "single_gpu", device="cpu", dtype="float32", init=str(real_dir), max_steps=1,
        prompts_per_step=1, generations=2, micro_batch_size=2, max_tokens=12, max_tool_calls=2,
        evaluate=False, progress=False, difficulty_mix={"easy": 1}, prompt_variant="compact",
        lora_r=4, lora_alpha=8, gradient_checkpointing=False, name=name)
    m = run_grpo(grpo_dir, config, log=lambda s: None)
    assert m["engine"] == "trl" and m["steps"] == 1
    rollouts = [json.loads(line) for line in
                (grpo_dir / name / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 2 and all(r["turns"][0].startswith("<think>\n") for r in rollouts)
    if scripted:  # the format check read the opened reasoning: both episodes answered
        assert all(r["termination"] == "answer" and r["tool_counts"] == {"image_search": 1}
                   for r in rollouts)
    assert (grpo_dir / name / "adapter").is_dir()


def test_one_evaluated_task_on_the_real_shape(real_dir, tmp_path):
    from vsearcher_lite.agent.task import Task
    from vsearcher_lite.config import EvalConfig
    from vsearcher_lite.scoring.evaluate import evaluate

    question, hits = make_images(tmp_path / "images", n_hits=1)
    task = Task(id="t1", question="In which year?", answer="1874", image_path=question,
                difficulty="easy", split="heldout")
    config = EvalConfig.for_profile("single_gpu", device="cpu", max_tokens=8, max_tool_calls=1,
                                    prompt_variant="compact", progress=False, concurrency=1)
    m = evaluate(tmp_path / "run", [task], f"transformers:{real_dir}", config=config,
                 toolbox=make_toolbox(hits), name="real", fresh=True)
    assert m["n_tasks"] == 1
    record = json.loads((tmp_path / "run" / "eval" / "real" / "results.jsonl").read_text())
    turn = record["trajectory"]["turns"][0]
    # the random model's reply is checked as the template holds it: inside the opened reasoning
    assert turn["text"].startswith("<think>")
    assert turn["verdict"]["code"] not in ("missing_think", "text_before_think")
