"""Chat backends: one small interface shared by every LLM role in the project.

``ChatBackend.chat(messages, **sampling) -> str``

Messages use the OpenAI shape. ``content`` is a string or a list of parts:
``{"type": "text", "text": ...}`` and ``{"type": "image", "image": <local path or http(s) URL>}``.
Each backend converts image parts to what its server or model expects (the HTTP backend sends
``image_url`` parts with data URLs; the transformers backend hands PIL images to the processor).

Sampling keywords every backend accepts: ``temperature``, ``top_p``, ``max_tokens``, ``stop``
(a list of strings; generation stops before them), ``seed``. The local transformers backends also
take ``repeat_guard`` (``repeat_ban``: a decoding rule against the loops of small models).
"""

from __future__ import annotations

import abc
import base64
import contextlib
import functools
import io
import os
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from PIL import Image

from vsearcher_lite.net.http import HttpClient, HttpError
from vsearcher_lite.net.secrets import get_secret, get_setting, remember_secret
from vsearcher_lite.runio import InputError


class ChatError(RuntimeError):
    """A chat call failed after its retries; the message names the endpoint and the cause."""


class ChatBackend(abc.ABC):
    name: str = "chat"

    @abc.abstractmethod
    def chat(self, messages: list[dict], **sampling: Any) -> str: ...


class ScriptedChat(ChatBackend):
    """Replies from a script: a list of strings, or a function of the messages.

    For tests and for teaching; it records every call in ``calls``.

    >>> bot = ScriptedChat(["hello", "bye"])
    >>> bot.chat([{"role": "user", "content": "hi"}]), bot.chat([])
    ('hello', 'bye')
    """

    name = "scripted"

    def __init__(self, replies: Iterable[str] | Callable[[list[dict]], str]):
        self._fn = replies if callable(replies) else None
        self._replies = None if callable(replies) else list(replies)
        self.calls: list[dict] = []

    def chat(self, messages: list[dict], **sampling: Any) -> str:
        self.calls.append({"messages": messages, "sampling": sampling})
        if self._fn is not None:
            return self._fn(messages)
        if not self._replies:
            raise ChatError("ScriptedChat: the script has no more replies")
        return self._replies.pop(0)


def message_text(message: dict) -> str:
    """The text of a message, whatever the shape of its content."""
    content = message.get("content", "")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")


# ---------------------------------------------------------------------------------------------
# Images: what a message's image part may hold, turned into what a backend needs.
# ---------------------------------------------------------------------------------------------

IMAGE_MIME_BY_FORMAT = {"JPEG": "image/jpeg", "PNG": "image/png", "GIF": "image/gif", "WEBP": "image/webp",
                        "BMP": "image/bmp", "TIFF": "image/tiff"}


def is_remote_url(value: Any) -> bool:
    return isinstance(value, str) and value.lower().startswith(("http://", "https://"))


def _local_image_path(value: Any) -> Path | None:
    if isinstance(value, os.PathLike):
        return Path(value)
    if isinstance(value, str) and not is_remote_url(value) and not value.startswith("data:"):
        return Path(value[len("file://"):] if value.startswith("file://") else value)
    return None


def _image_mime(data: bytes, path: Path | None = None) -> str:
    """The MIME type of image bytes, read from their content (a file name can lie)."""
    try:
        with Image.open(io.BytesIO(data)) as img:
            mime = IMAGE_MIME_BY_FORMAT.get(img.format or "")
    except Exception:
        mime = None
    if mime is None:
        where = f" {path}" if path else ""
        raise InputError(f"image{where} is not a readable image file")
    return mime


@functools.lru_cache(maxsize=256)
def _file_data_url(path: str, mtime_ns: int, size: int) -> str:
    # Keyed by mtime and size so an edited file is re-read; the same question image is sent on
    # every turn of a trajectory, so caching saves re-encoding it each time.
    data = Path(path).read_bytes()
    return f"data:{_image_mime(data, Path(path))};base64,{base64.b64encode(data).decode('ascii')}"


