"""The GRPO stage's evaluation, shared by both engines: the start (the SFT checkpoint) and the
RL model on the same held-out tasks with the same greedy settings, and their paired difference.
The start's results are reused from ``eval/sft`` when a few re-run tasks come out the same.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from vsearcher_lite.agent.loop import run_episode
from vsearcher_lite.chat.batched import BatchedTransformersChat, run_lockstep
from vsearcher_lite.rl.config import GRPOConfig
from vsearcher_lite.rl.objective import paired_difference
from vsearcher_lite.rl.steps import STAGE
from vsearcher_lite.runio import InputError
from vsearcher_lite.scoring.evaluate import eval_dir, evaluate, load_results, toolbox_source
from vsearcher_lite.scoring.policies import Policy
from vsearcher_lite.training.heldout import heldout_tasks


def batched_policy(name: str, spec: str, model, processor, config: GRPOConfig):
    """An evaluation ``Policy`` whose episodes generate together on one batched backend."""
    backend = BatchedTransformersChat(model, processor, max_batch=config.eval_batch,
                                      max_wait_s=0.05)
    return Policy(name, spec, lambda task: backend, shared=backend, batch=config.eval_batch)


def same_episode(stored: dict, trajectory) -> bool:
    """Whether a stored record and a fresh trajectory of the same task have the same termination,
    prediction and turn texts."""
    turns = [t.get("text") for t in (stored.get("trajectory") or {}).get("turns", [])]
    return (stored.get("termination") == trajectory.termination
            and stored.get("prediction") == trajectory.prediction
            and turns == [t.text for t in trajectory.turns])


def stale_reused_results(run_dir: str | Path, name: str, tasks: list, backend, eval_config,
                         n_check: int) -> list[str] | None:
    """Re-run up to ``n_check`` tasks stored under ``eval/<name>`` (writing nothing); the ids
    whose episode differs, or ``None`` when nothing is stored. Results go stale without their
    settings changing: a rebuilt world or changed tool code gives other observations."""
    if not (eval_dir(run_dir, name) / "results.jsonl").is_file():
        return None
    stored = {r["id"]: r for r in load_results(run_dir, name)}
    check = [t for t in tasks if t.id in stored
             and stored[t.id].get("question") == t.question][:n_check]
    if not check:
        return None
    thread_toolbox, _ = toolbox_source(None, run_dir, eval_config)  # as evaluate() builds it

    def run_one(task):
        return run_episode(backend, thread_toolbox(), task, limits=eval_config.limits(),
                           sampling=eval_config.sampling(task.id),
                           today=eval_config.today, variant=eval_config.prompt_variant)

    fresh = run_lockstep(backend, check, run_one)
    return [t.id for t, traj in zip(check, fresh) if not same_episode(stored[t.id], traj)]


def evaluate_start(run_dir: str | Path, init_path: Path, model, processor, config: GRPOConfig,
                   log: Callable[[str], None]) -> dict:
    """Evaluate the start (``model``) as ``eval/sft`` (``eval/init`` for another ``--init``),
    reusing stored results that pass the re-run check, else afresh as ``eval/<name>-sft``; the
    metrics, and ``seconds_per_task`` for budgeting the RL evaluation."""
    tasks = heldout_tasks(run_dir, config)
    eval_config = config.eval  # the SFT stage's, so that its eval/sft results can be reused
    is_run_sft = init_path.resolve() == (Path(run_dir) / "sft" / "checkpoint").resolve()
    name = "sft" if is_run_sft else "init"
    spec = f"transformers:{init_path.resolve()}"  # absolute: named alike from any folder
    out: dict[str, Any] = {"tasks": tasks, "reuse": "none stored"}
    policy = batched_policy(name, spec, model, processor, config)
    t0 = time.perf_counter()
    fresh, n_checked = False, 0
    if config.reuse_sft_eval:
        stale = stale_reused_results(run_dir, name, tasks, policy.shared, eval_config,
                                     config.reuse_check_tasks)
        if stale:
            log(f"[grpo] eval/{name} is stale ({len(stale)} re-run task(s) differ, e.g. "
                f"{stale[0]}); evaluating the start afresh as {config.name}-{name}")
            name, fresh, out["reuse"] = f"{config.name}-{name}", True, "stale"
        elif stale is not None:
            out["reuse"], n_checked = "checked", min(config.reuse_check_tasks, len(tasks))
    else:
        name, fresh, out["reuse"] = f"{config.name}-{name}", True, "off"
    t_checked = time.perf_counter()
    try:
        metrics = evaluate(run_dir, tasks, replace(policy, name=name), name=name,
                           config=eval_config, benchmark="heldout", fresh=fresh)
    except InputError as exc:
        if "other settings" not in str(exc):
            raise
        name, out["reuse"] = f"{config.name}-{name}", "other settings"
        log("[grpo] the stored evaluation of the start has other settings; evaluating it as "
            f"{name}")
        t_checked = time.perf_counter()
        metrics = evaluate(run_dir, tasks, replace(policy, name=name), name=name,
                           config=eval_config, benchmark="heldout", fresh=True)
    ran = metrics.get("evaluated_this_run") or 0
    # reused results: the stored evaluation's own wall time per task (a re-run check of a few
    # tasks decodes in a small batch and would overstate it)
    per_task = ((time.perf_counter() - t_checked) / ran if ran else
                metrics.get("wall_seconds_per_task")
                or ((t_checked - t0) / n_checked if n_checked else None))
    out.update(name=name, metrics=metrics, seconds=round(time.perf_counter() - t0, 2),
               evaluated_this_run=ran, seconds_per_task=per_task)
    log(f"[grpo] eval {name}: accuracy {metrics.get('pass_at_1')} on {len(tasks)} held-out tasks "
        f"({out['seconds']} s, {ran} run now, reuse: {out['reuse']})")
    return out


def evaluate_rl(run_dir: str | Path, start: dict, rl_checkpoint: Path, rl_model, processor,
                config: GRPOConfig, log: Callable[[str], None]) -> dict:
    """Evaluate the RL policy on the start's tasks and settings; with the paired difference."""
    tasks = start["tasks"]
    t0 = time.perf_counter()
    rl_name = "rl" if config.name == STAGE else f"{config.name}-rl"
    rl_metrics = evaluate(run_dir, tasks,
                          batched_policy(rl_name, f"transformers:{Path(rl_checkpoint).resolve()}",
                                         rl_model, processor, config),
                          name=rl_name, config=config.eval, benchmark="heldout",
                          fresh=True)
    rl_seconds = round(time.perf_counter() - t0, 2)
    log(f"[grpo] eval {rl_name}: accuracy {rl_metrics.get('pass_at_1')} ({rl_seconds} s) on "
        f"{len(tasks)} held-out tasks")
    by_id_base = {r["id"]: r for r in load_results(run_dir, start["name"])}
    by_id_rl = {r["id"]: r for r in load_results(run_dir, rl_name)}
    ids = [t.id for t in tasks]
    diff = paired_difference([float(by_id_base[i]["correct"]) for i in ids],
                             [float(by_id_rl[i]["correct"]) for i in ids])
    return {"base_name": start["name"], "rl_name": rl_name, "base": start["metrics"],
            "rl": rl_metrics, "paired": diff,
            "base_seconds": start["seconds"], "rl_seconds": rl_seconds,
            "base_evaluated_this_run": start["evaluated_this_run"], "base_reuse": start["reuse"]}


