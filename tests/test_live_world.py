"""LiveKnowledge against recorded WDQS, Wikipedia REST and Kiwix responses (no network)."""

from __future__ import annotations

import re

import httpx
import pytest
from fixtures.recorded.mockweb import (
    MockWeb,
    SleepRecorder,
    fast_http,
    fixture_json,
    json_response,
    raw_response,
    text_response,
)

from vsearcher_lite.cache import ToolCache
from vsearcher_lite.live.knowledge import (
    WDQS_URL,
    WIKIPEDIA_REST_URL,
    LiveKnowledge,
    article_title_from_url,
    polite_user_agent,
)
from vsearcher_lite.live.sparql import (
    SparqlError,
    build_facts_query,
    build_seed_query_offset,
    build_seed_query_slice,
    build_titles_query,
    dedupe_seeds,
    rows_to_facts,
    rows_to_seeds,
    sparql_rows,
)
from vsearcher_lite.net.http import HttpError
from vsearcher_lite.runio import InputError

UA = polite_user_agent("tests@example.org")
KIWIX = "http://127.0.0.1:8080"
BOOK = "wikipedia_en_test"


def sparql_query(request: httpx.Request) -> str:
    return request.url.params.get("query") or ""


def wdqs_router(overrides: dict | None = None):
    """Answers WDQS queries from fixtures by what the query asks; ``overrides`` maps a regex to
    steps."""
    overrides = {k: list(v) for k, v in (overrides or {}).items()}

    def answer(request: httpx.Request) -> httpx.Response:
        q = sparql_query(request)
        for pattern, steps in overrides.items():
            if re.search(pattern, q):
                step = steps.pop(0) if len(steps) > 1 else steps[0]
                return httpx.Response(step.status_code, headers=step.headers, content=step.content)
        if "COUNT(*)" in q:
            return json_response("wdqs_count.json")
        m = re.search(r"bd:slice\.offset (\d+)", q)
        if m:
            return json_response(f"wdqs_seeds_w{int(m.group(1)) // 3}.json")
        m = re.search(r"LIMIT \d+ OFFSET (\d+)", q)
        if m:
            return json_response(f"wdqs_seeds_offset_{m.group(1)}.json")
        if "VALUES ?title" in q:
            return json_response("wdqs_titles.json")
        if "wikibase:directClaim" in q:
            return json_response("wdqs_facts.json")
        if "BIND(wd:Q4200001 AS ?item)" in q:
            return json_response("wdqs_entity.json")
        if "BIND(wd:" in q:
            return json_response("wdqs_entity_empty.json")
        raise AssertionError(f"unplanned SPARQL query: {q}")

    return answer


def wiki_web(wdqs=None) -> MockWeb:
    rest = WIKIPEDIA_REST_URL
    return (
        MockWeb()
        .add("GET", WDQS_URL, wdqs or wdqs_router())
        .add("GET", f"{rest}/page/summary/Oldmere_Abbey", json_response("wikipedia_summary.json"))
        .add(
            "GET",
            f"{rest}/page/summary/Old_Mere_Abbey",
            httpx.Response(301, headers={"location": f"{rest}/page/summary/Oldmere_Abbey"}),
        )
        .add(
            "GET",
            f"{rest}/page/summary/Oldmere",
            json_response("wikipedia_summary_disambiguation.json"),
        )
        .add("GET", f"{rest}/page/summary/", json_response("wikipedia_not_found.json", status=404))
        .add(
            "GET",
            f"{rest}/page/html/Oldmere_Abbey",
            text_response("wikipedia_parsoid.html", "text/html; charset=utf-8"),
        )
        .add("GET", f"{rest}/page/html/", json_response("wikipedia_not_found.json", status=404))
    )


def knowledge(web: MockWeb, sleep: SleepRecorder | None = None, **kw) -> LiveKnowledge:
    return LiveKnowledge(http_options=fast_http(web, sleep), user_agent=UA, **kw)


# ---------------------------------------------------------------------------------------------
# Query building and parsing


def test_seed_query_is_the_papers_rule():
    q = build_seed_query_slice(10, 20, offset=300000, window=100000)
    # an English Wikipedia article
    assert "?article schema:isPartOf <https://en.wikipedia.org/>" in q
    assert "FILTER(?sitelinks <= 10 && ?statements >= 20)" in q
    assert "FILTER EXISTS { ?item wdt:P18 ?image . }" in q  # has an image
    assert "MINUS { ?item wdt:P31 wd:Q5 . }" in q  # not a human
    assert "bd:slice.offset 300000" in q and "bd:slice.limit 100000" in q
    loose = build_seed_query_offset(
        5, 50, require_image=False, exclude_people=False, offset=0, window=10
    )
    assert (
        "P18" not in loose and "Q5" not in loose and "?sitelinks <= 5 && ?statements >= 50" in loose
    )


