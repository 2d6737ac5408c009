"""An HTTP client that holds up against real web APIs (httpx underneath).

One ``HttpClient`` per backend. A call has a bounded total time over its retries; retries 429,
5xx, connection errors and truncated bodies with full-jitter backoff and ``Retry-After``; fails
at once on other 4xx with a message a user can act on; respects concurrency and rate limits;
with a ``guard`` checks every redirect hop; and never puts a secret into an error message.

>>> import httpx
>>> def app(request):
...     return httpx.Response(200, json={"echo": request.url.params["q"]})
>>> client = HttpClient("demo", transport=httpx.MockTransport(app))
>>> client.get_json("https://api.example/search", params={"q": "cats"})
{'echo': 'cats'}
>>> client.stats["requests"], client.stats["retries"]
(1, 0)
"""

from __future__ import annotations

import email.utils
import json as jsonlib
import random
import threading
import time
from typing import Any, Callable, Iterable
from urllib.parse import urljoin

import httpx

from vsearcher_lite.net.errors import HttpError
from vsearcher_lite.net.guard import BlockedUrl, UrlGuard, pinned_transport
from vsearcher_lite.redaction import redact

try:
    from importlib.metadata import version as _pkg_version

    _VERSION = _pkg_version("vsearcher-lite")
except Exception:  # not installed (e.g. run from a source tree)
    _VERSION = "0"

# Wikimedia asks for a descriptive User-Agent with a way to reach the operator; users running
# many live requests should put their own contact in (HttpClient(user_agent=...)).
DEFAULT_USER_AGENT = (f"vsearcher-lite/{_VERSION} "
                      "(educational research reproduction; python-httpx)")

RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504, 520, 521, 522, 523, 524, 529})
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 10
# Headers whose values are credentials; their values are masked in any message.
CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key",
                                "x-goog-api-key", "api-key"})
BODY_EXCERPT_CHARS = 300


