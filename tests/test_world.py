"""The sandbox generator and store: coverage, consistency, links, rarity, determinism, atomicity."""

from __future__ import annotations

import hashlib
import json
import os
import random
import sqlite3
import statistics
from pathlib import Path

import pytest

from vsearcher_lite.runio import InputError
from vsearcher_lite.world import (
    DEFAULT_SITELINKS_MAX,
    DEFAULT_STATEMENTS_MIN,
    build_world,
    ensure_world,
    open_world,
    store,
)
from vsearcher_lite.world.queries import distinctive_facts, generic_fact, matches_all
from vsearcher_lite.world.schema import ENTITY_TYPES, PRESENT_YEAR, type_counts


def _all_facts(k):
    return {eid: k.facts(eid) for eid in k.entity_ids()}


def _one(facts, relation):
    values = [f.value for f in facts if f.relation == relation]
    return values[0] if values else None


def test_type_counts_add_up_and_cover_every_type():
    for n in (24, 300, 2000, 20000):
        counts = type_counts(n)
        assert sum(counts.values()) == n
        assert set(counts) == set(ENTITY_TYPES)
        assert min(counts.values()) >= 1
        assert counts["person"] >= 4
    with pytest.raises(ValueError):
        type_counts(23)


def test_world_has_every_type_and_its_metrics(small_world):
    k = small_world.knowledge
    types = k.types()
    assert set(types) == set(ENTITY_TYPES)
    assert len(ENTITY_TYPES) >= 8
    m = small_world.metrics()
    assert m["n_entities"] == 300 == sum(types.values())
    for key in ("n_pages", "n_images", "build_seconds", "n_facts", "entities_per_type"):
        assert key in m
    kinds = m["pages_per_kind"]
    assert (
        kinds["article"] == 300 and kinds["news"] > 0 and kinds["list"] > 0 and kinds["travel"] > 0
    )
    assert m["n_lookalike_images"] > 0 and m["n_simple_images"] > 0


def test_names_and_aliases_are_unique(small_world):
    con = sqlite3.connect(small_world.db_path)
    names = [r[0].casefold() for r in con.execute("SELECT name FROM entities")]
    aliases = [r[0].casefold() for r in con.execute("SELECT alias FROM aliases")]
    assert len(set(names)) == len(names)
    assert len(set(names + aliases)) == len(names) + len(aliases)
    assert aliases, "some entities have aliases"
    urls = [r[0] for r in con.execute("SELECT url FROM pages")]
    assert len(set(urls)) == len(urls)
    assert all(u.startswith("https://wiki.sandbox.test/") for u in urls)


def test_every_fact_is_written_in_its_article(small_world):
    k = small_world.knowledge
    for eid, facts in _all_facts(k).items():
        page = k.page(eid)
        text = page.text
        assert page.title == k.entity(eid).name
        for f in facts:
            assert f.value_text() in text, (
                f"{eid}: {f.relation}={f.value_text()!r} missing from its article"
            )
            if f.kind == "entity":
                assert k.entity(f.value).url in page.links, (
                    f"{eid}: no link for {f.relation} -> {f.value}"
                )
                assert k.entity(f.value).name == f.value_label


def test_every_link_resolves_to_a_page(small_world):
    con = sqlite3.connect(small_world.db_path)
    dangling = con.execute(
        "SELECT l.target_url FROM links l LEFT JOIN pages p ON p.url = l.target_url "
        "WHERE p.id IS NULL"
    ).fetchall()
    assert dangling == []
    n_entities = con.execute("SELECT count(*) FROM entities").fetchone()[0]
    assert con.execute("SELECT count(*) FROM links").fetchone()[0] > n_entities
    # Every entity-valued fact points at an entity that exists.
    missing = con.execute(
        "SELECT f.value_key FROM facts f LEFT JOIN entities e ON e.id = f.value_key "
        "WHERE f.kind = 'entity' AND e.id IS NULL"
    ).fetchall()
    assert missing == []


