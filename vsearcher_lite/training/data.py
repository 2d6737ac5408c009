"""Teacher trajectories as a TRL chat dataset, and the token-level views of what SFT trains.

TRL's vision collator masks every token but the assistant turns (paper 2.2: loss on the model's
own turns only); ``trained_spans`` shows what is trained, so a test and notebook 06 can check it.
``answer_token_weights`` is the cpu recipe's loss weighting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from vsearcher_lite.runio import InputError, RunDir, read_jsonl_numbered

ROLES = ("system", "user", "assistant", "tool")
IGNORE_INDEX = -100


def check_record(record: dict, where: str) -> dict:
    """``record`` when it is a usable TRL chat example (known roles, an assistant turn, one
    image per placeholder, files present); else an ``InputError`` naming ``where``."""
    messages = record.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InputError(f"{where}: missing key 'messages' (a list of chat messages)")
    n_placeholders = 0
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise InputError(f"{where}: message {i} needs 'role' and 'content'")
        if m["role"] not in ROLES:
            raise InputError(f"{where}: message {i} has unknown role {m['role']!r}")
        content = m["content"]
        if isinstance(content, list):
            n_placeholders += sum(isinstance(p, dict) and p.get("type") == "image" for p in content)
        elif not isinstance(content, str):
            raise InputError(f"{where}: message {i} content must be a list of parts or a string")
    if not any(m["role"] == "assistant" for m in messages):
        raise InputError(f"{where}: no assistant turn to train on")
    images = record.get("images", [])
    if not isinstance(images, list):
        raise InputError(f"{where}: 'images' must be a list of file paths")
    if len(images) != n_placeholders:
        raise InputError(f"{where}: {n_placeholders} image placeholder(s) "
                         f"but {len(images)} image(s)")
    for path in images:
        if not Path(str(path)).is_file():
            raise InputError(f"{where}: image file {path} does not exist")
    return record


def load_sft_records(path: str | Path, limit: int | None = None) -> list[dict]:
    """The checked records of a TRL chat JSONL file (``limit``: the first ones only)."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path}: is a folder; give the TRL chat JSONL file "
                         "(trajectories/export/sft_trl.jsonl)")
    if not path.is_file():
        raise InputError(f"{path}: SFT data not found; run `vsearcher-lite trajectories` first")
    run = RunDir(path.absolute().parent.parent.parent)  # the run of RUN_DIR/trajectories/export/
    records = []
    for number, record in read_jsonl_numbered(path):
        records.append(check_record(run.resolve(record), f"{path}:{number}"))
        if limit is not None and len(records) >= limit:
            break
    if not records:
        raise InputError(f"{path}: no trajectories to train on")
    return records


def with_string_parts(record: dict) -> dict:
    """The record with every string content turned into one text part (one Arrow type a column)."""
    messages = []
    for m in record["messages"]:
        content = m["content"]
        if isinstance(content, str):
            parts = [{"type": "text", "text": content}]
        else:
            parts = [{"type": p["type"], "text": p.get("text")} for p in content]
        messages.append({"role": m["role"], "content": parts})
    return {"messages": messages, "images": [str(p) for p in record.get("images", [])]}


def to_dataset(records: Sequence[dict]):
    """A ``datasets.Dataset`` with ``messages`` and ``images`` (cast to ``datasets.Image()``)."""
    import datasets

    rows = [with_string_parts(r) for r in records]
    ds = datasets.Dataset.from_list(rows)
    return ds.cast_column("images", datasets.Sequence(datasets.Image()))


def image_token_count(processor, path: str | Path) -> int:
    """How many ``<|image_pad|>`` tokens the processor expands one image into (from its size:
    the header is read, not the pixels)."""
    from PIL import Image

    ip = processor.image_processor
    with Image.open(path) as im:
        width, height = im.size
    merge = int(getattr(ip, "merge_size", 1) or 1)
    return int(ip.get_number_of_image_patches(height, width, {})) // (merge * merge)


def rendered_lengths(processor, records: Sequence[dict]) -> list[int]:
    """Each record's token length as training sees it, without processing pixels (the template
    tokenized as text, plus each image's expansion); equal to the collator's (a test checks it)."""
    from trl.data_utils import prepare_multimodal_messages

    tokenizer = getattr(processor, "tokenizer", processor)
    pad = getattr(processor, "image_token", "<|image_pad|>")
    texts, extra = [], []
    for r in records:
        images = r.get("images", [])
        parts = with_string_parts(r)["messages"]
        messages = prepare_multimodal_messages(parts, images=list(images))
        texts.append(processor.apply_chat_template(messages, tokenize=False))
        extra.append(sum(image_token_count(processor, p) - 1 for p in images))
    # verbose=False: finding the too-long trajectories is the point here, so transformers'
    # "sequence length is longer than the specified maximum" warning would only alarm.
    counts = tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"] if texts else []
    for text, n in zip(texts, extra):
        if n and pad not in text:
            raise ValueError(f"the chat template wrote no {pad} for a record with images")
    return [len(ids) + n for ids, n in zip(counts, extra)]


