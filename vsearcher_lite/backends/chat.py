"""A role's chat backend from a spec (``make_chat``): a local ``transformers`` model for the
course, or an OpenAI-compatible endpoint, whose client (``live.openai``) is imported only when a
spec names it.
"""

from __future__ import annotations

from typing import Any

from vsearcher_lite.chat.base import ChatBackend
from vsearcher_lite.runio import InputError

BACKENDS = ("openai", "transformers")
_SPEC_FORMS = "expected 'openai:<model>@<base_url>', 'transformers:<path>' or a dict"


def make_chat(spec: "str | dict | ChatBackend", **overrides: Any) -> ChatBackend:
    """A chat backend from a spec: a backend (as is), ``"openai:<model>@<base_url>"``,
    ``"openai[:<model>]"`` (the rest from the environment), ``"transformers:<path or hub id>"``,
    or a dict ``{"backend": ..., **constructor keywords}``; ``overrides`` add keywords.

    >>> make_chat("openai:qwen2.5-vl@http://127.0.0.1:8000/v1")
    OpenAIChat(model='qwen2.5-vl', base_url='http://127.0.0.1:8000/v1')
    """
    if isinstance(spec, ChatBackend):
        return spec
    if isinstance(spec, dict):
        options = dict(spec)
        kind = options.pop("backend", None) or options.pop("type", None)
        if kind not in BACKENDS:
            raise InputError(f"chat spec {spec!r}: 'backend' must be one of {', '.join(BACKENDS)}")
        options.update(overrides)
        if kind == "transformers":
            model = options.pop("model", None) or options.pop("path", None)
            if not model:
                raise InputError(f"chat spec {spec!r}: a transformers backend needs 'model' "
                                 "(a path or hub id)")
            return _transformers(model, **options)
        return _openai(**options)
    if not isinstance(spec, str) or not spec.strip():
        raise InputError(f"chat spec {spec!r}: {_SPEC_FORMS}")
    kind, _, rest = spec.strip().partition(":")
    if kind == "openai":
        model, base_url = rest, None
        at = rest.rfind("@http")
        if at >= 0:
            model, base_url = rest[:at], rest[at + 1:]
        elif "@" in rest:
            raise InputError(f"chat spec {spec!r}: the base URL after '@' must start with http:// "
                             "or https:// (a model name with '@' in it: use the dict form)")
        return _openai(model or None, base_url, **overrides)
    if kind == "transformers":
        if not rest:
            raise InputError(f"chat spec {spec!r}: give the model as "
                             "'transformers:<path or hub id>'")
        return _transformers(rest, **overrides)
    raise InputError(f"chat spec {spec!r}: {_SPEC_FORMS}")


def _transformers(model: str, **options: Any) -> ChatBackend:
    from vsearcher_lite.chat.local import TransformersChat  # torch and transformers: on demand

    return TransformersChat(model, **options)


def _openai(*args: Any, **options: Any) -> ChatBackend:
    from vsearcher_lite.live.openai import OpenAIChat  # the HTTP stack: only for this backend

    return OpenAIChat(*args, **options)
