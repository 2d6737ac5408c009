"""Networking that holds up: a resilient HTTP client, the SSRF guard, and secret handling.

Modules: ``http`` (``HttpClient``), ``errors`` (``HttpError``, the layer's one error type),
``guard`` (the SSRF guard of the live ``visit`` tool), ``secrets`` (keys from the environment,
never shown).
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
