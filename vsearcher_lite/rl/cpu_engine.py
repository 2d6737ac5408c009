"""The cpu engine of the grpo stage: a plain PyTorch loop (``config.engine == "cpu"``).

Each step draws P tasks, runs G episodes of each in lockstep on one batched backend (more rounds
under dynamic sampling, ``draw_groups``), group-normalises the rewards
(``update.assign_advantages``), takes the old (and reference) log-probabilities in one no-grad
pass, makes ``mu`` AdamW updates with gradient accumulation and clipping, and writes a row of
``steps.csv``. With ``save_every`` the state after a step goes to ``RUN_DIR/grpo/resume.pt``, and
the same command continues from it after an interruption; with ``checkpoint_every`` the model is
also kept as ``RUN_DIR/grpo/checkpoint-stepN``, to be evaluated along training.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from vsearcher_lite.agent.judge import make_judge
from vsearcher_lite.agent.task import HEADLINE_LEVELS
from vsearcher_lite.chat.batched import BatchedTransformersChat
from vsearcher_lite.manifest import write_manifest
from vsearcher_lite.rl.config import GRPOConfig
from vsearcher_lite.rl.inputs import (
    TaskSampler,
    check_pool_unseen,
    resolve_init,
    rollout_settings,
    rollout_toolbox,
    task_path,
    train_tasks,
)
from vsearcher_lite.rl.paired_eval import eval_summary, evaluate_rl, evaluate_start
from vsearcher_lite.rl.prescreen import run_prescreen
from vsearcher_lite.rl.rollout import (
    RolloutSample,
    RolloutSettings,
    TrajectoryEncoder,
    rollout_groups,
)
from vsearcher_lite.rl.steps import (
    has_signal,
    mixed_column,
    step_row,
    steps_csv,
    training_summary,
)
from vsearcher_lite.rl.update import assign_advantages, score_samples, update_policy
from vsearcher_lite.runio import (
    InputError,
    JsonlLog,
    RunDir,
    atomic_write_text,
    check_same_settings,
    resume_identity,
    write_jsonl,
)
from vsearcher_lite.runtime import (
    end_progress,
    progress_bar,
    resolve_device,
    set_threads,
    training_budget_s,
)
from vsearcher_lite.training.checkpoint import freeze_vision, suppress_vision_tokens
from vsearcher_lite.training.sft_trainer import STOP_NOTES

SAVE_MARGIN_S = 15.0  # saving the checkpoint and loading the evaluation's second model
RL_EVAL_SLACK = 1.2  # the RL model's episodes may run longer than the start's


def draw_groups(sampler: "TaskSampler", rollout: Callable[[list, int], list[list[RolloutSample]]],
                config: GRPOConfig) -> tuple[list[list[RolloutSample]], list[RolloutSample], dict]:
    """``(groups to train on, every sample drawn, accounting)`` of a step; ``rollout(tasks, round)``
    runs one group per task. With ``dynamic_sampling`` (DAPO) zero-variance groups are dropped and
    rounds of P more tasks drawn until P groups have reward variance (later ones are surplus) or
    ``max_draw_rounds`` rounds have run."""
    want = config.prompts_per_step
    rounds = config.max_draw_rounds if config.dynamic_sampling else 1
    batch: list[list[RolloutSample]] = []
    drawn: list[RolloutSample] = []
    stats = {"groups": 0, "zero_variance_groups": 0, "groups_kept": 0, "groups_surplus": 0,
             "draw_rounds": 0, **{mixed_column(level): 0 for level in HEADLINE_LEVELS}}
    for r in range(rounds):
        tasks = sampler.draw(want)
        groups = rollout(tasks, r)
        stats["draw_rounds"] += 1
        for group in groups:
            drawn.extend(group)
            stats["groups"] += 1
            signal = has_signal(group)
            stats["zero_variance_groups"] += int(not signal)
            if signal and group[0].difficulty in HEADLINE_LEVELS:
                stats[mixed_column(group[0].difficulty)] += 1
            if not config.dynamic_sampling or (signal and len(batch) < want):
                batch.append(group)
                stats["groups_kept"] += int(signal)
            elif signal:
                stats["groups_surplus"] += 1
        if len(batch) >= want:
            break
    stats["zero_variance_share"] = round(stats["zero_variance_groups"] / stats["groups"],
                                         4) if stats["groups"] else None
    return batch, drawn, stats


def load_policy(init_path: Path, config: GRPOConfig):
    """``(model, processor)`` on ``config.device``, the vision tower frozen and the tokenizer's
    length check lifted for the rollouts (``tiny.without_length_check``)."""
    from vsearcher_lite.model.tiny import load_base, without_length_check

    model, processor = load_base(init_path, dtype=config.torch_dtype(),
                                 device=str(resolve_device(config.device)))
    without_length_check(processor.tokenizer)
    suppress_vision_tokens(model, processor.tokenizer)
    freeze_vision(model)
    return model, processor


RESUME_FILE = "resume.pt"
#: Settings that may change between an interrupted run and its resume.
RESUME_FREE = ("max_steps", "minutes", "total_minutes", "save_every", "checkpoint_every",
               "evaluate", "progress", "threads", "device", "report_to")


def save_training_state(out: Path, step: int, model, optimizer, sampler: TaskSampler,
                        rows: list[dict], excluded: list[bool], task_ids: list[str],
                        screened: dict | None, config: GRPOConfig, batch_stats: Any = None) -> Path:
    """Everything the next step depends on, in ``out/resume.pt`` (written aside, then renamed); the
    rollout backend's statistics too, as its call count seeds the next batches."""
    import torch

    identity = resume_identity(config.to_dict(), RESUME_FREE)
    state = {"identity": identity, "step": step, "model": model.state_dict(),
             "optimizer": optimizer.state_dict(), "sampler": sampler.state(), "rows": rows,
             "excluded": excluded, "task_ids": task_ids, "screened": screened,
             "torch_rng": torch.get_rng_state(), "batch_stats": batch_stats}
    tmp = out / f".{RESUME_FILE}.tmp"
    torch.save(state, tmp)
    os.replace(tmp, out / RESUME_FILE)
    return out / RESUME_FILE


