"""Live web backends for the three agent tools (paper appendix A.1), with record and replay.

Text search
    ``SerperTextSearch`` (the default; https://google.serper.dev/search, key in ``$SERPER_API_KEY``)
    and ``GoogleCustomSearch`` (the paper's backend; ``$GOOGLE_CSE_KEY`` + ``$GOOGLE_CSE_ID``.
    Google closed Custom Search to new customers, so this adapter is for existing keys).
Image search
    ``VisionWebDetection`` (the paper's backend: Cloud Vision WEB_DETECTION, ``$GOOGLE_VISION_API_KEY``):
    the pages with matching images, keeping only pages whose image is reachable and really an
    image, one image per page, top 5. ``SerperLens`` (Google Lens through Serper) needs a public
    image URL.
Visit
    ``JinaReader`` (https://r.jina.ai/, ``$JINA_API_KEY`` optional) or ``DirectFetchReader``
    (a GET through the SSRF guard, HTML to text locally; the default without a Jina key), then
    ``LLMSummariser`` (a goal-conditioned summary through any chat backend, falling back to the
    offline extractive summary) or the extractive summariser itself.

``make_live_backends`` picks backends from the keys that are set.

Record and replay: every backend takes an optional ``ToolCache``. Each live request (with no
key, header or other secret in it) is stored with the service's raw response, through
``cache.get_or_call``. With the cache in ``replay`` mode the backends serve only what was
recorded, never open a connection and need no keys; a request that was never recorded raises
``ReplayMiss`` (a ``ToolError``, so the agent reads it as an error observation).

Only answers that would come back the same next time are recorded: 2xx responses, and for
page readers the page's own "gone" statuses (404, 410, 451 ...). Throttling, outages and key
problems (401/403) are never stored, so fixing a key or waiting out an outage is enough.
"""

from __future__ import annotations

import base64
import hashlib
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

from vsearcher_lite.cache import CacheMiss, ToolCache
from vsearcher_lite.chat import ChatBackend, ChatError
from vsearcher_lite.net.guard import BlockedUrl, UrlGuard
from vsearcher_lite.net.http import HttpClient, HttpError
from vsearcher_lite.net.secrets import get_secret, redact, remember_secret
from vsearcher_lite.runio import InputError
from vsearcher_lite.tools.base import (
    ImageHit,
    ImageSearchBackend,
    PageReader,
    SearchHit,
    Summariser,
    TextSearchBackend,
    ToolError,
)
from vsearcher_lite.tools.live_html import cap_paragraphs, cap_text, html_to_page, normalise_space, sniff_image_type
from vsearcher_lite.tools.live_parse import (
    is_http_url,
    parse_google_cse,
    parse_jina_body,
    parse_serper_lens,
    parse_serper_search,
    parse_vision_response,
)
from vsearcher_lite.world.model import ImageRef, PageContent

SERPER_SEARCH_URL = "https://google.serper.dev/search"
SERPER_LENS_URL = "https://google.serper.dev/lens"
GOOGLE_CSE_URL = "https://www.googleapis.com/customsearch/v1"
VISION_URL = "https://vision.googleapis.com/v1/images:annotate"
JINA_URL = "https://r.jina.ai/"

# Cache namespaces of the raw responses, one per service.
NS_SERPER = "live.serper.search"
NS_CSE = "live.google_cse"
NS_VISION = "live.vision"
NS_IMAGE_CHECK = "live.image_check"
NS_LENS = "live.serper.lens"
NS_JINA = "live.jina"
NS_FETCH = "live.fetch"

DEFAULT_MAX_PAGE_CHARS = 20000  # text kept from a read page
DEFAULT_MAX_PAGE_BYTES = 2_000_000  # bytes read from a fetched page
DEFAULT_SUMMARY_PAGE_CHARS = 12000  # page text given to the LLM summariser
# Statuses of a *page* (not of our API account) that are worth remembering: the page is gone.
PAGE_GONE_STATUSES = frozenset({400, 404, 410, 422, 451})

