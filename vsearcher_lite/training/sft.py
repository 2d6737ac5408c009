"""Stage `sft`: supervised fine-tuning on the accepted teacher trajectories (paper 2.2, A.3).

``run_sft(run_dir, config) -> metrics`` trains the base model with TRL's ``SFTTrainer`` on
``RUN_DIR/trajectories/export/sft_trl.jsonl``, the loss on the assistant turns only, saves
``RUN_DIR/sft/checkpoint`` atomically, then evaluates the base and the SFT model on the same
held-out tasks with the same greedy settings: the first two bars of the paper's figure 4.

Outputs in ``RUN_DIR/sft/``: ``checkpoint/``, ``adapter/`` (LoRA / QLoRA only), ``loss.csv`` and
``metrics.json``; the evaluations are in ``RUN_DIR/eval/base`` and ``RUN_DIR/eval/sft``.
Deviations from the paper are the profiles' (``profiles/<profile>.toml``, each with its reason).
"""

from __future__ import annotations

import os
import shutil
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
    read_json,
    read_number_rows,
    resume_identity,
    write_jsonl,
)
from vsearcher_lite.runtime import set_threads, training_budget_s
from vsearcher_lite.scoring.evaluate import evaluate
from vsearcher_lite.synthesis.trajectories import TrajectoryConfig, generate_trajectories
from vsearcher_lite.training.checkpoint import (
    freeze_vision,
    load_model,
    lora_config,
    save_checkpoint,
    suppress_vision_tokens,
)
from vsearcher_lite.training.config import SFTConfig
from vsearcher_lite.training.data import (
    lengths_by_level,
    load_sft_records,
    make_collator,
    rendered_lengths,
    seen_counts,
    tag_ids,
    to_dataset,
)
from vsearcher_lite.training.heldout import heldout_tasks
from vsearcher_lite.training.sft_trainer import (
    loss_csv,
    one_progress_bar,
    sft_trainer_classes,
    trl_args,
)

STAGE = "sft"
SAVE_MARGIN_S = 5.0  # time kept back for saving the checkpoint and the loss log
# The SFT model's held-out evaluation takes about this many times the base model's on the same
# tasks (it makes tool calls and writes whole turns; the base stops at its first malformed turn):
# from 6x to 20x on the cpu profile's held-out tasks, hard ones included, as the trained model
# loops more or less (docs/results.md).
SFT_EVAL_FACTOR = 20.0


def first_last(values: list[float | None]) -> tuple[float | None, float | None]:
    """The first and last number of a series, skipping gaps.

    >>> first_last([None, 3.0, 2.0, None])
    (3.0, 2.0)
    """
    present = [v for v in values if v is not None]
    return (present[0], present[-1]) if present else (None, None)


def train_file(run_dir: str | Path, config: SFTConfig) -> Path:
    default = Path(run_dir) / "trajectories" / "export" / "sft_trl.jsonl"
    return Path(config.train_file) if config.train_file else default


def ensure_train_file(run_dir: str | Path, config: SFTConfig) -> Path:
    """The SFT data file; when it is missing, the trajectories stage runs first (profile
    defaults), so ``sft`` works on a fresh run folder."""
    path = train_file(run_dir, config)
    if not path.exists():
        if config.train_file:
            raise InputError(f"{path}: SFT data not found")
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise InputError(f"{path}: SFT data not found; run `vsearcher-lite trajectories` "
                             "before a multi-process launch")
        generate_trajectories(run_dir, TrajectoryConfig.for_profile(
            config.profile, seed=config.seed, world=config.world,
            samples_per_task=config.samples_per_task, progress=config.progress))
    return path


def declare_length(model, tokenizer, length: int) -> int:
    """Raise the model's declared positions (``declare_positions``) and the tokenizer's length
    limit to the window SFT trains on: the saved checkpoint then says what it was trained at, and
    tokenizing a trajectory longer than the base's window does not warn of indexing errors."""
    from vsearcher_lite.model.tiny import declare_positions

    tokenizer.model_max_length = max(int(tokenizer.model_max_length), int(length))
    return declare_positions(model, length)


