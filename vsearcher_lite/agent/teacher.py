"""Teachers: who writes the trajectories that SFT learns from (paper 2.2 and A.3).

Any ``ChatBackend`` can be a teacher: it is run through the same ReAct loop as every other
policy (``loop.run_episode``). The paper used Gemini-3-Pro-Thinking; its OpenAI-compatible
endpoint is one ``OpenAIChat`` configuration (``make_chat("openai:<model>@<base_url>")``).

``HeuristicTeacher`` is the offline teacher for the sandbox. It is a ``ChatBackend`` too: each
reply is a function of the conversation so far, so it runs in the loop unchanged. It knows how
its question was built (the injection chain: which round hid which kind of entity behind which
relations, and the type of the entity in the image), but not the answer and not the hidden
names: ``TeacherBrief.from_task`` keeps only that structure and replaces every hidden name by a
placeholder. Every name it uses comes out of a tool observation:

1. ``image_search`` when the question has an image; the best article among the matching pages
   names the entity in the image;
2. the injection rounds from the last to the first: a ``text_search`` for the round's
   description with the names found so far filled in; a result whose snippet confirms the
   description, and does not say it is something else than the kind asked for, is taken, else
   the result pages (or the page of the entity the description points from, or the page of the
   entity it points to, which lists what points at it) are opened with ``visit`` and read; when
   a page lists several names, the one seen to be of the right kind is taken;
3. ``visit`` the seed's page and answer from what it says.

It writes short reasoning in ``<think>``, and it is fallible on purpose: at each decision it
takes, with probability ``mistake_rate``, the second candidate without checking (a hasty
reader), and it also fails where its reading of a page does. Rejection sampling then has
wrong trajectories to reject, and harder tasks (more decisions) fail more often, as with a real
teacher.

Reading pages: the sandbox writes its articles from sentence templates
(``vsearcher_lite.world.prose``). The teacher reads them with regular expressions made from the
same templates (its "reading comprehension"), falling back to plain name matching.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, field
from typing import Any, Generator, Iterable

from vsearcher_lite.agent.protocol import (
    TOOL_RESPONSE_CLOSE,
    TOOL_RESPONSE_OPEN,
    format_assistant_turn,
    question_text,
)
from vsearcher_lite.agent.loop import PAPER_MAX_TOOL_CALLS
from vsearcher_lite.chat import ChatBackend, message_text
from vsearcher_lite.synthesis.task import Task

UNKNOWN_ANSWER = "unknown"
ARTICLE_PATH = "/wiki/"


# ---------------------------------------------------------------------------------------------
# Reading observations


@dataclass
class Hit:
    rank: int
    title: str
    url: str
    snippet: str = ""

    @property
    def is_article(self) -> bool:
        return ARTICLE_PATH in self.url


_HIT_LINE = re.compile(r"^(\d+)\. (.*)$")
_URL_LINE = re.compile(r"^\s+URL: (\S+)\s*$")


def observation_body(text: str) -> str:
    """A tool response without its tags."""
    text = text.strip()
    if text.startswith(TOOL_RESPONSE_OPEN):
        text = text[len(TOOL_RESPONSE_OPEN) :]
    if text.endswith(TOOL_RESPONSE_CLOSE):
        text = text[: -len(TOOL_RESPONSE_CLOSE)]
    return text.strip()


def parse_hits(text: str) -> list[Hit]:
    """The numbered results of a text or image search observation (``toolbox.format_*_hits``).

    >>> parse_hits('Results for "x":\\n1. Orsk Bridge\\n   URL: https://wiki.sandbox.test/wiki/Orsk_Bridge\\n   A bridge.')
    [Hit(rank=1, title='Orsk Bridge', url='https://wiki.sandbox.test/wiki/Orsk_Bridge', snippet='A bridge.')]
    """
    hits: list[Hit] = []
    for line in observation_body(text).splitlines():
        m = _HIT_LINE.match(line)
        if m:
            hits.append(Hit(int(m.group(1)), m.group(2).strip(), ""))
            continue
        if not hits:
            continue
        u = _URL_LINE.match(line)
        if u and not hits[-1].url:
            hits[-1].url = u.group(1)
        elif line.startswith("   ") and hits[-1].url:
            hits[-1].snippet = (hits[-1].snippet + " " + line.strip()).strip()
    return [h for h in hits if h.url]


def parse_visit(text: str) -> tuple[str, str, str]:
    """``(title, url, content)`` of a visit observation; empty strings for an error."""
    body = observation_body(text)
    if body.startswith("Error:"):
        return "", "", ""
    title = re.search(r"^Page: (.*)$", body, re.M)
    url = re.search(r"^URL: (\S+)$", body, re.M)
    content = body.split("Relevant content:", 1)[1].strip() if "Relevant content:" in body else body
    return (title.group(1).strip() if title else ""), (url.group(1) if url else ""), content


# ---------------------------------------------------------------------------------------------
# Reading pages with the sandbox's sentence templates

# Lead sentences are written outside the template tables (prose.ArticleWriter.lead); these
# patterns cover the relations they state. {k}: a kind noun, {av}: "a"/"an" and a noun.
LEAD_TEMPLATES: dict[str, tuple[str, ...]] = {
    "located_in": ("{s} is {av} in {v}.", "{s} is {av} located in {v}."),
    "headquartered_in": ("{s} is {av} based in {v}.", "{s} is {av} headquartered in {v}."),
    "held_in": ("{s} was {av} held in {v}.", "{s} was {av} in {v}."),
    "created_by": ("{s} is {av} by {v}.", "{s} is {av} made by {v}."),
    "native_to": ("{s} is a species of {k} native to {v}.", "{s} is {av} species endemic to {v}."),
    "home_port": ("{s} is {av} whose home port is {v}.", "{s} is {av} registered at {v}."),
    "born_in": ("{s} (born {y}) is {av} from {v}.", "{s} is {av} born in {v} in {y}.",
                "{s} ({y}–{y2}) was {av} born in {v}.", "{s} was {av}, born in {v} in {y}, who died in {y2}."),
    "year_born": ("{s} (born {v}) is {av} from {x}.", "{s} is {av} born in {x} in {v}.",
                  "{s} ({v}–{y2}) was {av} born in {x}.", "{s} was {av}, born in {x} in {v}, who died in {y2}."),
    "year_died": ("{s} ({y}–{v}) was {av} born in {x}.", "{s} was {av}, born in {x} in {y}, who died in {v}."),
    "occupation": ("{s} (born {y}) is {v} from {x}.", "{s} is {v} born in {x} in {y}.",
                   "{s} ({y}–{y2}) was {v} born in {x}.", "{s} was {v}, born in {x} in {y}, who died in {y2}."),
}

_PLACEHOLDER = re.compile(r"(\{[a-zA-Z0-9]+\})")


def _subject_pattern(names: Iterable[str]) -> str:
    """How a page may refer to its subject: its name (with "the"), a surname, or "the <kind>"."""
    variants = set()
    for name in names:
        name = name.strip()
        if not name:
            continue
        variants.add(re.escape(name))
        words = name.split()
        if len(words) > 1:
            variants.add(re.escape(" ".join(words[1:])))
    alternatives = "|".join(sorted(variants, key=len, reverse=True))
    named = f"(?:[Tt]he )?(?:{alternatives})" if alternatives else "(?!)"
    return f"(?:{named}|[Tt]he [a-z][a-z' -]*?|It)"


def template_regex(template: str, subject: str) -> re.Pattern:
    """A regex for one sentence template: ``{s}`` the subject, ``{v}``/``{y}`` captured values."""
    out = []
    for piece in _PLACEHOLDER.split(template):
        if piece == "{s}":
            out.append(subject)
        elif piece == "{v}":
            out.append(r"(?P<v>(?:[^.;…]|\.(?=\d))+?)")  # one sentence: a dot only inside a number
        elif piece == "{y}":
            out.append(r"(?P<y>\d{3,4})")
        elif piece == "{y2}":
            out.append(r"\d{3,4}")
        elif piece == "{av}":
            out.append(r"an? [a-z][a-z' -]*?")
        elif piece.startswith("{") and piece.endswith("}"):  # {k}, {x}: any words inside the sentence
            out.append(r"[^.;…]+?")
        else:
            text = re.escape(piece)
            if piece.endswith("."):  # a sentence end, not a decimal point
                # a sentence end (not a decimal point), or where a snippet was cut off
                text = re.escape(piece[:-1]) + r"(?:\.(?=\s|$)|(?=…)|$)"
            out.append(text)
    return re.compile("".join(out))


def _templates_for(relation: str) -> list[tuple[str, str]]:
    """``(template, slot)`` pairs stating ``relation``: which placeholder holds its value."""
    found: list[tuple[str, str]] = []
    try:
        from vsearcher_lite.world import templates as prose
    except ImportError:  # no sandbox prose: only the lead patterns
        prose = None
    if prose is not None:
        for t in prose.SINGLE.get(relation, ()):
            found.append((t, "y" if "{y}" in t and "{v}" not in t else "v"))
        for (_type, rel), templates in prose.SINGLE_BY_TYPE.items():
            if rel == relation:
                found += [(t, "v") for t in templates]
        for (a, b), templates in prose.PAIRS.items():
            if relation == a:
                found += [(t, "v") for t in templates]
            elif relation == b:
                found += [(t, "y") for t in templates]
        for t in prose.MULTI.get(relation, ()):
            found.append((t, "v"))
    for t in LEAD_TEMPLATES.get(relation, ()):
        found.append((t, "v"))
    if relation == "occupation":
        found = [(t.replace("{av}", "{v}"), s) for t, s in found]
    return found


def _clean_value(text: str) -> str:
    text = re.sub(r"\s*\(\d{3,4}\)$", "", text.strip())  # "Orsk Bridge (1874)" in inbound lists
    text = re.sub(r"^(?:the|a|an) ", "", text, flags=re.I)
    return text.strip(" ,.")


def read_values(text: str, relation: str, subject_names: Iterable[str]) -> list[str]:
    """The values a page states for ``relation`` of its subject, in order of appearance.

    >>> read_values("Orsk Bridge was designed by Ilsa Maren and completed in 1874.", "year_built", ["Orsk Bridge"])
    ['1874']
    """
    subject = _subject_pattern(subject_names)
    values: list[tuple[int, str]] = []
    for template, slot in _templates_for(relation):
        for m in template_regex(template, subject).finditer(text):
            value = m.groupdict().get(slot)
            if value:
                values.append((m.start(), _clean_value(value)))
    # Several templates can match one sentence ("designed by {v}." and "designed by {v} and
    # completed in {y}."): at each position the shortest value is the precise one.
    values.sort(key=lambda pv: (pv[0], len(pv[1])))
    out: list[str] = []
    last_start = None
    for start, v in values:
        if start == last_start:
            continue
        last_start = start
        if v and v not in out:
            out.append(v)
    return out


def split_names(text: str) -> list[str]:
    """Names in a list value: ``"A, B and C"`` -> ``["A", "B", "C"]``."""
    return [_clean_value(p) for p in re.split(r",\s*|\s+and\s+", text) if p.strip()]


def mentions(text: str, name: str) -> bool:
    """Whether ``text`` names ``name`` as a whole word sequence (case-insensitive)."""
    return bool(name) and re.search(r"(?<!\w)" + re.escape(name) + r"(?!\w)", text, re.I) is not None


# ---------------------------------------------------------------------------------------------
# What the teacher may know about its task


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
    """What the heuristic teacher knows: the chain's structure, never the answer or a hidden name."""

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
    image_noun: str = ""  # how the question names the pictured thing ("river" in "the river shown in the image")
    image_description: str = ""  # the phrase that stands for it ("the river shown in the image")
    # the question about the seed with its name as "{seed}" ("What is the area of {seed}?"); "" when unknown
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
                value = str(c.get("value", ""))
                is_entity = c.get("kind") == "entity"
                text = str(c.get("value_text", ""))
                if is_entity and value in hidden:
                    if text:
                        template = _replace_name(template, text, "{" + value + "}")
                    clues.append(Clue(c["relation"], c.get("direction", "out"), "entity", ref=value, label=c.get("label", "")))
                else:
                    clues.append(Clue(c["relation"], c.get("direction", "out"), c.get("kind", "entity"), text=text, label=c.get("label", "")))
            steps.append(Step(rnd.entity_id, rnd.entity_type, template, clues))
        seed_name = task.seed_title if task.seed_title and mentions(task.question, task.seed_title) else None
        image_type = image_noun = ""
        if task.image is not None:
            image_noun = _image_noun(task.image.description) if task.image.description else ""
            image_type = task.image.entity_type or image_noun
        seed_question = ""
        if task.initial_question and task.seed_title and mentions(task.initial_question, task.seed_title):
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
    """The compact teacher's note when it has found what a description stands for: the sentence the
    pretraining corpus's ``restate`` documents use, right before the question is asked again.

    >>> identified("the river shown in the image", "Cerbol River")
    'The river shown in the image is Cerbol River.'
    """
    return f"{description[:1].upper()}{description[1:]} is {name}."


