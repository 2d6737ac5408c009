"""The data model shared by the sandbox world and the live world.

A ``KnowledgeSource`` is all that data synthesis reads (paper section 2.1), so one synthesis code
runs on both worlds. Ids are strings: ``"E000042"`` in the sandbox, Wikidata QIDs live.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Union

# The kinds of a fact's value. "entity" values are ids of other entities; the rest are literals.
VALUE_KINDS = ("entity", "year", "number", "text")

Literal = Union[str, int, float]


@dataclass(frozen=True)
class Seed:
    """A candidate seed entity: rare (few sitelinks) but well documented (many statements)."""

    id: str
    title: str
    sitelinks: int
    statements: int
    type: str = ""


@dataclass(frozen=True)
class Fact:
    """One typed statement ``subject --relation--> value``: ``value`` is an entity id when
    ``kind == "entity"`` (named by ``value_label``), else a literal; ``label`` is the relation
    in English."""

    subject: str
    relation: str
    value: Literal
    kind: str = "entity"
    label: str = ""
    value_label: str = ""

    def value_text(self) -> str:
        return self.value_label or str(self.value)


@dataclass(frozen=True)
class ImageRef:
    """An image known to a world: a local file path or an http(s) URL."""

    location: str
    entity_id: str | None = None
    caption: str = ""

    @property
    def is_url(self) -> bool:
        return self.location.startswith(("http://", "https://"))


@dataclass
class Entity:
    id: str
    name: str
    type: str
    aliases: list[str] = field(default_factory=list)
    sitelinks: int = 0
    statements: int = 0
    url: str = ""
    is_person: bool = False
    kind: str = ""  # the subtype within ``type``: "bridge" for a building, "painter" for a person


@dataclass
class PageContent:
    """The readable content of one page: what synthesis and the visit tool see."""

    url: str
    title: str
    paragraphs: list[str]
    entity_id: str | None = None
    image: ImageRef | None = None
    links: list[str] = field(default_factory=list)  # URLs of linked pages
    kind: str = "article"  # article | news | list | travel | ...

    @property
    def text(self) -> str:
        return "\n\n".join(self.paragraphs)


class KnowledgeSource(abc.ABC):
    """What data synthesis may ask of a world. An unknown id, title or URL raises a
    ``LookupError`` that names it; records are never half filled."""

    name: str = "abstract"

    @abc.abstractmethod
    def seeds(self, sitelinks_max: int, statements_min: int, *, require_image: bool = True,
              exclude_people: bool = True, limit: int | None = None) -> list[Seed]:
        """Rare-but-documented entities, de-duplicated by id, in a deterministic order."""

    @abc.abstractmethod
    def entity(self, entity_id: str) -> Entity: ...

    @abc.abstractmethod
    def find(self, name: str) -> str | None:
        """Resolve a name (or alias, or page title) to an entity id; ``None`` if unknown."""

    @abc.abstractmethod
    def page(self, entity_id: str) -> PageContent:
        """The entity's own article: paragraph text, representative image, links."""

    @abc.abstractmethod
    def facts(self, entity_id: str) -> list[Fact]:
        """Structured facts about the entity (may be empty for sources without structure)."""

    @abc.abstractmethod
    def image(self, entity_id: str) -> ImageRef | None:
        """The entity's representative image, or ``None`` when it has none."""

    def links(self, entity_id: str) -> list[str]:
        """Ids of the entities that the entity's page links to."""
        out = []
        for url in self.page(entity_id).links:
            other = self.entity_for_url(url)
            if other is not None and other != entity_id and other not in out:
                out.append(other)
        return out

    def entity_for_url(self, url: str) -> str | None:
        """The id of the entity whose article is at ``url``; ``None`` for other pages."""
        return None