def prepare_model(model, processor, config: SFTConfig) -> dict:
    """Prepare the base for training; returns what was done (for metrics)."""
    info: dict[str, Any] = {"suppressed_tokens": suppress_vision_tokens(model, processor.tokenizer)}
    if config.max_length:
        info["positions"] = declare_length(model, processor.tokenizer, config.max_length)
    if config.init_markup_embeddings:
        from vsearcher_lite.model.tiny import init_unseen_token_embeddings

        try:
            info["markup_init"] = sorted(init_unseen_token_embeddings(model, processor.tokenizer))
        except KeyError as exc:  # a real Qwen tokenizer lacks some tags as single tokens
            raise InputError("init_markup_embeddings needs the tiny tokenizer's markup tokens "
                             f"({exc}); turn it off for this base") from None
    if config.freeze_vision and config.method == "full":
        info["frozen_vision_parameters"] = freeze_vision(model)
    return info


# they do not change what is trained
RESUME_FREE = ("progress", "threads", "report_to", "device", "keep_checkpoints")


def step_of(checkpoint: Path) -> int:
    """The step of a trainer checkpoint folder (``checkpoint-N``)."""
    return int(checkpoint.name.rsplit("-", 1)[1])


def saved_checkpoints(work_dir: Path) -> list[Path]:
    """The trainer's complete checkpoints (their state written last), by step."""
    return sorted((p for p in work_dir.glob("checkpoint-*")
                   if (p / "trainer_state.json").exists()), key=step_of)


def resume_point(work_dir: Path, config: SFTConfig, log: Callable[[str], None] = print
                 ) -> tuple[Path | None, JsonlLog | None]:
    """Where an interrupted run of the same settings left off: its last trainer checkpoint and
    the log of its loss rows up to it (``None``s without ``save_every``). A scratch folder of
    other settings is refused, naming the first that differs, so a rerun never mixes two runs."""
    if not config.save_every:
        shutil.rmtree(work_dir, ignore_errors=True)
        return None, None
    settings = resume_identity(config.to_dict(), RESUME_FREE)
    settings_path = work_dir / "settings.json"
    if settings_path.exists():
        earlier = resume_identity(read_json(settings_path), RESUME_FREE)
        check_same_settings(work_dir, earlier, settings)
    else:
        shutil.rmtree(work_dir, ignore_errors=True)
        atomic_write_json(settings_path, settings)
    saved = saved_checkpoints(work_dir)
    rows_path = work_dir / "loss_rows.jsonl"
    step = step_of(saved[-1]) if saved else 0
    rows = [r for r in JsonlLog(rows_path, key="step").records() if r["step"] <= step]
    write_jsonl(rows_path, rows)  # rows logged after the last checkpoint are trained again
    if saved:
        log(f"[sft] resuming from {saved[-1]} (step {step})")
    return (saved[-1] if saved else None), JsonlLog(rows_path, key="step")


def evaluate_named(run_dir: str | Path, name: str, spec: str, config: SFTConfig,
                   log: Callable[[str], None]) -> dict:
    """One model (``base`` or the SFT checkpoint) on the held-out tasks; its metrics."""
    tasks = heldout_tasks(run_dir, config)
    t0 = time.perf_counter()
    metrics = evaluate(run_dir, tasks, spec, name=name, config=config.eval,
                       benchmark="heldout", fresh=True)
    log(f"[sft] eval {name}: accuracy {metrics.get('pass_at_1')}, format-valid "
        f"{metrics.get('format_valid_rate')} on {len(tasks)} held-out tasks "
        f"({time.perf_counter() - t0:.0f} s)")
    return metrics


