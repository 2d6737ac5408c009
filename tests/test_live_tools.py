"""Live tool backends against recorded responses in the real wire formats (no network).

Every HTTP request goes to an ``httpx.MockTransport`` (tests/fixtures/recorded/mockweb.py) and
every host name goes to a stub resolver; sleeps are recorded, not slept.
"""

from __future__ import annotations

import base64
import json

import httpx
import pytest
from fixtures.recorded.mockweb import (
    GIF_BYTES,
    JPEG_BYTES,
    PNG_BYTES,
    SECRET,
    WEBP_BYTES,
    MockWeb,
    SleepRecorder,
    fast_http,
    json_response,
    raw_response,
    stub_resolver,
    text_response,
    timeout,
)

from vsearcher_lite.chat import ChatError, ScriptedChat
from vsearcher_lite.live.html import sniff_image_type
from vsearcher_lite.live.read import (
    JINA_URL,
    DirectFetchReader,
    JinaReader,
    LLMSummariser,
    build_summary_messages,
    page_from_fetch,
)
from vsearcher_lite.live.search import (
    GOOGLE_CSE_URL,
    SERPER_LENS_URL,
    SERPER_SEARCH_URL,
    VISION_URL,
    GoogleCustomSearch,
    HttpImageChecker,
    SerperLens,
    SerperTextSearch,
    VisionWebDetection,
)
from vsearcher_lite.live.tools import choose_live_backends, make_live_backends
from vsearcher_lite.net.guard import UrlGuard
from vsearcher_lite.runio import InputError
from vsearcher_lite.tools.base import Summariser, ToolError
from vsearcher_lite.world.model import ImageRef, PageContent

PAGE_URL = "https://heritage.example.org/oldmere"
QUERY_IMAGE_URL = "https://images.example.org/q/oldmere.jpg"
KEY_VARS = (
    "SERPER_API_KEY",
    "GOOGLE_CSE_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_CSE_ID",
    "GOOGLE_VISION_API_KEY",
    "JINA_API_KEY",
    "VSEARCHER_ENV_FILE",
)


@pytest.fixture(autouse=True)
def no_keys(monkeypatch):
    """No test may depend on keys in the developer's environment."""
    for var in KEY_VARS:
        monkeypatch.delenv(var, raising=False)


def guard() -> UrlGuard:
    return UrlGuard(resolver=stub_resolver({"private.example.com": "10.0.0.7"}))


# ---------------------------------------------------------------------------------------------
# One table of backends, so each resilience case runs against every one of them


def _vision(http, cache=None):
    return VisionWebDetection(
        api_key=SECRET, http_options=http, cache=cache, image_checker=lambda url: True
    )


BACKENDS = {
    "serper": dict(
        method="POST",
        url=SERPER_SEARCH_URL,
        ok=lambda: json_response("serper_search.json"),
        json_api=True,
        make=lambda http, cache=None: SerperTextSearch(
            api_key=SECRET, http_options=http, cache=cache
        ),
        call=lambda b: b.search("oldmere abbey", 5),
        check=lambda r: r[0].url == "https://en.wikipedia.org/wiki/Oldmere_Abbey",
    ),
    "google_cse": dict(
        method="GET",
        url=GOOGLE_CSE_URL,
        ok=lambda: json_response("google_cse.json"),
        json_api=True,
        make=lambda http, cache=None: GoogleCustomSearch(
            api_key=SECRET, engine_id="cx-engine-0001", http_options=http, cache=cache
        ),
        call=lambda b: b.search("brackwater viaduct", 5),
        check=lambda r: r[0].url == "https://en.wikipedia.org/wiki/Brackwater_Viaduct",
    ),
    "vision": dict(
        method="POST",
        url=VISION_URL,
        ok=lambda: json_response("vision_web_detection.json"),
        json_api=True,
        make=_vision,
        call=lambda b: b.search(ImageRef(QUERY_IMAGE_URL), 5),
        check=lambda r: r[0].url == "https://en.wikipedia.org/wiki/Oldmere_Abbey",
    ),
    "serper_lens": dict(
        method="POST",
        url=SERPER_LENS_URL,
        ok=lambda: json_response("serper_lens.json"),
        json_api=True,
        make=lambda http, cache=None: SerperLens(api_key=SECRET, http_options=http, cache=cache),
        call=lambda b: b.search(ImageRef(QUERY_IMAGE_URL), 5),
        check=lambda r: r[0].url == "https://heritage.example.org/oldmere",
    ),
    "jina": dict(
        method="GET",
        url=JINA_URL,
        ok=lambda: text_response("jina_reader.txt"),
        json_api=False,
        make=lambda http, cache=None: JinaReader(
            api_key=SECRET, http_options=http, cache=cache, guard=guard()
        ),
        call=lambda b: b.read(PAGE_URL),
        check=lambda p: "founded in 1147" in p.text,
    ),
    "direct": dict(
        method="GET",
        url=PAGE_URL,
        ok=lambda: text_response("web_page.html", "text/html; charset=utf-8"),
        json_api=False,
        make=lambda http, cache=None: DirectFetchReader(
            http_options=http, cache=cache, guard=guard()
        ),
        call=lambda b: b.read(PAGE_URL),
        check=lambda p: "founded in 1147" in p.text,
    ),
}
NAMES = list(BACKENDS)
JSON_APIS = [n for n in NAMES if BACKENDS[n]["json_api"]]


