"""The grpo stage end to end on a small sandbox run: the cpu engine (2 steps), the TRL engine on CPU
(1 step, with a scripted policy so that image-search results travel inside the completions), the
CLI, and the single_gpu path on a GPU when there is one.

The starting "SFT checkpoint" is the shipped tiny base (it has not learnt the protocol, so its
rewards are 0: these tests check the mechanics and the files, not learning; ``test_grpo.py``
checks an update on rewarded trajectories).
"""

from __future__ import annotations

import csv
import json
import time

import pytest
from agent_fakes import answer, build_sandbox_run, call, grpo_run, scripted_batcher

from vsearcher_lite.rl.config import GRPOConfig
from vsearcher_lite.rl.grpo import run_grpo
from vsearcher_lite.rl.steps import STEP_FIELDS
from vsearcher_lite.runio import RunDir, write_jsonl


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run folder with a world, training and held-out tasks, and ``sft/checkpoint`` (the tiny
    base)."""
    return grpo_run(
        build_sandbox_run(tmp_path_factory.mktemp("grpo_base")),
        tmp_path_factory.mktemp("grpo") / "run",
    )


def small(**kw) -> GRPOConfig:
    # the fixture's run holds easy tasks (the cpu preset trains on the one-hop level)
    settings = dict(
        max_steps=2,
        prompts_per_step=2,
        generations=2,
        max_tokens=24,
        max_tool_calls=2,
        eval_max_tasks=2,
        difficulty_mix={"easy": 1},
        max_draw_rounds=2,
        eval_batch=4,
        eval_max_tokens=24,
        progress=False,
    )
    settings.update(kw)
    config = GRPOConfig.for_profile("cpu", **settings)
    config.minutes = config.total_minutes = None  # these runs end by steps
    return config


def read_csv(path):
    with open(path, encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_cpu_engine_two_steps_writes_its_files(run_dir):
    t0 = time.perf_counter()
    m = run_grpo(run_dir, small(), log=lambda s: None)
    out = run_dir / "grpo"
    rows = read_csv(out / "steps.csv")
    assert [int(r["step"]) for r in rows] == [0, 1] and tuple(rows[0]) == STEP_FIELDS
    # the base never learnt the protocol
    assert all(float(r["format_failure_share"]) == 1.0 for r in rows)
    # every group all-zero: dynamic sampling draws its two rounds, drops every group and trains on
    # none
    assert all(
        (
            int(r["groups"]),
            int(r["zero_variance_groups"]),
            int(r["groups_kept"]),
            int(r["draw_rounds"]),
        )
        == (4, 4, 0, 2)
        and float(r["zero_variance_share"]) == 1.0
        and int(r["trained_trajectories"]) == 0
        for r in rows
    )
    saved = json.loads((out / "metrics.json").read_text())
    for key in (
        "steps",
        "reward_first_20pct",
        "reward_last_20pct",
        "heldout_accuracy_sft",
        "heldout_accuracy_rl",
        "format_failure_rate_last_20pct",
        "excluded_share",
        "heldout_paired_diff",
        "heldout_paired_se",
        "heldout_n",
        "seconds",
        "config",
    ):
        assert key in saved, key
    assert saved["steps"] == 2 and saved["heldout_n"] == 2 and saved["reward_last_20pct"] == 0.0
    # the run's files name its paths relative to the run folder
    assert saved["task_file"] == "filter/rl_tasks.jsonl"
    assert saved["zero_variance_group_share"] == 1.0
    assert saved == RunDir(run_dir).relative({**m, "config": saved["config"]})
    assert saved["heldout_eval_names"] == ["sft", "rl"]
    assert (out / "checkpoint" / "config.json").is_file() and (
        out / "checkpoint" / "model.safetensors"
    ).is_file()
    assert (run_dir / "eval" / "rl" / "results.jsonl").is_file() and (
        run_dir / "eval" / "sft" / "results.jsonl"
    ).is_file()
    rollouts = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 2 * 2 * 2 * 2 and all(
        r["reward"] == 0.0 and not r["in_loss"] for r in rollouts
    )
    # a second round's samples are numbered on
    assert len({r["id"] for r in rollouts}) == len(rollouts)
    manifest = json.loads((run_dir / "run_manifest.json").read_text())
    assert "grpo" in manifest["stages"]
    assert time.perf_counter() - t0 < 120


def test_cpu_engine_is_deterministic_given_the_seed(run_dir, tmp_path):
    a = run_grpo(run_dir, small(max_steps=1, evaluate=False, name="grpo-a"), log=lambda s: None)
    b = run_grpo(run_dir, small(max_steps=1, evaluate=False, name="grpo-b"), log=lambda s: None)
    ra = (run_dir / "grpo-a" / "rollouts.jsonl").read_text()
    rb = (run_dir / "grpo-b" / "rollouts.jsonl").read_text()
    assert ra == rb and a["steps"] == b["steps"] == 1


def test_the_prescreen_curriculum_screens_then_trains(run_dir):
    m = run_grpo(
        run_dir,
        small(
            max_steps=1,
            evaluate=False,
            name="grpo-screen",
            curriculum="prescreen",
            prescreen_tasks=3,
            prescreen_samples=2,
        ),
        log=lambda s: None,
    )
    rows = [
        json.loads(line)
        for line in (run_dir / "grpo-screen" / "prescreen.jsonl").read_text().splitlines()
    ]
    # the base answers nothing
    assert len(rows) == 3 and all(r["samples"] == 2 and r["correct"] == 0 for r in rows)
    # no task was solved sometimes, so the level keeps all its tasks
    assert m["prescreen"]["by_difficulty"] == {
        "easy": {"screened": 3, "mixed": 0, "all_correct": 0}
    }
    assert m["prescreen"]["n_kept"] == 3 and m["steps"] == 1


def test_stored_sft_results_are_reused_only_when_a_rerun_agrees(run_dir):
    quiet = dict(log=lambda s: None)
    run_grpo(run_dir, small(max_steps=1), **quiet)  # makes eval/sft if no earlier test did
    again = run_grpo(run_dir, small(max_steps=1), **quiet)
    assert again["heldout_sft_reuse"] == "checked" and again["heldout_sft_evaluated_this_run"] == 0
    results = run_dir / "eval" / "sft" / "results.jsonl"
    records = [json.loads(line) for line in results.read_text().splitlines()]
    records[0]["trajectory"]["turns"][0]["text"] += " (written by an older model)"
    write_jsonl(results, records)
    stale = run_grpo(run_dir, small(max_steps=1), **quiet)
    assert stale["heldout_sft_reuse"] == "stale" and stale["heldout_eval_names"] == [
        "grpo-sft",
        "rl",
    ]
    assert stale["heldout_sft_evaluated_this_run"] == 2


def scripted_policy_reply(messages):
    """Image search first (its results bring images into the completion), then an answer."""
    seen = sum(1 for m in messages[2:] if m["role"] == "user")
    return call("image_search") if seen == 0 else answer("1874")


@pytest.mark.parametrize("method,scripted", [("full", True), ("lora", False)])
def test_trl_engine_runs_on_cpu(run_dir, monkeypatch, method, scripted):
    """TRL's GRPOTrainer, one step of 1 prompt x 2 generations, driven by the project's rollouts:
    with a scripted policy (image-search results travel inside the completions), and with the
    LoRA-wrapped model itself generating."""
    from vsearcher_lite.rl import trl_engine

    # The tiny base cannot call tools yet; a scripted policy does, so the tool-image path is
    # exercised.
    if scripted:
        monkeypatch.setattr(trl_engine, "BatchedTransformersChat",
                            scripted_batcher(scripted_policy_reply))
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    import trl

    seen = []
    original = trl.GRPOTrainer._get_per_token_logps_and_entropies

    def spy(self, model, input_ids, *args, **kwargs):  # what the loss forward pass was given
        mm = kwargs.get("mm_token_type_ids")
        seen.append(
            {
                "num_images": kwargs.get("num_images"),
                "grid": kwargs.get("image_grid_thw"),
                "image_tokens": None if mm is None else int((mm == 1).sum()),
            }
        )
        return original(self, model, input_ids, *args, **kwargs)

    monkeypatch.setattr(trl.GRPOTrainer, "_get_per_token_logps_and_entropies", spy)
    t0 = time.perf_counter()
    cfg = small(
        engine="trl",
        method=method,
        max_steps=1,
        prompts_per_step=1,
        generations=2,
        micro_batch_size=2,
        evaluate=False,
        name=f"grpo-trl-{method}",
        lora_r=4,
        lora_alpha=8,
    )
    m = run_grpo(run_dir, cfg, log=lambda s: None)
    elapsed = time.perf_counter() - t0
    rows = read_csv(run_dir / f"grpo-trl-{method}" / "steps.csv")
    # TRL computed the loss over the policy tokens
    assert len(rows) == 1 and rows[0]["entropy"] not in (
        "",
        None,
    )
    assert m["engine"] == "trl" and m["steps"] == 1
    # both rollouts got the same reward
    assert (rows[0]["groups"], rows[0]["zero_variance_groups"]) == (
        "1",
        "1",
    )
    # tokens match features
    assert seen and all(s["image_tokens"] == int(s["grid"].prod(-1).sum()) // 4 for s in seen)
    # every rollout searched by image: the question image and three results reached the forward pass
    if scripted:
        assert float(rows[0]["image_search"]) == 1.0
        assert all(s["num_images"] == [4, 4] and s["grid"].shape[0] == 8 for s in seen)
    else:  # the tiny base breaks the format on its first turn
        assert float(rows[0]["format_failure_share"]) == 1.0
    assert (
        run_dir / f"grpo-trl-{method}" / "checkpoint" / "config.json"
    ).is_file()  # LoRA: merged into the model
    assert (run_dir / f"grpo-trl-{method}" / "adapter").is_dir() == (method == "lora")
    assert elapsed < 60


def test_cli_runs_the_stage(run_dir, capsys):
    from vsearcher_lite.cli import main

    code = main(
        [
            "grpo",
            "--run-dir",
            str(run_dir),
            "--steps",
            "1",
            "--prompts",
            "1",
            "--generations",
            "2",
            "--no-eval",
            "--name",
            "grpo-cli",
            "--minutes",
            "5",
            "--mix",
            "easy:1",
        ]
    )
    assert code == 0
    assert "wrote" in capsys.readouterr().out
    assert (run_dir / "grpo-cli" / "steps.csv").is_file()
    # no SFT checkpoint
    assert main(["grpo", "--run-dir", str(run_dir / "nowhere"), "--steps", "1"]) == 2


@pytest.mark.gpu
def test_single_gpu_lora_steps_on_cuda(run_dir):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    cfg = GRPOConfig.for_profile(
        "single_gpu",
        init=str(run_dir / "sft" / "checkpoint"),
        max_steps=3,
        prompts_per_step=2,
        generations=4,
        micro_batch_size=4,
        max_tokens=64,
        max_tool_calls=3,
        lora_r=4,
        lora_alpha=8,
        gradient_checkpointing=False,
        evaluate=False,
        progress=False,
        name="grpo-gpu",
        difficulty_mix={"easy": 1},
        dtype="bfloat16",
    )
    t0 = time.perf_counter()
    m = run_grpo(run_dir, cfg, log=print)
    per_step = (time.perf_counter() - t0) / max(m["steps"], 1)
    print(
        f"[gpu] single_gpu LoRA: {m['steps']} steps, {per_step:.2f} s/step "
        f"({m['seconds_per_step']} s/step in training)"
    )
    assert m["steps"] == 3


TIMING = ("seconds", "step_seconds", "rollout_seconds", "update_seconds")


def test_an_interrupted_run_resumes_after_its_last_saved_step(run_dir, tmp_path, monkeypatch):
    """Killed after step 2 of 3, the same command samples step 3 only and ends as an uninterrupted
    run ends: the same step rows (timings aside) and the same rollouts."""
    import shutil

    from vsearcher_lite.rl import cpu_engine
    from vsearcher_lite.runio import InputError

    def copy_run(name):
        run = tmp_path / name
        shutil.copytree(
            run_dir,
            run,
            symlinks=True,
            ignore=shutil.ignore_patterns("grpo", "eval", "run_manifest.json"),
        )
        return run

    config = small(max_steps=3, save_every=1, evaluate=False)
    whole = copy_run("whole")
    run_grpo(whole, config, log=lambda s: None)

    run = copy_run("resumed")
    real_save = cpu_engine.save_training_state

    def save_then_die(out, step, *args, **kw):
        path = real_save(out, step, *args, **kw)
        if step == 2:
            raise RuntimeError("killed")
        return path

    monkeypatch.setattr(cpu_engine, "save_training_state", save_then_die)
    with pytest.raises(RuntimeError, match="killed"):
        run_grpo(run, config, log=lambda s: None)
    monkeypatch.setattr(cpu_engine, "save_training_state", real_save)
    assert (run / "grpo" / "resume.pt").is_file() and not (run / "grpo" / "checkpoint").exists()

    with pytest.raises(
        InputError, match="temperature=0.8"
    ):  # other settings never continue this run
        run_grpo(
            run,
            small(max_steps=3, save_every=1, evaluate=False, temperature=0.5),
            log=lambda s: None,
        )

    messages: list[str] = []
    m = run_grpo(run, config, log=messages.append)
    assert any("resuming after step 2" in line for line in messages) and m["steps"] == 3
    a, b = read_csv(whole / "grpo" / "steps.csv"), read_csv(run / "grpo" / "steps.csv")
    assert [{k: v for k, v in r.items() if k not in TIMING} for r in b] == [
        {k: v for k, v in r.items() if k not in TIMING} for r in a
    ]
    ids = lambda path: [json.loads(x)["id"] for x in path.read_text().splitlines()]  # noqa: E731
    assert ids(run / "grpo" / "rollouts.jsonl") == ids(whole / "grpo" / "rollouts.jsonl")
    assert not (run / "grpo" / "resume.pt").exists()
    # the stage's times count the steps before the interruption
    assert (
        m["train_seconds"] == pytest.approx(float(b[-1]["seconds"]), abs=0.01)
        and m["seconds"] >= m["train_seconds"]
    )


def test_checkpoint_every_keeps_the_model_along_training_and_may_change_on_resume(
    run_dir, tmp_path, monkeypatch
):
    """``checkpoint_every`` keeps ``checkpoint-stepN``; the last one is the final model, a resume
    may keep them at another interval (it changes what is saved, not what is trained), and a run
    from the start removes the models an earlier run kept."""
    import shutil

    import torch
    from safetensors.torch import load_file

    from vsearcher_lite.rl import cpu_engine

    run = tmp_path / "run"
    shutil.copytree(run_dir, run, symlinks=True,
                    ignore=shutil.ignore_patterns("grpo", "eval", "run_manifest.json"))
    real_save = cpu_engine.save_training_state

    def save_then_die(out, step, *args, **kw):
        real_save(out, step, *args, **kw)
        raise RuntimeError("killed")

    monkeypatch.setattr(cpu_engine, "save_training_state", save_then_die)
    with pytest.raises(RuntimeError, match="killed"):
        run_grpo(run, small(max_steps=3, save_every=1, checkpoint_every=1, evaluate=False),
                 log=lambda s: None)
    monkeypatch.setattr(cpu_engine, "save_training_state", real_save)
    out = run / "grpo"
    saved = torch.load(out / "resume.pt", weights_only=False)["model"]
    first = load_file(out / "checkpoint-step1" / "model.safetensors")
    assert first and set(first) <= set(saved) and all(saved[k].equal(first[k]) for k in first)
    run_grpo(run, small(max_steps=3, save_every=1, checkpoint_every=3, evaluate=False),
             log=lambda s: None)
    kept = sorted(p.name for p in out.glob("checkpoint-step*"))
    assert kept == ["checkpoint-step1", "checkpoint-step3"]
    last = load_file(out / "checkpoint-step3" / "model.safetensors")
    final = load_file(out / "checkpoint" / "model.safetensors")
    assert last.keys() == final.keys() and all(last[k].equal(final[k]) for k in final)
    # a run from the start (nothing to resume) keeps none of the earlier run's models
    run_grpo(run, small(max_steps=1, evaluate=False), log=lambda s: None)
    assert not list(out.glob("checkpoint-step*"))


def test_the_task_sampler_continues_its_draws_from_a_saved_state():
    from vsearcher_lite.agent.task import Task
    from vsearcher_lite.rl.inputs import TaskSampler

    tasks = [
        Task(id=f"t{i}", question="q", answer="a", difficulty="easy" if i % 2 else "medium")
        for i in range(9)
    ]
    one = TaskSampler(tasks, {"easy": 1, "medium": 1}, seed=3)
    one.draw(4)
    state = one.state()
    two = TaskSampler(tasks, {"easy": 1, "medium": 1}, seed=3)
    two.restore(json.loads(json.dumps(state, default=list)) | {"rng": state["rng"]})
    assert [t.id for t in one.draw(6)] == [t.id for t in two.draw(6)]


def test_the_saved_training_state_restores_weights_and_optimizer(tmp_path):
    """After a restore, the next AdamW step gives the same weights as without the interruption."""
    import torch

    from vsearcher_lite.agent.task import Task
    from vsearcher_lite.rl import cpu_engine, inputs

    def make():
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        return model, torch.optim.AdamW(model.parameters(), lr=0.1)

    def step(model, optimizer):
        optimizer.zero_grad()
        model(torch.ones(3, 4)).pow(2).sum().backward()
        optimizer.step()

    config = small(save_every=1)
    sampler = inputs.TaskSampler([Task(id="a", question="q", answer="x")], {"easy": 1})
    model, optimizer = make()
    step(model, optimizer)
    cpu_engine.save_training_state(
        tmp_path, 1, model, optimizer, sampler, [{"step": 0}], [False], ["a"], None, config
    )
    step(model, optimizer)

    again, again_optimizer = make()
    state = cpu_engine.load_training_state(tmp_path, config)
    again.load_state_dict(state["model"])
    again_optimizer.load_state_dict(state["optimizer"])
    step(again, again_optimizer)
    assert state["step"] == 1 and state["rows"] == [{"step": 0}]
    assert all(
        torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values())
    )
    # without --save-every a rerun starts over and drops the saved state
    assert (
        cpu_engine.load_training_state(tmp_path, small()) is None
        and not (tmp_path / "resume.pt").exists()
    )
