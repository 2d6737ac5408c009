"""The pretraining corpus: no default-world names, no agent protocol, copy targets that really
are copies, segment tokenization equal to whole-text tokenization, determinism."""

from __future__ import annotations

import random
import re

import pytest

from vsearcher_lite.recipes.pretraining.corpus import DOC_KINDS, Corpus, Doc, refresh_names
from vsearcher_lite.world.generator import generate_world
from vsearcher_lite.world.rename import (
    ForbiddenNames,
    default_world_names,
    name_roots,
    rename_roots,
    substitute_words,
)

EXCLUDE_ENTITIES = 300  # a small "default world" keeps the test fast; the logic is the same


@pytest.fixture(scope="module")
def corpus():
    return Corpus(world_seeds=(101, 102, 103), n_entities=200, exclude_entities=EXCLUDE_ENTITIES)


@pytest.fixture(scope="module")
def docs(corpus):
    stream = corpus.stream({k: 1.0 for k in DOC_KINDS}, seed=7)
    return [next(stream) for _ in range(600)]


def test_the_evaluation_world_seed_is_refused():
    with pytest.raises(ValueError, match="evaluation world"):
        Corpus(world_seeds=(0, 101), n_entities=50, exclude_entities=EXCLUDE_ENTITIES)


def test_no_document_names_an_entity_of_the_default_world(docs):
    forbidden = default_world_names(0, EXCLUDE_ENTITIES)
    assert len(forbidden) > 300
    guard = ForbiddenNames(forbidden)
    for doc in docs:
        assert guard.found(doc.text) == [], doc.text[:200]
    # and, stricter, no syllable root of a default-world name appears as a word either
    roots = name_roots(forbidden)
    words = {w.lower() for doc in docs for w in re.findall(r"\w+", doc.text)}
    assert not roots & words


def test_without_renaming_the_worlds_would_share_roots():
    """The renaming is needed: other seeds draw some of the default world's roots."""
    forbidden = name_roots(default_world_names(0, 2000))
    drafts = generate_world(600, 101).drafts
    before = name_roots(n for d in drafts for n in [d.name, *d.aliases])
    assert before & forbidden
    mapping = rename_roots(drafts, forbidden, seed=101)
    after = name_roots(n for d in drafts for n in [d.name, *d.aliases])
    assert set(mapping) == before & forbidden and not after & forbidden
    labels = {f.value_label for d in drafts for f in d.facts if f.kind == "entity"}
    assert labels <= {d.name for d in drafts}  # fact labels follow the renamed entities


def test_forbidden_names_match_whole_words_only():
    guard = ForbiddenNames(["Orsk", "Velna River"])
    assert guard.found("the Velna River and Orsk.") == ["Velna River", "Orsk"]
    assert guard.found("Orskvale, the Velna Rivers, Velna") == []
    assert (
        substitute_words("ORSK orsk Orsk Orskvale", {"orsk": "Pavel"})
        == "PAVEL pavel Pavel Orskvale"
    )


def test_documents_never_contain_the_agent_protocol_or_chat_markup(docs):
    banned = (
        "<think>",
        "</think>",
        "<tool_call>",
        "<tool_response>",
        "<answer>",
        "<|im_start|>",
        "<|im_end|>",
        "<|endoftext|>",
        "<|vision_start|>",
        "<|image_pad|>",
        '"arguments"',
    )
    for doc in docs:
        for tag in banned:
            assert tag not in doc.text


def test_every_kind_appears_and_copy_targets_are_copies(docs):
    assert {d.kind for d in docs} == set(DOC_KINDS)
    for doc in docs:
        prefix = ""
        for text, role in doc.segments:
            if role == "repeat":  # the whole list, exactly as written before
                assert text.count("\n") + text.count(",") + text.count(";") >= 2 and text in prefix
            if role in ("recall", "answer") and doc.kind != "restate":
                assert text and text in prefix, (doc.kind, text)
            if (
                doc.kind == "restate" and role == "answer"
            ):  # a copy with one phrase swapped for a name
                words = re.compile(r"[^\W_]+")
                assert set(words.findall(text)) <= set(words.findall(prefix))
            prefix += text


def test_restate_documents_swap_one_description_for_its_name_per_step(corpus):
    rng = random.Random(11)
    levels = set()
    for _ in range(60):
        doc = corpus.document("restate", rng)
        if doc.kind != "restate":
            continue
        lines = doc.text.strip().split("\n")
        questions = [line[3:] for line in lines if line.startswith("Q: ")]
        statements = [line for line in lines if not line.startswith("Q: ")]
        assert len(questions) == len(statements) + 1 == doc.meta["levels"] + 1
        assert any(
            w in questions[0]
            for w in ("shown in the image", "pictured in the image", "seen in the image")
        )
        for before, after, statement in zip(questions, questions[1:], statements):
            description, name = (
                statement[:-1].split(" is ", 1)[0],
                statement[:-1].rsplit(" is ", 1)[1],
            )
            assert before.replace(description[0].lower() + description[1:], name, 1) == after, (
                before,
                statement,
            )
        assert "image" not in questions[-1]
        levels.add(doc.meta["levels"])
    assert levels == {1, 2}


