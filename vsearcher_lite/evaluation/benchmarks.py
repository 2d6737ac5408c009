"""Benchmark files as ``Task`` records: MM-SearchExam, MMSearch, BrowseComp-VL, SimpleVQA, our own tasks.

``load_benchmark(path, format=None, ...) -> list[Task]`` reads a file, checks every row, and
brings its images into a local cache; ``check_benchmark(path)`` does the checking alone (no
download, nothing written) and counts rows, rows with images and distinct images.

Formats, and what this module relies on for each (the field names as their authors publish them):

=================  ==================================================================================
``mmsearchexam``   the file released with the VSearcher paper (``mmsearchexam.jsonl``, 283 rows): one
                   JSON object per line with exactly ``question``, ``image_path`` (an http(s) URL)
                   and ``answer``. No ids: rows are numbered.
``browsecomp-vl``  the WebWatcher release (``bc_vl_level1.jsonl`` / ``bc_vl_level2.jsonl``): one object
                   per line with ``question``, ``image_path`` (a URL), ``answers`` (a list; the first is
                   the gold answer, the rest are accepted too) and ``domain``. The level (1 or 2) comes
                   from the file name or the image URL.
``mmsearch``       the ``end2end`` subset of ``CaraJ/MMSearch`` (its dataset card): ``sample_id``,
                   ``query``, ``query_image`` (an image; null for the 129 text-only rows), ``gt_answer``,
                   ``alternative_gt_answers`` (a list), ``area``, ``subfield``, ``timestamp``. The paper
                   evaluates the 171 rows with an image (``images_only=True``).
``simplevqa``      ``m-a-p/SimpleVQA`` (its dataset card): ``data_id``, ``image``, ``question``,
                   ``answer``, ``language`` (``EN``/``CN``), ``original_category``, ``vqa_category``,
                   ``source``, ``atomic_question``, ``atomic_fact``. The paper samples 180 English
                   questions (``language="EN"``, ``sample=180``).
``task``           this project's task JSONL (``synthesis.task.Task`` records, e.g. ``RUN_DIR/filter/
                   exam.jsonl``): at least ``id``, ``question``, ``answer``.
=================  ==================================================================================

Files may be JSONL (``.jsonl``; a JSON array in a ``.json`` file is read too) or Parquet
(``.parquet``, as the Hugging Face datasets ship, images embedded as ``{"bytes", "path"}``). An
image field may hold an http(s) URL, a local path (relative paths are looked up from the working
folder, then from the benchmark file's folder), a ``data:`` URL or bare base64, raw bytes, or
a ``{"bytes": ..., "path": ...}`` struct.

The image cache (``IMAGE_CACHE_DIR`` under the run dir by default): every image is stored once
under a content-addressed name (``<sha256 prefix>.<ext>``), written atomically; downloaded URLs
are remembered in ``urls.jsonl`` so a rerun downloads nothing. Downloads go through ``HttpClient``
with the SSRF guard (public addresses only, every redirect checked) and must decode as images.

Every problem is an ``InputError`` naming the file, the line (or item/row) and the field.
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
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from vsearcher_lite.runio import InputError, JsonlLog, atomic_write_bytes, jsonl_records, read_text, text_lines
from vsearcher_lite.synthesis.task import Task

FORMATS = ("mmsearchexam", "browsecomp-vl", "mmsearch", "simplevqa", "task")
FORMAT_ALIASES = {"mm-searchexam": "mmsearchexam", "browsecompvl": "browsecomp-vl", "bc-vl": "browsecomp-vl",
                  "bcvl": "browsecomp-vl", "tasks": "task"}
IMAGE_MODES = ("download", "url")
IMAGE_CACHE_DIR = Path("eval") / "images"
MAX_IMAGE_BYTES = 25_000_000
IMAGE_EXTENSIONS = {"JPEG": ".jpg", "PNG": ".png", "GIF": ".gif", "WEBP": ".webp", "BMP": ".bmp", "TIFF": ".tif"}
# Bare base64 of an image is long and uses only the base64 alphabet (a path or URL never is that long without a "/" or ".").
_BASE64_TEXT = re.compile(r"^[A-Za-z0-9+/=\s]+$")
MIN_BASE64_CHARS = 64


# ---------------------------------------------------------------------------------------------
# Rows and images


@dataclass(frozen=True)
class ImageSource:
    """Where a row's image comes from: ``kind`` is ``url``, ``path`` or ``bytes``.

    ``value`` is the URL, the resolved path, or the SHA-256 of the bytes; ``(kind, value)``
    identifies the image (two rows with one image count once).
    """

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
    group: str = ""  # the breakdown label evaluation reports accuracy by (a level, an area ...)
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
    """The PIL format name of image bytes (``"JPEG"``, ``"PNG"`` ...), or ``None`` if they are not an image."""
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
    """An existing file for a path from a benchmark file: absolute, from the working folder, from
    the benchmark file's folder, or from the run folder above it (a stage's task file names its
    images relative to its run), in that order; ``None`` if none exists."""
    raw = text[len("file://"):] if text.startswith("file://") else text
    candidate = Path(raw).expanduser()
    options = [candidate, base_dir / candidate, base_dir.parent / candidate]
    for option in ([candidate] if candidate.is_absolute() else options):
        if option.is_file():
            return option.resolve()
    return None


def image_source(value: Any, ctx: ParseContext, field_name: str) -> ImageSource | None:
    """The image of a row from whatever its field holds; ``None`` for an empty field."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, list):
        if not value:
            return None
        if len(value) > 1:
            raise ctx.fail(f"field {field_name!r} holds {len(value)} images; one question image is expected")
        return image_source(value[0], ctx, field_name)
    if isinstance(value, dict):
        data = value.get("bytes")
        if data:
            if isinstance(data, str):
                decoded = decode_base64_image(data, min_chars=0)  # a "bytes" field holds base64 whatever its length
                if decoded is None:
                    raise ctx.fail(f"field {field_name!r}: 'bytes' is text but not base64")
                data = decoded
            return _bytes_source(bytes(data), ctx, field_name)
        for key in ("path", "url", "src"):
            if value.get(key):
                return image_source(value[key], ctx, field_name)
        raise ctx.fail(f"field {field_name!r}: an image struct needs 'bytes' or 'path'")
    if isinstance(value, (bytes, bytearray)):
        return _bytes_source(bytes(value), ctx, field_name)
    if not isinstance(value, str):
        raise ctx.fail(f"field {field_name!r}: expected an image URL, path or data, got {type(value).__name__}")
    text = value.strip()
    if is_url(text):
        return ImageSource("url", text)
    # An existing file wins over a base64 reading of its name (paths are short; image data is not).
    path = resolve_local_path(text, ctx.path.parent) if len(text) < 1024 else None
    if path is not None:
        return ImageSource("path", str(path))
    decoded = decode_base64_image(text)
    if decoded is not None:
        return _bytes_source(decoded, ctx, field_name)
    shown = text if len(text) <= 200 else text[:200] + "..."
    raise ctx.fail(f"field {field_name!r}: image file not found: {shown} "
                   f"(looked in the working folder and in {ctx.path.parent})")


