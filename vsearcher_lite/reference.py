"""The reference run: a full-length run's logs, per-task results and small checkpoints, shipped.

A 2-core laptop holds minutes of training: enough to watch the mechanics, not the result. So the
training notebooks run a short version live, then study a full-length run of the same commands
shipped in ``data/reference/``: its card (how it was made, headline numbers), training logs,
one trimmed line per task evaluated, and the checkpoints that fit ``MAX_CHECKPOINT_MB``.
``check_reference`` lists where the card disagrees with numbers recomputed from the files.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from vsearcher_lite.agent.task import in_level_order
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
from vsearcher_lite.scoring.passk import sample_number

REFERENCE_DIR = Path(__file__).resolve().parent.parent / "data" / "reference"
MAX_CHECKPOINT_MB = 25.0
#: What a shipped result line keeps of an evaluation record (the trajectory is left out).
RESULT_FIELDS = ("id", "policy", "split", "difficulty", "correct", "format_ok", "format_error",
                 "termination", "n_turns", "n_tool_calls", "tool_counts", "prediction", "answer",
                 "seconds")
CHECKPOINTS = {"sft": Path("sft") / "checkpoint", "grpo": Path("grpo") / "checkpoint"}
LOGS = {"sft": Path("sft") / "loss.csv", "grpo": Path("grpo") / "steps.csv"}
#: The SFT stage's trajectories by level: kept, dropped for length, token lengths.
LENGTHS = Path("sft") / "lengths.json"
#: The GRPO pre-screen: each RL-pool task's correct answers in a few episodes of the SFT model.
PRESCREEN = Path("grpo") / "prescreen.jsonl"
#: A few headline tasks that RL answers and SFT does not, both episodes turn by turn.
GAINED = Path("examples") / "rl_gained.jsonl"
MAX_GAINED = 3
#: The targets a full-length run is held to (paired on the same held-out tasks; the headline's
#: tasks are the paper's levels, easy, medium and hard: one-hop is a warm-up, reported apart).
TARGETS = {
    "sft_dropped_max": 0.01,  # share of teacher trajectories SFT drops for length
    "sft_minus_base": 0.25,  # SFT Pass@1 above the base model's
    "sft_medium": 0.15,  # SFT Pass@1 on medium tasks ...
    "sft_medium_tool_calls": 0.30,  # ... with tool calls within this share of the teacher's
    "rl_minus_sft": 0.05,  # RL Pass@1 above SFT's ...
    "rl_minus_sft_se_max": 0.015,  # ... with a paired standard error at most this
    "sft_format_valid": 0.90,
    "reward_rise": 0.10,  # mean sampled reward of the last 20 % of GRPO steps above the first 20 %
    "min_heldout_tasks": 600,
    "min_exam_tasks": 100,
    "teacher_exam": 0.30,
}
#: The paper's levels: the headline's tasks.
HEADLINE_LEVELS = ("easy", "medium", "hard")
HEADLINE_GROUP = "easy+medium+hard"
#: The policies whose Pass@k the reference measures on the validation split, before and after RL.
PASSK_POLICIES = ("sft", "rl")
PASSK_BENCHMARK = "validation"


#: The full-length settings on top of the cpu profile's recipe, by stage
#: (``profiles/reference.toml`` says why).
_FULL_LENGTH = load_profile("reference")
REFERENCE_TRAJECTORIES = _FULL_LENGTH["trajectories"]
REFERENCE_SFT, REFERENCE_GRPO = _FULL_LENGTH["sft"], _FULL_LENGTH["grpo"]
REFERENCE_COMPARISON, REFERENCE_PASSK = _FULL_LENGTH["comparison"], _FULL_LENGTH["passk"]


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
            "n_by_difficulty": {level: g["n_tasks"] for level, g in m["by_difficulty"].items()},
            "by_difficulty": {level: {"accuracy": g["accuracy"], "n_tasks": g["n_tasks"],
                                      "mean_tool_calls": g["mean_tool_calls"]}
                              for level, g in m["by_difficulty"].items()}}


def paired(before: list[dict], after: list[dict]) -> dict | None:
    """``after - before`` on the tasks both were evaluated on: mean, SE, n, gained, lost."""
    a = {r["id"]: float(bool(r["correct"])) for r in before}
    b = {r["id"]: float(bool(r["correct"])) for r in after}
    ids = sorted(set(a) & set(b))
    if not ids:
        return None
    d = paired_difference([a[i] for i in ids], [b[i] for i in ids])
    return {**d.to_dict(), "mean": _round(d.mean), "se": _round(d.se)}


def headline(records: list[dict]) -> list[dict]:
    """The records of the headline's levels (easy, medium and hard: one-hop left out)."""
    return [r for r in records if r.get("difficulty") in HEADLINE_LEVELS]


