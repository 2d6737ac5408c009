"""The ``vsearcher-lite`` command: one subcommand per stage, in pipeline order.

Each stage module's ``register(subparsers, common)`` adds its subcommand and sets ``func``, a
handler that calls the same library functions as the notebooks and returns an exit status.
Errors a user can fix (``InputError``) are one line on stderr with exit status 2, never a
traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from vsearcher_lite.runio import InputError

PROFILES = ("cpu", "single_gpu", "multi_gpu")
WORLDS = ("sandbox", "live")

# Modules that register subcommands, in --help order (the package docstring maps them).
COMMAND_MODULES = tuple(f"vsearcher_lite.{m}" for m in (
    "world.commands", "synthesis.commands", "synthesis.chains", "agent.commands",
    "training.commands", "rl.commands", "evaluation.commands", "backends.commands",
    "recipes.pretraining.commands", "sandbox_bench", "notebooks", "reference_run"))


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
