"""CLI: ``vsearcher-lite grpo`` (multi-turn GRPO in the search environment, notebook 07).

    vsearcher-lite grpo --profile cpu                      # the cpu engine, a 5.5-minute budget on 2 cores
    vsearcher-lite grpo --profile cpu --steps 2 --eval-tasks 4
    vsearcher-lite grpo --profile single_gpu --init runs/default/sft/checkpoint
    accelerate launch --config_file configs/accelerate/zero3.yaml -m vsearcher_lite grpo --profile multi_gpu
"""

from __future__ import annotations

import argparse
import json

from vsearcher_lite.runio import InputError
from vsearcher_lite.runtime import add_device_option


def parse_mix(text: str | None) -> dict[str, float] | None:
    """``"easy:4,medium:3,hard:3"`` -> ``{"easy": 4.0, "medium": 3.0, "hard": 3.0}``.

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


def config_from_args(args):
    """The ``GRPOConfig`` a command line asks for (profile preset plus the options given)."""
    from vsearcher_lite.rl.config import GRPOConfig
    from vsearcher_lite.training.commands import preset_with

    overrides = dict(
        name=args.name, engine=args.engine, init=args.init, method=args.method, max_steps=args.steps,
        minutes=args.minutes, total_minutes=args.total_minutes, prompts_per_step=args.prompts, generations=args.generations,
        learning_rate=args.lr, mu=args.mu, beta=args.beta, temperature=args.temperature, max_tokens=args.max_tokens,
        aggregation=args.aggregation, curriculum=args.curriculum, difficulty_mix=parse_mix(args.mix),
        search_penalty=args.search_penalty, task_source=args.task_source, train_file=args.train_file,
        dynamic_sampling=args.dynamic_sampling, prescreen_samples=args.prescreen_samples,
        prescreen_tasks=args.prescreen_tasks, max_draw_rounds=args.max_draw_rounds, eval_file=args.eval_file,
        eval_max_tasks=args.eval_tasks, eval_batch=args.eval_batch, threads=args.threads, device=args.device, seed=args.seed,
        save_every=args.save_every,
        world=args.world)
    if args.fatal_aware:
        overrides["fatal_aware"] = True
    return preset_with(GRPOConfig, args, overrides)


def _cmd_grpo(args) -> int:
    from vsearcher_lite.rl.trainer import run_grpo

    config = config_from_args(args)
    m = run_grpo(args.run_dir, config)
    keys = ("steps", "reward_first_20pct", "reward_last_20pct", "format_failure_rate_last_20pct", "excluded_share",
            "heldout_accuracy_sft", "heldout_accuracy_rl", "heldout_paired_diff", "heldout_paired_se", "heldout_n",
            "train_seconds", "seconds")
    print("[grpo] " + json.dumps({k: m.get(k) for k in keys if k in m}))
    print(f"[grpo] wrote {args.run_dir}/{config.name} (checkpoint, steps.csv, rollouts.jsonl, metrics.json)")
    return 0


def register(subparsers, common) -> None:
    p = subparsers.add_parser(
        "grpo", parents=[common], help="multi-turn GRPO in the search environment (notebook 07)",
        description="Paper 2.3 / A.4: group rollouts through the ReAct loop and tools, reward = judged correctness, "
                    "group-normalised advantages, clipped ratio, optional KL, loss on policy tokens only; then SFT "
                    "vs RL on the same held-out tasks (paired difference). Profiles: cpu (own engine, 5.5 min budget), "
                    "single_gpu (TRL GRPOTrainer + LoRA / QLoRA), multi_gpu (TRL + vLLM, the paper's settings).")
    g = p.add_argument_group("training")
    g.add_argument("--init", help="starting checkpoint (default: RUN_DIR/sft/checkpoint)")
    g.add_argument("--engine", choices=("cpu", "trl"), help="cpu: this project's loop; trl: TRL's GRPOTrainer")
    g.add_argument("--method", choices=("full", "lora", "qlora"), help="full fine-tune, LoRA or 4-bit QLoRA (trl engine)")
    g.add_argument("--steps", type=int, help="stop after this many GRPO steps")
    g.add_argument("--minutes", type=float, help="stop training after this many minutes (cpu default: 3)")
    g.add_argument("--total-minutes", type=float,
                   help="cpu engine: budget of the whole command; training gets what the evaluations leave (cpu: 5.5)")
    g.add_argument("--prompts", type=int, help="tasks per step (P)")
    g.add_argument("--generations", type=int, help="rollouts per task (G)")
    g.add_argument("--lr", type=float, help="learning rate (constant)")
    g.add_argument("--mu", type=int, help="updates per batch of rollouts")
    g.add_argument("--beta", type=float, help="k3 KL coefficient to the starting model (0 disables it, as in the paper)")
    g.add_argument("--temperature", type=float, help="rollout sampling temperature")
    g.add_argument("--max-tokens", type=int, help="new tokens per assistant turn in the rollouts (default: the profile's)")
    g.add_argument("--aggregation", choices=("token", "sequence"), help="loss mean over tokens (default) or per sequence")
    g.add_argument("--curriculum", choices=("mix", "variance", "prescreen"),
                   help="task choice: difficulty mix; highest reward variance so far; or prescreen: sample a few episodes "
                        "of some tasks once with the start policy and train on those it solves sometimes but not always")
    g.add_argument("--prescreen-samples", type=int, help="with --curriculum prescreen: episodes per task (default: 4)")
    g.add_argument("--prescreen-tasks", type=int, help="with --curriculum prescreen: tasks screened (default: 64)")
    g.add_argument("--mix", help="difficulty mix of training tasks, e.g. easy:4,medium:3,hard:3 (cpu default: onehop:2,easy:2,medium:1)")
    g.add_argument("--dynamic-sampling", action=argparse.BooleanOptionalAction, default=None,
                   help="cpu engine, DAPO: drop groups whose rewards are all equal and draw more tasks until the step has "
                        "P groups with reward variance (cpu default: on)")
    g.add_argument("--max-draw-rounds", type=int,
                   help="with dynamic sampling: rollout rounds of P tasks per step at most (default: 4; cpu: 2)")
    g.add_argument("--save-every", type=int,
                   help="cpu engine: save the training state every this many steps; rerunning the same command after an "
                        "interruption resumes from it")
    g.add_argument("--fatal-aware", action="store_true", help="OpenSearch-VL: mask from the fatal step on, clamp A >= 0")
    g.add_argument("--search-penalty", type=float, nargs="?", const=0.9,
                   help="MMSearch-R1: scale a correct answer that searched (0.9 when given without a value)")
    g.add_argument("--threads", type=int, help="torch threads (cpu default: 2; 1 when another torch job shares the cores)")
    add_device_option(g)
    d = p.add_argument_group("data and evaluation")
    d.add_argument("--task-source", choices=("rl", "sft"),
                   help="training tasks: rl, the filter stage's RL pool RUN_DIR/filter/rl_tasks.jsonl (default), on seeds "
                        "SFT never saw; sft, SFT's own RUN_DIR/filter/train.jsonl")
    d.add_argument("--train-file", help="training tasks from this file instead (overrides --task-source)")
    d.add_argument("--eval-file", help="held-out tasks (default: RUN_DIR/filter/heldout.jsonl)")
    d.add_argument("--eval-tasks", type=int, help="evaluate on at most this many held-out tasks")
    d.add_argument("--eval-batch", type=int, help="held-out episodes generated together")
    d.add_argument("--all-difficulties", action="store_true", help="evaluate hard tasks too (cpu default: onehop+easy+medium)")
    d.add_argument("--no-eval", action="store_true", help="skip the SFT vs RL evaluation")
    d.add_argument("--name", help="output folder RUN_DIR/<name> (default: grpo)")
    p.set_defaults(func=_cmd_grpo)
