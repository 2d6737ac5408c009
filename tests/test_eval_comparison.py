"""Notebook 08's comparison: base / SFT / RL / teacher on a run's exam and held-out tasks,
reuse of the stages' own evaluations, a missing RL checkpoint, the table and the figures."""

import csv
import json
import shutil
from dataclasses import replace

import pytest

from vsearcher_lite.agent.task import HEADLINE_GROUP, Task
from vsearcher_lite.cli import main
from vsearcher_lite.evaluation import comparison as cmp
from vsearcher_lite.evaluation.plots import (
    comparison_bars,
    comparison_groups,
    comparison_terminations,
)
from vsearcher_lite.manifest import read_manifest
from vsearcher_lite.model.tiny import default_base_dir
from vsearcher_lite.runio import InputError
from vsearcher_lite.scoring import evaluate as ev
from vsearcher_lite.scoring import identity as ev_identity
from vsearcher_lite.scoring import policies as ev_policies
from vsearcher_lite.training.config import SFTConfig

# the tiny model's turns are cut short: these tests check plumbing, not skill
FAST = {"max_tokens": 12}


@pytest.fixture(scope="module")
def sandbox_run(tmp_path_factory):
    """A 1,200-entity world with filtered held-out and exam files (about 4 s to build; 5 exam tasks
    and held-out tasks of every difficulty with seed 0)."""
    from vsearcher_lite.synthesis.filters import run_filter
    from vsearcher_lite.synthesis.inject import InjectConfig
    from vsearcher_lite.world.store import ensure_world

    run = tmp_path_factory.mktemp("compare") / "run"
    ensure_world(run, 1200, 0)
    run_filter(run, inject_config=InjectConfig(n_train=2, n_heldout=30, n_exam=10, progress=False))
    return run


def fresh_run(sandbox_run, tmp_path):
    """A run sharing the module's world and task files, with its own eval folders and
    checkpoints."""
    run = tmp_path / "run"
    run.mkdir()
    for name in ("world", "filter", "inject-image", "inject-text", "seeds"):
        if (sandbox_run / name).exists():
            (run / name).symlink_to(sandbox_run / name)
    return run


def install_checkpoint(run, stage):
    """A stand-in checkpoint: the shipped tiny base, linked where the SFT or GRPO stage saves."""
    target = run / stage / "checkpoint"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.symlink_to(default_base_dir(), target_is_directory=True)
    return target


def retrain_checkpoint(run, stage):
    """The stand-in checkpoint replaced by a copy with one weight changed, at the same path."""
    import torch

    from vsearcher_lite.model.tiny import load_base, save_base

    target = run / stage / "checkpoint"
    model, processor = load_base(target)
    with torch.no_grad():
        next(p for n, p in model.named_parameters() if "embed_tokens" in n)[0, 0] += 1.0
    target.unlink() if target.is_symlink() else shutil.rmtree(target)
    save_base(model, processor, target)


def config(**kw):
    kw.setdefault("exam_max_tasks", 2)
    kw.setdefault("heldout_max_tasks", 3)
    kw.setdefault("progress", False)
    kw.setdefault("eval_overrides", dict(FAST))
    return cmp.ComparisonConfig.for_profile("cpu", **kw)


def quiet(_line):
    pass


# ---------------------------------------------------------------------------------------------
# Pure parts


def task(i, difficulty, split="heldout"):
    return Task(
        id=f"{difficulty}-{i}",
        question=f"q {difficulty} {i}",
        answer="Orsk",
        difficulty=difficulty,
        split=split,
    )


