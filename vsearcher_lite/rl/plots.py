"""Pictures of the GRPO stage for notebook 07, from the saved ``steps.csv`` and ``metrics.json``:
reward and entropy (paper figure 5), tool calls by type (figure 6), the signs of collapse, SFT vs
RL on held-out tasks, and one trajectory's tokens coloured by their role in the loss."""

from __future__ import annotations

from typing import Sequence

from vsearcher_lite.training.plots import bar_labels, moving_average, runs_html, runs_of

TOOL_COLOURS = {"text_search": "#1f77b4", "image_search": "#ff7f0e", "visit": "#2ca02c"}
TRAINED_STYLE = "background:#c8e6c9"  # green: in the loss
CUT_STYLE = "background:#ffcdd2;text-decoration:line-through"  # red: policy tokens cut
MASKED_STYLE = "color:#9e9e9e"  # grey: context (system, question, images, tool responses)


#: A run of at most this many steps gets a tick at every step (a short live run shows no trend).
FEW_STEPS = 12
#: Below this many steps the points stand alone: a line through two or three points reads as a
#: trend the run cannot show.
MIN_STEPS_FOR_LINES = 5


def _line(go, rows: list[dict], ys: list, name: str, **style):
    if len(rows) < MIN_STEPS_FOR_LINES:
        style = {**style, "mode": "markers"}
        if "line" in style:
            style["marker"] = {"color": style.pop("line").get("color")}
    return go.Scatter(x=[r["step"] for r in rows], y=ys, name=name, **style)


def step_axes(fig, rows: list[dict]) -> None:
    """Whole steps on the x axes: a tick at each step of a short run, none between steps."""
    if len(rows) <= FEW_STEPS:
        fig.update_xaxes(title_text="step", tickmode="linear", dtick=1)
    else:
        fig.update_xaxes(title_text="step", tickformat="d")


def reward_entropy_figure(rows: list[dict], window: int = 5,
                          title: str = "GRPO training dynamics (paper figure 5)"):
    """Reward per step (raw and smoothed), the accuracy where it differs from the reward (a
    search penalty), and the policy's mean token entropy, on fixed ranges: the reward in [0, 1],
    the entropy from 0, so that a short run's small changes do not look steep."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("reward", "entropy (policy tokens, nats)"))
    rewards = [r.get("reward") for r in rows]
    same = all(r.get("accuracy") in (None, r.get("reward")) for r in rows)
    blue = {"color": "#1f77b4"}
    mean_name = f"reward ({window}-step mean)" + (" = accuracy" if same else "")
    traces = [
        _line(go, rows, rewards, "reward (step)", mode="markers", opacity=0.4, marker=blue),
        _line(go, rows, moving_average(rewards, window), mean_name, mode="lines", line=blue),
    ]
    if not same:  # a search penalty: the accuracy is above the reward
        traces.append(_line(go, rows, moving_average([r.get("accuracy") for r in rows], window),
                            "accuracy", mode="lines", line={"color": "#9467bd", "dash": "dot"}))
    for trace in traces:
        fig.add_trace(trace, row=1, col=1)
    entropy = [r.get("entropy") for r in rows]
    fig.add_trace(_line(go, rows, entropy, "entropy", mode="lines+markers",
                        line={"color": "#d62728"}), row=1, col=2)
    fig.update_yaxes(range=[-0.02, 1.02], row=1, col=1)
    top = max((e for e in entropy if e is not None), default=0.0)
    fig.update_yaxes(range=[0, max(top * 1.5, 1e-3)], row=1, col=2)
    step_axes(fig, rows)
    fig.update_layout(title=title, height=380)
    return fig


def tool_calls_figure(rows: list[dict], window: int = 5,
                      title: str = "Tool calls during RL (paper figure 6)"):
    """Mean tool calls per trajectory by type, per step (smoothed)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for tool, colour in TOOL_COLOURS.items():
        ys = moving_average([r.get(tool) for r in rows], window)
        fig.add_trace(_line(go, rows, ys, tool, mode="lines", line={"color": colour}))
    ys = moving_average([r.get("tool_calls") for r in rows], window)
    fig.add_trace(_line(go, rows, ys, "all tools", mode="lines",
                        line={"color": "#444", "dash": "dash"}))
    fig.update_layout(title=title, yaxis_title="calls per trajectory", height=360)
    fig.update_yaxes(rangemode="tozero")
    step_axes(fig, rows)
    return fig


