"""Pronounceable fictional names built from syllables, unique across one world.

Every entity name in the sandbox is invented, so no language model can know it: a correct
answer needs the tools. Names are drawn from syllable tables with a seeded
``random.Random``; a ``NameRegistry`` guarantees that no two entities (or aliases) share a name.
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
PLACE_ENDINGS = ("", "", "", "a", "on", "ar", "ith", "ene", "wick", "holm", "stad", "berg", "mere", "ford", "vale")
REGION_ENDINGS = ("ia", "and", "mark", "ora", "eth", "avia", "ora", "istan", "ovia", "enne")
FAMILY_ENDINGS = ("", "", "", "son", "ek", "in", "ard", "ova", "elli", "ez", "ström", "by", "ant", "ier")
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
        """Call ``make(rng)`` until it yields a free name; after ``tries`` add a distinguishing root."""
        for _ in range(tries):
            name = make(rng)
            if self.claim(name):
                return name
        while True:  # practically never reached: the name space is huge
            name = f"{make(rng)} {root(rng, 2, 3)}"
            if self.claim(name):
                return name
