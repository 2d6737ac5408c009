"""`vsearcher-lite bench` on a small world: every metric is there and plausible; sections
compose."""

from __future__ import annotations

import json
import math

from vsearcher_lite import sandbox_bench
from vsearcher_lite.cli import main

KEYS = (
    "text_search_p50_ms",
    "image_search_p50_ms",
    "visit_p50_ms",
    "text_search_hit_at_5",
    "image_search_hit_at_5",
    "generic_query_miss_at_1",
)


def test_bench_command_writes_all_metrics(tmp_path, capsys):
    run = tmp_path / "run"
    # later stages test their own sections
    mine = "world,text_search,generic_queries,image_search,visit"
    argv = [
        "bench",
        "--run-dir",
        str(run),
        "--entities",
        "300",
        "--queries",
        "30",
        "--seed",
        "0",
        "--sections",
        mine,
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    metrics = json.loads((run / "bench" / "metrics.json").read_text())
    for key in KEYS:
        assert key in metrics and key in out
        assert math.isfinite(metrics[key])
    assert metrics["bench_n_entities"] == 300
    assert (run / "bench" / "world" / "manifest.json").exists()
    assert metrics["text_search_hit_at_5"] >= 0.85
    assert metrics["image_search_hit_at_5"] >= 0.85
    assert metrics["visit_fact_recall"] >= 0.8
    assert 0.3 <= metrics["generic_query_miss_at_1"] <= 1.0
    assert 0 < metrics["text_search_p50_ms"] < 100 and 0 < metrics["image_search_p50_ms"] < 200
    assert metrics["text_search_queries"] == 30 and metrics["image_search_queries"] == 30


def test_sections_are_pluggable_and_merge(tmp_path, monkeypatch):
    calls = []

    def fake_section(ctx):
        calls.append(ctx.n_queries)
        return {"fake_rate": 0.5}

    monkeypatch.setitem(sandbox_bench.BENCH_SECTIONS, "fake", fake_section)
    run = tmp_path / "run"
    first = sandbox_bench.run_bench(run, n_entities=120, n_queries=5, sections=["visit"])
    assert "visit_p50_ms" in first and "fake_rate" not in first
    second = sandbox_bench.run_bench(run, n_entities=120, n_queries=7, sections=["fake"])
    assert calls == [7]
    assert second["fake_rate"] == 0.5 and second["visit_p50_ms"] == first["visit_p50_ms"]  # merged
    assert second["sections_run"] == ["fake"]


def test_unknown_section_is_a_one_line_error(tmp_path, capsys):
    code = main(
        ["bench", "--run-dir", str(tmp_path), "--entities", "100", "--sections", "text_search,nope"]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "nope" in err and "text_search" in err and err.strip().count("\n") == 0
    assert not (tmp_path / "bench" / "metrics.json").exists()


def test_p50_helper():
    assert sandbox_bench.p50_ms([0.001, 0.003, 0.002]) == 2.0
    assert sandbox_bench.p95_ms([0.001] * 19 + [1.0]) == 1000.0