def heldout_groups(records: list[dict]) -> dict[str, tuple[str, ...]]:
    """The held-out groups reported, each with its levels: the headline (easy, medium and hard
    together), each level of ``records`` (one-hop apart), and medium and hard together."""
    levels = in_level_order({r.get("difficulty") for r in records})
    groups = {HEADLINE_GROUP: HEADLINE_LEVELS, **{level: (level,) for level in levels}}
    if {"medium", "hard"} <= set(levels):
        groups["medium+hard"] = ("medium", "hard")
    return groups


def read_samples(ref: str | Path, policy: str) -> list[list[dict]]:
    """The shipped sampled evaluations of ``policy`` on the validation split, in sample order."""
    found = sorted((Path(ref) / "results").glob(f"{PASSK_BENCHMARK}-{policy}-s*.jsonl"),
                   key=lambda p: sample_number(p.stem))
    return [list(read_jsonl(p)) for p in found]


def passk_numbers(samples: list[list[dict]]) -> dict | None:
    """Pass@1 (sampled), Pass@k and the tasks with mixed outcomes, overall and by level."""
    from vsearcher_lite.scoring.passk import passk_metrics

    if len(samples) < 2:
        return None
    m = passk_metrics(samples)

    def keep(g: dict) -> dict:
        return {k: g[k] for k in ("n_tasks", "pass_at_1", "pass_at_k", "mixed", "all_correct",
                                  "none_correct")}

    return {"n_samples": m["n_samples"], **keep(m),
            "by_level": {level: keep(g) for level, g in m["by_level"].items()}}


def prescreen_numbers(rows: list[dict]) -> dict:
    """The GRPO pre-screen by level: tasks screened, solved sometimes (``mixed``, what GRPO trains
    on), always, never, and the pass rate of the screened episodes."""
    out = {}
    for level in in_level_order({r["difficulty"] for r in rows}):
        got = [r for r in rows if r["difficulty"] == level]
        k = got[0]["samples"]
        out[level] = {"screened": len(got), "mixed": sum(0 < r["correct"] < k for r in got),
                      "all_correct": sum(r["correct"] == k for r in got),
                      "none_correct": sum(r["correct"] == 0 for r in got),
                      "pass_rate": _round(sum(r["correct"] for r in got) / (k * len(got)))}
    return out


def grpo_numbers(rows: list[dict]) -> dict:
    """GRPO's step log as the card states it: steps, the mean reward and per-token entropy over the
    first and the last 20% of the steps, and the share of sampled groups whose rewards were all
    equal (the groups GRPO cannot learn from)."""
    rewards = [r.get("reward") for r in rows]
    groups_n = sum(r.get("groups") or 0 for r in rows)
    flat = sum(r.get("zero_variance_groups") or 0 for r in rows)
    entropy = [r.get("entropy") for r in rows]
    return {"steps": len(rows),
            "reward_first_20pct": _round(share(rewards, first=True)),
            "reward_last_20pct": _round(share(rewards, first=False)),
            "entropy_first_20pct": _round(share(entropy, first=True)),
            "entropy_last_20pct": _round(share(entropy, first=False)),
            "zero_variance_group_share": _round(flat / groups_n) if groups_n else None}


