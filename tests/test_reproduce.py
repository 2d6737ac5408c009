"""`reproduce`: numbered notebooks run in order under papermill, summary.json with every stage's
metrics and the headline numbers, wall time and peak memory per notebook, the HTML report, and
the stop at the first failing notebook (named with its cell). Uses small notebooks of its own."""

import argparse
import json
import re

import pytest
from run_fakes import fake_run

from vsearcher_lite.cli import main
from vsearcher_lite.manifest import read_manifest
from vsearcher_lite.notebooks import (
    NotebookFailed,
    PeakMemory,
    collect_summary,
    execute_notebook,
    headline_numbers,
    list_notebooks,
    parameter_names,
    parse_parameter,
    reproduce,
    select_notebooks,
)
from vsearcher_lite.report import report_html

ALLOCATED_MB = 300


def write_notebook(path, *cells):
    """A notebook whose first cell is the parameters cell; ``cells`` are code sources."""
    params = 'PROFILE = "cpu"\nWORLD = "sandbox"\nRUN_DIR = "unset"\nSEED = 0'
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "metadata": {"tags": ["parameters"]},
                "source": params,
                "outputs": [],
                "execution_count": None,
            }
        ]
        + [
            {
                "cell_type": "code",
                "metadata": {},
                "source": c,
                "outputs": [],
                "execution_count": None,
            }
            for c in cells
        ],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    for i, cell in enumerate(nb["cells"]):
        cell["id"] = f"cell-{i}"
    path.write_text(json.dumps(nb))
    return path


WRITE_STAGE = """
import json, pathlib
def write_stage(name, metrics):
    folder = pathlib.Path(RUN_DIR) / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.json").write_text(json.dumps(metrics))
"""


def test_reproduce_runs_in_order_and_summarises_time_memory_and_accuracy(tmp_path):
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    write_notebook(
        nbdir / "00_first.ipynb",
        WRITE_STAGE,
        'write_stage("first", {"profile": PROFILE, "seed": SEED, "world": WORLD})',
    )
    write_notebook(
        nbdir / "01_second.ipynb",
        WRITE_STAGE,
        # the second notebook reads what the first wrote: they share the run dir, in order
        (
            'assert (pathlib.Path(RUN_DIR) / "first" / "metrics.json").exists()\n'
            f'block = b"x" * ({ALLOCATED_MB} * 2**20)\nimport time; time.sleep(1.0)'
        ),
        'import plotly.graph_objects as go\ngo.Figure(go.Bar(x=["a"], y=[2])).show()',
        (
            'write_stage("comparison", '
            '{"exam_accuracy": {"base": 0.0, "sft": 0.25, "teacher": 0.5}, '
            '"heldout_accuracy": {"base": 0.0, "sft": 0.5}, "missing": {"rl": "not trained yet"}})'
        ),
    )
    (nbdir / "notes.ipynb").write_text("{}")  # not numbered: never run
    assert [p.name for p in list_notebooks(nbdir)] == ["00_first.ipynb", "01_second.ipynb"]

    run = tmp_path / "run"
    lines = []
    summary = reproduce(
        run,
        profile="single_gpu",
        seed=7,
        notebooks=list_notebooks(nbdir),
        log=lines.append,
        memory_interval=0.05,
    )

    assert summary["stages"]["first"] == {"profile": "single_gpu", "seed": 7, "world": "sandbox"}
    assert summary["exam_accuracy"] == {"base": 0.0, "sft": 0.25, "rl": None, "teacher": 0.5}
    assert summary["heldout_accuracy"] == {"base": 0.0, "sft": 0.5, "rl": None}
    assert summary["missing_policies"] == {"rl": "not trained yet"}
    assert list(summary["notebooks"]) == ["00_first", "01_second"] and summary["failed"] is None
    first, second = summary["notebooks"]["00_first"], summary["notebooks"]["01_second"]
    assert first["status"] == second["status"] == "ok"
    assert (
        second["seconds"] >= 1.0
        and summary["total_seconds"] >= first["seconds"] + second["seconds"]
    )
    # The kernel that held 300 MB shows it; the whole tree includes the driver as well.
    assert second["peak_kernel_rss_mb"] >= first["peak_kernel_rss_mb"] + 0.8 * ALLOCATED_MB
    assert second["peak_tree_rss_mb"] > second["peak_kernel_rss_mb"]
    memory = summary["peak_memory"]
    assert memory["peak_tree_rss_mb"] == second["peak_tree_rss_mb"]
    assert memory["max_process_rss_mb"] >= 0.8 * ALLOCATED_MB
    assert json.loads((run / "summary.json").read_text()) == summary

    assert (run / "notebooks" / "01_second.ipynb").exists() and (
        run / "notebooks" / "01_second.html"
    ).exists()
    # The figure is drawn in the HTML copy (plotly.js embedded: it opens offline).
    page = (run / "notebooks" / "01_second.html").read_text()
    assert "Plotly.newPlot" in page
    assert not re.findall(r"<script src=[^>]*plot", page)  # plotly.js is in the page, not fetched
    assert not re.findall(r"<script src=[^>]*mathjax", page, flags=re.I)  # equations are MathML
    report = (run / "report.html").read_text()
    assert (
        "href='notebooks/00_first.html'" in report
        and "0.25" in report
        and "not trained yet" in report
    )
    stages = read_manifest(run)["stages"]
    assert stages["notebooks/01_second"]["seconds"] == second["seconds"]
    assert stages["notebooks/00_first"]["seeds"] == {"SEED": 7}
    assert stages["reproduce"]["seconds"] == summary["total_seconds"]
    assert any("01_second.ipynb done" in line for line in lines)


