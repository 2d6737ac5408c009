"""Faults and bad input across the stages: out-of-range counts refused before any work, reruns that
neither mix teachers nor keep transient failures, atomic image copies, no stray folders or lock
files, empty outputs reported as failures, keys in specs masked, and the teacher's token usage."""

import json
import multiprocessing
import os
import subprocess
import sys
import time

import pytest
from agent_fakes import (
    answer,
    build_sandbox_run,
    call,
    fresh_run,
    image_tasks,
    make_images,
    make_toolbox,
    sample_trajectory,
)
from servers import ReplayChatServer

from vsearcher_lite.agent.task import Task
from vsearcher_lite.chat import ChatError, ScriptedChat
from vsearcher_lite.cli import main
from vsearcher_lite.runio import InputError


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return build_sandbox_run(tmp_path_factory.mktemp("reliability"))


def traj_config(run, **kw):
    from vsearcher_lite.synthesis.trajectories import TrajectoryConfig

    kw.setdefault("task_file", str(run / "inject-image" / "tasks.jsonl"))
    return TrajectoryConfig.for_profile("cpu", progress=False, **kw)


def one_line_error(capsys, *needles):
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    for needle in needles:
        assert needle in err, err
    return err


# ---------------------------------------------------------------------------------------------
# Out-of-range counts


@pytest.mark.parametrize(
    "flag, value",
    [("--samples", "0"), ("--samples", "-2"), ("--max-tasks", "-1"), ("--concurrency", "0")],
)
def test_trajectories_refuses_out_of_range_counts_and_keeps_its_outputs(
    base, tmp_path, capsys, flag, value
):
    run = fresh_run(base, tmp_path)
    out = run / "trajectories"
    out.mkdir()
    (out / "accepted.jsonl").write_text('{"kept": true}\n')
    args = [
        "trajectories",
        "--run-dir",
        str(run),
        "--samples",
        "1",
        "--max-tasks",
        "2",
        flag,
        value,
    ]
    assert main(args) == 2
    one_line_error(capsys, flag, value)
    assert (out / "accepted.jsonl").read_text() == '{"kept": true}\n'
    assert sorted(p.name for p in out.iterdir()) == ["accepted.jsonl"]


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--max-attempts", "0"),
        ("--concurrency", "0"),
        ("--limit", "0"),
        ("--entities", "-5"),
        ("--sitelinks-max", "-1"),
    ],
)
def test_synthesis_refuses_out_of_range_counts(flag, value):
    from vsearcher_lite.cli import build_parser
    from vsearcher_lite.synthesis.commands import inject_config, seed_config

    args = build_parser().parse_args(["inject-text", flag, value])
    with pytest.raises(InputError, match=f"{flag} must be at least"):
        inject_config(args)
        seed_config(args)


@pytest.mark.parametrize(
    "flag, value, needle",
    [
        ("--temperature", "-2", "temperature"),
        ("--max-tool-calls", "-1", "--max-tool-calls"),
    ],
)
def test_eval_settings_out_of_range_are_one_line_errors(
    tmp_path, capsys, monkeypatch, flag, value, needle
):
    import vsearcher_lite.evaluation.benchmarks as benchmarks

    monkeypatch.setattr(
        benchmarks,
        "ensure_sandbox_eval_tasks",
        lambda *a, **k: pytest.fail("started the evaluation"),
    )
    run = tmp_path / "run"
    assert main(["eval", "--run-dir", str(run), flag, value]) == 2
    one_line_error(capsys, needle)
    assert not run.exists()


@pytest.mark.parametrize(
    "argv, module, name, needle",
    [
        (
            ["pretrain", "--agent-tasks", "-1"],
            "vsearcher_lite.recipes.pretraining.pretrain",
            "pretrain",
            "--agent-tasks",
        ),
        (["reproduce", "--timeout", "0"], "vsearcher_lite.notebooks", "reproduce", "--timeout"),
    ],
)
def test_other_commands_refuse_out_of_range_counts(
    tmp_path, capsys, monkeypatch, argv, module, name, needle
):
    import importlib

    monkeypatch.setattr(
        importlib.import_module(module), name, lambda *a, **k: pytest.fail("started the work")
    )
    run = tmp_path / "run"
    assert main([*argv, "--run-dir", str(run)]) == 2
    one_line_error(capsys, needle)
    assert not run.exists()