def health_figure(rows: list[dict],
                  title: str = "Collapse watch: format failures, exclusions, KL"):
    """Shares per step that move first when a small policy collapses, and the KL."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2,
                        subplot_titles=("shares of trajectories", "KL to the reference (k3)"))
    for key, label in (("format_failure_share", "format failure"),
                       ("excluded_share", "excluded (A.4)"), ("fatal_share", "fatal cascade")):
        fig.add_trace(_line(go, rows, [r.get(key) for r in rows], label, mode="lines"),
                      row=1, col=1)
    groups = [r.get("groups") or 0 for r in rows]
    zero = [(r.get("zero_variance_groups") or 0) / g if g else None for r, g in zip(rows, groups)]
    fig.add_trace(_line(go, rows, zero, "zero-variance groups", mode="lines",
                        line={"dash": "dot"}), row=1, col=1)
    kl = [r.get("kl") for r in rows]
    if any(k for k in kl):
        fig.add_trace(_line(go, rows, kl, "KL", mode="lines+markers"), row=1, col=2)
        fig.update_yaxes(type="log", row=1, col=2)  # the KL spans orders of magnitude
    else:  # beta = 0: the loss has no KL term and the engine does not compute it
        fig.add_annotation(text="no KL term (beta = 0)", showarrow=False, row=1, col=2,
                           x=0.5, y=0.5, xref="x2 domain", yref="y2 domain")
    fig.update_yaxes(range=[0, 1.05], row=1, col=1)
    step_axes(fig, rows)
    fig.update_layout(title=title, height=360)
    return fig


def heldout_figure(metrics: dict,
                   title: str = "Held-out tasks: SFT vs RL (same tasks, greedy)"):
    """Bars of both accuracies, and the paired difference RL - SFT with +-1 standard error."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2,
                        subplot_titles=("accuracy", "paired difference RL - SFT (+-1 SE)"))
    accs = [metrics.get("heldout_accuracy_sft"), metrics.get("heldout_accuracy_rl")]
    fig.add_trace(go.Bar(x=["SFT", "RL"], y=accs, text=bar_labels(accs, 3), name="accuracy"),
                  row=1, col=1)
    diff, se = metrics.get("heldout_paired_diff"), metrics.get("heldout_paired_se")
    if diff is not None:
        fig.add_trace(go.Bar(x=[f"n = {metrics.get('heldout_n')}"], y=[diff], name="RL - SFT",
                             error_y={"type": "data", "array": [se or 0.0]},
                             text=[f"{diff:+.3f}"]), row=1, col=2)
    fig.update_layout(title=title, height=360, showlegend=False)
    return fig


def token_roles(policy_mask: Sequence[int], loss_mask: Sequence[int]) -> list[str]:
    """Each token's role: ``"trained"``, ``"cut"`` (a policy token the fatal-aware mask or an
    exclusion removed) or ``"context"``.

    >>> token_roles([0, 1, 1, 1], [0, 1, 0, 0])
    ['context', 'trained', 'cut', 'cut']
    """
    pairs = zip(policy_mask, loss_mask)
    return ["trained" if lm else ("cut" if pm else "context") for pm, lm in pairs]


def loss_mask_html(tokenizer, ids: Sequence[int], policy_mask: Sequence[int],
                   loss_mask: Sequence[int]) -> str:
    """One trajectory as HTML: context grey, trained tokens green, policy tokens cut red."""
    styles = {"trained": TRAINED_STYLE, "cut": CUT_STYLE, "context": MASKED_STYLE}
    legend = (f'<p><span style="{TRAINED_STYLE}">trained (policy tokens)</span> · '
              f'<span style="{CUT_STYLE}">policy tokens cut from the loss</span> · '
              f'<span style="{MASKED_STYLE}">context: system, question, image, tool '
              'responses</span></p>')
    runs = runs_of(ids, token_roles(policy_mask, loss_mask))
    return runs_html(tokenizer, runs, styles, legend)
