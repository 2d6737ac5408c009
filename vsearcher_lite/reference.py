"""The reference run: a full-length run's logs, per-task results and small checkpoints, shipped.

A 2-core laptop holds minutes of training: enough to watch the mechanics, not the result. So the
training notebooks run a short version live, then study a full-length run of the same commands
shipped in ``data/reference/``: its card (how it was made, headline numbers), training logs,
one trimmed line per task evaluated, and the checkpoints that fit ``MAX_CHECKPOINT_MB``.
``check_reference`` lists where the card disagrees with numbers recomputed from the files.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

from vsearcher_lite.evaluation.comparison import BENCHMARKS, POLICIES, eval_name
from vsearcher_lite.manifest import git_state
from vsearcher_lite.profiles import load_profile
from vsearcher_lite.rl.objective import paired_difference, share
from vsearcher_lite.runio import (
    InputError,
    atomic_write_json,
    atomic_write_text,
    read_json,
    read_jsonl,
    read_number_rows,
    replace_dir,
    write_jsonl,
)

REFERENCE_DIR = Path(__file__).resolve().parent.parent / "data" / "reference"
MAX_CHECKPOINT_MB = 25.0
#: What a shipped result line keeps of an evaluation record (the trajectory is left out).
RESULT_FIELDS = ("id", "policy", "split", "difficulty", "correct", "format_ok", "format_error",
                 "termination", "n_turns", "n_tool_calls", "tool_counts", "prediction", "answer",
                 "seconds")
CHECKPOINTS = {"sft": Path("sft") / "checkpoint", "grpo": Path("grpo") / "checkpoint"}
LOGS = {"sft": Path("sft") / "loss.csv", "grpo": Path("grpo") / "steps.csv"}
#: The targets a full-length run is held to (paired on the same held-out tasks).
TARGETS = {
    "sft_minus_base": 0.30,  # SFT Pass@1 above the base model's
    "rl_minus_sft": 0.05,  # RL Pass@1 above SFT's ...
    "rl_minus_sft_se_max": 0.015,  # ... with a paired standard error at most this
    "sft_format_valid": 0.90,
    "reward_rise": 0.10,  # mean sampled reward of the last 20 % of GRPO steps above the first 20 %
    "min_heldout_tasks": 600,
    "min_exam_tasks": 100,
    "teacher_exam": 0.30,
}


#: The full-length settings on top of the cpu profile's recipe, by stage
#: (``profiles/reference.toml`` says why).
_FULL_LENGTH = load_profile("reference")
REFERENCE_SFT, REFERENCE_GRPO = _FULL_LENGTH["sft"], _FULL_LENGTH["grpo"]
REFERENCE_COMPARISON = _FULL_LENGTH["comparison"]


def _round(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(float(x), digits)


def read_results(ref: str | Path, benchmark: str, policy: str) -> list[dict]:
    """The shipped per-task results of one policy on one benchmark ([] when not evaluated)."""
    path = Path(ref) / "results" / f"{eval_name(benchmark, policy)}.jsonl"
    return list(read_jsonl(path)) if path.exists() else []


def policy_numbers(records: list[dict]) -> dict:
    """Pass@1, format-valid rate, tool calls and per-difficulty accuracy of one result file."""
    from vsearcher_lite.scoring.metrics import eval_metrics

    if not records:
        return {"n_tasks": 0}
    m = eval_metrics(records)
    keys = ("n_tasks", "n_correct", "pass_at_1", "format_valid_rate", "mean_tool_calls",
            "accuracy_by_difficulty")
    return {**{k: m[k] for k in keys},
            "n_by_difficulty": {level: g["n_tasks"] for level, g in m["by_difficulty"].items()}}


def paired(before: list[dict], after: list[dict]) -> dict | None:
    """``after - before`` on the tasks both were evaluated on: mean, SE, n, gained, lost."""
    a = {r["id"]: float(bool(r["correct"])) for r in before}
    b = {r["id"]: float(bool(r["correct"])) for r in after}
    ids = sorted(set(a) & set(b))
    if not ids:
        return None
    d = paired_difference([a[i] for i in ids], [b[i] for i in ids])
    return {**d.to_dict(), "mean": _round(d.mean), "se": _round(d.se)}


def headline_numbers(ref: str | Path) -> dict:
    """Every number the card states, computed from the reference's own logs and results."""
    ref = Path(ref)
    numbers: dict[str, Any] = {"policies": {
        b: {p: policy_numbers(read_results(ref, b, p)) for p in POLICIES} for b in BENCHMARKS}}
    heldout = {p: read_results(ref, "heldout", p) for p in POLICIES}
    numbers["paired_heldout"] = {"sft_minus_base": paired(heldout["base"], heldout["sft"]),
                                 "rl_minus_sft": paired(heldout["sft"], heldout["rl"])}
    if (ref / LOGS["sft"]).exists():
        rows = read_number_rows(ref / LOGS["sft"])
        losses = [r.get("loss") for r in rows]
        numbers["sft"] = {"logged_steps": len(rows),
                          "last_step": rows[-1]["step"] if rows else None,
                          "loss_first_20pct": _round(share(losses, first=True)),
                          "loss_last_20pct": _round(share(losses, first=False))}
    if (ref / LOGS["grpo"]).exists():
        rows = read_number_rows(ref / LOGS["grpo"])
        rewards = [r.get("reward") for r in rows]
        groups = sum(r.get("groups") or 0 for r in rows)
        flat = sum(r.get("zero_variance_groups") or 0 for r in rows)
        numbers["grpo"] = {"steps": len(rows),
                           "reward_first_20pct": _round(share(rewards, first=True)),
                           "reward_last_20pct": _round(share(rewards, first=False)),
                           "zero_variance_group_share": _round(flat / groups) if groups else None}
    return numbers