# Per-service HTTP settings: search APIs are quick and paid per call, pages are slow.
API_HTTP = dict(timeout=20.0, max_retries=4, backoff_base=0.5, backoff_max=30.0, total_timeout=90.0,
                rate_per_s=5.0, max_concurrency=4)
PAGE_HTTP = dict(timeout=20.0, max_retries=2, backoff_base=0.5, backoff_max=10.0, total_timeout=60.0,
                 rate_per_s=5.0, max_concurrency=4)
IMAGE_CHECK_HTTP = dict(timeout=5.0, max_retries=1, backoff_base=0.25, backoff_max=2.0, total_timeout=12.0,
                        rate_per_s=10.0, max_concurrency=4)


class ReplayMiss(ToolError, CacheMiss):
    """Replay mode: the recording has no response for this request (and the network is off)."""


# ---------------------------------------------------------------------------------------------
# Shared plumbing


class _HttpBackend:
    """A lazily built ``HttpClient`` with this backend's key, and record/replay through the cache.

    The key and the client are resolved on the first live call, so a backend in replay mode
    needs neither.
    """

    service = "live"
    key_var: str | None = None
    key_required = True
    http_defaults: dict = API_HTTP

    def __init__(self, api_key: str | None = None, *, client: HttpClient | None = None,
                 cache: ToolCache | None = None, env_file: str | None = None, http_options: dict | None = None):
        self._api_key = api_key or None
        if self._api_key:
            remember_secret(self._api_key)  # so redact() masks it wherever text leaves the program
        self._client = client
        self.cache = cache
        self.env_file = env_file
        self.http_options = dict(http_options or {})
        self._lock = threading.Lock()

    def api_key(self) -> str | None:
        if self._api_key is None and self.key_var:
            self._api_key = get_secret(self.key_var, env_file=self.env_file, required=self.key_required)
        return self._api_key

    @property
    def client(self) -> HttpClient:
        with self._lock:
            if self._client is None:
                key = self.api_key()
                options = {**self.http_defaults, **self.http_options}
                self._client = HttpClient(self.service, key_var=self.key_var, secrets=[key] if key else [], **options)
            return self._client

    def _recorded(self, namespace: str, request: dict, live_call: Callable[[], Any]) -> Any:
        """``live_call()``'s result, recorded in (or replayed from) the cache when there is one."""
        if self.cache is None:
            return live_call()
        try:
            return self.cache.get_or_call(namespace, request, live_call)
        except ReplayMiss:
            raise
        except CacheMiss as exc:
            raise ReplayMiss(
                f"{self.service}: {exc}. This request was not recorded; run once with network access "
                "(cache mode readwrite or record) to record it."
            ) from None

    def _tool_error(self, what: str, exc: Exception) -> ToolError:
        return ToolError(redact(f"{self.service} {what} failed: {exc}"))


def _sha256_file(path: Path) -> tuple[bytes, str]:
    data = path.read_bytes()
    return data, hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------------
# Text search


class SerperTextSearch(_HttpBackend, TextSearchBackend):
    """Google results through Serper: ``POST /search`` with the key in ``X-API-KEY``."""

    name = "serper"
    service = "serper"
    key_var = "SERPER_API_KEY"

    def __init__(self, api_key: str | None = None, *, gl: str = "us", hl: str = "en", **kw: Any):
        super().__init__(api_key, **kw)
        self.gl, self.hl = gl, hl

    def request_body(self, query: str, k: int) -> dict:
        # One Serper credit buys up to 10 results; ask for 10 so a top-k cut never needs a second call.
        return {"q": query, "gl": self.gl, "hl": self.hl, "num": max(10, k)}

    def search(self, query: str, k: int = 5) -> list[SearchHit]:
        body = self.request_body(query, k)
        request = {"url": SERPER_SEARCH_URL, "body": body}

        def live() -> Any:
            return self.client.post_json(SERPER_SEARCH_URL, json=body, headers={"X-API-KEY": self.api_key()})

        try:
            payload = self._recorded(NS_SERPER, request, live)
        except HttpError as exc:
            raise self._tool_error(f"text search for {query!r}", exc) from None
        return parse_serper_search(payload, k)


