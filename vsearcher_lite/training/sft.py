"""Stage `sft`: supervised fine-tuning on the accepted teacher trajectories (paper 2.2, A.3).

``run_sft(run_dir, config) -> metrics`` trains the base model with TRL's ``SFTTrainer`` on the
multi-turn trajectories of ``RUN_DIR/trajectories/export/sft_trl.jsonl`` with the loss on the
assistant turns only (system, question, image and tool-response tokens masked; ``data.py``),
saves the model into ``RUN_DIR/sft/checkpoint`` (``save_pretrained``, written atomically), and
then runs the base model and the SFT model through the same ReAct loop on the same held-out
tasks with the same greedy settings (``evaluation.evaluate``): the first two bars of the
paper's figure 4.

Outputs in ``RUN_DIR/sft/``: ``checkpoint/`` (model, processor, tokenizer, generation config),
``adapter/`` (LoRA / QLoRA only), ``loss.csv`` (one row per logged step), ``metrics.json``
(``train_loss_first``, ``train_loss_last``, ``heldout_format_valid_rate``, ``heldout_accuracy``,
``base_format_valid_rate``, ``base_accuracy``, tool calls, ``steps``, ``seconds`` and the settings).
The evaluations themselves are in ``RUN_DIR/eval/base`` and ``RUN_DIR/eval/sft``.

Deviations from the paper (section 2.2 and the released LLaMA-Factory config):

- cpu profile: a 5M-parameter tiny Qwen3-VL pretrained by this project instead of
  Qwen3-VL-8B-Thinking; fp32 full fine-tuning (lr 1e-3, batch 1) inside a 2.8-minute budget for
  the whole stage (``total_minutes``: the base model is evaluated first and training gets what the
  two evaluations leave; a machine too slow for 200 steps in that time trains on to 200, ``min_steps``)
  instead of 5 epochs at lr 1e-5; the compact system prompt and top-3
  results its trajectories were made with; trajectories over 2,048 tokens dropped; and two
  additions for a model this small, as options: the new markup tokens' embeddings started from
  plain-text cues (``init_markup_embeddings``, on in the preset) and answer-bearing tokens
  weighted in the assistant loss (``answer_weight``, x10 in the preset).
- single_gpu: LoRA / QLoRA instead of full fine-tuning (one GPU does not hold an 8B model's
  optimizer state).
- multi_gpu: the paper's settings; TRL + accelerate (FSDP or DeepSpeed ZeRO-3) instead of
  LLaMA-Factory.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from vsearcher_lite.runio import (
    InputError,
    JsonlLog,
    RunDir,
    atomic_write_json,
    atomic_write_text,
    check_same_settings,
    csv_text,
    read_json,
    read_number_rows,
    replace_dir,
    write_jsonl,
)
from vsearcher_lite.runtime import set_threads
from vsearcher_lite.training.config import SFTConfig, training_budget_s
from vsearcher_lite.training.data import (
    IGNORE_INDEX,
    answer_token_weights,
    copy_token_weights,
    load_sft_records,
    make_collator,
    rendered_lengths,
    tag_ids,
    to_dataset,
)

STAGE = "sft"
SAVE_MARGIN_S = 5.0  # saving the checkpoint and the loss log (tiny model: about a second)
# The SFT model's held-out evaluation takes about this many times the base model's on the same tasks
# (it makes tool calls and writes whole turns; the base stops at its first malformed turn); measured
# at batch 16 on the cpu preset's held-out tasks (docs/results.md).
SFT_EVAL_FACTOR = 7.0
LOSS_FIELDS = ("step", "seconds", "learning_rate", "loss", "assistant_ce", "answer_ce", "mean_token_accuracy",
               "grad_norm")


# ---------------------------------------------------------------------------------------------
# Small pure pieces


def schedule_factor(progress: float, warmup_ratio: float, min_ratio: float = 0.0) -> float:
    """The learning-rate multiplier at ``progress`` in [0, 1]: linear warmup, then cosine to ``min_ratio``.

    >>> schedule_factor(0.05, 0.1), schedule_factor(0.1, 0.1), round(schedule_factor(0.55, 0.1), 3), schedule_factor(1.0, 0.1, 0.1)
    (0.5, 1.0, 0.5, 0.1)
    """
    progress = min(max(progress, 0.0), 1.0)
    if warmup_ratio > 0 and progress < warmup_ratio:
        return progress / warmup_ratio
    rest = (progress - warmup_ratio) / (1.0 - warmup_ratio) if warmup_ratio < 1 else 1.0
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * rest))


def run_progress(step: int, total_steps: int, elapsed_s: float, budget_s: float | None, min_steps: int = 0) -> float:
    """How far training is: the larger of the step share and the time share (when time-capped).

    A run stopped by its time budget then still walks the whole schedule, ending at the low
    learning rate, whatever the speed of the machine. With a floor of ``min_steps`` (a machine too
    slow to make that many steps within the budget trains on to the floor), the time share never
    runs ahead of ``step / min_steps``: the schedule then spans the floor's steps instead.

    >>> run_progress(10, 100, 30.0, 60.0), run_progress(10, 100, 30.0, None)
    (0.5, 0.1)
    >>> run_progress(10, 1000, 30.0, 60.0, min_steps=200), run_progress(150, 1000, 90.0, 60.0, min_steps=200)
    (0.05, 0.75)
    >>> run_progress(150, 1000, 30.0, 60.0, min_steps=100)  # fast enough: the floor changes nothing
    0.5
    """
    share = step / total_steps if total_steps > 0 else 0.0
    if budget_s:
        time_share = elapsed_s / budget_s
        if min_steps > 0:
            time_share = min(time_share, step / min_steps)
        share = max(share, time_share)
    return min(share, 1.0)


def stop_rule(step: int, elapsed_s: float, budget_s: float | None, min_steps: int = 0) -> str:
    """What the time budget says after ``step`` optimizer steps and ``elapsed_s`` seconds of training:
    ``"go"`` (within the budget), ``"time"`` (spent: stop) or ``"floor"`` (spent, but fewer than
    ``min_steps`` steps made: go on).

    The floor keeps a slow machine from handing back a model that has not learned the protocol yet
    (on a CPU twice as slow as the one the cpu budget was set on, the budget alone left 22 steps and
    a model that scored 0; docs/results.md).

    >>> stop_rule(10, 30.0, 60.0), stop_rule(10, 61.0, 60.0), stop_rule(10, 61.0, 60.0, min_steps=200)
    ('go', 'time', 'floor')
    >>> stop_rule(200, 400.0, 60.0, min_steps=200), stop_rule(5, 9e9, None)
    ('time', 'go')
    """
    if not budget_s or elapsed_s < budget_s:
        return "go"
    return "floor" if step < min_steps else "time"


def first_last(values: list[float | None]) -> tuple[float | None, float | None]:
    """The first and last number of a series, skipping gaps.

    >>> first_last([None, 3.0, 2.0, None])
    (3.0, 2.0)
    """
    present = [v for v in values if v is not None]
    return (present[0], present[-1]) if present else (None, None)


def balanced_head(items: list, n: int | None, key: Callable[[Any], str]) -> list:
    """The first ``n`` items taken round-robin across groups (in first-seen group order), each group
    in file order; all of them when ``n`` is None. A capped evaluation then keeps the difficulty mix.

    >>> balanced_head(["e1", "e2", "e3", "m1", "m2"], 3, key=lambda s: s[0])
    ['e1', 'm1', 'e2']
    """
    if n is None or n >= len(items):
        return list(items)
    groups: dict[str, list] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    picked: list = []
    depth = 0
    while len(picked) < n:
        for members in groups.values():
            if depth < len(members) and len(picked) < n:
                picked.append(members[depth])
        depth += 1
    return picked


def loss_csv(rows: list[dict]) -> str:
    return csv_text(rows, LOSS_FIELDS)


# ---------------------------------------------------------------------------------------------
# Inputs


def train_file(run_dir: str | Path, config: SFTConfig) -> Path:
    return Path(config.train_file) if config.train_file else Path(run_dir) / "trajectories" / "export" / "sft_trl.jsonl"


def ensure_train_file(run_dir: str | Path, config: SFTConfig) -> Path:
    """The SFT data file; the trajectories stage is run with its profile defaults when it is missing."""
    path = train_file(run_dir, config)
    if not path.exists():
        if config.train_file:
            raise InputError(f"{path}: SFT data not found")
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise InputError(f"{path}: SFT data not found; run `vsearcher-lite trajectories` before a multi-process launch")
        from vsearcher_lite.agent.trajectories import TrajectoryConfig, generate_trajectories

        generate_trajectories(run_dir, TrajectoryConfig.for_profile(
            config.profile, seed=config.seed, world=config.world, samples_per_task=config.samples_per_task,
            progress=config.progress))
    return path


def heldout_tasks(run_dir: str | Path, config: SFTConfig) -> list:
    """The held-out tasks both models are evaluated on (file order; difficulty filter; cap)."""
    from vsearcher_lite.agent.trajectories import load_tasks

    path = Path(config.eval_file) if config.eval_file else Path(run_dir) / "filter" / "heldout.jsonl"
    if not path.exists():
        raise InputError(f"{path}: no held-out tasks; run `vsearcher-lite filter` first")
    tasks = load_tasks(path)
    if config.eval_difficulties:
        tasks = [t for t in tasks if t.difficulty in config.eval_difficulties]
    tasks = balanced_head(tasks, config.eval_max_tasks, key=lambda t: t.difficulty)
    if not tasks:
        raise InputError(f"{path}: no held-out tasks of difficulty {', '.join(config.eval_difficulties or [])}")
    return tasks


# ---------------------------------------------------------------------------------------------
# The model


def load_model(config: SFTConfig):
    """``(model, processor)`` for training: the base in the config's dtype (4-bit NF4 for qlora)."""
    from vsearcher_lite.model.tiny import load_base

    kwargs: dict[str, Any] = {}
    if config.method == "qlora":
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=config.torch_dtype())
    return load_base(config.base, dtype=config.torch_dtype(), **kwargs)


