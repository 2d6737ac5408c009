"""Chat backends: one interface, ``ChatBackend.chat(messages, **sampling) -> str``, for every
LLM role, and the ``make_chat`` factory. Modules: ``base`` (the interface, image parts, token
usage), ``openai`` (OpenAI-compatible HTTP), ``local`` (a ``transformers`` model), ``batched``
(many concurrent episodes on one model, in lockstep), ``engine`` (a local model's multi-turn
generation, each episode continued from its KV cache).

Messages use the OpenAI shape, with ``{"type": "image", "image": <path or URL>}`` parts that each
backend converts. Sampling keywords: ``temperature``, ``top_p``, ``max_tokens``, ``stop``,
``seed``; local models also take ``repeat_guard``.
"""

from __future__ import annotations

from typing import Any

from vsearcher_lite.chat.base import (
    ChatBackend,
    ChatError,
    ScriptedChat,
    image_to_url,
    message_text,
    roles_usage,
    usage_of,
)
from vsearcher_lite.chat.openai import OpenAIChat, normalise_base_url, to_openai_message

__all__ = ["BACKENDS", "ChatBackend", "ChatError", "OpenAIChat", "ScriptedChat", "image_to_url",
           "make_chat", "message_text", "normalise_base_url", "roles_usage", "to_openai_message",
           "usage_of"]
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
    from vsearcher_lite.chat.local import TransformersChat

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
            return TransformersChat(model, **options)
        return OpenAIChat(**options)
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
        return OpenAIChat(model or None, base_url, **overrides)
    if kind == "transformers":
        if not rest:
            raise InputError(f"chat spec {spec!r}: give the model as "
                             "'transformers:<path or hub id>'")
        return TransformersChat(rest, **overrides)
    raise InputError(f"chat spec {spec!r}: {_SPEC_FORMS}")
