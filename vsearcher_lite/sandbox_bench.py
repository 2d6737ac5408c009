"""``vsearcher-lite bench``: performance and quality benchmarks of the sandbox web's tools and the
offline synthesis stages, in named sections (not a stage of the course).

Runs each ``@bench_section`` on a sandbox world in ``RUN_DIR/bench/world`` and merges the
numbers into ``RUN_DIR/bench/metrics.json``: ``text_search`` (queries from an entity's
distinctive facts, never its name; hit@5 is its article in the top 5), ``image_search``
(perturbed entity pictures), ``visit`` (does the summary hold the fact asked for),
``generic_queries`` (a generic description should *miss* at rank 1: one lucky search must not
solve the sandbox) and ``synthesis`` (the offline synthesis stages).
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from vsearcher_lite.runio import InputError, RunDir, atomic_write_json, read_json
from vsearcher_lite.synthesis.filters import FilterConfig, run_filter
from vsearcher_lite.synthesis.inject import (
    InjectConfig,
    index_for,
    run_inject_image,
    run_inject_text,
)
from vsearcher_lite.synthesis.seeds import SeedConfig, run_seeds
from vsearcher_lite.tools.sandbox import sandbox_backends
from vsearcher_lite.world.commands import positive_int
from vsearcher_lite.world.images import perturb_image
from vsearcher_lite.world.model import ImageRef
from vsearcher_lite.world.queries import distinctive_query, generic_query
from vsearcher_lite.world.store import ensure_world

DEFAULT_BENCH_ENTITIES = 10_000
DEFAULT_QUERIES = 200


@dataclass
class BenchContext:
    """What every bench section gets: where to write, sizes, the seed, and the world (lazy)."""

    run_dir: Path
    bench_dir: Path
    n_entities: int
    n_queries: int
    seed: int
    args: argparse.Namespace | None = None
    cache: dict = field(default_factory=dict)  # shared between sections (backends, samples)

    @property
    def world(self):
        if "world" not in self.cache:
            t0 = time.perf_counter()
            self.cache["world"] = ensure_world(self.bench_dir, self.n_entities, self.seed)
            self.cache["world_seconds"] = time.perf_counter() - t0
        return self.cache["world"]

    def backends(self) -> dict:
        if "backends" not in self.cache:
            self.cache["backends"] = sandbox_backends(self.world)
        return self.cache["backends"]

    def rng(self, section: str) -> random.Random:
        return random.Random(f"vsearcher-bench:{self.seed}:{section}")

    def sample_entities(self, section: str, n: int, predicate=None) -> list[str]:
        """Up to ``n`` entity ids, drawn with the section's own seeded generator."""
        ids = self.world.knowledge.entity_ids()
        rng = self.rng(section)
        rng.shuffle(ids)
        out = []
        for eid in ids:
            if predicate is None or predicate(eid):
                out.append(eid)
                if len(out) >= n:
                    break
        return out


BENCH_SECTIONS: dict[str, Callable[[BenchContext], dict]] = {}


def bench_section(name: str):
    """Register ``fn(ctx) -> dict`` as a bench section (decorator)."""
    def register_section(fn):
        BENCH_SECTIONS[name] = fn
        return fn
    return register_section


def p50_ms(seconds: list[float]) -> float:
    """Median of durations in seconds, as milliseconds rounded to 3 decimals.

    >>> p50_ms([0.001, 0.003, 0.002])
    2.0
    """
    return round(statistics.median(seconds) * 1000, 3) if seconds else float("nan")


def p95_ms(seconds: list[float]) -> float:
    if not seconds:
        return float("nan")
    ordered = sorted(seconds)
    return round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] * 1000, 3)


@bench_section("world")
def bench_world(ctx: BenchContext) -> dict:
    world = ctx.world
    m = world.metrics()
    return {
        "bench_n_entities": world.n_entities,
        "bench_n_pages": m.get("n_pages"),
        "bench_n_images": m.get("n_images"),
        "bench_world_build_seconds": m.get("build_seconds"),
        "bench_world_ready_seconds": round(ctx.cache.get("world_seconds", 0.0), 3),
    }


