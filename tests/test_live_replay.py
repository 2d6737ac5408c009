"""Record a live session into the tool cache, then replay it with the network and the keys gone.

The replay must give identical tool observations (successes and recorded errors alike), never
send a request (the transport fails the test if it is called), and the cache file must hold no
secret value.
"""

from __future__ import annotations

import json

import httpx
import pytest
from fixtures.recorded.mockweb import (
    JPEG_BYTES,
    PNG_BYTES,
    SECRET,
    MockWeb,
    fast_http,
    forbidden_transport,
    json_response,
    raw_response,
    stub_resolver,
    text_response,
    timeout,
)
from test_live_world import UA, wiki_web

from vsearcher_lite.cache import CacheMiss, ToolCache
from vsearcher_lite.live.knowledge import LiveKnowledge
from vsearcher_lite.live.read import JINA_URL
from vsearcher_lite.live.search import (
    SERPER_SEARCH_URL,
    VISION_URL,
    ReplayMiss,
    SerperTextSearch,
)
from vsearcher_lite.live.tools import make_live_backends
from vsearcher_lite.net.guard import UrlGuard
from vsearcher_lite.tools.base import ToolError
from vsearcher_lite.tools.sandbox import ExtractiveSummariser
from vsearcher_lite.tools.toolbox import Toolbox
from vsearcher_lite.world.model import ImageRef

KEYS = {
    "SERPER_API_KEY": SECRET,
    "GOOGLE_VISION_API_KEY": SECRET + "-vision",
    "JINA_API_KEY": SECRET + "-jina",
}
OTHER_VARS = ("GOOGLE_CSE_KEY", "GOOGLE_API_KEY", "GOOGLE_CSE_ID", "VSEARCHER_ENV_FILE")


def no_dns(host, port, *args, **kwargs):
    raise AssertionError(f"replay must not resolve {host}")


def live_web() -> MockWeb:
    def serper(request: httpx.Request) -> httpx.Response:
        q = json.loads(request.content)["q"]
        return json_response("serper_search_empty.json" if q == "zqxjv" else "serper_search.json")

    def jina(request: httpx.Request) -> httpx.Response:
        target = str(request.url)[len(JINA_URL) :]
        if target.startswith("https://gone.example.org"):
            return json_response(
                {"data": None, "code": 404, "message": "target returned 404"}, status=404
            )
        return text_response("jina_reader.txt")

    image = raw_response(JPEG_BYTES, "image/jpeg")
    return (
        MockWeb()
        .add("POST", SERPER_SEARCH_URL, serper)
        .add("POST", VISION_URL, json_response("vision_web_detection.json"))
        .add("GET", JINA_URL, jina)
        .add("GET", "https://heritage.example.org/img/broken-link.jpg", httpx.Response(404))
        .add(
            "GET",
            "https://blog.example.net/media/not-an-image.jpg",
            raw_response("<html></html>", "image/jpeg"),
        )
        .add("GET", "https://", image)
    )


def session(toolbox: Toolbox, question_image: ImageRef) -> list[dict]:
    calls = [
        ("text_search", {"query": "oldmere abbey"}),
        ("text_search", {"query": "zqxjv"}),
        ("image_search", {}),
        (
            "visit",
            {
                "url": "https://heritage.example.org/oldmere",
                "goal": "When was the chapter house rebuilt?",
            },
        ),
        ("visit", {"url": "https://gone.example.org/page", "goal": "anything"}),
        ("visit", {"url": "https://private.example.com/", "goal": "anything"}),
        ("visit", {"url": "file:///etc/passwd", "goal": "anything"}),
    ]
    return [
        toolbox.call(name, args, question_image=question_image).to_dict() for name, args in calls
    ]


@pytest.fixture
def question_image(tmp_path):
    path = tmp_path / "question.png"
    path.write_bytes(PNG_BYTES)
    return ImageRef(str(path))


def test_record_then_replay_gives_identical_observations_offline(
    tmp_path, monkeypatch, question_image
):
    for var in OTHER_VARS:
        monkeypatch.delenv(var, raising=False)
    for var, value in KEYS.items():
        monkeypatch.setenv(var, value)
    cache_path = tmp_path / "live_cache.sqlite"
    web = live_web()
    guard = UrlGuard(resolver=stub_resolver({"private.example.com": "192.168.1.20"}))
    recording = make_live_backends(
        cache=ToolCache(cache_path),
        guard=guard,
        http_options=fast_http(web),
        summariser=ExtractiveSummariser(),
    )
    assert (
        recording.describe()["image_search"] == "vision"
        and recording.describe()["reader"] == "jina"
    )
    recorded = session(recording.toolbox(), question_image)

    assert [r["ok"] for r in recorded] == [True, True, True, True, False, False, False]
    assert len(recorded[2]["images"]) == 5
    assert "1312" in recorded[3]["text"]
    sent = len(web.requests)
    assert sent > 0

    for var in KEYS:
        monkeypatch.delenv(var)  # a class sharing the recording has no keys
    replay_cache = ToolCache(cache_path, mode="replay")
    replaying = make_live_backends(
        cache=replay_cache,
        guard=UrlGuard(resolver=no_dns),
        http_options=fast_http(forbidden_transport()),
        summariser=ExtractiveSummariser(),
    )
    assert replaying.describe() == recording.describe()  # chosen from what was recorded
    replayed = session(replaying.toolbox(), question_image)

    assert replayed == recorded
    assert len(web.requests) == sent
    assert replay_cache.hits >= len(recorded)

    # The recording holds no key, in its rows or anywhere in the database files.
    dump = json.dumps(ToolCache(cache_path).entries())
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("live_cache.sqlite*"))
    for value in KEYS.values():
        assert value not in dump
        assert value.encode() not in raw


