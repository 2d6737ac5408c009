"""The SFT trainer: TRL's ``SFTTrainer`` with a weighted loss and a time-aware schedule, and the
pieces it rests on. The trainer and its callback are mixins here, put on TRL's and transformers'
classes by ``sft_trainer_classes`` on first use, so importing this module does not import torch,
transformers or TRL.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Callable

from vsearcher_lite.runio import JsonlLog, csv_text
from vsearcher_lite.runtime import end_progress, progress_bar
from vsearcher_lite.training.config import SFTConfig
from vsearcher_lite.training.data import IGNORE_INDEX, answer_token_weights

LOSS_FIELDS = ("step", "seconds", "learning_rate", "loss", "assistant_ce", "answer_ce",
               "mean_token_accuracy", "grad_norm")
# what the progress bar says of a run that stopped before its planned steps, by ``stopped_by``
STOP_NOTES = {"time": "stopped by the time budget"}


def schedule_factor(progress: float, warmup_ratio: float, min_ratio: float = 0.0) -> float:
    """The learning-rate multiplier at ``progress`` in [0, 1]: linear warmup, then cosine to
    ``min_ratio``.

    >>> schedule_factor(0.05, 0.1), schedule_factor(0.1, 0.1)
    (0.5, 1.0)
    >>> round(schedule_factor(0.55, 0.1), 3), schedule_factor(1.0, 0.1, 0.1)
    (0.5, 0.1)
    """
    progress = min(max(progress, 0.0), 1.0)
    if warmup_ratio > 0 and progress < warmup_ratio:
        return progress / warmup_ratio
    rest = (progress - warmup_ratio) / (1.0 - warmup_ratio) if warmup_ratio < 1 else 1.0
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * rest))


def run_progress(step: int, total_steps: int, elapsed_s: float, budget_s: float | None) -> float:
    """How far training is: the larger of the step share and the time share (when time-capped),
    so a run stopped by its budget still ends at the low learning rate on any machine.

    >>> run_progress(10, 100, 30.0, 60.0), run_progress(10, 100, 30.0, None)
    (0.5, 0.1)
    """
    share = step / total_steps if total_steps > 0 else 0.0
    if budget_s:
        share = max(share, elapsed_s / budget_s)
    return min(share, 1.0)


def loss_csv(rows: list[dict]) -> str:
    return csv_text(rows, LOSS_FIELDS)


def answer_weights(labels, answer_tags: tuple, answer_weight: float, like):
    """The loss weights of a batch's shifted targets and where its answers are: ``answer_weight``
    on answer-bearing tokens, 1 on the other trained ones, 0 on ignored ones (``like``: a tensor
    whose dtype and device the weights take)."""
    import torch

    open_ids, close_ids = answer_tags
    # Answers are marked with a weight of 2, not answer_weight, so they are found (and answer_ce
    # logged) at any answer_weight, 1 included.
    marks = [answer_token_weights(row, open_ids, close_ids, 2.0) for row in labels.tolist()]
    marks_t = torch.tensor(marks, dtype=like.dtype, device=like.device)[:, 1:]
    answer = marks_t > 1
    return torch.where(answer, torch.full_like(marks_t, answer_weight), marks_t), answer


def record_token_metrics(metrics: dict, predicted, targets, ce, answer) -> None:
    """Append a batch's plain assistant cross-entropy, answer cross-entropy (when it has answer
    tokens) and token accuracy to ``metrics`` (TRL's lists of one mode): the loss log shows the
    unweighted numbers, comparable across answer weights."""
    import torch

    mask = targets != IGNORE_INDEX
    with torch.no_grad():
        n_valid = mask.sum().clamp(min=1)
        metrics["assistant_ce"].append((ce[mask].sum() / n_valid).item())
        if bool(answer.any()):
            metrics["answer_ce"].append(ce[answer].mean().item())
        correct = (predicted == targets) & mask
        metrics["mean_token_accuracy"].append((correct.sum() / n_valid).item())


def device_loss_scale(trainer) -> int:
    """What ``Trainer.compute_loss`` multiplies a loss by when it was divided by the token count
    of every process (``average_tokens_across_devices``): the processes (over tensor-parallel
    ranks, which share a batch), or the GPUs of one process; 1 otherwise. Gradients are averaged
    over the processes, so without it a run on N processes trains with 1/N of the loss.

    >>> from types import SimpleNamespace as N
    >>> args = N(average_tokens_across_devices=True, n_gpu=1)
    >>> device_loss_scale(N(args=args, accelerator=N(num_processes=8), get_tp_size=lambda: 1))
    8
    >>> args.average_tokens_across_devices = False
    >>> device_loss_scale(N(args=args, accelerator=N(num_processes=8), get_tp_size=lambda: 1))
    1
    """
    if not getattr(trainer.args, "average_tokens_across_devices", False):
        return 1
    if trainer.args.n_gpu > 1:
        return trainer.args.n_gpu
    return trainer.accelerator.num_processes // trainer.get_tp_size()


def takes_logits_to_keep(model) -> bool:
    """Whether the model under its wrappers (DDP, PEFT) computes logits for chosen positions
    only (``logits_to_keep``, as transformers' causal and image-text models do)."""
    import inspect

    inner = model
    for _ in range(4):
        inner = getattr(inner, "module", inner)
        if hasattr(inner, "get_base_model"):
            inner = inner.get_base_model()
    forward = getattr(inner, "forward", None)
    try:
        return forward is not None and "logits_to_keep" in inspect.signature(forward).parameters
    except (TypeError, ValueError):
        return False


def lr_factor(num_training_steps: int, warmup: float, elapsed_s: Callable[[], float],
              budget_s: float | None, min_ratio: float) -> Callable[[int], float]:
    """The ``LambdaLR`` multiplier of a run: ``schedule_factor`` at the ``run_progress`` of each
    step, reading the training clock (``elapsed_s``) when the step is taken."""
    # ``trl_args`` passes warmup_ratio as warmup_steps (transformers reads a value below 1 as a
    # share of the steps); a whole number of steps is turned into that share.
    if warmup >= 1:
        warmup = warmup / max(num_training_steps, 1)

    def factor(step: int) -> float:
        progress = run_progress(step + 1, num_training_steps, elapsed_s(), budget_s)
        return schedule_factor(progress, warmup, min_ratio)

    return factor


class AgentSFTMixin:
    """TRL's ``SFTTrainer`` with a weighted loss and a time-aware schedule. Each trained token's
    cross-entropy is multiplied by its weight and the sum divided by the number of trained
    tokens, as TRL does, so weights of 1 give TRL's loss exactly."""

    def __init__(self, *args, answer_weight: float = 1.0, answer_tags: tuple = ((), ()),
                 time_budget_s: float | None = None, min_lr_ratio: float = 0.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.answer_weight = float(answer_weight)
        self.answer_tags = answer_tags
        self.time_budget_s = time_budget_s
        self.min_lr_ratio = min_lr_ratio
        self.train_started: float | None = None  # set by the loss log when training begins

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """The weighted loss of one batch (TRL's own for a batch without labels)."""
        import torch
        import torch.nn.functional as F

        labels = inputs.get("labels")
        if labels is None:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        # 1. the shifted cross-entropy of every token (0 where the label is ignored)
        model_inputs = {k: v for k, v in inputs.items() if k != "labels"}
        model_inputs["use_cache"] = False
        targets = labels[:, 1:]
        trained = targets != IGNORE_INDEX
        # the output layer runs on the trained positions only, and only their logits go to fp32:
        # at 20,480 tokens x Qwen3-VL's 151,936 words the bf16 logits of every position are
        # 6 GB, an fp32 copy 12 GB more
        if takes_logits_to_keep(model):
            keep = torch.zeros_like(labels, dtype=torch.bool)
            keep[:, :-1] = trained
            model_inputs["logits_to_keep"] = keep
        outputs = model(**model_inputs)
        logits = outputs.logits
        logits = (logits if logits.dim() == 2 else logits[:, :-1, :][trained]).float()
        ce = torch.zeros(targets.shape, dtype=logits.dtype, device=logits.device)
        ce[trained] = F.cross_entropy(logits, targets[trained], reduction="none")
        predicted = torch.full_like(targets, IGNORE_INDEX)
        predicted[trained] = logits.argmax(-1)
        # 2. the weights: answer_weight on the answer's tokens, 1 on the other trained ones
        weights, answer = answer_weights(labels, self.answer_tags, self.answer_weight, ce)
        # 3. the weighted sum over the number of trained tokens (TRL's count over the whole
        #    accumulated batch when it gives one)
        n_tokens = (trained.sum() if num_items_in_batch is None
                    else torch.as_tensor(num_items_in_batch))
        loss = (ce * weights).sum() / n_tokens.clamp(min=1)
        if num_items_in_batch is not None:
            loss = loss * device_loss_scale(self)
        # 4. what the loss log shows
        mode = "train" if self.model.training else "eval"
        record_token_metrics(self._metrics[mode], predicted, targets, ce, answer)
        if mode == "train" and "attention_mask" in inputs:
            self._total_train_tokens += int(inputs["attention_mask"].sum().item())
            self._metrics[mode]["num_tokens"] = [self._total_train_tokens]
        return (loss, outputs) if return_outputs else loss

    def training_seconds(self) -> float:
        started = self.train_started
        return time.perf_counter() - started if started else 0.0

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        if self.lr_scheduler is None:
            from torch.optim.lr_scheduler import LambdaLR

            factor = lr_factor(num_training_steps, self.args.warmup_steps, self.training_seconds,
                               self.time_budget_s, self.min_lr_ratio)
            self.lr_scheduler = LambdaLR(optimizer or self.optimizer, factor)
            self._created_lr_scheduler = True
        return self.lr_scheduler


class LossLogMixin:
    """A ``TrainerCallback`` that collects one row per logged step and stops training when the
    time budget is spent."""

    bar = None

    def __init__(self, trainer_ref: Callable[[], Any], budget_s: float | None, progress: bool,
                 log: Callable[[str], None] = print, rows_log: JsonlLog | None = None):
        # The trainer is made with this callback, so it is reached through trainer_ref later.
        self.trainer_ref = trainer_ref
        self.budget_s = budget_s
        self.log = log
        self.rows_log = rows_log  # resumable runs keep their rows on disk as they come
        self.rows: list[dict] = rows_log.records() if rows_log else []
        # training time before a resume
        self.offset_s = self.rows[-1]["seconds"] if self.rows else 0.0
        self.start = time.perf_counter()
        self.stopped_by = "steps"
        self.progress = progress

    def on_train_begin(self, args, state, control, **kw):
        self.start = time.perf_counter()
        self.trainer_ref().train_started = self.start
        if self.progress and state.is_world_process_zero:
            self.bar = progress_bar("sft steps", state.max_steps, initial=state.global_step)

    def on_train_end(self, args, state, control, **kw):
        if self.bar is not None:
            end_progress(self.bar, STOP_NOTES.get(self.stopped_by))

    def on_step_end(self, args, state, control, **kw):
        if self.bar is not None:
            self.bar.update(1)
        if self.budget_s and time.perf_counter() - self.start >= self.budget_s:
            control.should_training_stop = True
            self.stopped_by = "time"

    def on_log(self, args, state, control, logs=None, **kw):
        logs = logs or {}
        if "loss" not in logs:
            return
        row = {"step": state.global_step,
               "seconds": round(self.offset_s + time.perf_counter() - self.start, 2)}
        for key in LOSS_FIELDS[2:]:
            value = logs.get(key)
            row[key] = round(float(value), 5) if value is not None else None
        self.rows.append(row)
        if self.rows_log is not None:
            self.rows_log.append(row)
        if self.bar is not None:
            self.bar.set_postfix(loss=row.get("loss"))


def sft_trainer_classes():
    """``(AgentSFTTrainer, LossLog)``: the mixins above on TRL's ``SFTTrainer`` and transformers'
    ``TrainerCallback``. Made on call, so that importing this module imports neither."""
    from transformers import TrainerCallback
    from trl import SFTTrainer

    class AgentSFTTrainer(AgentSFTMixin, SFTTrainer):
        __doc__ = AgentSFTMixin.__doc__

    class LossLog(LossLogMixin, TrainerCallback):
        __doc__ = LossLogMixin.__doc__

    return AgentSFTTrainer, LossLog


def one_progress_bar(trainer) -> None:
    """Remove transformers' own progress display, a line per logged step (hundreds at
    ``logging_steps=1``); the loss log's single bar and ``loss.csv`` replace it."""
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
        # transformers 5's name (the old one warns)
        activation_checkpointing=config.gradient_checkpointing, assistant_only_loss=True,
        max_length=None,  # over-long trajectories are dropped before training, never cut mid-turn
        use_cpu=config.use_cpu,
        bf16=bf16,
        logging_steps=config.logging_steps,
        save_strategy="steps" if config.save_every else "no",
        save_steps=config.save_every or 500,
        # the last checkpoint is all a resume needs; a scaling table keeps the snapshots
        save_total_limit=None if config.keep_checkpoints else 1,
        report_to=config.report_to or "none",
        seed=config.seed,
        data_seed=config.seed,
        dataloader_num_workers=0,
        disable_tqdm=not config.progress,
        remove_unused_columns=False,
    )
