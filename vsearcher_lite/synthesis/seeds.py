"""Stage `seeds`: rare-but-documented seed entities, split into disjoint pools.

Paper 2.1 and A.2: seeds have few sitelinks (rare: a model is unlikely to know them), many
statements (documented: enough to write questions from) and an image, and are not people. The
paper queried Wikidata (sitelinks <= 10, statements >= 20); the sandbox has its own thresholds.

Every seed goes to exactly one pool: ``easy``, ``medium``, ``hard`` (training), ``heldout`` or
``exam`` (the MM-SearchExam counterpart), so the exam's seeds never appear in training (paper
2.4). Outputs in ``RUN_DIR/seeds/``: ``seeds.jsonl``, ``population.csv`` (sandbox: every
entity's counts, for the notebook's scatter plot) and ``metrics.json``.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from vsearcher_lite.agent.task import DIFFICULTY_ROUNDS
from vsearcher_lite.options import option
from vsearcher_lite.runio import (
    InputError,
    RunDir,
    atomic_write_text,
    csv_text,
    read_jsonl,
    write_jsonl,
)
from vsearcher_lite.world.model import KnowledgeSource, Seed

TRAIN_POOLS = tuple(DIFFICULTY_ROUNDS)  # easy, medium, hard
POOLS = TRAIN_POOLS + ("heldout", "exam")
DEFAULT_MIX = {"easy": 4, "medium": 3, "hard": 3}  # paper A.4: the RL data's Easy:Medium:Hard ratio
#: The options of ``seeds`` (and of the later synthesis commands), by field.
CLI_OPTIONS = ("sitelinks_max", "statements_min", "limit", "exam_share", "heldout_share")


def parse_mix(text: str) -> dict[str, int]:
    """``"4:3:3"`` -> ``{"easy": 4, "medium": 3, "hard": 3}``.

    >>> parse_mix("1:1:2")
    {'easy': 1, 'medium': 1, 'hard': 2}
    """
    try:
        values = [int(p) for p in text.split(":")]
    except ValueError:
        raise InputError(f"--mix {text!r}: expected three integers like 4:3:3") from None
    if len(values) != 3 or any(v < 0 for v in values) or sum(values) == 0:
        raise InputError(f"--mix {text!r}: expected three non-negative integers like 4:3:3")
    return dict(zip(("easy", "medium", "hard"), values))


@dataclass
class SeedConfig:
    """Settings of the seeds stage. ``None`` thresholds mean the source's own defaults."""

    sitelinks_max: int | None = option(None, "rare: at most this many sitelinks (default: per "
                                       "world)")
    statements_min: int | None = option(None, "documented: at least this many statements "
                                        "(default: per world)")
    require_image: bool = True
    exclude_people: bool = True
    limit: int | None = option(None, "at most this many seeds from the source")
    exam_share: float = option(0.15, "share of seeds for the exam (default 0.15)")
    heldout_share: float = option(0.10, "share of seeds held out (default: 0.10)")
    mix: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_MIX))
    seed: int = 0

    def thresholds(self, source: KnowledgeSource) -> tuple[int, int]:
        sitelinks, statements = self.sitelinks_max, self.statements_min
        if sitelinks is None:
            sitelinks = default_threshold(source, "SITELINKS_MAX", 10)
        if statements is None:
            statements = default_threshold(source, "STATEMENTS_MIN", 20)
        return sitelinks, statements


def default_threshold(source: KnowledgeSource, name: str, fallback: int) -> int:
    """The source's ``DEFAULT_<name>`` (attribute or module constant), else the paper's value."""
    import sys

    for holder in (source, sys.modules.get(type(source).__module__)):
        value = getattr(holder, f"DEFAULT_{name}", None)
        if isinstance(value, int):
            return value
    return fallback


def split_counts(total: int, weights: dict[str, float]) -> dict[str, int]:
    """Split ``total`` by ``weights`` with the largest-remainder rule (the parts sum to ``total``).

    >>> split_counts(10, {"easy": 4, "medium": 3, "hard": 3})
    {'easy': 4, 'medium': 3, 'hard': 3}
    >>> split_counts(7, {"easy": 4, "medium": 3, "hard": 3})
    {'easy': 3, 'medium': 2, 'hard': 2}
    """
    wsum = float(sum(weights.values()))
    if total <= 0 or wsum <= 0:
        return {k: 0 for k in weights}
    exact = {k: total * w / wsum for k, w in weights.items()}
    counts = {k: int(v) for k, v in exact.items()}
    rest = total - sum(counts.values())
    order = sorted(weights, key=lambda k: (-(exact[k] - counts[k]), list(weights).index(k)))
    for k in order[:rest]:
        counts[k] += 1
    return counts


def interleave(counts: dict[str, int]) -> list[str]:
    """A label sequence with the given counts, spread evenly (so any prefix keeps the mix).

    >>> "".join(x[0] for x in interleave({"easy": 2, "medium": 1, "hard": 1}))
    'emhe'
    """
    total = sum(counts.values())
    taken = {k: 0 for k in counts}
    out = []
    for i in range(total):
        # the label furthest behind its share so far goes next
        k = max(counts,
                key=lambda k: (counts[k] * (i + 1) / total - taken[k], -list(counts).index(k)))
        taken[k] += 1
        out.append(k)
    return out


