"""Notebook 05's figures and trajectory viewer, from saved rows and a sample trajectory."""

import pytest
from agent_fakes import sample_trajectory

from vsearcher_lite.synthesis.trajectories import rollouts_csv
from vsearcher_lite.synthesis.trajectory_plots import (
    acceptance_bars,
    acceptance_by_level,
    read_rollout_rows,
    termination_bars,
    tool_call_counts,
    tool_call_histogram,
    trajectory_viewer,
    viewer_steps,
)

ROWS = [
    {"difficulty": "hard", "n_tool_calls": 9, "accepted": False, "termination": "answer"},
    {"difficulty": "easy", "n_tool_calls": 3, "accepted": True, "termination": "answer"},
    {"difficulty": "easy", "n_tool_calls": 3, "accepted": True, "termination": "answer"},
    {"difficulty": "easy", "n_tool_calls": 4, "accepted": False, "termination": "format_error"},
    {"difficulty": "hard", "n_tool_calls": 11, "accepted": True, "termination": "answer"},
]


def test_counts_and_rates_by_hand():
    counts = tool_call_counts(ROWS)
    assert list(counts) == ["easy", "hard"]  # difficulty order, not input order
    assert counts["easy"] == {3: 2, 4: 1} and counts["hard"] == {9: 1, 11: 1}
    assert tool_call_counts(ROWS, accepted_only=True)["hard"] == {11: 1}
    assert acceptance_by_level(ROWS) == {"easy": 2 / 3, "hard": 0.5}


def test_figures_have_one_series_per_difficulty():
    pytest.importorskip("plotly")
    fig = tool_call_histogram(ROWS)
    assert [t.name for t in fig.data] == ["easy (n=3)", "hard (n=2)"]
    assert list(fig.data[0].x) == [3, 4] and list(fig.data[0].y) == pytest.approx([2 / 3, 1 / 3])
    bars = termination_bars(ROWS).data[0]
    assert (
        list(bars.x)[:2] == ["answer", "format_error"]
        and list(bars.y)[:2] == [4, 1]
        and sum(bars.y) == 5
    )
    assert list(acceptance_bars(ROWS).data[0].y) == pytest.approx([2 / 3, 0.5])


def test_rows_round_trip_through_the_csv(tmp_path):
    records = [
        {
            "key": f"t{i}#0",
            "task_id": f"t{i}",
            "sample_index": 0,
            "difficulty": r["difficulty"],
            "correct": r["accepted"],
            "format_ok": True,
            "accepted": r["accepted"],
            "trajectory": {"n_tool_calls": r["n_tool_calls"], "termination": r["termination"]},
        }
        for i, r in enumerate(ROWS)
    ]
    (tmp_path / "trajectories").mkdir()
    (tmp_path / "trajectories" / "rollouts.csv").write_text(rollouts_csv(records))
    rows = read_rollout_rows(tmp_path)
    assert [
        (r["difficulty"], r["n_tool_calls"], r["accepted"], r["termination"]) for r in rows
    ] == [(r["difficulty"], r["n_tool_calls"], r["accepted"], r["termination"]) for r in ROWS]


def test_viewer_steps_through_every_turn_with_images(tmp_path):
    traj = sample_trajectory(tmp_path)
    steps = viewer_steps(traj)
    assert len(steps) == len(traj.messages) - 1  # everything after the system prompt
    assert steps[0]["title"] == "user: the question" and steps[0]["text"].startswith("[image]")
    assert (
        steps[1]["title"].startswith("assistant, turn 1") and steps[2]["title"] == "tool response"
    )
    assert len(steps[2]["images"]) == 2 and steps[2]["text"].count("[image]") == 2
    assert "end: answer" in steps[-1]["title"]

    viewer = trajectory_viewer(traj)
    assert len(viewer) == len(steps)
    assert viewer.steps[0].count('<img src="data:image/jpeg;base64,') == 1
    assert (
        viewer.steps[2].count('<img src="data:image/jpeg;base64,') == 2
        and "tool response" in viewer.steps[2]
    )
    assert "&lt;tool_call&gt;" in viewer.steps[1] and "end: answer" in viewer.steps[-1]
    page = viewer._repr_html_()
    assert page.count('class="vsl-step"') == len(steps) and "<script>" in page
    assert 'src="http' not in page  # nothing is fetched: the images are inlined


def test_the_grpo_health_figure_draws_the_kl_on_a_log_axis():
    from vsearcher_lite.rl.plots import health_figure

    rows = [
        {
            "step": 0,
            "kl": 0.001,
            "groups": 4,
            "zero_variance_groups": 1,
            "format_failure_share": 0.0,
        },
        {
            "step": 1,
            "kl": 362.0,
            "groups": 4,
            "zero_variance_groups": 4,
            "format_failure_share": 0.25,
        },
    ]
    fig = health_figure(rows)
    assert fig.layout.yaxis2.type == "log" and list(fig.data[-1].y) == [0.001, 362.0]
    assert list(fig.data[3].y) == [0.25, 1.0]  # the share of groups with equal rewards


def test_figure_5_of_a_short_run_has_whole_steps_fixed_ranges_and_no_hidden_trace():
    """Two steps on auto-scaled axes made a small entropy change look steep over ticks 0, 0.2 ...
    1, and an accuracy equal to the reward hid under it."""
    from vsearcher_lite.rl.plots import reward_entropy_figure

    rows = [{"step": 0, "reward": 0.25, "accuracy": 0.25, "entropy": 0.070},
            {"step": 1, "reward": 0.5, "accuracy": 0.5, "entropy": 0.077}]
    fig = reward_entropy_figure(rows)
    assert fig.layout.xaxis.dtick == 1 and fig.layout.xaxis2.dtick == 1
    assert list(fig.layout.yaxis.range) == [-0.02, 1.02] and fig.layout.yaxis2.range[0] == 0
    assert [t.name for t in fig.data] == ["reward (step)", "reward (5-step mean) = accuracy",
                                          "entropy"]
    penalised = [{**rows[0], "reward": 0.2}, rows[1]]  # a search penalty: accuracy above reward
    assert "accuracy" in [t.name for t in reward_entropy_figure(penalised).data]
    many = [{"step": s, "reward": 0.5, "accuracy": 0.5, "entropy": 0.02} for s in range(40)]
    assert reward_entropy_figure(many).layout.xaxis.dtick is None