class GoogleCustomSearch(_HttpBackend, TextSearchBackend):
    """The Custom Search JSON API (the paper's text search). Closed to new customers: for
    existing keys only. Key in ``$GOOGLE_CSE_KEY`` (or ``$GOOGLE_API_KEY``), engine in ``$GOOGLE_CSE_ID``."""

    name = "google_cse"
    service = "google-cse"
    key_var = "GOOGLE_CSE_KEY"

    def __init__(self, api_key: str | None = None, *, engine_id: str | None = None, **kw: Any):
        super().__init__(api_key, **kw)
        self._engine_id = engine_id or None
        if self._engine_id:
            remember_secret(self._engine_id)

    def api_key(self) -> str | None:
        if self._api_key is None:
            self._api_key = (get_secret("GOOGLE_CSE_KEY", env_file=self.env_file, required=False)
                             or get_secret("GOOGLE_API_KEY", env_file=self.env_file, required=False))
            if self._api_key is None:
                raise InputError("missing API key: set $GOOGLE_CSE_KEY (or $GOOGLE_API_KEY) for Google Custom Search")
        return self._api_key

    def engine_id(self) -> str:
        if self._engine_id is None:
            self._engine_id = get_secret("GOOGLE_CSE_ID", env_file=self.env_file, required=True)
        return self._engine_id

    def search(self, query: str, k: int = 5) -> list[SearchHit]:
        num = max(1, min(10, k))  # the API returns at most 10 results per call
        request = {"url": GOOGLE_CSE_URL, "params": {"q": query, "num": num}}

        def live() -> Any:
            params = {"key": self.api_key(), "cx": self.engine_id(), "q": query, "num": num}
            return self.client.get_json(GOOGLE_CSE_URL, params=params)

        try:
            payload = self._recorded(NS_CSE, request, live)
        except HttpError as exc:
            raise self._tool_error(f"text search for {query!r}", exc) from None
        return parse_google_cse(payload, k)


# ---------------------------------------------------------------------------------------------
# Image search


class HttpImageChecker:
    """Is an image URL reachable and really an image? (paper A.1: pages whose similar image is
    reachable from our network and a valid image file).

    GETs the first bytes through an ``HttpClient`` with the SSRF guard (image URLs come from a
    third party) and sniffs them; the ``Content-Type`` a server claims is not trusted. Calling
    the checker returns a bool. Definite answers are recorded in the cache; a transient failure
    (timeout, 5xx) counts as unreachable now and is not recorded, and a replay that finds no
    record for a URL (because its check failed that way while recording) answers False too.
    """

    def __init__(self, client: HttpClient | None = None, *, cache: ToolCache | None = None,
                 guard: UrlGuard | None = None, max_bytes: int = 65536, http_options: dict | None = None):
        self._client = client
        self.cache = cache
        self.guard = guard
        self.max_bytes = max_bytes
        self.http_options = dict(http_options or {})
        self._lock = threading.Lock()

    @property
    def client(self) -> HttpClient:
        with self._lock:
            if self._client is None:
                options = {**IMAGE_CHECK_HTTP, **self.http_options}
                self._client = HttpClient("image-check", guard=self.guard or UrlGuard(), **options)
            return self._client

    def __call__(self, url: str) -> bool:
        return bool(self.check(url)["ok"])

    def check(self, url: str) -> dict:
        """``{"ok": bool, "format": str|None, "reason": str}`` for one image URL."""
        if not is_http_url(url):
            return {"ok": False, "format": None, "reason": "not an http(s) URL"}
        if self.cache is None:
            return self._check_live(url, record=False)
        try:
            return self.cache.get_or_call(NS_IMAGE_CHECK, {"url": url}, lambda: self._check_live(url, record=True))
        except _TransientCheckFailure as exc:
            return {"ok": False, "format": None, "reason": str(exc)}
        except CacheMiss:
            return {"ok": False, "format": None, "reason": "not recorded (unreachable while recording)"}

    def _check_live(self, url: str, *, record: bool) -> dict:
        try:
            response = self.client.get(url, headers={"Range": f"bytes=0-{self.max_bytes - 1}", "Accept": "image/*"},
                                       max_bytes=self.max_bytes)
        except BlockedUrl as exc:
            return {"ok": False, "format": None, "reason": redact(f"blocked: {exc}")}
        except HttpError as exc:
            permanent = exc.status is not None and 400 <= exc.status < 500 and exc.status not in (408, 429)
            if permanent or not record:
                return {"ok": False, "format": None, "reason": redact(str(exc))}
            raise _TransientCheckFailure(redact(str(exc))) from None
        kind = sniff_image_type(response.content, response.headers.get("content-type", ""))
        claimed = response.headers.get("content-type", "?")
        reason = f"a {kind} image" if kind else f"not an image (content-type {claimed})"
        return {"ok": kind is not None, "format": kind, "reason": reason}


