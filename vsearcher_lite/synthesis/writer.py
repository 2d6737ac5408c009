"""The writer role: the six operations that turn a seed into an injected question (paper 2.1, A.2).

``Writer`` is the interface; ``RuleWriter`` does the operations offline from the sandbox's
structured facts, ``llm_writer.LLMWriter`` with prompts:

- ``initial_qa`` -> ``InitialQA``: a one-sentence question about the seed, a short answer;
- ``pick_entity``: the name of one entity in the question to hide;
- ``extract_fact`` -> ``FactChoice``: a fact about it and the phrase built from it;
- ``rewrite``: the question with the entity replaced by that phrase;
- ``pick_critical_entity``: the name of the entity the image will show;
- ``hide_for_image``: the question with it replaced by "the <type> shown in the image".

Each returns a valid result or raises ``WriterError`` with a short counted reason.
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
import random
from dataclasses import dataclass, field

from vsearcher_lite.agent.task import ImageInjection, Task
from vsearcher_lite.synthesis.chain import text_only_answers
from vsearcher_lite.synthesis.describe import (
    NOUN_RELATIONS,
    OUT,
    Constraint,
    FactIndex,
    describe,
    iter_pairs,
    phrases_for,
)
from vsearcher_lite.synthesis.text import (
    contains_name,
    find_name_span,
    fold,
    mentions_answer,
    replace_name,
    sentence_case,
)
from vsearcher_lite.world.model import Fact, KnowledgeSource, PageContent, Seed


class WriterError(RuntimeError):
    """An operation could not produce a valid result; ``reason`` is a short counted key."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass
class InitialQA:
    question: str
    answer: str
    relation: str = ""  # the seed's relation the question asks about ("" when free text)
    aliases: list[str] = field(default_factory=list)
    answer_entity_id: str | None = None  # when the answer is itself an entity


@dataclass
class FactChoice:
    """A fact about the entity to hide and the description built from it."""

    entity_id: str
    entity: str  # the name as it appears in the question
    sentence: str  # the fact as one sentence
    description: str  # the phrase that replaces the name
    fact: dict  # the main Fact as a dict (free-text facts: kind "text")
    entity_type: str = ""
    constraints: list[Constraint] = field(default_factory=list)
    # names the description introduces -> ids
    new_mentions: dict[str, str] = field(default_factory=dict)


@dataclass
class WriteContext:
    task: Task
    rng: random.Random
    mentions: dict[str, str] = field(default_factory=dict)  # names in the current question -> ids
    used: set[str] = field(default_factory=set)  # ids already in the chain (never re-introduced)
    tried: set[str] = field(default_factory=set)  # names already tried in this round
    rounds_left: int = 0  # injection rounds still to come after the current one

    @property
    def answer(self) -> str:
        return self.task.answer


class Writer(abc.ABC):
    name = "writer"

    @abc.abstractmethod
    def initial_qa(self, seed: Seed, page: PageContent, ctx: WriteContext) -> InitialQA: ...

    @abc.abstractmethod
    def pick_entity(self, question: str, ctx: WriteContext) -> str: ...

    @abc.abstractmethod
    def extract_fact(self, entity_id: str, entity: str, page: PageContent,
                     ctx: WriteContext) -> FactChoice: ...

    @abc.abstractmethod
    def rewrite(self, question: str, entity: str, fact: FactChoice, ctx: WriteContext) -> str: ...

    @abc.abstractmethod
    def pick_critical_entity(self, question: str, ctx: WriteContext) -> str: ...

    @abc.abstractmethod
    def hide_for_image(self, question: str, entity: str, entity_type: str,
                       ctx: WriteContext) -> str:
        """``entity_type`` is the noun the image phrase uses ("bridge", "town")."""


# ---------------------------------------------------------------------------------------------

IMAGE_PHRASES = ("the {type} shown in the image", "the {type} shown in the image",
                 "the {type} pictured in the image")
MAX_ANSWER_WORDS = 6  # "a single word or a short phrase" (paper 2.1)


def image_phrase(entity_type: str, rng: random.Random) -> str:
    return rng.choice(IMAGE_PHRASES).format(type=entity_type.replace("_", " "))


