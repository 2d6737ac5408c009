"""The evaluation runner: Pass@1 and breakdowns, resumability, concurrency, the direct ablation,
judges."""

import csv
import io
import json
import threading

import pytest
from agent_fakes import answer, call, make_toolbox

from vsearcher_lite.agent.judge import LLMJudge, MatchJudge
from vsearcher_lite.agent.protocol import COMPACT_QUESTION_CUE
from vsearcher_lite.agent.task import Task
from vsearcher_lite.chat import ScriptedChat, message_text
from vsearcher_lite.manifest import read_manifest
from vsearcher_lite.runio import InputError
from vsearcher_lite.scoring import evaluate as ev
from vsearcher_lite.scoring import identity as ev_identity
from vsearcher_lite.scoring import metrics as ev_metrics
from vsearcher_lite.scoring import policies as ev_policies


def four_tasks():
    return [
        Task(
            id="t-easy",
            question="Q easy: in which year was Tope founded?",
            answer="1874",
            difficulty="easy",
            split="heldout",
        ),
        Task(
            id="t-medium",
            question="Q medium: which river?",
            answer="Zanura",
            aliases=["Zanura River"],
            difficulty="medium",
            split="heldout",
        ),
        Task(
            id="t-hard",
            question="Q hard: which town?",
            answer="Orsk",
            difficulty="hard",
            split="heldout",
        ),
        Task(
            id="t-exam",
            question="Q exam: which town?",
            answer="Orsk",
            difficulty="exam",
            split="exam",
        ),
    ]


def n_observations(messages):
    return sum(1 for m in messages[2:] if m["role"] == "user")


def scripted_reply(messages):
    """A policy whose behaviour depends on the question: right, right via an alias, wrong,
    broken."""
    # the cpu profile's "Q: "
    question = message_text(messages[1]).removeprefix(COMPACT_QUESTION_CUE)
    seen = n_observations(messages)
    if question.startswith("Q easy"):
        return call("text_search", {"query": "Tope founded"}) if seen == 0 else answer("1874")
    if question.startswith("Q medium"):
        if seen == 0:
            return call("text_search", {"query": "river"})
        if seen == 1:
            return call("visit", {"url": "https://wiki.sandbox.test/wiki/Tope", "goal": "river"})
        return answer("Zanura River")
    if question.startswith("Q hard"):
        return call("text_search", {"query": f"town {seen}"}) if seen < 2 else answer("Tope")
    return "I think it is Orsk."  # breaks the format


def config(**kw):
    return ev.EvalConfig.for_profile("cpu", progress=False, **kw)


def run(tmp_path, tasks=None, policy=None, **kw):
    policy = policy if policy is not None else ScriptedChat(scripted_reply)
    kw.setdefault("toolbox", make_toolbox([]))
    kw.setdefault("config", config())
    kw.setdefault("name", "scripted")
    return ev.evaluate(tmp_path, tasks if tasks is not None else four_tasks(), policy, **kw)