def test_segments_tokenize_like_the_whole_text(docs):
    from vsearcher_lite.model.tokenizer import build_tokenizer
    from vsearcher_lite.recipes.pretraining.packing import encode_doc

    tok = build_tokenizer([d.text for d in docs[:300]], vocab_size=500)
    for doc in docs[300:]:
        ids, roles = encode_doc(tok, doc)
        assert ids == tok(doc.text, add_special_tokens=False)["input_ids"], doc.kind
        assert len(roles) == len(ids)


def test_the_stream_is_deterministic(corpus):
    a = corpus.stream({"lookup": 1.0, "repeat": 2.0}, seed=3)
    b = corpus.stream({"lookup": 1.0, "repeat": 2.0}, seed=3)
    c = corpus.stream({"lookup": 1.0, "repeat": 2.0}, seed=4)
    first = [next(a).text for _ in range(20)]
    assert first == [next(b).text for _ in range(20)]
    assert first != [next(c).text for _ in range(20)]


def test_unknown_kind_in_a_mix_is_an_error(corpus):
    with pytest.raises(ValueError, match="unknown document kind"):
        next(corpus.stream({"chat": 1.0}, seed=0))


def test_lookup_questions_are_answered_from_the_result_list(corpus):
    rng = random.Random(5)
    seen_fact = False
    for _ in range(40):
        doc = corpus.document("lookup", rng)
        listing = doc.segments[0][0]
        assert listing.startswith("Results for ")
        for text, role in doc.segments[1:]:
            if role == "answer":
                assert text in listing
        seen_fact |= "fact" in doc.meta["modes"]
    assert seen_fact


@pytest.fixture(scope="module")
def fresh_corpus():
    return Corpus(
        world_seeds=(101, 102, 103),
        n_entities=200,
        exclude_entities=EXCLUDE_ENTITIES,
        fresh_names=True,
    )


@pytest.fixture(scope="module")
def fresh_docs(fresh_corpus):
    stream = fresh_corpus.stream({k: 1.0 for k in DOC_KINDS}, seed=7)
    return [next(stream) for _ in range(400)]


def test_refresh_names_renames_titles_text_and_urls_together():
    doc = Doc(
        "lookup",
        [
            (
                (
                    "1. Zorvath River\n   URL: https://wiki.sandbox.test/wiki/Zorvath_River\n"
                    "   The Zorvath River flows through Plimsk.\n"
                    "Q: Where does the Zorvath River flow?\nA: "
                ),
                "",
            ),
            ("Plimsk", "answer"),
            ("\n", ""),
        ],
    )
    assert name_roots([doc.text]) >= {"zorvath", "plimsk"}
    new = refresh_names(doc, random.Random(0), name_roots_of_world={"zorvath", "plimsk"})
    first = new.text.split("\n")[0][3:]  # the new title
    root = first.split()[0]
    assert first.endswith(" River") and root.lower() not in ("zorvath", "plimsk")
    assert f"/wiki/{root}_River" in new.text and new.text.count(root) == 4
    answer = new.segments[1]
    assert answer[1] == "answer" and answer[0] != "Plimsk" and answer[0] in new.segments[0][0]
    assert "flows through" in new.text and "URL: https://wiki.sandbox.test/wiki/" in new.text


def test_refresh_names_keeps_ordinary_words_and_never_draws_a_forbidden_root():
    doc = Doc("page", [("Plimsk has two villages and a founding date.", "")])
    rng = random.Random(1)
    for _ in range(30):
        new = refresh_names(doc, rng, forbidden_roots={"plimsk"}, name_roots_of_world={"plimsk"})
        assert new.text.endswith(" has two villages and a founding date.")
        assert "Plimsk" not in new.text
    assert refresh_names(doc, rng, name_roots_of_world=set()) is doc  # nothing to rename


def test_fresh_documents_name_entities_the_source_worlds_do_not_have(fresh_corpus, fresh_docs):
    world_names = {n for w in fresh_corpus.worlds for n in w.all_names()}
    guard = ForbiddenNames(default_world_names(0, EXCLUDE_ENTITIES))
    fresh_titles = seen = 0
    for doc in fresh_docs:
        assert guard.found(doc.text) == []
        if doc.kind == "lookup":
            for title in re.findall(r"^\d+\. (.+)$", doc.segments[0][0], flags=re.M):
                seen += 1
                fresh_titles += title not in world_names
    assert seen > 100 and fresh_titles / seen > 0.9


def test_fresh_documents_keep_their_copy_targets_and_determinism(fresh_corpus, fresh_docs):
    for doc in fresh_docs:
        prefix = ""
        for text, role in doc.segments:
            if role in ("recall", "answer", "repeat") and doc.kind != "restate":
                assert text and text in prefix, (doc.kind, text)
            prefix += text
    a = fresh_corpus.stream({"lookup": 1.0, "pageqa": 1.0}, seed=3)
    b = fresh_corpus.stream({"lookup": 1.0, "pageqa": 1.0}, seed=3)
    assert [next(a).text for _ in range(15)] == [next(b).text for _ in range(15)]