def image_to_url(image: Any) -> str:
    """An ``image_url`` URL for an image part's value: an http(s) or data URL passes through; a
    local path (or ``file://`` URL), bytes or a PIL image become a base64 data URL.

    >>> image_to_url("https://example.org/cat.jpg")
    'https://example.org/cat.jpg'
    >>> image_to_url(Image.new("RGB", (2, 2)))[:22]
    'data:image/png;base64,'
    """
    if isinstance(image, str) and (is_remote_url(image) or image.startswith("data:")):
        return image
    if isinstance(image, Image.Image):
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
    if isinstance(image, (bytes, bytearray)):
        data = bytes(image)
        return f"data:{_image_mime(data)};base64,{base64.b64encode(data).decode('ascii')}"
    path = _local_image_path(image)
    if path is None:
        raise InputError(f"cannot use {type(image).__name__} as an image (give a path, URL, bytes or PIL image)")
    if not path.is_file():
        raise InputError(f"image file not found: {path}")
    stat = path.stat()
    return _file_data_url(str(path.resolve()), stat.st_mtime_ns, stat.st_size)


def load_image(image: Any, fetch: Callable[[str], bytes] | None = None) -> Image.Image:
    """A PIL image (RGB) from an image part's value; remote URLs go through ``fetch``."""
    if isinstance(image, Image.Image):
        return image.convert("RGB")
    if isinstance(image, (bytes, bytearray)):
        data = bytes(image)
    elif isinstance(image, str) and image.startswith("data:"):
        data = base64.b64decode(image.split(",", 1)[1])
    elif is_remote_url(image):
        if fetch is None:
            raise ChatError(f"cannot fetch remote image {image}: no fetcher configured")
        data = fetch(image)
    else:
        path = _local_image_path(image)
        if path is None or not path.is_file():
            raise InputError(f"image file not found: {image}")
        data = path.read_bytes()
    try:
        with Image.open(io.BytesIO(data)) as img:
            return img.convert("RGB")
    except Exception as exc:
        raise InputError(f"not a readable image: {str(image)[:80]} ({exc})") from None


def cut_at_stop(text: str, stop: Iterable[str] | str | None) -> str:
    """``text`` up to (not including) the earliest occurrence of any stop string.

    >>> cut_at_stop("Thought: x\\nObservation: y", ["Observation:"])
    'Thought: x\\n'
    >>> cut_at_stop("abc", None)
    'abc'
    """
    if not stop:
        return text
    stops = [stop] if isinstance(stop, str) else [s for s in stop if s]
    positions = [text.find(s) for s in stops]
    found = [p for p in positions if p >= 0]
    return text[: min(found)] if found else text


def usage_of(backend: ChatBackend) -> dict[str, int]:
    """A copy of a backend's token usage for ``metrics.json`` (empty for backends that keep none,
    such as ``ScriptedChat``)."""
    usage = getattr(backend, "usage", None)
    return dict(usage) if isinstance(usage, dict) else {}


