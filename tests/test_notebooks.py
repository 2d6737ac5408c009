"""Notebooks are tests: each runs top to bottom under papermill with the CI parameters.

The notebooks share one run dir, in pipeline order, as `make reproduce` runs them; each also
rebuilds its inputs when they are missing, so a failure in one does not hide the next. The
assertions that matter live inside the notebooks (they assert the facts they claim).
"""

import json

import pytest

from vsearcher_lite.notebooks import (
    NOTEBOOK_DIR,
    clean_notebook,
    execute_notebook,
    list_notebooks,
    notebook_problems,
)

NOTEBOOKS = list_notebooks()
CELL_TIMEOUT = 900  # seconds per cell; the slowest CI cell takes under a minute on 2 cores


def test_there_are_notebooks():
    assert NOTEBOOKS and NOTEBOOKS[0].name.startswith("00_")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_clean(path):
    assert notebook_problems(path) == []


def test_clean_check_catches_outputs_and_widgets(tmp_path):
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "metadata": {"tags": ["parameters"]},
                "source": "X = 1",
                "outputs": [],
                "execution_count": None,
            },
            {
                "cell_type": "code",
                "metadata": {},
                "source": "X",
                "execution_count": 3,
                "outputs": [
                    {
                        "output_type": "execute_result",
                        "data": {"text/plain": "1"},
                        "metadata": {},
                        "execution_count": 3,
                    }
                ],
            },
        ],
        "metadata": {"widgets": {"state": {}}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = tmp_path / "00_dirty.ipynb"
    path.write_text(json.dumps(nb))
    problems = notebook_problems(path)
    assert "metadata holds widget state" in problems
    assert "cell 1 has outputs" in problems and "cell 1 has an execution count" in problems
    assert clean_notebook(path) is True
    assert notebook_problems(path) == []
    assert clean_notebook(path) is False


@pytest.fixture(scope="module")
def shared_run_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("nb_run")


#: The notebooks' own defaults are the full cpu run (what `make reproduce` executes); the test
#: suite runs the training and evaluation notebooks smaller. Each notebook says how long its full
#: run takes.
CI_PARAMETERS = {
    # Step counts, not time budgets, so a slower machine runs the same work; the notebooks assert
    # mechanics (files written, loss falls, metrics present), never a learning margin.
    "05_teacher_trajectories": {"SAMPLES_PER_TASK": 2},  # every training task, 2 rollouts each
    "06_sft": {"MAX_STEPS": 40, "EVAL_TASKS": 4},
    "07_grpo": {"MAX_STEPS": 2, "EVAL_TASKS": 4},
    "08_evaluation": {"EXAM_TASKS": 3},  # held-out: the preset's 30 tasks (10 per level)
}


@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, shared_run_dir):
    params = {
        "PROFILE": "cpu",
        "WORLD": "sandbox",
        "RUN_DIR": str(shared_run_dir),
        "SEED": 0,
        **CI_PARAMETERS.get(path.stem, {}),
    }
    out = shared_run_dir / "executed" / path.name
    execute_notebook(path, out, params, timeout=CELL_TIMEOUT, cwd=NOTEBOOK_DIR)
    executed = json.loads(out.read_text())
    errors = [
        o
        for c in executed["cells"]
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors
