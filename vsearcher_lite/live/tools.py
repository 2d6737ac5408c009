"""Live web backends for the three agent tools (paper appendix A.1), chosen from the keys that
are set; in ``replay`` mode, what the recording used (no keys needed).
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vsearcher_lite.cache import ToolCache
from vsearcher_lite.chat import ChatBackend
from vsearcher_lite.live import read, search
from vsearcher_lite.live.secrets import get_secret
from vsearcher_lite.net.guard import UrlGuard
from vsearcher_lite.runio import InputError
from vsearcher_lite.tools.base import ImageSearchBackend, PageReader, Summariser, TextSearchBackend

TEXT_BACKENDS = ("serper", "google_cse")
IMAGE_BACKENDS = ("vision", "serper_lens")
READERS = ("jina", "direct")


@dataclass
class LiveBackends:
    """The four backends a live ``Toolbox`` needs."""

    text: TextSearchBackend
    image: ImageSearchBackend
    reader: PageReader
    summariser: Summariser

    def describe(self) -> dict:
        """Which backend serves each tool (names only: safe for manifests and logs)."""
        return {"text_search": self.text.name, "image_search": self.image.name,
                "reader": self.reader.name, "summariser": self.summariser.name}

    def toolbox(self, **kwargs: Any):
        from vsearcher_lite.tools.toolbox import Toolbox

        return Toolbox(self.text, self.image, self.reader, self.summariser, **kwargs)


def _has(var: str, env_file: str | None) -> bool:
    return get_secret(var, env_file=env_file, required=False) is not None


def _recorded_namespaces(cache: ToolCache | None) -> set[str]:
    """The live services a cache holds responses from (names only; responses are not loaded)."""
    if cache is None or cache.mode == "off" or not Path(cache.path).exists():
        return set()
    try:
        query = "SELECT DISTINCT namespace FROM calls WHERE namespace LIKE 'live.%'"
        with closing(sqlite3.connect(f"file:{Path(cache.path).resolve()}?mode=ro", uri=True)) as db:
            rows = db.execute(query).fetchall()
        return {r[0] for r in rows}
    except sqlite3.Error:  # e.g. a WAL database in a read-only folder: read it the slow way
        return {e["namespace"] for e in cache.entries() if e["namespace"].startswith("live.")}


#: The start of a missing-key message: the three tools are set up together, so any call needs the
#: text and image search keys.
_WHOLE_TOOLBOX = "the live toolbox (its three tools are set up together, whichever is called)"


def choose_live_backends(*, cache: ToolCache | None = None, env_file: str | None = None,
                         text: str | None = None, image: str | None = None,
                         reader: str | None = None) -> dict:
    """Backend names per tool: the explicit choice, else what the keys allow (in replay mode, what
    the recording used); a tool no key can serve raises ``InputError`` naming the variables."""
    choices = ((text, TEXT_BACKENDS, "text"), (image, IMAGE_BACKENDS, "image"),
               (reader, READERS, "reader"))
    for value, allowed, what in choices:
        if value is not None and value not in allowed:
            raise InputError(f"unknown live {what} backend {value!r}; "
                             f"choose one of {', '.join(allowed)}")
    if cache is not None and cache.mode == "replay":
        recorded = _recorded_namespaces(cache)
        def only(ns: str, other: str) -> bool:
            return ns in recorded and other not in recorded

        text = text or ("google_cse" if only(search.NS_CSE, search.NS_SERPER) else "serper")
        image = image or ("serper_lens" if only(search.NS_LENS, search.NS_VISION) else "vision")
        reader = reader or ("jina" if only(read.NS_JINA, read.NS_FETCH) else "direct")
        return {"text": text, "image": image, "reader": reader}
    if text is None:
        if _has("SERPER_API_KEY", env_file):
            text = "serper"
        elif _has("GOOGLE_CSE_ID", env_file) and (_has("GOOGLE_CSE_KEY", env_file)
                                                  or _has("GOOGLE_API_KEY", env_file)):
            text = "google_cse"
        else:
            raise InputError(
                f"{_WHOLE_TOOLBOX} needs a text-search key: set $SERPER_API_KEY (Serper, the "
                "default; https://serper.dev) or $GOOGLE_CSE_KEY and $GOOGLE_CSE_ID (Google Custom "
                "Search, existing customers only)"
            )
    if image is None:
        if _has("GOOGLE_VISION_API_KEY", env_file):
            image = "vision"
        elif _has("SERPER_API_KEY", env_file):
            image = "serper_lens"
        else:
            raise InputError(
                f"{_WHOLE_TOOLBOX} needs an image-search key: set $GOOGLE_VISION_API_KEY (Cloud "
                "Vision web detection) or $SERPER_API_KEY (Serper Lens; needs public image URLs)"
            )
    if reader is None:
        reader = "jina" if _has("JINA_API_KEY", env_file) else "direct"
    return {"text": text, "image": image, "reader": reader}


def make_live_backends(*, chat: ChatBackend | None = None, cache: ToolCache | None = None,
                       env_file: str | None = None, text: str | None = None,
                       image: str | None = None, reader: str | None = None,
                       guard: UrlGuard | None = None, http_options: dict | None = None,
                       summariser: Summariser | None = None) -> LiveBackends:
    """Live backends for the three tools; ``chat`` writes visit summaries (else extractive)."""
    names = choose_live_backends(cache=cache, env_file=env_file, text=text, image=image,
                                 reader=reader)
    common = {"cache": cache, "env_file": env_file, "http_options": http_options}
    serper = names["text"] == "serper"
    text_class = search.SerperTextSearch if serper else search.GoogleCustomSearch
    text_backend: TextSearchBackend = text_class(**common)
    image_backend: ImageSearchBackend = (
        search.VisionWebDetection(guard=guard, **common) if names["image"] == "vision"
        else search.SerperLens(**common))
    reader_class = read.JinaReader if names["reader"] == "jina" else read.DirectFetchReader
    reader_backend: PageReader = reader_class(guard=guard, **common)
    if summariser is None:
        summariser = (read.LLMSummariser(chat) if chat is not None
                      else read.default_offline_summariser())
    return LiveBackends(text_backend, image_backend, reader_backend, summariser)
