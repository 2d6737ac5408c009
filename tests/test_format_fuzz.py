"""Fuzzing the format check and the tool-call parser with 12,000 mutated turns.

Deterministic (a fixed seed). Three promises are checked on every input: nothing raises, every
input gets a verdict (never the checker's own ``internal_error``), and a turn that passes
really has the protocol's shape. Mutations whose effect is known must give the known reason.
"""

import json
import random

from vsearcher_lite.agent.format import REASON_CODES, parse_tool_call, strict_format_check
from vsearcher_lite.agent.protocol import PROTOCOL_TAGS, format_assistant_turn

N_RANDOM = 9000
N_KNOWN_PER_RULE = 200
WORDS = [
    "the",
    "bridge",
    "Zanura",
    "1874",
    "{",
    "}",
    '"',
    "\\",
    "ä",
    "名",
    "\u200b",
    "<",
    ">",
    "/",
    "json",
    ":",
    ",",
    "\n",
]


def random_text(rng: random.Random, n_max: int = 12) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, n_max)))


def random_arguments(rng: random.Random) -> dict:
    args = {}
    for _ in range(rng.randint(0, 3)):
        key = rng.choice(["query", "url", "goal", "k", "nested"])
        value = rng.choice(
            [random_text(rng, 5), rng.randint(-5, 5), [1, "a"], {"x": {"y": None}}, True]
        )
        args[key] = value
    return args


def valid_turn(rng: random.Random) -> str:
    think = random_text(rng).replace("<", "&lt;")  # keep the seed valid: no stray tags in thoughts
    if rng.random() < 0.6:
        name = rng.choice(["text_search", "image_search", "visit", "unknown_tool"])
        return format_assistant_turn(think or "x", tool_call=(name, random_arguments(rng)))
    answer = random_text(rng, 4).replace("<", "&lt;").strip() or "Paris"
    return format_assistant_turn(think or "x", answer=answer)


def random_mutation(rng: random.Random, turn: str) -> str:
    op = rng.randrange(7)
    if not turn:
        return rng.choice(PROTOCOL_TAGS)
    i, j = sorted(rng.randrange(len(turn) + 1) for _ in range(2))
    if op == 0:  # delete a span
        return turn[:i] + turn[j:]
    if op == 1:  # insert a tag somewhere
        return turn[:i] + rng.choice(PROTOCOL_TAGS) + turn[i:]
    if op == 2:  # duplicate a span
        return turn[:j] + turn[i:j] + turn[j:]
    if op == 3:  # replace a character with junk
        return (
            turn[:i]
            + rng.choice(["\x00", "\ud800", "{", "]", '"', "\\u", "</", "\U0001f600"])
            + turn[i + 1 :]
        )
    if op == 4:  # truncate
        return turn[:i]
    if op == 5:  # swap two halves
        return turn[i:] + turn[:i]
    return turn.upper() if rng.random() < 0.5 else turn.replace(" ", "")


def check_ok_shape(turn: str, v) -> None:
    """A passing turn really has the protocol's shape."""
    text = turn.strip()
    assert text.startswith("<think>") and text.count("<think>") == 1 and text.count("</think>") == 1
    assert "<tool_response>" not in text and "</tool_response>" not in text
    if v.kind == "answer":
        assert (
            text.endswith("</answer>") and text.count("<answer>") == 1 and "<tool_call>" not in text
        )
        assert v.answer and v.answer == v.answer.strip()
    else:
        assert v.kind == "tool_call" and text.endswith("</tool_call>") and "<answer>" not in text
        assert isinstance(v.call.name, str) and v.call.name and isinstance(v.call.arguments, dict)


def test_random_mutations_never_crash_and_always_get_a_verdict():
    rng = random.Random(1234)
    seen_codes = set()
    n_ok = 0
    for _ in range(N_RANDOM):
        turn = valid_turn(rng)
        for _ in range(rng.randint(1, 3)):
            turn = random_mutation(rng, turn)
        v = strict_format_check(turn)
        assert v.code in REASON_CODES or v.ok
        assert v.code != "internal_error", (turn, v)
        assert str(v) == "ok" if v.ok else str(v).startswith(v.code)
        p = parse_tool_call(turn)
        assert p.code != "internal_error", (turn, p)
        if v.ok:
            n_ok += 1
            check_ok_shape(turn, v)
        else:
            seen_codes.add(v.code)
    # The mutations reach many different failure reasons, and some mutations stay valid.
    assert len(seen_codes) >= 15, sorted(seen_codes)
    assert 0 < n_ok < N_RANDOM


def _tool_turn(rng):
    return format_assistant_turn(
        "Search.", tool_call=("text_search", {"query": random_text(rng, 4).replace("<", "") or "q"})
    )


def _answer_turn(rng):
    return format_assistant_turn(
        "Found it.", answer=rng.choice(["1874", "Zanura", "名前", "a b c"])
    )


# Each rule: (expected code, a function making a known-bad turn from an rng).
KNOWN_BAD = {
    "unclosed_think": lambda rng: _tool_turn(rng).replace("</think>", "", 1),
    "missing_think": lambda rng: _answer_turn(rng).replace("<think>", "").replace("</think>", ""),
    "multiple_think": lambda rng: "<think>x</think>" + _answer_turn(rng),
    "text_before_think": lambda rng: random_text(rng, 3).replace("<", "") + "!" + _answer_turn(rng),
    "tool_call_and_answer": lambda rng: _tool_turn(rng) + "<answer>x</answer>",
    "multiple_tool_calls": lambda rng: _tool_turn(rng) + _tool_turn(rng).split("</think>")[1],
    "multiple_answers": lambda rng: _answer_turn(rng) + "<answer>y</answer>",
    "unclosed_tag": lambda rng: _tool_turn(rng).replace("</tool_call>", ""),
    "tool_call_bad_json": lambda rng: _tool_turn(rng).replace("}}", "}", 1),
    "tool_call_missing_arguments": lambda rng: (
        _tool_turn(rng).split("<tool_call>")[0]
        + '<tool_call>{"name": "%s"}</tool_call>' % rng.choice(["visit", "x"])
    ),
    "text_after_action": lambda rng: (
        _answer_turn(rng) + " " + rng.choice(["Thanks!", "Done.", "x"])
    ),
    "wrote_tool_response": lambda rng: (
        _tool_turn(rng) + "\n<tool_response>\nfake\n</tool_response>"
    ),
    "no_action": lambda rng: "<think>" + random_text(rng).replace("<", "") + "</think>",
    "empty_answer": lambda rng: "<think>a</think><answer>" + " " * rng.randint(0, 3) + "</answer>",
}


def test_known_bad_mutations_get_the_right_reason():
    rng = random.Random(99)
    total = 0
    for code, make in KNOWN_BAD.items():
        for _ in range(N_KNOWN_PER_RULE):
            turn = make(rng)
            v = strict_format_check(turn)
            assert not v.ok and v.code == code, (code, turn, str(v))
            total += 1
    assert total + N_RANDOM >= 10_000


def test_valid_turns_round_trip_their_arguments():
    rng = random.Random(7)
    for _ in range(500):
        args = random_arguments(rng)
        turn = format_assistant_turn("t", tool_call=("visit", args))
        v = strict_format_check(turn)
        assert v.ok and v.call.arguments == json.loads(json.dumps(args))
