"""What an evaluation measures: one record per task, Pass@1 and its breakdowns, the tables.

Pure functions of the result records (``result_record``, one line of ``results.jsonl``), so a
stored run can be scored again without running anything; ``comparison_rows`` / ``comparison_csv``
are the table behind the paper's table 1 / figure 4.
"""

from __future__ import annotations

import csv
import io
import statistics
from collections import Counter

from vsearcher_lite.agent.loop import TERMINATIONS, Trajectory
from vsearcher_lite.agent.task import HEADLINE_LEVELS, Task, in_level_order
from vsearcher_lite.redaction import redact
from vsearcher_lite.runio import mean

TOOL_NAMES = ("text_search", "image_search", "visit")
#: One colour per policy in every chart of the evaluations, whichever policies a chart shows.
POLICY_COLOURS = {"base": "#7f7f7f", "sft": "#1f77b4", "rl": "#d62728", "grpo": "#d62728",
                  "teacher": "#2ca02c"}

NO_TURN = "no_turn"  # the format error of an episode whose policy wrote no turn at all


def first_format_error(traj: Trajectory) -> str | None:
    """The format check's code for the first turn that failed it (``unclosed_think`` ...);
    ``no_turn`` when the policy wrote none; ``None`` when the episode is format-valid."""
    if not traj.turns:
        return NO_TURN
    return next((t.verdict.get("code") or "unknown" for t in traj.turns
                 if not t.verdict.get("ok")), None)


def format_error_code(record: dict) -> str | None:
    """``first_format_error`` of a result record, also of records older than the field.

    >>> format_error_code({"format_ok": True})
    >>> format_error_code({"format_ok": False, "format_error": "no_action"})
    'no_action'
    >>> turns = [{"verdict": {"ok": True}}, {"verdict": {"ok": False, "code": "multiple_answers"}}]
    >>> format_error_code({"format_ok": False, "trajectory": {"turns": turns}})
    'multiple_answers'
    """
    if record.get("format_ok"):
        return None
    if record.get("format_error"):
        return record["format_error"]
    turns = (record.get("trajectory") or {}).get("turns")
    if not turns:
        return NO_TURN if turns == [] else "unknown"
    return next((t["verdict"].get("code") or "unknown" for t in turns
                 if not t["verdict"].get("ok")), "unknown")


def result_record(task: Task, traj: Trajectory, verdict, policy, seconds: float,
                  keep_trajectory: bool) -> dict:
    """One line of ``results.jsonl``."""
    counts = traj.tool_counts()
    format_error = first_format_error(traj)
    record = {
        "id": task.id,
        "policy": policy.name,
        "policy_spec": redact(policy.spec),
        "difficulty": task.difficulty,
        "split": task.split,
        "question": task.question,
        "answer": task.answer,
        "aliases": list(task.aliases),
        "prediction": traj.prediction,
        "correct": bool(verdict.correct),
        "judge": verdict.to_dict(),
        "termination": traj.termination,
        "format_ok": format_error is None,
        "format_error": format_error,
        "n_turns": len(traj.turns),
        "n_tool_calls": traj.n_tool_calls,
        "tool_counts": {name: counts.get(name, 0)
                        for name in sorted(set(TOOL_NAMES) | set(counts))},
        "tool_errors": sum(1 for t in traj.tool_calls if not (t.observation or {}).get("ok", True)),
        "episode_seconds": traj.seconds,
        "seconds": round(seconds, 4),
        "error": traj.error,
    }
    if keep_trajectory:
        traj.meta.update({"answer": task.answer, "difficulty": task.difficulty,
                          "correct": bool(verdict.correct)})
        record["trajectory"] = traj.to_dict()
    return record


