"""Reading tool observations and sandbox pages, for the heuristic teacher.

The sandbox writes its articles from sentence templates (``vsearcher_lite.world.prose``); the
teacher reads them with regular expressions made from the same templates, falling back to plain
name matching.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from vsearcher_lite.agent.protocol import TOOL_RESPONSE_CLOSE, TOOL_RESPONSE_OPEN

ARTICLE_PATH = "/wiki/"


@dataclass
class Hit:
    rank: int
    title: str
    url: str
    snippet: str = ""

    @property
    def is_article(self) -> bool:
        return ARTICLE_PATH in self.url


_HIT_LINE = re.compile(r"^(\d+)\. (.*)$")
_URL_LINE = re.compile(r"^\s+URL: (\S+)\s*$")


def observation_body(text: str) -> str:
    """A tool response without its tags."""
    text = text.strip()
    if text.startswith(TOOL_RESPONSE_OPEN):
        text = text[len(TOOL_RESPONSE_OPEN) :]
    if text.endswith(TOOL_RESPONSE_CLOSE):
        text = text[: -len(TOOL_RESPONSE_CLOSE)]
    return text.strip()


def parse_hits(text: str) -> list[Hit]:
    """The numbered results of a text or image search observation (``toolbox.format_*_hits``).

    >>> hits = parse_hits('Results for "x":\\n1. Orsk Bridge\\n'
    ...                   '   URL: https://wiki.sandbox.test/wiki/Orsk_Bridge\\n   A bridge.')
    >>> hits[0].rank, hits[0].title, hits[0].snippet
    (1, 'Orsk Bridge', 'A bridge.')
    >>> hits[0].url
    'https://wiki.sandbox.test/wiki/Orsk_Bridge'
    """
    hits: list[Hit] = []
    for line in observation_body(text).splitlines():
        m = _HIT_LINE.match(line)
        if m:
            hits.append(Hit(int(m.group(1)), m.group(2).strip(), ""))
            continue
        if not hits:
            continue
        u = _URL_LINE.match(line)
        if u and not hits[-1].url:
            hits[-1].url = u.group(1)
        elif line.startswith("   ") and hits[-1].url:
            hits[-1].snippet = (hits[-1].snippet + " " + line.strip()).strip()
    return [h for h in hits if h.url]


def parse_visit(text: str) -> tuple[str, str, str]:
    """``(title, url, content)`` of a visit observation; empty strings for an error."""
    body = observation_body(text)
    if body.startswith("Error:"):
        return "", "", ""
    title = re.search(r"^Page: (.*)$", body, re.M)
    url = re.search(r"^URL: (\S+)$", body, re.M)
    content = body.split("Relevant content:", 1)[1].strip() if "Relevant content:" in body else body
    return (title.group(1).strip() if title else ""), (url.group(1) if url else ""), content


# ---------------------------------------------------------------------------------------------
# Reading pages with the sandbox's sentence templates

# Lead sentences are written outside the template tables (prose.ArticleWriter.lead); these
# patterns cover the relations they state. {k}: a kind noun, {av}: "a"/"an" and a noun.
LEAD_TEMPLATES: dict[str, tuple[str, ...]] = {
    "located_in": ("{s} is {av} in {v}.", "{s} is {av} located in {v}."),
    "headquartered_in": ("{s} is {av} based in {v}.", "{s} is {av} headquartered in {v}."),
    "held_in": ("{s} was {av} held in {v}.", "{s} was {av} in {v}."),
    "created_by": ("{s} is {av} by {v}.", "{s} is {av} made by {v}."),
    "native_to": ("{s} is a species of {k} native to {v}.", "{s} is {av} species endemic to {v}."),
    "home_port": ("{s} is {av} whose home port is {v}.", "{s} is {av} registered at {v}."),
    "born_in": ("{s} (born {y}) is {av} from {v}.", "{s} is {av} born in {v} in {y}.",
                "{s} ({y}–{y2}) was {av} born in {v}.",
                "{s} was {av}, born in {v} in {y}, who died in {y2}."),
    "year_born": ("{s} (born {v}) is {av} from {x}.", "{s} is {av} born in {x} in {v}.",
                  "{s} ({v}–{y2}) was {av} born in {x}.",
                  "{s} was {av}, born in {x} in {v}, who died in {y2}."),
    "year_died": ("{s} ({y}–{v}) was {av} born in {x}.",
                  "{s} was {av}, born in {x} in {y}, who died in {v}."),
    "occupation": ("{s} (born {y}) is {v} from {x}.", "{s} is {v} born in {x} in {y}.",
                   "{s} ({y}–{y2}) was {v} born in {x}.",
                   "{s} was {v}, born in {x} in {y}, who died in {y2}."),
}

_PLACEHOLDER = re.compile(r"(\{[a-zA-Z0-9]+\})")


def _subject_pattern(names: Iterable[str]) -> str:
    """How a page may refer to its subject: its name (with "the"), a surname, or "the <kind>"."""
    variants = set()
    for name in names:
        name = name.strip()
        if not name:
            continue
        variants.add(re.escape(name))
        words = name.split()
        if len(words) > 1:
            variants.add(re.escape(" ".join(words[1:])))
    alternatives = "|".join(sorted(variants, key=len, reverse=True))
    named = f"(?:[Tt]he )?(?:{alternatives})" if alternatives else "(?!)"
    return f"(?:{named}|[Tt]he [a-z][a-z' -]*?|It)"


def template_regex(template: str, subject: str) -> re.Pattern:
    """A regex for one sentence template: ``{s}`` the subject, ``{v}``/``{y}`` captured values."""
    out = []
    for piece in _PLACEHOLDER.split(template):
        if piece == "{s}":
            out.append(subject)
        elif piece == "{v}":
            out.append(r"(?P<v>(?:[^.;…]|\.(?=\d))+?)")  # one sentence: a dot only inside a number
        elif piece == "{y}":
            out.append(r"(?P<y>\d{3,4})")
        elif piece == "{y2}":
            out.append(r"\d{3,4}")
        elif piece == "{av}":
            out.append(r"an? [a-z][a-z' -]*?")
        elif piece.startswith("{") and piece.endswith("}"):  # {k}, {x}: any words
            out.append(r"[^.;…]+?")
        else:
            text = re.escape(piece)
            if piece.endswith("."):  # a sentence end (not a decimal point) or a cut snippet
                text = re.escape(piece[:-1]) + r"(?:\.(?=\s|$)|(?=…)|$)"
            out.append(text)
    return re.compile("".join(out))


def _templates_for(relation: str) -> list[tuple[str, str]]:
    """``(template, slot)`` pairs stating ``relation``: which placeholder holds its value."""
    from vsearcher_lite.world import templates as prose

    found = [(t, "y" if "{y}" in t and "{v}" not in t else "v")
             for t in prose.SINGLE.get(relation, ())]
    for (_type, rel), templates in prose.SINGLE_BY_TYPE.items():
        if rel == relation:
            found += [(t, "v") for t in templates]
    for (a, b), templates in prose.PAIRS.items():
        if relation == a:
            found += [(t, "v") for t in templates]
        elif relation == b:
            found += [(t, "y") for t in templates]
    found += [(t, "v") for t in (*prose.MULTI.get(relation, ()), *LEAD_TEMPLATES.get(relation, ()))]
    if relation == "occupation":
        found = [(t.replace("{av}", "{v}"), s) for t, s in found]
    return found


def _clean_value(text: str) -> str:
    text = re.sub(r"\s*\(\d{3,4}\)$", "", text.strip())  # "Orsk Bridge (1874)" in inbound lists
    text = re.sub(r"^(?:the|a|an) ", "", text, flags=re.I)
    return text.strip(" ,.")


def read_values(text: str, relation: str, subject_names: Iterable[str]) -> list[str]:
    """The values a page states for ``relation`` of its subject, in order of appearance.

    >>> page = "Orsk Bridge was designed by Ilsa Maren and completed in 1874."
    >>> read_values(page, "year_built", ["Orsk Bridge"])
    ['1874']
    """
    subject = _subject_pattern(subject_names)
    values: list[tuple[int, str]] = []
    for template, slot in _templates_for(relation):
        for m in template_regex(template, subject).finditer(text):
            value = m.groupdict().get(slot)
            if value:
                values.append((m.start(), _clean_value(value)))
    # Several templates can match one sentence ("designed by {v}." and "designed by {v} and
    # completed in {y}."): at each position the shortest value is the precise one.
    values.sort(key=lambda pv: (pv[0], len(pv[1])))
    out: list[str] = []
    last_start = None
    for start, v in values:
        if start == last_start:
            continue
        last_start = start
        if v and v not in out:
            out.append(v)
    return out


def split_names(text: str) -> list[str]:
    """Names in a list value: ``"A, B and C"`` -> ``["A", "B", "C"]``."""
    return [_clean_value(p) for p in re.split(r",\s*|\s+and\s+", text) if p.strip()]


def mentions(text: str, name: str) -> bool:
    """Whether ``text`` names ``name`` as a whole word sequence (case-insensitive)."""
    pattern = r"(?<!\w)" + re.escape(name) + r"(?!\w)"
    return bool(name) and re.search(pattern, text, re.I) is not None


def kind_match(hit: Hit, noun: str) -> bool:
    """Whether a result looks like an entity of the wanted kind ("bridge", "port town")."""
    if not noun:
        return True
    return (mentions(hit.title, noun) or mentions(hit.snippet, f"is a {noun}")
            or mentions(hit.snippet, f"is an {noun}"))


def kind_evidence(text: str, name: str, noun: str) -> int:
    """What ``text`` says of the kind of ``name``: 1 a ``noun``, -1 something else, 0 nothing;
    read from a lead sentence ("X is a bridge in Y"), else from the name itself ("Orsk Bridge").

    >>> kind_evidence("The Orsk Museum is a museum located in Orsk.", "Orsk Museum", "bridge")
    -1
    >>> kind_evidence("Ilsa Maren was a composer, born in Orsk in 1804.", "Ilsa Maren", "composer")
    1
    """
    if not noun or not name:
        return 0
    lead = re.search(r"(?<!\w)(?:[Tt]he )?" + re.escape(name) + r" (?:is|was) an? ([^.,;…]+)", text)
    if lead:
        return 1 if mentions(lead.group(1), noun) else -1
    return 1 if mentions(name, noun) else 0


INBOUND_VERBS = {"{flow}": ("flows", "flow"), "{rise}": ("rises", "rise"), "{be}": ("is", "are")}


def read_inbound(text: str, relation: str, subject_names: Iterable[str]) -> list[str]:
    """The entities a page lists as pointing at its subject by ``relation`` (inbound templates).

    >>> read_inbound("Fenon is the birthplace of Ilsa Maren and Ors Tave.", "born_in", ["Fenon"])
    ['Ilsa Maren', 'Ors Tave']
    """
    from vsearcher_lite.world import templates as prose

    templates = []
    inbound = list(prose.INBOUND.get(relation, ())) + list(prose.INBOUND_ONE.get(relation, ()))
    for template in inbound:
        # the verb agrees with the list: "A flows through X", "A and B flow through X"
        for verb, forms in INBOUND_VERBS.items():
            if verb in template:
                templates += [template.replace(verb, form) for form in forms]
                break
        else:
            templates.append(template)
    subject = _subject_pattern(subject_names)
    found: list[tuple[int, str]] = []
    for template in templates:
        for m in template_regex(template, subject).finditer(text):
            if m.groupdict().get("v"):
                found.extend((m.start(), n) for n in split_names(m.group("v")))
    out: list[str] = []
    for _, name in sorted(found):
        if name and name not in out:
            out.append(name)
    return out
