"""The toolbox: the three tools as the agent sees them, over one set of backends.

``Toolbox.call`` never raises: every failure becomes an error observation the agent can recover
from. Successful calls are cached by tool, arguments and (image search) the question image's
hash, so reruns see the same observations. One toolbox serves many episode threads at once.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any

from vsearcher_lite.cache import CacheMiss, ToolCache
from vsearcher_lite.runio import RunDir
from vsearcher_lite.tools.base import (
    IMAGE_SEARCH,
    TEXT_SEARCH,
    TOOL_SPECS,
    VISIT,
    ImageHit,
    ImageSearchBackend,
    PageReader,
    SearchHit,
    Summariser,
    TextSearchBackend,
    ToolArgumentError,
    ToolError,
    ToolResult,
)
from vsearcher_lite.world.model import ImageRef

DEFAULT_TOP_K = 5  # paper A.1: the top 5 results of each search
MAX_SUMMARY_CHARS = 1500


def format_text_hits(query: str, hits: list[SearchHit]) -> str:
    """The observation for a text search.

    >>> print(format_text_hits("red bridge", [SearchHit("https://x.test/a", "A", "A red bridge.")]))
    Results for "red bridge":
    1. A
       URL: https://x.test/a
       A red bridge.
    """
    if not hits:
        return f'No results for "{query}". Try other keywords.'
    lines = [f'Results for "{query}":']
    for i, h in enumerate(hits, start=1):
        lines.append(f"{i}. {h.title or h.url}")
        lines.append(f"   URL: {h.url}")
        if h.snippet:
            lines.append(f"   {h.snippet}")
    return "\n".join(lines)


def format_image_hits(hits: list[ImageHit]) -> str:
    """The observation for an image search; the matching images travel as image parts."""
    if not hits:
        return "No pages with a similar image were found."
    lines = ["Pages that contain a similar image:"]
    for i, h in enumerate(hits, start=1):
        lines.append(f"{i}. {h.title or h.url}")
        lines.append(f"   URL: {h.url}")
    return "\n".join(lines)


def format_visit(url: str, title: str, summary: str) -> str:
    summary = summary.strip()
    if len(summary) > MAX_SUMMARY_CHARS:
        summary = summary[: MAX_SUMMARY_CHARS - 3].rstrip() + "..."
    return f"Page: {title}\nURL: {url}\nRelevant content:\n{summary}"


def image_fingerprint(image: ImageRef) -> str:
    """A stable cache key for the question image: its bytes for a local file, else its URL."""
    if image.is_url:
        return "url:" + image.location
    path = Path(image.location)
    if not path.exists():
        raise ToolError(f"the question image {image.location} does not exist")
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


class Toolbox:
    """The agent-facing tools over one set of backends (sandbox or live)."""

    def __init__(self, text: TextSearchBackend, image: ImageSearchBackend, reader: PageReader,
                 summariser: Summariser, *, cache: ToolCache | None = None,
                 top_k: int = DEFAULT_TOP_K, namespace: str = "tools",
                 run_dir: str | Path | None = None):
        self.text, self.image, self.reader, self.summariser = text, image, reader, summariser
        self.cache = cache
        # The cache lies in a run: its answers name that run's images relative to it.
        self.run = RunDir(run_dir) if run_dir is not None else None
        self.top_k = top_k
        self.namespace = namespace
        self.counts: dict[str, int] = {name: 0 for name in TOOL_SPECS}
        self.errors = 0
        self._count_lock = threading.Lock()

    @property
    def specs(self):
        return list(TOOL_SPECS.values())

    def call(self, name: str, arguments: Any = None, *,
             question_image: ImageRef | None = None) -> ToolResult:
        spec = TOOL_SPECS.get(name)
        if spec is None:
            self._count(None)
            tools = ", ".join(TOOL_SPECS)
            return ToolResult.error(str(name), f"unknown tool '{name}'. Available tools: {tools}.")
        try:
            args = spec.validate({} if arguments is None else arguments)
            result = self._cached(name, args, question_image)
        except (ToolArgumentError, ToolError, CacheMiss) as exc:
            self._count(None)
            return ToolResult.error(name, str(exc))
        except Exception as exc:  # a backend bug or outage must not end the rollout
            self._count(None)
            return ToolResult.error(name, f"the {name} tool failed ({type(exc).__name__}: {exc})")
        self._count(name)
        return result

    def _count(self, name: str | None) -> None:
        """One successful call of tool ``name``, or (``None``) one error."""
        with self._count_lock:
            if name is None:
                self.errors += 1
            else:
                self.counts[name] += 1

    def _cached(self, name: str, args: dict, question_image: ImageRef | None) -> ToolResult:
        if name == IMAGE_SEARCH.name:
            if question_image is None:
                raise ToolError("this question has no image to search with")
            request = {"tool": name, "image": image_fingerprint(question_image), "k": self.top_k}
        else:
            request = {"tool": name, "args": args, "k": self.top_k}
        if self.cache is None:
            return self._run(name, args, question_image)
        stored = self.cache.get(self.namespace, request)
        if stored is not None:
            self.cache.count(hit=True)
            return ToolResult.from_dict(self.run.resolve(stored) if self.run else stored)
        # A miss runs the backend even in replay mode: live backends replay their own recorded
        # responses. Errors are not stored, so a replay re-derives them as the recording did.
        self.cache.count(hit=False)
        result = self._run(name, args, question_image)
        stored = result.to_dict()
        self.cache.put(self.namespace, request, self.run.relative(stored) if self.run else stored)
        return result

    def _run(self, name: str, args: dict, question_image: ImageRef | None) -> ToolResult:
        if name == TEXT_SEARCH.name:
            hits = self.text.search(args["query"], self.top_k)[: self.top_k]
            return ToolResult(name, format_text_hits(args["query"], hits),
                              data={"hits": [h.__dict__ for h in hits]})
        if name == IMAGE_SEARCH.name:
            hits = self.image.search(question_image, self.top_k)[: self.top_k]
            return ToolResult(
                name, format_image_hits(hits), images=[h.image for h in hits if h.image],
                data={"hits": [{"url": h.url, "title": h.title, "score": h.score} for h in hits]})
        if name == VISIT.name:
            page = self.reader.read(args["url"])
            summary = self.summariser.summarise(page, args["goal"])
            return ToolResult(name, format_visit(page.url, page.title, summary),
                              data={"url": page.url, "title": page.title})
        raise ToolError(f"unknown tool '{name}'")  # unreachable: names are checked in call()