def test_titles_query_escapes_quotes():
    q = build_titles_query(['Say "hi"', "Back\\slash"])
    assert '"Say \\"hi\\""@en' in q and '"Back\\\\slash"@en' in q


def test_sparql_rows_and_seeds_from_the_wire_format():
    rows = sparql_rows(fixture_json("wdqs_seeds_w2.json"))
    assert rows[0] == {
        "item": "http://www.wikidata.org/entity/Q4200042",
        "title": "Fenwick Hall (Norhaven)",
        "sitelinks": "7",
        "statements": "35",
    }
    seeds = rows_to_seeds(rows)
    assert [(s.id, s.title, s.sitelinks, s.statements) for s in seeds] == [
        ("Q4200042", "Fenwick Hall (Norhaven)", 7, 35)
    ]
    with pytest.raises(SparqlError):
        sparql_rows({"head": {}, "boolean": True})
    with pytest.raises(SparqlError):
        sparql_rows(["not", "an", "object"])


def test_dedupe_keeps_first_occurrence():
    seeds = rows_to_seeds(sparql_rows(fixture_json("wdqs_seeds_w0.json")))
    assert len(seeds) == 3 and [s.id for s in dedupe_seeds(seeds)] == ["Q4200001", "Q4200017"]


def test_facts_skip_unlabelled_values_and_read_years():
    facts = rows_to_facts("Q4200001", sparql_rows(fixture_json("wdqs_facts.json")))
    assert [(f.relation, f.value, f.kind, f.value_text()) for f in facts] == [
        ("inception", 1147, "year", "1147"),
        ("located_in_the_administrative_territorial_entity", "Q4200005", "entity", "Brackwater"),
        ("religion_or_worldview", "Q4200101", "entity", "Cistercians"),
    ]
    assert "wd:Q42 ?p ?value" in build_facts_query("Q42")


def test_polite_user_agent_asks_for_a_contact(monkeypatch):
    monkeypatch.delenv("VSEARCHER_CONTACT", raising=False)
    with pytest.warns(UserWarning, match="VSEARCHER_CONTACT"):
        assert "vsearcher-lite/" in polite_user_agent()
    monkeypatch.setenv("VSEARCHER_CONTACT", "ops@example.org")
    assert "ops@example.org" in polite_user_agent()


# ---------------------------------------------------------------------------------------------
# Seeds


def test_seeds_walk_slice_windows_and_deduplicate():
    web = wiki_web()
    kb = knowledge(web, window=3)
    seeds = kb.seeds()
    assert [s.id for s in seeds] == ["Q4200001", "Q4200017", "Q4200023", "Q4200042"]
    queries = [sparql_query(r) for r in web.requests]
    assert "COUNT(*)" in queries[0]
    # 8 articles
    assert [re.search(r"bd:slice\.offset (\d+)", q).group(1) for q in queries[1:]] == [
        "0",
        "3",
        "6",
    ]
    for r in web.requests:
        assert r.headers["user-agent"] == UA
        assert r.headers["accept"] == "application/sparql-results+json"


def test_seed_limit_stops_early():
    web = wiki_web()
    seeds = knowledge(web, window=3).seeds(limit=2)
    assert [s.id for s in seeds] == ["Q4200001", "Q4200017"]
    assert len(web.requests) == 2  # the count and one window


def test_offset_chunking_stops_at_a_short_window():
    web = wiki_web()
    seeds = knowledge(web, window=3, chunking="offset").seeds(10, 20)
    assert [s.id for s in seeds] == ["Q4200001", "Q4200017", "Q4200023"]
    assert [re.search(r"OFFSET (\d+)", sparql_query(r)).group(1) for r in web.requests] == [
        "0",
        "3",
    ]


def test_wdqs_429_retry_after_is_honoured():
    busy = httpx.Response(429, headers={"retry-after": "5"}, text="Too Many Requests")
    web = wiki_web(
        wdqs_router({r"bd:slice\.offset 3\b": [busy, json_response("wdqs_seeds_w1.json")]})
    )
    sleep = SleepRecorder()
    seeds = knowledge(web, sleep, window=3).seeds()
    assert len(seeds) == 4 and sleep.delays == [5.0]


