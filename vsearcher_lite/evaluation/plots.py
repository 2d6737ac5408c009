"""Figures of the evaluation, redrawn from saved summaries without rerunning anything: table 1
rows, figure 4's grouped bars and tool calls per policy, from ``scoring.evaluate.read_summary`` (one
``RUN_DIR/eval`` summary) or from the comparison's metrics (notebook 08)."""

from __future__ import annotations

from vsearcher_lite.agent.task import in_level_order
from vsearcher_lite.scoring.metrics import POLICY_COLOURS, TOOL_NAMES

# The order a reader expects in figure 4, for the names this project's notebooks use.
PREFERRED_ORDER = ("base", "sft", "rl", "grpo", "teacher")


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


def _key(by: str) -> str:
    if by not in ("split", "difficulty"):
        raise ValueError("by must be 'split' or 'difficulty'")
    return f"accuracy_by_{by}"


def accuracy_groups(summary: dict, names: list[str], by: str) -> list[str]:
    """The split or difficulty labels present for these policies, difficulties in order."""
    labels = {label for n in names for label in (summary[n].get(_key(by)) or {})}
    return in_level_order(labels) if by == "difficulty" else sorted(labels)


def accuracy_table(summary: dict, names: list[str] | None = None, by: str = "split") -> list[dict]:
    """``[{"policy", "pass_at_1", <group>: accuracy, ..., "n_tasks"}]``.

    >>> accuracy_table({"base": {"pass_at_1": 0.1, "n_tasks": 10,
    ...                          "accuracy_by_split": {"exam": 0.0, "heldout": 0.2}}})
    [{'policy': 'base', 'pass_at_1': 0.1, 'exam': 0.0, 'heldout': 0.2, 'n_tasks': 10}]
    """
    names = ordered_names(summary, names)
    groups = accuracy_groups(summary, names, by)
    rows = []
    for n in names:
        entry = summary[n]
        by_group = entry.get(_key(by)) or {}
        rows.append({"policy": n, "pass_at_1": entry.get("pass_at_1"),
                     **{g: by_group.get(g) for g in groups}, "n_tasks": entry.get("n_tasks")})
    return rows


def _grouped_bars(go, values: dict[str, list], groups: list[str],
                  errors: dict[str, list] | None = None, **layout):
    """One bar per policy in each group, labelled with its value, in the policy's colour; with
    ``errors``, a bar of one standard error each way."""
    fig = go.Figure()
    for name, ys in values.items():
        error = (errors or {}).get(name)
        fig.add_bar(name=name, x=groups, y=ys, textposition="outside",
                    text=[f"{v:.2f}" if v is not None else "" for v in ys],
                    marker_color=POLICY_COLOURS.get(name),
                    error_y=dict(type="data", array=[e or 0 for e in error]) if error else None)
    fig.update_layout(barmode="group", yaxis_range=[0, 1.05], **layout)
    return fig


def _stacked_bars(go, values: dict[str, list], names: list[str], **layout):
    """One stacked bar per policy, one segment per key of ``values``."""
    fig = go.Figure()
    for key, ys in values.items():
        fig.add_bar(name=key, x=names, y=ys)
    fig.update_layout(barmode="stack", xaxis_title="policy", **layout)
    return fig


def accuracy_bars(summary: dict, names: list[str] | None = None, by: str = "split",
                  title: str | None = None):
    """Grouped bars: accuracy per split (or difficulty), one bar per policy (paper figure 4)."""
    import plotly.graph_objects as go

    names = ordered_names(summary, names)
    groups = accuracy_groups(summary, names, by)
    values = {n: [(summary[n].get(_key(by)) or {}).get(g) for g in groups] for n in names}
    return _grouped_bars(go, values, groups, title=title or f"Pass@1 by {by}",
                         yaxis_title="accuracy", xaxis_title=by, legend_title="policy")


def tool_call_bars(summary: dict, names: list[str] | None = None,
                   title: str = "Mean tool calls per task"):
    """Stacked bars: mean calls per task of each tool, one bar per policy (figure 6's measure)."""
    import plotly.graph_objects as go

    names = ordered_names(summary, names)
    values = {tool: [(summary[n].get("mean_tool_calls_by_type") or {}).get(tool, 0)
                     for n in names] for tool in TOOL_NAMES}
    return _stacked_bars(go, values, names, title=title, yaxis_title="calls per task",
                         legend_title="tool")