class _TransientCheckFailure(RuntimeError):
    """An image check failed in a way that may pass next time: do not record it."""


class VisionWebDetection(_HttpBackend, ImageSearchBackend):
    """Reverse image search with Cloud Vision WEB_DETECTION (the paper's image search).

    Walks ``pagesWithMatchingImages`` in order; for each page takes the first matching image
    (full matches first, then partial) that ``image_checker`` accepts; skips the page if none
    passes; stops at ``k`` pages. A local image is sent as bytes, a URL as ``imageUri``.
    """

    name = "vision"
    service = "cloud-vision"
    key_var = "GOOGLE_VISION_API_KEY"

    def __init__(self, api_key: str | None = None, *, max_results: int = 20,
                 image_checker: Callable[[str], bool] | None = None, check_workers: int = 4,
                 guard: UrlGuard | None = None, **kw: Any):
        super().__init__(api_key, **kw)
        self.max_results = max_results
        self.check_workers = max(1, check_workers)
        self.image_checker = image_checker or HttpImageChecker(cache=self.cache, guard=guard,
                                                               http_options=self.http_options)

    def _image_payload(self, image: ImageRef) -> tuple[dict, dict]:
        """The ``image`` field of the request, and its secret-free, compact record form."""
        if image.is_url:
            return {"source": {"imageUri": image.location}}, {"image_uri": image.location}
        path = Path(image.location)
        if not path.is_file():
            raise ToolError(f"the question image {image.location} does not exist")
        data, digest = _sha256_file(path)
        return {"content": base64.b64encode(data).decode("ascii")}, {"image_sha256": digest}

    def search(self, image: ImageRef, k: int = 5) -> list[ImageHit]:
        image_field, image_record = self._image_payload(image)
        features = [{"type": "WEB_DETECTION", "maxResults": self.max_results}]
        body = {"requests": [{"image": image_field, "features": features}]}
        request = {"url": VISION_URL, "image": image_record, "features": features}

        def live() -> Any:
            return self.client.post_json(VISION_URL, json=body, headers={"X-Goog-Api-Key": self.api_key()})

        try:
            payload = self._recorded(NS_VISION, request, live)
        except HttpError as exc:
            raise self._tool_error("image search", exc) from None
        return self.select_pages(parse_vision_response(payload), k)

    def select_pages(self, pages: list, k: int) -> list[ImageHit]:
        """The first ``k`` pages that have a checked image, one image per page, in Vision's order."""

        def first_valid_image(page) -> str | None:
            return next((u for u in page.image_urls if self.image_checker(u)), None)

        hits: list[ImageHit] = []
        if not pages:
            return hits
        # Checks run a few at a time; results are consumed in page order, so the outcome does
        # not depend on which check finishes first.
        with ThreadPoolExecutor(max_workers=min(self.check_workers, len(pages))) as pool:
            futures = [pool.submit(first_valid_image, p) for p in pages]
            for page, future in zip(pages, futures):
                image_url = future.result()
                if image_url:
                    hits.append(ImageHit(url=page.url, title=page.title, image=ImageRef(image_url, caption=page.title)))
                    if len(hits) >= k:
                        break
            for f in futures:
                f.cancel()
        return hits