# ---------------------------------------------------------------------------------------------
# Reruns: keyed by what the results depend on, transient failures tried again


def test_a_rerun_with_another_teacher_does_not_mix_rollouts(base, tmp_path):
    from vsearcher_lite.synthesis.trajectories import generate_trajectories, load_rollouts

    run = fresh_run(base, tmp_path)
    first = generate_trajectories(run, traj_config(run, max_tasks=2, samples_per_task=2))
    assert first["teacher"] == "heuristic" and first["n_trajectories"] == 4

    with ReplayChatServer([answer("unknown")] * 10) as server:
        spec = f"openai:teacher@{server.base_url}"
        second = generate_trajectories(
            run, traj_config(run, max_tasks=2, samples_per_task=2, teacher=spec)
        )
        n_requests = len(server.requests)
    # nothing reused from the heuristic teacher
    assert second["generated_this_run"] == 4 == n_requests
    assert (
        second["n_trajectories"] == 4
        and second["teacher"] == spec
        and second["set_aside_rollouts"] == 4
    )
    assert second["terminations"]["answer"] == 4 and second["n_accepted"] == 0
    # back to the heuristic teacher: its own rollouts are still there and reused as they were
    third = generate_trajectories(run, traj_config(run, max_tasks=2, samples_per_task=2))
    assert third["generated_this_run"] == 0 and third["n_accepted"] == first["n_accepted"]
    teachers = [r["identity"]["teacher"] for r in load_rollouts(run)]
    assert teachers == ["heuristic"] * 4 + [spec] * 4


def test_a_rerun_with_other_settings_runs_again(base, tmp_path):
    from vsearcher_lite.synthesis.trajectories import generate_trajectories

    run = fresh_run(base, tmp_path)
    generate_trajectories(run, traj_config(run, max_tasks=2, samples_per_task=1))
    again = generate_trajectories(
        run, traj_config(run, max_tasks=2, samples_per_task=1, mistake_rate=0.5)
    )
    assert again["generated_this_run"] == 2 and again["settings"]["mistake_rate"] == 0.5
    default = generate_trajectories(run, traj_config(run, max_tasks=2, samples_per_task=1))
    assert default["generated_this_run"] == 0  # the first run's rollouts, found again


def failing_then_answering():
    """Two chats of one name: the first cannot reach its server, the second searches and answers."""

    def fail(messages):
        raise ChatError("the chat server at http://127.0.0.1:9/v1 is unreachable")

    down = ScriptedChat(fail)
    up = ScriptedChat(
        lambda messages: call("image_search") if len(messages) < 3 else answer("1874")
    )
    return down, up


def test_trajectories_retry_episodes_that_ended_on_a_policy_error(base, tmp_path):
    from vsearcher_lite.synthesis.trajectories import generate_trajectories

    run = fresh_run(base, tmp_path)
    tasks = image_tasks(run)[:2]
    down, up = failing_then_answering()
    cfg = traj_config(run, samples_per_task=1)
    first = generate_trajectories(run, cfg, tasks=tasks, teacher=down)
    assert first["terminations"]["policy_error"] == 2
    second = generate_trajectories(run, cfg, tasks=tasks, teacher=up)
    assert second["generated_this_run"] == 2 and second["retried_this_run"] == 2
    assert second["terminations"]["policy_error"] == 0 and second["terminations"]["answer"] == 2
    third = generate_trajectories(run, cfg, tasks=tasks, teacher=up)
    assert third["generated_this_run"] == 0


def test_trajectories_cli_fails_when_every_episode_is_a_policy_error(base, tmp_path, capsys):
    run = fresh_run(base, tmp_path)
    with ReplayChatServer([{"status": 404}] * 10) as server:
        code = main(
            [
                "trajectories",
                "--run-dir",
                str(run),
                "--max-tasks",
                "2",
                "--samples",
                "1",
                "--teacher",
                f"openai:teacher@{server.base_url}",
            ]
        )
    assert code == 1
    err = capsys.readouterr().err
    assert "all 2 episodes ended on a policy error" in err and "rerun to retry" in err


