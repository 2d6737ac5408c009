"""The toolbox turns every failure into an error observation and caches what it returns."""

from PIL import Image

from vsearcher_lite.cache import ToolCache
from vsearcher_lite.tools.base import (
    ImageHit,
    ImageSearchBackend,
    PageReader,
    SearchHit,
    Summariser,
    TextSearchBackend,
    ToolError,
    tool_schemas,
)
from vsearcher_lite.tools.toolbox import Toolbox
from vsearcher_lite.world.model import ImageRef, PageContent


class FakeText(TextSearchBackend):
    def __init__(self):
        self.calls = 0

    def search(self, query, k=5):
        self.calls += 1
        return [
            SearchHit(f"https://wiki.sandbox.test/wiki/P{i}", f"Page {i}", f"about {query}")
            for i in range(8)
        ]


class FakeImage(ImageSearchBackend):
    def search(self, image, k=5):
        return [
            ImageHit("https://wiki.sandbox.test/wiki/Img", "Img", ImageRef("images/x.png"), 0.9)
        ]


class FakeReader(PageReader):
    def read(self, url):
        if "missing" in url:
            raise ToolError(f"no page at {url}")
        if "crash" in url:
            raise ZeroDivisionError("backend bug")
        return PageContent(url, "Page", ["First sentence.", "Second sentence."])


class FirstParagraph(Summariser):
    def summarise(self, page, goal):
        return page.paragraphs[0]


def make(cache=None, top_k=5):
    return Toolbox(
        FakeText(), FakeImage(), FakeReader(), FirstParagraph(), cache=cache, top_k=top_k
    )


def test_schemas_are_generated_from_the_specs():
    names = [s["function"]["name"] for s in tool_schemas()]
    assert names == ["text_search", "image_search", "visit"]
    visit = tool_schemas()[2]["function"]["parameters"]
    assert visit["required"] == ["url", "goal"] and set(visit["properties"]) == {"url", "goal"}
    assert tool_schemas()[1]["function"]["parameters"]["required"] == []


def test_text_search_keeps_top_k_and_formats_hits():
    r = make(top_k=3).call("text_search", {"query": "red bridge"})
    assert r.ok and r.text.startswith('Results for "red bridge"')
    assert len(r.data["hits"]) == 3 and "3. Page 2" in r.text and "4." not in r.text


def test_errors_become_observations():
    tb = make()
    cases = [
        ("nope", None, "unknown tool 'nope'"),
        ("text_search", {}, "missing required argument 'query'"),
        ("text_search", {"query": "   "}, "non-empty string"),
        ("text_search", {"query": "x", "extra": 1}, "unknown argument(s) extra"),
        ("text_search", "a string", "must be a JSON object"),
        ("visit", {"url": "https://wiki.sandbox.test/missing", "goal": "g"}, "no page at"),
        ("visit", {"url": "https://wiki.sandbox.test/crash", "goal": "g"}, "ZeroDivisionError"),
        ("image_search", {}, "no image"),
    ]
    for name, args, expected in cases:
        r = tb.call(name, args)
        assert not r.ok and r.text.startswith("Error:") and expected in r.text, (name, args, r.text)
    assert tb.errors == len(cases) and sum(tb.counts.values()) == 0


def test_image_search_returns_images_and_visit_summarises(tmp_path):
    img = tmp_path / "q.png"
    Image.new("RGB", (8, 8), "red").save(img)
    tb = make()
    r = tb.call("image_search", {}, question_image=ImageRef(str(img)))
    assert r.ok and len(r.images) == 1 and "https://wiki.sandbox.test/wiki/Img" in r.text
    v = tb.call("visit", {"url": "https://wiki.sandbox.test/wiki/A", "goal": "when"})
    assert v.ok and "First sentence." in v.text and "Second" not in v.text
    assert tb.counts == {"text_search": 0, "image_search": 1, "visit": 1}


def test_cache_replays_observations(tmp_path):
    cache = ToolCache(tmp_path / "c.sqlite")
    tb = make(cache)
    first = tb.call("text_search", {"query": "q"})
    second = tb.call("text_search", {"query": "q"})
    assert first.text == second.text and tb.text.calls == 1
    assert (cache.hits, cache.misses) == (1, 1)
    replay_cache = ToolCache(tmp_path / "c.sqlite", mode="replay")
    replay = make(replay_cache)
    assert replay.call("text_search", {"query": "q"}).text == first.text
    assert replay.text.calls == 0, "a recorded call is served from the cache"
    # A miss goes to the backend (which must itself be offline in replay) and stores nothing.
    assert replay.call("text_search", {"query": "other"}).ok and replay.text.calls == 1
    assert len(replay_cache) == 1


def test_errors_are_not_cached(tmp_path):
    cache = ToolCache(tmp_path / "c.sqlite")
    tb = make(cache)
    r = tb.call("visit", {"url": "https://wiki.sandbox.test/missing", "goal": "g"})
    assert not r.ok and len(cache) == 0
