"""The chat interface every backend implements (``ChatBackend.chat(messages, **sampling) ->
str``), the image parts of messages, and token usage."""


from __future__ import annotations

import abc
import base64
import functools
import io
import os
from pathlib import Path
from typing import Any, Callable, Iterable

from PIL import Image

from vsearcher_lite.runio import InputError

SAMPLING_KEYS = ("temperature", "top_p", "max_tokens", "stop", "seed")
# options only a local model can honour (decoding rules: ``chat.local``)
LOCAL_SAMPLING_KEYS = ("force_after", "token_limits")


class ChatError(RuntimeError):
    """A chat call failed after its retries; the message names the endpoint and the cause."""


class ChatBackend(abc.ABC):
    name: str = "chat"
    #: What the backend's chat template writes at the start of every reply, before the model's
    #: first token (``reply_opening``): the turn the template holds is this plus the reply.
    reply_prefix: str = ""

    @abc.abstractmethod
    def chat(self, messages: list[dict], **sampling: Any) -> str: ...


#: The reasoning tag a generation prompt may already hold (Qwen3-VL Thinking's opens it).
THINK_TAG = "<think>"


def reply_opening(processor) -> str:
    """The part of the reasoning a chat template's generation prompt writes before the model's
    first token: ``"<think>\\n"`` for the Qwen3-VL Thinking templates, ``""`` for templates whose
    prompt ends at the assistant's header (or a processor without a template).

    >>> class Thinking:
    ...     def apply_chat_template(self, messages, tokenize, add_generation_prompt=False):
    ...         return "<q>" + ("<a>\\n<think>\\n" if add_generation_prompt else "")
    >>> reply_opening(Thinking()), reply_opening(object())
    ('<think>\\n', '')
    """
    tail = ""
    for content in ([{"type": "text", "text": "?"}], "?"):  # a processor's parts, a tokenizer's
        probe = [{"role": "user", "content": content}]
        try:
            bare = processor.apply_chat_template(probe, tokenize=False)
            prompted = processor.apply_chat_template(probe, tokenize=False,
                                                     add_generation_prompt=True)
        except Exception:  # no template, or one that cannot render this probe
            continue
        bare, prompted = (x[0] if isinstance(x, list) else x for x in (bare, prompted))
        tail = prompted[len(bare):] if prompted.startswith(bare) else ""
        break
    at = tail.find(THINK_TAG)
    return tail[at:] if at >= 0 else ""


class ScriptedChat(ChatBackend):
    """Replies from a script (strings or a function of the messages); calls kept in ``calls``.

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
    return "".join(p.get("text", "") for p in content
                   if isinstance(p, dict) and p.get("type") == "text")


# Images: what a message's image part may hold, turned into what a backend needs.
IMAGE_MIME_BY_FORMAT = {f: "image/" + f.lower()
                        for f in ("JPEG", "PNG", "GIF", "WEBP", "BMP", "TIFF")}


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
    # The question image goes out on every turn; keyed by mtime and size so edits are re-read.
    return _data_url(Path(path).read_bytes(), Path(path))


def _data_url(data: bytes, path: Path | None = None) -> str:
    return f"data:{_image_mime(data, path)};base64,{base64.b64encode(data).decode('ascii')}"


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
        return _data_url(bytes(image))
    path = _local_image_path(image)
    if path is None:
        what = type(image).__name__
        raise InputError(f"cannot use {what} as an image (give a path, URL, bytes or PIL image)")
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


def stop_list(stop: Iterable[str] | str | None) -> list[str]:
    """The ``stop`` sampling option as a list.

    >>> stop_list("</a>"), stop_list(None), stop_list(("x", "y"))
    (['</a>'], [], ['x', 'y'])
    """
    return [stop] if isinstance(stop, str) else list(stop or [])


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
    found = [p for p in (text.find(s) for s in stops) if p >= 0]
    return text[: min(found)] if found else text


def usage_of(backend: ChatBackend) -> dict[str, int]:
    """A copy of a backend's token usage for ``metrics.json`` (empty if it keeps none)."""
    usage = getattr(backend, "usage", None)
    return dict(usage) if isinstance(usage, dict) else {}


def roles_usage(roles: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Token usage per LLM role; a backend shared by roles is reported once (``role1+role2``).

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


def new_usage() -> dict[str, int]:
    return {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0, "responses_without_usage": 0}


