"""The log of a GRPO run, shared by both engines: one ``steps.csv`` row per step (what the
policy did and what the update did) and the training part of ``metrics.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

from vsearcher_lite.agent.task import HEADLINE_LEVELS
from vsearcher_lite.rl.objective import group_advantages, share
from vsearcher_lite.rl.rollout import RolloutSample
from vsearcher_lite.runio import RunDir, csv_text, mean, read_number_rows

STAGE = "grpo"
TOOL_NAMES = ("text_search", "image_search", "visit")


def mixed_column(level: str) -> str:
    """The ``steps.csv`` column of the groups of ``level`` whose rewards differed in a step."""
    return f"mixed_{level}"


#: Per level, the sampled groups that carried signal (rewards not all equal) in a step.
MIXED_FIELDS = tuple(mixed_column(level) for level in HEADLINE_LEVELS)
STEP_FIELDS = ("step", "seconds", "step_seconds", "rollout_seconds", "update_seconds", "reward",
               "accuracy", "entropy", "response_length", "response_tokens", "turns", "tool_calls",
               "text_search", "image_search", "visit", "format_failure_share", "excluded_share",
               "fatal_share", "zero_variance_groups", "groups", "groups_kept", "groups_surplus",
               "draw_rounds", "zero_variance_share", *MIXED_FIELDS, "trained_trajectories",
               "trained_tokens", "kl", "policy_loss", "clip_fraction", "grad_norm",
               "learning_rate")


def has_signal(group: list[RolloutSample]) -> bool:
    """Whether a group's rewards differ (equal rewards give every advantage 0: no gradient)."""
    return not group_advantages([s.reward for s in group]).zero_variance


def step_row(step: int, samples: list[RolloutSample], group_stats: dict, score: dict, update: dict,
             times: dict, learning_rate: float) -> dict:
    """One row of ``steps.csv``: what the policy did this step and what the update did."""
    n = len(samples)
    row = {
        "step": step,
        "reward": mean((s.reward for s in samples), 5),
        "accuracy": mean((float(s.correct) for s in samples), 5),
        "entropy": round(score["entropy"], 5) if score.get("entropy") is not None else None,
        "response_length": mean((s.encoded.policy_tokens for s in samples if s.encoded), 5),
        "response_tokens": mean((s.encoded.response_tokens for s in samples if s.encoded), 5),
        "turns": mean((len(s.trajectory.turns) for s in samples), 5),
        "tool_calls": mean((s.trajectory.n_tool_calls for s in samples), 5),
        "format_failure_share": mean((float(s.format_failure) for s in samples), 5),
        "excluded_share": mean((float(s.excluded) for s in samples), 5),
        "fatal_share": mean((float(s.fatal is not None) for s in samples), 5),
        **{k: group_stats.get(k) for k in ("zero_variance_groups", "groups", "groups_kept",
                                           "groups_surplus", "draw_rounds", "zero_variance_share",
                                           *MIXED_FIELDS)},
        "trained_trajectories": sum(1 for s in samples if s.in_loss),
        "trained_tokens": update.get("trained_tokens", 0),
        "kl": _round(update.get("kl")),
        "policy_loss": _round(update.get("policy_loss")),
        "clip_fraction": _round(update.get("clip_fraction")),
        "grad_norm": _round(update.get("grad_norm")),
        "learning_rate": learning_rate,
        **{k: round(v, 3) for k, v in times.items()},
    }
    for tool in TOOL_NAMES:
        row[tool] = round(sum(s.tool_counts.get(tool, 0) for s in samples) / n, 4) if n else None
    return row


def _round(value, digits: int = 6):
    return round(float(value), digits) if value is not None else None


def steps_csv(rows: list[dict]) -> str:
    return csv_text(rows, STEP_FIELDS)


def read_steps(run_dir: str | Path, name: str = STAGE) -> list[dict]:
    """The rows of ``RUN_DIR/<name>/steps.csv`` (numbers as floats, blanks as None)."""
    return read_number_rows(RunDir(run_dir).require(name, "vsearcher-lite grpo") / "steps.csv")


def zero_variance_share(rows: list[dict]) -> float | None:
    """The share of groups (over the run) whose rewards were all equal.

    >>> zero_variance_share([{"zero_variance_groups": 1, "groups": 4},
    ...                      {"zero_variance_groups": 3, "groups": 4}])
    0.5
    """
    counted = [r for r in rows if r.get("zero_variance_groups") is not None and r.get("groups")]
    total = sum(r["groups"] for r in counted)
    return sum(r["zero_variance_groups"] for r in counted) / total if total else None


def training_summary(rows: list[dict], samples_excluded: list[bool]) -> dict:
    """The training part of ``metrics.json``: first vs last 20 % of steps, shares over the run."""
    out: dict = {"steps": len(rows)}
    for key, name in (("reward", "reward"), ("accuracy", "accuracy"),
                      ("format_failure_share", "format_failure_rate"),
                      ("tool_calls", "tool_calls")):
        values = [r.get(key) for r in rows]
        out[f"{name}_first_20pct"] = share(values, first=True)
        out[f"{name}_last_20pct"] = share(values, first=False)
    out["excluded_share"] = (sum(samples_excluded) / len(samples_excluded)
                             if samples_excluded else None)
    out["zero_variance_group_share"] = zero_variance_share(rows)
    out["kl_last"] = next((r["kl"] for r in reversed(rows) if r.get("kl") is not None), None)
    return out


def read_metrics(run_dir: str | Path, name: str = STAGE) -> dict:
    path = RunDir(run_dir).require(name, "vsearcher-lite grpo") / "metrics.json"
    return json.loads(path.read_text(encoding="utf-8"))
