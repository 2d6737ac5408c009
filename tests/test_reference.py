"""The reference run's card: made from a run's files, and checked against its own per-task
results."""

import json
import random
from pathlib import Path

import pytest

from vsearcher_lite.reference import (
    REFERENCE_DIR,
    REFERENCE_GRPO,
    REFERENCE_PASSK,
    REFERENCE_SFT,
    REFERENCE_TRAJECTORIES,
    TARGETS,
    acceptance,
    check_reference,
    headline_numbers,
    paired,
    paired_rows,
    read_card,
    read_examples,
    reference_comparison,
    reference_summary,
)
from vsearcher_lite.reference_ship import (
    card_markdown,
    rescore_reference,
    ship_reference,
    targets_markdown,
)
from vsearcher_lite.runio import InputError, read_jsonl, write_jsonl


def _record(task_id, policy, correct, difficulty="easy", **extra):
    return {
        "id": task_id,
        "policy": policy,
        "split": "heldout",
        "difficulty": difficulty,
        "correct": correct,
        "format_ok": True,
        "format_error": None,
        "termination": "answer",
        "n_turns": 3,
        "n_tool_calls": 2,
        "tool_counts": {"image_search": 1, "text_search": 1, "visit": 0},
        "prediction": "x",
        "answer": "x",
        "seconds": 0.5,
        "question": f"Q {task_id}?",
        "trajectory": {"turns": [{"text": "<think>x</think><answer>x</answer>", "tool": None,
                                  "observation": None, "messages": "long"}]},
        **extra,
    }


@pytest.fixture
def run(tmp_path):
    """A finished run's files: 10 held-out tasks, 4 exam tasks, an SFT loss log and GRPO steps."""
    rng = random.Random(0)
    root = tmp_path / "run"
    outcomes = {
        "base": [0] * 10,
        "sft": [1, 1, 1, 0, 0, 0, 0, 1, 0, 0],
        "rl": [1, 1, 1, 1, 1, 0, 0, 0, 0, 1],
        "teacher": [1] * 10,
    }
    # each task's chain: the bird in its image; RL's episode of t9, which it gains, names it
    write_jsonl(root / "filter" / "heldout.jsonl",
                [{"id": f"t{i}", "image": {"description": "the bird in the image",
                                           "entity": f"Bird {i}"}, "rounds": []}
                 for i in range(10)])
    for policy, row in outcomes.items():
        records = [
            _record(f"t{i}", policy, bool(c), "onehop" if i < 5 else "easy")
            for i, c in enumerate(row)
        ]
        if policy == "rl":
            records[9]["trajectory"]["turns"][0]["text"] = (
                "<think>\nThe bird in the image is Bird 9.\n</think><answer>x</answer>")
        write_jsonl(root / "eval" / f"heldout-{policy}" / "results.jsonl", records)
        write_jsonl(
            root / "eval" / f"exam-{policy}" / "results.jsonl",
            [_record(f"e{i}", policy, policy == "teacher" and i < 2, "exam") for i in range(4)],
        )
    for policy, rows in {"sft": ([1, 0, 0, 1], [1, 0, 1, 1]),
                         "rl": ([1, 1, 0, 1], [1, 1, 0, 1])}.items():
        for i, row in enumerate(rows, start=1):  # two samples of four validation tasks
            write_jsonl(root / "eval" / f"validation-{policy}-s{i}" / "results.jsonl",
                        [_record(f"v{j}", policy, bool(c), "onehop" if j < 2 else "medium")
                         for j, c in enumerate(row)])
    (root / "sft").mkdir(parents=True)
    lengths = {"hard": {"trajectories": 3, "kept": 2, "dropped": 1, "median": 4000, "p90": 7000,
                        "max": 7000},
               "easy": {"trajectories": 9, "kept": 9, "dropped": 0, "median": 900, "p90": 1200,
                        "max": 1500}}
    seen = {"easy": {"trajectories": 9, "distinct_tasks": 6, "distinct_trajectories": 8,
                     "times_seen_mean": 2.25, "times_seen_most": 4},
            "rounds2": {"trajectories": 1, "distinct_tasks": 1, "distinct_trajectories": 1,
                        "times_seen_mean": 2.0, "times_seen_most": 2},
            "all": {"trajectories": 10, "distinct_tasks": 7, "distinct_trajectories": 9,
                    "times_seen_mean": 2.22, "times_seen_most": 4}}
    (root / "sft" / "metrics.json").write_text(json.dumps({"lengths": lengths, "seen": seen}))
    (root / "sft" / "loss.csv").write_text(
        "step,loss\n" + "".join(f"{s},{3.0 / s:.4f}\n" for s in range(1, 11))
    )
    (root / "grpo").mkdir(parents=True)
    header = "step,reward,groups,zero_variance_groups,mixed_easy,mixed_medium,mixed_hard\n"
    steps = header + "".join(
        f"{s},{0.2 + 0.05 * s + rng.random() * 0.01:.4f},4,{s % 3},{4 - s % 3 - s // 6},"
        f"{s // 6},0\n" for s in range(1, 11)
    )
    (root / "grpo" / "steps.csv").write_text(steps)
    write_jsonl(root / "grpo" / "prescreen.jsonl",
                [{"id": f"p{i}", "difficulty": level, "correct": c, "samples": 4}
                 for i, (level, c) in enumerate([("easy", 0), ("easy", 2), ("easy", 4),
                                                 ("medium", 1), ("medium", 0)])])
    ckpt = root / "sft" / "checkpoint"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    (ckpt / "model.safetensors").write_bytes(b"\0" * 1024)
    return root