def test_metrics_match_a_hand_count(tmp_path):
    m = run(tmp_path)
    assert (m["n_tasks"], m["n_correct"], m["pass_at_1"]) == (4, 2, 0.5)
    assert m["accuracy_by_difficulty"] == {"easy": 1.0, "medium": 1.0, "hard": 0.0, "exam": 0.0}
    assert m["accuracy_by_split"] == {"exam": 0.0, "heldout": 0.6667}
    assert m["mean_tool_calls_by_type"] == {"image_search": 0.0, "text_search": 1.0, "visit": 0.25}
    assert m["mean_tool_calls"] == 1.25
    assert m["terminations"]["answer"] == 3 and m["terminations"]["format_error"] == 1
    assert m["format_valid_rate"] == 0.75 and m["answer_rate"] == 0.75
    assert m["format_errors"] == {"missing_think": 1}  # the exam task's plain-prose reply
    assert m["by_difficulty"]["medium"] == {
        "n_tasks": 1,
        "n_correct": 1,
        "accuracy": 1.0,
        "se": 0.0,
        "format_valid_rate": 1.0,
        "mean_tool_calls": 2.0,
    }
    # the headline: easy, medium and hard together (the exam task is not a held-out level)
    assert m["headline"] == {"n_tasks": 3, "n_correct": 2, "accuracy": 0.6667, "se": 0.2722,
                             "format_valid_rate": 1.0,
                             "mean_tool_calls": m["headline"]["mean_tool_calls"]}
    times = m["seconds_per_task"]
    assert 0 <= times["median"] <= times["p90"] <= times["max"] and times["mean"] is not None
    out = tmp_path / "eval" / "scripted"
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    by_id = {r["id"]: r for r in results}
    assert by_id["t-medium"]["judge"]["reason"].startswith("matches alias")
    # the answers accepted other than as the gold is written: the alias, not the year
    assert by_id["t-medium"]["judge"]["match"] == "alias" and by_id["t-easy"]["judge"]["match"] \
        == "exact" and by_id["t-hard"]["judge"]["match"] is None
    assert m["accepted_not_exact"] == 1 and m["accepted_by_match"] == {"exact": 1, "alias": 1}
    assert (
        by_id["t-exam"]["prediction"] is None and by_id["t-exam"]["termination"] == "format_error"
    )
    assert [by_id[i]["format_error"] for i in ("t-easy", "t-medium", "t-hard", "t-exam")] == [
        None,
        None,
        None,
        "missing_think",
    ]
    assert by_id["t-hard"]["tool_counts"] == {"image_search": 0, "text_search": 2, "visit": 0}
    assert by_id["t-easy"]["trajectory"]["messages"][-1]["content"].endswith(
        "<answer>1874</answer>"
    )
    assert json.loads((out / "metrics.json").read_text())["pass_at_1"] == 0.5
    rows = list(csv.DictReader(io.StringIO((out / "results.csv").read_text())))
    assert [r["id"] for r in rows] == ["t-easy", "t-medium", "t-hard", "t-exam"] and rows[2][
        "text_search"
    ] == "2"


def test_format_errors_count_the_first_bad_turn_of_each_episode_also_in_older_records():
    def turn(code=None):
        return {"verdict": {"ok": code is None, **({"code": code} if code else {})}}

    records = [
        {"format_ok": True, "format_error": None, "trajectory": {"turns": [turn()]}},
        {"format_ok": False, "format_error": "unclosed_think"},
        # written before results carried "format_error": read from the kept turns, first bad one
        # wins
        {
            "format_ok": False,
            "trajectory": {"turns": [turn(), turn("multiple_answers"), turn("unclosed_think")]},
        },
        {"format_ok": False, "trajectory": {"turns": []}},  # the policy wrote nothing
    ]
    assert [ev_metrics.format_error_code(r) for r in records] == [
        None,
        "unclosed_think",
        "multiple_answers",
        ev_metrics.NO_TURN,
    ]
    base = {
        "correct": False,
        "termination": "format_error",
        "difficulty": "easy",
        "split": "heldout",
        "n_tool_calls": 0,
        "seconds": 1.0,
    }
    m = ev_metrics.eval_metrics([{**base, **r} for r in records])
    assert m["format_errors"] == {"unclosed_think": 1, "multiple_answers": 1, ev_metrics.NO_TURN: 1}


def test_summary_table_collects_every_policy_and_the_manifest_records_each(tmp_path):
    run(tmp_path, name="first")
    always_right = ScriptedChat(lambda msgs: answer("Orsk"))
    run(tmp_path, policy=always_right, name="second")
    summary = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert set(summary) == {"first", "second"}
    assert summary["first"]["pass_at_1"] == 0.5 and summary["second"]["pass_at_1"] == 0.5
    assert summary["second"]["accuracy_by_difficulty"] == {
        "easy": 0.0,
        "medium": 0.0,
        "hard": 1.0,
        "exam": 1.0,
    }
    table = list(csv.DictReader(io.StringIO((tmp_path / "eval" / "table.csv").read_text())))
    assert [r["name"] for r in table] == ["first", "second"]
    assert table[1]["acc_exam"] == "1.0" and table[0]["calls_text_search"] == "1.0"
    stages = read_manifest(tmp_path)["stages"]
    assert {"eval/first", "eval/second"} <= set(stages)
    assert (
        stages["eval/first"]["config"]["policy"] == "scripted"
        and stages["eval/first"]["seeds"]["seed"] == 0
    )


