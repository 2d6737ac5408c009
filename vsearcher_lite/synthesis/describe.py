"""Descriptions that identify an entity, the building block of a text-injection round.

A round hides a named entity behind its type plus one or two facts ("the bridge designed by
Ilsa Maren"); in the sandbox such a description is a list of ``Constraint`` s. ``FactIndex``
answers "which entities of this type satisfy these constraints?" with a few set intersections,
for the rule writer and for re-solving questions; ``PHRASES`` words a constraint.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Iterable, Iterator

from vsearcher_lite.world.model import Entity, Fact, KnowledgeSource

OUT, IN = "out", "in"
EMPTY: frozenset = frozenset()


@dataclass(frozen=True)
class Constraint:
    """One fact seen from the hidden entity's side: ``direction`` is OUT when the hidden entity
    is the fact's subject, IN when it is the value; ``value_text`` is how the value reads."""

    relation: str
    direction: str  # OUT or IN
    value: str | int | float
    kind: str = "entity"
    value_text: str = ""
    label: str = ""

    @property
    def is_entity(self) -> bool:
        return self.kind == "entity"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Constraint":
        keys = ("relation", "direction", "value", "kind", "value_text", "label")
        return cls(**{k: d[k] for k in keys if k in d})

    @classmethod
    def from_fact(cls, fact: Fact, hidden: str, name_of=None) -> "Constraint":
        """The constraint that ``fact`` puts on ``hidden`` (its subject or its value)."""
        if fact.subject == hidden:
            return cls(fact.relation, OUT, fact.value, fact.kind, fact.value_text(), fact.label)
        if fact.kind == "entity" and fact.value == hidden:
            text = name_of(fact.subject) if name_of else fact.subject
            return cls(fact.relation, IN, fact.subject, "entity", text, fact.label)
        raise ValueError(f"fact {fact} does not mention {hidden}")


