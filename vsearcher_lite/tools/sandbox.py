"""The tool backends over the sandbox web (a ``SandboxWorld`` or a path ``open_world`` accepts):
BM25 text search with SQLite FTS5, near-duplicate image search over precomputed feature vectors
(a perturbed copy of a picture finds its pages; no file hashes), a page reader, and the visit
tool's offline extractive summary.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

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
from vsearcher_lite.world.images import image_features
from vsearcher_lite.world.knowledge import is_sandbox_url, normalise_url
from vsearcher_lite.world.model import ImageRef, PageContent
from vsearcher_lite.world.prose import SITE
from vsearcher_lite.world.store import SandboxWorld, open_world

STOPWORDS = frozenset(
    """a an and are as at be by for from has have he her his in is it its of on or she that the
    their them they this to was were which who whom whose what when where why how with not no do
    does did i you we me my our your can could would should will shall may might must been being
    about into than then there these those so such also any all some one""".split()
)
MAX_QUERY_TERMS = 16
_WORD = re.compile(r"\w+", re.UNICODE)


def _as_world(world) -> SandboxWorld:
    return world if isinstance(world, SandboxWorld) else open_world(world)


def query_terms(query: str) -> list[str]:
    """A query's searchable words: lowercase, no stopwords (unless that leaves none), no repeats.

    >>> query_terms('Who designed "the Orsk Bridge" (1874)? NOT AND')
    ['designed', 'orsk', 'bridge', '1874']
    """
    words = [w.lower().replace("_", " ").strip() for w in _WORD.findall(query or "")]
    words = [w for w in words if w]
    kept = [w for w in words if w not in STOPWORDS and w not in ("not", "and", "or", "near")]
    return list(dict.fromkeys(kept or words))[:MAX_QUERY_TERMS]


def fts_query(query: str) -> str | None:
    """A MATCH expression that is never a syntax error: each term quoted, terms OR-ed.

    >>> fts_query('bridge - "Orsk" OR:')
    '"bridge" OR "orsk"'
    >>> fts_query("?!") is None
    True
    """
    return " OR ".join(_quote(t) for t in query_terms(query)) or None  # None: no word to search


class SandboxTextSearch(TextSearchBackend):
    """BM25 (FTS5) over page titles and bodies; the title counts ``title_weight`` times as much.

    Scoring every page holding a common word is slow on a big world, so a query is first gated on
    its informative terms (in at most ``rare_share`` of the pages: names, years, rare words); if
    the gate leaves fewer than ``k`` pages, every page matching any term is ranked. A query that
    is exactly a page's title or alias puts that page first, as web search engines do.
    """

    name = "sandbox-text"

    def __init__(self, world, title_weight: float = 2.0, snippet_tokens: int = 24,
                 rare_share: float = 0.03):
        self.world = _as_world(world)
        self.title_weight = float(title_weight)
        self.snippet_tokens = int(snippet_tokens)
        n_pages = self.world.connect().execute("SELECT count(*) FROM pages").fetchone()[0]
        self.rare_max_df = max(50, int(rare_share * n_pages))
        self._df: dict[str, int] = {}

    def document_frequency(self, term: str) -> int:
        """How many pages contain ``term`` (after FTS5's own stemming); cached."""
        df = self._df.get(term)
        if df is None:
            sql = "SELECT count(*) FROM pages_fts WHERE pages_fts MATCH ?"
            df = self.world.connect().execute(sql, (_quote(term),)).fetchone()[0]
            if len(self._df) < 200_000:
                self._df[term] = df
        return df

    def navigational_match(self, query: str) -> int | None:
        """The page whose title (or whose entity's alias) is exactly the query, if any."""
        text = " ".join(query.split()).strip(" .?!\"'")
        if text.lower().startswith("the "):
            text = text[4:]
        if not text:
            return None
        con = self.world.connect()
        row = con.execute("SELECT id FROM pages WHERE title = ? COLLATE NOCASE ORDER BY id LIMIT 1",
                          (text,)).fetchone()
        if row is None:
            row = con.execute(
                "SELECT p.id FROM aliases a JOIN pages p ON p.entity_id = a.entity_id "
                "AND p.kind = 'article' WHERE a.alias = ? COLLATE NOCASE ORDER BY p.id LIMIT 1",
                (text,)).fetchone()
        return row[0] if row else None

    def _ranked(self, match: str, k: int) -> list[int]:
        rows = self.world.connect().execute(
            "SELECT rowid FROM pages_fts WHERE pages_fts MATCH ? "
            "ORDER BY bm25(pages_fts, ?, 1.0), rowid LIMIT ?", (match, self.title_weight, k))
        return [r[0] for r in rows]

    def search(self, query: str, k: int = 5) -> list[SearchHit]:
        terms = query_terms(query)
        if not terms or k <= 0:
            return []
        everything = " OR ".join(_quote(t) for t in terms)
        rare = [t for t in terms if self.document_frequency(t) <= self.rare_max_df]
        ids: list[int] = []
        if rare and len(rare) < len(terms):
            ids = self._ranked(f"({' OR '.join(_quote(t) for t in rare)}) AND ({everything})", k)
        if len(ids) < k:
            ids = self._ranked(everything, k)
        exact = self.navigational_match(query)
        if exact is not None:
            ids = [exact] + [i for i in ids if i != exact][: k - 1]
        con = self.world.connect()
        hits = []
        for rowid in ids:
            url, title, snippet = con.execute(
                "SELECT p.url, p.title, snippet(pages_fts, 1, '', '', '…', ?) FROM pages_fts "
                "JOIN pages p ON p.id = pages_fts.rowid "
                "WHERE pages_fts MATCH ? AND pages_fts.rowid = ?",
                (self.snippet_tokens, everything, rowid)).fetchone()
            hits.append(SearchHit(url, title, " ".join(snippet.split())))
        return hits


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


class SandboxImageSearch(ImageSearchBackend):
    """Cosine similarity of image features; pages ranked by their best-matching picture."""

    name = "sandbox-image"

    def __init__(self, world, candidates_per_hit: int = 8):
        self.world = _as_world(world)
        self.candidates_per_hit = candidates_per_hit
        self.ids, self.matrix = self.world.image_matrix()
        con = self.world.connect()
        self.pages_of: dict[str, list[tuple[int, str, str]]] = {}
        sql = "SELECT id, url, title, image_id FROM pages WHERE image_id IS NOT NULL ORDER BY id"
        for page_id, url, title, image_id in con.execute(sql):
            self.pages_of.setdefault(image_id, []).append((page_id, url, title))
        self.info = {r[0]: (str(self.world.root / r[1]), r[2], r[3]) for r in
                     con.execute("SELECT id, path, entity_id, caption FROM images")}

    def load(self, image: ImageRef) -> Image.Image:
        if image is None:
            raise ToolError("image search needs the question image, and this question has none")
        if image.is_url:
            raise ToolError("sandbox image search needs a local image file, got the URL "
                            f"{image.location}")
        path = Path(image.location)
        try:
            with Image.open(path) as im:
                return im.convert("RGB")
        except FileNotFoundError:
            raise ToolError(f"image file not found: {path}") from None
        except (UnidentifiedImageError, OSError) as exc:
            raise ToolError(f"cannot read the image {path}: {exc}") from None

    def search(self, image: ImageRef, k: int = 5) -> list[ImageHit]:
        if k <= 0 or not self.ids:
            return []
        query = image_features(self.load(image))
        # einsum, not ``@``: multi-threaded BLAS slows down when other processes share the cores.
        scores = np.einsum("ij,j->i", self.matrix, query)
        m = min(len(scores), max(k * self.candidates_per_hit, 32))
        top = np.argpartition(-scores, m - 1)[:m]
        # Stable order: score, then image id, so equal scores never reorder between runs.
        top = sorted(top.tolist(), key=lambda i: (-float(scores[i]), self.ids[i]))
        best: dict[int, tuple[float, str, str, str]] = {}
        for i in top:
            image_id = self.ids[i]
            for page_id, url, title in self.pages_of.get(image_id, ()):
                if page_id not in best:
                    best[page_id] = (float(scores[i]), url, title, image_id)
        ranked = sorted(best.items(), key=lambda kv: (-kv[1][0], kv[0]))[:k]
        hits = []
        for _, (score, url, title, image_id) in ranked:
            path, entity_id, caption = self.info[image_id]
            hits.append(ImageHit(url, title, ImageRef(path, entity_id, caption), round(score, 4)))
        return hits


class SandboxPageReader(PageReader):
    """Reads sandbox pages by URL (http or https, with or without a trailing slash or fragment)."""

    name = "sandbox-reader"

    def __init__(self, world):
        self.world = _as_world(world)
        self.knowledge = self.world.knowledge

    def read(self, url: str) -> PageContent:
        if not isinstance(url, str) or not url.strip():
            raise ToolError("visit needs a URL")
        if not url.strip().lower().startswith(("http://", "https://")):
            raise ToolError(f"cannot open {url!r}: only http(s) URLs can be visited")
        if not is_sandbox_url(url):
            raise ToolError(f"{url} is outside the sandbox web; only pages under {SITE}/ exist "
                            "offline")
        try:
            return self.knowledge.page_by_url(normalise_url(url))
        except LookupError:
            raise ToolError(f"no page at {url} (404); use a URL from a search result") from None


# -- the extractive summariser -------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'“(])")
_ABBREVIATIONS = ("Co.", "St.", "Mt.", "No.", "Dr.", "Mr.", "Mrs.", "Ms.", "vs.", "ca.")
_YEAR = re.compile(r"\b1[0-9]{3}\b|\b20[0-9]{2}\b")
_NUMBER = re.compile(r"\d")


def split_sentences(text: str) -> list[str]:
    """Sentences of a paragraph, not split after initials ("J. Avast") or "Co.".

    >>> split_sentences("Avast & Co. built it. J. Orsk paid. It opened in 1874.")
    ['Avast & Co. built it.', 'J. Orsk paid.', 'It opened in 1874.']
    """
    parts = _SENTENCE_END.split(text.strip())
    out: list[str] = []
    for part in parts:
        if out and (out[-1].endswith(_ABBREVIATIONS) or re.search(r"(?:^|\s)[A-Z]\.$", out[-1])):
            out[-1] = f"{out[-1]} {part}"
        elif part:
            out.append(part)
    return out


def stem(word: str) -> str:
    """A light English stemmer: enough to match "designed" with "design", "bridges" with "bridge".

    >>> [stem(w) for w in "designed bridges bridge flowing located cities churches".split()]
    ['design', 'bridg', 'bridg', 'flow', 'locat', 'citi', 'church']
    """
    w = word.lower()
    for suffix, keep in SUFFIXES:
        if w.endswith(suffix) and len(w) - len(suffix) >= 3 and not w.endswith("ss"):
            w = w[: len(w) - len(suffix)] + keep
            break
    if w.endswith("e") and len(w) > 4:
        w = w[:-1]
    return w


SUFFIXES = (("ies", "i"), ("ing", ""), ("ed", ""), ("ches", "ch"), ("shes", "sh"), ("s", ""))
YEAR_WORDS = {"when", "year", "date", "dated", "founded", "built", "born", "died"}
NUMBER_WORDS = {"many", "much", "tall", "high", "long", "deep", "large", "big", "elevation",
                "population", "length", "height", "area", "size"}


def _terms(text: str) -> set[str]:
    return {stem(w) for w in _WORD.findall(text.lower()) if w not in STOPWORDS}


class ExtractiveSummariser(Summariser):
    """The most goal-relevant sentences of a page, in page order, headed by its title."""

    name = "extractive"

    def __init__(self, max_sentences: int = 6, max_chars: int = 900):
        self.max_sentences, self.max_chars = max_sentences, max_chars

    def score_sentences(self, sentences: list[str], goal: str) -> list[float]:
        goal_terms = _terms(goal)
        sentence_terms = [_terms(s) for s in sentences]
        n = len(sentences)
        df: dict[str, int] = {}
        for terms in sentence_terms:
            for t in terms & goal_terms:
                df[t] = df.get(t, 0) + 1
        goal_words = set(_WORD.findall(goal.lower()))
        wants_year, wants_number = bool(goal_words & YEAR_WORDS), bool(goal_words & NUMBER_WORDS)
        scores = []
        for s, terms in zip(sentences, sentence_terms):
            # fsum: the terms come from a set, whose order changes with the interpreter's hash
            # seed; a plain float sum in that order can break near-ties one way or the other
            score = math.fsum(math.log(1.0 + n / df[t]) for t in terms & goal_terms)
            if wants_year and _YEAR.search(s):
                score += 0.5
            if wants_number and _NUMBER.search(s):
                score += 0.3
            scores.append(score)
        return scores

    def summarise(self, page: PageContent, goal: str) -> str:
        sentences = [s for p in page.paragraphs for s in split_sentences(p)]
        if not sentences:
            return page.title
        scores = self.score_sentences(sentences, goal or "")
        if max(scores) <= 0:
            chosen = list(range(min(3, len(sentences))))  # no match: the lead says what it is
        else:
            order = sorted(range(len(sentences)), key=lambda i: (-scores[i], i))
            chosen, used = [], 0
            for i in order:
                if scores[i] <= 0 or len(chosen) >= self.max_sentences:
                    break
                if used + len(sentences[i]) > self.max_chars and chosen:
                    continue
                chosen.append(i)
                used += len(sentences[i]) + 1
            if 0 not in chosen and used + len(sentences[0]) <= self.max_chars:
                chosen.append(0)  # the lead sentence names what the page is about
        chosen.sort()
        pieces: list[str] = []
        for j, i in enumerate(chosen):
            if j and i != chosen[j - 1] + 1:
                pieces.append("…")
            pieces.append(sentences[i])
        body = " ".join(pieces)
        if len(body) > self.max_chars:
            body = body[: self.max_chars - 1].rstrip() + "…"
        return f"{page.title}\n{body}"


#: How much a tool shows. ``full`` is sized like the paper's tools; ``compact`` (the cpu profile,
#: with the compact system prompt and the teacher's short thoughts) keeps an easy episode near a
#: thousand tokens: the tiny base learned to copy at positions up to 512 and copies worse beyond.
OBSERVATION_STYLES = {
    "full": {"snippet_tokens": 24, "max_sentences": 6, "max_chars": 900},
    "compact": {"snippet_tokens": 14, "max_sentences": 3, "max_chars": 360},
}


def observation_settings(style: str) -> dict:
    """The sizes of one observation style (``InputError`` names the known styles)."""
    try:
        return OBSERVATION_STYLES[style]
    except KeyError:
        known = ", ".join(OBSERVATION_STYLES)
        raise InputError(f"unknown observation style {style!r}: use one of {known}") from None


def sandbox_backends(world, style: str = "full") -> dict:
    """``{"text", "image", "reader", "summariser"}`` backends over one world, sized by ``style``."""
    w = _as_world(world)
    sizes = observation_settings(style)
    return {"text": SandboxTextSearch(w, snippet_tokens=sizes["snippet_tokens"]),
            "image": SandboxImageSearch(w), "reader": SandboxPageReader(w),
            "summariser": ExtractiveSummariser(max_sentences=sizes["max_sentences"],
                                               max_chars=sizes["max_chars"])}


__all__ = ["SandboxTextSearch", "SandboxImageSearch", "SandboxPageReader", "ExtractiveSummariser",
           "sandbox_backends", "observation_settings", "OBSERVATION_STYLES", "query_terms",
           "fts_query", "split_sentences", "stem"]
