"""Stage `trajectories`: teacher trajectories and rejection sampling (paper 2.2 and A.3).

``generate_trajectories`` runs the teacher through the ReAct loop on every filtered training
task (``samples_per_task`` times each), judges each final answer, and keeps the trajectories
that end correct and pass the strict format check: the SFT data. The paper used
Gemini-3-Pro-Thinking judged by Qwen2.5-72B-Instruct; the sandbox defaults are the heuristic
teacher and the match judge (cpu profile: also top-3 results, the compact prompt and a
2-minute budget per trajectory instead of 2.5 hours).

Resumable: ``rollouts.jsonl`` is an append-only log keyed by ``<task id>#<sample>``; a rerun
reuses only rollouts of the same ``rollout_identity`` and runs again those that ended on a
policy error. Outputs in ``RUN_DIR/trajectories/``: ``rollouts.jsonl``, ``accepted.jsonl``,
``rollouts.csv``, ``export/`` (``export.export_trajectories``) and ``metrics.json``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from vsearcher_lite.agent.export import export_trajectories
from vsearcher_lite.agent.format import strict_format_check
from vsearcher_lite.agent.judge import Judge, make_judge
from vsearcher_lite.agent.loop import (
    TERMINATIONS,
    TRANSIENT_TERMINATIONS,
    EpisodeLimits,
    Sampling,
    Trajectory,
    check_sampling,
    replay_mismatches,
    run_episode,
)
from vsearcher_lite.agent.protocol import SANDBOX_TODAY, prompt_variant_for
from vsearcher_lite.agent.task import Task, in_level_order
from vsearcher_lite.agent.task import read_tasks as load_tasks
from vsearcher_lite.agent.teacher import HeuristicTeacher
from vsearcher_lite.chat import ChatBackend, roles_usage, usage_of
from vsearcher_lite.options import option, options_given
from vsearcher_lite.profiles import load_profile, with_overrides
from vsearcher_lite.runio import (
    InputError,
    JsonlLog,
    RunDir,
    atomic_write_text,
    csv_text,
    mean,
    read_jsonl,
    write_jsonl,
)
from vsearcher_lite.runtime import progress_bar
from vsearcher_lite.synthesis.filters import run_filter
from vsearcher_lite.synthesis.inject import InjectConfig
from vsearcher_lite.synthesis.sources import open_sandbox

STAGE = "trajectories"
# Settings that shape an episode (``rollout_identity``)
ROLLOUT_SETTINGS = ("prompt_variant", "top_k", "today", "max_tool_calls", "max_context_chars",
                    "seed", "world")
# ... and those only a chat-model teacher reads (the heuristic one reads mistake_rate)
SAMPLING_SETTINGS = ("temperature", "top_p", "max_tokens")


@dataclass
class TrajectoryConfig:
    """Settings of the trajectories stage; ``for_profile`` gives each profile's preset."""

    teacher: str = option("heuristic", "'heuristic' (sandbox default) or a chat spec, e.g. "
                          "openai:MODEL@URL")
    judge: str = option("match", "'match' (sandbox default) or 'llm:<chat spec>'")
    samples_per_task: int = option(2, "trajectories per task (default: the profile's)",
                                   "--samples")
    max_tasks: int | None = option(None, "use at most this many tasks")
    concurrency: int = option(2, "episodes run at once (threads)")
    prompt_variant: str = option("full", "system prompt variant", "--prompt",
                                 choices=("full", "compact"))
    top_k: int = 5
    today: str | None = SANDBOX_TODAY  # None: the local date (live runs)
    mistake_rate: float = 0.1  # heuristic teacher: chance of a hasty wrong pick at each decision
    max_tool_calls: int = 30  # paper A.3
    wall_clock_s: float | None = 2.5 * 3600  # paper A.3
    max_context_chars: int | None = 800_000  # about the paper's 200K tokens
    temperature: float = 0.6  # paper A.3: 0.6 / 0.95 / 10,000 new tokens
    top_p: float = 0.95
    max_tokens: int = 10_000
    seed: int = 0
    world: str = "sandbox"
    profile: str = "cpu"
    task_file: str | None = None  # default: RUN_DIR/filter/train.jsonl
    cache_mode: str = "readwrite"
    export: bool = True
    progress: bool = True

    @classmethod
    def for_profile(cls, profile: str = "cpu", **overrides: Any) -> "TrajectoryConfig":
        preset = {"prompt_variant": prompt_variant_for(profile),
                  **load_profile(profile).get("trajectories", {})}
        preset = with_overrides(cls, profile, preset, overrides, "trajectory")
        config = cls(**preset)
        config.check()
        return config

    def check(self) -> None:
        """Raise ``InputError`` naming the first setting out of range (before any work is done)."""
        for name, flag, value in (("samples_per_task", "--samples", self.samples_per_task),
                                  ("max_tasks", "--max-tasks", self.max_tasks),
                                  ("concurrency", "--concurrency", self.concurrency)):
            whole = isinstance(value, int) and not isinstance(value, bool)
            if value is not None and (not whole or value < 1):
                raise InputError(f"{name} ({flag}) must be a whole number >= 1, got {value!r}")
        if self.max_tool_calls < 0:
            raise InputError(f"max_tool_calls must be >= 0, got {self.max_tool_calls}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise InputError(f"max_tokens must be at least 1, got {self.max_tokens}")
        try:
            check_sampling(self.temperature, self.top_p)
        except ValueError as exc:
            raise InputError(str(exc)) from None

    def limits(self) -> EpisodeLimits:
        return EpisodeLimits(max_tool_calls=self.max_tool_calls, wall_clock_s=self.wall_clock_s,
                             max_context_chars=self.max_context_chars)

    def sampling(self, sample_index: int) -> Sampling:
        return Sampling(temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_tokens,
                        seed=self.seed * 1000 + sample_index)

    def to_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------------------------------------
# Inputs


def task_file(run_dir: str | Path, config: TrajectoryConfig) -> Path:
    return Path(config.task_file) if config.task_file else Path(run_dir) / "filter" / "train.jsonl"


def ensure_tasks(run_dir: str | Path, config: TrajectoryConfig) -> list[Task]:
    """The filtered training tasks; built with the synthesis defaults when they are missing."""
    path = task_file(run_dir, config)
    if not path.exists():
        if config.task_file:
            raise InputError(f"{path}: task file not found")
        inject = InjectConfig.for_profile(config.profile, seed=config.seed,
                                          progress=config.progress)
        run_filter(run_dir, world=config.world, inject_config=inject)
    return load_tasks(path)


def make_toolbox_factory(run_dir: str | Path, config: TrajectoryConfig,
                         cache_mode: str | None = None) -> Callable[[], Any]:
    """A function that builds one toolbox (one per worker thread) on the run's shared tool cache."""
    from vsearcher_lite.backends.toolbox import make_toolbox

    if config.world not in ("sandbox", "live"):
        raise InputError(f"unknown world {config.world!r}: use 'sandbox' or 'live'")
    if config.world == "sandbox":
        open_sandbox(run_dir, seed=config.seed)  # builds RUN_DIR/world when it is missing
    mode = cache_mode or config.cache_mode
    return lambda: make_toolbox(run_dir, world=config.world, cache_mode=mode, top_k=config.top_k,
                                 observations=config.prompt_variant)


def make_teacher_factory(config: TrajectoryConfig,
                         teacher: ChatBackend | None = None) -> Callable[[Task, int], ChatBackend]:
    """``factory(task, sample_index) -> policy``: a teacher per task, or one chat model."""
    if teacher is not None:
        return lambda task, i: teacher
    if config.teacher == "heuristic":
        if config.world != "sandbox":
            raise InputError("the heuristic teacher only works in the sandbox; "
                             "pass --teacher openai:<model>@<base_url>")
        return lambda task, i: HeuristicTeacher(
            task, seed=config.seed * 1000 + i, mistake_rate=config.mistake_rate,
            style=config.prompt_variant, max_tool_calls=config.max_tool_calls)
    from vsearcher_lite.backends.chat import make_chat

    backend = make_chat(config.teacher)
    return lambda task, i: backend


# ---------------------------------------------------------------------------------------------
# One job


def job_key(task_id: str, sample_index: int) -> str:
    return f"{task_id}#{sample_index}"


def all_turns_pass(traj: Trajectory) -> bool:
    """Every assistant turn of the conversation passes the strict format check."""
    turns = [m for m in traj.messages if m.get("role") == "assistant"]
    return bool(turns) and all(strict_format_check(m.get("content")).ok for m in turns)


def rollout_record(task: Task, traj: Trajectory, verdict, identity: dict | None = None) -> dict:
    format_ok = all_turns_pass(traj)
    accepted = traj.termination == "answer" and verdict.correct and format_ok
    traj.meta.update(answer=task.answer, aliases=list(task.aliases), difficulty=task.difficulty,
                     split=task.split, correct=bool(verdict.correct), judge=verdict.to_dict())
    record = {"key": job_key(task.id, traj.sample_index), "task_id": task.id,
              "sample_index": traj.sample_index, "difficulty": task.difficulty,
              "correct": bool(verdict.correct), "format_ok": format_ok,
              "accepted": bool(accepted), "trajectory": traj.to_dict()}
    if identity is not None:
        record["identity"] = identity
    return record


def role_label(spec: str, given: Any = None) -> str:
    """A role's name in metrics: its spec with any key masked, or the given object's name."""
    from vsearcher_lite.manifest import scrub_secrets

    return scrub_secrets(spec if given is None else getattr(given, "name", type(given).__name__))


def rollout_identity(config: TrajectoryConfig, teacher: str, judge: str) -> dict:
    """What a rollout depends on: the teacher, the judge and the settings that shape an episode.

    >>> rollout_identity(TrajectoryConfig(), "heuristic", "match")["mistake_rate"]
    0.1
    """
    d = asdict(config)
    names = ROLLOUT_SETTINGS + (("mistake_rate",) if teacher == "heuristic" else SAMPLING_SETTINGS)
    return {"teacher": teacher, "judge": judge, **{k: d[k] for k in names}}


def is_transient(record: dict) -> bool:
    """A rollout that ended because the policy could not answer (worth running again)."""
    return (record.get("trajectory") or {}).get("termination") in TRANSIENT_TERMINATIONS


def stored_rollouts(log: JsonlLog, wanted: set[str], identity: dict) -> tuple[dict[str, dict], int]:
    """``(latest record per key made with identity, number of other records set aside)``."""
    latest: dict[str, dict] = {}
    other = 0
    for r in log.records():
        if r.get("key") not in wanted:
            continue
        if r.get("identity") == identity:
            latest[r["key"]] = r
        else:
            other += 1
    return latest, other


# ---------------------------------------------------------------------------------------------
# The stage


def generate_trajectories(run_dir: str | Path, config: TrajectoryConfig | None = None, *,
                          tasks: list[Task] | None = None, teacher: ChatBackend | None = None,
                          judge: Judge | None = None,
                          toolbox_factory: Callable[[], Any] | None = None) -> dict:
    """Run the teacher over the tasks, judge, keep the correct trajectories; returns the metrics."""
    config = config or TrajectoryConfig.for_profile("cpu")
    config.check()
    rd = RunDir(run_dir)
    out = rd.stage(STAGE, create=False)  # made by the first write: a failed start leaves nothing
    if tasks is None:
        tasks = ensure_tasks(run_dir, config)
    if config.max_tasks is not None:
        tasks = tasks[: config.max_tasks]
    if not tasks:
        raise InputError(f"no tasks to run the teacher on (looked in {task_file(run_dir, config)})")
    if toolbox_factory is None:
        toolbox_factory = make_toolbox_factory(run_dir, config)
    label = role_label(config.teacher, teacher)
    if teacher is None and config.teacher != "heuristic":
        from vsearcher_lite.backends.chat import make_chat

        teacher = make_chat(config.teacher)  # one backend for every episode, so one usage count
    teacher_for = make_teacher_factory(config, teacher)
    identity = rollout_identity(config, label, role_label(config.judge, judge))
    judge = judge or make_judge(config.judge)
    local = threading.local()
    toolboxes: list[Any] = []

    def run_job(task: Task, sample_index: int) -> dict:
        toolbox = getattr(local, "toolbox", None)
        if toolbox is None:
            toolbox = local.toolbox = toolbox_factory()
            toolboxes.append(toolbox)
        traj = run_episode(teacher_for(task, sample_index), toolbox, task, limits=config.limits(),
                           sampling=config.sampling(sample_index), today=config.today,
                           variant=config.prompt_variant, sample_index=sample_index)
        verdict = judge.judge(task.question, task.answer, traj.prediction, task.aliases)
        return rollout_record(task, traj, verdict, identity)

    log = JsonlLog(out / "rollouts.jsonl", key="key")
    jobs = [(t, i) for t in tasks for i in range(config.samples_per_task)]
    wanted = {job_key(t.id, i): n for n, (t, i) in enumerate(jobs)}
    stored, set_aside = stored_rollouts(log, set(wanted), rd.relative(identity))
    stored = {key: rd.resolve(r) for key, r in stored.items()}
    todo = [(t, i) for t, i in jobs
            if job_key(t.id, i) not in stored or is_transient(stored[job_key(t.id, i)])]
    n_retried = sum(1 for t, i in todo if job_key(t.id, i) in stored)
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, config.concurrency)) as pool, progress_bar(
        "trajectories", len(todo), enabled=config.progress
    ) as bar:
        futures = [pool.submit(run_job, t, i) for t, i in todo]
        for future in as_completed(futures):
            record = future.result()
            log.append(rd.relative(record))  # from this thread only: one writer, whole lines
            stored[record["key"]] = record
            bar.update(1)
    elapsed = time.perf_counter() - start

    records = sorted(stored.values(), key=lambda r: wanted[r["key"]])
    accepted = [r["trajectory"] for r in records if r["accepted"]]
    # as written: a path into the run folder may be absolute in one sample's messages and
    # relative in another's, which the written form no longer tells apart
    written = rd.relative(records)
    write_jsonl(out / "accepted.jsonl", [r["trajectory"] for r in written if r["accepted"]])
    atomic_write_text(out / "rollouts.csv", rollouts_csv(records))
    metrics = trajectory_metrics(written)  # distinct trajectories counted as written
    metrics.update(
        n_tasks=len(tasks),
        generated_this_run=len(todo),
        retried_this_run=n_retried,
        # rollouts of other teachers or settings: kept in rollouts.jsonl, out of every output
        set_aside_rollouts=set_aside,
        seconds=round(elapsed, 3),
        trajectories_per_s=round(len(todo) / elapsed, 2) if elapsed > 0 and todo else None,
        teacher=label,
        judge=getattr(judge, "name", type(judge).__name__),
        judge_failures=getattr(judge, "failures", 0),
        settings={**config.to_dict(), "teacher": label, "judge": identity["judge"]},
    )
    caches = [tb.cache for tb in toolboxes if getattr(tb, "cache", None) is not None]
    if caches:
        metrics["tool_cache"] = {"hits": sum(c.hits for c in caches),
                                 "misses": sum(c.misses for c in caches),
                                 "entries": len(caches[0]), "path": str(caches[0].path)}
    if teacher is not None and usage_of(teacher):
        metrics["teacher_usage"] = usage_of(teacher)
    judge_usage = roles_usage({"judge": judge})
    if judge_usage:
        metrics["judge_usage"] = judge_usage["judge"]
    if config.export:
        metrics["export"] = export_trajectories(accepted, out / "export", run_dir=run_dir)
    rd.write_metrics(STAGE, metrics)
    return metrics


