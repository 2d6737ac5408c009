"""Shipping a finished run as the reference: its logs, one trimmed line per task evaluated, the
checkpoints that fit ``MAX_CHECKPOINT_MB``, a few tasks RL gained, ``card.json`` and ``CARD.md``.

``card.json`` holds every number ``reference.headline_numbers`` recomputes from the shipped files;
``CARD.md`` is that card for a person, rendered from ``card.json`` alone, so the two always agree.
``rescore_reference`` judges every shipped prediction again with the current offline judge,
rewrites the per-task files and the examples that are still gained, and rebuilds the card.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from vsearcher_lite.agent.judge import Judge, MatchJudge, numbers_match
from vsearcher_lite.agent.task import HEADLINE_LEVELS, in_level_order, in_order
from vsearcher_lite.evaluation.comparison import BENCHMARKS, POLICIES, eval_name
from vsearcher_lite.manifest import git_state
from vsearcher_lite.reference import (
    CHECKPOINTS,
    GAINED,
    LENGTHS,
    LOGS,
    MAX_CHECKPOINT_MB,
    PASSK_BENCHMARK,
    PASSK_POLICIES,
    PRESCREEN,
    SEEN,
    TARGETS,
    acceptance,
    headline_numbers,
    read_card,
    read_examples,
    targets_markdown,
)
from vsearcher_lite.runio import (
    InputError,
    atomic_write_json,
    atomic_write_text,
    read_json,
    read_jsonl,
    read_jsonl_numbered,
    replace_dir,
    write_jsonl,
)
from vsearcher_lite.scoring.hops import chain, reach
from vsearcher_lite.scoring.metrics import match_kind
from vsearcher_lite.scoring.passk import sample_number
from vsearcher_lite.synthesis.chains import CHAIN_ROUNDS

#: What a shipped result line keeps of an evaluation record (the trajectory is left out), with
#: ``match``, how an accepted answer matched (``scoring.metrics.match_kind``). The question and
#: the aliases let the predictions be judged again (``rescore_reference``).
RESULT_FIELDS = ("id", "policy", "split", "difficulty", "correct", "format_ok", "format_error",
                 "termination", "n_turns", "n_tool_calls", "tool_counts", "prediction", "answer",
                 "seconds", "question", "aliases")
#: The fields a shipped result line needs to be judged again.
JUDGED_FIELDS = ("id", "answer", "prediction", "correct")
MAX_GAINED = 3


def episode_turns(record: dict) -> list[dict]:
    """An evaluation record's turns as a reader follows them: what the model wrote, the tool it
    called and what the tool returned (text only: image files stay with the run)."""
    turns = []
    for turn in (record.get("trajectory") or {}).get("turns") or []:
        seen = turn.get("observation") or {}
        turns.append({"text": turn.get("text"), "tool": turn.get("tool"),
                      "arguments": turn.get("arguments"), "observation": seen.get("text")})
    return turns


def gained_ids(sft: dict[str, dict], rl: dict[str, dict]) -> list[str]:
    """The headline tasks that RL answers and SFT does not, hardest level first, then in RL's
    order; ``sft`` and ``rl`` map a task id to its result record."""
    gained = [i for i, r in rl.items() if r.get("correct") and i in sft
              and not sft[i].get("correct") and r.get("difficulty") in HEADLINE_LEVELS]
    gained.sort(key=lambda i: -HEADLINE_LEVELS.index(rl[i]["difficulty"]))
    return gained


def card_inputs(card: dict) -> dict:
    """What made a card (commands, machine, files shipped ...) without what ``write_card``
    computes from the files again (the numbers, the targets and their acceptance)."""
    return {k: v for k, v in card.items() if k not in ("numbers", "targets", "acceptance")}


def shipped_rows(records: list[dict]) -> list[dict]:
    """An evaluation's records as a reference ships them: ``RESULT_FIELDS`` and how each
    accepted answer matched."""
    return [{**{k: r.get(k) for k in RESULT_FIELDS}, "match": match_kind(r)} for r in records]


def walks_chain(hops: list, turns: list[dict]) -> bool:
    """Whether an episode's claims (``scoring.hops``) resolve every hop of ``hops`` in order: an
    answer reached by the chain, not by a lucky guess or a number copied from a wrong page."""
    messages = [{"role": "assistant", "content": t.get("text") or ""} for t in turns]
    return bool(hops) and reach([tuple(h) for h in hops], messages) == (len(hops), "chain done")


def task_chains(tasks_file: Path) -> dict[str, list]:
    """Task id -> its chain of (description, entity) hops, from a run's task file."""
    return {t["id"]: [list(h) for h in chain(t)] for t in read_jsonl(tasks_file)}