def test_select_tasks_caps_the_exam_and_takes_heldout_round_robin():
    tasks = {
        "exam": [task(i, "exam", "exam") for i in range(5)],
        "heldout": [task(i, d) for d in ("easy", "medium", "hard") for i in range(3)],
    }
    picked = cmp.select_tasks(tasks, config(exam_max_tasks=2, heldout_max_tasks=5))
    assert [t.id for t in picked["exam"]] == ["exam-0", "exam-1"]
    assert [t.id for t in picked["heldout"]] == [
        "easy-0",
        "medium-0",
        "hard-0",
        "easy-1",
        "medium-1",
    ]
    only_hard = cmp.select_tasks(
        tasks, config(heldout_max_tasks=None, heldout_difficulties=("hard",))
    )
    assert [t.id for t in only_hard["heldout"]] == ["hard-0", "hard-1", "hard-2"]
    # The SFT stage's own choice (easy and medium, capped at 4) is contained in ours: its results
    # can be reused.
    from vsearcher_lite.training.heldout import balanced_head

    sft_choice = balanced_head(
        [t for t in tasks["heldout"] if t.difficulty != "hard"], 4, key=lambda t: t.difficulty
    )
    assert {t.id for t in sft_choice} <= {
        t.id for t in cmp.select_tasks(tasks, config(heldout_max_tasks=6))["heldout"]
    }


def test_the_cpu_preset_caps_the_live_exam_and_a_number_lifts_the_cap():
    assert cmp.ComparisonConfig.for_profile("cpu").exam_max_tasks == 5
    assert cmp.ComparisonConfig.for_profile("cpu", exam_max_tasks=200).exam_max_tasks == 200
    assert cmp.ComparisonConfig.for_profile("single_gpu").exam_max_tasks is None


def test_settings_follow_the_sft_stage_on_heldout_and_the_paper_on_the_exam():
    sft = SFTConfig.for_profile("cpu")
    c = cmp.ComparisonConfig.for_profile("cpu")
    held, exam = c.eval_config("heldout"), c.eval_config("exam")
    assert (held.max_tokens, held.max_tool_calls, held.max_context_chars, held.wall_clock_s) == (
        sft.eval.max_tokens,
        sft.eval.max_tool_calls,
        sft.eval.max_context_chars,
        sft.eval.wall_clock_s,
    )
    assert held.temperature == 0.0 and held.prompt_variant == "compact"
    assert (exam.max_tool_calls, exam.max_context_chars) == (30, 40_000)
    assert {
        k: v
        for k, v in exam.result_settings().items()
        if k not in ("max_tool_calls", "max_context_chars")
    } == {
        k: v
        for k, v in held.result_settings().items()
        if k not in ("max_tool_calls", "max_context_chars")
    }
    with pytest.raises(TypeError, match="unknown comparison setting"):
        cmp.ComparisonConfig.for_profile("cpu", exam_tasks=3)
    with pytest.raises(InputError, match="unknown policy 'gpt'"):
        cmp.ComparisonConfig.for_profile("cpu", policies=("base", "gpt"))


def test_policy_specs_and_why_a_row_cannot_run(tmp_path):
    assert cmp.policy_spec("sft", tmp_path) == f"transformers:{tmp_path}/sft/checkpoint"
    assert cmp.policy_spec("base", tmp_path) == "base"
    # no default no-tools row; one given as an extra row names the stage its model comes from
    with pytest.raises(InputError, match="unknown policy 'direct'"):
        cmp.ComparisonConfig.for_profile("cpu", policies=("base", "direct"))
    direct = f"direct:{cmp.policy_spec('sft', tmp_path)}"
    assert "notebook 06" in cmp.unavailable_reason("no-tools", direct)
    assert (
        cmp.policy_spec("base", tmp_path, "single_gpu")
        == f"transformers:{SFTConfig.for_profile('single_gpu').base}"
    )
    reason = cmp.unavailable_reason("rl", cmp.policy_spec("rl", tmp_path))
    assert (
        reason.startswith("not trained yet: no checkpoint at")
        and "grpo/checkpoint" in reason
        and "notebook 07" in reason
    )
    install_checkpoint(tmp_path, "grpo")
    assert cmp.unavailable_reason("rl", cmp.policy_spec("rl", tmp_path)) is None
    # a hub id is not checked here
    assert cmp.unavailable_reason("x", "transformers:Qwen/Qwen3-VL-8B-Thinking") is None
    assert "only in the sandbox" in cmp.unavailable_reason("teacher", "teacher", world="live")
    with pytest.raises(InputError, match="unknown policy"):
        cmp.policy_spec("gpt", tmp_path)


