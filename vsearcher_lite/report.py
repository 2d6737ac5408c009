"""``RUN_DIR/report.html``: one offline page showing what a reproduction found; and the exporter
of the notebooks' HTML copies, offline pages too (equations as MathML, no MathJax from a CDN).

The page is drawn from the files the stages saved, never by rerunning one, with the shipped
reference run beside the short live one. A stage that has not run gets one line naming the
notebook that makes it; an unreadable file gets one line naming the error, and the rest of the
page is still drawn.
"""

from __future__ import annotations

import html
import json
import re
import warnings
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
    return fig.to_html(full_html=False, include_plotlyjs=False, include_mathjax=False,
                       default_height=420, config={"displaylogo": False, "responsive": True})


def caption(text: str) -> str:
    return f"<p class='caption'>{text}</p>"


def cells(values: list[Any], tag: str = "td") -> str:
    """``<td>a</td><td>b</td>...``: the values as they are (already HTML)."""
    return "".join(f"<{tag}>{v}</{tag}>" for v in values)


# ---------------------------------------------------------------------------------------------
# Sections: each returns HTML, or raises Missing when its stage has not run.


def table1_section(run_dir: Path) -> str:
    return table1_html(_json(run_dir / "comparison" / "metrics.json"))


def table1_html(metrics: dict) -> str:
    """Table 1 (each cell with correct/total) and figure 4, from the comparison's metrics."""
    from vsearcher_lite.agent.task import HEADLINE_GROUP, HEADLINE_LEVELS, in_level_order
    from vsearcher_lite.evaluation.comparison import TABLE_GROUPS, table_rows
    from vsearcher_lite.evaluation.plots import comparison_bars

    rows = table_rows(metrics)
    notes = metrics.get("missing") or {}
    n_tasks = metrics.get("n_tasks") or {}
    found = n_tasks.get("heldout_by_difficulty") or {}
    by_level = {level: found[level] for level in in_level_order(found)}  # stored sorted
    groups = [g for g in TABLE_GROUPS if any(r[g] is not None for r in rows)]
    by_level[HEADLINE_GROUP] = sum(by_level.get(level, 0) for level in HEADLINE_LEVELS)
    sizes = {"exam": n_tasks.get("exam"), **by_level}
    with_notes = any(notes.get(r["policy"]) for r in rows)

    def of(key: str, name: str, group: str) -> Any:
        return ((metrics.get(key) or {}).get(name) or {}).get(group)

    header = "".join(f"<th>{esc(g)}<br>"
                     f"<span class='n'>n={fmt(sizes.get(g))}</span></th>" for g in groups)
    parts = ["<table><tr><th>policy</th>" + header
             + ("<th>note</th>" if with_notes else "") + "</tr>"]
    for r in rows:
        name, values = r["policy"], []
        for g in groups:
            value = r[g]
            if g == "exam":
                correct, total = of("n_correct", name, g), of("n_tasks_by_policy", name, g)
            else:  # a held-out group: its accuracy is correct / tasks of the group
                total = by_level.get(g)
                correct = round(value * total) if value is not None and total else None
            values.append(fmt(value) + (count(correct, total) if value is not None else ""))
        note = f"<td class='note'>{esc(str(notes.get(name) or ''))}</td>" if with_notes else ""
        parts.append(f"<tr><td>{esc(name)}</td>{cells(values)}{note}</tr>")
    levels = ", ".join(f"{esc(k)} {v}" for k, v in by_level.items() if k != HEADLINE_GROUP)
    parts.append("</table>")
    parts.append("<p class='caption'>Pass@1 (one answer per task). Exam: the MM-SearchExam "
                 f"counterpart, {fmt(n_tasks.get('exam'))} tasks with 10 injection rounds on seeds "
                 f"never used in training; held-out: {fmt(n_tasks.get('heldout'))} tasks from "
                 "held-out seeds" + (f" ({levels})" if by_level else "")
                 + f". The headline is {HEADLINE_GROUP}, the paper's levels, one-hop apart. "
                 "In brackets: tasks answered correctly / tasks evaluated.</p>")
    if metrics.get("evaluated") and metrics.get("accuracy"):
        parts.append("<h3>Figure 4: base → SFT → RL</h3>" + figure_html(comparison_bars(metrics)))
    return "\n".join(parts)


