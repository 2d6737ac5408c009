"""What the heuristic teacher may know about its task: the injection chain's structure, with
every hidden name replaced by a placeholder, never the answer."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from vsearcher_lite.agent.reading import mentions
from vsearcher_lite.agent.task import Task


@dataclass
class Clue:
    """One constraint of a description, with hidden names replaced by a reference."""

    relation: str
    direction: str  # "out": the hidden entity is the fact's subject; "in": it is the value
    kind: str  # "entity" or a literal kind
    ref: str | None = None  # id of a hidden entity this clue points to (its name must be found)
    text: str = ""  # the visible value (a literal, or a name that is still in the question)
    label: str = ""


@dataclass
class Step:
    """One hidden entity to find, from a round of the chain."""

    entity_id: str
    entity_type: str
    template: str  # the description with each hidden name as "{<id>}"
    clues: list[Clue] = field(default_factory=list)


@dataclass
class TeacherBrief:
    """What the heuristic teacher knows: the chain's structure, never the answer or a name."""

    task_id: str
    question: str
    has_image: bool
    image_entity_id: str | None
    image_type: str
    steps: list[Step]  # in solving order: the last round first
    seed_id: str
    seed_name: str | None  # only when the seed is still named in the question
    answer_relation: str
    answer_label: str
    # how the question names the pictured thing ("river" in "the river shown in the image")
    image_noun: str = ""
    image_description: str = ""  # the phrase that stands for it ("the river shown in the image")
    # the seed's question with its name as "{seed}" ("What is the area of {seed}?"), or empty
    seed_question: str = ""

    @classmethod
    def from_task(cls, task: Task) -> "TeacherBrief":
        hidden = {r.entity_id for r in task.rounds}
        if task.image is not None:
            hidden.add(task.image.entity_id)
        steps = []
        for rnd in reversed(task.rounds):
            template = rnd.description
            clues = []
            for c in rnd.constraints:
                value, text = str(c.get("value", "")), str(c.get("value_text", ""))
                ref = value if c.get("kind") == "entity" and value in hidden else None
                if ref is not None and text:
                    template = _replace_name(template, text, "{" + value + "}")
                clues.append(Clue(c["relation"], c.get("direction", "out"), c.get("kind", "entity"),
                                  ref=ref, text=text if ref is None else "",
                                  label=c.get("label", "")))
            steps.append(Step(rnd.entity_id, rnd.entity_type, template, clues))
        named = task.seed_title and mentions(task.question, task.seed_title)
        seed_name = task.seed_title if named else None
        image_type = image_noun = ""
        if task.image is not None:
            image_noun = _image_noun(task.image.description) if task.image.description else ""
            image_type = task.image.entity_type or image_noun
        seed_question = ""
        if task.initial_question and task.seed_title and mentions(task.initial_question,
                                                                  task.seed_title):
            seed_question = _replace_name(task.initial_question, task.seed_title, "{seed}")
        return cls(
            task_id=task.id,
            question=task.question,
            has_image=bool(task.image_path),
            image_entity_id=task.image.entity_id if task.image else None,
            image_type=image_type,
            steps=steps,
            seed_id=task.seed_id,
            seed_name=seed_name,
            answer_relation=task.answer_relation,
            answer_label=_relation_label(task.answer_relation),
            image_noun=image_noun if image_noun != "entity" else "",
            image_description=task.image.description if task.image is not None else "",
            seed_question=seed_question,
        )


def _replace_name(text: str, name: str, placeholder: str) -> str:
    return re.sub(r"(?<!\w)" + re.escape(name) + r"(?!\w)", lambda m: placeholder, text)


def _image_noun(description: str) -> str:
    m = re.match(r"the (.+?) (?:shown|pictured|seen)", description or "")
    return m.group(1) if m else "entity"


_PREPOSITIONS = ("in", "by", "after", "of", "to", "with", "through", "into", "on", "at", "from")


def answer_goal(label: str, subject: str) -> str:
    """What the last visit looks for, in words: "the height of X", "what X is located in".

    >>> answer_goal("designed by", "Orsk Bridge"), answer_goal("population", "Orsk")
    ('who or what Orsk Bridge is designed by', 'the population of Orsk')
    """
    if label.split()[-1:] and label.split()[-1] in _PREPOSITIONS:
        return f"who or what {subject} is {label}"
    return f"the {label} of {subject}"


def identified(description: str, name: str) -> str:
    """The compact teacher's note on what a description stands for, as ``restate`` documents say.

    >>> identified("the river shown in the image", "Cerbol River")
    'The river shown in the image is Cerbol River.'
    """
    return f"{description[:1].upper()}{description[1:]} is {name}."


def restated_question(template: str, seed: str) -> str:
    """The seed's question with its name filled in: the compact teacher's visit goal, made only
    of words the tiny model has seen, so it can copy rather than name the relation itself.

    >>> restated_question("What is the area of {seed}?", "Kerora")
    'What is the area of Kerora?'
    """
    return template.replace("{seed}", seed)


def _relation_label(relation: str) -> str:
    from vsearcher_lite.world.schema import RELATION_LABELS

    return RELATION_LABELS.get(relation, relation.replace("_", " "))
