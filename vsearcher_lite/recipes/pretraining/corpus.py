"""Pretraining documents for the tiny base: reading and copying, never the agent protocol.

Plain text from sandbox worlds other than the evaluation world (``worlds``), in seven kinds
(``WRITERS``: plain pages, and copy documents from a repeated list to a fact looked up in a
result list). Result lists and pages use the toolbox's own formatting; no chat template, tool
markup or trajectory appears (that is SFT's job). A segment's role marks copy tokens, so
training logs their loss apart and the probes know what to generate; segment boundaries fall
where the tokenizer splits anyway, so the ids equal the joined text's.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from vsearcher_lite.recipes.pretraining.worlds import (
    CORPUS_WORLD_SEEDS,
    SourceEntity,
    SourceFact,
    SourceWorld,
    build_source_world,
)
from vsearcher_lite.synthesis.describe import phrases_for
from vsearcher_lite.tools.base import SearchHit
from vsearcher_lite.tools.toolbox import format_image_hits, format_text_hits, format_visit
from vsearcher_lite.world.rename import (
    DEFAULT_WORLD_ENTITIES,
    DEFAULT_WORLD_SEED,
    ForbiddenNames,
    default_world_names,
    fresh_root,
    name_roots,
    substitute_words,
)

DOC_KINDS = ("page", "repeat", "kv", "pick", "lookup", "pageqa", "restate")
#: Segment roles whose tokens are copies; training logs their loss, probes generate them.
COPY_ROLES = ("repeat", "recall", "answer")
ROLE_IDS = {"": 0, "repeat": 1, "recall": 2, "answer": 3}


# -- Documents --------------------------------------------------------------------------------


@dataclass
class Doc:
    """One document: ``segments`` of ``(text, role)``; role "" is context, else a copy target."""

    kind: str
    segments: list[tuple[str, str]]
    meta: dict = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "".join(t for t, _ in self.segments)


def refresh_names(doc: "Doc", rng: random.Random, forbidden_roots: Iterable[str] = (),
                  name_roots_of_world: set[str] | frozenset | None = None) -> "Doc":
    r"""The document with each name root of ``name_roots_of_world`` replaced by a fresh one,
    consistently within it: over hours of training on fixed worlds a model can "copy" names it
    has memorised; with fresh names every copy is a real one.

    >>> d = Doc("kv", [("Pejund: 1874\nPejund: ", ""), ("1874", "recall")])
    >>> new = refresh_names(d, random.Random(0))
    >>> new.segments[1], new.text.count(new.text.split(":")[0]), "Pejund" in new.text
    (('1874', 'recall'), 2, False)
    """
    roots = name_roots([doc.text])
    if name_roots_of_world is not None:
        roots &= set(name_roots_of_world)
    if not roots:
        return doc
    taken = set(roots) | {r.lower() for r in forbidden_roots}
    mapping = {r: fresh_root(rng, taken, styled=True) for r in sorted(roots)}
    segments = [(substitute_words(text, mapping), role) for text, role in doc.segments]
    return Doc(doc.kind, segments, dict(doc.meta, fresh_names=len(mapping)))


# -- Document writers (pure functions of a world and a random generator) ----------------------


def snippet_for(entity: SourceEntity, value: str | None, rng: random.Random,
                words: int = 22) -> str:
    """About ``words`` words of the article around ``value``, as the sandbox text search shows."""
    text = " ".join(entity.paragraphs)
    tokens = text.split()
    if not tokens:
        return ""
    centre = 0
    if value:
        pos = text.find(value)
        if pos >= 0:
            centre = len(text[:pos].split())
    start = max(0, min(centre - rng.randint(2, words // 2), len(tokens) - words))
    piece = " ".join(tokens[start:start + words])
    return ("…" if start > 0 else "") + piece + ("…" if start + words < len(tokens) else "")


def page_text(entity: SourceEntity, max_paragraphs: int | None = None) -> str:
    paras = entity.paragraphs if max_paragraphs is None else entity.paragraphs[:max_paragraphs]
    return "\n".join(paras)


def doc_page(world: SourceWorld, rng: random.Random) -> Doc:
    """An article (as a wiki page or as the visit tool's extract) or a secondary page."""
    if world.pages and rng.random() < 0.2:
        p = rng.choice(world.pages)
        return Doc("page", [(f"{p.title}\nURL: {p.url}\n" + "\n".join(p.paragraphs) + "\n", "")])
    e = rng.choice(world.entities)
    if rng.random() < 0.5:
        return Doc("page", [(f"{e.title}\n{page_text(e)}\n", "")])
    return Doc("page", [(format_visit(e.url, e.title, f"{e.title}\n{page_text(e)}") + "\n", "")])


def _item(world: SourceWorld, rng: random.Random, style: str) -> str:
    if style == "year":
        return str(rng.randint(1000, 2024))
    if style == "word":
        e = rng.choice(world.entities)
        return rng.choice(e.kind.split() or ["town"])
    return rng.choice(world.entities).name


def doc_repeat(world: SourceWorld, rng: random.Random) -> Doc:
    """3-12 items, then the exact same items again: every token of the second half can be copied."""
    style = rng.choice(("name", "name", "year", "mixed"))
    n = rng.randint(3, 12)
    items = [_item(world, rng, rng.choice(("name", "year", "word")) if style == "mixed" else style)
             for _ in range(n)]
    sep = rng.choice((", ", "; ", "\n"))
    body = sep.join(items)
    lead = rng.choice(("List: ", "Items: ", "", "Names: " if style == "name" else "Values: "))
    again = rng.choice(("\nAgain: ", "\nRepeat: ", "\n| ", "\nOnce more: "))
    return Doc("repeat", [(f"{lead}{body}{again}", ""), (body, "repeat"), ("\n", "")],
               {"n_items": n})


def doc_kv(world: SourceWorld, rng: random.Random) -> Doc:
    """Key -> value lines, then the value recalled for a shuffled subset of the keys."""
    n = rng.randint(3, 8)
    entities = rng.sample(world.entities, n)
    value_style = rng.choice(("year", "year", "kind"))
    pairs = [(e.name, str(rng.randint(1000, 2024)) if value_style == "year" else e.kind)
             for e in entities]
    lines = "".join(f"{k}: {v}\n" for k, v in pairs)
    segs: list[tuple[str, str]] = [(lines + rng.choice(("Recall:\n", "Again:\n", "\n")), "")]
    asked = rng.sample(pairs, rng.randint(1, min(4, n)))
    for k, v in asked:
        segs += [(f"{k}: ", ""), (v, "recall"), ("\n", "")]
    return Doc("kv", segs, {"n_pairs": n})


def doc_pick(world: SourceWorld, rng: random.Random) -> Doc:
    """A list of pages (as image search prints it), then the one of the asked kind."""
    n = rng.randint(3, 5)
    entities = rng.sample(world.entities, n)
    kinds = [e.kind for e in entities]
    target = rng.randrange(n)
    if kinds.count(kinds[target]) > 1:  # the asked kind must pick out one entry
        target = next((i for i, k in enumerate(kinds) if kinds.count(k) == 1), None)
        if target is None:
            return doc_repeat(world, rng)
    e = entities[target]
    hits = [SearchHit(x.url, x.title, "") for x in entities]
    listing = format_image_hits(hits) if rng.random() < 0.5 else "\n".join(
        f"{i}. {x.title} ({x.kind})" for i, x in enumerate(entities, start=1))
    question = rng.choice((f"The {e.kind} in this list is ", f"Which one is the {e.kind}? ",
                           f"The {e.kind}: "))
    return Doc("pick", [(f"{listing}\n{question}", ""), (e.title, "answer"), ("\n", "")],
               {"kind": e.kind})


def _question_for(entity: SourceEntity, fact: SourceFact, rng: random.Random,
                  subject: str | None = None) -> str:
    phrases = phrases_for(fact.relation, fact.kind, fact.label)
    template = rng.choice(phrases.questions)
    text = template.format(subject=entity.ref if subject is None else subject,
                           value_noun=fact.value_noun,
                           value_type=fact.value_noun)
    return _capitalised(text)


def _capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]