def _metrics(run_dir: Path, stage: str) -> dict:
    path = run_dir / stage / "metrics.json"
    return _json(path) if path.is_file() else {}


def synthesis_section(run_dir: Path) -> str:
    from vsearcher_lite.synthesis.plots import funnel_figure, read_csv_rows

    rows = read_csv_rows(_require(run_dir / "filter" / "funnel.csv"))
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for r in rows:
        first.setdefault(r["difficulty"], r["remaining"])
        last[r["difficulty"]] = r["remaining"]
    counts = ", ".join(f"{esc(level)} {first[level]} → {last[level]}"
                       for level in first if first[level])
    return figure_html(funnel_figure(rows)) + caption(
        f"Tasks synthesized → kept after the four filters, per difficulty: {counts} "
        f"(total {sum(first.values())} → {sum(last.values())}).")


def trajectories_section(run_dir: Path) -> str:
    from vsearcher_lite.synthesis.trajectory_plots import read_rollout_rows, tool_call_histogram

    _require(run_dir / "trajectories" / "rollouts.csv")
    rows = read_rollout_rows(run_dir)
    n_tasks = len({r["task_id"] for r in rows})
    n_accepted = sum(1 for r in rows if r["accepted"])
    return figure_html(tool_call_histogram(rows)) + caption(
        f"{len(rows)} teacher trajectories on {n_tasks} training tasks; rejection sampling kept "
        f"{n_accepted} (counts per difficulty in the legend).")


def sft_section(run_dir: Path) -> str:
    from vsearcher_lite.runio import read_number_rows
    from vsearcher_lite.training.plots import base_vs_sft_figure, loss_curve_figure

    rows = read_number_rows(_require(run_dir / "sft" / "loss.csv"))
    m = _metrics(run_dir, "sft")
    text = f"{len(rows)} logged optimizer steps"
    if m.get("steps") is not None:
        text += f" of {fmt(m.get('steps'))}"
    if m.get("n_train_trajectories") is not None:
        text += f", trained on {fmt(m.get('n_train_trajectories'))} accepted trajectories"
    if m.get("n_dropped_too_long"):
        text += f" ({fmt(m.get('n_dropped_too_long'))} dropped as too long)"
    parts = [figure_html(loss_curve_figure(rows)), caption(text + ".")]
    if m.get("heldout_accuracy") is not None:
        parts.append(figure_html(base_vs_sft_figure(m)))
        parts.append(caption(f"On the {fmt(m.get('n_heldout_tasks'))} held-out tasks notebook 06 "
                             "evaluates (its own selection; table 1 above uses notebook 08's)."))
    return "\n".join(parts)


def grpo_section(run_dir: Path) -> str:
    from vsearcher_lite.rl.plots import reward_entropy_figure, tool_calls_figure
    from vsearcher_lite.runio import read_number_rows

    rows = read_number_rows(_require(run_dir / "grpo" / "steps.csv"))
    m = _metrics(run_dir, "grpo")
    config = m.get("config") or {}
    text = f"{len(rows)} GRPO steps"
    if config.get("prompts_per_step") and config.get("generations"):
        text += (f", {config['prompts_per_step']} tasks x {config['generations']} episodes "
                 "per step")
    text += "."
    if m.get("heldout_n") is not None:
        text += (f" Held-out ({m['heldout_n']} tasks): SFT {fmt(m.get('heldout_accuracy_sft'))} → "
                 f"RL {fmt(m.get('heldout_accuracy_rl'))}, paired difference "
                 f"{fmt(m.get('heldout_paired_diff'))} ± {fmt(m.get('heldout_paired_se'))} (1 SE).")
    figures = figure_html(reward_entropy_figure(rows)) + figure_html(tool_calls_figure(rows))
    return figures + caption(text)


