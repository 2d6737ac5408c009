"""Pronounceable fictional names built from syllables, unique across one world.

Every entity name in the sandbox is invented, so no language model can know it: a correct
answer needs the tools. Each function draws from ``r`` in a fixed order, which keeps worlds
reproducible.
"""

from __future__ import annotations

import random

ONSETS = (
    "b", "br", "c", "d", "dr", "f", "g", "gr", "h", "k", "kr", "l", "m", "n", "p", "pr",
    "r", "s", "st", "t", "tr", "v", "vr", "z", "th", "sh", "ch", "w", "y", "j", "sk", "fl",
)
VOWELS = ("a", "e", "i", "o", "u", "a", "e", "o", "a", "i", "e", "ai", "ei", "ou")
CODAS = ("", "", "", "", "", "", "n", "r", "l", "s", "m", "n", "r", "th", "nd", "rk", "st", "l")

# Endings that make a root sound like a place, a region or a family.
PLACE_ENDINGS = ("", "", "", "a", "on", "ar", "ith", "ene", "wick", "holm", "stad", "berg", "mere",
                 "ford", "vale")
REGION_ENDINGS = ("ia", "and", "mark", "ora", "eth", "avia", "ora", "istan", "ovia", "enne")
FAMILY_ENDINGS = ("", "", "", "son", "ek", "in", "ard", "ova", "elli", "ez", "ström", "by", "ant",
                  "ier")
LATIN_ENDINGS = ("ia", "us", "ella", "odon", "ina", "opsis", "ara")


def _syllable(rng: random.Random) -> str:
    return rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS)


def root(rng: random.Random, min_syllables: int = 2, max_syllables: int = 3) -> str:
    """A capitalised pronounceable root such as ``"Velmar"``.

    >>> root(random.Random(1)).isalpha()
    True
    """
    n = rng.randint(min_syllables, max_syllables)
    syllables = [_syllable(rng) for _ in range(n)]
    # Only the last syllable may close on a consonant cluster; inner ones stay open or
    # take one soft consonant, which keeps words such as "Velmar" or "Toriban" sayable.
    for i in range(n - 1):
        s = syllables[i]
        while len(s) > 1 and s[-1] not in "aeiou" and s[-2] not in "aeiou":
            s = s[:-1]
        syllables[i] = s
    return smooth("".join(syllables)).capitalize()


def smooth(word: str) -> str:
    """Drop letters that would make three consonants or three vowels in a row.

    >>> smooth("sarkeiith")
    'sarkeith'
    """
    out: list[str] = []
    for ch in word:
        if len(out) >= 2 and all(c.lower() not in "aeiouy" for c in (out[-1], out[-2], ch)):
            continue
        if len(out) >= 2 and all(c.lower() in "aeiou" for c in (out[-1], out[-2], ch)):
            continue
        out.append(ch)
    return "".join(out)


def place_root(rng: random.Random) -> str:
    return smooth(root(rng, 1, 2) + rng.choice(PLACE_ENDINGS))


def region_root(rng: random.Random) -> str:
    return smooth(root(rng, 1, 2) + rng.choice(REGION_ENDINGS))


def given_name(rng: random.Random) -> str:
    return root(rng, 2, 2)


def family_name(rng: random.Random) -> str:
    ending = rng.choice(FAMILY_ENDINGS)
    return smooth(root(rng, 1 if ending else 2, 2) + ending)


def latin_word(rng: random.Random) -> str:
    return smooth(root(rng, 1, 2).lower() + rng.choice(LATIN_ENDINGS))


class NameRegistry:
    """Hands out names that no other entity or alias in the world uses (case-insensitive)."""

    def __init__(self) -> None:
        self._taken: set[str] = set()

    def __contains__(self, name: str) -> bool:
        return name.casefold() in self._taken

    def claim(self, name: str) -> bool:
        """Reserve ``name``; False if it is already taken."""
        key = name.casefold()
        if key in self._taken:
            return False
        self._taken.add(key)
        return True

    def unique(self, make, rng: random.Random, tries: int = 60) -> str:
        """Call ``make(rng)`` until it yields a free name; after ``tries`` add a further root."""
        for _ in range(tries):
            name = make(rng)
            if self.claim(name):
                return name
        while True:  # practically never reached: the name space is huge
            name = f"{make(rng)} {root(rng, 2, 3)}"
            if self.claim(name):
                return name


