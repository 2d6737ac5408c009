"""The tiny base's model card and run records, written from the run's own numbers."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

CARD_NAME = "MODEL_CARD.md"
COPY_TARGET = 0.9  # the copy target: accuracy on the lookup probe
LOG_NAME = "train_log.csv"
METRICS_NAME = "metrics.json"
LOG_FIELDS = ("stage", "step", "seconds", "lr", "loss", "loss_repeat", "loss_recall",
              "loss_answer", "tokens", "pad_share")
LOSS_KEYS = ("loss", "loss_repeat", "loss_recall", "loss_answer")

INTRO = [
    "# tiny_base: the cpu profile's pretrained tiny Qwen3-VL",
    "",
    "A 5M-parameter `Qwen3VLForConditionalGeneration` pretrained by `vsearcher-lite pretrain` "
    "to read and to",
    "copy names, years and URLs from text. It has never seen the agent protocol (no chat "
    "template, no",
    "`<tool_call>` / `<answer>` markup, no trajectories): SFT teaches that. It is the starting "
    "point of the",
    "cpu profile; it loads with `AutoModelForImageTextToText` / `AutoProcessor` (after",
    "`import vsearcher_lite.model.tiny`, which registers the image-only processor) or "
    "`load_base()`.",
    "",
    "## How it was made",
]

DOC_KINDS = (
    "Kinds: page (articles, lists, news, travel notes), repeat (a list then its exact repeat), kv "
    "(key: value lines then recall), pick (a result list then the entry of the asked kind), lookup "
    "(a search-result list then a fact, title or URL copied from it), pageqa (pages, a question, "
    "the answer copied; half restate \"Answer: X\"), restate (a question about \"the <kind> shown "
    "in the image\" or a description, what that names, the question asked again with the name). ")


def _curve_points(rows: list[dict], key: str, n: int = 12) -> list[tuple[int, float]]:
    pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
    if len(pts) <= n:
        return pts
    idx = sorted({round(i * (len(pts) - 1) / (n - 1)) for i in range(n)})
    return [pts[i] for i in idx]


def _stage_text(st: dict) -> str:
    text = (f"{st['name']} {st['steps']} steps of {st['batch_size']} x {st['seq_len']} "
            f"at lr {st['lr']:g}")
    if st.get("stopped_by"):
        text += f", stopped by its {'clock' if st['stopped_by'] == 'time' else 'step'} cap"
    return text


def _previous_run_lines(i: int, prev: dict) -> list[str]:
    stages = "; ".join(_stage_text(st) for st in prev.get("stages", []))
    lines = [f"- Continued from run {i}: `{prev.get('command')}` ({prev.get('total_steps')} steps, "
             f"{(prev.get('train_seconds') or 0) / 60:.1f} min training, seed {prev.get('seed')}, "
             f"{prev.get('hardware')}; stages {stages})"]
    if prev.get("note"):
        lines.append(f"  {prev['note']}")
    if prev.get("curve"):
        points = "; ".join(f"{r['step']}: " + " / ".join(str(r[k]) for k in LOSS_KEYS)
                           for r in prev["curve"])
        lines.append(f"  Its loss curve (step: loss / repeat-half / recall / answer): {points}")
    if prev.get("probes"):
        by = f" (by `{prev['probes_by']}`)" if prev.get("probes_by") else ""
        probes = ", ".join(f"{k} {v}" for k, v in prev["probes"].items())
        lines.append(f"  Its probes{by}: {probes}")
    return lines


def _made_lines(metrics: dict) -> list[str]:
    m = metrics
    command = m["command"] or "pretrain(PretrainConfig(...)) from Python"
    lines = ["", f"- Command: `{command}`", f"- Seed: {m['seed']}", f"- Hardware: {m['hardware']}",
             f"- Wall time: {m['wall_seconds'] / 60:.1f} min in all ({m['train_seconds'] / 60:.1f} "
             f"min training, {m['probe_seconds'] / 60:.1f} min probes); "
             f"finished {m['finished_at']}",
             f"- Steps: {m['total_steps']}"]
    if m.get("note"):
        lines.append(f"  {m['note']}")
    run = m.get("probe_run")
    if run:
        lines.append(f"- Probes re-run on this checkpoint by `{run['command']}` "
                     f"({run['seconds'] / 60:.1f} min, {run['hardware']}; finished "
                     f"{run['finished_at']}): the probe table below is theirs.")
    for i, prev in enumerate(m.get("previous_runs") or [], start=1):
        lines += _previous_run_lines(i, prev)
    resumes = m.get("resumed_at") or []
    if resumes:
        stages = [s["name"] for s in m["stages"]]
        at = "; ".join(f"stage {stages[r['stage']] if r['stage'] < len(stages) else r['stage']} "
                       f"step {r['step']}" for r in resumes)
        lines.append(f"- Resumed {len(resumes)} time(s) after an interruption ({at}): the data "
                     "stream is drawn forward to the saved step, so it trains what an "
                     "uninterrupted run would")
    per_stage = any("copy_weight" in s for s in m["stages"])  # recorded per stage
    head = ["stage", "steps", "stopped by", "s/step", "rows x tokens", "peak lr"]
    head += ["fresh names", "copy weight", "mix"] if per_stage else ["mix"]
    lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in m["stages"]:
        mix = ", ".join(f"{k} {v:g}" for k, v in s["mix"].items())
        cells = [s["name"], s["steps"], s["stopped_by"], s["seconds_per_step"],
                 f"{s['batch_size']} x {s['seq_len']}", f"{s['lr']:g}"]
        if per_stage:
            cells += ["yes" if s.get("fresh_names") else "no", f"{s.get('copy_weight', 1.0):g}"]
        lines.append("| " + " | ".join(str(c) for c in cells + [mix]) + " |")
    return lines


def _data_lines(metrics: dict, arch: dict) -> list[str]:
    c, p, a = metrics["corpus"], metrics["parameters"], arch
    seeds = c["world_seeds"]
    data = (f"Data: documents generated from sandbox worlds with seeds {seeds[0]}..{seeds[-1]} "
            f"({len(seeds)} worlds of {c['world_entities']} entities), never the evaluation world "
            f"(seed {c['eval_world_seed']}): {c['renamed_roots']} name roots shared with it were "
            f"renamed and {c['dropped_docs']} documents that still named one of its entities were "
            "dropped. " + DOC_KINDS + fresh_note(metrics.get("config") or {})
            + "The vision tower keeps its random initialisation (no image documents).")
    return [
        "", data, "", "## Architecture", "",
        f"- Parameters: {p['total']:,} (vision {p['vision']:,}, text {p['text']:,})",
        f"- Vocabulary: {metrics['vocab_size']} tokens (byte-level BPE trained here; years "
        "1000-2030 single tokens; a pre-tokenizer that never glues a space or quote to a word)",
        f"- Text: hidden {a['hidden_size']}, {a['num_hidden_layers']} layers, "
        f"{a['num_attention_heads']} heads, {a['num_key_value_heads']} kv heads, head_dim "
        f"{a['head_dim']}, intermediate {a['intermediate_size']}",
        f"- Vision: depth {a['vision_depth']}, hidden {a['vision_hidden_size']}, patch "
        f"{a['patch_size']}, merge {a['spatial_merge_size']}",
        "- Checkpoint: fp32 safetensors; chat template: TRL's `qwen3_vl.jinja`; "
        "`suppress_tokens` = vision ids",
    ]


def _probe_lines(metrics: dict) -> list[str]:
    pr, agent = metrics["copy_probes"], metrics["agent_probe"]
    lines = ["", "Full log: `train_log.csv`; every number here: `metrics.json`.", "",
             "## Probes (greedy, exact match, on the evaluation world seed "
             f"{metrics['corpus']['eval_world_seed']}, whose names were never trained on)", "",
             "| probe | accuracy | n | tokens before the copy (median) |", "|---|---|---|---|"]
    lines += [f"| {kind} | {res['accuracy']:.3f} | {res['n']} | {res.get('prompt_tokens', '')} |"
              for kind, res in pr.items()]
    if agent.get("measured"):
        lines.append("| agent (held-out sandbox tasks, compact prompt, top-3) | "
                     f"{agent['accuracy']:.3f} | {agent['n_tasks']} | |")
        lines += ["", f"As an agent the base model's format-valid rate is "
                      f"{agent['format_valid_rate']:.3f} and it makes {agent['mean_tool_calls']} "
                      "tool calls per task: it does not know the protocol."]
    else:
        lines += ["", f"Agent probe: not measured ({agent.get('reason', 'unknown')})."]
    lookup = pr.get("lookup", {}).get("accuracy")
    if lookup is None or lookup >= COPY_TARGET:
        return lines
    text = (f"**Below the copy target**: the lookup probe is {lookup:.3f}, the target is "
            f"{COPY_TARGET}. The model copies names and values from a result list, but not yet "
            "reliably the one the question asks for.")
    plain = {k: pr[k]["accuracy"] for k in ("recall", "repeat") if k in pr}
    if plain:
        below = [k for k, v in plain.items() if v < COPY_TARGET]
        scores = " and ".join(f"{k} {v:.3f}" for k, v in plain.items())
        which = "both" if len(below) == 2 else " and ".join(below)
        text += (" The copy target can also be read as copy accuracy on held-out repeat/recall "
                 f"sequences; on those it scores {scores}"
                 + (f", {which} also below {COPY_TARGET}." if below else f", above {COPY_TARGET}.")
                 + " The target is checked on lookup, the probe closest to an agent's copy from a "
                 "result list.")
    return lines + ["", text]


def model_card(metrics: dict, rows: list[dict], arch: dict) -> str:
    """The model card of a run: how it was made, its data, architecture, loss curve and probes."""
    lines = [*INTRO, *_made_lines(metrics), *_data_lines(metrics, arch), "",
             "## Loss curve (mean over each logging window)", "",
             "| step | loss | repeat-half loss | recall loss | answer loss |",
             "|---|---|---|---|---|"]
    by_step = {r["step"]: r for r in rows}
    for step, _ in _curve_points(rows, "loss"):
        lines.append(f"| {step} | " + " | ".join(str(by_step[step][k]) for k in LOSS_KEYS) + " |")
    return "\n".join(lines + _probe_lines(metrics) + [""])


def fresh_note(config: dict) -> str:
    """The card's sentence on fresh names and copy weighting, when the last run used them."""
    fresh_stages = [s["name"] for s in config.get("stages") or [] if s.get("fresh_names")]
    if fresh_stages and not config.get("fresh_names"):
        weights = {s.get("copy_weight") for s in config["stages"] if s.get("fresh_names")}
        weighted = (f", with copy targets weighed x{weights.pop():g} in the loss"
                    if len(weights) == 1 and None not in weights else "")
        return (f"In stage(s) {', '.join(fresh_stages)} every document's names were drawn "
                "afresh (`fresh_names`: a name is never seen twice, so a copy cannot come from "
                f"memory){weighted}. ")
    if not config.get("fresh_names"):
        return ""
    weight = config.get("copy_weight", 1.0)
    weighted = f" and copy targets weighed x{weight:g} in the loss" if weight != 1.0 else ""
    return ("In the last run every document's names were drawn afresh (`fresh_names`: a name is "
            f"never seen twice, so a copy cannot come from memory){weighted}. ")


