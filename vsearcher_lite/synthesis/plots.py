"""Figures and viewers of notebooks 01-04 (one section per notebook below).

Everything takes plain rows read from the stages' saved files (``read_csv_rows``,
``read_jsonl``), so a figure can be redrawn without rerunning a stage.
"""

from __future__ import annotations

import csv
import html
from pathlib import Path
from typing import Any, Iterable

from vsearcher_lite.agent.task import LEVEL_ORDER
from vsearcher_lite.runio import RunDir
from vsearcher_lite.synthesis.filters import FILTER_ORDER
from vsearcher_lite.synthesis.trajectory_plots import LEVEL_COLOURS, image_data_url

STAGE_NAMES = {
    "synthesized": "synthesized",
    "answer_in_question": "answer not in question",
    "image_too_simple": "image not too simple",
    "can_be_directly_answered": "no one-step shortcut",
    "can_be_directly_answered_with_text": "image needed",
    "kept": "kept",
}


def read_csv_rows(path: str | Path) -> list[dict]:
    """CSV rows with integer-looking fields turned into ints."""
    with Path(path).open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        for k, v in r.items():
            if isinstance(v, str) and v.lstrip("-").isdigit():
                r[k] = int(v)
    return rows


# -- 01 seeds ----------------------------------------------------------------------------------

def seed_scatter(rows: list[dict], sitelinks_max: int, statements_min: int, *,
                 max_points: int = 4000):
    """Every entity as a point (sitelinks, statements), jittered (integer counts pile up), with
    the rare-but-documented corner shaded; the x axis turns logarithmic (sitelinks + 1) when
    sitelinks span more than two decades."""
    import math
    import random

    import plotly.graph_objects as go

    rng = random.Random(0)
    rows = list(rows)
    if len(rows) > max_points:
        rows = rng.sample(rows, max_points)
    others = [r for r in rows if not r["selected"] and not r["is_person"]]
    groups = {
        "selected seeds": [r for r in rows if r["selected"]],
        "people (excluded)": [r for r in rows if not r["selected"] and r["is_person"]],
        "no image (excluded)": [r for r in others if not r["has_image"]],
        "other entities": [r for r in others if r["has_image"]],
    }
    colours = {"selected seeds": "#c0392b", "people (excluded)": "#9aa5b1",
               "no image (excluded)": "#d5dbe0",
               "other entities": "#5b6dcd"}
    max_sitelinks = max([r["sitelinks"] for r in rows] + [sitelinks_max])
    log_x = max_sitelinks > 200

    def x_of(sitelinks: int) -> float:
        if log_x:  # sitelinks + 1, jittered by a factor within +-4 %
            return (sitelinks + 1) * math.exp(rng.uniform(-0.04, 0.04))
        return sitelinks + rng.uniform(-0.3, 0.3)

    fig = go.Figure()
    for name, group in groups.items():
        fig.add_trace(go.Scattergl(
            x=[x_of(r["sitelinks"]) for r in group],
            y=[r["statements"] + rng.uniform(-0.3, 0.3) for r in group],
            mode="markers", name=f"{name} ({len(group)})",
            marker=dict(size=4, color=colours[name], opacity=0.6),
            text=[f"{r['id']} ({r['type']}): {r['sitelinks']} sitelinks" for r in group],
            hoverinfo="text",
        ))
    top = max([r["statements"] for r in rows] + [statements_min + 1])
    if log_x:  # a shape takes data units on a log axis (the axis range takes log10 units)
        x0, x1 = 0.8, sitelinks_max + 1.5
        xaxis = dict(type="log", range=[math.log10(0.8), math.log10((max_sitelinks + 1) * 1.25)],
                     title="sitelinks + 1 (how widely covered; log scale)")
    else:
        x0, x1 = -0.5, sitelinks_max + 0.5
        xaxis = dict(type="linear", range=[-0.5, max_sitelinks + 0.5],
                     title="sitelinks (how widely covered)")
    fig.add_shape(type="rect", x0=x0, x1=x1, y0=statements_min - 0.5, y1=top + 1,
                  line=dict(color="#c0392b", dash="dash"), fillcolor="rgba(192,57,43,0.07)")
    fig.update_layout(
        title=f"Seeds: sitelinks <= {sitelinks_max} and statements >= {statements_min} "
              "(paper 2.1, A.2)",
        xaxis=xaxis, yaxis_title="statements (how well documented)", height=480,
    )
    return fig


