"""Pictures of the GRPO stage for notebook 07, drawn from the saved ``steps.csv`` and ``metrics.json``.

- ``reward_entropy_figure``: reward (and accuracy) and policy entropy per step, the paper's figure 5;
- ``tool_calls_figure``: mean tool calls per trajectory by type per step, the paper's figure 6;
- ``health_figure``: what collapse looks like first (format failures, excluded share, KL);
- ``heldout_figure``: SFT vs RL on the same held-out tasks, with the paired difference and its error;
- ``loss_mask_html``: one trajectory's tokens coloured by their role in the loss.
"""

from __future__ import annotations

import html
import re
from typing import Sequence

TOOL_COLOURS = {"text_search": "#1f77b4", "image_search": "#ff7f0e", "visit": "#2ca02c"}
TRAINED_STYLE = "background:#c8e6c9"  # green: in the loss
CUT_STYLE = "background:#ffcdd2;text-decoration:line-through"  # red: policy tokens masked after the fatal step
MASKED_STYLE = "color:#9e9e9e"  # grey: context (system, question, images, tool responses)


def moving_average(values: Sequence[float | None], window: int) -> list[float | None]:
    """Trailing mean over the last ``window`` positions, gaps skipped (a gap itself stays a gap).

    >>> moving_average([1.0, 3.0, None, 5.0], 2), moving_average([1.0, 3.0, None, 5.0], 3)
    ([1.0, 2.0, None, 5.0], [1.0, 2.0, None, 4.0])
    """
    out: list[float | None] = []
    for i, v in enumerate(values):
        if v is None:
            out.append(None)
            continue
        part = [x for x in values[max(0, i - window + 1): i + 1] if x is not None]
        out.append(sum(part) / len(part))
    return out


def reward_entropy_figure(rows: list[dict], window: int = 5, title: str = "GRPO training dynamics (paper figure 5)"):
    """Two panels: reward and accuracy per step (raw and smoothed), and the policy's mean token entropy."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    steps = [r["step"] for r in rows]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("reward", "entropy (policy tokens, nats)"))
    rewards = [r.get("reward") for r in rows]
    fig.add_trace(go.Scatter(x=steps, y=rewards, mode="markers", name="reward (step)", opacity=0.4,
                             marker={"color": "#1f77b4"}), row=1, col=1)
    fig.add_trace(go.Scatter(x=steps, y=moving_average(rewards, window), mode="lines", name=f"reward ({window}-step mean)",
                             line={"color": "#1f77b4"}), row=1, col=1)
    fig.add_trace(go.Scatter(x=steps, y=moving_average([r.get("accuracy") for r in rows], window), mode="lines",
                             name="accuracy", line={"color": "#9467bd", "dash": "dot"}), row=1, col=1)
    entropy = [r.get("entropy") for r in rows]
    fig.add_trace(go.Scatter(x=steps, y=entropy, mode="lines+markers", name="entropy", line={"color": "#d62728"}),
                  row=1, col=2)
    fig.update_xaxes(title_text="step")
    fig.update_layout(title=title, height=380)
    return fig


def tool_calls_figure(rows: list[dict], window: int = 5, title: str = "Tool calls during RL (paper figure 6)"):
    """Mean tool calls per trajectory by type, per step (smoothed)."""
    import plotly.graph_objects as go

    steps = [r["step"] for r in rows]
    fig = go.Figure()
    for tool, colour in TOOL_COLOURS.items():
        ys = [r.get(tool) for r in rows]
        fig.add_trace(go.Scatter(x=steps, y=moving_average(ys, window), mode="lines", name=tool, line={"color": colour}))
    fig.add_trace(go.Scatter(x=steps, y=moving_average([r.get("tool_calls") for r in rows], window), mode="lines",
                             name="all tools", line={"color": "#444", "dash": "dash"}))
    fig.update_layout(title=title, xaxis_title="step", yaxis_title="calls per trajectory", height=360)
    return fig


def health_figure(rows: list[dict], title: str = "Collapse watch: format failures, exclusions, KL"):
    """Shares per step that move first when a small policy collapses, and the KL to the reference."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    steps = [r["step"] for r in rows]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("shares of trajectories", "KL to the reference (k3)"))
    for key, label in (("format_failure_share", "format failure"), ("excluded_share", "excluded (A.4)"),
                       ("fatal_share", "fatal cascade")):
        fig.add_trace(go.Scatter(x=steps, y=[r.get(key) for r in rows], mode="lines", name=label), row=1, col=1)
    groups = [r.get("groups") or 0 for r in rows]
    zero = [(r.get("zero_variance_groups") or 0) / g if g else None for r, g in zip(rows, groups)]
    fig.add_trace(go.Scatter(x=steps, y=zero, mode="lines", name="zero-variance groups", line={"dash": "dot"}), row=1, col=1)
    fig.add_trace(go.Scatter(x=steps, y=[r.get("kl") for r in rows], mode="lines+markers", name="KL"), row=1, col=2)
    fig.update_yaxes(range=[0, 1.05], row=1, col=1)
    fig.update_yaxes(type="log", row=1, col=2)  # the KL spans orders of magnitude; one outlier hides the rest
    fig.update_xaxes(title_text="step")
    fig.update_layout(title=title, height=360)
    return fig


