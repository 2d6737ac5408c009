"""Training chains at scale: teacher trajectories from fresh worlds the evaluation never uses.

The evaluation world holds about a hundred training tasks a level; a model trained on them seven
times memorises that world's entities. The sandbox makes tasks for free, so this stage builds
worlds with other seeds, renames every name root they share with the evaluation world
(``world/rename.py``), runs the synthesis stages and the teacher in each (every task a training
task), and pools the accepted trajectories into one SFT file, each distinct trajectory at most
``max_repeats`` times, with the levels of 1 to 5 injection rounds (2 and 4 are training-only
levels: a curriculum by hop count) and the one-hop warm-up.

    vsearcher-lite chains --out runs/chains --trajectories 10000

Resumable: a world whose teacher stage finished is read back, not built again.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from vsearcher_lite.agent.task import ONEHOP
from vsearcher_lite.runio import InputError, atomic_write_json, read_json, read_jsonl, write_jsonl

#: Injection rounds of every training level, in hop order; ``rounds2`` and ``rounds4`` are the
#: curriculum's levels between the paper's easy (1), medium (3) and hard (5)
CHAIN_ROUNDS = {ONEHOP: 0, "easy": 1, "rounds2": 2, "medium": 3, "rounds4": 4, "hard": 5}
#: Tasks asked of each world per level: more where the filters and the teacher keep fewer (on a
#: 2,000-entity world they keep about 58 % of one-hop tasks and 26 % of hard ones), so that
#: medium and hard end with at least as many trajectories as easy
DEFAULT_LEVEL_TASKS = {ONEHOP: 250, "easy": 300, "rounds2": 420, "medium": 480, "rounds4": 560,
                       "hard": 640}
FIRST_WORLD_SEED = 1001  # far from the evaluation world (0) and the pretraining corpus (101-120)
POOLED = Path("trajectories") / "export" / "sft_trl.jsonl"


@dataclass
class ChainConfig:
    """Settings of the ``chains`` stage."""

    trajectories: int = 10_000  # distinct accepted trajectories to reach (worlds are added)
    entities: int = 2000  # entities per training world
    first_seed: int = FIRST_WORLD_SEED
    max_worlds: int = 40
    level_tasks: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_LEVEL_TASKS))
    max_repeats: int = 2  # how often one distinct trajectory may appear in the pooled file
    samples_per_task: int = 1  # the heuristic teacher's further samples mostly repeat its path
    shuffle_seed: int = 0
    progress: bool = False

    def check(self) -> None:
        for name in ("trajectories", "entities", "max_worlds", "max_repeats", "samples_per_task"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise InputError(f"chains: {name} must be a whole number >= 1, got {value!r}")
        unknown = sorted(set(self.level_tasks) - set(CHAIN_ROUNDS))
        if unknown:
            raise InputError(f"chains: unknown level(s) {unknown}; known: "
                             f"{', '.join(CHAIN_ROUNDS)}")
        if not any(self.level_tasks.values()):
            raise InputError("chains: every level asks for 0 tasks")


def parse_level_tasks(text: str) -> dict[str, int]:
    """``LEVEL:N,...`` (``--level-tasks``) as a dict; levels not named keep their default.

    >>> parse_level_tasks("hard:900,onehop:0")["hard"], parse_level_tasks("hard:900")["easy"]
    (900, 300)
    """
    out = dict(DEFAULT_LEVEL_TASKS)
    for part in filter(None, (p.strip() for p in text.split(","))):
        level, _, count = part.partition(":")
        if level not in CHAIN_ROUNDS or not count.isdigit():
            raise InputError(f"{part!r} is not LEVEL:N with LEVEL one of "
                             f"{', '.join(CHAIN_ROUNDS)}")
        out[level] = int(count)
    return out


def level_tasks_option(text: str) -> dict[str, int]:
    """``--level-tasks``: argparse shows this error's own words (not "invalid value")."""
    try:
        return parse_level_tasks(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def world_folder(out: Path, seed: int) -> Path:
    return out / "worlds" / f"seed-{seed}"


def build_world_run(run: Path, seed: int, config: ChainConfig) -> dict:
    """One training world's synthesis and teacher stages in ``run`` (a run folder); every task
    is a training task. Returns the trajectories stage's metrics."""
    from vsearcher_lite.synthesis.filters import FilterConfig, run_filter
    from vsearcher_lite.synthesis.inject import InjectConfig, run_inject_image, run_inject_text
    from vsearcher_lite.synthesis.seeds import SeedConfig, run_seeds
    from vsearcher_lite.synthesis.trajectories import TrajectoryConfig, generate_trajectories
    from vsearcher_lite.world.rename import evaluation_roots
    from vsearcher_lite.world.store import MANIFEST, build_world

    if not (run / "world" / MANIFEST).exists():
        build_world(run / "world", config.entities, seed, rename_away=evaluation_roots())
    levels = {k: n for k, n in config.level_tasks.items() if k != ONEHOP and n}
    inject = InjectConfig.for_profile(
        "cpu", seed=seed, n_train=0, n_heldout=0, n_exam=0, onehop_heldout=0,
        onehop_train=config.level_tasks.get(ONEHOP, 0), onehop_warmup_heldout_share=0.0,
        mix={k: 1 for k in levels}, rounds={k: CHAIN_ROUNDS[k] for k in levels},
        warmup_levels={k: (n, 0) for k, n in levels.items()}, progress=config.progress)
    run_seeds(run, SeedConfig(seed=seed))
    run_inject_text(run, inject)
    run_inject_image(run, inject)
    filtering = FilterConfig(seed=seed, rl_tasks=0, validation_tasks=0, progress=config.progress)
    run_filter(run, filtering, inject_config=inject)
    teacher = TrajectoryConfig.for_profile("cpu", seed=seed, progress=config.progress,
                                           samples_per_task=config.samples_per_task)
    return generate_trajectories(run, teacher)


def world_records(out: Path, seed: int) -> list[dict]:
    """A finished world's SFT records, image paths made relative to ``out``, tagged with the
    world and the task."""
    run = world_folder(out, seed)
    prefix = run.relative_to(out).as_posix()
    accepted = list(read_jsonl(run / "trajectories" / "accepted.jsonl"))
    exported = list(read_jsonl(run / POOLED))
    if len(accepted) != len(exported):
        raise InputError(f"{run / POOLED}: {len(exported)} records for {len(accepted)} accepted "
                         "trajectories; delete the world's trajectories folder and rerun")
    out_records = []
    for acc, rec in zip(accepted, exported):
        out_records.append({**rec, "images": [f"{prefix}/{p}" for p in rec.get("images", [])],
                            "world_seed": seed, "task_id": acc["task_id"]})
    return out_records


def trajectory_text(record: dict) -> str:
    return json.dumps(record["messages"], sort_keys=True)


def naming_check() -> Callable[[dict], list[str]]:
    """A function giving the evaluation world's names that a record's text contains."""
    from vsearcher_lite.chat.base import message_text
    from vsearcher_lite.world.rename import ForbiddenNames, default_world_names

    finder = ForbiddenNames(default_world_names())

    def names_in(record: dict) -> list[str]:
        return finder.found(" ".join(message_text(m) for m in record["messages"]))
    return names_in


def pool_records(records: list[dict], config: ChainConfig,
                 names_in: Callable[[dict], list[str]]) -> tuple[list[dict], dict]:
    """The records to train on, shuffled (the levels mixed), each distinct text at most
    ``max_repeats`` times and none naming an evaluation-world entity; and the counts."""
    seen: Counter = Counter()
    kept, n_repeats, n_named = [], 0, 0
    for r in records:
        text = trajectory_text(r)
        if seen[text] >= config.max_repeats:
            n_repeats += 1
            continue
        if names_in(r):
            n_named += 1
            continue
        seen[text] += 1
        kept.append(r)
    random.Random(f"vsearcher-chains:{config.shuffle_seed}").shuffle(kept)
    return kept, {"n_dropped_repeats": n_repeats, "n_dropped_naming_evaluation_world": n_named}


def chain_counts(records: list[dict]) -> dict:
    """``distinct_*`` counts by level: trajectories, tasks and entities the chains start from."""
    levels = [k for k in CHAIN_ROUNDS if any(r.get("level") == k for r in records)]
    by = {k: [r for r in records if r.get("level") == k] for k in levels}
    return {
        "n_records": len(records),
        "distinct_trajectories": len({trajectory_text(r) for r in records}),
        "distinct_trajectories_by_level": {k: len({trajectory_text(r) for r in v})
                                           for k, v in by.items()},
        "distinct_tasks_by_level": {k: len({(r["world_seed"], r["task_id"]) for r in v})
                                    for k, v in by.items()},
        "distinct_tasks": len({(r["world_seed"], r["task_id"]) for r in records}),
        "records_by_level": {k: len(v) for k, v in by.items()},
    }


def run_chains(out: str | Path, config: ChainConfig | None = None, *, log=print) -> dict:
    """Add training worlds until the pooled file holds ``config.trajectories`` distinct
    trajectories (or ``max_worlds`` are built); writes ``OUT/trajectories/export/sft_trl.jsonl``
    and ``OUT/metrics.json``; returns the metrics."""
    config = config or ChainConfig()
    config.check()
    out = Path(out)
    metrics_path = out / "metrics.json"
    if metrics_path.exists():
        earlier = read_json(metrics_path).get("settings", {})
        same = {k: v for k, v in earlier.items() if k not in ("trajectories", "max_worlds",
                                                                 "progress")}
        now = {k: v for k, v in asdict(config).items() if k in same}
        if same != now:
            raise InputError(f"{metrics_path}: built with other settings ({same}); use a new "
                             "--out folder")
    names_in = naming_check()
    records: list[dict] = []
    worlds: list[dict] = []
    t_start = time.perf_counter()
    pooled: list[dict] = []
    counts: dict = {"distinct_trajectories": 0}
    for seed in range(config.first_seed, config.first_seed + config.max_worlds):
        if counts["distinct_trajectories"] >= config.trajectories:
            break
        run = world_folder(out, seed)
        t0 = time.perf_counter()
        done = (run / "trajectories" / "metrics.json").exists()
        if not done:
            build_world_run(run, seed, config)
        records += world_records(out, seed)
        pooled, drops = pool_records(records, config, names_in)
        counts = chain_counts(pooled)
        worlds.append({"seed": seed, "seconds": round(time.perf_counter() - t0, 1),
                       "reused": done,
                       "renamed_roots": read_json(run / "world" / "metrics.json").get(
                           "n_renamed_roots", 0)})
        log(f"[chains] world {seed}: {counts['distinct_trajectories']} distinct trajectories "
            f"pooled ({time.perf_counter() - t_start:.0f} s)")
    write_jsonl(out / POOLED, pooled)
    metrics = {**counts, **drops, "n_worlds": len(worlds), "worlds": worlds,
               "reached_target": counts["distinct_trajectories"] >= config.trajectories,
               "seconds": round(time.perf_counter() - t_start, 1), "settings": asdict(config),
               "train_file": str(out / POOLED)}
    atomic_write_json(metrics_path, metrics)
    return metrics


def register(subparsers, common) -> None:
    """``vsearcher-lite chains``: the pooled training chains (its own ``--out`` folder: the
    worlds it builds are never the evaluation world's run folder)."""
    p = subparsers.add_parser(
        "chains", help="teacher trajectories at scale from fresh training worlds",
        description="Build worlds with other seeds (the evaluation world's name roots renamed "
                    "away), run the synthesis stages and the teacher in each with every task a "
                    "training task, at 1-5 injection rounds and the one-hop warm-up, and pool "
                    "the accepted trajectories into OUT/trajectories/export/sft_trl.jsonl for "
                    "`vsearcher-lite sft --train-file`. Resumable.")
    d = ChainConfig()
    p.add_argument("--out", default="runs/chains", help="output folder (default: runs/chains)")
    p.add_argument("--trajectories", type=int, default=d.trajectories,
                   help=f"distinct trajectories to reach (default: {d.trajectories:,})")
    p.add_argument("--entities", type=int, default=d.entities,
                   help=f"entities per training world (default: {d.entities})")
    p.add_argument("--first-seed", type=int, default=d.first_seed,
                   help=f"seed of the first training world (default: {d.first_seed})")
    p.add_argument("--max-worlds", type=int, default=d.max_worlds,
                   help=f"at most this many worlds (default: {d.max_worlds})")
    p.add_argument("--level-tasks", type=level_tasks_option, default=dict(DEFAULT_LEVEL_TASKS),
                   metavar="LEVEL:N,...", help="tasks asked of each world per level (default: "
                   + ",".join(f"{k}:{v}" for k, v in DEFAULT_LEVEL_TASKS.items()) + ")")
    p.add_argument("--max-repeats", type=int, default=d.max_repeats,
                   help=f"copies of one distinct trajectory at most (default: {d.max_repeats})")
    p.set_defaults(func=_command)


def _command(args) -> int:
    config = ChainConfig(trajectories=args.trajectories, entities=args.entities,
                         first_seed=args.first_seed, max_worlds=args.max_worlds,
                         level_tasks=args.level_tasks, max_repeats=args.max_repeats)
    m = run_chains(args.out, config)
    print(f"chains: {m['distinct_trajectories']:,} distinct trajectories from {m['n_worlds']} "
          f"worlds in {m['seconds'] / 60:.1f} min -> {m['train_file']}")
    print("  by level: " + ", ".join(f"{k} {v:,}" for k, v in
                                      m["distinct_trajectories_by_level"].items()))
    print(f"  dropped: {m['n_dropped_repeats']} repeats, "
          f"{m['n_dropped_naming_evaluation_world']} naming an evaluation-world entity")
    if not m["reached_target"]:
        print(f"  fewer than the {args.trajectories:,} asked: raise --max-worlds")
    return 0