def restated_question(template: str, seed: str) -> str:
    """The question about the seed with the seed's name filled in: the compact teacher's visit goal.

    Every word of it is in the task question or was read in a tool result, so the tiny model can
    copy it instead of having to name the relation in words of its own.

    >>> restated_question("What is the area of {seed}?", "Kerora")
    'What is the area of Kerora?'
    """
    return template.replace("{seed}", seed)


def _relation_label(relation: str) -> str:
    try:
        from vsearcher_lite.world.schema import RELATION_LABELS

        return RELATION_LABELS.get(relation, relation.replace("_", " "))
    except ImportError:
        return relation.replace("_", " ")


# ---------------------------------------------------------------------------------------------
# The search program


@dataclass
class Action:
    tool: str
    arguments: dict
    think: str


@dataclass
class Final:
    answer: str
    think: str


Program = Generator[Action, str, Final]


class SearchState:
    """What the teacher has learned so far: names found for hidden entities, and page URLs."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}  # hidden entity id -> the name found
        self.urls: dict[str, str] = {}  # page title -> URL, from every result seen
        self.snippets: dict[str, str] = {}  # page title -> every snippet seen for it

    def learn(self, hits: Iterable[Hit]) -> None:
        for h in hits:
            if h.is_article:
                self.urls.setdefault(h.title, h.url)
                self.snippets[h.title] = (self.snippets.get(h.title, "") + " " + h.snippet).strip()

    def looks_like(self, name: str, noun: str) -> bool:
        """Whether what was seen of ``name`` says it is a ``noun`` (its title or a snippet)."""
        return kind_match(Hit(0, name, "", self.snippets.get(name, "")), noun)

    def fill(self, template: str) -> str:
        """The description with every hidden name found so far filled in."""
        return re.sub(r"\{([A-Za-z0-9_:-]+)\}", lambda m: self.names.get(m.group(1), ""), template).replace("  ", " ").strip()


def support(text: str, candidate: str, clues: list[Clue], state: SearchState) -> int:
    """How well ``text`` (about ``candidate``) supports a description: 2 every clue is stated in a
    sentence of the right form, 1 every clue's value is at least mentioned, 0 otherwise."""
    strength = 2
    checked = 0
    for clue in clues:
        if clue.relation in ("instance_of", "occupation"):
            continue  # the kind noun: every candidate of the type shares it
        value = state.names.get(clue.ref, "") if clue.ref else clue.text
        if not value:
            continue
        checked += 1
        if clue.direction == "out":
            stated = [n for s in read_values(text, clue.relation, [candidate]) for n in [s, *split_names(s)]]
        else:  # "the village where X died": its page lists X among those who died there
            stated = read_inbound(text, clue.relation, [candidate])
        if any(n.casefold() == value.casefold() or mentions(n, value) for n in stated):
            continue
        if mentions(text, value):
            strength = 1
            continue
        return 0
    return strength if checked else 0