@bench_section("text_search")
def bench_text_search(ctx: BenchContext) -> dict:
    k = ctx.world.knowledge
    search = ctx.backends()["text"]
    queries = []
    for eid in ctx.sample_entities("text_search", ctx.n_queries * 2):
        q = distinctive_query(k, eid)
        if q:
            queries.append((eid, q))
        if len(queries) >= ctx.n_queries:
            break
    search.search("warm up the page cache", 5)
    times, hits = [], 0
    for eid, q in queries:
        t0 = time.perf_counter()
        results = search.search(q, 5)
        times.append(time.perf_counter() - t0)
        hits += k.entity(eid).url in [h.url for h in results]
    return {
        "text_search_queries": len(queries),
        "text_search_p50_ms": p50_ms(times),
        "text_search_p95_ms": p95_ms(times),
        "text_search_hit_at_5": round(hits / max(1, len(queries)), 4),
    }


@bench_section("generic_queries")
def bench_generic_queries(ctx: BenchContext) -> dict:
    k = ctx.world.knowledge
    search = ctx.backends()["text"]
    rng = ctx.rng("generic_queries")
    misses = n = 0
    for eid in ctx.sample_entities("generic_queries", ctx.n_queries * 2):
        q = generic_query(k, eid, rng)
        if q is None:
            continue
        results = search.search(q, 5)
        n += 1
        misses += not results or results[0].url != k.entity(eid).url
        if n >= ctx.n_queries:
            break
    return {"generic_queries": n, "generic_query_miss_at_1": round(misses / max(1, n), 4)}


@bench_section("image_search")
def bench_image_search(ctx: BenchContext) -> dict:
    k = ctx.world.knowledge
    search = ctx.backends()["image"]
    qdir = ctx.bench_dir / "image_queries"
    qdir.mkdir(parents=True, exist_ok=True)
    picked = ctx.sample_entities("image_search", ctx.n_queries, lambda e: k.image(e) is not None)
    queries = []
    for i, eid in enumerate(picked):
        dst = qdir / f"{eid}.jpg"
        perturb_image(k.image(eid).location, dst, seed=f"{ctx.seed}:{eid}")
        queries.append((eid, ImageRef(str(dst))))
    if queries:
        search.search(queries[0][1], 5)  # warm-up: the feature matrix and page map load lazily
    times, hits, top1 = [], 0, 0
    for eid, ref in queries:
        t0 = time.perf_counter()
        results = search.search(ref, 5)
        times.append(time.perf_counter() - t0)
        urls = [h.url for h in results]
        url = k.entity(eid).url
        hits += url in urls
        top1 += urls[:1] == [url]
    n = max(1, len(queries))
    return {
        "image_search_queries": len(queries),
        "image_search_p50_ms": p50_ms(times),
        "image_search_p95_ms": p95_ms(times),
        "image_search_hit_at_5": round(hits / n, 4),
        "image_search_hit_at_1": round(top1 / n, 4),
    }


@bench_section("visit")
def bench_visit(ctx: BenchContext) -> dict:
    k = ctx.world.knowledge
    backends = ctx.backends()
    reader, summariser = backends["reader"], backends["summariser"]
    rng = ctx.rng("visit")
    times, found, n = [], 0, 0
    for eid in ctx.sample_entities("visit", ctx.n_queries):
        e = k.entity(eid)
        facts = [f for f in k.facts(eid) if f.relation != "instance_of"]
        if not facts:
            continue
        f = rng.choice(facts)
        goal = f"the {f.label} of {e.name}"
        t0 = time.perf_counter()
        summary = summariser.summarise(reader.read(e.url), goal)
        times.append(time.perf_counter() - t0)
        n += 1
        found += f.value_text() in summary
    return {"visits": n, "visit_p50_ms": p50_ms(times), "visit_p95_ms": p95_ms(times),
            "visit_fact_recall": round(found / max(1, n), 4)}