def acceptance(numbers: dict) -> dict[str, bool | None]:
    """Each target of ``TARGETS`` met (True), missed (False) or not measurable (None)."""
    heldout, exam = numbers["policies"]["heldout"], numbers["policies"]["exam"]
    pairs = numbers["paired_heldout"]
    sft_base, rl_sft = pairs.get("sft_minus_base"), pairs.get("rl_minus_sft")
    grpo = numbers.get("grpo") or {}
    first, last = grpo.get("reward_first_20pct"), grpo.get("reward_last_20pct")

    def at_least(value, target):
        return None if value is None else value >= target

    rl_met = None if rl_sft is None else (rl_sft["mean"] >= TARGETS["rl_minus_sft"]
                                          and rl_sft["se"] <= TARGETS["rl_minus_sft_se_max"])
    rise = None if first is None or last is None else last - first
    return {
        "heldout_tasks": at_least(heldout["sft"].get("n_tasks"), TARGETS["min_heldout_tasks"]),
        "sft_minus_base": at_least(sft_base and sft_base["mean"], TARGETS["sft_minus_base"]),
        "rl_minus_sft": rl_met,
        "sft_format_valid": at_least(heldout["sft"].get("format_valid_rate"),
                                     TARGETS["sft_format_valid"]),
        "reward_rise": at_least(rise, TARGETS["reward_rise"]),
        "exam_tasks": at_least(exam["teacher"].get("n_tasks"), TARGETS["min_exam_tasks"]),
        "teacher_exam": at_least(exam["teacher"].get("pass_at_1"), TARGETS["teacher_exam"]),
    }


def read_card(ref: str | Path = REFERENCE_DIR) -> dict:
    """The reference's ``card.json``, or one line saying how to make one."""
    path = Path(ref) / "card.json"
    if not path.exists():
        raise InputError(f"{path} does not exist: point REFERENCE_DIR at a reference folder, or "
                         "make one with `make reference` (`vsearcher-lite reference run`)")
    return read_json(path)


