"""The run manifest: ``RUN_DIR/run_manifest.json`` says how each stage of a run was produced.

Each ``stages[<stage>]`` entry holds the stage's config (JSON-safe, secrets masked), its seeds,
the versions of the packages a result depends on, the git commit and dirty flag, the command,
the wall time and the finish time. A stage run twice keeps its latest entry and counts its runs.
The file is updated under a lock, since a notebook and a CLI run may share a run dir. (Not
``manifest.json``: ``world.store.world_dir`` takes a folder holding one for a world folder.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import json
import os
import platform
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from vsearcher_lite.redaction import MASK, redact
from vsearcher_lite.runio import InputError, RunDir, atomic_write_json, read_json

MANIFEST_FILE = "run_manifest.json"
MANIFEST_VERSION = 1

#: Libraries whose versions can change a result; missing ones are recorded as ``None``.
TRACKED_PACKAGES = ("vsearcher-lite", "torch", "transformers", "tokenizers", "trl", "peft",
                    "accelerate", "datasets", "safetensors", "bitsandbytes", "numpy", "pillow",
                    "httpx", "papermill")

# Setting names whose values are credentials, whatever their value looks like.
_SECRET_NAME = re.compile(
    r"(?i)(api[_-]?key|secret|password|passwd|token|authorization|credential|cookie)")
# Setting names that hold a random seed.
_SEED_NAME = re.compile(r"(?i)^(seed|.*_seed|seeds)$")

LOCK_TIMEOUT_S = 60.0
STALE_LOCK_S = 300.0  # a lock file this old (no fcntl) was left by a crashed writer
_thread_lock = threading.Lock()


# ---------------------------------------------------------------------------------------------
# What goes in


def jsonable(value: Any) -> Any:
    """A JSON-safe copy: dataclasses and mappings become dicts, paths and unknown objects strings.

    >>> from pathlib import PurePosixPath
    >>> jsonable({"out": PurePosixPath("runs/a"), "sizes": (1, 2), 3: None})
    {'out': 'runs/a', 'sizes': [1, 2], '3': None}
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [jsonable(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else str(value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)


def scrub_secrets(value: Any) -> Any:
    """``value`` (JSON-safe) with credentials masked.

    >>> scrub_secrets({"api_key": "abc123456", "url": "https://x.test/s?key=abc&q=1", "n": 3})
    {'api_key': '***', 'url': 'https://x.test/s?key=***&q=1', 'n': 3}
    """
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if _SECRET_NAME.search(str(key)) and isinstance(item, str) and item:
                out[key] = MASK
            else:
                out[key] = scrub_secrets(item)
        return out
    if isinstance(value, list):
        return [scrub_secrets(v) for v in value]
    if isinstance(value, str):
        return redact(value)
    return value


def find_seeds(config: Any, prefix: str = "") -> dict[str, Any]:
    """Every seed-like setting of a (nested) config, keyed by its dotted path.

    >>> find_seeds({"seed": 0, "world": {"seed": 7, "size": 10}, "sampling_seed": 3})
    {'seed': 0, 'world.seed': 7, 'sampling_seed': 3}
    """
    found: dict[str, Any] = {}
    if isinstance(config, dict):
        for key, value in config.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            seed_like = value is None or isinstance(value, (int, str, list))
            if _SEED_NAME.match(str(key)) and seed_like:
                found[path] = value
            elif isinstance(value, (dict, list)):
                found.update(find_seeds(value, path))
    elif isinstance(config, list):
        for i, value in enumerate(config):
            found.update(find_seeds(value, f"{prefix}[{i}]"))
    return found


def package_versions(names: tuple[str, ...] = TRACKED_PACKAGES) -> dict[str, str | None]:
    """Installed versions of ``names`` (``None`` when not installed), plus Python's."""
    from importlib.metadata import PackageNotFoundError, version

    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    return versions


def source_root() -> Path:
    """The folder the package runs from (the repository root of a source checkout)."""
    return Path(__file__).resolve().parents[1]


def git_state(path: str | os.PathLike | None = None, *, timeout: float = 5.0) -> dict[str, Any]:
    """``{"commit": sha, "dirty": bool}`` of the checkout at ``path``; both ``None`` without a
    checkout or git, or when git is slow: a manifest must never stop a run."""
    where = str(path if path is not None else source_root())

    def run(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", where, *args], capture_output=True, text=True,
                                  timeout=timeout)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout if done.returncode == 0 else None

    commit = run("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    status = run("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit.strip(), "dirty": None if status is None else bool(status.strip())}


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


# ---------------------------------------------------------------------------------------------
# Writing under a lock


@contextlib.contextmanager
def file_lock(path: str | os.PathLike, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold an exclusive lock on the lock file ``path`` for the ``with`` block: ``fcntl.flock``
    (released by the OS if the holder crashes), elsewhere a file created exclusively and broken
    when older than ``STALE_LOCK_S``. The lock file is removed on release."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        fcntl = None
    if fcntl is not None:
        while True:
            fh = open(path, "a+b")
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fh.close()
                if time.monotonic() > deadline:
                    message = f"{path}: could not take the lock in {timeout:g} s"
                    raise TimeoutError(message) from None
                time.sleep(0.01)
                continue
            try:
                same = os.fstat(fh.fileno()).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            fh.close()  # the holder before us removed this file: lock the one now at the path
        try:
            yield
        finally:
            # Removed while held: a waiter that opened it sees it is gone and opens afresh.
            path.unlink(missing_ok=True)
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
            fh.close()
        return
    while True:  # pragma: no cover - Windows
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            os.close(fd)
            break
        except FileExistsError:
            try:
                if time.time() - path.stat().st_mtime > STALE_LOCK_S:
                    path.unlink(missing_ok=True)
                    continue
            except FileNotFoundError:
                continue
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path}: could not take the lock in {timeout:g} s") from None
            time.sleep(0.01)
    try:  # pragma: no cover - Windows
        yield
    finally:
        path.unlink(missing_ok=True)


def update_json_file(path: str | os.PathLike, update: Callable[[dict], dict | None], *,
                     lock_timeout: float = LOCK_TIMEOUT_S) -> dict:
    """Apply ``update`` to a JSON object file (``{}`` if missing) under its lock; returns what was
    written. A file that is not a JSON object is an ``InputError``, never overwritten."""
    path = Path(path)
    with _thread_lock, file_lock(path.with_name(path.name + ".lock"), lock_timeout):
        data: dict = {}
        if path.exists():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}); "
                                 "fix or remove it and rerun") from None
            if not isinstance(data, dict):
                raise InputError(f"{path}: expected a JSON object, got {type(data).__name__}")
        result = update(data)
        if result is not None:
            data = result
        atomic_write_json(path, data)
        return data