def kind_match(hit: Hit, noun: str) -> bool:
    """Whether a result looks like an entity of the wanted kind ("bridge", "port town")."""
    if not noun:
        return True
    return mentions(hit.title, noun) or mentions(hit.snippet, f"is a {noun}") or mentions(hit.snippet, f"is an {noun}")


def kind_evidence(text: str, name: str, noun: str) -> int:
    """What ``text`` says of the kind of ``name``: 1 a ``noun``, -1 something else, 0 nothing.

    Read from the lead sentence articles open with ("X is a bridge in Y", "X was a composer, born
    in Y"), else from the name itself ("Orsk Bridge").

    >>> kind_evidence("The Orsk Museum is a museum located in Orsk.", "Orsk Museum", "bridge")
    -1
    >>> kind_evidence("Ilsa Maren was a composer, born in Orsk in 1804.", "Ilsa Maren", "composer")
    1
    """
    if not noun or not name:
        return 0
    lead = re.search(r"(?<!\w)(?:[Tt]he )?" + re.escape(name) + r" (?:is|was) an? ([^.,;…]+)", text)
    if lead:
        return 1 if mentions(lead.group(1), noun) else -1
    return 1 if mentions(name, noun) else 0


INBOUND_VERBS = {"{flow}": ("flows", "flow"), "{rise}": ("rises", "rise"), "{be}": ("is", "are")}


