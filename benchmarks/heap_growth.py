"""How much resident memory ``runtime.limit_heap_growth`` saves in cpu GRPO, and at what speed.

Runs the same short ``vsearcher-lite grpo --profile cpu`` twice in child processes on a scratch
copy of a run folder: with glibc's defaults (``MALLOC_ARENA_MAX`` at glibc's own 8 per core makes
``limit_heap_growth`` step aside) and with the project's setting. Prints each child's peak
resident set (``wait4``) and wall time, and the ratios. Run it alone on the machine.

    python benchmarks/heap_growth.py --run-dir runs/reproduce --steps 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def scratch_copy(run: Path, scratch: Path) -> None:
    """Link the run's folders into ``scratch``; copy what a GRPO run writes to (eval/, files)."""
    for entry in run.iterdir():
        target = scratch / entry.name
        if entry.name == "eval" and entry.is_dir():
            shutil.copytree(entry, target)
        elif entry.is_dir():
            target.symlink_to(entry.resolve())
        else:
            shutil.copy2(entry, target)


def run_child(run_dir: Path, args: argparse.Namespace, heap: str) -> dict:
    env = dict(os.environ)
    for key in ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_"):
        env.pop(key, None)
    if heap == "glibc-default":
        env["MALLOC_ARENA_MAX"] = str(8 * (os.cpu_count() or 1))
    cmd = [
        sys.executable,
        "-m",
        "vsearcher_lite",
        "grpo",
        "--run-dir",
        str(run_dir),
        "--profile",
        "cpu",
        "--steps",
        str(args.steps),
        "--threads",
        str(args.threads),
        "--name",
        f"grpo-heap-{heap}",
    ]
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    stderr = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({code}):\n{stderr[-2000:]}")
    return {"heap": heap, "peak_mb": usage.ru_maxrss / 1024, "seconds": seconds}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--run-dir", required=True, help="a run folder with an SFT checkpoint and held-out tasks"
    )
    p.add_argument("--steps", type=int, default=3, help="GRPO steps per child")
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    args = p.parse_args()
    run = Path(args.run_dir)
    if not (run / "sft").is_dir():
        raise SystemExit(f"{run}: no sft/ folder; run `vsearcher-lite sft --run-dir {run}` first")
    rows = []
    for heap in ("glibc-default", "limited"):
        with tempfile.TemporaryDirectory() as scratch:
            scratch_copy(run, Path(scratch))
            rows.append(run_child(Path(scratch), args, heap))
            row = rows[-1]
            print(
                f"{heap:14s} peak {row['peak_mb']:7.0f} MB  wall {row['seconds']:6.1f} s",
                flush=True,
            )
    base, limited = rows
    print(
        f"peak memory limited/default: {limited['peak_mb'] / base['peak_mb']:.2f}x; "
        f"wall time limited/default: {limited['seconds'] / base['seconds']:.2f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
