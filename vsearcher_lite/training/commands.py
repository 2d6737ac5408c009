"""CLI: ``vsearcher-lite sft`` (supervised fine-tuning on the accepted teacher trajectories).

The options are ``SFTConfig``'s fields (``options.add_config_options``). Multi-GPU runs go
through accelerate with a shipped config (``configs/accelerate/fsdp.yaml`` or ``zero3.yaml``)::

    accelerate launch --config_file configs/accelerate/fsdp.yaml \
        -m vsearcher_lite sft --profile multi_gpu
"""

from __future__ import annotations

import json

from vsearcher_lite.options import add_config_options, options_given
from vsearcher_lite.runio import InputError
from vsearcher_lite.runtime import add_device_option


def config_from_args(args):
    """The ``SFTConfig`` a command line asks for (profile preset plus the options given)."""
    from vsearcher_lite.training.config import CLI_DATA_OPTIONS, CLI_OPTIONS, SFTConfig

    return preset_with(SFTConfig, args, options_given(args, CLI_OPTIONS + CLI_DATA_OPTIONS))


def preset_with(config_cls, args, overrides: dict):
    """``config_cls``'s preset for ``--profile`` with the command line's settings and evaluation
    switches; a setting out of range is an ``InputError``."""
    if args.no_eval:
        overrides["evaluate"] = False
    if args.all_difficulties:
        overrides["eval_difficulties"] = ()
    overrides.update(seed=args.seed, world=args.world, device=args.device)
    try:
        return config_cls.for_profile(args.profile, **overrides)
    except (ValueError, TypeError) as exc:
        raise InputError(str(exc)) from None


def add_eval_switches(group, no_eval_help: str) -> None:
    """The evaluation switches every training command has (``preset_with`` reads them)."""
    group.add_argument("--all-difficulties", action="store_true",
                       help="evaluate hard tasks too (cpu default: onehop+easy+medium)")
    group.add_argument("--no-eval", action="store_true", help=no_eval_help)


def _cmd_sft(args) -> int:
    from vsearcher_lite.training.sft import run_sft

    config = config_from_args(args)
    m = run_sft(args.run_dir, config)
    keys = ("train_loss_first", "train_loss_last", "steps", "train_seconds",
            "heldout_format_valid_rate", "heldout_accuracy", "base_format_valid_rate",
            "base_accuracy", "heldout_mean_tool_calls", "seconds")
    print("[sft] " + json.dumps({k: m.get(k) for k in keys if k in m}))
    print(f"[sft] wrote {args.run_dir}/{config.name} (checkpoint, loss.csv, metrics.json)")
    return 0


def register(subparsers, common) -> None:
    from vsearcher_lite.training.config import CLI_DATA_OPTIONS, CLI_OPTIONS, SFTConfig

    p = subparsers.add_parser(
        "sft", parents=[common],
        help="supervised fine-tuning on the teacher trajectories (notebook 06)",
        description="Paper 2.2: SFT on accepted teacher trajectories with the loss on assistant "
                    "turns only; then base vs SFT on the held-out tasks. Profiles "
                    "(vsearcher_lite/profiles/): cpu (tiny base, fp32, 3 min), single_gpu "
                    "(LoRA / QLoRA), multi_gpu (full bf16 under accelerate launch).")
    g = p.add_argument_group("training")
    add_config_options(g, SFTConfig, CLI_OPTIONS)
    add_device_option(g)
    d = p.add_argument_group("data and evaluation")
    add_config_options(d, SFTConfig, CLI_DATA_OPTIONS)
    add_eval_switches(d, "skip the base vs SFT evaluation")
    p.set_defaults(func=_cmd_sft)