def read_log(ref: str | Path, stage: str) -> list[dict]:
    """The reference's SFT loss rows (``stage="sft"``) or GRPO step rows (``"grpo"``)."""
    path = Path(ref) / LOGS[stage]
    if not path.exists():
        raise InputError(f"{path} does not exist: this reference has no {stage} log")
    return read_number_rows(path)


def reference_comparison(ref: str | Path = REFERENCE_DIR) -> dict:
    """The reference's results as comparison metrics, so they are drawn as a run's are."""
    from vsearcher_lite.agent.task import in_level_order
    from vsearcher_lite.evaluation.comparison import comparison_metrics
    from vsearcher_lite.scoring.metrics import eval_metrics

    results: dict[str, dict[str, dict]] = {}
    status: dict[str, dict] = {}
    tasks: dict[str, dict[str, str]] = {b: {} for b in BENCHMARKS}  # benchmark: id -> level
    for policy in POLICIES:
        found = {b: rows for b in BENCHMARKS if (rows := read_results(ref, b, policy))}
        for b, rows in found.items():
            tasks[b].update((r["id"], r.get("difficulty")) for r in rows)
        if found:
            results[policy] = {b: eval_metrics(rows) for b, rows in found.items()}
            status[policy] = {"state": "evaluated", "reason": None}
        else:
            status[policy] = {"state": "missing", "reason": "not in this reference"}
    metrics = comparison_metrics(results, status)
    levels = list(tasks["heldout"].values())
    by_level = {d: levels.count(d) for d in in_level_order(set(levels))}
    metrics["n_tasks"] = {"exam": len(tasks["exam"]), "heldout": len(tasks["heldout"]),
                          "heldout_by_difficulty": by_level}
    return metrics


def _accuracy(records: list[dict], ids: set[str]) -> float | None:

    return _round(sum(bool(r["correct"]) for r in records if r["id"] in ids) / len(ids))


def paired_rows(ref: str | Path = REFERENCE_DIR) -> list[dict]:
    """SFT - base and RL - SFT on the tasks both were evaluated on (held-out overall, each level,
    the exam): both accuracies, the mean difference, its SE and the tasks gained and lost."""
    from vsearcher_lite.agent.task import in_level_order

    rows = []
    for before, after in (("base", "sft"), ("sft", "rl")):
        for benchmark in ("heldout", "exam"):
            a, b = read_results(ref, benchmark, before), read_results(ref, benchmark, after)
            heldout = benchmark == "heldout"
            levels = in_level_order({r.get("difficulty") for r in a}) if heldout else []
            for group in [benchmark, *levels]:
                ga, gb = ([r for r in results if group in (benchmark, r.get("difficulty"))]
                          for results in (a, b))
                d = paired(ga, gb)
                if d is None:
                    continue
                ids = {r["id"] for r in ga} & {r["id"] for r in gb}
                rows.append({"comparison": f"{after} - {before}", "tasks": group, "n": d["n"],
                             "before": _accuracy(ga, ids), "after": _accuracy(gb, ids),
                             "difference": d["mean"], "se": d["se"], "gained": d["gained"],
                             "lost": d["lost"]})
    return rows


def reference_summary(ref: str | Path = REFERENCE_DIR) -> dict:
    """What ``summary.json`` records of the reference, or why it could not be read."""
    ref = Path(ref)
    try:
        card = read_card(ref)
        numbers = headline_numbers(ref)
    except (InputError, OSError, ValueError, KeyError) as exc:
        return {"dir": str(ref), "error": str(exc)}
    made = {k: card.get(k) for k in ("commands", "commit", "device", "seeds", "wall_seconds")}
    return {"dir": str(ref), **made, "numbers": numbers, "acceptance": acceptance(numbers)}


def _differences(stated: Any, computed: Any, path: str = "") -> list[str]:
    if isinstance(stated, dict) and isinstance(computed, dict):
        out = []
        for key in sorted(set(stated) | set(computed)):
            where = f"{path}.{key}" if path else key
            out += _differences(stated.get(key), computed.get(key), where)
        return out
    if isinstance(stated, float) or isinstance(computed, float):
        same = not (stated is None or computed is None
                    or abs(float(stated) - float(computed)) > 5e-4)
    else:
        same = stated == computed
    return [] if same else [f"{path}: the card says {stated}, the files give {computed}"]


