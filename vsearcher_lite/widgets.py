"""Explorers for JupyterLab (ipywidgets): pick a task and step through its episode (notebook 05);
edit a group's rewards and watch the advantages and the trained tokens change (notebook 07).

Each explorer is displayed in one output together with a self-contained HTML view of its first
state: a live notebook draws the widget, the exported HTML (no kernel there) keeps the view
(``report.widgets_as_text`` drops the widget's part). What a control changes is a pure function of
the controls (``episode_step_html``, ``group_html``), so it reads and tests without a browser.
"""

from __future__ import annotations

import html
from typing import Any, Sequence

from vsearcher_lite.rl import objective as obj


def show(widget: Any, fallback_html: str) -> None:
    """Display ``widget``, with ``fallback_html`` as the same output's HTML for pages without a
    kernel (an exported notebook, a notebook opened before it was run)."""
    from IPython.display import display

    bundle = dict(widget._repr_mimebundle_() or {})
    bundle["text/html"] = fallback_html
    display(bundle, raw=True)


# ---------------------------------------------------------------------------------------------
# Notebook 05: an episode, step by step


def episode_step_html(bodies: Sequence[str], heading: str, step: int) -> str:
    """Step ``step`` (1-based) of an episode's ``bodies`` (``trajectory_plots.step_bodies``)."""
    step = max(1, min(len(bodies), step))
    return (f"<div>{heading}</div><div style='color:#555'>step {step} of {len(bodies)}</div>"
            f"{bodies[step - 1]}")


def episode_explorer(trajectories: Sequence[Any], *, image_width: int = 160):
    """A task menu and a step slider over ``trajectories`` (each a ``Trajectory`` or its dict)."""
    import ipywidgets as w

    from vsearcher_lite.stepper import strip_tags
    from vsearcher_lite.synthesis.trajectory_plots import step_bodies, viewer_heading

    views = [(viewer_heading(t), step_bodies(t, image_width=image_width)) for t in trajectories]
    pick = w.Dropdown(options=[(html.unescape(strip_tags(h)), i) for i, (h, _) in enumerate(views)],
                      value=0, description="task", layout=w.Layout(width="36em"))
    step = w.IntSlider(value=1, min=1, max=len(views[0][1]), description="step")
    out = w.HTML()

    def render(_=None) -> None:
        heading, bodies = views[pick.value]
        out.value = episode_step_html(bodies, heading, step.value)

    def picked(_=None) -> None:
        step.value, step.max = 1, len(views[pick.value][1])
        render()

    pick.observe(picked, names="value")
    step.observe(render, names="value")
    render()
    return w.VBox([pick, step, out])


# ---------------------------------------------------------------------------------------------
# Notebook 07: a group's rewards, its advantages and the tokens they train


def group_rows(rewards: Sequence[float], fatal: Sequence[int | None],
               fatal_aware: bool) -> list[dict]:
    """Each trajectory of a group: its reward, its group-normalised advantage, the advantage it
    trains with (clamped at 0 when fatal-aware and fatal) and whether its tokens are trained
    (not when the group's rewards are all equal: the engine drops such a group)."""
    g = obj.group_advantages(list(rewards))
    rows = []
    for i, (r, a, f) in enumerate(zip(rewards, g.advantages, fatal)):
        final = obj.final_advantage(a, fatal=f, fatal_aware=fatal_aware)
        trained = not g.zero_variance and obj.in_update(False, f if fatal_aware else None)
        rows.append({"trajectory": i + 1, "reward": r, "fatal step": "-" if f is None else f,
                     "advantage": round(a, 3), "trained with": round(final, 3),
                     "tokens trained": trained and final != 0})
    return rows


def group_html(rewards: Sequence[float], fatal: Sequence[int | None], fatal_aware: bool,
               tokens: dict | None = None) -> str:
    """The group's table (``group_rows``) and, with ``tokens`` (``tokenizer``, ``ids``,
    ``policy_mask`` of trajectory 1), which of trajectory 1's tokens the loss trains."""
    from vsearcher_lite.rl.plots import loss_mask_html

    rows = group_rows(rewards, fatal, fatal_aware)
    head = "".join(f"<th>{html.escape(k)}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in r.values())
                   + "</tr>" for r in rows)
    parts = [f"<table><tr>{head}</tr>{body}</table>"]
    if obj.group_advantages(list(rewards)).zero_variance:
        parts.append("<p>All rewards are equal: every advantage is 0 and the group is dropped.</p>")
    if tokens:
        first = rows[0]
        mask = (obj.loss_mask(tokens["policy_mask"], fatal=fatal[0], fatal_aware=fatal_aware)
                if first["tokens trained"] else [0] * len(tokens["ids"]))
        parts.append(f"<p>Trajectory 1, advantage {first['trained with']}: "
                     f"{sum(mask)} of {sum(tokens['policy_mask'])} policy tokens trained</p>")
        parts.append(loss_mask_html(tokens["tokenizer"], tokens["ids"], tokens["policy_mask"],
                                    mask))
    return "".join(parts)


def group_explorer(rewards: Sequence[float], fatal: Sequence[int | None], *,
                   fatal_aware: bool = True, tokens: dict | None = None):
    """A reward toggle per trajectory and a fatal-aware switch over ``group_html``."""
    import ipywidgets as w

    toggles = [w.ToggleButtons(options=[("0", 0.0), ("1", 1.0)], value=float(r),
                               description=f"reward {i + 1}",
                               style={"button_width": "3em"}) for i, r in enumerate(rewards)]
    aware = w.Checkbox(value=fatal_aware, description="fatal-aware")
    out = w.HTML()

    def render(_=None) -> None:
        out.value = group_html([t.value for t in toggles], fatal, aware.value, tokens)

    for control in (*toggles, aware):
        control.observe(render, names="value")
    render()
    return w.VBox([*toggles, aware, out])
