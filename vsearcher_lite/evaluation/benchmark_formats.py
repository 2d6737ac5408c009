"""Benchmark files read and checked row by row, one parser per format (see ``benchmarks``).

``read_rows(path, format=None) -> (format, rows)`` detects the format from the first row unless
given, parses every row with it and raises an ``InputError`` naming the file, the line (or
item/row) and the field of the first problem. Nothing is downloaded or written here.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import json
import os
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from vsearcher_lite.agent.task import Task
from vsearcher_lite.runio import InputError, jsonl_records, read_text, text_lines

FORMATS = ("mmsearchexam", "browsecomp-vl", "mmsearch", "simplevqa", "task")
FORMAT_ALIASES = {"mm-searchexam": "mmsearchexam", "browsecompvl": "browsecomp-vl",
                  "bc-vl": "browsecomp-vl", "bcvl": "browsecomp-vl", "tasks": "task"}
FORMAT_FIELDS = {
    "mmsearchexam": "MM-SearchExam rows have question, image_path, answer",
    "browsecomp-vl": "BrowseComp-VL rows have question, image_path, answers",
    "mmsearch": "MMSearch rows have query, query_image, gt_answer",
    "simplevqa": "SimpleVQA rows have question, image, answer",
    "task": "task records have id, question, answer",
}
#: File types a benchmark may come in ("" : no extension, read as JSONL).
BENCHMARK_SUFFIXES = ("", ".jsonl", ".ndjson", ".json", ".parquet")
# Bare base64 of an image is long and uses only the base64 alphabet (a path or URL is not).
_BASE64_TEXT = re.compile(r"^[A-Za-z0-9+/=\s]+$")
MIN_BASE64_CHARS = 64


@dataclass(frozen=True)
class ImageSource:
    """Where a row's image comes from: ``kind`` is ``url``, ``path`` or ``bytes``; ``value`` the
    URL, the resolved path or the bytes' SHA-256. ``(kind, value)`` identifies the image."""

    kind: str
    value: str
    data: bytes | None = field(default=None, repr=False, compare=False)

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.value}"


@dataclass
class BenchmarkRow:
    """One checked row: the task fields, its image source and where it came from."""

    where: str  # "FILE:LINE", "FILE: item N" or "FILE: row N", for messages
    id: str
    question: str
    answer: str
    aliases: list[str] = field(default_factory=list)
    image: ImageSource | None = None
    group: str = ""  # the label evaluation breaks accuracy down by (a level, an area ...)
    meta: dict = field(default_factory=dict)
    task: Task | None = None  # the record itself, for the project's own task files


