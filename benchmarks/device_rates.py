"""The tiny model's rates on the device it finds: SFT step, GRPO rollout and update, evaluation.

Runs the cpu recipes on ``--device`` in a scratch folder linking a run's world, tasks and
trajectories: SFT steps from the tiny base, GRPO steps of the own engine from that model (or
``--init``), then the greedy held-out evaluation. Prints seconds per step and the evaluation's
tasks and generated tokens per second; writes nothing to the run. Run it alone on the machine.

    python benchmarks/device_rates.py --run-dir runs/reproduce --device cuda
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from pathlib import Path


def device_name(device) -> str:
    import torch

    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    cpu = platform.processor() or platform.machine()
    return f"cpu ({cpu}, {torch.get_num_threads()} torch threads)"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--run-dir",
        required=True,
        help="a run folder with its world, filter/ tasks and trajectories/",
    )
    p.add_argument("--device", default="auto", help="auto (default), cpu or cuda")
    p.add_argument("--sft-steps", type=int, default=20, help="SFT steps (batch 1, the cpu recipe)")
    p.add_argument("--grpo-steps", type=int, default=2, help="GRPO steps of the own engine")
    p.add_argument("--prompts", type=int, default=None, help="GRPO tasks per step (default 4)")
    p.add_argument("--generations", type=int, default=None, help="rollouts per task (default 8)")
    p.add_argument("--eval-tasks", type=int, default=30, help="held-out tasks evaluated")
    p.add_argument(
        "--init",
        default=None,
        help=(
            "start GRPO and the evaluation from this "
            "checkpoint (default: the model of the SFT steps)"
        ),
    )
    p.add_argument("--threads", type=int, default=None, help="torch threads on the CPU (default 2)")
    args = p.parse_args()

    from vsearcher_lite.rl.config import GRPOConfig
    from vsearcher_lite.rl.grpo import run_grpo
    from vsearcher_lite.rl.steps import read_steps
    from vsearcher_lite.runtime import resolve_device
    from vsearcher_lite.scoring.evaluate import evaluate
    from vsearcher_lite.training.config import SFTConfig
    from vsearcher_lite.training.heldout import heldout_tasks
    from vsearcher_lite.training.sft import read_loss_curve, run_sft

    device = resolve_device(args.device)
    run = Path(args.run_dir)
    quiet = lambda message: None  # noqa: E731
    untimed = dict(
        minutes=None, total_minutes=None, progress=False, device=args.device, threads=args.threads
    )
    with tempfile.TemporaryDirectory() as scratch:
        for name in ("world", "filter", "trajectories"):
            if (run / name).is_dir():
                (Path(scratch) / name).symlink_to((run / name).resolve())
        sft_config = SFTConfig.for_profile(
            "cpu", max_steps=args.sft_steps, evaluate=False, **untimed
        )
        sft = run_sft(scratch, sft_config, log=quiet)
        times = [row["seconds"] for row in read_loss_curve(scratch, "sft")]
        steps = [b - a for a, b in zip(times, times[1:])]
        checkpoint = Path(args.init or Path(scratch) / "sft" / "checkpoint").resolve()

        grpo_config = GRPOConfig.for_profile(
            "cpu",
            init=str(checkpoint),
            max_steps=args.grpo_steps,
            evaluate=False,
            prompts_per_step=args.prompts,
            generations=args.generations,
            **untimed,
        )
        grpo = run_grpo(scratch, grpo_config, log=quiet)
        grpo_rows = read_steps(scratch)

        eval_config = sft_config.eval_config(progress=False)
        tasks = heldout_tasks(scratch, SFTConfig.for_profile("cpu", eval_max_tasks=args.eval_tasks))
        start = time.perf_counter()
        ev = evaluate(
            scratch,
            tasks,
            f"transformers:{checkpoint}",
            name="rates",
            config=eval_config,
            fresh=True,
        )
        eval_seconds = time.perf_counter() - start

    print(f"device {device_name(device)}; SFT and GRPO report {sft['device']} and {grpo['device']}")
    median = f", median {statistics.median(steps):.3f} s after the first" if steps else ""
    print(
        f"SFT (cpu recipe, batch 1): {sft['steps']} steps in {sft['train_seconds']:.1f} s, "
        f"mean {sft['seconds_per_step']:.3f} s/step{median}"
    )
    for row in grpo_rows:
        episodes = f"{grpo_config.prompts_per_step} x {grpo_config.generations} episodes"
        print(
            f"GRPO step {int(row['step'])} ({episodes}): "
            f"rollout {row['rollout_seconds']:.1f} s, update {row['update_seconds']:.1f} s, "
            f"reward {row['reward']}, response length {row['response_length']}"
        )
    usage = ev.get("policy_usage") or {}
    tokens = usage.get("completion_tokens")
    rate = f", {tokens / eval_seconds:.0f} generated tokens/s" if tokens else ""
    print(
        f"evaluation (batch {eval_config.batch}, greedy): {len(tasks)} tasks in "
        f"{eval_seconds:.1f} s, "
        f"{len(tasks) / eval_seconds:.2f} tasks/s{rate}; Pass@1 {ev['pass_at_1']} "
        f"({args.init or 'the model of the SFT steps above'})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