def run_backend(name, *steps, **http_overrides):
    spec = BACKENDS[name]
    web = MockWeb().add(spec["method"], spec["url"], *steps)
    sleep = SleepRecorder()
    backend = spec["make"](fast_http(web, sleep, **http_overrides))
    return spec, web, sleep, backend


@pytest.mark.parametrize("name", NAMES)
def test_success_sends_one_request_and_parses(name):
    spec, web, sleep, backend = run_backend(name, BACKENDS[name]["ok"]())
    assert spec["check"](spec["call"](backend))
    assert len(web.requests) == 1 and sleep.delays == []
    assert "vsearcher-lite" in web.requests[0].headers["user-agent"]


@pytest.mark.parametrize("name", NAMES)
def test_429_with_retry_after_waits_as_told_then_succeeds(name):
    busy = httpx.Response(429, headers={"retry-after": "7"}, text="slow down")
    spec, web, sleep, backend = run_backend(name, busy, BACKENDS[name]["ok"]())
    assert spec["check"](spec["call"](backend))
    assert len(web.requests) == 2
    assert sleep.delays == [7.0]


@pytest.mark.parametrize("name", NAMES)
def test_500_then_success(name):
    spec, web, sleep, backend = run_backend(
        name, httpx.Response(500, text="oops"), httpx.Response(503), BACKENDS[name]["ok"]()
    )
    assert spec["check"](spec["call"](backend))
    assert len(web.requests) == 3 and len(sleep.delays) == 2


@pytest.mark.parametrize("name", NAMES)
def test_timeouts_become_a_tool_error_after_bounded_retries(name):
    spec, web, sleep, backend = run_backend(name, timeout, max_retries=2)
    with pytest.raises(ToolError, match="timed out") as err:
        spec["call"](backend)
    assert len(web.requests) == 3  # the first try and two retries, no more
    assert SECRET not in str(err.value)


@pytest.mark.parametrize("name", JSON_APIS)
def test_malformed_json_is_a_clear_tool_error(name):
    garbage = raw_response('{"organic": [ {"title": "cut', "application/json")
    spec, web, sleep, backend = run_backend(name, garbage)
    with pytest.raises(ToolError, match="malformed JSON") as err:
        spec["call"](backend)
    assert SECRET not in str(err.value)


@pytest.mark.parametrize("name", ["serper", "google_cse", "vision", "serper_lens", "jina"])
def test_bad_key_names_the_variable_and_hides_the_key(name):
    spec, web, sleep, backend = run_backend(name, httpx.Response(401, text=f"invalid key {SECRET}"))
    with pytest.raises(ToolError) as err:
        spec["call"](backend)
    message = str(err.value)
    assert SECRET not in message
    assert backend.key_var in message and "401" in message
    assert len(web.requests) == 1  # a 401 is not retried


# ---------------------------------------------------------------------------------------------
# Text search


