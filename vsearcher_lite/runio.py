"""Files every stage shares: the run directory, atomic writes, resumable JSONL, metrics.

Nothing half-written is ever left behind (writes go to a temporary file renamed into place),
and a long loop can be stopped and rerun without redoing what is done (``JsonlLog``). A run's
files store paths inside the run folder relative to it, so the folder can be copied or moved.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence


class InputError(ValueError):
    """Bad input from a user (a missing file, a malformed line, an unknown name): the CLI prints
    its message on one line and exits with status 2, without a traceback."""


def csv_text(rows: Iterable[dict], fields: Sequence[str]) -> str:
    """``rows`` as CSV under a header of ``fields`` (other keys left out, missing cells empty).

    >>> csv_text([{"step": 1, "loss": 2.5, "note": "x"}, {"step": 2}], ["step", "loss"])
    'step,loss\\n1,2.5\\n2,\\n'
    """
    buf = io.StringIO()
    writer = csv.DictWriter(buf, list(fields), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def mean(values: Iterable[float | None], digits: int = 4) -> float | None:
    """The mean of the values that are not None, rounded; None when there are none.

    >>> mean([1, 2, None, 4]), mean([], 2), mean([2 / 3], 3)
    (2.3333, None, 0.667)
    """
    kept = [float(v) for v in values if v is not None]
    return round(sum(kept) / len(kept), digits) if kept else None


def read_number_rows(path: str | os.PathLike) -> list[dict]:
    """The rows of a CSV file of numbers (a training log): every cell a float, an empty one None."""
    with Path(path).open(encoding="utf-8") as fh:
        return [{k: (float(v) if v not in ("", None) else None) for k, v in row.items()}
                for row in csv.DictReader(fh)]


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to a temporary file beside ``path`` and rename it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600 files; outputs are ordinary readable files
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def replace_dir(new: str | os.PathLike, target: str | os.PathLike) -> Path:
    """Move the finished folder ``new`` to ``target``; an existing ``target`` is renamed aside
    and deleted after the move, so a crash leaves the old folder or the new one, never a mix."""
    new, target = Path(new), Path(target)
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}-{time.time_ns()}")
        target.rename(old)
    new.rename(target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return target


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    text = json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False)
    return atomic_write_text(path, text + "\n")


def read_text(path: str | os.PathLike, encoding: str = "utf-8") -> str:
    """A text file's content, or an ``InputError`` naming the path: missing, a folder, or bytes
    that are not ``encoding`` (with the line and byte where decoding failed)."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: file not found")
    if path.is_dir():
        raise InputError(f"{path}: is a folder, not a file")
    data = path.read_bytes()
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        name = "UTF-8" if encoding.lower().startswith("utf-8") else encoding
        raise InputError(f"{path}:{line}: not {name} text (byte {exc.start}: "
                         f"{data[exc.start:exc.start + 1]!r})") from None


def text_lines(text: str) -> list[str]:
    """``text`` split after each newline (``\r\n`` read as ``\n``), as text-mode ``readlines``
    does: unlike ``str.splitlines`` it does not split inside a JSON string holding U+2028."""
    return io.StringIO(text, newline=None).readlines()


def read_json(path: str | os.PathLike) -> Any:
    path = Path(path)
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


