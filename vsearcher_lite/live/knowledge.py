"""The live knowledge source: Wikidata SPARQL for seeds and facts, Wikipedia (or a local Kiwix
server) for pages, so the same synthesis code runs on the sandbox and the real web (paper 2.1,
A.2). With a ``ToolCache`` every response, "not found" included, is recorded: a replay needs no
network and raises the same errors.
"""

from __future__ import annotations

import os
import re
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator
from urllib.parse import quote, unquote

from vsearcher_lite import __version__
from vsearcher_lite.cache import ToolCache
from vsearcher_lite.live import sparql as wd
from vsearcher_lite.live.html import extract_html
from vsearcher_lite.net.http import HttpClient, HttpError
from vsearcher_lite.runio import InputError
from vsearcher_lite.world.model import Entity, Fact, ImageRef, KnowledgeSource, PageContent, Seed

WDQS_URL = "https://query.wikidata.org/sparql"
WIKIPEDIA_URL = "https://en.wikipedia.org"
WIKIPEDIA_REST_URL = "https://en.wikipedia.org/api/rest_v1"
TITLES_PER_QUERY = 50  # titles resolved to QIDs per SPARQL request
PAGE_MEMORY = 256  # parsed pages kept in memory (the cache keeps every response on disk)
CONTACT_VAR = "VSEARCHER_CONTACT"
KIWIX_URL_VAR = "VSEARCHER_KIWIX_URL"
KIWIX_BOOK_VAR = "VSEARCHER_KIWIX_BOOK"
SPARQL_URL_VAR = "VSEARCHER_SPARQL_URL"
NS_SPARQL = "live.wdqs"
NS_WIKIPEDIA = "live.wikipedia"
NS_KIWIX = "live.kiwix"

# WDQS etiquette: one query at a time, a minute of server time at most; wait when told to.
SPARQL_HTTP = dict(timeout=70.0, max_retries=5, backoff_base=2.0, backoff_max=120.0,
                   total_timeout=600.0, rate_per_s=1.0, max_concurrency=1)
WIKI_HTTP = dict(timeout=30.0, max_retries=4, backoff_base=0.5, backoff_max=30.0,
                 total_timeout=120.0, rate_per_s=10.0, max_concurrency=4)
KIWIX_HTTP = dict(timeout=30.0, max_retries=2, backoff_base=0.2, backoff_max=5.0,
                  total_timeout=60.0, max_concurrency=4)

# Title prefixes of pages that are not articles (files, help, talk, categories ...).
_NAMESPACES = ("file", "image", "special", "help", "wikipedia", "wp", "category", "template",
               "portal", "talk", "user", "draft", "module", "mediawiki", "media", "book",
               "timedtext")
_TALK = ("user", "template", "file", "wikipedia", "category", "portal", "help", "draft", "module")
NON_ARTICLE_NAMESPACES = frozenset(_NAMESPACES + tuple(f"{n}_talk" for n in _TALK))
_ZIM_NAMESPACE_PATH = re.compile(r"^(?:[-A-Z]|_[a-z]+)/")
_PURPOSE = "educational reproduction of VSearcher"


def polite_user_agent(contact: str | None = None) -> str:
    """A descriptive User-Agent as Wikimedia asks for: tool name, version, purpose and contact.

    >>> polite_user_agent("me@example.org")  # doctest: +ELLIPSIS
    'vsearcher-lite/... (educational reproduction of VSearcher; me@example.org) python-httpx'
    """
    contact = contact if contact is not None else os.environ.get(CONTACT_VAR)
    if not contact:
        warnings.warn(f"set ${CONTACT_VAR} to an email address or URL: Wikimedia asks API clients "
                      "to say how to reach their operator (requests without contact details may "
                      "be refused)", stacklevel=2)
        return f"vsearcher-lite/{__version__} ({_PURPOSE}) python-httpx"
    return f"vsearcher-lite/{__version__} ({_PURPOSE}; {contact}) python-httpx"