def test_serper_handles_missing_fields_and_duplicates():
    _, web, _, backend = run_backend("serper", json_response("serper_search.json"))
    hits = backend.search("oldmere abbey chapter house", 5)
    # the hit without a link is skipped
    assert [h.url for h in hits] == [
        "https://en.wikipedia.org/wiki/Oldmere_Abbey",
        "https://heritage.example.org/oldmere/chapter-house",
        "https://photos.example.net/set/oldmere-ruins",
        "https://walks.example.com/brackwater-valley",
        "http://history.example.edu/cistercians/north",
    ]
    every = backend.search("oldmere abbey chapter house", 10)
    # the repeated Wikipedia hit (7th) is dropped
    assert [h.url for h in every] == [h.url for h in hits]
    assert hits[1].snippet == ""  # no snippet: an empty one, not an error
    assert hits[2].title == "photos.example.net"  # no title: the host stands in
    sent = web.requests[0]
    assert sent.headers["x-api-key"] == SECRET
    assert json.loads(sent.content) == {
        "q": "oldmere abbey chapter house",
        "gl": "us",
        "hl": "en",
        "num": 10,
    }


def test_serper_empty_results_and_out_of_credits():
    _, _, _, backend = run_backend("serper", json_response("serper_search_empty.json"))
    assert backend.search("zqxjv wplkt mmrrq") == []
    _, _, _, backend = run_backend("serper", json_response("serper_credits.json", status=400))
    with pytest.raises(ToolError, match="Not enough credits"):
        backend.search("anything")


def test_google_cse_parses_items_and_keeps_the_key_out_of_errors():
    _, web, _, backend = run_backend("google_cse", json_response("google_cse.json"))
    hits = backend.search("brackwater viaduct", 5)
    assert [h.title for h in hits] == [
        "Brackwater Viaduct - Wikipedia",
        "Engineering the viaduct",
        "Timetable",
    ]
    # from htmlSnippet
    assert hits[1].snippet == "The viaduct was designed by Ada Fenwick & partners."
    assert hits[2].snippet == ""
    params = web.requests[0].url.params
    assert params["key"] == SECRET and params["cx"] == "cx-engine-0001" and params["num"] == "5"

    _, _, _, backend = run_backend("google_cse", json_response("google_cse_empty.json"))
    assert backend.search("zqxjv wplkt") == []  # zero hits come without an "items" key

    _, web, sleep, backend = run_backend(
        "google_cse", json_response("google_cse_quota.json", status=429), max_retries=1
    )
    with pytest.raises(ToolError, match="Quota exceeded") as err:
        backend.search("brackwater viaduct")
    assert SECRET not in str(err.value) and "cx-engine-0001" not in str(err.value)
    assert len(web.requests) == 2 and len(sleep.delays) == 1


# ---------------------------------------------------------------------------------------------
# Image search


def image_web() -> MockWeb:
    """The image URLs named in vision_web_detection.json, each with what its server really sends."""
    return (
        MockWeb()
        .add(
            "GET",
            "https://upload.example.org/commons/oldmere-abbey.jpg",
            raw_response(JPEG_BYTES, "image/jpeg"),
        )
        .add("GET", "https://heritage.example.org/img/broken-link.jpg", httpx.Response(404))
        .add(
            "GET",
            "https://heritage.example.org/img/oldmere-dusk.jpg",
            raw_response(PNG_BYTES, "image/png"),
        )
        # The server claims an image but sends an HTML error page: not an image.
        .add(
            "GET",
            "https://blog.example.net/media/not-an-image.jpg",
            raw_response("<html><body>Hotlinking forbidden</body></html>", "image/jpeg"),
        )
        .add(
            "GET",
            "https://photos.example.net/full/oldmere-ruins.png",
            raw_response(PNG_BYTES, "image/png"),
        )
        .add(
            "GET",
            "https://travel.example.org/img/valley-abbey.gif",
            raw_response(GIF_BYTES, "image/gif"),
        )
        .add(
            "GET",
            "https://news.example.com/img/restoration.webp",
            raw_response(WEBP_BYTES, "image/webp"),
        )
        .add(
            "GET",
            "https://late.example.org/img/seventh.jpg",
            raw_response(JPEG_BYTES, "image/jpeg"),
        )
    )


