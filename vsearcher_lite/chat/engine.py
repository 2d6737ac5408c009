"""Multi-turn generation for a local model that continues each episode from its own KV cache.

An agent episode grows by one reply and one tool response per turn; ``generate`` over the whole
conversation encodes and prefills all of it again every turn. ``KVEngine`` keeps, per episode,
what the model already computed:

- **The cache**: each layer's keys and values of every token the episode has seen. A turn renders
  the conversation with the chat template as before (the text is the record: a reply's sampled
  tokens need not be the tokens its text renders to), keeps the longest prefix whose tokens and
  images match the cache, and prefills only the rest: the end of the last reply, the tool
  response and its images. A cached image never goes through the vision tower again.
- **The positions**: Qwen3-VL rotates queries and keys by three positions (time, height, width).
  Text advances all three together; an image's tokens take a grid of positions and the text after
  it resumes one past the largest. The model's own ``get_rope_index`` gives them for the whole
  conversation and the engine passes the slice of the new tokens; a decoded token takes its row's
  largest position + 1. (``generate`` continues a cache one conversation at a time and sends every
  image of its input through the vision tower; rows whose caches differ need their positions and
  new images passed row by row, as here.)
- **The batch**: the rows' caches are copied right-aligned into one preallocated buffer per layer,
  so every row writes its next token at the same column, under a boolean mask that hides each
  row's padding. A row that ends leaves: its cache is saved for its next turn and the last running
  row takes its place, so the running rows stay a slice of the buffer and no step computes an
  ended row.
- **Sampling**: greedy, or temperature and top-p with one random number stream per row, seeded
  from the request's seed and the turn, so a row's samples do not depend on the other rows.

A cache is valid for the weights it was computed with: any change to the parameters (an optimizer
step, a loaded checkpoint) empties it.
"""

from __future__ import annotations

import hashlib
import inspect
import random
import time
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Hashable

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from vsearcher_lite.chat.local import apply_reply_rules, processor_message


def _rope_module(model):
    """The submodule that computes the multimodal rotary positions (PEFT wrappers included)."""
    return next((m for m in model.modules() if hasattr(m, "get_rope_index")), None)


class _BufferLayer(CacheLayerMixin):
    """One layer's keys and values in a preallocated buffer ``(rows, heads, columns, head_dim)``:
    ``update`` writes the new tokens at ``write`` and returns the columns ``[start, write + n)``
    as a view, so attention reads only what is filled and nothing is copied."""

    is_sliding = False

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, start: int, write: int):
        super().__init__()
        self.keys, self.values = keys, values
        self.start, self.write = start, write
        self.is_initialized = True

    def lazy_initialization(self, key_states, value_states) -> None:  # pragma: no cover
        raise RuntimeError("a buffer layer is allocated by the engine")

    def update(self, key_states, value_states, *args, **kwargs):
        end = self.write + key_states.shape[-2]
        self.keys[:, :, self.write:end] = key_states
        self.values[:, :, self.write:end] = value_states
        self.write = end
        return self.keys[:, :, self.start:end], self.values[:, :, self.start:end]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.write + query_length - self.start, 0

    def get_seq_length(self) -> int:
        return self.write - self.start

    def get_max_length(self) -> int:
        return self.keys.shape[2]


def _buffer_cache(keys: list[torch.Tensor], values: list[torch.Tensor], start: int,
                  write: int) -> Cache:
    return Cache(layers=[_BufferLayer(k, v, start, write) for k, v in zip(keys, values)])


@dataclass
class _Rendered:
    """One conversation as the model reads it: token ids, their three rotary positions, its
    images (pixel rows, grids, token spans, fingerprints)."""

    ids: torch.Tensor  # (n,)
    positions: torch.Tensor  # (3, n)
    pixel_values: torch.Tensor | None
    grids: torch.Tensor | None  # (images, 3)
    spans: list[tuple[int, int]]  # each image's token columns [start, end)
    fingerprints: list[str]
    turn: int  # assistant messages so far: numbers the turn for the row's sampling seed