class SerperLens(_HttpBackend, ImageSearchBackend):
    """Google Lens visual matches through Serper (``POST /lens``). Lens fetches the image
    itself, so the question image must be at a public http(s) URL."""

    name = "serper_lens"
    service = "serper-lens"
    key_var = "SERPER_API_KEY"

    def __init__(self, api_key: str | None = None, *, gl: str = "us", hl: str = "en", **kw: Any):
        super().__init__(api_key, **kw)
        self.gl, self.hl = gl, hl

    def search(self, image: ImageRef, k: int = 5) -> list[ImageHit]:
        if not image.is_url:
            raise ToolError(
                f"Serper Lens needs the question image at a public http(s) URL, but {image.location} is a local "
                "file. Host the image publicly, or set $GOOGLE_VISION_API_KEY to search local images with Cloud Vision."
            )
        body = {"url": image.location, "gl": self.gl, "hl": self.hl}
        request = {"url": SERPER_LENS_URL, "body": body}

        def live() -> Any:
            return self.client.post_json(SERPER_LENS_URL, json=body, headers={"X-API-KEY": self.api_key()})

        try:
            payload = self._recorded(NS_LENS, request, live)
        except HttpError as exc:
            raise self._tool_error("image search", exc) from None
        return parse_serper_lens(payload, k)


# ---------------------------------------------------------------------------------------------
# Page readers


def _page_record(response) -> dict:
    return {
        "status": response.status_code,
        "url": str(response.request.url) if response.request is not None else "",
        "content_type": response.headers.get("content-type", ""),
        "text": response.text,
    }


def _gone_record(exc: HttpError) -> dict | None:
    """A recordable record of a page that is not there, or ``None`` for a transient failure."""
    if exc.status in PAGE_GONE_STATUSES:
        return {"status": exc.status, "error": str(exc)}
    return None


class _PageReaderBase(_HttpBackend, PageReader):
    http_defaults = PAGE_HTTP

    def __init__(self, api_key: str | None = None, *, guard: UrlGuard | None = None,
                 max_chars: int = DEFAULT_MAX_PAGE_CHARS, max_bytes: int = DEFAULT_MAX_PAGE_BYTES, **kw: Any):
        super().__init__(api_key, **kw)
        self._guard = guard
        self.max_chars = max_chars
        self.max_bytes = max_bytes

    @property
    def guard(self) -> UrlGuard:
        if self._guard is None:
            self._guard = UrlGuard()
        return self._guard

    def _read_record(self, namespace: str, request: dict, url: str, fetch: Callable[[], Any]) -> dict:
        """The recorded fetch of ``url``: ``{status, url, content_type, text}``; ``ToolError`` otherwise.

        The SSRF guard decides before anything is sent (and ``HttpClient`` checks every
        redirect hop again). A refusal is recorded like a page that is gone, so a replay gives
        the agent the same error text; a host that did not resolve is not recorded (DNS may
        answer next time).
        """
        if not is_http_url(url):
            raise ToolError(f"cannot visit {url!r}: only absolute http(s) URLs can be visited")

        def live() -> dict:
            try:
                self.guard.check(url)
                return _page_record(fetch())
            except BlockedUrl as exc:
                if exc.transient:  # a DNS failure may pass: never record it as the page's answer
                    raise
                return {"status": None, "blocked": True, "error": f"refused for safety: {exc.reason}"}
            except HttpError as exc:
                gone = _gone_record(exc)
                if gone is None:
                    raise
                return gone

        try:
            record = self._recorded(namespace, request, live)
        except BlockedUrl as exc:
            raise ToolError(redact(f"cannot visit {url}: {exc.reason}")) from None
        except HttpError as exc:
            raise self._tool_error(f"reading {url}", exc) from None
        if "error" in record:
            raise ToolError(redact(f"cannot visit {url}: {record['error']}"))
        return record


