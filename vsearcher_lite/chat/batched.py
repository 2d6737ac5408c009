"""Many ReAct episodes, one model: chat backends that answer concurrent ``chat`` calls in a batch.

One call per turn per episode spends a small model's time on per-call overhead; one batch gives
token-identical greedy output in a fraction of the time. The batching lives behind
``ChatBackend``, so episodes still run through ``agent.loop.run_episode``, one thread each: the
thread that finds the batch ready hands it to the backend's generation thread. In **lockstep**
mode (GRPO rollouts) a batch is ready when every episode still running waits, so batches and
their order are the same on every run; otherwise when ``max_batch`` requests wait or the oldest
has waited ``max_wait_s``. Each request carries its episode's key (its thread's, when it has
none), under which a local model keeps the episode's KV cache (``chat.engine``).
"""

from __future__ import annotations

import abc
import contextlib
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Iterator

from vsearcher_lite.chat.base import (
    LOCAL_SAMPLING_KEYS,
    SAMPLING_KEYS,
    ChatBackend,
    ChatError,
    cut_at_stop,
    new_usage,
    reply_opening,
    stop_list,
)
from vsearcher_lite.chat.local import (
    force_after_ids,
    logits_kwargs,
    processor_message,
    token_limit_ids,
)

_thread = threading.local()


@dataclass
class _Request:
    messages: list[dict]
    options: dict
    key: tuple
    arrived: float
    slot: Any = None  # the episode's cache key: its bound key, else its thread
    result: str | None = None
    error: BaseException | None = None
    done: bool = False


@dataclass
class BatchStats:
    """What the batcher did: how many generate calls, how many rows each, and the time spent."""

    calls: int = 0
    rows: int = 0
    seconds: float = 0.0
    sizes: list[int] = field(default_factory=list)

    def to_dict(self) -> dict:
        mean = self.rows / self.calls if self.calls else 0.0
        return {"generate_calls": self.calls, "rows": self.rows, "mean_batch": round(mean, 2),
                "generate_seconds": round(self.seconds, 3)}


def options_key(options: dict) -> tuple:
    """The sampling settings that must agree for two requests to share one ``generate`` call.

    >>> options_key({"temperature": 0.8, "top_p": 1, "max_tokens": 64, "stop": ["<x>"], "seed": 3})
    (0.8, 1.0, 64, ('<x>',), (), ())
    """
    return (float(options.get("temperature") or 0.0), float(options.get("top_p") or 1.0),
            options.get("max_tokens"), tuple(stop_list(options.get("stop"))),
            tuple(tuple(pair) for pair in options.get("force_after") or ()),
            tuple(tuple(pair) for pair in options.get("token_limits") or ()))


def batch_seed(seeds: list[int | None], call: int) -> int | None:
    """One sampling seed for a batch, from its requests' seeds and the backend's call counter.

    >>> batch_seed([None, None], 0) is None, batch_seed([3, 5], 1) == batch_seed([3, 5], 1)
    (True, True)
    >>> batch_seed([3, 5], 1) != batch_seed([3, 5], 2)
    True
    """
    given = [s for s in seeds if s is not None]
    if not given:
        return None
    return zlib.crc32(f"{given}:{call}".encode()) % (2**31 - 1)


