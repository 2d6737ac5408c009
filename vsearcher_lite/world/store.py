"""Building the sandbox into one SQLite file plus an image folder, and opening it again.

A world folder holds ``world.sqlite`` (entities, facts, pages, links, images with features, the
FTS5 index), ``images/`` (one PNG per picture), ``manifest.json`` (its settings) and
``metrics.json``. A build goes into a temporary sibling folder renamed into place at the end, so
an interrupted build leaves nothing half-written. The same seed gives byte-identical database
content and image files (fixed insertion order, every random choice seeded).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import sqlite3
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import numpy as np

from vsearcher_lite.runio import InputError, atomic_write_json, replace_dir
from vsearcher_lite.world import images as imaging
from vsearcher_lite.world import prose
from vsearcher_lite.world.generator import generate_world
from vsearcher_lite.world.knowledge import SandboxKnowledge, value_key
from vsearcher_lite.world.prose import SecondaryPage, article_url
from vsearcher_lite.world.rename import rename_roots
from vsearcher_lite.world.schema import MIN_ENTITIES, Draft

# Bump when the generator's output changes, so ensure_world rebuilds old worlds.
GENERATOR_VERSION = 2
DB_NAME = "world.sqlite"
IMAGES_DIR = "images"
MANIFEST = "manifest.json"
METRICS = "metrics.json"
# The largest world a build accepts: five times the biggest demo (20,000 entities). A larger count
# is more likely a typo than a plan, and a build that size would fill the disk before it ended.
MAX_ENTITIES = 100_000
STALE_BUILD_S = 3600.0  # a build folder with no owner recorded is left over once it is this old
NOT_FOUND = "world database not found; rebuild with `vsearcher-lite world`"
REBUILD = "rebuild the world with `vsearcher-lite world --force`"

SCHEMA = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE entities(
    id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, type TEXT NOT NULL, kind TEXT NOT NULL,
    sitelinks INTEGER NOT NULL, statements INTEGER NOT NULL, url TEXT NOT NULL UNIQUE,
    image_id TEXT, is_person INTEGER NOT NULL, year INTEGER);
CREATE INDEX entities_by_name ON entities(name COLLATE NOCASE);
CREATE INDEX entities_by_type ON entities(type, id);
CREATE TABLE aliases(entity_id TEXT NOT NULL, alias TEXT NOT NULL, PRIMARY KEY(entity_id, alias));
CREATE INDEX aliases_by_alias ON aliases(alias COLLATE NOCASE);
CREATE TABLE facts(
    id INTEGER PRIMARY KEY, subject TEXT NOT NULL, relation TEXT NOT NULL, label TEXT NOT NULL,
    value TEXT NOT NULL, kind TEXT NOT NULL, value_label TEXT NOT NULL, value_key TEXT NOT NULL);
CREATE INDEX facts_by_subject ON facts(subject, id);
CREATE INDEX facts_by_value ON facts(value_key, relation);
CREATE TABLE pages(
    id INTEGER PRIMARY KEY, url TEXT NOT NULL UNIQUE, title TEXT NOT NULL, kind TEXT NOT NULL,
    entity_id TEXT, text TEXT NOT NULL, image_id TEXT);
CREATE INDEX pages_by_entity ON pages(entity_id);
CREATE INDEX pages_by_title ON pages(title COLLATE NOCASE);
CREATE INDEX pages_by_image ON pages(image_id);
CREATE TABLE links(page_id INTEGER NOT NULL, position INTEGER NOT NULL, target_url TEXT NOT NULL,
    anchor TEXT NOT NULL, PRIMARY KEY(page_id, position));
CREATE INDEX links_by_target ON links(target_url);
CREATE TABLE images(
    id TEXT PRIMARY KEY, path TEXT NOT NULL, entity_id TEXT, kind TEXT NOT NULL, source_id TEXT,
    caption TEXT NOT NULL, style TEXT NOT NULL, simple INTEGER NOT NULL, width INTEGER NOT NULL,
    height INTEGER NOT NULL, sha256 TEXT NOT NULL, feature BLOB NOT NULL);
CREATE VIRTUAL TABLE pages_fts USING fts5(
    title, text, content='pages', content_rowid='id', tokenize='porter unicode61');
"""

