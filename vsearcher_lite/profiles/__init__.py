"""The profiles: one TOML file per profile, each setting that differs from the paper's with
the reason beside it, grouped by stage. ``load_profile`` is the one reader every ``for_profile``
uses."""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path
from typing import Any

PROFILES_DIR = Path(__file__).resolve().parent
PROFILES = ("cpu", "single_gpu", "multi_gpu")
#: TOML has no null: a profile file writes ``"none"`` for a setting that is unset (``None``).
UNSET = "none"


@functools.cache
def _read_profile(name: str) -> dict:
    path = PROFILES_DIR / f"{name}.toml"
    if not path.is_file():
        raise ValueError(f"unknown profile {name!r}; choose cpu, single_gpu or multi_gpu")
    with path.open("rb") as f:
        return tomllib.load(f)


def _unset(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _unset(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unset(v) for v in value]
    return None if value == UNSET else value


def load_profile(name: str) -> dict:
    """The settings of ``profiles/<name>.toml``, by stage (``{"sft": {...}, "grpo": {...}}``; a
    table inside a stage's, such as ``[sft.eval]``, is a sub-config's); ``"none"`` reads as None.
    A fresh copy on every call; ``ValueError`` for an unknown profile.

    >>> load_profile("cpu")["sft"]["base"] is None, load_profile("multi_gpu").get("sft", {})
    (True, {})
    """
    return _unset(_read_profile(name))
