"""Pass@k: the unbiased estimator, its per-level metrics, K sampled evaluations and
`vsearcher-lite eval --samples K`."""

import json
import random
from dataclasses import replace
from itertools import combinations
from math import comb

import pytest
from agent_fakes import answer, build_sandbox_run, fresh_run, make_toolbox

from vsearcher_lite.agent.task import Task
from vsearcher_lite.chat import ChatBackend
from vsearcher_lite.cli import main
from vsearcher_lite.config import EvalConfig, task_seed
from vsearcher_lite.runio import InputError
from vsearcher_lite.scoring.passk import (
    default_ks,
    evaluate_samples,
    pass_at_k,
    passk_metrics,
)

# ---------------------------------------------------------------------------------------------
# The estimator


def brute_pass_at_k(n, c, k):
    """The share of the k-subsets of n samples (the first c correct) holding a correct one."""
    subsets = list(combinations(range(n), k))
    return sum(1 for s in subsets if any(i < c for i in s)) / len(subsets)


def test_pass_at_k_is_the_share_of_k_subsets_with_a_correct_sample():
    checked = 0
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(n, c, k), abs=1e-12)
                checked += 1
    assert checked == sum(n * (n + 1) for n in range(1, 8))


def test_pass_at_k_is_stable_for_many_samples_and_checks_its_arguments():
    exact = 1 - comb(990, 500) / comb(1000, 500)  # exact big integers, then one division
    assert pass_at_k(1000, 10, 500) == pytest.approx(exact, rel=1e-9)
    assert pass_at_k(1000, 1, 1) == pytest.approx(0.001)
    for bad in ((3, 4, 1), (3, 1, 0), (3, 1, 4), (3, -1, 1)):
        with pytest.raises(ValueError):
            pass_at_k(*bad)


# ---------------------------------------------------------------------------------------------
# Metrics from hand-made records

# task -> (level, correct in samples 1, 2, 3)
HAND = {
    "a": ("easy", (True, True, True)),
    "b": ("easy", (True, False, False)),
    "c": ("hard", (False, False, False)),
    "d": ("hard", (False, True, True)),
    "e": ("exam", (False, False, True)),
}


def hand_samples(shuffle_seed=0):
    rng = random.Random(shuffle_seed)
    samples = []
    for s in range(3):
        records = [{"id": t, "difficulty": level, "question": f"Q {t}?", "answer": "x",
                    "correct": marks[s]} for t, (level, marks) in HAND.items()]
        rng.shuffle(records)  # matched by task id, not by position
        samples.append(records)
    return samples


def test_passk_metrics_per_level_with_mixed_tasks():
    m = passk_metrics(hand_samples(), names=["x-s1", "x-s2", "x-s3"])
    assert (m["n_samples"], m["ks"], m["n_tasks"]) == (3, [1, 2, 3], 5)
    assert list(m["by_level"]) == ["easy", "hard", "exam"]  # the levels' order
    easy, hard, exam = (m["by_level"][lvl] for lvl in ("easy", "hard", "exam"))
    # easy: a 3/3, b 1/3 -> Pass@2 of b is 1 - C(2,2)/C(3,2) = 2/3
    assert easy["n_tasks"] == 2 and easy["pass_at_1"] == round((1 + 1 / 3) / 2, 4)
    assert easy["pass_at_k"] == {"1": 0.6667, "2": 0.8333, "3": 1.0}
    # hard: c 0/3, d 2/3 -> Pass@2 of d is 1 (any two samples hold a correct one)
    assert hard["pass_at_k"] == {"1": 0.3333, "2": 0.5, "3": 0.5}
    assert exam["pass_at_k"] == {"1": 0.3333, "2": 0.6667, "3": 1.0}
    assert m["mixed_by_level"] == {"easy": 1, "hard": 1, "exam": 1} and m["mixed"] == 3
    assert (m["all_correct"], m["none_correct"]) == (1, 1)
    assert m["pass_at_1"] == m["pass_at_k"]["1"] == round(7 / 15, 4)  # mean correctness
    assert m["pass_at_k"]["3"] == 0.8  # every task but c
    assert m["pass_at_1_by_sample"] == {"x-s1": 0.4, "x-s2": 0.4, "x-s3": 0.6}
    assert m["correct_by_task"] == {"a": 3, "b": 1, "c": 0, "d": 2, "e": 1}
    assert passk_metrics(hand_samples(1))["pass_at_k"] == m["pass_at_k"]
    only = passk_metrics(hand_samples(), ks=[2])
    assert only["ks"] == [2] and set(only["by_level"]["easy"]["pass_at_k"]) == {"2"}