def suppress_vision_tokens(model, tokenizer) -> list[int]:
    """Never generate a vision placeholder (a sampled ``<|image_pad|>`` breaks the next forward pass)."""
    names = ("<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>")
    vocab = tokenizer.get_vocab()
    ids = sorted({vocab[n] for n in names if n in vocab})
    model.generation_config.suppress_tokens = ids or None
    return ids


def freeze_vision(model) -> int:
    """Freeze the vision tower and its projector (merger, deepstack mergers); returns how many
    parameters were frozen."""
    visual = model.model.visual
    n = 0
    for p in visual.parameters():
        if p.requires_grad:
            p.requires_grad_(False)
            n += p.numel()
    return n


def prepare_model(model, processor, config: SFTConfig) -> dict:
    """Everything done to the base before training; returns what was done (for metrics)."""
    info: dict[str, Any] = {"suppressed_tokens": suppress_vision_tokens(model, processor.tokenizer)}
    if config.init_markup_embeddings:
        from vsearcher_lite.model.tiny import init_unseen_token_embeddings

        try:
            info["markup_init"] = sorted(init_unseen_token_embeddings(model, processor.tokenizer))
        except KeyError as exc:  # a real Qwen tokenizer lacks some tags as single tokens: nothing to start
            raise InputError(f"init_markup_embeddings needs the tiny tokenizer's markup tokens ({exc}); "
                             "turn it off for this base") from None
    if config.freeze_vision and config.method == "full":
        info["frozen_vision_parameters"] = freeze_vision(model)
    return info