def match_kind(record: dict) -> str | None:
    """How an accepted answer matched (``Verdict.match``: exact, normalised, alias, number), from
    the record's verdict or its shipped ``match`` field; ``None`` for a rejected answer. A verdict
    that does not say (an LLM judge's) reads ``exact`` when the prediction is the gold as written,
    else ``judged``.

    >>> match_kind({"correct": True, "judge": {"match": "number"}})
    'number'
    >>> match_kind({"correct": True, "prediction": "916", "answer": "925"})
    'judged'
    >>> match_kind({"correct": True, "prediction": "925", "answer": "925"}), match_kind({})
    ('exact', None)
    """
    if not record.get("correct"):
        return None
    kind = record.get("match") or (record.get("judge") or {}).get("match")
    if kind:
        return kind
    same = str(record.get("prediction") or "").strip() == str(record.get("answer") or "").strip()
    return "exact" if same else "judged"


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-quantile (0..1) by linear interpolation.

    >>> percentile([1, 2, 3, 4], 0.5), percentile([5.0], 0.9), percentile([], 0.5)
    (2.5, 5.0, None)
    """
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low, high = int(pos), min(int(pos) + 1, len(ordered) - 1)
    return round(ordered[low] + (ordered[high] - ordered[low]) * (pos - low), 4)


def binomial_se(p: float | None, n: int) -> float | None:
    """The standard error of a share ``p`` of ``n`` independent tasks, sqrt(p (1 - p) / n).

    >>> binomial_se(0.5, 100), binomial_se(0.0, 10), binomial_se(None, 0)
    (0.05, 0.0, None)
    """
    return round((p * (1 - p) / n) ** 0.5, 4) if n and p is not None else None


def group_metrics(records: list[dict]) -> dict:
    n_correct = sum(1 for r in records if r["correct"])
    accuracy = _rate(n_correct, len(records))
    return {
        "n_tasks": len(records),
        "n_correct": n_correct,
        "accuracy": accuracy,
        "se": binomial_se(accuracy, len(records)),
        "format_valid_rate": _rate(sum(1 for r in records if r["format_ok"]), len(records)),
        "mean_tool_calls": mean([r["n_tool_calls"] for r in records]),
    }


def eval_metrics(records: list[dict]) -> dict:
    """Pass@1 and its breakdowns from result records (one per task)."""
    n = len(records)
    n_correct = sum(1 for r in records if r["correct"])
    terminations = Counter(r["termination"] for r in records)
    format_errors = Counter(code for code in map(format_error_code, records) if code)
    tool_totals: Counter = Counter()
    for r in records:
        tool_totals.update(r.get("tool_counts", {}))
    tools = sorted(set(TOOL_NAMES) | set(tool_totals))
    by_difficulty = {g: group_metrics([r for r in records if r["difficulty"] == g])
                     for g in in_level_order(r["difficulty"] for r in records)}
    by_split = {s: group_metrics([r for r in records if r["split"] == s])
                for s in sorted({r["split"] for r in records})}
    seconds = [float(r["seconds"]) for r in records]
    matched = Counter(kind for kind in map(match_kind, records) if kind)
    return {
        "n_tasks": n,
        "n_correct": n_correct,
        "pass_at_1": _rate(n_correct, n),
        # the answers accepted other than as the gold is written, and how each matched
        "accepted_not_exact": n_correct - matched.get("exact", 0),
        "accepted_by_match": dict(matched.most_common()),
        "n_answered": terminations.get("answer", 0),
        "answer_rate": _rate(terminations.get("answer", 0), n),
        "format_valid_rate": _rate(sum(1 for r in records if r["format_ok"]), n),
        "accuracy_by_difficulty": {g: v["accuracy"] for g, v in by_difficulty.items()},
        "accuracy_by_split": {s: v["accuracy"] for s, v in by_split.items()},
        "by_difficulty": by_difficulty,
        "by_split": by_split,
        # the headline: the paper's levels together, one-hop apart
        "headline": group_metrics([r for r in records if r["difficulty"] in HEADLINE_LEVELS]),
        "mean_tool_calls": mean([r["n_tool_calls"] for r in records]),
        "mean_tool_calls_by_type": {t: (round(tool_totals.get(t, 0) / n, 4) if n else None)
                                    for t in tools},
        "terminations": {t: terminations.get(t, 0)
                         for t in sorted(set(TERMINATIONS) | set(terminations))},
        # the code of each failing episode's first bad turn
        "format_errors": dict(format_errors.most_common()),
        "tool_errors": sum(int(r.get("tool_errors", 0)) for r in records),
        "seconds_per_task": {
            "mean": mean(seconds),
            "median": round(statistics.median(seconds), 4) if seconds else None,
            "p90": percentile(seconds, 0.9),
            "max": round(max(seconds), 4) if seconds else None,
        },
    }


RESULT_COLUMNS = ("id", "difficulty", "split", "correct", "termination", "format_ok",
                  "n_tool_calls",
                  "text_search", "image_search", "visit", "seconds", "answer", "prediction")


def results_csv(records: list[dict]) -> str:
    """One row per task (for plots that must be redrawn without rerunning)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=RESULT_COLUMNS, lineterminator="\n",
                            extrasaction="ignore")
    writer.writeheader()
    for r in records:
        writer.writerow({**r, **{t: r.get("tool_counts", {}).get(t, 0) for t in TOOL_NAMES}})
    return buf.getvalue()


