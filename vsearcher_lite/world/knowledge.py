"""``SandboxKnowledge``: the ``KnowledgeSource`` of the sandbox, over its SQLite store, plus what
synthesis needs to check questions (``matching`` tells whether a description such as "the bridge
designed by X" identifies exactly one entity).

The rarity thresholds select about a fifth of the pictured non-person entities, like the paper's
rare-but-documented seeds.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Iterator
from urllib.parse import unquote

from vsearcher_lite.world.model import Entity, Fact, ImageRef, KnowledgeSource, PageContent, Seed
from vsearcher_lite.world.prose import SITE

DEFAULT_SITELINKS_MAX = 5
DEFAULT_STATEMENTS_MIN = 10


def value_key(value) -> str:
    """How a fact value is indexed for ``(relation, value)`` lookups: ids and literals as text."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def normalise_url(url: str) -> str:
    """Canonical form of a sandbox URL.

    >>> normalise_url("http://wiki.sandbox.test/wiki/Orsk Bridge/#History")
    'https://wiki.sandbox.test/wiki/Orsk_Bridge'
    """
    url = url.strip()
    for cut in ("#", "?"):
        url = url.split(cut, 1)[0]
    if url.startswith("http://"):
        url = "https://" + url[len("http://"):]
    url = unquote(url).rstrip("/").replace(" ", "_")
    return url


def is_sandbox_url(url: str) -> bool:
    return normalise_url(url).startswith(SITE + "/")


FACT_COLUMNS = "subject, relation, label, value, kind, value_label"
IMAGE_COLUMNS = "id, path, entity_id, kind, source_id, caption, style, simple"


def _fact(row) -> Fact:
    subject, relation, label, value, kind, value_label = row
    return Fact(subject, relation, json.loads(value), kind, label, value_label)


