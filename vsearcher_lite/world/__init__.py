"""The worlds the agent lives in: the shared data model and the sandbox web.

The sandbox is a seeded fictional encyclopedia in one SQLite file plus pictures (the live world,
Wikidata + Wikipedia, is the ``live`` package). Modules: ``model`` (the shared data model),
``schema``, ``names``, ``generator`` and ``works`` (entities and facts), ``templates``, ``prose``
and ``queries`` (pages and descriptions), ``images``, ``store`` and ``knowledge`` (the SQLite
world and its reader), ``plots`` (notebook 00), ``commands`` (``vsearcher-lite world``).
"""

from vsearcher_lite.world.images import perturb_image
from vsearcher_lite.world.knowledge import (
    DEFAULT_SITELINKS_MAX,
    DEFAULT_STATEMENTS_MIN,
    SandboxKnowledge,
)
from vsearcher_lite.world.model import Entity, Fact, ImageRef, KnowledgeSource, PageContent, Seed
from vsearcher_lite.world.store import SandboxWorld, build_world, ensure_world, open_world

__all__ = ["DEFAULT_SITELINKS_MAX", "DEFAULT_STATEMENTS_MIN", "Entity", "Fact", "ImageRef",
           "KnowledgeSource", "PageContent", "SandboxKnowledge", "SandboxWorld", "Seed",
           "build_world", "ensure_world", "open_world", "perturb_image"]