def read_inbound(text: str, relation: str, subject_names: Iterable[str]) -> list[str]:
    """The entities a page lists as pointing at its subject by ``relation`` ("Fenon is the birthplace
    of A, B and C" for ``born_in``), read with the sandbox's inbound sentence templates.

    >>> read_inbound("Fenon is the birthplace of Ilsa Maren and Ors Tave.", "born_in", ["Fenon"])
    ['Ilsa Maren', 'Ors Tave']
    """
    try:
        from vsearcher_lite.world import templates as prose
    except ImportError:
        return []
    templates = []
    for template in list(prose.INBOUND.get(relation, ())) + list(prose.INBOUND_ONE.get(relation, ())):
        # the verb agrees with the list: "A flows through X", "A and B flow through X"
        for verb, forms in INBOUND_VERBS.items():
            if verb in template:
                templates += [template.replace(verb, form) for form in forms]
                break
        else:
            templates.append(template)
    subject = _subject_pattern(subject_names)
    found: list[tuple[int, str]] = []
    for template in templates:
        for m in template_regex(template, subject).finditer(text):
            if m.groupdict().get("v"):
                found.extend((m.start(), n) for n in split_names(m.group("v")))
    out: list[str] = []
    for _, name in sorted(found):
        if name and name not in out:
            out.append(name)
    return out


