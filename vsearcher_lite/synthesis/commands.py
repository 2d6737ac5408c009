"""CLI: ``seeds``, ``inject-text``, ``inject-image``, ``filter``, ``trajectories`` (the synthesis
stages in order).

Each command calls the stage's library function (``run_seeds``, ``run_inject_text``,
``run_inject_image``, ``run_filter``, ``generate_trajectories``), which builds missing inputs with
defaults, writes ``RUN_DIR/<stage>/metrics.json`` and resumes where an interrupted run stopped.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

from vsearcher_lite.options import add_config_options
from vsearcher_lite.runio import InputError
from vsearcher_lite.synthesis.trajectories import (
    CLI_OPTIONS,
    TrajectoryConfig,
    run_trajectories_command,
)


def parse_mix(text: str) -> dict[str, int]:
    """``"4:3:3"`` -> ``{"easy": 4, "medium": 3, "hard": 3}``.

    >>> parse_mix("1:1:2")
    {'easy': 1, 'medium': 1, 'hard': 2}
    """
    try:
        values = [int(p) for p in text.split(":")]
    except ValueError:
        raise InputError(f"--mix {text!r}: expected three integers like 4:3:3") from None
    if len(values) != 3 or any(v < 0 for v in values) or sum(values) == 0:
        raise InputError(f"--mix {text!r}: expected three non-negative integers like 4:3:3")
    return dict(zip(("easy", "medium", "hard"), values))


def seed_options(p: argparse.ArgumentParser) -> None:
    add = p.add_argument_group("seed selection").add_argument
    add("--sitelinks-max", type=int, help="rare: at most this many sitelinks (default: per world)")
    add("--statements-min", type=int,
        help="documented: at least this many statements (default: per world)")
    add("--limit", type=int, help="at most this many seeds from the source")
    add("--exam-share", type=float, default=0.15, help="share of seeds for the exam (default 0.15)")
    add("--heldout-share", type=float, default=0.10, help="share of seeds held out (default: 0.10)")
    add("--entities", type=int, default=2000,
        help="size of the sandbox world when it has to be built (default: 2000)")
    add("--kiwix-url", help="live world: a kiwix-serve URL instead of the Wikipedia API")
    add("--kiwix-book", help="live world: the ZIM book name served by kiwix-serve")


def inject_options(p: argparse.ArgumentParser) -> None:
    add = p.add_argument_group("injection").add_argument
    add("--n-train", type=int, help="training tasks, split by --mix (default: by profile; cpu 100)")
    add("--n-heldout", type=int, help="held-out tasks (default: by profile; cpu 30)")
    add("--n-exam", "--exam-size", dest="n_exam", type=int,
        help="exam tasks (default: 283, the paper's; the sandbox starts them at the exam seeds, "
             "then at rare people)")
    add("--mix", default="4:3:3", help="easy:medium:hard ratio (default: 4:3:3, paper's RL mix)")
    add("--exam-rounds", type=int, help="injection rounds of exam tasks (default: 10, paper 2.4)")
    add("--onehop-train", type=int, help="one-hop warm-up training tasks, not in the paper "
        "(default: by profile; cpu at most 2000, GPU profiles 0)")
    add("--onehop-heldout", type=int, help="one-hop warm-up held-out tasks (default: by profile; "
        "cpu at most 2000, GPU profiles 0)")
    add("--onehop-seeds-only", action="store_true",
        help="draw one-hop tasks from the seeds only, not also from the other pictured entities "
             "(the cpu default draws on both; half of those others are held out)")
    add("--exam-seeds-only", action="store_true",
        help="start exam tasks at the exam seeds only, not also at the world's rare people")
    add("--warmup-levels", metavar="LEVEL:TRAIN:HELDOUT,...",
        help="more tasks of a level from the other pictured entities too, e.g. "
             "easy:600:200,medium:300:100 (the cpu default); 'none': seeds only (GPU default)")
    add("--writer", choices=("rule", "llm"),
        help="question writer (default: rule in the sandbox, llm live)")
    add("--chat", help="chat backend of the LLM writer, e.g. openai:<model>@<base_url>")
    add("--concurrency", type=int, help="tasks in flight (default: 1 for rule, 8 for llm)")
    add("--max-attempts", type=int, default=3, help="LLM replies per writer operation (default: 3)")


def filter_options(p: argparse.ArgumentParser) -> None:
    add = p.add_argument_group("filtering").add_argument
    add("--filter-mode", choices=("offline", "llm"),
        help="offline filters (sandbox default) or LLM/VLM filters (live default)")
    add("--filter-chat", help="text LLM for the text-only direct-answer filter")
    add("--filter-vlm", help="VLM for the direct-answer and image filters")
    add("--judge", default="match",
        help="judge of direct answers: match or llm:<chat spec> (default: match)")
    add("--short-circuit", action="store_true", help="skip later filters once one removes a task")
    add("--rl-tasks", type=int, default=1000, help="RL task pool (rl_tasks.jsonl): at most this "
        "many tasks, on seeds SFT never sees (default: 1000; 0: none)")
    add("--rl-max-share", type=float, default=1 / 3,
        help="the RL pool takes at most this share of the training seeds (default: 1/3)")


def check_counts(args, positive: tuple[str, ...], non_negative: tuple[str, ...] = ()) -> None:
    """An ``InputError`` naming the first flag out of range (before any work is done)."""
    for names, low in ((positive, 1), (non_negative, 0)):
        for name in names:
            value = getattr(args, name, None)
            if value is not None and value < low:
                raise InputError(f"--{name.replace('_', '-')} must be at least {low}, got {value}")


def seed_config(args):
    """The ``SeedConfig`` of a command line (counts checked first)."""
    from vsearcher_lite.synthesis.seeds import SeedConfig

    check_counts(args, ("limit", "entities"), ("sitelinks_max", "statements_min"))
    mix = parse_mix(getattr(args, "mix", "4:3:3"))
    return SeedConfig(sitelinks_max=args.sitelinks_max, statements_min=args.statements_min,
                      limit=args.limit, exam_share=args.exam_share,
                      heldout_share=args.heldout_share, mix=mix, seed=args.seed)


def inject_config(args):
    """The profile's ``InjectConfig`` with the options given; the writer and its concurrency
    follow the world (rule in the sandbox, llm live) unless named."""
    from vsearcher_lite.synthesis.inject import InjectConfig

    check_counts(args, ("concurrency", "max_attempts"))
    writer = args.writer or ("rule" if args.world == "sandbox" else "llm")
    overrides = {"mix": parse_mix(args.mix), "writer": writer, "chat": args.chat,
                 "concurrency": args.concurrency or (1 if writer == "rule" else 8),
                 "max_attempts": args.max_attempts, "seed": args.seed}
    for name in ("n_train", "n_heldout", "n_exam", "exam_rounds", "onehop_train",
                 "onehop_heldout"):
        value = getattr(args, name)
        if value is not None:
            if value < 0:
                raise InputError(f"--{name.replace('_', '-')} must not be negative")
            overrides[name] = value
    if getattr(args, "onehop_seeds_only", False):
        overrides["onehop_warmup"] = False
    if getattr(args, "exam_seeds_only", False):
        overrides["exam_people"] = False
    if getattr(args, "warmup_levels", None) is not None:
        overrides["warmup_levels"] = parse_warmup_levels(args.warmup_levels)
    return InjectConfig.for_profile(args.profile, **overrides)


def parse_warmup_levels(text: str) -> dict[str, tuple[int, int]]:
    """``"easy:600:200,medium:300:100"`` -> ``{"easy": (600, 200), "medium": (300, 100)}``;
    ``"none"`` -> ``{}``.

    >>> parse_warmup_levels("easy:600:200,medium:300:100"), parse_warmup_levels("none")
    ({'easy': (600, 200), 'medium': (300, 100)}, {})
    """
    from vsearcher_lite.agent.task import DIFFICULTY_ROUNDS

    if text.strip().lower() in ("none", ""):
        return {}
    out: dict[str, tuple[int, int]] = {}
    for part in text.split(","):
        level, *counts = part.strip().split(":")
        if len(counts) != 2 or level not in DIFFICULTY_ROUNDS or not all(map(str.isdigit, counts)):
            raise InputError(f"--warmup-levels: {part.strip()!r} is not LEVEL:TRAIN:HELDOUT with "
                             f"LEVEL one of {', '.join(DIFFICULTY_ROUNDS)} and two counts "
                             "(e.g. easy:600:200)")
        out[level] = (int(counts[0]), int(counts[1]))
    return out


def filter_config(args):
    """The ``FilterConfig`` of a command line (offline filters in the sandbox, LLM ones live)."""
    from vsearcher_lite.synthesis.filters import FilterConfig

    mode = args.filter_mode or ("offline" if args.world == "sandbox" else "llm")
    return FilterConfig(mode=mode, chat=args.filter_chat, vlm=args.filter_vlm, judge=args.judge,
                        short_circuit=args.short_circuit, rl_tasks=args.rl_tasks,
                        rl_max_share=args.rl_max_share, seed=args.seed)


def source_for(args):
    """The knowledge source of ``--world`` (the sandbox is built when missing)."""
    from vsearcher_lite.synthesis.sources import open_source

    live = {}
    if getattr(args, "kiwix_url", None) or getattr(args, "kiwix_book", None):
        live = {"kiwix_url": args.kiwix_url, "kiwix_book": args.kiwix_book}
    return open_source(args.run_dir, args.world, n_entities=args.entities, seed=args.seed,
                       live_options=live)


def show(stage: str, metrics: dict, keys: tuple[str, ...]) -> None:
    """One line with the ``keys`` of ``metrics`` that are there."""
    print(f"{stage}: " + ", ".join(f"{k}={json.dumps(metrics[k])}" for k in keys if k in metrics))


def user_errors(handler):
    """Turn a failed web request or chat call into a one-line ``InputError`` (no traceback)."""
    @functools.wraps(handler)
    def wrapped(args) -> int:
        from vsearcher_lite.chat import ChatError
        from vsearcher_lite.net.http import HttpError

        try:
            return handler(args)
        except (HttpError, ChatError) as exc:
            raise InputError(str(exc)) from None

    return wrapped


def nothing_built(stage: str, metrics: dict, run_dir) -> int:
    """Exit status 1 with one line on stderr when every attempted task failed and none exists (an
    empty output must not pass for a finished stage); 0 otherwise."""
    if metrics.get("n_tasks") or not metrics.get("n_failed"):
        return 0
    reasons = ", ".join(f"{k} {v}" for k, v in (metrics.get("failed_reasons") or {}).items())
    print(f"vsearcher-lite {stage}: error: no task was built: all {metrics['n_failed']} attempts "
          f"failed ({reasons}); see {Path(run_dir) / stage / 'failed.jsonl'}", file=sys.stderr)
    return 1


@user_errors
def cmd_seeds(args) -> int:
    from vsearcher_lite.synthesis.seeds import run_seeds

    metrics = run_seeds(args.run_dir, seed_config(args), source=source_for(args))
    show("seeds", metrics, ("n_seeds", "pool_sizes", "sitelinks_max", "statements_min"))
    return 0


@user_errors
def cmd_inject_text(args) -> int:
    from vsearcher_lite.synthesis.inject import run_inject_text

    metrics = run_inject_text(args.run_dir, inject_config(args), source=source_for(args),
                              world=args.world, seed_config=seed_config(args))
    show("inject-text", metrics, ("n_tasks_by_difficulty", "n_failed", "failed_reasons",
                                  "answer_invariance_rate", "mean_question_words", "tasks_per_s"))
    return nothing_built("inject-text", metrics, args.run_dir)


@user_errors
def cmd_inject_image(args) -> int:
    from vsearcher_lite.synthesis.inject import ensure_text_tasks, run_inject_image

    source, config = source_for(args), inject_config(args)
    ensure_text_tasks(args.run_dir, config, source=source, world=args.world,
                      seed_config=seed_config(args))
    metrics = run_inject_image(args.run_dir, config, source=source, world=args.world)
    show("inject-image", metrics, ("n_tasks_by_difficulty", "n_failed", "failed_reasons",
                                   "answer_invariance_rate", "tasks_per_s"))
    return nothing_built("inject-image", metrics, args.run_dir)


@user_errors
def cmd_filter(args) -> int:
    from vsearcher_lite.synthesis.filters import run_filter
    from vsearcher_lite.synthesis.inject import ensure_image_tasks, ensure_text_tasks

    source, config = source_for(args), inject_config(args)
    ensure_text_tasks(args.run_dir, config, source=source, world=args.world,
                      seed_config=seed_config(args))
    ensure_image_tasks(args.run_dir, config, source=source, world=args.world)
    metrics = run_filter(args.run_dir, filter_config(args), source=source, world=args.world,
                         inject_config=config)
    show("filter", metrics, ("n_input", "removed", "n_kept", "n_kept_by_split",
                             "exam_seed_overlap_with_training"))
    pool = metrics["rl_pool"]
    print(f"filter: RL pool {pool['n_tasks']} tasks {json.dumps(pool['n_by_difficulty'])} on "
          f"{pool['n_seeds']} seeds ({pool['share_of_training_seeds']:.0%} of the training "
          "seeds), none used by train.jsonl")
    return 0


def register(subparsers, common) -> None:
    p = subparsers.add_parser(
        "seeds", parents=[common], help="select rare-but-documented seeds, split into pools",
        description="Paper 2.1/A.2: seeds with few sitelinks and many statements, with an image, "
                    "not people.")
    seed_options(p)
    p.set_defaults(func=cmd_seeds, mix="4:3:3")

    for name, func, text in (
        ("inject-text", cmd_inject_text,
         "initial QA + N rounds of text injection (easy 1, medium 3, hard 5, exam 10)"),
        ("inject-image", cmd_inject_image,
         "image injection: hide the critical entity behind its (perturbed) image"),
    ):
        p = subparsers.add_parser(name, parents=[common], help=text, description=text)
        inject_options(p)
        seed_options(p)
        p.set_defaults(func=func)

    p = subparsers.add_parser(
        "filter", parents=[common], help="the four filters; writes the kept tasks and the exam",
        description="Paper 2.1/2.4: answer leak, direct answer with image, text-only answer, "
                    "image too simple; kept tasks per split and the exam.")
    filter_options(p)
    inject_options(p)
    seed_options(p)
    p.set_defaults(func=cmd_filter)

    p = subparsers.add_parser(
        "trajectories", parents=[common],
        help="teacher trajectories with rejection sampling (notebook 05)",
        description="Run the teacher through the ReAct loop over the filtered tasks, judge the "
                    "answers, keep the correct trajectories, and export them for SFT. Writes "
                    "RUN_DIR/trajectories/.")
    add_config_options(p, TrajectoryConfig, CLI_OPTIONS)
    p.set_defaults(func=run_trajectories_command)