def test_facts_are_consistent(small_world):
    """Typed ranges and plausible years, checked independently of how the generator works."""
    k = small_world.knowledge
    facts = _all_facts(k)
    type_of = {eid: k.entity(eid).type for eid in facts}
    year_of = {}
    for eid, fs in facts.items():
        for rel in (
            "year_founded",
            "year_built",
            "year_born",
            "year_created",
            "year_held",
            "year_launched",
            "year_described",
            "year_established",
        ):
            if _one(fs, rel) is not None:
                year_of[eid] = _one(fs, rel)
    died = {eid: _one(fs, "year_died") for eid, fs in facts.items() if type_of[eid] == "person"}
    ranges = {
        ("settlement", "located_in"): {"region"},
        ("building", "located_in"): {"settlement"},
        ("river", "flows_through"): {"settlement"},
        ("person", "born_in"): {"settlement"},
        ("building", "designed_by"): {"person"},
        ("artwork", "created_by"): {"person"},
        ("organisation", "headquartered_in"): {"settlement"},
        ("event", "held_in"): {"settlement"},
        ("person", "member_of"): {"organisation"},
        ("region", "capital"): {"settlement"},
        ("vessel", "built_by"): {"organisation"},
        ("species", "described_by"): {"person"},
        ("mountain", "first_ascended_by"): {"person"},
        ("artwork", "kept_in"): {"building"},
    }

    def alive_at(person, year, min_age=0):
        born, end = year_of[person], died[person]
        return born + min_age <= year and (end is None or year <= end)

    for eid, fs in facts.items():
        t = type_of[eid]
        for f in fs:
            if f.kind == "year":
                assert 600 <= f.value <= PRESENT_YEAR, (eid, f)
            if f.kind == "entity" and (t, f.relation) in ranges:
                assert type_of[f.value] in ranges[(t, f.relation)], (eid, f)
        if t == "person":
            if died[eid] is not None:
                assert died[eid] > year_of[eid]
            assert year_of[_one(fs, "born_in")] <= year_of[eid], (
                f"{eid} born before its birthplace was founded"
            )
        if t == "building":
            assert year_of[_one(fs, "located_in")] <= year_of[eid]
            if _one(fs, "designed_by"):
                assert alive_at(_one(fs, "designed_by"), year_of[eid], 16), (
                    f"{eid}: designer not alive/adult"
                )
        if t == "artwork" and _one(fs, "created_by"):
            assert alive_at(_one(fs, "created_by"), year_of[eid], 10)
            subject = _one(fs, "depicts")
            if subject in year_of and type_of[subject] in (
                "building",
                "settlement",
                "person",
                "event",
            ):
                assert year_of[subject] <= year_of[eid], (
                    f"{eid} depicts {subject} before it existed"
                )
        if t == "organisation" and _one(fs, "founded_by"):
            assert alive_at(_one(fs, "founded_by"), year_of[eid], 16)
        if t == "event" and _one(fs, "organised_by"):
            assert year_of[_one(fs, "organised_by")] <= year_of[eid]
        if t == "vessel" and _one(fs, "built_by"):
            assert year_of[_one(fs, "built_by")] <= year_of[eid]
        if t == "species" and _one(fs, "described_by"):
            assert alive_at(_one(fs, "described_by"), year_of[eid], 16)
        if t == "mountain" and _one(fs, "first_ascended_by"):
            assert alive_at(_one(fs, "first_ascended_by"), _one(fs, "first_ascent_year"), 12)
        if t == "region":
            capital = _one(fs, "capital")
            assert _one(facts[capital], "located_in") == eid
        if t == "settlement":
            for twin in [f.value for f in fs if f.relation == "twinned_with"]:
                assert eid in [f.value for f in facts[twin] if f.relation == "twinned_with"], (
                    "twinning is mutual"
                )


def test_rarity_skew_selects_a_minority(small_world):
    k = small_world.knowledge
    stats = k.stats()
    pictured = [s for s in stats if s["has_image"] and not s["is_person"]]
    seeds = k.seeds(DEFAULT_SITELINKS_MAX, DEFAULT_STATEMENTS_MIN)
    share = len(seeds) / len(pictured)
    assert 0.10 <= share <= 0.35, share
    sitelinks = sorted(s["sitelinks"] for s in stats)
    median = statistics.median(sitelinks)
    assert sitelinks[-1] >= 8 * max(1, median), "sitelinks have a heavy tail"
    assert statistics.mean(sitelinks) > 1.5 * median
    # Generous thresholds select more; impossible ones select nothing.
    assert len(k.seeds(10**6, 0)) == len(pictured)
    assert k.seeds(-1, 0) == []