class RuleWriter(Writer):
    """The offline writer, from the sandbox's facts. It keeps the answer unique by construction:
    a description (one fact, else a pair) is used only when exactly one entity of the world fits
    it, and it never names an entity already in the chain nor mentions the answer."""

    name = "rule"

    def __init__(self, source: KnowledgeSource, index: FactIndex | None = None):
        self.source = source
        self.index = index if index is not None else FactIndex.from_source(source)
        self._has_image: dict[str, bool] = {}
        self._successors: dict[str, frozenset] = {}
        self._singles: dict[str, tuple[list[Constraint], list[Constraint]]] = {}
        self._pairs: dict[str, list[tuple[Constraint, Constraint]]] = {}

    # -- initial QA --------------------------------------------------------------------------
    def answer_facts(self, seed_id: str) -> list[Fact]:
        """The seed's facts that make a good initial question: one value, short answer."""
        out = []
        seen = set()
        for f in self.index.out_facts.get(seed_id, ()):
            if f.relation in NOUN_RELATIONS:  # "What is X?" - "a bridge" is no question
                continue
            if f.relation in seen or self.index.single_value(seed_id, f.relation) is None:
                continue
            seen.add(f.relation)
            text = f.value_text()
            if not text or len(text.split()) > MAX_ANSWER_WORDS:
                continue
            if mentions_answer(self.index.ref_of(seed_id), text):
                continue  # "Where is the Orsk Harbour Company based?" - "Orsk" gives itself away
            value = str(f.value)
            if f.kind == "entity" and (value == seed_id or value not in self.index.entities):
                continue
            out.append(f)
        return out

    def initial_qa(self, seed: Seed, page: PageContent, ctx: WriteContext) -> InitialQA:
        if seed.id not in self.index.entities:
            raise WriterError("page_not_found", f"seed {seed.id} is not in the world")
        facts = self.answer_facts(seed.id)
        if not facts:
            raise WriterError("no_answerable_fact", f"seed {seed.id} has no single-valued fact")
        # Keep only answers that leave the seed a description naming another entity: round 1
        # hides the seed behind it, and later rounds need a name to hide in turn.
        extendable = [f for f in facts if self.can_extend(seed.id, f, ctx)]
        if not extendable:
            raise WriterError("seed_not_extendable",
                              f"no answer leaves {seed.id} describable by another entity")
        facts = extendable
        # Entity and year answers read most like the paper's short, checkable answers.
        weights = [2.0 if f.kind in ("entity", "year") else 1.0 for f in facts]
        fact = ctx.rng.choices(facts, weights=weights, k=1)[0]
        value_noun = self.index.noun_of(str(fact.value)) if fact.kind == "entity" else "one"
        template = ctx.rng.choice(phrases_for(fact.relation, fact.kind, fact.label).questions)
        question = sentence_case(template.format(subject=self.index.ref_of(seed.id),
                                                 value_noun=value_noun))
        aliases: list[str] = []
        answer_entity = None
        if fact.kind == "entity":
            answer_entity = str(fact.value)
            aliases = [a for a in self.index.entities[answer_entity].aliases if a]
        return InitialQA(question, fact.value_text(), fact.relation, aliases, answer_entity)

    def can_extend(self, seed_id: str, answer: Fact, ctx: WriteContext) -> bool:
        """Would the seed keep a distinctive description naming an entity, with this answer?"""
        is_entity = answer.kind == "entity"
        probe_task = dataclasses.replace(
            ctx.task, answer=answer.value_text(), answer_relation=answer.relation, seed_id=seed_id,
            extra={"answer_entity_id": str(answer.value)} if is_entity else {})
        used = {seed_id} | ({str(answer.value)} if is_entity else set())
        probe = WriteContext(probe_task, ctx.rng, used=used)
        options = self.distinctive_descriptions(seed_id, probe)
        return any(any(c.is_entity for c in o) for o in options)

    # -- one injection round -----------------------------------------------------------------
    def pick_entity(self, question: str, ctx: WriteContext) -> str:
        names = [n for n in ctx.mentions if n not in ctx.tried and contains_name(question, n)]
        if not names:
            raise WriterError("no_entity_to_pick", "no untried named entity left in the question")
        # Prefer entities with many facts: they are the ones a later round can describe again.
        weights = [1.0 + len(self.index.constraints_of(ctx.mentions[n])) for n in names]
        return ctx.rng.choices(names, weights=weights, k=1)[0]

    def allowed(self, entity_id: str, ctx: WriteContext):
        """A test of which constraints on the entity may appear in this task's question: not
        those naming an entity already in the chain, names that contain or sit inside a name in
        play, nor values that would reveal the answer (the seed's answer relation included)."""
        answer = fold(ctx.answer)
        used = ctx.used | {ctx.task.seed_id}
        hidden_name = self.index.name_of(entity_id)
        hidden_folded = fold(hidden_name)
        others = [n for n in ctx.mentions if n != hidden_name]
        answer_entity = ctx.task.extra.get("answer_entity_id")
        is_seed = entity_id == ctx.task.seed_id

        def ok(c: Constraint) -> bool:
            if is_seed and c.direction == OUT and c.relation == ctx.task.answer_relation:
                return False
            if c.is_entity:
                value = str(c.value)
                if value in used or value == answer_entity:
                    return False
                new_name = self.index.name_of(value)
                inside = f" {hidden_folded} " in f" {fold(new_name)} "
                if inside or self.names_clash(new_name, others):
                    # "the town that hosted the Orsk Festival" while hiding Orsk: the name stays
                    return False
            text = fold(c.value_text)
            return bool(text) and not (answer and (answer in text or text in answer))

        return ok

    @staticmethod
    def names_clash(name: str, others: list[str]) -> bool:
        """True when ``name`` contains one of ``others`` or sits inside one (whole words): two
        such names in one question would make "replace the name" ambiguous.

        >>> [RuleWriter.names_clash(n, ["Orsk"]) for n in ("Orsk Festival", "Orskmere")]
        [True, False]
        """
        a = f" {fold(name)} "
        for o in others:
            b = f" {fold(o)} "
            if o and (b in a or a in b):
                return True
        return False

    def has_image(self, entity_id: str) -> bool:
        found = self._has_image.get(entity_id)
        if found is None:
            found = self._has_image[entity_id] = self.source.image(entity_id) is not None
        return found

    def image_critical(self, entity_id: str, option: tuple[Constraint, ...], c: Constraint) -> bool:
        """Does ``c`` name a pictured entity the description cannot do without? Shown only as
        "the <noun> in the image", it could be any of its kind; then several entities fit."""
        if not c.is_entity or not self.has_image(str(c.value)):
            return False
        value = str(c.value)
        noun = self.index.noun_constraint(value)
        kind = self.index.candidates(self.index.type_of(value), [noun] if noun is not None else [])
        own_noun = self.index.noun_constraint(entity_id)
        base = [own_noun] if own_noun is not None else []
        fits = self.index.candidates(self.index.type_of(entity_id), base + list(option),
                                     value_options={value: kind})
        return len(fits) > 1

    def successors(self, entity_id: str) -> frozenset:
        """Entities a distinctive description of this one can name, ignoring any task's
        exclusions (it only steers the choice towards entities that can carry a chain on)."""
        found = self._successors.get(entity_id)
        if found is None:
            probe = WriteContext(Task(id="probe", question="", answer=""), random.Random(0))
            options = self.distinctive_descriptions(entity_id, probe)
            found = frozenset(str(c.value) for o in options for c in o if c.is_entity)
            self._successors[entity_id] = found
        return found

    MAX_INBOUND = 24  # a region is the value of hundreds of "located in" facts; a sample is plenty

    def considered_constraints(self, entity_id: str) -> list[Constraint]:
        """The entity's outgoing constraints and at most ``MAX_INBOUND`` incoming ones, a sample
        fixed per entity by a hash, so it does not depend on which task asks first."""
        out = [c for c in self.index.constraints_of(entity_id) if c.direction == OUT]
        inbound = [c for c in self.index.constraints_of(entity_id) if c.direction != OUT]
        if len(inbound) > self.MAX_INBOUND:
            def key(c: Constraint) -> bytes:
                text = f"{entity_id}|{c.relation}|{c.value}"
                return hashlib.blake2b(text.encode(), digest_size=8).digest()

            inbound.sort(key=key)
            inbound = inbound[: self.MAX_INBOUND]
        return out + inbound

    def static_singles(self, entity_id: str) -> tuple[list[Constraint], list[Constraint]]:
        """The entity's constraints that identify it alone (with its noun), and the others;
        cached, as uniqueness depends only on the world."""
        cached = self._singles.get(entity_id)
        if cached is None:
            etype = self.index.type_of(entity_id)
            noun = self.index.noun_constraint(entity_id)
            base = [noun] if noun is not None else []
            singles, rest = [], []
            for c in self.considered_constraints(entity_id):
                unknown = c.is_entity and str(c.value) not in self.index.entities
                if c.relation in NOUN_RELATIONS or unknown:
                    continue
                alone = self.index.candidates(etype, base + [c]) == {entity_id}
                (singles if alone else rest).append(c)
            cached = self._singles[entity_id] = (singles, rest)
        return cached

    def static_pairs(self, entity_id: str) -> list[tuple[Constraint, Constraint]]:
        """Pairs of non-identifying constraints that identify the entity together. Cached."""
        cached = self._pairs.get(entity_id)
        if cached is None:
            etype = self.index.type_of(entity_id)
            noun = self.index.noun_constraint(entity_id)
            base = [noun] if noun is not None else []
            cached = []
            for a, b in iter_pairs(self.static_singles(entity_id)[1]):
                if a.relation == b.relation and a.direction == b.direction:
                    continue  # "built in X and in Y" reads badly
                if self.index.candidates(etype, base + [a, b]) == {entity_id}:
                    cached.append((a, b))
            self._pairs[entity_id] = cached
        return cached

    def distinctive_descriptions(self, entity_id: str,
                                 ctx: WriteContext) -> list[tuple[Constraint, ...]]:
        """Constraint sets (one, else two) that only ``entity_id`` satisfies among its kind,
        restricted to what this task's question may mention."""
        ok = self.allowed(entity_id, ctx)
        singles = [(c,) for c in self.static_singles(entity_id)[0] if ok(c)]
        if singles:
            return singles
        return [p for p in self.static_pairs(entity_id) if ok(p[0]) and ok(p[1])]

    def extract_fact(self, entity_id: str, entity: str, page: PageContent,
                     ctx: WriteContext) -> FactChoice:
        if entity_id not in self.index.entities:
            raise WriterError("page_not_found", f"{entity!r} ({entity_id}) is not in the world")
        options = self.distinctive_descriptions(entity_id, ctx)
        others = [n for n in ctx.mentions if n != entity]
        if not others:
            # The question must keep a named entity: for the next round and for the image.
            options = [o for o in options if any(c.is_entity for c in o)]
        if not options:
            raise WriterError("no_distinctive_fact",
                              f"no fact tells {entity!r} apart from other entities")
        if ctx.rounds_left == 0 and not any(self.has_image(ctx.mentions[n]) for n in others):
            # Last round: the image injection that follows needs a named entity with a picture,
            # and one that matters: without the picture the description must stop being unique.
            pictured = [o for o in options if any(self.image_critical(entity_id, o, c) for c in o)]
            options = pictured or options
        used_after = ctx.used | {entity_id}

        def future(eid: str) -> float:
            """How well a newly named entity can carry the chain on: more rounds, then the image."""
            score = 1.0 if self.has_image(eid) else 0.3
            if ctx.rounds_left > 0 and not (self.successors(eid) - used_after - {eid}):
                score *= 0.05
            return score

        # Like the paper's "as many entities as possible": prefer descriptions that name entities
        # the next rounds can hide in turn and the image can show.
        def richness(cs: tuple[Constraint, ...]) -> float:
            named = [str(c.value) for c in cs if c.is_entity]
            if not named:
                return 0.2
            return sum(3.0 * future(e) for e in named)

        chosen = ctx.rng.choices(options, weights=[richness(o) for o in options], k=1)[0]
        etype = self.index.type_of(entity_id)
        description = describe(self.index.noun_of(entity_id), chosen, ctx.rng)
        noun = self.index.noun_constraint(entity_id)
        main = chosen[0]
        if main.direction == OUT:
            fact = Fact(entity_id, main.relation, main.value, main.kind, main.label,
                        main.value_text if main.is_entity else "")
        else:
            fact = Fact(str(main.value), main.relation, entity_id, "entity", main.label, entity)
        new_mentions = {self.index.name_of(str(c.value)): str(c.value)
                        for c in chosen if c.is_entity}
        return FactChoice(
            entity_id=entity_id,
            entity=entity,
            sentence=sentence_case(f"{self.index.ref_of(entity_id)} is {description}."),
            description=description,
            fact=dict(fact.__dict__),
            entity_type=etype,
            constraints=([noun] if noun is not None else []) + list(chosen),
            new_mentions=new_mentions,
        )

    def rewrite(self, question: str, entity: str, fact: FactChoice, ctx: WriteContext) -> str:
        span = find_name_span(question, entity)
        if span is None:
            raise WriterError("entity_not_in_question", entity)
        return replace_name(question, span, fact.description)

    # -- image injection ---------------------------------------------------------------------
    def pick_critical_entity(self, question: str, ctx: WriteContext) -> str:
        """The pictured entity that, withheld from the solver, leaves the most possible answers
        (paper 2.1: the image must matter for the answer)."""
        names = [
            n for n in ctx.mentions
            if n not in ctx.tried and contains_name(question, n) and self.has_image(ctx.mentions[n])
        ]
        if not names:
            raise WriterError("no_image_entity", "no named entity in the question has an image")
        scored = []
        for n in names:
            eid = ctx.mentions[n]
            probe = dataclasses.replace(
                ctx.task,
                image=ImageInjection(eid, n, "", "", question, question, self.index.type_of(eid))
            )
            openness = len(text_only_answers(probe, self.index)) if probe.answer_relation else 0
            scored.append((openness, ctx.rng.random(), n))
        scored.sort(reverse=True)
        return scored[0][2]

    def hide_for_image(self, question: str, entity: str, entity_type: str,
                       ctx: WriteContext) -> str:
        span = find_name_span(question, entity)
        if span is None:
            raise WriterError("entity_not_in_question", entity)
        return replace_name(question, span, image_phrase(entity_type, ctx.rng))