def eval_task(tmp_path):
    q, hits = make_images(tmp_path / "images")
    task = Task(
        id="t1",
        question="In which year was the town shown in the image founded?",
        answer="1874",
        image_path=q,
        difficulty="easy",
        split="heldout",
    )
    return task, hits


def test_eval_retries_tasks_that_ended_on_a_policy_error(tmp_path):
    from vsearcher_lite.scoring.evaluate import EvalConfig, evaluate

    task, hits = eval_task(tmp_path)
    down, up = failing_then_answering()
    cfg = EvalConfig.for_profile("cpu", progress=False)
    first = evaluate(
        tmp_path / "run", [task], down, name="m", toolbox=make_toolbox(hits), config=cfg
    )
    assert first["terminations"]["policy_error"] == 1
    second = evaluate(
        tmp_path / "run", [task], up, name="m", toolbox=make_toolbox(hits), config=cfg
    )
    assert second["evaluated_this_run"] == 1 and second["pass_at_1"] == 1.0
    third = evaluate(tmp_path / "run", [task], up, name="m", toolbox=make_toolbox(hits), config=cfg)
    assert third["evaluated_this_run"] == 0 and third["pass_at_1"] == 1.0


def test_eval_refuses_to_mix_the_verdicts_of_two_llm_judges(tmp_path):
    from vsearcher_lite.scoring.evaluate import EvalConfig, evaluate

    task, hits = eval_task(tmp_path)
    policy = ScriptedChat(lambda messages: answer("1874"))
    verdict = "extracted_final_answer: 1874\ncorrect: yes"
    with ReplayChatServer([verdict] * 4) as server:
        cfg = EvalConfig.for_profile(
            "cpu", progress=False, judge=f"llm:openai:judge-a@{server.base_url}"
        )
        first = evaluate(
            tmp_path / "run", [task], policy, name="m", toolbox=make_toolbox(hits), config=cfg
        )
        assert first["pass_at_1"] == 1.0
        other = EvalConfig.for_profile(
            "cpu", progress=False, judge=f"llm:openai:judge-b@{server.base_url}"
        )
        with pytest.raises(InputError, match="judge_model"):
            evaluate(
                tmp_path / "run", [task], policy, name="m", toolbox=make_toolbox(hits), config=other
            )
        again = evaluate(
            tmp_path / "run", [task], policy, name="m", toolbox=make_toolbox(hits), config=cfg
        )
        assert again["evaluated_this_run"] == 0


# ---------------------------------------------------------------------------------------------
# Exports