@dataclass
class ParseContext:
    path: Path
    format: str
    index: int  # 0-based position of the row in the file
    where: str

    def fail(self, message: str) -> InputError:
        return InputError(f"{self.where}: {message}")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def image_format(data: bytes) -> str | None:
    """The PIL format name of image bytes (``"JPEG"``, ``"PNG"`` ...), or ``None``."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as img:
            img.verify()
            return img.format
    except Exception:
        return None


def decode_base64_image(text: str, min_chars: int = MIN_BASE64_CHARS) -> bytes | None:
    """The bytes of a ``data:`` URL or bare base64 text, or ``None`` when it is neither.

    >>> decode_base64_image("data:image/png;base64,aGVsbG8=")
    b'hello'
    >>> decode_base64_image("images/cat.jpg") is None
    True
    """
    text = text.strip()
    if text.startswith("data:"):
        head, _, payload = text.partition(",")
        if ";base64" not in head:
            return None
    elif len(text) >= min_chars and _BASE64_TEXT.match(text):
        payload = text
    else:
        return None
    try:
        return base64.b64decode("".join(payload.split()), validate=True)
    except (binascii.Error, ValueError):
        return None


def is_url(text: str) -> bool:
    return text.lower().startswith(("http://", "https://"))


def resolve_local_path(text: str, base_dir: Path) -> Path | None:
    """An existing file for a path: absolute, from the working folder, from ``base_dir``, or from
    the run folder above it (a stage's task file names its images relative to its run)."""
    raw = text[len("file://"):] if text.startswith("file://") else text
    candidate = Path(raw).expanduser()
    options = [candidate, base_dir / candidate, base_dir.parent / candidate]
    for option in ([candidate] if candidate.is_absolute() else options):
        if option.is_file():
            return option.resolve()
    return None


def image_source(value: Any, ctx: ParseContext, name: str) -> ImageSource | None:
    """The image of a row from whatever its field holds; ``None`` for an empty field."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, list):
        if not value:
            return None
        if len(value) > 1:
            raise ctx.fail(f"field {name!r} holds {len(value)} images; "
                           "one question image is expected")
        return image_source(value[0], ctx, name)
    if isinstance(value, dict):
        data = value.get("bytes")
        if data:
            if isinstance(data, str):  # a "bytes" field holds base64 whatever its length
                data = decode_base64_image(data, min_chars=0)
                if data is None:
                    raise ctx.fail(f"field {name!r}: 'bytes' is text but not base64")
            return _bytes_source(bytes(data), ctx, name)
        for key in ("path", "url", "src"):
            if value.get(key):
                return image_source(value[key], ctx, name)
        raise ctx.fail(f"field {name!r}: an image struct needs 'bytes' or 'path'")
    if isinstance(value, (bytes, bytearray)):
        return _bytes_source(bytes(value), ctx, name)
    if not isinstance(value, str):
        raise ctx.fail(f"field {name!r}: expected an image URL, path or data, "
                       f"got {type(value).__name__}")
    text = value.strip()
    if is_url(text):
        return ImageSource("url", text)
    # An existing file wins over a base64 reading of its name (paths are short; image data is not).
    path = resolve_local_path(text, ctx.path.parent) if len(text) < 1024 else None
    if path is not None:
        return ImageSource("path", str(path))
    decoded = decode_base64_image(text)
    if decoded is not None:
        return _bytes_source(decoded, ctx, name)
    shown = text if len(text) <= 200 else text[:200] + "..."
    raise ctx.fail(f"field {name!r}: image file not found: {shown} "
                   f"(looked in the working folder and in {ctx.path.parent})")


def _bytes_source(data: bytes, ctx: ParseContext, name: str) -> ImageSource:
    if image_format(data) is None:
        raise ctx.fail(f"field {name!r}: the embedded data is not a readable image")
    return ImageSource("bytes", sha256_hex(data), data)


# ---------------------------------------------------------------------------------------------
# Fields


def text_field(record: dict, name: str, ctx: ParseContext, *, required: bool = True) -> str:
    """A non-empty text field (numbers become text: an answer may be stored as ``1874``)."""
    if record.get(name) is None:
        if required:
            raise ctx.fail(f"missing field {name!r} ({FORMAT_FIELDS[ctx.format]})")
        return ""
    value = record[name]
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ctx.fail(f"field {name!r} must be text, got {type(value).__name__}")
    text = str(value).strip()
    if required and not text:
        raise ctx.fail(f"field {name!r} is empty")
    return text


def answer_list(value: Any, name: str, ctx: ParseContext) -> list[str]:
    """A list of accepted answers (a lone string counts as a list of one)."""
    if value is None:
        return []
    if isinstance(value, str):
        try:  # some exports keep lists as JSON text
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        value = parsed if isinstance(parsed, list) else [value]
    if not isinstance(value, (list, tuple)):
        raise ctx.fail(f"field {name!r} must be a list of answers, got {type(value).__name__}")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise ctx.fail(f"field {name!r} holds a {type(item).__name__}, not an answer")
    return [str(item).strip() for item in value if str(item).strip()]


def row_id(record: dict, keys: tuple[str, ...], ctx: ParseContext) -> str:
    """The row's own id when it has one, else ``<file stem>-<row number>``."""
    for key in keys:
        value = "" if record.get(key) is None else str(record[key]).strip()
        if value:
            # A plain "id" is already an id; a numeric sample_id/data_id gets the format as prefix.
            return value if key == "id" else f"{ctx.format}-{value}"
    return f"{ctx.path.stem}-{ctx.index + 1:04d}"


def level_from(path: Path, image_url: str | None) -> str:
    """``"level1"``/``"level2"`` for a BrowseComp-VL row, from the file name or image URL.

    >>> level_from(Path("bc_vl_level2.jsonl"), None), level_from(Path("b"), "https://x/level1/a")
    ('level2', 'level1')
    """
    for text in (path.name, image_url or ""):
        m = re.search(r"level[_-]?([12])", text, re.IGNORECASE)
        if m:
            return f"level{m.group(1)}"
    return "browsecomp-vl"


def _extra_fields(record: dict, used: set[str]) -> dict:
    """Row fields not already used, kept as metadata (large image data left out)."""

    def large(value: Any) -> bool:
        if isinstance(value, dict):
            return "bytes" in value
        return isinstance(value, (bytes, bytearray)) or isinstance(value, str) and len(value) > 2000

    return {k: v for k, v in record.items() if k not in used and not large(v)}


# ---------------------------------------------------------------------------------------------
# One parser per format


def parse_mmsearchexam(record: dict, ctx: ParseContext) -> BenchmarkRow:
    if "image_path" not in record:
        raise ctx.fail(f"missing field 'image_path' ({FORMAT_FIELDS['mmsearchexam']})")
    question = text_field(record, "question", ctx)
    answer = text_field(record, "answer", ctx)
    image = image_source(record.get("image_path"), ctx, "image_path")
    meta = _extra_fields(record, {"question", "answer", "image_path", "id"})
    return BenchmarkRow(ctx.where, row_id(record, ("id",), ctx), question, answer, image=image,
                        group="exam", meta=meta)


def parse_browsecomp_vl(record: dict, ctx: ParseContext) -> BenchmarkRow:
    question = text_field(record, "question", ctx)
    key = "answers" if "answers" in record else "answer"
    if key not in record:
        raise ctx.fail(f"missing field 'answers' ({FORMAT_FIELDS['browsecomp-vl']})")
    answers = answer_list(record[key], key, ctx)
    if not answers:
        raise ctx.fail("field 'answers' is empty")
    image_field = "image_path" if "image_path" in record else "image"
    image = image_source(record.get(image_field), ctx, image_field)
    url = image.value if image is not None and image.kind == "url" else None
    meta = _extra_fields(record, {"question", "answers", "answer", "image_path", "image", "id"})
    group = level_from(ctx.path, url)
    return BenchmarkRow(ctx.where, row_id(record, ("id",), ctx), question, answers[0],
                        aliases=answers[1:], image=image, group=group, meta=meta)


def parse_mmsearch(record: dict, ctx: ParseContext) -> BenchmarkRow:
    question = text_field(record, "query", ctx)
    answer = text_field(record, "gt_answer", ctx)
    aliases = answer_list(record.get("alternative_gt_answers"), "alternative_gt_answers", ctx)
    image = image_source(record.get("query_image"), ctx, "query_image")
    meta = _extra_fields(record, {"query", "gt_answer", "alternative_gt_answers", "query_image",
                                  "image_search_result", "sample_id"})
    return BenchmarkRow(ctx.where, row_id(record, ("sample_id",), ctx), question, answer,
                        aliases=[a for a in aliases if a != answer], image=image,
                        group=str(record.get("area") or "mmsearch"), meta=meta)


def parse_simplevqa(record: dict, ctx: ParseContext) -> BenchmarkRow:
    question = text_field(record, "question", ctx)
    answer = text_field(record, "answer", ctx)
    image_field = next((k for k in ("image", "image_path", "image_url") if k in record), None)
    if image_field is None:
        raise ctx.fail(f"missing field 'image' ({FORMAT_FIELDS['simplevqa']})")
    image = image_source(record[image_field], ctx, image_field)
    group = str(record.get("vqa_category") or record.get("language") or "simplevqa")
    meta = _extra_fields(record, {"question", "answer", image_field, "data_id"})
    return BenchmarkRow(ctx.where, row_id(record, ("data_id", "id"), ctx), question, answer,
                        image=image, group=group, meta=meta)


def parse_task(record: dict, ctx: ParseContext) -> BenchmarkRow:
    missing = [k for k in ("id", "question", "answer") if k not in record]
    if missing:
        raise ctx.fail(f"missing field {missing[0]!r} ({FORMAT_FIELDS['task']})")
    try:
        task = Task.from_dict(record)
    except (KeyError, TypeError) as exc:
        raise ctx.fail(f"not a task record ({exc})") from None
    for name in ("question", "answer"):
        text_field(record, name, ctx)
    for name in ("question", "difficulty", "split"):
        if name in record and not isinstance(record[name], str):
            raise ctx.fail(f"field {name!r} must be text, got {type(record[name]).__name__}")
    image = image_source(task.image_path, ctx, "image_path")
    return BenchmarkRow(ctx.where, str(task.id), task.question, str(task.answer),
                        aliases=list(task.aliases), image=image, group=task.difficulty, task=task)


PARSERS: dict[str, Callable[[dict, ParseContext], BenchmarkRow]] = {
    "mmsearchexam": parse_mmsearchexam,
    "browsecomp-vl": parse_browsecomp_vl,
    "mmsearch": parse_mmsearch,
    "simplevqa": parse_simplevqa,
    "task": parse_task,
}


def normalise_format(name: str | None) -> str | None:
    if name is None:
        return None
    key = name.strip().lower().replace("_", "-")
    key = FORMAT_ALIASES.get(key, key)
    if key not in FORMATS:
        raise InputError(f"unknown benchmark format {name!r}; choose one of {', '.join(FORMATS)}")
    return key


def detect_format(record: dict) -> str | None:
    """The format a row's fields belong to, or ``None`` when they fit none.

    >>> detect_format({"question": "q", "image_path": "https://x/a.jpg", "answer": "a"})
    'mmsearchexam'
    >>> detect_format({"query": "q", "gt_answer": "a", "query_image": None})
    'mmsearch'
    """
    keys = set(record)
    qa = {"question", "answer"} <= keys
    if {"query", "gt_answer"} <= keys:
        return "mmsearch"
    if "question" in keys and "answers" in keys:
        return "browsecomp-vl"
    if qa and ("data_id" in keys or ("image" in keys and "language" in keys)):
        return "simplevqa"
    if qa and "id" in keys and keys & {"split", "difficulty", "rounds", "seed_id"}:
        return "task"
    if qa and "image_path" in keys:
        return "mmsearchexam"
    return None


# ---------------------------------------------------------------------------------------------
# Files


def iter_records(path: Path) -> Iterator[tuple[str, dict]]:
    """``(where, record)`` for each row of a JSONL, JSON-array or Parquet file."""
    if not path.exists():
        raise InputError(f"{path}: file not found")
    if path.is_dir():
        raise InputError(f"{path}: is a folder; give a benchmark file (.jsonl, .json or .parquet)")
    suffix = path.suffix.lower()
    if suffix not in BENCHMARK_SUFFIXES:
        raise InputError(f"{path}: unsupported file type {path.suffix!r}; give a .jsonl, .json or "
                         ".parquet file (a file without an extension is read as JSONL)")
    if suffix == ".parquet":
        yield from _parquet_records(path)
        return
    text = read_text(path, "utf-8-sig")
    if suffix == ".json" and text.lstrip().startswith(("[", "{")):
        try:
            whole = json.loads(text)
        except json.JSONDecodeError:
            whole = None  # perhaps JSONL with a .json name: read it line by line below
        if isinstance(whole, dict):
            lists = [v for v in whole.values() if isinstance(v, list)]
            whole = lists[0] if len(lists) == 1 else [whole]
        if isinstance(whole, list):
            for i, item in enumerate(whole, start=1):
                if not isinstance(item, dict):
                    raise InputError(f"{path}: item {i}: expected a JSON object, "
                                     f"got {type(item).__name__}")
                yield f"{path}: item {i}", item
            return
    for number, record in jsonl_records(text_lines(text), str(path)):
        yield f"{path}:{number}", record


def _parquet_records(path: Path) -> Iterator[tuple[str, dict]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - pyarrow comes with datasets
        raise InputError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow)") from None
    try:
        table = pq.read_table(path)
    except Exception as exc:
        raise InputError(f"{path}: not a readable Parquet file ({exc})") from None
    for i, record in enumerate(table.to_pylist(), start=1):
        yield f"{path}: row {i}", record


def read_rows(path: str | os.PathLike, format: str | None = None) -> tuple[str, list[BenchmarkRow]]:
    """``(format, rows)``: every row of a benchmark file, checked with one format (the first
    row's unless given), so a row of another shape is reported with the field it lacks."""
    path = Path(path)
    fmt = normalise_format(format)
    rows: list[BenchmarkRow] = []
    seen: dict[str, str] = {}
    for index, (where, record) in enumerate(iter_records(path)):
        if fmt is None:
            fmt = detect_format(record)
            if fmt is None:
                raise InputError(f"{where}: cannot tell the benchmark format from the fields "
                                 f"{sorted(record)[:12]}; pass --format ({', '.join(FORMATS)})")
        row = PARSERS[fmt](record, ParseContext(path, fmt, index, where))
        if row.id in seen:
            raise InputError(f"{where}: id {row.id!r} was already used at {seen[row.id]}")
        seen[row.id] = where
        rows.append(row)
    if not rows:
        raise InputError(f"{path}: no rows")
    return fmt, rows


def select_rows(rows: list[BenchmarkRow], *, images_only: bool = False, language: str | None = None,
                sample: int | None = None, seed: int = 0,
                limit: int | None = None) -> list[BenchmarkRow]:
    """The rows an evaluation uses: with an image only, one language, a seeded random sample
    (in file order), then the first ``limit``."""
    if images_only:
        rows = [r for r in rows if r.image is not None]
    if language:
        wanted = language.strip().casefold()
        rows = [r for r in rows if str(r.meta.get("language", "")).strip().casefold() == wanted]
    if sample is not None and sample < len(rows):
        keep = set(random.Random(seed).sample(range(len(rows)), sample))
        rows = [r for i, r in enumerate(rows) if i in keep]
    if limit is not None:
        rows = rows[: max(0, limit)]
    return rows


def summarise_rows(rows: list[BenchmarkRow]) -> dict:
    """The numbers ``--check`` prints: rows, rows with images, distinct images, and more."""
    images = [r.image for r in rows if r.image is not None]
    return {
        "n_rows": len(rows),
        "n_with_images": len(images),
        "n_distinct_images": len({i.key for i in images}),
        "image_kinds": dict(sorted(Counter(i.kind for i in images).items())),
        "n_distinct_answers": len({r.answer for r in rows}),
        "groups": dict(sorted(Counter(r.group for r in rows).items())),
        "max_question_chars": max((len(r.question) for r in rows), default=0),
    }


def check_benchmark(path: str | os.PathLike, format: str | None = None, **selection: Any) -> dict:
    """A benchmark file's numbers, checked without downloading or writing anything.

    ``selection`` takes ``select_rows``'s options; the counts are of the selected rows.
    """
    fmt, rows = read_rows(path, format)
    return {"path": str(path), "format": fmt, **summarise_rows(select_rows(rows, **selection))}
