"""CLI: ``vsearcher-lite eval`` (notebook 08's library calls, from a shell).

    vsearcher-lite eval --run-dir R                       # teacher on R's exam + held-out tasks
    vsearcher-lite eval --run-dir R --policy transformers:R/sft/model --name sft
    vsearcher-lite eval --run-dir R --policy direct:P     # a model without tools
    vsearcher-lite eval --run-dir R --policy P --name sft --temperature 0.8 --samples 8  # Pass@k
    vsearcher-lite eval --benchmark exam.jsonl --check    # validate a file, run nothing
    vsearcher-lite eval --run-dir R --compare             # notebook 08: base/SFT/RL/teacher
    vsearcher-lite eval --world live --benchmark exam.jsonl --policy openai:MODEL@URL --judge llm
"""

from __future__ import annotations

from pathlib import Path

from vsearcher_lite.config import EvalConfig
from vsearcher_lite.options import add_config_options, options_given, positive
from vsearcher_lite.runio import InputError
from vsearcher_lite.runtime import add_device_option

#: The ``EvalConfig`` settings ``vsearcher-lite eval`` takes as options (``--prompt`` is
#: ``prompt_variant``).
CLI_OPTIONS = ("judge", "concurrency", "batch", "prompt_variant", "top_k", "max_tool_calls",
               "temperature", "max_tokens")


# What a run folder holds once any stage has run in it (``--compare`` refuses a folder with none).
RUN_CONTENTS = ("run_manifest.json", "world", "seeds", "inject-text", "inject-image", "filter",
                "trajectories", "sft", "grpo", "eval", "comparison")


def register(subparsers, common) -> None:
    p = subparsers.add_parser(
        "eval",
        parents=[common],
        help="evaluate a policy on a benchmark: Pass@1 and its breakdowns (notebook 08)",
        description=(
            "Run a policy through the ReAct loop on every task of a benchmark, judge each answer, "
            "and write RUN_DIR/eval/<name>/ (results.jsonl, results.csv, metrics.json) and the "
            "comparison table RUN_DIR/eval/metrics.json. Resumable: a rerun skips the tasks "
            "already done. With --check, only validate the benchmark file and print its numbers."
        ),
    )
    b = p.add_argument_group("benchmark")
    b.add_argument("--benchmark", default=None, metavar="FILE",
                   help="a .jsonl/.json/.parquet file (default: the run's exam + held-out tasks)")
    b.add_argument("--format", default=None,
                   help="mmsearchexam, browsecomp-vl, mmsearch, simplevqa, task (default: guessed)")
    b.add_argument("--check", action="store_true", help="validate the file, print its numbers")
    b.add_argument("--limit", type=positive, default=None, help="use only the first N rows")
    b.add_argument("--sample", type=positive, default=None, help="N random rows (seeded by --seed)")
    b.add_argument("--images-only", action="store_true", help="only rows with an image (paper A.5)")
    b.add_argument("--language", default=None, help="keep rows of one language (SimpleVQA: EN)")
    b.add_argument("--images", choices=("download", "url"), default=None,
                   help="download images (default) or pass URLs (live image search needs URLs)")
    b.add_argument("--image-dir", default=None, help="image cache (default: RUN_DIR/eval/images)")
    b.add_argument("--skip-bad-images", action="store_true", help="leave out unfetchable images")
    r = p.add_argument_group("run")
    r.add_argument("--policy", default=None,
                   help="teacher, base, direct[:<spec>], a checkpoint folder, openai:MODEL@URL or "
                        "transformers:PATH (default: teacher in the sandbox)")
    r.add_argument("--name", default=None,
                   help="the folder under RUN_DIR/eval/ and the table key (default: from --policy)")
    add_config_options(r, EvalConfig, CLI_OPTIONS)
    r.add_argument("--no-cache", action="store_true", help="do not use the run's tool cache")
    add_device_option(r)
    r.add_argument("--fresh", action="store_true", help="discard earlier results under this name")
    r.add_argument("--samples", type=positive, default=None, metavar="K",
                   help="Pass@k: evaluate K >= 2 times at --temperature > 0 (seeds --seed, "
                        "--seed+1, ...) as <name>-s1 ... <name>-sK, and write Pass@1, "
                        "Pass@1,2,4,...,K and the mixed tasks per level to "
                        "RUN_DIR/eval/<name>/passk.json")
    c = p.add_argument_group("comparison (notebook 08)")
    c.add_argument("--compare", action="store_true",
                   help="base, SFT, RL and the teacher on the run's exam and held-out tasks, "
                        "into RUN_DIR/comparison/ (table 1 and figure 4 of this run)")
    c.add_argument("--exam-tasks", type=positive, help="with --compare: the first N exam tasks")
    c.add_argument("--heldout-tasks", type=positive, default=None,
                   help="with --compare: N held-out tasks, round-robin over the levels "
                        "(default: cpu 30, the SFT stage's; else all)")
    p.set_defaults(func=run_eval_command)