def test_the_first_failure_stops_the_run_names_notebook_and_cell_and_keeps_a_summary(
    tmp_path, capsys
):
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    write_notebook(nbdir / "00_ok.ipynb", WRITE_STAGE, 'write_stage("ok", {"n": 1})')
    write_notebook(
        nbdir / "01_bad.ipynb", "x = 1", "raise ValueError('the numbers do not add up')", "x = 2"
    )
    write_notebook(nbdir / "02_never.ipynb", WRITE_STAGE, 'write_stage("never", {"n": 1})')
    run = tmp_path / "run"

    code = main(["reproduce", "--run-dir", str(run), "--notebook-dir", str(nbdir), "--no-html"])
    err = capsys.readouterr().err
    assert code == 1
    # Cell 2 of the notebook as written (0 is the parameters cell; papermill's injected cell is not
    # counted).
    assert (
        "01_bad.ipynb failed in cell 2 (\"raise ValueError('the numbers do not add up')\"): "
        "ValueError: the numbers do not add up" in err
    )
    assert "summary.json" in err
    assert not (run / "never").exists()
    summary = json.loads((run / "summary.json").read_text())
    assert (
        summary["failed"]["notebook"] == "01_bad.ipynb" and "cell 2" in summary["failed"]["message"]
    )
    assert {k: v["status"] for k, v in summary["notebooks"].items()} == {
        "00_ok": "ok",
        "01_bad": "failed",
    }
    assert summary["stages"]["ok"] == {"n": 1} and summary["exam_accuracy"] == {
        "base": None,
        "sft": None,
        "rl": None,
    }
    assert "Stopped" in (run / "report.html").read_text()
    assert "reproduce" not in read_manifest(run)["stages"]  # the run as a whole did not finish

    with pytest.raises(NotebookFailed, match="01_bad.ipynb failed in cell 2"):
        reproduce(run, notebooks=list_notebooks(nbdir)[1:2], html=False, log=lambda line: None)


def test_command_line_choices(tmp_path, capsys):
    notebooks = list_notebooks()
    assert [p.name for p in select_notebooks(notebooks, ["08"])] == ["08_evaluation.ipynb"]
    assert main(["reproduce", "--run-dir", str(tmp_path), "--only", "99"]) == 2
    assert "no numbered notebook starts with '99'" in capsys.readouterr().err
    assert parse_parameter("EVAL_TASKS=40") == ("EVAL_TASKS", 40)
    assert parse_parameter("POLICIES=('base', 'sft')") == ("POLICIES", ("base", "sft"))
    assert parse_parameter("NAME=x=y") == ("NAME", "x=y")
    with pytest.raises(argparse.ArgumentTypeError, match="NAME=VALUE"):
        parse_parameter("no equals sign")


