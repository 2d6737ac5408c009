"""Shared helpers for the synthesis tests: a tiny hand-made world and a small built sandbox.

``tiny_world(tmp)`` is a ``KnowledgeSource`` of 15 entities whose facts can be checked by hand
(which bridge Ilsa Maren designed, which town the Drun flows through). ``small_sandbox`` builds
a real sandbox world once per test session (``vsearcher_lite.world.ensure_world``).

This module holds no tests of its own; the checks below keep the hand-made world honest.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from vsearcher_lite.world.model import Entity, Fact, ImageRef, KnowledgeSource, PageContent, Seed

SITE = "https://wiki.sandbox.test/wiki/"


def rich_image(path: Path, seed: int) -> str:
    """A busy picture: random blocks of many colours (high colour entropy)."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(12, 16, 3), dtype=np.uint8)
    img = Image.fromarray(blocks).resize((160, 120), Image.NEAREST)
    noise = rng.integers(0, 40, size=(120, 160, 3), dtype=np.uint8)
    arr = np.clip(np.asarray(img, np.int32) + noise, 0, 255).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path)
    return str(path)


def flag_image(path: Path) -> str:
    """A two-colour flag: the textbook too-simple image."""
    arr = np.zeros((120, 160, 3), np.uint8)
    arr[:60] = (200, 30, 40)
    arr[60:] = (250, 250, 250)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path)
    return str(path)


class TinyKnowledge(KnowledgeSource):
    name = "sandbox"

    def __init__(self, entities: list[Entity], facts: list[Fact], images: dict[str, str]):
        self._entities = {e.id: e for e in entities}
        self._facts = facts
        self._images = images

    def seeds(
        self,
        sitelinks_max=5,
        statements_min=3,
        *,
        require_image=True,
        exclude_people=True,
        limit=None,
    ):
        out = [
            Seed(e.id, e.name, e.sitelinks, e.statements, e.type)
            for e in self._entities.values()
            if e.sitelinks <= sitelinks_max
            and e.statements >= statements_min
            and (not require_image or e.id in self._images)
            and (not exclude_people or not e.is_person)
        ]
        return out[:limit] if limit else out

    def entity(self, entity_id):
        if entity_id not in self._entities:
            raise LookupError(f"unknown entity {entity_id!r}")
        return self._entities[entity_id]

    def entity_ids(self, type=None):
        return [i for i, e in self._entities.items() if type is None or e.type == type]

    def find(self, name):
        key = name.strip().casefold()
        if key.startswith("the "):
            key = key[4:]
        for e in self._entities.values():
            if e.name.casefold() == key or key in (a.casefold() for a in e.aliases):
                return e.id
        return None

    def facts(self, entity_id):
        self.entity(entity_id)
        return [f for f in self._facts if f.subject == entity_id]

    def page(self, entity_id):
        e = self.entity(entity_id)
        sentences = [f"{e.name} is a {e.kind or e.type}."]
        for f in self.facts(entity_id):
            sentences.append(f"{e.name}: {f.label} {f.value_text()}.")
        links = [
            SITE + self._entities[f.value].name.replace(" ", "_")
            for f in self.facts(entity_id)
            if f.kind == "entity"
        ]
        return PageContent(
            url=SITE + e.name.replace(" ", "_"),
            title=e.name,
            paragraphs=[" ".join(sentences)],
            entity_id=entity_id,
            image=self.image(entity_id),
            links=links,
        )

    def image(self, entity_id):
        self.entity(entity_id)
        path = self._images.get(entity_id)
        return ImageRef(path, entity_id) if path else None


