"""CLI: ``seeds``, ``inject-text``, ``inject-image``, ``filter``, ``trajectories`` (the synthesis
stages in order). Each calls the stage's library function, which builds missing inputs with
defaults and resumes where an interrupted run stopped.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

from vsearcher_lite.options import add_config_options, options_given
from vsearcher_lite.runio import InputError
from vsearcher_lite.synthesis.filters import CLI_OPTIONS as FILTER_OPTIONS
from vsearcher_lite.synthesis.filters import FilterConfig, run_filter
from vsearcher_lite.synthesis.inject import CLI_OPTIONS as INJECT_OPTIONS
from vsearcher_lite.synthesis.inject import (
    InjectConfig,
    ensure_image_tasks,
    ensure_text_tasks,
    run_inject_image,
    run_inject_text,
)
from vsearcher_lite.synthesis.seeds import CLI_OPTIONS as SEED_OPTIONS
from vsearcher_lite.synthesis.seeds import SeedConfig, run_seeds
from vsearcher_lite.synthesis.trajectories import CLI_OPTIONS as TRAJECTORY_OPTIONS
from vsearcher_lite.synthesis.trajectories import TrajectoryConfig, run_trajectories_command


def seed_options(p: argparse.ArgumentParser) -> None:
    """``SeedConfig``'s options, and those of the knowledge source they are drawn from."""
    g = p.add_argument_group("seed selection")
    add_config_options(g, SeedConfig, SEED_OPTIONS)
    g.add_argument("--entities", type=int, default=2000,
                   help="size of the sandbox world when it has to be built (default: 2000)")
    g.add_argument("--kiwix-url", help="live world: a kiwix-serve URL instead of the Wikipedia API")
    g.add_argument("--kiwix-book", help="live world: the ZIM book name served by kiwix-serve")


def check_counts(args, positive: tuple[str, ...], non_negative: tuple[str, ...] = ()) -> None:
    """An ``InputError`` naming the first flag out of range (before any work is done)."""
    for names, low in ((positive, 1), (non_negative, 0)):
        for name in names:
            value = getattr(args, name, None)
            if value is not None and value < low:
                raise InputError(f"--{name.replace('_', '-')} must be at least {low}, got {value}")


def seed_config(args) -> SeedConfig:
    """The ``SeedConfig`` of a command line; the injection's ``--mix`` splits the seeds too."""
    check_counts(args, ("limit", "entities"), ("sitelinks_max", "statements_min"))
    given = {**options_given(args, SEED_OPTIONS), **options_given(args, ("mix",), InjectConfig)}
    return SeedConfig(**given, seed=args.seed)


def inject_config(args) -> InjectConfig:
    """The profile's ``InjectConfig`` with the options given; the writer and its concurrency
    follow the world (rule in the sandbox, llm live) unless named."""
    counts = ("n_train", "n_heldout", "n_exam", "exam_rounds", "onehop_train", "onehop_heldout")
    check_counts(args, ("concurrency", "max_attempts"), counts)
    given = options_given(args, INJECT_OPTIONS, InjectConfig)
    writer = given.setdefault("writer", "rule" if args.world == "sandbox" else "llm")
    given.setdefault("concurrency", 1 if writer == "rule" else 8)
    return InjectConfig.for_profile(args.profile, **given, seed=args.seed)


def filter_config(args) -> FilterConfig:
    """The ``FilterConfig`` of a command line (offline filters in the sandbox, LLM ones live)."""
    given = options_given(args, FILTER_OPTIONS, prefix="filter_")
    given.setdefault("mode", "offline" if args.world == "sandbox" else "llm")
    return FilterConfig(**given, seed=args.seed)


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
    """Exit status 1 (one line on stderr) when every attempted task failed and none exists, so an
    empty output does not pass for a finished stage; 0 otherwise."""
    if metrics.get("n_tasks") or not metrics.get("n_failed"):
        return 0
    reasons = ", ".join(f"{k} {v}" for k, v in (metrics.get("failed_reasons") or {}).items())
    print(f"vsearcher-lite {stage}: error: no task was built: all {metrics['n_failed']} attempts "
          f"failed ({reasons}); see {Path(run_dir) / stage / 'failed.jsonl'}", file=sys.stderr)
    return 1


@user_errors
def cmd_seeds(args) -> int:
    metrics = run_seeds(args.run_dir, seed_config(args), source=source_for(args))
    show("seeds", metrics, ("n_seeds", "pool_sizes", "sitelinks_max", "statements_min"))
    return 0


@user_errors
def cmd_inject_text(args) -> int:
    metrics = run_inject_text(args.run_dir, inject_config(args), source=source_for(args),
                              world=args.world, seed_config=seed_config(args))
    show("inject-text", metrics, ("n_tasks_by_difficulty", "n_failed", "failed_reasons",
                                  "answer_invariance_rate", "mean_question_words", "tasks_per_s"))
    return nothing_built("inject-text", metrics, args.run_dir)


def text_tasks_first(args):
    """``(source, InjectConfig)``, after making sure the text tasks exist with the seed options."""
    source, config = source_for(args), inject_config(args)
    ensure_text_tasks(args.run_dir, config, source=source, world=args.world,
                      seed_config=seed_config(args))
    return source, config


@user_errors
def cmd_inject_image(args) -> int:
    source, config = text_tasks_first(args)
    metrics = run_inject_image(args.run_dir, config, source=source, world=args.world)
    show("inject-image", metrics, ("n_tasks_by_difficulty", "n_failed", "failed_reasons",
                                   "answer_invariance_rate", "tasks_per_s"))
    return nothing_built("inject-image", metrics, args.run_dir)


@user_errors
def cmd_filter(args) -> int:
    source, config = text_tasks_first(args)
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
    p.set_defaults(func=cmd_seeds)

    for name, func, text in (
        ("inject-text", cmd_inject_text,
         "initial QA + N rounds of text injection (easy 1, medium 3, hard 5, exam 10)"),
        ("inject-image", cmd_inject_image,
         "image injection: hide the critical entity behind its (perturbed) image"),
    ):
        p = subparsers.add_parser(name, parents=[common], help=text, description=text)
        add_config_options(p.add_argument_group("injection"), InjectConfig, INJECT_OPTIONS)
        seed_options(p)
        p.set_defaults(func=func)

    p = subparsers.add_parser(
        "filter", parents=[common], help="the four filters; writes the kept tasks and the exam",
        description="Paper 2.1/2.4: answer leak, direct answer with image, text-only answer, "
                    "image too simple; kept tasks per split and the exam.")
    add_config_options(p.add_argument_group("filtering"), FilterConfig, FILTER_OPTIONS,
                       prefix="filter_")
    add_config_options(p.add_argument_group("injection"), InjectConfig, INJECT_OPTIONS)
    seed_options(p)
    p.set_defaults(func=cmd_filter)

    p = subparsers.add_parser(
        "trajectories", parents=[common],
        help="teacher trajectories with rejection sampling (notebook 05)",
        description="Run the teacher through the ReAct loop over the filtered tasks, judge the "
                    "answers, keep the correct trajectories, and export them for SFT. Writes "
                    "RUN_DIR/trajectories/.")
    add_config_options(p, TrajectoryConfig, TRAJECTORY_OPTIONS)
    p.set_defaults(func=run_trajectories_command)
