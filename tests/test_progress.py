"""A loop's progress bar ends on a line that says how the loop ended (``runtime.end_progress``):
one stopped short of its plan reads as done with what it did, with the reason and the plan, in a
terminal and in a notebook's widget alike, never as a bar frozen part-way like a crashed run. A
notebook's HTML copy shows each saved bar as that line of text (``report.widgets_as_text``)."""

import io

import pytest
from tqdm.std import tqdm

from vsearcher_lite.runtime import end_progress, progress_bar


def last_line(stream: io.StringIO) -> str:
    return stream.getvalue().replace("\r", "\n").strip().splitlines()[-1]


def terminal_bar(total, **kw):
    stream = io.StringIO()
    return tqdm(total=total, desc="grpo", file=stream, leave=False, **kw), stream


def test_a_loop_stopped_by_its_budget_ends_as_done_saying_why_and_what_was_planned():
    bar, stream = terminal_bar(200)
    bar.update(2)
    bar.set_postfix(reward=0.25)
    end_progress(bar, "stopped by the time budget")
    line = last_line(stream)
    assert line.startswith("grpo: 100%") and " 2/2 [" in line
    assert line.endswith("reward=0.25, stopped by the time budget after 2 of 200]")


def test_a_finished_loop_keeps_its_total_and_says_nothing_more():
    bar, stream = terminal_bar(3)
    bar.update(3)
    end_progress(bar, "stopped by the time budget")
    line = last_line(stream)
    assert " 3/3 [" in line and "stopped" not in line


def test_a_resumed_loop_counts_from_where_it_started():
    bar, stream = terminal_bar(10, initial=4)
    bar.update(2)
    end_progress(bar)
    assert " 6/6 [" in last_line(stream) and "stopped after 6 of 10" in last_line(stream)


def test_a_bar_without_a_total_or_disabled_or_closed_is_left_as_it_is():
    bar, stream = terminal_bar(None)
    bar.update(5)
    end_progress(bar, "stopped by the time budget")
    assert "5it" in last_line(stream) and "stopped" not in last_line(stream)
    end_progress(bar)  # closed already: nothing happens
    quiet = progress_bar("eval", 10, enabled=False)
    quiet.update(1)
    end_progress(quiet, "stopped by the time budget")
    assert quiet.total == 10


def test_a_terminal_bar_clears_itself_once_closed_and_a_stopped_one_says_why(capsys):
    bar = progress_bar("eval", 2)
    bar.update(2)
    bar.close()
    err = capsys.readouterr().err
    assert "\n" not in err and not err.rsplit("\r", 2)[-2].strip()  # the line is blanked, not ended
    stopped = progress_bar("grpo", 200)
    stopped.update(2)
    end_progress(stopped, "stopped by the time budget")
    err = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert err.startswith("grpo: 100%") and "stopped by the time budget after 2 of 200" in err


def test_a_notebook_bar_stopped_early_is_drawn_full_and_green_not_red():
    pytest.importorskip("ipywidgets")
    from tqdm.notebook import tqdm as notebook_tqdm

    bar = notebook_tqdm(total=200, desc="grpo", leave=False, display=False)
    bar.update(2)
    end_progress(bar, "stopped by the time budget")
    label, progress, numbers = bar.container.children
    assert (progress.value, progress.max) == (2, 2)
    assert progress.bar_style == "success"  # tqdm draws a bar closed short of its total red
    shown = numbers.value.replace("\u2007", " ")  # tqdm writes figure spaces in its widget
    assert "2/2" in shown and "stopped by the time budget after 2 of 200" in shown
    assert bar.container.layout.visibility != "hidden"  # it stays, as the last line of the loop


def saved_notebook(outputs, state):
    import nbformat

    cell = nbformat.v4.new_code_cell("...")
    cell.outputs = [nbformat.v4.new_output("display_data", data=d) for d in outputs]
    notebook = nbformat.v4.new_notebook(cells=[cell])
    notebook.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": state}}
    return notebook


