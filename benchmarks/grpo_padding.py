"""How much of a cpu GRPO update is padding, with micro-batches in rollout order or by length.

From a finished run's ``rollouts.jsonl``, counts per step the tokens the passes compute over the
trajectories in the loss, ``micro_batch`` at a time, each padded to its longest: in rollout
order and shortest first, against the real tokens. A count, not a timing.

    python benchmarks/grpo_padding.py --run-dir runs/reference --name grpo --micro-batch 4
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def padded_tokens(lengths: list[int], size: int, *, by_length: bool) -> int:
    """Tokens computed for sequences of ``lengths`` taken ``size`` at a time, each piece padded to
    its longest, in their order or shortest first.

    >>> [padded_tokens([10, 100, 10, 100], 2, by_length=b) for b in (False, True)]
    [400, 220]
    """
    order = sorted(lengths) if by_length else list(lengths)
    pieces = [order[i : i + size] for i in range(0, len(order), size)]
    return sum(max(piece) * len(piece) for piece in pieces)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True)
    parser.add_argument(
        "--name", default="grpo", help="the GRPO run's folder inside the run (default: grpo)"
    )
    parser.add_argument(
        "--micro-batch", type=int, default=4, help="trajectories per pass (cpu preset: 4)"
    )
    args = parser.parse_args()
    path = Path(args.run_dir) / args.name / "rollouts.jsonl"
    lengths: dict[int, list[int]] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            if r.get("in_loss"):
                length = r["prompt_tokens"] + r["response_tokens"]
                lengths.setdefault(r["step"], []).append(length)
    totals = {"real": 0, "in order": 0, "by length": 0}
    print("step  trajectories  real tokens  padded in order  padded by length")
    for step, row in sorted(lengths.items()):
        counts = {
            "real": sum(row),
            "in order": padded_tokens(row, args.micro_batch, by_length=False),
            "by length": padded_tokens(row, args.micro_batch, by_length=True),
        }
        for key, value in counts.items():
            totals[key] += value
        print(
            f"{step:4d}  {len(row):12d}  {counts['real']:11d}  {counts['in order']:15d}  "
            f"{counts['by length']:16d}"
        )
    real = totals["real"]
    if real:
        print(
            f"all steps: padded / real tokens {totals['in order'] / real:.3f} in order, "
            f"{totals['by length'] / real:.3f} by length; by length computes "
            f"{totals['by length'] / totals['in order']:.3f}x the tokens of in order"
        )


if __name__ == "__main__":
    main()