IMAGE_WORDS = ("shown in the image", "pictured in the image", "seen in the image")


def doc_restate(world: SourceWorld, rng: random.Random) -> Doc:
    """A question about an entity named only by a description ("the <kind> shown in the image",
    or a fact with that phrase inside it), what the description names, and the question asked
    again with the name in its place (the copy target), one level at a time."""
    from vsearcher_lite.synthesis.describe import OUT, Constraint, describe

    by_name = {e.name: e for e in world.entities}
    for _ in range(20):
        e = rng.choice(world.entities)
        if e.facts:
            break
    else:
        return doc_repeat(world, rng)
    asked = rng.choice(e.facts)
    links = [f for f in e.facts if f.kind == "entity" and f is not asked and f.value in by_name]
    image = lambda kind: f"the {kind} {rng.choice(IMAGE_WORDS)}"  # noqa: E731
    # (description as the question has it, the name it stands for)
    steps: list[tuple[str, str]] = []
    if links and rng.random() < 0.5:
        link = rng.choice(links)
        inner = by_name[link.value]
        constraint = Constraint(link.relation, OUT, link.value, "entity", link.value, link.label)
        outer = describe(e.kind, [constraint], rng)
        if link.value not in outer:
            return doc_repeat(world, rng)
        inner_desc = image(inner.kind)
        steps = [(inner_desc, inner.name), (outer, e.name)]
        subject = outer.replace(link.value, inner_desc, 1)
    else:
        steps = [(image(e.kind), e.name)]
        subject = steps[0][0]
    question = _question_for(e, asked, rng, subject=subject)
    segs: list[tuple[str, str]] = [(f"Q: {question}\n", "")]
    current = question
    for description, name in steps:
        current = current.replace(description, name, 1)
        segs += [(f"{_capitalised(description)} is {name}.\nQ: ", ""),
                 (current, "answer"), ("\n", "")]
    return Doc("restate", segs, {"levels": len(steps), "relation": asked.relation})


