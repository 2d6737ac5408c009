"""Teachers: the heuristic sandbox teacher (through the real loop and tools) and an LLM teacher."""

import json
import re

import pytest
from agent_fakes import (
    answer,
    build_sandbox_run,
    call,
    image_tasks,
    make_images,
    make_toolbox,
    sandbox_toolbox,
)

from vsearcher_lite.agent.brief import TeacherBrief, _image_noun, answer_goal
from vsearcher_lite.agent.format import strict_format_check
from vsearcher_lite.agent.judge import MatchJudge
from vsearcher_lite.agent.loop import run_episode
from vsearcher_lite.agent.reading import parse_hits, parse_visit, read_values, split_names
from vsearcher_lite.agent.task import Task
from vsearcher_lite.agent.teacher import HeuristicTeacher
from vsearcher_lite.chat import message_text


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return build_sandbox_run(tmp_path_factory.mktemp("teacher"))


@pytest.fixture(scope="module")
def tasks(run):
    return image_tasks(run)


@pytest.fixture(scope="module")
def toolbox(run):
    return sandbox_toolbox(run, top_k=3)


@pytest.fixture(scope="module")
def turn_tokens():
    """``(tokens, limit)``: a reply's length in the tiny base's tokens as the cpu evaluation
    counts it, and that evaluation's cut (``eval.max_tokens`` new tokens a turn)."""
    from transformers import AutoTokenizer

    from vsearcher_lite.model.tiny import default_base_dir
    from vsearcher_lite.training.config import SFTConfig

    tokenizer = AutoTokenizer.from_pretrained(default_base_dir())
    return (lambda reply: len(tokenizer(reply + "<|im_end|>")["input_ids"]),
            SFTConfig.for_profile("cpu").eval.max_tokens)


# -- reading observations and pages ---------------------------------------------------------------


def test_parse_hits_and_visit():
    text = (
        '<tool_response>\nResults for "x":\n1. Orsk Bridge\n   URL: https://wiki.sandbox.test/wiki/Orsk_Bridge\n'
        "   Orsk Bridge spans the Velna River.\n2. Orsk news\n   URL: https://wiki.sandbox.test/news/2001/orsk-1\n</tool_response>"
    )
    hits = parse_hits(text)
    assert [(h.rank, h.title, h.is_article) for h in hits] == [
        (1, "Orsk Bridge", True),
        (2, "Orsk news", False),
    ]
    assert hits[0].snippet == "Orsk Bridge spans the Velna River." and hits[1].snippet == ""
    assert parse_hits("Error: the text_search tool failed") == []
    page = (
        "Page: Orsk\nURL: https://wiki.sandbox.test/wiki/Orsk\n"
        "Relevant content:\nOrsk\nOrsk is a town."
    )
    assert parse_visit(page) == (
        "Orsk",
        "https://wiki.sandbox.test/wiki/Orsk",
        "Orsk\nOrsk is a town.",
    )
    assert parse_visit("Error: no page") == ("", "", "")


@pytest.mark.parametrize(
    "text, relation, subject, expected",
    [
        (
            "The Velna River runs past Orsk, Tope and Kel. It is long.",
            "flows_through",
            "Velna River",
            ["Orsk, Tope and Kel"],
        ),
        (
            "Orsk Bridge was designed by Ilsa Maren and completed in 1874.",
            "designed_by",
            "Orsk Bridge",
            ["Ilsa Maren"],
        ),
        (
            "Orsk Bridge was designed by Ilsa Maren and completed in 1874.",
            "year_built",
            "Orsk Bridge",
            ["1874"],
        ),
        ("The bridge is 27 m tall. Orsk is 3 km away.", "height", "Orsk Bridge", ["27 m"]),
        ("Lake Kel is up to 12.5 m deep.", "depth", "Lake Kel", ["12.5 m"]),
        (
            "Ilsa Maren (1801–1870) was an architect born in Orsk.",
            "born_in",
            "Ilsa Maren",
            ["Orsk"],
        ),
        (
            "Ilsa Maren (1801–1870) was an architect born in Orsk.",
            "occupation",
            "Ilsa Maren",
            ["architect"],
        ),
        ("Orsk Bridge is a bridge in Tope.", "located_in", "Orsk Bridge", ["Tope"]),
        ("Maren designed the Tope Hall…", "designed_by", "Tope Hall", []),
        (
            "Samhol Damova described Zoldei rarensis in 1754…",
            "year_described",
            "Zoldei rarensis",
            ["1754"],
        ),
        ("Nothing about it here.", "height", "Orsk Bridge", []),
    ],
)
def test_read_values_uses_the_sandbox_templates(text, relation, subject, expected):
    assert read_values(text, relation, [subject]) == expected


