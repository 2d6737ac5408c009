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
from pathlib import Path
from typing import Any, Callable

from vsearcher_lite.agent.judge import make_judge
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
from vsearcher_lite.rl.prescreen import earlier_prescreen, run_prescreen
from vsearcher_lite.rl.rollout import (
    RolloutSample,
    RolloutTiming,
    TrajectoryEncoder,
    rollout_groups,
)
from vsearcher_lite.rl.steps import has_signal, step_row, steps_csv, training_summary
from vsearcher_lite.rl.update import assign_advantages, score_samples, update_policy
from vsearcher_lite.runio import (
    JsonlLog,
    RunDir,
    atomic_write_text,
    check_same_settings,
    resume_identity,
    write_jsonl,
)
from vsearcher_lite.runtime import resolve_device, set_threads, training_budget_s
from vsearcher_lite.training.checkpoint import freeze_vision, suppress_vision_tokens

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
             "draw_rounds": 0}
    for r in range(rounds):
        tasks = sampler.draw(want)
        groups = rollout(tasks, r)
        stats["draw_rounds"] += 1
        for task, group in zip(tasks, groups):
            sampler.record(task.id, [s.correct and not s.format_failure for s in group])
            drawn.extend(group)
            stats["groups"] += 1
            signal = has_signal(group)
            stats["zero_variance_groups"] += int(not signal)
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
    """``(model, processor)`` on ``config.device``, the vision tower frozen (as in the paper)."""
    from vsearcher_lite.model.tiny import load_base

    model, processor = load_base(init_path, dtype=config.torch_dtype(),
                                 device=str(resolve_device(config.device)))
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


