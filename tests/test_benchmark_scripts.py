"""The benchmark scripts, run on small files of known content: none trains or generates."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_grpo_padding_counts_the_padded_tokens_of_each_step(tmp_path):
    rows = [
        {"step": 0, "in_loss": True, "prompt_tokens": 5, "response_tokens": n}
        for n in (5, 95, 5, 95)
    ]
    # not in the loss
    rows.append({"step": 0, "in_loss": False, "prompt_tokens": 5, "response_tokens": 1000})
    (tmp_path / "grpo").mkdir()
    (tmp_path / "grpo" / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "grpo_padding.py"),
            "--run-dir",
            str(tmp_path),
            "--micro-batch",
            "2",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.splitlines()[1].split() == ["0", "4", "220", "400", "220"]
    assert "padded / real tokens 1.818 in order, 1.000 by length" in out


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
    along the chain ends; the "Next:" lines written while a walk is on the chain are counted,
    right when they describe the hop next on it, as the plan writes them too ("[2]" read as the
    name the episode gave hop 2)."""
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
    orchestra = "[2] The orchestra based in Theith is Ensemble."  # a planning teacher's numbers
    episodes = [
        episode(False, "The village shown in the image is Orsk.\n"
                "Next: [3] the orchestra based in Orsk"),  # image (a line off the chain: uncounted)
        episode(False, image + "\nNext: [3] the orchestra based in Theith",  # right
                orchestra, "The theatre commissioned by Ensemble is Kraron."),  # reading ("the"
        # left out of the description as the teacher writes it)
        episode(False, image + "\nNext: [2] the theatre commissioned by Theith",  # wrong
                image + "\nNext: [3] the orchestra based in [9]",  # wrong: no name for 9
                "The theatre commissioned by Theith is Jas Theatre."),  # off
        episode(False, image, orchestra + "\nNext: [1] the theatre commissioned by the Ensemble",
                "Next: [1] the theatre commissioned by [2]"),
        # stopped after two hops, its next lines right
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
                              "0.20", "0.20", "0.20", "0.20", "0.20", "0.20", "1/1", "-",
                              "3/5"]
    # results without the episodes' messages (as shipped) cannot be walked: one line says so
    bare = tmp_path / "bare.jsonl"
    bare.write_text(json.dumps({k: v for k, v in episodes[0].items() if k != "trajectory"}) + "\n")
    refused = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "hop_reach.py"), "--run-dir", str(tmp_path),
         "--results", f"sft={bare}"], capture_output=True, text=True)
    assert refused.returncode == 1 and refused.stderr.startswith(f"{bare}: no record holds")


def test_grpo_steps_tables_each_kept_model_against_sft(tmp_path):
    """A run whose GRPO stage has finished and whose evaluations are stored: nothing is trained or
    generated; the final model stands for the last step, and the table pairs every model with SFT
    and with the model before it."""
    import shutil

    from tests.agent_fakes import build_sandbox_run

    run = tmp_path / "run"
    shutil.copytree(build_sandbox_run(tmp_path / "source"), run)
    train = [json.loads(x) for x in (run / "filter" / "train.jsonl").read_text().splitlines()]
    tasks = [{**t, "id": f"h{i}", "difficulty": level}
             for i, (t, level) in enumerate(zip(train, ("easy", "medium", "hard")))]
    (run / "filter" / "heldout.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    exam = [{**t, "id": f"e{i}", "split": "exam"} for i, t in enumerate(train[3:5])]
    (run / "filter" / "exam.jsonl").write_text("".join(json.dumps(t) + "\n" for t in exam))
    (run / "grpo-steps").mkdir()
    (run / "grpo-steps" / "checkpoint").symlink_to(ROOT / "data" / "tiny_base")

    def results(name, correct, tasks=tasks):
        rows = [{"id": t["id"], "policy": "p", "split": t.get("split", "heldout"),
                 "question": t["question"], "answer": t["answer"],
                 "difficulty": t["difficulty"], "correct": c,
                 "format_ok": True, "format_error": None, "termination": "answer", "n_turns": 3,
                 "n_tool_calls": 2, "tool_counts": {"image_search": 1, "visit": 1},
                 "prediction": t["answer"] if c else "no", "seconds": 1.0}
                for t, c in zip(tasks, correct)]
        path = run / "eval" / name / "results.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return path

    sft = results("lever-sft", [True, False, False])  # a lever's SFT model, evaluated elsewhere
    results("heldout-grpo-steps-step2", [True, True, False])
    earlier = results("elsewhere", [False, True, False])
    results("exam-grpo-steps-step2", [False, True], tasks=exam)
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "grpo_steps.py"), "--run-dir", str(run),
         "--steps", "2", "--every", "1", "--evaluate", "2", "--results", f"rl-1={earlier}",
         "--exam", "--sft-results", str(sft)],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    out = out.stdout.splitlines()
    assert [line.split() for line in out if line.startswith("SFT ")][0] == [
        "SFT", "all", "3", "0.333", "2.00", "1.000"]
    assert [line for line in out if line.startswith(("step 2 -", "rl-1 -")) and "all" in line] == [
        "rl-1 - SFT, all: +0.0000 (SE 0.5774, n 3; 1 gained, 1 lost)",
        "step 2 - SFT, all: +0.3333 (SE 0.3333, n 3; 1 gained, 0 lost)",
        "step 2 - rl-1, all: +0.3333 (SE 0.3333, n 3; 1 gained, 0 lost)",
    ]
    assert out[-1] == "exam, step 2: Pass@1 0.500, tool calls 2.00 (2 tasks)"
    assert not (run / "grpo-steps" / "steps.csv").exists()  # nothing was trained


