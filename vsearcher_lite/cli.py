"""The ``vsearcher-lite`` command: one subcommand per stage, in pipeline order.

Each stage module exposes ``register(subparsers, common)``: it adds its subcommand with
``subparsers.add_parser(name, parents=[common], ...)`` and sets ``func=<handler>``, a function
of the parsed ``argparse.Namespace`` that returns an exit status. The handlers call the same
library functions as the notebooks.

Errors a user can fix (``InputError``, a missing key, an unreachable URL) are printed as one
line on stderr with exit status 2, never as a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from vsearcher_lite.runio import InputError

PROFILES = ("cpu", "single_gpu", "multi_gpu")
WORLDS = ("sandbox", "live")

# Modules that register subcommands, in the order their commands appear in --help (the package
# docstring maps each command to its module).
COMMAND_MODULES = tuple(f"vsearcher_lite.{m}" for m in (
    "world.commands", "synthesis.commands", "agent.commands", "training.commands", "rl.commands",
    "evaluation.commands", "tools.commands", "pretraining.commands", "bench", "notebooks",
    "reference"))


def common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    g = common.add_argument_group("common options")
    g.add_argument("--run-dir", default="runs/default",
                   help="folder of this run (default: runs/default)")
    g.add_argument("--profile", choices=PROFILES, default="cpu",
                   help="compute profile (default: cpu)")
    g.add_argument("--world", choices=WORLDS, default="sandbox",
                   help="sandbox web or live web (default: sandbox)")
    g.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    return common


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vsearcher-lite",
        description="A runnable reproduction of VSearcher: data synthesis, teacher trajectories, "
                    "SFT, GRPO, evaluation.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    common = common_options()
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except InputError as exc:
        print(f"vsearcher-lite {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"vsearcher-lite {args.command}: interrupted; rerun the same command to resume",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
