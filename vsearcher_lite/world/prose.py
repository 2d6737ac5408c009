"""Writing the sandbox's pages: articles from facts, and secondary pages that act as distractors.

Every fact of an entity is written into its article exactly once, among filler sentences, and the
article names the entities that point at it, so a searcher can walk the link graph both ways.
Secondary pages (news, lists, travel notes) are distractors for text search and host look-alikes.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from vsearcher_lite.world import templates as wording
from vsearcher_lite.world.model import Fact
from vsearcher_lite.world.schema import PRESENT_YEAR, Draft

SITE = "https://wiki.sandbox.test"


def article_slug(title: str) -> str:
    """A title's article slug, Wikipedia style: ``"Orsk Bridge"`` -> ``"Orsk_Bridge"``."""
    return re.sub(r"\s+", "_", title.strip())


def dash_slug(text: str) -> str:
    """A lowercase dashed slug for news and travel URLs.

    >>> dash_slug("Orsk Bridge reopens!")
    'orsk-bridge-reopens'
    """
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def article_url(title: str) -> str:
    return f"{SITE}/wiki/{article_slug(title)}"


def a_an(word: str) -> str:
    """``a_an("owl") == "an owl"``."""
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


def cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def join_names(items: list[str]) -> str:
    """``join_names(["A", "B", "C"]) == "A, B and C"``."""
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


PLURALS = {
    "settlement": "settlements", "river": "rivers", "mountain": "mountains", "lake": "lakes",
    "person": "people", "organisation": "organisations", "building": "buildings",
    "artwork": "works", "event": "events", "species": "species", "vessel": "ships",
    "region": "regions",
}


def plural(word: str) -> str:
    if word in PLURALS:
        return PLURALS[word]
    if word.endswith(("s", "sh", "ch")):
        return word + "es"
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"




@dataclass
class Written:
    """A page's text and the entities it links to (ids, in order of first mention)."""

    paragraphs: list[str]
    mentions: list[str] = field(default_factory=list)

    def mention(self, d: Draft) -> str:
        if d.id not in self.mentions:
            self.mentions.append(d.id)
        return d.ref()