LOOKALIKE_SHARE = 0.22  # share of pictured entities that get a look-alike on a distractor page
OWN_IMAGE_ON_NEWS = 0.45  # chance that a news item shows its subject's own picture


# -- images (run in worker processes for big worlds) -------------------------------------

def _render_image(job: tuple) -> tuple:
    """Draw one picture, write its PNG, return (id, sha256, feature bytes, w, h)."""
    image_id, style, key, label, lookalike_key, out_dir = job
    img = imaging.draw_image(style, key, label)
    if lookalike_key:
        img = imaging.lookalike(img, lookalike_key)
    data = imaging.png_bytes(img)
    Path(out_dir, f"{image_id}.png").write_bytes(data)
    feature = imaging.image_features(img).astype(np.float16).tobytes()
    return image_id, hashlib.sha256(data).hexdigest(), feature, img.width, img.height


def _render_all(jobs: list[tuple], workers: int) -> list[tuple]:
    if workers <= 1 or len(jobs) < 400:
        return [_render_image(j) for j in jobs]
    try:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(_render_image, jobs, chunksize=64))
    except (OSError, AssertionError, BrokenProcessPool):
        # No child processes here (a daemonic worker, a locked-down sandbox): same pictures.
        return [_render_image(j) for j in jobs]


# -- the build ----------------------------------------------------------------------------

def _plan_images(drafts: list[Draft], secondary: list[SecondaryPage], seed: int, image_dir: Path):
    """Decide every picture (entity pictures, look-alikes) and which page shows which; returns
    (jobs, image rows without features, entity -> image id, secondary page url -> image id)."""
    rng = random.Random(f"vsearcher-images:{seed}")
    jobs, rows = [], []
    entity_image: dict[str, str] = {}
    style_of: dict[str, str] = {}
    for d in drafts:
        if not d.has_image:
            continue
        image_id = "I" + d.id[1:]
        style = imaging.choose_style(d.type, rng)
        key = f"{seed}:{d.id}"
        entity_image[d.id] = image_id
        style_of[d.id] = style
        jobs.append((image_id, style, key, d.name, "", str(image_dir)))
        rows.append({"id": image_id, "entity_id": d.id, "kind": "entity", "source_id": None,
                     "caption": d.name, "style": style})
    slots = [p for p in secondary if p.image_slot]
    rng.shuffle(slots)
    pictured = [d for d in drafts if d.id in entity_image]
    n_look = min(len(slots), int(len(pictured) * LOOKALIKE_SHARE))
    page_image: dict[str, str] = {}
    by_id = {d.id: d for d in drafts}
    for i, d in enumerate(sorted(rng.sample(pictured, n_look), key=lambda x: x.id)):
        image_id = f"L{i + 1:06d}"
        page = slots[i]
        host = by_id.get(page.subject)
        caption = host.name if host is not None else page.title
        jobs.append((image_id, style_of[d.id], f"{seed}:{d.id}", d.name, f"{seed}:{image_id}",
                     str(image_dir)))
        rows.append({"id": image_id, "entity_id": None, "kind": "lookalike",
                     "source_id": entity_image[d.id], "caption": caption, "style": style_of[d.id]})
        page_image[page.url] = image_id
    for page in slots[n_look:]:
        if page.subject in entity_image and rng.random() < OWN_IMAGE_ON_NEWS:
            page_image[page.url] = entity_image[page.subject]
    return jobs, rows, entity_image, page_image