def test_wdqs_errors_are_clear(tmp_path):
    web = wiki_web(
        wdqs_router({"COUNT": [raw_response("<html>Query timeout</html>", "application/json")]})
    )
    with pytest.raises(HttpError, match="malformed JSON"):
        knowledge(web, window=3).seeds()
    web = wiki_web(wdqs_router({"COUNT": [json_response({"head": {}, "boolean": True})]}))
    cache = ToolCache(tmp_path / "c.sqlite")
    with pytest.raises(SparqlError, match="results"):
        knowledge(web, window=3, cache=cache).seeds()
    assert len(cache) == 0  # a broken answer is not recorded
    web = wiki_web(wdqs_router({"COUNT": [httpx.Response(500)]}))
    with pytest.raises(HttpError, match="after 4 attempt"):
        knowledge(web, window=3).seeds()


def test_configuration_from_the_environment(monkeypatch):
    monkeypatch.setenv("VSEARCHER_KIWIX_URL", KIWIX)
    monkeypatch.setenv("VSEARCHER_KIWIX_BOOK", BOOK)
    monkeypatch.setenv("VSEARCHER_SPARQL_URL", "https://qlever.example.org/api/wikidata")
    kb = LiveKnowledge.from_env(user_agent=UA)
    assert (kb.kiwix_url, kb.kiwix_book, kb.endpoint, kb.chunking) == (
        KIWIX,
        BOOK,
        "https://qlever.example.org/api/wikidata",
        "offset",
    )
    monkeypatch.delenv("VSEARCHER_KIWIX_BOOK")
    with pytest.raises(InputError, match="kiwix_book"):
        LiveKnowledge.from_env()


def test_bad_configuration_is_an_input_error():
    with pytest.raises(InputError, match="chunking"):
        LiveKnowledge(chunking="pages")
    with pytest.raises(InputError, match="kiwix_book"):
        LiveKnowledge(kiwix_url=KIWIX)


# ---------------------------------------------------------------------------------------------
# Entities, titles, pages


def test_entity_details_and_unknown_qid():
    web = wiki_web()
    kb = knowledge(web)
    e = kb.entity("Q4200001")
    assert (e.name, e.type, e.sitelinks, e.statements, e.is_person) == (
        "Oldmere Abbey",
        "abbey",
        3,
        41,
        False,
    )
    assert e.aliases == ["Oldmere Priory", "Abbey of St Mary at Oldmere"]
    assert e.url == "https://en.wikipedia.org/wiki/Oldmere_Abbey"
    with pytest.raises(LookupError, match="Q4299999"):
        kb.entity("Q4299999")
    with pytest.raises(LookupError, match="not a Wikidata id"):
        kb.entity("Oldmere Abbey")


def test_find_resolves_titles_redirects_and_refuses_disambiguation():
    web = wiki_web()
    kb = knowledge(web)
    assert kb.find("Oldmere Abbey") == "Q4200001"
    assert kb.find("Old Mere Abbey") == "Q4200001"  # 301 to the canonical title
    assert kb.find("Oldmere") is None  # a disambiguation page is no entity
    assert kb.find("No such page xyz") is None  # 404
    assert kb.find("Q42") == "Q42"
    before = len(web.requests)
    assert kb.find("Oldmere Abbey") == "Q4200001" and len(web.requests) == before  # remembered


def test_page_from_the_rest_api():
    web = wiki_web()
    kb = knowledge(web)
    page = kb.page("Q4200001")
    assert page.title == "Oldmere Abbey" and page.entity_id == "Q4200001" and page.kind == "article"
    assert page.url == "https://en.wikipedia.org/wiki/Oldmere_Abbey"
    assert (
        page.paragraphs[0]
        == "Oldmere Abbey is a ruined Cistercian abbey near Brackwater, founded in 1147."
    )
    assert (
        "[1]" not in page.text
        and "Not article prose" not in page.text
        and "Founded" not in page.text
    )
    assert page.image.location == (
        "https://upload.wikimedia.org/wikipedia/commons/thumb/a/a1/"
        "Oldmere_Abbey_west_front.jpg/250px-Oldmere_Abbey_west_front.jpg"
    )
    assert page.links == [
        "https://en.wikipedia.org/wiki/Cistercians",
        "https://en.wikipedia.org/wiki/Brackwater",
        "https://en.wikipedia.org/wiki/Brackwater_Viaduct",
        "https://en.wikipedia.org/wiki/Fenwick_Hall_(Norhaven)",
    ]
    assert kb.image("Q4200001") == page.image
    # Fenwick Hall has no QID in the record
    assert kb.links("Q4200001") == [
        "Q4200101",
        "Q4200005",
        "Q4200017",
    ]
    assert kb.entity_for_url("https://en.wikipedia.org/wiki/Brackwater_Viaduct") == "Q4200017"
    assert kb.entity_for_url("https://example.org/elsewhere") is None
    assert [f.value_text() for f in kb.facts("Q4200001")] == ["1147", "Brackwater", "Cistercians"]