def roles_usage(roles: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Token usage per LLM role of a stage, for its ``metrics.json``.

    ``roles`` maps a role name to a chat backend or to anything that holds one in ``.chat``
    (a judge, a filter, a writer). A backend shared by several roles is reported once, under
    the names of all its roles joined by ``+``; roles without usage (offline ones) are left out.

    >>> roles_usage({"writer": ScriptedChat([]), "judge": object()})
    {}
    """
    names: dict[int, list[str]] = {}
    backends: dict[int, ChatBackend] = {}
    for role, holder in roles.items():
        backend = holder if isinstance(holder, ChatBackend) else getattr(holder, "chat", None)
        if not isinstance(backend, ChatBackend):
            continue
        names.setdefault(id(backend), []).append(role)
        backends[id(backend)] = backend
    out = {}
    for key, backend in backends.items():
        usage = usage_of(backend)
        if usage:
            out["+".join(names[key])] = usage
    return out


def _new_usage() -> dict[str, int]:
    return {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0, "responses_without_usage": 0}


# ---------------------------------------------------------------------------------------------
# Repeat guard (local models)


def repeat_ban(tokens: list[int], min_block: int) -> set[int]:
    """The tokens that, written next, would end ``tokens`` with a block of at least ``min_block``
    tokens twice in a row ("of the village that was the birthplace of the village that was the
    birthplace").

    The ``repeat_guard`` sampling option of the local transformers backends forbids them, within
    the reply being written (the prompt does not count). Why: a small greedy model that loses its
    place while copying a long description writes it again and again until the token limit, and
    the turn fails the format check. The compact teacher never does this: in the 13,324 assistant
    turns of a cpu run's accepted trajectories no block of 3 or more tokens follows itself (blocks
    of 1 token do in 10,266 turns, of 2 tokens in 4), so with ``min_block`` 3 the rule forbids
    nothing the SFT data shows.

    >>> sorted(repeat_ban([5, 1, 2, 3, 1, 2], 3)), sorted(repeat_ban([1, 2, 1], 2)), repeat_ban([1, 2, 1], 3)
    ([3], [2], set())
    """
    if min_block < 1:
        raise ValueError(f"min_block must be at least 1, got {min_block}")
    n, banned = len(tokens), set()
    if n and min_block == 1:
        banned.add(tokens[-1])
    # A block of b >= 2 tokens ends at the next token when tokens[n-b+1:] == tokens[n-2b+1:n-b]; the
    # last token then recurs b positions back, so only those b are compared in full.
    for j in range(n - 2, -1, -1):
        b = n - 1 - j
        if 2 * b > n + 1:
            break
        if b >= max(min_block, 2) and tokens[j] == tokens[-1] and tokens[n - b + 1:] == tokens[n - 2 * b + 1:n - b]:
            banned.add(tokens[n - b])
    return banned


class RepeatGuard:
    """A ``generate`` logits processor: sets the score of every ``repeat_ban`` token of each row to
    -inf, looking only at the tokens after ``prompt_length`` (left-padded batches share it)."""

    def __init__(self, prompt_length: int, min_block: int):
        if min_block < 1:
            raise ValueError(f"repeat_guard must be at least 1, got {min_block}")
        self.prompt_length = prompt_length
        self.min_block = min_block

    def __call__(self, input_ids, scores):
        for row, tokens in enumerate(input_ids[:, self.prompt_length:].tolist()):
            banned = repeat_ban(tokens, self.min_block)
            if banned:
                scores[row, sorted(banned)] = float("-inf")
        return scores


def repeat_guard_kwargs(options: dict, prompt_length: int) -> dict[str, Any]:
    """``generate`` keyword arguments for the ``repeat_guard`` option (none when it is unset or 0)."""
    n = options.get("repeat_guard")
    return {"logits_processor": [RepeatGuard(prompt_length, int(n))]} if n else {}


# ---------------------------------------------------------------------------------------------
# OpenAI-compatible HTTP backend
# ---------------------------------------------------------------------------------------------

DEFAULT_BASE_URL = "http://localhost:8000/v1"  # where `vllm serve` listens by default
SAMPLING_KEYS = ("temperature", "top_p", "max_tokens", "stop", "seed")
#: Options only a local model can honour (``repeat_ban``).
LOCAL_SAMPLING_KEYS = ("repeat_guard",)
_MODEL_MISSING = re.compile(r"(?i)(model[^\n]{0,120}(not found|does not exist|not exist|unknown|no such|try pulling))"
                            r"|((not found|does not exist|unknown)[^\n]{0,40}model)|model_not_found")


class OpenAIChat(ChatBackend):
    """A chat model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    Works with vLLM, SGLang, Ollama, ``transformers serve``, OpenAI and Gemini's
    OpenAI-compatible endpoint. ``model``, ``base_url`` and ``api_key`` come from the arguments,
    else from ``$VSEARCHER_CHAT_MODEL``, ``$VSEARCHER_CHAT_BASE_URL`` (or ``$OPENAI_BASE_URL``,
    default ``http://localhost:8000/v1``) and ``$VSEARCHER_CHAT_API_KEY`` (or ``$OPENAI_API_KEY``, or
    ``$GEMINI_API_KEY`` for Gemini's endpoint; none is needed for a local server).

    Every call goes through ``HttpClient`` (timeouts, retries with backoff on 429/5xx and
    connection errors, a concurrency limit), so it is safe to call from many threads.
    ``usage`` accumulates ``prompt_tokens``, ``completion_tokens`` and ``requests`` over the
    backend's life, for a stage to write into its ``metrics.json``.

    ``defaults`` are sampling values used when a call does not give them; ``extra_body`` is
    merged into every request body (e.g. ``{"reasoning_effort": "low"}`` for Gemini).
    """

    name = "openai"

    def __init__(self, model: str | None = None, base_url: str | None = None, api_key: str | None = None, *,
                 env_file: str | os.PathLike | None = None, timeout: float = 120.0, max_retries: int = 4,
                 total_timeout: float | None = 600.0, max_concurrency: int = 8, rate_per_s: float | None = None,
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
            f"chat {self.model}", timeout=timeout, max_retries=max_retries, total_timeout=total_timeout,
            max_concurrency=max_concurrency, rate_per_s=rate_per_s, transport=transport, sleep=sleep,
            secrets=[api_key] if api_key else (), key_var=self.key_var or "VSEARCHER_CHAT_API_KEY",
            headers=headers, backoff_base=backoff_base, backoff_max=backoff_max,
        )
        self.defaults = dict(defaults or {})
        self.extra_body = dict(extra_body or {})
        self.usage = _new_usage()
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
        if merged.pop("repeat_guard", None):
            raise ChatError("repeat_guard is a decoding rule of the local transformers backends; "
                            f"the server behind {self.model!r} cannot apply it (set it to 0)")
        body: dict[str, Any] = {"model": self.model, "messages": [to_openai_message(m) for m in messages]}
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
            msg = f"cannot reach {where}: connection refused (is the server running, and is the base URL right?)"
        elif exc.status is None:
            msg = f"no answer from {where}: {exc.reason}"
        elif exc.status in (401, 403):
            var = self.key_var or "VSEARCHER_CHAT_API_KEY"
            msg = f"{where} rejected the API key (HTTP {exc.status}): check ${var}"
        elif exc.status in (400, 404) and (_MODEL_MISSING.search(body) or f"'{self.model}'" in body
                                           or f'"{self.model}"' in body or f"`{self.model}`" in body):
            msg = f"model {self.model!r} not found at {where} (HTTP {exc.status}); check the model name"
        elif exc.status == 404:
            msg = f"{exc.url} not found (HTTP 404): check the base URL (it usually ends in /v1)"
        else:
            msg = f"chat request to {where} failed: {exc}"  # already quotes the server's words
            body = ""
        if body and exc.status is not None:
            msg += f" [server said: {' '.join(body.split())[:200]}]"
        return ChatError(self._http.redact(msg))

    def _read_reply(self, reply: Any) -> str:
        """The assistant text of a chat.completion body; usage counted; ChatError if there is none."""
        where = f"the chat server at {self.base_url}"
        if not isinstance(reply, dict):
            raise ChatError(f"{where} returned {type(reply).__name__}, not a chat.completion object")
        if "error" in reply and not reply.get("choices"):
            raise ChatError(self._http.redact(f"{where} returned an error: {str(reply['error'])[:300]}"))
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
                why = "only reasoning_content (a reasoning parser took the whole reply; raise max_tokens or turn it off)"
            elif message.get("tool_calls"):
                why = "tool calls but no text (this project's agent reads text)"
            elif self.last_finish_reason == "length":
                why = "no text before hitting max_tokens"
            else:
                why = "no message content"
            raise ChatError(f"{where} returned {why} (model {self.model!r}, finish_reason={self.last_finish_reason!r})")
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
            parts.append({"type": "image_url", "image_url": {"url": image_to_url(part.get("image"))}})
        elif isinstance(part, str):
            parts.append({"type": "text", "text": part})
        else:
            parts.append(part)
    return {**message, "content": parts}


# ---------------------------------------------------------------------------------------------
# Local transformers backend
# ---------------------------------------------------------------------------------------------


def processor_message(message: dict, fetch: Callable[[str], bytes] | None = None) -> dict:
    """A chat message in the processor's shape: list-of-parts content, images (paths, URLs, data
    URLs, OpenAI ``image_url`` parts) loaded as PIL images (``fetch`` reads remote ones)."""
    content = message.get("content")
    if isinstance(content, str):
        return {"role": message["role"], "content": [{"type": "text", "text": content}]}
    parts: list[dict] = []
    for part in content or []:
        if isinstance(part, str):
            parts.append({"type": "text", "text": part})
        elif part.get("type") == "image":
            parts.append({"type": "image", "image": load_image(part.get("image"), fetch)})
        elif part.get("type") == "image_url":
            url = (part.get("image_url") or {}).get("url")
            parts.append({"type": "image", "image": load_image(url, fetch)})
        else:
            parts.append(part)
    return {"role": message["role"], "content": parts}


class TransformersChat(ChatBackend):
    """A local Hugging Face model: ``TransformersChat("path/or/hub-id")`` or an already loaded
    ``TransformersChat(model, tokenizer=tok)`` / ``TransformersChat(model, processor=proc)``.

    A config with a ``vision_config`` loads as ``AutoModelForImageTextToText`` with its
    ``AutoProcessor``; anything else as ``AutoModelForCausalLM`` with its tokenizer (which
    cannot take images: a message with an image raises ``ChatError``). The chat template of the
    tokenizer/processor builds the prompt. ``temperature`` 0 (the default) decodes greedily;
    ``seed`` makes sampling repeatable without touching the global RNG; ``stop`` strings end
    generation and are cut from the text. Calls are serialised with a lock (one model, one
    forward pass at a time).
    """

    name = "transformers"

    def __init__(self, model: Any, *, tokenizer: Any = None, processor: Any = None, device: str | None = None,
                 dtype: Any = None, defaults: dict[str, Any] | None = None, max_new_tokens: int = 512,
                 trust_remote_code: bool = False):
        import torch

        self._torch = torch
        self.defaults = dict(defaults or {})
        self.max_new_tokens = max_new_tokens
        if isinstance(model, (str, os.PathLike)):
            self.model_id = str(model)
            self.model, self.tokenizer, self.processor = _load_transformers_model(
                self.model_id, device=device, dtype=dtype, trust_remote_code=trust_remote_code)
        else:
            if tokenizer is None and processor is None:
                raise ValueError("a loaded model needs tokenizer= or processor=")
            self.model_id = getattr(getattr(model, "config", None), "_name_or_path", type(model).__name__)
            self.model = model
            self.processor = processor
            self.tokenizer = tokenizer if tokenizer is not None else getattr(processor, "tokenizer", None)
            if device is not None:
                self.model.to(device)
        self.model.eval()
        self.usage = _new_usage()
        self._lock = threading.Lock()
        self._fetcher: HttpClient | None = None

    def __repr__(self) -> str:
        return f"TransformersChat({self.model_id!r})"

    @property
    def accepts_images(self) -> bool:
        return self.processor is not None

    def chat(self, messages: list[dict], **sampling: Any) -> str:
        options = {**self.defaults, **sampling}
        unknown = set(options) - set(SAMPLING_KEYS + LOCAL_SAMPLING_KEYS)
        if unknown:
            raise ChatError(f"TransformersChat does not support sampling options {sorted(unknown)}")
        inputs = self._encode(messages)
        generation = self._generation_kwargs(options)
        generation.update(repeat_guard_kwargs(options, inputs["input_ids"].shape[1]))
        stop = options.get("stop")
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        with self._lock, self._torch.no_grad(), self._seeded(options.get("seed")):
            output = self.model.generate(**inputs, **generation,
                                         **({"stop_strings": stops, "tokenizer": self.tokenizer} if stops else {}))
        prompt_length = inputs["input_ids"].shape[1]
        new_tokens = output[0, prompt_length:]
        text = self.tokenizer.decode(new_tokens, skip_special_tokens=True)
        with self._lock:
            self.usage["requests"] += 1
            self.usage["prompt_tokens"] += int(prompt_length)
            self.usage["completion_tokens"] += int(new_tokens.shape[0])
        return cut_at_stop(text, stops)

    def _generation_kwargs(self, options: dict[str, Any]) -> dict[str, Any]:
        temperature = options.get("temperature") or 0.0
        kwargs: dict[str, Any] = {"max_new_tokens": int(options.get("max_tokens") or self.max_new_tokens)}
        if temperature > 0:
            kwargs.update(do_sample=True, temperature=float(temperature), top_p=float(options.get("top_p") or 1.0),
                          top_k=0)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        pad = getattr(self.tokenizer, "pad_token_id", None)
        eos = getattr(self.tokenizer, "eos_token_id", None)
        kwargs["pad_token_id"] = pad if pad is not None else eos
        return kwargs

    @contextlib.contextmanager
    def _seeded(self, seed: int | None):
        if seed is None:
            yield
            return
        devices = [self.model.device] if getattr(self.model, "device", None) is not None and self.model.device.type == "cuda" else []
        with self._torch.random.fork_rng(devices=devices):
            self._torch.manual_seed(int(seed))
            yield

    def _encode(self, messages: list[dict]) -> dict[str, Any]:
        if self.processor is not None:
            converted = [self._processor_message(m) for m in messages]
            encoded = self.processor.apply_chat_template(converted, add_generation_prompt=True, tokenize=True,
                                                         return_dict=True, return_tensors="pt")
        else:
            for m in messages:
                if isinstance(m.get("content"), list) and any(
                        isinstance(p, dict) and p.get("type") in ("image", "image_url") for p in m["content"]):
                    raise ChatError(f"model {self.model_id!r} is text-only and cannot read the image in a "
                                    f"{m.get('role', '?')} message; use an image-text model")
            converted = [{"role": m["role"], "content": message_text(m)} for m in messages]
            encoded = self.tokenizer.apply_chat_template(converted, add_generation_prompt=True, tokenize=True,
                                                         return_dict=True, return_tensors="pt")
        return {k: v.to(self.model.device) if hasattr(v, "to") else v for k, v in dict(encoded).items()}

    def _processor_message(self, message: dict) -> dict:
        return processor_message(message, self._fetch)

    def _fetch(self, url: str) -> bytes:
        """Remote images are fetched through the SSRF guard, like the visit tool."""
        if self._fetcher is None:
            from vsearcher_lite.net.guard import UrlGuard

            self._fetcher = HttpClient("image fetch", guard=UrlGuard(), timeout=20.0, max_retries=2)
        try:
            return self._fetcher.get(url, max_bytes=20_000_000).content
        except HttpError as exc:
            raise ChatError(f"could not fetch image: {exc}") from None


def _load_transformers_model(model_id: str, *, device: str | None, dtype: Any, trust_remote_code: bool):
    """(model, tokenizer, processor or None) for a local folder or hub id."""
    import transformers

    from vsearcher_lite.runtime import limit_heap_growth

    if device is None or not str(device).startswith("cuda"):
        limit_heap_growth()  # CPU generation frees tens-of-MB buffers per call: see runtime.py

    try:
        config = transformers.AutoConfig.from_pretrained(model_id, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot load model {model_id!r}: {str(exc).splitlines()[0]}") from None
    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code}
    if dtype is not None:
        kwargs["dtype"] = dtype
    if getattr(config, "vision_config", None) is not None:
        # A tiny-base checkpoint names the project's image-only processor; importing the module
        # registers it with AutoProcessor (without it AutoProcessor falls back to a bare tokenizer).
        import vsearcher_lite.model.tiny  # noqa: F401

        model = transformers.AutoModelForImageTextToText.from_pretrained(model_id, **kwargs)
        processor = transformers.AutoProcessor.from_pretrained(model_id, trust_remote_code=trust_remote_code)
        tokenizer = getattr(processor, "tokenizer", None)
        if tokenizer is None:
            raise InputError(f"cannot load model {model_id!r}: AutoProcessor gave a {type(processor).__name__}, "
                             "not a processor with a tokenizer and an image processor")
    else:
        model = transformers.AutoModelForCausalLM.from_pretrained(model_id, **kwargs)
        tokenizer = transformers.AutoTokenizer.from_pretrained(model_id, trust_remote_code=trust_remote_code)
        processor = None
    if device is not None:
        model.to(device)
    return model, tokenizer, processor


# ---------------------------------------------------------------------------------------------
# The factory every LLM role uses
# ---------------------------------------------------------------------------------------------

BACKENDS = {"openai": OpenAIChat, "transformers": TransformersChat}


def make_chat(spec: "str | dict | ChatBackend", **overrides: Any) -> ChatBackend:
    """A chat backend from a spec: a backend (returned as is), a string or a dict.

    Strings: ``"openai:<model>@<base_url>"``, ``"openai:<model>"`` or ``"openai"`` (the rest from
    the environment), ``"transformers:<path or hub id>"``. Dicts: ``{"backend": "openai",
    "model": ..., "base_url": ..., ...}`` with the constructor's keywords. ``overrides`` are extra
    constructor keywords (e.g. ``transport=`` in tests).

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
                raise InputError(f"chat spec {spec!r}: a transformers backend needs 'model' (a path or hub id)")
            return TransformersChat(model, **options)
        return OpenAIChat(**options)
    if not isinstance(spec, str) or not spec.strip():
        raise InputError(f"chat spec {spec!r}: expected 'openai:<model>@<base_url>', 'transformers:<path>' or a dict")
    kind, _, rest = spec.strip().partition(":")
    if kind == "openai":
        model, base_url = rest, None
        at = rest.rfind("@http")
        if at >= 0:
            model, base_url = rest[:at], rest[at + 1:]
        elif "@" in rest:
            raise InputError(f"chat spec {spec!r}: the base URL after '@' must start with http:// or https:// "
                             "(a model name with '@' in it: use the dict form)")
        return OpenAIChat(model or None, base_url, **overrides)
    if kind == "transformers":
        if not rest:
            raise InputError(f"chat spec {spec!r}: give the model as 'transformers:<path or hub id>'")
        return TransformersChat(rest, **overrides)
    raise InputError(f"chat spec {spec!r}: expected 'openai:<model>@<base_url>', 'transformers:<path>' or a dict")