def test_passk_metrics_refuses_samples_of_other_tasks():
    names = ["x-s1", "x-s2", "x-s3"]
    lacking = hand_samples()
    lacking[1] = [r for r in lacking[1] if r["id"] != "c"]
    with pytest.raises(InputError, match="sample 'x-s2' lacks tasks of sample 'x-s1' \\(c\\)"):
        passk_metrics(lacking, names=names)
    extra = hand_samples()
    extra[2].append({"id": "z", "difficulty": "easy", "correct": True})
    with pytest.raises(InputError, match="sample 'x-s3' has tasks not in sample 'x-s1' \\(z\\)"):
        passk_metrics(extra, names=names)
    moved = hand_samples()
    next(r for r in moved[1] if r["id"] == "a")["difficulty"] = "hard"
    with pytest.raises(InputError, match="sample 'x-s2' has other questions.*\\(a\\)"):
        passk_metrics(moved, names=names)
    twice = hand_samples()
    twice[0].append(dict(twice[0][0]))
    with pytest.raises(InputError, match="sample 'x-s1': task .* more than once"):
        passk_metrics(twice, names=names)
    with pytest.raises(InputError, match="1 <= k <= 3"):
        passk_metrics(hand_samples(), ks=[4])
    assert default_ks(2) == [1, 2] and default_ks(16) == [1, 2, 4, 8, 16]


# ---------------------------------------------------------------------------------------------
# K evaluations of a policy whose answer depends on its sampling seed


class SeededChat(ChatBackend):
    """Answers right when the episode's sampling seed is even; keeps every seed it saw."""

    name = "seeded"

    def __init__(self):
        self.seeds = []

    def chat(self, messages, **sampling):
        self.seeds.append(sampling["seed"])
        return answer("1874" if sampling["seed"] % 2 == 0 else "1900")


def founding_tasks():
    return [Task(id=f"t{i}", question=f"In which year was town {i} founded?", answer="1874",
                 difficulty=("easy", "hard")[i % 2], split="heldout") for i in range(6)]


def eval_config(**kw):
    return EvalConfig.for_profile("cpu", progress=False, **kw)


def test_each_sample_samples_with_its_own_seed_and_a_rerun_resumes(tmp_path):
    tasks, chat = founding_tasks(), SeededChat()
    config = eval_config(temperature=0.8, seed=5)
    m = evaluate_samples(tmp_path, tasks, chat, config=config, samples=4, name="seeded",
                         toolbox=make_toolbox([]))
    # one episode (one turn) per task and sample, each with the task's seed under seed 5 + i
    expected = {(s, t.id): task_seed(s, t.id) for s in range(5, 9) for t in tasks}
    assert sorted(chat.seeds) == sorted(expected.values())
    assert config.seed == 5  # the caller's config is not changed
    counts = {t.id: sum(1 for s in range(5, 9) if expected[s, t.id] % 2 == 0) for t in tasks}
    assert m["correct_by_task"] == counts and m["evaluated_this_run"] == 24
    assert m["mixed"] == sum(1 for c in counts.values() if 0 < c < 4) > 0
    assert [s["seed"] for s in m["samples"]] == [5, 6, 7, 8]
    stored = json.loads((tmp_path / "eval" / "seeded" / "passk.json").read_text())
    assert stored["pass_at_k"] == m["pass_at_k"] and stored["by_level"] == m["by_level"]
    for i in range(1, 5):
        identity = json.loads((tmp_path / "eval" / f"seeded-s{i}" / "config.json").read_text())
        assert identity["seed"] == 4 + i and identity["temperature"] == 0.8
    again = evaluate_samples(tmp_path, tasks, chat, config=config, samples=4, name="seeded",
                             toolbox=make_toolbox([]))
    assert again["evaluated_this_run"] == 0 and len(chat.seeds) == 24
    assert again["by_level"] == m["by_level"]
    # other settings under the same names: refused before any sample runs
    with pytest.raises(InputError, match="seeded-s1 holds results made with other settings"):
        evaluate_samples(tmp_path, tasks, chat, config=replace(config, temperature=0.7),
                         samples=4, name="seeded", toolbox=make_toolbox([]))
    assert len(chat.seeds) == 24