class SandboxKnowledge(KnowledgeSource):
    name = "sandbox"
    DEFAULT_SITELINKS_MAX = DEFAULT_SITELINKS_MAX
    DEFAULT_STATEMENTS_MIN = DEFAULT_STATEMENTS_MIN

    def __init__(self, world):
        self.world, self.root = world, world.root
        self._entity = lru_cache(maxsize=65536)(self._load_entity)

    def _db(self):
        return self.world.connect()

    # -- the KnowledgeSource interface ---------------------------------------------------
    def seeds(self, sitelinks_max: int = DEFAULT_SITELINKS_MAX,
              statements_min: int = DEFAULT_STATEMENTS_MIN, *, require_image: bool = True,
              exclude_people: bool = True, limit: int | None = None) -> list[Seed]:
        sql = ("SELECT id, name, sitelinks, statements, type FROM entities"
               " WHERE sitelinks <= ? AND statements >= ?"
               + (" AND image_id IS NOT NULL" if require_image else "")
               + (" AND is_person = 0" if exclude_people else "")
               + " ORDER BY id")
        params: list = [sitelinks_max, statements_min]
        if limit is not None:
            sql += " LIMIT ?"
            params.append(int(limit))
        return [Seed(i, n, s, st, t) for i, n, s, st, t in self._db().execute(sql, params)]

    def _load_entity(self, entity_id: str) -> Entity:
        row = self._db().execute("SELECT id, name, type, kind, sitelinks, statements, url, "
                                 "is_person FROM entities WHERE id = ?", (entity_id,)).fetchone()
        if row is None:
            raise LookupError(f"unknown sandbox entity id {entity_id!r}")
        aliases = [a for (a,) in self._db().execute(
            "SELECT alias FROM aliases WHERE entity_id = ? ORDER BY alias", (entity_id,))]
        return Entity(id=row[0], name=row[1], type=row[2], kind=row[3], aliases=aliases,
                      sitelinks=row[4], statements=row[5], url=row[6], is_person=bool(row[7]))

    def entity(self, entity_id: str) -> Entity:
        e = self._entity(entity_id)
        return Entity(**{**e.__dict__, "aliases": list(e.aliases)})  # a copy: callers may edit it

    def find(self, name: str) -> str | None:
        name = (name or "").strip()
        if not name:
            return None
        db = self._db()
        row = db.execute("SELECT id FROM entities WHERE name = ? COLLATE NOCASE ORDER BY id "
                         "LIMIT 1", (name,)).fetchone()
        if row is None:
            row = db.execute("SELECT entity_id FROM aliases WHERE alias = ? COLLATE NOCASE "
                             "ORDER BY entity_id LIMIT 1", (name,)).fetchone()
        if row is None and name.lower().startswith("the "):
            return self.find(name[4:])
        if row is None and is_sandbox_url(name):
            return self.entity_for_url(name)
        return row[0] if row else None

    def page(self, entity_id: str) -> PageContent:
        row = self._db().execute("SELECT id FROM pages WHERE entity_id = ? AND kind = 'article'",
                                 (entity_id,)).fetchone()
        if row is None:
            raise LookupError(f"unknown sandbox entity id {entity_id!r}")
        return self._page_by_rowid(row[0])

    def facts(self, entity_id: str) -> list[Fact]:
        self._entity(entity_id)  # raises LookupError for an unknown id
        sql = f"SELECT {FACT_COLUMNS} FROM facts WHERE subject = ? ORDER BY id"
        return [_fact(r) for r in self._db().execute(sql, (entity_id,))]

    def image(self, entity_id: str) -> ImageRef | None:
        row = self._db().execute("SELECT i.path, i.caption FROM entities e JOIN images i "
                                 "ON i.id = e.image_id WHERE e.id = ?", (entity_id,)).fetchone()
        if row is None:
            self._entity(entity_id)
            return None
        return ImageRef(str(self.root / row[0]), entity_id, row[1])

    def links(self, entity_id: str) -> list[str]:
        rows = self._db().execute(
            "SELECT e.id FROM pages p JOIN links l ON l.page_id = p.id "
            "JOIN entities e ON e.url = l.target_url WHERE p.entity_id = ? AND p.kind = 'article' "
            "ORDER BY l.position", (entity_id,)).fetchall()
        if not rows:
            self._entity(entity_id)
        return [r[0] for r in rows if r[0] != entity_id]

    def entity_for_url(self, url: str) -> str | None:
        row = self._db().execute("SELECT id FROM entities WHERE url = ?",
                                 (normalise_url(url),)).fetchone()
        return row[0] if row else None

    # -- more for synthesis, the teacher and tests ----------------------------------------
    def inbound_facts(self, entity_id: str) -> list[Fact]:
        """Facts of other entities whose value is this entity (e.g. buildings designed by it)."""
        rows = self._db().execute(f"SELECT {FACT_COLUMNS} FROM facts WHERE value_key = ? "
                                  "AND kind = 'entity' ORDER BY id", (entity_id,))
        return [_fact(r) for r in rows]

    def matching(self, relation: str, value, *, type: str | None = None,
                 kind: str | None = None) -> list[str]:
        """Ids of the entities with the fact ``relation = value`` (of ``type``/``kind``)."""
        sql = ("SELECT DISTINCT f.subject FROM facts f JOIN entities e ON e.id = f.subject "
               "WHERE f.value_key = ? AND f.relation = ?")
        params: list = [value_key(value), relation]
        if type is not None:
            sql += " AND e.type = ?"
            params.append(type)
        if kind is not None:
            sql += " AND e.kind = ?"
            params.append(kind)
        return [r[0] for r in self._db().execute(sql + " ORDER BY f.subject", params)]

    def entity_ids(self, type: str | None = None) -> list[str]:
        params = () if type is None else (type,)
        sql = "SELECT id FROM entities" + (" WHERE type = ?" if params else "") + " ORDER BY id"
        return [r[0] for r in self._db().execute(sql, params)]

    def types(self) -> dict[str, int]:
        """Entity counts per type."""
        sql = "SELECT type, count(*) FROM entities GROUP BY type ORDER BY type"
        return dict(self._db().execute(sql).fetchall())

    def stats(self) -> list[dict]:
        """Every entity's ``id, type, kind, sitelinks, statements, has_image, is_person``."""
        rows = self._db().execute("SELECT id, type, kind, sitelinks, statements, "
                                  "image_id IS NOT NULL, is_person FROM entities ORDER BY id")
        return [dict(id=r[0], type=r[1], kind=r[2], sitelinks=r[3], statements=r[4],
                     has_image=bool(r[5]), is_person=bool(r[6])) for r in rows]

    def page_by_url(self, url: str) -> PageContent:
        row = self._db().execute("SELECT id FROM pages WHERE url = ?",
                                 (normalise_url(url),)).fetchone()
        if row is None:
            raise LookupError(f"no sandbox page at {url}")
        return self._page_by_rowid(row[0])

    def pages(self, kind: str | None = None) -> Iterator[PageContent]:
        """Every page (or every page of one kind: article, news, list, travel), in id order."""
        sql = "SELECT id FROM pages" + (" WHERE kind = ?" if kind else "") + " ORDER BY id"
        for (rowid,) in self._db().execute(sql, (kind,) if kind else ()).fetchall():
            yield self._page_by_rowid(rowid)

    def pages_mentioning(self, entity_id: str) -> list[str]:
        """URLs of the pages that link to the entity's article."""
        url = self.entity(entity_id).url
        rows = self._db().execute("SELECT DISTINCT p.url FROM links l JOIN pages p ON p.id = "
                                  "l.page_id WHERE l.target_url = ? ORDER BY p.id", (url,))
        return [r[0] for r in rows]

    def images(self, kind: str | None = None) -> list[dict]:
        """Stored pictures: dicts of ``IMAGE_COLUMNS`` (kind: entity or lookalike)."""
        sql = f"SELECT {IMAGE_COLUMNS} FROM images" + (" WHERE kind = ?" if kind else "")
        rows = self._db().execute(sql + " ORDER BY id", (kind,) if kind else ())
        return [self._image_record(r) for r in rows]

    def _image_record(self, r) -> dict:
        return dict(id=r[0], path=str(self.root / r[1]), entity_id=r[2], kind=r[3],
                    source_id=r[4], caption=r[5], style=r[6], simple=bool(r[7]))

    def image_info(self, entity_id: str) -> dict | None:
        """The stored record of the entity's own picture (style, simple, ...), or None."""
        for rec in self._db().execute("SELECT image_id FROM entities WHERE id = ?", (entity_id,)):
            if rec[0] is None:
                return None
            sql = f"SELECT {IMAGE_COLUMNS} FROM images WHERE id = ?"
            return self._image_record(self._db().execute(sql, (rec[0],)).fetchone())
        raise LookupError(f"unknown sandbox entity id {entity_id!r}")

    def _page_by_rowid(self, rowid: int) -> PageContent:
        db = self._db()
        url, title, kind, entity_id, text, image_id = db.execute(
            "SELECT url, title, kind, entity_id, text, image_id FROM pages WHERE id = ?",
            (rowid,)).fetchone()
        links = [r[0] for r in db.execute(
            "SELECT target_url FROM links WHERE page_id = ? ORDER BY position", (rowid,))]
        image = None
        if image_id is not None:
            path, img_entity, caption = db.execute(
                "SELECT path, entity_id, caption FROM images WHERE id = ?", (image_id,)).fetchone()
            image = ImageRef(str(self.root / path), img_entity, caption)
        return PageContent(url=url, title=title, paragraphs=text.split("\n\n"),
                           entity_id=entity_id, image=image, links=links, kind=kind)