def compare_command(args) -> int:
    from vsearcher_lite.evaluation import comparison

    if args.samples:
        raise InputError("--samples evaluates one policy; leave it out of --compare")
    if args.benchmark or args.policy:
        raise InputError("--compare uses the run's own exam and held-out tasks and its fixed "
                         "policies; leave out --benchmark and --policy")
    run = Path(args.run_dir)
    if not run.is_dir() or not any((run / name).exists() for name in RUN_CONTENTS):
        raise InputError(f"{run}: not a run folder (no world, tasks or models in it); --compare "
                         "compares the models of an existing run: check --run-dir")
    config = comparison.ComparisonConfig.for_profile(
        args.profile, world=args.world, seed=args.seed, exam_max_tasks=args.exam_tasks,
        heldout_max_tasks=args.heldout_tasks, judge=args.judge, concurrency=args.concurrency,
        eval_overrides={"device": args.device} if args.device else None)
    metrics = comparison.run_comparison(args.run_dir, config)
    groups = comparison.TABLE_GROUPS
    print("policy    " + " ".join(f"{g:>8s}" for g in groups))
    for row in comparison.table_rows(metrics):
        cells = " ".join(f"{row[g]:8.3f}" if row[g] is not None else f"{'-':>8s}" for g in groups)
        print(f"{row['policy']:9s} {cells}")
    for name, reason in metrics["missing"].items():
        print(f"[eval] {name}: {reason}")
    print(f"[eval] wrote {Path(args.run_dir) / 'comparison' / 'metrics.json'} and table.csv")
    return 0


def _selection(args) -> dict:
    return {"images_only": args.images_only, "language": args.language, "sample": args.sample,
            "seed": args.seed, "limit": args.limit}


def check_command(args) -> int:
    from vsearcher_lite.evaluation.benchmarks import check_benchmark, sandbox_eval_files

    if args.benchmark:
        files, fmt = [Path(args.benchmark)], args.format
    else:
        files, fmt = sandbox_eval_files(args.run_dir), "task"
        missing = [f for f in files if not f.exists()]
        if missing:
            raise InputError(f"{missing[0]} does not exist: run `vsearcher-lite filter --run-dir "
                             f"{args.run_dir}` first, or give --benchmark FILE")
    for f in files:
        if not args.benchmark and not f.read_text(encoding="utf-8").strip():
            print(f"{f}: format task: 0 rows (the filter kept no task of this split)")
            continue
        report = check_benchmark(f, fmt, **_selection(args))
        groups = ", ".join(f"{k} {v}" for k, v in report["groups"].items())
        print(f"{f}: format {report['format']}: {report['n_rows']} rows, "
              f"{report['n_with_images']} with images, "
              f"{report['n_distinct_images']} distinct images")
        print(f"  answers: {report['n_distinct_answers']} distinct; groups: {groups}; "
              f"longest question: {report['max_question_chars']} characters")
    return 0