class JinaReader(_PageReaderBase):
    """Pages through Jina Reader (``GET https://r.jina.ai/<url>``), which returns clean markdown.
    ``$JINA_API_KEY`` is optional (without it, Jina limits requests per IP, about 20 a minute)."""

    name = "jina"
    service = "jina-reader"
    key_var = "JINA_API_KEY"
    key_required = False

    def read(self, url: str) -> PageContent:
        url = url.strip()
        request = {"url": JINA_URL + url}

        def fetch():
            key = self.api_key()
            headers = {"X-Return-Format": "markdown"}
            if key:
                headers["Authorization"] = f"Bearer {key}"
            # Jina wants the target URL verbatim after its own; keep ':' and '/' unescaped.
            return self.client.get(JINA_URL + quote(url, safe=":/?&=#%+@,;~!$'()*[]"), headers=headers,
                                   max_bytes=self.max_bytes)

        record = self._read_record(NS_JINA, request, url, fetch)
        page = parse_jina_body(record.get("text", ""), url, max_chars=self.max_chars)
        page.url = url  # the agent knows the page by the URL it asked for
        if not page.paragraphs:
            raise ToolError(f"Jina Reader returned no readable text for {url}")
        return page


class DirectFetchReader(_PageReaderBase):
    """Pages fetched directly (through the SSRF guard on every redirect hop) and turned into
    text locally with ``html.parser``: title and text blocks, no scripts, styles or menus.
    The default reader when no Jina key is set."""

    name = "direct"
    service = "fetch"
    key_var = None
    key_required = False

    @property
    def client(self) -> HttpClient:
        with self._lock:
            if self._client is None:
                options = {**self.http_defaults, **self.http_options}
                self._client = HttpClient(self.service, guard=self.guard, **options)
            return self._client

    def read(self, url: str) -> PageContent:
        url = url.strip()
        request = {"url": url}

        def fetch():
            headers = {"Accept": "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.5"}
            return self.client.get(url, headers=headers, max_bytes=self.max_bytes)

        record = self._read_record(NS_FETCH, request, url, fetch)
        return page_from_fetch(record, url, max_chars=self.max_chars)


def page_from_fetch(record: dict, url: str, *, max_chars: int = DEFAULT_MAX_PAGE_CHARS) -> PageContent:
    """A ``PageContent`` from a recorded fetch (``status``, ``content_type``, ``text``).

    HTML goes through the local extractor, plain text is split into paragraphs; anything else
    (an image, a PDF, a binary) raises ``ToolError`` naming the URL and the content type.
    """
    content_type = (record.get("content_type") or "").split(";")[0].strip().lower()
    text = record.get("text") or ""
    looks_html = "<html" in text[:2048].lower() or "<body" in text[:4096].lower()
    if content_type in ("text/html", "application/xhtml+xml") or (not content_type and looks_html):
        page = html_to_page(text, url, max_chars=max_chars)
    elif content_type.startswith("text/") or content_type in ("application/json", "application/xml"):
        paragraphs = cap_paragraphs([normalise_space(p) for p in text.split("\n\n") if p.strip()], max_chars)
        page = PageContent(url=url, title=url, paragraphs=paragraphs, kind="web")
    else:
        raise ToolError(f"{url} is not a readable web page (content type {content_type or 'unknown'})")
    page.url = url
    if not page.paragraphs:
        raise ToolError(f"{url} has no readable text")
    return page


# ---------------------------------------------------------------------------------------------
# Summaries

