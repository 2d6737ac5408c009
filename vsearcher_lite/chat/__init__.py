"""Chat backends: one interface, ``ChatBackend.chat(messages, **sampling) -> str``, for every
LLM role, and their shared pieces. Modules: ``base`` (the interface, image parts, token
usage), ``local`` (a ``transformers`` model), ``batched`` (many concurrent episodes on one
model, in lockstep), ``engine`` (a local model's multi-turn
generation, each episode continued from its KV cache). A backend is made from a spec by
``backends.chat.make_chat``; the OpenAI-compatible client is ``live.openai``.

Messages use the OpenAI shape, with ``{"type": "image", "image": <path or URL>}`` parts that each
backend converts. Sampling keywords: ``temperature``, ``top_p``, ``max_tokens``, ``stop``,
``seed``; local models also take ``force_after`` and ``token_limits``.
"""

from __future__ import annotations

from vsearcher_lite.chat.base import (
    ChatBackend,
    ChatError,
    ScriptedChat,
    image_to_url,
    message_text,
    roles_usage,
    usage_of,
)

__all__ = ["ChatBackend", "ChatError", "ScriptedChat", "image_to_url", "message_text",
           "roles_usage", "usage_of"]
