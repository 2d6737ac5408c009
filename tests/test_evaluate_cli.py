"""`vsearcher-lite eval` and the evaluation of the heuristic teacher over a small sandbox run."""

import json

import pytest

from vsearcher_lite.cli import main
from vsearcher_lite.evaluation.benchmarks import ensure_sandbox_eval_tasks, load_benchmark
from vsearcher_lite.scoring import evaluate as ev


@pytest.fixture(scope="module")
def sandbox_run(tmp_path_factory):
    """A 400-entity world with filtered train / held-out / exam files (about 3 s to build)."""
    from vsearcher_lite.synthesis.filters import run_filter
    from vsearcher_lite.synthesis.inject import InjectConfig
    from vsearcher_lite.world.store import ensure_world

    run = tmp_path_factory.mktemp("eval") / "run"
    ensure_world(run, 400, 0)
    run_filter(run, inject_config=InjectConfig(n_train=4, n_heldout=15, n_exam=10, progress=False))
    return run


def test_the_teacher_scores_on_sandbox_tasks_and_tool_calls_are_cached(sandbox_run):
    tasks = load_benchmark(sandbox_run / "inject-image" / "tasks.jsonl", "task")[:12]
    config = ev.EvalConfig.for_profile("cpu", progress=False)
    first = ev.evaluate(sandbox_run, tasks, "teacher", config=config, name="teacher-a")
    assert first["n_tasks"] == 12 and 0 < first["pass_at_1"] <= 1
    assert (
        first["mean_tool_calls_by_type"]["image_search"] > 0
        and first["mean_tool_calls_by_type"]["visit"] > 0
    )
    assert first["tool_cache"]["misses"] > 0 and (sandbox_run / "cache" / "tools.sqlite").exists()
    second = ev.evaluate(sandbox_run, tasks, "teacher", config=config, name="teacher-b")
    assert second["tool_cache"]["misses"] == 0 and second["tool_cache"]["hits"] > 0
    a = {
        r["id"]: (r["prediction"], r["correct"]) for r in ev.load_results(sandbox_run, "teacher-a")
    }
    b = {
        r["id"]: (r["prediction"], r["correct"]) for r in ev.load_results(sandbox_run, "teacher-b")
    }
    assert a == b  # deterministic given the seed


def test_eval_command_on_the_run_exam_and_heldout(sandbox_run, capsys):
    expected = ensure_sandbox_eval_tasks(sandbox_run, progress=False)
    code = main(["eval", "--run-dir", str(sandbox_run), "--name", "cli-teacher"])
    out = capsys.readouterr().out
    assert code == 0, out
    metrics = json.loads((sandbox_run / "eval" / "cli-teacher" / "metrics.json").read_text())
    assert metrics["n_tasks"] == len(expected) and metrics["benchmark"] == "sandbox exam + held-out"
    assert f"Pass@1 {metrics['pass_at_1']} ({metrics['n_correct']}/{metrics['n_tasks']})" in out
    assert "cli-teacher" in json.loads((sandbox_run / "eval" / "metrics.json").read_text())
    assert (
        "eval/cli-teacher" in json.loads((sandbox_run / "run_manifest.json").read_text())["stages"]
    )
    # resumes: nothing left to run
    code = main(["eval", "--run-dir", str(sandbox_run), "--name", "cli-teacher"])
    assert code == 0 and "0 episode(s) run" in capsys.readouterr().out


def test_eval_command_check_of_the_run_files(sandbox_run, capsys):
    assert main(["eval", "--run-dir", str(sandbox_run), "--check"]) == 0
    out = capsys.readouterr().out
    assert "heldout.jsonl: format task:" in out and "exam.jsonl: format task:" in out