def will_resume(out: Path, config: GRPOConfig) -> bool:
    """Whether this run continues an interrupted one: its resume file is there and it saves
    (``save_every``); a run without ``save_every`` starts over."""
    return bool(config.save_every) and (out / RESUME_FILE).exists()


def load_training_state(out: Path, config: GRPOConfig) -> dict | None:
    """The state an interrupted run of the same settings saved, or None (a run that does not
    resume, ``will_resume``, removes it); other settings are refused, naming the first."""
    import torch

    path = out / RESUME_FILE
    if not will_resume(out, config):
        path.unlink(missing_ok=True)
        return None
    state = torch.load(path, weights_only=False)
    now = resume_identity(config.to_dict(), RESUME_FREE)
    check_same_settings(path, resume_identity(state["identity"], RESUME_FREE), now)
    return state


def kept_checkpoint(out: Path, step: int) -> Path:
    """Where ``checkpoint_every`` keeps the model after ``step`` steps."""
    return out / f"checkpoint-step{step}"


def drop_later_checkpoints(out: Path, step: int) -> None:
    """Remove the models kept (``checkpoint_every``) after ``step``: this run trains those steps
    (again), and a folder never holds another run's model beside its own."""
    for kept in out.glob("checkpoint-step*"):
        found = re.fullmatch(r"checkpoint-step(\d+)", kept.name)
        if found and int(found.group(1)) > step:
            shutil.rmtree(kept)


@dataclass
class CpuRun:
    """What the stages of a cpu-engine run share: its inputs, the policy being trained with its
    optimiser (and the frozen reference when ``beta > 0``), and the pieces that roll episodes out
    on that policy."""

    run_dir: str | Path
    config: GRPOConfig
    rd: RunDir
    out: Path
    init_path: Path
    tasks: list
    pool_seen: int | None
    model: Any
    processor: Any
    ref_model: Any
    optimizer: Any
    encoder: TrajectoryEncoder
    backend: BatchedTransformersChat
    toolbox: Any
    judge: Any
    settings: RolloutSettings


@dataclass
class Progress:
    """The training so far, all a resume restores besides the weights and the optimiser: a
    ``steps.csv`` row per step, each drawn trajectory's exclusion, and the stage's time before an
    interruption (its steps and its pre-screen)."""

    rows: list[dict] = field(default_factory=list)
    excluded: list[bool] = field(default_factory=list)
    step: int = 0
    earlier_s: float = 0.0