def test_replay_miss_is_a_clear_tool_error(tmp_path):
    cache = ToolCache(tmp_path / "empty.sqlite", mode="replay")
    backend = SerperTextSearch(cache=cache, http_options=fast_http(forbidden_transport()))
    with pytest.raises(ReplayMiss, match="not recorded") as err:
        backend.search("never asked")
    assert isinstance(err.value, CacheMiss)
    toolbox = Toolbox(backend, None, None, None)
    result = toolbox.call("text_search", {"query": "never asked"})
    assert not result.ok and "not recorded" in result.text


def test_readwrite_cache_serves_repeats_and_never_pins_failures(tmp_path):
    cache = ToolCache(tmp_path / "c.sqlite")
    web = MockWeb().add(
        "POST",
        SERPER_SEARCH_URL,
        httpx.Response(401, text="bad key"),
        httpx.Response(503),
        json_response("serper_search.json"),
    )
    backend = SerperTextSearch(
        api_key=SECRET, cache=cache, http_options=fast_http(web, max_retries=0)
    )
    with pytest.raises(ToolError, match="SERPER_API_KEY"):
        backend.search("oldmere abbey")
    with pytest.raises(ToolError, match="503"):
        backend.search("oldmere abbey")
    assert len(cache) == 0  # a key problem or an outage is not an answer worth keeping
    first = backend.search("oldmere abbey")
    again = backend.search("oldmere abbey")
    assert first == again and len(web.requests) == 3 and len(cache) == 1
    entry = cache.entries()[0]
    assert entry["namespace"] == "live.serper.search"
    assert entry["request"] == {
        "url": SERPER_SEARCH_URL,
        "body": {"q": "oldmere abbey", "gl": "us", "hl": "en", "num": 10},
    }
    # the raw JSON
    assert entry["response"]["organic"][0]["link"] == "https://en.wikipedia.org/wiki/Oldmere_Abbey"


def test_transient_page_failures_are_not_recorded(tmp_path):
    cache = ToolCache(tmp_path / "c.sqlite")
    web = MockWeb().add("GET", JINA_URL, timeout, text_response("jina_reader.txt"))
    backends = make_live_backends(
        cache=cache,
        reader="jina",
        text="serper",
        image="vision",
        guard=UrlGuard(resolver=stub_resolver()),
        http_options=fast_http(web, max_retries=0),
        summariser=ExtractiveSummariser(),
    )
    with pytest.raises(ToolError, match="timed out"):
        backends.reader.read("https://heritage.example.org/oldmere")
    assert len(cache) == 0
    assert "1147" in backends.reader.read("https://heritage.example.org/oldmere").text
    assert len(cache) == 1


def test_live_knowledge_record_and_replay(tmp_path):
    cache_path = tmp_path / "wiki.sqlite"
    web = wiki_web()
    kb = LiveKnowledge(
        cache=ToolCache(cache_path), http_options=fast_http(web), user_agent=UA, window=3
    )
    seeds = kb.seeds()
    page = kb.page("Q4200001")
    found = kb.find("Oldmere Abbey")
    with pytest.raises(LookupError):
        kb.page("Q4200017")  # its article answers 404: recorded as such
    sent = len(web.requests)

    again = LiveKnowledge(
        cache=ToolCache(cache_path, mode="replay"),
        user_agent=UA,
        window=3,
        http_options=fast_http(forbidden_transport()),
    )
    assert again.seeds() == seeds
    assert again.page("Q4200001") == page
    assert again.find("Oldmere Abbey") == found
    with pytest.raises(LookupError, match="Brackwater Viaduct"):
        again.page("Q4200017")
    with pytest.raises(CacheMiss):
        again.entity("Q4200042")  # never asked while recording
    assert len(web.requests) == sent


def test_replay_picks_the_backends_the_recording_used(tmp_path):
    path = tmp_path / "c.sqlite"
    writer = ToolCache(path)
    writer.put("live.google_cse", {"q": 1}, {"items": []})
    writer.put("live.serper.lens", {"q": 2}, {"organic": []})
    writer.put("tools", {"q": 3}, {"text": "not a live service"})
    chosen = make_live_backends(
        cache=ToolCache(path, mode="replay"), summariser=ExtractiveSummariser()
    ).describe()
    assert chosen == {
        "text_search": "google_cse",
        "image_search": "serper_lens",
        "reader": "direct",
        "summariser": "extractive",
    }