def headline_numbers(ref: str | Path) -> dict:
    """Every number the card states, computed from the reference's own logs and results."""
    ref = Path(ref)
    numbers: dict[str, Any] = {"policies": {
        b: {p: policy_numbers(read_results(ref, b, p)) for p in POLICIES} for b in BENCHMARKS}}
    heldout = {p: read_results(ref, "heldout", p) for p in POLICIES}
    numbers["headline"] = {p: policy_numbers(headline(rows)) for p, rows in heldout.items()}
    numbers["paired_heldout"] = {"sft_minus_base": paired(headline(heldout["base"]),
                                                          headline(heldout["sft"])),
                                 "rl_minus_sft": paired(headline(heldout["sft"]),
                                                        headline(heldout["rl"]))}
    numbers["paired_by_level"] = {
        group: {name: paired([r for r in heldout[a] if r.get("difficulty") in members],
                             [r for r in heldout[b] if r.get("difficulty") in members])
                for name, (a, b) in (("sft_minus_base", ("base", "sft")),
                                     ("rl_minus_sft", ("sft", "rl")))}
        for group, members in heldout_groups(heldout["sft"]).items() if group != HEADLINE_GROUP}
    numbers["passk"] = {p: passk_numbers(read_samples(ref, p)) for p in PASSK_POLICIES}
    if (ref / LENGTHS).exists():
        numbers["sft_lengths"] = read_json(ref / LENGTHS)
    if (ref / LOGS["sft"]).exists():
        rows = read_number_rows(ref / LOGS["sft"])
        losses = [r.get("loss") for r in rows]
        numbers["sft"] = {"logged_steps": len(rows),
                          "last_step": rows[-1]["step"] if rows else None,
                          "loss_first_20pct": _round(share(losses, first=True)),
                          "loss_last_20pct": _round(share(losses, first=False))}
    if (ref / LOGS["grpo"]).exists():
        numbers["grpo"] = grpo_numbers(read_number_rows(ref / LOGS["grpo"]))
    if (ref / PRESCREEN).exists():
        numbers["prescreen"] = prescreen_numbers(list(read_jsonl(ref / PRESCREEN)))
    return numbers