def test_vision_keeps_top5_pages_with_a_real_reachable_image(tmp_path):
    images = image_web()
    checker = HttpImageChecker(guard=guard(), http_options=fast_http(images))
    api = MockWeb().add("POST", VISION_URL, json_response("vision_web_detection.json"))
    backend = VisionWebDetection(api_key=SECRET, http_options=fast_http(api), image_checker=checker)
    query = tmp_path / "question.png"
    query.write_bytes(PNG_BYTES)

    hits = backend.search(ImageRef(str(query)), 5)

    assert [(h.url, h.image.location) for h in hits] == [
        (
            "https://en.wikipedia.org/wiki/Oldmere_Abbey",
            "https://upload.example.org/commons/oldmere-abbey.jpg",
        ),
        (
            "https://heritage.example.org/oldmere",
            "https://heritage.example.org/img/oldmere-dusk.jpg",
        ),
        (
            "https://photos.example.net/set/oldmere-ruins",
            "https://photos.example.net/full/oldmere-ruins.png",
        ),
        (
            "https://travel.example.org/brackwater-valley",
            "https://travel.example.org/img/valley-abbey.gif",
        ),
        (
            "https://news.example.com/2023/abbey-restoration",
            "https://news.example.com/img/restoration.webp",
        ),
    ]
    assert hits[0].title == "Oldmere Abbey - Wikipedia"  # <b> marks removed
    assert hits[1].title == "Visit Oldmere Abbey & gardens"
    assert hits[2].title == "photos.example.net"  # no pageTitle
    assert not any(u.startswith("x-raw-image") for u in images.urls())
    body = json.loads(api.requests[0].content)
    assert base64.b64decode(body["requests"][0]["image"]["content"]) == PNG_BYTES
    assert body["requests"][0]["features"][0]["type"] == "WEB_DETECTION"
    assert api.requests[0].headers["x-goog-api-key"] == SECRET


def test_vision_sends_a_url_as_image_uri_and_handles_empty_and_per_image_errors():
    _, web, _, backend = run_backend("vision", json_response("vision_empty.json"))
    assert backend.search(ImageRef(QUERY_IMAGE_URL)) == []
    body = json.loads(web.requests[0].content)
    assert body["requests"][0]["image"] == {"source": {"imageUri": QUERY_IMAGE_URL}}

    _, _, _, backend = run_backend("vision", json_response("vision_image_error.json"))
    with pytest.raises(ToolError, match="We can not access the URL currently"):
        backend.search(ImageRef(QUERY_IMAGE_URL))


def test_vision_missing_local_image_is_a_tool_error(tmp_path):
    _, web, _, backend = run_backend("vision", json_response("vision_empty.json"))
    with pytest.raises(ToolError, match="does not exist"):
        backend.search(ImageRef(str(tmp_path / "missing.png")))
    assert web.requests == []


def test_image_checker_refuses_private_targets_without_a_request():
    web = MockWeb().add("GET", "http", raw_response(PNG_BYTES, "image/png"))
    checker = HttpImageChecker(guard=guard(), http_options=fast_http(web))
    assert not checker("http://169.254.169.254/latest/meta-data/image.png")
    assert not checker("https://private.example.com/cat.png")  # resolves to 10.0.0.7
    assert not checker("x-raw-image:///5f0c2e1d")
    assert web.requests == []
    assert checker("https://public.example.org/cat.png")
    assert len(web.requests) == 1
    assert web.requests[0].headers["range"] == "bytes=0-65535"


@pytest.mark.parametrize(
    "data,content_type,expected",
    [
        (PNG_BYTES, "image/png", "png"),
        (JPEG_BYTES, "", "jpeg"),
        (GIF_BYTES, "text/html", "gif"),
        (WEBP_BYTES, "image/webp", "webp"),
        (b"<html>nope</html>", "image/jpeg", None),
        (b'<svg xmlns="http://www.w3.org/2000/svg"></svg>', "image/svg+xml", "svg"),
        (b'<svg xmlns="http://www.w3.org/2000/svg"></svg>', "text/plain", None),
        (b"", "image/png", None),
    ],
)
def test_sniff_image_type_trusts_bytes_not_headers(data, content_type, expected):
    assert sniff_image_type(data, content_type) == expected