def _bytes_source(data: bytes, ctx: ParseContext, field_name: str) -> ImageSource:
    if image_format(data) is None:
        raise ctx.fail(f"field {field_name!r}: the embedded data is not a readable image")
    return ImageSource("bytes", sha256_hex(data), data)


# ---------------------------------------------------------------------------------------------
# Field helpers


def text_field(record: dict, name: str, ctx: ParseContext, *, required: bool = True) -> str:
    """A non-empty text field (numbers become text: an answer may be stored as ``1874``)."""
    if name not in record or record[name] is None:
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
    out = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise ctx.fail(f"field {name!r} holds a {type(item).__name__}, not an answer")
        if str(item).strip():
            out.append(str(item).strip())
    return out


def row_id(record: dict, keys: tuple[str, ...], ctx: ParseContext) -> str:
    """The row's own id when it has one, else ``<file stem>-<row number>``."""
    for key in keys:
        value = record.get(key)
        if value is not None and str(value).strip():
            # A plain "id" is already an id; a numeric sample_id/data_id gets the format as prefix.
            return str(value).strip() if key == "id" else f"{ctx.format}-{str(value).strip()}"
    return f"{ctx.path.stem}-{ctx.index + 1:04d}"


def level_from(path: Path, image_url: str | None) -> str:
    """``"level1"``/``"level2"`` for a BrowseComp-VL row, from the file name or image URL.

    >>> level_from(Path("bc_vl_level2.jsonl"), None), level_from(Path("bc.jsonl"), "https://x/level1/a.jpg")
    ('level2', 'level1')
    """
    for text in (path.name, image_url or ""):
        m = re.search(r"level[_-]?([12])", text, re.IGNORECASE)
        if m:
            return f"level{m.group(1)}"
    return "browsecomp-vl"