def test_split_names_and_goal():
    assert split_names("Orsk, the Tope Hall (1874) and Kel") == ["Orsk", "Tope Hall", "Kel"]
    assert answer_goal("located in", "Orsk") == "who or what Orsk is located in"
    assert answer_goal("height", "Orsk Bridge") == "the height of Orsk Bridge"


# -- what the teacher may know --------------------------------------------------------------------


def test_the_brief_holds_no_hidden_name_and_no_answer(tasks):
    judge = MatchJudge()
    for task in tasks:
        brief = json.dumps(TeacherBrief.from_task(task).__dict__, default=lambda o: o.__dict__)
        hidden = [r.entity for r in task.rounds] + ([task.image.entity] if task.image else [])
        for name in hidden:
            if not re.search(r"(?<!\w)" + re.escape(name) + r"(?!\w)", task.question):
                assert not re.search(r"(?<!\w)" + re.escape(name) + r"(?!\w)", brief), (
                    task.id,
                    name,
                )
        if (
            not judge.judge("", task.answer, task.question).correct
            and task.answer not in task.question
        ):
            assert f'"{task.answer}"' not in brief, task.id


def test_names_in_tool_calls_come_from_observations(tasks, toolbox):
    """Every URL the teacher visits and every capitalised name it searches for was read first."""
    for task in tasks[:20]:
        traj = run_episode(HeuristicTeacher(task, mistake_rate=0.0), toolbox, task)
        seen = task.question
        for turn in traj.turns:
            if turn.tool == "visit":
                assert turn.arguments["url"] in seen, (task.id, turn.arguments)
            if turn.tool == "text_search":
                for word in re.findall(r"\b[A-Z][\w'-]+", turn.arguments["query"]):
                    assert word in seen, (task.id, word, turn.arguments)
            if turn.observation:
                seen += "\n" + turn.observation["text"]


# -- the teacher in the loop ----------------------------------------------------------------------


def test_teacher_follows_the_protocol_and_is_deterministic(tasks, toolbox):
    task = next(t for t in tasks if t.difficulty == "medium")
    first = run_episode(HeuristicTeacher(task, seed=1), toolbox, task)
    again = run_episode(HeuristicTeacher(task, seed=1), toolbox, task)
    assert first.messages == again.messages and first.termination == "answer"
    assert all(
        strict_format_check(m["content"]).ok for m in first.messages if m["role"] == "assistant"
    )
    assert first.turns[0].tool == "image_search"  # the image comes first
    assert first.turns[-1].verdict["kind"] == "answer" and first.turns[-2].tool in (
        "visit",
        "text_search",
    )
    # a reply depends only on the conversation: asking again gives the same turn
    teacher = HeuristicTeacher(task, seed=1)
    prefix = first.messages[:4]
    assert teacher.chat(prefix) == teacher.chat(list(prefix)) == first.messages[4]["content"]
    for m in first.messages:
        if m["role"] == "assistant":
            think = m["content"].split("</think>")[0]
            assert len(think) > len("<think>\n") + 10  # short reasoning is written


def test_teacher_succeeds_often_fails_sometimes_and_works_harder_on_harder_tasks(tasks, toolbox):
    judge = MatchJudge()
    by_level: dict[str, list] = {}
    careful = careless = 0
    for task in tasks:
        traj = run_episode(HeuristicTeacher(task, seed=0, mistake_rate=0.1), toolbox, task)
        ok = judge.judge(task.question, task.answer, traj.prediction, task.aliases).correct
        by_level.setdefault(task.difficulty, []).append((ok, traj.n_tool_calls))
        careful += judge.judge(
            "",
            task.answer,
            run_episode(HeuristicTeacher(task, mistake_rate=0.0), toolbox, task).prediction,
        ).correct
        careless += judge.judge(
            "",
            task.answer,
            run_episode(HeuristicTeacher(task, mistake_rate=0.6), toolbox, task).prediction,
        ).correct
    acc = {d: sum(o for o, _ in v) / len(v) for d, v in by_level.items()}
    calls = {d: sum(n for _, n in v) / len(v) for d, v in by_level.items()}
    overall = sum(o for v in by_level.values() for o, _ in v) / len(tasks)
    assert 0.5 < overall < 1.0, acc
    assert calls["easy"] < calls["medium"] < calls["hard"], calls
    assert careless < careful, (careless, careful)  # hasty picks really are mistakes


# -- an LLM teacher through the loop, over a loopback OpenAI-compatible server -------------------