def test_grpo_steps_trains_the_reference_grpo_with_only_its_options_changed():
    """The stage the benchmark trains is the reference's GRPO: the same settings but for its name,
    length, kept models and, when given, the pre-screen's settings."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import grpo_steps
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    from vsearcher_lite.reference import REFERENCE_GRPO
    from vsearcher_lite.reference_run import full_length
    from vsearcher_lite.rl.config import GRPOConfig

    reference = full_length(GRPOConfig.for_profile("cpu", device="cpu"), REFERENCE_GRPO).to_dict()
    changed = {"name": "g", "max_steps": 20, "save_every": 2, "checkpoint_every": 2}
    default = grpo_steps.stage_config("g", 20, 2, None, "cpu").to_dict()
    assert {k: v for k, v in default.items() if reference[k] != v} == changed
    more = grpo_steps.stage_config("g", 20, 2, 8, "cpu").to_dict()
    assert {k: v for k, v in more.items() if reference[k] != v} == {**changed,
                                                                     "prescreen_samples": 8}
    assert reference["prescreen_samples"] != 8
    hops = grpo_steps.stage_config("g", 20, 2, None, "cpu", 0.5).to_dict()
    assert {k: v for k, v in hops.items() if reference[k] != v} == {**changed, "hop_reward": 0.5}
    hot = grpo_steps.stage_config("g", 20, 2, None, "cpu", temperature=1.5).to_dict()
    assert {k: v for k, v in hot.items() if reference[k] != v} == {**changed, "temperature": 1.5}
    mixed = grpo_steps.stage_config("g", 20, 2, None, "cpu", prescreen_unmixed="drop",
                                    prescreen_from="runs/x/grpo").to_dict()
    assert {k: v for k, v in mixed.items() if reference[k] != v} == {
        **changed, "prescreen_unmixed": "drop", "prescreen_from": "runs/x/grpo"}


def test_sft_levers_pairs_each_levers_rl_model_with_its_sft_model_and_the_models_given():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import sft_levers
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    assert sft_levers.lever_pairs("deep", True, ["reference RL"]) == [
        ("reference SFT", "deep SFT"), ("deep SFT", "deep RL"), ("reference RL", "deep RL")]
    assert sft_levers.lever_pairs("plans", False, ["reference RL"]) == [
        ("reference SFT", "plans SFT")]


def test_sft_levers_deep_lever_trains_the_reference_sft_from_a_deeper_shipped_base(tmp_path):
    """The deep lever's base is the shipped base with twice its text layers, made once; its SFT
    differs from the reference's only in the model it starts from."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import sft_levers
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    from vsearcher_lite.model.tiny import default_base_dir, read_config_summary
    from vsearcher_lite.reference import REFERENCE_SFT
    from vsearcher_lite.reference_run import full_length
    from vsearcher_lite.training.config import SFTConfig

    base = sft_levers.deeper_base(tmp_path / "base", 2)
    shipped = read_config_summary(default_base_dir())
    grown = read_config_summary(base)
    assert grown == {**shipped, "num_hidden_layers": 2 * shipped["num_hidden_layers"]}
    made = (base / "model.safetensors").stat().st_mtime_ns
    assert sft_levers.deeper_base(base, 2) == base
    assert (base / "model.safetensors").stat().st_mtime_ns == made  # kept, not made again

    reference = full_length(SFTConfig.for_profile("cpu", device="cpu"), REFERENCE_SFT).to_dict()
    deep = sft_levers.reference_sft_config("cpu", base=str(base)).to_dict()
    assert {k: v for k, v in deep.items() if reference[k] != v} == {"base": str(base)}