def test_a_rerun_resumes_and_only_new_or_changed_tasks_run(tmp_path):
    policy = ScriptedChat(scripted_reply)
    run(tmp_path, policy=policy)
    calls = len(policy.calls)
    m = run(tmp_path, policy=policy)
    assert m["evaluated_this_run"] == 0 and len(policy.calls) == calls and m["pass_at_1"] == 0.5
    tasks = four_tasks() + [
        Task(
            id="t-new", question="Q easy: again?", answer="1874", difficulty="easy", split="heldout"
        )
    ]
    tasks[2].answer = "Tope"  # the hard task changed: its old result no longer counts
    m = run(tmp_path, tasks=tasks, policy=policy)
    assert m["evaluated_this_run"] == 2 and m["n_tasks"] == 5 and m["n_correct"] == 4


class FailingJudge(MatchJudge):
    """Stops the run at its third verdict (a crash in the middle of an evaluation)."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def judge(self, *args, **kw):
        self.n += 1
        if self.n == 3:
            raise RuntimeError("killed")
        return super().judge(*args, **kw)


def test_an_interrupted_run_keeps_what_it_finished_and_leaves_no_duplicates(tmp_path):
    with pytest.raises(RuntimeError, match="killed"):
        run(tmp_path, judge=FailingJudge(), config=config(concurrency=1))
    log = tmp_path / "eval" / "scripted" / "results.jsonl"
    assert len(log.read_text().splitlines()) == 2
    m = run(tmp_path, config=config(concurrency=1))
    assert m["evaluated_this_run"] == 2 and m["n_tasks"] == 4 and m["pass_at_1"] == 0.5
    ids = [json.loads(line)["id"] for line in log.read_text().splitlines()]
    assert sorted(ids) == sorted(t.id for t in four_tasks())


def test_other_settings_under_the_same_name_are_refused_unless_fresh(tmp_path):
    run(tmp_path)
    other = ScriptedChat(lambda msgs: answer("Orsk"))
    other.name = "other"
    with pytest.raises(
        InputError, match=r"eval/scripted holds results made with other settings \(policy"
    ):
        run(tmp_path, policy=other)
    with pytest.raises(InputError, match="top_k"):
        run(tmp_path, config=config(top_k=5))
    m = run(tmp_path, policy=other, fresh=True)
    assert m["evaluated_this_run"] == 4 and m["policy"] == "other"


def test_concurrency_gives_the_same_results_with_one_toolbox_per_thread(tmp_path):
    tasks = [
        Task(
            id=f"t{i}",
            question=("Q easy " if i % 3 == 0 else "Q hard ") + f"#{i}",
            answer="1874",
            difficulty="easy" if i % 3 == 0 else "hard",
        )
        for i in range(12)
    ]
    built = []
    lock = threading.Lock()

    def factory():
        with lock:
            built.append(1)
        return make_toolbox([])

    serial = run(
        tmp_path, tasks=tasks, name="serial", toolbox=factory, config=config(concurrency=1)
    )
    parallel = run(
        tmp_path, tasks=tasks, name="parallel", toolbox=factory, config=config(concurrency=4)
    )
    assert serial["n_correct"] == parallel["n_correct"] == 4
    assert serial["mean_tool_calls_by_type"] == parallel["mean_tool_calls_by_type"]
    assert 2 <= len(built) <= 5  # one for the serial run, at most four for the parallel one
    first = {r["id"]: r["prediction"] for r in ev.load_results(tmp_path, "serial")}
    second = {r["id"]: r["prediction"] for r in ev.load_results(tmp_path, "parallel")}
    assert first == second


def test_wall_time_per_task_is_the_cost_and_episode_time_includes_waiting_for_the_batch(tmp_path):
    import time

    def slow_reply(messages):
        time.sleep(0.2)  # a model that answers in 0.2 s, four episodes in flight at once
        return answer("1874")

    tasks = [
        Task(id=f"t{i}", question=f"Q easy #{i}", answer="1874", difficulty="easy")
        for i in range(8)
    ]
    m = run(tmp_path, tasks=tasks, policy=ScriptedChat(slow_reply), config=config(concurrency=4))
    assert m["wall_timed_tasks"] == 8 and m["wall_seconds_per_task"] == pytest.approx(
        m["seconds"] / 8, abs=1e-3
    )
    # four at a time: a quarter each
    assert m["seconds_per_task"]["mean"] >= 0.2 > m["wall_seconds_per_task"]
    again = run(
        tmp_path, tasks=tasks, policy=ScriptedChat(slow_reply), config=config(concurrency=4)
    )
    assert again["evaluated_this_run"] == 0  # nothing ran: the first run's cost is kept
    assert (again["wall_seconds_per_task"], again["wall_timed_tasks"]) == (
        m["wall_seconds_per_task"],
        8,
    )


def test_the_direct_ablation_shows_no_tools_and_allows_no_call(tmp_path):
    seen_systems = []

    def inner_reply(messages):
        seen_systems.append(messages[0]["content"])
        if "Q easy" in message_text(messages[1]):
            return call("text_search", {"query": "Tope"})  # tries a tool anyway
        return answer("Orsk")

    box = make_toolbox([])
    policy = ev_policies.direct_policy(ScriptedChat(inner_reply), config())
    m = run(tmp_path, policy=policy, toolbox=box, name="direct")
    assert not policy.tools and m["tools"] is False
    assert box.counts == {"text_search": 0, "image_search": 0, "visit": 0}
    results = {r["id"]: r for r in ev.load_results(tmp_path, "direct")}
    assert (
        results["t-easy"]["termination"] == "max_tool_calls"
        and results["t-easy"]["n_tool_calls"] == 0
    )
    assert results["t-exam"]["correct"] and results["t-hard"]["correct"]
    assert m["mean_tool_calls"] == 0.0
    assert all("text_search" not in s and "without tools" in s for s in seen_systems)
    assert ev_policies.direct_system_prompt("2025-09-01", "full").endswith(
        "Today's date: 2025-09-01"
    )


def test_the_direct_ablation_forces_the_answer_of_a_model_trained_on_the_protocol():
    """A tiny model trained on the protocol never answers without searching first: its no-tools
    ablation opens the answer when the reasoning closes (``force_after``) and ends it at its first
    line break; a backend that cannot force (a server, a script) is asked as it is."""
    from vsearcher_lite.chat.batched import BatchedTransformersChat
    from vsearcher_lite.model.tiny import default_base_dir, load_base

    seen = []

    class Model(ScriptedChat):
        def chat(self, messages, **sampling):
            seen.append(sampling.get("force_after"))
            return "<think>\nWhich town?\n</think><answer>Orsk\nQ: and then</think><answer>Tope"

    forced = ev_policies.DirectAnswerPolicy(Model([]), force_answer=True)
    question = [{"role": "user", "content": "Q easy"}]
    assert forced.chat(question) == "<think>\nWhich town?\n</think><answer>Orsk</answer>"
    assert seen == [ev_policies.FORCE_ANSWER]  # with the tool-call tags forbidden
    as_it_is = ev_policies.DirectAnswerPolicy(Model([]))
    assert as_it_is.chat(question).endswith("<answer>Tope") and seen[-1] is None
    model, processor = load_base(default_base_dir())
    assert ev_policies.forces_answers(BatchedTransformersChat(model, processor, max_batch=2))
    assert not ev_policies.forces_answers(ScriptedChat([]))


def test_an_llm_judge_decides_and_is_named(tmp_path):
    judge = LLMJudge(
        ScriptedChat(
            lambda msgs: "extracted_final_answer: Tope\nreasoning: same town.\n**Correct:** yes"
        )
    )
    m = run(tmp_path, judge=judge, name="llm-judged")
    assert m["judge"] == "llm" and m["n_correct"] == 3  # every task that gave an answer
    assert m["judge_failures"] == 0


def test_bad_inputs_are_one_line_errors(tmp_path):
    with pytest.raises(InputError, match="no tasks"):
        run(tmp_path, tasks=[])
    dup = four_tasks() + [four_tasks()[0]]
    with pytest.raises(InputError, match="'t-easy' appears more than once"):
        run(tmp_path, tasks=dup)
    with pytest.raises(InputError, match="eval name 'a/b'"):
        run(tmp_path, name="a/b")
    with pytest.raises(InputError, match="direct ablation needs a model"):
        ev_policies.make_policy("direct:teacher", config())
    with pytest.raises(InputError, match="no model here"):
        ev_policies.make_policy(f"transformers:{tmp_path / 'no_model'}", config())
    with pytest.raises(InputError, match="only works in the sandbox"):
        ev_policies.make_policy("teacher", config(world="live"))
    with pytest.raises(InputError, match="unknown judge"):
        run(tmp_path, judge="oracle")


def test_profiles_and_seeds():
    cpu, gpu = ev.EvalConfig.for_profile("cpu"), ev.EvalConfig.for_profile("single_gpu")
    assert (cpu.prompt_variant, cpu.top_k, cpu.temperature) == ("compact", 3, 0.0)
    assert (gpu.prompt_variant, gpu.top_k, gpu.temperature, gpu.max_tool_calls) == (
        "full",
        5,
        0.6,
        30,
    )
    assert cpu.sampling("a").seed == cpu.sampling("a").seed != cpu.sampling("b").seed
    assert cpu.limits(tools=False).max_tool_calls == 0
    with pytest.raises(TypeError, match="unknown eval setting"):
        ev.EvalConfig.for_profile("cpu", nonsense=1)


def test_figures_and_table_come_from_the_saved_summary(tmp_path):
    from vsearcher_lite.evaluation import plots

    run(tmp_path, name="sft")
    run(tmp_path, policy=ScriptedChat(lambda msgs: answer("Orsk")), name="base")
    summary = ev.read_summary(tmp_path)
    rows = plots.accuracy_table(summary)
    assert [r["policy"] for r in rows] == ["base", "sft"]
    assert rows[1] == {
        "policy": "sft",
        "pass_at_1": 0.5,
        "exam": 0.0,
        "heldout": 0.6667,
        "n_tasks": 4,
    }
    fig = plots.accuracy_bars(summary, by="difficulty")
    assert [t.name for t in fig.data] == ["base", "sft"] and list(fig.data[1].x) == [
        "easy",
        "medium",
        "hard",
        "exam",
    ]
    assert list(fig.data[1].y) == [1.0, 1.0, 0.0, 0.0]
    calls = plots.tool_call_bars(summary)
    assert [t.name for t in calls.data] == ["text_search", "image_search", "visit"] and list(
        calls.data[0].y
    ) == [0.0, 1.0]
    with pytest.raises(KeyError, match="rl"):
        plots.accuracy_table(summary, names=["rl"])


def test_a_local_model_evaluated_in_batches_answers_as_one_by_one(tmp_path):
    from vsearcher_lite.chat.batched import BatchedTransformersChat

    batched = ev_policies.make_policy("base", config(batch=4))
    assert batched.batch == 4 and isinstance(batched.shared, BatchedTransformersChat)
    assert ev_policies.make_policy("base", config(batch=1)).batch == 1
    # peers' turns are not its time
    assert config(wall_clock_s=60.0).limits(batched=True).wall_clock_s is None
    records = {}
    for batch in (1, 4):
        settings = config(batch=batch, max_tokens=12, concurrency=1)
        metrics = run(tmp_path / f"b{batch}", policy="base", config=settings, name=f"b{batch}")
        assert metrics["n_tasks"] == 4
        records[batch] = sorted(
            (
                r["id"],
                r["prediction"],
                r["termination"],
                [t["text"] for t in r["trajectory"]["turns"]],
            )
            for r in ev.load_results(tmp_path / f"b{batch}", f"b{batch}")
        )
    assert records[1] == records[4]
    assert (
        ev.EvalConfig.for_profile("cpu").batch == 16
        and ev.EvalConfig.for_profile("single_gpu").batch == 1
    )


def test_a_greedy_model_run_under_another_seed_resumes_but_a_seeded_policy_does_not(tmp_path):
    first = run(tmp_path, config=config(seed=0))
    again = run(tmp_path, config=config(seed=1))  # greedy: the seed is not read, the results stand
    assert first["evaluated_this_run"] == 4 and again["evaluated_this_run"] == 0
    sampled = config(seed=1, temperature=0.7)
    with pytest.raises(InputError, match="seed"):
        run(tmp_path, config=sampled)
    teacher = ev_policies.make_policy("teacher", config())
    assert teacher.uses_seed and "seed" in ev_identity.run_identity(teacher, config(), MatchJudge())