def gain_counts(examples: list[dict]) -> dict[str, dict[str, int]]:
    """By level: the gained tasks and how many of them RL reached along the chain."""
    counts: dict[str, dict[str, int]] = {}
    for e in examples:
        level = counts.setdefault(e["difficulty"], {"gained": 0, "walked": 0})
        level["gained"] += 1
        level["walked"] += int(e["rl"]["walks_chain"])
    return {lv: counts[lv] for lv in in_level_order(counts)}


def gained_examples(run_dir: Path, limit: int = MAX_GAINED, skip: frozenset | set = frozenset()
                    ) -> tuple[list[dict], dict]:
    """Up to ``limit`` of the ``gained_ids`` (but ``skip``) whose RL episode walks its task's
    chain, each with both episodes (``episode_turns``) and the chain, and ``gain_counts`` over
    every gained task."""
    found = {p: {r["id"]: r for r in read_jsonl(run_dir / "eval" / eval_name("heldout", p)
                                                / "results.jsonl")}
             for p in ("sft", "rl")
             if (run_dir / "eval" / eval_name("heldout", p) / "results.jsonl").exists()}
    tasks_file = run_dir / "filter" / "heldout.jsonl"
    if len(found) < 2 or not tasks_file.exists():
        return [], {}
    chains, rl = task_chains(tasks_file), found["rl"]
    gained = []
    for task_id in (i for i in gained_ids(found["sft"], rl) if i not in skip):
        r, hops = rl[task_id], chains.get(task_id, [])
        episodes = {p: {"prediction": found[p][task_id].get("prediction"),
                        "correct": bool(found[p][task_id].get("correct")),
                        "n_tool_calls": found[p][task_id].get("n_tool_calls"),
                        "turns": episode_turns(found[p][task_id])} for p in ("sft", "rl")}
        for episode in episodes.values():
            episode["walks_chain"] = walks_chain(hops, episode["turns"])
        gained.append({"id": task_id, "difficulty": r["difficulty"], "question": r.get("question"),
                       "answer": r.get("answer"), "chain": hops, **episodes})
    return [e for e in gained if e["rl"]["walks_chain"]][:limit], gain_counts(gained)


def ship_passk(run_dir: str | Path, ref: str | Path, *, seconds: float, device: str,
               command: str) -> int:
    """Replace the reference's Pass@k samples with those of ``run_dir`` (``run_passk`` run again
    with the shipped checkpoints), record the stage's new wall time, machine and command in the
    card and rebuild it; the number of sample files shipped."""
    run_dir, ref = Path(run_dir), Path(ref)
    found = {policy: sorted((p.parent for p in (run_dir / "eval").glob(
        f"{PASSK_BENCHMARK}-{policy}-s*/results.jsonl")), key=lambda d: sample_number(d.name))
        for policy in PASSK_POLICIES}
    if not all(found.values()):
        raise InputError(f"{run_dir / 'eval'}: no Pass@k samples of every policy to ship")
    card = read_card(ref)
    shipped = dict(card.get("results_shipped") or {})
    for old in (ref / "results").glob(f"{PASSK_BENCHMARK}-*-s*.jsonl"):
        old.unlink()
        shipped.pop(old.stem, None)
    for folder in (d for dirs in found.values() for d in dirs):
        rows = shipped_rows(list(read_jsonl(folder / "results.jsonl")))
        write_jsonl(ref / "results" / f"{folder.name}.jsonl", rows)
        shipped[folder.name] = len(rows)
    made = card_inputs(card)
    made["wall_seconds"] = {**(card.get("wall_seconds") or {}), "passk": round(seconds, 1)}
    again = {"device": device, "command": command, "commit": git_state()["commit"]}
    made["rerun"] = {**(card.get("rerun") or {}), "passk": again}
    made["results_shipped"] = dict(sorted(shipped.items()))
    write_card(ref, made)
    return sum(len(d) for d in found.values())


