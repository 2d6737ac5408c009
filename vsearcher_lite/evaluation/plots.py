"""Figures of the evaluation, built from the saved summary (``RUN_DIR/eval/metrics.json``).

- ``accuracy_table(summary)``: rows of the paper's table 1 for this run (one per evaluated
  policy: Pass@1 on each split or difficulty);
- ``accuracy_bars(summary)``: grouped bars like the paper's figure 4 (base -> SFT -> RL, and
  here also the teacher and the no-tools ablation), one group per split or difficulty;
- ``tool_call_bars(summary)``: mean tool calls per task by tool, per policy.

Every function takes the summary dict (``evaluate.read_summary(run_dir)``), so the figures can be
redrawn without rerunning any evaluation.
"""

from __future__ import annotations

from vsearcher_lite.evaluation.metrics import TOOL_NAMES
from vsearcher_lite.synthesis.task import in_level_order

# The order a reader expects in figure 4, for the names this project's notebooks use.
PREFERRED_ORDER = ("direct", "base", "sft", "rl", "grpo", "teacher")


def ordered_names(summary: dict, names: list[str] | None = None) -> list[str]:
    """Policy names in reading order: the given ones, else the usual stages first, then the rest.

    >>> ordered_names({"teacher": {}, "rl": {}, "base": {}, "x": {}})
    ['base', 'rl', 'teacher', 'x']
    """
    if names is not None:
        missing = [n for n in names if n not in summary]
        if missing:
            raise KeyError(f"not evaluated yet: {', '.join(missing)}")
        return list(names)
    known = [n for n in PREFERRED_ORDER if n in summary]
    return known + sorted(n for n in summary if n not in known)


def accuracy_groups(summary: dict, names: list[str], by: str) -> list[str]:
    """The split or difficulty labels present for these policies, difficulties in their natural order."""
    key = _key(by)
    labels = {label for n in names for label in (summary[n].get(key) or {})}
    return in_level_order(labels) if by == "difficulty" else sorted(labels)


def _key(by: str) -> str:
    if by not in ("split", "difficulty"):
        raise ValueError("by must be 'split' or 'difficulty'")
    return f"accuracy_by_{by}"


def accuracy_table(summary: dict, names: list[str] | None = None, by: str = "split") -> list[dict]:
    """``[{"policy": name, "pass_at_1": ..., "<group>": accuracy, ..., "n_tasks": ...}]``.

    >>> accuracy_table({"base": {"pass_at_1": 0.1, "n_tasks": 10, "accuracy_by_split": {"exam": 0.0, "heldout": 0.2}}})
    [{'policy': 'base', 'pass_at_1': 0.1, 'exam': 0.0, 'heldout': 0.2, 'n_tasks': 10}]
    """
    names = ordered_names(summary, names)
    groups = accuracy_groups(summary, names, by)
    key = _key(by)
    rows = []
    for n in names:
        entry = summary[n]
        row = {"policy": n, "pass_at_1": entry.get("pass_at_1")}
        row.update({g: (entry.get(key) or {}).get(g) for g in groups})
        row["n_tasks"] = entry.get("n_tasks")
        rows.append(row)
    return rows


def accuracy_bars(summary: dict, names: list[str] | None = None, by: str = "split", title: str | None = None):
    """Grouped bars: accuracy per split (or difficulty), one bar per policy (paper figure 4)."""
    import plotly.graph_objects as go

    names = ordered_names(summary, names)
    groups = accuracy_groups(summary, names, by)
    key = _key(by)
    fig = go.Figure()
    for n in names:
        values = [(summary[n].get(key) or {}).get(g) for g in groups]
        fig.add_bar(name=n, x=groups, y=values, text=[f"{v:.2f}" if v is not None else "" for v in values],
                    textposition="outside")
    fig.update_layout(barmode="group", title=title or f"Pass@1 by {by}", yaxis_title="accuracy",
                      yaxis_range=[0, 1.05], xaxis_title=by, legend_title="policy")
    return fig