def base_spec(config: SFTConfig) -> str:
    return "base" if config.base is None else f"transformers:{config.base}"


def _eval_summary(prefix: str, m: dict) -> dict:
    same = ("format_valid_rate", "mean_tool_calls", "accuracy_by_difficulty", "by_difficulty",
            "headline", "terminations", "format_errors")
    return {f"{prefix}_accuracy": m.get("pass_at_1"), **{f"{prefix}_{k}": m.get(k) for k in same}}


def fitting_records(records: list[dict], processor, config: SFTConfig, data_path: Path
                    ) -> tuple[list[dict], dict]:
    """The trajectories that fit ``max_length`` (none is cut mid-turn: longer ones are dropped)
    and the token lengths by level, kept and dropped; ``InputError`` when none fits."""
    lengths = rendered_lengths(processor, records)
    by_level = lengths_by_level(records, lengths, config.max_length)
    if config.max_length:
        records = [r for r, n in zip(records, lengths) if n <= config.max_length]
        if not records:
            raise InputError(f"{data_path}: every trajectory is longer than "
                             f"max_length={config.max_length} tokens")
    return records, by_level


def log_data(log: Callable[[str], None], records: list[dict], data_path: Path, by_level: dict,
             n_dropped: int, config: SFTConfig, threads: int) -> None:
    """Log what is trained: the trajectories kept and dropped, their token lengths by level."""
    log(f"[sft] {len(records)} trajectories from {data_path} ({n_dropped} longer than "
        f"{config.max_length} tokens dropped); method {config.method}, {config.dtype}, "
        f"{threads} thread(s)")
    log("[sft] tokens per trajectory by level (kept / dropped, median, p90, max): " + "; ".join(
        f"{k} {v['kept']} / {v['dropped']}, {v['median']}, {v['p90']}, {v['max']}"
        for k, v in by_level.items()))


def training_budget(run_dir: str | Path, config: SFTConfig, wall_start: float,
                    log: Callable[[str], None]) -> tuple[dict[str, dict], float | None]:
    """The evaluations done so far and the training time budget in seconds (``None``: none).
    With a whole-command budget the base is evaluated first: its time estimates the SFT
    model's evaluation, still to come, which the budget leaves room for."""
    evals: dict[str, dict] = {}
    eval_estimate_s = 0.0
    if config.total_minutes and config.evaluate and config.eval_base:
        evals["base"] = evaluate_named(run_dir, "base", base_spec(config), config, log)
        eval_estimate_s = SFT_EVAL_FACTOR * float(evals["base"].get("seconds") or 0.0)
    budget_s = training_budget_s(config.minutes, config.total_minutes,
                                 time.perf_counter() - wall_start, eval_estimate_s, SAVE_MARGIN_S,
                                 floor_s=10.0)
    return evals, budget_s