# ---------------------------------------------------------------------------------------------
# The manifest


def manifest_path(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / MANIFEST_FILE


def stage_entry(config: dict, seconds: float, *, seeds: dict | None = None,
                extra: dict | None = None) -> dict:
    """The manifest record of one stage run."""
    clean = scrub_secrets(jsonable(config or {}))
    found = find_seeds(clean)
    found.update(jsonable(seeds or {}))
    command = (redact(" ".join([Path(sys.argv[0]).name, *sys.argv[1:]]))
               if sys.argv and sys.argv[0] else None)
    entry = {"config": clean, "seeds": found, "seconds": round(float(seconds), 3),
             "finished_at": utc_now(), "packages": package_versions(),
             "platform": platform.platform(terse=True), "git": git_state(), "command": command}
    if extra:
        entry.update(scrub_secrets(jsonable(extra)))
    return entry


def write_manifest(run_dir: str | os.PathLike, stage: str, config: dict, seconds: float, *,
                   seeds: dict | None = None, extra: dict | None = None) -> dict:
    """Record one stage in the run's manifest; returns its entry."""
    if not stage or not str(stage).strip():
        raise ValueError("write_manifest needs a stage name")
    entry = RunDir(run_dir).relative(stage_entry(config, seconds, seeds=seeds, extra=extra))

    def merge(data: dict) -> None:
        data.setdefault("manifest_version", MANIFEST_VERSION)
        data.setdefault("created_at", entry["finished_at"])
        data["updated_at"] = entry["finished_at"]
        stages = data.setdefault("stages", {})
        previous = stages.get(stage) or {}
        entry["runs"] = int(previous.get("runs", 0)) + 1
        stages[stage] = entry

    update_json_file(manifest_path(run_dir), merge)
    return entry


def read_manifest(run_dir: str | os.PathLike) -> dict:
    """The run's manifest (``{}`` when no stage has written one yet)."""
    path = manifest_path(run_dir)
    return read_json(path) if path.exists() else {}


@contextlib.contextmanager
def recorded_stage(run_dir: str | os.PathLike, stage: str, config: dict,
                   **kwargs: Any) -> Iterator[None]:
    """Time the ``with`` block and ``write_manifest`` it if it finishes without an error.

    >>> import tempfile
    >>> run = tempfile.mkdtemp()
    >>> with recorded_stage(run, "demo", {"seed": 3}):
    ...     pass
    >>> read_manifest(run)["stages"]["demo"]["seeds"]
    {'seed': 3}
    """
    start = time.perf_counter()
    yield
    write_manifest(run_dir, stage, config, time.perf_counter() - start, **kwargs)
