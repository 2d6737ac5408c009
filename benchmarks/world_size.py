"""A bigger sandbox world as an SFT lever: more distinct training tasks for the same SFT steps.

The default world (2,000 entities) gives the reference's SFT about 170 easy, 100 medium and 75
hard distinct training tasks with about three accepted teacher trajectories each, most of them
copies: over its two epochs the tiny model sees every task about seven times. Does the SFT
policy reach further along a chain when the same steps are spread over three to four times as
many tasks?

This builds a run folder from nothing with the cpu profile's stages on a world of ``--entities``
(world, seeds, both injections, filter, the teacher's trajectories with the reference's settings),
with more warm-up tasks per level for training (``--train-warmup``) and the cpu profile's held-out
counts. It then trains the reference's SFT on them for as many steps as the shipped reference SFT
took (its epochs scaled to the trajectories), and evaluates the teacher, the shipped reference
SFT model and the new one greedily on the new world's easy, medium and hard held-out tasks, as
the reference compares its models. Prints the tasks kept, the training data by level, and
Pass@1, tool calls and format-valid per model and level, with the new SFT model paired with the
shipped one task by task. With ``--samples`` both SFT models are also sampled on the new world's
validation tasks (neither held-out nor RL pool): Pass@1 and Pass@k per level, the ceiling of
what GRPO can reach from each. With ``--grpo`` the reference's GRPO (its pre-screen of the whole
RL pool included) continues the new SFT model, and its RL model is paired on the same held-out
tasks with the new SFT model and with the shipped reference RL model.

    python benchmarks/world_size.py --run-dir runs/w5k --samples 16 --grpo

Resumable: a rerun skips the stages whose output is there (SFT resumes from its last save).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections import Counter
from pathlib import Path

#: Training warm-up counts for a 5,000-entity world: the default world's counts scaled by 2.5-2.7
#: (its warm-up pools are about 2.5 times the default world's).
TRAIN_WARMUP = {"easy": 1300, "medium": 1200, "hard": 1200}
#: The shipped reference models.
SHIPPED = Path(__file__).resolve().parent.parent / "data" / "reference"
SHIPPED_SFT = SHIPPED / "sft"


def stage_commands(run: Path, entities: int, warmup: str, onehop_heldout: int) -> list[list[str]]:
    """The CLI commands that build the run's tasks and trajectories, in order; the first word of
    each names the stage folder whose ``metrics.json`` marks it done.

    >>> [c[0] for c in stage_commands(Path("r"), 5000, "easy:1:2", 10)]
    ['world', 'seeds', 'inject-text', 'inject-image', 'filter', 'trajectories']
    """
    common = ["--run-dir", str(run), "--profile", "cpu"]
    levels = ["--warmup-levels", warmup, "--onehop-heldout", str(onehop_heldout)]
    return [
        ["world", "--run-dir", str(run), "--entities", str(entities)],
        ["seeds", *common],
        ["inject-text", *common, *levels],
        ["inject-image", *common, *levels],
        ["filter", *common],
        ["trajectories", *common, "--plan-variety", "0"],  # the reference's teacher
    ]


def reference_steps() -> int:
    """The shipped SFT's optimizer steps, as its card records them (from its loss log)."""
    from vsearcher_lite.reference import read_card

    return int(read_card()["numbers"]["sft"]["last_step"])


def trajectories_by_level(run: Path) -> dict[str, tuple[int, int]]:
    """``level -> (accepted trajectories, distinct tasks)`` of a run's teacher."""
    from vsearcher_lite.runio import read_jsonl

    count, tasks = Counter(), {}
    for record in read_jsonl(run / "trajectories" / "accepted.jsonl"):
        level = record["task_id"].split("-")[1]
        count[level] += 1
        tasks.setdefault(level, set()).add(record["task_id"])
    return {level: (count[level], len(tasks[level])) for level in sorted(count)}