def record_level(record: dict) -> str:
    """A training record's level, ``unknown`` when it names none."""
    return str(record.get("level") or "unknown")


def lengths_by_level(records: Sequence[dict], lengths: Sequence[int],
                     max_length: int | None) -> dict[str, dict]:
    """Per level (a record's ``level``, else ``unknown``): trajectories, how many fit
    ``max_length`` and how many do not, and the median, 90th percentile and longest token length.

    >>> lengths_by_level([{"level": "easy"}, {"level": "easy"}, {}], [10, 30, 5], 20)["easy"]
    {'trajectories': 2, 'kept': 1, 'dropped': 1, 'median': 30, 'p90': 30, 'max': 30}
    """
    by: dict[str, list[int]] = {}
    for record, n in zip(records, lengths):
        by.setdefault(record_level(record), []).append(int(n))
    out = {}
    for level, ns in sorted(by.items()):
        ns.sort()
        dropped = sum(n > max_length for n in ns) if max_length else 0
        out[level] = {"trajectories": len(ns), "kept": len(ns) - dropped, "dropped": dropped,
                      "median": ns[len(ns) // 2], "p90": ns[min(len(ns) - 1, int(0.9 * len(ns)))],
                      "max": ns[-1]}
    return out


def task_key(record: dict) -> str:
    """What makes a training example's task: its first user turn's text and its images (the
    exported records carry no task id; two samples of one task share both)."""
    import json

    first = next((m for m in record["messages"] if m["role"] == "user"), {})
    return json.dumps([first.get("content"), record.get("images", [])], sort_keys=True)


def seen_counts(records: Sequence[dict], samples_seen: int) -> dict[str, dict]:
    """What SFT really trains on, per level (a record's ``level``, else ``unknown``) and ``all``:
    the trajectories, the distinct tasks and distinct trajectories among them, and how often a
    distinct trajectory is seen in ``samples_seen`` training samples (the mean, and the most: a
    copy repeated in the file is seen once per copy, and a partial pass is counted whole). A
    distinct trajectory is a distinct text, as the training chains pool them.

    >>> rs = [{"messages": [{"role": "user", "content": "q"}], "level": "easy"}] * 2
    >>> seen_counts(rs, 3)["easy"]
    {'trajectories': 2, 'distinct_tasks': 1, 'distinct_trajectories': 1, 'times_seen_mean': 3.0, \
'times_seen_most': 4}
    """
    import math
    from collections import Counter

    from vsearcher_lite.synthesis.chains import trajectory_text

    passes = samples_seen / len(records) if records else 0.0
    by: dict[str, list[dict]] = {}
    for record in records:
        by.setdefault(record_level(record), []).append(record)
    out = {}
    for level, group in [*sorted(by.items()), ("all", list(records))]:
        if not group:
            continue
        copies = Counter(trajectory_text(r) for r in group)
        out[level] = {"trajectories": len(group),
                      "distinct_tasks": len({task_key(r) for r in group}),
                      "distinct_trajectories": len(copies),
                      "times_seen_mean": round(passes * len(group) / len(copies), 2),
                      "times_seen_most": max(copies.values()) * math.ceil(passes)}
    return out


def training_chat_template(processor) -> str | None:
    """The template that marks the assistant's tokens for the collator: TRL's training variant of
    the processor's template (``None``: its own already marks them), or, for the Qwen3-VL
    Thinking template that TRL does not know, this project's twin of it (the same text, checked
    on probe conversations); an ``InputError`` for any other template."""
    from PIL import Image
    from trl.chat_template_utils import get_training_chat_template

    from vsearcher_lite.model.thinking_template import renders_like_thinking, thinking_template

    try:
        return get_training_chat_template(processor)
    except ValueError:
        pass
    if renders_like_thinking(processor, Image.new("RGB", (32, 32))):
        return thinking_template(training=True)
    raise InputError("the base's chat template is neither one TRL can mark for assistant-only "
                     "loss nor the Qwen3-VL Thinking template; give the checkpoint a template "
                     "with {% generation %} markers around the assistant turns")


def mark_assistant_turns(processor) -> bool:
    """Put this project's training template on ``processor`` where TRL has none for its template
    (the Thinking one): ``SFTTrainer`` takes a template with generation markers as it is and
    otherwise asks TRL, which refuses. The text every conversation renders to is unchanged.
    Whether the template was replaced."""
    from trl.chat_template_utils import get_training_chat_template, has_generation_markers

    template = processor.chat_template
    if isinstance(template, str) and has_generation_markers(template):
        return False
    try:
        get_training_chat_template(processor)
        return False  # TRL swaps its own in
    except ValueError:
        marked = training_chat_template(processor)
    processor.chat_template = marked
    tokenizer = getattr(processor, "tokenizer", None)
    if tokenizer is not None:
        tokenizer.chat_template = marked
    return True


def make_collator(processor, max_length: int | None = None):
    """TRL's vision-language collator with assistant-only labels and a training template
    (``training_chat_template``): what ``SFTTrainer`` builds, so tests and the notebook see
    exactly the batches training sees."""
    from trl.trainer.sft_trainer import DataCollatorForVisionLanguageModeling

    template = training_chat_template(processor)
    return DataCollatorForVisionLanguageModeling(processor=processor, max_length=max_length,
                                                 assistant_only_loss=True, chat_template=template)


def trained_spans(input_ids: Sequence[int], labels: Sequence[int]) -> list[tuple[int, int]]:
    """Maximal ``[start, end)`` runs of positions whose label is not ignored.

    >>> trained_spans([5, 6, 7, 8, 9], [-100, 6, 7, -100, 9])
    [(1, 3), (4, 5)]
    """
    spans, start = [], None
    for i, label in enumerate(labels):
        if label != IGNORE_INDEX and start is None:
            start = i
        elif label == IGNORE_INDEX and start is not None:
            spans.append((start, i))
            start = None
    if start is not None:
        spans.append((start, len(labels)))
    return spans


def decode_trained(tokenizer, input_ids: Sequence[int], labels: Sequence[int]) -> list[str]:
    """The text of each trained run of tokens (special tokens kept, so ``<|im_end|>`` shows)."""
    ids = [int(i) for i in input_ids]
    spans = trained_spans(ids, labels)
    return [tokenizer.decode(ids[a:b], skip_special_tokens=False) for a, b in spans]


def find_subsequence(seq: Sequence[int], pattern: Sequence[int], start: int = 0,
                     end: int | None = None) -> int:
    """The first index ``>= start`` where ``pattern`` occurs in ``seq[:end]``, or -1.

    >>> find_subsequence([1, 2, 3, 2, 3], [2, 3], 2)
    3
    """
    n, m = (len(seq) if end is None else end), len(pattern)
    if m == 0:
        return -1
    for i in range(start, n - m + 1):
        if list(seq[i:i + m]) == list(pattern):
            return i
    return -1


def answer_token_weights(labels: Sequence[int], open_ids: Sequence[int], close_ids: Sequence[int],
                         weight: float) -> list[float]:
    """Per-position loss weights: ``weight`` on answer-bearing trained tokens, 1 on the other
    trained tokens, 0 on ignored ones. Answer-bearing: the tokens between the ``<answer>`` tags
    (``open_ids``, ``close_ids``) and earlier trained repeats of them (the reasoning that states
    the answer first). One answer per trajectory is too little signal for minutes of SFT.

    >>> answer_token_weights([-100, 7, 9, 1, 7, 2, 5], open_ids=[1], close_ids=[2], weight=10.0)
    [0.0, 10.0, 1.0, 1.0, 10.0, 1.0, 1.0]
    """
    labels = [int(x) for x in labels]
    weights = [0.0 if x == IGNORE_INDEX else 1.0 for x in labels]
    if weight == 1.0 or not open_ids or not close_ids:
        return weights
    pos = 0
    while True:
        a = find_subsequence(labels, open_ids, pos)
        if a < 0:
            break
        inner_start = a + len(open_ids)
        b = find_subsequence(labels, close_ids, inner_start)
        if b < 0:
            break
        answer = labels[inner_start:b]
        if answer and IGNORE_INDEX not in answer:
            for i in range(inner_start, b):
                weights[i] = weight
            # Earlier statements of the same answer in the assistant turns (e.g. inside <think>).
            j = find_subsequence(labels, answer, 0, a)
            while j >= 0:
                for i in range(j, j + len(answer)):
                    if labels[i] != IGNORE_INDEX:
                        weights[i] = weight
                j = find_subsequence(labels, answer, j + len(answer), a)
        pos = b + len(close_ids)
    return weights


def tag_ids(tokenizer, tag: str) -> list[int]:
    """The token ids of a tag as text (one id for the tiny tokenizer's added tokens)."""
    return list(tokenizer(tag, add_special_tokens=False)["input_ids"])
