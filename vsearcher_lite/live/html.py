"""Turning fetched web content (HTML, Jina Reader's markdown, Wikipedia or Kiwix articles) into
``PageContent``, with the standard library only.
"""

from __future__ import annotations

import html as html_lib
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.parse import urldefrag, urljoin, urlsplit

from vsearcher_lite.world.model import ImageRef, PageContent

# Elements whose whole subtree is never readable text.
SKIP_TAGS = frozenset(
    {"script", "style", "noscript", "template", "svg", "nav", "footer", "form", "button", "select",
     "textarea", "iframe", "object", "canvas", "math"}
)
# Block elements whose text becomes one paragraph each.
HEADING_TAGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
BLOCK_TAGS = HEADING_TAGS | {"p", "li", "blockquote", "pre", "dd", "dt", "figcaption"}
# Elements that HTML closes without an end tag.
VOID_TAGS = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
     "track", "wbr"}
)
# Class names (Wikipedia, MediaWiki, Kiwix) of boxes that hold no article prose.
SKIP_CLASSES = frozenset(
    {"navbox", "vertical-navbox", "metadata", "ambox", "mbox-small", "hatnote", "reference",
     "mw-ref", "reflist", "references", "mw-references-wrap", "mw-editsection", "noprint",
     "sistersitebox", "shortdescription", "mw-cite-backlink", "mw-jump-link", "catlinks",
     "printfooter"}
)
# Images smaller than this (declared width or height, in pixels) are icons, not pictures.
MIN_IMAGE_SIDE = 50

IMAGE_SIGNATURES: tuple[tuple[bytes, int, str], ...] = (
    (b"\xff\xd8\xff", 0, "jpeg"), (b"\x89PNG\r\n\x1a\n", 0, "png"), (b"GIF87a", 0, "gif"),
    (b"GIF89a", 0, "gif"), (b"BM", 0, "bmp"), (b"II*\x00", 0, "tiff"), (b"MM\x00*", 0, "tiff"),
    (b"\x00\x00\x01\x00", 0, "ico"),
)


@dataclass
class HtmlImage:
    url: str
    alt: str = ""
    in_infobox: bool = False
    width: int | None = None
    height: int | None = None

    @property
    def is_icon(self) -> bool:
        sides = [s for s in (self.width, self.height) if s is not None]
        return bool(sides) and min(sides) < MIN_IMAGE_SIDE


@dataclass
class HtmlExtract:
    """What one pass over an HTML document found."""

    title: str = ""
    blocks: list[tuple[str, str]] = field(default_factory=list)  # (tag, text) in document order
    images: list[HtmlImage] = field(default_factory=list)
    links: list[str] = field(default_factory=list)  # absolute http(s) URLs, first occurrence order

    @property
    def paragraphs(self) -> list[str]:
        """The text of ``<p>`` elements only: the article prose."""
        return [text for tag, text in self.blocks if tag == "p"]

    def representative_image(self) -> HtmlImage | None:
        """The infobox image, else the first image that is not an icon."""
        pictures = [im for im in self.images if not im.is_icon]
        for im in pictures:
            if im.in_infobox:
                return im
        return pictures[0] if pictures else None


def _int_attr(value: str | None) -> int | None:
    if value is None:
        return None
    m = re.match(r"\s*(\d+)", value)
    return int(m.group(1)) if m else None


def normalise_space(text: str) -> str:
    """Collapse runs of whitespace to one space and strip the ends.

    >>> normalise_space("  a\\n\\t b  ")
    'a b'
    """
    return re.sub(r"\s+", " ", text).strip()


def strip_tags(fragment: str) -> str:
    """Plain text of a small HTML fragment (a search result title with ``<b>`` marks).

    >>> strip_tags("Eiffel Tower - <b>Wikipedia</b> &amp; more")
    'Eiffel Tower - Wikipedia & more'
    """
    return normalise_space(html_lib.unescape(re.sub(r"<[^>]*>", "", fragment or "")))


def absolute_http_url(base_url: str, ref: str) -> str | None:
    """``ref`` resolved against ``base_url``, without its fragment; ``None`` unless http(s).

    >>> absolute_http_url("https://en.wikipedia.org/wiki/A", "./B#History")
    'https://en.wikipedia.org/wiki/B'
    >>> absolute_http_url("https://x.org/", "javascript:alert(1)") is None
    True
    """
    ref = (ref or "").strip()
    if not ref:
        return None
    url = urldefrag(urljoin(base_url, ref))[0]
    return url if urlsplit(url).scheme in ("http", "https") else None


