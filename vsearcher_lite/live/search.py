"""Live search backends (paper appendix A.1) and the record/replay plumbing of every live backend.

With a ``ToolCache``, live requests (without keys) are recorded with the raw response; ``replay``
serves only recorded answers, with no network and no keys. Only answers that would come back the
same are recorded: never throttling, outages or key problems.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from vsearcher_lite.cache import CacheMiss, ToolCache
from vsearcher_lite.live.html import sniff_image_type
from vsearcher_lite.live.parse import (
    is_http_url,
    parse_google_cse,
    parse_serper_lens,
    parse_serper_search,
    parse_vision_response,
)
from vsearcher_lite.live.secrets import get_secret
from vsearcher_lite.net.guard import BlockedUrl, UrlGuard
from vsearcher_lite.net.http import HttpClient, HttpError
from vsearcher_lite.redaction import redact, remember_secret
from vsearcher_lite.runio import InputError
from vsearcher_lite.tools.base import (
    ImageHit,
    ImageSearchBackend,
    SearchHit,
    TextSearchBackend,
    ToolError,
)
from vsearcher_lite.world.model import ImageRef

SERPER_SEARCH_URL = "https://google.serper.dev/search"
SERPER_LENS_URL = "https://google.serper.dev/lens"
GOOGLE_CSE_URL = "https://www.googleapis.com/customsearch/v1"
VISION_URL = "https://vision.googleapis.com/v1/images:annotate"

# Cache namespaces of the raw responses, one per service.
NS_SERPER = "live.serper.search"
NS_CSE = "live.google_cse"
NS_VISION = "live.vision"
NS_IMAGE_CHECK = "live.image_check"
NS_LENS = "live.serper.lens"

# HTTP settings: search APIs are quick and paid per call; image checks must be quicker still.
API_HTTP = dict(timeout=20.0, max_retries=4, backoff_base=0.5, backoff_max=30.0,
                total_timeout=90.0, rate_per_s=5.0, max_concurrency=4)
IMAGE_CHECK_HTTP = dict(timeout=5.0, max_retries=1, backoff_base=0.25, backoff_max=2.0,
                        total_timeout=12.0, rate_per_s=10.0, max_concurrency=4)


class ReplayMiss(ToolError, CacheMiss):
    """Replay mode: the recording has no response for this request (and the network is off)."""


class HttpBackend:
    """A backend's ``HttpClient`` and key, made on the first live call, and record/replay."""

    service = "live"
    key_var: str | None = None
    key_required = True
    http_defaults: dict = API_HTTP

    def __init__(self, api_key: str | None = None, *, client: HttpClient | None = None,
                 cache: ToolCache | None = None, env_file: str | None = None,
                 http_options: dict | None = None):
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
            self._api_key = get_secret(self.key_var, env_file=self.env_file,
                                       required=self.key_required)
        return self._api_key

    @property
    def client(self) -> HttpClient:
        with self._lock:
            if self._client is None:
                key = self.api_key()
                options = {**self.http_defaults, **self.http_options}
                self._client = HttpClient(self.service, key_var=self.key_var,
                                          secrets=[key] if key else [], **options)
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
                f"{self.service}: {exc}. This request was not recorded; run once with network "
                "access (cache mode readwrite or record) to record it."
            ) from None

    def _tool_error(self, what: str, exc: Exception) -> ToolError:
        return ToolError(redact(f"{self.service} {what} failed: {exc}"))

    def _answer(self, namespace: str, request: dict, what: str, live: Callable[[], Any]) -> Any:
        """``live()``'s answer, recorded or replayed; an HTTP failure becomes a ``ToolError``."""
        try:
            return self._recorded(namespace, request, live)
        except HttpError as exc:
            raise self._tool_error(what, exc) from None

    def _post(self, url: str, body: dict, key_header: str) -> Callable[[], Any]:
        """The live call that POSTs ``body`` to ``url`` with the key in ``key_header``."""
        return lambda: self.client.post_json(url, json=body, headers={key_header: self.api_key()})



class SerperTextSearch(HttpBackend, TextSearchBackend):
    """Google results through Serper: ``POST /search`` with the key in ``X-API-KEY``."""

    name = "serper"
    service = "serper"
    key_var = "SERPER_API_KEY"

    def __init__(self, api_key: str | None = None, *, gl: str = "us", hl: str = "en", **kw: Any):
        super().__init__(api_key, **kw)
        self.gl, self.hl = gl, hl

    def request_body(self, query: str, k: int) -> dict:
        # One Serper credit buys up to 10 results: ask for 10, so a top-k cut needs no second call.
        return {"q": query, "gl": self.gl, "hl": self.hl, "num": max(10, k)}

    def search(self, query: str, k: int = 5) -> list[SearchHit]:
        body = self.request_body(query, k)
        request = {"url": SERPER_SEARCH_URL, "body": body}
        live = self._post(SERPER_SEARCH_URL, body, "X-API-KEY")
        payload = self._answer(NS_SERPER, request, f"text search for {query!r}", live)
        return parse_serper_search(payload, k)