def test_llm_teacher_through_the_loop_including_broken_replies(tmp_path):
    from servers import ReplayChatServer

    from vsearcher_lite.live.openai import OpenAIChat

    q, hits = make_images(tmp_path)
    task = Task(
        id="llm1",
        question="In which year was the town shown in the image founded?",
        answer="1874",
        image_path=q,
    )
    replies = [
        # episode 1: a clean run
        call("image_search", think="Identify the town first."),
        call("visit", {"url": "https://wiki.sandbox.test/wiki/Tope", "goal": "founding year"}),
        answer("1874"),
        # episode 2: a reply that forgets to close its reasoning ends the trajectory
        call("image_search"),
        "<think>The town is Tope, founded in 1874.\n<answer>1874</answer>",
        # episode 3: prose instead of the protocol
        "Sure! The answer is 1874.",
    ]
    with ReplayChatServer(replies) as server:
        teacher = OpenAIChat(
            model="teacher",
            base_url=server.base_url,
            api_key="k",
            max_retries=0,
            sleep=lambda s: None,
        )
        toolbox = make_toolbox(hits)
        good = run_episode(teacher, toolbox, task)
        broken = run_episode(teacher, toolbox, task)
        prose = run_episode(teacher, toolbox, task)
        requests = list(server.requests)
    assert good.termination == "answer" and good.prediction == "1874" and good.n_tool_calls == 2
    assert (
        broken.termination == "format_error"
        and broken.error.startswith("unclosed_think")
        and broken.n_tool_calls == 1
    )
    assert prose.termination == "format_error" and prose.error.startswith("missing_think")
    first = requests[0]["json"]
    assert first["stop"] == ["<tool_response>"] and first["temperature"] == 0.6
    # the question image travels as a data URL; the image search results come back as images too
    parts = first["messages"][1]["content"]
    assert parts[0]["type"] == "image_url" and parts[0]["image_url"]["url"].startswith(
        "data:image/"
    )
    second = requests[1]["json"]["messages"][3]["content"]
    assert sum(1 for p in second if p["type"] == "image_url") == len(hits)
    assert "<tool_response>" in message_text(
        {"content": [p for p in second if p["type"] == "text"]}
    )


# -- the cpu profile's compact style: same search, fewer words ------------------------------------


def test_compact_style_solves_as_many_tasks_in_fewer_tokens(tasks, run):
    """The compact teacher (the cpu profile's) makes the same first decision from the same image
    search, answers about as many tasks correctly as the full one, and writes shorter thoughts
    (its notes are a few words plus the restated "Q: ..." line the next call copies, so a little
    over half as many characters); its observations are shorter than the full ones for the same
    calls."""
    full_box, compact_box = (
        sandbox_toolbox(run, top_k=3),
        sandbox_toolbox(run, top_k=3, style="compact"),
    )
    judge = MatchJudge()
    think_full = think_compact = obs_full = obs_compact = solved_full = solved_compact = 0
    for task in tasks[:12]:
        full = run_episode(HeuristicTeacher(task, seed=2), full_box, task)
        compact = run_episode(HeuristicTeacher(task, seed=2, style="compact"), compact_box, task)
        assert full.turns[0].tool == compact.turns[0].tool == "image_search"
        solved_full += bool(
            judge.judge(task.question, task.answer, full.prediction, task.aliases).correct
        )
        solved_compact += bool(
            judge.judge(task.question, task.answer, compact.prediction, task.aliases).correct
        )
        for trajectory in (full, compact):
            for m in trajectory.messages:
                if m["role"] == "assistant":
                    assert strict_format_check(m["content"]).ok
        think_full += sum(
            len(m["content"].split("</think>")[0])
            for m in full.messages
            if m["role"] == "assistant"
        )
        think_compact += sum(
            len(m["content"].split("</think>")[0])
            for m in compact.messages
            if m["role"] == "assistant"
        )
        for turn in compact.turns:
            if turn.tool in (
                "text_search",
                "visit",
            ):  # image search lists titles only, in both styles
                obs_full += len(full_box.call(turn.tool, turn.arguments).text)
                obs_compact += len(compact_box.call(turn.tool, turn.arguments).text)
    assert solved_compact >= solved_full - 2 and solved_compact >= 6, (solved_compact, solved_full)
    assert think_compact < 0.6 * think_full, (think_compact, think_full)
    assert obs_compact < 0.85 * obs_full, (obs_compact, obs_full)
    with pytest.raises(ValueError, match="thought style"):
        HeuristicTeacher(tasks[0], style="terse")


WORDS = re.compile(r"[^\W_]+")


def call_of(message: dict) -> dict | None:
    """The tool call an assistant message makes, or None."""
    if message["role"] != "assistant" or "<tool_call>" not in message["content"]:
        return None
    return json.loads(message["content"].split("<tool_call>")[1].split("</tool_call>")[0])