def n_distinct(trajectories: Iterable[dict]) -> int:
    """How many of ``trajectories`` differ: samples of one task that made the same turns (the
    default heuristic teacher's usual case) count once."""
    return len({(t["task_id"], json.dumps(t["messages"], sort_keys=True)) for t in trajectories})


def trajectory_metrics(records: list[dict]) -> dict:
    n = len(records)
    n_accepted = sum(1 for r in records if r["accepted"])
    terminations = Counter(r["trajectory"]["termination"] for r in records)
    tool_counts: Counter = Counter()
    tool_errors = 0
    for r in records:
        for turn in r["trajectory"]["turns"]:
            if turn.get("tool") and turn.get("observation"):
                tool_counts[turn["tool"]] += 1
                tool_errors += 0 if turn["observation"].get("ok", True) else 1
    by_level = {}
    for level in in_level_order(r["difficulty"] for r in records):
        group = [r for r in records if r["difficulty"] == level]
        kept = [r for r in group if r["accepted"]]
        by_level[level] = {
            "n_trajectories": len(group),
            "n_accepted": len(kept),
            "n_distinct_accepted": n_distinct(r["trajectory"] for r in kept),
            "acceptance_rate": round(len(kept) / len(group), 4) if group else None,
            "mean_tool_calls": mean([r["trajectory"]["n_tool_calls"] for r in group], 3),
            "mean_tool_calls_accepted": mean([r["trajectory"]["n_tool_calls"] for r in kept], 3),
        }
    return {
        "n_trajectories": n,
        "n_accepted": n_accepted,
        # accepted trajectories that differ from the task's other accepted ones (what SFT varies)
        "n_distinct_accepted": sum(v["n_distinct_accepted"] for v in by_level.values()),
        "acceptance_rate": round(n_accepted / n, 4) if n else None,
        "n_correct": sum(1 for r in records if r["correct"]),
        "n_format_ok": sum(1 for r in records if r["format_ok"]),
        "mean_tool_calls": {k: v["mean_tool_calls"] for k, v in by_level.items()},
        "mean_tool_calls_accepted": {k: v["mean_tool_calls_accepted"] for k, v in by_level.items()},
        "acceptance_rate_by_difficulty": {k: v["acceptance_rate"] for k, v in by_level.items()},
        "by_difficulty": by_level,
        "terminations": {t: terminations.get(t, 0) for t in TERMINATIONS},
        "tool_calls_by_type": dict(sorted(tool_counts.items())),
        "tool_errors": tool_errors,
    }