def write_examples(ref: str | Path, examples: list[dict], gains: dict) -> None:
    """Ship ``examples`` (``gained_examples``) as the reference's RL-gained episodes, with the
    count of gained tasks that walk their chain, and rebuild the card."""
    ref = Path(ref)
    card = read_card(ref)
    if examples:
        write_jsonl(ref / GAINED, examples)
    else:
        (ref / GAINED).unlink(missing_ok=True)
    made = card_inputs(card)
    made["examples_shipped"] = {"rl_gained": [e["id"] for e in examples], "gains": gains}
    write_card(ref, made)


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
    trained = read_json(sft_metrics) if sft_metrics.exists() else {}
    for key, rel in (("lengths", LENGTHS), ("seen", SEEN)):
        if trained.get(key):
            atomic_write_json(staging / rel, trained[key])
    shipped, skipped = {}, {}
    names = [eval_name(b, p) for b in BENCHMARKS for p in POLICIES]
    for policy in PASSK_POLICIES:
        names += sorted((p.parent.name for p in (run_dir / "eval").glob(
            f"{PASSK_BENCHMARK}-{policy}-s*/results.jsonl")),
            key=sample_number)
    for name in names:
        src = run_dir / "eval" / name / "results.jsonl"
        if src.exists():
            rows = shipped_rows(list(read_jsonl(src)))
            write_jsonl(staging / "results" / f"{name}.jsonl", rows)
            shipped[name] = len(rows)
    examples, gains = gained_examples(run_dir)
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
    card = write_card(staging, {
        "commands": commands,
        "commit": git_state()["commit"],
        "device": device,
        "seeds": seeds,
        "wall_seconds": wall_seconds or {},
        "results_shipped": shipped,
        "examples_shipped": {"rl_gained": [e["id"] for e in examples], "gains": gains},
        "checkpoints_mb": checkpoints,
        "checkpoints_not_shipped": skipped,
    })
    replace_dir(staging, out)
    log(f"[reference] wrote {out}: {len(shipped)} result files, "
        f"checkpoints {checkpoints or 'none'}")
    return card


def write_card(folder: Path, made: dict) -> dict:
    """Write a reference folder's ``card.json`` and ``CARD.md``: ``made`` (how the run was made,
    what was shipped) with every number recomputed from the folder's files; the card."""
    numbers = headline_numbers(folder)
    card = {**made, "numbers": numbers, "targets": TARGETS, "acceptance": acceptance(numbers)}
    atomic_write_json(folder / "card.json", card)
    atomic_write_text(folder / "CARD.md", card_markdown(card))
    return card


def rejudge(record: dict, judge: Judge) -> dict:
    """A shipped result line judged again: ``correct`` and ``match`` replaced, every other field
    kept in its place. A line without an ``aliases`` field does not say which other spellings its
    task accepted: an accepted answer that is not a number and that the judge rejects against the
    gold alone matched one of them, and keeps its verdict (``match`` ``alias``)."""
    verdict = judge.judge(record.get("question") or "", record["answer"], record["prediction"],
                          record.get("aliases") or ())
    correct, kind = verdict.correct, verdict.match
    if (record["correct"] and not correct and "aliases" not in record
            and str(record["prediction"] or "").strip()
            and numbers_match(record["answer"], record["prediction"]) is None):
        correct, kind = True, "alias"
    return {**record, "correct": correct, "match": kind}


def _judged_again(path: Path, judge: Judge) -> list[tuple[int, dict, dict]]:
    """``(line, before, after)`` for each line of a per-task file."""
    rows = []
    for line, record in read_jsonl_numbered(path, tolerate_torn_tail=False):
        missing = [k for k in JUDGED_FIELDS if k not in record]
        if missing:
            raise InputError(f"{path}:{line}: a result line needs {', '.join(missing)} to be "
                             "judged again")
        rows.append((line, record, rejudge(record, judge)))
    return rows