def test_a_gain_whose_episode_does_not_walk_its_chain_is_counted_not_shipped(run, tmp_path):
    path = run / "eval" / "heldout-rl" / "results.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    # the right answer, reached through the wrong bird: a lucky answer, not a walked chain
    rows[9]["trajectory"]["turns"][0]["text"] = (
        "<think>\nThe bird in the image is Bird 4.\n</think><answer>x</answer>")
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    card = ship_reference(run, tmp_path / "reference", commands=["x"], device="test", seeds=[0],
                          log=lambda _: None)
    assert card["examples_shipped"] == {"rl_gained": [],
                                        "gains": {"easy": {"gained": 1, "walked": 0}}}
    assert read_examples(tmp_path / "reference") == []


def test_walk_runs_the_models_again_and_ships_what_walks(run, tmp_path, monkeypatch):
    import shutil
    from types import SimpleNamespace

    from vsearcher_lite import reference_run
    from vsearcher_lite.evaluation import benchmarks
    from vsearcher_lite.scoring import evaluate as scoring_evaluate
    from vsearcher_lite.scoring import policies

    out = tmp_path / "reference"
    ship_reference(run, out, commands=["x"], device="test", seeds=[0], log=lambda _: None)
    (out / "examples" / "rl_gained.jsonl").unlink()  # a reference shipped without examples
    walk_dir = tmp_path / "walk"
    (walk_dir / "filter").mkdir(parents=True)
    shutil.copyfile(run / "filter" / "heldout.jsonl", walk_dir / "filter" / "heldout.jsonl")
    ran = []

    def rerun(run_dir, tasks, policy, *, config, name, benchmark, fresh):
        """The shipped run's episodes of these tasks, as a greedy run gives them again."""
        ran.append((name, policy.spec, sorted(t.id for t in tasks)))
        ids = {t.id for t in tasks}
        rows = [r for r in read_jsonl(run / "eval" / name / "results.jsonl") if r["id"] in ids]
        write_jsonl(Path(run_dir) / "eval" / name / "results.jsonl", rows)
        return {}

    monkeypatch.setattr(benchmarks, "ensure_sandbox_eval_tasks", lambda *a, **k: [
        SimpleNamespace(id=f"t{i}", split="heldout") for i in range(10)])
    monkeypatch.setattr(policies, "make_policy", lambda spec, config: SimpleNamespace(spec=spec))
    monkeypatch.setattr(scoring_evaluate, "evaluate", rerun)
    lines = []
    gains = reference_run.walk_reference(out, walk_dir, log=lines.append)
    # only the gained task runs, with both shipped checkpoints
    assert [(name, ids) for name, _, ids in ran] == [("heldout-sft", ["t9"]),
                                                     ("heldout-rl", ["t9"])]
    assert ran[0][1].endswith("reference/sft/checkpoint")
    assert gains == {"easy": {"gained": 1, "walked": 1}}
    assert [e["id"] for e in read_examples(out)] == ["t9"] and check_reference(out) == []
    assert lines[-1].endswith("1 of 1 gained tasks walk their chain (easy 1 of 1); 1 shipped")
    # an episode that does not come out as shipped is named and left out
    path = run / "eval" / "heldout-sft" / "results.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    rows[9]["prediction"] = "y"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines.clear()
    assert reference_run.walk_reference(out, walk_dir, log=lines.append) == {}
    assert "t9: the episodes run again differ from the shipped ones" in lines[0]
    assert read_examples(out) == [] and read_card(out)["examples_shipped"]["rl_gained"] == []


def test_passk_runs_again_and_replaces_the_shipped_samples(run, tmp_path, monkeypatch):
    from vsearcher_lite import reference_run
    from vsearcher_lite.evaluation import benchmarks

    out = tmp_path / "reference"
    ship_reference(run, out, commands=["x"], device="test", seeds=[0], log=lambda _: None)
    again = tmp_path / "again"

    def sampled(run_dir, **kwargs):  # three samples of six validation tasks, as run_passk writes
        for policy in ("sft", "rl"):
            for i in range(1, 4):
                write_jsonl(Path(run_dir) / "eval" / f"validation-{policy}-s{i}" / "results.jsonl",
                            [_record(f"v{j}", policy, j < i, "easy" if j < 3 else "hard")
                             for j in range(6)])

    monkeypatch.setattr(benchmarks, "ensure_sandbox_eval_tasks", lambda *a, **k: [])
    monkeypatch.setattr(reference_run, "run_passk", sampled)
    assert reference_run.passk_again(out, again, device="cpu", log=lambda _: None) == 6
    shipped = sorted(p.name for p in (out / "results").glob("validation-*.jsonl"))
    assert shipped == [f"validation-{p}-s{i}.jsonl" for p in ("rl", "sft") for i in (1, 2, 3)]
    assert (again / "sft" / "checkpoint").resolve() == (out / "sft" / "checkpoint").resolve()
    card = read_card(out)
    assert card["numbers"]["passk"]["sft"]["n_samples"] == 3
    assert card["numbers"]["passk"]["sft"]["n_tasks"] == 6
    assert card["rerun"]["passk"]["command"].startswith("vsearcher-lite reference passk")
    assert check_reference(out) == []
    assert "The passk stage ran again with the shipped checkpoints" in (out / "CARD.md").read_text()


def test_every_shipped_gained_episode_walks_its_chain():
    from vsearcher_lite.reference_ship import walks_chain

    card, examples = read_card(REFERENCE_DIR), read_examples(REFERENCE_DIR)
    shipped = card["examples_shipped"]
    assert [e["id"] for e in examples] == shipped["rl_gained"]
    for e in examples:
        assert e["rl"]["correct"] and not e["sft"]["correct"], e["id"]
        assert walks_chain(e["chain"], e["rl"]["turns"]), e["id"]
    # the count covers every gained task of the paired headline
    gains = shipped["gains"]
    paired = headline_numbers(REFERENCE_DIR)["paired_heldout"]["rl_minus_sft"]
    assert sum(g["gained"] for g in gains.values()) == paired["gained"]
    assert len(examples) <= sum(g["walked"] for g in gains.values())