ROLLOUT_COLUMNS = ("key", "task_id", "sample_index", "difficulty", "n_tool_calls", "termination",
                   "correct", "format_ok", "accepted")


def rollouts_csv(records: list[dict]) -> str:
    rows = [{**{k: r[k] for k in ROLLOUT_COLUMNS if k in r},
             "n_tool_calls": r["trajectory"]["n_tool_calls"],
             "termination": r["trajectory"]["termination"]} for r in records]
    return csv_text(rows, ROLLOUT_COLUMNS)


# ---------------------------------------------------------------------------------------------
# Reading the results back


def load_accepted(run_dir: str | Path) -> list[Trajectory]:
    run = RunDir(run_dir)
    path = run.require(STAGE, "vsearcher-lite trajectories") / "accepted.jsonl"
    return [Trajectory.from_dict(run.resolve(r)) for r in read_jsonl(path)]


def load_rollouts(run_dir: str | Path) -> list[dict]:
    """Every rollout record of a run, those set aside for another identity included."""
    run = RunDir(run_dir)
    path = run.require(STAGE, "vsearcher-lite trajectories") / "rollouts.jsonl"
    return [run.resolve(r) for r in read_jsonl(path, strict=False)]


def replay_accepted(run_dir: str | Path, config: TrajectoryConfig | None = None,
                    limit: int | None = None) -> dict:
    """Re-run the tool calls of accepted trajectories against fresh, uncached tools; returns
    ``{"n_checked", "n_tool_calls", "mismatches": [...]}``."""
    config = config or TrajectoryConfig.for_profile("cpu")
    toolbox = make_toolbox_factory(run_dir, config, cache_mode="off")()
    trajs = load_accepted(run_dir)[:limit]
    problems = []
    for t in trajs:
        problems += [f"{t.task_id}#{t.sample_index}: {p}" for p in replay_mismatches(t, toolbox)]
    n_calls = sum(t.n_tool_calls for t in trajs)
    return {"n_checked": len(trajs), "n_tool_calls": n_calls, "mismatches": problems}