def literal_key(value) -> str:
    """How literal values are compared: ``1874``, ``"1874"`` and ``1874.0`` are one key."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip().casefold()


class FactIndex:
    """Every fact of a world, indexed for "who fits this description?" questions."""

    def __init__(self, entities: Iterable[Entity], facts: Iterable[Fact]):
        self.entities: dict[str, Entity] = {e.id: e for e in entities}
        self.by_type: dict[str, set[str]] = defaultdict(set)
        for e in self.entities.values():
            self.by_type[e.type].add(e.id)
        self.out_facts: dict[str, list[Fact]] = defaultdict(list)
        self.in_facts: dict[str, list[Fact]] = defaultdict(list)
        # (relation, value key) -> subjects; (relation, subject) -> entity values
        self._subjects: dict[tuple[str, str], set[str]] = defaultdict(set)
        self._values: dict[tuple[str, str], set[str]] = defaultdict(set)
        self.relations: dict[str, Fact] = {}
        self._seen: set[tuple] = set()
        self._constraints: dict[str, list[Constraint]] = {}
        for f in facts:
            self.add_fact(f)

    def add_fact(self, f: Fact) -> None:
        key = (f.subject, f.relation, f.kind, literal_key(f.value))
        if key in self._seen:  # a source may list a fact under both of its entities
            return
        self._seen.add(key)
        self._constraints.clear()
        self.out_facts[f.subject].append(f)
        self.relations.setdefault(f.relation, f)
        if f.kind == "entity":
            self.in_facts[str(f.value)].append(f)
            self._subjects[(f.relation, str(f.value))].add(f.subject)
            self._values[(f.relation, f.subject)].add(str(f.value))
        else:
            self._subjects[(f.relation, "=" + literal_key(f.value))].add(f.subject)

    @classmethod
    def from_source(cls, source: KnowledgeSource) -> "FactIndex":
        """Index a whole world; the source must be able to list its entities (the sandbox can)."""
        if hasattr(source, "entity_ids"):
            entities = [source.entity(i) for i in source.entity_ids()]
        elif hasattr(source, "all_entities"):
            entities = list(source.all_entities())
        else:
            raise TypeError(f"{type(source).__name__} cannot list its entities, "
                            "so it cannot be indexed")
        bulk = getattr(source, "all_facts", None)
        facts = (list(bulk()) if bulk is not None
                 else [f for e in entities for f in source.facts(e.id)])
        return cls(entities, facts)

    # -- lookups -----------------------------------------------------------------------------
    def name_of(self, entity_id: str) -> str:
        return self.entities[entity_id].name

    def type_of(self, entity_id: str) -> str:
        return self.entities[entity_id].type

    def noun_constraint(self, entity_id: str) -> Constraint | None:
        """The fact that says what the entity is ("bridge", "architect"), as a constraint."""
        for relation in NOUN_RELATIONS:
            fact = self.single_value(entity_id, relation)
            if fact is not None:
                return Constraint.from_fact(fact, entity_id, self.name_of)
        return None

    def noun_of(self, entity_id: str) -> str:
        """How a description names the kind: ``instance_of``/``occupation``, else the type."""
        c = self.noun_constraint(entity_id)
        return str(c.value_text) if c is not None else self.type_of(entity_id).replace("_", " ")

    def ref_of(self, entity_id: str) -> str:
        """The name as running text writes it: "the Velna River", "Orsk"."""
        entity = self.entities[entity_id]
        the = getattr(entity, "the", None)
        if the is None:
            the = takes_article(entity)
        return f"the {entity.name}" if the else entity.name

    def constraints_of(self, entity_id: str) -> list[Constraint]:
        """Every constraint a fact puts on the entity, outgoing first (cached: do not modify)."""
        cached = self._constraints.get(entity_id)
        if cached is not None:
            return cached
        found = []
        for f in (*self.out_facts.get(entity_id, ()), *self.in_facts.get(entity_id, ())):
            c = Constraint.from_fact(f, entity_id, self.name_of)
            if c.is_entity and str(c.value) in self.entities:
                c = dataclasses.replace(c, value_text=self.ref_of(str(c.value)))
            found.append(c)
        self._constraints[entity_id] = found
        return found

    def matching(self, c: Constraint, value_options: Iterable[str] | None = None) -> set[str]:
        """Entities that satisfy ``c`` (the index's own set: do not modify);
        ``value_options`` replaces an entity value by several candidates."""
        if not c.is_entity:
            return self._subjects.get((c.relation, "=" + literal_key(c.value)), EMPTY)
        table = self._subjects if c.direction == OUT else self._values
        if value_options is None:
            return table.get((c.relation, str(c.value)), EMPTY)
        found: set[str] = set()
        for v in value_options:
            found |= table.get((c.relation, v), EMPTY)
        return found

    def candidates(
        self,
        entity_type: str,
        constraints: Iterable[Constraint],
        value_options: dict[str, Iterable[str]] | None = None,
    ) -> set[str]:
        """Entities of ``entity_type`` that satisfy every constraint; ``value_options`` maps a
        constraint's entity value that is itself hidden to the entities it might stand for."""
        sets = []
        for c in constraints:
            options = None
            if c.is_entity and value_options is not None and str(c.value) in value_options:
                options = value_options[str(c.value)]
            sets.append(self.matching(c, options))
        of_type = self.by_type.get(entity_type, EMPTY)
        if not sets:
            return set(of_type)
        sets.sort(key=len)  # intersect from the smallest set: most calls touch a handful of ids
        pool = set(of_type & sets[0])
        for s in sets[1:]:
            if not pool:
                break
            pool &= s
        return pool

    def single_value(self, entity_id: str, relation: str) -> Fact | None:
        """The entity's only fact with this relation, or ``None`` when it has zero or several."""
        found = None
        for f in self.out_facts.get(entity_id, ()):
            if f.relation == relation:
                if found is not None:
                    return None
                found = f
        return found

    def __len__(self) -> int:
        return len(self.entities)


def takes_article(entity: Entity) -> bool:
    """Whether running text puts "the" before a name, for sources that do not say.

    >>> takes_article(Entity("E1", "Velna River", "river"))
    True
    >>> takes_article(Entity("E2", "Orsk", "settlement"))
    False
    """
    if entity.type in ("river", "building", "event", "vessel"):
        return True
    if entity.type == "organisation":
        return not entity.name.endswith(("& Co.", "Brothers", "Press", "Publishers", "Bank"))
    return False


# ---------------------------------------------------------------------------------------------
# Wording


@dataclass(frozen=True)
class RelationPhrases:
    """How one relation reads: initial ``questions`` asking for the value, ``out`` predicates
    describing the subject by its ``{value}`` ("designed by {value}"), ``inward`` ones describing
    the value by its ``{subject}`` ("who designed {subject}"). Every predicate must read well
    after "the <type>" and after "and"."""

    questions: tuple[str, ...]
    out: tuple[str, ...]
    inward: tuple[str, ...] = ()


def _generic_phrases(relation: str, kind: str, label: str) -> RelationPhrases:
    """Wording derived from a relation's label, for relations the table below does not know."""
    label = (label or relation.replace("_", " ")).strip()
    if kind == "entity":
        return RelationPhrases(
            questions=(f"Which {{value_type}} is {{subject}} {label}?",),
            out=(f"{label} {{value}}", f"that is {label} {{value}}"),
            inward=(f"that {{subject}} is {label}",),
        )
    if kind == "year":
        verb = label[:-3] if label.endswith(" in") else label
        return RelationPhrases(
            questions=(f"In what year was {{subject}} {verb}?",),
            out=(f"{verb} in {{value}}", f"that was {verb} in {{value}}"),
        )
    return RelationPhrases(
        questions=(f"What is the {label} of {{subject}}?",),
        out=(f"whose {label} is {{value}}", f"with a {label} of {{value}}"),
    )


# Wording for the sandbox's relations (``world/generator.py``); others fall back to
# ``_generic_phrases``. ``{value_noun}`` is what the answer is ("architect"). Templates end on
# the name they mention where English allows it ("the town that is home to {subject}"): later
# rounds replace that name by a whole description, and words after it would pile up.
P = RelationPhrases
PHRASES: dict[str, RelationPhrases] = {
    # places
    "located_in": P(("Which {value_noun} is home to {subject}?",
                     "In which {value_noun} can one find {subject}?"),
                    ("located in {value}", "that lies in {value}", "that stands in {value}"),
                    ("that is home to {subject}", "that contains {subject}")),
    "capital": P(("What is the capital of {subject}?",
                  "Which {value_noun} is the capital of {subject}?"),
                 ("whose capital is {value}",),
                 ("that is the capital of {subject}", "that serves as the capital of {subject}")),
    "borders": P(("Which {value_noun} borders {subject}?",),
                 ("that borders {value}", "bordering {value}"),
                 ("that borders {subject}", "bordering {subject}")),
    "twinned_with": P(("Which {value_noun} is twinned with {subject}?",),
                      ("twinned with {value}", "that is twinned with {value}"),
                      ("twinned with {subject}", "that is twinned with {subject}")),
    "flows_through": P(("Which {value_noun} lies on the course of {subject}?",),
                       ("that flows through {value}", "flowing through {value}"),
                       ("that lies on {subject}", "on the course of {subject}")),
    "source": P(("Which {value_noun} is the source of {subject}?",),
                ("that rises on {value}", "whose source is on {value}"),
                ("that is the source of {subject}", "on which rises {subject}")),
    "flows_into": P(("Which {value_noun} receives the waters of {subject}?",),
                    ("that flows into {value}", "that empties into {value}"),
                    ("fed by {subject}", "that receives the waters of {subject}")),
    "headquartered_in": P(("Which {value_noun} hosts the headquarters of {subject}?",),
                          ("headquartered in {value}", "based in {value}"),
                          ("that hosts the headquarters of {subject}",
                           "that is home to {subject}")),
    "held_in": P(("Which {value_noun} hosted {subject}?",),
                 ("held in {value}", "that took place in {value}"),
                 ("that hosted {subject}", "that was the venue of {subject}")),
    "kept_in": P(("Which {value_noun} holds {subject}?",),
                 ("kept in {value}", "held in the collection of {value}"),
                 ("that holds {subject}", "whose collection includes {subject}")),
    "native_to": P(("Which {value_noun} is home to {subject}?",),
                   ("native to {value}", "that is native to {value}"),
                   ("that is home to {subject}",)),
    "home_port": P(("What is the home port of {subject}?",),
                   ("whose home port is {value}", "registered in {value}"),
                   ("that is the home port of {subject}",)),
    "crosses": P(("Which {value_noun} is crossed by {subject}?",),
                 ("that crosses {value}", "spanning {value}"),
                 ("crossed by {subject}", "spanned by {subject}")),
    "depicts": P(("What is depicted in {subject}?",), ("depicting {value}", "that depicts {value}"),
                 ("depicted in {subject}", "portrayed in {subject}")),
    # people
    "born_in": P(("What was the birthplace of {subject}?",
                  "Which {value_noun} was the birthplace of {subject}?"),
                 ("born in {value}",), ("that was the birthplace of {subject}",)),
    "died_in": P(("Which {value_noun} was the place of death of {subject}?",),
                 ("who died in {value}",),
                 ("that was the place of death of {subject}",)),
    "educated_at": P(("Which {value_noun} educated {subject}?",),
                     ("educated at {value}", "who studied at {value}"),
                     ("that educated {subject}", "attended by {subject}")),
    "member_of": P(("Which {value_noun} had among its members {subject}?",),
                   ("who was a member of {value}",),
                   ("whose members included {subject}",)),
    "founded_by": P(("Who founded {subject}?", "Which {value_noun} founded {subject}?"),
                    ("founded by {value}",),
                    ("who founded {subject}", "who established {subject}")),
    "designed_by": P(("Who designed {subject}?", "Which {value_noun} designed {subject}?"),
                     ("designed by {value}",),
                     ("who designed {subject}", "responsible for the design of {subject}")),
    "first_ascended_by": P(("Who made the first ascent of {subject}?",),
                           ("first climbed by {value}", "whose first ascent was made by {value}"),
                           ("who made the first ascent of {subject}",
                            "who first climbed {subject}")),
    "created_by": P(("Who created {subject}?", "Which {value_noun} made {subject}?"),
                    ("created by {value}", "made by {value}"),
                    ("who created {subject}", "who made {subject}")),
    "led_by": P(("Who led {subject}?",), ("led by {value}",),
                ("who led {subject}", "who was the leader of {subject}")),
    "described_by": P(("Who first described {subject}?",), ("first described by {value}",),
                      ("who first described {subject}",)),
    "named_after": P(("Which {value_noun} is honoured in the name of {subject}?",),
                     ("named after {value}",),
                     ("honoured in the name of {subject}",)),
    # organisations
    "commissioned_by": P(("Which {value_noun} commissioned {subject}?",),
                         ("commissioned by {value}",),
                         ("that commissioned {subject}",)),
    "organised_by": P(("Which {value_noun} organised {subject}?",), ("organised by {value}",),
                      ("that organised {subject}",)),
    "built_by": P(("Which {value_noun} built {subject}?",), ("built by {value}",),
                  ("that built {subject}",)),
    # years
    "year_established": P(("What is the year of establishment of {subject}?",),
                          ("established in {value}", "that was established in {value}")),
    "year_founded": P(("What is the founding year of {subject}?",
                       "In what year was the founding of {subject}?"),
                      ("founded in {value}", "that was founded in {value}")),
    "year_built": P(("In what year was the construction of {subject} completed?",
                     "What is the completion year of {subject}?"),
                    ("built in {value}", "completed in {value}")),
    "year_born": P(("What is the birth year of {subject}?",),
                   ("born in {value}", "who was born in {value}")),
    "year_died": P(("What is the year of death of {subject}?",), ("who died in {value}",)),
    "year_created": P(("What year is given for the creation of {subject}?",),
                      ("created in {value}", "made in {value}")),
    "year_held": P(("What year saw {subject}?",
                    "In what year did the event take place that is known as {subject}?"),
                   ("held in {value}", "that took place in {value}")),
    "year_described": P(("What is the year of the first description of {subject}?",),
                        ("first described in {value}",)),
    "year_launched": P(("What is the launch year of {subject}?",),
                       ("launched in {value}", "that was launched in {value}")),
    "first_ascent_year": P(("In what year was the first ascent of {subject}?",),
                           ("first climbed in {value}",)),
    # measures
    "population": P(("What is the population of {subject}?",), ("with a population of {value}",)),
    "area": P(("What is the area of {subject}?",), ("covering {value}", "with an area of {value}")),
    "elevation": P(("What is the elevation of {subject}?",),
                   ("at an elevation of {value}", "that rises to {value}")),
    "length": P(("What is the length of {subject}?",),
                ("{value} long", "with a length of {value}")),
    "height": P(("What is the height of {subject}?",),
                ("{value} tall", "with a height of {value}")),
    "depth": P(("What is the maximum depth of {subject}?",), ("with a maximum depth of {value}",)),
    "participants": P(("How many participants took part in {subject}?",),
                      ("attended by {value} participants",)),
    "members": P(("What is the number of members of {subject}?",), ("with {value} members",)),
    "tonnage": P(("What is the gross tonnage of {subject}?",), ("of {value} gross tonnage",)),
    # texts
    "material": P(("What material was used for {subject}?",), ("executed in {value}",)),
}
del P

# Relations whose value is what the entity *is*: they give the description its noun ("the
# bridge", "the architect") instead of a predicate, and never make an initial question.
NOUN_RELATIONS = ("instance_of", "occupation")


def phrases_for(relation: str, kind: str = "entity", label: str = "") -> RelationPhrases:
    return PHRASES.get(relation) or _generic_phrases(relation, kind, label)


def constraint_predicate(c: Constraint, rng: random.Random, *, clause: bool) -> str:
    """The English predicate for one constraint (``clause=True`` prefers a relative clause).

    >>> c = Constraint("designed_by", OUT, "E1", value_text="Ilsa Maren")
    >>> constraint_predicate(c, random.Random(0), clause=False)
    'designed by Ilsa Maren'
    """
    ph = phrases_for(c.relation, c.kind, c.label)
    if c.direction == IN:
        options = ph.inward or _generic_phrases(c.relation, c.kind, c.label).inward
        return rng.choice(options).format(subject=c.value_text)
    options = ph.out
    if clause:
        full = tuple(o for o in options if o.split(" ", 1)[0] in ("that", "who", "whose", "which",
                                                                  "where", "with"))
        options = full or options
    return rng.choice(options).format(value=c.value_text)


def describe(noun: str, constraints: Iterable[Constraint], rng: random.Random) -> str:
    """Word a description: "the <noun> <predicate>[ and <predicate>]".

    >>> c = Constraint("designed_by", OUT, "E1", value_text="Ilsa Maren")
    >>> describe("bridge", [c], random.Random(0))
    'the bridge designed by Ilsa Maren'
    """
    worded = [c for c in constraints if c.relation not in NOUN_RELATIONS]
    preds = [constraint_predicate(c, rng, clause=False) for c in worded]
    if len(preds) > 1:
        preds = [constraint_predicate(c, rng, clause=True) for c in worded]
    return f"the {noun.replace('_', ' ')} " + " and ".join(preds)


def iter_pairs(items: list) -> Iterator[tuple]:
    return itertools.combinations(items, 2)