def test_sft_levers_trains_a_lever_for_as_many_epochs_as_the_source_sft(tmp_path):
    """A lever's SFT takes the epochs the source's SFT recorded (a bigger world's run trains fewer
    than the reference's two), the reference's when the source holds only the shipped checkpoint;
    the fresh lever differs from the source's SFT in its loss weight alone."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import sft_levers
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    from vsearcher_lite.reference import REFERENCE_SFT

    shipped_only, bigger = tmp_path / "shipped", tmp_path / "bigger"
    (shipped_only / "sft" / "checkpoint").mkdir(parents=True)
    (bigger / "sft").mkdir(parents=True)
    (bigger / "sft" / "metrics.json").write_text(json.dumps({"settings": {"epochs": 0.5707}}))
    assert sft_levers.source_epochs(shipped_only) == REFERENCE_SFT["epochs"] == 2.0
    assert sft_levers.source_epochs(bigger) == 0.5707
    source = sft_levers.reference_sft_config("cpu", epochs=0.5707).to_dict()
    fresh = sft_levers.reference_sft_config("cpu", fresh_weight=5.0, epochs=0.5707).to_dict()
    assert {k: v for k, v in fresh.items() if source[k] != v} == {"fresh_weight": 5.0}


def test_world_size_builds_a_run_with_the_cpu_stages_and_counts_its_training_data(tmp_path):
    """The benchmark's stage commands build a small world's tasks and teacher trajectories through
    the CLI, with the training warm-up counts it is given; its count of the training data by level
    is the accepted file's; the SFT it trains takes the shipped reference SFT's steps."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import world_size
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    run = tmp_path / "run"
    commands = world_size.stage_commands(run, 400, "easy:30:5,medium:30:5,hard:30:5", 5)
    for command in commands:
        subprocess.run([sys.executable, "-m", "vsearcher_lite", *command, *(
            ["--samples", "2"] if command[0] == "trajectories" else [])],
            check=True, capture_output=True, cwd=ROOT)
        assert (run / command[0] / "metrics.json").exists(), command
    from vsearcher_lite.synthesis.inject import InjectConfig

    targets = json.loads((run / "inject-text" / "metrics.json").read_text())["targets"]
    default = {f"{s}/{d}": n for s, d, n, _ in InjectConfig.for_profile("cpu").targets()}
    assert targets["train/easy"] - default["train/easy"] == 30 - 480  # the warm-up counts given
    assert targets["heldout/hard"] - default["heldout/hard"] == 5 - 345
    assert targets["heldout/onehop"] == 5
    by_level = world_size.trajectories_by_level(run)
    records = [json.loads(line) for line in
               (run / "trajectories" / "accepted.jsonl").read_text().splitlines()]
    assert sum(n for n, _ in by_level.values()) == len(records) > 0
    assert sum(t for _, t in by_level.values()) == len({r["task_id"] for r in records})
    assert all(t <= n <= 2 * t for n, t in by_level.values())  # at most 2 samples a task
    assert world_size.reference_steps() == sum(
        1 for _ in (ROOT / "data" / "reference" / "sft" / "loss.csv").open()) - 1


def test_world_size_summarizes_a_grpo_stage_as_the_reference_card_does():
    """The GRPO lines of the bigger-world benchmark, read from the shipped reference's pre-screen
    and step log, carry the card's pre-screen counts, steps, rewards, entropies and share of flat
    groups."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import world_size
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    from vsearcher_lite.reference import read_card

    numbers = read_card()["numbers"]
    screened, trained = world_size.grpo_summary(ROOT / "data" / "reference")
    for level, g in numbers["prescreen"].items():
        assert f"{level} {g['screened']} / {g['mixed']} / {g['pass_rate']}" in screened
    g = numbers["grpo"]
    assert trained == (
        f"GRPO: {g['steps']} steps; first and last 20% of the steps: reward "
        f"{g['reward_first_20pct']}, {g['reward_last_20pct']}, entropy {g['entropy_first_20pct']}, "
        f"{g['entropy_last_20pct']}; share of sampled groups with all rewards equal "
        f"{g['zero_variance_group_share']}")


def test_sampling_temperature_refuses_a_bad_list_in_one_line_before_loading_anything(tmp_path):
    script = str(ROOT / "benchmarks" / "sampling_temperature.py")
    for given, said in (("1.0,hot", "not a comma-separated list of numbers: '1.0,hot'"),
                        ("1.0,0", "every temperature must be > 0, got '1.0,0'")):
        done = subprocess.run([sys.executable, script, "--run-dir", str(tmp_path),
                               "--temperatures", given], capture_output=True, text=True)
        assert done.returncode == 2 and said in done.stderr, done.stderr
    done = subprocess.run([sys.executable, script, "--run-dir", str(tmp_path)],
                          capture_output=True, text=True)
    assert done.returncode == 1 and "no model checkpoint there" in done.stderr, done.stderr
