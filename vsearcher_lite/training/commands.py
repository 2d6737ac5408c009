"""CLI: ``vsearcher-lite sft`` (supervised fine-tuning on the accepted teacher trajectories).

Multi-GPU runs go through accelerate with a shipped config, for example::

    accelerate launch --config_file configs/accelerate/fsdp.yaml -m vsearcher_lite sft --profile multi_gpu
    accelerate launch --config_file configs/accelerate/zero3.yaml -m vsearcher_lite sft --profile multi_gpu
"""

from __future__ import annotations

import json

from vsearcher_lite.runio import InputError
from vsearcher_lite.runtime import add_device_option


def config_from_args(args):
    """The ``SFTConfig`` a command line asks for (profile preset plus the options given)."""
    from vsearcher_lite.training.config import SFTConfig

    overrides = dict(
        base=args.base,
        method=args.method,
        dtype=args.dtype,
        learning_rate=args.lr,
        epochs=args.epochs,
        max_steps=args.max_steps,
        min_steps=args.min_steps,
        save_every=args.save_every,
        minutes=args.minutes,
        total_minutes=args.total_minutes,
        batch_size=args.batch_size,
        grad_accum=args.grad_accum,
        max_length=args.max_length,
        answer_weight=args.answer_weight,
        copy_weight=args.copy_weight,
        train_file=args.train_file,
        max_train_samples=args.max_train_samples,
        samples_per_task=args.samples,
        eval_file=args.eval_file,
        eval_max_tasks=args.eval_tasks,
        eval_repeat_guard=args.repeat_guard,
        threads=args.threads,
        device=args.device,
        seed=args.seed,
        world=args.world,
        name=args.name,
    )
    if args.markup_init is not None:
        overrides["init_markup_embeddings"] = args.markup_init
    return preset_with(SFTConfig, args, overrides)


def preset_with(config_cls, args, overrides: dict):
    """``config_cls``'s preset for ``--profile`` with the command line's settings and the evaluation
    switches every training command has (``--no-eval``, ``--all-difficulties``); a setting out of
    range is an ``InputError`` (one line, no traceback)."""
    if args.no_eval:
        overrides["evaluate"] = False
    if args.all_difficulties:
        overrides["eval_difficulties"] = ()
    try:
        return config_cls.for_profile(args.profile, **overrides)
    except (ValueError, TypeError) as exc:
        raise InputError(str(exc)) from None


def _cmd_sft(args) -> int:
    from vsearcher_lite.training.sft import run_sft

    config = config_from_args(args)
    m = run_sft(args.run_dir, config)
    keys = ("train_loss_first", "train_loss_last", "steps", "train_seconds", "heldout_format_valid_rate",
            "heldout_accuracy", "base_format_valid_rate", "base_accuracy", "heldout_mean_tool_calls", "seconds")
    print("[sft] " + json.dumps({k: m.get(k) for k in keys if k in m}))
    print(f"[sft] wrote {args.run_dir}/{config.name} (checkpoint, loss.csv, metrics.json)")
    return 0


def register(subparsers, common) -> None:
    p = subparsers.add_parser(
        "sft", parents=[common], help="supervised fine-tuning on the teacher trajectories (notebook 06)",
        description="Paper 2.2: SFT on accepted teacher trajectories with the loss on assistant turns only; "
                    "then base vs SFT on the held-out tasks. Profile presets: cpu (tiny base, fp32, 3 min), "
                    "single_gpu (LoRA / QLoRA), multi_gpu (full bf16 under accelerate launch).")
    g = p.add_argument_group("training")
    g.add_argument("--base", help="base model folder or hub id (default: the profile's; cpu: data/tiny_base)")
    g.add_argument("--method", choices=("full", "lora", "qlora"), help="full fine-tune, LoRA or 4-bit QLoRA")
    g.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), help="training dtype")
    g.add_argument("--lr", type=float, help="peak learning rate")
    g.add_argument("--epochs", type=float, help="epochs over the trajectories")
    g.add_argument("--max-steps", type=int, help="stop after this many optimizer steps")
    g.add_argument("--save-every", type=int,
                   help="save a resumable checkpoint every this many steps; rerunning the same command after an "
                        "interruption resumes from the last one")
    g.add_argument("--min-steps", type=int,
                   help="train at least this many steps even when the time budget is spent first, on a slow "
                        "machine (cpu default: 200; 0 = stop on time)")
    g.add_argument("--minutes", type=float, help="stop training after this many minutes (cpu default: 2.75)")
    g.add_argument("--total-minutes", type=float,
                   help="budget of the whole command: the base is evaluated first and training gets what the two "
                        "evaluations leave (cpu default: 2.8)")
    g.add_argument("--batch-size", type=int, help="trajectories per device per step")
    g.add_argument("--grad-accum", type=int, help="gradient accumulation steps")
    g.add_argument("--max-length", type=int, help="drop trajectories longer than this many tokens")
    g.add_argument("--answer-weight", type=float,
                   help="loss weight of answer-bearing assistant tokens (1 = plain loss; cpu default 10; GPU profiles 1)")
    g.add_argument("--copy-weight", type=float,
                   help="loss weight of assistant tokens that copy the context: names, URLs, the restated question "
                        "(default 1 = plain loss)")
    g.add_argument("--markup-init", dest="markup_init", action="store_true", default=None,
                   help="start the markup tokens' embeddings from plain-text cues (cpu default)")
    g.add_argument("--no-markup-init", dest="markup_init", action="store_false")
    g.add_argument("--threads", type=int, help="torch threads (cpu default: 2)")
    add_device_option(g)
    d = p.add_argument_group("data and evaluation")
    d.add_argument("--train-file", help="TRL chat JSONL (default: RUN_DIR/trajectories/export/sft_trl.jsonl)")
    d.add_argument("--max-train-samples", type=int, help="use at most this many trajectories")
    d.add_argument("--samples", type=int, help="teacher samples per task when trajectories must be generated")
    d.add_argument("--eval-file", help="held-out task JSONL (default: RUN_DIR/filter/heldout.jsonl)")
    d.add_argument("--eval-tasks", type=int, help="evaluate on at most this many held-out tasks")
    d.add_argument("--repeat-guard", type=int, metavar="N",
                   help="evaluation decoding: never write a block of N or more tokens twice in a row within a reply "
                        "(0 = off, the default)")
    d.add_argument("--all-difficulties", action="store_true", help="evaluate hard tasks too (cpu default: onehop+easy+medium)")
    d.add_argument("--no-eval", action="store_true", help="skip the base vs SFT evaluation")
    d.add_argument("--name", help="output folder RUN_DIR/<name> and evaluation name (default: sft)")
    p.set_defaults(func=_cmd_sft)
