"""The notebooks' explorers (``vsearcher_lite.widgets``): each widget's callback renders once when
a control changes, and an explorer's output keeps a self-contained view for the exported HTML."""

from __future__ import annotations

import pytest

pytest.importorskip("ipywidgets")

from vsearcher_lite.agent.protocol import format_assistant_turn  # noqa: E402
from vsearcher_lite.widgets import (  # noqa: E402
    episode_explorer,
    group_explorer,
    group_html,
    group_rows,
    show,
)

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def episode(task_id: str, n_calls: int) -> dict:
    """A finished episode of ``n_calls`` text searches, then an answer."""
    messages = [{"role": "system", "content": "sys"},
                {"role": "user", "content": [{"type": "text", "text": f"Q {task_id}?"}]}]
    for i in range(n_calls):
        messages += [{"role": "assistant",
                      "content": format_assistant_turn(f"search {i}",
                                                       tool_call=("text_search", {"query": "q"}))},
                     {"role": "user", "content": [{"type": "text", "text": f"result {i}"}]}]
    messages.append({"role": "assistant", "content": format_assistant_turn("done", answer="x")})
    return {"task_id": task_id, "question": f"Q {task_id}?", "image_path": None,
            "messages": messages, "turns": [], "termination": "answer", "prediction": "x",
            "n_tool_calls": n_calls}


def test_the_episode_explorer_steps_and_switches_tasks():
    explorer = episode_explorer([episode("t1", 2), episode("t2", 1)])
    pick, step, out = explorer.children
    assert step.max == 6 and "step 1 of 6" in out.value and "user: the question" in out.value
    step.value = 2
    assert "step 2 of 6" in out.value and "search 0" in out.value
    pick.value = 1  # another task: back to its first step, the slider fitted to its length
    assert (step.value, step.max) == (1, 4) and "<b>t2</b>" in out.value


def test_the_group_explorer_recomputes_advantages_and_the_trained_tokens():
    class Tokenizer:
        def decode(self, ids, **kwargs):
            return "".join(f"[{i}]" for i in ids)

    tokens = {"tokenizer": Tokenizer(), "ids": [1, 2, 3, 4, 5], "policy_mask": [0, 1, 1, 0, 1]}
    # trajectory 1's fatal step is 1 (its second turn): its last policy token is cut
    explorer = group_explorer([1, 0, 0, 0], [1, 2, 0, None], fatal_aware=True,
                              tokens={**tokens})
    *toggles, aware, out = explorer.children
    assert "3 of 3 policy tokens" not in out.value
    rows = group_rows([1, 0, 0, 0], [1, 2, 0, None], fatal_aware=True)
    assert [r["advantage"] for r in rows] == [1.5, -0.5, -0.5, -0.5]
    # fatal-aware: the fatal trajectories' negative advantages are clamped at 0
    assert [r["trained with"] for r in rows] == [1.5, 0.0, 0.0, -0.5]
    toggles[0].value = 0.0  # every reward 0: the group is dropped, nothing is trained
    assert "the group is dropped" in out.value and "0 of 3 policy tokens trained" in out.value
    toggles[3].value = 1.0
    aware.value = False  # the plain rule: every policy token of a kept trajectory trains
    assert out.value == group_html([0.0, 0.0, 0.0, 1.0], [1, 2, 0, None], False, tokens)
    assert "advantage -0.5: 3 of 3 policy tokens trained" in out.value


def test_an_explorer_output_keeps_its_view_for_the_exported_page(monkeypatch):
    import nbformat

    from vsearcher_lite.report import widgets_as_text

    shown = []
    monkeypatch.setattr("IPython.display.display", lambda bundle, raw: shown.append(bundle))
    show(episode_explorer([episode("t1", 1)]), "<div>the view</div>")
    (bundle,) = shown
    assert WIDGET_VIEW in bundle and bundle["text/html"] == "<div>the view</div>"
    cell = nbformat.v4.new_code_cell("...")
    cell.outputs = [nbformat.v4.new_output("display_data", data=bundle)]
    notebook = nbformat.v4.new_notebook(cells=[cell])
    notebook.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    page, _ = widgets_as_text(notebook, {})
    assert WIDGET_VIEW not in page.cells[0].outputs[0].data
    assert page.cells[0].outputs[0].data["text/html"] == "<div>the view</div>"