def test_canonical_specs_compare_one_checkpoint_named_two_ways(tmp_path, monkeypatch):
    ckpt = install_checkpoint(tmp_path / "run", "sft")
    monkeypatch.chdir(tmp_path)
    canon = ev_identity.canonical_spec
    assert canon("transformers:run/sft/checkpoint") == canon(f"transformers:{ckpt}")
    assert canon("direct:transformers:run/sft/checkpoint").startswith("direct:transformers:/")
    a = {"policy": "sft", "policy_spec": "transformers:run/sft/checkpoint", "seed": 0}
    assert ev_identity.changed_settings(a, {**a, "policy_spec": f"transformers:{ckpt}"}) == []
    assert ev_identity.changed_settings(a, {**a, "seed": 1}) == ["seed"]


# ---------------------------------------------------------------------------------------------
# The stage


def test_comparison_reports_missing_rl_then_evaluates_it_once_trained(sandbox_run, tmp_path):
    run = fresh_run(sandbox_run, tmp_path)
    install_checkpoint(run, "sft")
    c = config()
    m = cmp.run_comparison(run, c, log=quiet)

    assert m["policies"]["rl"]["state"] == "missing" and "not trained yet" in m["missing"]["rl"]
    assert (
        m["exam_accuracy"]["rl"] is None
        and m["heldout_accuracy"]["rl"] is None
        and m["accuracy"]["rl"] is None
    )
    assert m["evaluated"] == ["base", "sft", "teacher"]
    assert m["n_tasks"]["exam"] == 2 and m["n_tasks"]["heldout"] == 3
    assert m["n_tasks"]["heldout_by_difficulty"] == {"easy": 1, "medium": 1, "hard": 1}
    # The table's numbers are the evaluations' own, stored under <benchmark>-<policy>.
    teacher_exam = json.loads((run / "eval" / "exam-teacher" / "metrics.json").read_text())
    assert m["exam_accuracy"]["teacher"] == teacher_exam["pass_at_1"]
    assert teacher_exam["settings"]["max_tool_calls"] == 30
    held_sft = json.loads((run / "eval" / "heldout-sft" / "metrics.json").read_text())
    assert (
        held_sft["settings"]["max_tool_calls"] == SFTConfig.for_profile("cpu").eval.max_tool_calls
    )
    assert m["heldout_accuracy"]["sft"] == held_sft["pass_at_1"]
    # the headline: the paper's levels (these three tasks), with its binomial standard error
    headline = held_sft["headline"]
    assert m["accuracy"]["sft"][HEADLINE_GROUP] == headline["accuracy"] == held_sft["pass_at_1"]
    p = headline["accuracy"]
    assert m["accuracy_se"]["sft"][HEADLINE_GROUP] == pytest.approx((p * (1 - p) / 3) ** 0.5,
                                                                    abs=1e-4)
    for name in m["evaluated"]:
        for bench in ("exam", "heldout"):
            assert sum(m["terminations"][name][bench].values()) == m["n_tasks"][bench]
    assert m["heldout_accuracy"]["teacher"] > 0
    # The cost per task is the evaluation's wall time over the tasks it ran, counted with it.
    assert m["wall_timed_tasks"]["teacher"] == {"exam": 2, "heldout": 3}
    assert m["wall_seconds_per_task"]["teacher"]["exam"] == pytest.approx(
        teacher_exam["seconds"] / 2, abs=1e-3
    )
    assert m["episode_seconds"]["teacher"]["exam"] == teacher_exam["seconds_per_task"]["mean"]

    rows = list(csv.DictReader((run / "comparison" / "table.csv").open()))
    assert [r["policy"] for r in rows] == ["base", "sft", "rl", "teacher"]
    assert rows[2]["state"] == "missing" and rows[2]["exam"] == ""
    saved = cmp.read_comparison(run)
    assert saved["exam_accuracy"] == m["exam_accuracy"]
    assert "comparison" in read_manifest(run)["stages"]

    install_checkpoint(run, "grpo")  # notebook 07 has run
    again = cmp.run_comparison(run, c, log=quiet)
    assert again["policies"]["rl"]["state"] == "evaluated" and again["missing"] == {}
    assert again["exam_accuracy"]["rl"] is not None
    rl_exam = json.loads((run / "eval" / "exam-rl" / "metrics.json").read_text())
    # the checkpoint is named relative to the run folder
    assert rl_exam["policy_spec"] == "transformers:grpo/checkpoint"
    assert rl_exam["evaluated_this_run"] == 2
    # Nothing evaluated before is run again.
    for name in ("exam-base", "heldout-sft", "exam-teacher", "heldout-teacher"):
        assert (
            json.loads((run / "eval" / name / "metrics.json").read_text())["evaluated_this_run"]
            == 0
        )
    assert again["exam_accuracy"]["base"] == m["exam_accuracy"]["base"]
    # the first run's cost
    assert again["wall_seconds_per_task"]["base"] == m["wall_seconds_per_task"]["base"]

    retrain_checkpoint(run, "sft")  # notebook 06 runs again: the same path holds other weights
    third = cmp.run_comparison(run, c, log=quiet)
    for name, n in (("exam-sft", 2), ("heldout-sft", 3)):
        assert (
            json.loads((run / "eval" / name / "metrics.json").read_text())["evaluated_this_run"]
            == n
        )
    assert (
        json.loads((run / "eval" / "exam-rl" / "metrics.json").read_text())["evaluated_this_run"]
        == 0
    )
    assert third["n_tasks"]["exam"] == 2