def lora_config(config: SFTConfig):
    from peft import LoraConfig

    return LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                      target_modules=config.lora_target, bias="none", task_type="CAUSAL_LM")


# ---------------------------------------------------------------------------------------------
# The trainer


def _trainer_classes():
    import torch
    import torch.nn.functional as F
    from transformers import TrainerCallback
    from trl import SFTTrainer

    class AgentSFTTrainer(SFTTrainer):
        """TRL's ``SFTTrainer`` with two additions: a weighted loss and a time-aware schedule.

        With ``answer_weight == copy_weight == 1`` the loss is TRL's own (assistant tokens, mean per
        token). Otherwise each trained token's cross-entropy is multiplied by its weight
        (``data.answer_token_weights``, then ``data.copy_token_weights`` for the other tokens) and
        the sum is divided by the number of trained tokens, as TRL does, so weight 1 gives TRL's
        number exactly.
        """

        def __init__(self, *args, answer_weight: float = 1.0, answer_tags: tuple = ((), ()),
                     copy_weight: float = 1.0, time_budget_s: float | None = None, min_steps: int = 0,
                     min_lr_ratio: float = 0.0, **kwargs):
            super().__init__(*args, **kwargs)
            self.answer_weight = float(answer_weight)
            self.copy_weight = float(copy_weight)
            self.answer_open, self.answer_close = answer_tags
            self.time_budget_s = time_budget_s
            self.min_steps = int(min_steps)
            self.min_lr_ratio = min_lr_ratio
            self.train_started: float | None = None

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            labels = inputs.get("labels")
            if labels is None:
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            mode = "train" if self.model.training else "eval"
            model_inputs = {k: v for k, v in inputs.items() if k != "labels"}
            model_inputs["use_cache"] = False
            outputs = model(**model_inputs)
            logits = outputs.logits[:, :-1, :].float()
            targets = labels[:, 1:]
            ce = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1),
                                 ignore_index=IGNORE_INDEX, reduction="none").view_as(targets)
            # Answer positions are found with a marker weight of 2 so answer_ce is logged at any answer_weight.
            marks = [answer_token_weights(row, self.answer_open, self.answer_close, 2.0) for row in labels.tolist()]
            marks_t = torch.tensor(marks, dtype=ce.dtype, device=ce.device)[:, 1:]
            answer = marks_t > 1
            weights = torch.where(answer, torch.full_like(marks_t, self.answer_weight), marks_t)
            if self.copy_weight != 1.0:  # copied tokens (names, URLs, the restated question); answers keep theirs
                copies = [copy_token_weights(ids, row, self.copy_weight)
                          for ids, row in zip(inputs["input_ids"].tolist(), labels.tolist())]
                copies_t = torch.tensor(copies, dtype=ce.dtype, device=ce.device)[:, 1:]
                weights = torch.where(answer, weights, copies_t)
            mask = targets != IGNORE_INDEX
            n_tokens = mask.sum() if num_items_in_batch is None else torch.as_tensor(num_items_in_batch)
            loss = (ce * weights).sum() / n_tokens.clamp(min=1)
            with torch.no_grad():
                n_valid = mask.sum().clamp(min=1)
                self._metrics[mode]["assistant_ce"].append((ce[mask].sum() / n_valid).item())
                if bool(answer.any()):
                    self._metrics[mode]["answer_ce"].append(ce[answer].mean().item())
                correct = (logits.argmax(-1) == targets) & mask
                self._metrics[mode]["mean_token_accuracy"].append((correct.sum() / n_valid).item())
                if mode == "train" and "attention_mask" in inputs:
                    self._total_train_tokens += int(inputs["attention_mask"].sum().item())
                    self._metrics[mode]["num_tokens"] = [self._total_train_tokens]
            return (loss, outputs) if return_outputs else loss

        def create_scheduler(self, num_training_steps: int, optimizer=None):
            if self.lr_scheduler is None:
                from torch.optim.lr_scheduler import LambdaLR

                warmup = self.args.warmup_steps if self.args.warmup_steps < 1 else self.args.warmup_steps / max(num_training_steps, 1)

                def factor(step: int) -> float:
                    elapsed = time.perf_counter() - self.train_started if self.train_started else 0.0
                    progress = run_progress(step + 1, num_training_steps, elapsed, self.time_budget_s, self.min_steps)
                    return schedule_factor(progress, warmup, self.min_lr_ratio)

                self.lr_scheduler = LambdaLR(optimizer or self.optimizer, factor)
                self._created_lr_scheduler = True
            return self.lr_scheduler

    class LossLog(TrainerCallback):
        """Collects one row per logged step and stops training when the time budget is spent, but
        not before ``min_steps`` (``stop_rule``); says so once when the floor outlasts the budget."""

        def __init__(self, trainer_ref: Callable[[], Any], budget_s: float | None, progress: bool,
                     min_steps: int = 0, log: Callable[[str], None] = print, rows_log: JsonlLog | None = None):
            self.trainer_ref = trainer_ref
            self.budget_s = budget_s
            self.min_steps = int(min_steps)
            self.log = log
            self.rows_log = rows_log  # resumable runs keep their rows on disk as they come
            self.rows: list[dict] = rows_log.records() if rows_log else []
            self.offset_s = self.rows[-1]["seconds"] if self.rows else 0.0  # training time before a resume
            self.start = time.perf_counter()
            self.stopped_by = "steps"
            self.progress = progress
            self.over_budget_at: int | None = None  # the step at which the budget ran out below the floor

        bar = None

        def on_train_begin(self, args, state, control, **kw):
            self.start = time.perf_counter()
            self.trainer_ref().train_started = self.start
            if self.progress and state.is_world_process_zero:
                from tqdm.auto import tqdm

                self.bar = tqdm(total=state.max_steps, initial=state.global_step, desc="sft steps", leave=False)

        def on_train_end(self, args, state, control, **kw):
            if self.bar is not None:
                self.bar.close()

        def on_step_end(self, args, state, control, **kw):
            if self.bar is not None:
                self.bar.update(1)
            elapsed = time.perf_counter() - self.start
            rule = stop_rule(state.global_step, elapsed, self.budget_s, self.min_steps)
            if rule == "floor" and self.over_budget_at is None:
                self.over_budget_at = state.global_step
                pace = elapsed / max(state.global_step, 1)
                self.log(f"[sft] the time budget ({self.budget_s:.0f} s) is spent after {state.global_step} steps "
                         f"({pace:.2f} s/step on this machine); training goes on to the floor of {self.min_steps} "
                         f"steps (--min-steps), about {pace * (self.min_steps - state.global_step):.0f} s more")
            elif rule == "time":
                control.should_training_stop = True
                self.stopped_by = "time" if self.over_budget_at is None else "min_steps"

        def on_log(self, args, state, control, logs=None, **kw):
            logs = logs or {}
            if "loss" not in logs:
                return
            row = {"step": state.global_step, "seconds": round(self.offset_s + time.perf_counter() - self.start, 2)}
            for key in LOSS_FIELDS[2:]:
                value = logs.get(key)
                row[key] = round(float(value), 5) if value is not None else None
            self.rows.append(row)
            if self.rows_log is not None:
                self.rows_log.append(row)
            if self.bar is not None:
                self.bar.set_postfix(loss=row.get("loss"))

    return AgentSFTTrainer, LossLog


