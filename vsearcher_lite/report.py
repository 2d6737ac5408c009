"""``RUN_DIR/report.html``: one page that shows what a reproduction found, readable offline.

``report_html(summary, run_dir)`` draws, from the files the stages saved (never by rerunning one):

- the counterpart of the paper's table 1 (``comparison/metrics.json``): Pass@1 of every policy on
  the exam and the held-out tasks, each cell with its correct/total count;
- figure 4: base -> SFT -> RL bars (the same file);
- figure 3 and the synthesis behind it: the filter funnel per difficulty (``filter/funnel.csv``)
  and the tool calls per trajectory by difficulty (``trajectories/rollouts.csv``);
- the SFT loss curve (``sft/loss.csv``) and base vs SFT on notebook 06's held-out tasks;
- figures 5 and 6: GRPO reward and entropy, tool calls by type (``grpo/steps.csv``);
- each notebook's status, wall time and peak memory, linked to its executed HTML copy;
- the reference run (``data/reference/`` or one's own): the same table with paired differences,
  its SFT loss and GRPO figures, labelled as the full-length run beside this short live one.

Every figure says how many tasks or trajectories it counts. A stage that has not run gets one
line saying which notebook makes it; a file that cannot be read gets one line naming it and the
error, and the rest of the page is still drawn (the report is also written after a failure).
plotly.js is embedded once, in the page's head, so the figures draw without a network.
"""

from __future__ import annotations

import csv
import html
import json
from pathlib import Path
from typing import Any, Callable

esc = html.escape


def fmt(value: Any) -> str:
    """A number as the report prints it.

    >>> fmt(None), fmt(0.25), fmt(1.0), fmt(3), fmt(0.33333)
    ('—', '0.25', '1.0', '3', '0.333')
    """
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if value != int(value) else f"{value:.1f}"
    return str(value)


def count(correct: int | None, total: int | None) -> str:
    """``" (7/30)"``, or nothing when the counts are unknown."""
    if correct is None or not total:
        return ""
    return f" <span class='n'>({correct}/{total})</span>"


class Missing(Exception):
    """A stage's file is not there: the stage has not run (not an error)."""


def _json(path: Path) -> dict:
    return json.loads(_require(path).read_text(encoding="utf-8"))


def _require(path: Path) -> Path:
    if not path.is_file():
        raise Missing("/".join(path.parts[-2:]))  # stage/file: where it would be in the run folder
    return path


def figure_html(fig: Any) -> str:
    """A plotly figure as a ``<div>`` that relies on the plotly.js of the page's head."""
    return fig.to_html(full_html=False, include_plotlyjs=False, include_mathjax=False, default_height=420,
                       config={"displaylogo": False, "responsive": True})


# ---------------------------------------------------------------------------------------------
# Sections: each returns HTML, or raises Missing when its stage has not run.


def table1_rows(metrics: dict) -> list[dict]:
    """``[{"policy", "accuracy": {group: value}, "note"}]`` in reading order, from the comparison's
    metrics (a policy that was not evaluated has an empty ``accuracy`` and its reason as ``note``).

    >>> table1_rows({"exam_accuracy": {"base": 0.0, "sft": 0.5}, "missing": {"rl": "not trained yet"}})
    [{'policy': 'base', 'accuracy': {'exam': 0.0}, 'note': None}, {'policy': 'sft', 'accuracy': {'exam': 0.5}, 'note': None}, {'policy': 'rl', 'accuracy': {}, 'note': 'not trained yet'}]
    """
    missing = metrics.get("missing") or {}
    by_benchmark = {b: metrics.get(f"{b}_accuracy") or {} for b in ("exam", "heldout")}
    names = metrics.get("order") or list(dict.fromkeys([*(metrics.get("accuracy") or {}), *by_benchmark["exam"],
                                                        *by_benchmark["heldout"], *missing]))
    rows = []
    for name in names:
        accuracy = (metrics.get("accuracy") or {}).get(name)
        if accuracy is None:
            accuracy = {b: values[name] for b, values in by_benchmark.items() if values.get(name) is not None}
        rows.append({"policy": name, "accuracy": {g: v for g, v in accuracy.items() if v is not None},
                     "note": missing.get(name)})
    return rows


def table1_section(run_dir: Path) -> str:
    return table1_html(_json(run_dir / "comparison" / "metrics.json"))