def test_serper_lens_parses_matches_and_refuses_local_files(tmp_path):
    _, web, _, backend = run_backend("serper_lens", json_response("serper_lens.json"))
    hits = backend.search(ImageRef(QUERY_IMAGE_URL), 5)
    assert [h.url for h in hits] == [
        "https://heritage.example.org/oldmere",
        "https://photos.example.net/set/oldmere-ruins",
        "https://shop.example.com/postcards/oldmere",
    ]
    assert hits[1].title == "photos.example.net" and hits[1].image.location.startswith(
        "https://encrypted-tbn2"
    )
    assert hits[2].image is None  # no image URL in that match
    assert json.loads(web.requests[0].content)["url"] == QUERY_IMAGE_URL

    local = tmp_path / "q.png"
    local.write_bytes(PNG_BYTES)
    with pytest.raises(ToolError, match="public http\\(s\\) URL.*GOOGLE_VISION_API_KEY"):
        backend.search(ImageRef(str(local)))
    assert len(web.requests) == 1


# ---------------------------------------------------------------------------------------------
# Page readers


def test_jina_text_format_gives_title_paragraphs_image_and_links():
    _, web, _, backend = run_backend("jina", text_response("jina_reader.txt"))
    page = backend.read(PAGE_URL)
    assert page.url == PAGE_URL and page.title == "Oldmere Abbey | Heritage Trust"
    assert page.paragraphs[:3] == [
        "Oldmere Abbey",
        "Oldmere Abbey was founded in 1147 by monks from Brackwater.",
        "The chapter house",
    ]
    assert (
        "The chapter house was rebuilt in 1312 after a fire. Its vault survives." in page.paragraphs
    )
    assert page.image.location == "https://heritage.example.org/img/oldmere-dusk.jpg"
    assert "https://heritage.example.org/brackwater" in page.links
    sent = web.requests[0]
    assert str(sent.url) == JINA_URL + PAGE_URL
    assert sent.headers["authorization"] == f"Bearer {SECRET}"


def test_jina_without_marker_json_envelope_and_without_key():
    web = (
        MockWeb()
        .add("GET", JINA_URL + "https://a.example.org/", text_response("jina_no_marker.txt"))
        .add("GET", JINA_URL + "https://b.example.org/", json_response("jina_reader.json"))
        .add(
            "GET",
            JINA_URL + "https://c.example.org/",
            raw_response('{"data": {"title": "cut', "text/plain"),
        )
    )
    reader = JinaReader(http_options=fast_http(web), guard=guard())  # no key: Jina is optional
    assert reader.read("https://a.example.org/").paragraphs == [
        "Oldmere Abbey was founded in 1147.",
        "The chapter house was rebuilt in 1312 after a fire.",
    ]
    b = reader.read("https://b.example.org/")
    assert (
        b.title == "Oldmere Abbey | Heritage Trust"
        and "The chapter house was rebuilt in 1312 after a fire." in b.paragraphs
    )
    assert reader.read(
        "https://c.example.org/"
    ).paragraphs  # a cut JSON body is read as text, no crash
    assert all("authorization" not in r.headers for r in web.requests)


def test_jina_error_envelope_is_a_readable_tool_error():
    _, web, _, backend = run_backend("jina", json_response("jina_blocked.json", status=451))
    with pytest.raises(ToolError, match="DDoS attack suspected") as err:
        backend.read("http://blocked.example.com/page")
    assert SECRET not in str(err.value)


@pytest.mark.parametrize("reader_name", ["jina", "direct"])
@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "http://127.0.0.1:8080/admin",
        "http://[::1]/",
        "http://169.254.169.254/latest/meta-data/",
        "http://2130706433/",
        "http://0x7f000001/",
        "https://private.example.com/",
        "ftp://example.org/x",
        "gopher://x/",
        "javascript:alert(1)",
    ],
)
def test_readers_refuse_unsafe_urls_before_sending_anything(reader_name, url):
    spec, web, _, backend = run_backend(reader_name, BACKENDS[reader_name]["ok"]())
    with pytest.raises(ToolError, match="cannot visit"):
        backend.read(url)
    assert web.requests == []