def _restate(question: str, answer: str, rng: random.Random,
             restate: bool) -> list[tuple[str, str]]:
    """``Q: ...\\nA: <answer>`` and, when ``restate``, an ``Answer: <answer>`` line after it."""
    segs = [(f"Q: {question}\nA: ", ""), (answer, "answer"), ("\n", "")]
    if restate:
        segs += [("Answer: ", ""), (answer, "answer"), ("\n", "")]
    return segs


def _lookup_question(target: SourceEntity, index: int, fact: SourceFact | None, snippet: str,
                     rng: random.Random,
                     restate: bool) -> tuple[list[tuple[str, str]], str]:
    """Segments asking for one entry's fact, URL or title, and the mode used."""
    mode = rng.choices(("fact", "url", "title"), weights=(6, 2, 1))[0]
    if mode == "fact" and fact is not None and fact.value in snippet:
        return _restate(_question_for(target, fact, rng), fact.value, rng, restate), "fact"
    if mode == "url" or mode == "fact":
        ask = rng.choice((f"The page about {target.ref} is at ", f"URL of {target.title}: "))
        return [(ask, ""), (target.url, "answer"), ("\n", "")], "url"
    return [(f"Result {index + 1} is ", ""), (target.title, "answer"), ("\n", "")], "title"


def doc_lookup(world: SourceWorld, rng: random.Random, restate_share: float = 0.5) -> Doc:
    """A search-result list as the text search tool prints it, then one to three copies from its
    entries: the fact a snippet states, a title, or a URL."""
    n = rng.randint(3, 5)
    entities = rng.sample(world.entities, n)
    asked = rng.sample(range(n), rng.randint(1, min(3, n)))
    facts = {i: (rng.choice(entities[i].facts) if entities[i].facts else None) for i in asked}
    hits = [SearchHit(e.url, e.title, snippet_for(e, facts[i].value if facts.get(i) else None, rng))
            for i, e in enumerate(entities)]
    first = entities[asked[0]]
    first_fact = facts[asked[0]]
    query = f"{first.name} {first_fact.label}" if first_fact else f"{first.name} {first.kind}"
    segs: list[tuple[str, str]] = [(format_text_hits(query, hits) + "\n", "")]
    modes = []
    for i in asked:
        q, mode = _lookup_question(entities[i], i, facts[i], hits[i].snippet, rng,
                                   rng.random() < restate_share)
        segs += q
        modes.append(mode)
    return Doc("lookup", segs, {"mode": modes[0], "modes": modes})


def doc_pageqa(world: SourceWorld, rng: random.Random, restate_share: float = 0.5) -> Doc:
    """One to three pages as the visit tool prints them, then a question answered from one."""
    n = rng.randint(1, 3)
    candidates = [e for e in rng.sample(world.entities, min(len(world.entities), 12)) if e.facts]
    if not candidates:
        return doc_page(world, rng)
    entities = candidates[:n]
    target = rng.choice(entities)
    pages = []
    for e in entities:
        body = f"{e.title}\n{page_text(e, max_paragraphs=2 if e is not target else None)}"
        pages.append(format_visit(e.url, e.title, body))
    segs = [("\n\n".join(pages) + "\n", "")]
    facts = rng.sample(target.facts, min(len(target.facts), rng.randint(1, 2)))
    for fact in facts:
        segs += _restate(_question_for(target, fact, rng), fact.value, rng,
                         rng.random() < restate_share)
    return Doc("pageqa", segs, {"relation": facts[0].relation})


