"""The evaluation runner: any policy through the ReAct loop on tasks, judged (paper 2.4, 3.2, 4).

``evaluate(run_dir, tasks, policy, ...) -> metrics`` runs one episode per task through the loop
the teacher, SFT and GRPO share, judges it and reports Pass@1 and its breakdowns. The cost is
``wall_seconds_per_task`` (wall time over the tasks run); ``seconds_per_task`` is latency, which
includes waiting for the rest of a batch.

Resumable: ``RUN_DIR/eval/<name>/results.jsonl`` is keyed by task id (a changed task, or one that
ended on a policy error, runs again) and ``config.json`` refuses a rerun with other settings.
Outputs besides: ``results.csv``, ``metrics.json``, and the summary ``RUN_DIR/eval/metrics.json``
and ``table.csv`` (one entry per policy name: the paper's table 1 / figure 4).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from vsearcher_lite.agent.judge import Judge, make_judge
from vsearcher_lite.agent.loop import run_episode
from vsearcher_lite.agent.task import Task
from vsearcher_lite.backends.toolbox import make_toolbox
from vsearcher_lite.chat import ChatBackend, usage_of
from vsearcher_lite.config import EvalConfig
from vsearcher_lite.manifest import scrub_secrets, update_json_file, utc_now, write_manifest
from vsearcher_lite.redaction import redact
from vsearcher_lite.runio import (
    InputError,
    JsonlLog,
    RunDir,
    atomic_write_json,
    atomic_write_text,
    check_folder_name,
    read_json,
)
from vsearcher_lite.scoring.identity import (
    changed_settings,
    guard_resume,
    previous_results,
    run_identity,
    stored_identity,
)
from vsearcher_lite.scoring.metrics import (
    comparison_csv,
    eval_metrics,
    result_record,
    results_csv,
    summary_entry,
    wall_time,
)
from vsearcher_lite.scoring.policies import Policy, make_policy, slug
from vsearcher_lite.world.store import open_world

# ``EvalConfig`` is imported from here too.
__all__ = ["EvalConfig", "adopt_results", "check_name", "eval_dir", "evaluate", "load_results",
           "read_summary", "resolve_judge", "run_pending", "toolbox_source", "update_summary"]

STAGE = "eval"


def eval_dir(run_dir: str | Path, name: str) -> Path:
    return Path(run_dir) / STAGE / name


def check_name(name: str) -> str:
    """An eval name is a folder name: letters, digits, ``.``, ``_`` and ``-``.

    >>> check_name("sft-v2")
    'sft-v2'
    """
    return check_folder_name(name, "eval name", hint=f"; e.g. {slug(str(name or 'x'))!r}")


def resolve_judge(judge: Judge | str | None, config: EvalConfig) -> Judge:
    """A judge from an object or a spec; ``"llm"`` alone means the environment's chat endpoint."""
    spec = config.judge if judge is None else judge
    if spec == "llm":
        spec = "llm:openai"
    try:
        return make_judge(spec)
    except ValueError as exc:
        if isinstance(spec, str) and spec.startswith("llm"):
            raise InputError(f"the LLM judge ({spec!r}; --judge match is the offline one): "
                             f"{exc}") from None
        raise InputError(str(exc)) from None


def adopt_results(run_dir: str | Path, source: str, name: str, tasks: list[Task],
                  identity: dict) -> int:
    """Copy into ``eval/<name>`` the results ``eval/<source>`` holds for ``tasks`` when both have
    the same identity, so notebook 08 resumes from what the SFT and GRPO stages measured; the
    number copied."""
    identity = stored_identity(identity, run_dir)
    src = eval_dir(run_dir, source)
    if source == name or not all((src / f).is_file() for f in ("config.json", "results.jsonl")):
        return 0
    if changed_settings(read_json(src / "config.json"), identity, run_dir):
        return 0
    out = eval_dir(run_dir, name)
    out.mkdir(parents=True, exist_ok=True)
    target = JsonlLog(out / "results.jsonl", key="id")
    has_results = target.path.exists() and target.path.stat().st_size > 0
    if (has_results and (out / "config.json").is_file()
            and changed_settings(read_json(out / "config.json"), identity, run_dir)):
        return 0  # evaluate() refuses this name itself, and says why
    have = previous_results(target, tasks)
    found = previous_results(JsonlLog(src / "results.jsonl", key="id"), tasks)
    new = [found[t.id] for t in tasks if t.id in found and t.id not in have]
    for record in new:
        target.append(record)
    if new:
        atomic_write_json(out / "config.json", identity)
    return len(new)