def test_headline_numbers_without_the_evaluation_notebook(tmp_path):
    (tmp_path / "sft").mkdir()
    (tmp_path / "sft" / "metrics.json").write_text('{"heldout_accuracy": 0.1}')
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "metrics.json").write_text("{not json")
    summary = collect_summary(tmp_path)
    assert summary["stages"]["sft"] == {"heldout_accuracy": 0.1}
    assert summary["stages"]["broken"] == {"error": "metrics.json is not valid JSON"}
    assert summary["exam_accuracy"] == {"base": None, "sft": None, "rl": None}
    assert summary["missing_policies"]["rl"] == "notebook 08 has not run"
    assert (
        headline_numbers({"comparison": {"exam_accuracy": {"rl": 0.2}, "missing": {}}})[
            "exam_accuracy"
        ]["rl"]
        == 0.2
    )


def test_peak_memory_sees_a_child_process():
    import subprocess
    import sys

    with PeakMemory(interval=0.05) as mem:
        subprocess.run(
            [sys.executable, "-c", 'import time; b = b"x" * (200 * 2**20); time.sleep(0.8)'],
            check=True,
        )
    assert (
        mem.peak_children >= 150 * 2**20 and mem.peak_tree >= mem.peak_children and mem.samples >= 5
    )


def report_for(run):
    summary = collect_summary(run)
    summary.update(
        settings={"profile": "cpu", "world": "sandbox", "seed": 0},
        failed=None,
        notebooks={
            "00_sandbox_web_tour": {"status": "ok", "seconds": 2.5, "peak_tree_rss_mb": 300.0},
            "08_evaluation": {"status": "ok", "seconds": 40.0, "peak_tree_rss_mb": 900.0},
        },
    )
    return report_html(summary, run)


def test_the_report_draws_table_1_and_the_papers_figures_from_the_saved_files(tmp_path):
    page = report_for(fake_run(tmp_path / "run"))
    # Table 1: every cell with its correct/total count, every column with its number of tasks.
    assert (
        "exam<br><span class='n'>n=20</span>" in page
        and "easy+medium+hard<br><span class='n'>n=8</span>" in page
    )
    assert (
        "<td>sft</td><td>0.25 <span class='n'>(5/20)</span></td>"
        "<td>0.667 <span class='n'>(2/3)</span></td>" in page
    )
    # sft held-out: 2 + 1 + 0 of 3 + 3 + 2
    assert "<td>0.375 <span class='n'>(3/8)</span></td>" in page
    assert "<td>rl</td><td>—</td>" in page and "not trained yet" in page
    assert "held-out: 8 tasks from held-out seeds (easy 3, medium 3, hard 2)" in page
    # Figures 3-6 and the rest, each with the counts behind it; plotly.js once, in the page.
    assert page.count('class="plotly-graph-div"') == 7
    assert page.count("* plotly.js v") == 1 and "<script src=" not in page
    assert "easy 10 → 6, medium 8 → 6, hard 6 → 2 (total 24 → 14)" in page
    assert "6 teacher trajectories on 3 training tasks; rejection sampling kept 5" in page
    assert (
        "6 logged optimizer steps of 6, trained on 5 accepted trajectories (1 dropped as too long)"
        in page
    )
    assert "On the 8 held-out tasks notebook 06 evaluates" in page
    assert (
        "4 GRPO steps, 2 tasks x 4 episodes per step. Held-out (8 tasks): SFT 0.375 → RL 0.5"
        in page
    )
    assert (
        "href='notebooks/00_sandbox_web_tour.html'" in page
        and "href='notebooks/08_evaluation.html'" in page
    )


