"""One place that builds the agent's toolbox for a run: sandbox or live, cached.

Every stage that runs the agent (teacher trajectories, GRPO rollouts, evaluation) and the
``tools`` command get their toolbox here, so they all see the same tools over the same world
and share one tool cache per run (``RUN_DIR/cache/tools.sqlite``).
"""

from __future__ import annotations

from pathlib import Path

from vsearcher_lite.cache import ToolCache
from vsearcher_lite.tools.live import make_live_backends
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
    """The toolbox for ``run_dir``.

    ``world="sandbox"`` opens the sandbox built in ``RUN_DIR/world`` (an ``InputError`` says
    which command builds it); ``world="live"`` picks live backends from the API keys that are
    set (``cache_mode="replay"`` needs no keys and serves a recorded run). ``chat`` is the
    backend of the live visit summariser; without it the offline extractive summary is used.
    ``observations`` sizes the sandbox's snippets and page summaries (``"compact"`` for the cpu
    profile: ``tools.sandbox.OBSERVATION_STYLES``); live tools show what the web APIs return.
    """
    if world == "sandbox":
        sandbox = open_world(run_dir)  # before the cache file is made: a missing world leaves none
        cache = tool_cache(run_dir, cache_mode)
        b = sandbox_backends(sandbox, observations)
        # The namespace names the world's content (and the observation style), so a rebuilt world
        # or another style never sees stale observations.
        namespace = f"tools.{sandbox.fingerprint}"
        namespace += "" if observations == "full" else f".{observations}"
        return Toolbox(b["text"], b["image"], b["reader"], b["summariser"], cache=cache,
                       top_k=top_k, namespace=namespace, run_dir=run_dir)
    if world == "live":
        cache = tool_cache(run_dir, cache_mode)
        live = make_live_backends(chat=chat, cache=cache, env_file=env_file)
        return live.toolbox(cache=cache, top_k=top_k, namespace="tools.live", run_dir=run_dir)
    raise ValueError(f"unknown world {world!r}; choose sandbox or live")