def _write_database(db_path: Path, seed: int, n_entities: int, drafts: list[Draft],
                    articles: dict, secondary: list[SecondaryPage], image_rows: list[dict],
                    rendered: dict, entity_image: dict, page_image: dict) -> dict:
    by_id = {d.id: d for d in drafts}
    con = sqlite3.connect(db_path)
    try:
        con.executescript(SCHEMA)
        con.executemany("INSERT INTO meta VALUES (?, ?)", [
            ("generator_version", str(GENERATOR_VERSION)), ("seed", str(seed)),
            ("n_entities", str(n_entities)), ("site", prose.SITE),
        ])
        con.executemany(
            "INSERT INTO entities VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(d.id, d.name, d.type, d.kind, d.sitelinks, d.statements, article_url(d.name),
              entity_image.get(d.id), int(d.is_person), d.year) for d in drafts],
        )
        con.executemany("INSERT INTO aliases VALUES (?, ?)",
                        [(d.id, a) for d in drafts for a in d.aliases])
        con.executemany(
            "INSERT INTO facts(subject, relation, label, value, kind, value_label, value_key) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(f.subject, f.relation, f.label, json.dumps(f.value), f.kind, f.value_label,
              value_key(f.value)) for d in drafts for f in d.facts],
        )
        pages = [(article_url(d.name), d.name, "article", d.id, articles[d.id].paragraphs,
                  entity_image.get(d.id), articles[d.id].mentions) for d in drafts]
        pages += [(p.url, p.title, p.kind, None, p.paragraphs, page_image.get(p.url), p.mentions)
                  for p in secondary]
        page_rows, link_rows = [], []
        for page_id, (url, title, kind, entity, paragraphs, image, mentions) in enumerate(pages, 1):
            page_rows.append((page_id, url, title, kind, entity, "\n\n".join(paragraphs), image))
            link_rows += [(page_id, i, article_url(by_id[m].name), by_id[m].name)
                          for i, m in enumerate(mentions)]
        con.executemany("INSERT INTO pages VALUES (?, ?, ?, ?, ?, ?, ?)", page_rows)
        con.executemany("INSERT INTO links VALUES (?, ?, ?, ?)", link_rows)
        img_rows = []
        for r in image_rows:
            _, sha, feature, w, h = rendered[r["id"]]
            simple = int(r["style"] in imaging.SIMPLE_STYLES)
            img_rows.append((r["id"], f"{IMAGES_DIR}/{r['id']}.png", r["entity_id"], r["kind"],
                             r["source_id"], r["caption"], r["style"], simple, w, h, sha, feature))
        con.executemany("INSERT INTO images VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", img_rows)
        con.execute("INSERT INTO pages_fts(pages_fts) VALUES ('rebuild')")
        con.execute("INSERT INTO pages_fts(pages_fts) VALUES ('optimize')")
        con.commit()
        return {"n_pages": len(page_rows), "n_links": len(link_rows), "n_images": len(img_rows),
                "n_facts": sum(len(d.facts) for d in drafts)}
    finally:
        con.close()