def table1_html(metrics: dict) -> str:
    """Table 1 (each cell with correct/total) and figure 4, from metrics of the comparison's shape."""
    from vsearcher_lite.evaluation.comparison import TABLE_GROUPS
    from vsearcher_lite.evaluation.plots import comparison_bars
    from vsearcher_lite.synthesis.task import in_level_order

    rows = table1_rows(metrics)
    n_tasks = metrics.get("n_tasks") or {}
    found = n_tasks.get("heldout_by_difficulty") or {}
    by_level = {level: found[level] for level in in_level_order(found)}  # stored with sorted keys
    present = {g for r in rows for g in r["accuracy"]}
    groups = [g for g in TABLE_GROUPS if g in present]
    sizes = {"exam": n_tasks.get("exam"), "heldout": n_tasks.get("heldout"), **by_level}
    with_notes = any(r["note"] for r in rows)
    header = "".join(f"<th>{esc('held-out' if g == 'heldout' else g)}<br><span class='n'>n={fmt(sizes.get(g))}</span></th>"
                     for g in groups)
    parts = ["<table><tr><th>policy</th>" + header + ("<th>note</th>" if with_notes else "") + "</tr>"]
    for r in rows:
        name, cells = r["policy"], []
        for g in groups:
            value = r["accuracy"].get(g)
            if g in ("exam", "heldout"):
                correct = ((metrics.get("n_correct") or {}).get(name) or {}).get(g)
                total = ((metrics.get("n_tasks_by_policy") or {}).get(name) or {}).get(g)
            else:  # a held-out difficulty: its accuracy is correct / tasks of that level
                total = by_level.get(g)
                correct = round(value * total) if value is not None and total else None
            cells.append(f"<td>{fmt(value)}{count(correct, total) if value is not None else ''}</td>")
        note = f"<td class='note'>{esc(str(r['note'] or ''))}</td>" if with_notes else ""
        parts.append(f"<tr><td>{esc(name)}</td>{''.join(cells)}{note}</tr>")
    parts.append("</table>")
    parts.append(f"<p class='caption'>Pass@1 (one answer per task). Exam: the MM-SearchExam counterpart, "
                 f"{fmt(n_tasks.get('exam'))} tasks with 10 injection rounds on seeds never used in training; "
                 f"held-out: {fmt(n_tasks.get('heldout'))} tasks from held-out seeds"
                 + (" (" + ", ".join(f"{esc(k)} {v}" for k, v in by_level.items()) + ")" if by_level else "")
                 + ". In brackets: tasks answered correctly / tasks evaluated.</p>")
    if metrics.get("evaluated") and metrics.get("accuracy"):
        parts.append("<h3>Figure 4: base → SFT → RL</h3>" + figure_html(comparison_bars(metrics)))
    return "\n".join(parts)


def synthesis_section(run_dir: Path) -> str:
    from vsearcher_lite.synthesis.plots import funnel_figure, read_csv_rows

    rows = read_csv_rows(_require(run_dir / "filter" / "funnel.csv"))
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for r in rows:
        first.setdefault(r["difficulty"], r["remaining"])
        last[r["difficulty"]] = r["remaining"]
    counts = ", ".join(f"{esc(level)} {first[level]} → {last[level]}" for level in first if first[level])
    return (figure_html(funnel_figure(rows))
            + f"<p class='caption'>Tasks synthesized → kept after the four filters, per difficulty: {counts} "
              f"(total {sum(first.values())} → {sum(last.values())}).</p>")


def trajectories_section(run_dir: Path) -> str:
    from vsearcher_lite.agent.plots import read_rollout_rows, tool_call_histogram

    _require(run_dir / "trajectories" / "rollouts.csv")
    rows = read_rollout_rows(run_dir)
    n_tasks = len({r["task_id"] for r in rows})
    n_accepted = sum(1 for r in rows if r["accepted"])
    return (figure_html(tool_call_histogram(rows))
            + f"<p class='caption'>{len(rows)} teacher trajectories on {n_tasks} training tasks; rejection "
              f"sampling kept {n_accepted} (counts per difficulty in the legend).</p>")


