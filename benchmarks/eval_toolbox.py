"""What one toolbox shared by the evaluation's worker threads saves over one toolbox per thread.

Evaluates the same tasks twice with the same policy (default: the heuristic teacher, no model),
with a toolbox built in each worker thread and with the default shared one, in a scratch folder
linking the run's world and tasks (its own tool cache). Prints both wall times, their ratio and
how many episodes came out the same. ``--cache warm`` first runs every task untimed, so both
timed runs find every tool answer stored; ``--cache off`` computes every call.

    python benchmarks/eval_toolbox.py --run-dir runs/reproduce --tasks 64 --concurrency 16
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path


def episode_view(record: dict) -> str:
    """What must not change between the two runs: the conversation, prediction and verdict."""
    trajectory = record.get("trajectory") or {}
    view = [
        trajectory.get("messages"),
        *(record.get(k) for k in ("prediction", "termination", "correct", "tool_counts")),
    ]
    return json.dumps(view, sort_keys=True, ensure_ascii=False)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--run-dir",
        required=True,
        help="a run folder with its world (and tasks, or they are built)",
    )
    p.add_argument("--policy", default="teacher", help="default: the heuristic teacher")
    p.add_argument("--tasks", type=int, default=64, help="the first N exam + held-out tasks")
    p.add_argument("--concurrency", type=int, default=16, help="worker threads")
    p.add_argument("--profile", default="cpu", help="the evaluation preset (prompt, top-k, limits)")
    p.add_argument(
        "--cache",
        choices=("warm", "off"),
        default="warm",
        help="warm: the tool cache filled by an untimed first run (default); off: no tool cache",
    )
    args = p.parse_args()

    from vsearcher_lite.backends.toolbox import make_toolbox
    from vsearcher_lite.evaluation.benchmarks import ensure_sandbox_eval_tasks
    from vsearcher_lite.scoring.evaluate import EvalConfig, evaluate, load_results

    run = Path(args.run_dir)
    tasks = ensure_sandbox_eval_tasks(run, profile=args.profile, progress=False)[: args.tasks]
    config = EvalConfig.for_profile(
        args.profile,
        concurrency=args.concurrency,
        progress=False,
        cache_mode="readwrite" if args.cache == "warm" else "off",
    )
    with tempfile.TemporaryDirectory() as scratch:
        for entry in run.iterdir():  # the run's folders (world, tasks), not its eval/ or cache/
            if entry.is_dir() and entry.name not in ("eval", "cache"):
                (Path(scratch) / entry.name).symlink_to(entry.resolve())
        built = []
        lock = threading.Lock()

        def one_per_thread():
            box = make_toolbox(
                scratch,
                world=config.world,
                cache_mode=config.cache_mode,
                top_k=config.top_k,
                observations=config.prompt_variant,
            )
            with lock:
                built.append(box)
            return box

        # imports, the policy's first use and the file cache, before anything is timed
        warmup = tasks if args.cache == "warm" else tasks[:2]
        evaluate(scratch, warmup, args.policy, name="warmup", config=config, fresh=True)
        timings, views, metrics = {}, {}, {}
        for mode, toolbox in (("per-thread", one_per_thread), ("shared", None)):
            start = time.perf_counter()
            metrics[mode] = evaluate(
                scratch, tasks, args.policy, name=mode, config=config, toolbox=toolbox, fresh=True
            )
            timings[mode] = time.perf_counter() - start
            views[mode] = {r["id"]: episode_view(r) for r in load_results(scratch, mode)}
    same = sum(views["per-thread"][t.id] == views["shared"].get(t.id) for t in tasks)
    print(
        f"{len(tasks)} tasks, concurrency {args.concurrency}, policy {args.policy}, "
        f"profile {args.profile}, tool cache {args.cache}"
    )
    per_thread, shared = timings["per-thread"], timings["shared"]
    print(
        f"one toolbox per thread: {per_thread:7.2f} s ({len(built)} toolboxes built), "
        f"Pass@1 {metrics['per-thread']['pass_at_1']}"
    )
    print(f"one shared toolbox:     {shared:7.2f} s, Pass@1 {metrics['shared']['pass_at_1']}")
    print(
        f"ratio per-thread / shared: {timings['per-thread'] / timings['shared']:.1f}x; "
        f"same episodes: {same}/{len(tasks)}"
    )
    return 0 if same == len(tasks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
