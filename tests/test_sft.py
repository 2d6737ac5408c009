"""SFT on teacher trajectories: what is trained, the answer weighting, the schedule, short real
runs.

Every run here trains the shipped tiny base for one or two steps on hand-made trajectories
(about 150 tokens each), so the file takes seconds, not minutes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vsearcher_lite.agent.protocol import (
    format_assistant_turn,
    initial_messages,
    text_part,
    tool_response_text,
)
from vsearcher_lite.runio import InputError
from vsearcher_lite.training.config import SFTConfig
from vsearcher_lite.training.data import (
    answer_token_weights,
    check_record,
    decode_trained,
    load_sft_records,
    make_collator,
    rendered_lengths,
    tag_ids,
    to_dataset,
    trained_spans,
)
from vsearcher_lite.training.sft import first_last
from vsearcher_lite.training.sft_trainer import run_progress, schedule_factor

# ---------------------------------------------------------------------------------------------
# Hand-made trajectories in the TRL export format


def _image(path: Path, colour=(200, 40, 40)) -> str:
    from PIL import Image

    Image.new("RGB", (64, 96), colour).save(path)
    return str(path.resolve())


def trl_record(image: str, name: str, year: str) -> dict:
    """One accepted trajectory as ``agent.export.to_trl_record`` writes it: parts, placeholders,
    paths."""
    messages = initial_messages(
        "In which year was the bridge in the image built?",
        image,
        variant="compact",
        today="2025-09-01",
    )
    turns = [
        format_assistant_turn(
            "I should find out which bridge this is.", tool_call=("image_search", {})
        ),
        format_assistant_turn(
            f"The image shows {name}.", tool_call=("text_search", {"query": f"{name} built"})
        ),
        format_assistant_turn(f"The page says {name} was built in {year}.", answer=year),
    ]
    observations = [f"1. {name}\n2. Other Bridge", f"1. {name}: {name} was built in {year}."]
    messages.append({"role": "assistant", "content": turns[0]})
    messages.append({"role": "user", "content": [text_part(tool_response_text(observations[0]))]})
    messages.append({"role": "assistant", "content": turns[1]})
    messages.append({"role": "user", "content": [text_part(tool_response_text(observations[1]))]})
    messages.append({"role": "assistant", "content": turns[2]})

    def parts(m):
        c = m["content"]
        if isinstance(c, str):
            return [{"type": "text", "text": c}]
        return [
            {"type": "image"} if p["type"] == "image" else {"type": "text", "text": p["text"]}
            for p in c
        ]

    return {
        "messages": [{"role": m["role"], "content": parts(m)} for m in messages],
        "images": [image],
    }


@pytest.fixture(scope="module")
def base():
    from vsearcher_lite.model.tiny import load_base

    model, processor = load_base()
    return model, processor


def write_train_file(folder):
    """Four one-image trajectories in TRL's format, ``folder/sft_trl.jsonl`` (also used by the GPU
    tests)."""
    rows = [
        trl_record(_image(folder / f"q{i}.png", (40 * i, 80, 120)), name, year)
        for i, (name, year) in enumerate(
            [
                ("Garnound Bridge", "1874"),
                ("Trel Bridge", "1912"),
                ("Stel Bridge", "1755"),
                ("Gaon Bridge", "1990"),
            ]
        )
    ]
    path = folder / "sft_trl.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture()
def train_file(tmp_path):
    return write_train_file(tmp_path)


def assistant_texts(record: dict) -> list[str]:
    return [m["content"][0]["text"] for m in record["messages"] if m["role"] == "assistant"]


# ---------------------------------------------------------------------------------------------
# What is trained


def test_trained_tokens_are_exactly_the_assistant_turns(base, train_file):
    _, processor = base
    records = load_sft_records(train_file)
    batch = make_collator(processor)([to_dataset(records)[i] for i in range(2)])
    assert "pixel_values" in batch and batch["input_ids"].shape == batch["labels"].shape
    for row in range(2):
        trained = decode_trained(
            processor.tokenizer, batch["input_ids"][row].tolist(), batch["labels"][row].tolist()
        )
        expected = [t + "<|im_end|>" for t in assistant_texts(records[row])]
        assert [t.rstrip("\n") for t in trained] == expected
        # Nothing of the system prompt, the question, the image or the tool responses is trained.
        joined = "".join(trained)
        assert (
            "<tool_response>" not in joined
            and "<|image_pad|>" not in joined
            and "search agent" not in joined
        )
        # and the masked part does hold them (the mask is not trivially everything).
        n_image = int(
            (
                batch["input_ids"][row]
                == processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
            ).sum()
        )
        assert n_image > 0 and all(
            batch["labels"][row][
                batch["input_ids"][row]
                == processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
            ]
            == -100
        )


def test_fast_assistant_masks_equal_transformers_own(base, train_file, monkeypatch):
    """The tiny processor's faster mask walk gives exactly the labels of transformers' own."""
    from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor

    _, processor = base
    assert (
        type(processor)._adjust_assistant_masks_indices
        is not Qwen3VLProcessor._adjust_assistant_masks_indices
    )
    records = load_sft_records(train_file)
    items = [to_dataset(records)[i] for i in range(3)]
    fast = make_collator(processor)(items)
    monkeypatch.setattr(
        type(processor),
        "_adjust_assistant_masks_indices",
        Qwen3VLProcessor._adjust_assistant_masks_indices,
    )
    slow = make_collator(processor)(items)
    assert (fast["labels"] != -100).sum() > 0
    assert fast["labels"].tolist() == slow["labels"].tolist()
    assert fast["input_ids"].tolist() == slow["input_ids"].tolist()


def test_rendered_lengths_equal_the_collated_lengths(base, train_file, tmp_path):
    """The fast length (no pixels processed) is what the collator really builds, images of any
    size."""
    _, processor = base
    records = load_sft_records(train_file)
    wide = dict(records[0], images=[_image(tmp_path / "wide.png")])
    from PIL import Image

    Image.new("RGB", (160, 48), (9, 9, 9)).save(wide["images"][0])
    records.append(wide)
    collator = make_collator(processor)
    dataset = to_dataset(records)
    collated = [int(collator([dataset[i]])["input_ids"].shape[1]) for i in range(len(records))]
    assert rendered_lengths(processor, records) == collated
    assert len(set(collated)) > 1


def test_measuring_a_trajectory_longer_than_the_model_raises_no_warning(base, train_file):
    tok = base[1].tokenizer
    key = "sequence-length-is-longer-than-the-specified-maximum"  # set when transformers warns
    limit = tok.model_max_length
    tok.deprecation_warnings.pop(key, None)
    try:
        tok.model_max_length = 16  # every record is longer
        lengths = rendered_lengths(base[1], load_sft_records(train_file))
    finally:
        tok.model_max_length = limit
    assert min(lengths) > 16 and key not in tok.deprecation_warnings


def first_collated(base, train_file):
    """The tokenizer, and the ids and labels the collator makes of the training file's first
    record."""
    processor = base[1]
    batch = make_collator(processor)([to_dataset(load_sft_records(train_file))[0]])
    return processor.tokenizer, batch["input_ids"][0].tolist(), batch["labels"][0].tolist()


def test_answer_weights_fall_on_the_answer_and_its_statement(base, train_file):
    tok, ids, labels = first_collated(base, train_file)
    weights = answer_token_weights(
        labels, tag_ids(tok, "<answer>"), tag_ids(tok, "</answer>"), 10.0
    )
    heavy = [i for i, w in enumerate(weights) if w == 10.0]
    # "1874" is one token: once in <think>, once in <answer>.
    assert [tok.decode([ids[i]]) for i in heavy] == ["1874", "1874"]
    assert all(w == 0.0 for w, x in zip(weights, labels) if x == -100)
    assert answer_token_weights(
        labels, tag_ids(tok, "<answer>"), tag_ids(tok, "</answer>"), 1.0
    ) == [0.0 if x == -100 else 1.0 for x in labels]


def test_answer_weights_by_hand():
    # open=1, close=2; answer [7, 8]; an earlier "7 8" in a trained span counts, a masked one does
    # not.
    labels = [-100, 7, 8, 3, 1, 7, 8, 2, -100]
    assert answer_token_weights(labels, [1], [2], 5.0) == [0, 5, 5, 1, 1, 5, 5, 1, 0]
    assert answer_token_weights([7, 8, -100, 1, 7, 8, 2], [1], [2], 5.0) == [5, 5, 0, 1, 5, 5, 1]
    # an unclosed answer is not weighted
    assert answer_token_weights([1, 7, 8], [1], [2], 5.0) == [
        1,
        1,
        1,
    ]


def test_balanced_eval_selection_keeps_the_mix():
    from vsearcher_lite.training.heldout import balanced_head

    items = ["e1", "e2", "e3", "e4", "m1", "m2", "h1"]
    assert balanced_head(items, 4, key=lambda s: s[0]) == ["e1", "m1", "h1", "e2"]
    assert balanced_head(items, 6, key=lambda s: s[0]) == ["e1", "m1", "h1", "e2", "m2", "e3"]
    assert balanced_head(items, None, key=lambda s: s[0]) == items


def test_trained_spans_by_hand():
    assert trained_spans([1, 2, 3], [-100, -100, -100]) == []
    assert trained_spans([1, 2, 3, 4], [1, -100, 3, 4]) == [(0, 1), (2, 4)]


def test_schedule_walks_by_steps_or_time():
    assert schedule_factor(0.0, 0.1) == 0.0
    assert schedule_factor(0.1, 0.1) == pytest.approx(1.0)
    assert schedule_factor(1.0, 0.1, 0.2) == pytest.approx(0.2)
    assert schedule_factor(0.55, 0.1, 0.0) == pytest.approx(0.5)
    assert run_progress(5, 10, 0.0, None) == 0.5
    assert run_progress(5, 10, 90.0, 100.0) == 0.9
    assert run_progress(50, 10, 0.0, 100.0) == 1.0
    assert first_last([None, None]) == (None, None)
    # a run stopped by its budget ends at the schedule's end whatever its step count
    assert run_progress(30, 1000, 60.0, 60.0) == 1.0


def test_the_time_budget_stops_training_at_the_step_it_is_spent():
    import time
    from types import SimpleNamespace

    from vsearcher_lite.training.sft_trainer import sft_trainer_classes

    _, LossLog = sft_trainer_classes()
    callback = LossLog(lambda: None, budget_s=60.0, progress=False, log=lambda _: None)
    control = SimpleNamespace(should_training_stop=False)
    callback.on_step_end(None, SimpleNamespace(global_step=1), control)
    assert not control.should_training_stop and callback.stopped_by == "steps"
    callback.start = time.perf_counter() - 61.0  # the budget is spent
    callback.on_step_end(None, SimpleNamespace(global_step=2), control)
    assert control.should_training_stop and callback.stopped_by == "time"


def test_bad_records_name_their_line(tmp_path, train_file):
    good = json.loads(train_file.read_text().splitlines()[0])
    bad = dict(good, images=[])
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(InputError, match=r"bad.jsonl:2: 1 image placeholder\(s\) but 0 image"):
        load_sft_records(path)
    with pytest.raises(InputError, match="missing key 'messages'"):
        check_record({"images": []}, "x:1")
    with pytest.raises(InputError, match="no assistant turn"):
        check_record({"messages": [{"role": "user", "content": "hi"}], "images": []}, "x:1")
    with pytest.raises(InputError, match="SFT data not found"):
        load_sft_records(tmp_path / "missing.jsonl")


# ---------------------------------------------------------------------------------------------
# Presets


def test_profile_presets():
    cpu = SFTConfig.for_profile("cpu")
    assert (cpu.method, cpu.dtype, cpu.gradient_checkpointing, cpu.answer_weight) == (
        "full",
        "float32",
        False,
        10.0,
    )
    assert cpu.eval_difficulties == ("onehop", "easy", "medium", "hard") and cpu.threads == 2
    assert cpu.init_markup_embeddings and cpu.minutes <= 3 and cpu.base is None
    assert not hasattr(cpu, "min_steps")  # the budget is honoured on any machine
    multi = SFTConfig.for_profile("multi_gpu")
    assert (
        multi.learning_rate,
        multi.epochs,
        multi.max_length,
        multi.batch_size,
        multi.grad_accum,
    ) == (1e-5, 5.0, 20480, 1, 2)
    assert (multi.scheduler, multi.warmup_ratio, multi.freeze_vision, multi.dtype) == (
        "cosine",
        0.1,
        True,
        "bfloat16",
    )
    single = SFTConfig.for_profile("single_gpu", method="qlora")
    assert single.method == "qlora" and single.dtype == "bfloat16"
    # None means "the preset's"
    assert SFTConfig.for_profile("cpu", answer_weight=None).answer_weight == 10.0
    assert SFTConfig.for_profile("cpu", answer_weight=1).answer_weight == 1
    with pytest.raises(TypeError, match="unknown SFT setting"):
        SFTConfig.for_profile("cpu", lerning_rate=1.0)
    with pytest.raises(ValueError, match="method must be one of"):
        SFTConfig.for_profile("cpu", method="adapter")


def test_cli_rejects_bad_settings_in_one_line(tmp_path, capsys):
    from vsearcher_lite.cli import main

    assert main(["sft", "--run-dir", str(tmp_path), "--lr", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["vsearcher-lite sft: error: learning_rate must be positive, got -1.0"]


# ---------------------------------------------------------------------------------------------
# Short real runs


def short_config(train_file: Path, **overrides) -> SFTConfig:
    # the weighted loss path, with its answer_ce column
    settings = dict(
        max_steps=2,
        minutes=None,
        batch_size=2,
        evaluate=False,
        progress=False,
        train_file=str(train_file),
        threads=None,
        answer_weight=10.0,
    )
    settings.update(overrides)
    return SFTConfig.for_profile("cpu", **settings)


def _weights(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_cpu_sft_run_saves_a_checkpoint_that_reloads(tmp_path, train_file):
    import torch

    from vsearcher_lite.model.tiny import load_base
    from vsearcher_lite.training.sft import read_loss_curve, run_sft

    run = tmp_path / "run"
    m = run_sft(run, short_config(train_file), log=lambda s: None)
    assert m["steps"] == 2 and m["stopped_by"] == "steps"
    assert m["train_loss_first"] > 0 and m["train_loss_last"] > 0
    rows = read_loss_curve(run)
    assert [r["step"] for r in rows] == [1.0, 2.0]
    assert all(r["answer_ce"] is not None for r in rows)
    saved = json.loads((run / "sft" / "metrics.json").read_text())
    assert saved["steps"] == 2 and saved["settings"]["answer_weight"] == 10.0
    model, processor = load_base(run / "sft" / "checkpoint")
    base, _ = load_base()
    after, before = _weights(model), _weights(base)
    changed = [k for k in after if not torch.equal(after[k], before[k])]
    assert any("language_model" in k for k in changed)
    assert not any(".visual." in k for k in changed)  # the vision tower is frozen
    # The markup tokens were moved away from their random start (the cue initialisation).
    assert any("embed_tokens" in k for k in changed)
    assert model.generation_config.suppress_tokens  # vision tokens stay suppressed in generation
    assert not (run / "sft" / "trainer").exists()  # no trainer scratch left behind


def test_the_stage_counts_what_it_keeps_and_drops_by_level(tmp_path, train_file, base):
    from vsearcher_lite.training.data import load_sft_records, rendered_lengths
    from vsearcher_lite.training.sft import run_sft

    records = [json.loads(line) for line in train_file.read_text().splitlines()]
    for record, level in zip(records, ["easy", "easy", "hard", None]):
        if level:
            record["level"] = level
    records[2]["messages"][-1]["content"][0]["text"] += " Built in stone." * 40  # the longest
    records[1] = dict(records[0])  # the one easy trajectory twice in the file
    train_file.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    lengths = rendered_lengths(base[1], load_sft_records(train_file))
    messages: list[str] = []
    config = short_config(train_file, max_steps=1, max_length=max(lengths) - 1)
    m = run_sft(tmp_path / "run", config, log=messages.append)
    assert m["n_dropped_too_long"] == 1 and m["n_train_trajectories"] == 3
    assert m["lengths"]["hard"] == {"trajectories": 1, "kept": 0, "dropped": 1,
                                    "median": lengths[2], "p90": lengths[2], "max": lengths[2]}
    assert (m["lengths"]["easy"]["kept"], m["lengths"]["unknown"]["kept"]) == (2, 1)
    assert any("hard 0 / 1" in line for line in messages)
    # one step of batch 2 over the 3 kept: under a pass, counted whole; the easy copy twice
    assert m["seen"]["easy"] == {"trajectories": 2, "distinct_tasks": 1,
                                 "distinct_trajectories": 1, "times_seen_mean": 1.33,
                                 "times_seen_most": 2}
    assert m["seen"]["all"]["distinct_trajectories"] == 2 and "hard" not in m["seen"]
    assert any("seen by level" in line and "easy 1 / 1, 1.33, 2" in line for line in messages)


def test_training_shows_one_progress_bar_not_a_line_per_step(tmp_path, train_file, capsys):
    from vsearcher_lite.training.sft import read_loss_curve, run_sft

    run = tmp_path / "run"
    run_sft(run, short_config(train_file, max_steps=3, progress=True), log=lambda s: None)
    shown = capsys.readouterr()
    assert "sft steps" in shown.err  # the loss log's bar
    assert "'loss'" not in shown.out + shown.err  # transformers' per-step log lines are gone
    assert len(read_loss_curve(run)) == 3  # every step is still in loss.csv


def test_lora_run_saves_adapter_and_merged_checkpoint(tmp_path, train_file):
    from vsearcher_lite.model.tiny import load_base
    from vsearcher_lite.training.sft import run_sft

    run = tmp_path / "run"
    m = run_sft(
        run,
        short_config(
            train_file, method="lora", lora_r=4, lora_alpha=8, learning_rate=1e-2, max_steps=1
        ),
        log=lambda s: None,
    )
    full = sum(p.numel() for p in load_base()[0].parameters())
    assert 0 < m["trainable_parameters"] < full / 10
    assert (run / "sft" / "adapter" / "adapter_config.json").is_file()
    cfg = json.loads((run / "sft" / "adapter" / "adapter_config.json").read_text())
    assert cfg["r"] == 4
    model, _ = load_base(run / "sft" / "checkpoint")
    assert not any("lora" in k for k in model.state_dict())  # merged: a plain checkpoint


def _bitsandbytes_cpu_problem() -> str | None:
    try:
        import bitsandbytes  # noqa: F401
        import torch
        from bitsandbytes.nn import Linear4bit

        layer = Linear4bit(8, 8, compute_dtype=torch.float32, quant_type="nf4")
        layer = layer.to("cpu")
        layer.weight = layer.weight  # quantises lazily on first use
        layer(torch.zeros(1, 8))
    except Exception as exc:  # not installed, or no CPU backend on this machine
        return f"bitsandbytes cannot run 4-bit layers on this CPU: {type(exc).__name__}: {exc}"
    return None


def test_qlora_run_on_cpu(tmp_path, train_file):
    problem = _bitsandbytes_cpu_problem()
    if problem:
        pytest.skip(problem)
    from vsearcher_lite.model.tiny import load_base
    from vsearcher_lite.training.sft import run_sft

    run = tmp_path / "run"
    m = run_sft(
        run,
        short_config(
            train_file, method="qlora", lora_r=4, lora_alpha=8, learning_rate=1e-2, max_steps=1
        ),
        log=lambda s: None,
    )
    assert m["steps"] == 1 and m["train_loss_last"] > 0
    assert (run / "sft" / "adapter" / "adapter_model.safetensors").is_file()
    model, _ = load_base(run / "sft" / "checkpoint")
    assert model.dtype.__str__() == "torch.float32"  # merged into the unquantised base


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["lora", "qlora"])
def test_single_gpu_paths_on_cuda(tmp_path, train_file, method):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from vsearcher_lite.model.tiny import default_base_dir
    from vsearcher_lite.training.sft import run_sft

    cfg = SFTConfig.for_profile(
        "single_gpu",
        base=str(default_base_dir()),
        method=method,
        max_steps=3,
        batch_size=2,
        grad_accum=1,
        evaluate=False,
        progress=False,
        train_file=str(train_file),
        max_length=2048,
        gradient_checkpointing=False,
        init_markup_embeddings=True,
        lora_r=4,
        lora_alpha=8,
    )
    m = run_sft(tmp_path / "run", cfg, log=print)
    assert m["steps"] == 3 and m["train_loss_last"] > 0
    print(f"[gpu] {method}: {m['seconds_per_step']} s/step")


def test_an_interrupted_run_resumes_from_its_last_checkpoint(tmp_path, train_file, monkeypatch):
    """Stopped after the checkpoint at step 4, the same command trains steps 5-6 only and ends where
    an uninterrupted run ends: the same loss rows and the same weights."""
    import torch

    from vsearcher_lite.model.tiny import load_base
    from vsearcher_lite.training import sft

    config = short_config(train_file, max_steps=6, save_every=2)
    sft.run_sft(tmp_path / "whole", config, log=lambda s: None)

    real_classes = sft.sft_trainer_classes

    def crashing_classes():
        trainer_cls, loss_log = real_classes()

        class CrashAfterSave(loss_log):
            def on_save(self, args, state, control, **kw):
                if state.global_step == 4:
                    raise RuntimeError("killed")

        return trainer_cls, CrashAfterSave

    run = tmp_path / "resumed"
    monkeypatch.setattr(sft, "sft_trainer_classes", crashing_classes)
    with pytest.raises(RuntimeError, match="killed"):
        sft.run_sft(run, config, log=lambda s: None)
    monkeypatch.setattr(sft, "sft_trainer_classes", real_classes)
    assert [p.name for p in (run / "sft" / "trainer").glob("checkpoint-*")] == ["checkpoint-4"]
    assert not (run / "sft" / "checkpoint").exists()

    with pytest.raises(
        InputError, match="answer_weight=10.0"
    ):  # other settings never continue this run
        sft.run_sft(
            run,
            short_config(train_file, max_steps=6, save_every=2, answer_weight=1.0),
            log=lambda s: None,
        )

    messages: list[str] = []
    m = sft.run_sft(run, config, log=messages.append)
    assert any("resuming from" in line and "step 4" in line for line in messages)
    assert m["steps"] == 6
    whole, resumed = sft.read_loss_curve(tmp_path / "whole"), sft.read_loss_curve(run)
    assert [r["step"] for r in resumed] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert [r["loss"] for r in resumed] == pytest.approx([r["loss"] for r in whole], rel=1e-4)
    # the stage's times count the steps trained before the interruption
    assert m["train_seconds"] >= resumed[3]["seconds"] and m["seconds"] >= m["train_seconds"]
    a, b = (
        _weights(load_base(tmp_path / "whole" / "sft" / "checkpoint")[0]),
        _weights(load_base(run / "sft" / "checkpoint")[0]),
    )
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert not (run / "sft" / "trainer").exists()


def test_kept_checkpoints_become_snapshots_that_load(tmp_path, train_file):
    """``keep_checkpoints``: every save is kept as ``snapshots/step-N``, a model that loads
    without the optimizer's state; a plain run keeps none."""
    from vsearcher_lite.model.tiny import load_base
    from vsearcher_lite.training import sft

    config = short_config(train_file, max_steps=4, save_every=2, keep_checkpoints=True)
    sft.run_sft(tmp_path / "kept", config, log=lambda s: None)
    snapshots = tmp_path / "kept" / "sft" / "snapshots"
    assert sorted(p.name for p in snapshots.iterdir()) == ["step-2", "step-4"]
    assert not (snapshots / "step-2" / "optimizer.pt").exists()
    model, processor = load_base(snapshots / "step-2")
    assert model is not None and processor is not None
    final = _weights(load_base(tmp_path / "kept" / "sft" / "checkpoint")[0])
    last = _weights(load_base(snapshots / "step-4")[0])
    assert all(torch_allclose(final[k], last[k]) for k in final)
    sft.run_sft(tmp_path / "plain", short_config(train_file, max_steps=2, save_every=2),
                log=lambda s: None)
    assert not (tmp_path / "plain" / "sft" / "snapshots").exists()