def test_greedy_or_single_samples_are_refused_before_anything_runs(tmp_path):
    chat = SeededChat()
    with pytest.raises(InputError, match="temperature is 0"):
        evaluate_samples(tmp_path, founding_tasks(), chat, config=eval_config(temperature=0),
                         samples=3, name="greedy", toolbox=make_toolbox([]))
    with pytest.raises(InputError, match="at least 2"):
        evaluate_samples(tmp_path, founding_tasks(), chat, config=eval_config(temperature=0.6),
                         samples=1, name="one", toolbox=make_toolbox([]))
    assert chat.seeds == [] and not (tmp_path / "eval").exists()


# ---------------------------------------------------------------------------------------------
# The command, with the heuristic teacher on a small sandbox run


@pytest.fixture(scope="module")
def sandbox_run(tmp_path_factory):
    base = build_sandbox_run(tmp_path_factory.mktemp("passk-base"))
    return fresh_run(base, tmp_path_factory.mktemp("passk"))


def results_of(path):
    latest = {}
    for line in path.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            latest[record["id"]] = record
    return latest


def eval_args(run, *more):
    return ["eval", "--run-dir", str(run), "--benchmark", str(run / "inject-image" / "tasks.jsonl"),
            "--format", "task", "--limit", "9", *more]


def test_eval_samples_command_writes_passk_from_the_sample_results(sandbox_run, capsys):
    code = main(eval_args(sandbox_run, "--name", "pk", "--temperature", "0.6", "--samples", "3"))
    out = capsys.readouterr().out
    assert code == 0, out
    passk = json.loads((sandbox_run / "eval" / "pk" / "passk.json").read_text())
    samples = [results_of(sandbox_run / "eval" / f"pk-s{i}" / "results.jsonl") for i in (1, 2, 3)]
    ids = list(samples[0])
    assert len(ids) == 9 and all(set(s) == set(ids) for s in samples)
    counts = {i: sum(1 for s in samples if s[i]["correct"]) for i in ids}
    levels = {i: samples[0][i]["difficulty"] for i in ids}
    assert passk["n_tasks"] == 9 and passk["ks"] == [1, 2, 3]
    assert set(passk["by_level"]) == set(levels.values())
    for level, got in passk["by_level"].items():
        mine = [counts[i] for i in ids if levels[i] == level]
        assert got["n_tasks"] == len(mine)
        assert got["pass_at_1"] == pytest.approx(sum(mine) / (3 * len(mine)), abs=1e-4)
        for k in (1, 2, 3):
            brute = sum(1 - comb(3 - c, k) / comb(3, k) for c in mine) / len(mine)
            assert got["pass_at_k"][str(k)] == pytest.approx(brute, abs=1e-4)
        assert got["mixed"] == sum(1 for c in mine if 0 < c < 3)
        line = next(x for x in out.splitlines() if x.split()[1:2] == [level])
        assert int(line.split()[2]) == len(mine)
    for i in (1, 2, 3):
        metrics = json.loads((sandbox_run / "eval" / f"pk-s{i}" / "metrics.json").read_text())
        assert passk["pass_at_1_by_sample"][f"pk-s{i}"] == metrics["pass_at_1"]
        assert metrics["settings"]["seed"] == i - 1 and metrics["settings"]["temperature"] == 0.6
    assert "27 episode(s) run" in out and "passk.json" in out
    sizes = [len((sandbox_run / "eval" / f"pk-s{i}" / "results.jsonl").read_text())
             for i in (1, 2, 3)]
    # a rerun with the same settings resumes: no episode runs, the numbers stay
    code = main(eval_args(sandbox_run, "--name", "pk", "--temperature", "0.6", "--samples", "3"))
    out = capsys.readouterr().out
    assert code == 0 and "0 episode(s) run" in out
    assert sizes == [len((sandbox_run / "eval" / f"pk-s{i}" / "results.jsonl").read_text())
                     for i in (1, 2, 3)]
    again = json.loads((sandbox_run / "eval" / "pk" / "passk.json").read_text())
    assert again["by_level"] == passk["by_level"] and again["evaluated_this_run"] == 0


def test_eval_samples_command_user_errors_are_one_line(sandbox_run, capsys):
    code = main(eval_args(sandbox_run, "--name", "greedy", "--temperature", "0", "--samples", "3"))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "temperature is 0" in err
    assert not any((sandbox_run / "eval").glob("greedy*"))
    code = main(eval_args(sandbox_run, "--name", "one", "--temperature", "0.6", "--samples", "1"))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "at least 2" in err
    code = main(["eval", "--run-dir", str(sandbox_run), "--compare", "--samples", "2"])
    assert code == 2 and "leave it out of --compare" in capsys.readouterr().err