def assign_pools(seeds: list[Seed], config: SeedConfig) -> dict[str, str]:
    """Seed id -> pool. Deterministic for ``config.seed``; every seed in exactly one pool."""
    shares = (config.exam_share, config.heldout_share)
    if any(not 0 <= x < 1 for x in shares) or sum(shares) >= 1:
        raise InputError("exam_share and heldout_share must each be in [0, 1) and leave seeds "
                         f"for training (sum below 1), got {config.exam_share} and "
                         f"{config.heldout_share}")
    order = sorted(seeds, key=lambda s: s.id)
    random.Random(f"vsearcher-seeds:{config.seed}").shuffle(order)
    n = len(order)
    n_exam = int(round(n * config.exam_share))
    n_heldout = int(round(n * config.heldout_share))
    if n >= 3:  # every pool non-empty when there is anything to split
        n_exam, n_heldout = max(1, n_exam), max(1, n_heldout)
    n_train = max(0, n - n_exam - n_heldout)
    train = interleave(split_counts(n_train, config.mix))
    labels = ["exam"] * n_exam + ["heldout"] * n_heldout + train
    return {s.id: pool for s, pool in zip(order, labels)}


def select_seeds(source: KnowledgeSource, config: SeedConfig) -> list[Seed]:
    """The source's seeds under the config's thresholds, de-duplicated, in the source's order."""
    smax, smin = config.thresholds(source)
    seeds = source.seeds(
        smax, smin, require_image=config.require_image, exclude_people=config.exclude_people,
        limit=config.limit
    )
    unique: dict[str, Seed] = {}
    for s in seeds:
        unique.setdefault(s.id, s)  # the released seed files repeat ~5% of rows (upstream A.2)
    return list(unique.values())


def population_rows(source: KnowledgeSource, selected: set[str]) -> list[dict] | None:
    """Every entity's counts for the scatter plot, when the source can list them (the sandbox)."""
    stats = getattr(source, "stats", None)
    if stats is None:
        return None
    return [
        {
            "id": r["id"],
            "type": r["type"],
            "sitelinks": int(r["sitelinks"]),
            "statements": int(r["statements"]),
            "has_image": int(bool(r["has_image"])),
            "is_person": int(bool(r["is_person"])),
            "selected": int(r["id"] in selected),
        }
        for r in stats()
    ]


def rows_to_csv(rows: list[dict]) -> str:
    """``rows`` as CSV under the first row's keys."""
    return csv_text(rows, list(rows[0]) if rows else ["id"])


def run_seeds(run_dir: str | Path, config: SeedConfig | None = None, *,
              source: KnowledgeSource | None = None) -> dict:
    """Select seeds, split them into pools, write the stage's files; returns the metrics."""
    from vsearcher_lite.synthesis.sources import open_source

    config = config or SeedConfig()
    rd = RunDir(run_dir)
    start = time.perf_counter()
    source = source if source is not None else open_source(run_dir, "sandbox", seed=config.seed)
    seeds = select_seeds(source, config)
    smax, smin = config.thresholds(source)
    if not seeds:
        raise InputError(
            f"no seeds with sitelinks <= {smax} and statements >= {smin}: loosen the thresholds "
            "(--sitelinks-max / --statements-min)"
        )
    pools = assign_pools(seeds, config)
    out = rd.stage("seeds")
    write_jsonl(out / "seeds.jsonl", [{**asdict(s), "pool": pools[s.id]} for s in seeds])
    population = population_rows(source, set(pools))
    if population:
        atomic_write_text(out / "population.csv", rows_to_csv(population))
    sizes = {p: sum(1 for v in pools.values() if v == p) for p in POOLS}
    metrics = {
        "world": source.name,
        "n_seeds": len(seeds),
        "pool_sizes": sizes,
        "sitelinks_max": smax,
        "statements_min": smin,
        "require_image": config.require_image,
        "exclude_people": config.exclude_people,
        "seed": config.seed,
        "seconds": round(time.perf_counter() - start, 3),
    }
    if population:
        eligible = [r for r in population if r["has_image"] and not r["is_person"]]
        metrics["n_entities"] = len(population)
        metrics["n_eligible"] = len(eligible)
        metrics["selected_share_of_eligible"] = round(len(seeds) / max(1, len(eligible)), 4)
    rd.write_metrics("seeds", metrics)
    return metrics


def read_seeds(run_dir: str | Path) -> list[dict]:
    """The seed records of a run (with ``pool``); ``InputError`` says what to run if missing."""
    path = Path(run_dir) / "seeds" / "seeds.jsonl"
    if not path.exists():
        raise InputError(f"{path} does not exist: "
                         f"run `vsearcher-lite seeds --run-dir {run_dir}` first")
    records = list(read_jsonl(path))
    for number, rec in enumerate(records, start=1):
        missing = [k for k in ("id", "title", "pool") if k not in rec]
        if missing:
            raise InputError(f"{path}:{number}: seed record is missing {', '.join(missing)}")
        if rec["pool"] not in POOLS:
            raise InputError(f"{path}:{number}: unknown pool {rec['pool']!r} "
                             f"(expected one of {', '.join(POOLS)})")
    return records


def seed_from_record(rec: dict) -> Seed:
    return Seed(
        id=str(rec["id"]),
        title=str(rec["title"]),
        sitelinks=int(rec.get("sitelinks", 0)),
        statements=int(rec.get("statements", 0)),
        type=str(rec.get("type", "")),
    )


def ensure_seeds(run_dir: str | Path, config: SeedConfig | None = None, *,
                 source: KnowledgeSource | None = None) -> list[dict]:
    """The run's seeds, selecting them with defaults first when the stage has not run."""
    if not (Path(run_dir) / "seeds" / "seeds.jsonl").exists():
        run_seeds(run_dir, config, source=source)
    return read_seeds(run_dir)
