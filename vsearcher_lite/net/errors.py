"""``HttpError``, the one error type of the network layer.

It has its own module so that both ``net.http`` (which raises it) and ``net.guard`` (whose
``BlockedUrl`` is one) can import it without importing each other.
"""

from __future__ import annotations


class HttpError(RuntimeError):
    """A request failed for good. ``url`` has secrets masked; ``status`` is ``None`` for
    connection-level failures; ``reason`` is a short cause; ``body`` a (masked) excerpt."""

    def __init__(self, message: str, *, url: str = "", status: int | None = None, reason: str = "",
                 body: str = ""):
        super().__init__(message)
        self.url = url
        self.status = status
        self.reason = reason
        self.body = body