_SOCIETY_TOPICS = ("Naturalists", "Antiquaries", "Natural Philosophy", "Letters", "Engineers")
_FESTIVAL_THEMES = ("Lantern", "Harvest", "Winter", "Music", "Kite", "Lake", "Fire", "Spring")
_ORG_NAMES = {
    "university": ("University of {p}", "{p} Polytechnic", "{p} University"),
    "company": ("{f} & Co.", "{p} Trading Company", "{f} Brothers", "{p} Ironworks"),
    "shipyard": ("{p} Shipyard", "{f} Shipbuilding", "{p} Dockyard Company"),
    "orchestra": ("{p} Philharmonic Orchestra", "{p} Chamber Orchestra", "{f} Ensemble"),
    "publishing house": ("{f} Press", "{f} & Sons Publishers", "{p} House"),
    "bank": ("Bank of {p}", "{f} Bank", "{p} Savings Bank"),
}


def organisation_name(r: random.Random, kind: str, home: str, family: str, region: str) -> str:
    place = home if r.random() < 0.7 else place_root(r)
    fam = family if r.random() < 0.6 else family_name(r)
    if kind == "learned society":
        topic = r.choice(_SOCIETY_TOPICS)
        reg = region if r.random() < 0.5 else region_root(r)
        return f"{reg} Society of {topic}"
    if kind == "rowing club":
        return f"{place} Rowing Club"
    return r.choice(_ORG_NAMES.get(kind, _ORG_NAMES["bank"])).format(p=place, f=fam)


def building_name(r: random.Random, kind: str, label: str, place: str, honoree: str | None) -> str:
    """``honoree``: the family name of the person the building is named after, if any."""
    if honoree and r.random() < 0.85:
        return r.choice((f"{honoree} {label}", f"{honoree} Memorial {label}"))
    base = place if r.random() < 0.55 else root(r, 1, 2)
    if kind == "cathedral" and r.random() < 0.5:
        return f"Cathedral of Saint {given_name(r)}"
    if kind == "museum":
        topic = r.choice(("Art", "History", "Maps", "Clocks", "Textiles"))
        return r.choice((f"{base} Museum", f"{base} Museum of {topic}", f"{base} Gallery"))
    if kind == "lighthouse":
        return f"{base} Point Lighthouse" if r.random() < 0.5 else f"{base} Lighthouse"
    if kind == "railway station":
        return f"{base} {r.choice(('Central Station', 'Station', 'North Station'))}"
    if kind == "library":
        return r.choice((f"{base} Public Library", f"{base} Library"))
    return f"{base} {label}"


def event_name(r: random.Random, kind: str, place: str, year: int) -> str:
    p = place if r.random() < 0.8 else root(r, 1, 2)
    if kind == "festival":
        theme = r.choice(_FESTIVAL_THEMES)
        return f"{p} {theme} Festival"
    if kind == "battle":
        return r.choice((f"Battle of {p}", f"Siege of {p}", f"Battle of {p} Ford"))
    if kind == "treaty":
        return f"Treaty of {p}"
    if kind == "flood":
        return f"{year} {p} Flood"
    if kind == "fire":
        return r.choice((f"Great Fire of {p}", f"{year} {p} Fire"))
    if kind == "exhibition":
        theme = r.choice(("Industrial", "Colonial", "Art", "Garden", "Trade"))
        return f"{p} {theme} Exhibition of {year}"
    if kind == "regatta":
        return f"{p} {r.choice(('Regatta', 'Cup Regatta', 'Summer Regatta'))}"
    if kind == "expedition":
        return f"{root(r, 1, 2)} Expedition of {year}"
    return f"{p} Congress of {r.choice(('Geographers', 'Physicians', 'Linguists', 'Chemists'))}"


def artwork_name(r: random.Random, subject_type: str | None, name: str, ref: str) -> str:
    """A title after the work's subject (``None``: an abstract work); ``ref`` as running text
    names the subject ("the Velna River")."""
    if subject_type is None:
        shape = r.choice(("Composition", "Study", "Figure", "Rhythm", "Interior"))
        colour = r.choice(("Ochre", "Blue", "Grey", "Umber", "Green", "Rose"))
        return f"{shape} in {colour} {root(r, 1, 2)}"
    if subject_type == "person":
        return r.choice((f"Portrait of {name}", f"Bust of {name}", f"{name} Reading"))
    if subject_type == "event":
        version = f"{name}, {root(r, 1, 2)} Version"
        return r.choice((f"Scene from {ref}", f"Memories of {ref}", version))
    cap = ref[0].upper() + ref[1:]
    side = r.choice(("East", "West", "South", "North"))
    return r.choice((f"View of {ref}", f"{cap} at Dusk", f"{cap} in Winter", f"Morning over {ref}",
                     f"{cap} from the {side}", f"Storm over {ref}", f"Evening at {ref}"))