def run_eval_command(args) -> int:
    if args.check:
        return check_command(args)
    if args.compare:
        return compare_command(args)
    from vsearcher_lite.evaluation import benchmarks
    from vsearcher_lite.scoring.evaluate import evaluate
    from vsearcher_lite.scoring.passk import check_samples
    from vsearcher_lite.scoring.policies import policy_label

    if args.policy is not None and not args.policy.strip():
        raise InputError("--policy is empty: give teacher, base, direct, a checkpoint folder, "
                         "transformers:PATH or openai:MODEL@URL")
    policy = args.policy or ("teacher" if args.world == "sandbox" else None)
    if policy is None:
        raise InputError("--world live needs --policy (e.g. openai:<model>@<base_url>)")
    settings = {**options_given(args, CLI_OPTIONS), "world": args.world, "seed": args.seed,
                "cache_mode": "off" if args.no_cache else None, "device": args.device}
    settings["judge"] = args.judge or ("match" if args.world == "sandbox" else "llm")
    config = EvalConfig.for_profile(args.profile, **settings)
    if args.world == "live":
        config.today = None  # the live web has a calendar
    if args.samples is not None:
        check_samples(config, args.samples)  # before any task is loaded
    if args.benchmark:
        report = benchmarks.load_benchmark_report(
            args.benchmark, args.format,
            image_dir=args.image_dir or Path(args.run_dir) / "eval" / "images",
            image_mode=args.images or "download", skip_bad_images=args.skip_bad_images,
            progress=config.progress, **_selection(args),
        )
        tasks, benchmark = report["tasks"], f"{report['format']}:{args.benchmark}"
        for problem in report["skipped"]:
            print(f"[eval] skipped: {problem}")
        default_name = f"{policy_label(policy)}-{Path(args.benchmark).stem}"
    else:
        tasks = benchmarks.ensure_sandbox_eval_tasks(args.run_dir, profile=args.profile,
                                                     seed=args.seed, world=args.world,
                                                     progress=config.progress)
        if args.limit:
            tasks = tasks[: args.limit]
        benchmark, default_name = "sandbox exam + held-out", None
    if args.samples is not None:
        return samples_command(args, tasks, policy, config, args.name or default_name, benchmark)
    m = evaluate(args.run_dir, tasks, policy, config=config, name=args.name or default_name,
                 benchmark=benchmark, fresh=args.fresh)
    levels = ", ".join(f"{k} {v}" for k, v in m["accuracy_by_difficulty"].items())
    calls = ", ".join(f"{k} {v}" for k, v in m["mean_tool_calls_by_type"].items())
    ends = ", ".join(f"{k} {v}" for k, v in m["terminations"].items() if v)
    print(f"[eval] {m['name']}: Pass@1 {m['pass_at_1']} ({m['n_correct']}/{m['n_tasks']}); "
          f"by difficulty: {levels}")
    print(f"[eval] mean tool calls {m['mean_tool_calls']} ({calls}); "
          f"format-valid {m['format_valid_rate']}; endings: {ends}")
    if m["format_errors"]:
        print("[eval] format errors (first failing turn): "
              + ", ".join(f"{code} {n}" for code, n in m["format_errors"].items()))
    print(f"[eval] {m['evaluated_this_run']} episode(s) run in {m['seconds']} s; "
          f"{m['wall_seconds_per_task']} s of wall time per task run")
    eval_root = Path(args.run_dir) / "eval"
    print(f"[eval] wrote {eval_root / m['name']} and {eval_root / 'metrics.json'}")
    return 0


def samples_command(args, tasks, policy: str, config: EvalConfig, name: str | None,
                    benchmark: str) -> int:
    """``--samples K``: Pass@k per level (``scoring.passk.evaluate_samples``)."""
    from vsearcher_lite.scoring.passk import PASSK_FILE, evaluate_samples

    m = evaluate_samples(args.run_dir, tasks, policy, config=config, samples=args.samples,
                         name=name, benchmark=benchmark, fresh=args.fresh)
    ks = [k for k in m["ks"] if k > 1]
    names = [s["name"] for s in m["samples"]]
    print(f"[eval] {m['name']}: {m['n_samples']} samples at temperature {m['temperature']} "
          f"({names[0]} ... {names[-1]})")
    print(f"[eval] {'level':8s} {'tasks':>5s} {'pass@1':>7s} "
          + " ".join(f"{'pass@' + str(k):>7s}" for k in ks) + f" {'mixed':>5s}")

    def row(label: str, g: dict) -> str:
        cells = " ".join(f"{g['pass_at_k'][str(k)]:7.3f}" for k in ks)
        return (f"[eval] {label:8s} {g['n_tasks']:5d} {g['pass_at_1']:7.3f} {cells} "
                f"{g['mixed']:5d}")

    for level, g in m["by_level"].items():
        print(row(level, g))
    print(row("all", m))
    print(f"[eval] {m['evaluated_this_run']} episode(s) run; mixed = solved by some samples but "
          "not all (the tasks GRPO can learn from)")
    print(f"[eval] wrote {Path(args.run_dir) / 'eval' / m['name'] / PASSK_FILE}")
    return 0
