"""Names of one sandbox world kept out of another: name roots, renaming, a fast name finder.

Names are built from random syllable roots, so a world built with another seed can produce a root
of the evaluation world ("Pejund"). Training worlds rename such roots before any page is written,
so that a model trained on them never reads a name of the evaluation world.
"""

from __future__ import annotations

import functools
import random
import re
from pathlib import Path
from typing import Iterable

from vsearcher_lite.world.generator import generate_world
from vsearcher_lite.world.model import Fact

DEFAULT_WORLD_SEED = 0  # the evaluation world (``vsearcher-lite world`` default)
DEFAULT_WORLD_ENTITIES = 2000

#: A word: letters and digits. Underscores split words, so the name in a URL path
#: (``.../wiki/Velna_River``) reads as the words of the title ("Velna", "River").
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


@functools.lru_cache(maxsize=1)
def code_vocabulary() -> frozenset:
    """Lowercase words written in the world generator's source (kinds, templates, endings): a
    word of a name that is not here was made from random syllables, a name root (this file, whose
    examples name roots, is not read)."""
    here = Path(__file__).resolve()
    words: set[str] = set()
    for path in here.parent.glob("*.py"):
        if path == here:
            continue
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


def fresh_root(rng: random.Random, taken: set[str], styled: bool = False) -> str:
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
    mapping = {root: fresh_root(rng, taken) for root in clashes}
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


def evaluation_roots(seed: int = DEFAULT_WORLD_SEED,
                     n_entities: int = DEFAULT_WORLD_ENTITIES) -> frozenset[str]:
    """The name roots of the evaluation world: what a training world renames away."""
    return frozenset(name_roots(default_world_names(seed, n_entities)))