def sft_section(run_dir: Path) -> str:
    from vsearcher_lite.runio import read_number_rows
    from vsearcher_lite.training.plots import base_vs_sft_figure, loss_curve_figure

    rows = read_number_rows(_require(run_dir / "sft" / "loss.csv"))
    metrics_path = run_dir / "sft" / "metrics.json"
    metrics = _json(metrics_path) if metrics_path.is_file() else {}
    parts = [figure_html(loss_curve_figure(rows)),
             f"<p class='caption'>{len(rows)} logged optimizer steps"
             + (f" of {fmt(metrics.get('steps'))}" if metrics.get("steps") is not None else "")
             + (f", trained on {fmt(metrics.get('n_train_trajectories'))} accepted trajectories"
                if metrics.get("n_train_trajectories") is not None else "")
             + (f" ({fmt(metrics.get('n_dropped_too_long'))} dropped as too long)" if metrics.get("n_dropped_too_long") else "")
             + ".</p>"]
    if metrics.get("heldout_accuracy") is not None:
        parts.append(figure_html(base_vs_sft_figure(metrics)))
        parts.append(f"<p class='caption'>On the {fmt(metrics.get('n_heldout_tasks'))} held-out tasks notebook 06 "
                     f"evaluates (its own selection; table 1 above uses notebook 08's).</p>")
    return "\n".join(parts)


def grpo_section(run_dir: Path) -> str:
    from vsearcher_lite.rl.plots import reward_entropy_figure, tool_calls_figure
    from vsearcher_lite.runio import read_number_rows

    rows = read_number_rows(_require(run_dir / "grpo" / "steps.csv"))
    metrics_path = run_dir / "grpo" / "metrics.json"
    metrics = _json(metrics_path) if metrics_path.is_file() else {}
    config = metrics.get("config") or {}
    per_step = (f", {config['prompts_per_step']} tasks x {config['generations']} episodes per step"
                if config.get("prompts_per_step") and config.get("generations") else "")
    caption = f"<p class='caption'>{len(rows)} GRPO steps{per_step}."
    if metrics.get("heldout_n") is not None:
        caption += (f" Held-out ({metrics['heldout_n']} tasks): SFT {fmt(metrics.get('heldout_accuracy_sft'))} → "
                    f"RL {fmt(metrics.get('heldout_accuracy_rl'))}, paired difference "
                    f"{fmt(metrics.get('heldout_paired_diff'))} ± {fmt(metrics.get('heldout_paired_se'))} (1 SE).")
    return figure_html(reward_entropy_figure(rows)) + figure_html(tool_calls_figure(rows)) + caption + "</p>"


def reference_section(ref: Path) -> str:
    """The shipped full-length run: how it was made, table 1 with the paired differences, the SFT
    loss and GRPO's figures 5 and 6, all from the reference's own files."""
    from vsearcher_lite.reference import paired_rows, read_card, read_log, reference_comparison
    from vsearcher_lite.rl.plots import reward_entropy_figure, tool_calls_figure
    from vsearcher_lite.runio import InputError
    from vsearcher_lite.training.plots import loss_curve_figure

    if not (ref / "card.json").is_file():
        raise Missing(str(ref / "card.json"))
    card = read_card(ref)
    wall = ", ".join(f"{esc(k)} {v / 60:.0f} min" for k, v in (card.get("wall_seconds") or {}).items())
    parts = [f"<p>A full-length run of the same commands, shipped in <code>{esc(str(ref))}</code>: made on "
             f"{esc(str(card.get('device')))} at commit <code>{esc(str(card.get('commit')))}</code>"
             + (f" ({wall})" if wall else "") + ". Regenerate it with <code>"
             + esc(" && ".join(card.get("commands") or [])) + "</code>.</p>",
             table1_html(reference_comparison(ref)),
             "<h3>Paired differences (same tasks)</h3><table><tr><th>comparison</th><th>tasks</th><th>n</th>"
             "<th>difference</th><th>SE</th><th>gained</th><th>lost</th></tr>"]
    for r in paired_rows(ref):
        parts.append(f"<tr><td>{esc(r['comparison'])}</td><td>{esc(r['tasks'])}</td><td>{r['n']}</td>"
                     f"<td>{r['difference']:+.3f}</td><td>{r['se']:.3f}</td><td>{r['gained']}</td><td>{r['lost']}</td></tr>")
    parts.append("</table>")
    for stage, draw in (("sft", lambda rows: [loss_curve_figure(rows, title="Reference SFT loss")]),
                        ("grpo", lambda rows: [reward_entropy_figure(rows, title="Reference GRPO (paper figure 5)"),
                                               tool_calls_figure(rows, title="Reference GRPO tool calls (paper figure 6)")])):
        try:
            rows = read_log(ref, stage)
        except InputError:
            continue
        parts += [figure_html(fig) for fig in draw(rows)]
    return "\n".join(parts)


