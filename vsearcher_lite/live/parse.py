"""Pure parsers from live API responses (decoded JSON or text) to ``SearchHit`` / ``ImageHit`` /
``PageContent``. A result without a usable link is skipped; a response of the wrong shape, or an
error object inside a 200 response, raises ``ToolError`` with the service's own message.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from vsearcher_lite.live.html import markdown_to_page, normalise_space, strip_tags
from vsearcher_lite.tools.base import ImageHit, SearchHit, ToolError
from vsearcher_lite.world.model import ImageRef, PageContent


def _expect_object(payload: Any, service: str) -> dict:
    if not isinstance(payload, dict):
        what = type(payload).__name__
        raise ToolError(f"{service} returned an unexpected response (a JSON {what}, not an object)")
    return payload


def _error(what: str, error: dict) -> ToolError:
    return ToolError(f"{what} {error.get('code', '')}: {_text(error.get('message'))}".strip())


def _list_of_dicts(value: Any) -> list[dict]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _text(value: Any) -> str:
    return normalise_space(value) if isinstance(value, str) else ""


def is_http_url(url: Any) -> bool:
    """True for an absolute http(s) URL with a host.

    >>> is_http_url("https://a.org/x"), is_http_url("x-raw-image:///abc"), is_http_url("/rel")
    (True, False, False)
    """
    if not isinstance(url, str):
        return False
    parts = urlsplit(url.strip())
    return parts.scheme in ("http", "https") and bool(parts.netloc)


def host_of(url: str) -> str:
    return urlsplit(url).hostname or url


def _dedupe_hits(hits: list, k: int) -> list:
    seen: set[str] = set()
    out = []
    for h in hits:
        if h.url in seen:
            continue
        seen.add(h.url)
        out.append(h)
        if len(out) >= k:
            break
    return out


# ---------------------------------------------------------------------------------------------
# Text search


def parse_serper_search(payload: Any, k: int = 5) -> list[SearchHit]:
    """The top ``k`` organic results of a Serper ``/search`` response (no title: the host).

    >>> results = [{"link": "https://a.org/x", "title": "A"}, {"title": "no link"}]
    >>> parse_serper_search({"organic": results})
    [SearchHit(url='https://a.org/x', title='A', snippet='')]
    """
    payload = _expect_object(payload, "Serper")
    if payload.get("message") and "organic" not in payload:
        raise ToolError(f"Serper error: {_text(payload['message'])}")
    hits = []
    for item in _list_of_dicts(payload.get("organic")):
        link = item.get("link")
        if not is_http_url(link):
            continue
        hits.append(SearchHit(url=link, title=_text(item.get("title")) or host_of(link),
                              snippet=_text(item.get("snippet"))))
    return _dedupe_hits(hits, k)


def parse_google_cse(payload: Any, k: int = 5) -> list[SearchHit]:
    """The top ``k`` results of a Google Custom Search JSON API response (zero hits: no ``items``).

    >>> parse_google_cse({"kind": "customsearch#search", "searchInformation": {}})
    []
    """
    payload = _expect_object(payload, "Google Custom Search")
    error = payload.get("error")
    if isinstance(error, dict):
        raise _error("Google Custom Search error", error)
    hits = []
    for item in _list_of_dicts(payload.get("items")):
        link = item.get("link")
        if not is_http_url(link):
            continue
        title = _text(item.get("title")) or strip_tags(item.get("htmlTitle") or "") or host_of(link)
        snippet = _text(item.get("snippet")) or strip_tags(item.get("htmlSnippet") or "")
        hits.append(SearchHit(url=link, title=title, snippet=snippet))
    return _dedupe_hits(hits, k)


# ---------------------------------------------------------------------------------------------
# Image search


@dataclass
class VisionPage:
    """One page from Vision web detection, with its candidate matching images (full first)."""

    url: str
    title: str
    image_urls: list[str] = field(default_factory=list)


def parse_vision_response(payload: Any) -> list[VisionPage]:
    """Pages with matching images from a Vision ``images:annotate`` WEB_DETECTION response; only
    http(s) image URLs are kept (the service also returns ``x-raw-image:///...`` ones).

    >>> pages = parse_vision_response({"responses": [{"webDetection": {"pagesWithMatchingImages": [
    ...     {"url": "https://p.org/a", "pageTitle": "A - <b>Wiki</b>",
    ...      "partialMatchingImages": [{"url": "https://i.org/2.jpg"}],
    ...      "fullMatchingImages": [{"url": "x-raw-image:///ff"}, {"url": "https://i.org/1.jpg"}]}]}}]})
    >>> pages[0].title, pages[0].image_urls
    ('A - Wiki', ['https://i.org/1.jpg', 'https://i.org/2.jpg'])
    """
    payload = _expect_object(payload, "Cloud Vision")
    if isinstance(payload.get("error"), dict):  # a request-level error object
        raise _error("Cloud Vision error", payload["error"])
    responses = payload.get("responses")
    if not isinstance(responses, list):
        raise ToolError("Cloud Vision returned an unexpected response (no 'responses' list)")
    if not responses:
        return []
    first = responses[0] if isinstance(responses[0], dict) else {}
    error = first.get("error")
    if isinstance(error, dict) and (error.get("message") or error.get("code")):
        why = _text(error.get("message")) or error.get("code")
        raise ToolError(f"Cloud Vision could not process the image: {why}")
    detection = first.get("webDetection") if isinstance(first.get("webDetection"), dict) else {}
    pages = []
    seen: set[str] = set()
    for page in _list_of_dicts(detection.get("pagesWithMatchingImages")):
        url = page.get("url")
        if not is_http_url(url) or url in seen:
            continue
        seen.add(url)
        images: list[str] = []
        for group in ("fullMatchingImages", "partialMatchingImages"):
            for im in _list_of_dicts(page.get(group)):
                if is_http_url(im.get("url")) and im["url"] not in images:
                    images.append(im["url"])
        title = strip_tags(page.get("pageTitle") or "") or host_of(url)
        pages.append(VisionPage(url=url, title=title, image_urls=images))
    return pages


def parse_serper_lens(payload: Any, k: int = 5) -> list[ImageHit]:
    """The top ``k`` visual matches of a Serper ``/lens`` response, as pages with their image
    (under ``organic``, or ``visual_matches`` / ``visualMatches`` in some responses).

    >>> match = {"title": "T", "link": "https://p.org", "imageUrl": "https://i.org/a.jpg"}
    >>> hits = parse_serper_lens({"organic": [match]})
    >>> hits[0].url, hits[0].image.location
    ('https://p.org', 'https://i.org/a.jpg')
    """
    payload = _expect_object(payload, "Serper Lens")
    keys = ("organic", "visual_matches", "visualMatches")
    if payload.get("message") and not any(key in payload for key in keys):
        raise ToolError(f"Serper Lens error: {_text(payload['message'])}")
    items: list[dict] = []
    for key in keys:
        items.extend(_list_of_dicts(payload.get(key)))
    hits = []
    for item in items:
        link = item.get("link")
        if not is_http_url(link):
            continue
        image_url = next((item[f] for f in ("imageUrl", "thumbnailUrl", "thumbnail")
                          if is_http_url(item.get(f))), None)
        title = _text(item.get("title")) or _text(item.get("source")) or host_of(link)
        image = ImageRef(image_url, caption=title) if image_url else None
        hits.append(ImageHit(url=link, title=title, image=image))
    return _dedupe_hits(hits, k)


# ---------------------------------------------------------------------------------------------
# Jina Reader

JINA_MARKER = "Markdown Content:"
_JINA_HEADER = re.compile(r"^(Title|URL Source|Published Time|Warning|Description):[ \t]*(.*)$",
                          re.MULTILINE)


def parse_jina_text(body: str, url: str, *, max_chars: int = 20000) -> PageContent:
    """A ``PageContent`` from Jina Reader's default text response: the title from its header
    lines, the page from what follows ``Markdown Content:`` (else the body minus the headers).

    >>> body = "Title: Ex\\n\\nURL Source: https://ex.org/\\n\\nMarkdown Content:\\n# Ex\\nHello."
    >>> p = parse_jina_text(body, "https://ex.org/")
    >>> p.title, p.paragraphs
    ('Ex', ['Ex', 'Hello.'])
    >>> parse_jina_text("just text", "https://ex.org/").paragraphs
    ['just text']
    """
    if not isinstance(body, str):
        raise ToolError(f"Jina Reader returned no text for {url}")
    head, marker, rest = body.partition(JINA_MARKER)
    found = _JINA_HEADER.finditer(head if marker else body)
    headers = {m.group(1): m.group(2).strip() for m in found}
    content = rest if marker else _JINA_HEADER.sub("", body)
    return markdown_to_page(content.strip(), url, title=headers.get("Title", ""),
                            max_chars=max_chars)


def parse_jina_json(payload: Any, url: str, *, max_chars: int = 20000) -> PageContent:
    """A ``PageContent`` from Jina Reader's JSON envelope (``ToolError`` on an error code)."""
    payload = _expect_object(payload, "Jina Reader")
    data = payload.get("data")
    code = payload.get("code")
    if not isinstance(data, dict) or (isinstance(code, int) and code >= 400):
        message = (_text(payload.get("readableMessage")) or _text(payload.get("message"))
                   or "no content")
        raise ToolError(f"Jina Reader could not read {url}: {message}")
    content = data.get("content") if isinstance(data.get("content"), str) else ""
    return markdown_to_page(content, _text(data.get("url")) or url,
                            title=_text(data.get("title")), max_chars=max_chars)


def parse_jina_body(body: str, url: str, *, max_chars: int = 20000) -> PageContent:
    """Jina Reader output in either format: a JSON envelope or the default text."""
    stripped = body.lstrip()
    if stripped.startswith("{"):
        try:
            payload = json.loads(stripped)
        except ValueError:
            payload = None
        if isinstance(payload, dict) and ("data" in payload or "code" in payload):
            return parse_jina_json(payload, url, max_chars=max_chars)
    return parse_jina_text(body, url, max_chars=max_chars)