def build_world(out_dir: str | os.PathLike, n_entities: int = 2000, seed: int = 0, *,
                workers: int | None = None, progress: bool = False,
                rename_away: frozenset[str] = frozenset()) -> dict:
    """Generate a world of ``n_entities`` into ``out_dir`` (replacing what is there); returns its
    metrics. ``workers`` processes draw the pictures; the output does not depend on their number.
    ``rename_away``: name roots (another world's, ``world/rename.py``) given fresh spellings
    before any page is written, so that no name of that world appears in this one."""
    if not MIN_ENTITIES <= n_entities <= MAX_ENTITIES:
        raise InputError(f"a sandbox world has at least {MIN_ENTITIES} and at most "
                         f"{MAX_ENTITIES:,} entities, got {n_entities:,}")
    out_dir = Path(out_dir)
    if out_dir.is_dir() and any(out_dir.iterdir()) and not (
            (out_dir / MANIFEST).exists() or (out_dir / DB_NAME).exists()):
        raise InputError(f"{out_dir} exists and is not a sandbox world; move it away or choose "
                         "another folder")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_builds(out_dir)
    t0 = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.build-{os.getpid()}-", dir=out_dir.parent))
    try:
        (tmp / IMAGES_DIR).mkdir()
        drafts = generate_world(n_entities, seed).drafts
        renamed = rename_roots(drafts, set(rename_away), seed) if rename_away else {}
        writer = prose.ArticleWriter(drafts, seed)
        articles = {d.id: writer.write(d) for d in drafts}
        sec = prose.SecondaryWriter(drafts, seed)
        secondary = (sec.lists() + sec.news(max(6, int(0.12 * n_entities)))
                     + sec.travel(max(4, int(0.05 * n_entities))))
        jobs, image_rows, entity_image, page_image = _plan_images(
            drafts, secondary, seed, tmp / IMAGES_DIR)
        t_text = time.perf_counter()
        workers = max(1, min(4, os.cpu_count() or 1)) if workers is None else workers
        rendered = {r[0]: r for r in _render_all(jobs, workers)}
        t_images = time.perf_counter()
        counts = _write_database(tmp / DB_NAME, seed, n_entities, drafts, articles, secondary,
                                 image_rows, rendered, entity_image, page_image)
        manifest = {"generator_version": GENERATOR_VERSION, "n_entities": n_entities, "seed": seed,
                    "db": DB_NAME, "images": IMAGES_DIR}
        if rename_away:  # a plain world's manifest stays as it always was
            manifest["renamed_away"] = True
        atomic_write_json(tmp / MANIFEST, manifest)
        type_counts = Counter(d.type for d in drafts)
        page_kinds = Counter(["article"] * len(drafts) + [p.kind for p in secondary])
        metrics = {"n_entities": n_entities, "seed": seed, **counts,
                   "n_renamed_roots": len(renamed),
                   "n_entity_images": len(entity_image),
                   "n_lookalike_images": sum(r["kind"] == "lookalike" for r in image_rows),
                   "n_simple_images": sum(r["style"] in imaging.SIMPLE_STYLES for r in image_rows),
                   "entities_per_type": dict(sorted(type_counts.items())),
                   "pages_per_kind": dict(sorted(page_kinds.items())),
                   "text_seconds": round(t_text - t0, 3),
                   "image_seconds": round(t_images - t_text, 3)}
        metrics["build_seconds"] = round(time.perf_counter() - t0, 3)
        atomic_write_json(tmp / METRICS, metrics)
        replace_dir(tmp, out_dir)
        return metrics
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists but belongs to someone else
        return True
    return True


def remove_stale_builds(out_dir: str | os.PathLike) -> list[Path]:
    """Delete the build folders a killed build left behind; returns them."""
    out_dir = Path(out_dir)
    removed = []
    if not out_dir.parent.is_dir():
        return removed
    for tmp in out_dir.parent.glob(f".{out_dir.name}.build-*"):
        owner = tmp.name[len(f".{out_dir.name}.build-"):].split("-", 1)[0]
        try:
            stale = (not _process_alive(int(owner)) if owner.isdigit()
                     else time.time() - tmp.stat().st_mtime > STALE_BUILD_S)
        except FileNotFoundError:
            continue
        if stale and tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
            removed.append(tmp)
    return removed


def world_dir(path: str | os.PathLike) -> Path:
    """The world folder for ``path``: the folder itself, or ``path/world`` for a run folder."""
    path = Path(path)
    # A world folder has both files; a run folder may hold other manifests of its own.
    for candidate in (path, path / "world"):
        if (candidate / MANIFEST).is_file() and (candidate / DB_NAME).is_file():
            return candidate
    for candidate in (path / "world", path):
        if (candidate / MANIFEST).is_file():
            raise InputError(f"{candidate / DB_NAME}: {NOT_FOUND}")
    raise InputError(f"{path}: no sandbox world here (no {MANIFEST}); "
                     "run `vsearcher-lite world --run-dir RUN_DIR` first")


def read_manifest(path: str | os.PathLike) -> dict | None:
    """The world's ``manifest.json`` (``None`` when there is none; broken: ``InputError``)."""
    file = Path(path) / MANIFEST
    if not file.is_file():
        return None
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        problem = getattr(exc, "msg", exc)
        raise InputError(f"{file}: not valid JSON ({problem}); {REBUILD}") from None
    if not isinstance(data, dict):
        raise InputError(f"{file}: expected a JSON object, got {type(data).__name__}; {REBUILD}")
    return data


