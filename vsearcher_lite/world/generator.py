"""The sandbox's entities and facts: a seeded, deterministic generator of a fictional world.

Stages run in dependency order, so every fact is consistent by construction: regions,
settlements, nature, people born where a settlement stood, organisations founded by living
adults, memberships, then the works (``world/works.py``). Makers are drawn with heavy-tailed
weights, so "a bridge designed by X" is ambiguous while "the bridge designed by X in 1874" is
not. Each stage has its own ``random.Random`` seeded from ``(seed, stage)``.
"""

from __future__ import annotations

import math
import random

from vsearcher_lite.world import names
from vsearcher_lite.world.model import Fact
from vsearcher_lite.world.schema import (
    ENTITY_TYPES,
    ORG_KINDS_WITH_MEMBERS,
    OTHER_OCCUPATIONS,
    PRESENT_YEAR,
    RELATION_LABELS,
    ByYear,
    Draft,
    GeneratedWorld,
    Picker,
    family,
    fmt_number,
    type_counts,
    weighted_kind,
)
from vsearcher_lite.world.works import WorkStages


class WorldGenerator(WorkStages):
    """Builds the entities and facts of one world. ``generate()`` is the only entry point."""

    def __init__(self, n_entities: int, seed: int = 0):
        self.n = n_entities
        self.seed = seed
        self.counts = type_counts(n_entities)
        self.registry = names.NameRegistry()
        self.drafts: list[Draft] = []
        self.by_type: dict[str, list[Draft]] = {t: [] for t in ENTITY_TYPES}
        self.by_id: dict[str, Draft] = {}

    # -- plumbing ---------------------------------------------------------------------
    def rng(self, stage: str) -> random.Random:
        return random.Random(f"vsearcher-world:{self.seed}:{stage}")

    def new(self, type_: str, kind: str) -> Draft:
        d = Draft(id=f"E{len(self.drafts) + 1:06d}", type=type_, kind=kind)
        self.drafts.append(d)
        self.by_type[type_].append(d)
        self.by_id[d.id] = d
        return d

    @staticmethod
    def link(d: Draft, relation: str, target: Draft) -> None:
        label = RELATION_LABELS[relation]
        d.facts.append(Fact(d.id, relation, target.id, "entity", label, target.name))

    @staticmethod
    def year_fact(d: Draft, relation: str, year: int) -> None:
        d.facts.append(Fact(d.id, relation, int(year), "year", RELATION_LABELS[relation], ""))

    @staticmethod
    def number_fact(d: Draft, relation: str, value: float, unit: str = "") -> None:
        label = fmt_number(value) + (f" {unit}" if unit else "")
        d.facts.append(Fact(d.id, relation, value, "number", RELATION_LABELS[relation], label))

    @staticmethod
    def text_fact(d: Draft, relation: str, text: str) -> None:
        d.facts.append(Fact(d.id, relation, text, "text", RELATION_LABELS[relation], ""))

    def alias(self, d: Draft, alias: str) -> None:
        if alias and self.registry.claim(alias):
            d.aliases.append(alias)

    def name(self, d: Draft, make, rng: random.Random, the: bool = False) -> None:
        d.name = self.registry.unique(make, rng)
        d.the = the

    # -- the stages -------------------------------------------------------------------
    def generate(self) -> GeneratedWorld:
        self.make_regions()
        self.make_settlements()
        self.make_nature()
        self.make_people()
        self.make_organisations()
        self.make_memberships()
        self.make_buildings()
        self.make_events()
        self.make_first_ascents()
        self.make_artworks()
        self.make_species()
        self.make_vessels()
        self.assign_images_and_counts()
        for d in self.drafts:
            d.facts.sort(key=_fact_order)
        return GeneratedWorld(self.seed, self.drafts)

    def make_regions(self) -> None:
        rng = self.rng("regions")
        regions = []
        for _ in range(self.counts["region"]):
            d = self.new("region", weighted_kind(rng, "region"))
            self.name(d, names.region_root, rng)
            d.year = rng.randint(900, 1850)
            d.region = d.id
            self.text_fact(d, "instance_of", d.kind)
            self.year_fact(d, "year_established", d.year)
            self.number_fact(d, "area", rng.randint(800, 40_000), "km²")
            regions.append(d)
        # A ring plus a few chords: every region borders one to three others, symmetrically.
        neighbours: dict[str, set[str]] = {d.id: set() for d in regions}
        for i, d in enumerate(regions):
            if len(regions) > 1:
                other = regions[(i + 1) % len(regions)]
                if other is not d:
                    neighbours[d.id].add(other.id)
                    neighbours[other.id].add(d.id)
        for d in regions:
            if len(regions) > 3 and rng.random() < 0.4:
                other = rng.choice(regions)
                if other is not d and len(neighbours[other.id]) < 3 and len(neighbours[d.id]) < 3:
                    neighbours[d.id].add(other.id)
                    neighbours[other.id].add(d.id)
        self.neighbours = neighbours
        for d in regions:
            for other_id in sorted(neighbours[d.id]):
                self.link(d, "borders", self.by_id[other_id])

    def make_settlements(self) -> None:
        rng = self.rng("settlements")
        regions = self.by_type["region"]
        self.settlements_in: dict[str, list[Draft]] = {r.id: [] for r in regions}
        for i in range(self.counts["settlement"]):
            kind = weighted_kind(rng, "settlement")
            d = self.new("settlement", kind)
            self.name(d, names.place_root, rng)
            region = regions[i] if i < len(regions) else rng.choice(regions)
            d.region = region.id
            d.place = d.id
            d.year = rng.randint(650, 1500) if rng.random() < 0.75 else rng.randint(1500, 1890)
            population = {
                "city": rng.randint(60_000, 900_000),
                "town": rng.randint(3_000, 60_000),
                "port town": rng.randint(4_000, 80_000),
                "village": rng.randint(120, 3_000),
            }[kind]
            self.text_fact(d, "instance_of", kind)
            self.link(d, "located_in", region)
            self.year_fact(d, "year_founded", d.year)
            self.number_fact(d, "population",
                             round(population, -1) if population > 1000 else population)
            port = kind == "port town"
            self.number_fact(d, "elevation", rng.randint(0, 40) if port else rng.randint(20, 1700),
                             "m")
            if rng.random() < 0.25:
                old = names.place_root(rng)
                self.alias(d, old)
            self.settlements_in[region.id].append(d)
        # The capital of a region is its most populous settlement.
        for r in regions:
            members = self.settlements_in[r.id]
            capital = max(members, key=lambda s: (_fact_value(s, "population"), s.id))
            self.link(r, "capital", capital)
            total = sum(_fact_value(s, "population") for s in members)
            self.number_fact(r, "population", total * rng.randint(3, 6))
        # Twin towns, symmetric.
        towns = [s for s in self.by_type["settlement"] if s.kind in ("city", "town", "port town")]
        rng.shuffle(towns)
        for a, b in zip(towns[0::2], towns[1::2]):
            if rng.random() < 0.3 and a.region != b.region:
                self.link(a, "twinned_with", b)
                self.link(b, "twinned_with", a)
        self.settlements_by_year = ByYear(self.by_type["settlement"])

    def _settlement_by(self, rng: random.Random, year: int, region: str | None = None,
                       kinds=None) -> Draft | None:
        """A settlement that existed in ``year``, preferably in ``region`` and of ``kinds``."""
        pool = self.settlements_in.get(region, []) if region else []
        pool = [s for s in pool if s.year <= year and (kinds is None or s.kind in kinds)]
        if pool and rng.random() < 0.7:
            return rng.choice(pool)
        for _ in range(20):
            s = self.settlements_by_year.pick(rng, year)
            if s is None:
                return None
            if kinds is None or s.kind in kinds:
                return s
        return self.settlements_by_year.pick(rng, year)

    def make_nature(self) -> None:
        rng = self.rng("nature")
        regions = self.by_type["region"]
        for _ in range(self.counts["mountain"]):
            kind = weighted_kind(rng, "mountain")
            d = self.new("mountain", kind)
            style = rng.random()
            if kind == "volcano":
                self.name(d, lambda r: f"{names.root(r, 1, 2)} Volcano" if r.random() < 0.4
                          else f"Mount {names.root(r)}", rng)
            elif style < 0.6:
                self.name(d, lambda r: f"Mount {names.root(r)}", rng)
            else:
                self.name(d, lambda r: f"{names.root(r, 1, 2)} {r.choice(_PEAK_WORDS)}", rng)
            region = rng.choice(regions)
            d.region = region.id
            self.text_fact(d, "instance_of", kind)
            self.link(d, "located_in", region)
            high = rng.randint(900, 5400) if kind != "peak" else rng.randint(600, 3200)
            self.number_fact(d, "elevation", high, "m")
            if rng.random() < 0.2:
                self.alias(d, f"{names.root(rng)} {rng.choice(('Tor', 'Dome', 'Spire'))}")
        mountains_in: dict[str, list[Draft]] = {}
        for m in self.by_type["mountain"]:
            mountains_in.setdefault(m.region, []).append(m)
        for _ in range(self.counts["lake"]):
            d = self.new("lake", "lake")
            self.name(d, lambda r: f"Lake {names.root(r)}" if r.random() < 0.8
                      else f"{names.root(r, 1, 2)} Water", rng)
            region = rng.choice(regions)
            d.region = region.id
            self.text_fact(d, "instance_of", "lake")
            self.link(d, "located_in", region)
            self.number_fact(d, "area", round(rng.uniform(0.4, 120.0), 1), "km²")
            self.number_fact(d, "depth", rng.randint(4, 320), "m")
        lakes_in: dict[str, list[Draft]] = {}
        for lake in self.by_type["lake"]:
            lakes_in.setdefault(lake.region, []).append(lake)
        self.rivers_through: dict[str, list[Draft]] = {}
        for _ in range(self.counts["river"]):
            d = self.new("river", "river")
            self.name(d, lambda r: f"{names.root(r, 1, 2)} River", rng, the=True)
            region = rng.choice(regions)
            d.region = region.id
            self.text_fact(d, "instance_of", "river")
            # Two to four settlements, from its region and its neighbours, in downstream order.
            pool = list(self.settlements_in[region.id])
            for nb in sorted(self.neighbours[region.id]):
                pool.extend(self.settlements_in[nb])
            chosen = rng.sample(pool, min(len(pool), rng.randint(2, 4)))
            for s in chosen:
                self.link(d, "flows_through", s)
                self.rivers_through.setdefault(s.id, []).append(d)
            if mountains_in.get(region.id) and rng.random() < 0.6:
                self.link(d, "source", rng.choice(mountains_in[region.id]))
            if lakes_in.get(region.id) and rng.random() < 0.35:
                self.link(d, "flows_into", rng.choice(lakes_in[region.id]))
            km = rng.randint(12, 40) if rng.random() < 0.3 else rng.randint(40, 900)
            self.number_fact(d, "length", km, "km")

    def make_people(self) -> None:
        rng = self.rng("people")
        n = self.counts["person"]
        c = self.counts
        # Enough makers for the works that follow; the rest get other occupations.
        need = {
            "architect": max(1, c["building"] // 4),
            "engineer": max(1, c["building"] // 10),
            "painter": max(1, c["artwork"] // 5),
            "sculptor": max(1, c["artwork"] // 10),
            "photographer": max(1, c["artwork"] // 20),
            "weaver": max(1, c["artwork"] // 40),
            "naturalist": max(1, c["species"] // 2),
            "mountaineer": max(1, c["mountain"] // 3),
            "explorer": max(1, c["event"] // 10),
        }
        scale = min(1.0, 0.6 * n / sum(need.values()))
        occupations: list[str] = []
        for occ, k in need.items():
            occupations += [occ] * max(1, int(k * scale))
        while len(occupations) < n:
            occupations.append(rng.choice(OTHER_OCCUPATIONS))
        occupations = occupations[:n]
        rng.shuffle(occupations)
        for occ in occupations:
            d = self.new("person", occ)
            d.occupation = occ
            self.name(d, lambda r: f"{names.given_name(r)} {names.family_name(r)}", rng)
            earliest = 1815 if occ == "photographer" else 1640
            d.year = rng.randint(earliest, 1995)
            death = d.year + rng.randint(38, 96)
            d.end = death if death < PRESENT_YEAR else None
            birthplace = self.settlements_by_year.pick(rng, d.year)
            if birthplace is None:  # nothing founded yet: be born later
                d.year = max(d.year, self.settlements_by_year.years[0])
                birthplace = self.settlements_by_year.pick(rng, d.year)
            d.place = birthplace.id
            d.region = birthplace.region
            self.text_fact(d, "occupation", occ)
            self.link(d, "born_in", birthplace)
            self.year_fact(d, "year_born", d.year)
            if d.end is not None:
                self.year_fact(d, "year_died", d.end)
                if rng.random() < 0.55:
                    self.link(d, "died_in", self._settlement_by(rng, d.end, d.region))
            if rng.random() < 0.12:
                first, last = d.name.split(" ", 1)
                given = f"{first[0]}." if rng.random() < 0.5 else names.given_name(rng)
                self.alias(d, f"{given} {last}")
        self.people_by_occupation: dict[str, list[Draft]] = {}
        for p in self.by_type["person"]:
            self.people_by_occupation.setdefault(p.occupation, []).append(p)
        self.pickers: dict[str, Picker] = {}
        prng = self.rng("pickers")
        for occ in sorted(self.people_by_occupation):
            self.pickers[occ] = Picker(self.people_by_occupation[occ], prng)
        self.everyone = Picker(self.by_type["person"], prng, exponent=0.5)

    def _maker(self, rng: random.Random, occupations: tuple[str, ...], start_age: int, end_age: int,
               not_before: int = -10_000) -> tuple[Draft, int] | None:
        """A person of one of ``occupations`` and a year inside their working life (and not
        before ``not_before``); ``None`` when no such person exists."""
        for _ in range(30):
            occ = rng.choice(occupations)
            picker = self.pickers.get(occ)
            if not picker:
                continue
            p = picker.pick(rng)
            window = p.working_years(start_age, end_age)
            if window is None or window[1] < not_before:
                continue
            return p, rng.randint(max(window[0], not_before), window[1])
        return None

    def make_organisations(self) -> None:
        rng = self.rng("organisations")
        for _ in range(self.counts["organisation"]):
            kind = weighted_kind(rng, "organisation")
            d = self.new("organisation", kind)
            founder = None
            if rng.random() < 0.75:
                made = self._maker(rng, tuple(sorted(self.pickers)), 24, 70, not_before=1650)
                if made:
                    founder, d.year = made
            if d.year is None:
                d.year = rng.randint(1600, 2015)
            home = None
            if founder is not None and rng.random() < 0.5:
                home = self.by_id[founder.place]
            if home is None or home.year > d.year:
                home = self._settlement_by(rng, d.year, founder.region if founder else None)
            if home is None:  # founded before any settlement existed: move it later
                home = self.settlements_by_year.items[0]
                d.year = max(d.year, home.year + 1)
            d.place = home.id
            d.region = home.region
            self._name_organisation(d, home, founder, rng)
            self.text_fact(d, "instance_of", kind)
            self.year_fact(d, "year_founded", d.year)
            self.link(d, "headquartered_in", home)
            if founder is not None:
                self.link(d, "founded_by", founder)
            if kind in ORG_KINDS_WITH_MEMBERS or kind == "university":
                big = kind == "university"
                members = rng.randint(40, 30_000) if big else rng.randint(12, 900)
                self.number_fact(d, "members", members)
        self.orgs_by_kind: dict[str, ByYear] = {}
        groups: dict[str, list[Draft]] = {}
        for o in self.by_type["organisation"]:
            groups.setdefault(o.kind, []).append(o)
        for kind, items in sorted(groups.items()):
            self.orgs_by_kind[kind] = ByYear(items)
        self.orgs_by_year = ByYear(self.by_type["organisation"])

    def _name_organisation(self, d: Draft, home: Draft, founder: Draft | None,
                           rng: random.Random) -> None:
        region = self.by_id[home.region].name
        fam = family(founder) if founder else names.family_name(rng)
        self.name(d, lambda r: names.organisation_name(r, d.kind, home.name, fam, region), rng)
        # "the University of Orsk", "the Orsk Shipyard", but "Orsk University", "Avast & Co.".
        d.the = (d.name.startswith(("University of", "Bank of")) or " Society of " in d.name
                 or d.name.endswith(_THE_ENDINGS))
        words = [w for w in d.name.replace("&", " ").split() if w[0].isupper()]
        if len(words) >= 3 and rng.random() < 0.4:
            self.alias(d, "".join(w[0] for w in words))

    def make_memberships(self) -> None:
        rng = self.rng("memberships")
        universities = self.orgs_by_kind.get("university")
        clubs = [self.orgs_by_kind[k] for k in ORG_KINDS_WITH_MEMBERS if k in self.orgs_by_kind]
        for p in self.by_type["person"]:
            if universities and rng.random() < 0.5:
                u = universities.pick(rng, p.year + 18)
                if u is not None and (p.end is None or p.end > p.year + 18):
                    self.link(p, "educated_at", u)
            if clubs and rng.random() < 0.4:
                pool = rng.choice(clubs)
                last = min(p.end if p.end is not None else PRESENT_YEAR, PRESENT_YEAR) - 1
                o = pool.pick(rng, last)
                if o is not None and max(o.year, p.year + 18) <= last:
                    self.link(p, "member_of", o)

    def assign_images_and_counts(self) -> None:
        """Images for most non-people, and Wikidata-like popularity counts: sitelinks follow a
        heavy tail driven by how much of the world points at the entity, statements are its facts
        plus identifiers, so rare-but-documented entities are a minority, as on Wikidata."""
        rng = self.rng("counts")
        inbound: dict[str, int] = {}
        for d in self.drafts:
            for f in d.facts:
                if f.kind == "entity":
                    inbound[f.value] = inbound.get(f.value, 0) + 1
        type_bonus = {"region": 2.2, "settlement": 0.8, "river": 0.8, "mountain": 0.6,
                      "person": 0.3, "organisation": 0.5, "building": 0.3, "lake": 0.4,
                      "artwork": 0.2, "event": 0.3, "species": 0.0, "vessel": 0.0}
        for d in self.drafts:
            share = 0.45 if d.is_person else 1.0 if d.type == "region" else 0.88
            d.has_image = rng.random() < share
            fame = type_bonus[d.type] + 0.7 * math.log1p(inbound.get(d.id, 0)) + rng.gauss(0.0, 1.0)
            if d.kind == "city":
                fame += 1.0
            d.sitelinks = max(0, int(math.exp(0.55 + 0.85 * fame) - 1))
            identifiers = min(int(rng.expovariate(1 / 3.5)), 40)
            d.statements = len(d.facts) + identifiers + (1 if d.has_image else 0)


# Facts are listed in a stable order: identity first, then places, people, years, measures.
_RELATION_ORDER = {rel: i for i, rel in enumerate(RELATION_LABELS)}


def _fact_order(f: Fact) -> tuple[int, str]:
    return (_RELATION_ORDER.get(f.relation, 999), str(f.value))


_PEAK_WORDS = ("Peak", "Horn", "Crag", "Fell")
_THE_ENDINGS = ("Orchestra", "Company", "Rowing Club", "Ensemble", "Shipyard", "Ironworks",
                "Polytechnic")


def _fact_value(d: Draft, relation: str):
    for f in d.facts:
        if f.relation == relation:
            return f.value
    raise KeyError(f"{d.id} has no {relation} fact")


def generate_world(n_entities: int, seed: int = 0) -> GeneratedWorld:
    """Entities and facts of a world (no text, no images yet)."""
    return WorldGenerator(n_entities, seed).generate()