@dataclass
class _Episode:
    """What an episode's cache holds: its token ids, its images, each layer's keys and values."""

    ids: torch.Tensor
    spans: list[tuple[int, int]]
    fingerprints: list[str]
    keys: list[torch.Tensor]  # per layer (heads, n, head_dim)
    values: list[torch.Tensor]


@dataclass
class EngineStats:
    """Where the tokens and the time went: tokens prefilled and taken from a cache, decode steps."""

    prefill_tokens: int = 0
    cached_tokens: int = 0
    decode_steps: int = 0
    decode_rows: int = 0  # rows summed over decode steps
    attended: int = 0  # key columns read per step, summed over rows and steps (padding included)
    context: int = 0  # of these, the rows' own tokens
    encode_seconds: float = 0.0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    vision_images: int = 0

    def to_dict(self) -> dict:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in vars(self).items()}


@dataclass
class Reply:
    text_tokens: list[int]  # the reply's tokens, its end token included
    prompt_tokens: int
    prefilled: int


def common_prefix(cached: torch.Tensor, ids: torch.Tensor) -> int:
    """How many leading tokens ``ids`` shares with ``cached``.

    >>> common_prefix(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 4, 5]))
    2
    """
    m = min(len(cached), len(ids))
    differ = (cached[:m] != ids[:m]).nonzero()
    return int(differ[0]) if len(differ) else m


def reusable_prefix(episode: _Episode | None, rendered: _Rendered) -> int:
    """The cached tokens a conversation can keep: the common prefix of token ids, cut before any
    image whose pixels differ or that the prefix would split, and short of the last token (its
    logits start the reply, so it is always computed)."""
    if episode is None:
        return 0
    keep = min(common_prefix(episode.ids, rendered.ids), len(rendered.ids) - 1)
    cached = dict(zip(episode.spans, episode.fingerprints))
    for span, fingerprint in zip(rendered.spans, rendered.fingerprints):
        start, end = span
        if start >= keep:
            break
        if end > keep or cached.get(span) != fingerprint:
            keep = start
            break
    return keep


def turn_seed(seed: int, turn: int) -> int:
    """The sampling seed of one turn of an episode seeded ``seed``.

    >>> turn_seed(7, 0) == turn_seed(7, 0), turn_seed(7, 0) != turn_seed(7, 1)
    (True, True)
    """
    return zlib.crc32(f"{seed}:{turn}".encode()) % (2**31 - 1)


def next_tokens(logits: torch.Tensor, temperature: float, top_p: float,
                draws: list[random.Random]) -> torch.Tensor:
    """One token per row: the argmax when ``temperature`` is 0, else a draw from the
    temperature-scaled distribution cut to its top-p nucleus, row ``i`` by inverting its
    cumulative distribution at one uniform number of ``draws[i]``.

    >>> next_tokens(torch.tensor([[0.0, 2.0, 1.0]]), 0.0, 1.0, []).tolist()
    [1]
    >>> next_tokens(torch.tensor([[0.0, 9.0, 0.0]]), 1.0, 0.5, [random.Random(0)]).tolist()
    [1]
    """
    if temperature <= 0:
        return logits.argmax(dim=-1)
    logits = logits.double() / temperature
    if top_p < 1.0:
        ordered, order = logits.sort(dim=-1, descending=True)
        probs = ordered.softmax(dim=-1)
        before = probs.cumsum(dim=-1) - probs  # the mass of the likelier tokens
        ordered = ordered.masked_fill(before > top_p, float("-inf"))  # the first always stays
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, ordered)
    cdf = logits.softmax(dim=-1).cumsum(dim=-1)
    u = torch.tensor([[d.random()] for d in draws], dtype=cdf.dtype) * cdf[:, -1:]
    picked = torch.searchsorted(cdf, u, right=True).squeeze(1)
    return picked.clamp_(max=logits.shape[-1] - 1)