def acceptance(numbers: dict) -> dict[str, bool | None]:
    """Each target of ``TARGETS`` met (True), missed (False) or not measurable (None)."""
    top, exam = numbers.get("headline") or {}, numbers["policies"]["exam"]
    heldout = numbers["policies"]["heldout"]
    pairs = numbers["paired_heldout"]
    sft_base, rl_sft = pairs.get("sft_minus_base"), pairs.get("rl_minus_sft")
    grpo = numbers.get("grpo") or {}
    first, last = grpo.get("reward_first_20pct"), grpo.get("reward_last_20pct")
    lengths = numbers.get("sft_lengths")

    def at_least(value, target):
        return None if value is None else value >= target

    def medium(policy: str, key: str):
        found = ((heldout.get(policy) or {}).get("by_difficulty") or {}).get("medium") or {}
        return found.get(key)

    rl_met = None if rl_sft is None else (rl_sft["mean"] >= TARGETS["rl_minus_sft"]
                                          and rl_sft["se"] <= TARGETS["rl_minus_sft_se_max"])
    rise = None if first is None or last is None else last - first
    dropped = None
    if lengths:
        total = sum(g["trajectories"] for g in lengths.values())
        dropped = sum(g["dropped"] for g in lengths.values()) / total if total else None
    calls, teacher_calls = medium("sft", "mean_tool_calls"), medium("teacher", "mean_tool_calls")
    calls_close = (None if calls is None or not teacher_calls
                   else abs(calls - teacher_calls) <= TARGETS["sft_medium_tool_calls"]
                   * teacher_calls)
    return {
        "sft_dropped": None if dropped is None else dropped <= TARGETS["sft_dropped_max"],
        "heldout_tasks": at_least((top.get("sft") or {}).get("n_tasks"),
                                  TARGETS["min_heldout_tasks"]),
        "sft_minus_base": at_least(sft_base and sft_base["mean"], TARGETS["sft_minus_base"]),
        "sft_medium": at_least(medium("sft", "accuracy"), TARGETS["sft_medium"]),
        "sft_medium_tool_calls": calls_close,
        "rl_minus_sft": rl_met,
        "sft_format_valid": at_least((top.get("sft") or {}).get("format_valid_rate"),
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
    """SFT - base and RL - SFT on the tasks both were evaluated on (the headline's easy, medium
    and hard tasks together, each level, medium and hard together, the exam): both accuracies,
    the mean difference, its SE and the tasks gained and lost."""

    rows = []
    for before, after in (("base", "sft"), ("sft", "rl")):
        for benchmark in ("heldout", "exam"):
            a, b = read_results(ref, benchmark, before), read_results(ref, benchmark, after)
            groups = {benchmark: None} if benchmark == "exam" else heldout_groups(a)
            for group, members in groups.items():
                ga, gb = ([r for r in results if members is None or r.get("difficulty") in members]
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



def episode_turns(record: dict) -> list[dict]:
    """An evaluation record's turns as a reader follows them: what the model wrote, the tool it
    called and what the tool returned (text only: image files stay with the run)."""
    turns = []
    for turn in (record.get("trajectory") or {}).get("turns") or []:
        seen = turn.get("observation") or {}
        turns.append({"text": turn.get("text"), "tool": turn.get("tool"),
                      "arguments": turn.get("arguments"), "observation": seen.get("text")})
    return turns


def gained_examples(run_dir: Path, limit: int = MAX_GAINED) -> list[dict]:
    """Up to ``limit`` headline tasks that RL answers and SFT does not (hardest level first,
    then file order), each with both episodes (``episode_turns``)."""
    found = {p: {r["id"]: r for r in read_jsonl(run_dir / "eval" / eval_name("heldout", p)
                                                / "results.jsonl")}
             for p in ("sft", "rl")
             if (run_dir / "eval" / eval_name("heldout", p) / "results.jsonl").exists()}
    if len(found) < 2:
        return []
    sft, rl = found["sft"], found["rl"]
    gained = [i for i, r in rl.items() if r.get("correct") and i in sft
              and not sft[i].get("correct") and r.get("difficulty") in HEADLINE_LEVELS]
    gained.sort(key=lambda i: -HEADLINE_LEVELS.index(rl[i]["difficulty"]))
    out = []
    for task_id in gained[:limit]:
        r = rl[task_id]
        out.append({"id": task_id, "difficulty": r["difficulty"], "question": r.get("question"),
                    "answer": r.get("answer"),
                    **{p: {"prediction": found[p][task_id].get("prediction"),
                           "correct": bool(found[p][task_id].get("correct")),
                           "n_tool_calls": found[p][task_id].get("n_tool_calls"),
                           "turns": episode_turns(found[p][task_id])} for p in ("sft", "rl")}})
    return out


def read_examples(ref: str | Path = REFERENCE_DIR) -> list[dict]:
    """The reference's shipped tasks that RL gained over SFT, both episodes ([] when none)."""
    path = Path(ref) / GAINED
    return list(read_jsonl(path)) if path.exists() else []


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
    if (run_dir / PRESCREEN).exists():
        shutil.copyfile(run_dir / PRESCREEN, staging / PRESCREEN)
    sft_metrics = run_dir / "sft" / "metrics.json"
    if sft_metrics.exists() and read_json(sft_metrics).get("lengths"):
        atomic_write_json(staging / LENGTHS, read_json(sft_metrics)["lengths"])
    shipped, skipped = {}, {}
    names = [eval_name(b, p) for b in BENCHMARKS for p in POLICIES]
    for policy in PASSK_POLICIES:
        names += sorted((p.parent.name for p in (run_dir / "eval").glob(
            f"{PASSK_BENCHMARK}-{policy}-s*/results.jsonl")),
            key=sample_number)
    for name in names:
        src = run_dir / "eval" / name / "results.jsonl"
        if src.exists():
            rows = [{k: r.get(k) for k in RESULT_FIELDS} for r in read_jsonl(src)]
            write_jsonl(staging / "results" / f"{name}.jsonl", rows)
            shipped[name] = len(rows)
    examples = gained_examples(run_dir)
    if examples:
        write_jsonl(staging / GAINED, examples)
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
        "examples_shipped": {"rl_gained": [e["id"] for e in examples]},
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
        total = sum(card["wall_seconds"].values())
        wall = ", ".join(f"{k} {v / 60:.1f} min" for k, v in card["wall_seconds"].items())
        lines += [f"Wall time: {wall} ({total / 3600:.2f} h in all)", ""]
    if n.get("sft_lengths"):
        lines += ["SFT trajectories by level (kept / dropped for length; tokens median, p90, max):",
                  ""]
        lines += [f"- {level}: {g['kept']} / {g['dropped']}; {g['median']}, {g['p90']}, {g['max']}"
                  for level, g in n["sft_lengths"].items()]
        lines.append("")
    levels = ("onehop", *HEADLINE_LEVELS)
    lines += ["Held-out Pass@1 by level (tool calls per task); the headline is easy, medium and "
              "hard together, one-hop apart:", "",
              "| policy | " + " | ".join(levels) + " | headline | exam |",
              "|---|" + "---|" * (len(levels) + 2)]
    for policy, m in n["policies"]["heldout"].items():
        if not m.get("n_tasks"):
            continue
        by = m.get("by_difficulty") or {}
        cells = [f"{by[lv]['accuracy']} ({by[lv]['mean_tool_calls']})" if lv in by else "-"
                 for lv in levels]
        top, exam = n["headline"][policy], n["policies"]["exam"][policy]
        exam_cell = (f"{exam['pass_at_1']} ({exam['mean_tool_calls']})" if exam.get("n_tasks")
                     else "-")
        lines.append(f"| {policy} | " + " | ".join(cells)
                     + f" | {top.get('pass_at_1')} (n {top.get('n_tasks')}) | {exam_cell} |")
    lines.append("")
    for name, d in n["paired_heldout"].items():
        if d:
            lines.append(f"- {name.replace('_minus_', ' - ')} (paired, easy+medium+hard): "
                         f"{d['mean']:+.4f} (SE {d['se']:.4f}, n {d['n']}; "
                         f"{d['gained']} gained, {d['lost']} lost)")
    for group, pair in n.get("paired_by_level", {}).items():
        d = pair.get("rl_minus_sft")
        if d:
            lines.append(f"- rl - sft on {group}: {d['mean']:+.4f} (SE {d['se']:.4f}, n {d['n']})")
    for policy, m in (n.get("passk") or {}).items():
        if m:
            ks = ", ".join(f"Pass@{k} {v}" for k, v in m["pass_at_k"].items())
            by = "; ".join(f"{lv} {g['pass_at_1']} -> {g['pass_at_k'][str(m['n_samples'])]}"
                           for lv, g in m["by_level"].items())
            lines.append(f"- {policy}, validation, {m['n_samples']} samples: {ks}; by level "
                         f"Pass@1 -> Pass@{m['n_samples']}: {by}; mixed tasks {m['mixed']}")
    if n.get("prescreen"):
        lines.append("- GRPO pre-screen (tasks screened / mixed / pass rate): " + "; ".join(
            f"{lv} {g['screened']} / {g['mixed']} / {g['pass_rate']}"
            for lv, g in n["prescreen"].items()))
    if n.get("grpo"):
        g = n["grpo"]
        lines.append(f"- GRPO: {g['steps']} steps; sampled reward {g['reward_first_20pct']} "
                     f"(first 20 %) -> {g['reward_last_20pct']} (last 20 %); groups with equal "
                     f"rewards {g['zero_variance_group_share']}")
    targets = ", ".join(f"{k} {'met' if v else 'not met' if v is False else 'not measured'}"
                        for k, v in card["acceptance"].items())
    lines += ["", f"Targets: {targets}", ""]
    return "\n".join(lines)
