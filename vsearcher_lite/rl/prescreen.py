"""The GRPO stage's pre-screen (``curriculum="prescreen"``): a few episodes of each candidate task
with the start policy, once, and per level the tasks whose outcomes were mixed to train on.

A task the start policy always or never solves gives a group of equal rewards: no gradient. The
pre-screen is written to ``prescreen.jsonl`` with what it was sampled with (``prescreen.json``:
the start model's digest and the settings its outcomes depend on), so that another GRPO run from
the same model can read it (``prescreen_from``) instead of sampling the pool again.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from vsearcher_lite.rl.config import GRPOConfig
from vsearcher_lite.rl.inputs import TaskSampler
from vsearcher_lite.rl.objective import group_advantages
from vsearcher_lite.rl.rollout import RolloutSettings, rollout_groups
from vsearcher_lite.rl.steps import has_signal
from vsearcher_lite.rl.update import chunks
from vsearcher_lite.runio import (
    InputError,
    atomic_write_json,
    read_json,
    read_jsonl_numbered,
    write_jsonl,
)

ROWS, SIDECAR = "prescreen.jsonl", "prescreen.json"
#: The settings a pre-screen's outcomes depend on, besides the start model.
SAMPLED_WITH = ("world", "task_source", "train_file", "difficulty_mix", "seed", "prescreen_samples",
                "prescreen_tasks", "temperature", "top_p", "max_tokens", "max_tool_calls",
                "max_context_chars", "wall_clock_s", "max_prompt_tokens", "max_response_tokens",
                "judge", "top_k", "prompt_variant", "search_penalty", "hop_reward", "fatal_k",
                "dtype", "rollout_batch")


@dataclass(frozen=True)
class Screened:
    """One task's pre-screen: its right answers, the rewards of its episodes and whether those
    differ (``has_signal``, the test a training group passes)."""

    correct: int
    rewards: tuple[float, ...]
    signal: bool

    def mixed(self, by_reward: bool) -> bool:
        """Whether a group of this task would carry signal: solved sometimes but not always, or
        (``by_reward``, where wrong answers earn hop credit) rewards that differ."""
        return self.signal if by_reward else 0 < self.correct < len(self.rewards)


def prescreen(backend, toolbox, tasks: list, samples: int, settings: RolloutSettings, judge, *,
              tasks_per_call: int = 4, progress: bool = False) -> dict[str, Screened]:
    """Task id -> its right answers and rewards in ``samples`` episodes of the current policy,
    seeded apart from training's (step -1). ``progress`` shows a bar over the tasks: the whole RL
    pool takes minutes even on a GPU."""
    from tqdm.auto import tqdm

    out: dict[str, Screened] = {}
    with tqdm(total=len(tasks), desc="pre-screen", disable=not progress, leave=False) as bar:
        for part in chunks(tasks, max(1, tasks_per_call)):
            groups = rollout_groups(backend, toolbox, part, samples, settings, judge, None, step=-1)
            for task, group in zip(part, groups):
                out[task.id] = Screened(sum(1 for s in group if s.correct),
                                        tuple(s.reward for s in group), has_signal(group))
            bar.update(len(part))
    return out


def prescreen_candidates(tasks: list, config: GRPOConfig) -> list:
    """The tasks the pre-screen samples: every one (``prescreen_tasks`` None or at least the pool),
    else ``prescreen_tasks`` drawn by the difficulty mix, each once."""
    if config.prescreen_tasks is None or config.prescreen_tasks >= len(tasks):
        return list(tasks)
    drawn = TaskSampler(tasks, config.difficulty_mix, seed=config.seed).draw(config.prescreen_tasks)
    return list({t.id: t for t in drawn}.values())


def prescreened_tasks(tasks: list, mixed: set[str], unmixed: str = "keep") -> list:
    """Per difficulty, the tasks whose ids are in ``mixed`` (their groups carry signal); a
    difficulty with none keeps all its tasks (``unmixed="keep"``) or none (``"drop"``: its share
    of each step goes to the other levels). File order.

    >>> from types import SimpleNamespace as T
    >>> tasks = [T(id="a", difficulty="easy"), T(id="b", difficulty="easy"),
    ...          T(id="c", difficulty="medium")]
    >>> [t.id for t in prescreened_tasks(tasks, {"b"})]
    ['b', 'c']
    >>> [t.id for t in prescreened_tasks(tasks, {"b"}, unmixed="drop")]
    ['b']
    """
    levels_with_mixed = {t.difficulty for t in tasks if t.id in mixed}
    return [t for t in tasks if t.id in mixed
            or (unmixed == "keep" and t.difficulty not in levels_with_mixed)]


def checkpoint_digest(path: str | os.PathLike) -> str:
    """sha256 over a checkpoint's weight files, names and bytes: the same model wherever it lies."""
    path = Path(path)
    files = sorted(p for p in path.glob("*") if p.suffix in (".safetensors", ".bin"))
    if not files:
        raise InputError(f"{path}: no weight files (*.safetensors, *.bin) to identify the model by")
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode())
        with file.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def sampled_with(settings: dict, init_digest: str) -> dict:
    """What a pre-screen's outcomes depend on: the start model and ``SAMPLED_WITH`` of a GRPO
    config's ``to_dict()``, as JSON would hold them."""
    return json.loads(json.dumps({"init": init_digest,
                                  **{k: settings.get(k) for k in SAMPLED_WITH}}))


