"""A run folder with the files the report reads, written with the stages' own writers and small
made-up numbers (no notebook runs): the filter funnel, teacher rollouts, the SFT loss log, the
GRPO step log and the comparison's metrics."""

import json
from pathlib import Path

from vsearcher_lite.agent.task import LEVEL_ORDER
from vsearcher_lite.evaluation.comparison import comparison_metrics
from vsearcher_lite.rl.steps import steps_csv
from vsearcher_lite.runio import atomic_write_json, atomic_write_text
from vsearcher_lite.synthesis.filters import rows_to_csv
from vsearcher_lite.synthesis.trajectories import rollouts_csv
from vsearcher_lite.training.sft_trainer import loss_csv

# Synthesized -> kept per difficulty, and what each filter removed (in the filters' order).
FUNNEL = {"easy": (10, [1, 2, 0, 1]), "medium": (8, [0, 1, 1, 0]), "hard": (6, [0, 1, 2, 1])}
EXAM_TASKS = 20
HELDOUT_BY_LEVEL = {"easy": 3, "medium": 3, "hard": 2}
# policy -> (exam correct, {difficulty: held-out correct}); rl is missing.
CORRECT = {
    "base": (0, {"easy": 1, "medium": 0, "hard": 0}),
    "sft": (5, {"easy": 2, "medium": 1, "hard": 0}),
    "teacher": (12, {"easy": 3, "medium": 2, "hard": 1}),
}
SFT_STEPS = 6
GRPO_STEPS = 4


def funnel_rows():
    from vsearcher_lite.synthesis.filters import FILTER_ORDER

    rows = []
    for level, (start, removed) in FUNNEL.items():
        left = start
        rows.append({"difficulty": level, "stage": "synthesized", "remaining": left})
        for name, n in zip(FILTER_ORDER, removed):
            left -= n
            rows.append({"difficulty": level, "stage": name, "remaining": left})
        rows.append({"difficulty": level, "stage": "kept", "remaining": left})
    return rows


def rollout_records():
    """Three tasks x two samples; the hard task's samples take more calls and one is rejected."""
    records = []
    for task, level, calls, accepted in (
        ("t-easy", "easy", 3, (True, True)),
        ("t-medium", "medium", 6, (True, True)),
        ("t-hard", "hard", 10, (True, False)),
    ):
        for i, ok in enumerate(accepted):
            records.append(
                {
                    "key": f"{task}#{i}",
                    "task_id": task,
                    "sample_index": i,
                    "difficulty": level,
                    "correct": ok,
                    "format_ok": True,
                    "accepted": ok,
                    "trajectory": {"n_tool_calls": calls + i, "termination": "answer"},
                }
            )
    return records


def evaluation(exam_correct: int, heldout_correct: dict) -> dict:
    """What ``evaluate`` reports for one policy on the two benchmarks."""
    n_heldout = sum(HELDOUT_BY_LEVEL.values())

    def one(correct: int, n: int, by_level: dict | None = None) -> dict:
        out = {
            "pass_at_1": correct / n,
            "n_correct": correct,
            "n_tasks": n,
            "format_valid_rate": 1.0,
            "mean_tool_calls": 2.0,
            "mean_tool_calls_by_type": {"text_search": 1.0, "image_search": 0.5, "visit": 0.5},
            "terminations": {"answer": n},
            "seconds_per_task": {"mean": 1.5},
        }
        if by_level:
            out["accuracy_by_difficulty"] = {
                lvl: by_level[lvl] / HELDOUT_BY_LEVEL[lvl] for lvl in by_level
            }
            out["by_difficulty"] = {
                lvl: {"n_tasks": HELDOUT_BY_LEVEL[lvl], "n_correct": by_level[lvl],
                      "accuracy": by_level[lvl] / HELDOUT_BY_LEVEL[lvl]} for lvl in by_level
            }
            out["headline"] = {"n_tasks": n, "n_correct": correct, "accuracy": correct / n}
        return out

    return {
        "exam": one(exam_correct, EXAM_TASKS),
        "heldout": one(sum(heldout_correct.values()), n_heldout, heldout_correct),
    }


def fake_run(run: Path) -> Path:
    atomic_write_text(run / "filter" / "funnel.csv", rows_to_csv(funnel_rows()))
    atomic_write_text(run / "trajectories" / "rollouts.csv", rollouts_csv(rollout_records()))
    atomic_write_text(
        run / "sft" / "loss.csv",
        loss_csv(
            [
                {"step": s, "loss": 2.0 - 0.2 * s, "assistant_ce": 2.1 - 0.2 * s}
                for s in range(1, SFT_STEPS + 1)
            ]
        ),
    )
    atomic_write_json(
        run / "sft" / "metrics.json",
        {
            "steps": SFT_STEPS,
            "n_train_trajectories": 5,
            "n_dropped_too_long": 1,
            "n_heldout_tasks": 8,
            "base_accuracy": 0.125,
            "heldout_accuracy": 0.375,
            "base_format_valid_rate": 0.5,
            "heldout_format_valid_rate": 1.0,
            "base_mean_tool_calls": 0.5,
            "heldout_mean_tool_calls": 2.0,
        },
    )
    atomic_write_text(
        run / "grpo" / "steps.csv",
        steps_csv(
            [
                {
                    "step": s,
                    "reward": 0.1 * s,
                    "accuracy": 0.1 * s,
                    "entropy": 0.9,
                    "tool_calls": 2.0,
                    "text_search": 1.0,
                    "image_search": 0.5,
                    "visit": 0.5,
                }
                for s in range(1, GRPO_STEPS + 1)
            ]
        ),
    )
    atomic_write_json(
        run / "grpo" / "metrics.json",
        {
            "steps": GRPO_STEPS,
            "config": {"prompts_per_step": 2, "generations": 4},
            "heldout_n": 8,
            "heldout_accuracy_sft": 0.375,
            "heldout_accuracy_rl": 0.5,
            "heldout_paired_diff": 0.125,
            "heldout_paired_se": 0.125,
        },
    )
    results = {name: evaluation(exam, held) for name, (exam, held) in CORRECT.items()}
    status = {
        name: {"state": "evaluated", "spec": name, "reason": None} for name in ("base", "sft")
    }
    status["rl"] = {"state": "missing", "spec": "rl", "reason": "not trained yet"}
    status["teacher"] = {"state": "evaluated", "spec": "teacher", "reason": None}
    metrics = comparison_metrics(results, status)
    metrics["n_tasks"] = {
        "exam": EXAM_TASKS,
        "heldout": sum(HELDOUT_BY_LEVEL.values()),
        "heldout_by_difficulty": {
            lvl: HELDOUT_BY_LEVEL[lvl] for lvl in LEVEL_ORDER if lvl in HELDOUT_BY_LEVEL
        },
    }
    atomic_write_json(run / "comparison" / "metrics.json", json.loads(json.dumps(metrics)))
    return run