def tqdm_widget(key, label, numbers, visibility=None):
    """The saved state of one tqdm notebook bar, as nbclient keeps it."""
    def model(name, **state):
        return {"model_name": name, "state": state}

    return {
        key: model("HBoxModel", children=[f"IPY_MODEL_{key}{part}" for part in "lbn"],
                   layout=f"IPY_MODEL_{key}layout"),
        f"{key}l": model("HTMLModel", value=label),
        f"{key}b": model("FloatProgressModel", value=2, max=2, bar_style="success"),
        f"{key}n": model("HTMLModel", value=numbers),
        f"{key}layout": model("LayoutModel", visibility=visibility),
    }


def view(key):
    """A widget's output: its view and the text it had when first shown."""
    model = {"model_id": key, "version_major": 2, "version_minor": 0}
    return {"text/plain": "grpo:   0%|          | 0/200",
            "application/vnd.jupyter.widget-view+json": model}


def test_saved_bars_become_their_last_line_and_a_hidden_one_goes():
    from vsearcher_lite.report import widgets_as_text

    state = {**tqdm_widget("a", "grpo:\u2007100%", "\u20072/2\u2007[04:40&lt;00:00,\u2007stopped]"),
             **tqdm_widget("h", "eval:\u2007100%", "\u20073/3", visibility="hidden")}
    notebook, _ = widgets_as_text(saved_notebook([view("a"), view("h")], state), {})
    assert [o.data for o in notebook.cells[0].outputs] == [
        {"text/plain": "grpo: 100% 2/2 [04:40<00:00, stopped]"}]
    assert "widgets" not in notebook.metadata  # nothing left for the widget script to draw


def test_other_widgets_are_kept_with_their_state():
    from vsearcher_lite.report import widgets_as_text

    state = {**tqdm_widget("a", "grpo:", "2/2"),
             "s": {"model_name": "IntSliderModel", "state": {"value": 3}}}
    notebook, _ = widgets_as_text(saved_notebook([view("a"), view("s")], state), {})
    outputs = [o.data for o in notebook.cells[0].outputs]
    assert outputs[0] == {"text/plain": "grpo: 2/2"} and outputs[1] == view("s")
    assert "widgets" in notebook.metadata


def budget_spent_run(callback, state, capsys) -> str:
    """Drive a training callback through one step past its budget; the bar's last line."""
    from types import SimpleNamespace

    callback.on_train_begin(None, state, None)
    callback.start -= 10.0  # the budget is spent
    state.global_step = 1
    control = SimpleNamespace(should_training_stop=False)
    callback.on_step_end(None, state, control)
    assert control.should_training_stop
    callback.on_train_end(None, state, control)
    return last_line(io.StringIO(capsys.readouterr().err))


def test_sfts_bar_says_the_time_budget_stopped_it(capsys):
    from types import SimpleNamespace

    from vsearcher_lite.training.sft_trainer import sft_trainer_classes

    _, LossLog = sft_trainer_classes()
    trainer = SimpleNamespace(train_started=None)
    callback = LossLog(lambda: trainer, budget_s=1.0, progress=True, log=lambda line: None)
    state = SimpleNamespace(max_steps=100, global_step=0, is_world_process_zero=True)
    line = budget_spent_run(callback, state, capsys)
    assert line.startswith("sft steps: 100%") and " 1/1 [" in line
    assert line.endswith("stopped by the time budget after 1 of 100]")


def test_the_trl_engines_bar_says_the_time_budget_stopped_it(tmp_path, capsys):
    from types import SimpleNamespace

    from vsearcher_lite.rl.trl_engine import step_logger

    callback = step_logger(tmp_path, [], budget_s=1.0, progress=True)
    state = SimpleNamespace(max_steps=50, global_step=0, is_world_process_zero=True)
    line = budget_spent_run(callback, state, capsys)
    assert line.startswith("grpo: 100%") and line.endswith("time budget after 1 of 50]")