def reference_section(ref: Path) -> str:
    """The shipped full-length run: how it was made, table 1 with the paired differences, the SFT
    loss and GRPO's figures 5 and 6, all from the reference's own files."""
    from vsearcher_lite.reference import (
        headline_numbers,
        paired_rows,
        read_card,
        read_log,
        reference_comparison,
    )
    from vsearcher_lite.rl.plots import reward_entropy_figure, tool_calls_figure
    from vsearcher_lite.runio import InputError
    from vsearcher_lite.training.plots import loss_curve_figure

    if not (ref / "card.json").is_file():
        raise Missing(str(ref / "card.json"))
    card = read_card(ref)
    wall = ", ".join(f"{esc(k)} {v / 60:.0f} min"
                     for k, v in (card.get("wall_seconds") or {}).items())
    parts = [f"<p>A full-length run of the same commands, shipped in <code>{esc(str(ref))}</code>: "
             f"made on {esc(str(card.get('device')))} at commit "
             f"<code>{esc(str(card.get('commit')))}</code>" + (f" ({wall})" if wall else "")
             + ". Regenerate it with <code>" + esc(" && ".join(card.get("commands") or []))
             + "</code>.</p>",
             table1_html(reference_comparison(ref)),
             "<h3>Paired differences (same tasks)</h3><table><tr>"
             + cells(["comparison", "tasks", "n", "difference", "SE", "gained", "lost"], "th")
             + "</tr>"]
    for r in paired_rows(ref):
        parts.append("<tr>" + cells([esc(r["comparison"]), esc(r["tasks"]), r["n"],
                                     f"{r['difference']:+.3f}", f"{r['se']:.3f}", r["gained"],
                                     r["lost"]]) + "</tr>")
    parts.append("</table>")
    parts.append(targets_html(numbers := headline_numbers(ref)))
    parts.append(caveats_html(numbers))
    figures = {
        "sft": lambda rows: [loss_curve_figure(rows, title="Reference SFT loss")],
        "grpo": lambda rows: [
            reward_entropy_figure(rows, title="Reference GRPO (paper figure 5)"),
            tool_calls_figure(rows, title="Reference GRPO tool calls (paper figure 6)")],
    }
    for stage, draw in figures.items():
        try:
            rows = read_log(ref, stage)
        except InputError:
            continue
        parts += [figure_html(fig) for fig in draw(rows)]
    return "\n".join(parts)


def targets_html(numbers: dict) -> str:
    """The targets the reference is held to, each with what it measured, and what bounds it."""
    from vsearcher_lite.reference import limit_lines, target_rows

    rows = target_rows(numbers)
    parts = ["<h3>Targets</h3><table><tr>"
             + cells(["target", "required", "measured", ""], "th") + "</tr>"]
    for r in rows:
        row_class = " class='failed'" if r["verdict"] == "missed" else ""
        parts.append(f"<tr{row_class}>" + cells(
            [esc(r[k]) for k in ("target", "required", "measured", "verdict")]) + "</tr>")
    parts.append("</table>")
    parts += [caption(esc(line)) for line in limit_lines(numbers)]
    return "\n".join(parts)


def caveats_html(numbers: dict) -> str:
    """What to keep in mind beside the paper's numbers."""
    from vsearcher_lite.agent.task import HEADLINE_GROUP

    top = numbers.get("headline") or {}
    n = (top.get("sft") or {}).get("n_tasks")
    items = [
        f"The headline is Pass@1 on the held-out {HEADLINE_GROUP}"
        + (f" tasks ({n})" if n else " tasks") + ": the paper's levels; the one-hop warm-up, "
        "which only this reproduction has, is reported apart.",
        "Every policy is the same 5M-parameter model (the paper's is Qwen3-VL-8B-Thinking), "
        "searching a fictional sandbox web, so the numbers are shares of these tasks, not the "
        "paper's percent on public benchmarks.",
        "The judge is the offline match judge: the gold's aliases, and a number only written "
        "another way (separators, unit, the gold's rounding), never a nearby number; the paper "
        "asks an LLM judge.",
        "Differences between policies are paired on the same tasks, with their standard errors; "
        "a difference under two SE is noise.",
    ]
    return "<h3>Caveats</h3><ul>" + "".join(f"<li>{esc(i)}</li>" for i in items) + "</ul>"