SUMMARY_INSTRUCTIONS = (
    "You help a research agent that is answering a hard question by browsing the web. Below is the "
    "text of one web page, and after it the agent's goal for visiting the page.\n"
    "Report only what the page says that bears on the goal: names, dates, numbers, places and how "
    "they relate, quoted exactly as the page gives them. If the page says nothing relevant, say so "
    "in one sentence. Do not add knowledge from outside the page. Write at most two short paragraphs."
)


def build_summary_messages(page: PageContent, goal: str,
                           max_page_chars: int = DEFAULT_SUMMARY_PAGE_CHARS) -> list[dict]:
    """The chat messages for a goal-conditioned page summary.

    The page text is cut to ``max_page_chars`` *before* it goes into the prompt, and the goal
    comes after the page, so the goal is never lost (the released code cut the whole prompt at
    a token budget and could drop its tail).

    >>> msgs = build_summary_messages(PageContent("https://a.org", "A", ["x " * 100]), "find y", 50)
    >>> msgs[-1]["content"].rstrip().endswith("Goal: find y"), len(msgs[-1]["content"]) < 400
    (True, True)
    """
    text = cap_text(page.text, max_page_chars)
    user = (
        f"Page title: {page.title}\nPage URL: {page.url}\n\n"
        f"--- page text ---\n{text}\n--- end of page text ---\n\n"
        f"Goal: {goal.strip()}\n"
    )
    return [{"role": "system", "content": SUMMARY_INSTRUCTIONS}, {"role": "user", "content": user}]


def default_offline_summariser() -> Summariser:
    """The offline extractive summariser of the sandbox tools."""
    from vsearcher_lite.tools.sandbox import ExtractiveSummariser  # the sandbox owns it

    return ExtractiveSummariser()


class LLMSummariser(Summariser):
    """A goal-conditioned summary written by a chat model (paper A.1 used Qwen2.5-72B-Instruct).

    On a ``ChatError`` or an empty reply it falls back to ``fallback`` (the offline extractive
    summary by default) so a visit still returns something useful; ``fallbacks`` counts those.
    """

    name = "llm"

    def __init__(self, chat: ChatBackend, *, max_page_chars: int = DEFAULT_SUMMARY_PAGE_CHARS,
                 fallback: Summariser | None = None, max_tokens: int = 512, temperature: float = 0.0):
        self.chat = chat
        self.max_page_chars = max_page_chars
        self._fallback = fallback
        self.sampling = {"max_tokens": max_tokens, "temperature": temperature}
        self.fallbacks = 0

    @property
    def fallback(self) -> Summariser:
        if self._fallback is None:
            self._fallback = default_offline_summariser()
        return self._fallback

    def summarise(self, page: PageContent, goal: str) -> str:
        messages = build_summary_messages(page, goal, self.max_page_chars)
        try:
            reply = self.chat.chat(messages, **self.sampling)
        except ChatError:
            reply = ""
        reply = (reply or "").strip()
        if reply:
            return reply
        self.fallbacks += 1
        return self.fallback.summarise(page, goal)


# ---------------------------------------------------------------------------------------------
# Choosing backends from the keys that are set

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
        return {"text_search": self.text.name, "image_search": self.image.name, "reader": self.reader.name,
                "summariser": self.summariser.name}

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
        with closing(sqlite3.connect(f"file:{Path(cache.path).resolve()}?mode=ro", uri=True)) as conn:
            rows = conn.execute("SELECT DISTINCT namespace FROM calls WHERE namespace LIKE 'live.%'").fetchall()
        return {r[0] for r in rows}
    except sqlite3.Error:  # e.g. a WAL database in a read-only folder: read it the slow way
        return {e["namespace"] for e in cache.entries() if e["namespace"].startswith("live.")}


#: The start of a missing-key message: the live toolbox sets up text search, image search and visit
#: together, so a call to any one of them (visit too) needs the text and image search keys.
_WHOLE_TOOLBOX = "the live toolbox (its three tools are set up together, whichever is called)"