class LockstepBatcher(ChatBackend, abc.ABC):
    """The batching logic; subclasses implement ``generate_batch(requests) -> list[str]``."""

    name = "batched"

    def __init__(self, *, max_batch: int = 32, max_wait_s: float = 0.05,
                 lockstep_timeout_s: float = 600.0, own_thread: bool = True):
        self.max_batch = max(1, int(max_batch))
        # Batches generate on one thread of their own, not on whichever episode's thread leads:
        # a medium rollout of the KV engine measured 14.7 s against 17.7 s (docs/results.md).
        self.own_thread = own_thread
        self._thread_pool: ThreadPoolExecutor | None = None
        self.max_wait_s = max_wait_s
        self.lockstep_timeout_s = lockstep_timeout_s
        self.stats = BatchStats()
        self.usage = new_usage()
        self._cond = threading.Condition()
        self._pending: list[_Request] = []
        self._busy = False
        self._active: int | None = None  # lockstep: episodes still running
        self._arrivals = 0

    # -- lockstep sessions ---------------------------------------------------------------------

    @contextlib.contextmanager
    def lockstep(self, n_episodes: int) -> Iterator["LockstepBatcher"]:
        """Batch when every running episode waits (see ``run_lockstep``: ``bind``, ``leave``)."""
        with self._cond:
            if self._active is not None:
                raise RuntimeError("a lockstep session is already running on this backend")
            self._active = int(n_episodes)
        try:
            yield self
        finally:
            with self._cond:
                self._active = None
                self._cond.notify_all()
            self.session_ended()

    def session_ended(self) -> None:
        """A lockstep session's episodes have all ended (a backend may drop what it kept)."""

    def bind(self, key: Any) -> None:
        """Name the calling thread's episode; batches are ordered by these keys."""
        _thread.key = key

    def leave(self) -> None:
        """The calling thread's episode has ended (lockstep)."""
        with self._cond:
            if self._active is not None:
                self._active -= 1
            self._cond.notify_all()

    # -- the ChatBackend call ------------------------------------------------------------------

    def chat(self, messages: list[dict], **sampling: Any) -> str:
        unknown = set(sampling) - set(SAMPLING_KEYS + LOCAL_SAMPLING_KEYS)
        if unknown:
            raise ChatError(f"{type(self).__name__} does not support sampling options "
                            f"{sorted(unknown)}")
        with self._cond:
            self._arrivals += 1
            key = getattr(_thread, "key", None)
            order = (0, key) if key is not None else (1, self._arrivals)
            slot = key if key is not None else ("thread", threading.get_ident())
            request = _Request(list(messages), dict(sampling), order, time.monotonic(), slot)
            self._pending.append(request)
            self._cond.notify_all()
        while True:
            with self._cond:
                batch: list[_Request] | None = None
                while not request.done:
                    if not self._busy and self._pending and self._ready():
                        batch = sorted(self._pending, key=lambda r: r.key)
                        if self._active is None:
                            batch = batch[: self.max_batch]
                        taken = {id(r) for r in batch}
                        self._pending = [r for r in self._pending if id(r) not in taken]
                        self._busy = True
                        break
                    self._cond.wait(timeout=self._wait_time())
                if batch is None:  # done: another thread generated this reply
                    break
            self._run(batch)  # this thread leads the batch (with or without its own request)
        if request.error is not None:
            raise request.error
        return request.result  # type: ignore[return-value]

    def _ready(self) -> bool:
        lockstep = self._active is not None
        if len(self._pending) >= (self._active if lockstep else self.max_batch):
            return True
        waited = time.monotonic() - min(r.arrived for r in self._pending)
        # In lockstep, the timeout keeps a stuck episode from hanging the rest.
        return waited > self.lockstep_timeout_s if lockstep else waited >= self.max_wait_s

    def _wait_time(self) -> float:
        return self.max_wait_s if self._active is None else 1.0

    def _run(self, batch: list[_Request]) -> None:
        start = time.perf_counter()
        try:
            groups: dict[tuple, list[_Request]] = {}
            for r in batch:
                groups.setdefault(options_key(r.options), []).append(r)
            for members in groups.values():
                for i in range(0, len(members), self.max_batch):
                    chunk = members[i:i + self.max_batch]
                    try:
                        texts = self._generate(chunk, chunk[0].options)
                    except BaseException as exc:  # each waiting episode gets it as a policy error
                        for r in chunk:
                            r.error = exc
                        continue
                    finally:
                        self.stats.calls += 1
                        self.stats.rows += len(chunk)
                        self.stats.sizes.append(len(chunk))
                    for r, text in zip(chunk, texts):
                        r.result = text
        finally:
            self.stats.seconds += time.perf_counter() - start
            with self._cond:
                for r in batch:
                    if r.result is None and r.error is None:
                        r.error = ChatError("the batched backend gave no reply to this request")
                    r.done = True
                self._busy = False
                self._cond.notify_all()

    def _generate(self, requests: list[_Request], options: dict) -> list[str]:
        if not self.own_thread:
            return self.generate_requests(requests, options)
        if self._thread_pool is None:
            self._thread_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="generate")
        return self._thread_pool.submit(self.generate_requests, requests, options).result()

    def generate_requests(self, requests: list[_Request], options: dict) -> list[str]:
        """One reply per request; by default ``generate_batch`` over their conversations with one
        seed drawn from theirs and the call counter."""
        seed = batch_seed([r.options.get("seed") for r in requests], self.stats.calls)
        return self.generate_batch([r.messages for r in requests], options, seed)

    @abc.abstractmethod
    def generate_batch(self, conversations: list[list[dict]], options: dict,
                       seed: int | None) -> list[str]:
        """One reply per conversation, generated together."""