SECTIONS: list[tuple[str, str, Callable[[Path], str]]] = [
    ("Table 1: Pass@1 of every policy", "notebook 08", table1_section),
    ("Synthesis: tasks left after each filter", "notebooks 02-04", synthesis_section),
    ("Figure 3: tool calls per trajectory by difficulty", "notebook 05", trajectories_section),
    ("SFT: loss and base vs SFT", "notebook 06", sft_section),
    ("Figures 5 and 6: GRPO reward, entropy and tool calls", "notebook 07", grpo_section),
]


def section_html(title: str, maker: str, draw: Callable[[Path], str],
                 run_dir: Path) -> tuple[str, bool]:
    """``(html, drew a figure?)``: the section, or one line on why it is not there."""
    head = f"<h2>{esc(title)}</h2>"
    try:
        body = draw(run_dir)
    except Missing as exc:
        where = f"{esc(maker)} writes <code>{esc(str(exc))}</code>"
        return head + f"<p class='missing'>Not run yet ({where}).</p>", False
    except Exception as exc:  # a damaged file must not cost the rest of the report
        error = f"{esc(type(exc).__name__)}: {esc(str(exc))}"
        return head + f"<p class='failed'>Could not draw this section: {error}</p>", False
    return head + body, "plotly-graph-div" in body


def notebooks_html(summary: dict, html_links: bool) -> str:
    parts = ["<h2>Notebooks</h2><table><tr>"
             + cells(["notebook", "status", "seconds", "peak memory (MB)"], "th") + "</tr>"]
    for stem, run in (summary.get("notebooks") or {}).items():
        name = f"<a href='notebooks/{esc(stem)}.html'>{esc(stem)}</a>" if html_links else esc(stem)
        cls = " class='failed'" if run.get("status") != "ok" else ""
        parts.append(f"<tr{cls}>" + cells([name, esc(str(run.get("status"))),
                                           fmt(run.get("seconds")),
                                           fmt(run.get("peak_tree_rss_mb"))]) + "</tr>")
    parts.append("</table>")
    if html_links:
        parts.append(caption("Each name opens the executed notebook (its HTML copy; the "
                             "<code>.ipynb</code> beside it opens in JupyterLab)."))
    return "\n".join(parts)


STYLE = ("body{font-family:sans-serif;max-width:70em;margin:2em auto;padding:0 1em}"
         "table{border-collapse:collapse}"
         "td,th{border:1px solid #ccc;padding:.3em .6em;text-align:right}"
         "td:first-child,th:first-child{text-align:left}"
         "td.note{text-align:left}.n{color:#666;font-size:85%;font-weight:normal}"
         ".caption{color:#444}.failed{color:#b00}.missing{color:#777}")


def report_html(summary: dict, run_dir: str | Path | None = None, *, html_links: bool = True,
                reference_dir: str | Path | None = None) -> str:
    """The report page: settings, sections from ``run_dir`` and the reference, the notebooks."""
    settings = summary.get("settings", {})
    peak = (summary.get("peak_memory") or {}).get("peak_tree_rss_mb")
    body = ["<h1>vsearcher-lite reproduction</h1>",
            f"<p>profile <b>{esc(str(settings.get('profile')))}</b>, "
            f"world <b>{esc(str(settings.get('world')))}</b>, "
            f"seed {esc(str(settings.get('seed')))}; "
            f"finished {esc(str(summary.get('finished_at')))}; "
            f"total {fmt(summary.get('total_seconds'))} s; peak memory {fmt(peak)} MB. "
            "Every stage's metrics: <code>summary.json</code>.</p>"]
    if summary.get("failed"):
        body.append(f"<p class='failed'><b>Stopped:</b> {esc(summary['failed']['message'])}</p>")
    sections = [(*section, run_dir) for section in SECTIONS] if run_dir is not None else []
    if reference_dir is not None:
        sections.append(("The reference run (full length, shipped)", "make reference",
                         reference_section, reference_dir))
    any_figure = False
    for title, maker, draw, folder in sections:
        section, drew = section_html(title, maker, draw, Path(folder))
        body.append(section)
        any_figure = any_figure or drew
    body.append(notebooks_html(summary, html_links))
    head = ["<!doctype html><html><head><meta charset='utf-8'>"
            "<title>vsearcher-lite reproduction</title>", f"<style>{STYLE}</style>"]
    if any_figure:
        from plotly.offline import get_plotlyjs

        head.append(f"<script>{get_plotlyjs()}</script>")  # once: the figures draw offline
    return "\n".join(head + ["</head><body>"] + body + ["</body></html>"]) + "\n"


