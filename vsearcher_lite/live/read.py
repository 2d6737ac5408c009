"""Live page reading for the visit tool: ``JinaReader`` or ``DirectFetchReader`` (a GET through
the SSRF guard), then a goal-conditioned summary by ``LLMSummariser`` or the offline extractive
one. The ``ToolCache`` records successful reads and pages that are gone, never transient failures.
"""

from __future__ import annotations

from typing import Any, Callable
from urllib.parse import quote

from vsearcher_lite.chat import ChatBackend, ChatError
from vsearcher_lite.live.html import cap_paragraphs, cap_text, html_to_page, normalise_space
from vsearcher_lite.live.parse import is_http_url, parse_jina_body
from vsearcher_lite.live.search import HttpBackend
from vsearcher_lite.net.guard import BlockedUrl, UrlGuard
from vsearcher_lite.net.http import HttpClient, HttpError
from vsearcher_lite.redaction import redact
from vsearcher_lite.tools.base import PageReader, Summariser, ToolError
from vsearcher_lite.world.model import PageContent

JINA_URL = "https://r.jina.ai/"
NS_JINA = "live.jina"
NS_FETCH = "live.fetch"
DEFAULT_MAX_PAGE_CHARS = 20000  # text kept from a read page
DEFAULT_MAX_PAGE_BYTES = 2_000_000  # bytes read from a fetched page
DEFAULT_SUMMARY_PAGE_CHARS = 12000  # page text given to the LLM summariser
# Statuses of a *page* (not of our API account) that are worth remembering: the page is gone.
PAGE_GONE_STATUSES = frozenset({400, 404, 410, 422, 451})
PAGE_HTTP = dict(timeout=20.0, max_retries=2, backoff_base=0.5, backoff_max=10.0,
                 total_timeout=60.0, rate_per_s=5.0, max_concurrency=4)


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


class _PageReaderBase(HttpBackend, PageReader):
    http_defaults = PAGE_HTTP

    def __init__(self, api_key: str | None = None, *, guard: UrlGuard | None = None,
                 max_chars: int = DEFAULT_MAX_PAGE_CHARS,
                 max_bytes: int = DEFAULT_MAX_PAGE_BYTES, **kw: Any):
        super().__init__(api_key, **kw)
        self._guard = guard
        self.max_chars = max_chars
        self.max_bytes = max_bytes

    @property
    def guard(self) -> UrlGuard:
        if self._guard is None:
            self._guard = UrlGuard()
        return self._guard

    def _read_record(self, namespace: str, request: dict, url: str,
                     fetch: Callable[[], Any]) -> dict:
        """The recorded fetch of ``url``: ``{status, url, content_type, text}``, else ToolError.
        A guard refusal is recorded like a page that is gone, so a replay gives the same error."""
        if not is_http_url(url):
            raise ToolError(f"cannot visit {url!r}: only absolute http(s) URLs can be visited")

        def live() -> dict:
            try:
                self.guard.check(url)
                return _page_record(fetch())
            except BlockedUrl as exc:
                if exc.transient:  # a DNS failure may pass: never record it as the page's answer
                    raise
                error = f"refused for safety: {exc.reason}"
                return {"status": None, "blocked": True, "error": error}
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
            target = JINA_URL + quote(url, safe=":/?&=#%+@,;~!$'()*[]")
            return self.client.get(target, headers=headers, max_bytes=self.max_bytes)

        record = self._read_record(NS_JINA, request, url, fetch)
        page = parse_jina_body(record.get("text", ""), url, max_chars=self.max_chars)
        page.url = url  # the agent knows the page by the URL it asked for
        if not page.paragraphs:
            raise ToolError(f"Jina Reader returned no readable text for {url}")
        return page


class DirectFetchReader(_PageReaderBase):
    """Pages fetched directly through the SSRF guard: the reader when no Jina key is set."""

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


def page_from_fetch(record: dict, url: str, *,
                    max_chars: int = DEFAULT_MAX_PAGE_CHARS) -> PageContent:
    """A ``PageContent`` from a recorded fetch of HTML or text (else ``ToolError``)."""
    content_type = (record.get("content_type") or "").split(";")[0].strip().lower()
    text = record.get("text") or ""
    looks_html = "<html" in text[:2048].lower() or "<body" in text[:4096].lower()
    if content_type in ("text/html", "application/xhtml+xml") or (not content_type and looks_html):
        page = html_to_page(text, url, max_chars=max_chars)
    elif content_type.startswith("text/") or content_type in ("application/json",
                                                                "application/xml"):
        blocks = [normalise_space(p) for p in text.split("\n\n") if p.strip()]
        paragraphs = cap_paragraphs(blocks, max_chars)
        page = PageContent(url=url, title=url, paragraphs=paragraphs, kind="web")
    else:
        what = content_type or "unknown"
        raise ToolError(f"{url} is not a readable web page (content type {what})")
    page.url = url
    if not page.paragraphs:
        raise ToolError(f"{url} has no readable text")
    return page


SUMMARY_INSTRUCTIONS = (
    "You help a research agent that is answering a hard question by browsing the web. Below is the "
    "text of one web page, and after it the agent's goal for visiting the page.\n"
    "Report only what the page says that bears on the goal: names, dates, numbers, places and how "
    "they relate, quoted exactly as the page gives them. If the page says nothing relevant, say so "
    "in one sentence. Do not add knowledge from outside the page. Write at most two short "
    "paragraphs."
)


def build_summary_messages(page: PageContent, goal: str,
                           max_page_chars: int = DEFAULT_SUMMARY_PAGE_CHARS) -> list[dict]:
    """The messages for a goal-conditioned summary; the goal comes after the cut page text.

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
    On a ``ChatError`` or an empty reply it uses ``fallback`` (extractive); ``fallbacks`` counts."""

    name = "llm"

    def __init__(self, chat: ChatBackend, *, max_page_chars: int = DEFAULT_SUMMARY_PAGE_CHARS,
                 fallback: Summariser | None = None, max_tokens: int = 512,
                 temperature: float = 0.0):
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