def test_paired_difference_counts_flips_on_shared_tasks():
    before = [_record("a", "sft", True), _record("b", "sft", False), _record("c", "sft", False)]
    after = [
        _record("a", "rl", False),
        _record("b", "rl", True),
        _record("c", "rl", True),
        _record("d", "rl", True),
    ]
    d = paired(before, after)
    assert (d["n"], d["gained"], d["lost"]) == (3, 2, 1)  # task d has no SFT result: not paired
    assert d["mean"] == pytest.approx(1 / 3, abs=1e-4)


def test_ship_writes_trimmed_results_and_a_card_that_checks(run, tmp_path):
    out = tmp_path / "reference"
    card = ship_reference(
        run,
        out,
        commands=["vsearcher-lite sft --profile cpu"],
        device="test",
        seeds=[0],
        log=lambda _: None,
    )
    assert check_reference(out) == []
    line = json.loads((out / "results" / "heldout-rl.jsonl").read_text().splitlines()[0])
    assert "trajectory" not in line and line["id"] == "t0"
    assert (out / "sft" / "checkpoint" / "model.safetensors").is_file() and card[
        "checkpoints_mb"
    ] == {"sft": 0.0}
    n = card["numbers"]
    assert n["policies"]["heldout"]["sft"]["pass_at_1"] == 0.4
    assert n["policies"]["heldout"]["sft"]["accuracy_by_difficulty"] == {"easy": 0.2, "onehop": 0.6}
    # the headline leaves one-hop out: the five easy tasks, where RL lost task 7 and gained 9
    assert n["headline"]["sft"]["n_tasks"] == 5 and n["headline"]["sft"]["pass_at_1"] == 0.2
    assert n["paired_heldout"]["rl_minus_sft"] == {
        "mean": 0.0,
        "se": 0.3162,  # sqrt(2 / 4 / 5)
        "n": 5,
        "gained": 1,
        "lost": 1,
    }
    # the task RL gained is shipped with both episodes, turn by turn: its RL episode walks the
    # task's chain
    assert card["examples_shipped"] == {"rl_gained": ["t9"],
                                        "gains": {"easy": {"gained": 1, "walked": 1}}}
    (example,) = read_examples(out)
    assert example["question"] == "Q t9?" and example["rl"]["correct"]
    assert example["chain"] == [["the bird in the image", "Bird 9"]]
    assert example["rl"]["walks_chain"] and not example["sft"]["walks_chain"]
    assert not example["sft"]["correct"] and example["sft"]["turns"][0] == {
        "text": "<think>x</think><answer>x</answer>", "tool": None, "arguments": None,
        "observation": None}
    # one-hop apart: tasks 3 and 4 gained
    assert n["paired_by_level"]["onehop"]["rl_minus_sft"]["gained"] == 2
    assert n["policies"]["heldout"]["sft"]["by_difficulty"]["easy"] == {
        "accuracy": 0.2, "n_tasks": 5, "format_valid_rate": 1.0, "mean_tool_calls": 2.0}
    # Pass@k of two samples: SFT solves v0 and v3 twice, v2 once (mixed), v1 never
    sft_k = n["passk"]["sft"]
    assert sft_k["n_samples"] == 2 and sft_k["pass_at_1"] == 0.625
    assert sft_k["pass_at_k"] == {"1": 0.625, "2": 0.75} and sft_k["mixed"] == 1
    assert sft_k["by_level"]["medium"]["pass_at_k"]["2"] == 1.0
    assert n["passk"]["rl"]["mixed"] == 0 and n["passk"]["rl"]["pass_at_1"] == 0.75
    assert n["prescreen"]["easy"] == {"screened": 3, "mixed": 1, "all_correct": 1,
                                      "none_correct": 1, "pass_rate": 0.5}
    assert n["sft_lengths"]["hard"]["dropped"] == 1
    assert card["acceptance"]["sft_dropped"] is False  # 1 of 12 trajectories, above 1 %
    card_md = (out / "CARD.md").read_text()
    assert "| sft | 0.6 (2.0) | 0.2 (2.0) | - | - | 0.2 (n 5) | 0.0 (2.0) |" in card_md
    assert "hard: 2 / 1; 4000, 7000, 7000" in card_md
    # what SFT saw: distinct tasks and trajectories by level in hop order, the total last
    assert n["sft_seen"]["easy"]["distinct_tasks"] == 6
    assert card_md.index("- easy: 9; 6, 8; 2.25, 4") < card_md.index("- rounds2: 1; 1, 1; 2.0, 2") \
        < card_md.index("- all: 10; 7, 9; 2.22, 4")
    assert n["policies"]["exam"]["teacher"]["pass_at_1"] == 0.5
    assert (
        n["grpo"]["steps"] == 10
        and n["grpo"]["reward_last_20pct"] > n["grpo"]["reward_first_20pct"]
    )
    assert n["grpo"]["zero_variance_group_share"] == pytest.approx(10 / 40)
    # the groups with signal by level: medium's appear in the last steps
    assert n["grpo"]["mixed_groups_by_level"]["medium"] == {"total": 5, "first_20pct": 0.0,
                                                            "last_20pct": 1.0}
    assert "- GRPO groups with signal by level (in all; per step, first -> last 20 %): easy 25; " \
        "2.5 -> 2.5; medium 5; 0.0 -> 1.0; hard 0; 0.0 -> 0.0" in (out / "CARD.md").read_text()
    assert card["acceptance"]["heldout_tasks"] is False  # 10 tasks, not 600
    assert "vsearcher-lite sft --profile cpu" in (out / "CARD.md").read_text()
    # CARD.md is card.json rendered: read back (its keys sorted), the card reads the same
    assert card_md == card_markdown(read_card(out))
    assert "| held-out easy, medium and hard tasks | >= 600 | 5 | missed |" in card_md
    assert "| RL - SFT, headline Pass@1, paired | >= 0.05 with SE <= 0.015 | +0.0000 (SE " \
        "0.3162) | missed |" in card_md
    assert card_md.index("- easy: 9 / 0") < card_md.index("- hard: 2 / 1")  # in level order