def torch_allclose(a, b) -> bool:
    import torch

    return torch.allclose(a, b, atol=1e-6)


def test_save_every_must_be_positive(train_file):
    with pytest.raises(ValueError, match="save_every must be at least 1"):
        short_config(train_file, save_every=0)


def test_the_trained_window_is_declared_on_the_model_and_the_tokenizer(base):
    from vsearcher_lite.training.sft import declare_length

    model, processor = base
    text = model.config.get_text_config(decoder=True)
    positions, limit = text.max_position_embeddings, processor.tokenizer.model_max_length
    try:
        assert declare_length(model, processor.tokenizer, positions + 2048) == positions + 2048
        assert processor.tokenizer.model_max_length == max(limit, positions + 2048)
        assert declare_length(model, processor.tokenizer, 16) == positions + 2048  # never lowered
    finally:
        text.max_position_embeddings, processor.tokenizer.model_max_length = positions, limit


def test_the_loss_over_every_process_tokens_is_scaled_back_by_the_processes():
    """Divided by the token count of all processes, one process's loss is multiplied by their
    number, as ``Trainer.compute_loss`` does: its averaged gradient is then the one-process one."""
    from collections import defaultdict
    from types import SimpleNamespace

    import torch

    from vsearcher_lite.training.sft_trainer import AgentSFTMixin

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.nn.Embedding(8, 8)

        def forward(self, input_ids, attention_mask=None, use_cache=False):
            return SimpleNamespace(logits=self.table(input_ids))

    class OnProcesses(AgentSFTMixin):
        def __init__(self, n_processes):  # the mixin's own state, without a Trainer
            self.model, self.answer_weight, self.answer_tags = model, 1.0, ((), ())
            self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
            self._total_train_tokens = 0
            self.args = SimpleNamespace(average_tokens_across_devices=True, n_gpu=1)
            self.accelerator = SimpleNamespace(num_processes=n_processes)

        def get_tp_size(self):
            return 1

    torch.manual_seed(0)
    model = Logits()
    batch = {"input_ids": torch.tensor([[1, 2, 3, 4]]), "labels": torch.tensor([[-100, 2, 3, 4]])}
    one = OnProcesses(1).compute_loss(model, batch, num_items_in_batch=6)
    two = OnProcesses(2).compute_loss(model, batch, num_items_in_batch=6)
    assert two.item() == pytest.approx(2 * one.item())
    # without a count over the processes, the loss is this batch's own mean
    alone = OnProcesses(2).compute_loss(model, batch)
    assert alone.item() == pytest.approx(one.item() * 6 / 3)