class ArticleWriter:
    """Writes the article of each entity from its facts (``write(draft)``)."""

    def __init__(self, drafts: list[Draft], seed: int):
        self.by_id = {d.id: d for d in drafts}
        self.seed = seed
        self.inbound: dict[str, list[Fact]] = {}
        for d in drafts:
            for f in d.facts:
                if f.kind == "entity":
                    self.inbound.setdefault(f.value, []).append(f)

    def rng(self, d: Draft) -> random.Random:
        return random.Random(f"vsearcher-page:{self.seed}:{d.id}")

    def short_ref(self, d: Draft, rng: random.Random) -> str:
        """A later mention: the surname of a person, "the bridge" or the full name."""
        if d.is_person:
            return d.name.split(" ", 1)[1]
        if rng.random() < 0.5:
            return f"the {d.kind}" if d.type != "region" else d.name
        return d.ref()

    def value(self, f: Fact, out: Written) -> str:
        if f.kind == "entity":
            return out.mention(self.by_id[f.value])
        return f.value_text()

    def render(self, template: str, d: Draft, s: str, out: Written, f: Fact | None = None,
               y: Fact | None = None, v: str | None = None) -> str:
        if v is None:
            v = self.value(f, out) if f is not None else ""
        year = y if y is not None else f
        text = template.format(s=s, v=v, y=year.value_text() if year is not None else "",
                               k=d.kind, av=a_an(str(f.value)) if f is not None else "")
        return cap(text)

    def lead(self, d: Draft, facts: list[Fact], out: Written, rng: random.Random) -> str:
        """The first sentence: what the entity is and where; consumes the facts it writes."""
        def take(rel: str) -> Fact | None:
            for f in facts:
                if f.relation == rel:
                    facts.remove(f)
                    return f
            return None

        name = d.ref()
        t = d.type
        if t == "person":
            occ, born_in = take("occupation"), take("born_in")
            yb, yd = take("year_born"), take("year_died")
            place = self.value(born_in, out)
            templates = wording.LIVING if yd is None else wording.DEAD
            return cap(rng.choice(templates).format(
                n=name, b=yb.value, d=yd.value if yd else "", o=a_an(occ.value), p=place))
        kind = take("instance_of")
        k = kind.value if kind else d.kind
        where = wording.LEAD_PLACES.get(t)
        place_fact = take(where) if where else None
        if place_fact is None:
            return cap(f"{name} is {a_an(k)}.")
        v = self.value(place_fact, out)
        template = rng.choice(wording.LEADS.get(t, wording.LEADS[""]))
        return cap(template.format(n=name, a=a_an(k), k=k, v=v))

    def write(self, d: Draft) -> Written:
        rng = self.rng(d)
        out = Written(paragraphs=[])
        facts = list(d.facts)
        lead = self.lead(d, facts, out, rng)
        if d.type == "river":
            lead = f"{cap(d.ref())} is a river."
            facts = [f for f in facts if f.relation != "instance_of"]
        first = [lead]
        if d.aliases:
            names = join_names(d.aliases)
            first.append(rng.choice(wording.ALIASES).format(a=names, S=cap(d.ref())))
        body = self.fact_sentences(d, facts, out, rng)
        fillers = list(wording.FILLER["any"]) + list(wording.FILLER.get(d.type, ()))
        rng.shuffle(fillers)
        for filler in fillers[: rng.randint(1, 3)]:
            body.insert(rng.randint(0, len(body)), cap(filler.format(s=self.short_ref(d, rng))))
        n_first = min(len(body), rng.randint(1, 2))
        first.extend(body[:n_first])
        out.paragraphs.append(" ".join(first))
        rest = body[n_first:]
        while rest:
            n = rng.randint(2, 4)
            out.paragraphs.append(" ".join(rest[:n]))
            rest = rest[n:]
        inbound = self.inbound_sentences(d, out, rng)
        if inbound:
            out.paragraphs.append(" ".join(inbound))
        return out

    def fact_sentences(self, d: Draft, facts: list[Fact], out: Written,
                       rng: random.Random) -> list[str]:
        """One sentence per remaining fact (or per pair / per multi-valued relation), shuffled."""
        sentences: list[str] = []
        remaining = list(facts)
        for (a, b), templates in wording.PAIRS.items():
            fa = next((f for f in remaining if f.relation == a), None)
            fb = next((f for f in remaining if f.relation == b), None)
            if fa is not None and fb is not None and rng.random() < 0.7:
                remaining.remove(fa)
                remaining.remove(fb)
                template = rng.choice(templates)
                sentences.append(self.render(template, d, self.short_ref(d, rng), out, fa, fb))
        for rel, templates in wording.MULTI.items():
            group = [f for f in remaining if f.relation == rel]
            if group:
                for f in group:
                    remaining.remove(f)
                v = join_names([self.value(f, out) for f in group])
                template = rng.choice(templates)
                sentences.append(self.render(template, d, self.short_ref(d, rng), out, v=v))
        for f in remaining:
            if f.relation == "instance_of":
                sentences.append(cap(f"{self.short_ref(d, rng)} is {a_an(str(f.value))}."))
                continue
            by_type = wording.SINGLE_BY_TYPE.get((d.type, f.relation))
            templates = by_type or wording.SINGLE[f.relation]
            sentences.append(self.render(rng.choice(templates), d, self.short_ref(d, rng), out, f))
        rng.shuffle(sentences)
        return sentences

    def inbound_sentences(self, d: Draft, out: Written, rng: random.Random) -> list[str]:
        groups: dict[tuple[str, str], list[Draft]] = {}
        for f in self.inbound.get(d.id, []):
            if f.relation in wording.INBOUND:
                subject = self.by_id[f.subject]
                groups.setdefault((f.relation, subject.type), []).append(subject)
        sentences = []
        for (rel, type_), subjects in sorted(groups.items()):
            if len(subjects) > 5:
                subjects = sorted(rng.sample(subjects, 5), key=lambda x: x.id)
            items = []
            for x in subjects:
                ref = out.mention(x)
                year_rel = wording.WORKS_WITH_YEARS.get(rel)
                if year_rel:
                    year = next((f.value for f in x.facts if f.relation == year_rel), None)
                    ref = f"{ref} ({year})" if year is not None else ref
                items.append(ref)
            many = len(items) > 1
            one = not many and rel in wording.INBOUND_ONE
            template = rng.choice(wording.INBOUND_ONE[rel] if one else wording.INBOUND[rel])
            text = template.format(s=d.ref(), v=join_names(items), P=cap(PLURALS[type_]),
                                   p=PLURALS[type_], flow="flow" if many else "flows",
                                   rise="rise" if many else "rises", be="are" if many else "is")
            sentences.append(cap(text))
        return sentences