def jsonl_records(
    lines: Iterable[str], source: str, *, strict: bool = True, tolerate_torn_tail: bool = False
) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` for each non-blank line of JSONL text; a malformed line raises
    ``InputError``, or is skipped with a warning if it is a torn tail or ``strict`` is False."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        torn = tolerate_torn_tail and not line.endswith("\n")
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            if torn or not strict:
                warnings.warn(f"{source}:{number}: skipping an incomplete or malformed line",
                              stacklevel=3)
                continue
            raise InputError(f"{source}:{number}: not valid JSON ({exc.msg}, "
                             f"column {exc.colno})") from None
        if not isinstance(obj, dict):
            if not strict:
                continue
            raise InputError(f"{source}:{number}: expected a JSON object, got {type(obj).__name__}")
        yield number, obj


def read_jsonl(path: str | os.PathLike, *, strict: bool = True) -> Iterator[dict]:
    """The JSON objects of a JSONL file; a torn last line (an interrupted append) is skipped."""
    for _, obj in read_jsonl_numbered(path, strict=strict):
        yield obj


def read_jsonl_numbered(path: str | os.PathLike, *, strict: bool = True,
                        tolerate_torn_tail: bool = True) -> Iterator[tuple[int, dict]]:
    """``read_jsonl`` with line numbers, for messages naming a record's line.
    ``tolerate_torn_tail=False``: a last line without its newline must parse too."""
    path = Path(path)
    lines = text_lines(read_text(path))
    yield from jsonl_records(lines, str(path), strict=strict, tolerate_torn_tail=tolerate_torn_tail)


def write_jsonl(path: str | os.PathLike, records: Iterable[dict]) -> Path:
    """Write a whole JSONL file atomically (for outputs that are not built incrementally)."""
    text = "".join(json.dumps(r, ensure_ascii=False, sort_keys=False) + "\n" for r in records)
    return atomic_write_text(path, text)


class JsonlLog:
    """Append-only JSONL keyed by ``key``: the backbone of every resumable loop. Its folder is
    made by the first ``append``, so opening a log leaves no empty folder behind.

    >>> import tempfile, os
    >>> log = JsonlLog(os.path.join(tempfile.mkdtemp(), "t.jsonl"))
    >>> log.append({"id": "a", "x": 1})
    >>> "a" in log, "b" in log
    (True, False)
    """

    def __init__(self, path: str | os.PathLike, key: str = "id"):
        self.path = Path(path)
        self.key = key
        self._done: set[str] = set()
        if self.path.exists():
            self._repair_tail()
            for rec in read_jsonl(self.path, strict=False):
                if key in rec:
                    self._done.add(str(rec[key]))

    def _repair_tail(self) -> None:
        # Drop a torn last line so the next append starts on a fresh line.
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            with self.path.open("r+b") as fh:
                fh.truncate(cut)

    def __contains__(self, key: object) -> bool:
        return str(key) in self._done

    def __len__(self) -> int:
        return len(self._done)

    def append(self, record: dict) -> None:
        if self.key not in record:
            raise ValueError(f"record has no {self.key!r} field")
        line = json.dumps(record, ensure_ascii=False) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
        self._done.add(str(record[self.key]))

    def records(self) -> list[dict]:
        if not self.path.exists():
            return []
        return list(read_jsonl(self.path, strict=False))


def check_same_settings(where: str | os.PathLike, earlier: dict, now: dict) -> None:
    """An ``InputError`` naming the first setting that differs: a resume never mixes two runs.

    >>> check_same_settings("run/sft", {"lr": 1e-3}, {"lr": 1e-3})
    >>> check_same_settings("run/sft", {"lr": 1e-3}, {"lr": 0.1})
    Traceback (most recent call last):
    ...
    vsearcher_lite.runio.InputError: run/sft holds an interrupted run with lr=0.001 (now 0.1): ...
    """
    changed = next((k for k in sorted(set(earlier) | set(now)) if earlier.get(k) != now.get(k)),
                   None)
    if changed:
        raise InputError(f"{where} holds an interrupted run with "
                         f"{changed}={earlier.get(changed)!r} (now {now.get(changed)!r}): rerun "
                         "with the same settings to resume it, or delete it")


def resume_identity(settings: dict, free: tuple[str, ...]) -> dict:
    """The saved settings an interrupted training run must share with its resume: all but
    ``free`` and the evaluation's (``eval``, or older runs' ``eval_*``)."""
    return {k: v for k, v in settings.items()
            if k not in free and k != "eval" and not k.startswith("eval_")}


FOLDER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def check_folder_name(name: Any, what: str, hint: str = "") -> str:
    """``name`` if it can name one folder inside a run; ``hint`` ends the error message.

    >>> check_folder_name("sft-v2", "--name")
    'sft-v2'
    """
    if not isinstance(name, str) or not FOLDER_NAME.match(name) or name in (".", ".."):
        raise InputError(f"{what} {name!r}: use letters, digits, '-', '_' and '.' only, starting "
                         f"with a letter or digit (it names one folder inside the run){hint}")
    return name


#: Fields of a run's records that hold a local image path (tasks, messages, exports, tool answers).
PATH_FIELDS = frozenset({"image_path", "source_image", "image", "images", "location"})


class RunDir:
    """The folder of one run, ``runs/<name>/``, one subfolder per stage. ``relative`` rewrites
    paths inside it before a record is written, ``resolve`` joins them back on read; other paths
    (the tiny base, a user's file, a URL, an older run's absolute path) are kept as given.

    >>> run = RunDir("/data/runs/a")
    >>> run.relative({"image_path": "/data/runs/a/inject-image/images/t1.jpg", "note": "/data/x"})
    {'image_path': 'inject-image/images/t1.jpg', 'note': '/data/x'}
    >>> run.relative("transformers:/data/runs/a/sft/checkpoint")
    'transformers:sft/checkpoint'
    >>> run.resolve({"images": ["world/images/I1.png", "https://x.test/a.jpg", "/old/b.png"]})
    {'images': ['/data/runs/a/world/images/I1.png', 'https://x.test/a.jpg', '/old/b.png']}
    """

    def __init__(self, root: str | os.PathLike = "runs/default"):
        self.root = Path(root)
        absolute = {str(self.root.absolute()), str(self.root.resolve())}
        self._names = absolute | ({str(self.root)} - {"", "."})

        def either(forms: set[str]) -> str:
            return "|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True))

        # A path under the folder, or (absolute only: a relative name may be a word of prose) the
        # folder itself; never inside another path or a longer folder name.
        self._inside = re.compile(rf"(?<![\w.~/-])(?:(?:{either(self._names)})/"
                                  rf"|(?:{either(absolute)})(?![\w.~/-]))")

    def __repr__(self) -> str:
        return f"RunDir({str(self.root)!r})"

    def stage(self, name: str, *, create: bool = True) -> Path:
        path = self.root / name
        if create:
            path.mkdir(parents=True, exist_ok=True)
        return path

    def require(self, name: str, hint: str) -> Path:
        """The folder of an earlier stage, or an ``InputError`` saying which command makes it."""
        path = self.root / name
        if not path.exists():
            raise InputError(f"{path} does not exist: run `{hint}` first")
        return path

    def relative(self, value: Any) -> Any:
        """``value`` (text or JSON-like) with paths inside the run folder made relative."""
        if isinstance(value, str):
            if value in self._names:
                return "."
            return self._inside.sub(lambda m: "" if m.group(0).endswith("/") else ".", value)
        if isinstance(value, dict):
            return {k: self.relative(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.relative(v) for v in value]
        return value

    def path(self, stored: str) -> str:
        """A stored path joined to the run folder; an absolute path, a URL or "" as it is."""
        if not stored or "://" in stored or stored.startswith("data:") or os.path.isabs(stored):
            return stored
        return str(self.root / stored) if stored != "." else str(self.root)

    def resolve(self, value: Any, field: str | None = None) -> Any:
        """A record read back with the values of its ``PATH_FIELDS`` resolved by ``path``."""
        if isinstance(value, dict):
            return {k: self.resolve(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self.resolve(v, field) for v in value]
        if isinstance(value, str) and field in PATH_FIELDS:
            return self.path(value)
        return value

    def write_metrics(self, stage: str, metrics: dict) -> Path:
        return atomic_write_json(self.stage(stage) / "metrics.json", self.relative(metrics))

    def read_metrics(self, stage: str) -> dict:
        return read_json(self.root / stage / "metrics.json")
