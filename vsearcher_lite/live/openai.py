"""The OpenAI-compatible HTTP backend (vLLM, SGLang, Ollama, ``transformers serve``, OpenAI,
Gemini)."""


from __future__ import annotations

import os
import re
import threading
import time
from typing import Any, Callable

from vsearcher_lite.chat.base import (
    LOCAL_SAMPLING_KEYS,
    ChatBackend,
    ChatError,
    cut_at_stop,
    image_to_url,
    is_remote_url,
    new_usage,
)
from vsearcher_lite.live.secrets import get_secret, get_setting
from vsearcher_lite.net.http import HttpClient, HttpError
from vsearcher_lite.redaction import remember_secret
from vsearcher_lite.runio import InputError

DEFAULT_BASE_URL = "http://localhost:8000/v1"  # where `vllm serve` listens by default
_MODEL_MISSING = re.compile(
    r"(?i)(model[^\n]{0,120}(not found|does not exist|not exist|unknown|no such|try pulling))"
    r"|((not found|does not exist|unknown)[^\n]{0,40}model)|model_not_found")


class OpenAIChat(ChatBackend):
    """A chat model behind an OpenAI-compatible ``/chat/completions`` endpoint; threads may share
    it. ``model``, ``base_url`` and ``api_key`` default to ``$VSEARCHER_CHAT_MODEL``,
    ``$VSEARCHER_CHAT_BASE_URL`` and ``$VSEARCHER_CHAT_API_KEY`` (or their ``OPENAI_`` forms).
    ``defaults`` fill sampling values a call leaves out; ``extra_body`` joins every request.
    """

    name = "openai"

    def __init__(self, model: str | None = None, base_url: str | None = None,
                 api_key: str | None = None, *, env_file: str | os.PathLike | None = None,
                 timeout: float = 120.0, max_retries: int = 4, total_timeout: float | None = 600.0,
                 max_concurrency: int = 8, rate_per_s: float | None = None,
                 defaults: dict[str, Any] | None = None, extra_body: dict[str, Any] | None = None,
                 transport: Any = None, sleep: Callable[[float], Any] = time.sleep,
                 backoff_base: float = 0.5, backoff_max: float = 30.0):
        self.model = model or get_setting("VSEARCHER_CHAT_MODEL", env_file=env_file)
        if not self.model:
            raise InputError("no chat model named: pass model= (or 'openai:<model>@<base_url>') "
                             "or set $VSEARCHER_CHAT_MODEL")
        base = (base_url or get_setting("VSEARCHER_CHAT_BASE_URL", env_file=env_file)
                or get_setting("OPENAI_BASE_URL", env_file=env_file) or DEFAULT_BASE_URL)
        self.base_url = normalise_base_url(base)
        self.key_var: str | None = None
        if api_key:
            remember_secret(api_key)
        else:
            key_vars = ["VSEARCHER_CHAT_API_KEY", "OPENAI_API_KEY"]
            if "generativelanguage.googleapis.com" in self.base_url:
                key_vars.append("GEMINI_API_KEY")
            for var in key_vars:
                api_key = get_secret(var, env_file=env_file, required=False)
                if api_key:
                    self.key_var = var
                    break
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = HttpClient(
            f"chat {self.model}", timeout=timeout, max_retries=max_retries,
            total_timeout=total_timeout, max_concurrency=max_concurrency, rate_per_s=rate_per_s,
            transport=transport, sleep=sleep,
            secrets=[api_key] if api_key else (), key_var=self.key_var or "VSEARCHER_CHAT_API_KEY",
            headers=headers, backoff_base=backoff_base, backoff_max=backoff_max,
        )
        self.defaults = dict(defaults or {})
        self.extra_body = dict(extra_body or {})
        self.usage = new_usage()
        self._usage_lock = threading.Lock()
        self.last_finish_reason: str | None = None
        self.last_reasoning: str | None = None

    def __repr__(self) -> str:
        return f"OpenAIChat(model={self.model!r}, base_url={self.base_url!r})"

    @property
    def http_stats(self) -> dict[str, int]:
        """Requests, retries, failures and bytes of the underlying HTTP client."""
        return dict(self._http.stats)

    def build_request(self, messages: list[dict], **sampling: Any) -> dict[str, Any]:
        """The JSON body sent for ``messages`` and ``sampling`` (images become data URLs)."""
        merged = {**self.defaults, **sampling}
        for rule in LOCAL_SAMPLING_KEYS:
            if merged.pop(rule, None):
                raise ChatError(f"{rule} is a decoding rule of the local transformers backends; "
                                f"the server behind {self.model!r} cannot apply it (leave it "
                                "unset)")
        body: dict[str, Any] = {"model": self.model,
                                "messages": [to_openai_message(m) for m in messages]}
        body.update(self.extra_body)
        for key, value in merged.items():
            if value is None:
                continue
            if key == "stop" and isinstance(value, str):
                value = [value]
            body[key] = list(value) if key == "stop" else value
        return body

    def chat(self, messages: list[dict], **sampling: Any) -> str:
        body = self.build_request(messages, **sampling)
        try:
            reply = self._http.post_json(f"{self.base_url}/chat/completions", json=body)
        except HttpError as exc:
            raise self._explain(exc) from None
        text = self._read_reply(reply)
        return cut_at_stop(text, body.get("stop"))

    def list_models(self) -> list[str]:
        """The model ids the server offers (``GET /models``), to check a configuration."""
        try:
            listing = self._http.get_json(f"{self.base_url}/models")
        except HttpError as exc:
            raise self._explain(exc) from None
        return [m.get("id", "") for m in (listing or {}).get("data", []) if isinstance(m, dict)]

    def _explain(self, exc: HttpError) -> ChatError:
        """A ChatError a user can act on, for the common misconfigurations."""
        where = f"the chat server at {self.base_url}"
        body = exc.body or ""
        if exc.status is None and "refused" in str(exc):
            msg = (f"cannot reach {where}: connection refused "
                   "(is the server running, and is the base URL right?)")
        elif exc.status is None:
            msg = f"no answer from {where}: {exc.reason}"
        elif exc.status in (401, 403):
            var = self.key_var or "VSEARCHER_CHAT_API_KEY"
            msg = f"{where} rejected the API key (HTTP {exc.status}): check ${var}"
        elif exc.status in (400, 404) and (_MODEL_MISSING.search(body) or any(
                f"{q}{self.model}{q}" in body for q in "'\"`")):
            msg = f"model {self.model!r} not found at {where} (HTTP {exc.status}); " \
                  "check the model name"
        elif exc.status == 404:
            msg = f"{exc.url} not found (HTTP 404): check the base URL (it usually ends in /v1)"
        else:
            msg = f"chat request to {where} failed: {exc}"  # already quotes the server's words
            body = ""
        if body and exc.status is not None:
            msg += f" [server said: {' '.join(body.split())[:200]}]"
        return ChatError(self._http.redact(msg))

    def _read_reply(self, reply: Any) -> str:
        """The assistant text of a chat.completion body (usage counted); ChatError if none."""
        where = f"the chat server at {self.base_url}"
        if not isinstance(reply, dict):
            what = type(reply).__name__
            raise ChatError(f"{where} returned {what}, not a chat.completion object")
        if "error" in reply and not reply.get("choices"):
            error = str(reply["error"])[:300]
            raise ChatError(self._http.redact(f"{where} returned an error: {error}"))
        self._count_usage(reply.get("usage"))
        choices = reply.get("choices") or []
        if not choices or not isinstance(choices[0], dict):
            raise ChatError(f"{where} returned no choices for model {self.model!r}")
        choice = choices[0]
        message = choice.get("message") or {}
        self.last_finish_reason = choice.get("finish_reason")
        self.last_reasoning = message.get("reasoning_content") or message.get("reasoning")
        content = message.get("content")
        if isinstance(content, list):  # some servers return content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if content is None or (content == "" and self.last_finish_reason == "length"):
            if self.last_reasoning:
                why = ("only reasoning_content (a reasoning parser took the whole reply; "
                       "raise max_tokens or turn it off)")
            elif message.get("tool_calls"):
                why = "tool calls but no text (this project's agent reads text)"
            elif self.last_finish_reason == "length":
                why = "no text before hitting max_tokens"
            else:
                why = "no message content"
            raise ChatError(f"{where} returned {why} (model {self.model!r}, "
                            f"finish_reason={self.last_finish_reason!r})")
        if not isinstance(content, str):
            raise ChatError(f"{where} returned content of type {type(content).__name__}")
        return content

    def _count_usage(self, usage: Any) -> None:
        with self._usage_lock:
            self.usage["requests"] += 1
            if isinstance(usage, dict):
                self.usage["prompt_tokens"] += int(usage.get("prompt_tokens") or 0)
                self.usage["completion_tokens"] += int(usage.get("completion_tokens") or 0)
            else:
                self.usage["responses_without_usage"] += 1


def normalise_base_url(base_url: str) -> str:
    """The base URL without a trailing slash or a pasted ``/chat/completions`` suffix.

    >>> normalise_base_url("https://generativelanguage.googleapis.com/v1beta/openai/")
    'https://generativelanguage.googleapis.com/v1beta/openai'
    >>> normalise_base_url("http://localhost:8000/v1/chat/completions")
    'http://localhost:8000/v1'
    """
    url = base_url.strip().rstrip("/")
    if url.endswith("/chat/completions"):
        url = url[: -len("/chat/completions")]
    if not is_remote_url(url):
        raise InputError(f"chat base URL must start with http:// or https://: {url!r}")
    return url


def to_openai_message(message: dict) -> dict:
    """A message with ``{"type": "image", "image": ...}`` parts turned into ``image_url`` parts."""
    content = message.get("content")
    if not isinstance(content, list):
        return dict(message)
    parts: list[dict] = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "image":
            url = image_to_url(part.get("image"))
            parts.append({"type": "image_url", "image_url": {"url": url}})
        elif isinstance(part, str):
            parts.append({"type": "text", "text": part})
        else:
            parts.append(part)
    return {**message, "content": parts}