# ---------------------------------------------------------------------------------------------
# The notebooks' HTML copies, which read offline too

#: nbconvert's lab page without its MathJax script (fetched from a CDN): the equations are MathML.
OFFLINE_TEMPLATE = ("{%- extends 'index.html.j2' -%}\n"
                    "{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}\n")

#: Inline math as pandoc reads it: ``$`` opens before a non-space and closes after one, not before
#: a digit, and a span holds no backtick, so ``$5 or $10`` and `` `$HOME` `` stay text.
INLINE_MATH = r"(?<![$\\])\$(?=[^\s$])(?P<math_inline_tex>(?:\\.|[^\\$`])+?)(?<=\S)\$(?!\d)"


def tex_to_mathml(tex: str, display: bool = False) -> str:
    r"""The MathML of one TeX equation, which browsers draw without a script; ``ValueError`` where
    latex2mathml cannot read it or passes a command it does not know through as text.

    >>> tex_to_mathml(r"\frac{1}{G}")
    '<math ...><mrow><mfrac><mrow><mn>1</mn></mrow><mrow><mi>G</mi></mrow></mfrac></mrow></math>'
    """
    try:
        from latex2mathml.converter import convert
    except ImportError:
        raise ValueError("no latex2mathml: pip install 'vsearcher-lite[notebooks]'") from None
    try:
        mathml = convert(tex.strip(), display="block" if display else "inline")
    except Exception as exc:  # its parser raises exceptions of its own
        why = f"{type(exc).__name__} {exc}".strip()
        raise ValueError(f"cannot convert ${tex}$: {why}") from None
    unknown = re.findall(r">(\\[A-Za-z]+)<", mathml)
    if unknown:
        raise ValueError(f"cannot convert ${tex}$: {unknown[0]} is unknown to latex2mathml")
    # browsers draw mathvariant on letters only: a double-struck digit (\mathbb{1}) is a character
    return re.sub(r'<mn mathvariant="double-struck">(\d+)</mn>',
                  lambda m: "<mn>" + "".join(chr(0x1D7D8 + int(d)) for d in m[1]) + "</mn>",
                  mathml)


def math_html(tex: str, display: bool) -> str:
    """MathML for ``tex``, or the TeX itself as code (with a warning) where it does not convert."""
    try:
        return tex_to_mathml(tex, display)
    except ValueError as exc:
        warnings.warn(str(exc), stacklevel=2)
        return f"<code>{esc(tex)}</code>"


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def progress_line(model_id: str, state: dict) -> str | None:
    """The last line a saved tqdm widget showed (its label and its numbers), ``""`` where it was
    hidden once done, ``None`` where ``model_id`` is no tqdm bar."""
    def model(ref: str) -> dict:
        return state.get(ref.removeprefix("IPY_MODEL_"), {}).get("state", {})

    box = state.get(model_id, {})
    children = box.get("state", {}).get("children", [])
    if box.get("model_name") != "HBoxModel" or len(children) != 3:
        return None
    label, bar, numbers = (model(ref) for ref in children)
    if "max" not in bar or "value" not in label or "value" not in numbers:
        return None
    if model(box["state"].get("layout", "")).get("visibility") == "hidden":
        return ""
    # tqdm writes its text as HTML, with figure spaces for spaces
    text = html.unescape(label["value"] + " " + numbers["value"]).replace("\u2007", " ")
    return " ".join(text.split())


