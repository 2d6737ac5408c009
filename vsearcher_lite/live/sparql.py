"""Wikidata SPARQL for the live source: the seed, entity, title and fact queries, and their results.

Seeds follow paper A.2: an English Wikipedia article, few sitelinks (rare), many statements (well
documented), an image (P18), not a human. The Wikidata Query Service stops any query after 60 s,
so the seed query is cut into ``bd:slice`` windows (or ``LIMIT``/``OFFSET`` elsewhere).
"""

from __future__ import annotations

import re
from typing import Any

from vsearcher_lite.world.model import Fact, Seed

ENWIKI = "https://en.wikipedia.org/"
ENTITY_PREFIX = "http://www.wikidata.org/entity/"
DEFAULT_SITELINKS_MAX = 10  # paper A.2
DEFAULT_STATEMENTS_MIN = 20
DEFAULT_WINDOW = 100_000  # English-Wikipedia articles per bd:slice window
DEFAULT_OFFSET_WINDOW = 10_000  # filtered rows per LIMIT/OFFSET window
MAX_FACTS = 60
QID = re.compile(r"^Q[1-9]\d*$")


class SparqlError(RuntimeError):
    """A SPARQL endpoint answered with something that is not a SPARQL JSON result."""


def sparql_string(text: str) -> str:
    """``text`` as a SPARQL string literal.

    >>> print(sparql_string('Say "hi"'))
    "Say \\"hi\\""
    """
    for raw, escaped in (("\\", "\\\\"), ('"', '\\"'), ("\n", "\\n"), ("\r", "\\r")):
        text = text.replace(raw, escaped)
    return f'"{text}"'


def _seed_filters(sitelinks_max: int, statements_min: int, require_image: bool,
                  exclude_people: bool) -> str:
    lines = [
        "  ?item wikibase:sitelinks ?sitelinks ;",
        "        wikibase:statements ?statements .",
        f"  FILTER(?sitelinks <= {int(sitelinks_max)} && ?statements >= {int(statements_min)})",
    ]
    if require_image:
        lines.append("  FILTER EXISTS { ?item wdt:P18 ?image . }")
    if exclude_people:
        lines.append("  MINUS { ?item wdt:P31 wd:Q5 . }")
    return "\n".join(lines)


def build_seed_query_slice(sitelinks_max: int = DEFAULT_SITELINKS_MAX,
                           statements_min: int = DEFAULT_STATEMENTS_MIN, *, offset: int = 0,
                           window: int = DEFAULT_WINDOW, require_image: bool = True,
                           exclude_people: bool = True) -> str:
    """The seed query for one ``bd:slice`` window of English-Wikipedia articles: the work per
    request is bounded by the window, whatever the filters let through.

    >>> q = build_seed_query_slice(10, 20, offset=200000, window=100000)
    >>> "bd:slice.offset 200000" in q and "?sitelinks <= 10" in q and "wd:Q5" in q
    True
    """
    return "\n".join([
        "SELECT ?item ?title ?sitelinks ?statements WHERE {",
        "  SERVICE bd:slice {",
        f"    ?article schema:isPartOf <{ENWIKI}> .",
        f"    bd:serviceParam bd:slice.offset {int(offset)} .",
        f"    bd:serviceParam bd:slice.limit {int(window)} .",
        "  }",
        "  ?article schema:about ?item ;",
        "           schema:name ?title .",
        _seed_filters(sitelinks_max, statements_min, require_image, exclude_people),
        "}",
    ])


def build_enwiki_count_query() -> str:
    """How many English-Wikipedia sitelinks there are: a single-pattern count, answered fast."""
    return f"SELECT (COUNT(*) AS ?count) WHERE {{ ?article schema:isPartOf <{ENWIKI}> . }}"


def build_seed_query_offset(sitelinks_max: int = DEFAULT_SITELINKS_MAX,
                            statements_min: int = DEFAULT_STATEMENTS_MIN, *, offset: int = 0,
                            window: int = DEFAULT_OFFSET_WINDOW, require_image: bool = True,
                            exclude_people: bool = True) -> str:
    """The seed query for one ``LIMIT``/``OFFSET`` window (endpoints without ``bd:slice``).

    >>> build_seed_query_offset(offset=20, window=10).splitlines()[-1]
    'LIMIT 10 OFFSET 20'
    """
    return "\n".join([
        "SELECT ?item ?title ?sitelinks ?statements WHERE {",
        f"  ?article schema:isPartOf <{ENWIKI}> ;",
        "           schema:about ?item ;",
        "           schema:name ?title .",
        _seed_filters(sitelinks_max, statements_min, require_image, exclude_people),
        "}",
        f"LIMIT {int(window)} OFFSET {int(offset)}",
    ])


def slice_offsets(total: int, window: int) -> list[int]:
    """The window starts that cover ``total`` rows.

    >>> slice_offsets(250, 100)
    [0, 100, 200]
    """
    if window <= 0:
        raise ValueError("window must be positive")
    return list(range(0, max(0, total), window))


def build_entity_query(qid: str) -> str:
    """Label, English title, counts, type, aliases and human-ness of one item."""
    return "\n".join([
        "SELECT ?itemLabel ?itemAltLabel ?title ?sitelinks ?statements ?typeLabel ?human WHERE {",
        f"  BIND(wd:{qid} AS ?item)",
        "  ?item wikibase:sitelinks ?sitelinks ;",
        "        wikibase:statements ?statements .",
        f"  OPTIONAL {{ ?article schema:about ?item ; schema:isPartOf <{ENWIKI}> ;"
        " schema:name ?title . }",
        "  OPTIONAL { ?item wdt:P31 ?type . }",
        "  BIND(EXISTS { ?item wdt:P31 wd:Q5 . } AS ?human)",
        '  SERVICE wikibase:label { bd:serviceParam wikibase:language "en". }',
        "}",
        "LIMIT 20",
    ])


