"""The ReAct loop: message shapes, one tool call per turn, error observations, every termination."""

import json

import pytest
from agent_fakes import FakeImage, FakeReader, FakeText, FirstParagraph
from PIL import Image

from vsearcher_lite.agent.format import strict_format_check
from vsearcher_lite.agent.loop import (
    TERMINATIONS,
    EpisodeLimits,
    Sampling,
    Trajectory,
    replay_mismatches,
    run_episode,
)
from vsearcher_lite.agent.protocol import format_assistant_turn, system_prompt
from vsearcher_lite.agent.task import Task
from vsearcher_lite.chat import ScriptedChat
from vsearcher_lite.tools.toolbox import Toolbox


@pytest.fixture
def images(tmp_path):
    q, hit = tmp_path / "q.jpg", tmp_path / "hit.png"
    Image.new("RGB", (16, 16), "red").save(q)
    Image.new("RGB", (16, 16), "blue").save(hit)
    return str(q), str(hit)


@pytest.fixture
def toolbox(images):
    return Toolbox(FakeText(), FakeImage([images[1]]), FakeReader(), FirstParagraph())


@pytest.fixture
def task(images):
    return Task(
        id="t1",
        question="In which year was the town shown in the image founded?",
        answer="1874",
        image_path=images[0],
    )


def call(name, args=None, think="Next step."):
    return format_assistant_turn(think, tool_call=(name, args or {}))


def answer(text, think="Found it."):
    return format_assistant_turn(think, answer=text)


def test_happy_path_messages_and_record(toolbox, task, images):
    policy = ScriptedChat(
        [
            call("image_search"),
            call("visit", {"url": "https://wiki.sandbox.test/wiki/Tope", "goal": "founding year"}),
            answer("1874"),
        ]
    )
    traj = run_episode(policy, toolbox, task, sampling=Sampling(seed=3), today="2025-09-01")
    assert traj.termination == "answer" and traj.prediction == "1874" and traj.n_tool_calls == 2
    roles = [m["role"] for m in traj.messages]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert traj.messages[0]["content"] == system_prompt("2025-09-01")
    assert traj.messages[1]["content"][0] == {"type": "image", "image": images[0]}
    image_turn = traj.messages[3]["content"]
    assert image_turn[0]["text"].startswith("<tool_response>\nPages that contain a similar image:")
    assert (
        image_turn[1] == {"type": "image", "image": images[1]}
        and image_turn[-1]["text"] == "</tool_response>"
    )
    assert "founded in 1874" in traj.messages[5]["content"][0]["text"]
    assert [t.tool for t in traj.tool_calls] == ["image_search", "visit"]
    assert traj.tool_counts() == {"image_search": 1, "visit": 1}
    sent = policy.calls[0]["sampling"]
    assert sent["stop"] == ["<tool_response>"] and sent["seed"] == 3 and sent["temperature"] == 0.6
    # the policy saw the conversation so far, ending on the latest tool response
    assert (
        policy.calls[2]["messages"][-1]["role"] == "user" and len(policy.calls[2]["messages"]) == 6
    )
    assert all(
        strict_format_check(m["content"]).ok for m in traj.messages if m["role"] == "assistant"
    )


def test_trajectory_round_trips_through_json(toolbox, task):
    traj = run_episode(
        ScriptedChat([call("text_search", {"query": "Tope"}), answer("1874")]), toolbox, task
    )
    traj.meta["difficulty"] = "easy"
    back = Trajectory.from_json(json.dumps(traj.to_dict()))
    assert back == traj and back.turns[0].observation["tool"] == "text_search"
    with pytest.raises(KeyError, match="termination"):
        Trajectory.from_dict({"task_id": "x", "question": "q", "messages": [], "turns": []})


def test_format_error_ends_the_episode_and_keeps_the_bad_turn(toolbox, task):
    policy = ScriptedChat(
        [call("image_search"), "I think the answer is 1874.", answer("never reached")]
    )
    traj = run_episode(policy, toolbox, task)
    assert traj.termination == "format_error" and traj.prediction is None and traj.n_tool_calls == 1
    assert (
        traj.error.startswith("missing_think")
        and traj.messages[-1]["content"] == "I think the answer is 1874."
    )
    assert len(policy.calls) == 2 and traj.turns[-1].verdict["ok"] is False


def test_lenient_mode_explains_the_error_and_allows_a_bounded_number(toolbox, task):
    limits = EpisodeLimits(strict_format=False, max_format_errors=2)
    traj = run_episode(ScriptedChat(["oops", answer("1874")]), toolbox, task, limits=limits)
    assert traj.termination == "answer" and traj.prediction == "1874"
    feedback = traj.messages[3]["content"][0]["text"]
    assert feedback.startswith(
        "<tool_response>\nError: your last reply broke the format (missing_think"
    )
    stubborn = run_episode(ScriptedChat(["bad"] * 10), toolbox, task, limits=limits)
    assert stubborn.termination == "format_error" and len(stubborn.turns) == 3


