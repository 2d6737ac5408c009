"""The shipped reference's evaluation, run again with today's code: wall time and agreement.

Evaluates every policy of the reference comparison (base, SFT, RL, teacher) on every
held-out and exam task of the default world, with the reference preset and the shipped SFT and
RL checkpoints, in ``--run-dir`` (its world and tasks are built there first when missing). Prints
the wall time of each evaluation and how many per-task records (prediction and termination)
equal the shipped ones in ``data/reference/results/``: greedy decoding of the same checkpoints
gives the same episodes, so a difference points at the tools, the world or the generation path.

    python benchmarks/reference_eval.py --run-dir runs/reference-eval
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "data" / "reference"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run-dir", required=True, help="a run folder of its own (created if missing)")
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    args = p.parse_args()

    from vsearcher_lite.cli import main as cli
    from vsearcher_lite.evaluation.comparison import ComparisonConfig, run_comparison
    from vsearcher_lite.reference import REFERENCE_COMPARISON
    from vsearcher_lite.reference_run import full_length, link_checkpoints
    from vsearcher_lite.runtime import set_threads

    set_threads(args.threads)
    run = Path(args.run_dir)
    if not (run / "filter" / "heldout.jsonl").is_file():
        cli(["filter", "--run-dir", str(run)])
    link_checkpoints(REFERENCE, run)
    config = full_length(ComparisonConfig.for_profile("cpu", seed=0,
                                                      eval_overrides={"device": "cpu"}),
                         REFERENCE_COMPARISON)
    start = time.perf_counter()
    run_comparison(run, config)
    print(f"comparison: {time.perf_counter() - start:.1f} s")
    print(f"{'benchmark':9} {'policy':8} {'tasks':>5} {'seconds':>8} {'same as shipped':>15}")
    agree = total = 0
    for benchmark in ("heldout", "exam"):
        for policy in ("base", "sft", "rl", "teacher"):
            name = f"{benchmark}-{policy}"
            shipped = records(REFERENCE / "results" / f"{name}.jsonl")
            ours = records(run / "eval" / name / "results.jsonl")
            same = sum(ours.get(i) == r for i, r in shipped.items())
            seconds = json.loads((run / "eval" / name / "metrics.json").read_text())["seconds"]
            print(f"{benchmark:9} {policy:8} {len(ours):5d} {seconds:8.1f} "
                  f"{same:9d} of {len(shipped)}")
            agree, total = agree + same, total + len(shipped)
    print(f"records equal to the shipped ones: {agree} of {total}")
    return 0


def records(path: Path) -> dict[str, tuple]:
    """Task id -> (prediction, termination) of a results file."""
    from vsearcher_lite.runio import read_jsonl

    return {r["id"]: (r.get("prediction"), r.get("termination")) for r in read_jsonl(path)}


if __name__ == "__main__":
    raise SystemExit(main())
