"""Where synthesis reads its knowledge from: the run's sandbox world, or the live web.

The sandbox is ``RUN_DIR/world/``, built with defaults when missing (a stage run without its
inputs builds them) and used as it is otherwise; the live world's requests are recorded in the
run's tool cache.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vsearcher_lite.runio import InputError
from vsearcher_lite.world.model import KnowledgeSource

DEFAULT_WORLD_ENTITIES = 2000  # the cpu profile's world: builds in seconds, CI-sized


def world_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "world"


def open_sandbox(run_dir: str | Path, *, n_entities: int = DEFAULT_WORLD_ENTITIES,
                 seed: int = 0) -> Any:
    """The run's sandbox world (a ``SandboxWorld``), built first when there is none."""
    from vsearcher_lite.world.store import MANIFEST, ensure_world, open_world

    path = world_dir(run_dir)
    if not (path / MANIFEST).exists():
        return ensure_world(run_dir, n_entities, seed)
    return open_world(path)


def open_source(
    run_dir: str | Path,
    world: str = "sandbox",
    *,
    n_entities: int = DEFAULT_WORLD_ENTITIES,
    seed: int = 0,
    live_options: dict | None = None,
) -> KnowledgeSource:
    """The knowledge source for a run: sandbox (default) or live."""
    if world == "sandbox":
        return open_sandbox(run_dir, n_entities=n_entities, seed=seed).knowledge
    if world == "live":
        from vsearcher_lite.cache import ToolCache
        from vsearcher_lite.live.knowledge import LiveKnowledge

        options = dict(live_options or {})
        cache = ToolCache(Path(run_dir) / "cache" / "live.sqlite")
        return LiveKnowledge(cache=cache, **options)
    raise InputError(f"unknown world {world!r}: use 'sandbox' or 'live'")