def one_progress_bar(trainer) -> None:
    """Remove transformers' own progress display: it adds a table row (in a notebook) or prints a
    line (in a terminal) for every logged step, hundreds of them at ``logging_steps=1``; the loss
    log's single bar and ``loss.csv`` replace it."""
    from transformers.trainer_callback import ProgressCallback

    trainer.remove_callback(ProgressCallback)
    try:
        from transformers.utils.notebook import NotebookProgressCallback
    except ImportError:  # no IPython: no notebook display either
        return
    trainer.remove_callback(NotebookProgressCallback)


def trl_args(config: SFTConfig, output_dir: Path):
    """The ``trl.SFTConfig`` of a run."""
    from trl import SFTConfig as TRLSFTConfig

    bf16 = config.dtype == "bfloat16" and not config.use_cpu
    return TRLSFTConfig(
        output_dir=str(output_dir),
        per_device_train_batch_size=config.batch_size,
        gradient_accumulation_steps=config.grad_accum,
        learning_rate=config.learning_rate,
        num_train_epochs=config.epochs,
        max_steps=config.max_steps or -1,
        lr_scheduler_type="cosine",
        warmup_steps=config.warmup_ratio,
        weight_decay=config.weight_decay,
        max_grad_norm=config.max_grad_norm,
        activation_checkpointing=config.gradient_checkpointing,  # transformers 5's name (the old one warns)
        assistant_only_loss=True,
        max_length=None,  # over-long trajectories are dropped before training, never cut mid-turn
        use_cpu=config.use_cpu,
        bf16=bf16,
        logging_steps=config.logging_steps,
        save_strategy="steps" if config.save_every else "no",
        save_steps=config.save_every or 500,
        save_total_limit=1,  # the last checkpoint is all a resume needs
        report_to=config.report_to or "none",
        seed=config.seed,
        data_seed=config.seed,
        dataloader_num_workers=0,
        disable_tqdm=not config.progress,
        remove_unused_columns=False,
    )


