"""Re-solving a synthesized question through its recorded chain (sandbox only).

Each round records its description's constraints, so a finished question can be solved as an
ideal searcher would: the image entity is known from the image (or, withheld, could be any
entity of its type), rounds are undone from the last to the first against the whole world, and
the answer relation is read off every seed candidate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vsearcher_lite.agent.task import Task
from vsearcher_lite.synthesis.describe import Constraint, FactIndex
from vsearcher_lite.synthesis.text import fold

NO_ANSWER = "<no single value>"


@dataclass
class ChainSolution:
    answers: set[str]  # folded answer texts over every seed candidate
    # hidden entity id -> ids that fit
    candidates: dict[str, set[str]] = field(default_factory=dict)


def is_checkable(task: Task) -> bool:
    """A task can be re-solved when every round carries structured constraints."""
    return bool(task.answer_relation) and all(r.constraints and r.entity_type for r in task.rounds)


def solve_chain(task: Task, index: FactIndex, *, image_known: bool = True) -> ChainSolution:
    """Solve the task from the world's facts, as the module docstring says."""
    options: dict[str, set[str]] = {}
    if task.image is not None:
        img = task.image
        if image_known:
            options[img.entity_id] = {img.entity_id}
        else:
            # "the bridge shown in the image" still says it is a bridge.
            noun = index.noun_constraint(img.entity_id)
            etype = img.entity_type or index.type_of(img.entity_id)
            options[img.entity_id] = index.candidates(etype, [noun] if noun is not None else [])
    for rnd in reversed(task.rounds):
        constraints = [Constraint.from_dict(c) for c in rnd.constraints]
        options[rnd.entity_id] = index.candidates(rnd.entity_type, constraints,
                                                  value_options=options)
    seeds = options.get(task.seed_id, {task.seed_id})
    answers = set()
    for s in seeds:
        fact = index.single_value(s, task.answer_relation)
        answers.add(fold(fact.value_text()) if fact is not None else NO_ANSWER)
    return ChainSolution(answers=answers, candidates=options)


@dataclass
class InvarianceResult:
    ok: bool
    reason: str = ""


def answer_invariance(task: Task, index: FactIndex) -> InvarianceResult:
    """Does the finished question still lead to exactly the recorded entities and the answer?"""
    if not is_checkable(task):
        return InvarianceResult(False, "not checkable: a round has no structured constraints")
    solution = solve_chain(task, index, image_known=True)
    for rnd in task.rounds:
        found = solution.candidates.get(rnd.entity_id, set())
        if found != {rnd.entity_id}:
            return InvarianceResult(
                False,
                f"round {rnd.round}: the description fits {len(found)} entities, "
                f"not only {rnd.entity}"
            )
    if solution.answers != {fold(task.answer)}:
        return InvarianceResult(False,
                                f"the chain gives {sorted(solution.answers)}, not {task.answer!r}")
    return InvarianceResult(True)


def text_only_answers(task: Task, index: FactIndex) -> set[str]:
    """The answers the text alone allows (image withheld): one means the image is not needed."""
    return solve_chain(task, index, image_known=False).answers
