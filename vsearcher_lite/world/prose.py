"""Writing the sandbox's pages: articles from facts, and secondary pages that act as distractors.

Every fact of an entity is written into its article exactly once, with one of several sentence
templates per relation (and combined templates for pairs such as "designed by X and completed in
1874"), in a random order mixed with filler sentences that carry no facts. The article also
mentions the entities that point at it ("Works designed by X include ..."), which is what lets a
searcher walk the link graph in both directions.

Secondary pages (news items, lists, travel notes) mention several entities each. They make text
search return distractors next to the right article, and they host look-alike images.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from vsearcher_lite.world.schema import PRESENT_YEAR, Draft
from vsearcher_lite.world.model import Fact

SITE = "https://wiki.sandbox.test"


def slug(title: str) -> str:
    """The article slug of a title, Wikipedia style: ``slug("Orsk Bridge") == "Orsk_Bridge"``."""
    return re.sub(r"\s+", "_", title.strip())


def dash_slug(text: str) -> str:
    """A lowercase dashed slug for news and travel URLs.

    >>> dash_slug("Orsk Bridge reopens!")
    'orsk-bridge-reopens'
    """
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def article_url(title: str) -> str:
    return f"{SITE}/wiki/{slug(title)}"


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
    "person": "people", "organisation": "organisations", "building": "buildings", "artwork": "works",
    "event": "events", "species": "species", "vessel": "ships", "region": "regions",
}


def plural(word: str) -> str:
    if word in PLURALS:
        return PLURALS[word]
    if word.endswith(("s", "sh", "ch")):
        return word + "es"
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


# Sentence templates. {s}: the subject, {v}: the value (an entity reference or a literal with
# its unit), {y}: a year, {k}: the subject's kind ("bridge").
SINGLE: dict[str, tuple[str, ...]] = {
    "located_in": ("{s} is located in {v}.", "{s} lies in {v}.", "{s} can be found in {v}."),
    "capital": ("Its capital is {v}.", "The capital of {s} is {v}.", "{v} serves as the capital of {s}."),
    "twinned_with": ("{s} is twinned with {v}.", "{s} has a twinning arrangement with {v}."),
    "source": ("{s} rises on the slopes of {v}.", "The source of {s} lies on {v}."),
    "flows_into": ("{s} empties into {v}.", "{s} flows into {v}."),
    "first_ascended_by": ("{s} was first climbed by {v}.", "The first recorded ascent of {s} was made by {v}."),
    "born_in": ("{s} was born in {v}.",),
    "died_in": ("{s} died in {v}.", "{s} spent the last years of life in {v} and died there."),
    "educated_at": ("{s} studied at {v}.", "{s} was educated at {v}."),
    "member_of": ("{s} was a member of {v}.", "{s} belonged to {v}.", "{s} joined {v}."),
    "founded_by": ("{s} was founded by {v}.", "{v} established {s}."),
    "headquartered_in": ("{s} is based in {v}.", "{s} has its headquarters in {v}."),
    "designed_by": ("{s} was designed by {v}.", "The design of {s} is by {v}.", "{v} drew up the plans for {s}."),
    "named_after": ("{s} is named after {v}.", "{s} takes its name from {v}.", "{s} was named in honour of {v}."),
    "commissioned_by": ("{s} was commissioned by {v}.", "{v} commissioned {s}."),
    "crosses": ("{s} spans {v}.", "{s} crosses {v}."),
    "created_by": ("{s} is a work by {v}.", "{s} was made by {v}.", "{v} is the author of {s}."),
    "depicts": ("{s} depicts {v}.", "{s} shows {v}.", "The subject of {s} is {v}."),
    "kept_in": ("{s} is kept in {v}.", "{s} is in the collection of {v}.", "Today {s} belongs to {v}."),
    "held_in": ("{s} took place in {v}.", "{s} was held in {v}."),
    "organised_by": ("{s} was organised by {v}.", "{v} organised {s}."),
    "led_by": ("{s} was led by {v}.", "{v} led {s}."),
    "native_to": ("{s} is native to {v}.", "{s} is endemic to {v}.", "{s} is found only in {v}."),
    "described_by": ("{s} was first described by {v}.", "{v} gave the first scientific description of {s}."),
    "built_by": ("{s} was built by {v}.", "{v} built {s}."),
    "home_port": ("The home port of {s} is {v}.", "{s} sails from {v}.", "{s} is registered at {v}."),
    "year_established": ("{s} was established in {y}.", "{s} has existed as a {k} since {y}."),
    "year_founded": ("{s} was founded in {y}.", "The first records of {s} date from {y}.", "{s} dates from {y}."),
    "year_built": ("{s} was built in {y}.", "Construction of {s} was completed in {y}.", "{s} was finished in {y}."),
    "year_created": ("{s} dates from {y}.", "{s} was made in {y}.", "{s} was completed in {y}."),
    "year_held": ("{s} took place in {y}.", "{s} happened in {y}."),
    "year_described": ("{s} was described in {y}.", "The species was formally described in {y}."),
    "year_launched": ("{s} was launched in {y}.", "{s} entered service in {y}."),
    "first_ascent_year": ("{s} was first climbed in {y}.", "The summit of {s} was first reached in {y}."),
    "year_born": ("{s} was born in {y}.",),
    "year_died": ("{s} died in {y}.",),
    "population": ("{s} has a population of {v}.", "About {v} people live in {s}.", "The population of {s} is {v}."),
    "area": ("{s} covers {v}.", "{s} has an area of {v}.", "The area of {s} is {v}."),
    "elevation": ("{s} lies at an elevation of {v}.", "{s} stands {v} above sea level."),
    "length": ("{s} is {v} long.", "{s} has a length of {v}.", "{s} measures {v} in length."),
    "height": ("{s} is {v} tall.", "{s} rises to a height of {v}."),
    "depth": ("{s} is up to {v} deep.", "{s} reaches a maximum depth of {v}."),
    "material": ("{s} is executed in {v}.", "The material of {s} is {v}."),
    "participants": ("About {v} people took part in {s}.", "{s} drew around {v} participants."),
    "members": ("{s} has about {v} members.", "{s} counts some {v} members."),
    "tonnage": ("{s} has a gross tonnage of {v}.", "The gross tonnage of {s} is {v}."),
    "occupation": ("{s} worked as {av}.",),
}
# Type-specific wording where the generic one reads badly.
SINGLE_BY_TYPE: dict[tuple[str, str], tuple[str, ...]] = {
    ("mountain", "elevation"): ("{s} reaches {v}.", "The summit of {s} stands at {v}.", "{s} rises to {v}."),
    ("lake", "elevation"): ("{s} lies {v} above sea level.",),
    ("species", "length"): ("{s} grows to about {v}.", "Adults of {s} measure up to {v}."),
    ("building", "located_in"): ("{s} stands in {v}.", "{s} is located in {v}.", "{s} is a landmark of {v}."),
}
# Templates that write two facts in one sentence.
PAIRS: dict[tuple[str, str], tuple[str, ...]] = {
    ("designed_by", "year_built"): ("{s} was designed by {v} and completed in {y}.",
                                    "{v} designed {s}, which was finished in {y}.",
                                    "Built in {y}, {s} is the work of {v}."),
    ("created_by", "year_created"): ("{s} was made by {v} in {y}.", "{v} completed {s} in {y}.",
                                      "{s} is a work by {v}, dated {y}."),
    ("founded_by", "year_founded"): ("{s} was founded by {v} in {y}.", "{v} established {s} in {y}.",
                                      "In {y}, {v} founded {s}."),
    ("described_by", "year_described"): ("{s} was first described by {v} in {y}.", "{v} described {s} in {y}."),
    ("built_by", "year_launched"): ("{s} was built by {v} and launched in {y}.", "{v} built {s}, launched in {y}."),
    ("held_in", "year_held"): ("{s} took place in {v} in {y}.", "In {y}, {s} was held in {v}."),
    ("first_ascended_by", "first_ascent_year"): ("{s} was first climbed by {v} in {y}.",
                                                  "The first ascent of {s} was made by {v} in {y}."),
}
# Relations that may have several values: written as one sentence with a list.
MULTI: dict[str, tuple[str, ...]] = {
    "borders": ("{s} borders {v}.", "{s} shares borders with {v}."),
    "flows_through": ("{s} flows through {v}.", "On its course {s} passes {v}.", "{s} runs past {v}."),
}
# Sentences about the entities that point at this one. {s}: this entity, {v}: the list.
INBOUND: dict[str, tuple[str, ...]] = {
    "located_in": ("{P} in {s} include {v}.", "Among the {p} of {s} are {v}."),
    "capital": ("{s} is the capital of {v}.",),
    "flows_through": ("{v} {flow} through {s}.",),
    "source": ("{v} {rise} on {s}.",),
    "flows_into": ("{v} {flow} into {s}.",),
    "first_ascended_by": ("{s} made the first ascent of {v}.",),
    "born_in": ("People born in {s} include {v}.", "{s} is the birthplace of {v}."),
    "died_in": ("{v} died in {s}.",),
    "educated_at": ("Alumni of {s} include {v}.", "{v} studied at {s}."),
    "member_of": ("Members of {s} have included {v}.",),
    "founded_by": ("{s} founded {v}.",),
    "headquartered_in": ("{v} {be} based in {s}.",),
    "designed_by": ("Works designed by {s} include {v}.", "{s} designed {v}."),
    "named_after": ("{v} {be} named after {s}.",),
    "commissioned_by": ("{s} commissioned {v}.",),
    "crosses": ("{s} is crossed by {v}.",),
    "created_by": ("Works by {s} include {v}.", "{s} made {v}."),
    "depicts": ("{s} is depicted in {v}.", "{s} appears in {v}."),
    "kept_in": ("The collection of {s} includes {v}.",),
    "held_in": ("Events held in {s} include {v}.",),
    "organised_by": ("{s} organised {v}.",),
    "led_by": ("{s} led {v}.",),
    "native_to": ("Species native to {s} include {v}.",),
    "described_by": ("{s} described {v}.",),
    "built_by": ("Ships built by {s} include {v}.",),
    "home_port": ("{v} {be} based at {s}.",),
}
# Where the list wording reads badly with a single item.
INBOUND_ONE: dict[str, tuple[str, ...]] = {
    "located_in": ("{v} is in {s}.", "{v} lies in {s}."),
    "member_of": ("{v} was a member of {s}.",),
}
WORKS_WITH_YEARS = {"designed_by": "year_built", "created_by": "year_created", "described_by": "year_described"}

FILLER: dict[str, tuple[str, ...]] = {
    "any": (
        "Little has been written about {s} outside local sources.",
        "{s} appears in several regional guidebooks.",
        "Records from the early period are incomplete.",
        "A local history society keeps an archive of documents about {s}.",
    ),
    "region": ("Farming and forestry dominate the rural parts of {s}.", "Several rail lines cross {s}."),
    "settlement": ("A weekly market is still held in the main square.", "The old centre keeps much of its street plan.",
                   "Small trades and farming shaped the local economy."),
    "river": ("Anglers visit its upper reaches in summer.", "Its banks were drained for farmland long ago."),
    "mountain": ("Pine forest covers its lower slopes.", "Several marked trails lead towards the summit."),
    "lake": ("The lake freezes in most winters.", "Its shores are popular with walkers."),
    "person": ("Letters written by {s} survive in private collections.", "{s} received little attention from critics at the time."),
    "organisation": ("Its archives are open to researchers by appointment.", "{s} publishes an annual report."),
    "building": ("The interior was restored in the late twentieth century.", "Guided tours are offered on weekends."),
    "artwork": ("The work has been restored twice.", "Critics have praised its handling of light."),
    "event": ("Contemporary newspapers covered it widely.", "Accounts of what happened differ in detail."),
    "species": ("Little is known about its breeding habits.", "It is rarely seen outside its range."),
    "vessel": ("The ship was refitted several times.", "Models of the ship are displayed in local museums."),
}


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

    def render(self, template: str, d: Draft, s: str, out: Written, f: Fact | None = None, y: Fact | None = None,
               v: str | None = None) -> str:
        if v is None:
            v = self.value(f, out) if f is not None else ""
        text = template.format(s=s, v=v, y=y.value_text() if y is not None else (f.value_text() if f is not None else ""),
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
            occ, born_in, yb, yd = take("occupation"), take("born_in"), take("year_born"), take("year_died")
            place = self.value(born_in, out)
            if yd is None:
                return cap(rng.choice((f"{name} (born {yb.value}) is {a_an(occ.value)} from {place}.",
                                       f"{name} is {a_an(occ.value)} born in {place} in {yb.value}.")))
            return cap(rng.choice((f"{name} ({yb.value}–{yd.value}) was {a_an(occ.value)} born in {place}.",
                                   f"{name} was {a_an(occ.value)}, born in {place} in {yb.value}, who died in {yd.value}.")))
        kind = take("instance_of")
        k = kind.value if kind else d.kind
        where = {"settlement": "located_in", "mountain": "located_in", "lake": "located_in", "building": "located_in",
                 "organisation": "headquartered_in", "event": "held_in", "species": "native_to",
                 "vessel": "home_port", "artwork": "created_by"}.get(t)
        place_fact = take(where) if where else None
        if place_fact is None:
            return cap(f"{name} is {a_an(k)}.")
        v = self.value(place_fact, out)
        if t == "artwork":
            return cap(rng.choice((f"{name} is {a_an(k)} by {v}.", f"{name} is {a_an(k)} made by {v}.")))
        if t == "organisation":
            return cap(rng.choice((f"{name} is {a_an(k)} based in {v}.", f"{name} is {a_an(k)} headquartered in {v}.")))
        if t == "event":
            return cap(rng.choice((f"{name} was {a_an(k)} held in {v}.", f"{name} was {a_an(k)} in {v}.")))
        if t == "species":
            return cap(rng.choice((f"{name} is a species of {k} native to {v}.", f"{name} is {a_an(k)} species endemic to {v}.")))
        if t == "vessel":
            return cap(rng.choice((f"{name} is {a_an(k)} whose home port is {v}.", f"{name} is {a_an(k)} registered at {v}.")))
        return cap(rng.choice((f"{name} is {a_an(k)} in {v}.", f"{name} is {a_an(k)} located in {v}.")))

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
            alias_text = join_names(d.aliases)
            first.append(rng.choice((f"It is also known as {alias_text}.", f"Older sources call it {alias_text}.",
                                     f"{cap(d.ref())} is sometimes called {alias_text}.")))
        body = self.fact_sentences(d, facts, out, rng)
        fillers = list(FILLER["any"]) + list(FILLER.get(d.type, ()))
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

    def fact_sentences(self, d: Draft, facts: list[Fact], out: Written, rng: random.Random) -> list[str]:
        """One sentence per remaining fact (or per pair / per multi-valued relation), shuffled."""
        sentences: list[str] = []
        remaining = list(facts)
        for (a, b), templates in PAIRS.items():
            fa = next((f for f in remaining if f.relation == a), None)
            fb = next((f for f in remaining if f.relation == b), None)
            if fa is not None and fb is not None and rng.random() < 0.7:
                remaining.remove(fa)
                remaining.remove(fb)
                sentences.append(self.render(rng.choice(templates), d, self.short_ref(d, rng), out, fa, fb))
        for rel, templates in MULTI.items():
            group = [f for f in remaining if f.relation == rel]
            if group:
                for f in group:
                    remaining.remove(f)
                v = join_names([self.value(f, out) for f in group])
                sentences.append(self.render(rng.choice(templates), d, self.short_ref(d, rng), out, v=v))
        for f in remaining:
            if f.relation == "instance_of":
                sentences.append(cap(f"{self.short_ref(d, rng)} is {a_an(str(f.value))}."))
                continue
            templates = SINGLE_BY_TYPE.get((d.type, f.relation)) or SINGLE[f.relation]
            sentences.append(self.render(rng.choice(templates), d, self.short_ref(d, rng), out, f))
        rng.shuffle(sentences)
        return sentences

    def inbound_sentences(self, d: Draft, out: Written, rng: random.Random) -> list[str]:
        groups: dict[tuple[str, str], list[Draft]] = {}
        for f in self.inbound.get(d.id, []):
            if f.relation in INBOUND:
                subject = self.by_id[f.subject]
                groups.setdefault((f.relation, subject.type), []).append(subject)
        sentences = []
        for (rel, type_), subjects in sorted(groups.items()):
            if len(subjects) > 5:
                subjects = sorted(rng.sample(subjects, 5), key=lambda x: x.id)
            items = []
            for x in subjects:
                ref = out.mention(x)
                year_rel = WORKS_WITH_YEARS.get(rel)
                if year_rel:
                    year = next((f.value for f in x.facts if f.relation == year_rel), None)
                    ref = f"{ref} ({year})" if year is not None else ref
                items.append(ref)
            many = len(items) > 1
            template = rng.choice(INBOUND[rel] if many or rel not in INBOUND_ONE else INBOUND_ONE[rel])
            text = template.format(
                s=d.ref(), v=join_names(items), P=cap(PLURALS[type_]), p=PLURALS[type_],
                flow="flow" if many else "flows", rise="rise" if many else "rises", be="are" if many else "is",
            )
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


# One fact as a clause after a noun: "Orsk Bridge, a bridge built in 1874, ...".
CLAUSES: dict[str, str] = {
    "located_in": "in {v}", "capital": "whose capital is {v}", "borders": "bordering {v}",
    "twinned_with": "twinned with {v}", "flows_through": "flowing through {v}", "source": "rising on {v}",
    "flows_into": "flowing into {v}", "first_ascended_by": "first climbed by {v}", "born_in": "born in {v}",
    "died_in": "who died in {v}", "educated_at": "educated at {v}", "member_of": "who belonged to {v}",
    "founded_by": "founded by {v}", "headquartered_in": "based in {v}", "designed_by": "designed by {v}",
    "named_after": "named after {v}", "commissioned_by": "commissioned by {v}", "crosses": "spanning {v}",
    "created_by": "by {v}", "depicts": "depicting {v}", "kept_in": "kept in {v}", "held_in": "held in {v}",
    "organised_by": "organised by {v}", "led_by": "led by {v}", "native_to": "native to {v}",
    "described_by": "described by {v}", "built_by": "built by {v}", "home_port": "based at {v}",
    "year_established": "established in {v}", "year_founded": "founded in {v}", "year_built": "built in {v}",
    "year_born": "born in {v}", "year_died": "who died in {v}", "year_created": "dated {v}",
    "year_held": "held in {v}", "year_described": "described in {v}", "year_launched": "launched in {v}",
    "first_ascent_year": "first climbed in {v}", "population": "with a population of {v}", "area": "covering {v}",
    "elevation": "at an elevation of {v}", "length": "{v} long", "height": "{v} tall", "depth": "up to {v} deep",
    "material": "in {v}", "participants": "with about {v} participants", "members": "with about {v} members",
    "tonnage": "of {v} gross tonnage",
}

NEWS_HEADLINES: dict[str, tuple[str, ...]] = {
    "building": ("Restoration work begins on {n}", "{N} reopens after repairs", "Visitors return to {n}"),
    "artwork": ("{N} goes on display again", "Museum lends {n} for a touring show", "Experts re-examine {n}"),
    "event": ("Historians revisit {n}", "New book retells {n}", "Anniversary of {n} marked"),
    "settlement": ("{N} votes on a new harbour plan", "Council of {n} approves budget", "Flood defences for {n}"),
    "organisation": ("{N} appoints a new director", "{N} celebrates its anniversary", "Archive of {n} digitised"),
    "person": ("Papers of {n} found in an attic", "Exhibition remembers {n}", "Biography of {n} published"),
    "mountain": ("Rock fall closes path on {n}", "Record number of climbers on {n}", "Snow survey on {n}"),
    "river": ("{N} bursts its banks after heavy rain", "Clean-up planned for {n}", "Otters return to {n}"),
    "lake": ("Water quality study on {n}", "Ice festival on {n} cancelled", "Divers map the bed of {n}"),
    "species": ("{N} sighted again after decades", "Survey counts {n}", "Habitat of {n} under threat"),
    "vessel": ("{N} returns to port", "Volunteers restore {n}", "{N} to be preserved as a museum ship"),
    "region": ("{N} announces new rail link", "Census results published for {n}", "Storm warning for {n}"),
}
TRAVEL_TITLES = ("A weekend in {n}", "Travel notes: {n}", "Walking around {n}", "{N} on a budget", "Two days in {n}")


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
        options = [f for f in d.facts if f.relation in CLAUSES]
        if not options:
            return None
        f = rng.choice(options)
        v = out.mention(self.by_id[f.value]) if f.kind == "entity" else f.value_text()
        return CLAUSES[f.relation].format(v=v)

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
            title = cap(rng.choice(NEWS_HEADLINES[d.type]).format(n=n, N=cap(n)))
            year = rng.randint(1995, PRESENT_YEAR)
            out.mention(d)
            first = [f"{cap(self.describe(d, rng, out))} was in the news this week."]
            for f in rng.sample(d.facts, min(2, len(d.facts))):
                if f.relation in ("instance_of",):
                    continue
                templates = SINGLE.get(f.relation)
                if not templates:
                    continue
                v = out.mention(self.by_id[f.value]) if f.kind == "entity" else f.value_text()
                av = a_an(str(f.value))
                first.append(cap(rng.choice(templates).format(s=n, v=v, y=f.value_text(), k=d.kind, av=av)))
            others = rng.sample(pool, 2)
            second = [f"Meanwhile, {self.describe(others[0], rng, out)} drew attention from local readers.",
                      f"Our correspondent also visited {out.mention(others[1])}.",
                      rng.choice(("Readers can send their photographs to the newsroom.",
                                  "The story will be followed up next week.", "Comments are open below."))]
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
            if d.type in ("building", "mountain", "lake", "settlement", "event", "vessel") and d.region:
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
            pages.append(SecondaryPage(f"{SITE}/list/{slug(title)}", title, "list", lines, out.mentions, region_id))
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
            pages.append(SecondaryPage(f"{SITE}/list/{slug(title)}", title, "list", lines, out.mentions, person_id))
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
            sights = list(near.get(town.id, [])) + rng.sample(near.get(town.region, []), min(2, len(near.get(town.region, []))))
            out = Written(paragraphs=[])
            title = cap(rng.choice(TRAVEL_TITLES).format(n=town.name, N=town.name))
            first = [f"We arrived in {out.mention(town)} on a grey morning.",
                     rng.choice(("The train was late, as usual.", "The bus from the coast takes three hours.",
                                 "Parking near the centre is difficult."))]
            second = []
            for s in rng.sample(sights, min(3, len(sights))):
                second.append(rng.choice((f"Do not miss {self.describe(s, rng, out)} which is worth a detour.",
                                          f"We spent an afternoon at {self.describe(s, rng, out)} and were not disappointed.",
                                          f"Locals recommended {self.describe(s, rng, out)} though we found it crowded.")))
            second.append(rng.choice(("Bring good shoes.", "Cafes close early on Sundays.", "Cash is still useful here.")))
            pages.append(SecondaryPage(
                url=f"{SITE}/travel/{dash_slug(town.name)}-{i + 1}", title=title, kind="travel",
                paragraphs=[" ".join(first), " ".join(second)], mentions=out.mentions, subject=town.id, image_slot=True,
            ))
        return pages