def test_eval_command_user_errors(sandbox_run, tmp_path, capsys):
    code = main(
        ["eval", "--run-dir", str(sandbox_run), "--policy", f"transformers:{tmp_path}/none/model"]
    )
    assert code == 2 and "no model here" in capsys.readouterr().err
    code = main(["eval", "--run-dir", str(sandbox_run), "--policy", "direct:teacher"])
    assert code == 2 and "direct ablation needs a model" in capsys.readouterr().err
    code = main(["eval", "--run-dir", str(sandbox_run), "--world", "live"])
    assert code == 2 and "--world live needs --policy" in capsys.readouterr().err


def test_a_local_transformers_checkpoint_runs_as_a_policy_and_as_its_direct_ablation(tmp_path):
    from servers import build_tiny_causal_lm

    from vsearcher_lite.agent.task import Task

    model_dir = build_tiny_causal_lm(tmp_path / "tiny-lm")
    tasks = [
        Task(id=f"q{i}", question=f"In which year was town {i} founded?", answer="1874")
        for i in range(2)
    ]
    config = ev.EvalConfig.for_profile("cpu", progress=False, max_tokens=12)
    from agent_fakes import make_toolbox

    m = ev.evaluate(
        tmp_path / "run",
        tasks,
        f"transformers:{model_dir}",
        config=config,
        toolbox=make_toolbox([]),
    )
    assert m["name"] == "tiny-lm" and m["n_tasks"] == 2
    assert sum(m["terminations"].values()) == 2 and m["policy_usage"]["requests"] >= 2
    d = ev.evaluate(
        tmp_path / "run",
        tasks,
        f"direct:transformers:{model_dir}",
        config=config,
        toolbox=make_toolbox([]),
    )
    assert d["name"] == "direct-tiny-lm" and d["tools"] is False and d["mean_tool_calls"] == 0.0
    summary = ev.read_summary(tmp_path / "run")
    assert set(summary) == {"tiny-lm", "direct-tiny-lm"}


def test_an_openai_compatible_endpoint_as_policy_and_as_llm_judge(tmp_path, monkeypatch):
    """Policy and judge over a real HTTP server on 127.0.0.1 speaking the OpenAI wire format."""
    from agent_fakes import answer, call, make_toolbox
    from servers import ReplayChatServer

    from vsearcher_lite.agent.task import Task

    for var in ("VSEARCHER_CHAT_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)

    def reply(body):
        messages = body["messages"]
        if body["model"] == "judge":
            text = (
                messages[-1]["content"]
                if isinstance(messages[-1]["content"], str)
                else str(messages[-1]["content"])
            )
            return "extracted_final_answer: 1874\nreasoning: same year\ncorrect: " + (
                "yes" if "1874" in text.split("Correct answer:")[1] else "no"
            )
        tool_turns = sum(1 for m in messages if m["role"] == "user") - 1
        return call("text_search", {"query": "founded"}) if tool_turns == 0 else answer("1874")

    tasks = [
        Task(id="a", question="In which year was Tope founded?", answer="1874"),
        Task(id="b", question="In which year was Orsk founded?", answer="1901"),
    ]
    with ReplayChatServer([reply] * 8) as server:
        config = ev.EvalConfig.for_profile(
            "single_gpu", progress=False, concurrency=1, judge=f"llm:openai:judge@{server.base_url}"
        )
        m = ev.evaluate(
            tmp_path,
            tasks,
            f"openai:agent-model@{server.base_url}",
            config=config,
            toolbox=make_toolbox([]),
        )
        agent_requests = [
            r["json"] for r in server.requests if r["json"].get("model") == "agent-model"
        ]
    assert m["name"] == "agent-model" and m["judge"] == "llm"
    assert (m["n_correct"], m["pass_at_1"]) == (1, 0.5) and m["mean_tool_calls_by_type"][
        "text_search"
    ] == 1.0
    assert len(agent_requests) == 4 and all(
        r["stop"] == ["<tool_response>"] for r in agent_requests
    )
    assert {r["temperature"] for r in agent_requests} == {0.6} and m["policy_usage"][
        "requests"
    ] == 4