def check_reference(ref: str | Path = REFERENCE_DIR) -> list[str]:
    """Where ``card.json`` disagrees with the numbers recomputed from the files ([] if nowhere)."""
    ref = Path(ref)
    card = read_card(ref)
    computed = headline_numbers(ref)
    problems = _differences(card.get("numbers"), computed, "numbers")
    problems += _differences(card.get("acceptance"), acceptance(computed), "acceptance")
    return problems



def _size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def ship_reference(run_dir: str | Path, out: str | Path, *, commands: list[str], device: str,
                   seeds: list[int], wall_seconds: dict[str, float] | None = None,
                   max_checkpoint_mb: float = MAX_CHECKPOINT_MB, log=print) -> dict:
    """Copy a finished run's logs, trimmed per-task results and small checkpoints into ``out`` and
    write its card; the folder is built beside ``out`` and swapped in whole. Returns the card."""
    run_dir, out = Path(run_dir), Path(out)
    if not (run_dir / "eval").is_dir():
        raise InputError(f"{run_dir / 'eval'} does not exist: evaluate the run first "
                         "(`vsearcher-lite eval --compare`)")
    staging = out.with_name(f".{out.name}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for rel in LOGS.values():
        if (run_dir / rel).exists():
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(run_dir / rel, staging / rel)
    shipped, skipped = {}, {}
    for benchmark in BENCHMARKS:
        for policy in POLICIES:
            name = eval_name(benchmark, policy)
            src = run_dir / "eval" / name / "results.jsonl"
            if src.exists():
                rows = [{k: r.get(k) for k in RESULT_FIELDS} for r in read_jsonl(src)]
                write_jsonl(staging / "results" / f"{name}.jsonl", rows)
                shipped[name] = len(rows)
    checkpoints = {}
    for name, rel in CHECKPOINTS.items():
        if not (run_dir / rel / "config.json").exists():
            continue
        size = _size_mb(run_dir / rel)
        if size <= max_checkpoint_mb:
            shutil.copytree(run_dir / rel, staging / rel,
                            ignore=shutil.ignore_patterns("optimizer*", "rng_state*"))
            checkpoints[name] = round(size, 1)
        else:
            skipped[name] = f"{size:.1f} MB, over {max_checkpoint_mb:g} MB"
    numbers = headline_numbers(staging)
    card = {
        "commands": commands,
        "commit": git_state()["commit"],
        "device": device,
        "seeds": seeds,
        "wall_seconds": wall_seconds or {},
        "results_shipped": shipped,
        "checkpoints_mb": checkpoints,
        "checkpoints_not_shipped": skipped,
        "numbers": numbers,
        "targets": TARGETS,
        "acceptance": acceptance(numbers),
    }
    atomic_write_json(staging / "card.json", card)
    atomic_write_text(staging / "CARD.md", card_markdown(card))
    replace_dir(staging, out)
    log(f"[reference] wrote {out}: {len(shipped)} result files, "
        f"checkpoints {checkpoints or 'none'}")
    return card


def card_markdown(card: dict) -> str:
    """The card for a person: how the reference was made, then its headline numbers."""
    n = card["numbers"]
    lines = ["# Reference run", "",
             f"Device: {card['device']}; commit {card['commit']}; seeds {card['seeds']}.", "",
             "Regenerate it with:", "", "```bash", *card["commands"], "```", ""]
    if card["wall_seconds"]:
        wall = ", ".join(f"{k} {v / 60:.1f} min" for k, v in card["wall_seconds"].items())
        lines += [f"Wall time: {wall}", ""]
    lines += ["| benchmark | policy | tasks | Pass@1 | format-valid | tool calls |",
              "|---|---|---|---|---|---|"]
    for benchmark, by_policy in n["policies"].items():
        for policy, m in by_policy.items():
            if m.get("n_tasks"):
                lines.append(f"| {benchmark} | {policy} | {m['n_tasks']} | {m['pass_at_1']} | "
                             f"{m['format_valid_rate']} | {m['mean_tool_calls']} |")
    lines.append("")
    for name, d in n["paired_heldout"].items():
        if d:
            lines.append(f"- {name.replace('_minus_', ' - ')} (paired, held-out): "
                         f"{d['mean']:+.4f} (SE {d['se']:.4f}, n {d['n']}; "
                         f"{d['gained']} gained, {d['lost']} lost)")
    if n.get("grpo"):
        g = n["grpo"]
        lines.append(f"- GRPO: {g['steps']} steps; sampled reward {g['reward_first_20pct']} "
                     f"(first 20 %) -> {g['reward_last_20pct']} (last 20 %); groups with equal "
                     f"rewards {g['zero_variance_group_share']}")
    targets = ", ".join(f"{k} {'met' if v else 'not met' if v is False else 'not measured'}"
                        for k, v in card["acceptance"].items())
    lines += ["", f"Targets: {targets}", ""]
    return "\n".join(lines)


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


def run_reference(run_dir: str | Path, *, device: str = "auto", seed: int = 0,
                  log=print) -> dict[str, float]:
    """SFT, GRPO and the comparison at full length, skipping finished stages; wall seconds."""
    import time

    from vsearcher_lite.evaluation.comparison import ComparisonConfig, run_comparison
    from vsearcher_lite.rl.config import GRPOConfig
    from vsearcher_lite.rl.grpo import run_grpo
    from vsearcher_lite.training.config import SFTConfig
    from vsearcher_lite.training.sft import run_sft

    run_dir = Path(run_dir)
    seconds: dict[str, float] = {}

    def full_length(config, settings):
        for key, value in settings.items():  # None too: the presets' step and time caps are lifted
            setattr(config, key, value)
        if hasattr(config, "check"):
            config.check()
        return config

    def sft():
        config = SFTConfig.for_profile("cpu", device=device, seed=seed)
        return run_sft(run_dir, full_length(config, REFERENCE_SFT), log=log)

    def grpo():
        config = GRPOConfig.for_profile("cpu", device=device, seed=seed)
        return run_grpo(run_dir, full_length(config, REFERENCE_GRPO), log=log)

    def comparison():
        config = ComparisonConfig.for_profile("cpu", seed=seed, eval_overrides={"device": device})
        return run_comparison(run_dir, full_length(config, REFERENCE_COMPARISON), log=log)

    for name, run in (("sft", sft), ("grpo", grpo), ("comparison", comparison)):
        done = run_dir / name / "metrics.json"
        trained = name == "comparison" or (run_dir / name / "checkpoint" / "config.json").exists()
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


# ---------------------------------------------------------------------------------------------
# Command line


def register(sub, common) -> None:
    p = sub.add_parser("reference", parents=[common],
                       help="ship a finished run as the reference, or check one",
                       description="Ship a finished run (its logs, per-task results and small "
                                   "checkpoints) as a reference, or check a reference's card "
                                   "against its own files.")
    p.add_argument("action", choices=("run", "ship", "check"),
                   help="run: the full-length SFT, GRPO and evaluation in --run-dir (resumable), "
                        "then ship it; ship: a finished run into --out; check: a reference's "
                        "card against its files")
    p.add_argument("--out", default=str(REFERENCE_DIR),
                   help="the reference folder (default: data/reference)")
    p.add_argument("--device", default="auto", help="run: auto | cpu | cuda (default auto)")
    p.add_argument("--machine", help="what the run ran on, for the card "
                                     "(default: this machine's CPU or GPU name)")
    p.add_argument("--command", action="append", default=[], dest="commands",
                   help="a command that made the run, for the card (repeat in order)")
    p.set_defaults(func=_command)


def _command(args: argparse.Namespace) -> int:
    if args.action == "check":
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
