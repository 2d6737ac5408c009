"""Source worlds for the pretraining corpus, and the evaluation world's names kept out of it.

Names are built from random syllable roots, so another seed can produce a root of the default
(evaluation) world ("Pejund"). Such roots are renamed in the other worlds before any text is
written, and a document that still names a default-world entity is dropped, so the probes run
on names the model never saw.
"""

from __future__ import annotations

import functools
import random
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from vsearcher_lite.world.generator import generate_world
from vsearcher_lite.world.model import Fact
from vsearcher_lite.world.prose import ArticleWriter, SecondaryWriter, article_url

DEFAULT_WORLD_SEED = 0  # the evaluation world (``vsearcher-lite world`` default)
DEFAULT_WORLD_ENTITIES = 2000
CORPUS_WORLD_SEEDS = tuple(range(101, 121))

#: A word: letters and digits. Underscores split words, so the name in a URL path
#: (``.../wiki/Velna_River``) reads as the words of the title ("Velna", "River").
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_YEAR = re.compile(r"^(1[0-9]{3}|20[0-2][0-9]|2030)$")


@functools.lru_cache(maxsize=1)
def code_vocabulary() -> frozenset:
    """Lowercase words written in the world generator's source (kinds, templates, endings): a
    word of a name that is not here was made from random syllables, a name root."""
    from vsearcher_lite import world

    words: set[str] = set()
    for path in Path(world.__file__).resolve().parent.glob("*.py"):
        words.update(w.lower() for w in _WORD.findall(path.read_text(encoding="utf-8")))
    return frozenset(words)


def name_roots(names: Iterable[str]) -> set[str]:
    """The lowercase syllable roots in ``names``: words neither generator vocabulary nor numbers.

    >>> sorted(name_roots(["Pejund Cathedral", "the Gest River", "Battle of 1432"]))
    ['gest', 'pejund']
    """
    vocab = code_vocabulary()
    out = set()
    for name in names:
        for w in _WORD.findall(name):
            lw = w.lower()
            if lw not in vocab and not lw.isdigit():
                out.add(lw)
    return out


def _fresh_root(rng: random.Random, taken: set[str], styled: bool = False) -> str:
    """A name root not in ``taken`` (which it joins) and not a generator word; ``styled`` draws
    like the world's own names (places, regions, family names too)."""
    from vsearcher_lite.world import names as name_parts

    makers = ((name_parts.root, name_parts.root, name_parts.place_root, name_parts.family_name,
               name_parts.region_root) if styled else (name_parts.root,))
    for _ in range(1000):
        make = rng.choice(makers)
        word = make(rng, 2, 3) if make is name_parts.root else make(rng)
        if word.lower() not in taken and word.lower() not in code_vocabulary():
            taken.add(word.lower())
            return word
    raise RuntimeError("could not draw a fresh name root")


def _match_case(new: str, old: str) -> str:
    if old.isupper():
        return new.upper()
    if old[:1].isupper():
        return new[:1].upper() + new[1:].lower()
    return new.lower()


def substitute_words(text: str, mapping: dict[str, str]) -> str:
    """Replace whole words (case-insensitive keys, case of the original kept).

    >>> substitute_words("Pejund and the Pejund Cathedral", {"pejund": "Voral"})
    'Voral and the Voral Cathedral'
    """
    if not mapping:
        return text
    return _WORD.sub(lambda m: _match_case(mapping[m.group(0).lower()], m.group(0))
                     if m.group(0).lower() in mapping else m.group(0), text)


def rename_roots(drafts: list, forbidden: set[str], seed: int) -> dict[str, str]:
    """Rename, in place, every root of ``drafts`` that is in ``forbidden`` (names, aliases and
    facts together, so pages written afterwards stay consistent); returns the mapping."""
    used = name_roots(n for d in drafts for n in [d.name, *d.aliases])
    clashes = sorted(used & forbidden)
    if not clashes:
        return {}
    rng = random.Random(f"vsearcher-corpus-rename:{seed}")
    taken = set(used) | set(forbidden)
    mapping = {root: _fresh_root(rng, taken) for root in clashes}
    for d in drafts:
        d.name = substitute_words(d.name, mapping)
        d.aliases = [substitute_words(a, mapping) for a in d.aliases]
        new_facts = []
        for f in d.facts:
            value = f.value
            if f.kind == "text" and isinstance(value, str):
                value = substitute_words(value, mapping)
            new_facts.append(Fact(f.subject, f.relation, value, f.kind, f.label,
                                  substitute_words(f.value_label, mapping)))
        d.facts = new_facts
    return mapping


class ForbiddenNames:
    """Finds any of a set of names (whole words, exact case) in a text, in linear time."""

    def __init__(self, names: Iterable[str]):
        self.by_first: dict[str, set[tuple[str, ...]]] = {}
        for name in names:
            words = tuple(_WORD.findall(name))
            if words:
                self.by_first.setdefault(words[0], set()).add(words)

    def found(self, text: str) -> list[str]:
        """The forbidden names that occur in ``text`` (empty when it is clean)."""
        words = _WORD.findall(text)
        hits = []
        for i, w in enumerate(words):
            for cand in self.by_first.get(w, ()):
                if tuple(words[i:i + len(cand)]) == cand:
                    hits.append(" ".join(cand))
        return hits


@functools.lru_cache(maxsize=4)
def default_world_names(seed: int = DEFAULT_WORLD_SEED,
                        n_entities: int = DEFAULT_WORLD_ENTITIES) -> tuple[str, ...]:
    """Every entity name and alias of the default (evaluation) world, built in memory."""
    world = generate_world(n_entities, seed)
    return tuple(sorted({n for d in world.drafts for n in [d.name, *d.aliases] if n}))


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
