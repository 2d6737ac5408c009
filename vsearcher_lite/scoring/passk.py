"""Pass@k of a policy: K sampled evaluations of the same tasks, and what they say about RL.

RL can at most turn a policy's Pass@k into its Pass@1, so Pass@k at a sampling temperature above 0
bounds what GRPO can reach; the ``mixed`` tasks (solved by some samples, not all) are the ones
whose reward varies within a group, the only ones GRPO learns from. ``evaluate_samples`` runs
``evaluate`` once per sample (``<name>-s1`` ... ``<name>-sK``, seeds ``seed`` ... ``seed + K - 1``,
each resumable on its own) and writes ``RUN_DIR/eval/<name>/passk.json``; ``passk_metrics`` scores
stored samples again; ``pass_at_k`` is the unbiased estimator of Chen et al. (2021).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable

from vsearcher_lite.agent.judge import Judge
from vsearcher_lite.agent.task import Task, in_level_order
from vsearcher_lite.chat import ChatBackend
from vsearcher_lite.config import EvalConfig
from vsearcher_lite.manifest import utc_now
from vsearcher_lite.redaction import redact
from vsearcher_lite.runio import InputError, atomic_write_json
from vsearcher_lite.scoring.evaluate import (
    check_name,
    eval_dir,
    evaluate,
    load_results,
    resolve_judge,
)
from vsearcher_lite.scoring.identity import run_identity, stored_changes, stored_identity
from vsearcher_lite.scoring.policies import Policy, make_policy

__all__ = ["PASSK_FILE", "check_samples", "default_ks", "evaluate_samples", "pass_at_k",
           "passk_metrics", "sample_names"]

PASSK_FILE = "passk.json"


def pass_at_k(n: int, c: int, k: int) -> float:
    """The chance that at least one of ``k`` of ``n`` samples, ``c`` of them correct, is correct:
    ``1 - C(n-c, k) / C(n, k)``, as a product (no huge binomials).

    >>> pass_at_k(4, 1, 1), pass_at_k(4, 0, 4), pass_at_k(4, 3, 2)
    (0.25, 0.0, 1.0)
    >>> round(pass_at_k(4, 2, 2), 4)  # 1 - C(2, 2) / C(4, 2) = 1 - 1/6
    0.8333
    """
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0  # every k-subset holds a correct sample
    missed = 1.0
    for i in range(n - c + 1, n + 1):
        missed *= 1.0 - k / i
    return 1.0 - missed


def default_ks(n_samples: int) -> list[int]:
    """The k reported for ``n_samples`` samples: 1, 2, 4, ... below it, and itself.

    >>> default_ks(3), default_ks(8), default_ks(6)
    ([1, 2, 3], [1, 2, 4, 8], [1, 2, 4, 6])
    """
    ks, k = [], 1
    while k < n_samples:
        ks.append(k)
        k *= 2
    return [*ks, n_samples]


def _level(record: dict) -> str:
    return str(record.get("difficulty") or record.get("level") or "unknown")


def _task_key(record: dict) -> tuple:
    """What must match for two samples' records to be of one task."""
    return _level(record), record.get("question"), record.get("answer")


def _aligned(samples: list[list[dict]], names: list[str]) -> tuple[list[str], list[dict]]:
    """The task ids in the first sample's order and each sample's records by id; ``InputError``
    naming the sample whose tasks differ from the first's."""
    by_sample = []
    for records, name in zip(samples, names):
        ids = [str(r["id"]) for r in records]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise InputError(f"sample {name!r}: task {dup!r} appears more than once")
        by_sample.append({str(r["id"]): r for r in records})
    first, first_name = by_sample[0], names[0]
    for found, name in zip(by_sample[1:], names[1:]):
        for problem, ids in (
                ("lacks tasks of", [i for i in first if i not in found]),
                ("has tasks not in", [i for i in found if i not in first]),
                ("has other questions, answers or levels than",
                 [i for i in first if i in found and _task_key(found[i]) != _task_key(first[i])])):
            if ids:
                more = f" and {len(ids) - 3} more" if len(ids) > 3 else ""
                raise InputError(f"sample {name!r} {problem} sample {first_name!r} "
                                 f"({', '.join(ids[:3])}{more}): the samples must be of the same "
                                 "tasks")
    return list(first), by_sample


def _group(counts: list[int], n: int, ks: list[int]) -> dict:
    tasks = len(counts)

    def avg(values: Iterable[float]) -> float | None:
        return round(sum(values) / tasks, 4) if tasks else None

    return {
        "n_tasks": tasks,
        "pass_at_1": avg(c / n for c in counts),
        "pass_at_k": {str(k): avg(pass_at_k(n, c, k) for c in counts) for k in ks},
        "mixed": sum(1 for c in counts if 0 < c < n),
        "all_correct": sum(1 for c in counts if c == n),
        "none_correct": sum(1 for c in counts if c == 0),
    }


