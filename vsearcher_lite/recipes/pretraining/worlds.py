"""Source worlds for the pretraining corpus, and the evaluation world's names kept out of it.

The other worlds rename the evaluation world's name roots before any text is written
(``world/rename.py``), and a document that still names a default-world entity is dropped, so the
probes run on names the model never saw.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from vsearcher_lite.world.generator import generate_world
from vsearcher_lite.world.model import Fact
from vsearcher_lite.world.prose import ArticleWriter, SecondaryWriter, article_url
from vsearcher_lite.world.rename import (
    DEFAULT_WORLD_ENTITIES,
    DEFAULT_WORLD_SEED,
    rename_roots,
)

CORPUS_WORLD_SEEDS = tuple(range(101, 121))


@dataclass
class SourceFact:
    relation: str
    label: str
    kind: str  # entity | year | number | text
    value: str  # as the page writes it
    value_noun: str = "one"  # what an entity value is ("town", "architect")


@dataclass
class SourceEntity:
    """An entity as the corpus uses it: names, its article and the facts its article states."""

    id: str
    name: str
    ref: str  # how running text names it ("the Velna River")
    type: str
    kind: str
    title: str
    url: str
    paragraphs: list[str]
    facts: list[SourceFact]


@dataclass
class SourcePage:
    title: str
    url: str
    paragraphs: list[str]
    kind: str


@dataclass
class SourceWorld:
    """One world's entities and pages, ready to be written into documents."""

    seed: int
    entities: list[SourceEntity]
    pages: list[SourcePage]
    renamed: int = 0

    def all_names(self) -> list[str]:
        return [e.name for e in self.entities]


def _fact_noun(f: Fact, by_id: dict) -> str:
    if f.kind != "entity":
        return "one"
    target = by_id.get(f.value)
    return target.kind if target is not None and target.kind else "one"


def build_source_world(seed: int, n_entities: int,
                       forbidden_roots: set[str] | None = None) -> SourceWorld:
    """A world's entities and pages in memory (no images), ``forbidden_roots`` renamed away."""
    world = generate_world(n_entities, seed)
    drafts = world.drafts
    renamed = rename_roots(drafts, set(forbidden_roots or ()), seed) if forbidden_roots else {}
    by_id = {d.id: d for d in drafts}
    writer = ArticleWriter(drafts, seed)
    entities = []
    for d in drafts:
        written = writer.write(d)
        text = " ".join(written.paragraphs)
        facts = []
        counts = Counter(f.relation for f in d.facts)
        for f in d.facts:
            if f.relation == "instance_of" or counts[f.relation] > 1:
                continue  # a relation with several values has no single answer to copy
            linked = f.kind == "entity" and f.value in by_id
            value = by_id[f.value].name if linked else f.value_text()
            if value and value in text:  # only facts the page states can be copied from it
                facts.append(SourceFact(f.relation, f.label, f.kind, value, _fact_noun(f, by_id)))
        entities.append(SourceEntity(d.id, d.name, d.ref(), d.type, d.kind, d.name,
                                     article_url(d.name), list(written.paragraphs), facts))
    sec = SecondaryWriter(drafts, seed)
    secondary = (sec.lists() + sec.news(max(6, int(0.12 * n_entities)))
                 + sec.travel(max(4, int(0.05 * n_entities))))
    pages = [SourcePage(p.title, p.url, list(p.paragraphs), p.kind) for p in secondary]
    return SourceWorld(seed, entities, pages, renamed=len(renamed))


def probe_world(seed: int = DEFAULT_WORLD_SEED,
                n_entities: int = DEFAULT_WORLD_ENTITIES) -> SourceWorld:
    """The evaluation world as a source of probe documents (its names never occur in the corpus)."""
    return build_source_world(seed, n_entities)