def test_heldout_results_of_the_sft_stage_are_reused_only_when_settings_match(
    sandbox_run, tmp_path, monkeypatch
):
    run = fresh_run(sandbox_run, tmp_path)
    install_checkpoint(run, "sft")
    install_checkpoint(run, "grpo")
    c = config(policies=("base", "sft", "rl"), exam_max_tasks=1)
    tasks = cmp.comparison_tasks(run, c)
    held = c.heldout_eval_config()
    # The SFT stage, run from the repository root with a relative run dir, evaluated two of these
    # tasks.
    monkeypatch.chdir(run.parent)
    ev.evaluate(
        run,
        tasks["heldout"][:2],
        "transformers:run/sft/checkpoint",
        name="sft",
        config=held,
        benchmark="heldout",
    )
    # ... and the base with other limits: those results must not be mixed in.
    ev.evaluate(
        run,
        tasks["heldout"][:2],
        "base",
        name="base",
        config=replace(held, max_tool_calls=3),
        benchmark="heldout",
    )
    # ... and the GRPO stage evaluated one, under its own name for the policy ("rl").
    rl_policy = ev_policies.make_policy(f"transformers:{run}/grpo/checkpoint", held)
    rl_policy.name = "rl"
    ev.evaluate(run, tasks["heldout"][:1], rl_policy, name="rl", config=held, benchmark="heldout")
    stage_sft = {r["id"]: r for r in ev.load_results(run, "sft")}

    m = cmp.run_comparison(run, c, log=quiet)
    assert m["policies"]["sft"]["reused"] == {"exam": 0, "heldout": 2}
    assert m["policies"]["base"]["reused"] == {"exam": 0, "heldout": 0}
    assert m["policies"]["rl"]["reused"] == {"exam": 0, "heldout": 1}
    held_sft = json.loads((run / "eval" / "heldout-sft" / "metrics.json").read_text())
    assert held_sft["evaluated_this_run"] == 1 and held_sft["n_tasks"] == 3
    copied = {r["id"]: r for r in ev.load_results(run, "heldout-sft")}
    for task_id, record in stage_sft.items():
        assert copied[task_id]["seconds"] == record["seconds"]  # copied, not run again
    assert (
        json.loads((run / "eval" / "heldout-base" / "metrics.json").read_text())[
            "evaluated_this_run"
        ]
        == 3
    )
    # The stage's own folders are left as they were.
    assert len(ev.load_results(run, "sft")) == 2


