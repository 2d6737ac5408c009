"""The worlds the agent lives in: the shared data model and the sandbox web.

``build_world`` / ``ensure_world`` / ``open_world`` make and open a sandbox (a seeded fictional
encyclopedia in one SQLite file plus pictures); ``SandboxWorld.knowledge`` is its
``KnowledgeSource``; ``perturb_image`` makes question images. The live world (Wikidata +
Wikipedia) lives in ``live`` with its queries in ``sparql`` and its page reading in
``live_html``.

Modules: ``model`` (the shared data model), ``schema``, ``names``, ``generator`` and ``works``
(entities and facts), ``templates``, ``prose`` and ``queries`` (pages and descriptions),
``images``, ``store`` and ``knowledge`` (the SQLite world and its reader), ``plots`` (notebook
00), ``commands`` (``vsearcher-lite world``).
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