def tiny_world(root: Path) -> TinyKnowledge:
    """Two provinces, three settlements, a river, three people, four buildings."""
    E = Entity
    entities = [
        E("R1", "Ostmark", "region", kind="province", sitelinks=30, statements=5),
        E("R2", "Velnia", "region", kind="province", sitelinks=25, statements=5),
        E("S1", "Orsk", "settlement", kind="town", sitelinks=8, statements=6),
        E("S2", "Brenna", "settlement", kind="town", sitelinks=4, statements=6),
        E("S3", "Tulle", "settlement", kind="village", sitelinks=2, statements=5),
        E("V1", "Drun River", "river", kind="river", sitelinks=3, statements=5),
        E(
            "P1",
            "Ilsa Maren",
            "person",
            kind="architect",
            is_person=True,
            sitelinks=2,
            statements=6,
        ),
        E(
            "P2",
            "Tomas Brecht",
            "person",
            kind="engineer",
            is_person=True,
            sitelinks=1,
            statements=6,
        ),
        E("P3", "Anna Voss", "person", kind="architect", is_person=True, sitelinks=1, statements=6),
        E("B1", "Orsk Bridge", "building", kind="bridge", sitelinks=1, statements=6),
        E("B2", "Brenna Bridge", "building", kind="bridge", sitelinks=1, statements=6),
        E("B3", "Tulle Mill", "building", kind="mill", sitelinks=1, statements=6),
        E("B4", "Voss Library", "building", kind="library", sitelinks=1, statements=6),
    ]
    names = {e.id: e.name for e in entities}

    def link(s, rel, label, v):
        return Fact(s, rel, v, "entity", label, names[v])

    def year(s, rel, label, y):
        return Fact(s, rel, y, "year", label, "")

    def noun(s, rel, kind):
        return Fact(s, rel, kind, "text", rel.replace("_", " "), "")

    facts = [
        noun("R1", "instance_of", "province"),
        noun("R2", "instance_of", "province"),
        noun("S1", "instance_of", "town"),
        link("S1", "located_in", "located in", "R1"),
        year("S1", "year_founded", "year founded", 1200),
        noun("S2", "instance_of", "town"),
        link("S2", "located_in", "located in", "R1"),
        year("S2", "year_founded", "year founded", 1350),
        noun("S3", "instance_of", "village"),
        link("S3", "located_in", "located in", "R2"),
        year("S3", "year_founded", "year founded", 1400),
        noun("V1", "instance_of", "river"),
        link("V1", "flows_through", "flows through", "S1"),
        link("V1", "flows_through", "flows through", "S2"),
        noun("P1", "occupation", "architect"),
        link("P1", "born_in", "born in", "S1"),
        year("P1", "year_born", "year of birth", 1820),
        noun("P2", "occupation", "engineer"),
        link("P2", "born_in", "born in", "S3"),
        year("P2", "year_born", "year of birth", 1830),
        noun("P3", "occupation", "architect"),
        link("P3", "born_in", "born in", "S2"),
        year("P3", "year_born", "year of birth", 1801),
        noun("B1", "instance_of", "bridge"),
        link("B1", "located_in", "located in", "S1"),
        link("B1", "designed_by", "designed by", "P1"),
        year("B1", "year_built", "year built", 1874),
        link("B1", "crosses", "crosses", "V1"),
        noun("B2", "instance_of", "bridge"),
        link("B2", "located_in", "located in", "S2"),
        link("B2", "designed_by", "designed by", "P1"),
        year("B2", "year_built", "year built", 1880),
        noun("B3", "instance_of", "mill"),
        link("B3", "located_in", "located in", "S3"),
        link("B3", "designed_by", "designed by", "P2"),
        year("B3", "year_built", "year built", 1874),
        noun("B4", "instance_of", "library"),
        link("B4", "located_in", "located in", "S1"),
        link("B4", "designed_by", "designed by", "P3"),
        year("B4", "year_built", "year built", 1850),
    ]
    images = {}
    for i, e in enumerate(entities):
        if e.id in ("R1", "R2"):
            images[e.id] = flag_image(root / "images" / f"{e.id}.png")
        elif e.id not in ("P2", "P3"):
            images[e.id] = rich_image(root / "images" / f"{e.id}.png", i)
    return TinyKnowledge(entities, facts, images)


_SANDBOXES: dict[tuple[int, int], Path] = {}


def small_sandbox(tmp_path_factory, n_entities: int = 400, seed: int = 0) -> Path:
    """A run folder whose ``world/`` holds a built sandbox; built once per session and size."""
    from vsearcher_lite.world import ensure_world

    key = (n_entities, seed)
    if key not in _SANDBOXES:
        root = tmp_path_factory.mktemp(f"sandbox{n_entities}")
        ensure_world(root, n_entities, seed)
        _SANDBOXES[key] = root
    return _SANDBOXES[key]


def copy_run(src: Path, dst: Path) -> Path:
    """A fresh run folder that shares ``src``'s world (copied, so tests cannot disturb each
    other)."""
    import shutil

    shutil.copytree(src / "world", dst / "world")
    return dst


def test_tiny_world_is_consistent(tmp_path):
    world = tiny_world(tmp_path)
    assert world.find("the drun river") == "V1"
    assert {f.value for f in world.facts("V1") if f.relation == "flows_through"} == {"S1", "S2"}
    assert world.image("P2") is None and Path(world.image("B1").location).is_file()
    assert [s.id for s in world.seeds(5, 5)] == ["S2", "S3", "V1", "B1", "B2", "B3", "B4"]
