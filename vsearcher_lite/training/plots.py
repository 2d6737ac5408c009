"""Pictures of the SFT stage for notebook 06: the trained tokens, the loss curve, base vs SFT."""

from __future__ import annotations

import html
import re
from typing import Sequence

from vsearcher_lite.training.data import IGNORE_INDEX

TRAINED_STYLE = "background:#c8e6c9"  # green: in the loss
WEIGHTED_STYLE = "background:#ffcc80;font-weight:bold"  # orange: in the loss, weighted up
MASKED_STYLE = "color:#9e9e9e"  # grey: masked


def runs_of(ids: Sequence[int], kinds: Sequence[str]) -> list[tuple[str, list[int]]]:
    """Consecutive tokens of one kind grouped: ``[(kind, ids), ...]``.

    >>> runs_of([1, 2, 3], ["a", "a", "b"])
    [('a', [1, 2]), ('b', [3])]
    """
    runs: list[tuple[str, list[int]]] = []
    for token, kind in zip(ids, kinds):
        if runs and runs[-1][0] == kind:
            runs[-1][1].append(int(token))
        else:
            runs.append((kind, [int(token)]))
    return runs


def token_runs(ids: Sequence[int], labels: Sequence[int],
               weights: Sequence[float] | None = None) -> list[tuple[str, list[int]]]:
    """Tokens grouped by their role in the loss: ``("masked" | "trained" | "weighted", ids)``.

    >>> token_runs([1, 2, 3, 4], [-100, 2, 3, -100], [0, 1, 10, 0])
    [('masked', [1]), ('trained', [2]), ('weighted', [3]), ('masked', [4])]
    """
    def kind(i: int, label: int) -> str:
        if label == IGNORE_INDEX:
            return "masked"
        return "weighted" if weights is not None and weights[i] > 1 else "trained"

    return runs_of(ids, [kind(i, label) for i, label in enumerate(labels)])


def _collapse_images(text: str, image_token: str = "<|image_pad|>") -> str:
    """A run of image placeholders shown once with its count.

    >>> _collapse_images("a<|image_pad|><|image_pad|>b")
    'a<|image_pad|> x2b'
    """
    pattern = "(?:" + re.escape(image_token) + ")+"
    return re.sub(pattern, lambda m: f"{image_token} x{len(m.group(0)) // len(image_token)}", text)


def runs_html(tokenizer, runs: list[tuple[str, list[int]]], styles: dict[str, str],
              legend: str) -> str:
    """Runs of tokens as coloured HTML text under a legend (image placeholders collapsed)."""
    body = "".join(
        f'<span style="{styles[kind]}">'
        f'{html.escape(_collapse_images(tokenizer.decode(run, skip_special_tokens=False)))}</span>'
        for kind, run in runs)
    return legend + '<pre style="white-space:pre-wrap;font-size:12px">' + body + "</pre>"


def trained_tokens_html(tokenizer, ids: Sequence[int], labels: Sequence[int],
                        weights: Sequence[float] | None = None) -> str:
    """One rendered sample: masked text grey, trained text green, weighted tokens orange."""
    styles = {"masked": MASKED_STYLE, "trained": TRAINED_STYLE, "weighted": WEIGHTED_STYLE}
    legend = (f'<p><span style="{TRAINED_STYLE}">trained</span> · '
              f'<span style="{WEIGHTED_STYLE}">trained, weighted up (answer tokens)</span> · '
              f'<span style="{MASKED_STYLE}">masked (label -100)</span></p>')
    return runs_html(tokenizer, token_runs(ids, labels, weights), styles, legend)


def moving_average(values: Sequence[float | None], window: int, *,
                   keep_gaps: bool = True) -> list[float | None]:
    """Trailing mean over the last ``window`` positions, gaps skipped; a gap itself stays a gap,
    or with ``keep_gaps=False`` takes the mean of the values before it (a curve without holes).

    >>> moving_average([1.0, 3.0, None, 5.0], 2), moving_average([1.0, 3.0, None, 5.0], 3)
    ([1.0, 2.0, None, 5.0], [1.0, 2.0, None, 4.0])
    >>> moving_average([1.0, 3.0, None, 5.0], 2, keep_gaps=False)
    [1.0, 2.0, 3.0, 5.0]
    """
    out: list[float | None] = []
    for i, v in enumerate(values):
        part = [x for x in values[max(0, i - window + 1): i + 1] if x is not None]
        out.append(None if (v is None and keep_gaps) or not part else sum(part) / len(part))
    return out


