"""What a GRPO run starts from and trains on, shared by both engines: the starting checkpoint,
the training tasks (the RL pool or SFT's own), the sampler of each step's P tasks, and the
episodes' settings and toolbox.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Callable

from vsearcher_lite.agent.loop import EpisodeLimits
from vsearcher_lite.agent.protocol import SANDBOX_TODAY
from vsearcher_lite.backends.toolbox import make_toolbox
from vsearcher_lite.rl.config import GRPOConfig
from vsearcher_lite.rl.rollout import RolloutSettings
from vsearcher_lite.runio import InputError, read_jsonl
from vsearcher_lite.synthesis.trajectories import load_tasks


def resolve_init(run_dir: str | Path, config: GRPOConfig) -> Path:
    """The starting checkpoint: ``config.init`` or ``RUN_DIR/sft/checkpoint``."""
    path = Path(config.init) if config.init else Path(run_dir) / "sft" / "checkpoint"
    if not (path / "config.json").is_file():
        if config.init:
            raise InputError(f"{path}: no model here (no config.json); give --init a checkpoint "
                             "folder")
        raise InputError(f"{path}: no SFT checkpoint; run `vsearcher-lite sft --run-dir {run_dir}` "
                         "first (or give --init PATH)")
    return path


def task_path(run_dir: str | Path, config: GRPOConfig) -> Path:
    """``config.train_file``, else the RL pool or SFT's training tasks (``task_source``)."""
    if config.train_file:
        return Path(config.train_file)
    return Path(run_dir) / "filter" / ("rl_tasks.jsonl" if config.task_source == "rl"
                                       else "train.jsonl")


def train_tasks(run_dir: str | Path, config: GRPOConfig) -> list:
    """The tasks of ``task_path`` whose difficulty is in ``difficulty_mix``, in file order."""
    path = task_path(run_dir, config)
    if not path.exists():
        if not config.train_file and config.task_source == "rl":
            raise InputError(f"{path}: no RL task pool; run `vsearcher-lite filter --run-dir "
                             f"{run_dir}` (it writes the pool), or train on SFT's tasks with "
                             "--task-source sft")
        raise InputError(f"{path}: no training tasks; run `vsearcher-lite filter` first")
    wanted = {d for d, w in config.difficulty_mix.items() if w > 0}
    tasks = [t for t in load_tasks(path) if t.difficulty in wanted]
    if config.max_train_tasks is not None:
        tasks = tasks[: config.max_train_tasks]
    if not tasks:
        raise InputError(f"{path}: no training tasks of difficulty {', '.join(sorted(wanted))}")
    return tasks


def tasks_in_sft_data(run_dir: str | Path, tasks: list) -> int | None:
    """How many of ``tasks`` have accepted teacher trajectories (SFT's data); ``None`` when there
    are none. Non-zero for the RL pool when the SFT data predates the pool."""
    path = Path(run_dir) / "trajectories" / "accepted.jsonl"
    if not path.is_file():
        return None
    ids = {t.id for t in tasks}
    return len(ids & {r.get("task_id") for r in read_jsonl(path)})


def check_pool_unseen(run_dir: str | Path, tasks: list, config: GRPOConfig,
                      log: Callable[[str], None]) -> int | None:
    """Warn when SFT's data holds some RL-pool tasks (an older run folder filtered again)."""
    if config.train_file or config.task_source != "rl":
        return None
    seen = tasks_in_sft_data(run_dir, tasks)
    if seen:
        log(f"[grpo] warning: {seen} of the {len(tasks)} RL-pool tasks have SFT trajectories in "
            f"{Path(run_dir) / 'trajectories' / 'accepted.jsonl'} (made before the pool): run "
            "`trajectories` and `sft` again for a pool the SFT model has not seen")
    return seen


def mix_counts(n: int, mix: dict[str, float], available: set[str]) -> dict[str, int]:
    """``n`` draws split over the difficulties by ``mix`` (largest remainder), only those
    ``available``.

    >>> mix_counts(10, {"easy": 4, "medium": 3, "hard": 3}, {"easy", "medium", "hard"})
    {'easy': 4, 'medium': 3, 'hard': 3}
    >>> mix_counts(4, {"easy": 4, "medium": 3, "hard": 3}, {"easy", "medium"})
    {'easy': 2, 'medium': 2}
    """
    weights = {d: float(w) for d, w in mix.items() if w > 0 and d in available}
    if not weights:
        raise ValueError(f"no task of the difficulties {sorted(mix)} is available")
    total = sum(weights.values())
    exact = {d: n * w / total for d, w in weights.items()}
    counts = {d: int(v) for d, v in exact.items()}
    rest = n - sum(counts.values())
    for d in sorted(exact, key=lambda d: (-(exact[d] - counts[d]), list(weights).index(d)))[:rest]:
        counts[d] += 1
    return counts


class TaskSampler:
    """Draws the P tasks of each step, each difficulty its share (``mix_counts``): within a
    difficulty, a seeded shuffled order, reshuffled after each pass."""

    def __init__(self, tasks: list, mix: dict[str, float], seed: int = 0):
        self.rng = random.Random(seed)
        self.mix = mix
        self.pools: dict[str, list] = {}
        for t in tasks:
            self.pools.setdefault(t.difficulty, []).append(t)
        self.order: dict[str, list] = {}

    def _next_in_order(self, difficulty: str) -> Any:
        queue = self.order.get(difficulty)
        if not queue:
            queue = list(self.pools[difficulty])
            self.rng.shuffle(queue)
            self.order[difficulty] = queue
        return queue.pop()

    def draw(self, n: int) -> list:
        counts = mix_counts(n, self.mix, set(self.pools))
        return [self._next_in_order(difficulty)
                for difficulty, k in counts.items() for _ in range(k)]

    def state(self) -> dict:
        """What ``restore`` needs to continue the same sequence of draws (tasks named by id)."""
        return {"rng": self.rng.getstate(),
                "order": {d: [t.id for t in q] for d, q in self.order.items()}}

    def restore(self, state: dict) -> None:
        by_id = {t.id: t for pool in self.pools.values() for t in pool}
        self.rng.setstate(state["rng"])
        self.order = {d: [by_id[i] for i in ids] for d, ids in state["order"].items()}


def rollout_settings(config: GRPOConfig) -> RolloutSettings:
    limits = EpisodeLimits(max_tool_calls=config.max_tool_calls,
                           max_context_chars=config.max_context_chars,
                           wall_clock_s=config.wall_clock_s)
    return RolloutSettings(limits=limits, temperature=config.temperature, top_p=config.top_p,
                           max_tokens=config.max_tokens,
                           prompt_variant=config.prompt_variant,
                           today=SANDBOX_TODAY if config.world == "sandbox" else None,
                           seed=config.seed,
                           search_penalty=config.search_penalty, fatal_k=config.fatal_k,
                           max_prompt_tokens=config.max_prompt_tokens,
                           max_response_tokens=config.max_response_tokens)


def rollout_toolbox(run_dir: str | Path, config: GRPOConfig):
    """The run's toolbox, showing the tools as the SFT data and the evaluation do."""
    return make_toolbox(run_dir, world=config.world, top_k=config.top_k,
                        observations=config.prompt_variant)