def _pick(candidates: list[Hit], rng: random.Random, mistake_rate: float, noun: str = "") -> tuple[Hit | None, bool]:
    """The first candidate, or (a hasty mistake) the runner-up; ``(hit, hasty)``.

    A hasty reader still looks at the kind: its runner-up is the second result that looks like a
    ``noun`` when there are two, so its mistakes are plausible ones (another bridge, not a bank).
    """
    if not candidates:
        return None, False
    if len(candidates) > 1 and rng.random() < mistake_rate:
        of_kind = [h for h in candidates if kind_match(h, noun)] if noun else []
        return (of_kind[1] if len(of_kind) > 1 else candidates[1]), True
    return candidates[0], False


#: ``full``: the teacher explains each step in a sentence or two (the paper-sized setting);
#: ``compact``: the same steps in a few words (the cpu profile's short episodes), and arguments the
#: tiny model can copy: the image's noun from the question ("Which river is in the image?") and, as
#: the last visit's goal, the question restated about the name found ("Which mountain is the source
#: of Cerbol River?") instead of a relation named in the teacher's words ("who or what Cerbol River
#: rises on"). A 10-minute SFT run on the earlier wording wrote "who or what X is located in" for
#: most questions: naming the relation was what it could not learn.
THOUGHT_STYLES = ("full", "compact")
#: The compact teacher searches with the restated question only up to this many words; longer (hard
#: and exam questions before their inner descriptions are resolved), it searches with the description:
#: the whole restated question as the query cut its acceptance on hard tasks from 0.37 to 0.10.
RESTATED_MAX_WORDS = 30
#: and up to this many characters: a turn holds the restated question twice (the note, the query), and
#: the cpu evaluation cuts a turn at 200 tokens; a 145-character one made a turn of 203.
RESTATED_MAX_CHARS = 140


