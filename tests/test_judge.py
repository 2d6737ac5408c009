"""Judges: the normalised-match judge and the LLM judge (scripted and over a loopback server)."""

from decimal import Decimal

import pytest

from vsearcher_lite.agent.judge import (
    Judge,
    LLMJudge,
    MatchJudge,
    Verdict,
    make_judge,
    normalize_answer,
    numbers_match,
    parse_judge_reply,
    parse_quantity,
)
from vsearcher_lite.chat import ChatError, ScriptedChat


def test_normalize_answer_hand_cases():
    assert normalize_answer("The  Zanúra–Kel Bridge.") == "zanura kel bridge"
    assert normalize_answer("An Apple a day") == "apple day"
    assert normalize_answer("ﬁeld") == "field"  # NFKD folds the ligature
    assert normalize_answer("3.14159") == "3.14159" and normalize_answer("1,234,567") == "1234567"
    assert normalize_answer(None) == "" and normalize_answer("  ") == ""


@pytest.mark.parametrize(
    "gold, prediction, aliases, correct",
    [
        ("Zanura River", "zanura river", (), True),
        ("Zanura River", "The Zanura River.", (), True),
        ("Zanura River", "ZANURA  RIVER", (), True),
        ("São Tomé", "Sao Tome", (), True),
        ("Zanura River", "Zanura River (Kel Province)", (), True),
        ("Zanura River", "Kelo River", (), False),
        ("Zanura River", "Zanura", (), False),
        ("Bepo Kala", "Kala", ("Kala", "B. Kala"), True),
        ("Bepo Kala", "b kala", ("Kala", "B. Kala"), True),
        ("1874", "1874", (), True),
        ("1874", "in 1874", (), True),
        ("1874", "1875", (), False),  # years: exact
        ("1874", "1874 or 1875", (), False),
        ("1,234", "1234", (), True),
        ("1,234 m", "1234", (), True),
        ("1,234 m", "1,234 metres", (), True),  # the same unit spelled out
        ("1,234 m", "1,240 metres", (), False),
        ("1,234 m", "1230 m", (), False),  # a nearby number is another number
        ("1,234 m", "1,234 km", (), False),  # another unit
        ("48,000", "48100", (), False),
        ("3.5", "3.5", (), True),
        ("-12", "\u221212", (), True),
        ("-12", "12", (), False),
        ("Paris", "", (), False),
        ("Paris", None, (), False),
    ],
)
def test_match_judge_cases(gold, prediction, aliases, correct):
    v = MatchJudge().judge("question?", gold, prediction, aliases)
    assert isinstance(v, Verdict) and v.correct is correct, (gold, prediction, v)
    assert v.reason and v.method == "match"


@pytest.mark.parametrize(
    "gold, prediction",
    [
        ("925", "916"),  # within 1 %: still another number
        ("37,381 km²", "37,020 km²"),
        ("913", "910de"),
        ("29,618 km²", "29,507"),
        ("1874", "1875"),  # a year off by one
        ("1874", "1873"),
        ("925.4", "925"),  # fewer digits than the gold: a different number
        ("1.2 million", "1.3 million"),
        ("14,968", "15,000"),
    ],
)
def test_a_nearby_number_is_not_the_gold(gold, prediction):
    v = MatchJudge().judge("How many?", gold, prediction)
    assert not v.correct and v.match is None, (gold, prediction, v)


@pytest.mark.parametrize(
    "gold, prediction",
    [
        ("37,381 km²", "37381 km2"),  # separators and the unit's spellings
        ("37,381 km²", "37 381 km²"),
        ("37,381 km²", "37,381 square kilometres"),
        ("37,381 km²", "37\u202f381 sq km"),  # a narrow no-break space between the groups
        ("37,381 km²", "about 37,381"),  # the unit left out, a filler word
        ("1.2 million", "1,200,000"),  # the gold's own rounding
        ("1.2 million", "1,230,000"),  # written at the gold's precision, it is the gold
        ("925", "925.4"),  # more digits than the gold, rounding to it
        ("925", "925.0"),
        ("132", "132 members"),  # the gold's count with its noun
        ("3.5", "3.50"),
    ],
)
def test_the_gold_written_another_way_is_the_gold(gold, prediction):
    v = MatchJudge().judge("How many?", gold, prediction)
    assert v.correct and v.match == "number", (gold, prediction, v)
    assert v.reason.startswith("matches the gold: "), v.reason


def test_verdicts_say_how_they_matched_and_why_not():
    j = MatchJudge()
    assert j.judge("q", "Zanura River", " Zanura River ").match == "exact"
    assert j.judge("q", "14,968", "14,968").match == "exact"
    assert j.judge("q", "Zanura River", "the zanura river.").match == "normalised"
    assert j.judge("q", "Zanura River", "Zanura River (Kel Province)").match == "normalised"
    assert j.judge("q", "Bepo Kala", "b kala", ("B. Kala",)).match == "alias"
    assert j.judge("q", "14,968", "14968").match == "number"
    assert j.judge("q", "Zanura River", "Kelo River").match is None
    assert j.judge("q", "1874", "1875").reason == "year 1875 is not 1874"
    assert j.judge("q", "925", "916").reason == "916 is not 925"
    assert "fewer digits" in j.judge("q", "925.4", "925").reason
    assert j.judge("q", "Paris", None).reason == "no answer"
    assert Verdict(True, "x", match="exact").to_dict()["match"] == "exact"


def test_the_match_judge_has_no_margin_to_set():
    with pytest.raises(TypeError):
        MatchJudge(rel_tol=0.05)


