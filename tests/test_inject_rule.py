"""The rule writer, the fact index and the chain solver, on a hand-made world and a small
sandbox."""

import dataclasses
import random

import pytest
from test_synth_support import small_sandbox, tiny_world

from vsearcher_lite.agent.task import ImageInjection, Task
from vsearcher_lite.synthesis.chain import answer_invariance, solve_chain
from vsearcher_lite.synthesis.describe import IN, OUT, Constraint, FactIndex, describe
from vsearcher_lite.synthesis.synthesizer import Synthesizer, TaskDropped
from vsearcher_lite.synthesis.text import contains_name, word_count
from vsearcher_lite.synthesis.writer import RuleWriter, WriteContext


@pytest.fixture
def tiny(tmp_path):
    world = tiny_world(tmp_path)
    return world, FactIndex.from_source(world)


def ctx_for(seed_id="B1", answer="", relation=""):
    return WriteContext(
        Task(id="t", question="", answer=answer, seed_id=seed_id, answer_relation=relation),
        random.Random(0),
    )


def test_index_candidates_by_hand(tiny):
    _, index = tiny
    bridge = Constraint("instance_of", OUT, "bridge", "text")
    assert index.candidates("building", [bridge, Constraint("designed_by", OUT, "P1")]) == {
        "B1",
        "B2",
    }
    assert index.candidates("building", [bridge, Constraint("year_built", OUT, 1874, "year")]) == {
        "B1"
    }
    # "the architect who designed the Tulle Mill" is the engineer's side of a fact
    assert index.candidates("person", [Constraint("designed_by", IN, "B3")]) == {"P2"}
    # a hidden value stands for several candidates
    assert index.candidates(
        "building", [Constraint("located_in", OUT, "S1")], value_options={"S1": {"S1", "S2"}}
    ) == {"B1", "B2", "B4"}


def test_distinctive_descriptions_only_fit_their_entity(tiny):
    world, index = tiny
    writer = RuleWriter(world, index)
    options = writer.distinctive_descriptions("B1", ctx_for())
    relations = {o[0].relation for o in options}
    # designed_by fits Brenna Bridge too
    assert relations == {
        "located_in",
        "year_built",
        "crosses",
    }
    noun = index.noun_constraint("B1")
    for option in options:
        assert index.candidates("building", [noun, *option]) == {"B1"}


def test_used_entities_and_the_answer_are_never_named(tiny):
    world, index = tiny
    writer = RuleWriter(world, index)
    ctx = ctx_for(seed_id="B1", answer="1874", relation="year_built")
    ctx.used = {"S1"}
    options = writer.distinctive_descriptions("B1", ctx)
    assert {o[0].relation for o in options} == {"crosses"}  # S1 is used, 1874 is the answer


def test_name_clash_keeps_names_unambiguous(tiny):
    world, index = tiny
    writer = RuleWriter(world, index)
    ctx = ctx_for(seed_id="S1")
    ctx.mentions = {"Orsk": "S1"}
    # Orsk's descriptions may not name "Orsk Bridge": hiding "Orsk" would leave it in the question
    for option in writer.distinctive_descriptions("S1", ctx):
        assert all(not (c.is_entity and "Orsk" in index.name_of(str(c.value))) for c in option)


def test_describe_wording():
    rng = random.Random(3)
    text = describe("bridge", [Constraint("designed_by", OUT, "P1", value_text="Ilsa Maren")], rng)
    assert text == "the bridge designed by Ilsa Maren"
    two = describe(
        "bridge",
        [
            Constraint("designed_by", OUT, "P1", value_text="Ilsa Maren"),
            Constraint("year_built", OUT, 1874, "year", "1874"),
        ],
        rng,
    )
    assert (
        two.startswith("the bridge ") and "Ilsa Maren" in two and "1874" in two and " and " in two
    )


def test_rule_tasks_are_invariant_and_grow(tiny):
    world, index = tiny
    synth = Synthesizer(world, RuleWriter(world, index), index=index)
    built = 0
    for seed in world.seeds(5, 5):
        for n_rounds in (1, 2):
            try:
                task = synth.text_task(seed, "train", "easy", n_rounds, random.Random(seed.id))
            except TaskDropped as exc:
                assert not exc.reason.startswith("internal_error"), exc
                continue
            built += 1
            assert answer_invariance(task, index).ok
            assert len(task.rounds) == n_rounds
            for rnd in task.rounds:
                assert not contains_name(rnd.question_after, rnd.entity)
                assert rnd.description in rnd.question_after
                assert word_count(rnd.question_after) > word_count(rnd.question_before)
            assert task.extra["answer_invariant"] is True
    assert built >= 5


