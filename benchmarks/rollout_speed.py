"""How much faster GRPO rollouts run when each episode continues from its KV cache.

Runs the same tasks with the same seeds through ``rl.rollout.rollout_groups`` (lockstep, the cpu
profile's rollout settings) three times in one process: ``before``, ``generate`` over every whole
conversation each turn on the thread of the episode that leads the batch (the path the engine
replaced); ``generate``, the same on the batcher's own generation thread; ``kv``, the KV-cache
engine on that thread. Two task sets, one-hop + easy and medium, G episodes of each task. Prints
episodes/s of each path, the tokens each prefilled and generated, the engine's own accounting
and the ratios. Sampled episodes of ``kv`` differ from the others' (it draws its own random
numbers); ``--temperature 0`` compares identical work. The last line is ``medium speedup
<kv over before>``, from the fastest of ``--repeats`` runs of each. Run it alone on the machine.

    python benchmarks/rollout_speed.py                       # builds a scratch run (about 20 s)
    python benchmarks/rollout_speed.py --run-dir runs/reproduce \
        --policy runs/reproduce/sft/checkpoint
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run-dir", help="a run with filter/rl_tasks.jsonl and its world (default: "
                   "build the synthesis stages of the default world in a scratch folder)")
    p.add_argument("--policy", default=str(ROOT / "data/reference/sft/checkpoint"),
                   help="the checkpoint that rolls out (default: the reference SFT model)")
    p.add_argument("--tasks", type=int, default=8, help="tasks per set (one-hop+easy: half each)")
    p.add_argument("--generations", type=int, default=4, help="episodes per task (G)")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    p.add_argument("--repeats", type=int, default=2, help="runs of each path per set, in "
                   "alternating order; the fastest counts (a shared machine's noise is one-sided)")
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    args = p.parse_args()

    from vsearcher_lite.runtime import set_threads

    set_threads(args.threads)  # and the heap limit, as the GRPO stage sets them
    with tempfile.TemporaryDirectory() as scratch:
        run = Path(args.run_dir) if args.run_dir else build_run(Path(scratch) / "run")
        return measure(run, args)


def build_run(run: Path) -> Path:
    """The default world and its tasks (world, seeds, injections, filter), built quietly."""
    from vsearcher_lite.cli import main as cli

    print(f"building the default world's tasks in {run} ...", flush=True)
    cli(["filter", "--run-dir", str(run)])
    return run


def measure(run: Path, args) -> int:
    from dataclasses import replace

    from vsearcher_lite.agent.judge import make_judge
    from vsearcher_lite.chat.batched import BatchedTransformersChat
    from vsearcher_lite.rl.config import GRPOConfig
    from vsearcher_lite.rl.cpu_engine import load_policy
    from vsearcher_lite.rl.inputs import rollout_settings, rollout_toolbox
    from vsearcher_lite.rl.rollout import rollout_groups
    from vsearcher_lite.synthesis.trajectories import load_tasks

    config = GRPOConfig.for_profile("cpu")
    settings = replace(rollout_settings(config), temperature=args.temperature)
    model, processor = load_policy(Path(args.policy), config)
    toolbox = rollout_toolbox(run, config)
    judge = make_judge(config.judge)
    pool = load_tasks(run / "filter" / "rl_tasks.jsonl")
    by_level: dict[str, list] = {}
    for task in pool:
        by_level.setdefault(task.difficulty, []).append(task)
    half = args.tasks // 2
    sets = {"one-hop+easy": by_level.get("easy", [])[:half] + by_level.get("onehop", [])[:half],
            "medium": by_level.get("medium", [])[:args.tasks]}
    batch = config.rollout_batch or config.batch_trajectories
    print(f"policy {args.policy}; rollout batch {batch}, T {settings.temperature:g}, "
          f"top-p {settings.top_p:g}, max tokens {settings.max_tokens}, "
          f"max tool calls {settings.limits.max_tool_calls}; G {args.generations}; "
          f"{torch_threads()} threads")

    paths = {"before": {"engine": "generate", "own_thread": False},
             "generate": {"engine": "generate"}, "kv": {"engine": "kv"}}

    def rollout(path: str, tasks: list) -> tuple[float, list, BatchedTransformersChat]:
        backend = BatchedTransformersChat(model, processor, max_batch=batch,
                                          max_new_tokens=settings.max_tokens, **paths[path])
        start = time.perf_counter()
        groups = rollout_groups(backend, toolbox, tasks, args.generations, settings, judge, None)
        return time.perf_counter() - start, [s for g in groups for s in g], backend

    for path in paths:  # first calls load kernels and fill caches
        rollout(path, sets["medium"][:1])
    print(f"{'set':14} {'path':9} {'episodes':>8} {'seconds':>8} {'ep/s':>6} {'turns':>6} "
          f"{'prompt':>8} {'prefilled':>9} {'generated':>9} {'correct':>7}")
    ratios = {}
    for name, tasks in sets.items():
        rates: dict[str, float] = {}
        for repeat in range(args.repeats):
            for engine in (list(paths) if repeat % 2 == 0 else list(paths)[::-1]):
                seconds, samples, backend = rollout(engine, tasks)
                usage = backend.usage
                prefilled = usage.get("prefilled_tokens", usage["prompt_tokens"])
                turns = sum(len(s.trajectory.turns) for s in samples)
                rates[engine] = max(rates.get(engine, 0.0), len(samples) / seconds)
                print(f"{name:14} {engine:9} {len(samples):8d} {seconds:8.1f} "
                      f"{len(samples) / seconds:6.2f} {turns:6d} {usage['prompt_tokens']:8d} "
                      f"{prefilled:9d} {usage['completion_tokens']:9d} "
                      f"{sum(s.correct for s in samples):7d}")
                if backend.kv is not None:
                    print(f"{'':14} engine: {backend.kv.stats.to_dict()}")
        ratios[name] = rates["kv"] / rates["before"]
        same_thread = rates["kv"] / rates["generate"]
        own_thread = rates["generate"] / rates["before"]
        print(f"{name}, the fastest of each: kv {rates['kv']:.2f} episodes/s, before "
              f"{rates['before']:.2f}; kv / generate on the same thread {same_thread:.2f}, "
              f"generate on its own thread / before {own_thread:.2f}")
    print(f"one-hop+easy speedup {ratios['one-hop+easy']:.2f}")
    print(f"medium speedup {ratios['medium']:.2f}")
    return 0


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


if __name__ == "__main__":
    raise SystemExit(main())
