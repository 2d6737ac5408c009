"""One place that builds the agent's toolbox for a run (sandbox or live), so every stage sees the
same tools over the same world and shares one tool cache per run.
"""

from __future__ import annotations

from pathlib import Path

from vsearcher_lite.cache import ToolCache
from vsearcher_lite.tools.sandbox import sandbox_backends
from vsearcher_lite.tools.toolbox import DEFAULT_TOP_K, Toolbox
from vsearcher_lite.world.store import open_world

CACHE_FILE = Path("cache") / "tools.sqlite"


def tool_cache(run_dir: str | Path, mode: str = "readwrite") -> ToolCache:
    return ToolCache(Path(run_dir) / CACHE_FILE, mode=mode)


def make_toolbox(
    run_dir: str | Path,
    *,
    world: str = "sandbox",
    cache_mode: str = "readwrite",
    top_k: int = DEFAULT_TOP_K,
    chat=None,
    env_file: str | None = None,
    observations: str = "full",
) -> Toolbox:
    """The toolbox for ``run_dir``: over the sandbox in ``RUN_DIR/world``, or live backends picked
    from the API keys that are set. ``chat`` writes live visit summaries; ``observations`` sizes
    the sandbox's snippets and summaries (``tools.sandbox.OBSERVATION_STYLES``)."""
    if world == "sandbox":
        sandbox = open_world(run_dir)  # before the cache file is made: a missing world leaves none
        cache = tool_cache(run_dir, cache_mode)
        b = sandbox_backends(sandbox, observations)
        # Named by the world's content and style: a rebuilt world never sees stale observations.
        namespace = f"tools.{sandbox.fingerprint}"
        namespace += "" if observations == "full" else f".{observations}"
        return Toolbox(b["text"], b["image"], b["reader"], b["summariser"], cache=cache,
                       top_k=top_k, namespace=namespace, run_dir=run_dir)
    if world == "live":
        from vsearcher_lite.live.tools import make_live_backends  # the live web: only for it

        cache = tool_cache(run_dir, cache_mode)
        live = make_live_backends(chat=chat, cache=cache, env_file=env_file)
        return live.toolbox(cache=cache, top_k=top_k, namespace="tools.live", run_dir=run_dir)
    raise ValueError(f"unknown world {world!r}; choose sandbox or live")
