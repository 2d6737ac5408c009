"""Shared fixtures. ``small_world``: one sandbox world built once per test session."""

from __future__ import annotations

import os

import pytest

SMALL_WORLD_ENTITIES = 300

# `make test` runs two worker processes on two cores: each torch process (and each notebook kernel
# it starts, which inherits the environment) takes one thread, where two threads each would spin
# against the other worker's.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("VSEARCHER_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def small_world(tmp_path_factory):
    """A built 300-entity sandbox (seed 0) in its own run folder: ``SandboxWorld``.

    Read-only by convention: tests that change files build their own world.
    """
    from vsearcher_lite.world import ensure_world

    run = tmp_path_factory.mktemp("small_world_run")
    return ensure_world(run, SMALL_WORLD_ENTITIES, 0, workers=1)