def test_a_card_with_a_missed_target_says_what_limits_it():
    numbers = {
        "policies": {"heldout": {}, "exam": {"teacher": {"n_tasks": 120, "pass_at_1": 0.4}}},
        "paired_heldout": {"sft_minus_base": {"mean": 0.1, "se": 0.04}},  # 2.5 SE
        "passk": {"sft": {"n_samples": 4, "by_level": {
            "hard": {"pass_at_k": {"4": 0.0}, "n_tasks": 10},
            "easy": {"pass_at_k": {"4": 0.5}, "n_tasks": 4}}}},
        "prescreen": {"medium": {"screened": 9, "mixed": 1}, "easy": {"screened": 8, "mixed": 3}},
    }
    lines = targets_markdown(numbers)
    assert "| SFT - base, headline Pass@1, paired | > 0 by >= 3 SE | +0.1000 (SE 0.0400) " \
        "| missed |" in lines
    assert "| RL - SFT, headline Pass@1, paired | >= 0.05 with SE <= 0.015 | - | not measured |" \
        in lines
    assert "| teacher Pass@1 on the exam | >= 0.3 | 0.4 | met |" in lines
    text = "\n".join(lines)
    # a bound with its standard error over the tasks it was measured on, not a ceiling
    assert "(Pass@4): easy 0.5 of 4 tasks (SE 0.25), hard 0.0 of 10 tasks (SE 0.0)." in text
    assert "ceiling" not in text
    assert "carry signal: easy 3 of 8, medium 1 of 9." in text
    # every target met or not measured: nothing to explain
    numbers["paired_heldout"]["sft_minus_base"]["se"] = 0.03
    assert not any(line.startswith("What limits it") for line in targets_markdown(numbers))


def test_check_names_each_number_that_disagrees_with_the_files(run, tmp_path):
    out = tmp_path / "reference"
    ship_reference(run, out, commands=["x"], device="test", seeds=[0], log=lambda _: None)
    path = out / "results" / "heldout-rl.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    rows[8]["correct"] = True  # one more RL success than the card was made from
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    problems = check_reference(out)
    assert any(
        p.startswith("numbers.policies.heldout.rl.pass_at_1: the card says 0.6") for p in problems
    )
    assert any("paired_heldout.rl_minus_sft.gained" in p for p in problems)


def test_a_big_checkpoint_is_listed_not_shipped(run, tmp_path):
    card = ship_reference(
        run,
        tmp_path / "ref",
        commands=["x"],
        device="test",
        seeds=[0],
        max_checkpoint_mb=0.0001,
        log=lambda _: None,
    )
    assert card["checkpoints_mb"] == {} and "sft" in card["checkpoints_not_shipped"]
    assert not (tmp_path / "ref" / "sft" / "checkpoint").exists()


def test_ship_replaces_an_older_reference_whole(run, tmp_path):
    out = tmp_path / "reference"
    out.mkdir()
    (out / "stale.txt").write_text("from an older run")
    ship_reference(run, out, commands=["x"], device="test", seeds=[0], log=lambda _: None)
    assert not (out / "stale.txt").exists() and (out / "card.json").is_file()
    assert not list(tmp_path.glob(".reference*"))


def test_ship_refuses_a_run_without_evaluations(tmp_path):
    with pytest.raises(InputError, match="eval does not exist"):
        ship_reference(tmp_path, tmp_path / "ref", commands=[], device="x", seeds=[0])
    with pytest.raises(InputError, match="card.json does not exist"):
        check_reference(tmp_path / "nothing")


def _edit_lines(path, edit):
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(edit(r)) + "\n" for r in rows))


