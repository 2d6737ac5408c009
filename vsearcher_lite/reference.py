"""The reference run: a full-length run's logs, per-task results and small checkpoints, read.

A 2-core laptop holds minutes of training: enough to watch the mechanics, not the result. So the
training notebooks run a short version live, then study a full-length run of the same commands
shipped in ``data/reference/`` (``reference_ship``): its card (how it was made, headline numbers,
targets), training logs, one trimmed line per task evaluated, and the checkpoints that fit
``MAX_CHECKPOINT_MB``. Every number of the card is recomputed here from those files, and
``check_reference`` lists where the card disagrees with them; ``reference_ship.rescore_reference``
judges the shipped predictions again with the current offline judge and rebuilds the card.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vsearcher_lite.agent.task import HEADLINE_GROUP, HEADLINE_LEVELS, in_level_order
from vsearcher_lite.evaluation.comparison import BENCHMARKS, POLICIES, eval_name
from vsearcher_lite.profiles import load_profile
from vsearcher_lite.rl.objective import paired_difference, share
from vsearcher_lite.rl.steps import mixed_column
from vsearcher_lite.runio import (
    InputError,
    read_json,
    read_jsonl,
    read_number_rows,
)
from vsearcher_lite.scoring.metrics import binomial_se
from vsearcher_lite.scoring.passk import sample_number

REFERENCE_DIR = Path(__file__).resolve().parent.parent / "data" / "reference"
MAX_CHECKPOINT_MB = 25.0
CHECKPOINTS = {"sft": Path("sft") / "checkpoint", "grpo": Path("grpo") / "checkpoint"}
LOGS = {"sft": Path("sft") / "loss.csv", "grpo": Path("grpo") / "steps.csv"}
#: The SFT stage's trajectories by level: kept, dropped for length, token lengths.
LENGTHS = Path("sft") / "lengths.json"
#: What SFT trained on by level: distinct tasks and trajectories, how often each was seen.
SEEN = Path("sft") / "seen.json"
#: The GRPO pre-screen: each RL-pool task's correct answers in a few episodes of the SFT model.
PRESCREEN = Path("grpo") / "prescreen.jsonl"
#: A few headline tasks that RL answers and SFT does not, both episodes turn by turn.
GAINED = Path("examples") / "rl_gained.jsonl"
#: The targets a full-length run is held to (paired on the same held-out tasks; the headline's
#: tasks are the paper's levels, easy, medium and hard: one-hop is a warm-up, reported apart).
TARGETS = {
    "sft_dropped_max": 0.01,  # share of teacher trajectories SFT drops for length
    "min_heldout_tasks": 600,
    "paired_min_ses": 3.0,  # base < SFT < RL on the headline: each difference this many SEs
    "sft_medium": 0.10,  # SFT Pass@1 on medium tasks ...
    "sft_medium_tool_calls": 0.30,  # ... with tool calls within this share of the teacher's
    "rl_medium": 0.15,  # RL Pass@1 on medium tasks
    "rl_hard": 0.05,  # RL Pass@1 on hard tasks
    "rl_minus_sft": 0.05,  # RL Pass@1 above SFT's ...
    "rl_minus_sft_se_max": 0.015,  # ... with a paired standard error at most this
    "rl_minus_sft_medium_hard": 0.0,  # RL at least SFT on medium and hard together
    "sft_format_valid": 0.90,  # on every held-out level
    "reward_rise": 0.10,  # mean sampled reward of the last 20 % of GRPO steps above the first 20 %
    "min_exam_tasks": 100,
    "teacher_exam": 0.30,
    "rl_exam": 0.0,  # RL Pass@1 on the exam above this
}
#: The policies whose Pass@k the reference measures on the validation split, before and after RL.
PASSK_POLICIES = ("sft", "rl")
PASSK_BENCHMARK = "validation"


#: The full-length settings on top of the cpu profile's recipe, by stage
#: (``profiles/reference.toml`` says why).
_FULL_LENGTH = load_profile("reference")
REFERENCE_TRAJECTORIES = _FULL_LENGTH["trajectories"]
#: The training chains SFT learns from, when the recipe names them (``synthesis.chains``).
REFERENCE_CHAINS = _FULL_LENGTH.get("chains")
CHAINS_STAGE = "chains"
REFERENCE_SFT, REFERENCE_GRPO = _FULL_LENGTH["sft"], _FULL_LENGTH["grpo"]
REFERENCE_COMPARISON, REFERENCE_PASSK = _FULL_LENGTH["comparison"], _FULL_LENGTH["passk"]


def _round(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(float(x), digits)


def read_results(ref: str | Path, benchmark: str, policy: str) -> list[dict]:
    """The shipped per-task results of one policy on one benchmark ([] when not evaluated)."""
    path = Path(ref) / "results" / f"{eval_name(benchmark, policy)}.jsonl"
    return list(read_jsonl(path)) if path.exists() else []


def policy_numbers(records: list[dict]) -> dict:
    """Pass@1, inexact answers accepted, format-valid rate, tool calls, accuracy by level."""
    from vsearcher_lite.scoring.metrics import eval_metrics

    if not records:
        return {"n_tasks": 0}
    m = eval_metrics(records)
    keys = ("n_tasks", "n_correct", "pass_at_1", "accepted_not_exact", "format_valid_rate",
            "mean_tool_calls", "accuracy_by_difficulty")
    return {**{k: m[k] for k in keys},
            "n_by_difficulty": {level: g["n_tasks"] for level, g in m["by_difficulty"].items()},
            "by_difficulty": {level: {"accuracy": g["accuracy"], "n_tasks": g["n_tasks"],
                                      "format_valid_rate": g["format_valid_rate"],
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
    first and the last 20% of the steps, the share of sampled groups whose rewards were all
    equal (the groups GRPO cannot learn from) and, where the log has them, the groups that
    carried signal by level (``mixed_<level>`` columns)."""
    rewards = [r.get("reward") for r in rows]
    groups_n = sum(r.get("groups") or 0 for r in rows)
    flat = sum(r.get("zero_variance_groups") or 0 for r in rows)
    entropy = [r.get("entropy") for r in rows]
    mixed = {}  # by level: the groups with signal, in all and per step over the first/last 20 %
    for level in HEADLINE_LEVELS:
        per_step = [r.get(mixed_column(level)) for r in rows]
        if any(v is not None for v in per_step):
            mixed[level] = {"total": int(sum(v or 0 for v in per_step)),
                            "first_20pct": _round(share(per_step, first=True)),
                            "last_20pct": _round(share(per_step, first=False))}
    return {"steps": len(rows), **({"mixed_groups_by_level": mixed} if mixed else {}),
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
    if (ref / SEEN).exists():
        numbers["sft_seen"] = read_json(ref / SEEN)
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


def target_checks(numbers: dict) -> dict[str, dict]:
    """Each target of ``TARGETS``: what it requires, what the run measured (None where it was not
    measured) and whether that is met (True, False, or None when not measurable)."""
    top, exam = numbers.get("headline") or {}, numbers["policies"]["exam"]
    heldout = numbers["policies"]["heldout"]
    pairs = numbers["paired_heldout"]
    grpo = numbers.get("grpo") or {}
    first, last = grpo.get("reward_first_20pct"), grpo.get("reward_last_20pct")
    lengths = numbers.get("sft_lengths")
    t = TARGETS

    def level(policy: str, name: str, key: str):
        found = ((heldout.get(policy) or {}).get("by_difficulty") or {}).get(name) or {}
        return found.get(key)

    def check(required: str, value, met) -> dict:  # the value rounded as the card states it
        return {"required": required, "measured": _round(value) if isinstance(value, float)
                else value, "met": None if value is None else met(value)}

    def at_least(value, target) -> dict:
        return check(f">= {target:g}", value, lambda v: v >= target)

    def mean_se(name: str) -> dict | None:  # a paired difference as the card states it
        d = pairs.get(name)
        return d and {"mean": d["mean"], "se": d["se"]}

    def by_ses(name: str) -> dict:  # a paired difference above 0 by at least paired_min_ses SEs
        return check(f"> 0 by >= {t['paired_min_ses']:g} SE", mean_se(name),
                     lambda v: v["mean"] > 0 and v["mean"] >= t["paired_min_ses"] * v["se"])

    dropped = None
    if lengths:
        total = sum(g["trajectories"] for g in lengths.values())
        dropped = sum(g["dropped"] for g in lengths.values()) / total if total else None
    calls = level("sft", "medium", "mean_tool_calls")
    teacher_calls = level("teacher", "medium", "mean_tool_calls")
    off = None if calls is None or not teacher_calls else calls / teacher_calls - 1
    rise = None if first is None or last is None else last - first
    sft_levels = (heldout.get("sft") or {}).get("by_difficulty") or {}
    lowest_valid = min((g["format_valid_rate"] for g in sft_levels.values()), default=None)
    rl_calls = [level("rl", name, "mean_tool_calls") for name in HEADLINE_LEVELS]
    medium_hard = ((numbers.get("paired_by_level") or {}).get("medium+hard") or {}).get(
        "rl_minus_sft")
    return {
        "sft_dropped": check(f"<= {t['sft_dropped_max']:g} of the trajectories", dropped,
                             lambda v: v <= t["sft_dropped_max"]),
        "heldout_tasks": at_least((top.get("sft") or {}).get("n_tasks"), t["min_heldout_tasks"]),
        "sft_minus_base": by_ses("sft_minus_base"),
        "sft_medium": at_least(level("sft", "medium", "accuracy"), t["sft_medium"]),
        "sft_medium_tool_calls": check(
            f"within {t['sft_medium_tool_calls']:.0%} of the teacher's", off,
            lambda v: abs(v) <= t["sft_medium_tool_calls"]),
        "sft_format_valid": check(f">= {t['sft_format_valid']:g} on every level", lowest_valid,
                                  lambda v: v >= t["sft_format_valid"]),
        "rl_minus_sft_ses": by_ses("rl_minus_sft"),
        "rl_minus_sft": check(
            f">= {t['rl_minus_sft']:g} with SE <= {t['rl_minus_sft_se_max']:g}",
            mean_se("rl_minus_sft"),
            lambda v: v["mean"] >= t["rl_minus_sft"] and v["se"] <= t["rl_minus_sft_se_max"]),
        "rl_minus_sft_medium_hard": at_least(medium_hard and medium_hard["mean"],
                                             t["rl_minus_sft_medium_hard"]),
        "rl_medium": at_least(level("rl", "medium", "accuracy"), t["rl_medium"]),
        "rl_hard": at_least(level("rl", "hard", "accuracy"), t["rl_hard"]),
        "rl_tool_calls_rise": check(
            "easy < medium < hard", None if None in rl_calls else " / ".join(map(str, rl_calls)),
            lambda _: rl_calls[0] < rl_calls[1] < rl_calls[2]),
        "reward_rise": at_least(rise, t["reward_rise"]),
        "exam_tasks": at_least(exam["teacher"].get("n_tasks"), t["min_exam_tasks"]),
        "teacher_exam": at_least(exam["teacher"].get("pass_at_1"), t["teacher_exam"]),
        "rl_exam": check(f"> {t['rl_exam']:g}", (exam.get("rl") or {}).get("pass_at_1"),
                         lambda v: v > t["rl_exam"]),
    }


def acceptance(numbers: dict) -> dict[str, bool | None]:
    """Each target of ``TARGETS`` met (True), missed (False) or not measurable (None)."""
    return {name: check["met"] for name, check in target_checks(numbers).items()}


#: The card's words for each target of ``TARGETS``.
TARGET_WORDS = {
    "sft_dropped": "SFT trajectories dropped for length (share)",
    "heldout_tasks": "held-out easy, medium and hard tasks",
    "sft_minus_base": "SFT - base, headline Pass@1, paired",
    "sft_medium": "SFT Pass@1 on medium tasks",
    "sft_medium_tool_calls": "SFT tool calls per medium task against the teacher's (relative)",
    "sft_format_valid": "SFT well-formed episodes, lowest held-out level (share)",
    "rl_minus_sft_ses": "RL - SFT, headline Pass@1, paired, in SEs",
    "rl_minus_sft": "RL - SFT, headline Pass@1, paired",
    "rl_minus_sft_medium_hard": "RL - SFT on medium and hard together, paired",
    "rl_medium": "RL Pass@1 on medium tasks",
    "rl_hard": "RL Pass@1 on hard tasks",
    "rl_tool_calls_rise": "RL tool calls per task by level (easy, medium, hard)",
    "reward_rise": "GRPO sampled reward, last 20 % of the steps minus the first 20 %",
    "exam_tasks": "exam tasks",
    "teacher_exam": "teacher Pass@1 on the exam",
    "rl_exam": "RL Pass@1 on the exam",
}


def target_rows(numbers: dict) -> list[dict]:
    """Each target as the card and the report show it: its words, what it requires, what was
    measured (a paired difference with its SE) and ``met``, ``missed`` or ``not measured``."""
    rows = []
    for name, c in target_checks(numbers).items():
        got = c["measured"]
        if isinstance(got, dict):
            got = f"{got['mean']:+.4f} (SE {got['se']:.4f})"
        rows.append({"target": TARGET_WORDS[name], "required": c["required"],
                     "measured": "-" if got is None else str(got),
                     "verdict": ("met" if c["met"] else "missed" if c["met"] is False
                                 else "not measured")})
    return rows


def limit_lines(numbers: dict) -> list[str]:
    """Where a target is missed, what bounds the run: the share of validation tasks some sample
    of the SFT model solves (Pass@k with its SE over those tasks, a noisy bound on what RL can
    reach, not a ceiling), and the RL-pool tasks whose groups carry signal ([] if none missed)."""
    sft_k, pre = (numbers.get("passk") or {}).get("sft"), numbers.get("prescreen")
    if all(r["verdict"] != "missed" for r in target_rows(numbers)) or not (sft_k or pre):
        return []
    lines = ["What limits it: RL learns from the tasks some sample of the SFT model already "
             "solves, so the SFT model's Pass@k bounds what RL can reach. The bound is noisy: "
             "it is measured on a few validation tasks a level (each with its SE), so a 0 there "
             "does not rule out a gain on other tasks."]
    if sft_k:
        k, by = sft_k["n_samples"], sft_k["by_level"]

        def bound(level: str) -> str:
            p, n = by[level]["pass_at_k"][str(k)], by[level]["n_tasks"]
            return f"{level} {p} of {n} tasks (SE {binomial_se(p, n)})"

        lines.append(f"Sampled {k} times, the SFT model solves at least once this share of the "
                     f"validation tasks by level (Pass@{k}): "
                     + ", ".join(bound(lv) for lv in in_level_order(by)) + ".")
    if pre:
        lines.append("GRPO's pre-screen found these RL-pool tasks solved sometimes, the ones whose "
                     "groups carry signal: " + ", ".join(
                         f"{lv} {pre[lv]['mixed']} of {pre[lv]['screened']}"
                         for lv in in_level_order(pre)) + ".")
    return lines


def targets_markdown(numbers: dict) -> list[str]:
    """The card's target table and, where a target is missed, what bounds the run."""
    lines = ["Targets:", "", "| target | required | measured | |", "|---|---|---|---|"]
    lines += [f"| {r['target']} | {r['required']} | {r['measured']} | {r['verdict']} |"
              for r in target_rows(numbers)]
    limits = limit_lines(numbers)
    return lines + ([""] + limits if limits else [])


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


def read_examples(ref: str | Path = REFERENCE_DIR) -> list[dict]:
    """The reference's shipped tasks that RL gained over SFT, both episodes ([] when none)."""
    path = Path(ref) / GAINED
    return list(read_jsonl(path)) if path.exists() else []