def choose_live_backends(*, cache: ToolCache | None = None, env_file: str | None = None,
                         text: str | None = None, image: str | None = None, reader: str | None = None) -> dict:
    """Backend names per tool: the explicit choice, else what the keys allow (Serper for text;
    Vision if ``$GOOGLE_VISION_API_KEY`` else Serper Lens; Jina if ``$JINA_API_KEY`` else a
    direct fetch). In replay mode, what the recording used (no keys needed).

    A tool that no key can serve raises ``InputError`` naming the variable(s) to set.
    """
    choices = ((text, TEXT_BACKENDS, "text"), (image, IMAGE_BACKENDS, "image"), (reader, READERS, "reader"))
    for value, allowed, what in choices:
        if value is not None and value not in allowed:
            raise InputError(f"unknown live {what} backend {value!r}; choose one of {', '.join(allowed)}")
    if cache is not None and cache.mode == "replay":
        recorded = _recorded_namespaces(cache)
        text = text or ("google_cse" if NS_CSE in recorded and NS_SERPER not in recorded else "serper")
        image = image or ("serper_lens" if NS_LENS in recorded and NS_VISION not in recorded else "vision")
        reader = reader or ("jina" if NS_JINA in recorded and NS_FETCH not in recorded else "direct")
        return {"text": text, "image": image, "reader": reader}
    if text is None:
        if _has("SERPER_API_KEY", env_file):
            text = "serper"
        elif (_has("GOOGLE_CSE_KEY", env_file) or _has("GOOGLE_API_KEY", env_file)) and _has("GOOGLE_CSE_ID", env_file):
            text = "google_cse"
        else:
            raise InputError(
                f"{_WHOLE_TOOLBOX} needs a text-search key: set $SERPER_API_KEY (Serper, the default; "
                "https://serper.dev) or $GOOGLE_CSE_KEY and $GOOGLE_CSE_ID (Google Custom Search, existing customers only)"
            )
    if image is None:
        if _has("GOOGLE_VISION_API_KEY", env_file):
            image = "vision"
        elif _has("SERPER_API_KEY", env_file):
            image = "serper_lens"
        else:
            raise InputError(
                f"{_WHOLE_TOOLBOX} needs an image-search key: set $GOOGLE_VISION_API_KEY (Cloud Vision web "
                "detection) or $SERPER_API_KEY (Serper Lens; needs public image URLs)"
            )
    if reader is None:
        reader = "jina" if _has("JINA_API_KEY", env_file) else "direct"
    return {"text": text, "image": image, "reader": reader}


def make_live_backends(*, chat: ChatBackend | None = None, cache: ToolCache | None = None,
                       env_file: str | None = None, text: str | None = None, image: str | None = None,
                       reader: str | None = None, guard: UrlGuard | None = None,
                       http_options: dict | None = None, summariser: Summariser | None = None) -> LiveBackends:
    """Live backends for the three tools, chosen by ``choose_live_backends``.

    ``chat`` gives an ``LLMSummariser`` for visits (else the extractive summary); ``cache``
    records every live response, or replays them when its mode is ``replay``; ``guard`` and
    ``http_options`` (``HttpClient`` keywords such as ``transport``, ``sleep``) are passed to
    every backend, mostly for tests.
    """
    names = choose_live_backends(cache=cache, env_file=env_file, text=text, image=image, reader=reader)
    common = {"cache": cache, "env_file": env_file, "http_options": http_options}
    text_backend: TextSearchBackend = (SerperTextSearch(**common) if names["text"] == "serper"
                                       else GoogleCustomSearch(**common))
    image_backend: ImageSearchBackend = (VisionWebDetection(guard=guard, **common) if names["image"] == "vision"
                                         else SerperLens(**common))
    reader_backend: PageReader = (JinaReader(guard=guard, **common) if names["reader"] == "jina"
                                  else DirectFetchReader(guard=guard, **common))
    if summariser is None:
        summariser = LLMSummariser(chat) if chat is not None else default_offline_summariser()
    return LiveBackends(text_backend, image_backend, reader_backend, summariser)
