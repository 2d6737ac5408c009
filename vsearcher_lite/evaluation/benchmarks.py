"""Benchmark files as ``Task`` records: MM-SearchExam, MMSearch, BrowseComp-VL, SimpleVQA, our own.

``load_benchmark(path, format=None, ...) -> list[Task]`` reads a file, checks every row
(``benchmark_formats``: one parser per format, with the fields as their authors publish them)
and brings its images into a local cache; ``check_benchmark(path)`` only checks and counts. The
formats: ``mmsearchexam`` (the VSearcher release, 283 rows); ``browsecomp-vl`` (WebWatcher's
``bc_vl_level{1,2}.jsonl``; the level comes from the file name or image URL); ``mmsearch``
(``CaraJ/MMSearch`` end2end; the paper keeps the 171 rows with an image: ``images_only=True``);
``simplevqa`` (``m-a-p/SimpleVQA``; the paper samples 180 English ones: ``language="EN"``,
``sample=180``); ``task`` (this project's ``Task`` JSONL, e.g. ``RUN_DIR/filter/exam.jsonl``).

An image field may hold a URL, a local path, a ``data:`` URL or base64, bytes, or a
``{"bytes", "path"}`` struct. The cache stores each image once under a content name; URLs are
downloaded once (remembered in ``urls.jsonl``) through ``HttpClient`` with the SSRF guard.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from vsearcher_lite.agent.task import Task
from vsearcher_lite.evaluation.benchmark_formats import (
    BenchmarkRow,
    ImageSource,
    check_benchmark,
    decode_base64_image,
    detect_format,
    image_format,
    level_from,
    read_rows,
    select_rows,
    sha256_hex,
)
from vsearcher_lite.runio import InputError, JsonlLog, atomic_write_bytes

__all__ = ["ImageCache", "check_benchmark", "content_name", "decode_base64_image", "detect_format",
           "ensure_sandbox_eval_tasks", "level_from", "load_benchmark", "load_benchmark_report",
           "read_rows", "sandbox_eval_files"]

IMAGE_MODES = ("download", "url")
IMAGE_CACHE_DIR = Path("eval") / "images"
MAX_IMAGE_BYTES = 25_000_000
IMAGE_EXTENSIONS = {"JPEG": ".jpg", "PNG": ".png", "GIF": ".gif", "WEBP": ".webp", "BMP": ".bmp",
                    "TIFF": ".tif"}


def content_name(data: bytes, fmt: str | None) -> str:
    """``<first 24 hex of sha256>.<ext>``: the same picture always gets the same name.

    >>> content_name(b"abc", "PNG")
    'ba7816bf8f01cfea414140de.png'
    """
    return sha256_hex(data)[:24] + IMAGE_EXTENSIONS.get(fmt or "", ".img")


class ImageCache:
    """A folder of benchmark images, content-addressed, shared by runs and threads. URLs are
    downloaded with ``client`` (default: a guarded ``HttpClient``) or ``fetch(url) -> bytes``."""

    def __init__(self, folder: str | os.PathLike, *, fetch: Callable[[str], bytes] | None = None,
                 client: Any = None):
        self.folder = Path(folder)
        self._fetch = fetch
        self._client = client
        self._lock = threading.Lock()
        # The folder is made by the first image stored, not here: a benchmark that fails to load,
        # or needs no cached image, leaves no empty folder.
        self._index = JsonlLog(self.folder / "urls.jsonl", key="url")
        records = self._index.records()
        self._by_url = {r["url"]: r["file"] for r in records if "url" in r and "file" in r}
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

                self._client = HttpClient("benchmark images", guard=UrlGuard(), timeout=30.0,
                                          max_retries=3, max_concurrency=4)
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
    """The ``Task`` of a row (the project's own records kept whole, with the image resolved)."""
    if row.task is not None:
        task = Task.from_dict(row.task.to_dict())
        task.image_path = image_path
        task.extra = {**task.extra, "source_line": row.where}
        return task
    extra = {"benchmark": fmt, "source_line": row.where, **row.meta}
    if row.image is not None and row.image.kind == "url":
        extra["image_url"] = row.image.value
    return Task(id=row.id, question=row.question, answer=row.answer, image_path=image_path,
                difficulty=row.group, split=fmt, aliases=list(row.aliases), world="live",
                extra=extra)


def resolve_images(rows: list[BenchmarkRow], cache: ImageCache | None, *, mode: str = "download",
                   skip_bad_images: bool = False, concurrency: int = 4,
                   progress: bool = False) -> tuple[dict[str, str | None], list[str]]:
    """``({row id: image path or URL}, problems)``.

    ``mode="download"`` gives every image a local file; ``mode="url"`` keeps URLs (for tools that
    need a public one, such as Serper Lens) and only stores embedded bytes. A failing image is an
    ``InputError`` naming the row or, with ``skip_bad_images``, a problem line (row left out).
    """
    if mode not in IMAGE_MODES:
        raise InputError(f"unknown image mode {mode!r}; choose one of {', '.join(IMAGE_MODES)}")

    def cached(img: ImageSource | None) -> bool:  # does this image go through the cache?
        return img is not None and (img.kind == "bytes" or img.kind == "url" and mode == "download")

    if cache is None and any(cached(r.image) for r in rows):
        raise InputError("these rows need an image cache folder (embedded or downloaded images)")
    resolved: dict[str, str | None] = {}
    problems: list[str] = []
    from vsearcher_lite.runtime import progress_bar

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        # One job per distinct image: rows that share a picture share its download.
        jobs = {}
        for row in rows:
            if cached(row.image) and row.image.key not in jobs:
                jobs[row.image.key] = pool.submit(lambda img: str(cache.local_path(img)), row.image)
        for row in progress_bar("images", items=rows, enabled=progress):
            img = row.image
            if img is None or img.key not in jobs:
                resolved[row.id] = None if img is None else img.value
                continue
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


def load_benchmark(path: str | os.PathLike, format: str | None = None,
                   **options: Any) -> list[Task]:
    """The tasks of a benchmark file, images resolved: ``load_benchmark_report(...)["tasks"]``."""
    return load_benchmark_report(path, format, **options)["tasks"]


def load_benchmark_report(
    path: str | os.PathLike,
    format: str | None = None,
    *,
    image_dir: str | os.PathLike | None = None,
    image_mode: str = "download",
    fetch: Callable[[str], bytes] | None = None,
    client: Any = None,
    skip_bad_images: bool = False,
    progress: bool = False,
    **selection: Any,
) -> dict:
    """``{"format", "tasks", "skipped": [problem lines], "images": cache stats}`` for a file.

    ``image_dir`` is the cache folder (needed when images are embedded or downloaded); ``client``
    replaces the guarded ``HttpClient``, ``fetch(url) -> bytes`` the whole download (tests);
    ``selection`` takes ``select_rows``'s options.
    """
    fmt, rows = read_rows(path, format)
    rows = select_rows(rows, **selection)
    cache = ImageCache(image_dir, fetch=fetch, client=client) if image_dir is not None else None
    resolved, problems = resolve_images(rows, cache, mode=image_mode,
                                        skip_bad_images=skip_bad_images, progress=progress)
    tasks = [row_to_task(r, fmt, resolved[r.id]) for r in rows if r.id in resolved]
    return {"format": fmt, "tasks": tasks, "skipped": problems,
            "images": dict(cache.stats) if cache else {}}


# ---------------------------------------------------------------------------------------------
# The run's own exam and held-out tasks


def sandbox_eval_files(run_dir: str | os.PathLike) -> list[Path]:
    """The default benchmark of a run: its exam and its held-out tasks (written by ``filter``)."""
    out = Path(run_dir) / "filter"
    return [out / "exam.jsonl", out / "heldout.jsonl"]


def ensure_sandbox_eval_tasks(run_dir: str | os.PathLike, *, profile: str = "cpu", seed: int = 0,
                              world: str = "sandbox", progress: bool = True) -> list[Task]:
    """The run's exam + held-out tasks, built with the synthesis defaults when they are missing.
    Image URLs (live runs) stay URLs: live image search wants a public one."""
    files = sandbox_eval_files(run_dir)
    if not all(f.exists() for f in files):
        from vsearcher_lite.synthesis.filters import run_filter
        from vsearcher_lite.synthesis.inject import InjectConfig

        run_filter(run_dir, world=world,
                   inject_config=InjectConfig.for_profile(profile, seed=seed, progress=progress))
    tasks: list[Task] = []
    for f in files:
        if f.exists() and f.read_text(encoding="utf-8").strip():
            cache = Path(run_dir) / IMAGE_CACHE_DIR
            tasks += load_benchmark(f, "task", image_dir=cache, image_mode="url")
    if not tasks:
        raise InputError(f"{files[0].parent}: no exam or held-out tasks; "
                         "rerun `vsearcher-lite filter` with --n-exam/--n-heldout")
    return tasks