WRITERS = {"page": doc_page, "repeat": doc_repeat, "kv": doc_kv, "pick": doc_pick,
           "lookup": doc_lookup, "pageqa": doc_pageqa, "restate": doc_restate}


# -- The corpus: worlds + a mix of document kinds, deterministic in a seed --------------------

#: Stage A, copy-dense: more of the short copy documents (this corpus's lookup and page documents
#: are long, so by tokens they would otherwise dominate).
DEFAULT_MIX = {"page": 1.0, "repeat": 3.0, "kv": 2.0, "pick": 1.0, "lookup": 2.0, "pageqa": 1.0}
#: Stage B: more reading, more picking, the "Answer:" restate on half of lookup/pageqa.
STAGE_B_MIX = {"page": 1.0, "repeat": 1.0, "kv": 1.0, "pick": 2.0, "lookup": 3.0, "pageqa": 2.0}


class Corpus:
    """Documents from several source worlds, none of them naming an entity of the default world."""

    def __init__(self, world_seeds: Iterable[int] = CORPUS_WORLD_SEEDS, n_entities: int = 600, *,
                 exclude_seed: int | None = DEFAULT_WORLD_SEED,
                 exclude_entities: int = DEFAULT_WORLD_ENTITIES,
                 restate_share: float = 0.5, fresh_names: bool = False):
        self.world_seeds = tuple(world_seeds)
        if exclude_seed is not None and exclude_seed in self.world_seeds:
            raise ValueError(f"the corpus may not use the evaluation world's seed {exclude_seed}")
        forbidden = (default_world_names(exclude_seed, exclude_entities)
                     if exclude_seed is not None else ())
        self.forbidden = ForbiddenNames(forbidden)
        roots = name_roots(forbidden)
        self.forbidden_roots = frozenset(roots)
        self.worlds = [build_source_world(s, n_entities, roots) for s in self.world_seeds]
        self.world_roots = {w.seed: frozenset(name_roots(w.all_names())) for w in self.worlds}
        self.restate_share = restate_share
        self.fresh_names = fresh_names
        self.dropped = 0

    def document(self, kind: str, rng: random.Random, fresh_names: bool | None = None) -> Doc:
        """One document of ``kind`` from a random world, re-drawn if it names a forbidden entity;
        its names drawn afresh when ``fresh_names`` (None: the corpus's setting)."""
        fresh = self.fresh_names if fresh_names is None else fresh_names
        writer = WRITERS[kind]
        extra = (self.restate_share,) if kind in ("lookup", "pageqa") else ()
        for _ in range(20):
            world = rng.choice(self.worlds)
            doc = writer(world, rng, *extra)
            if fresh:
                doc = refresh_names(doc, rng, self.forbidden_roots, self.world_roots[world.seed])
            if not self.forbidden.found(doc.text):
                return doc
            self.dropped += 1
        raise RuntimeError(f"could not write a {kind} document free of default-world names")

    def stream(self, mix: dict[str, float], seed: int,
               fresh_names: bool | None = None) -> Iterator[Doc]:
        """An endless, deterministic stream of documents drawn by the weights of ``mix``."""
        unknown = set(mix) - set(WRITERS)
        if unknown:
            known = ", ".join(DOC_KINDS)
            raise ValueError(f"unknown document kind(s) {sorted(unknown)}; known: {known}")
        kinds = [k for k in DOC_KINDS if mix.get(k, 0) > 0]
        weights = [mix[k] for k in kinds]
        rng = random.Random(f"vsearcher-corpus:{seed}")
        while True:
            yield self.document(rng.choices(kinds, weights)[0], rng, fresh_names)

    def tokenizer_texts(self, n_docs: int = 4000, seed: int = 0) -> list[str]:
        """Text to train the tokenizer on: every article once, then a sample of documents."""
        texts = [page_text(e) for w in self.worlds for e in w.entities]
        texts += ["\n".join(p.paragraphs) for w in self.worlds for p in w.pages]
        stream = self.stream({k: 1.0 for k in DOC_KINDS}, seed)
        texts += [next(stream).text for _ in range(n_docs)]
        return texts