def prepare_run(run_dir: str | Path, config: GRPOConfig, log: Callable[[str], None]) -> CpuRun:
    """Load the start model and the training tasks, then make the run's folder, the optimiser,
    the batched rollout backend, the toolbox and the judge."""
    import torch

    rd = RunDir(run_dir)
    init_path = resolve_init(run_dir, config)
    tasks = train_tasks(run_dir, config)
    pool_seen = check_pool_unseen(run_dir, tasks, config, log)
    model, processor = load_policy(init_path, config)
    # made once the tasks and the model have loaded: a bad input leaves no folder
    out = rd.stage(config.name)
    ref_model = copy.deepcopy(model).eval().requires_grad_(False) if config.beta > 0 else None
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate,
                                  betas=(config.adam_beta1, config.adam_beta2),
                                  weight_decay=config.weight_decay)
    backend = BatchedTransformersChat(model, processor,
                                      max_batch=config.rollout_batch or config.batch_trajectories,
                                      max_new_tokens=config.max_tokens)
    return CpuRun(run_dir, config, rd, out, init_path, tasks, pool_seen, model, processor,
                  ref_model, optimizer, TrajectoryEncoder(processor), backend,
                  rollout_toolbox(run_dir, config), make_judge(config.judge),
                  rollout_settings(config))


def choose_tasks(run: CpuRun, resumed: dict | None, log: Callable[[str], None]) -> dict | None:
    """Narrow ``run.tasks`` to what this run trains on: an interrupted run's own tasks (so a
    resume never screens again), else with the ``prescreen`` curriculum the pre-screen's kept
    tasks. Returns the pre-screen's summary, or None without one."""
    if resumed is not None:
        by_id = {t.id: t for t in run.tasks}
        run.tasks = [by_id[i] for i in resumed["task_ids"]]
        return resumed["screened"]
    if run.config.curriculum != "prescreen":
        return None
    screened = run_prescreen(run.tasks, run.backend, run.toolbox, run.settings, run.judge,
                             run.config, run.out, log)
    run.tasks = screened.pop("tasks")
    return screened


def training_budget(run: CpuRun, wall_start: float,
                    log: Callable[[str], None]) -> tuple[dict | None, float | None]:
    """``(the start model's evaluation, seconds left for training)``. The start is evaluated
    before training, as its time per task estimates the RL model's evaluation, which the budget
    of the whole command (``total_minutes``) must leave room for."""
    config, start, rl_estimate = run.config, None, None
    if config.evaluate:
        start = evaluate_start(run.run_dir, run.init_path, run.model, run.processor, config, log)
        if start["seconds_per_task"] is not None:
            rl_estimate = start["seconds_per_task"] * len(start["tasks"]) * RL_EVAL_SLACK
    budget_s = training_budget_s(config.minutes, config.total_minutes,
                                 time.perf_counter() - wall_start,
                                 rl_estimate or 0.0, SAVE_MARGIN_S)
    if budget_s is not None:
        log(f"[grpo] training budget {budget_s:.0f} s "
            f"(RL evaluation estimated at {rl_estimate or 0:.0f} s)")
    return start, budget_s


def restore_progress(run: CpuRun, sampler: TaskSampler, resumed: dict | None,
                     screened: dict | None, log: Callable[[str], None]) -> Progress:
    """The progress to continue from: none for a fresh run (its folder's rollouts cleared), else
    the interrupted run's, with its weights, optimiser, sampler, RNG and backend statistics put
    back and its rollouts of steps after the saved one dropped (they are sampled again). Done
    after the start's evaluation, which must see the start model."""
    import torch

    rollouts = run.out / "rollouts.jsonl"
    if resumed is None:
        rollouts.unlink(missing_ok=True)  # a rerun trains from the start again
        progress = Progress()
    else:
        run.model.load_state_dict(resumed["model"])
        run.optimizer.load_state_dict(resumed["optimizer"])
        sampler.restore(resumed["sampler"])
        torch.set_rng_state(resumed["torch_rng"])
        run.backend.stats = resumed["batch_stats"] or run.backend.stats
        rows, step = resumed["rows"], resumed["step"]
        kept = [r for r in JsonlLog(rollouts, key="id").records() if r["step"] < step]
        write_jsonl(rollouts, kept)
        log(f"[grpo] resuming after step {step} from {run.out / RESUME_FILE}")
        earlier_s = (rows[-1]["seconds"] if rows else 0.0) + ((screened or {}).get("seconds")
                                                              or 0.0)
        progress = Progress(rows, resumed["excluded"], step, earlier_s)
    drop_later_checkpoints(run.out, progress.step)
    return progress


