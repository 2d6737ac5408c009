"""Rejection sampling end to end on a small sandbox: metrics, resumability, replay, exports, CLI."""

import json
from pathlib import Path

import pytest
from agent_fakes import build_sandbox_run, fresh_run, image_tasks

from vsearcher_lite.agent.export import sharegpt_problems
from vsearcher_lite.agent.format import strict_format_check
from vsearcher_lite.agent.judge import LLMJudge
from vsearcher_lite.agent.loop import TERMINATIONS
from vsearcher_lite.agent.protocol import system_prompt
from vsearcher_lite.chat import ScriptedChat
from vsearcher_lite.runio import InputError
from vsearcher_lite.synthesis.trajectories import (
    TrajectoryConfig,
    generate_trajectories,
    load_accepted,
    load_rollouts,
    replay_accepted,
)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return build_sandbox_run(tmp_path_factory.mktemp("traj"))


def config(run, **kw):
    kw.setdefault("task_file", str(run / "inject-image" / "tasks.jsonl"))  # every difficulty
    kw.setdefault("samples_per_task", 4)  # as the reference samples: repeats to count
    return TrajectoryConfig.for_profile("cpu", progress=False, **kw)


@pytest.fixture(scope="module")
def done(base, tmp_path_factory):
    run = fresh_run(base, tmp_path_factory.mktemp("done"))
    metrics = generate_trajectories(run, config(run))
    return run, metrics


def test_metrics_meet_the_acceptance_claims(done):
    run, m = done
    tasks = image_tasks(run)
    assert m["n_tasks"] == len(tasks) and m["n_trajectories"] == config(run).samples_per_task * len(
        tasks
    )
    assert 0 < m["acceptance_rate"] < 1 and m["n_accepted"] == round(
        m["acceptance_rate"] * m["n_trajectories"]
    )
    calls = m["mean_tool_calls"]
    assert calls["easy"] < calls["medium"] < calls["hard"], calls
    assert (
        set(m["terminations"]) == set(TERMINATIONS)
        and sum(m["terminations"].values()) == m["n_trajectories"]
    )
    assert set(m["acceptance_rate_by_difficulty"]) == {"easy", "medium", "hard"}
    assert m["tool_calls_by_type"]["image_search"] == m["n_trajectories"]
    assert (
        json.loads((run / "trajectories" / "metrics.json").read_text())["n_accepted"]
        == m["n_accepted"]
    )
    assert m["settings"]["prompt_variant"] == "compact" and m["settings"]["top_k"] == 3
    # the default teacher repeats a task's path: distinct trajectories are fewer than accepted
    accepted = [json.loads(line) for line in open(run / "trajectories" / "accepted.jsonl")]
    by_task = {}
    for t in accepted:
        by_task.setdefault(t["task_id"], set()).add(json.dumps(t["messages"], sort_keys=True))
    distinct = sum(len(v) for v in by_task.values())
    assert m["n_distinct_accepted"] == distinct < m["n_accepted"]
    assert sum(v["n_distinct_accepted"] for v in m["by_difficulty"].values()) == distinct


def test_accepted_trajectories_pass_the_format_check_are_correct_and_replay(done):
    run, m = done
    accepted = load_accepted(run)
    assert len(accepted) == m["n_accepted"] > 0
    for t in accepted:
        assert t.termination == "answer" and t.meta["correct"] is True
        assert all(
            strict_format_check(msg["content"]).ok
            for msg in t.messages
            if msg["role"] == "assistant"
        )
        assert t.messages[0]["content"] == system_prompt("2025-09-01", variant="compact")
    report = replay_accepted(run, config(run))  # fresh tools, no cache
    assert report["n_checked"] == len(accepted) and report["n_tool_calls"] > 0
    assert report["mismatches"] == []


def test_rejected_trajectories_are_kept_in_the_log_with_their_verdict(done):
    run, m = done
    rollouts = load_rollouts(run)
    rejected = [r for r in rollouts if not r["accepted"]]
    assert len(rejected) == m["n_trajectories"] - m["n_accepted"] > 0
    assert all(
        r["trajectory"]["meta"]["judge"]["correct"] is False for r in rejected if r["format_ok"]
    )
    rows = (run / "trajectories" / "rollouts.csv").read_text().splitlines()
    assert (
        rows[0].startswith("key,task_id,sample_index,difficulty,n_tool_calls")
        and len(rows) == m["n_trajectories"] + 1
    )


def test_exports_are_written_and_valid(done):
    run, m = done
    export = run / "trajectories" / "export"
    assert m["export"]["n_exported"] == m["n_accepted"] and m["export"]["invalid_sharegpt"] == []
    records = json.loads((export / "llamafactory" / "trajectory.json").read_text())
    assert len(records) == m["n_accepted"] and all(sharegpt_problems(r) == [] for r in records)
    assert len((export / "sft_trl.jsonl").read_text().splitlines()) == m["n_accepted"]


def conversation_texts(trajs):
    """The conversations with image paths cut to file names (the two runs live in different
    folders)."""
    from pathlib import Path

    from vsearcher_lite.agent.protocol import content_with_placeholders, message_images

    return [
        [
            (m["role"], content_with_placeholders(m), [Path(p).name for p in message_images(m)])
            for m in t.messages
        ]
        for t in trajs
    ]