def _extra_fields(record: dict, used: set[str]) -> dict:
    """Row fields not already used, kept as metadata (large image data left out)."""
    meta = {}
    for key, value in record.items():
        if key in used:
            continue
        if isinstance(value, (bytes, bytearray)) or (isinstance(value, dict) and "bytes" in value):
            continue
        if isinstance(value, str) and len(value) > 2000:
            continue
        meta[key] = value
    return meta


# ---------------------------------------------------------------------------------------------
# One parser per format


def parse_mmsearchexam(record: dict, ctx: ParseContext) -> BenchmarkRow:
    if "image_path" not in record:
        raise ctx.fail(f"missing field 'image_path' ({FORMAT_FIELDS['mmsearchexam']})")
    question = text_field(record, "question", ctx)
    answer = text_field(record, "answer", ctx)
    image = image_source(record.get("image_path"), ctx, "image_path")
    return BenchmarkRow(ctx.where, row_id(record, ("id",), ctx), question, answer, image=image, group="exam",
                        meta=_extra_fields(record, {"question", "answer", "image_path", "id"}))


def parse_browsecomp_vl(record: dict, ctx: ParseContext) -> BenchmarkRow:
    question = text_field(record, "question", ctx)
    if "answers" in record:
        answers = answer_list(record["answers"], "answers", ctx)
    elif "answer" in record:
        answers = answer_list(record["answer"], "answer", ctx)
    else:
        raise ctx.fail(f"missing field 'answers' ({FORMAT_FIELDS['browsecomp-vl']})")
    if not answers:
        raise ctx.fail("field 'answers' is empty")
    image_field = "image_path" if "image_path" in record else "image"
    image = image_source(record.get(image_field), ctx, image_field)
    url = image.value if image is not None and image.kind == "url" else None
    return BenchmarkRow(ctx.where, row_id(record, ("id",), ctx), question, answers[0], aliases=answers[1:],
                        image=image, group=level_from(ctx.path, url),
                        meta=_extra_fields(record, {"question", "answers", "answer", "image_path", "image", "id"}))


def parse_mmsearch(record: dict, ctx: ParseContext) -> BenchmarkRow:
    question = text_field(record, "query", ctx)
    answer = text_field(record, "gt_answer", ctx)
    aliases = answer_list(record.get("alternative_gt_answers"), "alternative_gt_answers", ctx)
    image = image_source(record.get("query_image"), ctx, "query_image")
    group = str(record.get("area") or "mmsearch")
    return BenchmarkRow(ctx.where, row_id(record, ("sample_id",), ctx), question, answer,
                        aliases=[a for a in aliases if a != answer], image=image, group=group,
                        meta=_extra_fields(record, {"query", "gt_answer", "alternative_gt_answers", "query_image",
                                                    "image_search_result", "sample_id"}))