def tool_call_bars(summary: dict, names: list[str] | None = None, title: str = "Mean tool calls per task"):
    """Stacked bars: mean calls per task of each tool, one bar per policy (paper figure 6's measure)."""
    import plotly.graph_objects as go

    names = ordered_names(summary, names)
    fig = go.Figure()
    for tool in TOOL_NAMES:
        fig.add_bar(name=tool, x=names, y=[(summary[n].get("mean_tool_calls_by_type") or {}).get(tool, 0) for n in names])
    fig.update_layout(barmode="stack", title=title, yaxis_title="calls per task", xaxis_title="policy",
                      legend_title="tool")
    return fig


# ---------------------------------------------------------------------------------------------
# Notebook 08: the comparison (``RUN_DIR/comparison/metrics.json``, ``comparison.read_comparison``)


def comparison_groups(metrics: dict) -> list[str]:
    """The table groups that hold at least one number (exam, easy, medium, hard, heldout).

    >>> comparison_groups({"accuracy": {"a": {"exam": 0.1, "easy": None, "heldout": 0.0}, "b": None}})
    ['exam', 'heldout']
    """
    from vsearcher_lite.evaluation.comparison import TABLE_GROUPS

    rows = [a for a in metrics["accuracy"].values() if a]
    return [g for g in TABLE_GROUPS if any(r.get(g) is not None for r in rows)]


def comparison_bars(metrics: dict, title: str = "Pass@1: base -> SFT -> RL, the teacher and the no-tools ablation"):
    """Figure 4 of the paper for this run: one group of bars per benchmark column, one bar per
    evaluated policy; a policy that is missing (not trained yet) is named in the legend title."""
    import plotly.graph_objects as go

    groups = comparison_groups(metrics)
    fig = go.Figure()
    for name in metrics["evaluated"]:
        row = metrics["accuracy"][name]
        values = [row.get(g) for g in groups]
        fig.add_bar(name=name, x=groups, y=values, text=[f"{v:.2f}" if v is not None else "" for v in values],
                    textposition="outside")
    missing = [n for n in metrics.get("order") or sorted(metrics.get("missing", {})) if n in metrics.get("missing", {})]
    legend = "policy" + (f" (missing: {', '.join(missing)})" if missing else "")
    fig.update_layout(barmode="group", title=title, yaxis_title="Pass@1", yaxis_range=[0, 1.05],
                      xaxis_title="benchmark / held-out difficulty", legend_title=legend)
    return fig


def comparison_tool_calls(metrics: dict, benchmark: str = "heldout", title: str | None = None):
    """Stacked bars: mean calls per task of each tool, one bar per evaluated policy, on one benchmark."""
    import plotly.graph_objects as go

    names = [n for n in metrics["evaluated"] if (metrics["mean_tool_calls_by_type"][n] or {}).get(benchmark)]
    fig = go.Figure()
    for tool in TOOL_NAMES:
        fig.add_bar(name=tool, x=names, y=[metrics["mean_tool_calls_by_type"][n][benchmark].get(tool, 0) for n in names])
    fig.update_layout(barmode="stack", title=title or f"Mean tool calls per task ({benchmark})",
                      yaxis_title="calls per task", xaxis_title="policy", legend_title="tool")
    return fig


def comparison_terminations(metrics: dict, benchmark: str = "heldout", title: str | None = None):
    """Stacked bars: how each policy's episodes ended (answer, format error, limits ...), as shares."""
    import plotly.graph_objects as go

    names = [n for n in metrics["evaluated"] if (metrics["terminations"][n] or {}).get(benchmark)]
    reasons = sorted({r for n in names for r, c in metrics["terminations"][n][benchmark].items() if c})
    fig = go.Figure()
    for reason in reasons:
        shares = []
        for n in names:
            counts = metrics["terminations"][n][benchmark]
            total = sum(counts.values())
            shares.append(counts.get(reason, 0) / total if total else 0)
        fig.add_bar(name=reason, x=names, y=shares)
    fig.update_layout(barmode="stack", title=title or f"How episodes ended ({benchmark})", yaxis_title="share of tasks",
                      yaxis_range=[0, 1], xaxis_title="policy", legend_title="termination")
    return fig
