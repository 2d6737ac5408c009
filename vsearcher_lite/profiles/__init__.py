"""The profiles: one TOML file per profile, each setting that differs from the paper's with
the reason beside it, grouped by stage. ``load_profile`` is the one reader every ``for_profile``
uses, and ``with_overrides`` merges a stage's table with a caller's overrides."""

from __future__ import annotations

import functools
import tomllib
from dataclasses import MISSING, asdict, fields, is_dataclass
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


def nested_fields(cls) -> dict[str, type]:
    """The fields of ``cls`` that hold a settings dataclass of their own (``SFTConfig.eval``)."""
    return {f.name: f.default_factory for f in fields(cls)
            if f.default_factory is not MISSING and is_dataclass(f.default_factory)}


def with_overrides(cls, profile: str, preset: dict[str, Any], overrides: dict[str, Any],
                   stage: str) -> dict[str, Any]:
    """``preset`` with the caller's ``overrides`` (``None`` means "the preset's") for ``cls``.

    A sub-config field (``nested_fields``) gets a dict: the preset's table, then an override given
    as a dict or a dataclass, then flat ``<field>_<setting>`` overrides (``eval_max_tokens=200``
    sets ``eval.max_tokens`` where ``cls`` has no field of that name). Lists become tuples for
    tuple fields; a ``TypeError`` names any setting ``cls`` does not have.
    """
    given = {k: v for k, v in overrides.items() if v is not None}
    merged = {**preset, "profile": profile}
    names = {f.name for f in fields(cls)}
    for name, sub in nested_fields(cls).items():
        inner = {f.name for f in fields(sub)}
        table = dict(merged.get(name) or {})
        value = given.pop(name, None)
        table.update(asdict(value) if is_dataclass(value) else value or {})
        for key in [k for k in given if k not in names and k.startswith(f"{name}_")]:
            if key.removeprefix(f"{name}_") in inner:
                table[key.removeprefix(f"{name}_")] = given.pop(key)
        merged[name] = table
    merged.update(given)
    unknown = sorted(set(merged) - names)
    if unknown:
        raise TypeError(f"unknown {stage} setting(s): {', '.join(unknown)}")
    for f in fields(cls):
        if isinstance(merged.get(f.name), list) and str(f.type).startswith("tuple"):
            merged[f.name] = tuple(merged[f.name])
    return merged