def parse_simplevqa(record: dict, ctx: ParseContext) -> BenchmarkRow:
    question = text_field(record, "question", ctx)
    answer = text_field(record, "answer", ctx)
    image_field = next((k for k in ("image", "image_path", "image_url") if k in record), None)
    if image_field is None:
        raise ctx.fail(f"missing field 'image' ({FORMAT_FIELDS['simplevqa']})")
    image = image_source(record[image_field], ctx, image_field)
    group = str(record.get("vqa_category") or record.get("language") or "simplevqa")
    return BenchmarkRow(ctx.where, row_id(record, ("data_id", "id"), ctx), question, answer, image=image, group=group,
                        meta=_extra_fields(record, {"question", "answer", image_field, "data_id"}))


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
    return BenchmarkRow(ctx.where, str(task.id), task.question, str(task.answer), aliases=list(task.aliases),
                        image=image, group=task.difficulty, task=task)


PARSERS: dict[str, Callable[[dict, ParseContext], BenchmarkRow]] = {
    "mmsearchexam": parse_mmsearchexam,
    "browsecomp-vl": parse_browsecomp_vl,
    "mmsearch": parse_mmsearch,
    "simplevqa": parse_simplevqa,
    "task": parse_task,
}

FORMAT_FIELDS = {
    "mmsearchexam": "MM-SearchExam rows have question, image_path, answer",
    "browsecomp-vl": "BrowseComp-VL rows have question, image_path, answers",
    "mmsearch": "MMSearch rows have query, query_image, gt_answer",
    "simplevqa": "SimpleVQA rows have question, image, answer",
    "task": "task records have id, question, answer",
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
    if {"query", "gt_answer"} <= keys:
        return "mmsearch"
    if "question" in keys and "answers" in keys:
        return "browsecomp-vl"
    if {"question", "answer"} <= keys and ("data_id" in keys or ("image" in keys and "language" in keys)):
        return "simplevqa"
    if {"id", "question", "answer"} <= keys and keys & {"split", "difficulty", "rounds", "seed_id"}:
        return "task"
    if {"question", "answer"} <= keys and "image_path" in keys:
        return "mmsearchexam"
    return None


# ---------------------------------------------------------------------------------------------
# Reading files


#: File types a benchmark may come in ("" : no extension, read as JSONL).
BENCHMARK_SUFFIXES = ("", ".jsonl", ".ndjson", ".json", ".parquet")


def iter_records(path: Path) -> Iterator[tuple[str, dict]]:
    """``(where, record)`` for each row of a JSONL, JSON-array or Parquet file."""
    if not path.exists():
        raise InputError(f"{path}: file not found")
    if path.is_dir():
        raise InputError(f"{path}: is a folder; give a benchmark file (.jsonl, .json or .parquet)")
    if path.suffix.lower() not in BENCHMARK_SUFFIXES:
        raise InputError(f"{path}: unsupported file type {path.suffix!r}; give a .jsonl, .json or .parquet file "
                         "(a file without an extension is read as JSONL)")
    if path.suffix.lower() == ".parquet":
        yield from _parquet_records(path)
        return
    text = read_text(path, "utf-8-sig")
    if path.suffix.lower() == ".json" and text.lstrip().startswith(("[", "{")):
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
                    raise InputError(f"{path}: item {i}: expected a JSON object, got {type(item).__name__}")
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
    """``(format, rows)``: every row of a benchmark file, checked; nothing is downloaded or written.

    The format is detected from the first row unless given; every row is then parsed with it,
    so a row of another shape is reported with its line and the field it lacks.
    """
    path = Path(path)
    fmt = normalise_format(format)
    rows: list[BenchmarkRow] = []
    seen: dict[str, str] = {}
    for index, (where, record) in enumerate(iter_records(path)):
        if fmt is None:
            fmt = detect_format(record)
            if fmt is None:
                raise InputError(
                    f"{where}: cannot tell the benchmark format from the fields {sorted(record)[:12]}; "
                    f"pass --format ({', '.join(FORMATS)})")
        row = PARSERS[fmt](record, ParseContext(path, fmt, index, where))
        if row.id in seen:
            raise InputError(f"{where}: id {row.id!r} was already used at {seen[row.id]}")
        seen[row.id] = where
        rows.append(row)
    if not rows:
        raise InputError(f"{path}: no rows")
    return fmt, rows


def select_rows(rows: list[BenchmarkRow], *, images_only: bool = False, language: str | None = None,
                sample: int | None = None, seed: int = 0, limit: int | None = None) -> list[BenchmarkRow]:
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
    with_images = [r for r in rows if r.image is not None]
    return {
        "n_rows": len(rows),
        "n_with_images": len(with_images),
        "n_distinct_images": len({r.image.key for r in with_images}),
        "image_kinds": dict(sorted(Counter(r.image.kind for r in with_images).items())),
        "n_distinct_answers": len({r.answer for r in rows}),
        "groups": dict(sorted(Counter(r.group for r in rows).items())),
        "max_question_chars": max((len(r.question) for r in rows), default=0),
    }


def check_benchmark(path: str | os.PathLike, format: str | None = None, **selection: Any) -> dict:
    """Validate a benchmark file without downloading or writing anything; its numbers.

    ``selection`` takes ``select_rows``'s options (``images_only``, ``language``, ``sample``,
    ``seed``, ``limit``); the counts are of the selected rows.
    """
    fmt, rows = read_rows(path, format)
    rows = select_rows(rows, **selection)
    return {"path": str(path), "format": fmt, **summarise_rows(rows)}


# ---------------------------------------------------------------------------------------------
# The image cache


def content_name(data: bytes, fmt: str | None) -> str:
    """``<first 24 hex of sha256>.<ext>``: the same picture always gets the same name.

    >>> content_name(b"abc", "PNG")
    'ba7816bf8f01cfea414140de.png'
    """
    return sha256_hex(data)[:24] + IMAGE_EXTENSIONS.get(fmt or "", ".img")


class ImageCache:
    """A folder of benchmark images, content-addressed, shared by runs and threads.

    URLs are downloaded with ``client`` (an ``HttpClient``; by default one with the SSRF guard,
    created on first use), or with ``fetch(url) -> bytes`` when given (tests).
    """

    def __init__(self, folder: str | os.PathLike, *, fetch: Callable[[str], bytes] | None = None, client: Any = None):
        self.folder = Path(folder)
        self._fetch = fetch
        self._client = client
        self._lock = threading.Lock()
        # The folder is made by the first image stored (``store``, the index's first append), not
        # here: a benchmark that fails to load, or needs no cached image, leaves no empty folder.
        self._index = JsonlLog(self.folder / "urls.jsonl", key="url")
        self._by_url = {r["url"]: r["file"] for r in self._index.records() if "url" in r and "file" in r}
        self.stats = {"downloaded": 0, "reused": 0, "stored": 0}

    def store(self, data: bytes) -> Path:
        """Keep ``data`` (image bytes) under its content name; returns the file."""
        fmt = image_format(data)
        if fmt is None:
            raise InputError("the data is not a readable image")
        path = self.folder / content_name(data, fmt)
        if not path.exists():
            atomic_write_bytes(path, data)
            self.stats["stored"] += 1
        return path

    def fetch_url(self, url: str) -> Path:
        """The cached file of an image URL, downloading it the first time."""
        with self._lock:
            known = self._by_url.get(url)
        if known and (self.folder / known).is_file():
            self.stats["reused"] += 1
            return self.folder / known
        data = self._download(url)
        if image_format(data) is None:
            raise InputError(f"{url}: the download is not a readable image ({len(data)} bytes)")
        path = self.store(data)
        with self._lock:
            self._index.append({"url": url, "file": path.name, "sha256": sha256_hex(data)})
            self._by_url[url] = path.name
        self.stats["downloaded"] += 1
        return path

    def _download(self, url: str) -> bytes:
        if self._fetch is not None:
            return self._fetch(url)
        from vsearcher_lite.net.http import HttpError

        with self._lock:
            if self._client is None:
                from vsearcher_lite.net.guard import UrlGuard
                from vsearcher_lite.net.http import HttpClient

                self._client = HttpClient("benchmark images", guard=UrlGuard(), timeout=30.0, max_retries=3,
                                          max_concurrency=4)
            client = self._client
        try:
            response = client.get(url, max_bytes=MAX_IMAGE_BYTES)
        except HttpError as exc:
            raise InputError(f"could not download the image: {exc}") from None
        if response.extensions.get("truncated"):
            raise InputError(f"{url}: the image is larger than {MAX_IMAGE_BYTES // 1_000_000} MB")
        return response.content

    def local_path(self, source: ImageSource) -> Path:
        """A local file for any image source (bytes are stored, URLs downloaded, paths kept)."""
        if source.kind == "path":
            return Path(source.value)
        if source.kind == "bytes":
            return self.store(source.data or b"")
        return self.fetch_url(source.value)


# ---------------------------------------------------------------------------------------------
# Rows -> tasks


def row_to_task(row: BenchmarkRow, fmt: str, image_path: str | None) -> Task:
    """The ``Task`` of a row (the project's own records are kept whole, with the image resolved)."""
    if row.task is not None:
        task = Task.from_dict(row.task.to_dict())
        task.image_path = image_path
        task.extra = {**task.extra, "source_line": row.where}
        return task
    extra = {"benchmark": fmt, "source_line": row.where, **row.meta}
    if row.image is not None and row.image.kind == "url":
        extra["image_url"] = row.image.value
    return Task(id=row.id, question=row.question, answer=row.answer, image_path=image_path, difficulty=row.group,
                split=fmt, aliases=list(row.aliases), world="live", extra=extra)


def resolve_images(rows: list[BenchmarkRow], cache: ImageCache | None, *, mode: str = "download",
                   skip_bad_images: bool = False, concurrency: int = 4,
                   progress: bool = False) -> tuple[dict[str, str | None], list[str]]:
    """``({row id: image path or URL}, problems)``.

    ``mode="download"`` gives every image a local file (URLs downloaded into the cache);
    ``mode="url"`` keeps URLs as they are (for tools that need a public URL, such as Serper
    Lens) and only stores embedded bytes. A failing image is an ``InputError`` naming the row,
    or, with ``skip_bad_images``, a problem line and the row is left out.
    """
    if mode not in IMAGE_MODES:
        raise InputError(f"unknown image mode {mode!r}; choose one of {', '.join(IMAGE_MODES)}")
    needs_cache = any(r.image is not None and (r.image.kind == "bytes" or (mode == "download" and r.image.kind == "url"))
                      for r in rows)
    if needs_cache and cache is None:
        raise InputError("these rows need an image cache folder (embedded or downloaded images)")

    def local(source: ImageSource) -> str:
        return str(cache.local_path(source))

    resolved: dict[str, str | None] = {}
    problems: list[str] = []
    from tqdm.auto import tqdm

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        # One job per distinct image: rows that share a picture (MM-SearchExam reuses some) share its download.
        jobs = {}
        for row in rows:
            img = row.image
            if img is not None and img.kind != "path" and not (img.kind == "url" and mode == "url"):
                if img.key not in jobs:
                    jobs[img.key] = pool.submit(local, img)
        for row in tqdm(rows, desc="images", disable=not progress, leave=False):
            img = row.image
            if img is None:
                resolved[row.id] = None
            elif img.key not in jobs:
                resolved[row.id] = img.value
            else:
                try:
                    resolved[row.id] = jobs[img.key].result()
                except InputError as exc:
                    problem = InputError(f"{row.where}: {exc}")
                    if not skip_bad_images:
                        for job in jobs.values():
                            job.cancel()
                        raise problem from None
                    problems.append(str(problem))
    return resolved, problems


def load_benchmark(
    path: str | os.PathLike,
    format: str | None = None,
    *,
    image_dir: str | os.PathLike | None = None,
    image_mode: str = "download",
    fetch: Callable[[str], bytes] | None = None,
    client: Any = None,
    skip_bad_images: bool = False,
    images_only: bool = False,
    language: str | None = None,
    sample: int | None = None,
    seed: int = 0,
    limit: int | None = None,
    progress: bool = False,
) -> list[Task]:
    """The tasks of a benchmark file, images resolved (see the module docstring).

    ``image_dir`` is the cache folder (needed when images are embedded or downloaded). ``client``
    replaces the default guarded ``HttpClient``, ``fetch(url) -> bytes`` the whole download (tests).
    With ``skip_bad_images`` a row whose image fails is left out; ``load_benchmark_report`` also
    says which rows were left out and why.
    """
    return load_benchmark_report(
        path, format, image_dir=image_dir, image_mode=image_mode, fetch=fetch, client=client,
        skip_bad_images=skip_bad_images,
        images_only=images_only, language=language, sample=sample, seed=seed, limit=limit, progress=progress,
    )["tasks"]


def load_benchmark_report(
    path: str | os.PathLike,
    format: str | None = None,
    *,
    image_dir: str | os.PathLike | None = None,
    image_mode: str = "download",
    fetch: Callable[[str], bytes] | None = None,
    client: Any = None,
    skip_bad_images: bool = False,
    images_only: bool = False,
    language: str | None = None,
    sample: int | None = None,
    seed: int = 0,
    limit: int | None = None,
    progress: bool = False,
) -> dict:
    """``{"format", "tasks", "skipped": [problem lines], "images": cache stats}`` for a benchmark file."""
    fmt, rows = read_rows(path, format)
    rows = select_rows(rows, images_only=images_only, language=language, sample=sample, seed=seed, limit=limit)
    cache = ImageCache(image_dir, fetch=fetch, client=client) if image_dir is not None else None
    resolved, problems = resolve_images(rows, cache, mode=image_mode, skip_bad_images=skip_bad_images,
                                        progress=progress)
    tasks = [row_to_task(r, fmt, resolved[r.id]) for r in rows if r.id in resolved]
    return {"format": fmt, "tasks": tasks, "skipped": problems, "images": dict(cache.stats) if cache else {}}


# ---------------------------------------------------------------------------------------------
# The run's own exam and held-out tasks


def sandbox_eval_files(run_dir: str | os.PathLike) -> list[Path]:
    """The default benchmark of a run: its exam and its held-out tasks (written by ``filter``)."""
    out = Path(run_dir) / "filter"
    return [out / "exam.jsonl", out / "heldout.jsonl"]


def ensure_sandbox_eval_tasks(run_dir: str | os.PathLike, *, profile: str = "cpu", seed: int = 0,
                              world: str = "sandbox", progress: bool = True) -> list[Task]:
    """The run's exam + held-out tasks, built with the synthesis defaults when they are missing.

    Image URLs (live runs) are kept as URLs; ``--benchmark`` files are where downloading applies.
    """
    files = sandbox_eval_files(run_dir)
    if not all(f.exists() for f in files):
        from vsearcher_lite.synthesis.filters import run_filter
        from vsearcher_lite.synthesis.inject import InjectConfig

        run_filter(run_dir, world=world,
                   inject_config=InjectConfig.for_profile(profile, seed=seed, progress=progress))
    tasks: list[Task] = []
    for f in files:
        if f.exists() and f.read_text(encoding="utf-8").strip():
            # Live tasks keep their image URLs (live image search wants a public URL); sandbox ones are files.
            tasks += load_benchmark(f, "task", image_dir=Path(run_dir) / IMAGE_CACHE_DIR, image_mode="url")
    if not tasks:
        raise InputError(f"{files[0].parent}: no exam or held-out tasks; rerun `vsearcher-lite filter` with --n-exam/--n-heldout")
    return tasks