def pool_bars(pool_sizes: dict[str, int]):
    import plotly.graph_objects as go

    names = list(pool_sizes)
    fig = go.Figure(go.Bar(x=names, y=[pool_sizes[n] for n in names],
                           text=[pool_sizes[n] for n in names],
                           marker_color=[LEVEL_COLOURS.get(n, "#7f8c8d") for n in names]))
    fig.update_layout(title="Seeds per pool (disjoint: the exam never shares a seed with training)",
                      yaxis_title="seeds", height=360)
    return fig


# -- 02 text injection -------------------------------------------------------------------------

def question_length_figure(metrics: dict):
    """Mean question words after each round, and per level (from inject-text's metrics)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    by_round = {int(k): v for k, v in metrics["mean_question_words_by_round"].items()}
    per_level = metrics["mean_question_words"]
    fig = make_subplots(rows=1, cols=2,
                        subplot_titles=("after each injection round", "per difficulty level"))
    fig.add_trace(go.Scatter(x=sorted(by_round), y=[by_round[k] for k in sorted(by_round)],
                             mode="lines+markers",
                             name="mean words"), row=1, col=1)
    levels = [lvl for lvl in LEVEL_ORDER if per_level.get(lvl)]
    fig.add_trace(go.Bar(x=levels, y=[per_level[lvl] for lvl in levels], name="mean words",
                         marker_color=[LEVEL_COLOURS[lvl] for lvl in levels]), row=1, col=2)
    fig.update_xaxes(title_text="round (0 = initial question)", row=1, col=1)
    fig.update_yaxes(title_text="words", row=1, col=1)
    fig.update_layout(showlegend=False, height=380,
                      title="Questions grow with every injection round")
    return fig


def highlight(text: str, phrase: str, colour: str = "#fde2a7") -> str:
    """``text`` as HTML with ``phrase`` marked (escaped; first occurrence).

    >>> highlight("a <b> c", "<b>")
    'a <mark style="background:#fde2a7">&lt;b&gt;</mark> c'
    """
    escaped = html.escape(text)
    target = html.escape(phrase)
    if target and target in escaped:
        return escaped.replace(target, f'<mark style="background:{colour}">{target}</mark>', 1)
    return escaped


def round_html(task: dict, index: int) -> str:
    """One step of a task's story: 0 is the initial QA, then one per round, then the image."""
    rounds = task.get("rounds", [])
    if index == 0:
        seed = html.escape(task.get("seed_title", ""))
        return (f"<b>Initial question</b> (about the seed <i>{seed}</i>)<br>"
                f"{html.escape(task.get('initial_question') or task['question'])}<br>"
                f"<b>Answer:</b> {html.escape(task['answer'])}")
    if index <= len(rounds):
        r = rounds[index - 1]
        fact = r.get("fact") or {}
        fact_text = fact.get("value") if fact.get("kind") == "text" else r.get("description", "")
        return (f"<b>Round {r['round']}</b>: hide <i>{html.escape(r['entity'])}</i><br>"
                f"<b>Fact used:</b> {html.escape(str(fact_text))}<br>"
                f"<b>Before:</b> {highlight(r['question_before'], r['entity'], '#f5b7b1')}<br>"
                f"<b>After:</b> {highlight(r['question_after'], r['description'])}")
    img = task.get("image") or {}
    return (f"<b>Image injection</b>: hide <i>{html.escape(img.get('entity', ''))}</i><br>"
            f"<b>After:</b> {highlight(task['question'], img.get('description', ''))}")