def test_parse_quantity_and_numbers_match():
    assert parse_quantity("approximately 2,500 people") == (Decimal(2500), 0, "people")
    assert parse_quantity("12km") == (Decimal(12), 0, "km")
    assert parse_quantity("3.25 Kilometres") == (Decimal("3.25"), -2, "km")
    assert parse_quantity("37,381 km²").unit == parse_quantity("37381 square km").unit == "km2"
    assert parse_quantity("A4 paper") is None and parse_quantity("") is None
    assert parse_quantity("1874 or 1875") is None
    assert numbers_match("Zanura", "12") is None
    assert numbers_match("1,234 m", "1234 cm") is None  # another unit: the text decides
    assert numbers_match("100", "100.9") == (False, "100.9 is not 100")
    assert numbers_match("100", "100.4") == (True, "100.4 rounds to 100 at the gold's last digit")
    assert numbers_match("100", "100.0") == (True, "100.0 is 100 written another way")


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("extracted_final_answer: Paris\nreasoning: same.\ncorrect: yes", (True, "Paris")),
        ("extracted_final_answer: Rome\nreasoning: differs.\ncorrect: no", (False, "Rome")),
        (
            "**extracted_final_answer:** Paris\n**reasoning:** ok\n**correct:** **Yes**",
            (True, "Paris"),
        ),
        ("Correct: NO", (False, None)),
        ("correct : yes.", (True, None)),
        ("extracted_final_answer: None\ncorrect: no", (False, None)),
        ("The answer is incorrect: yes it is wrong.", (None, None)),
        ("reasoning: at first correct: no, but rereading\ncorrect: yes", (True, None)),
        ("I cannot decide.", (None, None)),
        ("", (None, None)),
        (None, (None, None)),
    ],
)
def test_parse_judge_reply(reply, expected):
    assert parse_judge_reply(reply) == expected


def test_llm_judge_prompt_compares_with_gold_only_and_parses_verdicts():
    chat = ScriptedChat(["extracted_final_answer: 1874\nreasoning: same year\ncorrect: yes"])
    v = LLMJudge(chat).judge(
        "In which year?", "1874", "It was 1874.", aliases=["eighteen seventy-four"]
    )
    assert v.correct and v.extracted == "1874" and v.method == "llm"
    prompt = chat.calls[0]["messages"][0]["content"]
    assert "In which year?" in prompt and "It was 1874." in prompt and "1874" in prompt
    assert "also accepted: eighteen seventy-four" in prompt and "correct: yes" in prompt
    assert chat.calls[0]["sampling"]["temperature"] == 0.0


def test_llm_judge_retries_a_reply_without_a_verdict_then_gives_up():
    chat = ScriptedChat(["hmm, hard to say", "extracted_final_answer: Rome\ncorrect: **no**"])
    v = LLMJudge(chat).judge("q", "Paris", "Rome")
    assert not v.correct and len(chat.calls) == 2 and v.reason == "LLM judge: correct: no"

    never = ScriptedChat(["no idea"] * 5)
    judge = LLMJudge(never, max_attempts=3)
    v = judge.judge("q", "Paris", "Paris")
    assert not v.correct and len(never.calls) == 3 and "no 'correct: yes|no' line" in v.reason
    assert judge.failures == 1


def test_llm_judge_survives_chat_errors_and_skips_empty_predictions():
    calls = []

    def flaky(messages):
        calls.append(1)
        if len(calls) == 1:
            raise ChatError("http://127.0.0.1:9/v1: connection refused")
        return "correct: yes"

    assert LLMJudge(ScriptedChat(flaky)).judge("q", "Paris", "Paris").correct and len(calls) == 2
    down = ScriptedChat([])  # every call raises ChatError
    v = LLMJudge(down, max_attempts=2).judge("q", "Paris", "Paris")
    assert not v.correct and "judge call failed" in v.reason and "after 2 attempt(s)" in v.reason
    silent = ScriptedChat([])
    assert LLMJudge(silent).judge("q", "Paris", "  ").reason == "no answer" and silent.calls == []


def test_make_judge():
    assert isinstance(make_judge("match"), MatchJudge)
    j = MatchJudge()
    assert make_judge(j) is j and isinstance(j, Judge)
    with pytest.raises(ValueError, match="unknown judge"):
        make_judge("oracle")


def test_llm_judge_over_a_loopback_openai_server():
    from servers import ReplayChatServer

    from vsearcher_lite.live.openai import OpenAIChat

    replies = [
        "**Extracted_final_answer:** Zanura\n**Correct:** Yes",  # markdown and case
        "I think so.",  # no verdict line: the judge asks again
        {
            "status": 500
        },  # a server error the client does not retry (max_retries=0): the judge retries
        "extracted_final_answer: Kelo\ncorrect: no",
    ]
    with ReplayChatServer(replies) as server:
        chat = OpenAIChat(
            model="judge",
            base_url=server.base_url,
            api_key="test-key",
            max_retries=0,
            sleep=lambda s: None,
        )
        judge = LLMJudge(chat, max_attempts=3)
        first = judge.judge("Which river?", "Zanura", "Zanura")
        second = judge.judge("Which river?", "Zanura", "Kelo")
        n_requests = len(server.requests)
    assert first.correct and first.extracted == "Zanura"
    assert not second.correct and second.extracted == "Kelo" and n_requests == 4
    sent = server.requests[0]["json"]
    assert sent["model"] == "judge" and "Which river?" in str(sent["messages"][0]["content"])
    assert sent["temperature"] == 0.0