def grpo_step(run: CpuRun, sampler: TaskSampler, step: int,
              zero: float) -> tuple[dict, list[RolloutSample], float]:
    """One GRPO step: draw and roll out the groups, assign advantages, score the old (and
    reference) log-probabilities, update the policy. ``(its row, every sample drawn, its
    seconds)``; the row's running ``seconds`` count from the clock time ``zero``."""
    config = run.config
    t0 = time.perf_counter()

    def rollout(tasks, draw_round):
        # later rounds number their samples on, so a task drawn twice in a step gets other seeds
        return rollout_groups(run.backend, run.toolbox, tasks, config.generations, run.settings,
                              run.judge, run.encoder, step=step,
                              first_sample=[draw_round * config.generations] * len(tasks))

    groups, drawn, draw_stats = draw_groups(sampler, rollout, config)
    samples = [s for g in groups for s in g]
    assign_advantages(groups, config)
    t1 = time.perf_counter()
    score = score_samples(run.model, samples, run.encoder, config, run.ref_model)
    update = update_policy(run.model, run.optimizer, samples, run.encoder, config)
    t2 = time.perf_counter()
    times = {"rollout_seconds": t1 - t0, "update_seconds": t2 - t1, "step_seconds": t2 - t0,
             "seconds": t2 - zero}
    row = step_row(step, drawn, draw_stats, score, update, times, config.learning_rate)
    return row, drawn, t2 - t0


def train_steps(run: CpuRun, sampler: TaskSampler, progress: Progress, screened: dict | None,
                budget_s: float | None) -> tuple[str, float]:
    """Run steps until ``max_steps`` or the time budget, logging each and saving what
    ``checkpoint_every`` and ``save_every`` ask for. ``(what stopped training, its seconds over
    every resume)``."""
    from vsearcher_lite.model.tiny import save_base

    config, out = run.config, run.out
    rollout_log = JsonlLog(out / "rollouts.jsonl", key="id")
    max_steps = config.max_steps or 10**9
    stopped_by = "steps"
    train_start = time.perf_counter()
    offset_s = progress.rows[-1]["seconds"] if progress.rows else 0.0  # time before a resume
    last_step_s = 0.0
    bar = progress_bar("grpo", config.max_steps, initial=progress.step, enabled=config.progress)
    while progress.step < max_steps:
        step = progress.step
        elapsed = time.perf_counter() - train_start
        # stop where one more step as long as the last would overrun the budget; step 0 always
        # runs, so that every run trains
        if budget_s is not None and step > 0 and elapsed + last_step_s > budget_s:
            stopped_by = "time"
            break
        row, drawn, last_step_s = grpo_step(run, sampler, step, train_start - offset_s)
        progress.rows.append(row)
        progress.excluded.extend(s.excluded for s in drawn)
        for s in drawn:
            rollout_log.append({"id": f"{step}:{s.task_id}:{s.sample_index}", "step": step,
                                **s.summary()})
        atomic_write_text(out / "steps.csv", steps_csv(progress.rows))
        bar.update(1)
        bar.set_postfix(reward=row["reward"], fmt_fail=row["format_failure_share"],
                        trained=row["trained_trajectories"])
        progress.step = step + 1
        if config.checkpoint_every and progress.step % config.checkpoint_every == 0:
            save_base(run.model, run.processor, kept_checkpoint(out, progress.step))
        if config.save_every and progress.step % config.save_every == 0:
            save_training_state(out, progress.step, run.model, run.optimizer, sampler,
                                progress.rows, progress.excluded, [t.id for t in run.tasks],
                                screened, config, run.backend.stats)
    end_progress(bar, STOP_NOTES.get(stopped_by))
    rows = progress.rows
    train_seconds = rows[-1]["seconds"] if rows else time.perf_counter() - train_start
    return stopped_by, train_seconds