def test_rescore_judges_the_shipped_predictions_again(run, tmp_path, capsys):
    """``rescore_reference`` re-judges each shipped prediction, rewrites the lines in place, drops
    the example RL no longer gains and rebuilds the card, which then checks."""
    out = tmp_path / "reference"
    ship_reference(run, out, commands=["x"], device="test", seeds=[0], log=lambda _: None)

    def as_judged(r):  # the fixture's answers are all "x": give each line its verdict's answer
        r["prediction"] = r["answer"] if r["correct"] else "y"
        return r

    cases = {("rl", "t9"): ("925", "916"),  # a nearby number the run counted correct
             ("sft", "t9"): ("925", "y"),
             ("sft", "t7"): ("37,381 km²", "37381 square kilometres"),  # the gold another way
             ("rl", "t0"): ("Bepo Kala", "Kala")}  # an alias the line does not hold

    for policy in ("base", "sft", "rl", "teacher"):
        def edit(r, policy=policy):
            r = as_judged(r)
            if (policy, r["id"]) in cases:
                r["answer"], r["prediction"] = cases[policy, r["id"]]
            if (policy, r["id"]) == ("rl", "t0"):
                del r["aliases"]  # a reference shipped before its lines kept the aliases
            return r
        _edit_lines(out / "results" / f"heldout-{policy}.jsonl", edit)
    for path in (out / "results").glob("[ev]*.jsonl"):
        _edit_lines(path, as_judged)
    before = (out / "results" / "heldout-rl.jsonl").read_text().splitlines()
    said = []
    changes = rescore_reference(out, log=said.append)
    assert [(c["file"], c["line"], c["id"], c["answer"], c["prediction"], c["correct"])
            for c in changes] == [("heldout-rl", 10, "t9", "925", "916", False)]
    assert "916" in said[0] and "verdicts changed: 1;" in said[-1]
    after = [json.loads(x) for x in (out / "results" / "heldout-rl.jsonl").read_text().splitlines()]
    assert [r["id"] for r in after] == [json.loads(x)["id"] for x in before]  # the line order
    assert list(after[9]) == list(json.loads(before[9]))  # every field, in its place
    assert {k: v for k, v in after[9].items() if k not in ("correct", "match")} == {
        k: v for k, v in json.loads(before[9]).items() if k not in ("correct", "match")}
    assert (after[9]["correct"], after[9]["match"]) == (False, None)
    assert (after[0]["correct"], after[0]["match"]) == (True, "alias")
    assert check_reference(out) == []
    card = read_card(out)
    heldout = card["numbers"]["policies"]["heldout"]
    assert heldout["rl"]["pass_at_1"] == 0.5 and heldout["rl"]["accepted_not_exact"] == 1
    assert heldout["sft"]["accepted_not_exact"] == 1  # the square kilometres
    assert card["numbers"]["paired_heldout"]["rl_minus_sft"]["gained"] == 0
    # t9 is no longer gained: its example goes
    assert card["examples_shipped"]["rl_gained"] == [] and read_examples(out) == []
    assert card["rescored"]["changed"][0]["prediction"] == "916"
    card_md = (out / "CARD.md").read_text()
    assert card_md == card_markdown(card) and "prediction 916: now incorrect" in card_md
    # judged again from the command line, nothing changes, and the card still says what changed
    from vsearcher_lite.cli import main

    capsys.readouterr()
    assert main(["reference", "rescore", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "verdicts changed: 0;" in printed and printed.endswith(": consistent\n")
    assert read_card(out)["rescored"] == card["rescored"] and check_reference(out) == []


def test_rescore_names_the_line_it_cannot_judge(run, tmp_path):
    out = tmp_path / "reference"
    ship_reference(run, out, commands=["x"], device="test", seeds=[0], log=lambda _: None)
    path = out / "results" / "exam-sft.jsonl"
    _edit_lines(path, lambda r: {k: v for k, v in r.items() if k != "answer"})
    card = (out / "card.json").read_text()
    with pytest.raises(InputError, match=r"exam-sft.jsonl:1: a result line needs answer"):
        rescore_reference(out, log=lambda _: None)
    assert (out / "card.json").read_text() == card  # nothing rewritten


def test_acceptance_reads_the_targets():
    def level(accuracy, calls, valid=0.95):
        return {"accuracy": accuracy, "mean_tool_calls": calls, "format_valid_rate": valid}

    numbers = {
        "headline": {"sft": {"n_tasks": 641}},
        "policies": {
            "heldout": {
                "sft": {"by_difficulty": {"onehop": level(0.6, 2.0, 0.99),
                                          "easy": level(0.5, 4.0, 0.93),
                                          "medium": level(0.16, 5.0, 0.91),
                                          "hard": level(0.04, 9.0, 0.89)}},
                "rl": {"by_difficulty": {"easy": level(0.6, 4.0), "medium": level(0.2, 6.0),
                                         "hard": level(0.04, 6.0)}},
                "teacher": {"by_difficulty": {"medium": level(0.6, 8.0)}},
            },
            "exam": {"teacher": {"n_tasks": 120, "pass_at_1": 0.29},
                     "rl": {"n_tasks": 120, "pass_at_1": 0.01}},
        },
        "paired_heldout": {
            "sft_minus_base": {"mean": 0.42, "se": 0.02},
            "rl_minus_sft": {"mean": 0.06, "se": 0.02},
        },
        "paired_by_level": {"medium+hard": {"rl_minus_sft": {"mean": -0.01, "se": 0.01}}},
        "sft_lengths": {"easy": {"trajectories": 200, "dropped": 2}},
        "grpo": {"reward_first_20pct": 0.3, "reward_last_20pct": 0.45},
    }
    got = acceptance(numbers)
    assert got == {
        "sft_dropped": True,  # 1 %
        "heldout_tasks": True,
        "sft_minus_base": True,  # 21 SE
        "sft_medium": True,
        "sft_medium_tool_calls": False,  # 5 calls, 37.5 % below the teacher's 8
        "sft_format_valid": False,  # hard 0.89: every level must reach 0.9
        "rl_minus_sft_ses": True,  # 0.06 is 3 SE
        "rl_minus_sft": False,  # SE above 0.015
        "rl_minus_sft_medium_hard": False,  # RL below SFT there
        "rl_medium": True,
        "rl_hard": False,
        "rl_tool_calls_rise": False,  # medium 6 and hard 6: no rise
        "reward_rise": True,
        "exam_tasks": True,
        "teacher_exam": False,
        "rl_exam": True,
    }
    numbers["policies"]["heldout"]["sft"]["by_difficulty"]["medium"]["mean_tool_calls"] = 5.7
    assert acceptance(numbers)["sft_medium_tool_calls"] is True  # 29 % below
    numbers["paired_heldout"]["rl_minus_sft"]["se"] = 0.021
    assert acceptance(numbers)["rl_minus_sft_ses"] is False  # 2.9 SE
    numbers["policies"]["heldout"]["rl"]["by_difficulty"]["hard"]["mean_tool_calls"] = 6.5
    assert acceptance(numbers)["rl_tool_calls_rise"] is True
    del numbers["sft_lengths"], numbers["policies"]["exam"]["rl"]
    assert acceptance(numbers)["sft_dropped"] is None and acceptance(numbers)["rl_exam"] is None
    assert TARGETS["rl_minus_sft_se_max"] == 0.015


def test_a_reference_reads_as_a_comparison_with_paired_rows(run, tmp_path):
    out = tmp_path / "reference"
    ship_reference(run, out, commands=["x"], device="test", seeds=[0], log=lambda _: None)
    metrics = reference_comparison(out)
    assert (
        metrics["evaluated"] == ["base", "sft", "rl", "teacher"]
        and metrics["missing"] == {}
    )
    assert metrics["heldout_accuracy"]["rl"] == 0.6 and metrics["exam_accuracy"]["teacher"] == 0.5
    assert (
        metrics["accuracy"]["sft"]["onehop"] == 0.6 and metrics["n_correct"]["rl"]["heldout"] == 6
    )
    assert metrics["n_tasks"] == {
        "exam": 4,
        "heldout": 10,
        "heldout_by_difficulty": {"onehop": 5, "easy": 5},
    }
    rows = {(r["comparison"], r["tasks"]): r for r in paired_rows(out)}
    assert [r["tasks"] for r in paired_rows(out) if r["comparison"] == "rl - sft"] == [
        "easy+medium+hard", "onehop", "easy", "exam"]
    overall = rows[("rl - sft", "onehop")]
    assert (
        overall["before"],
        overall["after"],
        overall["n"],
        overall["gained"],
        overall["lost"],
    ) == (0.6, 1.0, 5, 2, 0)  # tasks 3 and 4 gained
    assert rows[("rl - sft", "easy")]["difference"] == pytest.approx(0.0)  # 7 lost, 9 gained
    assert rows[("sft - base", "exam")]["n"] == 4
    summary = reference_summary(out)
    assert (
        summary["commands"] == ["x"]
        and summary["numbers"]["paired_heldout"]["rl_minus_sft"]["lost"] == 1
    )
    assert "card.json does not exist" in reference_summary(tmp_path / "nothing")["error"]


def test_the_report_shows_the_reference_beside_the_run(run, tmp_path):
    from vsearcher_lite.report import report_html

    out = tmp_path / "reference"
    ship_reference(
        run,
        out,
        commands=["vsearcher-lite reference run"],
        device="test",
        seeds=[0],
        log=lambda _: None,
    )
    page = report_html({"settings": {}}, tmp_path / "no-run", reference_dir=out)
    section = page.split("The reference run (full length, shipped)")[1]
    assert "vsearcher-lite reference run" in section and "rl - sft" in section
    # the headline column: RL on the paper's levels (here 5 easy tasks), one-hop apart
    assert "<th>easy+medium+hard<br><span class='n'>n=5</span></th>" in section
    assert "<td>0.2 <span class='n'>(1/5)</span></td>" in section
    assert section.count("plotly-graph-div") >= 4  # figure 4, the SFT loss, figures 5 and 6
    missing = report_html({"settings": {}}, tmp_path / "no-run", reference_dir=tmp_path / "none")
    assert "Not run yet" in missing.split("The reference run")[1]
    with pytest.raises(InputError, match="card.json does not exist"):
        read_card(tmp_path / "none")


def test_the_shipped_reference_matches_its_card():
    """``data/reference`` is what notebooks 06-08 study: its card's numbers are recomputed from its
    own per-task files, and it holds what the card promises (every policy on every task, the
    headline on the paper's levels, Pass@k before and after RL, the SFT stage's kept and dropped
    trajectories, the logs, the checkpoints within the size limit)."""
    assert check_reference(REFERENCE_DIR) == []
    card = read_card(REFERENCE_DIR)
    assert (REFERENCE_DIR / "CARD.md").read_text() == card_markdown(card)
    numbers = headline_numbers(REFERENCE_DIR)
    heldout, exam = numbers["policies"]["heldout"], numbers["policies"]["exam"]
    # no no-tools row: the tiny models answer without tools only with fragments of the markup
    assert not sorted((REFERENCE_DIR / "results").glob("*-direct*.jsonl"))
    for policy in ("base", "sft", "rl", "teacher"):
        assert numbers["headline"][policy]["n_tasks"] >= TARGETS["min_heldout_tasks"], policy
        assert exam[policy]["n_tasks"] >= TARGETS["min_exam_tasks"], policy
        assert set(heldout[policy]["by_difficulty"]) == {"onehop", "easy", "medium", "hard"}
    # paired on every headline task, and one-hop kept out of it
    assert numbers["paired_heldout"]["rl_minus_sft"]["n"] == numbers["headline"]["rl"]["n_tasks"]
    assert numbers["headline"]["sft"]["n_tasks"] + heldout["sft"]["n_by_difficulty"]["onehop"] \
        == heldout["sft"]["n_tasks"]
    for policy in ("sft", "rl"):
        k = numbers["passk"][policy]
        assert k["n_samples"] == REFERENCE_PASSK["samples"], policy
        assert k["n_tasks"] == REFERENCE_PASSK["max_tasks"], policy
    lengths = numbers["sft_lengths"]
    assert set(lengths) == {"onehop", "easy", "medium", "hard"}
    assert sum(g["kept"] for g in lengths.values()) > 2000
    assert set(numbers["prescreen"]) == set(REFERENCE_GRPO["difficulty_mix"])
    assert (
        numbers["sft"]["logged_steps"] > 1000
        and numbers["grpo"]["steps"] == REFERENCE_GRPO["max_steps"]
    )
    for name in ("sft", "grpo"):
        weights = REFERENCE_DIR / name / "checkpoint" / "model.safetensors"
        assert weights.is_file() and weights.stat().st_size <= 25 * 2**20
    assert (
        card["commands"]
        and card["commit"]
        and card["device"]
        # a reference made before its run wrote the trajectories itself lacks their time
        and {"sft", "grpo", "comparison", "passk"}
        <= set(card["wall_seconds"])
        <= {"trajectories", "chains", "sft", "grpo", "comparison", "passk"}
    )


def test_run_reference_runs_each_stage_at_full_length_once(tmp_path, monkeypatch):
    """The stages get the full-length, resumable settings, in order; a finished stage is skipped."""
    from vsearcher_lite import reference_run as reference
    from vsearcher_lite.evaluation import comparison
    from vsearcher_lite.rl import grpo
    from vsearcher_lite.synthesis import trajectories
    from vsearcher_lite.training import sft

    calls, written = [], {"rollouts": 40}

    def finished(name, config):
        calls.append((name, config))
        (tmp_path / name / "checkpoint").mkdir(parents=True, exist_ok=True)
        (tmp_path / name / "checkpoint" / "config.json").write_text("{}")
        (tmp_path / name / "metrics.json").write_text("{}")

    def teacher(run, config):
        calls.append(("trajectories", config))
        (tmp_path / "trajectories").mkdir(exist_ok=True)
        # as the stage does: its metrics time only what this call did
        made = 80.0 if written["rollouts"] else 0.001
        (tmp_path / "trajectories" / "metrics.json").write_text(f'{{"seconds": {made}}}')
        return {"generated_this_run": written["rollouts"], "n_accepted": 30,
                "n_distinct_accepted": 20}

    monkeypatch.setattr(trajectories, "generate_trajectories", teacher)

    monkeypatch.setattr(sft, "run_sft", lambda run, config, log: finished("sft", config))
    monkeypatch.setattr(grpo, "run_grpo", lambda run, config, log: finished("grpo", config))
    monkeypatch.setattr(
        comparison, "run_comparison", lambda run, config, log: finished("comparison", config)
    )
    monkeypatch.setattr(reference, "run_passk",
                        lambda run, device, seed, log: finished("passk", device))
    seconds = reference.run_reference(tmp_path, device="cpu", log=lambda _: None)
    assert [name for name, _ in calls] == ["trajectories", "sft", "grpo", "comparison", "passk"]
    assert set(seconds) == {"trajectories", "sft", "grpo", "comparison", "passk"}
    teacher_config, sft_config, grpo_config, comparison_config, passk_device = (
        c for _, c in calls)
    assert all(getattr(teacher_config, k) == v for k, v in REFERENCE_TRAJECTORIES.items())
    assert teacher_config.samples_per_task == 4 and teacher_config.seed == 0
    assert passk_device == "cpu"
    # GRPO on the paper's levels, every RL-pool task pre-screened, no KL term
    assert grpo_config.difficulty_mix == {"easy": 4, "medium": 3, "hard": 3}
    assert grpo_config.prescreen_tasks is None and grpo_config.beta == 0.0
    assert grpo_config.generations == 8 and grpo_config.clip_high > grpo_config.clip_low
    assert sft_config.max_steps is None and sft_config.epochs == 2.0 and sft_config.minutes is None
    # the cpu recipe
    assert sft_config.save_every and sft_config.device == "cpu" and sft_config.learning_rate == 1e-3
    assert (
        grpo_config.max_steps == REFERENCE_GRPO["max_steps"] and grpo_config.total_minutes is None
    )
    assert (
        grpo_config.save_every
        and grpo_config.curriculum == "prescreen"
        and grpo_config.temperature == 1.0
    )
    assert grpo_config.task_source == "rl" and grpo_config.dynamic_sampling
    assert comparison_config.exam_max_tasks is None and comparison_config.heldout_max_tasks >= 10**6
    assert comparison_config.eval_overrides == {"device": "cpu"}

    calls.clear()
    (tmp_path / "sft" / "metrics.json").write_text('{"seconds": 801.26}')
    # a resume with no step left ...
    (tmp_path / "grpo" / "metrics.json").write_text('{"seconds": 3.0}')
    # ... after two steps
    (tmp_path / "grpo" / "steps.csv").write_text("step,seconds\n0,95.5\n1,190.25\n")
    written["rollouts"] = 0  # the stored rollouts are read again, the stage's time kept ...
    for _ in range(2):  # ... however often the run resumes
        assert reference.run_reference(tmp_path, device="cpu", log=lambda _: None) == {
            "trajectories": 80.0,
            "sft": 801.3,
            "grpo": 190.2,
        }
    assert [name for name, _ in calls] == ["trajectories", "trajectories"]
    # rollouts of other settings under a finished SFT stage: the run folder is refused
    written["rollouts"] = 12
    with pytest.raises(InputError, match="trained on trajectories of other settings"):
        reference.run_reference(tmp_path, device="cpu", log=lambda _: None)


def test_a_recipe_with_chains_trains_sft_on_them_and_builds_the_evaluation_tasks(tmp_path,
                                                                                monkeypatch):
    """With ``[chains]`` the first stage pools training chains into ``RUN_DIR/chains`` (its
    settings on top of the stage's defaults), then builds the evaluation world's tasks; SFT trains
    on the pooled file; a resumed run adds the stage's new time to the time recorded before."""
    from vsearcher_lite import reference_run as reference
    from vsearcher_lite.evaluation import benchmarks, comparison
    from vsearcher_lite.rl import grpo
    from vsearcher_lite.synthesis import chains, trajectories
    from vsearcher_lite.training import sft

    calls = []

    def pooled(out, config, log):
        calls.append(("chains", out, config))
        return {"distinct_trajectories": 60, "n_worlds": 2}

    def finished(name, config):
        calls.append((name, config))
        (tmp_path / name / "checkpoint").mkdir(parents=True, exist_ok=True)
        (tmp_path / name / "checkpoint" / "config.json").write_text("{}")
        (tmp_path / name / "metrics.json").write_text("{}")

    monkeypatch.setattr(reference, "REFERENCE_CHAINS", {"trajectories": 60, "max_repeats": 1})
    monkeypatch.setattr(chains, "run_chains", pooled)
    monkeypatch.setattr(benchmarks, "ensure_sandbox_eval_tasks",
                        lambda run, profile, seed, progress: calls.append(("tasks", run, seed)))
    monkeypatch.setattr(trajectories, "generate_trajectories",
                        lambda run, config: pytest.fail("no teacher stage with chains"))
    monkeypatch.setattr(sft, "run_sft", lambda run, config, log: finished("sft", config))
    monkeypatch.setattr(grpo, "run_grpo", lambda run, config, log: finished("grpo", config))
    monkeypatch.setattr(comparison, "run_comparison",
                        lambda run, config, log: finished("comparison", config))
    monkeypatch.setattr(reference, "run_passk",
                        lambda run, device, seed, log: finished("passk", device))
    seconds = reference.run_reference(tmp_path, device="cpu", seed=3, log=lambda _: None)
    assert [c[0] for c in calls] == ["chains", "tasks", "sft", "grpo", "comparison", "passk"]
    (_, out, config), tasks, (_, sft_config) = calls[:3]
    assert out == tmp_path / "chains" and config.trajectories == 60 and config.max_repeats == 1
    assert config.entities == chains.ChainConfig().entities  # the rest at the stage's defaults
    assert tasks == ("tasks", tmp_path, 3)
    assert sft_config.train_file == str(tmp_path / "chains" / chains.POOLED)
    assert sft_config.epochs == REFERENCE_SFT["epochs"]  # the recipe's other SFT settings kept
    assert set(seconds) == {"chains", "sft", "grpo", "comparison", "passk"}
    (tmp_path / reference.CHAINS_SECONDS).write_text('{"seconds": 200.0}')  # built before
    again = reference.run_reference(tmp_path, device="cpu", log=lambda _: None)
    assert set(again) == {"chains"} and 200.0 <= again["chains"] < 260.0  # the rest finished


def test_passk_samples_the_sft_and_rl_models_on_the_validation_split(tmp_path, monkeypatch):
    """``run_passk`` evaluates each model K times on ``filter/validation.jsonl`` at the reference's
    temperature, under the names the card reads; without the split it names the command."""
    from vsearcher_lite import reference_run as reference
    from vsearcher_lite.agent.task import Task
    from vsearcher_lite.scoring import passk

    with pytest.raises(InputError, match="validation.jsonl does not exist: run `vsearcher-lite "
                                         "filter"):
        reference.run_passk(tmp_path, device="cpu", log=lambda _: None)
    task = Task(id="v0", question="q?", answer="a", difficulty="easy", split="validation")
    write_jsonl(tmp_path / "filter" / "validation.jsonl", [task.to_dict()])
    calls = []

    def fake(run_dir, tasks, policy, *, config, samples, benchmark, name):
        calls.append((policy, name, samples, config.temperature, [t.id for t in tasks]))
        return {"n_samples": samples, "n_tasks": 1, "pass_at_1": 0.5,
                "pass_at_k": {"1": 0.5, str(samples): 1.0}}

    monkeypatch.setattr(passk, "evaluate_samples", fake)
    metrics = reference.run_passk(tmp_path, device="cpu", log=lambda _: None)
    k, temperature = REFERENCE_PASSK["samples"], REFERENCE_PASSK["temperature"]
    assert [c[1] for c in calls] == ["validation-sft", "validation-rl"]
    assert calls[0][0].endswith("sft/checkpoint") and calls[1][0].endswith("grpo/checkpoint")
    assert all(c[2:] == (k, temperature, ["v0"]) for c in calls) and temperature > 0
    assert metrics["policies"]["rl"]["pass_at_k"][str(k)] == 1.0
    assert json.loads((tmp_path / "passk" / "metrics.json").read_text())["temperature"] == 1.0


def readme_reference_rows(numbers: dict, card: dict) -> list[str]:
    """The README's table of the shipped reference, as it must read from the reference's files."""
    top, heldout = numbers["headline"], numbers["policies"]["heldout"]
    exam = numbers["policies"]["exam"]
    pairs, passk, grpo = numbers["paired_heldout"], numbers["passk"], numbers["grpo"]

    def by_level(policy: str) -> str:
        levels = heldout[policy]["by_difficulty"]
        return " / ".join(f"{levels[lv]['accuracy']:.3f}" for lv in ("easy", "medium", "hard"))

    def pair(d: dict) -> str:
        return f"{d['mean']:+.3f} (SE {d['se']:.3f}; {d['gained']} gained, {d['lost']} lost)"

    k = passk["sft"]["n_samples"]
    screened = numbers["prescreen"]
    minutes = {stage: round(s / 60) for stage, s in card["wall_seconds"].items()}
    return [
        f"| held-out easy + medium + hard, {top['sft']['n_tasks']} tasks | base "
        f"{top['base']['pass_at_1']:.3f}, SFT "
        f"{top['sft']['pass_at_1']:.3f}, RL {top['rl']['pass_at_1']:.3f}, teacher "
        f"{top['teacher']['pass_at_1']:.3f} |",
        f"| easy / medium / hard | SFT {by_level('sft')}; RL {by_level('rl')}; teacher "
        f"{by_level('teacher')} |",
        f"| SFT - base, RL - SFT | {pair(pairs['sft_minus_base'])}; "
        f"{pair(pairs['rl_minus_sft'])} |",
        f"| one-hop warm-up, {heldout['sft']['by_difficulty']['onehop']['n_tasks']} tasks | SFT "
        f"{heldout['sft']['by_difficulty']['onehop']['accuracy']:.3f}, RL "
        f"{heldout['rl']['by_difficulty']['onehop']['accuracy']:.3f} |",
        f"| exam, all {exam['teacher']['n_tasks']} tasks | teacher "
        f"{exam['teacher']['pass_at_1']:.3f}; SFT {exam['sft']['pass_at_1']:.3f}, RL "
        f"{exam['rl']['pass_at_1']:.3f} |",
        f"| validation, {passk['sft']['n_tasks']} tasks: Pass@1 -> Pass@{k} | SFT "
        f"{passk['sft']['pass_at_1']:.3f} -> "
        f"{passk['sft']['pass_at_k'][str(k)]:.3f}, RL {passk['rl']['pass_at_1']:.3f} -> "
        f"{passk['rl']['pass_at_k'][str(k)]:.3f} |",
        f"| GRPO, {grpo['steps']} steps | tasks solved sometimes in the pre-screen: "
        + ", ".join(f"{lv} {s['mixed']} of {s['screened']}" for lv, s in screened.items())
        + f"; sampled reward {grpo['reward_first_20pct']:.2f} -> "
        f"{grpo['reward_last_20pct']:.2f} |",
        f"| wall time | SFT {minutes['sft']} min, GRPO {minutes['grpo']} min, evaluation "
        f"{minutes['comparison']} min, Pass@k {minutes['passk']} min |",
    ]


def test_the_readme_states_the_shipped_reference():
    """Every number of the README's reference table is the shipped card's, recomputed."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    numbers = headline_numbers(REFERENCE_DIR)
    for row in readme_reference_rows(numbers, read_card(REFERENCE_DIR)):
        assert row in readme, f"the README should read: {row}"