class _Extractor(HTMLParser):
    """One pass over a document; see ``extract_html``."""

    def __init__(self, base_url: str):
        super().__init__(convert_charrefs=True)
        self.base_url = base_url
        self.out = HtmlExtract()
        self._stack: list[tuple[str, bool, bool]] = []  # (tag, skipping, infobox) per open element
        self._title_parts: list[str] = []
        self._in_title = False
        self._block_tag: str | None = None
        self._block_depth = 0
        self._block_parts: list[str] = []
        self._seen_links: set[str] = set()

    @property
    def _skipping(self) -> bool:
        return bool(self._stack) and self._stack[-1][1]

    @property
    def _in_infobox(self) -> bool:
        return bool(self._stack) and self._stack[-1][2]

    def handle_starttag(self, tag, attrs):
        attrs_d = {k: (v or "") for k, v in attrs}
        if tag == "base" and attrs_d.get("href"):
            self.base_url = urljoin(self.base_url, attrs_d["href"])
        classes = set(attrs_d.get("class", "").split())
        skipping = self._skipping or tag in SKIP_TAGS or bool(classes & SKIP_CLASSES)
        hidden = attrs_d.get("role") == "navigation" or attrs_d.get("aria-hidden") == "true"
        skipping = skipping or hidden
        infobox = self._in_infobox or any(c.startswith("infobox") for c in classes)
        if tag == "title" and not self._stack_has("svg"):
            self._in_title = True
        if tag == "img" and not skipping:
            src = attrs_d.get("src") or attrs_d.get("data-src") or ""
            url = absolute_http_url(self.base_url, src)
            if url:
                self.out.images.append(
                    HtmlImage(url, attrs_d.get("alt", ""), infobox, _int_attr(attrs_d.get("width")),
                              _int_attr(attrs_d.get("height")))
                )
        if tag == "a" and not skipping:
            url = absolute_http_url(self.base_url, attrs_d.get("href", ""))
            if url and url not in self._seen_links:
                self._seen_links.add(url)
                self.out.links.append(url)
        if tag == "br" and self._block_tag is not None:
            self._block_parts.append(" ")
        if tag in VOID_TAGS:
            return
        if tag in BLOCK_TAGS and not skipping and not infobox:
            if self._block_tag is None:
                self._block_tag, self._block_depth, self._block_parts = tag, len(self._stack), []
        self._stack.append((tag, skipping, infobox))

    def _stack_has(self, tag: str) -> bool:
        return any(t == tag for t, _, _ in self._stack)

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False
        if tag in VOID_TAGS or not self._stack_has(tag):
            return  # a stray end tag: ignore it rather than unbalance the stack
        while self._stack:
            open_tag, _, _ = self._stack.pop()
            if self._block_tag is not None and len(self._stack) == self._block_depth:
                self._close_block()
            if open_tag == tag:
                break

    def _close_block(self):
        text = normalise_space("".join(self._block_parts))
        if text:
            self.out.blocks.append((self._block_tag, text))
        self._block_tag, self._block_parts = None, []

    def handle_data(self, data):
        if self._in_title:
            self._title_parts.append(data)
            return
        if self._block_tag is not None and not self._skipping:
            self._block_parts.append(data)

    def close(self):
        super().close()
        if self._block_tag is not None:
            self._close_block()
        self.out.title = normalise_space("".join(self._title_parts))


def extract_html(html: str, base_url: str) -> HtmlExtract:
    """Title, text blocks, images and links of an HTML document (URLs absolute, http(s) only).

    >>> x = extract_html('<title>T</title><nav><p>menu</p></nav>'
    ...                  '<p>Hello <b>world</b><sup class="reference">[1]</sup></p>'
    ...                  '<img src="/a.png"><a href="/b">b</a>', "https://ex.org/page")
    >>> x.title, x.paragraphs, x.images[0].url, x.links
    ('T', ['Hello world'], 'https://ex.org/a.png', ['https://ex.org/b'])
    """
    parser = _Extractor(base_url)
    parser.feed(html)
    parser.close()
    out = parser.out
    if not out.title:
        headings = [text for tag, text in out.blocks if tag == "h1"]
        out.title = headings[0] if headings else ""
    return out


def cap_paragraphs(paragraphs: list[str], max_chars: int) -> list[str]:
    """The leading paragraphs that fit in ``max_chars``; the last one is cut at a word boundary.

    >>> cap_paragraphs(["aaaa", "bbbb cccc"], 10)
    ['aaaa', 'bbbb …']
    """
    out: list[str] = []
    used = 0
    for para in paragraphs:
        room = max_chars - used
        if room <= 0:
            break
        if len(para) <= room:
            out.append(para)
            used += len(para) + 1
            continue
        cut = para[:room].rsplit(" ", 1)[0] if " " in para[:room] else para[:room]
        if cut.strip():
            out.append(cut.rstrip() + " …")
        break
    return out


def cap_text(text: str, max_chars: int) -> str:
    """``text`` cut to at most about ``max_chars`` characters, on a paragraph or word boundary.

    >>> cap_text("one two three", 8)
    'one two …'
    """
    if len(text) <= max_chars:
        return text
    return "\n\n".join(cap_paragraphs(text.split("\n\n"), max_chars))