def read_log_rows(path: str | Path) -> list[dict]:
    """The rows of a saved ``train_log.csv``, numbers parsed (empty cells are None)."""
    rows = []
    for r in csv.DictReader(Path(path).open(encoding="utf-8")):
        row: dict[str, Any] = {"stage": r["stage"], "step": int(r["step"])}
        for k in LOG_FIELDS[2:]:
            row[k] = float(r[k]) if r.get(k) not in (None, "") else None
        rows.append(row)
    return rows


def with_new_probes(metrics: dict, copy: dict, agent: dict, probe_run: dict) -> dict:
    """``metrics`` with its probe results replaced by a later probe run; the training records stay.

    >>> m = with_new_probes({"total_steps": 9, "probes": {"lookup": 0.1}},
    ...                     {"lookup": {"accuracy": 0.5}}, {"measured": False}, {"command": "c"})
    >>> m["total_steps"], m["probes"], m["probe_run"]["command"]
    (9, {'lookup': 0.5, 'agent_accuracy': None}, 'c')
    """
    return {**metrics, "probes": probe_summary(copy, agent), "copy_probes": copy,
            "agent_probe": agent, "probe_run": probe_run}


def probe_summary(copy: dict, agent: dict) -> dict:
    """Each probe's accuracy, the agent's None when it was not measured."""
    return {**{k: v["accuracy"] for k, v in copy.items()},
            "agent_accuracy": agent.get("accuracy") if agent.get("measured") else None}


def previous_runs(path: str | Path) -> list[dict]:
    """What made the checkpoint at ``path``: its own earlier runs, then its run."""
    try:
        m = json.loads((Path(path) / METRICS_NAME).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return [{"command": f"(unknown: no readable {METRICS_NAME} in {path})"}]
    keys = ("command", "seed", "total_steps", "train_seconds", "hardware", "finished_at", "note")
    run = {k: m.get(k) for k in keys}
    if m.get("probe_run"):
        run["probes_by"] = m["probe_run"].get("command")
    stage_keys = ("name", "steps", "seconds", "seq_len", "batch_size", "lr", "mix", "stopped_by")
    run["stages"] = [{k: s.get(k) for k in stage_keys} for s in m.get("stages", [])]
    run["probes"] = m.get("probes")
    if (Path(path) / LOG_NAME).is_file():
        rows = read_log_rows(Path(path) / LOG_NAME)
        by_step = {r["step"]: r for r in rows}
        run["curve"] = [{k: by_step[step][k] for k in ("step", *LOSS_KEYS)}
                        for step, _ in _curve_points(rows, "loss")]
    return list(m.get("previous_runs") or []) + [run]