def run_grpo_cpu(run_dir: str | Path, config: GRPOConfig, *,
                 log: Callable[[str], None] = print) -> dict:
    """The cpu engine (see the module docstring)."""
    import torch
    from tqdm.auto import tqdm

    from vsearcher_lite.model.tiny import save_base

    wall_start = time.perf_counter()
    threads = set_threads(config.threads) if config.use_cpu else torch.get_num_threads()
    torch.manual_seed(config.seed)
    rd = RunDir(run_dir)
    init_path = resolve_init(run_dir, config)
    tasks = train_tasks(run_dir, config)
    pool_seen = check_pool_unseen(run_dir, tasks, config, log)
    model, processor = load_policy(init_path, config)
    # a run that will resume has its screened tasks saved
    resuming = will_resume(rd.stage(config.name, create=False), config)
    earlier = None if resuming else earlier_prescreen(tasks, config, init_path)
    # made once the tasks, the model and an earlier pre-screen have loaded: a bad input leaves no
    # folder
    out = rd.stage(config.name)
    ref_model = copy.deepcopy(model).eval().requires_grad_(False) if config.beta > 0 else None
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate,
                                  betas=(config.adam_beta1, config.adam_beta2),
                                  weight_decay=config.weight_decay)
    encoder = TrajectoryEncoder(processor)
    backend = BatchedTransformersChat(model, processor,
                                      max_batch=config.rollout_batch or config.batch_trajectories,
                                      max_new_tokens=config.max_tokens)
    toolbox = rollout_toolbox(run_dir, config)
    judge = make_judge(config.judge)
    settings = rollout_settings(config)
    screened = None
    resumed = load_training_state(out, config)
    if resumed is not None:  # the screened tasks of the interrupted run, without screening again
        screened = resumed["screened"]
        by_id = {t.id: t for t in tasks}
        tasks = [by_id[i] for i in resumed["task_ids"]]
    elif config.curriculum == "prescreen":
        screened = run_prescreen(tasks, backend, toolbox, settings, judge, config, out, log,
                                 init_path, earlier)
        tasks = screened.pop("tasks")
    sampler = TaskSampler(tasks, config.difficulty_mix, seed=config.seed,
                          curriculum="mix" if config.curriculum == "prescreen"
                          else config.curriculum)
    log(f"[grpo] cpu engine: {len(tasks)} training tasks, start {init_path}; "
        f"P={config.prompts_per_step} x G={config.generations}, lr {config.learning_rate:g}, "
        f"mu {config.mu}, beta {config.beta:g}, T {config.temperature:g}; {threads} thread(s)")

    start = None
    rl_estimate = None
    if config.evaluate:  # the start first: its time tells how much is left for training
        start = evaluate_start(run_dir, init_path, model, processor, config, log)
        if start["seconds_per_task"] is not None:
            rl_estimate = start["seconds_per_task"] * len(start["tasks"]) * RL_EVAL_SLACK
    budget_s = training_budget_s(config.minutes, config.total_minutes,
                                 time.perf_counter() - wall_start,
                                 rl_estimate or 0.0, SAVE_MARGIN_S)
    if budget_s is not None:
        log(f"[grpo] training budget {budget_s:.0f} s "
            f"(RL evaluation estimated at {rl_estimate or 0:.0f} s)")

    rows: list[dict] = []
    excluded_flags: list[bool] = []
    step = 0
    earlier_s = 0.0
    if resumed is None:
        (out / "rollouts.jsonl").unlink(missing_ok=True)  # a rerun trains from the start again
    else:
        model.load_state_dict(resumed["model"])
        optimizer.load_state_dict(resumed["optimizer"])
        sampler.restore(resumed["sampler"])
        torch.set_rng_state(resumed["torch_rng"])
        backend.stats = resumed["batch_stats"] or backend.stats
        rows, excluded_flags, step = resumed["rows"], resumed["excluded"], resumed["step"]
        # rollouts of steps after the saved one are sampled again
        kept = [r for r in JsonlLog(out / "rollouts.jsonl", key="id").records() if r["step"] < step]
        write_jsonl(out / "rollouts.jsonl", kept)
        log(f"[grpo] resuming after step {step} from {out / RESUME_FILE}")
        # the stage's time before the interruption: its training steps and its pre-screen
        earlier_s = (rows[-1]["seconds"] if rows else 0.0) + ((screened or {}).get("seconds")
                                                              or 0.0)
    drop_later_checkpoints(out, step)
    rollout_log = JsonlLog(out / "rollouts.jsonl", key="id")
    max_steps = config.max_steps or 10**9
    stopped_by = "steps"
    train_start = time.perf_counter()
    offset_s = rows[-1]["seconds"] if rows else 0.0  # training time before a resume
    last_step_s = 0.0
    bar = tqdm(total=config.max_steps, initial=step, desc="grpo", disable=not config.progress,
               leave=False)
    while step < max_steps:
        elapsed = time.perf_counter() - train_start
        if budget_s is not None and step > 0 and elapsed + last_step_s > budget_s:
            stopped_by = "time"
            break
        t0 = time.perf_counter()
        timing = RolloutTiming()

        def rollout(tasks, draw_round, step=step, timing=timing):
            # later rounds number their samples on, so a task drawn twice in a step gets other seeds
            return rollout_groups(backend, toolbox, tasks, config.generations, settings, judge,
                                  encoder, step=step,
                                  first_sample=[draw_round * config.generations] * len(tasks),
                                  timing=timing)

        groups, drawn, draw_stats = draw_groups(sampler, rollout, config)
        samples = [s for g in groups for s in g]
        assign_advantages(groups, config)
        t1 = time.perf_counter()
        score = score_samples(model, samples, encoder, config, ref_model)
        update = update_policy(model, optimizer, samples, encoder, config)
        t2 = time.perf_counter()
        last_step_s = t2 - t0
        times = {"rollout_seconds": t1 - t0, "update_seconds": t2 - t1, "step_seconds": t2 - t0,
                 "seconds": offset_s + t2 - train_start}
        row = step_row(step, drawn, draw_stats, score, update, times, config.learning_rate)
        rows.append(row)
        excluded_flags.extend(s.excluded for s in drawn)
        for s in drawn:
            rollout_log.append({"id": f"{step}:{s.task_id}:{s.sample_index}", "step": step,
                                **s.summary()})
        atomic_write_text(out / "steps.csv", steps_csv(rows))
        bar.update(1)
        bar.set_postfix(reward=row["reward"], fmt_fail=row["format_failure_share"],
                        trained=row["trained_trajectories"])
        step += 1
        if config.checkpoint_every and step % config.checkpoint_every == 0:
            save_base(model, processor, kept_checkpoint(out, step))
        if config.save_every and step % config.save_every == 0:
            save_training_state(out, step, model, optimizer, sampler, rows, excluded_flags,
                                [t.id for t in tasks], screened, config, backend.stats)
    bar.close()
    # training time over every resume (each row carries it)
    train_seconds = rows[-1]["seconds"] if rows else time.perf_counter() - train_start
    log(f"[grpo] {len(rows)} steps in {train_seconds:.1f} s "
        f"({train_seconds / max(len(rows), 1):.1f} s/step), "
        f"stopped by {stopped_by}; batching {backend.stats.to_dict()}")

    checkpoint = out / "checkpoint"
    model.eval()
    save_base(model, processor, checkpoint)
    (out / RESUME_FILE).unlink(missing_ok=True)  # the finished run needs no resume
    del ref_model, optimizer
    metrics: dict[str, Any] = training_summary(rows, excluded_flags)
    metrics.update(stopped_by=stopped_by, train_seconds=round(train_seconds, 2),
                   seconds_per_step=round(train_seconds / max(len(rows), 1), 3), threads=threads,
                   init=str(init_path), checkpoint=str(checkpoint), n_train_tasks=len(tasks),
                   trajectories=len(excluded_flags), engine="cpu", batching=backend.stats.to_dict(),
                   task_file=str(task_path(run_dir, config)), pool_tasks_in_sft_data=pool_seen,
                   device=str(next(model.parameters()).device), rollout_tokens=dict(backend.usage))
    if getattr(backend, "kv", None) is not None:  # prefilled and cached tokens
        metrics["generation"] = backend.kv.stats.to_dict()
    if screened is not None:
        metrics["prescreen"] = screened
    if start is not None:
        evals = evaluate_rl(run_dir, start, checkpoint, model, processor, config, log)
        metrics.update(eval_summary(evals))
        metrics["training_budget_s"] = round(budget_s, 1) if budget_s is not None else None
    # summed over resumes
    metrics["seconds"] = round(time.perf_counter() - wall_start + earlier_s, 2)
    metrics["config"] = config.to_dict()
    rd.write_metrics(config.name, metrics)
    write_manifest(run_dir, config.name, config.to_dict(), metrics["seconds"])
    return metrics
