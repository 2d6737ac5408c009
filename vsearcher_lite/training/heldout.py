"""The held-out tasks a training stage evaluates its models on: SFT, GRPO and notebook 08's
comparison take the same capped selection, so each later step reuses the results stored before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from vsearcher_lite.runio import InputError
from vsearcher_lite.synthesis.trajectories import load_tasks


def balanced_head(items: list, n: int | None, key: Callable[[Any], str]) -> list:
    """The first ``n`` items taken round-robin across groups (first-seen order), so a capped
    evaluation keeps the difficulty mix; all of them when ``n`` is None.

    >>> balanced_head(["e1", "e2", "e3", "m1", "m2"], 3, key=lambda s: s[0])
    ['e1', 'm1', 'e2']
    """
    if n is None or n >= len(items):
        return list(items)
    groups: dict[str, list] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    picked: list = []
    depth = 0
    while len(picked) < n:
        for members in groups.values():
            if depth < len(members) and len(picked) < n:
                picked.append(members[depth])
        depth += 1
    return picked


def heldout_tasks(run_dir: str | Path, config) -> list:
    """The held-out tasks both models are evaluated on (file order; difficulty filter; cap)."""
    path = Path(config.eval_file or Path(run_dir) / "filter" / "heldout.jsonl")
    if not path.exists():
        raise InputError(f"{path}: no held-out tasks; run `vsearcher-lite filter` first")
    tasks = load_tasks(path)
    if config.eval_difficulties:
        tasks = [t for t in tasks if t.difficulty in config.eval_difficulties]
    tasks = balanced_head(tasks, config.eval_max_tasks, key=lambda t: t.difficulty)
    if not tasks:
        wanted = ", ".join(config.eval_difficulties or [])
        raise InputError(f"{path}: no held-out tasks of difficulty {wanted}")
    return tasks