def update_summary(run_dir: str | Path, name: str, metrics: dict) -> dict:
    """Put this evaluation into ``eval/metrics.json`` (merge-safe) and rewrite ``table.csv``."""
    stage = RunDir(run_dir).stage(STAGE)

    def put(summary: dict) -> None:
        summary[name] = summary_entry(metrics)

    summary = update_json_file(stage / "metrics.json", put)
    atomic_write_text(stage / "table.csv", comparison_csv(summary))
    return summary


def read_summary(run_dir: str | Path) -> dict:
    """``RUN_DIR/eval/metrics.json``: every policy evaluated so far, keyed by name."""
    path = Path(run_dir) / STAGE / "metrics.json"
    return read_json(path) if path.exists() else {}


def toolbox_source(toolbox: Any, run_dir: str | Path,
                   config: EvalConfig) -> tuple[Callable[[], Any], list]:
    """``(get, made)``: ``get()`` gives the calling thread its toolbox; ``made`` lists those
    handed out. ``toolbox`` is a toolbox, ``None`` for the run's own (built once on first use: it
    is thread-safe and costly), or a function called once per thread (for one not to be shared).
    """
    made: list[Any] = []
    lock = threading.Lock()
    if toolbox is None or not (callable(toolbox) and not hasattr(toolbox, "call")):
        if toolbox is not None:
            made.append(toolbox)

        def get_shared():
            if not made:
                with lock:
                    if not made:
                        made.append(make_toolbox(
                            run_dir, world=config.world, cache_mode=config.cache_mode,
                            top_k=config.top_k, observations=config.prompt_variant))
            return made[0]

        return get_shared, made
    local = threading.local()

    def get_own():
        box = getattr(local, "toolbox", None)
        if box is None:
            box = local.toolbox = toolbox()
            with lock:
                if all(box is not other for other in made):
                    made.append(box)
        return box

    return get_own, made


def run_pending(todo: list[Task], run_task: Callable[[Task], dict], log: JsonlLog,
                concurrency: int, *, progress: bool = True, desc: str = "eval") -> list[dict]:
    """Run ``run_task`` over ``todo`` on ``concurrency`` threads, logging each record as it
    finishes (an interrupted run keeps them); the records, in that order."""
    from vsearcher_lite.runtime import progress_bar

    records = []
    pool = ThreadPoolExecutor(max_workers=max(1, concurrency))
    try:
        with progress_bar(desc, len(todo), enabled=progress) as bar:
            futures = [pool.submit(run_task, t) for t in todo]
            for future in as_completed(futures):
                record = future.result()
                log.append(record)  # one writer (this thread), whole lines
                records.append(record)
                bar.update(1)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return records


