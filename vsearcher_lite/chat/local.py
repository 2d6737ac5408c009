"""The local chat backend: a Hugging Face model run with ``transformers``, and its decoding
rules (``force_after``, ``token_limits``)."""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any, Callable

from vsearcher_lite.chat.base import (
    LOCAL_SAMPLING_KEYS,
    SAMPLING_KEYS,
    ChatBackend,
    ChatError,
    cut_at_stop,
    load_image,
    message_text,
    new_usage,
    reply_opening,
    stop_list,
)
from vsearcher_lite.runio import InputError


def forced_token(tokens: list[int], force: dict[int, int]) -> int | None:
    """The token that must come next under the ``force_after`` option: ``force[t]`` when the
    reply so far ends with a trigger token ``t``, else None.

    >>> forced_token([4, 9], {9: 2}), forced_token([9, 4], {9: 2}), forced_token([], {9: 2})
    (2, None, None)
    """
    return force.get(tokens[-1]) if tokens else None


def used_up(tokens: list[int], limits: dict[int, int]) -> list[int]:
    """The tokens the ``token_limits`` option forbids next: each token of ``limits`` that the
    reply already holds as often as its limit (0: never).

    >>> used_up([5, 7, 5], {5: 2, 7: 2, 8: 0})
    [5, 8]
    """
    return [t for t, n in limits.items() if tokens.count(t) >= n]


def _one_token(tokenizer, text: str, option: str) -> int:
    encoded = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(encoded) != 1:
        raise ChatError(f"{option} needs single tokens; {text!r} is {len(encoded)} tokens for "
                        "this tokenizer")
    return int(encoded[0])


def force_after_ids(tokenizer, pairs) -> dict[int, int]:
    """The ``force_after`` option, ``[(trigger, forced), ...]`` as strings, as token ids; each
    string must be one token of this tokenizer (a ``ChatError`` names the one that is not)."""
    return {_one_token(tokenizer, trigger, "force_after"): _one_token(tokenizer, forced,
                                                                       "force_after")
            for trigger, forced in pairs or ()}


def token_limit_ids(tokenizer, limits) -> dict[int, int]:
    """The ``token_limits`` option, ``[(token, most uses in a reply), ...]``, as token ids."""
    return {_one_token(tokenizer, text, "token_limits"): int(n) for text, n in limits or ()}


def force_row(scores, row: int, token: int) -> None:
    """Leave ``token`` the only choice of ``row`` (a logits tensor, in place)."""
    scores[row, :] = float("-inf")
    scores[row, token] = 0.0


def apply_reply_rules(scores, row: int, tokens: list[int], force: dict[int, int],
                      limits: dict[int, int]) -> None:
    """``row``'s logits under the ``token_limits`` and ``force_after`` options (in place)."""
    if limits:
        banned = used_up(tokens, limits)
        if banned:
            scores[row, banned] = float("-inf")
    token = forced_token(tokens, force) if force else None
    if token is not None:
        force_row(scores, row, token)


class ReplyRules:
    """A ``generate`` logits processor for the ``force_after`` and ``token_limits`` options,
    looking only at the tokens after ``prompt_length``."""

    def __init__(self, prompt_length: int, force: dict[int, int], limits: dict[int, int]):
        self.prompt_length = prompt_length
        self.force, self.limits = force, limits

    def __call__(self, input_ids, scores):
        for row, tokens in enumerate(input_ids[:, self.prompt_length:].tolist()):
            apply_reply_rules(scores, row, tokens, self.force, self.limits)
        return scores


def logits_kwargs(options: dict, tokenizer, prompt_length: int) -> dict[str, Any]:
    """``generate`` keywords for the local decoding rules, ``force_after`` and ``token_limits``
    (none when neither is set)."""
    force = force_after_ids(tokenizer, options.get("force_after"))
    limits = token_limit_ids(tokenizer, options.get("token_limits"))
    if not (force or limits):
        return {}
    return {"logits_processor": [ReplyRules(prompt_length, force, limits)]}


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


def _has_image(message: dict) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") in ("image", "image_url") for p in content)


