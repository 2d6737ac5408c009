"""The benchmark scripts, run on small files of known content: none trains or generates."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_package_lines_divides_every_line_of_a_package_by_kind(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "top.py").write_text('"""A module."""\n\nX = 1  # one\n')
    (tmp_path / "sub" / "leaf.py").write_text("# a note\ndef f():\n    'Say.'\n    return 2\n")
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "package_lines.py"), "--root", str(tmp_path)],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()
    rows = {line.split()[0]: line.split()[-5:] for line in out[1:-1]}
    assert rows["sub"] == ["4", "2", "1", "1", "0"]
    assert rows["all"] == ["7", "3", "2", "1", "1"]
    assert out[-1] == "2 files"


def test_notebook_modules_counts_what_a_notebooks_imports_load(tmp_path):
    from vsearcher_lite.notebooks import notebook_imports

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import notebook_modules as nm
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    source = "import json\nif True:\n    import vsearcher_lite.runio\n"
    cell = {"cell_type": "code", "source": source}
    notebook = tmp_path / "n.ipynb"
    notebook.write_text(json.dumps({"cells": [cell, {"cell_type": "markdown", "source": "x"}]}))
    imports, _ = notebook_imports(notebook)
    assert imports == ["import json", "import vsearcher_lite.runio"]
    found = nm.package_lines(ROOT, imports)
    runio = ROOT / "vsearcher_lite" / "runio.py"
    assert found["vsearcher_lite.runio"] == len(runio.read_text().splitlines())
    assert not any(name.startswith(nm.LIVE) for name in found)


def test_hop_reach_walks_each_episode_along_its_tasks_chain(tmp_path):
    """One medium task (the image, then three rounds) and five episodes of it: one per way a walk
    along the chain ends (lines that claim no hop, such as "Next: ...", are read past)."""
    rounds = [{"entity": "Kraron", "description": "the village that is home to the Jas Theatre"},
              {"entity": "Jas Theatre", "description": "the theatre commissioned by the Ensemble"},
              {"entity": "Ensemble", "description": "the orchestra based in Theith"}]
    task = {"id": "m1", "difficulty": "medium", "rounds": rounds,
            "image": {"entity": "Theith", "description": "the village pictured in the image"}}
    (tmp_path / "filter").mkdir()
    (tmp_path / "filter" / "heldout.jsonl").write_text(json.dumps(task) + "\n")

    def episode(correct, *claims):
        thinks = [{"role": "assistant", "content": f"<think>\n{c}\nQ: x?\n</think>\n<tool_call>"}
                  for c in claims]
        return {"id": "m1", "difficulty": "medium", "correct": correct,
                "trajectory": {"messages": [{"role": "user", "content": "q"}, *thinks]}}

    image = "The village shown in the image is Theith."
    orchestra = "The orchestra based in Theith is Ensemble."
    episodes = [
        episode(False, "The village shown in the image is Orsk.\n"
                "Next: the orchestra based in Orsk"),  # image (a line off the chain: uncounted)
        episode(False, image + "\nNext: the orchestra based in Theith",  # right
                orchestra, "The theatre commissioned by Ensemble is Kraron."),  # reading ("the"
        # left out of the description as the teacher writes it)
        episode(False, image + "\nNext: the theatre commissioned by Theith",
                image + "\nNext: the orchestra based in Theith",
                "The theatre commissioned by Theith is Jas Theatre."),  # off
        episode(False, image, orchestra + "\nNext: the theatre commissioned by the Ensemble",
                "Next: the theatre commissioned by the Ensemble"),  # stopped after two hops
        episode(True, image, orchestra, "The theatre commissioned by the Ensemble is Jas Theatre.",
                "The village that is home to the Jas Theatre is Kraron. Read Kraron."),  # done
    ]
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(e) + "\n" for e in episodes))
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "hop_reach.py"), "--run-dir", str(tmp_path),
         "--results", f"sft={results}"],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()
    # hops resolved 0, 2, 1, 2, 4: at least one 4 of 5, two 3, three and four 1
    assert out[1].split() == ["sft", "medium", "5", "0.200", "1.80/4.00", "0.80", "0.60", "0.20",
                              "0.20", "0.20", "0.20", "0.20", "0.20", "0.20", "1/1"]
    # results without the episodes' messages (as shipped) cannot be walked: one line says so
    bare = tmp_path / "bare.jsonl"
    bare.write_text(json.dumps({k: v for k, v in episodes[0].items() if k != "trajectory"}) + "\n")
    refused = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "hop_reach.py"), "--run-dir", str(tmp_path),
         "--results", f"sft={bare}"], capture_output=True, text=True)
    assert refused.returncode == 1 and refused.stderr.startswith(f"{bare}: no record holds")


def test_chain_scaling_samples_levels_and_reads_the_trained_tasks(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import chain_scaling as cs
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    shipped = [json.loads(line) for line in
               (cs.REFERENCE / "results" / "heldout-sft.jsonl").read_text().splitlines()]
    tasks = tmp_path / "heldout.jsonl"
    tasks.write_text("".join(json.dumps({"id": r["id"], "difficulty": r["difficulty"]}) + "\n"
                             for r in shipped))
    files = cs.level_files(tasks, tmp_path, "s", per_level=5, seed=1)
    again = cs.level_files(tasks, tmp_path, "t", per_level=5, seed=1)
    for level, path in files.items():
        picked = [json.loads(line) for line in path.read_text().splitlines()]
        assert len(picked) == 5 and {r["difficulty"] for r in picked} == {level}
        assert path.read_text() == again[level].read_text()  # seeded
    rows = cs.shipped_rows(files)
    assert {(r["step"], r["level"]) for r in rows} == {
        (f"reference {p}", lv) for p in ("base", "sft") for lv in cs.LEVELS}
    assert all(r["n"] == 5 and 0 <= r["pass1"] <= 1 for r in rows)
    assert all(r["pass1"] == 0 for r in rows if r["step"] == "reference base")
    pooled = tmp_path / "pooled.jsonl"
    pooled.write_text("".join(json.dumps({"world_seed": w, "task_id": t}) + "\n"
                              for w, t in [(1, "a"), (2, "b"), (1, "c"), (1, "d")]))
    assert cs.trained_ids(pooled, 3, 1) == {"a", "c"}
    assert cs.trained_ids(pooled, 4, 1, lambda rs: [r["task_id"] == "c" for r in rs]) == {"a", "d"}


def test_gpu_memory_says_what_it_measures_and_stops_in_one_line_without_a_gpu(tmp_path):
    script = ROOT / "benchmarks" / "gpu_memory.py"
    shown = subprocess.run([sys.executable, str(script), "--help"], capture_output=True,
                           text=True, check=True).stdout
    assert "--model-dir" in shown and "--stage-seconds" in shown
    no_gpu = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, str(script), "--model-dir", str(tmp_path / "m")],
                          capture_output=True, text=True, env=no_gpu)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "no CUDA device" in done.stderr
    assert not (tmp_path / "m").exists()  # nothing built without a GPU


def test_gpu_memory_stages_and_the_long_trajectory_it_trains_on():
    from vsearcher_lite.model.tiny import load_base
    from vsearcher_lite.training.data import check_record, rendered_lengths

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_memory as gm
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    assert gm.STAGES == ["sft-qlora-4096", "sft-qlora-8192", "sft-qlora-16384",
                         "sft-qlora-20480", "sft-lora-4096", "sft-lora-8192", "sft-lora-16384",
                         "sft-lora-20480", "grpo-logprob-30720-mb1", "grpo-logprob-30720-mb4",
                         "kv-16x8192"]
    processor = load_base()[1]
    record = check_record(gm.long_record(processor, 2048), "long")
    assert abs(rendered_lengths(processor, [record])[0] - 2048) < 2048 * 0.05


def test_other_world_reads_the_shipped_headline_as_the_card_holds_it():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import other_world as ow
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    card = json.loads((ow.REFERENCE / "card.json").read_text())["numbers"]["headline"]
    for policy in ("sft", "rl"):
        assert ow.shipped_headline(policy) == pytest.approx(card[policy]["pass_at_1"], abs=5e-5)
    rows = [{"n": 10, "pass1": 0.5}, {"n": 30, "pass1": 0.1}]
    assert ow.headline(rows) == pytest.approx((5 + 3) / 40)
    assert ow.headline([]) == 0.0
