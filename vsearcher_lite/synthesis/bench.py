"""The ``synthesis`` section of ``vsearcher-lite bench``: how fast offline synthesis runs.

It runs the real stages (seeds, text and image injection, filters, rule writer) on the bench
world into a fresh ``RUN_DIR/bench/synthesis``. ``synthesis_tasks_per_s`` counts finished
multimodal tasks per second of text + image injection, dropped seeds included.
"""

from __future__ import annotations

import shutil
import time

from vsearcher_lite.bench import BenchContext, bench_section


@bench_section("synthesis")
def bench_synthesis(ctx: BenchContext) -> dict:
    from vsearcher_lite.synthesis.filters import FilterConfig, run_filter
    from vsearcher_lite.synthesis.inject import (
        InjectConfig,
        index_for,
        run_inject_image,
        run_inject_text,
    )
    from vsearcher_lite.synthesis.seeds import SeedConfig, run_seeds

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