# Wikipedia / Kiwix URLs and titles

def title_to_path(title: str, *, keep_slash: bool = False) -> str:
    """A title as one URL path segment, percent-encoded as MediaWiki writes its URLs; a slash
    is encoded unless ``keep_slash`` (REST routes take the title as a single segment).

    >>> title_to_path("AC/DC (band)"), title_to_path("AC/DC (band)", keep_slash=True)
    ('AC%2FDC_(band)', 'AC/DC_(band)')
    """
    return quote(title.strip().replace(" ", "_"), safe="(),:;@$!*~" + ("/" if keep_slash else ""))


def path_to_title(segment: str) -> str:
    """The title in an article URL's last path segment.

    >>> path_to_title("Saint_Mary%27s_Abbey")
    "Saint Mary's Abbey"
    """
    return unquote(segment).replace("_", " ").strip()


def is_article_title(title: str) -> bool:
    """False for pages in a namespace (``File:``, ``Help:`` ...), true for articles.

    >>> [is_article_title(t) for t in ("Oldmere Abbey", "File:Oldmere.jpg", "Star Wars: Andor")]
    [True, False, True]
    """
    if not title:
        return False
    prefix, sep, _ = title.partition(":")
    return not (sep and prefix.strip().lower().replace(" ", "_") in NON_ARTICLE_NAMESPACES)


def article_title_from_url(url: str, article_prefixes: tuple[str, ...]) -> str | None:
    """The article title of ``url`` when it lies under one of ``article_prefixes``, else ``None``.

    >>> wiki = ("https://en.wikipedia.org/wiki/",)
    >>> article_title_from_url("https://en.wikipedia.org/wiki/Oldmere_Abbey", wiki)
    'Oldmere Abbey'
    >>> article_title_from_url("https://en.wikipedia.org/wiki/AC/DC", wiki)
    'AC/DC'
    >>> article_title_from_url("https://en.wikipedia.org/wiki/File:X.jpg", wiki) is None
    True
    """
    bare = url.split("?", 1)[0].split("#", 1)[0]
    for prefix in article_prefixes:
        if bare.startswith(prefix):
            rest = bare[len(prefix):].strip("/")
            if not rest or _ZIM_NAMESPACE_PATH.match(rest):
                return None  # e.g. a Kiwix image (I/...) or resource (-/...), not an article
            title = path_to_title(rest)
            return title if is_article_title(title) else None
    return None


@dataclass
class ArticleHtml:
    title: str
    paragraphs: list[str]
    image_url: str | None
    image_caption: str
    link_urls: list[str]


def parse_article_html(html: str, url: str) -> ArticleHtml:
    """Paragraphs, representative image and links of a Wikipedia article (Parsoid or Kiwix HTML)."""
    x = extract_html(html, url)
    image = x.representative_image()
    return ArticleHtml(x.title, x.paragraphs, image.url if image else None,
                       image.alt if image else "", x.links)


def parse_summary(payload: Any) -> dict:
    """``{"title", "qid", "type", "image", "url"}`` of a REST ``page/summary`` response."""
    if not isinstance(payload, dict):
        raise wd.SparqlError("the Wikipedia summary response is not a JSON object")
    titles = payload.get("titles") if isinstance(payload.get("titles"), dict) else {}
    image = None
    for key in ("originalimage", "thumbnail"):
        block = payload.get(key)
        if isinstance(block, dict) and isinstance(block.get("source"), str):
            image = block["source"]
            break
    urls = payload.get("content_urls") if isinstance(payload.get("content_urls"), dict) else {}
    desktop = urls.get("desktop") if isinstance(urls.get("desktop"), dict) else {}
    title = titles.get("normalized") or payload.get("title") or ""
    return {
        "title": title.replace("_", " "),
        "qid": qid if isinstance(qid := payload.get("wikibase_item"), str) else None,
        "type": payload.get("type") or "standard",
        "image": image,
        "url": desktop.get("page"),
    }