def grpo_summary(run: Path) -> list[str]:
    """Lines on a finished GRPO stage, with the numbers the reference card states: its pre-screen
    by level (tasks screened, solved sometimes, pass rate), its steps, the mean reward and
    per-token entropy over the first and the last 20% of the steps, and the share of sampled
    groups whose rewards were all equal."""
    from vsearcher_lite.reference import LOGS, PRESCREEN, grpo_numbers, prescreen_numbers
    from vsearcher_lite.runio import read_jsonl, read_number_rows

    screened = prescreen_numbers(list(read_jsonl(run / PRESCREEN)))
    g = grpo_numbers(read_number_rows(run / LOGS["grpo"]))
    return ["GRPO pre-screen (screened / solved sometimes / pass rate): " + "; ".join(
                f"{level} {n['screened']} / {n['mixed']} / {n['pass_rate']}"
                for level, n in screened.items()),
            f"GRPO: {g['steps']} steps; first and last 20% of the steps: reward "
            f"{g['reward_first_20pct']}, {g['reward_last_20pct']}, entropy "
            f"{g['entropy_first_20pct']}, {g['entropy_last_20pct']}; share of sampled groups "
            f"with all rewards equal {g['zero_variance_group_share']}"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run-dir", required=True, help="a run folder of its own (created if missing)")
    p.add_argument("--entities", type=int, default=5000,
                   help="entities of the sandbox world (default 5000; the default world: 2000)")
    p.add_argument("--train-warmup", default=",".join(f"{k}:{v}" for k, v in TRAIN_WARMUP.items()),
                   help="training warm-up tasks per level, LEVEL:N,... (default: "
                        "easy:1300,medium:1200,hard:1200)")
    p.add_argument("--onehop-heldout", type=int, default=534,
                   help="one-hop held-out tasks (default 534, the reference's; not evaluated)")
    p.add_argument("--samples", type=int, default=0,
                   help="also sample both SFT models this many times at T 1.0 on the new world's "
                        "validation tasks for Pass@k (default 0: no Pass@k table)")
    p.add_argument("--max-tasks", type=int, default=30,
                   help="with --samples: the first N validation tasks, round-robin over the levels "
                        "(default 30, as the reference's Pass@k)")
    p.add_argument("--grpo", action="store_true",
                   help="also run the reference's GRPO from the new SFT model and evaluate its RL "
                        "model and the shipped one on the held-out tasks")
    p.add_argument("--device", default="cpu", help="cpu | cuda | auto (default cpu)")
    args = p.parse_args()

    from vsearcher_lite.synthesis.inject import InjectConfig

    # the cpu profile's held-out warm-up counts, so that the held-out set keeps the reference's size
    profile = InjectConfig.for_profile("cpu").warmup_levels
    train = dict(x.split(":", 1) for x in args.train_warmup.split(",") if x)
    if set(train) != set(profile) or not all(v.isdigit() for v in train.values()):
        p.error(f"--train-warmup takes easy:N,medium:N,hard:N, got {args.train_warmup!r}")
    warmup = ",".join(f"{k}:{train[k]}:{heldout_n}" for k, (_, heldout_n) in profile.items())

    from sft_levers import (
        heldout,
        heldout_policy,
        print_paired,
        reference_grpo,
        reference_sft_config,
        validation_passk,
    )

    from vsearcher_lite.reference import headline
    from vsearcher_lite.runio import read_json
    from vsearcher_lite.scoring.evaluate import load_results
    from vsearcher_lite.training.sft import run_sft

    run = Path(args.run_dir)
    for command in stage_commands(run, args.entities, warmup, args.onehop_heldout):
        if not (run / command[0] / "metrics.json").exists():
            subprocess.run([sys.executable, "-m", "vsearcher_lite", *command], check=True)
    kept = read_json(run / "filter" / "metrics.json")["n_kept_by_split"]
    print(f"{args.entities} entities; tasks kept: " + ", ".join(f"{k} {v}" for k, v in
                                                               sorted(kept.items())))
    by_level = trajectories_by_level(run)
    accepted = sum(n for n, _ in by_level.values())
    print("teacher trajectories (accepted / distinct tasks): " + ", ".join(
        f"{level} {n} / {t}" for level, (n, t) in by_level.items()))

    checkpoint = run / "sft" / "checkpoint"
    steps = reference_steps()
    if not (checkpoint / "config.json").exists():
        run_sft(run, reference_sft_config(args.device, epochs=round(steps / accepted, 4)))
    trained = read_json(run / "sft" / "metrics.json")
    print(f"SFT: {trained['steps']} steps over {trained['n_train_trajectories']} trajectories "
          f"({trained['n_dropped_too_long']} dropped for length; {round(steps / accepted, 4)} "
          f"epochs); the shipped SFT took {steps} steps")

    heldout_policy(run, run, "teacher", "heldout-teacher", args.device)
    shipped = SHIPPED_SFT / "checkpoint"
    heldout(run, run, shipped, "heldout-shipped-sft", args.device)
    heldout(run, run, checkpoint.resolve(), "heldout-sft", args.device)
    models = [("teacher", "teacher"), ("shipped SFT", "shipped-sft"), ("bigger SFT", "sft")]
    pairs = [("shipped SFT", "bigger SFT")]
    if args.grpo:
        rl = reference_grpo(run, args.device)
        print("\n".join(grpo_summary(run)))
        heldout(run, run, rl.resolve(), "heldout-rl", args.device)
        heldout(run, run, SHIPPED / "grpo" / "checkpoint", "heldout-shipped-rl", args.device)
        models += [("shipped RL", "shipped-rl"), ("bigger RL", "rl")]
        pairs += [("shipped SFT", "shipped RL"), ("bigger SFT", "bigger RL"),
                  ("shipped RL", "bigger RL")]
    results = {name: headline(load_results(run, f"heldout-{stem}")) for name, stem in models}
    print_paired(results, pairs)
    if args.samples > 0:
        validation_passk(run, run, [("shipped", shipped), ("bigger", checkpoint.resolve())],
                         args.samples, args.max_tasks, args.device, prefix="validation")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    raise SystemExit(main())
