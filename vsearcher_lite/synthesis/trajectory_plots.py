"""Figures and the trajectory viewer of notebook 05.

Every figure takes the rows of ``RUN_DIR/trajectories/rollouts.csv`` (``read_rollout_rows``), so
it can be redrawn without rerunning the teacher.
"""

from __future__ import annotations

import base64
import csv
from collections import Counter
from pathlib import Path
from typing import Any

from vsearcher_lite.agent.loop import TERMINATIONS, Trajectory
from vsearcher_lite.agent.protocol import content_with_placeholders, message_images
from vsearcher_lite.agent.task import in_level_order
from vsearcher_lite.synthesis.trajectories import STAGE

#: One colour per task level, in every figure of notebooks 01-05.
LEVEL_COLOURS = {"onehop": "#8fbcd4", "easy": "#4c9f70", "medium": "#e0a030", "hard": "#c0392b",
                 "exam": "#5b6dcd"}


def image_data_url(path: str | Path, max_side: int = 240) -> str:
    """A small JPEG data URL of an image file, for embedding in HTML."""
    import io

    from PIL import Image

    with Image.open(path) as img:
        img = img.convert("RGB")
        img.thumbnail((max_side, max_side))
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=85)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def read_rollout_rows(run_dir: str | Path) -> list[dict]:
    """The rows of ``rollouts.csv`` with numbers and booleans parsed."""
    path = Path(run_dir) / STAGE / "rollouts.csv"
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        r["n_tool_calls"] = int(r["n_tool_calls"])
        r["sample_index"] = int(r["sample_index"])
        for key in ("correct", "format_ok", "accepted"):
            r[key] = r[key] == "True"
    return rows


def tool_call_counts(rows: list[dict], *, accepted_only: bool = False) -> dict[str, Counter]:
    """``{difficulty: Counter(n_tool_calls)}``.

    >>> tool_call_counts([{"difficulty": "easy", "n_tool_calls": 3, "accepted": True}])["easy"][3]
    1
    """
    out: dict[str, Counter] = {}
    for r in rows:
        if accepted_only and not r["accepted"]:
            continue
        out.setdefault(r["difficulty"], Counter())[r["n_tool_calls"]] += 1
    return {level: out[level] for level in in_level_order(out)}


def tool_call_histogram(rows: list[dict], *, accepted_only: bool = False):
    """Share of trajectories by number of tool calls, a bar series per difficulty (paper fig. 3)."""
    import plotly.graph_objects as go

    counts = tool_call_counts(rows, accepted_only=accepted_only)
    fig = go.Figure()
    for level, counter in counts.items():
        total = sum(counter.values())
        xs = sorted(counter)
        fig.add_bar(x=xs, y=[counter[x] / total for x in xs], name=f"{level} (n={total})",
                    marker_color=LEVEL_COLOURS.get(level))
    which = "accepted trajectories" if accepted_only else "all trajectories"
    fig.update_layout(title=f"Tool calls per trajectory by difficulty ({which})",
                      xaxis_title="tool calls in the trajectory",
                      yaxis_title="share of trajectories", barmode="group", yaxis_tickformat=".0%")
    return fig


def termination_bars(rows: list[dict]):
    """How the trajectories ended, every reason shown (zeros included)."""
    import plotly.graph_objects as go

    counts = Counter(r["termination"] for r in rows)
    fig = go.Figure(go.Bar(x=list(TERMINATIONS), y=[counts.get(t, 0) for t in TERMINATIONS],
                           marker_color="#5b6dcd"))
    fig.update_layout(title="How trajectories ended", xaxis_title="termination reason",
                      yaxis_title="trajectories")
    return fig


def acceptance_by_level(rows: list[dict]) -> dict[str, float]:
    """``{difficulty: accepted share}``.

    >>> acceptance_by_level([{"difficulty": "easy", "accepted": True},
    ...                      {"difficulty": "easy", "accepted": False}])
    {'easy': 0.5}
    """
    out = {}
    for level in in_level_order(r["difficulty"] for r in rows):
        group = [r for r in rows if r["difficulty"] == level]
        out[level] = sum(1 for r in group if r["accepted"]) / len(group)
    return out


def acceptance_bars(rows: list[dict]):
    """Rejection sampling's acceptance rate per difficulty."""
    import plotly.graph_objects as go

    rates = acceptance_by_level(rows)
    fig = go.Figure(go.Bar(x=list(rates), y=list(rates.values()),
                           marker_color=[LEVEL_COLOURS.get(level, "#888") for level in rates],
                           text=[f"{v:.0%}" for v in rates.values()], textposition="outside"))
    fig.update_layout(title="Acceptance rate by difficulty", xaxis_title="difficulty",
                      yaxis_title="accepted share",
                      yaxis_tickformat=".0%", yaxis_range=[0, 1.1])
    return fig


def viewer_steps(traj: Trajectory | dict) -> list[dict]:
    """One step per message after the system prompt: ``{"title", "text", "images"}``, with
    ``[image]`` markers in the text where the listed images were."""
    traj = traj if isinstance(traj, Trajectory) else Trajectory.from_dict(traj)
    steps = []
    tool_turns = {t.index: t for t in traj.turns}
    assistant_index = 0
    for m in traj.messages[1:]:
        role = m["role"]
        if role == "assistant":
            turn = tool_turns.get(assistant_index)
            ok = turn is None or turn.verdict.get("ok")
            verdict = "" if ok else f"  [format: {turn.verdict.get('code')}]"
            title = f"assistant, turn {assistant_index + 1}{verdict}"
            assistant_index += 1
        elif len(steps) == 0:
            title = "user: the question"
        else:
            title = "tool response"
        steps.append({"title": title, "text": content_with_placeholders(m, "[image]"),
                      "images": message_images(m)})
    if steps:
        steps[-1]["title"] += f"  (end: {traj.termination}; prediction: {traj.prediction!r})"
    return steps


def step_bodies(traj: Trajectory | dict, *, image_width: int = 160) -> list[str]:
    """Each step of ``viewer_steps`` as HTML: its title, its images inlined, its text."""
    import html

    bodies = []
    for step in viewer_steps(traj):
        pictures = "".join(f'<img src="{image_data_url(path, max_side=image_width)}" '
                           'style="margin-right:6px">'
                           for path in step["images"] if Path(path).is_file())
        bodies.append(f"<b>{html.escape(step['title'])}</b>"
                      + (f"<div>{pictures}</div>" if pictures else "")
                      + f"<pre style='white-space:pre-wrap'>{html.escape(step['text'])}</pre>")
    return bodies


def viewer_heading(traj: Trajectory | dict) -> str:
    """The heading of an episode's view: its task, tool calls and how it ended."""
    import html

    traj = traj if isinstance(traj, Trajectory) else Trajectory.from_dict(traj)
    return (f"<b>{html.escape(str(traj.task_id))}</b>: {traj.n_tool_calls} tool calls, "
            f"ended by {html.escape(str(traj.termination))}")


def trajectory_viewer(traj: Trajectory | dict, *, image_width: int = 160) -> Any:
    """A step-through view of the turns, images inlined, as self-contained HTML
    (``stepper.StepView``) that also works in the notebook's offline HTML copy."""
    from vsearcher_lite.stepper import StepView

    return StepView(step_bodies(traj, image_width=image_width), viewer_heading(traj))