def test_distinctive_facts_single_out_and_generic_facts_do_not(small_world):
    k = small_world.knowledge
    rng = random.Random(0)
    ids = rng.sample(k.entity_ids(), 80)
    found = ambiguous = 0
    for eid in ids:
        e = k.entity(eid)
        facts = distinctive_facts(k, eid)
        if facts is not None:
            found += 1
            assert matches_all(k, e.type, facts) == {eid}
        g = generic_fact(k, eid, rng)
        if g is not None:
            ambiguous += 1
            assert len(k.matching(g.relation, g.value, type=e.type)) >= 2
    assert found >= 0.85 * len(ids)
    assert ambiguous >= 0.5 * len(ids)


def _image_hashes(world) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(world.images_dir.iterdir())
    }


def test_same_seed_rebuild_is_byte_identical(tmp_path):
    build_world(tmp_path / "a", 120, seed=7, workers=1)
    build_world(tmp_path / "b", 120, seed=7, workers=2)  # the number of workers must not matter
    build_world(tmp_path / "c", 120, seed=8, workers=1)
    a, b, c = (open_world(tmp_path / x) for x in "abc")
    assert a.dump() == b.dump()
    assert _image_hashes(a) == _image_hashes(b)
    assert len(_image_hashes(a)) == a.metrics()["n_images"]
    assert a.dump() != c.dump()
    assert _image_hashes(a) != _image_hashes(c)


def test_interrupted_build_leaves_nothing(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(store, "_write_database", boom)
    with pytest.raises(RuntimeError):
        build_world(tmp_path / "world", 60, workers=1)
    assert list(tmp_path.iterdir()) == []


def test_ensure_world_builds_only_when_needed(tmp_path):
    w1 = ensure_world(tmp_path, 60, 0, workers=1)
    stamp = (w1.db_path.stat().st_mtime_ns, w1.db_path.stat().st_ino)
    w2 = ensure_world(tmp_path, 60, 0, workers=1)
    assert (w2.db_path.stat().st_mtime_ns, w2.db_path.stat().st_ino) == stamp
    before = w2.dump()
    w3 = ensure_world(tmp_path, 60, 1, workers=1)
    assert json.loads((tmp_path / "world" / "manifest.json").read_text())["seed"] == 1
    assert w3.dump() != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["world"]  # no leftovers from the swap


def test_open_world_accepts_world_or_run_folder_and_rejects_others(small_world, tmp_path):
    assert open_world(small_world.root).db_path == small_world.db_path
    assert open_world(small_world.root.parent).db_path == small_world.db_path
    with pytest.raises(InputError, match="no sandbox world"):
        open_world(tmp_path / "missing")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "manifest.json").write_text("{}")
    (bad / "world.sqlite").write_bytes(b"this is not a database" * 10)
    with pytest.raises(InputError, match="world.sqlite"):
        open_world(bad)
    nodb = tmp_path / "nodb"
    nodb.mkdir()
    (nodb / "manifest.json").write_text("{}")
    with pytest.raises(InputError, match="not found"):
        open_world(nodb)


def test_build_never_replaces_a_folder_that_is_not_a_world(tmp_path):
    precious = tmp_path / "world"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    with pytest.raises(InputError, match="not a sandbox world"):
        build_world(precious, 60, workers=1)
    assert (precious / "notes.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["world"]


def test_build_rejects_tiny_worlds(tmp_path):
    with pytest.raises(InputError, match="at least"):
        build_world(tmp_path / "w", 3)
    assert not (tmp_path / "w").exists()


def test_images_are_small_pngs_with_features(small_world):
    k = small_world.knowledge
    images = k.images()
    assert {r["kind"] for r in images} == {"entity", "lookalike"}
    for r in images[:50]:
        head = Path(r["path"]).read_bytes()[:8]
        assert head == b"\x89PNG\r\n\x1a\n"
    ids, mat = small_world.image_matrix()
    assert len(ids) == len(images) and mat.shape[0] == len(ids)
    norms = (mat**2).sum(axis=1) ** 0.5
    assert abs(norms.mean() - 1.0) < 0.01
    sizes = [os.path.getsize(r["path"]) for r in images]
    assert max(sizes) < 40_000