class KVEngine:
    """Continues each episode of ``model`` (an image-text model with its ``processor``) from its
    KV cache; see the module docstring. ``generate`` takes one batch of conversations, each with a
    slot (the key its cache is kept under) and a seed; at most ``max_slots`` caches are kept."""

    @staticmethod
    def supports(model) -> bool:
        """Whether the engine knows ``model``'s positions (Qwen3-VL's three rotary positions: its
        ``get_rope_index`` reads the tokens' modality types) and its attention takes the
        engine's boolean mask (sdpa or eager, not flash attention)."""
        rope = _rope_module(model)
        attention = getattr(getattr(model, "config", None), "_attn_implementation", None)
        return rope is not None and attention in ("sdpa", "eager", None) and \
            "mm_token_type_ids" in inspect.signature(rope.get_rope_index).parameters

    def __init__(self, model, processor, *, max_slots: int = 64):
        if not self.supports(model):
            raise ValueError(f"the KV engine needs Qwen3-VL's positions and sdpa or eager "
                             f"attention; {type(model).__name__} differs (use engine='generate')")
        self.model = model
        self.processor = processor
        self.tokenizer = getattr(processor, "tokenizer", processor)
        self.max_slots = max_slots
        self.stats = EngineStats()
        self._episodes: OrderedDict[Hashable, _Episode] = OrderedDict()
        self._weights: tuple | None = None
        self._rope = _rope_module(model)
        config = getattr(model, "generation_config", None)
        self.suppress = sorted(getattr(config, "suppress_tokens", None) or [])

    # -- the caches ------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget every cached episode."""
        self._episodes.clear()

    def _check_weights(self) -> None:
        # every in-place change of a parameter bumps its version counter
        version = tuple(p._version for p in self.model.parameters())
        if version != self._weights:
            self._episodes.clear()
            self._weights = version

    def _save(self, slot: Hashable, episode: _Episode) -> None:
        self._episodes[slot] = episode
        self._episodes.move_to_end(slot)
        while len(self._episodes) > self.max_slots:
            self._episodes.popitem(last=False)

    # -- rendering ---------------------------------------------------------------------------

    def render(self, conversation: list[dict]) -> _Rendered:
        """The conversation through the chat template and the processor, with its positions."""
        converted = [processor_message(m) for m in conversation]
        encoded = self.processor.apply_chat_template(
            [converted], add_generation_prompt=True, tokenize=True, return_dict=True,
            return_tensors="pt")
        ids = encoded["input_ids"][0]
        grids = encoded.get("image_grid_thw")
        types = encoded.get("mm_token_type_ids")
        if types is None:
            types = torch.zeros_like(encoded["input_ids"])
        positions = self._rope.get_rope_index(ids[None], types, image_grid_thw=grids)[0][:, 0]
        spans: list[tuple[int, int]] = []
        start = None
        for i, flag in enumerate((types[0] == 1).tolist() + [False]):
            if flag and start is None:
                start = i
            elif not flag and start is not None:
                spans.append((start, i))
                start = None
        pixels = encoded.get("pixel_values")
        fingerprints = []
        if pixels is not None and grids is not None:
            offset = 0
            for grid in grids.tolist():
                rows = grid[0] * grid[1] * grid[2]
                chunk = pixels[offset:offset + rows].contiguous().numpy().tobytes()
                fingerprints.append(hashlib.blake2b(chunk, digest_size=16).hexdigest())
                offset += rows
        turn = sum(1 for m in conversation if m.get("role") == "assistant")
        return _Rendered(ids, positions, pixels, grids, spans, fingerprints, turn)

    def _new_images(self, rendered: _Rendered, keep: int):
        """Pixel rows and grids of the images after the first ``keep`` tokens."""
        if rendered.grids is None or not rendered.spans:
            return None, None
        first = next((i for i, (start, _) in enumerate(rendered.spans) if start >= keep),
                     len(rendered.spans))
        if first == len(rendered.spans):
            return None, None
        rows = rendered.grids.prod(dim=-1)
        offset = int(rows[:first].sum())
        self.stats.vision_images += len(rendered.spans) - first
        return rendered.pixel_values[offset:], rendered.grids[first:]

    # -- one turn of a batch ---------------------------------------------------------------

    @torch.no_grad()
    def generate(self, conversations: list[list[dict]], slots: list[Hashable],
                 seeds: list[int | None], *, max_new_tokens: int, temperature: float = 0.0,
                 top_p: float = 1.0, end_ids: list[int] = (), stop_strings: list[str] = (),
                 force: dict[int, int] | None = None,
                 limits: dict[int, int] | None = None) -> list[Reply]:
        """One reply per conversation, decoded together; each row's tokens end at its first
        ``end_ids`` token, at a stop string, or after ``max_new_tokens``.

        Row i of the buffers holds its tokens in the columns ``[starts[i], width)`` (right-aligned
        to the longest), then one column per decoded token, the same for every row."""
        device = next(self.model.parameters()).device
        self._check_weights()
        t0 = time.perf_counter()
        rendered = [self.render(c) for c in conversations]
        self.stats.encode_seconds += time.perf_counter() - t0
        episodes = [self._episodes.get(s) for s in slots]
        keeps = [reusable_prefix(e, r) for e, r in zip(episodes, rendered)]
        lengths = [len(r.ids) for r in rendered]
        n_rows, width = len(rendered), max(lengths)
        capacity = width + max_new_tokens
        layers = self._layer_shapes()
        dtype = next(self.model.parameters()).dtype
        keys = [torch.zeros(n_rows, h, capacity, d, dtype=dtype, device=device) for h, d in layers]
        values = [torch.zeros_like(k) for k in keys]
        valid = torch.zeros(n_rows, capacity, dtype=torch.bool, device=device)
        starts = [width - n for n in lengths]

        t0 = time.perf_counter()
        first_logits = []
        for i, (r, keep, episode) in enumerate(zip(rendered, keeps, episodes)):
            valid[i, starts[i]:width] = True
            row = ([k[i:i + 1] for k in keys], [v[i:i + 1] for v in values])
            first_logits.append(self._prefill(row, starts[i], r, keep, episode))
        self.stats.prefill_seconds += time.perf_counter() - t0

        # Decode in lockstep; ``rows[j]`` is the request in buffer row j (the running rows first).
        t0 = time.perf_counter()
        draws = [self._draws(seed, r.turn) for seed, r in zip(seeds, rendered)]
        rows = list(range(n_rows))
        next_position = [int(r.positions.max()) + 1 for r in rendered]
        produced: list[list[int]] = [[] for _ in range(n_rows)]
        ends = set(end_ids)
        stop_strings = [s for s in stop_strings if s]
        tail = max((len(self.tokenizer(s, add_special_tokens=False)["input_ids"])
                    for s in stop_strings), default=0) + 2
        logits = torch.stack(first_logits)
        column = width
        running = n_rows
        while running:
            logits = self._processed(logits, rows[:running], produced, force, limits)
            picked = next_tokens(logits, temperature, top_p,
                                 [draws[q] for q in rows[:running]]).tolist()
            finished = []
            for j, token in enumerate(picked):
                q = rows[j]
                produced[q].append(token)
                if (token in ends or len(produced[q]) >= max_new_tokens
                        or (stop_strings and self._stopped(produced[q], stop_strings, tail))):
                    finished.append(j)
            for j in reversed(finished):  # highest first, so a moved row has not ended
                q = rows[j]
                self._save(slots[q], self._episode_of(
                    rendered[q], produced[q][:-1], keys, values, j, starts[q], column))
                running -= 1
                if j != running:  # the last running row takes the ended row's place
                    for buffer in (*keys, *values):
                        buffer[j, :, :column] = buffer[running, :, :column]
                    valid[j] = valid[running]
                    rows[j], rows[running] = rows[running], rows[j]
                    picked[j] = picked[running]
            if not running:
                break
            start = min(starts[q] for q in rows[:running])
            valid[:running, column] = True
            tokens = torch.tensor(picked[:running], device=device).view(-1, 1)
            mrope = torch.tensor([next_position[q] for q in rows[:running]],
                                 device=device).view(1, -1, 1)
            positions = torch.cat([torch.full_like(mrope, column - start), mrope.expand(3, -1, -1)])
            cache = _buffer_cache([k[:running] for k in keys], [v[:running] for v in values],
                                  start, column)
            out = self.model(input_ids=tokens, attention_mask=valid[:running, None, None,
                                                                    start:column + 1],
                             position_ids=positions, past_key_values=cache, use_cache=True)
            logits = out.logits[:, -1].float()
            for q in rows[:running]:
                next_position[q] += 1
            self.stats.decode_steps += 1
            self.stats.decode_rows += running
            self.stats.attended += running * (column + 1 - start)
            self.stats.context += sum(column + 1 - starts[q] for q in rows[:running])
            column += 1
        self.stats.decode_seconds += time.perf_counter() - t0
        return [Reply(produced[q], lengths[q], lengths[q] - keeps[q]) for q in range(n_rows)]

    def _prefill(self, row: tuple[list, list], begin: int, rendered: _Rendered, keep: int,
                 episode: _Episode | None) -> torch.Tensor:
        """Fill one row of the batch buffers (``row``: its keys and values, each layer's
        ``(1, heads, columns, head_dim)`` view) from column ``begin``: the first ``keep`` tokens
        copied from the episode's cache, the rest computed after them. The logits of the last
        token."""
        keys, values = row
        device, dtype = keys[0].device, keys[0].dtype
        if keep:
            for k, v, ek, ev in zip(keys, values, episode.keys, episode.values):
                k[0, :, begin:begin + keep] = ek[:, :keep]
                v[0, :, begin:begin + keep] = ev[:, :keep]
        new = len(rendered.ids) - keep
        # each new token sees the cached ones and the new ones up to itself
        mask = torch.ones(new, keep + new, dtype=torch.bool, device=device).tril(keep)
        text = torch.arange(keep, len(rendered.ids)).view(1, 1, -1)
        positions = torch.cat([text, rendered.positions[:, None, keep:]]).to(device)
        pixels, grids = self._new_images(rendered, keep)
        out = self.model(
            input_ids=rendered.ids[None, keep:].to(device), attention_mask=mask[None, None],
            position_ids=positions, past_key_values=_buffer_cache(keys, values, begin,
                                                                  begin + keep),
            use_cache=True, pixel_values=None if pixels is None else pixels.to(device, dtype),
            image_grid_thw=None if grids is None else grids.to(device), logits_to_keep=1)
        self.stats.prefill_tokens += new
        self.stats.cached_tokens += keep
        return out.logits[0, -1].float()

    def _layer_shapes(self) -> list[tuple[int, int]]:
        config = self.model.config
        text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") \
            else config
        heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        return [(heads, head_dim)] * text.num_hidden_layers

    def _draws(self, seed: int | None, turn: int) -> random.Random:
        if seed is None:
            seed = int(torch.randint(0, 2**31 - 1, ()))  # the global torch RNG decides
        return random.Random(turn_seed(int(seed), turn))

    def _processed(self, logits: torch.Tensor, requests: list[int], produced: list[list[int]],
                   force: dict[int, int] | None = None,
                   limits: dict[int, int] | None = None) -> torch.Tensor:
        """Logits with the suppressed tokens set to -inf, then the reply rules
        (``chat.local.apply_reply_rules``: tokens used up, a forced token after its trigger);
        sampling runs on the CPU so that a row's generator decides."""
        logits = logits.cpu()
        if self.suppress:
            logits[:, self.suppress] = float("-inf")
        if force or limits:
            for j, q in enumerate(requests):
                apply_reply_rules(logits, j, produced[q], force or {}, limits or {})
        return logits

    def _stopped(self, tokens: list[int], stop_strings: list[str], tail: int) -> bool:
        text = self.tokenizer.decode(tokens[-tail:], skip_special_tokens=False)
        return any(text.endswith(s) for s in stop_strings)

    def _episode_of(self, rendered: _Rendered, fed: list[int], keys, values, row: int,
                    start: int, column: int) -> _Episode:
        """The row's cache after its turn: the conversation and the reply tokens fed back."""
        ids = torch.cat([rendered.ids, torch.tensor(fed, dtype=rendered.ids.dtype)])
        return _Episode(ids, rendered.spans, rendered.fingerprints,
                        [k[row, :, start:column].clone() for k in keys],
                        [v[row, :, start:column].clone() for v in values])