# -- secondary pages --------------------------------------------------------------------

@dataclass
class SecondaryPage:
    url: str
    title: str
    kind: str  # news | list | travel
    paragraphs: list[str]
    mentions: list[str]
    subject: str | None = None  # the entity the page is mainly about
    image_slot: bool = False  # whether the page shows one image




_LISTED = ("building", "mountain", "lake", "settlement", "event", "vessel")


class SecondaryWriter:
    """News items, lists and travel notes (see the module docstring)."""

    def __init__(self, drafts: list[Draft], seed: int):
        self.drafts = drafts
        self.by_id = {d.id: d for d in drafts}
        self.seed = seed

    def rng(self, stage: str) -> random.Random:
        return random.Random(f"vsearcher-secondary:{self.seed}:{stage}")

    def fact_clause(self, d: Draft, rng: random.Random, out: Written) -> str | None:
        """A short clause with one fact about ``d`` (``"built in 1874"``), or None."""
        options = [f for f in d.facts if f.relation in wording.CLAUSES]
        if not options:
            return None
        f = rng.choice(options)
        v = out.mention(self.by_id[f.value]) if f.kind == "entity" else f.value_text()
        return wording.CLAUSES[f.relation].format(v=v)

    def describe(self, d: Draft, rng: random.Random, out: Written) -> str:
        ref = out.mention(d)
        clause = self.fact_clause(d, rng, out)
        noun = d.occupation if d.is_person else d.kind
        if clause:
            return f"{ref}, {a_an(noun)} {clause},"
        return f"{ref}, {a_an(noun)},"

    def news(self, count: int) -> list[SecondaryPage]:
        rng = self.rng("news")
        pool = [d for d in self.drafts]
        pages = []
        for i in range(count):
            d = rng.choice(pool)
            out = Written(paragraphs=[])
            n = d.ref()
            title = cap(rng.choice(wording.NEWS_HEADLINES[d.type]).format(n=n, N=cap(n)))
            year = rng.randint(1995, PRESENT_YEAR)
            out.mention(d)
            first = [f"{cap(self.describe(d, rng, out))} was in the news this week."]
            for f in rng.sample(d.facts, min(2, len(d.facts))):
                if f.relation in ("instance_of",):
                    continue
                templates = wording.SINGLE.get(f.relation)
                if not templates:
                    continue
                v = out.mention(self.by_id[f.value]) if f.kind == "entity" else f.value_text()
                av = a_an(str(f.value))
                template = rng.choice(templates)
                first.append(cap(template.format(s=n, v=v, y=f.value_text(), k=d.kind, av=av)))
            others = rng.sample(pool, 2)
            second = [f"Meanwhile, {self.describe(others[0], rng, out)} drew attention from local "
                      "readers.",
                      f"Our correspondent also visited {out.mention(others[1])}.",
                      rng.choice(wording.NEWS_ENDINGS)]
            page = SecondaryPage(
                url=f"{SITE}/news/{year}/{dash_slug(title)}-{i + 1}", title=title, kind="news",
                paragraphs=[" ".join(first), " ".join(second)], mentions=out.mentions, subject=d.id,
                image_slot=True,
            )
            pages.append(page)
        return pages

    def lists(self, min_items: int = 3) -> list[SecondaryPage]:
        """"List of bridges in Velmaria" and "Works by X": good distractors for generic queries."""
        rng = self.rng("lists")
        groups: dict[tuple[str, str], list[Draft]] = {}
        for d in self.drafts:
            if d.region and d.type in _LISTED:
                groups.setdefault((plural(d.kind), d.region), []).append(d)
        works: dict[str, list[Draft]] = {}
        for d in self.drafts:
            for f in d.facts:
                if f.relation in ("designed_by", "created_by"):
                    works.setdefault(f.value, []).append(d)
        pages = []
        for (kinds, region_id), members in sorted(groups.items()):
            if len(members) < min_items:
                continue
            region = self.by_id[region_id]
            title = f"List of {kinds} in {region.name}"
            out = Written(paragraphs=[])
            out.mention(region)
            intro = f"This list covers {kinds} in {region.ref()}, with one notable fact about each."
            lines = [intro]
            for d in sorted(members, key=lambda x: x.name)[:40]:
                clause = self.fact_clause(d, rng, out)
                ref = cap(out.mention(d))
                lines.append(f"{ref}, {clause}." if clause else f"{ref}.")
            url = f"{SITE}/list/{article_slug(title)}"
            pages.append(SecondaryPage(url, title, "list", lines, out.mentions, region_id))
        for person_id, made in sorted(works.items()):
            if len(made) < min_items:
                continue
            person = self.by_id[person_id]
            title = f"Works by {person.name}"
            out = Written(paragraphs=[])
            out.mention(person)
            lines = [f"A list of works by the {person.occupation} {person.name}."]
            for d in sorted(made, key=lambda x: (x.year or 0, x.name)):
                lines.append(f"{cap(out.mention(d))} ({d.kind}, {d.year}).")
            url = f"{SITE}/list/{article_slug(title)}"
            pages.append(SecondaryPage(url, title, "list", lines, out.mentions, person_id))
        return pages

    def travel(self, count: int) -> list[SecondaryPage]:
        rng = self.rng("travel")
        near: dict[str, list[Draft]] = {}
        for d in self.drafts:
            if d.type == "building" and d.place:
                near.setdefault(d.place, []).append(d)
            elif d.type in ("mountain", "lake", "river") and d.region:
                near.setdefault(d.region, []).append(d)
        towns = [d for d in self.drafts if d.type == "settlement"]
        pages = []
        for i in range(count):
            town = rng.choice(towns)
            region = near.get(town.region, [])
            sights = list(near.get(town.id, [])) + rng.sample(region, min(2, len(region)))
            out = Written(paragraphs=[])
            title = cap(rng.choice(wording.TRAVEL_TITLES).format(n=town.name, N=town.name))
            first = [f"We arrived in {out.mention(town)} on a grey morning.",
                     rng.choice(wording.ARRIVALS)]
            second = []
            for s in rng.sample(sights, min(3, len(sights))):
                # Each wording describes the sight afresh (the draws stay those of the templates).
                options = tuple(t.format(x=self.describe(s, rng, out)) for t in wording.SIGHTS)
                second.append(rng.choice(options))
            second.append(rng.choice(wording.TIPS))
            pages.append(SecondaryPage(
                url=f"{SITE}/travel/{dash_slug(town.name)}-{i + 1}", title=title, kind="travel",
                paragraphs=[" ".join(first), " ".join(second)], mentions=out.mentions,
                subject=town.id, image_slot=True))
        return pages
