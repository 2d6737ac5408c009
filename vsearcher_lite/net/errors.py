"""``HttpError``, the one error type of the network layer, in its own module so that ``net.http``
and ``net.guard`` can both import it without importing each other."""

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