SUMMARY_KEYS = ("policy", "policy_spec", "benchmark", "judge", "n_tasks", "n_correct", "pass_at_1",
                "accepted_not_exact", "accuracy_by_difficulty", "accuracy_by_split",
                "format_valid_rate", "answer_rate", "mean_tool_calls", "mean_tool_calls_by_type",
                "terminations", "format_errors", "updated_at")


def summary_entry(metrics: dict) -> dict:
    entry = {k: metrics.get(k) for k in SUMMARY_KEYS}
    entry["seconds_per_task"] = (metrics.get("seconds_per_task") or {}).get("mean")
    return entry


TABLE_COLUMNS = ("name", "policy", "benchmark", "n_tasks", "pass_at_1", "format_valid_rate",
                 "mean_tool_calls")


def comparison_rows(summary: dict) -> list[dict]:
    """The summary as table rows, one per evaluated policy name, with ``acc_<split or
    difficulty>`` and ``calls_<tool>`` columns."""
    rows = []
    for name, entry in summary.items():
        if not isinstance(entry, dict):
            continue
        row = {"name": name, **{k: entry.get(k) for k in TABLE_COLUMNS if k != "name"}}
        for label, acc in (entry.get("accuracy_by_split") or {}).items():
            row[f"acc_{label}"] = acc
        for label, acc in (entry.get("accuracy_by_difficulty") or {}).items():
            row[f"acc_{label}"] = acc
        for tool, calls in (entry.get("mean_tool_calls_by_type") or {}).items():
            row[f"calls_{tool}"] = calls
        rows.append(row)
    return rows


def comparison_csv(summary: dict) -> str:
    rows = comparison_rows(summary)
    columns = list(TABLE_COLUMNS)
    for row in rows:
        columns += [k for k in row if k not in columns]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def wall_time(elapsed: float, n_run: int, previous: dict) -> dict:
    """``wall_seconds_per_task`` and ``wall_timed_tasks``; a rerun that ran nothing keeps the
    ``previous`` metrics' figures, so resuming a finished evaluation does not erase its cost.

    >>> wall_time(12.0, 4, {})
    {'wall_seconds_per_task': 3.0, 'wall_timed_tasks': 4}
    >>> wall_time(0.01, 0, {'wall_seconds_per_task': 3.0, 'wall_timed_tasks': 4})
    {'wall_seconds_per_task': 3.0, 'wall_timed_tasks': 4}
    >>> wall_time(0.01, 0, {})
    {'wall_seconds_per_task': None, 'wall_timed_tasks': 0}
    """
    if n_run:
        return {"wall_seconds_per_task": round(elapsed / n_run, 4), "wall_timed_tasks": n_run}
    return {"wall_seconds_per_task": previous.get("wall_seconds_per_task"),
            "wall_timed_tasks": previous.get("wall_timed_tasks") or 0}
