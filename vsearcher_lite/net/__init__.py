"""Networking that holds up: a resilient HTTP client, the SSRF guard, and secret handling.

- ``net.http``: ``HttpClient`` (timeouts, retries with backoff and jitter, Retry-After,
  concurrency and rate limits, redirect hops checked by the guard);
- ``net.errors``: ``HttpError``, the layer's one error type;
- ``net.guard``: ``UrlGuard`` / ``BlockedUrl``, the SSRF guard of the live ``visit`` tool;
- ``net.secrets``: ``get_secret`` / ``redact`` / ``known_secrets``: keys from the environment,
  never shown.
"""

from vsearcher_lite.net.guard import BlockedUrl, UrlGuard, pinned_transport
from vsearcher_lite.net.http import DEFAULT_USER_AGENT, HttpClient, HttpError
from vsearcher_lite.net.secrets import (
    get_secret,
    get_setting,
    known_secrets,
    redact,
    scan_for_secrets,
)

__all__ = ["BlockedUrl", "DEFAULT_USER_AGENT", "HttpClient", "HttpError", "UrlGuard", "get_secret",
           "get_setting", "known_secrets", "pinned_transport", "redact", "scan_for_secrets"]