def heldout_figure(metrics: dict, title: str = "Held-out tasks: SFT vs RL (same tasks, greedy)"):
    """Bars of both accuracies, and the paired difference RL - SFT with +-1 standard error."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("accuracy", "paired difference RL - SFT (+-1 SE)"))
    names = ["SFT", "RL"]
    accs = [metrics.get("heldout_accuracy_sft"), metrics.get("heldout_accuracy_rl")]
    fig.add_trace(go.Bar(x=names, y=accs, text=[f"{a:.3f}" if a is not None else "n/a" for a in accs], name="accuracy"),
                  row=1, col=1)
    diff, se = metrics.get("heldout_paired_diff"), metrics.get("heldout_paired_se")
    if diff is not None:
        fig.add_trace(go.Bar(x=[f"n = {metrics.get('heldout_n')}"], y=[diff], name="RL - SFT",
                             error_y={"type": "data", "array": [se or 0.0]}, text=[f"{diff:+.3f}"]), row=1, col=2)
    fig.update_layout(title=title, height=360, showlegend=False)
    return fig


def _collapse_images(text: str, image_token: str = "<|image_pad|>") -> str:
    pattern = "(?:" + re.escape(image_token) + ")+"
    return re.sub(pattern, lambda m: f"{image_token} x{len(m.group(0)) // len(image_token)}", text)


def token_roles(policy_mask: Sequence[int], loss_mask: Sequence[int]) -> list[str]:
    """Each token's role: ``"trained"``, ``"cut"`` (a policy token the fatal-aware mask or an
    exclusion removed) or ``"context"``.

    >>> token_roles([0, 1, 1, 1], [0, 1, 0, 0])
    ['context', 'trained', 'cut', 'cut']
    """
    return ["trained" if lm else ("cut" if pm else "context") for pm, lm in zip(policy_mask, loss_mask)]


def loss_mask_html(tokenizer, ids: Sequence[int], policy_mask: Sequence[int], loss_mask: Sequence[int]) -> str:
    """One trajectory as HTML: context grey, trained tokens green, policy tokens cut from the loss red."""
    styles = {"trained": TRAINED_STYLE, "cut": CUT_STYLE, "context": MASKED_STYLE}
    roles = token_roles(policy_mask, loss_mask)
    parts, run, kind = [], [], None
    for token, role in zip(ids, roles):
        if role != kind and run:
            parts.append((kind, run))
            run = []
        kind = role
        run.append(int(token))
    if run:
        parts.append((kind, run))
    body = "".join(f'<span style="{styles[k]}">{html.escape(_collapse_images(tokenizer.decode(r, skip_special_tokens=False)))}</span>'
                   for k, r in parts)
    legend = (f'<p><span style="{TRAINED_STYLE}">trained (policy tokens)</span> · <span style="{CUT_STYLE}">policy '
              f'tokens cut from the loss</span> · <span style="{MASKED_STYLE}">context: system, question, image, tool '
              f'responses</span></p>')
    return legend + '<pre style="white-space:pre-wrap;font-size:12px">' + body + "</pre>"