class TransformersChat(ChatBackend):
    """A local Hugging Face model: ``TransformersChat("path/or/hub-id")`` or an already loaded
    ``TransformersChat(model, tokenizer=tok)`` / ``TransformersChat(model, processor=proc)``.

    A config with a ``vision_config`` loads as ``AutoModelForImageTextToText`` with its
    ``AutoProcessor``; anything else as a text-only ``AutoModelForCausalLM``. ``temperature`` 0
    (the default) decodes greedily; ``seed`` makes sampling repeatable without touching the
    global RNG. Calls are serialised with a lock (one model, one forward pass at a time).
    """

    name = "transformers"

    def __init__(self, model: Any, *, tokenizer: Any = None, processor: Any = None,
                 device: str | None = None, dtype: Any = None,
                 defaults: dict[str, Any] | None = None, max_new_tokens: int = 512,
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
            config = getattr(model, "config", None)
            self.model_id = getattr(config, "_name_or_path", type(model).__name__)
            self.model = model
            self.processor = processor
            if tokenizer is None:
                tokenizer = getattr(processor, "tokenizer", None)
            self.tokenizer = tokenizer
            if device is not None:
                self.model.to(device)
        self.model.eval()
        self.reply_prefix = reply_opening(self.processor or self.tokenizer)
        self.usage = new_usage()
        self._lock = threading.Lock()
        self._fetcher = None  # an HttpClient, made on the first remote image

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
        prompt_length = inputs["input_ids"].shape[1]
        generation = self._generation_kwargs(options)
        generation.update(logits_kwargs(options, self.tokenizer, prompt_length))
        stops = stop_list(options.get("stop"))
        if stops:
            generation.update(stop_strings=stops, tokenizer=self.tokenizer)
        with self._lock, self._torch.no_grad(), self._seeded(options.get("seed")):
            output = self.model.generate(**inputs, **generation)
        new_tokens = output[0, prompt_length:]
        text = self.tokenizer.decode(new_tokens, skip_special_tokens=True)
        with self._lock:
            self.usage["requests"] += 1
            self.usage["prompt_tokens"] += int(prompt_length)
            self.usage["completion_tokens"] += int(new_tokens.shape[0])
        return cut_at_stop(text, stops)

    def _generation_kwargs(self, options: dict[str, Any]) -> dict[str, Any]:
        temperature = options.get("temperature") or 0.0
        max_tokens = int(options.get("max_tokens") or self.max_new_tokens)
        kwargs: dict[str, Any] = {"max_new_tokens": max_tokens}
        if temperature > 0:
            top_p = float(options.get("top_p") or 1.0)
            kwargs.update(do_sample=True, temperature=float(temperature), top_p=top_p, top_k=0)
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
        device = getattr(self.model, "device", None)
        devices = [device] if device is not None and device.type == "cuda" else []
        with self._torch.random.fork_rng(devices=devices):
            self._torch.manual_seed(int(seed))
            yield

    def _encode(self, messages: list[dict]) -> dict[str, Any]:
        if self.processor is not None:
            template = self.processor.apply_chat_template
            converted = [processor_message(m, self._fetch) for m in messages]
        else:
            for m in messages:
                if _has_image(m):
                    role = m.get("role", "?")
                    raise ChatError(f"model {self.model_id!r} is text-only and cannot read the "
                                    f"image in a {role} message; use an image-text model")
            template = self.tokenizer.apply_chat_template
            converted = [{"role": m["role"], "content": message_text(m)} for m in messages]
        encoded = template(converted, add_generation_prompt=True, tokenize=True, return_dict=True,
                           return_tensors="pt")
        device = self.model.device
        return {k: v.to(device) if hasattr(v, "to") else v for k, v in dict(encoded).items()}

    def _fetch(self, url: str) -> bytes:
        """Remote images are fetched through the SSRF guard, like the visit tool."""
        from vsearcher_lite.net.http import HttpClient, HttpError

        if self._fetcher is None:
            from vsearcher_lite.net.guard import UrlGuard

            self._fetcher = HttpClient("image fetch", guard=UrlGuard(), timeout=20.0, max_retries=2)
        try:
            return self._fetcher.get(url, max_bytes=20_000_000).content
        except HttpError as exc:
            raise ChatError(f"could not fetch image: {exc}") from None


def _load_transformers_model(model_id: str, *, device: str | None, dtype: Any,
                             trust_remote_code: bool):
    """(model, tokenizer, processor or None) for a local folder or hub id."""
    import transformers

    from vsearcher_lite.runtime import limit_heap_growth

    if device is None or not str(device).startswith("cuda"):
        limit_heap_growth()  # CPU generation frees tens-of-MB buffers per call: see runtime.py
    remote = {"trust_remote_code": trust_remote_code}
    try:
        config = transformers.AutoConfig.from_pretrained(model_id, **remote)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot load model {model_id!r}: {str(exc).splitlines()[0]}") from None
    kwargs: dict[str, Any] = dict(remote, **({"dtype": dtype} if dtype is not None else {}))
    if getattr(config, "vision_config", None) is not None:
        # A tiny-base checkpoint names the project's image-only processor; importing the module
        # registers it with AutoProcessor (without it AutoProcessor falls back to a tokenizer).
        import vsearcher_lite.model.tiny  # noqa: F401

        model = transformers.AutoModelForImageTextToText.from_pretrained(model_id, **kwargs)
        processor = transformers.AutoProcessor.from_pretrained(model_id, **remote)
        tokenizer = getattr(processor, "tokenizer", None)
        if tokenizer is None:
            raise InputError(f"cannot load model {model_id!r}: AutoProcessor gave a "
                             f"{type(processor).__name__}, not a processor with a tokenizer "
                             "and an image processor")
    else:
        model = transformers.AutoModelForCausalLM.from_pretrained(model_id, **kwargs)
        tokenizer = transformers.AutoTokenizer.from_pretrained(model_id, **remote)
        processor = None
    if device is not None:
        model.to(device)
    from vsearcher_lite.model.tiny import without_length_check

    return model, without_length_check(tokenizer), processor
