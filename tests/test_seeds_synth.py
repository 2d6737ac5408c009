"""Seed selection and the disjoint pools (training levels, held-out, exam)."""

import csv
import json

import pytest
from test_synth_support import copy_run, small_sandbox

from vsearcher_lite.runio import InputError
from vsearcher_lite.synthesis.seeds import (
    POOLS,
    SeedConfig,
    assign_pools,
    interleave,
    read_seeds,
    run_seeds,
    select_seeds,
    split_counts,
)
from vsearcher_lite.world.model import Seed


def test_split_counts_and_interleave_keep_the_mix():
    assert split_counts(100, {"easy": 4, "medium": 3, "hard": 3}) == {
        "easy": 40,
        "medium": 30,
        "hard": 30,
    }
    assert sum(split_counts(11, {"a": 1, "b": 1, "c": 1}).values()) == 11
    seq = interleave({"easy": 4, "medium": 3, "hard": 3})
    assert sorted(seq) == sorted(["easy"] * 4 + ["medium"] * 3 + ["hard"] * 3)
    assert {"easy", "medium", "hard"} <= set(seq[:4])  # every prefix stays close to the mix


def seeds(n):
    return [Seed(f"Q{i}", f"Seed {i}", 3, 25) for i in range(n)]


def test_pools_are_disjoint_cover_everything_and_are_deterministic():
    config = SeedConfig(exam_share=0.2, heldout_share=0.1, seed=7)
    pools = assign_pools(seeds(200), config)
    assert set(pools) == {f"Q{i}" for i in range(200)} and set(pools.values()) == set(POOLS)
    counts = {p: list(pools.values()).count(p) for p in POOLS}
    assert counts["exam"] == 40 and counts["heldout"] == 20
    assert (counts["easy"], counts["medium"], counts["hard"]) == (56, 42, 42)
    assert assign_pools(list(reversed(seeds(200))), config) == pools  # input order does not matter
    assert assign_pools(seeds(200), SeedConfig(exam_share=0.2, heldout_share=0.1, seed=8)) != pools


class RepeatingSource:
    """A live-like source whose rows repeat (the released seed files repeat ~5% of rows)."""

    name = "live"

    def seeds(self, sitelinks_max, statements_min, **kw):
        rows = seeds(10)
        return rows + rows[:3]


def test_select_seeds_deduplicates_by_id():
    got = select_seeds(RepeatingSource(), SeedConfig())
    assert [s.id for s in got] == [f"Q{i}" for i in range(10)]


def test_seeds_stage_on_the_sandbox(tmp_path_factory, tmp_path):
    run = copy_run(small_sandbox(tmp_path_factory), tmp_path / "run")
    metrics = run_seeds(run, SeedConfig(seed=0))
    records = read_seeds(run)
    assert metrics["n_seeds"] == len(records) > 20
    assert sum(metrics["pool_sizes"].values()) == len(records)
    assert len({r["id"] for r in records}) == len(records)
    # the thresholds hold, and they select a minority of the pictured non-person entities
    for r in records:
        assert (
            r["sitelinks"] <= metrics["sitelinks_max"]
            and r["statements"] >= metrics["statements_min"]
        )
    assert 0 < metrics["selected_share_of_eligible"] < 0.5
    with open(run / "seeds" / "population.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == metrics["n_entities"]
    assert sum(int(r["selected"]) for r in rows) == len(records)
    selected_people = [r for r in rows if r["selected"] == "1" and r["is_person"] == "1"]
    assert selected_people == []
    on_disk = json.loads((run / "seeds" / "metrics.json").read_text())
    assert on_disk["pool_sizes"] == metrics["pool_sizes"]


def test_bad_seed_files_name_the_line(tmp_path):
    (tmp_path / "seeds").mkdir()
    path = tmp_path / "seeds" / "seeds.jsonl"
    path.write_text('{"id": "Q1", "title": "A", "pool": "easy"}\n{"id": "Q2", "title": "B"}\n')
    with pytest.raises(InputError, match=r"seeds.jsonl:2: .*pool"):
        read_seeds(tmp_path)
    path.write_text('{"id": "Q1", "title": "A", "pool": "easy"}\nnot json\n')
    with pytest.raises(InputError, match=r"seeds.jsonl:2"):
        read_seeds(tmp_path)
    with pytest.raises(InputError, match="vsearcher-lite seeds"):
        read_seeds(tmp_path / "elsewhere")


def test_no_seeds_is_a_clear_error(tmp_path_factory, tmp_path):
    run = copy_run(small_sandbox(tmp_path_factory), tmp_path / "run")
    with pytest.raises(InputError, match="--sitelinks-max"):
        run_seeds(run, SeedConfig(sitelinks_max=0, statements_min=10_000))