def rounds_viewer(task: dict):
    """A step-through view of one task (initial QA, each round, the image), as offline HTML."""
    from vsearcher_lite.stepper import StepView

    n_steps = 1 + len(task.get("rounds", [])) + (1 if task.get("image") else 0)
    heading = f"<b>{html.escape(task['id'])}</b> ({html.escape(str(task.get('difficulty')))})"
    return StepView([round_html(task, i) for i in range(n_steps)], heading, first=0)


# -- 03 image injection ------------------------------------------------------------------------

def task_cards_html(tasks: Iterable[dict], *, run_dir: str | Path | None = None,
                    show_source: bool = True) -> str:
    """Tasks as cards: the question image (and the entity's own picture), question and answer;
    ``run_dir`` resolves the records' relative paths."""
    cards = []
    for t in tasks:
        t = RunDir(run_dir).resolve(t) if run_dir is not None else t
        img = t.get("image") or {}
        pictures = []
        if t.get("image_path") and Path(t["image_path"]).is_file():
            pictures.append('<figure style="margin:0 8px 0 0">'
                            f'<img src="{image_data_url(t["image_path"])}"><figcaption>'
                            "question image</figcaption></figure>")
        source = img.get("source_image")
        if show_source and source and Path(source).is_file():
            entity = html.escape(img.get("entity", ""))
            pictures.append(f'<figure style="margin:0"><img src="{image_data_url(source)}">'
                            f"<figcaption>{entity} (the entity's own picture)</figcaption>"
                            "</figure>")
        cards.append(
            '<div style="border:1px solid #ccd;border-radius:6px;padding:8px;margin:6px 0">'
            f'<div style="display:flex">{"".join(pictures)}</div>'
            f"<p><b>{html.escape(t['id'])}</b> ({t.get('difficulty')}): "
            f"{highlight(t['question'], img.get('description', ''))}</p>"
            f"<p><b>Answer:</b> {html.escape(t['answer'])}</p></div>"
        )
    return "\n".join(cards)


# -- 04 filtering ------------------------------------------------------------------------------

def funnel_figure(rows: list[dict]):
    """One funnel per difficulty: tasks left after each filter, in the order they are applied."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for level in LEVEL_ORDER:
        group = [r for r in rows if r["difficulty"] == level]
        if not group or not group[0]["remaining"]:
            continue
        fig.add_trace(go.Funnel(name=level,
                                y=[STAGE_NAMES.get(r["stage"], r["stage"]) for r in group],
                                x=[r["remaining"] for r in group], textinfo="value+percent initial",
                                marker=dict(color=LEVEL_COLOURS[level])))
    fig.update_layout(title="The four filters (paper 2.1): tasks left after each", height=460)
    return fig


def complexity_scatter(labeled: list[dict]):
    """Colour entropy against colour count of the question images; the too-simple ones marked."""
    import plotly.graph_objects as go

    measured = [t for t in labeled if isinstance(
        t.get("extra", {}).get("filter_details", {}).get("image_too_simple"), dict)]
    fig = go.Figure()
    for simple, name, colour in ((True, "too simple (removed)", "#c0392b"),
                                 (False, "kept by this filter", "#5b6dcd")):
        group = [t for t in measured if t.get("filters", {}).get("image_too_simple") is simple]
        details = [t["extra"]["filter_details"]["image_too_simple"] for t in group]
        fig.add_trace(go.Scatter(x=[d["colours"] for d in details],
                                 y=[d["entropy"] for d in details], mode="markers",
                                 name=f"{name} ({len(group)})",
                                 marker=dict(color=colour, size=7, opacity=0.7),
                                 text=[t["id"] for t in group], hoverinfo="text"))
    fig.update_layout(title="Image complexity of the question images",
                      xaxis_title="distinct colours",
                      yaxis_title="colour entropy (bits)", xaxis_type="log", height=400)
    return fig


def filter_table(metrics: dict) -> list[dict[str, Any]]:
    """Per filter: tasks it flags on its own and tasks it removes first (for a small table)."""
    return [{"filter": name, "flagged": metrics["flagged"][name],
             "removed (first to fire)": metrics["removed"][name]}
            for name in FILTER_ORDER]
