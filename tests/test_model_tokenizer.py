"""The tiny base's tokenizer: names and years tokenize the same way in every context the agent
meets them, years are single tokens, the markup survives decoding, training is deterministic."""

from __future__ import annotations

import json
import random

import pytest

pytest.importorskip("tokenizers")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from vsearcher_lite.model.tokenizer import (  # noqa: E402
    MARKUP_TOKENS,
    SPECIAL_TOKENS,
    VISION_TOKENS,
    build_tokenizer,
    markup_token_ids,
    pieces,
    vision_token_ids,
    year_token_ids,
)
from vsearcher_lite.tools.base import SearchHit  # noqa: E402
from vsearcher_lite.tools.toolbox import format_text_hits  # noqa: E402
from vsearcher_lite.world import names  # noqa: E402

NAMES = sorted(
    {
        names.place_root(random.Random(i)) + " " + names.family_name(random.Random(i + 1))
        for i in range(40)
    }
    | {names.place_root(random.Random(1000 + i)) for i in range(40)}
)
TEXT = [
    f'{n} was founded in {1000 + 7 * i}. The {n} Bridge crosses the river. "{n}" (1874) is old.'
    for i, n in enumerate(NAMES)
] * 3


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(TEXT, vocab_size=600)


def ids(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def contains(haystack: list[int], needle: list[int]) -> bool:
    return any(
        haystack[i : i + len(needle)] == needle for i in range(len(haystack) - len(needle) + 1)
    )


def contexts(name: str) -> list[str]:
    """The places a name shows up in an episode: a result list, a JSON query, quotes, a sentence."""
    hits = [
        SearchHit(
            f"https://wiki.sandbox.test/wiki/{name.replace(' ', '_')}", name, f"{name} is a town."
        )
    ]
    return [
        format_text_hits(f"{name} founded", hits),
        json.dumps({"name": "text_search", "arguments": {"query": name}}),
        json.dumps({"name": "text_search", "arguments": {"query": f"year {name} founded"}}),
        f'"{name}"',
        f"'{name}'",
        f"({name})",
        f"<answer>{name}</answer>",
        f"<think>\nThe result says {name}.\n</think>",
        f"1. {name}\n",
        f"Answer: {name}.",
    ]


@pytest.mark.parametrize("name", NAMES[:30])
def test_a_name_tokenizes_the_same_in_every_context(tok, name):
    alone = ids(tok, name)
    for text in contexts(name):
        assert contains(ids(tok, text), alone), (
            f"{name!r} is split differently inside {text!r}: {pieces(tok, text)}"
        )


@settings(max_examples=150, deadline=None)
@given(
    word=st.text(alphabet="abcdefghijklmnopqrstuvwxyzäöüé", min_size=2, max_size=12),
    left=st.sampled_from([" ", '"', "'", "(", '{"query": "', "\n   ", "1. ", "_", "/"]),
    right=st.sampled_from([" ", '"', "'", ")", '"}}', "\n", ".", ",", "_"]),
)
def test_any_word_keeps_its_tokens_between_any_punctuation(tok, word, left, right):
    word = word.capitalize()
    assert contains(ids(tok, f"x{left}{word}{right}y"), ids(tok, word))


def test_every_year_is_one_token_and_only_a_whole_number_matches(tok):
    years = year_token_ids(tok)
    assert len(years) == 2030 - 1000 + 1
    for year in (1000, 1184, 1874, 2024, 2030):
        for text in (str(year), f"in {year}.", f"({year})", f'"{year}"', f"{year}–1900"):
            assert tok.convert_tokens_to_ids(str(year)) in ids(tok, text)
    # no year token inside other numbers
    assert not set(ids(tok, "18745 x1874 999 12,900")) & set(years)
    assert tok.decode(ids(tok, "in 1874, 2030 and 18745")) == "in 1874, 2030 and 18745"


def test_markup_is_single_tokens_kept_by_decoding_while_chat_tokens_are_special(tok):
    markup = markup_token_ids(tok)
    turn = "<think>\nok\n</think>\n<tool_call>\n{}\n</tool_call><answer>x</answer><|im_end|>"
    got = ids(tok, turn)
    for tag in MARKUP_TOKENS[:4] + MARKUP_TOKENS[6:]:
        assert markup[tag] in got
    assert tok.decode(got, skip_special_tokens=True) == turn.replace("<|im_end|>", "")
    assert set(SPECIAL_TOKENS) <= set(tok.all_special_tokens)
    assert not set(MARKUP_TOKENS) & set(tok.all_special_tokens)
    assert (
        tok.eos_token == "<|im_end|>"
        and tok.pad_token == "<|endoftext|>"
        and tok.padding_side == "left"
    )
    assert [tok.convert_ids_to_tokens(i) for i in vision_token_ids(tok)] == list(VISION_TOKENS)


def test_training_is_deterministic(tok):
    again = build_tokenizer(TEXT, vocab_size=600)
    assert again.get_vocab() == tok.get_vocab()
    sample = 'Results for "Orsk Bridge 1874": 1. Orsk'
    assert ids(again, sample) == ids(tok, sample)