def tool_calls(traj) -> list[dict]:
    """The tool calls an episode's assistant turns wrote, in order."""
    return [c for c in map(call_of, traj.messages) if c is not None]


def uncopied_arguments(task, traj) -> list[tuple[str, str]]:
    """``(argument, words)`` for each query or goal with a word that is neither in the question
    nor in a tool response read before it."""
    seen = set(WORDS.findall(task.question.lower()))
    missing = []
    for message in traj.messages[2:]:
        call = call_of(message)
        if call is not None:
            for key in ("query", "goal"):
                new = set(WORDS.findall(str(call["arguments"].get(key, "")).lower())) - seen
                if new:
                    missing.append((key, " ".join(sorted(new))))
        if message["role"] == "user":
            seen |= set(WORDS.findall(message_text(message).lower()))
    return missing


def test_compact_arguments_are_copies_of_the_question_and_the_observations(tasks, run):
    """Every word of a compact teacher's query or goal is in the question or in a tool response it
    read before: the tiny model can copy its arguments; it never has to name a relation itself."""
    box = sandbox_toolbox(run, top_k=3, style="compact")
    restated = 0
    for task in tasks[:20]:
        traj = run_episode(HeuristicTeacher(task, seed=2, style="compact"), box, task)
        assert not uncopied_arguments(task, traj), (task.question, uncopied_arguments(task, traj))
        restated += sum(str(c["arguments"].get("goal", "")).endswith("?")
                        for c in tool_calls(traj))
        if traj.turns:
            noun = _image_noun(task.image.description) if task.image else ""
            first = traj.messages[2]["content"]
            assert not noun or f"Which {noun} is in the image?" in first
    assert restated >= 10


def test_the_cpu_evaluation_lets_every_compact_teacher_turn_through(tasks, run, turn_tokens):
    """The cpu preset cuts a turn at ``eval.max_tokens`` new tokens (to stop a looping tiny model);
    every turn the compact teacher writes, and so every turn SFT teaches, must fit under that
    cut."""
    tokens, limit = turn_tokens
    box = sandbox_toolbox(run, top_k=3, style="compact")
    lengths = []
    for task in tasks:
        trajectory = run_episode(HeuristicTeacher(task, seed=3, style="compact"), box, task)
        lengths += [tokens(m["content"]) for m in trajectory.messages if m["role"] == "assistant"]
    assert len(lengths) > 2 * len(tasks) and max(lengths) <= limit, (max(lengths), limit)


@pytest.fixture(scope="module")
def exam_tasks(tmp_path_factory):
    """Ten-round exam tasks of a small world with their images (unfiltered: a 400-entity world has
    few entities of a kind, so the text-only filter keeps only a handful)."""
    from test_synth_support import copy_run, small_sandbox

    from vsearcher_lite.synthesis.inject import InjectConfig, run_inject_image

    run = copy_run(small_sandbox(tmp_path_factory), tmp_path_factory.mktemp("exam") / "run")
    run_inject_image(run, InjectConfig(n_train=0, n_heldout=0, n_exam=60, progress=False))
    return run, image_tasks(run)


def test_the_compact_teacher_walks_ten_round_exam_chains_within_the_tool_limit(exam_tasks):
    """An exam question hides ten entities behind one another: the teacher, as the cpu evaluation
    runs it (compact, top 3, hasty at one decision in ten), must reach the end of the chain inside
    the paper's 30 tool calls and answer a real share of them (hard, but solvable)."""
    run, tasks = exam_tasks
    assert len(tasks) >= 10 and all(len(t.rounds) == 10 for t in tasks)
    box = sandbox_toolbox(run, top_k=3, style="compact")
    judge = MatchJudge()
    correct, endings = 0, []
    for task in tasks:
        traj = run_episode(
            HeuristicTeacher(task, seed=0, mistake_rate=0.1, style="compact"), box, task
        )
        endings.append(traj.termination)
        correct += judge.judge(task.question, task.answer, traj.prediction, task.aliases).correct
    assert endings.count("answer") == len(tasks), endings
    assert correct / len(tasks) >= 0.5, (correct, len(tasks))  # 30 of these 45 measured


def test_the_teacher_keeps_its_checks_within_a_tighter_limit(tasks, run):
    """The cpu held-out evaluation allows 10 tool calls: told so, the teacher answers every task."""
    from vsearcher_lite.agent.loop import EpisodeLimits

    box = sandbox_toolbox(run, top_k=3, style="compact")
    endings = [
        run_episode(
            HeuristicTeacher(task, seed=0, style="compact", max_tool_calls=10),
            box,
            task,
            limits=EpisodeLimits(max_tool_calls=10),
        ).termination
        for task in tasks
    ]
    assert endings.count("answer") == len(tasks), endings