def rescore_reference(ref: str | Path, *, judge: Judge | None = None, log=print) -> list[dict]:
    """Judge every prediction of a reference's per-task files again (the offline judge unless
    ``judge``), rewrite each file (line order and every other field kept), keep the examples
    that RL still gains (``gained_ids``) and rebuild the card from the files. Returns the lines
    whose verdict changed: file, line, id, policy, level, gold, prediction, the new verdict."""
    ref, judge = Path(ref), judge or MatchJudge()
    card = read_card(ref)
    judged = {p.stem: _judged_again(p, judge) for p in sorted((ref / "results").glob("*.jsonl"))}
    changes = [{"file": name, "line": line, "id": after["id"], "policy": after.get("policy"),
                "difficulty": after.get("difficulty"), "answer": after["answer"],
                "prediction": after["prediction"], "correct": after["correct"]}
               for name, rows in judged.items() for line, before, after in rows
               if bool(before["correct"]) != after["correct"]]
    for name, rows in judged.items():
        write_jsonl(ref / "results" / f"{name}.jsonl", [after for _, _, after in rows])
    heldout = {p: {r["id"]: r for _, _, r in judged.get(eval_name("heldout", p), [])}
               for p in ("sft", "rl")}
    still = gained_ids(heldout["sft"], heldout["rl"])
    examples = sorted((e for e in read_examples(ref) if e["id"] in still),
                      key=lambda e: still.index(e["id"]))
    for example in examples:
        for policy in ("sft", "rl"):
            example[policy]["correct"] = heldout[policy][example["id"]]["correct"]
    if examples:
        write_jsonl(ref / GAINED, examples)
    else:
        (ref / GAINED).unlink(missing_ok=True)
    made = card_inputs(card)
    made["examples_shipped"] = {**card.get("examples_shipped", {}),
                                "rl_gained": [e["id"] for e in examples]}
    made["results_shipped"] = {name: len(rows) for name, rows in judged.items()}
    if changes:
        made["rescored"] = {"judge": judge.name, "changed": changes}
    write_card(ref, made)
    for c in changes:
        log(f"[reference] {c['file']} line {c['line']} ({c['id']}): gold {c['answer']!r}, "
            f"prediction {c['prediction']!r}: now {'correct' if c['correct'] else 'incorrect'}")
    log(f"[reference] {ref}: {sum(map(len, judged.values()))} predictions judged again; "
        f"verdicts changed: {len(changes)}; examples still gained: {len(examples)}")
    return changes


#: The reference's stages in the order they run (the card's wall times). The card lists stages,
#: policies, levels and k in fixed orders, so it reads the same whether it is rendered from the
#: numbers just computed or from ``card.json``, whose keys are sorted.
STAGES = ("trajectories", "chains", "sft", "grpo", "comparison", "passk")
#: SFT's training levels in hop order, the training-only ones (2 and 4 rounds) among them.
CHAIN_LEVELS = tuple(CHAIN_ROUNDS)


