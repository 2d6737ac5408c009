"""Pass@1 by level against the number of distinct training chains an SFT model has seen.

Reads the snapshots an SFT run on the pooled chains kept (``vsearcher-lite sft ... --save-every N
--keep-checkpoints``: ``RUN/<name>/snapshots/step-N``, one distinct trajectory a step at batch 1
and one epoch) and evaluates each, greedy, on the same seeded sample of the evaluation world's
held-out tasks per level; the final checkpoint also replays a sample of its own training tasks
(from the first training world), so that generalisation and replay sit side by side.

    vsearcher-lite chains --out runs/chains --trajectories 10000
    vsearcher-lite sft --run-dir runs/chains --name sft_chains \\
      --train-file runs/chains/trajectories/export/sft_trl.jsonl --max-train-samples 3000 \\
      --epochs 1 --max-steps 3000 --max-length 6144 --save-every 500 --keep-checkpoints \\
      --minutes 100 --total-minutes 110 --no-eval
    python benchmarks/chain_scaling.py --chains runs/chains --sft sft_chains --steps 1000,3000

Snapshots of one run share its learning-rate schedule: an early one was not annealed, so the
table bounds what that many chains teach from below. Prints one row per model and level and
writes the rows as JSON (``--out``).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Callable

LEVELS = ("easy", "medium", "hard")
REFERENCE = Path(__file__).resolve().parent.parent / "data" / "reference"


def level_files(tasks_file: Path, folder: Path, prefix: str, ids: set[str] | None = None,
                per_level: int = 60, seed: int = 0) -> dict[str, Path]:
    """One task file a level: a seeded sample of ``tasks_file`` (only ``ids`` when given)."""
    rows = [json.loads(line) for line in tasks_file.read_text(encoding="utf-8").splitlines()
            if line.strip()]
    out = {}
    for level in LEVELS:
        pool = sorted((r for r in rows if r["difficulty"] == level
                       and (ids is None or r["id"] in ids)), key=lambda r: r["id"])
        pick = random.Random(f"chain-scaling:{seed}:{level}").sample(pool,
                                                                     min(per_level, len(pool)))
        path = folder / f"{prefix}_{level}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in pick), encoding="utf-8")
        out[level] = path
    return out


def trained_ids(train_file: Path, n_records: int, world_seed: int,
                too_long: Callable[[list[dict]], list[bool]] | None = None) -> set[str]:
    """Task ids of ``world_seed`` among the first ``n_records`` of the pooled file (SFT's
    ``--max-train-samples``), leaving out those ``too_long`` says SFT dropped for length."""
    records = []
    with train_file.open(encoding="utf-8") as f:
        for number, line in enumerate(f):
            if number >= n_records:
                break
            record = json.loads(line)
            if record["world_seed"] == world_seed:
                records.append(record)
    dropped = too_long(records) if too_long and records else [False] * len(records)
    return {r["task_id"] for r, drop in zip(records, dropped) if not drop}


def length_check(chains: Path, base: str, max_length: int) -> Callable[[list[dict]], list[bool]]:
    """Whether each pooled record renders to more than ``max_length`` tokens (SFT drops it)."""
    def too_long(records: list[dict]) -> list[bool]:
        from vsearcher_lite.model.tiny import load_base
        from vsearcher_lite.runio import RunDir
        from vsearcher_lite.training.data import check_record, rendered_lengths

        run = RunDir(chains.absolute())
        _, processor = load_base(base)
        checked = [check_record(run.resolve(r), f"{chains}:{r['task_id']}") for r in records]
        return [n > max_length for n in rendered_lengths(processor, checked)]
    return too_long


def evaluate(run_dir: Path, tasks: Path, model: Path, name: str) -> dict:
    """``vsearcher-lite eval`` of one model on one task file; Pass@1 and format-valid."""
    from vsearcher_lite.cli import main as cli

    code = cli(["eval", "--run-dir", str(run_dir), "--benchmark", str(tasks), "--format", "task",
                "--policy", str(model), "--name", name])
    if code:
        raise SystemExit(f"eval of {model} on {tasks} exited with {code}")
    rows = [json.loads(line) for line in
            (run_dir / "eval" / name / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    n = len(rows)
    return {"n": n, "pass1": sum(bool(r["correct"]) for r in rows) / n,
            "format_valid": sum(bool(r["format_ok"]) for r in rows) / n,
            "tool_calls": sum(r["n_tool_calls"] for r in rows) / n}


def shipped_rows(heldout: dict[str, Path]) -> list[dict]:
    """The shipped reference's base and SFT on the same sampled tasks, from its per-task files
    (the reference evaluates every held-out task of the evaluation world, greedy)."""
    rows = []
    for policy in ("base", "sft"):
        path = REFERENCE / "results" / f"heldout-{policy}.jsonl"
        shipped = {r["id"]: r for r in map(json.loads, path.read_text(encoding="utf-8").split(
            "\n")[:-1])}
        for level, tasks in heldout.items():
            ids = [json.loads(line)["id"] for line in tasks.read_text(encoding="utf-8").split(
                "\n")[:-1]]
            got = [shipped[i] for i in ids]
            n = len(got)
            rows.append({"step": f"reference {policy}", "tasks": "held-out", "level": level,
                         "n": n, "pass1": sum(bool(r["correct"]) for r in got) / n,
                         "format_valid": sum(bool(r["format_ok"]) for r in got) / n,
                         "tool_calls": sum(r["n_tool_calls"] for r in got) / n})
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--chains", type=Path, default=Path("runs/chains"),
                   help="the `chains` output folder that holds the SFT run")
    p.add_argument("--sft", default="sft_chains", help="the SFT run's --name")
    p.add_argument("--steps", default=None,
                   help="snapshots to evaluate, e.g. 1000,3000 (default: every one)")
    p.add_argument("--eval-run", type=Path, default=Path("runs/evalworld"),
                   help="a run folder of the evaluation world (built there when missing)")
    p.add_argument("--per-level", type=int, default=60, help="held-out tasks a level")
    p.add_argument("--replay", type=int, default=30, help="own training tasks a level")
    p.add_argument("--trained", type=int, default=3000,
                   help="the SFT run's --max-train-samples (default: 3000)")
    p.add_argument("--max-length", type=int, default=6144,
                   help="the SFT run's --max-length: longer trajectories were not trained on")
    p.add_argument("--base", default="data/tiny_base", help="the SFT run's base (its processor)")
    p.add_argument("--seed", type=int, default=0, help="seed of the task samples")
    p.add_argument("--out", type=Path, default=None, help="JSON rows (default: print only)")
    args = p.parse_args()

    from vsearcher_lite.cli import main as cli
    from vsearcher_lite.runio import read_json

    sft_dir = args.chains / args.sft
    snapshots = {int(d.name.split("-")[1]): d for d in (sft_dir / "snapshots").glob("step-*")}
    if not snapshots:
        raise SystemExit(f"{sft_dir / 'snapshots'}: no snapshots; train with --keep-checkpoints")
    wanted = sorted(snapshots) if not args.steps else [int(s) for s in args.steps.split(",")]
    missing = [s for s in wanted if s not in snapshots]
    if missing:
        raise SystemExit(f"{sft_dir / 'snapshots'}: no step-{missing[0]} (has {sorted(snapshots)})")
    if not (args.eval_run / "filter" / "heldout.jsonl").is_file():
        cli(["filter", "--run-dir", str(args.eval_run)])
    heldout = level_files(args.eval_run / "filter" / "heldout.jsonl", args.eval_run,
                          "scaling_heldout", per_level=args.per_level, seed=args.seed)

    chains = read_json(args.chains / "metrics.json")
    first = chains["settings"]["first_seed"]
    world_run = args.chains / "worlds" / f"seed-{first}"
    ids = trained_ids(Path(chains["train_file"]), args.trained, first,
                      length_check(args.chains, args.base, args.max_length))
    replay = level_files(world_run / "filter" / "train.jsonl", world_run, "scaling_replay", ids,
                         per_level=args.replay, seed=args.seed)

    rows = []
    for step in wanted:
        for level in LEVELS:
            m = evaluate(args.eval_run, heldout[level], snapshots[step],
                         f"{args.sft}-step{step}-{level}")
            rows.append({"step": step, "tasks": "held-out", "level": level, **m})
    last = max(snapshots)
    for level in LEVELS:
        m = evaluate(world_run, replay[level], snapshots[last], f"{args.sft}-step{last}-replay-"
                     f"{level}")
        rows.append({"step": last, "tasks": "own training tasks", "level": level, **m})
    rows += shipped_rows(heldout)
    for r in rows:
        print(f"{r['step']!s:>14}  {r['tasks']:<18} {r['level']:<6}  Pass@1 {r['pass1']:.3f} "
              f"({round(r['pass1'] * r['n'])}/{r['n']})  format-valid {r['format_valid']:.2f}  "
              f"tool calls {r['tool_calls']:.1f}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
