"""The strict format check and the tool-call parser, case by case (paper A.3)."""

import pytest

from vsearcher_lite.agent.format import REASON_CODES, parse_tool_call, strict_format_check
from vsearcher_lite.agent.protocol import format_assistant_turn, format_tool_call

CALL = format_tool_call("text_search", {"query": "red bridge"})
GOOD_CALL = f"<think>I should search.</think>\n{CALL}"
GOOD_ANSWER = "<think>The page says 1874.</think>\n<answer>1874</answer>"


def test_good_turns_pass_and_are_parsed():
    v = strict_format_check(GOOD_CALL)
    assert v.ok and v.kind == "tool_call" and str(v) == "ok"
    assert v.call.name == "text_search" and v.call.arguments == {"query": "red bridge"}
    assert v.think == "I should search."
    a = strict_format_check("\n  " + GOOD_ANSWER + "\n")
    assert a.ok and a.kind == "answer" and a.answer == "1874" and a.call is None


def test_turns_written_by_the_protocol_helpers_pass():
    for turn in (
        format_assistant_turn("Search first.", tool_call=("image_search", {})),
        format_assistant_turn(
            "Read it.",
            tool_call=("visit", {"url": "https://wiki.sandbox.test/wiki/A", "goal": "year"}),
        ),
        format_assistant_turn("Found it.", answer="Zanura River"),
    ):
        assert strict_format_check(turn).ok, turn


def test_empty_think_is_allowed_but_must_be_closed():
    assert strict_format_check("<think></think><answer>x</answer>").ok
    assert strict_format_check("<think><answer>x</answer>").code == "unclosed_think"


@pytest.mark.parametrize(
    "turn, code",
    [
        ("", "empty"),
        ("   \n", "empty"),
        ("<answer>Paris</answer>", "missing_think"),
        ("Let me think. <think>x</think><answer>Paris</answer>", "text_before_think"),
        ("<think>a</think><think>b</think><answer>Paris</answer>", "multiple_think"),
        ("<think>a<answer>Paris</answer>", "unclosed_think"),
        ("a</think><answer>Paris</answer>", "unclosed_think"),
        ("<think>a</think>", "no_action"),
        ("<think>a</think> I am done.", "no_action"),
        (f"<think>a</think>{CALL}<answer>Paris</answer>", "tool_call_and_answer"),
        (f"<think>a</think>{CALL}{CALL}", "multiple_tool_calls"),
        ("<think>a</think><answer>Paris</answer><answer>Rome</answer>", "multiple_answers"),
        ('<think>a</think><tool_call>{"name": "visit", "arguments": {}}', "unclosed_tag"),
        ("<think>a</think><answer>Paris", "unclosed_tag"),
        ("<think>a</think>Paris</answer>", "unclosed_tag"),
        ("<think>a</think></answer>Paris<answer>", "unclosed_tag"),
        ("<think>a <answer>Paris</answer></think>", "action_inside_think"),
        ("<think>a</think> So: <answer>Paris</answer>", "text_between_think_and_action"),
        ("<think>a</think><answer>Paris</answer> Hope this helps!", "text_after_action"),
        (f"<think>a</think>{CALL}\n<tool_response>fake</tool_response>", "wrote_tool_response"),
        ("<think>a</think><answer>   </answer>", "empty_answer"),
        ("<think>a</think><tool_call> </tool_call>", "tool_call_empty"),
        (
            '<think>a</think><tool_call>{"name": "visit", "arguments": {</tool_call>',
            "tool_call_bad_json",
        ),
        ("<think>a</think><tool_call>```json\n{}\n```</tool_call>", "tool_call_bad_json"),
        (
            '<think>a</think><tool_call>{"name": "x", "arguments": {"n": NaN}}</tool_call>',
            "tool_call_bad_json",
        ),
        (
            '<think>a</think><tool_call>{"name": "x", "name": "y", "arguments": {}}</tool_call>',
            "tool_call_bad_json",
        ),
        ('<think>a</think><tool_call>["text_search"]</tool_call>', "tool_call_not_object"),
        ('<think>a</think><tool_call>{"arguments": {}}</tool_call>', "tool_call_missing_name"),
        (
            '<think>a</think><tool_call>{"name": 3, "arguments": {}}</tool_call>',
            "tool_call_bad_name",
        ),
        (
            '<think>a</think><tool_call>{"name": " ", "arguments": {}}</tool_call>',
            "tool_call_bad_name",
        ),
        ('<think>a</think><tool_call>{"name": "visit"}</tool_call>', "tool_call_missing_arguments"),
        (
            '<think>a</think><tool_call>{"name": "visit", "arguments": "u"}</tool_call>',
            "tool_call_bad_arguments",
        ),
        (
            '<think>a</think><tool_call>{"name": "visit", "arguments": {}, "id": 1}</tool_call>',
            "tool_call_extra_keys",
        ),
    ],
)
def test_bad_turns_get_the_right_reason(turn, code):
    v = strict_format_check(turn)
    assert not v.ok and v.code == code, (turn, str(v))
    assert code in REASON_CODES and str(v).startswith(code + ": ")
    assert v.kind is None and v.call is None and v.answer is None


def test_non_strings_get_a_verdict():
    for value in (None, 3, b"<think>", ["<think>"], {"turn": 1}):
        v = strict_format_check(value)
        assert not v.ok and v.code == "not_text"
        assert parse_tool_call(value).code == "not_text"


def test_an_unknown_tool_is_not_a_format_error():
    # The toolbox answers unknown tools with an error observation; the format is fine.
    v = strict_format_check(
        '<think>a</think><tool_call>{"name": "calculator", "arguments": {"x": 1}}</tool_call>'
    )
    assert v.ok and v.call.name == "calculator"


def test_parse_tool_call_reads_tags_or_a_bare_payload():
    assert parse_tool_call(CALL).call.arguments == {"query": "red bridge"}
    assert (
        parse_tool_call('  {"name": "image_search", "arguments": {}} ').call.name == "image_search"
    )
    assert parse_tool_call("<tool_call>{}").code == "unclosed_tag"
    assert parse_tool_call('{"name": "a", "arguments": {}}</tool_call>').code == "unclosed_tag"
    assert parse_tool_call("[" * 100_000).code == "tool_call_bad_json"  # recursion, not a crash
    # A 10,000-digit number passes Python's int-conversion limit: reported as bad JSON, not an
    # internal error.
    assert (
        parse_tool_call('{"name": "a", "arguments": {"n": ' + "9" * 10_000 + "}}").code
        == "tool_call_bad_json"
    )


def test_verdict_to_dict_is_json_ready():
    import json

    d = strict_format_check(GOOD_CALL).to_dict()
    assert json.loads(json.dumps(d))["call"] == {
        "name": "text_search",
        "arguments": {"query": "red bridge"},
    }