# ---------------------------------------------------------------------------------------------
# Saving




def save_checkpoint(trainer, processor, out_dir: Path, config: SFTConfig) -> Path:
    """Save the trained model as a plain Hugging Face folder at ``out_dir``, atomically.

    LoRA / QLoRA: the adapter goes to ``out_dir.parent / "adapter"`` and ``out_dir`` gets the
    base with the adapter merged (a QLoRA adapter is merged into the base reloaded unquantised,
    in the config's dtype), so evaluation and GRPO load it like any checkpoint. Full fine-tuning
    under FSDP / DeepSpeed goes through ``trainer.save_model`` (which gathers the shards); only
    the main process writes the processor and renames.
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
    if not trainer.is_world_process_zero():  # plain data parallel: every rank holds the same weights
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


RESUME_FREE = ("progress", "threads", "report_to", "device")  # settings that do not change what is trained


def resume_point(work_dir: Path, config: SFTConfig, log: Callable[[str], None] = print
                 ) -> tuple[Path | None, JsonlLog | None]:
    """Where an interrupted run of the same settings left off: its last trainer checkpoint (or
    None) and the log of its loss rows up to that step (None when the run saves no checkpoints).

    A scratch folder left by a run of other settings is refused, naming the first setting that
    differs, so a rerun never mixes two runs; without ``save_every`` it is simply removed.
    """
    if not config.save_every:
        shutil.rmtree(work_dir, ignore_errors=True)
        return None, None
    settings = {k: v for k, v in config.to_dict().items() if k not in RESUME_FREE}
    settings_path = work_dir / "settings.json"
    if settings_path.exists():
        check_same_settings(work_dir, read_json(settings_path), settings)
    else:
        shutil.rmtree(work_dir, ignore_errors=True)
        atomic_write_json(settings_path, settings)
    saved = sorted((p for p in work_dir.glob("checkpoint-*") if (p / "trainer_state.json").exists()),
                   key=lambda p: int(p.name.rsplit("-", 1)[1]))
    rows_path = work_dir / "loss_rows.jsonl"
    step = int(saved[-1].name.rsplit("-", 1)[1]) if saved else 0
    rows = [r for r in JsonlLog(rows_path, key="step").records() if r["step"] <= step]
    write_jsonl(rows_path, rows)  # rows logged after the last checkpoint are trained again
    if saved:
        log(f"[sft] resuming from {saved[-1]} (step {step})")
    return (saved[-1] if saved else None), JsonlLog(rows_path, key="step")


def load_base_unquantised(config: SFTConfig):
    from vsearcher_lite.model.tiny import load_base

    return load_base(config.base, dtype=config.torch_dtype())


# ---------------------------------------------------------------------------------------------
# The stage


def evaluate_named(run_dir: str | Path, name: str, spec: str, config: SFTConfig, log: Callable[[str], None]) -> dict:
    """One model (``base`` or the SFT checkpoint) on the held-out tasks, with the greedy settings
    both share (``SFTConfig.eval_config``); its metrics, with ``seconds``."""
    from vsearcher_lite.evaluation.evaluate import evaluate

    tasks = heldout_tasks(run_dir, config)
    t0 = time.perf_counter()
    metrics = evaluate(run_dir, tasks, spec, name=name, config=config.eval_config(), benchmark="heldout", fresh=True)
    log(f"[sft] eval {name}: accuracy {metrics.get('pass_at_1')}, format-valid "
        f"{metrics.get('format_valid_rate')} on {len(tasks)} held-out tasks ({time.perf_counter() - t0:.0f} s)")
    return metrics


def base_spec(config: SFTConfig) -> str:
    return "base" if config.base is None else f"transformers:{config.base}"


def _eval_summary(prefix: str, m: dict) -> dict:
    return {
        f"{prefix}_accuracy": m.get("pass_at_1"),
        f"{prefix}_format_valid_rate": m.get("format_valid_rate"),
        f"{prefix}_mean_tool_calls": m.get("mean_tool_calls"),
        f"{prefix}_accuracy_by_difficulty": m.get("accuracy_by_difficulty"),
        f"{prefix}_terminations": m.get("terminations"),
        f"{prefix}_format_errors": m.get("format_errors"),
    }


def run_sft(run_dir: str | Path, config: SFTConfig | None = None, *, log: Callable[[str], None] = print) -> dict:
    """Train, save, evaluate; returns the metrics (also written to ``RUN_DIR/sft/metrics.json``)."""
    import torch

    config = config or SFTConfig.for_profile("cpu")
    config.check()
    wall_start = time.perf_counter()
    threads = set_threads(config.threads) if config.use_cpu else torch.get_num_threads()
    torch.manual_seed(config.seed)
    rd = RunDir(run_dir)

    data_path = ensure_train_file(run_dir, config)
    records = load_sft_records(data_path, config.max_train_samples)
    model, processor = load_model(config)
    prep = prepare_model(model, processor, config)
    n_dropped = 0
    if config.max_length:
        lengths = rendered_lengths(processor, records)
        kept = [r for r, n in zip(records, lengths) if n <= config.max_length]
        n_dropped = len(records) - len(kept)
        records = kept
        if not records:
            raise InputError(f"{data_path}: every trajectory is longer than max_length={config.max_length} tokens")
    dataset = to_dataset(records)
    collator = make_collator(processor)
    out = rd.stage(config.name)  # made once the data and the model have loaded: a bad input leaves no folder
    log(f"[sft] {len(records)} trajectories from {data_path} ({n_dropped} longer than {config.max_length} tokens dropped); "
        f"method {config.method}, {config.dtype}, {threads} thread(s)")

    # With a whole-command budget (cpu), the base model is evaluated first: the SFT model's evaluation,
    # still to come, is estimated from it, and training gets the rest.
    evals: dict[str, dict] = {}
    eval_estimate_s = 0.0
    if config.total_minutes and config.evaluate and config.eval_base:
        evals["base"] = evaluate_named(run_dir, "base", base_spec(config), config, log)
        eval_estimate_s = SFT_EVAL_FACTOR * float(evals["base"].get("seconds") or 0.0)
    budget_s = training_budget_s(config.minutes, config.total_minutes, time.perf_counter() - wall_start,
                                 eval_estimate_s, SAVE_MARGIN_S, floor_s=10.0)
    AgentSFTTrainer, LossLog = _trainer_classes()
    tokenizer = processor.tokenizer
    trainer_box: list[Any] = []
    # the step floor never asks for more than max_steps
    min_steps = min(config.min_steps, config.max_steps) if config.max_steps else config.min_steps
    work_dir = out / "trainer"
    resume_from, rows_log = resume_point(work_dir, config, log)
    callback = LossLog(lambda: trainer_box[0], budget_s, config.progress, min_steps=min_steps, log=log,
                       rows_log=rows_log)
    trainer = AgentSFTTrainer(
        model=model,
        args=trl_args(config, work_dir),
        train_dataset=dataset,
        processing_class=processor,
        data_collator=collator,
        peft_config=lora_config(config) if config.method in ("lora", "qlora") else None,
        callbacks=[callback],
        answer_weight=config.answer_weight,
        answer_tags=(tag_ids(tokenizer, "<answer>"), tag_ids(tokenizer, "</answer>")),
        copy_weight=config.copy_weight,
        time_budget_s=budget_s,
        min_steps=min_steps,
        min_lr_ratio=config.min_lr_ratio,
    )
    trainer_box.append(trainer)
    one_progress_bar(trainer)
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    t0 = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    train_seconds = time.perf_counter() - t0
    steps = int(trainer.state.global_step)
    log(f"[sft] {steps} steps in {train_seconds:.1f} s ({train_seconds / max(steps, 1):.2f} s/step), "
        f"stopped by {callback.stopped_by}")

    checkpoint = out / "checkpoint"
    save_checkpoint(trainer, processor, checkpoint, config)
    is_main = trainer.is_world_process_zero()
    if is_main:
        atomic_write_text(out / "loss.csv", loss_csv(callback.rows))
        shutil.rmtree(work_dir, ignore_errors=True)
    loss_first, loss_last = first_last([r.get("loss") for r in callback.rows])
    ce_first, ce_last = first_last([r.get("assistant_ce") for r in callback.rows])
    metrics: dict[str, Any] = {
        "train_loss_first": loss_first,
        "train_loss_last": loss_last,
        "assistant_ce_first": ce_first,
        "assistant_ce_last": ce_last,
        "train_loss_mean": round(float(result.training_loss), 5),
        "steps": steps,
        "stopped_by": callback.stopped_by,
        "min_steps": min_steps,
        "budget_spent_at_step": callback.over_budget_at,  # not None: the floor outlasted the time budget
        "train_seconds": round(train_seconds, 2),
        "seconds_per_step": round(train_seconds / max(steps, 1), 3),
        "n_train_trajectories": len(records),
        "n_dropped_too_long": n_dropped,
        "trainable_parameters": int(trainable),
        "threads": threads,
        "device": str(trainer.args.device),
        "train_file": str(data_path),
        "checkpoint": str(checkpoint),
        "prepare": prep,
    }
    del trainer
    if config.evaluate and is_main:
        if config.eval_base and "base" not in evals:
            evals["base"] = evaluate_named(run_dir, "base", base_spec(config), config, log)
        evals[config.name] = evaluate_named(run_dir, config.name, f"transformers:{Path(checkpoint).resolve()}", config, log)
        metrics["eval_seconds"] = {k: v.get("seconds") for k, v in evals.items()}
        metrics.update(_eval_summary("heldout", evals[config.name]))
        if "base" in evals:
            metrics.update(_eval_summary("base", evals["base"]))
        metrics["n_heldout_tasks"] = evals[config.name].get("n_tasks")
    metrics["seconds"] = round(time.perf_counter() - wall_start, 2)
    metrics["settings"] = config.to_dict()
    if is_main:
        rd.write_metrics(config.name, metrics)
    return metrics


def read_loss_curve(run_dir: str | Path, name: str = STAGE) -> list[dict]:
    """The rows of ``RUN_DIR/<name>/loss.csv`` (numbers as floats)."""
    return read_number_rows(RunDir(run_dir).require(name, "vsearcher-lite sft") / "loss.csv")
