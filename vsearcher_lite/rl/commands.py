"""CLI: ``vsearcher-lite grpo`` (multi-turn GRPO in the search environment, notebook 07); the
options are ``GRPOConfig``'s fields (``options.add_config_options``).

    vsearcher-lite grpo --profile cpu         # the cpu engine, a 5.5-minute budget on 2 cores
    vsearcher-lite grpo --profile cpu --steps 2 --eval-tasks 4
    vsearcher-lite grpo --profile single_gpu --init runs/default/sft/checkpoint
    accelerate launch --config_file configs/accelerate/zero3.yaml \
        -m vsearcher_lite grpo --profile multi_gpu
"""

from __future__ import annotations

import json

from vsearcher_lite.options import add_config_options, options_given, parse_mix
from vsearcher_lite.runtime import add_device_option

__all__ = ["config_from_args", "parse_mix", "register"]


def config_from_args(args):
    """The ``GRPOConfig`` a command line asks for (profile preset plus the options given)."""
    from vsearcher_lite.rl.config import CLI_DATA_OPTIONS, CLI_OPTIONS, GRPOConfig
    from vsearcher_lite.training.commands import preset_with

    return preset_with(GRPOConfig, args, options_given(args, CLI_OPTIONS + CLI_DATA_OPTIONS))


def _cmd_grpo(args) -> int:
    from vsearcher_lite.rl.grpo import run_grpo

    config = config_from_args(args)
    m = run_grpo(args.run_dir, config)
    keys = ("steps", "reward_first_20pct", "reward_last_20pct", "format_failure_rate_last_20pct",
            "excluded_share", "heldout_accuracy_sft", "heldout_accuracy_rl", "heldout_paired_diff",
            "heldout_paired_se", "heldout_n", "train_seconds", "seconds")
    print("[grpo] " + json.dumps({k: m.get(k) for k in keys if k in m}))
    print(f"[grpo] wrote {args.run_dir}/{config.name} "
          "(checkpoint, steps.csv, rollouts.jsonl, metrics.json)")
    return 0


def register(subparsers, common) -> None:
    from vsearcher_lite.rl.config import CLI_DATA_OPTIONS, CLI_OPTIONS, GRPOConfig
    from vsearcher_lite.training.commands import add_eval_switches

    p = subparsers.add_parser(
        "grpo", parents=[common], help="multi-turn GRPO in the search environment (notebook 07)",
        description="Paper 2.3 / A.4: group rollouts through the ReAct loop and tools, reward = "
                    "judged correctness, group-normalised advantages, clipped ratio, optional KL, "
                    "loss on policy tokens only; then SFT vs RL on the same held-out tasks (paired "
                    "difference). Profiles (vsearcher_lite/profiles/): cpu (own engine, 5.5 min "
                    "budget), single_gpu (TRL GRPOTrainer + LoRA / QLoRA), multi_gpu (TRL + vLLM, "
                    "the paper's settings).")
    g = p.add_argument_group("training")
    add_config_options(g, GRPOConfig, CLI_OPTIONS)
    add_device_option(g)
    d = p.add_argument_group("data and evaluation")
    add_config_options(d, GRPOConfig, CLI_DATA_OPTIONS)
    add_eval_switches(d, "skip the SFT vs RL evaluation")
    p.set_defaults(func=_cmd_grpo)
