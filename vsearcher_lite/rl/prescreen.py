"""The GRPO stage's pre-screen (``curriculum="prescreen"``): a few episodes of each candidate task
with the start policy, once, and per level the tasks whose outcomes were mixed to train on.

A task the start policy always or never solves gives a group of equal rewards: no gradient. The
pre-screen's outcomes are written to ``prescreen.jsonl``, to be read beside the run's results.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from vsearcher_lite.rl.config import GRPOConfig
from vsearcher_lite.rl.inputs import TaskSampler
from vsearcher_lite.rl.rollout import RolloutSettings, rollout_groups
from vsearcher_lite.rl.update import chunks
from vsearcher_lite.runio import write_jsonl

ROWS = "prescreen.jsonl"


def prescreen(backend, toolbox, tasks: list, samples: int, settings: RolloutSettings, judge, *,
              tasks_per_call: int = 4, progress: bool = False) -> dict[str, int]:
    """Task id -> its right answers in ``samples`` episodes of the current policy, seeded apart
    from training's (step -1). ``progress`` shows a bar over the tasks: the whole RL pool takes
    minutes even on a GPU."""
    from vsearcher_lite.runtime import progress_bar

    out: dict[str, int] = {}
    with progress_bar("pre-screen", len(tasks), enabled=progress) as bar:
        for part in chunks(tasks, max(1, tasks_per_call)):
            groups = rollout_groups(backend, toolbox, part, samples, settings, judge, None, step=-1)
            for task, group in zip(part, groups):
                out[task.id] = sum(1 for s in group if s.correct)
            bar.update(len(part))
    return out


def mixed_tasks(correct: dict[str, int], samples: int) -> set[str]:
    """The ids of the tasks solved sometimes but not always in ``samples`` episodes: a group of
    theirs would carry signal.

    >>> sorted(mixed_tasks({"a": 0, "b": 1, "c": 2}, 2))
    ['b']
    """
    return {i for i, c in correct.items() if 0 < c < samples}


def prescreen_candidates(tasks: list, config: GRPOConfig) -> list:
    """The tasks the pre-screen samples: every one (``prescreen_tasks`` None or at least the pool),
    else ``prescreen_tasks`` drawn by the difficulty mix, each once."""
    if config.prescreen_tasks is None or config.prescreen_tasks >= len(tasks):
        return list(tasks)
    drawn = TaskSampler(tasks, config.difficulty_mix, seed=config.seed).draw(config.prescreen_tasks)
    return list({t.id: t for t in drawn}.values())


def prescreened_tasks(tasks: list, mixed: set[str]) -> list:
    """Per difficulty, the tasks whose ids are in ``mixed`` (their groups carry signal); a
    difficulty with none keeps all its tasks, so that no level of the mix is left empty. File
    order.

    >>> from types import SimpleNamespace as T
    >>> tasks = [T(id="a", difficulty="easy"), T(id="b", difficulty="easy"),
    ...          T(id="c", difficulty="medium")]
    >>> [t.id for t in prescreened_tasks(tasks, {"b"})]
    ['b', 'c']
    """
    levels_with_mixed = {t.difficulty for t in tasks if t.id in mixed}
    return [t for t in tasks if t.id in mixed or t.difficulty not in levels_with_mixed]


def run_prescreen(tasks: list, backend, toolbox, settings: RolloutSettings, judge,
                  config: GRPOConfig, out: Path, log: Callable[[str], None]) -> dict:
    """The ``prescreen`` curriculum: ``prescreen_samples`` episodes of each candidate
    (``prescreen_candidates``), written to ``out/prescreen.jsonl``; the kept tasks
    (``prescreened_tasks``) and counts."""
    t0 = time.perf_counter()
    candidates = prescreen_candidates(tasks, config)
    k = config.prescreen_samples
    # as many episodes at once as a training step generates
    per_call = max(1, (config.rollout_batch or config.batch_trajectories) // k)
    correct = prescreen(backend, toolbox, candidates, k, settings, judge, tasks_per_call=per_call,
                        progress=config.progress)
    write_jsonl(out / ROWS, [{"id": t.id, "difficulty": t.difficulty, "correct": correct[t.id],
                              "samples": k} for t in candidates])
    mixed = mixed_tasks(correct, k)
    kept = prescreened_tasks(candidates, mixed)
    counts = {}
    for lvl in sorted({t.difficulty for t in candidates}):
        level = [t for t in candidates if t.difficulty == lvl]
        counts[lvl] = {"screened": len(level), "mixed": sum(t.id in mixed for t in level),
                       "all_correct": sum(correct[t.id] == k for t in level)}
    seconds = round(time.perf_counter() - t0, 2)
    log(f"[grpo] pre-screen: {len(candidates)} tasks x {k} episodes in {seconds} s; solved "
        f"sometimes but not always: {len(mixed)}; training on {len(kept)} tasks")
    return {"tasks": kept, "samples": k, "by_difficulty": counts, "n_kept": len(kept),
            "seconds": seconds}