class GoogleCustomSearch(HttpBackend, TextSearchBackend):
    """The Custom Search JSON API (the paper's text search), closed to new customers:
    ``$GOOGLE_CSE_KEY`` (or ``$GOOGLE_API_KEY``) and ``$GOOGLE_CSE_ID``."""

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
            env = self.env_file
            self._api_key = (get_secret("GOOGLE_CSE_KEY", env_file=env, required=False)
                             or get_secret("GOOGLE_API_KEY", env_file=env, required=False))
            if self._api_key is None:
                raise InputError("missing API key: set $GOOGLE_CSE_KEY (or $GOOGLE_API_KEY) "
                                 "for Google Custom Search")
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

        payload = self._answer(NS_CSE, request, f"text search for {query!r}", live)
        return parse_google_cse(payload, k)


class HttpImageChecker:
    """Is an image URL reachable and really an image (paper A.1)? Sniffs the first bytes; only
    definite answers are recorded (a transient failure answers False)."""

    def __init__(self, client: HttpClient | None = None, *, cache: ToolCache | None = None,
                 guard: UrlGuard | None = None, max_bytes: int = 65536,
                 http_options: dict | None = None):
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
            return self.cache.get_or_call(NS_IMAGE_CHECK, {"url": url},
                                          lambda: self._check_live(url, record=True))
        except _TransientCheckFailure as exc:
            return {"ok": False, "format": None, "reason": str(exc)}
        except CacheMiss:
            reason = "not recorded (unreachable while recording)"
            return {"ok": False, "format": None, "reason": reason}

    def _check_live(self, url: str, *, record: bool) -> dict:
        try:
            headers = {"Range": f"bytes=0-{self.max_bytes - 1}", "Accept": "image/*"}
            response = self.client.get(url, headers=headers, max_bytes=self.max_bytes)
        except BlockedUrl as exc:
            return {"ok": False, "format": None, "reason": redact(f"blocked: {exc}")}
        except HttpError as exc:
            status = exc.status
            permanent = status is not None and 400 <= status < 500 and status not in (408, 429)
            if permanent or not record:
                return {"ok": False, "format": None, "reason": redact(str(exc))}
            raise _TransientCheckFailure(redact(str(exc))) from None
        kind = sniff_image_type(response.content, response.headers.get("content-type", ""))
        claimed = response.headers.get("content-type", "?")
        reason = f"a {kind} image" if kind else f"not an image (content-type {claimed})"
        return {"ok": kind is not None, "format": kind, "reason": reason}


class _TransientCheckFailure(RuntimeError):
    """An image check failed in a way that may pass next time: do not record it."""


class VisionWebDetection(HttpBackend, ImageSearchBackend):
    """Reverse image search with Cloud Vision WEB_DETECTION (the paper's): the pages with matching
    images, in order, each with its first image ``image_checker`` accepts."""

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
        data = path.read_bytes()
        return ({"content": base64.b64encode(data).decode("ascii")},
                {"image_sha256": hashlib.sha256(data).hexdigest()})

    def search(self, image: ImageRef, k: int = 5) -> list[ImageHit]:
        image_field, image_record = self._image_payload(image)
        features = [{"type": "WEB_DETECTION", "maxResults": self.max_results}]
        body = {"requests": [{"image": image_field, "features": features}]}
        request = {"url": VISION_URL, "image": image_record, "features": features}
        live = self._post(VISION_URL, body, "X-Goog-Api-Key")
        payload = self._answer(NS_VISION, request, "image search", live)
        return self.select_pages(parse_vision_response(payload), k)

    def select_pages(self, pages: list, k: int) -> list[ImageHit]:
        """The first ``k`` pages with a checked image, one image per page, in Vision's order."""

        def first_valid_image(page) -> str | None:
            return next((u for u in page.image_urls if self.image_checker(u)), None)

        hits: list[ImageHit] = []
        if not pages:
            return hits
        # Results are consumed in page order: the outcome does not depend on which check ends first.
        with ThreadPoolExecutor(max_workers=min(self.check_workers, len(pages))) as pool:
            futures = [pool.submit(first_valid_image, p) for p in pages]
            for page, future in zip(pages, futures):
                image_url = future.result()
                if image_url:
                    image = ImageRef(image_url, caption=page.title)
                    hits.append(ImageHit(url=page.url, title=page.title, image=image))
                    if len(hits) >= k:
                        break
            for f in futures:
                f.cancel()
        return hits


class SerperLens(HttpBackend, ImageSearchBackend):
    """Google Lens through Serper; Lens fetches the image itself, so it must be public."""

    name = "serper_lens"
    service = "serper-lens"
    key_var = "SERPER_API_KEY"

    def __init__(self, api_key: str | None = None, *, gl: str = "us", hl: str = "en", **kw: Any):
        super().__init__(api_key, **kw)
        self.gl, self.hl = gl, hl

    def search(self, image: ImageRef, k: int = 5) -> list[ImageHit]:
        if not image.is_url:
            raise ToolError(
                f"Serper Lens needs the question image at a public http(s) URL, but "
                f"{image.location} is a local file. Host the image publicly, or set "
                "$GOOGLE_VISION_API_KEY to search local images with Cloud Vision."
            )
        body = {"url": image.location, "gl": self.gl, "hl": self.hl}
        request = {"url": SERPER_LENS_URL, "body": body}
        live = self._post(SERPER_LENS_URL, body, "X-API-KEY")
        payload = self._answer(NS_LENS, request, "image search", live)
        return parse_serper_lens(payload, k)
