"""Moving a run folder: ``vsearcher-lite relocate --run-dir NEW``.

A run's files name their images by absolute path: task files (``image_path``), the SFT export
(``images``), evaluation results, and the tool cache's image-search answers (the matching
pictures). A run folder copied to another place (from a GPU machine to a laptop, from a tutor
to a class) therefore still points at the old place: it reads the original's images while
those exist and fails once they are gone.

``run_manifest.json`` records the folder a run was written in (``run_dir``). Stages compare it
with where the run is now (``check_not_moved``: the CLI before every command that reads a run,
and for notebooks the library's entry points: ``open_source``/``open_sandbox``,
``make_toolbox``, ``evaluate``, ``ensure_sandbox_eval_tasks``, ``generate_trajectories`` and the
SFT data loader) and stop with the command that fixes it. A run whose manifest records no
folder yet (written before it did, or by synthesis stages only) is checked from the image paths
of its task files: when they name a run folder that no longer exists, it is refused the same way.

``relocate`` rewrites every absolute path under the old folder into the new one in the run's
data files (``*.json``, ``*.jsonl``, ``*.csv``) and in its SQLite caches (requests and responses;
keys recomputed), then records the new folder. Cached sandbox image-search answers that name
their images relative to a working folder (written before the world's paths were made absolute)
are dropped: the sandbox recomputes them on the next call. Each file is replaced atomically and
only when it changes; an interrupted relocation is finished by running it again. Run it while no
stage is writing to the run. Executed notebooks and HTML reports are records of what ran and
are left as they are; symbolic links are not followed (a linked file belongs to another run).

``infer_old_root`` finds the old folder from the absolute paths in the run's files whose tail
exists here (``/old/runs/a/inject-image/images/x.jpg`` with ``NEW/inject-image/images/x.jpg``
present gives ``/old/runs/a``); ``--from OLD`` names it explicitly.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Callable, Iterator

from vsearcher_lite.runio import InputError, atomic_write_text

#: The run's data files that may name paths; notebooks and reports are left alone.
DATA_SUFFIXES = (".json", ".jsonl", ".csv")
#: Folders of a run that hold records of what ran, not data a stage reads.
SKIPPED_FOLDERS = ("notebooks",)
#: Files to look in first when inferring the old folder (they name images under the run).
INFER_FIRST = ("inject-image/tasks.jsonl", "filter/heldout.jsonl", "trajectories/export/sft_trl.jsonl")
#: How much of each of those files ``check_not_moved`` reads when the manifest records no folder.
CHECK_BYTES = 256 * 1024
_JSON_PATH = re.compile(r'"(/[^"\\\n]+)"')
#: A path starts the text or follows one of these (a quote, a separator, a spec's "transformers:")
#: and ends at one of these: so ``/a/run`` matches in ``"/a/run/x"`` but not in ``/b/a/run/x``,
#: ``/a/run2`` or ``/a/run old``.
_BEFORE = r"""(?<![^\s"',:;=(\[])"""
_AFTER = r"""(?=[/"'\\,;:)\]\n\r\t]|$)"""  # not a space: "/a/run old" may be a folder of its own


def _manifest(run_dir: Path) -> dict:
    from vsearcher_lite.evaluation.manifest import read_manifest

    return read_manifest(run_dir)


def _same_folder(a: Path, b: Path) -> bool:
    if a == b:
        return True
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def moved_from(run_dir: str | os.PathLike) -> Path | None:
    """The folder ``run_dir`` was written in, when the manifest records one that is not this
    folder; else ``None`` (not moved, or no folder recorded).

    >>> import tempfile, json, pathlib
    >>> run = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (run / "run_manifest.json").write_text(json.dumps({"run_dir": "/elsewhere/runs/a"}))
    >>> str(moved_from(run))
    '/elsewhere/runs/a'
    """
    return _elsewhere(_recorded_folder(Path(run_dir)), Path(run_dir))


def _elsewhere(recorded: str | None, run_dir: Path) -> Path | None:
    """``recorded`` as a folder, when it is one and not ``run_dir``."""
    if not recorded:
        return None
    old = Path(recorded)
    return None if _same_folder(old, run_dir.resolve()) else old


def check_not_moved(run_dir: str | os.PathLike) -> None:
    """An ``InputError`` with the fixing command when the run folder was moved or copied.

    The manifest's ``run_dir`` decides; without one, the first image paths of the task files do,
    and only when the folder they name is gone (a run that shares another run's task files, or
    a copy whose original still exists, is not refused then: nothing says which it is).
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return
    recorded = _recorded_folder(run_dir)
    old = _elsewhere(recorded, run_dir)
    if not recorded:
        found = infer_old_root(run_dir, votes_needed=10, files=INFER_FIRST, max_bytes=CHECK_BYTES)
        old = found if found is not None and not found.exists() else None
    if old is not None:
        here = run_dir.resolve()
        raise InputError(
            f"{run_dir}: this run was written in {old} and its files name paths there (images, checkpoints); "
            f"run `vsearcher-lite relocate --run-dir {here}` once to point them here")


def _recorded_folder(run_dir: Path) -> str | None:
    if not (run_dir / "run_manifest.json").is_file():
        return None
    return _manifest(run_dir).get("run_dir")


def _walk_files(run_dir: Path) -> list[Path]:
    """Every regular file under ``run_dir``, symbolic links (files or folders) not followed."""
    found = []
    for folder, dirs, files in os.walk(run_dir, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not Path(folder, d).is_symlink())
        found += [Path(folder, f) for f in sorted(files) if not Path(folder, f).is_symlink()]
    return found


def data_files(run_dir: Path) -> list[Path]:
    """The run's data files (``DATA_SUFFIXES``), its own manifest excepted, in a stable order."""
    found = []
    for path in _walk_files(run_dir):
        rel = path.relative_to(run_dir)
        if rel.parts[0] in SKIPPED_FOLDERS or rel == Path("run_manifest.json"):
            continue
        if path.suffix in DATA_SUFFIXES and not path.name.startswith("."):
            found.append(path)
    return found


def cache_files(run_dir: Path) -> list[Path]:
    """The run's SQLite caches (files with the ``calls`` table of ``cache.ToolCache``)."""
    return [p for p in _walk_files(run_dir) if p.suffix == ".sqlite"]


def _candidate_paths(run_dir: Path, files: tuple[str, ...] | None, max_bytes: int | None) -> Iterator[str]:
    paths = [run_dir / rel for rel in (INFER_FIRST if files is None else files) if (run_dir / rel).is_file()]
    if files is None:
        paths += [p for p in data_files(run_dir) if p not in paths]
    for path in paths:
        try:
            with path.open("rb") as fh:
                text = fh.read(max_bytes if max_bytes else -1).decode("utf-8", errors="ignore")
        except OSError:
            continue
        for match in _JSON_PATH.finditer(text):
            yield match.group(1)


def infer_old_root(run_dir: str | os.PathLike, votes_needed: int = 50, *, files: tuple[str, ...] | None = None,
                   max_bytes: int | None = None) -> Path | None:
    """The folder the run's absolute paths were written under, found from paths whose tail
    exists in ``run_dir`` (the shortest such tail); the most frequent answer, or ``None``.
    ``files`` (relative to ``run_dir``) and ``max_bytes`` limit what is read."""
    run_dir = Path(run_dir)
    here = run_dir.resolve()
    votes: Counter[str] = Counter()
    for text in _candidate_paths(run_dir, files, max_bytes):
        candidate = PurePosixPath(text)
        if Path(text) == here or here in Path(text).parents:
            continue
        parts = candidate.parts
        for cut in range(len(parts) - 1, 1, -1):  # parts[0] is "/"; keep at least one folder as the root
            if (here.joinpath(*parts[cut:])).exists():
                votes[str(PurePosixPath(*parts[:cut]))] += 1
                break
        if sum(votes.values()) >= votes_needed:
            break
    return Path(votes.most_common(1)[0][0]) if votes else None


def path_rewriter(old: str | os.PathLike, new: str | os.PathLike) -> Callable[[str], tuple[str, int]]:
    """A function of a text returning it with every path under ``old`` moved under ``new``, and
    the number of replacements. ``old`` matches only as a whole folder name (``/a/run`` does not
    touch ``/a/run2``), raw or as JSON writes it.

    >>> rewrite = path_rewriter("/a/run", "/b/run")
    >>> rewrite('{"p": "/a/run/x.jpg", "q": "/a/run2/y.jpg", "r": "/a/run", "s": "transformers:/a/run/ck"}')
    ('{"p": "/b/run/x.jpg", "q": "/a/run2/y.jpg", "r": "/b/run", "s": "transformers:/b/run/ck"}', 3)
    >>> rewrite("/home/u/a/run/x /a/run old/y /a/run~1/z")  # inside another path, or another folder
    ('/home/u/a/run/x /a/run old/y /a/run~1/z', 0)
    """
    old, new = str(old).rstrip("/") or "/", str(new).rstrip("/") or "/"
    forms: dict[str, str] = {old: new}
    for ascii_only in (False, True):
        forms[json.dumps(old, ensure_ascii=ascii_only)[1:-1]] = json.dumps(new, ensure_ascii=ascii_only)[1:-1]
    pattern = re.compile(_BEFORE + "(?:" + "|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True))
                         + ")" + _AFTER)

    def rewrite(text: str) -> tuple[str, int]:
        return pattern.subn(lambda m: forms[m.group(0)], text)

    return rewrite


@dataclass
class Relocation:
    """What ``relocate`` changed (or would change, with ``dry_run``)."""

    run_dir: Path
    old_root: Path
    new_root: Path
    files: dict[str, int] = field(default_factory=dict)  # file (relative) -> replacements
    cache_rows: dict[str, int] = field(default_factory=dict)  # cache file (relative) -> rows rewritten
    cache_dropped: dict[str, int] = field(default_factory=dict)  # cache file -> sandbox rows naming relative images
    dry_run: bool = False

    @property
    def replacements(self) -> int:
        return sum(self.files.values()) + sum(self.cache_rows.values())

    def summary(self) -> str:
        verb = "would rewrite" if self.dry_run else "rewrote"
        lines = [f"{self.old_root} -> {self.new_root}: {verb} {sum(self.files.values())} path(s) in "
                 f"{len(self.files)} file(s) and {sum(self.cache_rows.values())} cache row(s)"]
        lines += [f"  {name}: {n}" for name, n in sorted(self.files.items())]
        lines += [f"  {name}: {n} row(s)" for name, n in sorted(self.cache_rows.items())]
        dropped = "would drop" if self.dry_run else "dropped"
        lines += [f"  {name}: {dropped} {n} sandbox image-search answer(s) naming images relative to a working "
                  "folder (recomputed when next asked)" for name, n in sorted(self.cache_dropped.items())]
        return "\n".join(lines)


def names_relative_images(namespace: str, response: str) -> bool:
    """A cached sandbox tool answer whose images are named relative to a working folder.

    >>> names_relative_images("tools.sandbox-v2-n300-s0", '{"images": [{"location": "runs/a/world/images/I1.png"}]}')
    True
    >>> names_relative_images("tools.sandbox-v2-n300-s0", '{"images": [{"location": "/r/a/world/images/I1.png"}]}')
    False
    """
    if not namespace.startswith("tools.sandbox") or '"location"' not in response:
        return False
    try:
        images = json.loads(response).get("images") or []
    except (json.JSONDecodeError, AttributeError):
        return False
    return any(isinstance(im, dict) and isinstance(im.get("location"), str)
               and not im["location"].startswith(("/", "http://", "https://", "data:")) for im in images)


def _rewrite_cache(path: Path, rewrite: Callable[[str], tuple[str, int]], dry_run: bool) -> tuple[int, int]:
    """Rewrite the requests and responses of one cache file in one transaction and drop the sandbox
    answers that name relative images; (rows rewritten, rows dropped)."""
    from vsearcher_lite.cache import request_key

    # A dry run opens the file read-only: not even a WAL checkpoint may change it.
    conn = (sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) if dry_run
            else sqlite3.connect(path, timeout=30.0, isolation_level=None))
    try:
        has_calls = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='calls'").fetchone()
        if not has_calls:
            return 0, 0
        if not dry_run:
            conn.execute("BEGIN IMMEDIATE")  # read and write in one transaction
        try:
            dropped, updates = [], []
            for key, namespace, request, response in conn.execute("SELECT key, namespace, request, response FROM calls"):
                if names_relative_images(namespace, response):
                    dropped.append((key,))
                    continue
                new_request, n_req = rewrite(request)
                new_response, n_resp = rewrite(response)
                if n_req or n_resp:
                    new_key = request_key(namespace, json.loads(new_request)) if n_req else key
                    updates.append((new_key, new_request, new_response, key))
            if not dry_run:
                conn.executemany("DELETE FROM calls WHERE key = ?", dropped)
                conn.executemany("UPDATE OR REPLACE calls SET key = ?, request = ?, response = ? WHERE key = ?", updates)
                conn.execute("COMMIT")
        except BaseException:
            if not dry_run:
                conn.execute("ROLLBACK")
            raise
        return len(updates), len(dropped)
    except sqlite3.DatabaseError as exc:
        raise InputError(f"{path}: not a readable SQLite cache ({exc})") from None
    finally:
        conn.close()


def relocate(run_dir: str | os.PathLike, old_root: str | os.PathLike | None = None, *,
             dry_run: bool = False) -> Relocation:
    """Point every path under the run's old folder at ``run_dir``; see the module docstring.

    ``old_root``: the folder the run was written in (default: the manifest's record, else
    inferred from the files; when neither names another folder there is nothing to do and the
    report's ``old_root`` is ``run_dir`` itself). An ``InputError`` when ``run_dir`` is not a
    folder or ``old_root`` is not absolute.
    """
    from vsearcher_lite.evaluation.manifest import manifest_path, update_json_file

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputError(f"{run_dir}: no such run folder")
    here = run_dir.resolve()
    if old_root is not None:
        if not Path(old_root).is_absolute() or Path(old_root) == Path(Path(old_root).anchor):
            raise InputError(f"--from {old_root}: give the old run folder as an absolute path, as the files name it")
        old = Path(old_root)
    else:  # no folder found: nothing names another place, the run is where its files say
        old = moved_from(run_dir) or infer_old_root(run_dir) or here
    report = Relocation(run_dir=run_dir, old_root=old, new_root=here, dry_run=dry_run)
    if _same_folder(old, here):
        return report
    rewrite = path_rewriter(old, here)
    for path in data_files(run_dir):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # not a text file, whatever its name
        new_text, n = rewrite(text)
        if n:
            report.files[str(path.relative_to(run_dir))] = n
            if not dry_run:
                atomic_write_text(path, new_text)
    for path in cache_files(run_dir):
        rows, dropped = _rewrite_cache(path, rewrite, dry_run)
        if rows:
            report.cache_rows[str(path.relative_to(run_dir))] = rows
        if dropped:
            report.cache_dropped[str(path.relative_to(run_dir))] = dropped
    if manifest_path(run_dir).is_file():
        _, n = rewrite(manifest_path(run_dir).read_text(encoding="utf-8"))
        if n:
            report.files["run_manifest.json"] = n

        def move(data: dict) -> dict:
            return {**json.loads(rewrite(json.dumps(data, ensure_ascii=False))[0]), "run_dir": str(here)}

        if not dry_run:  # last: until here the run still reads as moved, so an interrupted relocation is redone
            update_json_file(manifest_path(run_dir), move)
    return report


# ---------------------------------------------------------------------------------------------
# The command


def register(subparsers, common) -> None:
    p = subparsers.add_parser(
        "relocate",
        parents=[common],
        help="point a moved or copied run folder's paths at its new place",
        description="Rewrite the absolute paths a run's files name (images, checkpoints, cached image-search "
                    "answers) from the folder the run was written in to where it is now. Needed once after "
                    "copying or moving a run folder; stages refuse a moved run until then.",
    )
    p.add_argument("--from", dest="old_root", metavar="OLD",
                   help="the folder the run was written in (default: from run_manifest.json, else inferred "
                        "from the paths in its files)")
    p.add_argument("--dry-run", action="store_true", help="list what would change and change nothing")
    p.set_defaults(func=_cmd_relocate, skip_moved_check=True)


def _cmd_relocate(args) -> int:
    report = relocate(args.run_dir, args.old_root, dry_run=args.dry_run)
    if _same_folder(report.old_root, report.new_root):
        print(f"{args.run_dir}: no file names a path of another run folder; nothing to relocate")
        return 0
    print(report.summary())
    return 0
