"""The SFT model sampled at several temperatures: what each leaves GRPO to learn from.

GRPO learns from groups whose episodes end differently, so its sampling temperature decides how far
the rollouts stray from the SFT model's greedy path. The tiny SFT model's per-token entropy at
T 1.0 is a few hundredths of a nat, which suggests sampling hotter; but the same heat that varies
its choices also breaks its format. This samples one model ``--samples`` times at each of
``--temperatures`` on the first ``--max-tasks`` easy, medium and hard validation tasks (neither
held-out nor RL pool) and prints, per temperature and level, Pass@1, Pass@k, the tasks solved
sometimes but not always, and the share of well-formed episodes.

    python benchmarks/sampling_temperature.py --run-dir runs/reference \\
        --temperatures 0.8,1.0,1.2,1.5 --samples 4 --max-tasks 30

``--run-dir`` is a reference run with its tasks (``vsearcher-lite trajectories --run-dir RUN``
rebuilds them); the samples go to ``RUN/eval/temperature-<label>-T<T>-s<i>`` (resumable).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sft_levers import validation_passk


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run-dir", required=True, help="a reference run with its validation tasks")
    p.add_argument("--checkpoint", default=None,
                   help="the model to sample (default: RUN_DIR/sft/checkpoint)")
    p.add_argument("--label", default="sft", help="the model's name in the table and folders")
    p.add_argument("--temperatures", default="0.8,1.0,1.2,1.5",
                   help="comma-separated sampling temperatures (each > 0)")
    p.add_argument("--samples", type=int, default=4, help="samples per task (default 4)")
    p.add_argument("--max-tasks", type=int, default=30,
                   help="validation tasks, round-robin over the levels (default 30)")
    p.add_argument("--device", default="cpu", help="cpu | cuda | auto (default cpu)")
    args = p.parse_args()

    temperatures = parse_temperatures(args.temperatures, p)
    run = Path(args.run_dir)
    checkpoint = Path(args.checkpoint) if args.checkpoint else run / "sft" / "checkpoint"
    if not (checkpoint / "config.json").exists():
        raise SystemExit(f"{checkpoint}: no model checkpoint there")
    for t in temperatures:
        validation_passk(run, run, [(f"{args.label}-T{t:g}", checkpoint)], args.samples,
                         args.max_tasks, args.device, prefix="temperature", temperature=t)
    return 0


def parse_temperatures(text: str, parser: argparse.ArgumentParser) -> list[float]:
    """``--temperatures`` as floats, each > 0 (sampling; greedy has no spread to measure)."""
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        parser.error(f"--temperatures: not a comma-separated list of numbers: {text!r}")
    if not values or any(v <= 0 for v in values):
        parser.error(f"--temperatures: every temperature must be > 0, got {text!r}")
    return values


if __name__ == "__main__":
    raise SystemExit(main())