def test_figures_and_the_compare_command(sandbox_run, tmp_path, capsys):
    run = fresh_run(sandbox_run, tmp_path)
    code = main(
        ["eval", "--run-dir", str(run), "--compare", "--exam-tasks", "1", "--heldout-tasks", "2"]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    m = cmp.read_comparison(run)
    # no SFT model yet
    assert set(m["missing"]) == {"sft", "rl"} and m["n_tasks"]["exam"] == 1
    assert "sft: not trained yet" in out and "rl: not trained yet" in out
    assert out.splitlines()[
        [i for i, line in enumerate(out.splitlines()) if line.startswith("policy")][0] + 2
    ].split()[:2] == ["sft", "-"]

    fig = comparison_bars(m)
    assert [t.name for t in fig.data] == ["base", "teacher"]
    assert "missing: sft, rl" in fig.layout.legend.title.text
    assert (
        list(fig.data[1].x) == comparison_groups(m)
        and fig.data[1].y[0] == m["exam_accuracy"]["teacher"]
    )
    shares = comparison_terminations(m, "heldout")
    for i in range(len(m["evaluated"])):
        assert sum(t.y[i] for t in shares.data) == pytest.approx(1.0)

    code = main(["eval", "--run-dir", str(run), "--compare", "--policy", "teacher"])
    assert code == 2 and "leave out --benchmark and --policy" in capsys.readouterr().err


def test_an_empty_run_is_a_clear_error(tmp_path):
    run = tmp_path / "run"
    (run / "filter").mkdir(parents=True)
    (run / "filter" / "exam.jsonl").write_text("")
    (run / "filter" / "heldout.jsonl").write_text("")
    with pytest.raises(InputError, match="no exam or held-out tasks"):
        cmp.run_comparison(run, config(), log=quiet)
    with pytest.raises(InputError, match="run notebook 08"):
        cmp.read_comparison(run)


def test_adopt_results_needs_a_matching_source(tmp_path):
    from agent_fakes import answer, make_toolbox

    from vsearcher_lite.chat import ScriptedChat

    tasks = [task(i, "easy") for i in range(3)]
    cfg = ev.EvalConfig.for_profile("cpu", progress=False)
    policy = ev_policies.make_policy(ScriptedChat(lambda messages: answer("Orsk")), cfg)
    ev.evaluate(tmp_path, tasks[:2], policy, name="stage", config=cfg, toolbox=make_toolbox([]))
    identity = ev_identity.run_identity(policy, cfg, ev.resolve_judge(None, cfg))
    assert ev.adopt_results(tmp_path, "stage", "table", tasks, {**identity, "seed": 5}) == 0
    assert ev.adopt_results(tmp_path, "missing", "table", tasks, identity) == 0
    assert ev.adopt_results(tmp_path, "stage", "table", tasks, identity) == 2
    assert ev.adopt_results(tmp_path, "stage", "table", tasks, identity) == 0  # already there
    m = ev.evaluate(tmp_path, tasks, policy, name="table", config=cfg, toolbox=make_toolbox([]))
    assert m["evaluated_this_run"] == 1 and m["pass_at_1"] == 1.0


def test_the_teacher_plans_within_each_evaluations_tool_call_limit(monkeypatch):
    """A teacher policy built for the held-out limit (10 calls) gets the exam's 30 when it runs the
    exam."""
    from vsearcher_lite.agent import teacher

    seen = []
    real = teacher.HeuristicTeacher.__init__

    def spy(self, task, **kw):
        seen.append(kw["max_tool_calls"])
        real(self, task, **kw)

    monkeypatch.setattr(teacher.HeuristicTeacher, "__init__", spy)
    c = config()
    policy = ev_policies.make_policy("teacher", c.heldout_eval_config())
    exam_policy = ev_policies.make_policy(policy, c.eval_config("exam"))
    task = Task(id="t", question="q", answer="a")
    policy.for_task(task), exam_policy.for_task(task)
    assert seen == [c.heldout_eval_config().max_tool_calls, 30] and seen[0] < 30