def earlier_sampled_with(rows_path: Path) -> dict:
    """What the pre-screen in ``rows_path`` was sampled with: its ``prescreen.json``, or for a
    finished run that did not write one, the config and start model in its ``metrics.json``."""
    folder = rows_path.parent
    if (folder / SIDECAR).is_file():
        return read_json(folder / SIDECAR)
    if (folder / "metrics.json").is_file():
        metrics = read_json(folder / "metrics.json")
        if "config" in metrics and "init" in metrics:
            init = Path(metrics["init"])
            init = init if init.is_absolute() else folder.parent / init
            return sampled_with(metrics["config"], checkpoint_digest(init))
    raise InputError(f"{rows_path}: no {SIDECAR} or finished run's metrics.json beside it, so "
                     "its start model and settings are unknown")


def read_prescreen(rows_path: Path, candidates: list, samples: int,
                   by_reward: bool) -> dict[str, Screened]:
    """The pre-screen rows of ``rows_path`` as ``Screened`` by task id; they must be exactly the
    ``candidates``, each with ``samples`` episodes (and its rewards where ``by_reward``)."""
    wanted = {t.id for t in candidates}
    out: dict[str, Screened] = {}
    for line, row in read_jsonl_numbered(rows_path):
        where = f"{rows_path}:{line}"
        if row.get("id") not in wanted:
            raise InputError(f"{where}: task {row.get('id')!r} is not a candidate of this run's "
                             "pre-screen (another task pool or prescreen_tasks)")
        if row.get("samples") != samples or not isinstance(row.get("correct"), int):
            raise InputError(f"{where}: needs 'correct' and 'samples' = {samples}")
        rewards = row.get("rewards")
        if rewards is None:
            if by_reward:
                raise InputError(f"{where}: no 'rewards' (a pre-screen without hop credit)")
            rewards = [1.0] * row["correct"] + [0.0] * (samples - row["correct"])
        signal = not group_advantages(rewards).zero_variance  # as ``has_signal`` tests a group
        out[row["id"]] = Screened(row["correct"], tuple(rewards), signal)
    missing = wanted - set(out)
    if missing:
        raise InputError(f"{rows_path}: {len(missing)} candidate task(s) not screened, e.g. "
                         f"{sorted(missing)[0]!r}")
    return out