def card_markdown(card: dict) -> str:
    """The card for a person: how the reference was made, its headline numbers, its targets."""
    n = card["numbers"]
    lines = ["# Reference run", "",
             f"Device: {card['device']}; commit {card['commit']}; seeds {card['seeds']}.", "",
             "Regenerate it with:", "", "```bash", *card["commands"], "```", ""]
    if rescored := card.get("rescored"):
        changed = rescored["changed"]
        lines += [f"Judged again after the run by the {rescored['judge']} judge "
                  f"(`vsearcher-lite reference rescore`): {len(changed)} verdicts changed.", ""]
        lines += [f"- {c['file']} ({c['difficulty']}, {c['id']}): gold {c['answer']}, "
                  f"prediction {c['prediction']}: now {'correct' if c['correct'] else 'incorrect'}"
                  for c in changed]
        lines.append("")
    for stage, again in (card.get("rerun") or {}).items():
        lines += [f"The {stage} stage ran again with the shipped checkpoints on {again['device']} "
                  f"at commit {again['commit']}: `{again['command']}`.", ""]
    if card["wall_seconds"]:
        wall = card["wall_seconds"]
        times = ", ".join(f"{k} {wall[k] / 60:.1f} min" for k in in_order(wall, STAGES))
        lines += [f"Wall time: {times} ({sum(wall.values()) / 3600:.2f} h in all)", ""]
    if n.get("sft_lengths"):
        g = n["sft_lengths"]
        lines += ["SFT trajectories by level (kept / dropped for length; tokens median, p90, max):",
                  ""]
        lines += [f"- {lv}: {g[lv]['kept']} / {g[lv]['dropped']}; {g[lv]['median']}, "
                  f"{g[lv]['p90']}, {g[lv]['max']}" for lv in in_order(g, CHAIN_LEVELS)]
        lines.append("")
    if g := n.get("sft_seen"):
        lines += ["What SFT trained on by level (trajectories; distinct tasks, distinct "
                  "trajectories; times a distinct trajectory was seen, mean and most):", ""]
        lines += [f"- {lv}: {g[lv]['trajectories']}; {g[lv]['distinct_tasks']}, "
                  f"{g[lv]['distinct_trajectories']}; {g[lv]['times_seen_mean']}, "
                  f"{g[lv]['times_seen_most']}" for lv in in_order(g, (*CHAIN_LEVELS, "all"))]
        lines.append("")
    levels = ("onehop", *HEADLINE_LEVELS)
    lines += ["Held-out Pass@1 by level (tool calls per task); the headline is easy, medium and "
              "hard together, one-hop apart:", "",
              "| policy | " + " | ".join(levels) + " | headline | exam |",
              "|---|" + "---|" * (len(levels) + 2)]
    heldout = n["policies"]["heldout"]
    for policy in in_order(heldout, POLICIES):
        m = heldout[policy]
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
    shown = [p for p in in_order(heldout, POLICIES) if heldout[p].get("n_tasks")]
    if all("accepted_not_exact" in heldout[p] for p in shown):
        exam = n["policies"]["exam"]
        lines += ["Answers accepted other than as the gold is written (held-out / exam): "
                  + ", ".join(f"{p} {heldout[p]['accepted_not_exact']} / "
                              f"{exam.get(p, {}).get('accepted_not_exact', '-')}" for p in shown)
                  + ".", ""]
    pairs = n["paired_heldout"]
    for name in in_order(pairs, ("sft_minus_base", "rl_minus_sft")):
        if d := pairs[name]:
            lines.append(f"- {name.replace('_minus_', ' - ')} (paired, easy+medium+hard): "
                         f"{d['mean']:+.4f} (SE {d['se']:.4f}, n {d['n']}; "
                         f"{d['gained']} gained, {d['lost']} lost)")
    by_level = n.get("paired_by_level", {})
    for group in in_level_order(by_level):
        if d := by_level[group].get("rl_minus_sft"):
            lines.append(f"- rl - sft on {group}: {d['mean']:+.4f} (SE {d['se']:.4f}, n {d['n']})")
    passk = n.get("passk") or {}
    for policy in in_order(passk, PASSK_POLICIES):
        if m := passk[policy]:
            k, g = m["n_samples"], m["by_level"]
            ks = ", ".join(f"Pass@{j} {m['pass_at_k'][j]}" for j in sorted(m["pass_at_k"], key=int))
            by = "; ".join(f"{lv} {g[lv]['pass_at_1']} -> {g[lv]['pass_at_k'][str(k)]}"
                           for lv in in_level_order(g))
            lines.append(f"- {policy}, validation, {k} samples: {ks}; by level "
                         f"Pass@1 -> Pass@{k}: {by}; mixed tasks {m['mixed']}")
    if g := n.get("prescreen"):
        lines.append("- GRPO pre-screen (tasks screened / mixed / pass rate): " + "; ".join(
            f"{lv} {g[lv]['screened']} / {g[lv]['mixed']} / {g[lv]['pass_rate']}"
            for lv in in_level_order(g)))
    if g := n.get("grpo"):
        lines.append(f"- GRPO: {g['steps']} steps; sampled reward {g['reward_first_20pct']} "
                     f"(first 20 %) -> {g['reward_last_20pct']} (last 20 %); groups with equal "
                     f"rewards {g['zero_variance_group_share']}")
        if mixed := g.get("mixed_groups_by_level"):
            lines.append("- GRPO groups with signal by level (in all; per step, first -> last "
                         "20 %): " + "; ".join(
                             f"{lv} {mixed[lv]['total']}; {mixed[lv]['first_20pct']} -> "
                             f"{mixed[lv]['last_20pct']}" for lv in in_level_order(mixed)))
    lines += ["", *targets_markdown(n), ""]
    return "\n".join(lines)
