"""How far along a task's chain of hops an agent gets, read from its evaluated episodes.

A medium or hard task hides its answer behind a chain: the entity in the image, then one entity
per round of injection, each described through the one before it. The teacher resolves the chain
in that order and says so in its thinking ("The <description> is <entity>."), and the trained
agents learned the same sentences. This script reads those sentences from every episode of an
evaluation (``results.jsonl`` with trajectories) and walks the task's chain with them: how many
hops the agent resolved before its first wrong claim, and what was wrong there: the image, a
reading, off chain, stopped, or chain done (``vsearcher_lite.scoring.hops`` says what each means).

    python benchmarks/hop_reach.py --run-dir RUN --evaluate sft=data/reference/sft/checkpoint \\
        --evaluate rl=data/reference/grpo/checkpoint --evaluate teacher=teacher
    python benchmarks/hop_reach.py --run-dir RUN --results sft=RUN/eval/NAME/results.jsonl

``--evaluate LABEL=POLICY`` runs POLICY on the run's held-out tasks of ``--levels`` with the
reference's held-out settings (greedy, ``RUN/eval/hops-LABEL/``, resumable) and prints how many
episodes end as the shipped reference's did.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from vsearcher_lite.runio import read_jsonl
from vsearcher_lite.scoring import hops
from vsearcher_lite.scoring.hops import KINDS, chain

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "data" / "reference"


def reach(task: dict, trajectory: dict) -> tuple[int, str]:
    """Hops of ``task`` resolved before the first wrong claim in ``trajectory``, and what ended
    the walk (``KINDS``)."""
    return hops.reach(chain(task), trajectory.get("messages") or [])


def table(label: str, results: list[dict], tasks: dict[str, dict], levels: list[str]) -> None:
    for level in levels:
        rows = [r for r in results if r.get("difficulty") == level and r["id"] in tasks]
        if not rows:
            continue
        walks = [reach(tasks[r["id"]], r.get("trajectory") or {}) for r in rows]
        lengths = [len(chain(tasks[r["id"]])) for r in rows]
        at_least = [sum(d >= k for d, _ in walks) / len(rows) for k in range(1, max(lengths) + 1)]
        ends = Counter(kind for _, kind in walks)
        done_right = sum(1 for (_, kind), r in zip(walks, rows)
                         if kind == "chain done" and r.get("correct"))
        n = len(rows)
        solved = sum(bool(r.get("correct")) for r in rows) / n
        resolved = sum(d for d, _ in walks) / n
        hops = sum(lengths) / n
        print(f"{label:8} {level:6} {n:4d} {solved:6.3f}  {resolved:4.2f}/{hops:4.2f}"
              f"  {' '.join(f'{x:.2f}' for x in at_least):24}"
              f"  {' '.join(f'{ends[k] / n:.2f}' for k in KINDS)}"
              f"  {done_right}/{ends['chain done']}")


def evaluate(run: Path, label: str, policy: str, tasks: list) -> list[dict]:
    from vsearcher_lite.evaluation.comparison import ComparisonConfig
    from vsearcher_lite.scoring import evaluate as ev

    # the held-out settings of the reference's comparison (its task caps do not enter them)
    config = ComparisonConfig.for_profile("cpu", seed=0, eval_overrides={"device": "cpu"})
    name = f"hops-{label}"
    ev.evaluate(run, tasks, policy, name=name, config=config.heldout_eval_config())
    results = list(read_jsonl(run / "eval" / name / "results.jsonl"))
    shipped = REFERENCE / "results" / f"heldout-{label}.jsonl"
    if shipped.is_file():
        ends = {r["id"]: (r.get("prediction"), r.get("termination")) for r in read_jsonl(shipped)}
        same = sum(ends.get(r["id"]) == (r.get("prediction"), r.get("termination"))
                   for r in results)
        print(f"[{label}] {same} of {len(results)} episodes end as in {shipped.name}")
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run-dir", required=True, help="a run folder with filter/heldout.jsonl")
    p.add_argument("--results", action="append", default=[], metavar="LABEL=FILE",
                   help="an evaluation's results.jsonl (with trajectories)")
    p.add_argument("--evaluate", action="append", default=[], metavar="LABEL=POLICY",
                   help="evaluate POLICY on the held-out tasks of --levels first")
    p.add_argument("--levels", default="medium,hard", help="comma-separated (default medium,hard)")
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    args = p.parse_args()

    run, levels = Path(args.run_dir), args.levels.split(",")
    held = run / "filter" / "heldout.jsonl"
    if not held.is_file():
        raise SystemExit(f"{held} does not exist: run `vsearcher-lite filter --run-dir {run}`")
    rows = [t for t in read_jsonl(held) if t.get("difficulty") in levels]
    tasks = {t["id"]: t for t in rows}
    named = []
    if args.evaluate:
        from vsearcher_lite.agent.task import read_tasks
        from vsearcher_lite.runtime import set_threads

        set_threads(args.threads)
        to_run = [t for t in read_tasks(held) if t.difficulty in levels]  # paths resolved
    for spec in args.evaluate:
        label, _, policy = spec.partition("=")
        named.append((label, evaluate(run, label, policy, to_run)))
    for spec in args.results:
        label, _, path = spec.partition("=")
        records = list(read_jsonl(path))
        if not any((r.get("trajectory") or {}).get("messages") for r in records):
            raise SystemExit(f"{path}: no record holds its episode's messages, so no walk can be "
                             "read (shipped results leave them out: evaluate with --evaluate)")
        named.append((label, records))
    print(f"{'policy':8} {'level':6} {'n':>4} {'pass@1':>6}  {'hops':>9}  "
          f"{'resolved >= 1, 2, ...':24}  {' / '.join(KINDS)}  right/chains done")
    for label, results in named:
        table(label, results, tasks, levels)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