def solve(brief: TeacherBrief, rng: random.Random, mistake_rate: float, max_visits: int = 2,
          style: str = "full", max_tool_calls: int = PAPER_MAX_TOOL_CALLS) -> Program:
    """The heuristic teacher's search, as a generator: it yields tool calls, receives observations.

    ``style="compact"`` (the cpu profile) writes the same decisions in a few words each, so the tiny
    model's episodes stay short, and words every argument with words of the question and of the
    tool responses (``THOUGHT_STYLES``); when a search with the restated question finds nothing that
    fits, it searches again with the description alone. Checks beyond a step's first search
    (visits, that second search) are spent only while ``max_tool_calls`` leaves one search for every
    later step and three for the answer, so a long chain (an exam task: ten rounds) is walked to
    its end within the episode's limit.
    """
    if style not in THOUGHT_STYLES:
        raise ValueError(f"unknown thought style {style!r}: use one of {', '.join(THOUGHT_STYLES)}")
    short = style == "compact"

    def say(full: str, compact: str) -> str:
        return compact if short else full

    state = SearchState()
    note = ""  # what the last observation taught, opening the next <think>
    # compact: the question with each description resolved so far replaced by the name found; it is
    # every query and every goal, so each argument is the previous one with one phrase swapped
    restated = brief.question

    def searchable() -> bool:
        """(compact) Whether the restated question is short enough to search with (a long one buries
        the description's words)."""
        return short and len(restated.split()) <= RESTATED_MAX_WORDS and len(restated) <= RESTATED_MAX_CHARS

    def resolve(description: str, name: str) -> str:
        """Put ``name`` in place of ``description`` in the restated question; returns the line that
        (compact) asks it again, to end the note with, or "" when it did not change or is too long."""
        nonlocal restated
        before = restated
        if description and description in restated:
            restated = restated.replace(description, name, 1)
        return "\n" + question_text(restated, "compact") if restated != before and searchable() else ""

    def ask(description: str) -> str:
        """What a search or a visit asks for: the description, or (compact) the restated question."""
        return restated if description in restated and searchable() else description

    calls = 0  # tool calls made so far
    if brief.has_image and brief.image_entity_id:
        calls += 1
        obs = yield Action(
            "image_search", {},
            say(f"The question hides a {brief.image_type} behind the image. A reverse image search should tell me which one it is.",
                f"Which {brief.image_noun or brief.image_type} is in the image?"),
        )
        hits = parse_hits(obs)
        state.learn(hits)
        articles = [h for h in hits if h.is_article]
        choice, hasty = _pick(articles, rng, mistake_rate)
        if choice is None:
            note = say("The image search found no article I can use, so the image stays unidentified.",
                       "No article matches the image.")
        else:
            state.names[brief.image_entity_id] = choice.title
            asked_again = resolve(brief.image_description, choice.title)
            note = say(
                f"Among the pages with a matching image, {choice.title} {'also looks plausible, and I will go with it' if hasty else 'is the best article match'}, "
                f"so the {brief.image_type} in the image is probably {choice.title}.",
                identified(brief.image_description, choice.title) if brief.image_description else f"The image shows {choice.title}.",
            ) + asked_again

    for number, step in enumerate(brief.steps):
        description = state.fill(step.template)
        visible_names = [state.names.get(c.ref, "") if c.ref else c.text for c in step.clues if c.kind == "entity"]
        known = set(state.names.values()) | {n for n in visible_names if n}
        # calls this step may spend beyond its first search: one search is kept for every later step,
        # and three for the answer (find the seed's page, read it, search a snippet)
        spare = max_tool_calls - calls - (len(brief.steps) - number) - 3
        query = ask(description)
        calls += 1
        obs = yield Action("text_search", {"query": query},
                           say(f"{note} Next I need {description}; I will search for it.", note or "Search.").strip())
        hits = parse_hits(obs)
        state.learn(hits)
        candidates = [h for h in hits if h.is_article and h.title not in known]
        found, how = None, ""

        noun = next((c.text for c in step.clues if c.relation in ("instance_of", "occupation")), "")

        def kind_of(name: str, text: str | None = None) -> int:
            return kind_evidence(state.snippets.get(name, "") if text is None else text, name, noun)

        def rank(hit: Hit) -> tuple:
            """Snippet support, then what the snippet says of the kind, then the search's order."""
            return (support(hit.snippet, hit.title, step.clues, state), kind_of(hit.title), -hit.rank)

        def of_kind(names: list[str]) -> Generator[Action, str, str | None]:
            """The first of ``names`` seen to be of the wanted kind; a name nothing was seen of yet is
            searched for (its article's snippet opens with what it is) while calls are spare."""
            nonlocal spare, calls
            for name in names:
                if kind_of(name) > 0:
                    return name
            for name in names:
                if kind_of(name) != 0 or spare <= 0:
                    continue
                spare -= 1
                calls += 1
                obs = yield Action("text_search", {"query": name},
                                   say(f"Several names fit; is {name} {description}? Its article will say what it is.",
                                       f"Check {name}."))
                state.learn(parse_hits(obs))
                if kind_of(name) > 0:
                    return name
            return None

        def snippet_fit() -> Hit | None:
            best = max(candidates, key=rank, default=None)
            return best if best is not None and rank(best)[0] >= 2 and rank(best)[1] >= 0 else None

        inward = [c for c in step.clues if c.direction == "in" and c.kind == "entity"]
        if inward and not (len(candidates) > 1 and rng.random() < mistake_rate):
            # "the architect who designed X": X's own page says who designed it.
            clue = inward[0]
            source = state.names.get(clue.ref, "") if clue.ref else clue.text
            url = state.urls.get(source)
            if url and spare > 0:
                spare -= 1
                calls += 1
                obs = yield Action(
                    "visit", {"url": url, "goal": ask(description)},
                    say(f"The results do not name it directly. The page of {source} should say {description}.",
                        f"Read the page of {source}."),
                )
                title, _, content = parse_visit(obs)
                stated = [n for v in read_values(content, clue.relation, [source, title]) for n in split_names(v)]
                stated = [n for n in stated if n not in known and kind_of(n) >= 0]
                if len(stated) > 1:
                    # several values ("flows through A, B and C"): prefer one seen to be of the right
                    # kind, then one a search result ties to the description
                    hit_support = {h.title: support(h.snippet, h.title, step.clues, state) for h in candidates}
                    stated.sort(key=lambda n: (-kind_of(n), -hit_support.get(n, 0)))
                if len(stated) > 1 and noun:
                    stated.insert(0, (yield from of_kind(stated)) or stated[0])
                if stated:
                    found, how = stated[0], say(f"The page of {source} names {stated[0]}", "The page names it")
        if found is None:
            choice, hasty = _pick(candidates, rng, mistake_rate, noun)
            fit = None if hasty else snippet_fit()
            if fit is None and not hasty and query != description and spare > 0:
                # (compact) the restated question found nothing that fits: the description alone
                spare -= 1
                calls += 1
                obs = yield Action("text_search", {"query": description},
                                   say(f"Nothing there fits. I will search for {description} alone.", "Search again."))
                more = parse_hits(obs)
                state.learn(more)
                seen = {h.title for h in candidates}
                candidates += [h for h in more if h.is_article and h.title not in known and h.title not in seen]
                fit = snippet_fit()
            if hasty:
                found, how = choice.title, say(f"{choice.title} looks like a fit from the results", "A result fits")
            elif fit is not None:
                found, how = fit.title, say(f"The snippet of {fit.title} fits {description}", "A snippet fits")
            else:
                ordered = sorted((h for h in candidates if kind_of(h.title) >= 0), key=rank, reverse=True)
                for hit in ordered[:max_visits]:
                    if spare <= 0:
                        break
                    spare -= 1
                    calls += 1
                    obs = yield Action(
                        "visit", {"url": hit.url, "goal": ask(description)},
                        say(f"The snippets are not enough to be sure. I will open {hit.title} and check whether it is {description}.",
                            f"Check {hit.title}."),
                    )
                    title, _, content = parse_visit(obs)
                    state.snippets[hit.title] = (state.snippets.get(hit.title, "") + " " + content).strip()  # what it is
                    if support(content, hit.title, step.clues, state) >= 2 and kind_of(hit.title, content) >= 0:
                        found, how = hit.title, say(f"The page of {hit.title} confirms it is {description}", "The page confirms it")
                        break
                outward = [c for c in step.clues if c.direction == "out" and c.kind == "entity"]
                target = (state.names.get(outward[0].ref, "") if outward[0].ref else outward[0].text) if outward else ""
                if found is None and target:
                    # "the composer born in Fenon": the page of Fenon lists who was born there; a
                    # snippet of it may already show the list
                    def listed_in(text: str, *names: str) -> list[str]:
                        return [n for n in read_inbound(text, outward[0].relation, [target, *names])
                                if n not in known and kind_of(n) >= 0]

                    listed = listed_in(state.snippets.get(target, ""))
                    if not listed and state.urls.get(target) and spare > 0:
                        spare -= 1
                        calls += 1
                        obs = yield Action(
                            "visit", {"url": state.urls[target], "goal": description},
                            say(f"No result is clearly {description}. The page of {target} should list it.",
                                f"Read the page of {target}."),
                        )
                        title, _, content = parse_visit(obs)
                        listed = listed_in(content, title)
                    hit_support = {h.title: rank(h) for h in candidates}
                    listed.sort(key=lambda n: (-kind_of(n), [-x for x in hit_support.get(n, (0, 0, 0))]))
                    if len(listed) > 1 and noun:
                        listed.insert(0, (yield from of_kind(listed)) or listed[0])
                    if listed:
                        found, how = listed[0], say(f"The page of {target} names {listed[0]}", "The page names it")
                ordered = [h for h in ordered if kind_of(h.title) >= 0]  # the pages opened may have said what they are
                best = ordered[0] if ordered else None
                if found is None and best is not None and rank(best)[0] >= 1:
                    found, how = best.title, say(f"{best.title} is the result that mentions the right names",
                                                 "A result mentions the right names")
                elif found is None and ordered:
                    top = ordered[0]
                    found, how = top.title, say(f"Nothing confirms it, so I take the top result, {top.title}",
                                                "Nothing confirms it; I take the top result")
        if found is None:
            note = say(f"I could not find {description}.", "Not found.")
            continue
        state.names[step.entity_id] = found
        asked_again = resolve(description, found)
        note = f"{how}; so it is {found}." if not short else identified(description, found) + asked_again

    seed = brief.seed_name or state.names.get(brief.seed_id, "")
    if not seed:
        return Final(UNKNOWN_ANSWER, say(f"{note} I could not identify what the question asks about, so I cannot answer.",
                                         f"{note} I cannot tell what the question is about.").strip())
    goal = answer_goal(brief.answer_label, seed)
    if short and restated != brief.question and mentions(restated, seed):
        goal = restated  # every description resolved: the question about the seed, copied
    elif short and brief.seed_question:
        goal = restated_question(brief.seed_question, seed)
    url = state.urls.get(seed)
    if url is None:
        obs = yield Action("text_search", {"query": seed}, say(f"{note} Now I need the page of {seed}.", f"{note} Find {seed}.").strip())
        hits = parse_hits(obs)
        state.learn(hits)
        url = state.urls.get(seed) or next((h.url for h in hits if h.is_article), None)
        note = (say(f"The search gives the page of {seed}.", "Found it.") if url
                else say(f"I found no page for {seed}.", "No page."))
    values: list[str] = []
    if url:
        obs = yield Action("visit", {"url": url, "goal": goal},
                           say(f"{note} The question asks for {goal}; the page of {seed} should say.", note or f"Read {seed}.").strip())
        title, _, content = parse_visit(obs)
        values = read_values(content, brief.answer_relation, [seed, title])
    if not values:
        obs = yield Action(
            "text_search", {"query": goal if short and goal.endswith("?") else f"{seed} {brief.answer_label}"},
            say(f"The page summary does not state {goal} clearly. A search may show it in a snippet.", "Search."),
        )
        for hit in parse_hits(obs):
            values = read_values(hit.snippet, brief.answer_relation, [seed])
            if values:
                break
    if not values:
        return Final(UNKNOWN_ANSWER, say(f"I could not find {goal} in what I read.", f"No {goal} found."))
    # compact: the page-reading documents of the pretraining corpus end "Q: <question>\nA: <answer>"
    answer_note = (f"{question_text(goal, 'compact')}\nA: {values[0]}" if goal.endswith("?") else f"It gives {values[0]}.")
    return Final(values[0], say(f"I was looking for {goal}, and the page gives {values[0]}. That answers the question.",
                                answer_note))