def test_export_replaces_a_truncated_image_and_leaves_no_temporary_file(tmp_path):
    from vsearcher_lite.agent.export import export_trajectories, trajectory_images

    traj = sample_trajectory(tmp_path / "src")
    out = tmp_path / "export"
    export_trajectories([traj], out)
    images = sorted((out / "llamafactory" / "images").iterdir())
    assert images
    victim = images[0]
    whole = victim.read_bytes()
    victim.write_bytes(whole[: len(whole) // 2])  # a copy cut short by a kill
    export_trajectories([traj], out)
    assert victim.read_bytes() == whole
    sources = {p.split("/")[-1] for p in trajectory_images(traj)}
    names = sorted(p.name for p in (out / "llamafactory" / "images").iterdir())
    assert len(names) == len(images) and all(n.split("_", 1)[1] in sources for n in names)


# ---------------------------------------------------------------------------------------------
# Stray folders, files and mistyped paths


def test_eval_compare_refuses_a_folder_that_is_not_a_run(tmp_path, capsys, monkeypatch):
    import vsearcher_lite.evaluation.comparison as comparison

    monkeypatch.setattr(
        comparison, "run_comparison", lambda *a, **k: pytest.fail("started a comparison")
    )
    typo = tmp_path / "runs" / "reproduc"
    assert main(["eval", "--run-dir", str(typo), "--compare"]) == 2
    one_line_error(capsys, str(typo), "not a run folder")
    assert not typo.exists()
    typo.mkdir(parents=True)
    assert main(["eval", "--run-dir", str(typo), "--compare"]) == 2
    one_line_error(capsys, "not a run folder")
    assert list(typo.iterdir()) == []


def no_build(*args, **kwargs):
    raise RuntimeError("the world generator was started")


def test_world_refuses_an_absurd_entity_count(tmp_path, capsys, monkeypatch):
    import vsearcher_lite.world.store as store

    monkeypatch.setattr(store, "generate_world", no_build)
    run = tmp_path / "run"
    assert main(["world", "--run-dir", str(run), "--entities", "1000000000000"]) == 2
    one_line_error(capsys, "at most 100,000 entities", "1,000,000,000,000")
    assert not run.exists()


def dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(done.stdout)


def test_world_build_folders_of_dead_builds_are_removed(tmp_path, monkeypatch):
    import vsearcher_lite.world.store as store

    run = tmp_path / "run"
    run.mkdir()
    killed = run / f".world.build-{dead_pid()}-abc123"
    (killed / "images").mkdir(parents=True)
    old_style = run / ".world.build-x7k2m9q1"
    old_style.mkdir()
    hour_ago = time.time() - 2 * store.STALE_BUILD_S
    os.utime(old_style, (hour_ago, hour_ago))
    live = run / f".world.build-{os.getpid()}-inuse"  # a build of this very process: left alone
    live.mkdir()
    monkeypatch.setattr(store, "generate_world", no_build)
    with pytest.raises(RuntimeError, match="generator was started"):
        store.build_world(run / "world", 100, 0)
    assert sorted(p.name for p in run.iterdir()) == [live.name]


def test_a_broken_world_manifest_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    import vsearcher_lite.world.store as store

    monkeypatch.setattr(store, "generate_world", no_build)
    world = tmp_path / "run" / "world"
    world.mkdir(parents=True)
    (world / "manifest.json").write_text('{"n_entities": 40')
    (world / "world.sqlite").write_bytes(b"")
    assert main(["world", "--run-dir", str(tmp_path / "run"), "--entities", "40"]) == 2
    one_line_error(capsys, "manifest.json: not valid JSON", "--force")
    with pytest.raises(InputError, match="manifest.json: not valid JSON"):
        store.ensure_world(tmp_path / "run", 40, 0)


def test_image_search_with_a_missing_image_creates_no_tool_cache(base, tmp_path, capsys):
    run = fresh_run(base, tmp_path)
    assert main(["tools", "--run-dir", str(run), "image-search", str(tmp_path / "nope.png")]) == 2
    one_line_error(capsys, "nope.png: image file not found")
    assert not (run / "cache").exists()


def test_a_failed_trajectories_run_leaves_no_stage_folder(tmp_path, capsys):
    bad = tmp_path / "bad"
    (bad / "filter").mkdir(parents=True)
    (bad / "filter" / "train.jsonl").write_text(
        '{"id": "t1", "question": "q?", "answer": "a"}\n{"id": "t2"}\n'
    )
    assert main(["trajectories", "--run-dir", str(bad)]) == 2
    one_line_error(capsys, "train.jsonl:2")
    assert not (bad / "trajectories").exists()


def _bump(path, n):
    from vsearcher_lite.manifest import update_json_file

    for _ in range(n):
        update_json_file(path, lambda d: {**d, "count": d.get("count", 0) + 1})


def test_json_updates_leave_no_lock_file_and_lose_no_update(tmp_path):
    from vsearcher_lite.manifest import write_manifest

    write_manifest(tmp_path, "demo", {"seed": 1}, 0.1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run_manifest.json"]
    target = tmp_path / "counter.json"
    ctx = multiprocessing.get_context("fork")
    workers = [ctx.Process(target=_bump, args=(target, 25)) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert [w.exitcode for w in workers] == [0] * 4
    assert json.loads(target.read_text())["count"] == 100
    assert sorted(p.name for p in tmp_path.iterdir()) == ["counter.json", "run_manifest.json"]


# ---------------------------------------------------------------------------------------------
# An output emptied because every item failed


def test_inject_text_fails_when_every_llm_reply_is_malformed(tmp_path_factory, tmp_path, capsys):
    from test_synth_support import copy_run, small_sandbox

    run = copy_run(small_sandbox(tmp_path_factory), tmp_path / "run")
    with ReplayChatServer(["I cannot answer that."] * 400) as server:
        code = main(
            [
                "inject-text",
                "--run-dir",
                str(run),
                "--writer",
                "llm",
                "--chat",
                f"openai:writer@{server.base_url}",
                "--n-train",
                "2",
                "--n-heldout",
                "0",
                "--n-exam",
                "0",
                "--mix",
                "1:0:0",
                "--max-attempts",
                "1",
                "--onehop-train",
                "0",
                "--onehop-heldout",
                "0",
                "--warmup-levels",
                "none",
            ]
        )
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    metrics = json.loads((run / "inject-text" / "metrics.json").read_text())
    assert metrics["n_tasks"] == 0 and metrics["n_failed"] > 0
    assert (
        f"all {metrics['n_failed']} attempts failed (malformed_json {metrics['n_failed']})" in err
    )
    assert "failed.jsonl" in err


# ---------------------------------------------------------------------------------------------
# Keys written inline in a chat spec


SECRET = "inline-secret-0123456789"


def files_holding(root, text):
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and text in p.read_text(errors="replace")
    )


def test_a_key_in_a_policy_spec_is_masked_in_every_eval_file(tmp_path):
    from vsearcher_lite.scoring.evaluate import EvalConfig, evaluate

    task, hits = eval_task(tmp_path)
    run = tmp_path / "run"
    with ReplayChatServer([answer("1874")] * 4) as server:
        spec = f"openai:m@{server.base_url}/?api_key={SECRET}"
        cfg = EvalConfig.for_profile(
            "cpu", progress=False, judge=f"llm:openai:j@{server.base_url}/?token={SECRET}"
        )
        m = evaluate(
            run, [task], spec, name="keyed", toolbox=make_toolbox(hits), config=cfg, judge="match"
        )
    written = files_holding(run, "api_key=***")
    assert {
        "eval/keyed/config.json",
        "eval/keyed/metrics.json",
        "eval/keyed/results.jsonl",
        "eval/metrics.json",
    } <= set(written)
    assert files_holding(run, SECRET) == [] and SECRET not in json.dumps(m["settings"])
    # the stored identity is the masked one, and so is the next run's: a rerun under the name is not
    # refused
    again = evaluate(
        run, [task], spec, name="keyed", toolbox=make_toolbox(hits), config=cfg, judge="match"
    )
    assert again["name"] == "keyed" and files_holding(run, SECRET) == []


def test_a_key_in_a_teacher_spec_is_masked_in_the_trajectories_files(base, tmp_path):
    from vsearcher_lite.synthesis.trajectories import generate_trajectories

    run = fresh_run(base, tmp_path)
    with ReplayChatServer([answer("unknown")] * 4) as server:
        spec = f"openai:teacher@{server.base_url}/?key={SECRET}"
        m = generate_trajectories(
            run, traj_config(run, max_tasks=2, samples_per_task=1, teacher=spec)
        )
    assert m["n_trajectories"] == 2 and m["teacher"].endswith("?key=***")
    assert files_holding(run / "trajectories", SECRET) == []


# ---------------------------------------------------------------------------------------------
# The teacher's token usage


def test_the_llm_teachers_usage_is_in_the_trajectories_metrics(base, tmp_path):
    from vsearcher_lite.synthesis.trajectories import generate_trajectories

    run = fresh_run(base, tmp_path)
    with ReplayChatServer([answer("unknown")] * 3) as server:
        m = generate_trajectories(
            run,
            traj_config(
                run, max_tasks=3, samples_per_task=1, teacher=f"openai:teacher@{server.base_url}"
            ),
        )
        n_requests = len(server.requests)
    usage = m["teacher_usage"]
    assert (
        usage["requests"] == n_requests == 3
        and usage["prompt_tokens"] > 0
        and usage["completion_tokens"] > 0
    )
    saved = json.loads((run / "trajectories" / "metrics.json").read_text())
    assert saved["teacher_usage"] == usage