@bench_section("synthesis")
def bench_synthesis(ctx: BenchContext) -> dict:
    """The real synthesis stages on the bench world, into a fresh ``RUN_DIR/bench/synthesis``;
    ``synthesis_tasks_per_s``: multimodal tasks per second of text + image injection."""
    out = ctx.bench_dir / "synthesis"
    shutil.rmtree(out, ignore_errors=True)
    source = ctx.world.knowledge
    t0 = time.perf_counter()
    index_for(source)
    index_s = time.perf_counter() - t0
    run_seeds(out, SeedConfig(seed=ctx.seed), source=source)
    n_train = max(100, ctx.n_queries)
    config = InjectConfig(n_train=n_train, n_heldout=n_train // 10, n_exam=n_train // 10,
                          seed=ctx.seed, progress=False)
    t0 = time.perf_counter()
    text = run_inject_text(out, config, source=source)
    text_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    image = run_inject_image(out, config, source=source)
    image_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    filter_config = FilterConfig(seed=ctx.seed, progress=False)
    filt = run_filter(out, filter_config, source=source, inject_config=config)
    filter_s = time.perf_counter() - t0
    return {
        "synthesis_index_seconds": round(index_s, 3),
        "synthesis_text_tasks": text["n_tasks"],
        "synthesis_text_failed": text["n_failed"],
        "synthesis_text_tasks_per_s": round(text["n_tasks"] / text_s, 1),
        "synthesis_image_tasks": image["n_tasks"],
        "synthesis_image_tasks_per_s": round(image["n_tasks"] / image_s, 1),
        "synthesis_tasks_per_s": round(image["n_tasks"] / (text_s + image_s), 1),
        "synthesis_answer_invariance_rate": image["answer_invariance_rate"],
        "synthesis_filter_tasks_per_s": round(filt["n_input"] / filter_s, 1),
        "synthesis_n_kept": filt["n_kept"],
    }


def run_bench(run_dir: str | Path, n_entities: int = DEFAULT_BENCH_ENTITIES,
              n_queries: int = DEFAULT_QUERIES, seed: int = 0, sections: list[str] | None = None,
              args: argparse.Namespace | None = None) -> dict:
    """Run the named sections (default: all); merge their numbers into bench/metrics.json."""
    names = list(BENCH_SECTIONS) if not sections else sections
    unknown = [s for s in names if s not in BENCH_SECTIONS]
    if unknown:
        raise InputError(f"unknown bench section(s) {', '.join(unknown)}; "
                         f"known: {', '.join(BENCH_SECTIONS)}")
    run = RunDir(run_dir)
    bench_dir = run.stage("bench")
    ctx = BenchContext(Path(run_dir), bench_dir, n_entities, n_queries, seed, args)
    path = bench_dir / "metrics.json"
    metrics: dict = {}
    if path.exists():
        try:
            metrics = read_json(path)
        except InputError:
            metrics = {}
    if metrics.get("bench_n_entities") not in (None, n_entities):
        metrics = {}  # numbers from a world of another size would mislead
    for name in names:
        t0 = time.perf_counter()
        result = BENCH_SECTIONS[name](ctx)
        result[f"{name}_seconds"] = round(time.perf_counter() - t0, 3)
        metrics.update(result)
    metrics["bench_n_entities"] = n_entities
    metrics["bench_queries"] = n_queries
    metrics["sections_run"] = names
    atomic_write_json(path, metrics)
    return metrics


def register(subparsers, common) -> None:
    p = subparsers.add_parser(
        "bench", parents=[common], help="benchmark the tools (latency, hit@5) and later stages",
        description="Build or reuse a sandbox world in RUN_DIR/bench/world and run the bench "
                    "sections.",
    )
    p.add_argument("--entities", type=positive_int, default=DEFAULT_BENCH_ENTITIES,
                   help=f"size of the bench world (default {DEFAULT_BENCH_ENTITIES})")
    p.add_argument("--queries", type=positive_int, default=DEFAULT_QUERIES,
                   help=f"queries per section (default {DEFAULT_QUERIES})")
    p.add_argument("--sections", default="", help="comma-separated sections to run "
                   f"(default: all of {', '.join(BENCH_SECTIONS)})")
    p.set_defaults(func=run_bench_command)


def run_bench_command(args: argparse.Namespace) -> int:
    if args.world != "sandbox":
        raise InputError("`bench` measures the sandbox backends; use --world sandbox")
    sections = [s.strip() for s in args.sections.split(",") if s.strip()] or None
    metrics = run_bench(args.run_dir, args.entities, args.queries, args.seed, sections, args)
    width = max(len(key) for key in metrics)
    for key in sorted(metrics):
        value = metrics[key]
        if isinstance(value, (int, float)):
            print(f"{key:<{width}}  {value}")
    print(f"metrics: {Path(args.run_dir) / 'bench' / 'metrics.json'}")
    return 0