def test_invariance_check_catches_an_ambiguous_round(tiny):
    world, index = tiny
    synth = Synthesizer(world, RuleWriter(world, index), index=index)
    seed = next(s for s in world.seeds(5, 5) if s.id == "B1")
    task = synth.text_task(seed, "train", "easy", 1, random.Random(1))
    assert answer_invariance(task, index).ok
    broken = Task.from_dict(task.to_dict())
    noun = index.noun_constraint("B1").to_dict()
    # also fits B2
    broken.rounds[0].constraints = [
        noun,
        Constraint("designed_by", OUT, "P1").to_dict(),
    ]
    result = answer_invariance(broken, index)
    assert not result.ok and "fits 2 entities" in result.reason
    wrong = dataclasses.replace(task, answer="1999")
    assert not answer_invariance(wrong, index).ok


def test_text_only_solution_widens_with_the_image_withheld(tiny):
    world, index = tiny
    # "In what year was the bridge located in <the town in the image> built?" (the town is Orsk)
    task = Task(id="t", question="q", answer="1874", seed_id="B1", answer_relation="year_built")
    from vsearcher_lite.agent.task import InjectionRound

    task.rounds.append(
        InjectionRound(
            1,
            "B1",
            "Orsk Bridge",
            {},
            "the bridge located in Orsk",
            "a",
            "b",
            "building",
            [index.noun_constraint("B1").to_dict(), Constraint("located_in", OUT, "S1").to_dict()],
        )
    )
    task.image = ImageInjection(
        "S1", "Orsk", "", "the town shown in the image", "b", "c", "settlement"
    )
    assert solve_chain(task, index, image_known=True).answers == {"1874"}
    # without the picture, the town could be Orsk or Brenna: their bridges were built in 1874 and
    # 1880
    assert solve_chain(task, index, image_known=False).answers == {"1874", "1880"}


def test_critical_entity_is_the_one_the_answer_depends_on(tiny):
    world, index = tiny
    writer = RuleWriter(world, index)
    task = Task(id="t", question="", answer="1874", seed_id="B1", answer_relation="year_built")
    from vsearcher_lite.agent.task import InjectionRound

    # the bridge is described by both its river and its designer; only the river pins it down
    cons = [
        index.noun_constraint("B1").to_dict(),
        Constraint("crosses", OUT, "V1").to_dict(),
        Constraint("designed_by", OUT, "P1").to_dict(),
    ]
    task.rounds.append(InjectionRound(1, "B1", "Orsk Bridge", {}, "d", "a", "b", "building", cons))
    question = (
        "In what year was the bridge that crosses the Drun River and designed by Ilsa Maren built?"
    )
    ctx = WriteContext(task, random.Random(0), mentions={"Drun River": "V1", "Ilsa Maren": "P1"})
    # withholding Ilsa Maren leaves the river, which alone identifies the bridge: not critical
    assert writer.pick_critical_entity(question, ctx) == "Drun River"


def test_sandbox_chains_reach_ten_rounds(tmp_path_factory):
    run = small_sandbox(tmp_path_factory)
    from vsearcher_lite.world import open_world

    world = open_world(run).knowledge
    index = FactIndex.from_source(world)
    synth = Synthesizer(world, RuleWriter(world, index), index=index)
    from vsearcher_lite.synthesis.seeds import SeedConfig, select_seeds

    seeds = select_seeds(world, SeedConfig())
    lengths = {1: [], 5: [], 10: []}
    for seed in seeds[:30]:
        for n in lengths:
            try:
                task = synth.text_task(seed, "train", "x", n, random.Random(seed.id))
            except TaskDropped as exc:
                assert not exc.reason.startswith("internal_error"), exc
                continue
            assert answer_invariance(task, index).ok
            lengths[n].append(word_count(task.question))
    assert len(lengths[10]) >= 5
    means = [sum(v) / len(v) for v in lengths.values()]
    assert means[0] < means[1] < means[2]


def test_same_seed_same_task(tiny):
    world, index = tiny
    seed = next(s for s in world.seeds(5, 5) if s.id == "B2")

    def make():
        return Synthesizer(world, RuleWriter(world, index), index=index).text_task(
            seed, "train", "easy", 2, random.Random("x")
        )

    task = make()
    assert task.to_dict() == make().to_dict()
    from vsearcher_lite.synthesis.synthesizer import task_record

    assert task_record(task) == task.to_dict()  # the fast serialiser writes the same record