def build_titles_query(titles: list[str]) -> str:
    """The QIDs of English-Wikipedia articles by exact title (a ``VALUES`` list)."""
    values = " ".join(f"{sparql_string(t)}@en" for t in titles)
    return "\n".join([
        "SELECT ?title ?item WHERE {",
        f"  VALUES ?title {{ {values} }}",
        f"  ?article schema:name ?title ; schema:isPartOf <{ENWIKI}> ; schema:about ?item .",
        "}",
    ])


def build_facts_query(qid: str, limit: int = MAX_FACTS) -> str:
    """Direct claims of an item whose value is another item or a date, with English labels."""
    return "\n".join([
        "SELECT ?prop ?propLabel ?value ?valueLabel WHERE {",
        f"  wd:{qid} ?p ?value .",
        "  ?prop wikibase:directClaim ?p .",
        f'  FILTER((isIRI(?value) && STRSTARTS(STR(?value), "{ENTITY_PREFIX}Q"))'
        " || DATATYPE(?value) = xsd:dateTime)",
        '  SERVICE wikibase:label { bd:serviceParam wikibase:language "en". }',
        "}",
        f"LIMIT {int(limit)}",
    ])


def sparql_rows(payload: Any) -> list[dict[str, str]]:
    """The bindings of a SPARQL JSON result as ``{var: value}`` rows (unbound ones absent).

    >>> x = {"type": "literal", "value": "1"}
    >>> sparql_rows({"head": {"vars": ["x"]}, "results": {"bindings": [{"x": x}, {}]}})
    [{'x': '1'}, {}]
    """
    if not isinstance(payload, dict) or not isinstance(payload.get("results"), dict):
        raise SparqlError("not a SPARQL JSON result (no 'results' object)")
    bindings = payload["results"].get("bindings")
    if not isinstance(bindings, list):
        raise SparqlError("not a SPARQL JSON result (no 'results.bindings' list)")
    rows = []
    for binding in bindings:
        if not isinstance(binding, dict):
            raise SparqlError("a SPARQL binding is not an object")
        rows.append({k: v["value"] for k, v in binding.items()
                     if isinstance(v, dict) and "value" in v})
    return rows


def qid_from_uri(uri: str) -> str | None:
    """``"http://www.wikidata.org/entity/Q42"`` -> ``"Q42"``; ``None`` for anything else.

    >>> qid_from_uri("http://www.wikidata.org/entity/Q894433"), qid_from_uri("http://www.wikidata.org/entity/P31")
    ('Q894433', None)
    """
    tail = uri.rsplit("/", 1)[-1] if isinstance(uri, str) else ""
    return tail if QID.match(tail) else None


def as_int(value: str | None) -> int | None:
    try:
        return int(float(value)) if value is not None else None
    except ValueError:
        return None


def rows_to_seeds(rows: list[dict[str, str]]) -> list[Seed]:
    """Seeds from seed-query rows; rows without a QID, title or counts are dropped."""
    seeds = []
    for row in rows:
        qid = qid_from_uri(row.get("item", ""))
        sitelinks, statements = as_int(row.get("sitelinks")), as_int(row.get("statements"))
        title = (row.get("title") or "").strip()
        if qid and title and sitelinks is not None and statements is not None:
            seeds.append(Seed(id=qid, title=title, sitelinks=sitelinks, statements=statements))
    return seeds


def dedupe_seeds(seeds: list[Seed]) -> list[Seed]:
    """The first occurrence of each QID, in order.

    >>> seeds = [Seed("Q2", "b", 1, 30), Seed("Q1", "a", 1, 30), Seed("Q2", "b", 1, 30)]
    >>> [s.id for s in dedupe_seeds(seeds)]
    ['Q2', 'Q1']
    """
    first: dict[str, Seed] = {}
    for s in seeds:
        first.setdefault(s.id, s)
    return list(first.values())


def snake_case(text: str) -> str:
    """A label as a machine name.

    >>> snake_case("located in the administrative territorial entity")
    'located_in_the_administrative_territorial_entity'
    """
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def rows_to_facts(qid: str, rows: list[dict[str, str]], limit: int = MAX_FACTS) -> list[Fact]:
    """Facts from facts-query rows, sorted: item values with their labels, and years of dates.
    Values without an English label (a bare QID) are skipped: no use to a question writer."""
    facts: dict[tuple, Fact] = {}
    for row in rows:
        pid = (row.get("prop") or "").rsplit("/", 1)[-1]
        label = (row.get("propLabel") or "").strip()
        value = row.get("value") or ""
        if not pid or not label or label == pid:
            continue
        relation = snake_case(label) or pid
        value_qid = qid_from_uri(value)
        if value_qid:
            value_label = (row.get("valueLabel") or "").strip()
            if not value_label or value_label == value_qid:
                continue
            fact = Fact(qid, relation, value_qid, kind="entity", label=label,
                        value_label=value_label)
        else:
            m = re.match(r"^([+-]?\d{1,4})-\d\d-\d\d", value)
            if not m:
                continue
            fact = Fact(qid, relation, int(m.group(1)), kind="year", label=label)
        facts[(fact.relation, str(fact.value))] = fact
    return [facts[k] for k in sorted(facts)][:limit]