def test_rerun_is_resumable_and_deterministic(done, base, tmp_path):
    run, m = done
    again = generate_trajectories(run, config(run))
    assert again["generated_this_run"] == 0 and again["n_accepted"] == m["n_accepted"]
    # a second run dir from scratch gives the same accepted set (determinism), and a run that
    # lost part of its log redoes only the missing part
    other = fresh_run(base, tmp_path)
    first = generate_trajectories(other, config(other))
    assert conversation_texts(load_accepted(other)) == conversation_texts(load_accepted(run))
    log = other / "trajectories" / "rollouts.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:5]) + lines[5][: len(lines[5]) // 2])  # a crash mid-append
    resumed = generate_trajectories(other, config(other))
    assert resumed["generated_this_run"] == first["n_trajectories"] - 5
    assert resumed["n_accepted"] == first["n_accepted"]


def test_distinct_trajectories_are_counted_as_written(done, base, tmp_path, monkeypatch):
    # one sample names its picture by the run folder's absolute path, the others (read back
    # through a relative run folder) by a relative one: the same trajectory once written
    run, m = done
    other = fresh_run(base, tmp_path)
    generate_trajectories(other, config(other))
    log = other / "trajectories" / "rollouts.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    written = [json.dumps(r["trajectory"]["messages"]) for r in records]
    twice = next(r for r, w in zip(records, written) if r["accepted"] and written.count(w) > 1)
    picture = twice["trajectory"]["messages"][1]["content"][0]
    assert not Path(picture["image"]).is_absolute()
    picture["image"] = str(other.resolve() / picture["image"])
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    monkeypatch.chdir(other.parent)
    again = generate_trajectories(other.name, config(Path(other.name)))
    assert again["generated_this_run"] == 0
    assert again["n_distinct_accepted"] == m["n_distinct_accepted"]


def test_tool_calls_are_cached_in_the_run(done):
    run, m = done
    assert m["tool_cache"]["entries"] > 0 and m["tool_cache"]["misses"] > 0


def test_any_judge_can_do_the_rejection(base, tmp_path):
    run = fresh_run(base, tmp_path)
    judge_chat = ScriptedChat(lambda messages: "extracted_final_answer: x\ncorrect: no")
    m = generate_trajectories(
        run, config(run, max_tasks=3, samples_per_task=1), judge=LLMJudge(judge_chat)
    )
    assert m["n_accepted"] == 0 and m["judge"] == "llm" and len(judge_chat.calls) == 3


def test_an_llm_teacher_through_the_stage(base, tmp_path):
    """A chat-model teacher over a loopback server: broken replies are counted, not fatal."""
    from servers import ReplayChatServer

    run = fresh_run(base, tmp_path)
    tasks = image_tasks(run)[:4]

    def reply(body):
        # a teacher that searches once, then gives a fixed answer; every other episode breaks the
        # format
        n_assistant = sum(1 for m in body["messages"] if m["role"] == "assistant")
        question = str(body["messages"][1]["content"])
        if n_assistant == 0:
            return (
                "<think>Search the image.</think>\n"
                '<tool_call>\n{"name": "image_search", "arguments": {}}\n</tool_call>'
            )
        if tasks[0].question in question or tasks[2].question in question:
            return "<think>Done.</think><answer>unknown</answer>"
        return "The answer is probably 1874."

    with ReplayChatServer([reply] * 20) as server:
        cfg = config(
            run, teacher=f"openai:teacher@{server.base_url}", samples_per_task=1, concurrency=2
        )
        m = generate_trajectories(run, cfg, tasks=tasks)
    assert m["n_trajectories"] == 4 and m["n_accepted"] == 0
    assert m["terminations"]["format_error"] == 2 and m["terminations"]["answer"] == 2
    assert m["tool_calls_by_type"] == {"image_search": 4}


def test_heuristic_teacher_is_refused_in_the_live_world(tmp_path):
    with pytest.raises(InputError, match="only works in the sandbox"):
        generate_trajectories(
            tmp_path,
            TrajectoryConfig.for_profile("cpu", world="live", progress=False, export=False),
            tasks=image_tasks_stub(),
            toolbox_factory=lambda: None,
        )


def image_tasks_stub():
    from vsearcher_lite.agent.task import Task

    return [Task(id="x", question="q?", answer="a")]


def test_cli_runs_the_stage_and_names_bad_inputs(base, tmp_path, capsys):
    from vsearcher_lite.cli import main

    run = fresh_run(base, tmp_path)
    code = main(["trajectories", "--run-dir", str(run), "--max-tasks", "4", "--samples", "1"])
    out = capsys.readouterr().out
    assert code == 0 and "accepted" in out and (run / "trajectories" / "metrics.json").exists()
    assert json.loads((run / "trajectories" / "metrics.json").read_text())["n_trajectories"] == 4

    bad = tmp_path / "bad"
    (bad / "filter").mkdir(parents=True)
    (bad / "filter" / "train.jsonl").write_text(
        '{"id": "t1", "question": "q?", "answer": "a"}\n{"id": "t2"}\n'
    )
    code = main(["trajectories", "--run-dir", str(bad)])
    err = capsys.readouterr().err
    assert code == 2 and "train.jsonl:2" in err and "answer" in err
