"""SandboxKnowledge (the KnowledgeSource of the sandbox), image perturbation and image measures."""

from __future__ import annotations

import hashlib
import random

import pytest
from PIL import Image

from vsearcher_lite.world import (
    DEFAULT_SITELINKS_MAX,
    DEFAULT_STATEMENTS_MIN,
    KnowledgeSource,
    perturb_image,
)
from vsearcher_lite.world.images import (
    DRAWERS,
    SIMPLE_STYLES,
    draw_image,
    image_complexity,
    image_features,
)
from vsearcher_lite.world.knowledge import normalise_url


def _an_entity_with(k, predicate):
    for eid in k.entity_ids():
        if predicate(eid):
            return eid
    raise AssertionError("no entity matches")


def test_is_a_knowledge_source(small_world):
    assert isinstance(small_world.knowledge, KnowledgeSource)
    assert small_world.knowledge.name == "sandbox"


def test_seeds_respect_every_filter(small_world):
    k = small_world.knowledge
    seeds = k.seeds(DEFAULT_SITELINKS_MAX, DEFAULT_STATEMENTS_MIN)
    assert seeds and [s.id for s in seeds] == sorted({s.id for s in seeds})
    for s in seeds:
        e = k.entity(s.id)
        assert s.sitelinks <= DEFAULT_SITELINKS_MAX and s.statements >= DEFAULT_STATEMENTS_MIN
        assert not e.is_person and k.image(s.id) is not None
        assert s.title == e.name and s.type == e.type
    assert len(k.seeds(DEFAULT_SITELINKS_MAX, DEFAULT_STATEMENTS_MIN, limit=3)) == 3
    with_people = k.seeds(10**6, 0, require_image=False, exclude_people=False)
    assert len(with_people) == 300
    assert any(k.entity(s.id).is_person for s in with_people)
    no_image = k.seeds(10**6, 0, require_image=False)
    assert any(k.image(s.id) is None for s in no_image)


def test_entity_find_and_unknown_ids(small_world):
    k = small_world.knowledge
    eid = _an_entity_with(k, lambda e: bool(k.entity(e).aliases))
    e = k.entity(eid)
    assert e.id == eid and e.url.startswith("https://wiki.sandbox.test/wiki/") and e.kind
    assert k.find(e.name) == eid
    assert k.find(e.name.upper()) == eid
    assert k.find(e.aliases[0]) == eid
    assert k.find(f"the {e.name}") == eid
    assert k.find(e.url) == eid
    assert k.find("Nowhere Atall") is None and k.find("") is None
    e.aliases.append("changed")  # callers get copies
    assert "changed" not in k.entity(eid).aliases
    for method in (k.entity, k.page, k.facts, k.image, k.links):
        with pytest.raises(LookupError, match="E999999"):
            method("E999999")


def test_page_facts_links_and_image(small_world):
    k = small_world.knowledge
    eid = _an_entity_with(k, lambda e: k.entity(e).type == "building" and k.image(e) is not None)
    page = k.page(eid)
    assert page.kind == "article" and page.entity_id == eid and page.url == k.entity(eid).url
    assert page.image is not None and page.image.entity_id == eid
    assert page.image.location == k.image(eid).location
    assert all(p.strip() for p in page.paragraphs)
    facts = k.facts(eid)
    assert {f.relation for f in facts} >= {"instance_of", "located_in", "year_built"}
    linked = k.links(eid)
    for f in facts:
        if f.kind == "entity":
            assert f.value in linked
    assert eid not in linked
    assert all(k.entity_for_url(k.entity(x).url) == x for x in linked)


def test_inbound_facts_mirror_outbound_ones(small_world):
    k = small_world.knowledge
    building = _an_entity_with(k, lambda e: any(f.relation == "designed_by" for f in k.facts(e)))
    designer = next(f.value for f in k.facts(building) if f.relation == "designed_by")
    inbound = k.inbound_facts(designer)
    assert any(f.subject == building and f.relation == "designed_by" for f in inbound)
    assert all(f.value == designer and f.kind == "entity" for f in inbound)
    # The designer's article mentions the work (what lets a searcher walk the graph backwards).
    assert k.entity(building).name in k.page(designer).text