def passk_metrics(samples: list[list[dict]], ks: Iterable[int] | None = None, *,
                  names: list[str] | None = None) -> dict:
    """Pass@k from K samples' result records (``load_results``; each has ``id``, ``difficulty``
    and ``correct``), overall and per level, for each of ``ks`` (default ``default_ks(K)``):
    sampled Pass@1 (mean correctness), the number of tasks, and ``mixed`` (solved by some samples
    but not all). ``names`` name the samples in errors (default ``s1`` ...)."""
    n = len(samples)
    if n < 1:
        raise InputError("no samples to score")
    names = list(names) if names is not None else [f"s{i}" for i in range(1, n + 1)]
    if len(names) != n:
        raise InputError(f"{len(names)} names for {n} samples")
    ks = sorted(set(ks)) if ks is not None else default_ks(n)
    bad = [k for k in ks if not 1 <= k <= n]
    if bad or not ks:
        raise InputError(f"Pass@k of {n} samples needs 1 <= k <= {n}, got k={bad or ks}")
    order, by_id = _aligned(samples, names)
    first = by_id[0]
    counts = {i: sum(1 for found in by_id if found[i].get("correct")) for i in order}
    levels = in_level_order(_level(first[i]) for i in order)
    by_level = {lvl: _group([counts[i] for i in order if _level(first[i]) == lvl], n, ks)
                for lvl in levels}
    overall = _group(list(counts.values()), n, ks)
    return {
        "n_samples": n,
        "ks": ks,
        **overall,
        "by_level": by_level,
        "mixed_by_level": {lvl: g["mixed"] for lvl, g in by_level.items()},
        "pass_at_1_by_sample": {
            name: round(sum(1 for r in records if r.get("correct")) / len(records), 4)
            if records else None for name, records in zip(names, samples)},
        "correct_by_task": counts,
    }


def sample_names(name: str, samples: int) -> list[str]:
    """The eval names of the samples: ``<name>-s1`` ... ``<name>-sK``.

    >>> sample_names("sft", 3)
    ['sft-s1', 'sft-s2', 'sft-s3']
    """
    return [f"{name}-s{i}" for i in range(1, samples + 1)]


def sample_number(name: str) -> int:
    """The sample a ``<name>-s<i>`` eval name holds, for sorting samples in order.

    >>> sorted(["x-s10", "x-s2", "x-s1"], key=sample_number)
    ['x-s1', 'x-s2', 'x-s10']
    """
    return int(name.rsplit("-s", 1)[1])


def check_samples(config: EvalConfig, samples: int) -> None:
    """``InputError`` (one line) unless ``samples >= 2`` and ``config`` samples (temperature > 0:
    greedy samples would all be the same)."""
    if samples < 2:
        raise InputError(f"--samples must be at least 2 for Pass@k, got {samples}")
    config.check()
    if config.temperature == 0:
        raise InputError(f"--samples {samples} needs sampling, but the temperature is 0 (greedy: "
                         "every sample would be the same); give --temperature, e.g. 0.6")


def _check_resumable(run_dir: str | Path, names: list[str], configs: list[EvalConfig],
                     policy: Policy, judge: Judge) -> None:
    """Refuse, before any sample runs, a sample folder holding results of other settings (as
    ``evaluate`` would, but only once it got there)."""
    for name, config in zip(names, configs):
        identity = stored_identity(run_identity(policy, config, judge), run_dir)
        stored_changes(eval_dir(run_dir, name), identity)


def evaluate_samples(run_dir: str | Path, tasks: list[Task], policy: str | ChatBackend | Policy,
                     *, config: EvalConfig, samples: int, name: str | None = None,
                     judge: Judge | str | None = None, toolbox: Any = None,
                     concurrency: int | None = None, benchmark: str = "",
                     fresh: bool = False) -> dict:
    """Evaluate ``policy`` ``samples`` times at ``config.temperature`` (> 0), sample ``i`` under
    ``<name>-s<i>`` with seed ``config.seed + i - 1``; writes ``RUN_DIR/eval/<name>/passk.json``
    and returns ``passk_metrics`` with the run's details. Other arguments as in ``evaluate``."""
    if concurrency is not None:
        config = replace(config, concurrency=concurrency)
    check_samples(config, samples)
    tasks = list(tasks)
    built = make_policy(policy, config)  # once: a local model is loaded once for every sample
    name = check_name(name or built.name)
    names = [check_name(n) for n in sample_names(name, samples)]
    configs = [replace(config, seed=config.seed + i) for i in range(samples)]
    if not fresh:
        _check_resumable(run_dir, names, configs, built, resolve_judge(judge, config))
    runs = []
    for sample, sample_config in zip(names, configs):
        runs.append(evaluate(run_dir, tasks, built, judge=judge, toolbox=toolbox, name=sample,
                             config=sample_config, benchmark=benchmark, fresh=fresh))
    wanted = [t.id for t in tasks]
    records = []
    for sample in names:
        latest = {str(r.get("id")): r for r in load_results(run_dir, sample)}
        records.append([latest[i] for i in wanted])
    metrics = passk_metrics(records, names=names)
    metrics.update(
        name=name, policy=built.name, policy_spec=redact(built.spec), benchmark=redact(benchmark),
        samples=[{"name": s, "seed": c.seed, "evaluated_this_run": m["evaluated_this_run"]}
                 for s, c, m in zip(names, configs, runs)],
        evaluated_this_run=sum(m["evaluated_this_run"] for m in runs),
        temperature=config.temperature, top_p=config.top_p, updated_at=utc_now())
    out = eval_dir(run_dir, name)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / PASSK_FILE, metrics)
    return metrics
