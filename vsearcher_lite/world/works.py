"""The sandbox's works and happenings: buildings, events, first ascents, artworks, species and
ships, each dated inside its maker's working life and placed where something already stood.

``WorkStages`` is part of ``WorldGenerator``: its stages run after places, people and
organisations exist.
"""

from __future__ import annotations

import random

from vsearcher_lite.world import names
from vsearcher_lite.world.schema import (
    ART_KINDS_BY_OCCUPATION,
    EVENT_KINDS_ORGANISED,
    MATERIALS,
    MUSEUM_KINDS,
    PRESENT_YEAR,
    SPECIES_SIZES,
    SPECIES_WORDS,
    ByYear,
    Draft,
    family,
    weighted_kind,
)

_STUDY_WORDS = ("Panel", "Study", "Fragment", "Sketch")
_ARTISTS = ("painter", "painter", "painter", "sculptor", "photographer", "weaver")
_SHIP_PREFIXES = {"steamship": "SS", "ferry": "MV", "research vessel": "RV", "icebreaker": "IB"}


class WorkStages:
    """The stages of ``WorldGenerator`` that make works; see that class for the plumbing."""

    def make_buildings(self) -> None:
        rng = self.rng("buildings")
        for _ in range(self.counts["building"]):
            kind = weighted_kind(rng, "building")
            d = self.new("building", kind)
            designer = None
            if rng.random() < 0.82:
                engineered = kind in ("bridge", "lighthouse", "railway station", "mill")
                occs = ("engineer", "architect") if engineered else ("architect",)
                made = self._maker(rng, occs, 24, 80, not_before=1200)
                if made:
                    designer, d.year = made
            if d.year is None:
                d.year = rng.randint(1150, 1900)
            place = self._bridge_or_any_place(rng, d, kind, designer)
            d.place = place.id
            d.region = place.region
            honoree = None
            if rng.random() < 0.22:
                honoree = self.everyone.pick(rng)
                if honoree.year >= d.year - 10 or honoree is designer:
                    honoree = None
            self._name_building(d, place, honoree, rng)
            self.text_fact(d, "instance_of", kind)
            self.link(d, "located_in", place)
            self.year_fact(d, "year_built", d.year)
            if designer is not None:
                self.link(d, "designed_by", designer)
            if honoree is not None:
                self.link(d, "named_after", honoree)
            if kind == "bridge":
                rivers = self.rivers_through.get(place.id)
                if rivers:
                    self.link(d, "crosses", rng.choice(rivers))
                self.number_fact(d, "length", rng.randint(20, 900), "m")
            else:
                high = rng.randint(9, 40) if kind != "tower" else rng.randint(30, 160)
                self.number_fact(d, "height", high, "m")
            if rng.random() < 0.25:
                patron = self.orgs_by_year.pick(rng, d.year)
                if patron is not None:
                    self.link(d, "commissioned_by", patron)
        self.museums = ByYear([b for b in self.by_type["building"] if b.kind in MUSEUM_KINDS])
        self.buildings_by_year = ByYear(self.by_type["building"])

    def _bridge_or_any_place(self, rng: random.Random, d: Draft, kind: str,
                             designer: Draft | None) -> Draft:
        """Where a building stands: bridges prefer settlements with a river; designers build
        near home; the settlement must already exist in the year the building went up."""
        region = designer.region if designer is not None and rng.random() < 0.6 else None
        if kind == "bridge":
            for _ in range(8):
                s = self._settlement_by(rng, d.year, region)
                if s is not None and s.id in self.rivers_through:
                    return s
        s = self._settlement_by(rng, d.year, region)
        if s is None:  # a building older than every settlement: move it to the oldest one's time
            s = self.settlements_by_year.items[0]
            d.year = max(d.year, s.year + 5)
        return s

    def _name_building(self, d: Draft, place: Draft, honoree: Draft | None,
                       rng: random.Random) -> None:
        label = {"railway station": "Station"}.get(d.kind, d.kind.title())
        honoree_family = family(honoree) if honoree else None
        self.name(d, lambda r: names.building_name(r, d.kind, label, place.name, honoree_family),
                  rng, the=True)

    def make_events(self) -> None:
        rng = self.rng("events")
        for _ in range(self.counts["event"]):
            kind = weighted_kind(rng, "event")
            d = self.new("event", kind)
            leader = organiser = None
            if kind == "expedition":
                leaders = ("explorer", "mountaineer", "naturalist")
                made = self._maker(rng, leaders, 20, 65, not_before=1700)
                if made:
                    leader, d.year = made
            if d.year is None:
                old = kind in ("battle", "treaty", "flood", "fire")
                d.year = rng.randint(1100, 1950) if old else rng.randint(1750, 2023)
            if kind in EVENT_KINDS_ORGANISED and rng.random() < 0.8:
                organiser = self.orgs_by_year.pick(rng, d.year)
            place = None
            if organiser is not None and rng.random() < 0.6:
                place = self.by_id[organiser.place]
            if place is None or place.year > d.year:
                place = self._settlement_by(rng, d.year)
            if place is None:
                place = self.settlements_by_year.items[0]
                d.year = max(d.year, place.year + 1)
            d.place = place.id
            d.region = place.region
            self._name_event(d, place, rng)
            self.text_fact(d, "instance_of", kind)
            self.link(d, "held_in", place)
            self.year_fact(d, "year_held", d.year)
            if organiser is not None:
                self.link(d, "organised_by", organiser)
            if leader is not None:
                self.link(d, "led_by", leader)
            if kind in ("festival", "exhibition", "regatta", "congress", "battle", "expedition"):
                # All three are drawn whatever the kind (the world's random stream counts on it).
                n = {"expedition": rng.randint(4, 60), "congress": rng.randint(40, 900)}.get(
                    kind, rng.randint(200, 40_000))
                self.number_fact(d, "participants", n)
        self.events_by_year = ByYear(self.by_type["event"])

    def _name_event(self, d: Draft, place: Draft, rng: random.Random) -> None:
        k, y = d.kind, d.year
        self.name(d, lambda r: names.event_name(r, k, place.name, y), rng, the=True)
        if k in ("battle", "flood") and rng.random() < 0.3:
            flood = k == "flood"
            self.alias(d, f"{'Great ' if flood else ''}{place.name} "
                          f"{'Deluge' if flood else 'Rout'} of {y}")

    def make_first_ascents(self) -> None:
        rng = self.rng("ascents")
        for m in self.by_type["mountain"]:
            if rng.random() < 0.7:
                made = self._maker(rng, ("mountaineer", "explorer"), 17, 60, not_before=1760)
                if made:
                    climber, year = made
                    self.link(m, "first_ascended_by", climber)
                    self.year_fact(m, "first_ascent_year", year)

    def make_artworks(self) -> None:
        rng = self.rng("artworks")
        natural = self.by_type["mountain"] + self.by_type["river"] + self.by_type["lake"]
        for _ in range(self.counts["artwork"]):
            made = self._maker(rng, _ARTISTS, 16, 88, not_before=1300)
            artist, year = made if made else (None, rng.randint(1400, 2020))
            painter = ART_KINDS_BY_OCCUPATION["painter"]
            options = ART_KINDS_BY_OCCUPATION.get(artist.occupation, painter) if artist else painter
            kind = rng.choices([k for k, _ in options], weights=[w for _, w in options])[0]
            d = self.new("artwork", kind)
            d.year = year
            subject = self._depiction(rng, year, natural, exclude=artist)
            home = self.museums.pick(rng, PRESENT_YEAR) if rng.random() < 0.85 else None
            self._name_artwork(d, subject, rng)
            self.text_fact(d, "instance_of", kind)
            if artist is not None:
                self.link(d, "created_by", artist)
            self.year_fact(d, "year_created", year)
            if subject is not None:
                self.link(d, "depicts", subject)
            if home is not None:
                self.link(d, "kept_in", home)
                d.place = home.place
                d.region = home.region
            self.text_fact(d, "material", rng.choice(MATERIALS[kind]))
            if rng.random() < 0.15:
                self.alias(d, f"{names.root(rng)} {rng.choice(_STUDY_WORDS)}")

    def _depiction(self, rng: random.Random, year: int, natural: list[Draft],
                   exclude: Draft | None) -> Draft | None:
        """Something that existed when the work was made (a place, building, person or event)."""
        choice = rng.random()
        if choice < 0.1:
            return None
        if choice < 0.35 and natural:
            return rng.choice(natural)
        if choice < 0.55:
            return self.settlements_by_year.pick(rng, year)
        if choice < 0.75:
            return self.buildings_by_year.pick(rng, year)
        if choice < 0.9:
            p = self.everyone.pick(rng)
            return p if p.year <= year - 5 and p is not exclude else None
        return self.events_by_year.pick(rng, year)

    def _name_artwork(self, d: Draft, subject: Draft | None, rng: random.Random) -> None:
        if subject is None:
            kind, name, ref = None, "", ""
        else:
            kind, name, ref = subject.type, subject.name, subject.ref()
        self.name(d, lambda r: names.artwork_name(r, kind, name, ref), rng)

    def make_species(self) -> None:
        rng = self.rng("species")
        homes = self.by_type["region"] + self.by_type["lake"] + self.by_type["mountain"]
        for _ in range(self.counts["species"]):
            kind = weighted_kind(rng, "species")
            d = self.new("species", kind)
            made = self._maker(rng, ("naturalist",), 20, 80, not_before=1750)
            describer, d.year = made if made else (None, rng.randint(1760, 2020))
            home = rng.choice((self.by_type["lake"] or homes) if kind == "fish" else homes)
            honoree = None
            if rng.random() < 0.3:
                honoree = self.everyone.pick(rng)
                if honoree.year > d.year - 15:
                    honoree = None
            home_word = home.name.replace("Lake ", "").replace("Mount ", "").split()[0]
            if honoree:
                epithet = family(honoree).split()[0].lower() + "i"
            else:
                epithet = home_word.lower().rstrip("aeiouy") + "ensis"
            self.name(d, lambda r: f"{names.latin_word(r).capitalize()} {epithet}", rng)
            self.text_fact(d, "instance_of", kind)
            self.link(d, "native_to", home)
            d.region = home.region
            if describer is not None:
                self.link(d, "described_by", describer)
            self.year_fact(d, "year_described", d.year)
            if honoree is not None:
                self.link(d, "named_after", honoree)
            low, high, unit = SPECIES_SIZES[kind]
            self.number_fact(d, "length", rng.randint(low, high), unit)
            word = rng.choice(SPECIES_WORDS[kind])
            self.alias(d, f"{home_word} {word}")

    def make_vessels(self) -> None:
        rng = self.rng("vessels")
        yards = [self.orgs_by_kind[k] for k in ("shipyard", "company") if k in self.orgs_by_kind]
        settlements = self.by_type["settlement"]
        ports = [s for s in settlements if s.kind in ("port town", "city")] or settlements
        ports_by_year = ByYear(ports)
        for _ in range(self.counts["vessel"]):
            kind = weighted_kind(rng, "vessel")
            d = self.new("vessel", kind)
            builder = None
            year = rng.randint(1800, 2020)
            if yards:
                builder = rng.choice(yards).pick(rng, year)
                if builder is not None:
                    year = max(year, builder.year + 1, 1800)
            d.year = min(year, PRESENT_YEAR - 1)
            port = ports_by_year.pick(rng, d.year) or self.settlements_by_year.pick(rng, d.year)
            if port is None:  # launched before any settlement existed: launch it later
                port = self.settlements_by_year.items[0]
                d.year = max(d.year, port.year + 1)
            d.place = port.id
            d.region = port.region
            honoree = self.everyone.pick(rng) if rng.random() < 0.5 else None
            if honoree is not None and honoree.year > d.year - 10:
                honoree = None
            prefix = _SHIP_PREFIXES.get(kind, "")
            target = honoree.name.split(" ", 1)[1] if honoree else port.name

            def make(r: random.Random) -> str:
                base = target if r.random() < 0.7 else names.root(r, 1, 2)
                tail = r.choice(("", "", " Star", " II", " Queen", " Spirit"))
                return f"{prefix} {base}{tail}".strip()

            self.name(d, make, rng, the=True)
            self.text_fact(d, "instance_of", kind)
            if builder is not None:
                self.link(d, "built_by", builder)
            self.year_fact(d, "year_launched", d.year)
            self.link(d, "home_port", port)
            if honoree is not None:
                self.link(d, "named_after", honoree)
            elif target == port.name and port.name in d.name:
                self.link(d, "named_after", port)
            self.number_fact(d, "length", rng.randint(18, 160), "m")
            self.number_fact(d, "tonnage", rng.randint(80, 24_000))