def test_the_training_arguments_exist_before_the_model_loads(tmp_path, train_file, monkeypatch):
    """ZeRO-3 partitions the weights while they load only when the arguments already exist."""
    from vsearcher_lite.training import sft

    order = []

    def args_first(config, work_dir):
        order.append("args")
        return "args"

    def model_then_stop(config):
        order.append("model")
        raise RuntimeError("stop here")

    monkeypatch.setattr(sft, "trl_args", args_first)
    monkeypatch.setattr(sft, "load_model", model_then_stop)
    config = SFTConfig.for_profile("cpu", train_file=str(train_file), evaluate=False)
    with pytest.raises(RuntimeError, match="stop here"):
        sft.run_sft(tmp_path / "run", config, log=lambda _: None)
    assert order == ["args", "model"]
    assert not (tmp_path / "run" / "sft").exists()  # nothing written before the model loaded


def test_the_trained_model_is_released_before_the_evaluations(tmp_path, train_file, monkeypatch):
    """Nothing keeps the trained model alive while the evaluations load two more (on a GPU: two
    more 8B models beside it)."""
    import gc
    import weakref

    from vsearcher_lite.training import sft

    loaded = []
    real_load = sft.load_model

    def watched(config):
        model, processor = real_load(config)
        loaded.append(weakref.ref(model))
        return model, processor

    alive = []

    def evaluations(*args, **kwargs):
        gc.collect()
        alive.append(loaded[0]() is not None)
        return {}

    monkeypatch.setattr(sft, "load_model", watched)
    monkeypatch.setattr(sft, "evaluate_both", evaluations)
    monkeypatch.setattr(sft, "training_budget", lambda *a, **k: ({}, None))
    config = SFTConfig.for_profile("cpu", train_file=str(train_file), max_steps=1, minutes=None,
                                   total_minutes=None, progress=False)
    sft.run_sft(tmp_path / "run", config, log=lambda _: None)
    assert alive == [False]
