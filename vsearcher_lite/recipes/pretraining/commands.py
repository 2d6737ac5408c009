"""CLI: ``vsearcher-lite pretrain`` rebuilds the cpu profile's tiny base (not part of a normal
run: the base ships in ``data/tiny_base``; only ``--out data/tiny_base`` replaces it)."""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import replace
from pathlib import Path

from vsearcher_lite.options import add_config_options, options_given
from vsearcher_lite.recipes.pretraining.pretrain import (
    CONTINUING_RECIPES,
    RECIPES,
    PretrainConfig,
    ProbeConfig,
    pretrain,
    probe_checkpoint,
)
from vsearcher_lite.runio import InputError
from vsearcher_lite.runtime import add_device_option

#: Where a training run keeps its state, inside --run-dir.
STATE_DIR = "pretrain_state"
#: ``PretrainConfig``'s options, in their --help order around ``--device`` and the recipe flags.
OPTIONS = ("out_dir", "max_minutes", "max_steps", "threads", "save_every")
PROBE_OPTIONS = ("probes.n_per_kind", "probes.agent_tasks", "init_from")
CLI_OPTIONS = OPTIONS + PROBE_OPTIONS + ("progress",)


def canonical_command(args) -> str:
    """The command line that reproduces this run (only the options that were given)."""
    parts = ["vsearcher-lite", "pretrain"]
    if args.probe_only:
        parts.append("--probe-only")
    if args.out_dir:
        parts += ["--out", args.out_dir]
    if not args.out_dir or args.run_dir != "runs/default":
        parts += ["--run-dir", args.run_dir]
    if args.init_from:
        parts += ["--init", args.init_from]
    if args.recipe and args.recipe != "full":
        parts += ["--recipe", args.recipe]
    for flag, value in (("--minutes", args.max_minutes), ("--max-steps", args.max_steps),
                        ("--threads", args.threads), ("--save-every", args.save_every),
                        ("--probe-n", args.probes_n_per_kind),
                        ("--agent-tasks", args.probes_agent_tasks)):
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


def config_from_args(args) -> PretrainConfig:
    """The recipe's (or the smoke run's) ``PretrainConfig`` with the options given."""
    recipe = args.recipe or "full"
    if recipe in CONTINUING_RECIPES and not args.init_from:
        raise InputError(f"--recipe {recipe} continues a checkpoint: give it one with --init DIR")
    if recipe != "full" and args.smoke:
        raise InputError("--smoke has its own short stages; it does not combine with "
                         f"--recipe {recipe}")
    if args.init_from:
        _check_init(args.init_from)
    given = options_given(args, CLI_OPTIONS)
    probes = {k[len("probes_"):]: given.pop(k) for k in list(given) if k.startswith("probes_")}
    out = given.pop("out_dir", None) or str(Path(args.run_dir) / "pretrain")
    # progress lines unless --quiet, even in the smoke run (quiet as a library preset)
    given.update(seed=args.seed, command=canonical_command(args),
                 progress=given.get("progress", True))
    if args.device is not None:
        given["device"] = args.device
    if args.smoke:
        config = PretrainConfig.smoke(out, **given)
    else:
        config = PretrainConfig.for_recipe(recipe, out, **given)
    config.probes = replace(config.probes, **probes)
    # resumable: an interrupted run's state waits in the run folder for the same command
    config.state_dir = str(Path(args.run_dir) / STATE_DIR)
    # the agent probe's sandbox tasks live in the run folder
    probing = config.probes.agent_tasks > 0 or (args.smoke and "agent_tasks" in probes)
    config.probes.agent_run_dir = str(Path(args.run_dir)) if probing else None
    return config


