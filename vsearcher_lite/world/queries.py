"""Descriptions of entities built from their facts: distinctive ones and generic ones.

A *distinctive* description (type + a few facts) identifies exactly one entity of the world:
"bridge designed by Pelorin Avast built in 1874". A *generic* one (type + one fact shared by
several entities) does not: "bridge in Orsk". The bench checks text search with both; synthesis
uses the same checks to keep every rewritten question's answer unique.
"""

from __future__ import annotations

import random

from vsearcher_lite.world.model import Fact
from vsearcher_lite.world.templates import CLAUSES

# Facts that describe what an entity is rather than something about it.
IDENTITY_RELATIONS = frozenset({"instance_of", "occupation"})


def fact_clause(f: Fact) -> str:
    """``"designed by Pelorin Avast"``, ``"built in 1874"``: one fact as a short phrase."""
    template = CLAUSES.get(f.relation, f"{f.label} {{v}}")
    return template.format(v=f.value_text())


def describe(kind: str, facts: list[Fact]) -> str:
    """``describe("bridge", [designed_by, year_built]) == "bridge designed by X built in 1874"``."""
    return " ".join([kind] + [fact_clause(f) for f in facts])


def matches_all(knowledge, type_: str, facts: list[Fact]) -> set[str]:
    """Ids of the entities of ``type_`` that have every fact in ``facts``."""
    out: set[str] | None = None
    for f in facts:
        ids = set(knowledge.matching(f.relation, f.value, type=type_))
        out = ids if out is None else out & ids
        if not out:
            break
    return out or set()


def distinctive_facts(knowledge, entity_id: str, max_facts: int = 3,
                      min_facts: int = 2) -> list[Fact] | None:
    """Facts that single the entity out among entities of its type: chosen greedily, most
    selective first, at most ``max_facts``; topped up to ``min_facts`` when the entity has that
    many (a searcher rarely types a single clue). ``None`` when no such set exists."""
    e = knowledge.entity(entity_id)
    facts = [f for f in knowledge.facts(entity_id) if f.relation not in IDENTITY_RELATIONS]
    matched = [set(knowledge.matching(f.relation, f.value, type=e.type)) for f in facts]
    order = sorted(range(len(facts)), key=lambda i: (len(matched[i]), i))
    chosen: list[int] = []
    remaining: set[str] | None = None
    for i in order:
        narrowed = matched[i] if remaining is None else remaining & matched[i]
        if remaining is not None and len(narrowed) == len(remaining):
            continue  # adds nothing
        chosen.append(i)
        remaining = narrowed
        if remaining == {entity_id} or len(chosen) >= max_facts:
            break
    if remaining != {entity_id}:
        return None
    for i in order:
        if len(chosen) >= min(min_facts, max_facts):
            break
        if i not in chosen:
            chosen.append(i)
    return [facts[i] for i in sorted(chosen, key=order.index)]


def distinctive_query(knowledge, entity_id: str, max_facts: int = 3,
                      min_facts: int = 2) -> str | None:
    """A text-search query from the entity's distinctive facts (its own name never appears)."""
    facts = distinctive_facts(knowledge, entity_id, max_facts, min_facts)
    if not facts:
        return None
    return describe(knowledge.entity(entity_id).kind, facts)


def generic_fact(knowledge, entity_id: str, rng: random.Random, min_shared: int = 2) -> Fact | None:
    """One fact of the entity that at least ``min_shared`` entities of its type share."""
    e = knowledge.entity(entity_id)
    facts = [f for f in knowledge.facts(entity_id) if f.relation not in IDENTITY_RELATIONS]
    shared = [f for f in facts
              if len(knowledge.matching(f.relation, f.value, type=e.type)) >= min_shared]
    return rng.choice(shared) if shared else None


def generic_query(knowledge, entity_id: str, rng: random.Random, min_shared: int = 2) -> str | None:
    """Type + one shared fact: "bridge in Orsk". Ambiguous by construction."""
    f = generic_fact(knowledge, entity_id, rng, min_shared)
    if f is None:
        return None
    return describe(knowledge.entity(entity_id).kind, [f])