def widgets_as_text(nb, resources):
    """An nbconvert preprocessor: each saved tqdm bar of ``nb`` as its last line of text, and each
    explorer (``widgets.show``) as the self-contained HTML view saved beside it. A saved widget is
    drawn by a script from a CDN, so offline the page would show nothing in its place; when no
    other widget is left, the page loads no widget script either."""
    saved = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    widgets_left = False
    for cell in nb.cells:
        kept = []
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if WIDGET_VIEW in data and "text/html" in data:  # an explorer: keep its own view
                del data[WIDGET_VIEW]
            view = data.get(WIDGET_VIEW)
            line = progress_line(view.get("model_id", ""), saved) if view else None
            if line is None:
                widgets_left = widgets_left or view is not None
                kept.append(out)
            elif line:  # a bar hidden once done is left out
                out["data"] = {"text/plain": line}
                kept.append(out)
        if cell.get("outputs"):
            cell["outputs"] = kept
    if saved and not widgets_left:
        del nb.metadata["widgets"]
    return nb, resources


MATHJAX_SCRIPT = re.compile(r'<script [^>]*src="[^"]*mathjax[^"]*"[^>]*>\s*</script>', re.I)


def without_mathjax(nb, resources):
    """An nbconvert preprocessor: the MathJax script that plotly puts in each figure's HTML goes
    (it comes from a CDN; the figures draw without it)."""
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            page = out.get("data", {}).get("text/html")
            if page:
                out["data"]["text/html"] = MATHJAX_SCRIPT.sub("", "".join(page))
    return nb, resources


def offline_html_exporter():
    """nbconvert's ``HTMLExporter`` for pages read offline: the equations of markdown come as
    MathML, the page and its figures load no MathJax, and progress bars are their last line of
    text."""
    from jinja2 import DictLoader, pass_context
    from nbconvert import HTMLExporter
    from nbconvert.filters.markdown_mistune import (
        IPythonRenderer,
        MarkdownWithMath,
        MathInlineParser,
    )

    class MathMLRenderer(IPythonRenderer):
        def block_math(self, body: str) -> str:
            return math_html(body, display=True)

        def inline_math(self, body: str) -> str:
            return math_html(body, display=False)

        def latex_environment(self, name: str, body: str) -> str:
            return math_html(f"\\begin{{{name}}}{body}\\end{{{name}}}", display=True)

    mistune3 = hasattr(MathInlineParser, "SPECIFICATION")  # mistune 2 parses by other means

    class PandocMathParser(MathInlineParser):
        SPECIFICATION = {**getattr(MathInlineParser, "SPECIFICATION", {}),
                         "inline_math_tex": INLINE_MATH}

    class OfflineHTMLExporter(HTMLExporter):
        @pass_context
        def markdown2html(self, context, source):  # HTMLExporter's, with the classes above
            cell = context.get("cell", {})
            path = context.get("resources", {}).get("metadata", {}).get("path", "")
            renderer = MathMLRenderer(escape=False, attachments=cell.get("attachments", {}),
                                      embed_images=self.embed_images, path=path,
                                      anchor_link_text=self.anchor_link_text,
                                      exclude_anchor_links=self.exclude_anchor_links,
                                      **self.lexer_options)
            inline = PandocMathParser(hard_wrap=False) if mistune3 else None  # else nbconvert's
            return MarkdownWithMath(renderer=renderer, inline=inline).render(source)

    page = DictLoader({"offline.html.j2": OFFLINE_TEMPLATE})
    exporter = OfflineHTMLExporter(extra_loaders=[page], template_file="offline.html.j2")
    exporter.register_preprocessor(widgets_as_text, enabled=True)
    exporter.register_preprocessor(without_mathjax, enabled=True)
    return exporter