def evaluate_pair(run_dir: str | Path, init_path: Path, rl_checkpoint: Path, rl_model, processor,
                  config: GRPOConfig, log: Callable[[str], None]) -> dict:
    """Both evaluations after training (the trl engine): the start, then RL."""
    from vsearcher_lite.model.tiny import load_base

    base_model, _ = load_base(init_path, dtype=config.torch_dtype(),
                              device=str(next(rl_model.parameters()).device))
    start = evaluate_start(run_dir, init_path, base_model, processor, config, log)
    del base_model
    return evaluate_rl(run_dir, start, rl_checkpoint, rl_model, processor, config, log)


def eval_summary(evals: dict) -> dict:
    """The held-out part of ``metrics.json``."""
    base, rl, diff = evals["base"], evals["rl"], evals["paired"]
    return {
        "heldout_accuracy_sft": base.get("pass_at_1"),
        "heldout_accuracy_rl": rl.get("pass_at_1"),
        "heldout_paired_diff": round(diff.mean, 5),
        "heldout_paired_se": round(diff.se, 5),
        "heldout_n": diff.n,
        "heldout_flips_gained": diff.gained,
        "heldout_flips_lost": diff.lost,
        "heldout_format_valid_sft": base.get("format_valid_rate"),
        "heldout_format_valid_rl": rl.get("format_valid_rate"),
        "heldout_tool_calls_sft": base.get("mean_tool_calls"),
        "heldout_tool_calls_rl": rl.get("mean_tool_calls"),
        "heldout_terminations_sft": base.get("terminations"),
        "heldout_terminations_rl": rl.get("terminations"),
        "heldout_format_errors_sft": base.get("format_errors"),
        "heldout_format_errors_rl": rl.get("format_errors"),
        "heldout_eval_names": [evals["base_name"], evals["rl_name"]],
        "heldout_eval_seconds": {"sft": evals["base_seconds"], "rl": evals["rl_seconds"]},
        "heldout_sft_evaluated_this_run": evals["base_evaluated_this_run"],
        "heldout_sft_reuse": evals["base_reuse"],
    }
