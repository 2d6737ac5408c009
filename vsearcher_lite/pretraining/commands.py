"""CLI: ``vsearcher-lite pretrain`` rebuilds the cpu profile's tiny base.

Not part of a normal run: the base ships in ``data/tiny_base``. By default the output goes to
``RUN_DIR/pretrain/``; only ``--out data/tiny_base`` replaces the shipped base. ``--recipe``
picks the stages (``full`` from scratch, ``continue`` from ``--init``); ``--probe-only`` trains
nothing and re-measures the probes of the checkpoint ``--init`` in place.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from vsearcher_lite.runio import InputError
from vsearcher_lite.runtime import add_device_option


def _positive(kind):
    """An argparse type: a positive ``kind`` (argparse makes the error a one-line usage error)."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or value <= 0:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
        return value

    parse.__name__ = kind.__name__
    return parse


def canonical_command(args) -> str:
    """The command line that reproduces this run (only the options that were given)."""
    parts = ["vsearcher-lite", "pretrain"]
    if args.probe_only:
        parts.append("--probe-only")
    if args.out:
        parts += ["--out", args.out]
    if not args.out or args.run_dir != "runs/default":
        parts += ["--run-dir", args.run_dir]
    if args.init:
        parts += ["--init", args.init]
    if args.recipe and args.recipe != "full":
        parts += ["--recipe", args.recipe]
    for flag, value in (("--minutes", args.minutes), ("--max-steps", args.max_steps),
                        ("--threads", args.threads), ("--probe-n", args.probe_n),
                        ("--agent-tasks", args.agent_tasks)):
        if value is not None:
            parts += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    if args.seed:
        parts += ["--seed", str(args.seed)]
    if args.smoke:
        parts.append("--smoke")
    return " ".join(shlex.quote(p) for p in parts)


def _check_init(init: str) -> None:
    if not (Path(init) / "config.json").is_file():
        raise InputError(f"--init {init}: no checkpoint there (no config.json)")


def config_from_args(args):
    """The ``PretrainConfig`` a parsed command line asks for."""
    from vsearcher_lite.pretraining.pretrain import PretrainConfig

    recipe = args.recipe or "full"
    if recipe in ("continue", "fresh") and not args.init:
        raise InputError(f"--recipe {recipe} continues a checkpoint: give it one with --init DIR")
    if recipe != "full" and args.smoke:
        raise InputError("--smoke has its own short stages; it does not combine with "
                         f"--recipe {recipe}")
    if args.init:
        _check_init(args.init)
    out = args.out or str(Path(args.run_dir) / "pretrain")
    command = canonical_command(args)
    if args.smoke:
        config = PretrainConfig.smoke(out, seed=args.seed, command=command)
    else:
        config = PretrainConfig.for_recipe(recipe, out, init_from=args.init, seed=args.seed,
                                           command=command)
        if args.agent_tasks is not None:
            config.probes.agent_tasks = int(args.agent_tasks)
        # the agent probe's sandbox tasks live in the run folder (recorded only when it runs)
        probing = config.probes.agent_tasks > 0
        config.probes.agent_run_dir = str(Path(args.run_dir)) if probing else None
    if args.minutes is not None:
        config.max_minutes = float(args.minutes)
    if args.max_steps is not None:
        config.max_steps = int(args.max_steps)
    if args.threads is not None:
        config.threads = int(args.threads)
    if args.device is not None:
        config.device = args.device
    if args.init:
        config.init_from = args.init
    if args.probe_n is not None:
        config.probes.n_per_kind = int(args.probe_n)
    if args.smoke and args.agent_tasks is not None:
        config.probes.agent_tasks = int(args.agent_tasks)
        config.probes.agent_run_dir = str(Path(args.run_dir))
    config.progress = not args.quiet
    return config