def probe_options_from_args(args) -> dict:
    """Keyword arguments of ``probe_checkpoint`` for ``pretrain --probe-only``."""
    if not args.init_from:
        raise InputError("--probe-only probes an existing checkpoint: give it with --init DIR")
    training = (("--out", args.out_dir), ("--recipe", args.recipe),
                ("--minutes", args.max_minutes), ("--max-steps", args.max_steps),
                ("--smoke", args.smoke))
    refused = ", ".join(flag for flag, given in training if given)
    if refused:
        raise InputError("--probe-only rewrites the probes of --init in place and trains nothing; "
                         f"drop {refused}")
    _check_init(args.init_from)
    given = options_given(args, CLI_OPTIONS)
    agent_tasks = given.get("probes_agent_tasks", ProbeConfig.agent_tasks)
    return {"agent_tasks": agent_tasks,
            "agent_run_dir": str(Path(args.run_dir)) if agent_tasks > 0 else None,
            "n_per_kind": given.get("probes_n_per_kind"),
            "threads": given.get("threads", PretrainConfig.threads),
            "device": args.device or "auto", "command": canonical_command(args),
            "log": None if given.get("progress", True) else (lambda msg: None)}


def _cmd_probe_only(args) -> int:
    metrics = probe_checkpoint(args.init_from, **probe_options_from_args(args))
    return _print_summary(metrics, ("probes", "probe_run", "checkpoint_bytes"), args.init_from)


def _print_summary(metrics: dict, keys: tuple[str, ...], out_dir: str) -> int:
    print(json.dumps({**{k: metrics[k] for k in keys}, "out_dir": out_dir}, indent=2))
    return 0


def _cmd_pretrain(args) -> int:
    if args.probes_agent_tasks is not None and args.probes_agent_tasks < 0:
        raise InputError("--agent-tasks must be 0 (skip the agent probe) or more, "
                         f"got {args.probes_agent_tasks}")
    if args.probe_only:
        return _cmd_probe_only(args)
    if args.profile != "cpu":
        print("vsearcher-lite pretrain: the tiny base is the cpu profile's; other profiles start "
              "from a real Qwen3-VL checkpoint. Training it anyway.", file=sys.stderr)
    config = config_from_args(args)
    keys = ("total_steps", "train_seconds", "loss_first", "loss_last", "probes", "checkpoint_bytes")
    return _print_summary(pretrain(config), keys, config.out_dir)


def register(subparsers, common) -> None:
    p = subparsers.add_parser(
        "pretrain", parents=[common],
        help="pretrain the cpu profile's tiny base VLM (data/tiny_base; not in a normal run)",
        description="Train the tokenizer and a tiny Qwen3-VL from scratch on copy-dense text from "
                    "sandbox worlds other than the evaluation world, probe it (copying, page "
                    "reading, the base model as an agent), and save it with its model card. "
                    "Output: RUN_DIR/pretrain/ unless --out is given; only --out data/tiny_base "
                    "replaces the shipped base. The state of a run under way is kept in "
                    "RUN_DIR/pretrain_state/ and rerunning the same command resumes it. "
                    "--probe-only re-runs the probes of a checkpoint.")
    add_config_options(p, PretrainConfig, OPTIONS)
    add_device_option(p)
    add_config_options(p, PretrainConfig, PROBE_OPTIONS)
    p.add_argument("--recipe", choices=tuple(RECIPES),
                   help="full (default): the base from scratch, stages A-E (about 2.6 hours on 2 "
                        "cores; resumable: rerun the command after an interruption); continue: "
                        "one stage A from --init; fresh: "
                        "40 minutes from --init on freshly named documents; long: the fresh "
                        "documents in rows of 4,096 tokens, 1,000 steps from --init (the shipped "
                        "base's last run: --init data/tiny_base --recipe long --out "
                        "data/tiny_base)")
    p.add_argument("--probe-only", action="store_true",
                   help="train nothing: re-run every probe on --init and rewrite its metrics.json "
                        "probes and MODEL_CARD.md (agent tasks from --run-dir)")
    p.add_argument("--smoke", action="store_true",
                   help="a seconds-long run on two small worlds (CI)")
    add_config_options(p, PretrainConfig, ("progress",))
    p.set_defaults(func=_cmd_pretrain)
