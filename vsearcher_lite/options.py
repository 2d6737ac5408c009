"""Command-line options from dataclass fields: a setting is spelled once, as a field made
with ``option`` (its help, flags and argparse extras), and ``add_config_options`` turns the
fields a command names into options that default to None (the profile's value stands).
"""

from __future__ import annotations

import argparse
import copy
import functools
import types
import typing
from dataclasses import field, fields
from typing import Any

from vsearcher_lite.profiles import nested_fields
from vsearcher_lite.runio import InputError


def option(default: Any, text: str, *flags: str, **extra: Any) -> Any:
    """A dataclass field that is also a command-line option: help, flags (default ``--field-name``)
    and argparse extras; ``parse`` reads the option's text in ``options_given``, so a bad value is
    the command's one-line ``InputError``."""
    meta = {"help": text, "flags": flags, **extra}
    if isinstance(default, (dict, list)):
        return field(default_factory=functools.partial(copy.copy, default), metadata=meta)
    return field(default=default, metadata=meta)


def positive(text: str) -> int:
    """An ``argparse`` type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value


def positive_number(text: str) -> float:
    """An ``argparse`` type: a number above 0."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def parse_mix(text: str | None) -> dict[str, float] | None:
    """``"easy:4,medium:3,hard:3"`` -> ``{"easy": 4.0, "medium": 3.0, "hard": 3.0}`` (a weight
    left out is 1).

    >>> parse_mix("easy:4,medium:3"), parse_mix(None)
    ({'easy': 4.0, 'medium': 3.0}, None)
    """
    if not text:
        return None
    mix = {}
    for item in text.split(","):
        name, sep, weight = item.strip().partition(":")
        try:
            mix[name.strip()] = float(weight) if sep else 1.0
        except ValueError:
            raise InputError(f"--mix {text!r}: write it as easy:4,medium:3,hard:3") from None
    return mix


def _mix_option(text: str) -> dict[str, float] | None:
    try:
        return parse_mix(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _plain_type(hint: Any) -> Any:
    """The type behind ``X | None``."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    optional = typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1
    return args[0] if optional else hint


def add_config_options(group, cls, names: tuple[str, ...], *, prefix: str = "") -> None:
    """Add an option for each of ``names``, fields of ``cls`` made with ``option`` (``sub.name``:
    a sub-config's field, dest ``sub_name``). The type follows the field's (a bool is
    ``--x/--no-x``, a dict a ``--mix``-style list of weights); every option defaults to None, so
    the profile's value stands unless the option is given."""
    hints = typing.get_type_hints(cls)
    by_name = {f.name: f for f in fields(cls)}
    for name in names:
        if "." in name:
            sub, inner = name.split(".", 1)
            add_config_options(group, nested_fields(cls)[sub], (inner,), prefix=f"{prefix}{sub}_")
            continue
        meta = by_name[name].metadata
        flags = meta["flags"] or ("--" + name.replace("_", "-"),)
        kind = _plain_type(hints[name])
        options: dict[str, Any] = {"dest": prefix + name, "default": None, "help": meta["help"]}
        if "action" in meta:
            group.add_argument(*flags, **options, action=meta["action"], const=meta["const"])
            continue
        if "type" in meta:
            options["type"] = meta["type"]
        elif kind is bool:
            options["action"] = argparse.BooleanOptionalAction
        elif "parse" in meta or kind is Any:
            pass  # text
        elif kind is dict or typing.get_origin(kind) is dict:
            options["type"] = _mix_option
        else:
            options["type"] = kind
        if "choices" in meta:
            options["choices"] = meta["choices"]
        elif kind is not bool:  # the flag's name, as argparse writes it for a plain option
            options["metavar"] = meta.get("metavar", flags[0][2:].replace("-", "_").upper())
        if "const" in meta:  # the flag alone means this value
            options.update(nargs="?", const=meta["const"])
        group.add_argument(*flags, **options)


def options_given(args: argparse.Namespace, names: tuple[str, ...], cls=None, *,
                  prefix: str = "") -> dict[str, Any]:
    """The settings of ``names`` that the command line gave; with ``cls``, a field's ``parse``
    reads its text."""
    parse = {f.name: f.metadata.get("parse") for f in fields(cls)} if cls else {}
    given = {}
    for name in names:
        value, read = getattr(args, prefix + name.replace(".", "_"), None), parse.get(name)
        if value is not None:
            given[name.replace(".", "_")] = read(value) if read else value
    return given
