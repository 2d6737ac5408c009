"""Making the reference run: its stages at full length, one resumable command, then shipped.

``run_reference`` makes SFT's data (the teacher's trajectories on the evaluation world, or, when
the recipe has a ``[chains]`` table, training chains from worlds of other seeds), then runs SFT,
GRPO, the comparison and Pass@k with the reference's settings (``profiles/reference.toml``),
skipping the stages a run folder has finished; the ``reference`` command runs it and ships the run
(``reference_ship.ship_reference``), checks a shipped one, or judges its predictions again
(``reference_ship.rescore_reference``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from vsearcher_lite.reference import (
    CHAINS_STAGE,
    CHECKPOINTS,
    LOGS,
    PASSK_BENCHMARK,
    PASSK_POLICIES,
    REFERENCE_CHAINS,
    REFERENCE_COMPARISON,
    REFERENCE_DIR,
    REFERENCE_GRPO,
    REFERENCE_PASSK,
    REFERENCE_SFT,
    REFERENCE_TRAJECTORIES,
    check_reference,
    read_results,
)
from vsearcher_lite.reference_ship import rescore_reference, ship_reference
from vsearcher_lite.runio import (
    InputError,
    RunDir,
    atomic_write_json,
    read_json,
    read_jsonl,
    read_number_rows,
)

# the reference's time for the trajectories stage, the tasks it builds first included
TRAJECTORY_SECONDS = "trajectories/reference_seconds.json"
# the chains stage's time, its earlier parts included
CHAINS_SECONDS = "chains/reference_seconds.json"


def stage_seconds(run_dir: Path, name: str) -> float | None:
    """A finished stage's time, interruptions included: the larger of its ``metrics.json``
    seconds and its log's last row (a resumed process's metrics count only its own part)."""
    found = []
    if (run_dir / name / "metrics.json").exists():
        found.append(read_json(run_dir / name / "metrics.json").get("seconds"))
    if name in LOGS and (run_dir / LOGS[name]).exists():
        rows = read_number_rows(run_dir / LOGS[name])
        found.append(rows[-1].get("seconds") if rows else None)
    found = [float(x) for x in found if isinstance(x, (int, float))]
    return round(max(found), 1) if found else None


def full_length(config, settings: dict):
    """``config`` with a stage's reference settings on top (None too: the presets' step and time
    caps are lifted), checked."""
    for key, value in settings.items():
        setattr(config, key, value)
    if hasattr(config, "check"):
        config.check()
    return config


def teacher_stage(run_dir: Path, seed: int, log=print) -> float:
    """The teacher's trajectories on the evaluation world's training tasks (what SFT trains on
    without ``[chains]``); the stage's seconds. It reuses its stored rollouts; when it had to
    write new ones (other settings) under a finished SFT stage, it stops: the run folder's models
    were trained on other data."""
    import time

    from vsearcher_lite.synthesis.trajectories import TrajectoryConfig, generate_trajectories

    t0 = time.perf_counter()
    # a resumed run reads its stored rollouts, and the stage then records only that reading: the
    # time that made them is kept in the run folder (TRAJECTORY_SECONDS)
    recorded = run_dir / TRAJECTORY_SECONDS
    earlier = [stage_seconds(run_dir, "trajectories") or 0.0]
    if recorded.exists():
        earlier.append(float(read_json(recorded).get("seconds") or 0.0))
    config = full_length(TrajectoryConfig.for_profile("cpu", seed=seed), REFERENCE_TRAJECTORIES)
    made = generate_trajectories(run_dir, config)
    if made["generated_this_run"] and (run_dir / "sft" / "metrics.json").exists():
        raise InputError(f"{run_dir}: its SFT stage trained on trajectories of other settings "
                         f"({made['generated_this_run']} rollouts were written now); run the "
                         "reference in a new run folder")
    seconds = round(time.perf_counter() - t0, 1)
    if not made["generated_this_run"]:
        seconds = max(seconds, *earlier)
    atomic_write_json(recorded, {"seconds": seconds})
    log(f"[reference] trajectories: {made['n_accepted']} accepted, "
        f"{made['n_distinct_accepted']} distinct, {seconds / 60:.1f} min")
    return seconds


def chains_stage(run_dir: Path, seed: int, log=print) -> float:
    """The training chains (``[chains]``: the teacher's trajectories on worlds of other seeds,
    ``RUN_DIR/chains``), then the evaluation world's held-out, validation, RL-pool and exam
    tasks, none of them trained on; the stage's seconds, a resumed run's earlier part included
    (the worlds built before are reused)."""
    import time

    from vsearcher_lite.evaluation.benchmarks import ensure_sandbox_eval_tasks
    from vsearcher_lite.synthesis.chains import ChainConfig, run_chains

    t0 = time.perf_counter()
    recorded = run_dir / CHAINS_SECONDS
    earlier = float(read_json(recorded).get("seconds") or 0.0) if recorded.exists() else 0.0
    made = run_chains(run_dir / CHAINS_STAGE, full_length(ChainConfig(), REFERENCE_CHAINS),
                      log=log)
    ensure_sandbox_eval_tasks(run_dir, profile="cpu", seed=seed, progress=False)
    seconds = round(earlier + time.perf_counter() - t0, 1)
    atomic_write_json(recorded, {"seconds": seconds})
    log(f"[reference] chains: {made['distinct_trajectories']} distinct trajectories from "
        f"{made['n_worlds']} worlds, {seconds / 60:.1f} min")
    return seconds


def run_reference(run_dir: str | Path, *, device: str = "auto", seed: int = 0,
                  log=print) -> dict[str, float]:
    """SFT's data (the training chains when the recipe has ``[chains]``, else the teacher's
    trajectories on the evaluation world), SFT, GRPO, the comparison and Pass@k at full length,
    skipping finished stages; wall seconds."""
    import time

    from vsearcher_lite.evaluation.comparison import ComparisonConfig, run_comparison
    from vsearcher_lite.rl.config import GRPOConfig
    from vsearcher_lite.rl.grpo import run_grpo
    from vsearcher_lite.synthesis.chains import POOLED
    from vsearcher_lite.training.config import SFTConfig
    from vsearcher_lite.training.sft import run_sft

    run_dir = Path(run_dir)
    sft_settings = dict(REFERENCE_SFT)
    if REFERENCE_CHAINS:
        seconds = {CHAINS_STAGE: chains_stage(run_dir, seed, log)}
        sft_settings["train_file"] = str(run_dir / CHAINS_STAGE / POOLED)
    else:
        seconds = {"trajectories": teacher_stage(run_dir, seed, log)}

    def sft():
        config = SFTConfig.for_profile("cpu", device=device, seed=seed)
        return run_sft(run_dir, full_length(config, sft_settings), log=log)

    def grpo():
        config = GRPOConfig.for_profile("cpu", device=device, seed=seed)
        return run_grpo(run_dir, full_length(config, REFERENCE_GRPO), log=log)

    def comparison():
        config = ComparisonConfig.for_profile("cpu", seed=seed, eval_overrides={"device": device})
        return run_comparison(run_dir, full_length(config, REFERENCE_COMPARISON), log=log)

    def passk():
        return run_passk(run_dir, device=device, seed=seed, log=log)

    for name, run in (("sft", sft), ("grpo", grpo), ("comparison", comparison), ("passk", passk)):
        done = run_dir / name / "metrics.json"
        trained = name in ("comparison", "passk") or (
            run_dir / name / "checkpoint" / "config.json").exists()
        if done.exists() and trained:
            log(f"[reference] {name}: finished earlier ({done}), skipped")
            earlier = stage_seconds(run_dir, name)
            if earlier:
                seconds[name] = earlier
            continue
        t0 = time.perf_counter()
        run()
        seconds[name] = round(time.perf_counter() - t0, 1)
        seconds[name] = max(seconds[name], stage_seconds(run_dir, name) or 0.0)
        log(f"[reference] {name}: {seconds[name] / 60:.1f} min")
    return seconds


def run_passk(run_dir: str | Path, *, device: str = "auto", seed: int = 0, log=print) -> dict:
    """Pass@k of the SFT and RL models on the validation split (``REFERENCE_PASSK``: samples,
    temperature, levels and the tasks, taken round-robin over the levels; the held-out
    evaluation's other settings); ``RUN_DIR/passk/metrics.json``."""
    import time

    from vsearcher_lite.agent.task import read_tasks
    from vsearcher_lite.evaluation.comparison import ComparisonConfig, policy_spec
    from vsearcher_lite.scoring.passk import evaluate_samples

    run_dir = Path(run_dir)
    from vsearcher_lite.training.heldout import balanced_head

    tasks = read_tasks(run_dir / "filter" / "validation.jsonl",
                       hint=f"vsearcher-lite filter --run-dir {run_dir}")
    levels = REFERENCE_PASSK.get("levels")
    tasks = [t for t in tasks if levels is None or t.difficulty in levels]
    tasks = balanced_head(tasks, REFERENCE_PASSK.get("max_tasks"), key=lambda t: t.difficulty)
    t0 = time.perf_counter()
    config = ComparisonConfig.for_profile("cpu", seed=seed, eval_overrides={
        "device": device, "temperature": REFERENCE_PASSK["temperature"]}).heldout_eval_config()
    found = {}
    for policy in PASSK_POLICIES:
        m = evaluate_samples(run_dir, tasks, policy_spec(policy, run_dir), config=config,
                             samples=REFERENCE_PASSK["samples"], benchmark=PASSK_BENCHMARK,
                             name=f"{PASSK_BENCHMARK}-{policy}")
        found[policy] = {k: m[k] for k in ("n_samples", "n_tasks", "pass_at_1", "pass_at_k")}
        log(f"[reference] Pass@k of {policy} on {len(tasks)} validation tasks: "
            + ", ".join(f"Pass@{k} {v}" for k, v in m["pass_at_k"].items()))
    metrics = {"policies": found, "seconds": round(time.perf_counter() - t0, 1),
               "temperature": config.temperature}
    atomic_write_json(RunDir(run_dir).stage("passk") / "metrics.json", metrics)
    return metrics


def link_checkpoints(ref: str | Path, run_dir: str | Path) -> None:
    """Make the reference's SFT and RL checkpoints ``run_dir``'s (links; a checkpoint the run
    folder trained itself is kept), so that its stages evaluate the shipped models."""
    for rel in CHECKPOINTS.values():
        link = Path(run_dir) / rel
        if link.is_symlink() or not link.exists():
            link.unlink(missing_ok=True)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to((Path(ref) / rel).resolve())


def passk_again(ref: str | Path, run_dir: str | Path, *, device: str = "auto",
                log=print) -> int:
    """Run the Pass@k stage (``run_passk``, ``REFERENCE_PASSK``'s settings) again in ``run_dir``
    with the shipped SFT and RL checkpoints and ship its samples into ``ref``; the sample files
    shipped. ``run_dir`` holds the default world's tasks (built there when missing)."""
    import time

    from vsearcher_lite.evaluation.benchmarks import ensure_sandbox_eval_tasks
    from vsearcher_lite.reference_ship import ship_passk

    ref, run_dir = Path(ref), Path(run_dir)
    ensure_sandbox_eval_tasks(run_dir, profile="cpu", seed=0)
    link_checkpoints(ref, run_dir)
    t0 = time.perf_counter()
    run_passk(run_dir, device=device, log=log)
    n = ship_passk(run_dir, ref, seconds=time.perf_counter() - t0, device=machine_name(device),
                   command=f"vsearcher-lite reference passk --run-dir {run_dir} --device {device}")
    log(f"[reference] {ref}: {n} Pass@k sample files shipped")
    return n


def walk_reference(ref: str | Path, run_dir: str | Path, *, log=print) -> dict:
    """Run the shipped SFT and RL checkpoints again on the held-out tasks RL gained (greedy, the
    reference's settings: the same episodes, now with their turns), walk each RL episode along
    its task's chain and ship up to ``MAX_GAINED`` that walk it, with the count by level. A task
    whose episodes do not come out as shipped is left out and named. ``run_dir`` holds the
    default world's tasks (built there when missing) and the episodes."""
    from vsearcher_lite.evaluation.benchmarks import ensure_sandbox_eval_tasks
    from vsearcher_lite.evaluation.comparison import ComparisonConfig, eval_name
    from vsearcher_lite.reference_ship import gained_examples, gained_ids, write_examples
    from vsearcher_lite.scoring.evaluate import evaluate
    from vsearcher_lite.scoring.policies import make_policy

    ref, run_dir = Path(ref), Path(run_dir)
    shipped = {p: {r["id"]: r for r in read_results(ref, "heldout", p)} for p in ("sft", "rl")}
    ids = set(gained_ids(shipped["sft"], shipped["rl"]))
    config = full_length(ComparisonConfig.for_profile("cpu", seed=0), REFERENCE_COMPARISON)
    eval_config = config.heldout_eval_config()
    tasks = [t for t in ensure_sandbox_eval_tasks(run_dir, profile="cpu", seed=0)
             if t.split == "heldout" and t.id in ids]
    for policy, stage in (("sft", "sft"), ("rl", "grpo")):
        model = make_policy(f"transformers:{(ref / CHECKPOINTS[stage]).resolve()}", eval_config)
        model.name = policy
        evaluate(run_dir, tasks, model, config=eval_config, name=eval_name("heldout", policy),
                 benchmark="heldout", fresh=True)
    again = {p: {r["id"]: r for r in read_jsonl(run_dir / "eval" / eval_name("heldout", p)
                                                / "results.jsonl")} for p in ("sft", "rl")}
    differ = sorted(i for i in ids for p in ("sft", "rl")
                    if (again[p].get(i) or {}).get("prediction") != shipped[p][i]["prediction"])
    for task_id in differ:
        log(f"[reference] {task_id}: the episodes run again differ from the shipped ones; "
            "left out")
    examples, gains = gained_examples(run_dir, skip=set(differ))
    write_examples(ref, examples, gains)
    walked = sum(g["walked"] for g in gains.values())
    levels = ", ".join(f"{lv} {g['walked']} of {g['gained']}" for lv, g in gains.items())
    log(f"[reference] {ref}: {walked} of {sum(g['gained'] for g in gains.values())} gained tasks "
        f"walk their chain ({levels}); {len(examples)} shipped")
    return gains


# ---------------------------------------------------------------------------------------------
# Command line


def register(sub, common) -> None:
    p = sub.add_parser("reference", parents=[common],
                       help="ship a finished run as the reference, check one, or judge it again",
                       description="Ship a finished run (its logs, per-task results and small "
                                   "checkpoints) as a reference, check a reference's card "
                                   "against its own files, or judge its predictions again.")
    p.add_argument("action", choices=("run", "ship", "check", "rescore", "walk", "passk"),
                   help="run: the teacher's trajectories and the full-length SFT, GRPO and "
                        "evaluation in --run-dir (resumable), "
                        "then ship it; ship: a finished run into --out; check: a reference's "
                        "card against its files; rescore: judge every stored prediction again "
                        "with the offline judge and rebuild the card; walk: run the shipped models "
                        "again on the tasks RL gained (in --run-dir) and ship those whose RL "
                        "episode walks its task's chain; passk: run the Pass@k stage again "
                        "with the shipped models (in --run-dir) and ship its samples")
    p.add_argument("--out", default=str(REFERENCE_DIR),
                   help="the reference folder (default: data/reference)")
    p.add_argument("--device", default="auto", help="run: auto | cpu | cuda (default auto)")
    p.add_argument("--machine", help="what the run ran on, for the card "
                                     "(default: this machine's CPU or GPU name)")
    p.add_argument("--command", action="append", default=[], dest="commands",
                   help="a command that made the run, for the card (repeat in order)")
    p.set_defaults(func=_command)


def _command(args: argparse.Namespace) -> int:
    if args.action == "rescore":
        rescore_reference(args.out)
    if args.action == "walk":
        walk_reference(args.out, args.run_dir)
    if args.action == "passk":
        passk_again(args.out, args.run_dir, device=args.device)
    if args.action in ("check", "rescore", "walk", "passk"):
        problems = check_reference(args.out)
        for line in problems:
            print(line)
        verdict = f"{len(problems)} mismatches" if problems else "consistent"
        print(f"[reference] {args.out}: {verdict}")
        return 1 if problems else 0
    seconds = None
    commands = args.commands
    if args.action == "run":
        seconds = run_reference(args.run_dir, device=args.device, seed=args.seed)
        commands = commands or [f"vsearcher-lite reference run --run-dir {args.run_dir} "
                                f"--device {args.device} --seed {args.seed}"]
    ship_reference(args.run_dir, args.out, commands=commands or ["(not recorded)"],
                   device=args.machine or machine_name(args.device), seeds=[args.seed],
                   wall_seconds=seconds)
    return 0


def machine_name(device: str) -> str:
    """The GPU's name when the run used one, else the CPU's model name and core count."""
    import os
    import platform

    from vsearcher_lite.runtime import resolve_device

    if resolve_device(device).type == "cuda":
        import torch

        return torch.cuda.get_device_name(0)
    model = platform.processor() or "CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"