def probe_options_from_args(args) -> dict:
    """Keyword arguments of ``probe_checkpoint`` for ``pretrain --probe-only`` (training options
    refused)."""
    if not args.init:
        raise InputError("--probe-only probes an existing checkpoint: give it with --init DIR")
    training = (("--out", args.out), ("--recipe", args.recipe), ("--minutes", args.minutes),
                ("--max-steps", args.max_steps), ("--smoke", args.smoke))
    refused = ", ".join(flag for flag, given in training if given)
    if refused:
        raise InputError("--probe-only rewrites the probes of --init in place and trains nothing; "
                         f"drop {refused}")
    _check_init(args.init)
    agent_tasks = args.agent_tasks if args.agent_tasks is not None else 20
    return {"agent_tasks": agent_tasks,
            "agent_run_dir": str(Path(args.run_dir)) if agent_tasks > 0 else None,
            "n_per_kind": args.probe_n, "threads": args.threads or 2,
            "device": args.device or "auto", "command": canonical_command(args),
            "log": (lambda msg: None) if args.quiet else None}


def _cmd_probe_only(args) -> int:
    from vsearcher_lite.pretraining.pretrain import probe_checkpoint

    metrics = probe_checkpoint(args.init, **probe_options_from_args(args))
    summary = {k: metrics[k] for k in ("probes", "probe_run", "checkpoint_bytes")}
    summary["out_dir"] = args.init
    print(json.dumps(summary, indent=2))
    return 0


def _cmd_pretrain(args) -> int:
    if args.agent_tasks is not None and args.agent_tasks < 0:
        raise InputError("--agent-tasks must be 0 (skip the agent probe) or more, "
                         f"got {args.agent_tasks}")
    from vsearcher_lite.pretraining.pretrain import pretrain

    if args.probe_only:
        return _cmd_probe_only(args)
    if args.profile != "cpu":
        print("vsearcher-lite pretrain: the tiny base is the cpu profile's; other profiles start "
              "from a real Qwen3-VL checkpoint. Training it anyway.", file=sys.stderr)
    config = config_from_args(args)
    metrics = pretrain(config)
    keys = ("total_steps", "train_seconds", "loss_first", "loss_last", "probes", "checkpoint_bytes")
    summary = {k: metrics[k] for k in keys}
    summary["out_dir"] = config.out_dir
    print(json.dumps(summary, indent=2))
    return 0


def register(subparsers, common) -> None:
    p = subparsers.add_parser(
        "pretrain", parents=[common],
        help="pretrain the cpu profile's tiny base VLM (data/tiny_base; not in a normal run)",
        description="Train the tokenizer and a tiny Qwen3-VL from scratch on copy-dense text from "
                    "sandbox worlds other than the evaluation world, probe it (copying, page "
                    "reading, the base model as an agent), and save it with its model card. "
                    "Output: RUN_DIR/pretrain/ unless --out is given; only --out data/tiny_base "
                    "replaces the shipped base. --probe-only re-runs the probes of a checkpoint.")
    add = p.add_argument
    add("--out", help="output folder (default: RUN_DIR/pretrain)")
    add("--minutes", type=_positive(float), help="clock cap on training, shared by the stages "
        "(default: 45 + 15, a safety net: the step caps end the full run first)")
    add("--max-steps", type=_positive(int),
        help="step cap on training, shared by the stages (default: 1800 + 500)")
    add("--threads", type=_positive(int), help="torch threads (default: 2)")
    add_device_option(p)
    add("--probe-n", type=_positive(int), help="probe documents per probe kind (default: 150)")
    add("--agent-tasks", type=int, help="held-out tasks for the base model's agent probe; 0 skips "
        "it (default: 20; 0 with --recipe continue or fresh)")
    add("--init", help="start from this checkpoint (tokenizer and weights), not from scratch")
    add("--recipe", choices=("full", "continue", "fresh"),
        help="full (default): stages A + B; continue: one stage A from --init; fresh: 40 minutes "
             "from --init on freshly named documents (the shipped base's last runs: "
             "--init data/tiny_base --recipe fresh --out data/tiny_base)")
    add("--probe-only", action="store_true", help="train nothing: re-run every probe on --init "
        "and rewrite its metrics.json probes and MODEL_CARD.md (agent tasks from --run-dir)")
    add("--smoke", action="store_true", help="a seconds-long run on two small worlds (CI)")
    add("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=_cmd_pretrain)