# ---------------------------------------------------------------------------------------------
# CLI


#: The options of ``vsearcher-lite trajectories``, by field (``options.add_config_options``).
CLI_OPTIONS = ("teacher", "judge", "samples_per_task", "max_tasks", "concurrency",
               "prompt_variant")


def run_trajectories_command(args) -> int:
    config = TrajectoryConfig.for_profile(args.profile, world=args.world, seed=args.seed,
                                          **options_given(args, CLI_OPTIONS))
    if args.world == "live":
        config.today = None  # the live web has a calendar: show today's date
    m = generate_trajectories(args.run_dir, config)
    calls = ", ".join(f"{k} {v}" for k, v in m["mean_tool_calls"].items())
    rates = ", ".join(f"{k} {v}" for k, v in m["acceptance_rate_by_difficulty"].items())
    print(f"[trajectories] {m['n_accepted']}/{m['n_trajectories']} accepted "
          f"(rate {m['acceptance_rate']}) from {m['n_tasks']} tasks in {m['seconds']} s")
    print(f"[trajectories] mean tool calls: {calls}; acceptance by difficulty: {rates}")
    print(f"[trajectories] terminations: {m['terminations']}")
    out = RunDir(args.run_dir).root / STAGE
    print(f"[trajectories] wrote {out}")
    failed = m["terminations"].get("policy_error", 0)
    if m["n_trajectories"] and failed == m["n_trajectories"]:
        print(f"vsearcher-lite trajectories: error: all {failed} episodes ended on a policy error "
              f"(the teacher never answered; see {out / 'rollouts.jsonl'}); rerun to retry them",
              file=sys.stderr)
        return 1
    return 0