def evaluate(run_dir: str | Path, tasks: list[Task], policy: str | ChatBackend | Policy, *,
             judge: Judge | str | None = None, toolbox: Any = None,
             concurrency: int | None = None, name: str | None = None,
             config: EvalConfig | None = None, benchmark: str = "", fresh: bool = False) -> dict:
    """Evaluate ``policy`` (a ``make_policy`` spec, a ``ChatBackend`` or a ``Policy``) on
    ``tasks``; writes the module docstring's outputs and returns the metrics. ``toolbox`` as in
    ``toolbox_source``; ``name`` (default: the policy's) is the folder under ``RUN_DIR/eval/``."""
    config = config or EvalConfig.for_profile("cpu")
    if concurrency is not None:
        config = replace(config, concurrency=concurrency)  # the caller's config stays as it was
    config.check()
    tasks = list(tasks)
    if not tasks:
        raise InputError("no tasks to evaluate")
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise InputError(f"task id {dup!r} appears more than once")
    policy = make_policy(policy, config)
    judge_obj = resolve_judge(judge, config)
    name = check_name(name or policy.name)
    if toolbox is None and policy.tools and config.world == "sandbox":
        open_world(run_dir)  # a missing world fails here, before anything is written
    thread_toolbox, made = toolbox_source(toolbox, run_dir, config)
    out = eval_dir(run_dir, name)
    out.mkdir(parents=True, exist_ok=True)
    run = RunDir(run_dir)  # results name the run's images and checkpoints relative to it
    identity = stored_identity(run_identity(policy, config, judge_obj), run_dir)
    guard_resume(out, identity, fresh)

    limits = config.limits(tools=policy.tools, batched=policy.batch > 1)

    def run_task(task: Task) -> dict:
        start = time.perf_counter()
        traj = run_episode(policy.for_task(task), thread_toolbox(), task, limits=limits,
                           sampling=config.sampling(task.id), today=config.today,
                           variant=config.prompt_variant)
        verdict = judge_obj.judge(task.question, task.answer, traj.prediction, task.aliases)
        seconds = time.perf_counter() - start
        return run.relative(result_record(task, traj, verdict, policy, seconds,
                                          config.keep_trajectories))

    log = JsonlLog(out / "results.jsonl", key="id")
    done = previous_results(log, tasks)
    todo = [t for t in tasks if t.id not in done]
    start = time.perf_counter()
    threads = max(config.concurrency, policy.batch)  # a batcher needs its whole batch running
    for record in run_pending(todo, run_task, log, threads, progress=config.progress,
                              desc=f"eval {name}"):
        done[record["id"]] = record
    elapsed = time.perf_counter() - start
    stored = out / "metrics.json"
    previous = read_json(stored) if not todo and stored.is_file() else {}

    records = [done[t.id] for t in tasks]
    atomic_write_text(out / "results.csv", results_csv(records))
    metrics = eval_metrics(records)
    metrics.update(
        name=name, policy=policy.name, policy_spec=identity["policy_spec"], tools=policy.tools,
        benchmark=redact(benchmark), judge=identity["judge"],
        judge_failures=getattr(judge_obj, "failures", 0), evaluated_this_run=len(todo),
        seconds=round(elapsed, 3), **wall_time(elapsed, len(todo), previous),
        settings=scrub_secrets(config.to_dict()), updated_at=utc_now())
    caches = [b.cache for b in made if getattr(b, "cache", None) is not None]
    if caches:
        metrics["tool_cache"] = {"hits": sum(c.hits for c in caches),
                                 "misses": sum(c.misses for c in caches)}
    if policy.shared is not None and usage_of(policy.shared):
        metrics["policy_usage"] = usage_of(policy.shared)
    metrics = run.relative(metrics)
    atomic_write_json(out / "metrics.json", metrics)
    update_summary(run_dir, name, metrics)
    write_manifest(run_dir, f"{STAGE}/{name}", {
        **identity, "seed": config.seed, "benchmark": benchmark, "n_tasks": len(tasks),
        "settings": config.to_dict()}, elapsed)
    return metrics


def load_results(run_dir: str | Path, name: str) -> list[dict]:
    """Every result record of an evaluation (latest per task id, in file order)."""
    path = eval_dir(run_dir, name) / "results.jsonl"
    if not path.exists():
        raise InputError(f"{path} does not exist: run `vsearcher-lite eval --name {name}` first")
    latest = {str(r.get("id")): r for r in JsonlLog(path).records()}
    return RunDir(run_dir).resolve(list(latest.values()))