SECTIONS: list[tuple[str, str, Callable[[Path], str]]] = [
    ("Table 1: Pass@1 of every policy", "notebook 08", table1_section),
    ("Synthesis: tasks left after each filter", "notebooks 02-04", synthesis_section),
    ("Figure 3: tool calls per trajectory by difficulty", "notebook 05", trajectories_section),
    ("SFT: loss and base vs SFT", "notebook 06", sft_section),
    ("Figures 5 and 6: GRPO reward, entropy and tool calls", "notebook 07", grpo_section),
]


def section_html(title: str, maker: str, draw: Callable[[Path], str], run_dir: Path) -> tuple[str, bool]:
    """``(html, drew a figure?)``: the section, or one line on why it is not there."""
    head = f"<h2>{esc(title)}</h2>"
    try:
        body = draw(run_dir)
    except Missing as exc:
        return head + f"<p class='missing'>Not run yet ({esc(maker)} writes <code>{esc(str(exc))}</code>).</p>", False
    except Exception as exc:  # a damaged file must not cost the rest of the report
        return head + f"<p class='failed'>Could not draw this section: {esc(type(exc).__name__)}: {esc(str(exc))}</p>", False
    return head + body, "plotly-graph-div" in body


def notebooks_html(summary: dict, html_links: bool) -> str:
    parts = ["<h2>Notebooks</h2><table><tr><th>notebook</th><th>status</th><th>seconds</th>"
             "<th>peak memory (MB)</th></tr>"]
    for stem, run in (summary.get("notebooks") or {}).items():
        name = f"<a href='notebooks/{esc(stem)}.html'>{esc(stem)}</a>" if html_links else esc(stem)
        cls = " class='failed'" if run.get("status") != "ok" else ""
        parts.append(f"<tr{cls}><td>{name}</td><td>{esc(str(run.get('status')))}</td><td>{fmt(run.get('seconds'))}</td>"
                     f"<td>{fmt(run.get('peak_tree_rss_mb'))}</td></tr>")
    parts.append("</table>")
    if html_links:
        parts.append("<p class='caption'>Each name opens the executed notebook (its HTML copy; the <code>.ipynb</code> "
                     "beside it opens in JupyterLab).</p>")
    return "\n".join(parts)


STYLE = ("body{font-family:sans-serif;max-width:70em;margin:2em auto;padding:0 1em}table{border-collapse:collapse}"
         "td,th{border:1px solid #ccc;padding:.3em .6em;text-align:right}td:first-child,th:first-child{text-align:left}"
         "td.note{text-align:left}.n{color:#666;font-size:85%;font-weight:normal}.caption{color:#444}"
         ".failed{color:#b00}.missing{color:#777}")


def report_html(summary: dict, run_dir: str | Path | None = None, *, html_links: bool = True,
                reference_dir: str | Path | None = None) -> str:
    """The report page: settings, the failure if any, table 1 and the figures drawn from
    ``run_dir``'s saved files (none when ``run_dir`` is None), the reference run's (when
    ``reference_dir`` is given), and every notebook's run."""
    settings = summary.get("settings", {})
    body = ["<h1>vsearcher-lite reproduction</h1>",
            f"<p>profile <b>{esc(str(settings.get('profile')))}</b>, world <b>{esc(str(settings.get('world')))}</b>, "
            f"seed {esc(str(settings.get('seed')))}; finished {esc(str(summary.get('finished_at')))}; "
            f"total {fmt(summary.get('total_seconds'))} s; peak memory "
            f"{fmt((summary.get('peak_memory') or {}).get('peak_tree_rss_mb'))} MB. Every stage's metrics: "
            "<code>summary.json</code>.</p>"]
    if summary.get("failed"):
        body.append(f"<p class='failed'><b>Stopped:</b> {esc(summary['failed']['message'])}</p>")
    any_figure = False
    if run_dir is not None:
        for title, maker, draw in SECTIONS:
            section, drew = section_html(title, maker, draw, Path(run_dir))
            body.append(section)
            any_figure = any_figure or drew
    if reference_dir is not None:
        section, drew = section_html("The reference run (full length, shipped)", "make reference",
                                     reference_section, Path(reference_dir))
        body.append(section)
        any_figure = any_figure or drew
    body.append(notebooks_html(summary, html_links))
    head = ["<!doctype html><html><head><meta charset='utf-8'><title>vsearcher-lite reproduction</title>",
            f"<style>{STYLE}</style>"]
    if any_figure:
        from plotly.offline import get_plotlyjs

        head.append(f"<script>{get_plotlyjs()}</script>")  # once, in the page: the figures draw offline
    return "\n".join(head + ["</head><body>"] + body + ["</body></html>"]) + "\n"