# ---------------------------------------------------------------------------------------------
# The knowledge source


class LiveKnowledge(KnowledgeSource):
    """``KnowledgeSource`` over Wikidata and Wikipedia (REST API or ``kiwix-serve``)."""

    name = "live"

    def __init__(self, *, cache: ToolCache | None = None, endpoint: str = WDQS_URL,
                 rest_url: str = WIKIPEDIA_REST_URL, wiki_url: str = WIKIPEDIA_URL,
                 kiwix_url: str | None = None, kiwix_book: str | None = None,
                 chunking: str = "slice",
                 window: int | None = None, user_agent: str | None = None,
                 sparql_client: HttpClient | None = None, wiki_client: HttpClient | None = None,
                 http_options: dict | None = None, max_facts: int = wd.MAX_FACTS):
        if chunking not in ("slice", "offset"):
            raise InputError(f"unknown chunking {chunking!r}; "
                             "use 'slice' (query.wikidata.org) or 'offset'")
        if bool(kiwix_url) != bool(kiwix_book):
            raise InputError("a Kiwix source needs both kiwix_url (e.g. http://127.0.0.1:8080) "
                             "and kiwix_book "
                             "(the ZIM file name without .zim, e.g. wikipedia_en_all_maxi_2025-08)")
        self.cache = cache
        self.endpoint = endpoint
        self.rest_url = rest_url.rstrip("/")
        self.wiki_url = wiki_url.rstrip("/")
        self.kiwix_url = kiwix_url.rstrip("/") if kiwix_url else None
        self.kiwix_book = kiwix_book
        self.chunking = chunking
        default = wd.DEFAULT_WINDOW if chunking == "slice" else wd.DEFAULT_OFFSET_WINDOW
        self.window = window or default
        self.max_facts = max_facts
        self._user_agent = user_agent
        self._http_options = dict(http_options or {})
        self._sparql_client = sparql_client
        self._wiki_client = wiki_client
        self._lock = threading.Lock()
        self._titles: dict[str, str] = {}  # qid -> English title
        self._qids: dict[str, str | None] = {}  # title -> qid (None: known not to exist)
        self._pages: dict[str, PageContent] = {}

    @classmethod
    def from_env(cls, *, cache: ToolCache | None = None, **overrides: Any) -> "LiveKnowledge":
        """A source set from ``$VSEARCHER_KIWIX_*`` and ``$VSEARCHER_SPARQL_URL``; keywords win."""
        settings: dict[str, Any] = {}
        if os.environ.get(KIWIX_URL_VAR):
            settings["kiwix_url"] = os.environ[KIWIX_URL_VAR]
            settings["kiwix_book"] = os.environ.get(KIWIX_BOOK_VAR)
        endpoint = os.environ.get(SPARQL_URL_VAR)
        if endpoint:
            settings["endpoint"] = endpoint
            if endpoint.rstrip("/") != WDQS_URL:
                settings["chunking"] = "offset"  # bd:slice is a Blazegraph (WDQS) service
        settings.update(overrides)
        return cls(cache=cache, **settings)

    # -- plumbing -------------------------------------------------------------------------------

    @property
    def user_agent(self) -> str:
        if self._user_agent is None:
            self._user_agent = polite_user_agent()
        return self._user_agent

    def _client(self, which: str) -> HttpClient:
        with self._lock:
            if which == "sparql":
                if self._sparql_client is None:
                    self._sparql_client = HttpClient("wikidata-sparql", user_agent=self.user_agent,
                                                     **{**SPARQL_HTTP, **self._http_options})
                return self._sparql_client
            if self._wiki_client is None:
                defaults = KIWIX_HTTP if self.kiwix_url else WIKI_HTTP
                name = "kiwix" if self.kiwix_url else "wikipedia"
                options = {**defaults, **self._http_options}
                self._wiki_client = HttpClient(name, user_agent=self.user_agent, **options)
            return self._wiki_client

    def _recorded(self, namespace: str, request: dict, live: Callable[[], Any]) -> Any:
        if self.cache is None:
            return live()
        return self.cache.get_or_call(namespace, request, live)

    def sparql(self, query: str) -> list[dict[str, str]]:
        """Run one SPARQL query (cached) and return its rows."""

        def live() -> Any:
            headers = {"Accept": "application/sparql-results+json"}
            client = self._client("sparql")
            form = {"query": query, "format": "json"}
            if len(query) < 4000:  # GET lets the service answer from its own cache
                payload = client.get_json(self.endpoint, params=form, headers=headers)
            else:
                payload = client.post_json(self.endpoint, data=form, headers=headers)
            wd.sparql_rows(payload)  # refuse to record an answer that is not a SPARQL result
            return payload

        payload = self._recorded(NS_SPARQL, {"endpoint": self.endpoint, "query": query}, live)
        return wd.sparql_rows(payload)

    def _fetch(self, namespace: str, url: str, *, as_json: bool) -> dict:
        """``{"status": 200, "body": ...}`` or ``{"status": 404}`` for ``url`` (both cached)."""

        def live() -> dict:
            try:
                response = self._client("wiki").get(url)
            except HttpError as exc:
                if exc.status in (404, 410):
                    return {"status": exc.status}
                raise
            body: Any = response.text
            if as_json:
                try:
                    body = response.json()
                except ValueError:
                    raise HttpError(f"malformed JSON from {url}", url=url,
                                    status=response.status_code, reason="malformed JSON") from None
            return {"status": response.status_code, "body": body, "url": str(response.request.url)}

        return self._recorded(namespace, {"url": url}, live)

    # -- seeds ----------------------------------------------------------------------------------

    def seed_queries(self, sitelinks_max: int = wd.DEFAULT_SITELINKS_MAX,
                     statements_min: int = wd.DEFAULT_STATEMENTS_MIN, *, require_image: bool = True,
                     exclude_people: bool = True) -> Iterator[str]:
        """The window queries ``seeds`` sends, in order (``slice`` asks the count first)."""
        kw = dict(require_image=require_image, exclude_people=exclude_people, window=self.window)
        if self.chunking == "slice":
            rows = self.sparql(wd.build_enwiki_count_query())
            total = wd.as_int(rows[0].get("count")) if rows else None
            if total is None:
                raise wd.SparqlError("the count of English Wikipedia articles came back empty")
            for offset in wd.slice_offsets(total, self.window):
                yield wd.build_seed_query_slice(sitelinks_max, statements_min, offset=offset, **kw)
        else:
            offset = 0
            while True:
                yield wd.build_seed_query_offset(sitelinks_max, statements_min, offset=offset, **kw)
                offset += self.window

    def seeds(self, sitelinks_max: int = wd.DEFAULT_SITELINKS_MAX,
              statements_min: int = wd.DEFAULT_STATEMENTS_MIN, *, require_image: bool = True,
              exclude_people: bool = True, limit: int | None = None,
              progress: Callable[[int, int], None] | None = None) -> list[Seed]:
        """Rare-but-documented seeds, de-duplicated by QID, in window order."""
        seeds: list[Seed] = []
        seen: set[str] = set()
        queries = self.seed_queries(sitelinks_max, statements_min, require_image=require_image,
                                    exclude_people=exclude_people)
        for index, query in enumerate(queries):
            rows = self.sparql(query)
            for seed in wd.rows_to_seeds(rows):
                if seed.id not in seen:
                    seen.add(seed.id)
                    seeds.append(seed)
                    self._remember(seed.id, seed.title)
            if progress is not None:
                progress(index, len(seeds))
            if limit is not None and len(seeds) >= limit:
                return seeds[:limit]
            if self.chunking == "offset" and len(rows) < self.window:
                break  # a short window is the last one
        return seeds

    # -- titles and ids -------------------------------------------------------------------------

    def _remember(self, qid: str, title: str) -> None:
        self._titles.setdefault(qid, title)
        self._qids[title] = qid

    def title(self, qid: str) -> str:
        """The English Wikipedia title of ``qid``; ``LookupError`` if it has no English article."""
        qid = self._check_qid(qid)
        if qid not in self._titles:
            self.entity(qid)
        title = self._titles.get(qid)
        if not title:
            raise LookupError(f"{qid} has no English Wikipedia article")
        return title

    @staticmethod
    def _check_qid(qid: str) -> str:
        qid = str(qid).strip()
        if not wd.QID.match(qid):
            raise LookupError(f"{qid!r} is not a Wikidata id (expected Q followed by digits)")
        return qid

    def entity(self, entity_id: str) -> Entity:
        qid = self._check_qid(entity_id)
        rows = self.sparql(wd.build_entity_query(qid))
        if not rows:
            raise LookupError(f"Wikidata has no item {qid}")
        first = rows[0]
        title = next((r["title"] for r in rows if r.get("title")), "")
        if title:
            self._remember(qid, title)
        # A type without an English label comes back as its bare QID: no use as a type name.
        types = [r["typeLabel"] for r in rows
                 if r.get("typeLabel") and not wd.QID.match(r["typeLabel"])]
        aliases = [a.strip() for a in (first.get("itemAltLabel") or "").split(",") if a.strip()]
        return Entity(
            id=qid,
            name=first.get("itemLabel") or title or qid,
            type=types[0] if types else "",
            aliases=aliases,
            sitelinks=wd.as_int(first.get("sitelinks")) or 0,
            statements=wd.as_int(first.get("statements")) or 0,
            url=self.article_url(title) if title else "",
            is_person=(first.get("human") or "").lower() in ("true", "1"),
        )

    def find(self, name: str) -> str | None:
        """The QID of a title, name or QID; ``None`` if there is no such English article."""
        name = (name or "").strip()
        if not name:
            return None
        if wd.QID.match(name):
            return name
        title = name.replace("_", " ")
        if title in self._qids:
            return self._qids[title]
        qid = None
        if self.kiwix_url:
            qid = self.resolve_titles([title]).get(title)
        else:
            summary = self._summary(title)  # follows redirects to the canonical title
            if summary is not None and summary["type"] != "disambiguation":
                canonical = summary["title"] or title
                qid = summary["qid"] or self.resolve_titles([canonical]).get(canonical)
                if qid and summary["title"]:
                    self._remember(qid, summary["title"])
        self._qids[title] = qid
        return qid

    def resolve_titles(self, titles: list[str]) -> dict[str, str]:
        """QIDs of English titles, ``TITLES_PER_QUERY`` a query; unknown ones left out."""
        out: dict[str, str] = {}
        todo = []
        for t in dict.fromkeys(t.replace("_", " ").strip() for t in titles if t and t.strip()):
            if t in self._qids:
                if self._qids[t]:
                    out[t] = self._qids[t]
            else:
                todo.append(t)
        for start in range(0, len(todo), TITLES_PER_QUERY):
            batch = todo[start:start + TITLES_PER_QUERY]
            for row in self.sparql(wd.build_titles_query(batch)):
                qid = wd.qid_from_uri(row.get("item", ""))
                if qid and row.get("title"):
                    out[row["title"]] = qid
                    self._remember(qid, row["title"])
        return out

    # -- pages ----------------------------------------------------------------------------------

    def article_url(self, title: str) -> str:
        """The public URL of an article (the Kiwix URL when reading from Kiwix)."""
        path = title_to_path(title, keep_slash=True)
        if self.kiwix_url:
            return f"{self.kiwix_url}/content/{self.kiwix_book}/A/{path}"
        return f"{self.wiki_url}/wiki/{path}"

    def _article_prefixes(self) -> tuple[str, ...]:
        prefixes = [f"{self.wiki_url}/wiki/"]
        if self.kiwix_url:
            base = f"{self.kiwix_url}/content/{self.kiwix_book}/"
            prefixes = [base + "A/", base, f"{self.kiwix_url}/{self.kiwix_book}/A/"] + prefixes
        return tuple(prefixes)

    def _summary(self, title: str) -> dict | None:
        url = f"{self.rest_url}/page/summary/{title_to_path(title)}"
        record = self._fetch(NS_WIKIPEDIA, url, as_json=True)
        if record["status"] != 200:
            return None
        return parse_summary(record["body"])

    def _article_html(self, title: str, qid: str) -> tuple[str, str]:
        """``(html, url)`` of the article; ``LookupError`` naming the title and QID if missing."""
        if self.kiwix_url:
            path = title_to_path(title)
            candidates = [
                f"{self.kiwix_url}/content/{self.kiwix_book}/A/{path}",  # older ZIMs: under A/
                f"{self.kiwix_url}/content/{self.kiwix_book}/{path}",  # newer ZIMs do not
                f"{self.kiwix_url}/{self.kiwix_book}/A/{path}",  # kiwix-serve before /content/ URLs
            ]
            for url in candidates:
                record = self._fetch(NS_KIWIX, url, as_json=False)
                if record["status"] == 200:
                    return record["body"], url
            raise LookupError(f"the Kiwix book {self.kiwix_book} has no article {title!r} ({qid}); "
                              f"tried {candidates[0]}")
        url = f"{self.rest_url}/page/html/{title_to_path(title)}"
        record = self._fetch(NS_WIKIPEDIA, url, as_json=False)
        if record["status"] != 200:
            status = record["status"]
            raise LookupError(f"Wikipedia has no article {title!r} ({qid}): "
                              f"{url} answered {status}")
        return record["body"], self.article_url(title)

    def page(self, entity_id: str) -> PageContent:
        qid = self._check_qid(entity_id)
        if qid in self._pages:
            return self._pages[qid]
        title = self.title(qid)
        html, url = self._article_html(title, qid)
        article = parse_article_html(html, url)
        image_url = article.image_url
        if image_url is None and not self.kiwix_url:
            summary = self._summary(title)
            image_url = summary["image"] if summary else None
        prefixes = self._article_prefixes()
        links = []
        for link in article.link_urls:
            linked = article_title_from_url(link, prefixes)
            if linked and linked != title:
                canonical = self.article_url(linked)
                if canonical not in links:
                    links.append(canonical)
        if not article.paragraphs:
            raise LookupError(f"the article {title!r} ({qid}) has no paragraph text")
        page = PageContent(
            url=url,
            title=title,
            paragraphs=article.paragraphs,
            entity_id=qid,
            image=ImageRef(image_url, entity_id=qid, caption=article.image_caption or title)
            if image_url else None,
            links=links,
            kind="article",
        )
        self._pages[qid] = page
        while len(self._pages) > PAGE_MEMORY:  # keep memory bounded on long synthesis runs
            self._pages.pop(next(iter(self._pages)))
        return page

    def image(self, entity_id: str) -> ImageRef | None:
        return self.page(entity_id).image

    def facts(self, entity_id: str) -> list[Fact]:
        """A few Wikidata claims: item-valued ones with English labels, and years of dates."""
        qid = self._check_qid(entity_id)
        rows = self.sparql(wd.build_facts_query(qid, self.max_facts * 2))
        return wd.rows_to_facts(qid, rows, self.max_facts)

    def links(self, entity_id: str) -> list[str]:
        """QIDs of the articles the entity's article links to, in link order."""
        page = self.page(entity_id)
        prefixes = self._article_prefixes()
        titles = [t for t in (article_title_from_url(u, prefixes) for u in page.links) if t]
        resolved = self.resolve_titles(titles)
        out = []
        for t in titles:
            qid = resolved.get(t)
            if qid and qid != page.entity_id and qid not in out:
                out.append(qid)
        return out

    def entity_for_url(self, url: str) -> str | None:
        title = article_title_from_url(url, self._article_prefixes())
        return self.find(title) if title else None