def release_memory() -> None:
    """Collect what was just dropped and hand freed GPU memory back (a no-op on CPU)."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def build_trainer(model, processor, dataset, collator, config: SFTConfig, args, work_dir: Path,
                  budget_s: float | None, log: Callable[[str], None]
                  ) -> tuple[Any, Any, Path | None]:
    """The trainer of ``dataset`` with the training arguments ``args`` (``trl_args``), its loss
    log and the checkpoint to resume from (``None``: start afresh)."""
    AgentSFTTrainer, LossLog = sft_trainer_classes()
    tokenizer = processor.tokenizer
    resume_from, rows_log = resume_point(work_dir, config, log)
    # The loss log tells the trainer when training began; it is made before the trainer, so it
    # reaches it through this box.
    trainer_box: list[Any] = []
    callback = LossLog(lambda: trainer_box[0], budget_s, config.progress, log=log,
                       rows_log=rows_log)
    trainer = AgentSFTTrainer(
        model=model, args=args, train_dataset=dataset,
        processing_class=processor, data_collator=collator,
        peft_config=lora_config(config) if config.method in ("lora", "qlora") else None,
        callbacks=[callback], answer_weight=config.answer_weight,
        answer_tags=(tag_ids(tokenizer, "<answer>"), tag_ids(tokenizer, "</answer>")),
        time_budget_s=budget_s, min_lr_ratio=config.min_lr_ratio)
    trainer_box.append(trainer)
    one_progress_bar(trainer)
    return trainer, callback, resume_from


def train(trainer, callback, resume_from: Path | None, config: SFTConfig,
          log: Callable[[str], None]) -> dict[str, Any]:
    """Train (from ``resume_from`` when given); the training half of the metrics."""
    t0 = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    # training before an interruption counts too
    train_seconds = callback.offset_s + time.perf_counter() - t0
    steps = int(trainer.state.global_step)
    per_step = train_seconds / max(steps, 1)
    log(f"[sft] {steps} steps in {train_seconds:.1f} s ({per_step:.2f} s/step), "
        f"stopped by {callback.stopped_by}")
    loss_first, loss_last = first_last([r.get("loss") for r in callback.rows])
    ce_first, ce_last = first_last([r.get("assistant_ce") for r in callback.rows])
    return dict(
        train_loss_first=loss_first, train_loss_last=loss_last, assistant_ce_first=ce_first,
        assistant_ce_last=ce_last, train_loss_mean=round(float(result.training_loss), 5),
        steps=steps, stopped_by=callback.stopped_by, train_seconds=round(train_seconds, 2),
        seconds_per_step=round(per_step, 3))


def save_outputs(trainer, callback, processor, out: Path, config: SFTConfig) -> bool:
    """Save the checkpoint (every process takes part) and, on the main process, ``loss.csv``,
    then remove the trainer's scratch folder; whether this is the main process."""
    save_checkpoint(trainer, processor, out / "checkpoint", config)
    is_main = trainer.is_world_process_zero()
    if is_main:
        atomic_write_text(out / "loss.csv", loss_csv(callback.rows))
        if config.keep_checkpoints:
            keep_snapshots(out / "trainer", out / "snapshots")
        shutil.rmtree(out / "trainer", ignore_errors=True)
    return is_main


#: What a trainer checkpoint holds only to resume: a snapshot kept for evaluation drops it
RESUME_ONLY = ("optimizer.pt", "scheduler.pt", "rng_state.pth", "scaler.pt")


def keep_snapshots(work_dir: Path, snapshots: Path) -> list[Path]:
    """Move the trainer's ``checkpoint-N`` folders to ``snapshots/step-N`` (weights and
    processor, without the optimizer's state), to be evaluated like the final checkpoint."""
    kept = []
    for saved in saved_checkpoints(work_dir):
        target = snapshots / f"step-{step_of(saved)}"
        for name in RESUME_ONLY:
            (saved / name).unlink(missing_ok=True)
        shutil.rmtree(target, ignore_errors=True)
        snapshots.mkdir(parents=True, exist_ok=True)
        shutil.move(str(saved), str(target))
        kept.append(target)
    return kept


def evaluate_both(run_dir: str | Path, config: SFTConfig, checkpoint: Path,
                  evals: dict[str, dict], log: Callable[[str], None]) -> dict[str, Any]:
    """The base (unless evaluated before training) and the SFT model on the same held-out
    tasks; the evaluation half of the metrics."""
    if config.eval_base and "base" not in evals:
        evals["base"] = evaluate_named(run_dir, "base", base_spec(config), config, log)
    spec = f"transformers:{Path(checkpoint).resolve()}"
    evals[config.name] = evaluate_named(run_dir, config.name, spec, config, log)
    metrics = {"eval_seconds": {k: v.get("seconds") for k, v in evals.items()},
               **_eval_summary("heldout", evals[config.name])}
    if "base" in evals:
        metrics.update(_eval_summary("base", evals["base"]))
    metrics["n_heldout_tasks"] = evals[config.name].get("n_tasks")
    return metrics