def earlier_prescreen(tasks: list, config: GRPOConfig, init_path: str | os.PathLike
                      ) -> tuple[Path, dict[str, Screened], dict] | None:
    """The pre-screen that ``prescreen_from`` names, as ``(its rows file, Screened by task id,
    what it was sampled with)``, once its start model and settings are this run's (None without
    ``prescreen_from``)."""
    if not config.prescreen_from:
        return None
    source = Path(config.prescreen_from)
    source = source / ROWS if source.is_dir() else source
    identity = sampled_with(config.to_dict(), checkpoint_digest(init_path))
    earlier = earlier_sampled_with(source)
    changed = next((key for key in identity if earlier.get(key) != identity[key]), None)
    if changed:
        raise InputError(f"{source}: sampled with {changed}={earlier.get(changed)!r}, this run "
                         f"has {identity[changed]!r}: a pre-screen is read only by a run from "
                         "the same model with the same settings")
    candidates = prescreen_candidates(tasks, config)
    screened = read_prescreen(source, candidates, config.prescreen_samples,
                              bool(config.hop_reward))
    mixed = {i for i, s in screened.items() if s.mixed(bool(config.hop_reward))}
    check_kept(prescreened_tasks(candidates, mixed, config.prescreen_unmixed), source)
    return source, screened, identity


def check_kept(kept: list, rows_path: Path) -> None:
    """Refuse a pre-screen that leaves GRPO no task, naming its rows file."""
    if not kept:
        raise InputError(f"{rows_path}: no screened task has mixed outcomes, so GRPO has nothing "
                         "to learn from; use --prescreen-unmixed keep or more --prescreen-samples")


def run_prescreen(tasks: list, backend, toolbox, settings: RolloutSettings, judge,
                  config: GRPOConfig, out: Path, log: Callable[[str], None],
                  init_path: str | os.PathLike,
                  earlier: tuple[Path, dict[str, Screened], dict] | None = None) -> dict:
    """The ``prescreen`` curriculum: ``prescreen_samples`` episodes of each candidate
    (``prescreen_candidates``) from the model at ``init_path``, unless ``earlier`` holds them
    (``earlier_prescreen``); written to ``out/prescreen.jsonl`` (with each episode's reward where
    wrong answers earn hop credit) and what they were sampled with to ``out/prescreen.json``. The
    kept tasks (``prescreened_tasks`` by ``prescreen_unmixed``) and counts."""
    t0 = time.perf_counter()
    candidates = prescreen_candidates(tasks, config)
    k = config.prescreen_samples
    by_reward = bool(settings.hop_reward)
    if earlier is not None:
        source, screened, identity = earlier
    else:
        identity = sampled_with(config.to_dict(), checkpoint_digest(init_path))
        per_call = max(1, (config.rollout_batch or config.batch_trajectories) // k)
        screened = prescreen(backend, toolbox, candidates, k, settings, judge,
                             tasks_per_call=per_call, progress=config.progress)
    rows = []
    for t in candidates:
        row = {"id": t.id, "difficulty": t.difficulty, "correct": screened[t.id].correct,
               "samples": k}
        if by_reward:
            row["rewards"] = [round(r, 4) for r in screened[t.id].rewards]
        rows.append(row)
    write_jsonl(out / ROWS, rows)
    atomic_write_json(out / SIDECAR, identity)
    mixed = {t.id for t in candidates if screened[t.id].mixed(by_reward)}
    kept = prescreened_tasks(candidates, mixed, config.prescreen_unmixed)
    check_kept(kept, out / ROWS)
    counts = {}
    for lvl in sorted({t.difficulty for t in candidates}):
        level = [t for t in candidates if t.difficulty == lvl]
        counts[lvl] = {"screened": len(level), "mixed": sum(t.id in mixed for t in level),
                       "all_correct": sum(screened[t.id].correct == k for t in level)}
    seconds = round(time.perf_counter() - t0, 2)
    signal = "rewards that differ" if by_reward else "solved sometimes but not always"
    how = f"read from {source}" if earlier is not None else "sampled"
    log(f"[grpo] pre-screen ({how}): {len(candidates)} tasks x {k} episodes in {seconds} s; "
        f"{signal}: {len(mixed)}; training on {len(kept)} tasks")
    return {"tasks": kept, "samples": k, "by_difficulty": counts, "n_kept": len(kept),
            "seconds": seconds, **({"read_from": str(source)} if earlier is not None else {})}