def test_page_image_falls_back_to_the_summary():
    html_without_images = (
        "<html><head><title>Oldmere Abbey</title></head><body><p>Only text.</p></body></html>"
    )
    web = wiki_web()
    web.routes.insert(
        0,
        (
            "GET",
            lambda u: u.endswith("/page/html/Oldmere_Abbey"),
            [raw_response(html_without_images, "text/html")],
            [0],
        ),
    )
    page = knowledge(web).page("Q4200001")
    assert (
        page.image.location
        == "https://upload.wikimedia.org/wikipedia/commons/a/a1/Oldmere_Abbey_west_front.jpg"
    )


def test_missing_article_is_a_lookup_error_naming_title_and_qid():
    web = wiki_web()
    kb = knowledge(web, window=3)
    kb.seeds()
    with pytest.raises(LookupError, match=r"Brackwater Viaduct.*Q4200017"):
        kb.page("Q4200017")


def test_article_titles_from_urls():
    prefixes = ("https://en.wikipedia.org/wiki/",)
    assert (
        article_title_from_url(
            "https://en.wikipedia.org/wiki/Saint_Mary%27s_Abbey#History", prefixes
        )
        == "Saint Mary's Abbey"
    )
    assert article_title_from_url("https://en.wikipedia.org/wiki/Help:Contents", prefixes) is None
    assert article_title_from_url("https://en.wikipedia.org/w/index.php", prefixes) is None


# ---------------------------------------------------------------------------------------------
# Kiwix


def kiwix_web(
    paths_found: tuple[str, ...] = ("content/wikipedia_en_test/A/Oldmere_Abbey",),
) -> MockWeb:
    web = MockWeb().add("GET", WDQS_URL, wdqs_router())
    for path in paths_found:
        web.add("GET", f"{KIWIX}/{path}", text_response("kiwix_article.html", "text/html"))
    web.add("GET", KIWIX, httpx.Response(404, text="Not Found"))
    return web


def test_kiwix_page_paragraphs_image_and_links():
    web = kiwix_web()
    kb = knowledge(web, kiwix_url=KIWIX, kiwix_book=BOOK)
    page = kb.page("Q4200001")
    assert page.url == f"{KIWIX}/content/{BOOK}/A/Oldmere_Abbey"
    assert page.paragraphs == [
        "Oldmere Abbey is a ruined Cistercian abbey near Brackwater, founded in 1147.",
        (
            "The chapter house was rebuilt in 1312 after a fire. "
            "The buildings passed to the Fenwick family in 1538."
        ),
        "Brackwater Viaduct crosses the valley below the ruin.",
    ]
    assert page.image.location == f"{KIWIX}/content/{BOOK}/I/Oldmere_Abbey_west_front.jpg.webp"
    assert page.links[:2] == [
        f"{KIWIX}/content/{BOOK}/A/Cistercians",
        f"{KIWIX}/content/{BOOK}/A/Brackwater",
    ]
    assert kb.entity_for_url(f"{KIWIX}/content/{BOOK}/A/Brackwater_Viaduct") == "Q4200017"
    assert not any("/page/summary/" in u for u in web.urls())  # Kiwix users need no Wikipedia API


def test_kiwix_tries_newer_and_legacy_paths():
    web = kiwix_web(paths_found=(f"{BOOK}/A/Oldmere_Abbey",))  # only the legacy URL answers
    page = knowledge(web, kiwix_url=KIWIX, kiwix_book=BOOK).page("Q4200001")
    assert page.url == f"{KIWIX}/{BOOK}/A/Oldmere_Abbey"
    tried = [u for u in web.urls() if u.startswith(KIWIX)]
    assert tried == [
        f"{KIWIX}/content/{BOOK}/A/Oldmere_Abbey",
        f"{KIWIX}/content/{BOOK}/Oldmere_Abbey",
        f"{KIWIX}/{BOOK}/A/Oldmere_Abbey",
    ]


def test_kiwix_missing_article_names_title_and_qid():
    web = kiwix_web(paths_found=())
    with pytest.raises(LookupError, match=r"Oldmere Abbey.*Q4200001"):
        knowledge(web, kiwix_url=KIWIX, kiwix_book=BOOK).page("Q4200001")