def test_matching_filters_by_type_and_kind(small_world):
    k = small_world.knowledge
    eid = _an_entity_with(k, lambda e: k.entity(e).type == "settlement")
    region = next(f.value for f in k.facts(eid) if f.relation == "located_in")
    everything = k.matching("located_in", region)
    settlements = k.matching("located_in", region, type="settlement")
    assert eid in settlements and set(settlements) <= set(everything)
    assert all(k.entity(x).type == "settlement" for x in settlements)
    kind = k.entity(eid).kind
    assert set(k.matching("located_in", region, type="settlement", kind=kind)) <= set(settlements)
    year = next(f.value for f in k.facts(eid) if f.relation == "year_founded")
    assert eid in k.matching("year_founded", year)
    assert k.matching("located_in", "E999999") == []


def test_pages_by_kind_and_url(small_world):
    k = small_world.knowledge
    kinds = {}
    for page in k.pages():
        kinds[page.kind] = kinds.get(page.kind, 0) + 1
    assert kinds["article"] == 300 and {"news", "list", "travel"} <= set(kinds)
    news = next(k.pages("news"))
    assert news.url.startswith("https://wiki.sandbox.test/news/")
    assert k.page_by_url(news.url).title == news.title
    assert k.page_by_url(news.url.replace("https://", "http://") + "/").url == news.url
    with pytest.raises(LookupError, match="nope"):
        k.page_by_url("https://wiki.sandbox.test/wiki/nope")
    subject = k.entity_for_url(news.links[0])  # a news item links its subject first
    mentions = k.pages_mentioning(subject)
    assert news.url in mentions and k.entity(subject).url not in mentions


def test_images_listing_and_image_info(small_world):
    k = small_world.knowledge
    looks = k.images("lookalike")
    assert looks and all(r["source_id"] and r["entity_id"] is None for r in looks)
    eid = _an_entity_with(k, lambda e: k.image(e) is not None)
    info = k.image_info(eid)
    assert info["entity_id"] == eid and info["style"] in DRAWERS
    person = _an_entity_with(k, lambda e: k.image(e) is None)
    assert k.image_info(person) is None


def test_normalise_url():
    assert (
        normalise_url(" http://wiki.sandbox.test/wiki/A B/?x=1#y ")
        == "https://wiki.sandbox.test/wiki/A_B"
    )
    assert (
        normalise_url("https://wiki.sandbox.test/wiki/A%20B")
        == "https://wiki.sandbox.test/wiki/A_B"
    )
    assert (
        normalise_url("https://wiki.sandbox.test/wiki/Ves_Str%C3%B6m")
        == "https://wiki.sandbox.test/wiki/Ves_Ström"
    )


def test_perturb_image_is_deterministic_and_changes_the_file(small_world, tmp_path):
    src = small_world.knowledge.images("entity")[0]["path"]
    a = perturb_image(src, tmp_path / "a.jpg", seed=3)
    b = perturb_image(src, tmp_path / "b.jpg", seed=3)
    c = perturb_image(src, tmp_path / "c.jpg", seed=4)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    assert a.read_bytes()[:3] == b"\xff\xd8\xff"  # JPEG
    assert (
        hashlib.sha256(a.read_bytes()).digest() != hashlib.sha256(open(src, "rb").read()).digest()
    )
    with Image.open(src) as s, Image.open(a) as q:
        assert s.size != q.size
    assert list(tmp_path.glob(".*tmp")) == []
    with pytest.raises(FileNotFoundError, match="missing.png"):
        perturb_image(tmp_path / "missing.png", tmp_path / "x.jpg")


def test_every_style_draws_deterministically():
    for style in DRAWERS:
        a = draw_image(style, "k1", "Orsk Lighthouse")
        b = draw_image(style, "k1", "Orsk Lighthouse")
        c = draw_image(style, "k2", "Orsk Lighthouse")
        assert a.size == (160, 120)
        assert a.tobytes() == b.tobytes()
        assert a.tobytes() != c.tobytes(), style


def test_simple_styles_measure_simpler_than_rich_ones():
    rng = random.Random(0)
    simple, rich = [], []
    for i in range(12):
        for style in DRAWERS:
            m = image_complexity(
                draw_image(style, f"{style}{i}{rng.random()}", "Velna River Company")
            )
            (simple if style in SIMPLE_STYLES else rich).append(m["entropy"])
    assert max(simple) < min(rich)  # colour entropy in bits: flags and text cards are near-flat


def test_features_tolerate_perturbation_but_separate_pictures(tmp_path):
    a = draw_image("mountain", "m1")
    b = draw_image("mountain", "m2")
    a.save(tmp_path / "a.png")
    q = perturb_image(tmp_path / "a.png", tmp_path / "q.jpg", seed=1)
    fa, fb = image_features(a), image_features(b)
    with Image.open(q) as qi:
        fq = image_features(qi)
    assert float(fq @ fa) > float(fq @ fb)
    assert float(fq @ fa) > 0.85