def ensure_world(run_dir: str | os.PathLike, n_entities: int = 2000, seed: int = 0, *,
                 workers: int | None = None) -> "SandboxWorld":
    """The world in ``run_dir/world``, built only when missing or built with other settings."""
    target = Path(run_dir) / "world"
    wanted = {"generator_version": GENERATOR_VERSION, "n_entities": n_entities, "seed": seed}
    have = read_manifest(target)
    stale = not have or any(have.get(k) != v for k, v in wanted.items())
    if stale or not (target / DB_NAME).is_file():
        build_world(target, n_entities, seed, workers=workers)
    return open_world(target)


def open_world(path: str | os.PathLike) -> "SandboxWorld":
    """Open a built world (its folder, or a run folder containing ``world/``)."""
    return SandboxWorld(world_dir(path))


class SandboxWorld:
    """A built world on disk, with a read-only SQLite connection per thread."""

    def __init__(self, root: str | os.PathLike):
        # Absolute: image paths built from it go into task files and cached tool answers, which
        # must mean the same file from any working folder.
        self.root = Path(root).resolve()
        self.db_path = self.root / DB_NAME
        self.images_dir = self.root / IMAGES_DIR
        if not self.db_path.is_file():
            raise InputError(f"{self.db_path}: {NOT_FOUND}")
        self.manifest = read_manifest(self.root) or {}
        self._local = threading.local()
        self._knowledge = None
        self._features = None
        try:
            self.connect().execute("SELECT count(*) FROM entities").fetchone()
        except sqlite3.DatabaseError as exc:
            raise InputError(f"{self.db_path}: not a sandbox world database ({exc})") from None

    def __repr__(self) -> str:
        return f"SandboxWorld({str(self.root)!r})"

    def connect(self) -> sqlite3.Connection:
        """This thread's read-only connection (the world never changes after its build)."""
        con = getattr(self._local, "con", None)
        if con is None:
            uri = f"file:{self.db_path.resolve()}?mode=ro&immutable=1"
            con = sqlite3.connect(uri, uri=True, check_same_thread=False)
            self._local.con = con
        return con

    @property
    def n_entities(self) -> int:
        return int(self.manifest.get("n_entities", 0))

    @property
    def seed(self) -> int:
        return int(self.manifest.get("seed", 0))

    @property
    def fingerprint(self) -> str:
        """A tool-cache namespace naming this world's content (never served for another)."""
        m = self.manifest
        renamed = "-renamed" if m.get("renamed_away") else ""
        return (f"sandbox-v{m.get('generator_version')}-n{m.get('n_entities')}-s{m.get('seed')}"
                f"{renamed}")

    def metrics(self) -> dict:
        try:
            return json.loads((self.root / METRICS).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return {}

    def image_path(self, image_id: str) -> Path:
        row = self.connect().execute("SELECT path FROM images WHERE id = ?", (image_id,)).fetchone()
        if row is None:
            raise LookupError(f"unknown image id {image_id!r}")
        return self.root / row[0]

    def image_matrix(self) -> tuple[list[str], np.ndarray]:
        """All stored image ids and their feature vectors (float32, one row each), cached."""
        if self._features is None:
            rows = self.connect().execute("SELECT id, feature FROM images ORDER BY id").fetchall()
            ids = [r[0] for r in rows]
            mat = np.frombuffer(b"".join(r[1] for r in rows), np.float16).reshape(len(rows), -1)
            self._features = (ids, mat.astype(np.float32))
        return self._features

    @property
    def knowledge(self):
        if self._knowledge is None:
            self._knowledge = SandboxKnowledge(self)
        return self._knowledge

    def dump(self) -> str:
        """Every table's rows as SQL text, in a fixed order: for byte-identical comparisons."""
        con = sqlite3.connect(f"file:{self.db_path.resolve()}?mode=ro", uri=True)
        try:
            return "\n".join(con.iterdump())
        finally:
            con.close()