def test_direct_fetch_extracts_readable_text_only():
    _, web, _, backend = run_backend(
        "direct", text_response("web_page.html", "text/html; charset=utf-8")
    )
    page = backend.read(PAGE_URL)
    text = page.text
    assert page.title == "Oldmere Abbey | Heritage Trust"
    assert "Oldmere Abbey was founded in 1147 by monks from Brackwater." in page.paragraphs
    assert "Its rib vault survives, & it is the best-preserved part of the ruin." in text
    for hidden in ("tracking code", "font-family", "Visit us", "Copyright", "Enable JavaScript"):
        assert hidden not in text
    # not the 16px icon
    assert page.image.location == "https://heritage.example.org/img/oldmere-dusk.jpg"
    assert page.links == [
        "https://heritage.example.org/brackwater",
        "https://walks.example.com/brackwater-valley",
    ]


def test_direct_fetch_follows_redirects_but_not_into_private_networks():
    web = (
        MockWeb()
        .add(
            "GET", "https://moved.example.org/", httpx.Response(301, headers={"location": PAGE_URL})
        )
        .add("GET", PAGE_URL, text_response("web_page.html", "text/html"))
        .add(
            "GET",
            "https://evil.example.org/",
            httpx.Response(302, headers={"location": "http://10.1.2.3/admin"}),
        )
    )
    reader = DirectFetchReader(http_options=fast_http(web), guard=guard())
    assert reader.read("https://moved.example.org/").url == "https://moved.example.org/"
    with pytest.raises(ToolError, match="cannot visit"):
        reader.read("https://evil.example.org/")
    assert not any("10.1.2.3" in u for u in web.urls())


def test_direct_fetch_rejects_non_pages_and_names_missing_urls():
    web = (
        MockWeb()
        .add("GET", "https://img.example.org/cat.png", raw_response(PNG_BYTES, "image/png"))
        .add("GET", "https://gone.example.org/", httpx.Response(404, text="not here"))
        .add(
            "GET",
            "https://notes.example.org/a.txt",
            raw_response("First note.\n\nSecond note.", "text/plain"),
        )
    )
    reader = DirectFetchReader(http_options=fast_http(web), guard=guard())
    with pytest.raises(ToolError, match="not a readable web page .*image/png"):
        reader.read("https://img.example.org/cat.png")
    with pytest.raises(ToolError, match="https://gone.example.org/"):
        reader.read("https://gone.example.org/")
    assert reader.read("https://notes.example.org/a.txt").paragraphs == [
        "First note.",
        "Second note.",
    ]


def test_page_text_is_capped():
    long_html = (
        "<html><title>Long</title><body>"
        + "".join(f"<p>Paragraph {i} " + "word " * 50 + "</p>" for i in range(200))
        + "</body></html>"
    )
    page = page_from_fetch(
        {"status": 200, "content_type": "text/html", "text": long_html},
        "https://x.example.org/",
        max_chars=3000,
    )
    assert 2000 < len(page.text) <= 3000 + len(page.paragraphs) * 2
    assert page.paragraphs[0].startswith("Paragraph 0")


# ---------------------------------------------------------------------------------------------
# Summaries


class RecordingSummariser(Summariser):
    """A fallback that says it was used (the offline extractive summariser is tested elsewhere)."""

    name = "recording"

    def __init__(self):
        self.calls = []

    def summarise(self, page, goal):
        self.calls.append(goal)
        return f"fallback summary of {page.title}"


def long_page() -> PageContent:
    return PageContent(
        "https://x.example.org/",
        "Long page",
        [f"Sentence number {i} about the abbey." for i in range(3000)],
    )


def test_summary_prompt_caps_the_page_and_keeps_the_goal_last():
    messages = build_summary_messages(
        long_page(), "When was the chapter house rebuilt?", max_page_chars=2000
    )
    user = messages[-1]["content"]
    assert user.rstrip().endswith("Goal: When was the chapter house rebuilt?")
    assert len(user) < 2600
    assert "Sentence number 0 about" in user and "Sentence number 2999" not in user


