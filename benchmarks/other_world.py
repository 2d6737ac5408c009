"""How much of what a model learned is the evaluation world's entities: the same checkpoints on
held-out tasks of a world built with another seed, beside their Pass@1 on the evaluation world.

Builds the world and its tasks in ``--run-dir`` as a new user would (``vsearcher-lite filter
--seed S``, which runs the stages before it), evaluates each model, greedy, on a seeded sample
of that world's easy, medium and hard held-out tasks, and prints the headline (the three levels
together) against the model's headline on the evaluation world: the shipped reference's
per-task files for the shipped checkpoints, else an evaluation on the same number of tasks of
``--eval-run``.

    python benchmarks/other_world.py --run-dir runs/world7 --world-seed 7
    python benchmarks/other_world.py --run-dir runs/world7 --world-seed 7 \\
      --model chains=runs/chains/sft_chains/checkpoint
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from chain_scaling import LEVELS, REFERENCE, evaluate, level_files

SHIPPED = {"sft": REFERENCE / "sft" / "checkpoint", "rl": REFERENCE / "grpo" / "checkpoint"}


def headline(rows: list[dict]) -> float:
    """Pass@1 over the levels' tasks together."""
    n = sum(r["n"] for r in rows)
    return sum(r["pass1"] * r["n"] for r in rows) / n if n else 0.0


def shipped_headline(policy: str) -> float:
    """The shipped reference's headline for ``policy`` over every held-out task of a level."""
    rows = [json.loads(line) for line in
            (REFERENCE / "results" / f"heldout-{policy}.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["difficulty"] in LEVELS]
    return sum(bool(r["correct"]) for r in rows) / len(rows)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run-dir", type=Path, required=True, help="the other world's run folder")
    p.add_argument("--world-seed", type=int, default=7, help="its seed (the evaluation world: 0)")
    p.add_argument("--per-level", type=int, default=40, help="held-out tasks a level")
    p.add_argument("--model", action="append", default=[], metavar="NAME=PATH",
                   help="a checkpoint to evaluate (default: the shipped SFT and RL models)")
    p.add_argument("--eval-run", type=Path, default=Path("runs/evalworld"),
                   help="the evaluation world's run folder, for a model the reference lacks")
    args = p.parse_args()
    if args.world_seed == 0:
        raise SystemExit("--world-seed 0 is the evaluation world; pick another")
    models = dict(m.split("=", 1) for m in args.model) or {k: str(v) for k, v in SHIPPED.items()}

    from vsearcher_lite.cli import main as cli

    for run, seed in ((args.run_dir, args.world_seed), (args.eval_run, 0)):
        if not (run / "filter" / "heldout.jsonl").is_file():
            cli(["filter", "--run-dir", str(run), "--seed", str(seed)])
    other = level_files(args.run_dir / "filter" / "heldout.jsonl", args.run_dir, "other_world",
                        per_level=args.per_level)
    home = level_files(args.eval_run / "filter" / "heldout.jsonl", args.eval_run,
                       "other_world_home", per_level=args.per_level)
    for name, path in models.items():
        rows = [evaluate(args.run_dir, other[lv], Path(path), f"{name}-world{args.world_seed}-"
                         f"{lv}") for lv in LEVELS]
        if Path(path).resolve() == SHIPPED.get(name, Path()).resolve():
            at_home, where = shipped_headline(name), "the shipped per-task files"
        else:
            at_home = headline([evaluate(args.eval_run, home[lv], Path(path),
                                         f"{name}-home-{lv}") for lv in LEVELS])
            where = f"{args.per_level} tasks a level"
        there = headline(rows)
        ratio = f"{there / at_home:.2f}" if at_home else "n/a"
        levels = ", ".join(f"{lv} {r['pass1']:.3f}" for lv, r in zip(LEVELS, rows))
        print(f"{name}: world {args.world_seed} headline {there:.3f} ({levels}); evaluation "
              f"world {at_home:.3f} ({where}); ratio {ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
