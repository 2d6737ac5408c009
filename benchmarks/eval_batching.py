"""How much faster batched evaluation of a local model is, and whether it answers the same.

Evaluates the same held-out tasks greedily once per generation path in ``--engines`` and batch
size in ``--batches`` (batch B: up to B episodes' turns decoded together) in a scratch folder
linking the run's world and tasks, and prints each wall time, the speed-up over the first and how
many predictions and terminations agree with it. Paths: ``kv`` (each episode continues from its
KV cache), ``generate`` (``transformers``' generate over each whole conversation, on the thread
of the episode that leads the batch: the path ``kv`` replaced). Run it alone on the machine.

    python benchmarks/eval_batching.py --run-dir RUN --policy RUN/sft/checkpoint
    python benchmarks/eval_batching.py --run-dir RUN --policy P --engines generate,kv --batches 16
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--run-dir", required=True, help="a run folder with filter/heldout.jsonl and its world"
    )
    p.add_argument("--policy", required=True, help="a checkpoint folder or transformers:PATH")
    p.add_argument(
        "--tasks", type=int, default=60, help="held-out tasks (round-robin over difficulties)"
    )
    p.add_argument(
        "--batches", default="1,16", help="comma-separated batch sizes; the first is the reference"
    )
    p.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="new tokens per turn (default: the SFT stage's)",
    )
    p.add_argument("--engines", default="kv", help="comma-separated generation paths: kv, "
                   "generate")
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    args = p.parse_args()

    import torch

    from vsearcher_lite.scoring.evaluate import EvalConfig, evaluate
    from vsearcher_lite.training.config import SFTConfig
    from vsearcher_lite.training.heldout import heldout_tasks

    torch.set_num_threads(args.threads)
    batches = [int(b) for b in args.batches.split(",")]
    runs = [(engine, batch) for engine in args.engines.split(",") for batch in batches]
    run = Path(args.run_dir)
    sft = SFTConfig.for_profile("cpu", eval_max_tasks=args.tasks)
    tasks = heldout_tasks(run, sft)
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for entry in run.iterdir():  # the run's folders (world, tasks), not its eval/ or manifest
            if entry.is_dir() and entry.name != "eval":
                (Path(scratch) / entry.name).symlink_to(entry.resolve())
        for engine, batch in runs:
            config = EvalConfig.for_profile(
                "cpu",
                batch=batch,
                max_tokens=args.max_tokens or sft.eval.max_tokens,
                max_tool_calls=sft.eval.max_tool_calls,
                max_context_chars=sft.eval.max_context_chars,
                wall_clock_s=None,
                cache_mode="off",
                progress=False,
            )
            name = f"{engine}{batch}"
            start = time.perf_counter()
            metrics = evaluate(
                scratch, tasks, policy(args.policy, engine, batch), name=name, config=config,
                fresh=True,
            )
            seconds = time.perf_counter() - start
            lines = (Path(scratch) / "eval" / name / "results.jsonl").read_text()
            records = {
                r["id"]: (r.get("prediction"), r.get("termination"))
                for r in map(json.loads, lines.splitlines())
            }
            results[engine, batch] = (seconds, metrics, records)
            shutil.rmtree(Path(scratch) / "eval" / name)
    t1, _, r1 = results[runs[0]]
    print(
        f"tasks {len(tasks)}, torch threads {args.threads}, policy {args.policy}, "
        f"max tokens per turn {args.max_tokens or sft.eval.max_tokens}"
    )
    for engine, batch in runs:
        seconds, metrics, records = results[engine, batch]
        same = sum(r1[k] == records.get(k) for k in r1)
        print(
            f"{engine:8} batch {batch:3d}: {seconds:7.1f} s  {len(tasks) / seconds:6.2f} tasks/s  "
            f"x{t1 / seconds:5.2f}  accuracy {metrics.get('pass_at_1')}  "
            f"format-valid {metrics.get('format_valid_rate')}  "
            f"same prediction and termination as {runs[0][0]} batch {runs[0][1]}: "
            f"{same}/{len(r1)}"
        )
    return 0


_models: dict = {}


def policy(path: str, engine: str, batch: int):
    """An evaluation policy of the checkpoint at ``path`` on the given generation path."""
    from vsearcher_lite.chat.batched import BatchedTransformersChat
    from vsearcher_lite.chat.local import TransformersChat
    from vsearcher_lite.scoring.policies import Policy

    if path not in _models:
        chat = TransformersChat(path.removeprefix("transformers:"))
        _models[path] = (chat.model, chat.processor)
    model, processor = _models[path]
    backend = BatchedTransformersChat(model, processor, max_batch=batch, max_wait_s=0.05,
                                      engine=engine, own_thread=engine == "kv")
    return Policy(f"{engine}{batch}", path, lambda task: backend, shared=backend, batch=batch)


if __name__ == "__main__":
    raise SystemExit(main())