def test_unknown_tools_bad_arguments_and_tool_failures_become_observations(toolbox, task):
    policy = ScriptedChat(
        [
            call("calculator", {"x": 1}),
            call("text_search", {"q": "typo"}),
            call("visit", {"url": "https://wiki.sandbox.test/missing", "goal": "g"}),
            answer("1874"),
        ]
    )
    traj = run_episode(policy, toolbox, task)
    assert traj.termination == "answer" and traj.n_tool_calls == 3
    texts = [traj.messages[i]["content"][0]["text"] for i in (3, 5, 7)]
    assert "Error: unknown tool 'calculator'" in texts[0]
    assert "Error: text_search: unknown argument(s) q" in texts[1]
    assert "Error: no page at https://wiki.sandbox.test/missing" in texts[2]
    assert [t.observation["ok"] for t in traj.tool_calls] == [False, False, False]
    # every assistant turn is followed by its observation: roles alternate
    roles = [m["role"] for m in traj.messages[1:]]
    assert roles == ["user", "assistant"] * 4


def test_max_tool_calls_stops_before_the_extra_call(toolbox, task):
    policy = ScriptedChat(lambda messages: call("text_search", {"query": f"q{len(messages)}"}))
    traj = run_episode(policy, toolbox, task, limits=EpisodeLimits(max_tool_calls=4))
    assert traj.termination == "max_tool_calls" and traj.n_tool_calls == 4
    assert len(traj.turns) == 5 and traj.turns[-1].tool is None and len(policy.calls) == 5


def test_answer_after_the_last_allowed_call_counts(toolbox, task):
    policy = ScriptedChat(
        [call("image_search"), call("text_search", {"query": "x"}), answer("1874")]
    )
    traj = run_episode(policy, toolbox, task, limits=EpisodeLimits(max_tool_calls=2))
    assert traj.termination == "answer" and traj.n_tool_calls == 2


def test_context_budget_in_characters_and_in_tokens(toolbox, task):
    policy = ScriptedChat(lambda messages: call("text_search", {"query": "long " * 50}))
    traj = run_episode(policy, toolbox, task, limits=EpisodeLimits(max_context_chars=5000))
    assert (
        traj.termination == "context_exceeded"
        and 0 < traj.n_tool_calls < 30
        and "characters" in traj.error
    )
    counted = []

    def counter(messages):
        counted.append(len(messages))
        return 100 * len(messages)

    limits = EpisodeLimits(max_context_tokens=450, token_counter=counter)
    traj = run_episode(ScriptedChat(lambda m: call("image_search")), toolbox, task, limits=limits)
    # 2 messages (200), 4 (400), 6 (600 > 450): two calls ran
    assert (
        traj.termination == "context_exceeded" and traj.n_tool_calls == 2 and counted == [2, 4, 6]
    )


def test_wall_clock_budget(toolbox, task):
    now = [0.0]

    def clock():
        return now[0]

    def slow_policy(messages):
        now[0] += 40.0
        return call("image_search")

    traj = run_episode(
        ScriptedChat(slow_policy),
        toolbox,
        task,
        limits=EpisodeLimits(wall_clock_s=100),
        clock=clock,
    )
    assert traj.termination == "timeout" and traj.n_tool_calls == 3 and traj.seconds == 120.0


def test_policy_errors_end_the_episode(toolbox, task):
    # then ChatError: script is empty
    traj = run_episode(ScriptedChat([call("image_search")]), toolbox, task)
    assert (
        traj.termination == "policy_error" and "ChatError" in traj.error and traj.n_tool_calls == 1
    )

    class Broken:
        name = "broken"

        def chat(self, messages, **kw):
            return None

    assert run_episode(Broken(), toolbox, task).termination == "policy_error"


def test_reply_is_cut_at_a_tool_response_the_backend_did_not_stop_at(toolbox, task):
    greedy = call("image_search") + "\n<tool_response>\nI made this up\n</tool_response>"
    traj = run_episode(ScriptedChat([greedy, answer("1874")]), toolbox, task)
    assert traj.termination == "answer" and "made this up" not in traj.messages[2]["content"]


def test_task_without_image_and_dict_tasks(toolbox):
    task = {"id": "t2", "question": "Who designed the Tope bridge?", "answer": "Bepo"}
    traj = run_episode(ScriptedChat([call("image_search"), answer("Bepo")]), toolbox, task)
    assert traj.messages[1]["content"] == [
        {"type": "text", "text": "Who designed the Tope bridge?"}
    ]
    assert "Error: this question has no image" in traj.messages[3]["content"][0]["text"]


def test_compact_prompt_variant(toolbox, task):
    traj = run_episode(ScriptedChat([answer("1874")]), toolbox, task, variant="compact")
    assert traj.messages[0]["content"] == system_prompt(variant="compact", today="2025-09-01")
    assert len(traj.messages[0]["content"]) < 300


def test_replay_detects_changed_observations(toolbox, task, images):
    policy = ScriptedChat(
        [call("image_search"), call("text_search", {"query": "Tope"}), answer("1874")]
    )
    traj = run_episode(policy, toolbox, task)
    assert replay_mismatches(traj, toolbox) == []

    class OtherText(FakeText):
        def search(self, query, k=5):
            return super().search(query + " changed", k)

    changed = Toolbox(OtherText(), FakeImage([images[1]]), FakeReader(), FirstParagraph())
    assert replay_mismatches(traj, changed) == [
        "turn 1 (text_search): the observation text differs"
    ]


def test_terminations_are_named():
    assert set(TERMINATIONS) == {
        "answer",
        "format_error",
        "max_tool_calls",
        "context_exceeded",
        "timeout",
        "policy_error",
    }