def test_the_report_names_what_has_not_run_and_survives_a_damaged_file(tmp_path):
    import shutil

    run = fake_run(tmp_path / "run")
    shutil.rmtree(run / "grpo")
    (run / "trajectories" / "rollouts.csv").write_text("key,task_id\nx,y\n")  # columns missing
    page = report_for(run)
    assert "Not run yet (notebook 07 writes <code>grpo/steps.csv</code>)" in page
    assert page.count("Could not draw this section: KeyError") == 1
    # without GRPO's two and the histogram
    assert page.count('class="plotly-graph-div"') == 7 - 2 - 1

    empty = tmp_path / "empty"
    empty.mkdir()
    page = report_for(empty)
    assert (
        page.count("Not run yet") == 5 and "plotly.js" not in page and "00_sandbox_web_tour" in page
    )


def test_reproduce_hands_the_reference_to_the_notebooks_and_carries_it_in_summary_and_report(
    tmp_path,
):
    from test_reference import _record as result_record

    from vsearcher_lite.reference_ship import ship_reference
    from vsearcher_lite.runio import write_jsonl

    run_files = tmp_path / "finished"
    for policy, correct in (("base", [0, 0]), ("sft", [1, 0]), ("rl", [1, 1])):
        write_jsonl(
            run_files / "eval" / f"heldout-{policy}" / "results.jsonl",
            [result_record(f"t{i}", policy, bool(c)) for i, c in enumerate(correct)],
        )
    ref = tmp_path / "my-reference"
    ship_reference(
        run_files,
        ref,
        commands=["vsearcher-lite reference run"],
        device="test",
        seeds=[0],
        log=lambda _: None,
    )
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    reads = write_notebook(
        nbdir / "00_reads.ipynb", WRITE_STAGE, 'write_stage("seen", {"reference": REFERENCE_DIR})'
    )
    nb = json.loads(reads.read_text())
    nb["cells"][0]["source"] += "\nREFERENCE_DIR = None"
    reads.write_text(json.dumps(nb))
    write_notebook(nbdir / "01_ignores.ipynb", "x = 1")
    assert parameter_names(reads) == {"PROFILE", "WORLD", "RUN_DIR", "SEED", "REFERENCE_DIR"}

    run = tmp_path / "run"
    summary = reproduce(
        run, notebooks=list_notebooks(nbdir), reference_dir=ref, log=lambda _: None, html=False
    )
    # the notebook's REFERENCE_DIR
    assert summary["stages"]["seen"] == {"reference": str(ref.resolve())}
    injected = "".join(
        json.loads((run / "notebooks" / "01_ignores.ipynb").read_text())["cells"][1]["source"]
    )
    # only where a notebook declares it
    assert "RUN_DIR" in injected and "REFERENCE_DIR" not in injected
    assert summary["reference"]["dir"] == str(ref.resolve())
    assert summary["reference"]["commands"] == ["vsearcher-lite reference run"]
    assert summary["reference"]["numbers"]["paired_heldout"]["rl_minus_sft"] == {
        "mean": 0.5,
        "se": 0.5,
        "n": 2,
        "gained": 1,
        "lost": 0,
    }
    report = (run / "report.html").read_text()
    assert "The reference run (full length, shipped)" in report and "rl - sft" in report


def test_a_notebook_kernel_talks_over_local_sockets_and_prints_no_transport_warning(
        tmp_path, capfd):
    """papermill's kernel gets Unix sockets of its own (no TCP port, so ipykernel has no
    unencrypted transport to warn about) and still runs the notebook."""
    source = write_notebook(
        tmp_path / "00_probe.ipynb",
        "import json, ipykernel.connect\n"
        "print(json.load(open(ipykernel.connect.get_connection_file()))['transport'])")
    executed = execute_notebook(source, tmp_path / "out.ipynb")
    printed = json.loads(executed.read_text())["cells"][1]["outputs"][0]["text"]
    assert "".join(printed).strip() == "ipc"
    assert "without encryption" not in capfd.readouterr().err
    assert list(tmp_path.glob("kernel*")) == []  # no socket left in the notebook's folder