def run_lockstep(backend: LockstepBatcher, jobs: list, run_one, keys: list | None = None) -> list:
    """``run_one(job)`` for every job on its own thread, in lockstep on ``backend``; the results
    in job order. A job's exception is re-raised after every thread has finished."""
    keys = list(range(len(jobs))) if keys is None else list(keys)
    results: list[Any] = [None] * len(jobs)
    errors: list[BaseException | None] = [None] * len(jobs)

    def worker(i: int) -> None:
        backend.bind(keys[i])
        try:
            results[i] = run_one(jobs[i])
        except BaseException as exc:
            errors[i] = exc
        finally:
            backend.leave()

    with backend.lockstep(len(jobs)):
        threads = [threading.Thread(target=worker, args=(i,), daemon=True, name=f"episode-{i}")
                   for i in range(len(jobs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for exc in errors:
        if exc is not None:
            raise exc
    return results


# ---------------------------------------------------------------------------------------------
# A local Hugging Face model


def single_token_ids(tokenizer, strings) -> tuple[list[int], list[str]]:
    """``(ids, rest)``: the stop strings that are one token each (as ids), and the others.

    >>> class Tok:
    ...     def __call__(self, s, add_special_tokens=False):
    ...         return {"input_ids": [7] if s == "<x>" else [1, 2]}
    >>> single_token_ids(Tok(), ["<x>", "ab"])
    ([7], ['ab'])
    """
    ids, rest = [], []
    for s in strings:
        encoded = tokenizer(s, add_special_tokens=False)["input_ids"]
        if len(encoded) == 1:
            ids.append(int(encoded[0]))
        else:
            rest.append(s)
    return ids, rest


class BatchedTransformersChat(LockstepBatcher):
    """A loaded image-text model behind the batcher. ``engine="kv"`` continues each episode from
    its KV cache (``chat.engine``; the default for the models it knows, Qwen3-VL's family);
    ``engine="generate"`` runs ``transformers``' ``generate`` over every whole conversation, the
    reference the engine is tested against and the path for other models."""

    name = "transformers-batched"
    ENGINES = ("kv", "generate")

    def __init__(self, model, processor, *, max_new_tokens: int = 512, engine: str | None = None,
                 static_cache: bool | None = None, **kwargs: Any):
        from vsearcher_lite.chat.engine import KVEngine  # torch and transformers on first use

        super().__init__(**kwargs)
        if engine is None:
            engine = "kv" if KVEngine.supports(model) else "generate"
        if engine not in self.ENGINES:
            raise ValueError(f"engine must be one of {self.ENGINES}, got {engine!r}")
        if processor is None or not hasattr(processor, "apply_chat_template"):
            raise ValueError("BatchedTransformersChat needs the model's processor")
        # ``generate`` on CPU: a static cache, where decoding is bound by memory traffic and the
        # default cache copies every key and value each step; not on a GPU, where it
        # preallocates every row.
        if static_cache is None:
            static_cache = next(model.parameters()).device.type == "cpu"
        self.static_cache = static_cache
        self.engine = engine
        self.model = model
        self.processor = processor
        self.tokenizer = getattr(processor, "tokenizer", processor)
        self.reply_prefix = reply_opening(processor)
        self.max_new_tokens = max_new_tokens
        config = getattr(model, "config", None)
        self.model_id = getattr(config, "_name_or_path", type(model).__name__)
        self.kv = KVEngine(model, processor, max_slots=max(64, 4 * self.max_batch)) \
            if engine == "kv" else None

    def __repr__(self) -> str:
        return f"BatchedTransformersChat({self.model_id!r}, max_batch={self.max_batch})"

    def session_ended(self) -> None:
        if self.kv is not None:
            self.kv.reset()

    def end_tokens(self, stops: list[str]) -> tuple[list[int], list[str], int]:
        """``(end ids, multi-token stop strings, pad id)``: the model's end-of-sequence tokens
        and the one-token stop strings end a reply; the other stop strings are matched as text."""
        stop_ids, stop_strings = single_token_ids(self.tokenizer, stops)
        eos = self.model.generation_config.eos_token_id
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        pad = self.tokenizer.pad_token_id
        pad = pad if pad is not None else (eos[0] if eos else 0)
        return sorted(set(eos + stop_ids)), stop_strings, pad

    def generate_requests(self, requests: list, options: dict) -> list[str]:
        if self.kv is None:
            return super().generate_requests(requests, options)
        stops = stop_list(options.get("stop"))
        end_ids, stop_strings, _ = self.end_tokens(stops)
        was_training = self.model.training
        self.model.eval()
        try:
            replies = self.kv.generate(
                [r.messages for r in requests], [r.slot for r in requests],
                [r.options.get("seed") for r in requests],
                max_new_tokens=int(options.get("max_tokens") or self.max_new_tokens),
                temperature=float(options.get("temperature") or 0.0),
                top_p=float(options.get("top_p") or 1.0), end_ids=end_ids,
                stop_strings=stop_strings,
                force=force_after_ids(self.tokenizer, options.get("force_after")),
                limits=token_limit_ids(self.tokenizer, options.get("token_limits")))
        finally:
            self.model.train(was_training)
        self.usage["requests"] += len(requests)
        self.usage["prompt_tokens"] += sum(r.prompt_tokens for r in replies)
        self.usage["prefilled_tokens"] = (self.usage.get("prefilled_tokens", 0)
                                          + sum(r.prefilled for r in replies))
        self.usage["completion_tokens"] += sum(len(r.text_tokens) for r in replies)
        texts = [self.tokenizer.decode(r.text_tokens, skip_special_tokens=True) for r in replies]
        return [cut_at_stop(t, stops) for t in texts]

    def encode(self, conversations: list[list[dict]]):
        """The left-padded batch for ``generate`` (images loaded and processed)."""
        converted = [[processor_message(m) for m in conv] for conv in conversations]
        return self.processor.apply_chat_template(
            converted, add_generation_prompt=True, tokenize=True, return_dict=True,
            return_tensors="pt", processor_kwargs={"padding": True, "padding_side": "left"})

    def generate_batch(self, conversations: list[list[dict]], options: dict,
                       seed: int | None) -> list[str]:
        import torch

        inputs = self.encode(conversations)
        device = next(self.model.parameters()).device
        inputs = {k: v.to(device) if hasattr(v, "to") else v for k, v in dict(inputs).items()}
        stops = stop_list(options.get("stop"))
        end_ids, stop_strings, pad = self.end_tokens(stops)
        kwargs: dict[str, Any] = {
            "max_new_tokens": int(options.get("max_tokens") or self.max_new_tokens),
            "eos_token_id": end_ids, "pad_token_id": pad}
        temperature = float(options.get("temperature") or 0.0)
        if temperature > 0:
            top_p = float(options.get("top_p") or 1.0)
            kwargs.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if stop_strings:
            kwargs.update(stop_strings=stop_strings, tokenizer=self.tokenizer)
        if self.static_cache:
            kwargs["cache_implementation"] = "static"
        kwargs.update(logits_kwargs(options, self.tokenizer, inputs["input_ids"].shape[1]))
        was_training = self.model.training
        self.model.eval()
        devices = [device] if device.type == "cuda" else []
        try:
            with torch.no_grad(), torch.random.fork_rng(devices=devices):
                if seed is not None:
                    torch.manual_seed(int(seed))
                output = self.model.generate(**inputs, **kwargs)
        finally:
            self.model.train(was_training)
        prompt_length = inputs["input_ids"].shape[1]
        new = output[:, prompt_length:]
        texts = self.tokenizer.batch_decode(new, skip_special_tokens=True)
        ends = set(end_ids)
        # a row's tokens up to and including its first end token
        n_new = sum(next((i + 1 for i, t in enumerate(row) if t in ends), len(row))
                    for row in new.tolist())
        self.usage["requests"] += len(conversations)
        self.usage["prompt_tokens"] += int(inputs["attention_mask"].sum())
        self.usage["completion_tokens"] += n_new
        return [cut_at_stop(t, stops) for t in texts]


# ---------------------------------------------------------------------------------------------
# The colocated vLLM engine of TRL's GRPOTrainer (multi_gpu)


class BatchedVLLMChat(LockstepBatcher):
    """Generation through TRL's colocated vLLM engine (``trainer.vllm_generation``, TP 1), which
    TRL syncs with the trained weights and whose sampling settings are TRL's. Not exercised on
    the CPU-only CI."""

    name = "vllm-batched"

    def __init__(self, vllm_generation, processor, **kwargs: Any):
        super().__init__(**kwargs)
        self.vllm = vllm_generation
        self.processor = processor
        self.tokenizer = getattr(processor, "tokenizer", processor)
        self.reply_prefix = reply_opening(processor)

    def generate_batch(self, conversations: list[list[dict]], options: dict,
                       seed: int | None) -> list[str]:
        if any(options.get(rule) for rule in LOCAL_SAMPLING_KEYS):
            raise ChatError("the vLLM engine does not apply the local decoding rules "
                            f"({', '.join(LOCAL_SAMPLING_KEYS)}); leave them unset for vLLM")
        prompt_ids, images = [], []
        for conv in conversations:
            converted = [processor_message(m) for m in conv]
            encoded = self.processor.apply_chat_template(converted, add_generation_prompt=True,
                                                         tokenize=True, return_dict=True)
            ids = encoded["input_ids"]
            prompt_ids.append(list(ids[0] if ids and isinstance(ids[0], list) else ids))
            pics = [p["image"] for m in converted for p in m["content"] if p.get("type") == "image"]
            images.append(pics or None)
        if all(i is None for i in images):
            images = None
        _, completion_ids, _, _ = self.vllm.generate(prompt_ids, images, num_generations=1)
        texts = self.tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
        self.usage["requests"] += len(conversations)
        self.usage["prompt_tokens"] += sum(len(p) for p in prompt_ids)
        self.usage["completion_tokens"] += sum(len(c) for c in completion_ids)
        return [cut_at_stop(t, options.get("stop")) for t in texts]