def finish(run: CpuRun, progress: Progress, screened: dict | None, start: dict | None,
           budget_s: float | None, stopped_by: str, train_seconds: float, threads: int,
           log: Callable[[str], None]) -> dict:
    """Save the trained model as ``checkpoint`` (the resume file goes: the run is done), evaluate
    it beside the start when ``start`` holds the start's evaluation, and return the metrics."""
    from vsearcher_lite.model.tiny import save_base

    config, out, rows = run.config, run.out, progress.rows
    checkpoint = out / "checkpoint"
    run.model.eval()
    save_base(run.model, run.processor, checkpoint)
    (out / RESUME_FILE).unlink(missing_ok=True)
    run.ref_model = run.optimizer = None  # their memory, before the evaluation loads a model
    metrics: dict[str, Any] = training_summary(rows, progress.excluded)
    metrics.update(stopped_by=stopped_by, train_seconds=round(train_seconds, 2),
                   seconds_per_step=round(train_seconds / max(len(rows), 1), 3), threads=threads,
                   init=str(run.init_path), checkpoint=str(checkpoint),
                   n_train_tasks=len(run.tasks), trajectories=len(progress.excluded),
                   engine="cpu", batching=run.backend.stats.to_dict(),
                   task_file=str(task_path(run.run_dir, config)),
                   pool_tasks_in_sft_data=run.pool_seen,
                   device=str(next(run.model.parameters()).device),
                   rollout_tokens=dict(run.backend.usage))
    if getattr(run.backend, "kv", None) is not None:  # prefilled and cached tokens
        metrics["generation"] = run.backend.kv.stats.to_dict()
    if screened is not None:
        metrics["prescreen"] = screened
    if start is not None:
        evals = evaluate_rl(run.run_dir, start, checkpoint, run.model, run.processor, config,
                            log)
        metrics.update(eval_summary(evals))
        metrics["training_budget_s"] = round(budget_s, 1) if budget_s is not None else None
    return metrics


def check_one_process(world_size: int | None = None) -> None:
    """Refuse a launch on several processes: the cpu engine neither splits the rollouts nor
    averages gradients, so each process would train its own copy and overwrite the others' files."""
    world_size = int(os.environ.get("WORLD_SIZE", "1")) if world_size is None else world_size
    if world_size > 1:
        raise InputError(f"the cpu engine runs on one process, not {world_size}: launch it "
                         "without accelerate or torchrun, or use engine trl with vLLM")


def run_grpo_cpu(run_dir: str | Path, config: GRPOConfig, *,
                 log: Callable[[str], None] = print) -> dict:
    """The cpu engine (see the module docstring), in stages that hand each other their state."""
    import torch

    check_one_process()
    wall_start = time.perf_counter()
    # 1. the inputs, the policy and the rollout pieces
    threads = set_threads(config.threads) if config.use_cpu else torch.get_num_threads()
    torch.manual_seed(config.seed)
    run = prepare_run(run_dir, config, log)
    # 2. the training tasks: an interrupted run's, else the pre-screen's or the whole pool
    resumed = load_training_state(run.out, config)
    screened = choose_tasks(run, resumed, log)
    sampler = TaskSampler(run.tasks, config.difficulty_mix, seed=config.seed)
    log(f"[grpo] cpu engine: {len(run.tasks)} training tasks, start {run.init_path}; "
        f"P={config.prompts_per_step} x G={config.generations}, lr {config.learning_rate:g}, "
        f"mu {config.mu}, beta {config.beta:g}, T {config.temperature:g}; {threads} thread(s)")
    # 3. the start's evaluation, then what is left of the time for training
    start, budget_s = training_budget(run, wall_start, log)
    # 4. the steps, from where an interrupted run stopped
    progress = restore_progress(run, sampler, resumed, screened, log)
    stopped_by, train_seconds = train_steps(run, sampler, progress, screened, budget_s)
    log(f"[grpo] {len(progress.rows)} steps in {train_seconds:.1f} s "
        f"({train_seconds / max(len(progress.rows), 1):.1f} s/step), "
        f"stopped by {stopped_by}; batching {run.backend.stats.to_dict()}")
    # 5. the trained model saved and evaluated
    metrics = finish(run, progress, screened, start, budget_s, stopped_by, train_seconds, threads,
                     log)
    metrics["seconds"] = round(time.perf_counter() - wall_start + progress.earlier_s, 2)
    metrics["config"] = config.to_dict()
    run.rd.write_metrics(config.name, metrics)
    write_manifest(run_dir, config.name, config.to_dict(), metrics["seconds"])
    return metrics