def run_sft(run_dir: str | Path, config: SFTConfig | None = None, *,
            log: Callable[[str], None] = print) -> dict:
    """Train, save, evaluate; returns the metrics (also in ``RUN_DIR/sft/metrics.json``).
    ``config`` as ``SFTConfig.for_profile`` checked and resolved it (default: the cpu
    profile's)."""
    import torch

    config = config or SFTConfig.for_profile("cpu")
    wall_start = time.perf_counter()
    threads = set_threads(config.threads) if config.use_cpu else torch.get_num_threads()
    torch.manual_seed(config.seed)
    rd = RunDir(run_dir)

    # 1. data and model; the stage folder is made once both have loaded: bad input leaves none
    data_path = ensure_train_file(run_dir, config)
    records = load_sft_records(data_path, config.max_train_samples)
    work_dir = Path(run_dir) / config.name / "trainer"
    # the training arguments exist before the model loads: under accelerate's ZeRO-3 config they
    # make transformers partition the weights as they load instead of loading 8B on every process
    args = trl_args(config, work_dir)
    model, processor = load_model(config)
    prep = prepare_model(model, processor, config)
    records, by_level = fitting_records(records, processor, config, data_path)
    dataset, collator = to_dataset(records), make_collator(processor)
    out = rd.stage(config.name)
    n_dropped = sum(v["dropped"] for v in by_level.values())
    log_data(log, records, data_path, by_level, n_dropped, config, threads)

    # 2. the time budget, then training
    evals, budget_s = training_budget(run_dir, config, wall_start, log)
    trainer, callback, resume_from = build_trainer(model, processor, dataset, collator, config,
                                                   args, work_dir, budget_s, log)
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    metrics: dict[str, Any] = train(trainer, callback, resume_from, config, log)

    # 3. the checkpoint and loss log
    checkpoint = out / "checkpoint"
    is_main = save_outputs(trainer, callback, processor, out, config)
    # what the steps really showed: each distinct task and trajectory, and how often it was seen
    samples = metrics["steps"] * config.batch_size * config.grad_accum * trainer.args.world_size
    metrics.update(
        n_train_trajectories=len(records),
        n_dropped_too_long=n_dropped, lengths=by_level, seen=seen_counts(records, samples),
        trainable_parameters=int(trainable), threads=threads, device=str(trainer.args.device),
        train_file=str(data_path), checkpoint=str(checkpoint), prepare=prep)
    log("[sft] seen by level (distinct tasks / distinct trajectories, times each seen, mean and "
        "most): " + "; ".join(f"{k} {v['distinct_tasks']} / {v['distinct_trajectories']}, "
                              f"{v['times_seen_mean']}, {v['times_seen_most']}"
                              for k, v in metrics["seen"].items()))
    # the trained model and its optimiser go before the evaluations load the checkpoint: the
    # loss log's way back to the trainer, then this function's references
    callback.trainer_ref = lambda: None
    del trainer, model
    release_memory()

    # 4. the held-out evaluations, on the main process only, at the profile's batch (1 on GPUs:
    # a sampled evaluation reproduces only then; `vsearcher-lite eval --batch N` is faster)
    if config.evaluate and is_main:
        metrics.update(evaluate_both(run_dir, config, checkpoint, evals, log))
    metrics["seconds"] = round(callback.offset_s + time.perf_counter() - wall_start, 2)
    metrics["settings"] = config.to_dict()
    if is_main:
        rd.write_metrics(config.name, metrics)
    return metrics


def read_loss_curve(run_dir: str | Path, name: str = STAGE) -> list[dict]:
    """The rows of ``RUN_DIR/<name>/loss.csv`` (numbers as floats)."""
    return read_number_rows(RunDir(run_dir).require(name, "vsearcher-lite sft") / "loss.csv")
