"""HTTP that holds up: the transport of the live web and of the few downloads the course makes
(benchmark files, remote images), each imported only where a request is made.

Modules: ``http`` (``HttpClient``: retries, size limits, secrets masked in every error),
``errors`` (``HttpError``, the layer's one error type), ``guard`` (the SSRF guard of the live
``visit`` tool and of every fetch of a URL that came from outside).
"""