# ---------------------------------------------------------------------------------------------
# Notebook 08: the comparison (``comparison.read_comparison``)


def comparison_groups(metrics: dict) -> list[str]:
    """The table groups that hold at least one number (the exam, each held-out level, the
    headline).

    >>> comparison_groups({"accuracy": {"a": {"exam": 0.1, "easy": None, "easy+medium+hard": 0.0},
    ...                                 "b": None}})
    ['exam', 'easy+medium+hard']
    """
    from vsearcher_lite.evaluation.comparison import TABLE_GROUPS

    rows = [a for a in metrics["accuracy"].values() if a]
    return [g for g in TABLE_GROUPS if any(r.get(g) is not None for r in rows)]


def comparison_bars(metrics: dict, title: str = "Pass@1: base -> SFT -> RL and the teacher"):
    """Figure 4 for this run: one group per benchmark column (the headline last), one bar per
    evaluated policy with its standard error; a missing policy (not trained yet) is named in the
    legend title."""
    import plotly.graph_objects as go

    groups = comparison_groups(metrics)
    values = {n: [metrics["accuracy"][n].get(g) for g in groups] for n in metrics["evaluated"]}
    se = metrics.get("accuracy_se") or {}
    errors = {n: [(se.get(n) or {}).get(g) for g in groups] for n in values if se.get(n)}
    absent = metrics.get("missing", {})
    missing = [n for n in metrics.get("order") or sorted(absent) if n in absent]
    legend = "policy" + (f" (missing: {', '.join(missing)})" if missing else "")
    return _grouped_bars(go, values, groups, errors, title=title, yaxis_title="Pass@1",
                         xaxis_title="benchmark / held-out difficulty", legend_title=legend)


def comparison_tool_calls(metrics: dict, benchmark: str = "heldout", title: str | None = None):
    """Stacked bars: mean calls per task of each tool, one bar per evaluated policy."""
    import plotly.graph_objects as go

    by_type = metrics["mean_tool_calls_by_type"]
    names = [n for n in metrics["evaluated"] if (by_type[n] or {}).get(benchmark)]
    values = {tool: [by_type[n][benchmark].get(tool, 0) for n in names] for tool in TOOL_NAMES}
    return _stacked_bars(go, values, names, yaxis_title="calls per task", legend_title="tool",
                         title=title or f"Mean tool calls per task ({benchmark})")


def comparison_terminations(metrics: dict, benchmark: str = "heldout", title: str | None = None):
    """Stacked bars: how each policy's episodes ended (answer, format error, limits ...)."""
    import plotly.graph_objects as go

    ends = metrics["terminations"]
    names = [n for n in metrics["evaluated"] if (ends[n] or {}).get(benchmark)]
    reasons = sorted({r for n in names for r, c in ends[n][benchmark].items() if c})
    totals = {n: sum(ends[n][benchmark].values()) for n in names}
    values = {r: [ends[n][benchmark].get(r, 0) / totals[n] if totals[n] else 0 for n in names]
              for r in reasons}
    return _stacked_bars(go, values, names, title=title or f"How episodes ended ({benchmark})",
                         yaxis_title="share of tasks", yaxis_range=[0, 1],
                         legend_title="termination")


def level_tool_call_bars(by_policy: dict[str, dict], levels: list[str],
                         title: str = "Tool calls per task by level"):
    """The trained agents' counterpart of figure 3: mean tool calls per task at each level, one
    bar per policy; ``by_policy`` maps a policy to ``{level: {"mean_tool_calls": ...}}``."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for name, by_level in by_policy.items():
        ys = [(by_level.get(lv) or {}).get("mean_tool_calls") for lv in levels]
        fig.add_bar(name=name, x=levels, y=ys, textposition="outside",
                    marker_color=POLICY_COLOURS.get(name),
                    text=[f"{v:.1f}" if v is not None else "" for v in ys])
    fig.update_layout(barmode="group", title=title, xaxis_title="held-out level",
                      yaxis_title="tool calls per task", legend_title="policy")
    return fig