def loss_curve_figure(rows: list[dict], title: str = "SFT loss (assistant tokens)",
                      smooth: int = 1):
    """The training loss, the plain assistant cross-entropy and the answer tokens' one; with
    ``smooth`` > 1 each a rolling mean over that many logged steps on a log axis, so that a long
    run's falling loss is not hidden behind the spikes of single answers."""
    import plotly.graph_objects as go

    fig = go.Figure()
    steps = [r["step"] for r in rows]
    for key, label in (("loss", "optimised loss (answer-weighted)"),
                       ("assistant_ce", "assistant CE (unweighted)"),
                       ("answer_ce", "answer tokens CE")):
        ys = [r.get(key) for r in rows]
        if any(y is not None for y in ys):
            ys = moving_average(ys, smooth, keep_gaps=False) if smooth > 1 else ys
            fig.add_trace(go.Scatter(x=steps, y=ys, mode="lines" if smooth > 1 else "lines+markers",
                                     name=label))
    y_title = "nats per token" + (f" (mean of {smooth} logged steps)" if smooth > 1 else "")
    fig.update_layout(title=title, xaxis_title="optimizer step", yaxis_title=y_title, height=380)
    if smooth > 1:
        fig.update_yaxes(type="log")
    return fig


def bar_labels(values: list[float | None], digits: int = 2) -> list[str]:
    """Bar texts: each value rounded, ``n/a`` for a missing one."""
    return [f"{v:.{digits}f}" if v is not None else "n/a" for v in values]


def base_vs_sft_figure(metrics: dict,
                       title: str = "Held-out tasks: base vs SFT (paper figure 4, first two bars)"):
    """Pass@1 of base and SFT by level and on the headline (easy + medium + hard), each with one
    standard error; beside it the format-valid share and the tool calls per task."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from vsearcher_lite.agent.task import HEADLINE_GROUP, in_level_order
    from vsearcher_lite.scoring.metrics import POLICY_COLOURS

    fig = make_subplots(rows=1, cols=3, column_widths=[0.6, 0.2, 0.2],
                        subplot_titles=("Pass@1 (1 SE bars)", "format-valid", "tool calls"))
    models = (("base", "base"), ("SFT", "heldout"))
    levels = in_level_order({lv for _, prefix in models
                             for lv in metrics.get(f"{prefix}_by_difficulty") or {}})
    for name, prefix in models:
        groups = {**(metrics.get(f"{prefix}_by_difficulty") or {}),
                  HEADLINE_GROUP: metrics.get(f"{prefix}_headline") or {}}
        xs = [*levels, HEADLINE_GROUP]
        ys = [(groups.get(x) or {}).get("accuracy") for x in xs]
        colour = POLICY_COLOURS.get(name.lower())
        fig.add_trace(go.Bar(x=xs, y=ys, name=name, text=bar_labels(ys), marker_color=colour,
                             legendgroup=name,
                             error_y=dict(type="data", array=[(groups.get(x) or {}).get("se") or 0
                                                              for x in xs])), row=1, col=1)
        for col, key in ((2, "format_valid_rate"), (3, "mean_tool_calls")):
            value = [metrics.get(f"{prefix}_{key}")]
            fig.add_trace(go.Bar(x=[name], y=value, text=bar_labels(value), marker_color=colour,
                                 legendgroup=name, showlegend=False), row=1, col=col)
    fig.update_yaxes(range=[0, 1.05], row=1, col=1)
    fig.update_yaxes(range=[0, 1.05], row=1, col=2)
    fig.update_layout(title=title, barmode="group", height=380, legend_title="model")
    return fig