# ---------------------------------------------------------------------------------------------
# The teacher as a chat backend


def conversation_observations(messages: list[dict]) -> list[str]:
    """The tool responses of a conversation, in order (the user turns after the question)."""
    users = [m for m in messages if m.get("role") == "user"]
    return [message_text(m) for m in users[1:]]


def _seed_int(*parts: Any) -> int:
    return int(hashlib.sha256(":".join(str(p) for p in parts).encode()).hexdigest()[:16], 16)


class HeuristicTeacher(ChatBackend):
    """The offline sandbox teacher for one task (see the module docstring).

    ``chat(messages)`` replays its search program over the observations in ``messages`` and
    returns the next turn, so it depends only on the conversation (and on ``seed``).
    """

    name = "heuristic"

    def __init__(self, task: Task, *, seed: int = 0, mistake_rate: float = 0.1, max_visits: int = 2,
                 style: str = "full", max_tool_calls: int = PAPER_MAX_TOOL_CALLS):
        if style not in THOUGHT_STYLES:
            raise ValueError(f"unknown thought style {style!r}: use one of {', '.join(THOUGHT_STYLES)}")
        self.style = style
        self.brief = TeacherBrief.from_task(task)
        self.seed = seed
        self.mistake_rate = mistake_rate
        self.max_visits = max_visits
        self.max_tool_calls = max_tool_calls  # the episode's limit: checks are spent within it

    def chat(self, messages: list[dict], **sampling: Any) -> str:
        rng = random.Random(_seed_int("heuristic-teacher", self.seed, self.brief.task_id))
        program = solve(self.brief, rng, self.mistake_rate, self.max_visits, self.style, self.max_tool_calls)
        try:
            step = next(program)
            for observation in conversation_observations(messages):
                step = program.send(observation)
        except StopIteration as stop:
            final: Final = stop.value
            return format_assistant_turn(final.think, answer=final.answer)
        return format_assistant_turn(step.think, tool_call=(step.tool, step.arguments))