def test_llm_summariser_uses_the_chat_reply():
    chat = ScriptedChat(["The chapter house was rebuilt in 1312."])
    summariser = LLMSummariser(chat, fallback=RecordingSummariser(), max_page_chars=1000)
    assert (
        summariser.summarise(long_page(), "chapter house")
        == "The chapter house was rebuilt in 1312."
    )
    assert chat.calls[0]["sampling"]["temperature"] == 0.0 and summariser.fallbacks == 0


@pytest.mark.parametrize("reply", [ChatError("endpoint down"), "   "])
def test_llm_summariser_falls_back_when_the_chat_fails(reply):
    def script(messages):
        if isinstance(reply, Exception):
            raise reply
        return reply

    fallback = RecordingSummariser()
    summariser = LLMSummariser(ScriptedChat(script), fallback=fallback)
    assert summariser.summarise(long_page(), "chapter house") == "fallback summary of Long page"
    assert fallback.calls == ["chapter house"] and summariser.fallbacks == 1


# ---------------------------------------------------------------------------------------------
# Choosing backends from the keys present


def test_backend_choice_follows_the_keys(monkeypatch):
    monkeypatch.setenv("SERPER_API_KEY", SECRET)
    assert choose_live_backends() == {"text": "serper", "image": "serper_lens", "reader": "direct"}
    monkeypatch.setenv("GOOGLE_VISION_API_KEY", SECRET + "-vision")
    monkeypatch.setenv("JINA_API_KEY", SECRET + "-jina")
    assert choose_live_backends() == {"text": "serper", "image": "vision", "reader": "jina"}
    backends = make_live_backends(chat=ScriptedChat(["x"]))
    assert backends.describe() == {
        "text_search": "serper",
        "image_search": "vision",
        "reader": "jina",
        "summariser": "llm",
    }


def test_backend_choice_with_custom_search_and_env_file(monkeypatch, tmp_path):
    env = tmp_path / "keys.env"
    env.write_text(
        f"GOOGLE_CSE_KEY={SECRET}\nGOOGLE_CSE_ID=cx-engine-0001\nGOOGLE_VISION_API_KEY={SECRET}2\n"
    )
    assert choose_live_backends(env_file=str(env)) == {
        "text": "google_cse",
        "image": "vision",
        "reader": "direct",
    }


def test_missing_keys_name_the_variables(monkeypatch):
    with pytest.raises(InputError, match="SERPER_API_KEY.*GOOGLE_CSE_KEY"):
        choose_live_backends()
    monkeypatch.setenv("GOOGLE_CSE_KEY", SECRET)
    monkeypatch.setenv("GOOGLE_CSE_ID", "cx-engine-0001")
    with pytest.raises(InputError, match="GOOGLE_VISION_API_KEY.*SERPER_API_KEY"):
        choose_live_backends()
    with pytest.raises(InputError, match="unknown live text backend 'bing'"):
        choose_live_backends(text="bing")


def test_a_backend_without_its_key_says_which_variable():
    web = MockWeb()
    backend = SerperTextSearch(http_options=fast_http(web))
    with pytest.raises(InputError, match="SERPER_API_KEY"):
        backend.search("anything")
    assert web.requests == []


def test_empty_answers_from_lens_and_readers():
    _, _, _, lens = run_backend("serper_lens", json_response({"organic": [], "credits": 3}))
    assert lens.search(ImageRef(QUERY_IMAGE_URL)) == []
    _, _, _, jina = run_backend(
        "jina", raw_response("Title: Empty\n\nMarkdown Content:\n\n", "text/plain")
    )
    with pytest.raises(ToolError, match="no readable text"):
        jina.read(PAGE_URL)
    _, _, _, direct = run_backend(
        "direct", raw_response("<html><body><script>x()</script></body></html>", "text/html")
    )
    with pytest.raises(ToolError, match="no readable text"):
        direct.read(PAGE_URL)


def test_a_page_without_a_title_is_named_by_its_url():
    page = page_from_fetch(
        {"status": 200, "content_type": "text/html", "text": "<p>Only a paragraph.</p>"},
        "https://x.example.org/untitled",
    )
    assert page.title == "https://x.example.org/untitled" and page.paragraphs == [
        "Only a paragraph."
    ]
    assert page.image is None and page.links == []
