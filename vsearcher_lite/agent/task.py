"""The task record: one synthesized question, with how it was built.

What synthesis writes and every later stage reads. Its benchmark fields are MM-SearchExam's
(``question``, ``image_path``, ``answer``); the rest records every injection round, so a reader
can step through how a question grew and the sandbox can check that the answer still holds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vsearcher_lite.runio import InputError, RunDir, read_jsonl_numbered

DIFFICULTY_ROUNDS = {"easy": 1, "medium": 3, "hard": 5}  # paper 2.1: text rounds per level
EXAM_ROUNDS = 10  # paper 2.4: MM-SearchExam used 10 injection rounds
#: A warm-up level not in the paper: the seed's own question with the seed hidden behind its
#: picture (no text round). The paper's filter removes such tasks as too direct; the cpu profile
#: keeps some, because a 5M-parameter model learns the protocol on them before anything longer.
ONEHOP = "onehop"
#: Every level in reading order, for tables and figures.
LEVEL_ORDER = (ONEHOP, *DIFFICULTY_ROUNDS, "exam")
#: The headline every table, figure and report leads with: Pass@1 over the paper's levels, the
#: one-hop warm-up kept apart.
HEADLINE_LEVELS = tuple(DIFFICULTY_ROUNDS)
HEADLINE_GROUP = "+".join(HEADLINE_LEVELS)


def in_order(labels, order) -> list[str]:
    """The distinct labels, those of ``order`` first in its order, any others after them sorted.

    >>> in_order({"rl": 1, "x": 2, "sft": 3}, ("sft", "rl"))
    ['sft', 'rl', 'x']
    """
    present = set(labels)
    return [d for d in order if d in present] + sorted(present - set(order))


def in_level_order(labels) -> list[str]:
    """The distinct labels, known levels first in ``LEVEL_ORDER``, any others after them sorted.

    >>> in_level_order(["hard", "train", "easy", "onehop", "easy"])
    ['onehop', 'easy', 'hard', 'train']
    """
    return in_order(labels, LEVEL_ORDER)


@dataclass
class InjectionRound:
    round: int
    entity_id: str
    entity: str  # the name that was hidden in this round
    fact: dict  # the Fact (as a dict) the description was built from
    description: str  # the phrase that replaced the name
    question_before: str
    question_after: str
    # The description's constraints (``describe.Constraint`` dicts), so the sandbox can re-solve
    # the chain; empty for rounds written by an LLM, whose facts are free text.
    entity_type: str = ""
    constraints: list[dict] = field(default_factory=list)


@dataclass
class ImageInjection:
    entity_id: str
    entity: str
    source_image: str  # the entity's own image (a page image in the world)
    description: str  # e.g. "the bridge shown in the image"
    question_before: str
    question_after: str
    entity_type: str = ""  # added by synthesis: the type of the entity the image shows


@dataclass
class Task:
    id: str
    question: str
    answer: str
    image_path: str | None = None  # a perturbed copy of the image entity's picture
    difficulty: str = "easy"  # easy | medium | hard | exam
    split: str = "train"  # train | heldout | exam
    aliases: list[str] = field(default_factory=list)  # other accepted spellings of the answer
    seed_id: str = ""
    seed_title: str = ""
    initial_question: str = ""
    answer_relation: str = ""  # the seed's fact that the initial question asks about
    rounds: list[InjectionRound] = field(default_factory=list)
    image: ImageInjection | None = None
    world: str = "sandbox"
    filters: dict[str, Any] = field(default_factory=dict)  # filter -> True if it removes the task
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Task":
        missing = [k for k in ("id", "question", "answer") if k not in d]
        if missing:
            raise KeyError(f"task record is missing field(s): {', '.join(missing)}")
        known = set(cls.__dataclass_fields__)
        data = {k: v for k, v in d.items() if k in known}
        data["rounds"] = [InjectionRound(**r) for r in d.get("rounds", [])]
        if d.get("image"):
            data["image"] = ImageInjection(**d["image"])
        return cls(**data)

    @property
    def n_rounds(self) -> int:
        return len(self.rounds)


def read_tasks(path: str | Path, hint: str | None = None) -> list[Task]:
    """Tasks from a JSONL file a stage wrote, paths resolved; for a missing file the
    ``InputError`` names the command that writes it (``hint``)."""
    path = Path(path)
    if hint and not path.exists():
        raise InputError(f"{path} does not exist: run `{hint}` first")
    run = RunDir(path.parent.parent)  # a stage's file, RUN/<stage>/<name>.jsonl: paths are RUN's
    tasks = []
    for number, rec in read_jsonl_numbered(path):
        try:
            tasks.append(Task.from_dict(run.resolve(rec)))
        except (KeyError, TypeError) as exc:
            raise InputError(f"{path}:{number}: not a task record ({exc})") from None
    return tasks