def html_to_page(
    html: str, url: str, *, max_chars: int = 20000, entity_id: str | None = None,
    prose_only: bool = False,
) -> PageContent:
    """A readable ``PageContent`` of an HTML page (``<p>`` blocks only with ``prose_only``)."""
    x = extract_html(html, url)
    blocks = x.paragraphs if prose_only else [text for _, text in x.blocks]
    # Menus and share bars repeat on many pages: keep each block once.
    paragraphs = cap_paragraphs(list(dict.fromkeys(blocks)), max_chars)
    rep = x.representative_image()
    image = ImageRef(rep.url, entity_id=entity_id, caption=rep.alt) if rep else None
    title = x.title or url
    return PageContent(url=url, title=title, paragraphs=paragraphs, entity_id=entity_id,
                       image=image, links=x.links, kind="web")



# ---------------------------------------------------------------------------------------------
# Markdown (Jina Reader output)

_MD_IMAGE = re.compile(r"!\[([^\]]*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_MD_LINK = re.compile(r"\[([^\]]*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_MD_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+")
_MD_SETEXT = re.compile(r"^\s*(=+|-+)\s*$")
_MD_RULE = re.compile(r"^\s*([-*_])(\s*\1){2,}\s*$")


def markdown_blocks(markdown: str,
                    base_url: str) -> tuple[list[str], list[tuple[str, str]], list[str]]:
    """Paragraph texts, images ``(url, alt)`` and link URLs of a markdown document.

    >>> md = "# T\\n\\nSee ![a cat](/c.png) and [docs](https://d.org)."
    >>> paras, images, links = markdown_blocks(md, "https://x.org/")
    >>> paras, images, links
    (['T', 'See and docs.'], [('https://x.org/c.png', 'a cat')], ['https://d.org'])
    """
    images: list[tuple[str, str]] = []
    links: list[str] = []

    def take_image(m: re.Match) -> str:
        url = absolute_http_url(base_url, m.group(2))
        if url:
            images.append((url, m.group(1).strip()))
        return ""

    def take_link(m: re.Match) -> str:
        url = absolute_http_url(base_url, m.group(2))
        if url and url not in links:
            links.append(url)
        return m.group(1)

    # Group lines into blocks: a blank line ends a block; a heading is a block of its own.
    blocks: list[list[str]] = [[]]
    for line in markdown.replace("\r\n", "\n").split("\n"):
        if not line.strip() or _MD_RULE.match(line):
            blocks.append([])
        elif _MD_SETEXT.match(line):
            blocks.append([])  # the line above was a heading: close it
        elif _MD_HEADING.match(line):
            blocks.append([_MD_HEADING.sub("", line)])
            blocks.append([])
        else:
            line = re.sub(r"^\s*(?:[-*+]|\d+[.)])\s+", "", line)  # list bullets
            blocks[-1].append(re.sub(r"^\s*>\s?", "", line))  # quote marks
    paragraphs = []
    for lines in blocks:
        text = _MD_LINK.sub(take_link, _MD_IMAGE.sub(take_image, " ".join(lines)))
        text = re.sub(r"[*_`]{1,3}([^*_`]+)[*_`]{1,3}", r"\1", text)  # emphasis and code marks
        text = normalise_space(text)
        text = re.sub(r"\s+([.,;:!?])", r"\1", text)
        if text:
            paragraphs.append(text)
    return paragraphs, images, links


def markdown_to_page(markdown: str, url: str, *, title: str = "",
                     max_chars: int = 20000) -> PageContent:
    """A ``PageContent`` of a markdown page; the first image is its representative image."""
    paragraphs, images, links = markdown_blocks(markdown, url)
    if not title and paragraphs:
        title = paragraphs[0][:200]
    image = ImageRef(images[0][0], caption=images[0][1]) if images else None
    paragraphs = cap_paragraphs(paragraphs, max_chars)
    return PageContent(url=url, title=title or url, paragraphs=paragraphs, image=image,
                       links=links, kind="web")


# ---------------------------------------------------------------------------------------------
# Image bytes


def sniff_image_type(data: bytes, content_type: str = "") -> str | None:
    """The image format ``data`` starts with (``"png"``, ``"jpeg"`` ...), or ``None``: the bytes
    decide, except for SVG (text), accepted only when the server says ``image/svg+xml``.

    >>> sniff_image_type(b"\\x89PNG\\r\\n\\x1a\\n...."), sniff_image_type(b"<html>")
    ('png', None)
    >>> sniff_image_type(b"RIFF\\x00\\x00\\x00\\x00WEBPVP8 ")
    'webp'
    """
    for magic, offset, name in IMAGE_SIGNATURES:
        if data[offset:offset + len(magic)] == magic:
            return name
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    if data[4:8] == b"ftyp" and data[8:12] in (b"avif", b"avis", b"heic", b"heix", b"mif1",
                                               b"msf1"):
        return "avif" if data[8:11] == b"avi" else "heif"
    svg_type = content_type.split(";")[0].strip().lower() == "image/svg+xml"
    if svg_type and b"<svg" in data[:4096].lower():
        return "svg"
    return None
