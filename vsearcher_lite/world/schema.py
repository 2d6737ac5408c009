"""What a sandbox world is made of: entity types and their shares, relations with their English
labels, kinds, occupations and materials, and ``Draft``, an entity while it is generated."""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass, field

from vsearcher_lite.world.model import Fact

PRESENT_YEAR = 2024

# Share of each entity type in a world (they sum to 1). People are the most common, as in
# Wikidata; regions are few and large.
TYPE_SHARES: dict[str, float] = {
    "region": 0.03, "settlement": 0.14, "river": 0.05, "mountain": 0.06, "lake": 0.04,
    "person": 0.20, "organisation": 0.09, "building": 0.14, "artwork": 0.12, "event": 0.07,
    "species": 0.03, "vessel": 0.03,
}
ENTITY_TYPES = tuple(TYPE_SHARES)

# Machine names of the relations, in the order an entity's facts are listed.
RELATIONS = (
    "instance_of", "located_in", "capital", "borders", "twinned_with", "flows_through", "source",
    "flows_into", "first_ascended_by", "born_in", "died_in", "educated_at", "member_of",
    "founded_by", "headquartered_in", "designed_by", "named_after", "commissioned_by", "crosses",
    "created_by", "depicts", "kept_in", "held_in", "organised_by", "led_by", "native_to",
    "described_by", "built_by", "home_port", "year_established", "year_founded", "year_built",
    "year_born", "year_died", "year_created", "year_held", "year_described", "year_launched",
    "first_ascent_year", "population", "area", "elevation", "length", "height", "depth",
    "occupation", "material", "participants", "members", "tonnage",
)
# How a relation reads in English: its name with spaces, unless given here.
_LABELS = {"source": "rises on", "year_born": "year of birth", "year_died": "year of death",
           "year_held": "year", "first_ascent_year": "year of first ascent",
           "depth": "maximum depth", "participants": "number of participants",
           "members": "number of members", "tonnage": "gross tonnage"}
RELATION_LABELS: dict[str, str] = {r: _LABELS.get(r, r.replace("_", " ")) for r in RELATIONS}

KINDS: dict[str, tuple[tuple[str, float], ...]] = {
    "region": (("province", 3), ("county", 2), ("canton", 1), ("duchy", 1)),
    "settlement": (("city", 1), ("town", 4), ("village", 4), ("port town", 1)),
    "river": (("river", 1),),
    "mountain": (("mountain", 5), ("peak", 2), ("volcano", 1)),
    "lake": (("lake", 1),),
    "organisation": (
        ("university", 2), ("company", 3), ("shipyard", 1), ("orchestra", 1),
        ("learned society", 2), ("rowing club", 1), ("publishing house", 1), ("bank", 1),
    ),
    "building": (
        ("bridge", 3), ("cathedral", 1), ("lighthouse", 1), ("library", 1), ("railway station", 1),
        ("tower", 1), ("museum", 2), ("theatre", 1), ("palace", 1), ("mill", 1), ("observatory", 1),
    ),
    "event": (
        ("festival", 3), ("battle", 1), ("treaty", 1), ("flood", 1), ("fire", 1), ("exhibition", 2),
        ("regatta", 1), ("expedition", 1), ("congress", 1),
    ),
    "species": (("bird", 2), ("beetle", 2), ("orchid", 1), ("moth", 1), ("frog", 1), ("fish", 1),
                ("fern", 1)),
    "vessel": (("steamship", 2), ("schooner", 1), ("ferry", 1), ("research vessel", 1),
               ("icebreaker", 1)),
}

# Occupations that produce works, and the share of people who hold the others.
CREATIVE_OCCUPATIONS = ("architect", "engineer", "painter", "sculptor", "photographer", "weaver",
                        "naturalist", "mountaineer", "explorer")
OTHER_OCCUPATIONS = ("poet", "composer", "politician", "merchant", "physician", "astronomer",
                     "historian", "actor", "philosopher", "inventor")

MUSEUM_KINDS = ("museum", "library", "palace")
ORG_KINDS_WITH_MEMBERS = ("learned society", "orchestra", "rowing club")
EVENT_KINDS_ORGANISED = ("festival", "exhibition", "regatta", "congress")
ART_KINDS_BY_OCCUPATION = {
    "painter": (("painting", 5), ("fresco", 1), ("mural", 1)),
    "sculptor": (("sculpture", 3), ("relief", 1)),
    "photographer": (("photograph", 1),),
    "weaver": (("tapestry", 1),),
}
MATERIALS = {
    "painting": ("oil on canvas", "tempera on panel", "oil on oak panel", "watercolour on paper"),
    "fresco": ("fresco on plaster",),
    "mural": ("acrylic on brick", "mineral paint on render"),
    "sculpture": ("bronze", "marble", "limestone", "cast iron", "oak"),
    "relief": ("sandstone", "terracotta", "bronze"),
    "photograph": ("silver gelatin print", "albumen print", "platinum print"),
    "tapestry": ("wool and silk", "linen and wool"),
}
SPECIES_WORDS = {
    "bird": ("warbler", "finch", "plover", "heron", "owl", "swift"),
    "beetle": ("beetle", "weevil", "chafer"),
    "orchid": ("orchid", "lady's slipper"),
    "moth": ("moth", "tiger moth", "hawkmoth"),
    "frog": ("frog", "tree frog", "toad"),
    "fish": ("trout", "minnow", "char", "loach"),
    "fern": ("fern", "spleenwort"),
}