class _RetryableFailure(Exception):
    """Internal: one attempt failed in a way worth retrying."""

    def __init__(self, reason: str, status: int | None = None, retry_after: float | None = None,
                 body: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.retry_after = retry_after
        self.body = body


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date), or ``None``.

    >>> parse_retry_after("3")
    3.0
    >>> parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0)
    10.0
    >>> parse_retry_after("soon") is None
    True
    """
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    now = time.time() if now is None else now
    return max(0.0, when.timestamp() - now)


def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random) -> float:
    """Full-jitter exponential backoff: uniform over ``[0, min(cap, base * 2**attempt)]``.

    >>> rng = random.Random(0)
    >>> all(0 <= backoff_delay(a, 0.5, 4.0, rng) <= min(4.0, 0.5 * 2**a) for a in range(8))
    True
    """
    return rng.uniform(0.0, min(cap, base * (2 ** attempt)))


def redact_url(url: str, secrets: Iterable[str] = ()) -> str:
    """The URL with key-like query parameters, userinfo passwords and known secrets masked."""
    return redact(str(url), secrets)


class TokenBucket:
    """A thread-safe token bucket; ``acquire`` returns how long the caller slept."""

    def __init__(self, rate: float, capacity: float = 1.0, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Any] = time.sleep):
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = float(rate)
        self.capacity = max(1.0, float(capacity))
        self._tokens = self.capacity
        self._clock, self._sleep = clock, sleep
        self._last = clock()
        self._lock = threading.Lock()

    def acquire(self) -> float:
        with self._lock:
            now = self._clock()
            self._tokens = min(self.capacity, self._tokens + (now - self._last) * self.rate)
            self._last = now
            # Take the token now (possibly going negative) so that concurrent callers queue up
            # behind each other instead of all waking at the same moment.
            self._tokens -= 1.0
            wait = 0.0 if self._tokens >= 0 else -self._tokens / self.rate
        if wait > 0:
            self._sleep(wait)
        return wait


class HttpClient:
    """See the module docstring. ``name`` labels messages and stats; ``key_var`` (the variable
    holding the backend's key) is named in 401/403 messages; ``headers`` go with every request."""

    def __init__(self, name: str, *, timeout: float = 30.0, max_retries: int = 4,
                 backoff_base: float = 0.5, backoff_max: float = 30.0,
                 total_timeout: float | None = 120.0, rate_per_s: float | None = None,
                 max_concurrency: int = 4, guard: UrlGuard | None = None,
                 user_agent: str = DEFAULT_USER_AGENT, transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], Any] = time.sleep, rng: random.Random | None = None,
                 secrets: Iterable[str] = (),
                 key_var: str | None = None, headers: dict[str, str] | None = None,
                 clock: Callable[[], float] = time.monotonic, follow_redirects: bool = True):
        if max_retries < 0 or max_concurrency < 1 or timeout <= 0:
            raise ValueError("need max_retries >= 0, max_concurrency >= 1 and timeout > 0")
        self.name, self.guard, self.key_var = name, guard, key_var
        self.timeout, self.max_retries = float(timeout), int(max_retries)
        self.backoff_base, self.backoff_max = float(backoff_base), float(backoff_max)
        self.total_timeout, self.follow_redirects = total_timeout, follow_redirects
        self._sleep, self._clock = sleep, clock
        self._rng = rng if rng is not None else random.Random(0)
        self._rng_lock = threading.Lock()
        self._secrets = {s for s in secrets if s}
        self._default_headers = dict(headers or {})
        self._secrets.update(_credential_values(self._default_headers))
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self._bucket = TokenBucket(rate_per_s, clock=clock, sleep=sleep) if rate_per_s else None
        self._stats_lock = threading.Lock()
        self.stats: dict[str, int] = {"requests": 0, "retries": 0, "failures": 0, "bytes": 0}
        if guard is not None and transport is None:
            # No environment proxy either (trust_env below): the guard must see the destination.
            transport = pinned_transport(guard)
        # Redirects are followed by hand so that a guard sees every hop.
        self._client = httpx.Client(transport=transport, trust_env=guard is None,
                                    headers={"User-Agent": user_agent}, follow_redirects=False,
                                    timeout=self.timeout)

    # -- public API -------------------------------------------------------------------------

    def get(self, url: str, **kw: Any) -> httpx.Response:
        return self.request("GET", url, **kw)

    def post(self, url: str, **kw: Any) -> httpx.Response:
        return self.request("POST", url, **kw)

    def get_json(self, url: str, **kw: Any) -> Any:
        return self._decode_json(self.get(url, **kw))

    def post_json(self, url: str, **kw: Any) -> Any:
        return self._decode_json(self.post(url, **kw))

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "HttpClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def redact(self, text: str) -> str:
        """``text`` with this client's secrets (and every known secret) masked."""
        return redact(text, self._secrets)

    def request(self, method: str, url: str, *, params: Any = None, json: Any = None,
                data: Any = None, headers: dict[str, str] | None = None,
                max_bytes: int | None = None) -> httpx.Response:
        """Send one request with retries; the final 2xx response (body read), or ``HttpError``.
        A body longer than ``max_bytes`` is cut there, marked ``extensions["truncated"]``."""
        merged = {**self._default_headers, **(headers or {})}
        call_secrets = self._secrets | _credential_values(merged)
        deadline = None if self.total_timeout is None else self._clock() + self.total_timeout
        attempt = 0
        while True:
            try:
                return self._attempt(method, url, params, json, data, merged, max_bytes, deadline,
                                     call_secrets)
            except _RetryableFailure as failure:
                delay = self._retry_delay(attempt, failure)
                remaining = None if deadline is None else deadline - self._clock()
                out_of_time = remaining is not None and delay >= remaining
                if attempt >= self.max_retries or out_of_time:
                    self._count("failures")
                    why = f"after {attempt + 1} attempt(s)"
                    if out_of_time and attempt < self.max_retries:
                        why += f", total time limit {self.total_timeout:g}s reached"
                    shown = redact_url(_with_params(url, params), call_secrets)
                    message = f"{self.name}: {method} {shown} failed {why}: {failure.reason}"
                    raise HttpError(redact(message, call_secrets), url=shown, status=failure.status,
                                    reason=redact(failure.reason, call_secrets),
                                    body=redact(failure.body, call_secrets)) from None
                self._count("retries")
                attempt += 1
                if delay > 0:
                    self._sleep(delay)

    # -- internals ----------------------------------------------------------------------------

    def _retry_delay(self, attempt: int, failure: _RetryableFailure) -> float:
        if failure.retry_after is not None:
            return min(failure.retry_after, self.backoff_max)
        with self._rng_lock:
            return backoff_delay(attempt, self.backoff_base, self.backoff_max, self._rng)

    def _count(self, key: str, n: int = 1) -> None:
        with self._stats_lock:
            self.stats[key] += n

    def _per_attempt_timeout(self, deadline: float | None) -> httpx.Timeout:
        seconds = self.timeout
        if deadline is not None:
            seconds = max(0.001, min(seconds, deadline - self._clock()))
        return httpx.Timeout(seconds)

    def _attempt(self, method: str, url: str, params: Any, json: Any, data: Any,
                 headers: dict[str, str], max_bytes: int | None, deadline: float | None,
                 call_secrets: set[str]) -> httpx.Response:
        """One attempt, redirects followed; ``_RetryableFailure`` for transient problems."""
        current = _with_params(url, params)
        for hop in range(MAX_REDIRECTS + 1):
            self._check_guard(current, call_secrets)
            if self._bucket is not None:
                self._bucket.acquire()
            with self._slots:
                response = self._send(method, current, json, data, headers, max_bytes, deadline,
                                      call_secrets)
            status, location = response.status_code, response.headers.get("location")
            if status in REDIRECT_STATUSES and self.follow_redirects and location is not None:
                current = urljoin(current, location)
                if status == 303 or (status in (301, 302) and method == "POST"):
                    method, json, data = "GET", None, None  # what browsers (and httpx) do
                continue
            return self._classify(method, current, response, call_secrets)
        shown = redact_url(current, call_secrets)
        raise HttpError(f"{self.name}: too many redirects (>{MAX_REDIRECTS}) ending at {shown}",
                        url=shown, reason="too many redirects")

    def _check_guard(self, url: str, call_secrets: set[str]) -> None:
        if self.guard is None:
            return
        try:
            self.guard.check(url)
        except BlockedUrl as exc:
            self._count("failures")
            shown = redact_url(url, call_secrets)
            raise BlockedUrl(redact(str(exc.reason), call_secrets), url=shown) from None

    def _send(self, method: str, url: str, json: Any, data: Any, headers: dict[str, str],
              max_bytes: int | None, deadline: float | None,
              call_secrets: set[str]) -> httpx.Response:
        self._count("requests")
        try:
            request = self._client.build_request(method, url, json=json, data=data,
                                                 headers=headers,
                                                 timeout=self._per_attempt_timeout(deadline))
            response = self._client.send(request, stream=True)
        except HttpError:  # the guard refused the address at connect time
            self._count("failures")
            raise
        except httpx.TimeoutException as exc:
            raise _RetryableFailure(f"timed out ({type(exc).__name__})") from None
        except httpx.TransportError as exc:
            raise _RetryableFailure(_transport_reason(exc, url, call_secrets)) from None
        try:
            body, truncated = self._read_body(response, max_bytes, deadline)
        except httpx.TimeoutException as exc:
            raise _RetryableFailure(f"timed out reading the body ({type(exc).__name__})") from None
        except httpx.TransportError as exc:
            # Most often the peer closed before Content-Length bytes arrived: a truncated body.
            raise _RetryableFailure(f"body cut short ({type(exc).__name__}: {exc})") from None
        finally:
            response.close()
        self._count("bytes", len(body))
        result = httpx.Response(response.status_code, headers=response.headers, content=body,
                                request=response.request,
                                extensions={**response.extensions, "truncated": truncated})
        if truncated:
            # The headers describe the full body; drop the ones that would now be wrong.
            result.headers.pop("content-length", None)
        return result

    def _read_body(self, response: httpx.Response, max_bytes: int | None,
                   deadline: float | None) -> tuple[bytes, bool]:
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if max_bytes is not None and size > max_bytes:
                return b"".join(chunks)[:max_bytes], True
            # A server dripping bytes slowly never trips the per-read timeout; the deadline does.
            if deadline is not None and self._clock() > deadline:
                raise httpx.ReadTimeout("total time limit reached while reading the body")
        return b"".join(chunks), False

    def _classify(self, method: str, url: str, response: httpx.Response,
                  call_secrets: set[str]) -> httpx.Response:
        status = response.status_code
        if 200 <= status < 300:
            return response
        body = redact(response.text[:BODY_EXCERPT_CHARS], call_secrets)
        reason = f"HTTP {status} {response.reason_phrase}".strip()
        if status in RETRY_STATUSES:
            wait = parse_retry_after(response.headers.get("retry-after"))
            raise _RetryableFailure(reason + (f": {body}" if body else ""), status=status,
                                    retry_after=wait, body=body)
        self._count("failures")
        shown = redact_url(url, call_secrets)
        if status in (401, 403):
            hint = (f"check the API key in ${self.key_var}" if self.key_var
                    else "check the API key and its permissions")
            message = f"{self.name}: {reason} for {method} {shown}: {hint}"
        elif status == 404:
            message = f"{self.name}: {reason}: {shown} does not exist"
        elif status in REDIRECT_STATUSES:
            message = f"{self.name}: {reason} redirect from {shown} not followed"
        else:
            message = f"{self.name}: {reason} for {method} {shown}"
        if body:
            message += f" (server said: {' '.join(body.split())})"
        raise HttpError(redact(message, call_secrets), url=shown, status=status, reason=reason,
                        body=body)

    def _decode_json(self, response: httpx.Response) -> Any:
        try:
            return jsonlib.loads(response.content)
        except (ValueError, UnicodeDecodeError) as exc:
            shown = redact_url(str(response.request.url), self._secrets)
            excerpt = self.redact(response.text[:80])
            raise HttpError(f"{self.name}: malformed JSON from {shown} ({exc}); "
                            f"body starts {excerpt!r}", url=shown, status=response.status_code,
                            reason="malformed JSON", body=excerpt) from None


def _with_params(url: str, params: Any) -> str:
    """``url`` with ``params`` added to (not replacing) its query string."""
    return str(httpx.URL(url).copy_merge_params(params)) if params else url


def _credential_values(headers: dict[str, str]) -> set[str]:
    """Values of credential headers (and the token after ``Bearer``), to mask in messages."""
    values = {v for k, v in headers.items() if k.lower() in CREDENTIAL_HEADERS and v}
    return values | {v.split(None, 1)[1] for v in values if len(v.split(None, 1)) == 2}


def _transport_reason(exc: httpx.TransportError, url: str, call_secrets: set[str]) -> str:
    """A short, secret-free description of a connection-level failure that names the URL."""
    shown = redact_url(url, call_secrets)
    text = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.ConnectError):
        if "refused" in text.lower():
            return f"connection refused by {shown} (is the server running and the URL right?)"
        return f"could not connect to {shown} ({redact(text, call_secrets)})"
    return f"{type(exc).__name__} talking to {shown}: {redact(text, call_secrets)}"