SPECIES_SIZES = {"bird": (9, 70, "cm"), "beetle": (3, 60, "mm"), "orchid": (8, 90, "cm"),
                 "moth": (12, 110, "mm"),
                 "frog": (2, 14, "cm"), "fish": (4, 80, "cm"), "fern": (10, 150, "cm")}


@dataclass
class Draft:
    """An entity while it is generated, with the bookkeeping that keeps later facts consistent."""

    id: str
    type: str
    kind: str
    name: str = ""
    aliases: list[str] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    year: int | None = None  # founded / built / born / created / held / launched / described
    end: int | None = None  # year of death (people)
    region: str | None = None  # id of the region it lies in
    place: str | None = None  # id of the settlement it is in (or was born in)
    occupation: str = ""
    the: bool = False  # whether running text puts "the" before the name ("the Velna River")
    has_image: bool = False
    sitelinks: int = 0
    statements: int = 0

    @property
    def is_person(self) -> bool:
        return self.type == "person"

    def ref(self) -> str:
        """How running text names the entity: ``"the Velna River"``, ``"Orsk"``."""
        return f"the {self.name}" if self.the else self.name

    def working_years(self, start_age: int, end_age: int) -> tuple[int, int] | None:
        """The years in which a person aged between ``start_age`` and ``end_age``, alive, and
        before the present; ``None`` if that window is empty."""
        assert self.year is not None
        alive_until = self.end if self.end is not None else PRESENT_YEAR
        last = min(self.year + end_age, alive_until - 1, PRESENT_YEAR - 1)
        first = self.year + start_age
        return (first, last) if first <= last else None


@dataclass
class GeneratedWorld:
    seed: int
    drafts: list[Draft]

    def by_id(self) -> dict[str, Draft]:
        return {d.id: d for d in self.drafts}


MIN_ENTITIES = 24  # every type at least once, and enough people to make things


def type_counts(n_entities: int) -> dict[str, int]:
    """How many entities of each type a world of ``n_entities`` gets (every type at least once,
    at least two regions and four settlements; the remainder goes to people).

    >>> sum(type_counts(300).values())
    300
    """
    if n_entities < MIN_ENTITIES:
        raise ValueError(f"a sandbox world needs at least {MIN_ENTITIES} entities, "
                         f"got {n_entities}")
    counts = {t: max(1, int(n_entities * share)) for t, share in TYPE_SHARES.items()}
    counts["region"] = max(2, counts["region"])
    counts["settlement"] = max(4, counts["settlement"])
    counts["person"] += n_entities - sum(counts.values())
    return counts


def fmt_number(x: float) -> str:
    """Thousands separators, at most one decimal: ``fmt_number(12400) == "12,400"``."""
    if float(x).is_integer():
        return f"{int(x):,}"
    return f"{x:,.1f}"


def weighted_kind(rng: random.Random, type_: str) -> str:
    options = KINDS[type_]
    return rng.choices([k for k, _ in options], weights=[w for _, w in options])[0]


def _heavy_tail_weights(n: int, rng: random.Random, exponent: float = 0.9) -> list[float]:
    """Zipf-like weights in a random order: a few items get most of the draws."""
    w = [1.0 / (rank + 1) ** exponent for rank in range(n)]
    rng.shuffle(w)
    return w


class Picker:
    """Draws items with heavy-tailed weights in O(log n) per draw."""

    def __init__(self, items: list[Draft], rng: random.Random, exponent: float = 0.9):
        self.items = items
        weights = _heavy_tail_weights(len(items), rng, exponent)
        self.cum: list[float] = []
        total = 0.0
        for w in weights:
            total += w
            self.cum.append(total)

    def __bool__(self) -> bool:
        return bool(self.items)

    def pick(self, rng: random.Random) -> Draft:
        return rng.choices(self.items, cum_weights=self.cum)[0]


class ByYear:
    """Entities sorted by year, so "one that existed by year Y" is a prefix: O(log n) draws."""

    def __init__(self, items: list[Draft]):
        self.items = sorted(items, key=lambda d: (d.year if d.year is not None else -10_000, d.id))
        self.years = [d.year if d.year is not None else -10_000 for d in self.items]

    def existing_by(self, year: int) -> int:
        return bisect.bisect_right(self.years, year)

    def pick(self, rng: random.Random, year: int) -> Draft | None:
        n = self.existing_by(year)
        return self.items[rng.randrange(n)] if n else None


def family(person: Draft) -> str:
    """A person's family name: everything after the first word."""
    return person.name.split(" ", 1)[1]
