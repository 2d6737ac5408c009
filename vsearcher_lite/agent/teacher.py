"""The offline sandbox teacher that writes the trajectories SFT learns from (paper 2.2, A.3).

Any ``ChatBackend`` can be a teacher (the paper's Gemini-3-Pro-Thinking is one ``openai:``
configuration). ``HeuristicTeacher`` knows how its question was built (``brief``), never the
answer or a hidden name; every name it uses comes out of a tool observation: an image search
names the pictured entity, then each round from the last to the first is a text search for its
description (a confirming snippet is taken, else pages are visited and read), then the seed's
page gives the answer.

It is fallible on purpose: with probability ``mistake_rate`` a decision takes the runner-up
unchecked, so rejection sampling has wrong trajectories to reject and harder tasks fail more
often, as with a real teacher. With ``variety`` above 0 its samples of one task also differ where
a real teacher's would: the query's wording, opening a page whose snippet already fits, searching
for the answer before reading the page, and checking a hasty pick and moving on when it is wrong.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass
from typing import Any, Generator

from vsearcher_lite.agent.brief import (
    NEXT_LINE_CUE,
    NEXT_LINE_FORMS,
    Clue,
    TeacherBrief,
    answer_goal,
    hop_numbers,
    hop_plan,
    hop_plan_lines,
    identified,
    restated_question,
)
from vsearcher_lite.agent.loop import PAPER_MAX_TOOL_CALLS
from vsearcher_lite.agent.protocol import format_assistant_turn, question_text
from vsearcher_lite.agent.reading import (
    Hit,
    kind_evidence,
    kind_match,
    mentions,
    parse_hits,
    parse_visit,
    read_inbound,
    read_values,
    split_names,
)
from vsearcher_lite.agent.task import Task
from vsearcher_lite.chat import ChatBackend, message_text

UNKNOWN_ANSWER = "unknown"


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

    def value_of(self, clue: Clue) -> str:
        """A clue's value: the name found for its hidden entity, or its visible text."""
        return self.names.get(clue.ref, "") if clue.ref else clue.text

    def learn(self, observation: str) -> list[Hit]:
        """The hits of a search observation, their URLs and snippets remembered."""
        hits = parse_hits(observation)
        for h in hits:
            if h.is_article:
                self.urls.setdefault(h.title, h.url)
                self.snippets[h.title] = (self.snippets.get(h.title, "") + " " + h.snippet).strip()
        return hits

    def fill(self, template: str) -> str:
        """The description with every hidden name found so far filled in."""
        return re.sub(r"\{([A-Za-z0-9_:-]+)\}",
                      lambda m: self.names.get(m.group(1), ""), template).replace("  ", " ").strip()


def support(text: str, candidate: str, clues: list[Clue], state: SearchState) -> int:
    """How well ``text`` (about ``candidate``) supports a description: 2 every clue is stated in a
    sentence of the right form, 1 every clue's value is at least mentioned, 0 otherwise."""
    strength = 2
    checked = 0
    for clue in clues:
        if clue.relation in ("instance_of", "occupation"):
            continue  # the kind noun: every candidate of the type shares it
        value = state.value_of(clue)
        if not value:
            continue
        checked += 1
        if clue.direction == "out":
            values = read_values(text, clue.relation, [candidate])
            stated = [n for s in values for n in [s, *split_names(s)]]
        else:  # "the village where X died": its page lists X among those who died there
            stated = read_inbound(text, clue.relation, [candidate])
        if any(n.casefold() == value.casefold() or mentions(n, value) for n in stated):
            continue
        if mentions(text, value):
            strength = 1
            continue
        return 0
    return strength if checked else 0


def _pick(candidates: list[Hit], rng: random.Random, mistake_rate: float,
          noun: str = "") -> tuple[Hit | None, bool]:
    """The first candidate, or (a hasty mistake) the runner-up; ``(hit, hasty)``. The runner-up is
    of the ``noun``'s kind when it can be: mistakes are plausible (another bridge, not a bank)."""
    if not candidates:
        return None, False
    if len(candidates) > 1 and rng.random() < mistake_rate:
        of_kind = [h for h in candidates if kind_match(h, noun)] if noun else []
        return (of_kind[1] if len(of_kind) > 1 else candidates[1]), True
    return candidates[0], False


#: ``compact`` (the cpu profile) says each step in a few words, with arguments a tiny model can
#: copy: words of the question, and the question restated about the names found so far.
THOUGHT_STYLES = ("full", "compact")
#: The compact teacher searches with the restated question only up to this size: a longer one buries
#: the description's words, and a turn holds it twice within the cpu evaluation's 200 tokens.
RESTATED_MAX_WORDS = 30
RESTATED_MAX_CHARS = 140


def solve(brief: TeacherBrief, rng: random.Random, mistake_rate: float, max_visits: int = 2,
          style: str = "full", max_tool_calls: int = PAPER_MAX_TOOL_CALLS,
          variety: float = 0.0, plan_hops: bool = False, plan_order: str = "inner",
          plan_next: bool = False, next_form: str = "filled") -> Program:
    """The heuristic teacher's search, as a generator: it yields tool calls, receives observations.

    Checks beyond a step's first search are spent only while ``max_tool_calls`` leaves one search
    for every later step and three for the answer, so a ten-round exam chain fits the episode.
    Each optional choice departs from the default plan with probability ``variety`` (at 0 the
    random stream is untouched, so a task's search is the same as without the setting).
    ``plan_hops`` (compact): the first thought lists the question's hops (``hop_plan``, in
    ``plan_order``), each found name is said with its hop's number, and searches ask for one hop's
    description, never the whole question rewritten. ``plan_next`` (with ``plan_hops``): the
    thought before each hop's search, and before the answer's page is read, ends with the line
    searched for, "Next: [n] ...", so the search copies the line just written instead of finding
    the next line in the plan: with ``next_form`` "filled" the names found so far are filled in,
    with "plan" the plan's line is copied as written and the search fills in the name."""
    if style not in THOUGHT_STYLES:
        known = ", ".join(THOUGHT_STYLES)
        raise ValueError(f"unknown thought style {style!r}: use one of {known}")
    if not 0.0 <= variety <= 1.0:
        raise ValueError(f"variety must be between 0 and 1, got {variety}")
    short = style == "compact"
    if next_form not in NEXT_LINE_FORMS:
        known = ", ".join(NEXT_LINE_FORMS)
        raise ValueError(f"unknown next line form {next_form!r}: use one of {known}")
    plan = hop_plan(brief, plan_order) if short and plan_hops else ""  # once, in the first thought
    plan_lines, asked = hop_plan_lines(brief, plan_order)
    as_planned = next_form == "plan"  # the next line copied from the plan as written
    numbers = hop_numbers(brief, plan_order)
    cue = short and plan_hops and plan_next  # each search's line written before it is searched

    def say(full: str, compact: str) -> str:
        return compact if short else full

    def varied() -> bool:
        """Whether this optional choice leaves the default plan."""
        return variety > 0 and rng.random() < variety

    aside = ""  # a check that failed, said at the start of the next thought

    def lead(text: str) -> str:
        """``text`` after the failed check not yet said, if any."""
        nonlocal aside
        text, aside = (f"{aside} {text}".strip() if aside else text), ""
        return text

    def act(tool: str, arguments: dict, think: str) -> Action:
        nonlocal plan
        think, plan = (f"{plan}\n{lead(think)}" if plan else lead(think)), ""
        return Action(tool, arguments, think)

    def found_as(entity_id: str | None, description: str, name: str) -> str:
        """(compact) The line that names what a description stands for; with ``plan_hops`` it
        opens with the hop's number."""
        line = identified(description, name)
        return f"[{numbers[entity_id]}] {line}" if plan_hops and entity_id in numbers else line

    state = SearchState()
    note = ""  # what the last observation taught, opening the next <think>
    # compact: the question with each description resolved so far replaced by the name found
    restated = brief.question

    def searchable() -> bool:
        """(compact) Whether the restated question is short enough to search with."""
        return (short and not plan_hops and len(restated.split()) <= RESTATED_MAX_WORDS
                and len(restated) <= RESTATED_MAX_CHARS)

    def resolve(description: str, name: str) -> str:
        """Put ``name`` in place of ``description`` in the restated question; returns the line
        that (compact) asks it again, or "" when it did not change or is too long."""
        nonlocal restated
        before = restated
        if description and description in restated:
            restated = restated.replace(description, name, 1)
        changed = restated != before and searchable()
        return "\n" + question_text(restated, "compact") if changed else ""

    def ask(description: str) -> str:
        """What a search or visit asks for: the description or (compact) the restated question."""
        return restated if description in restated and searchable() else description

    calls = 0  # tool calls made so far
    if brief.has_image and brief.image_entity_id:
        calls += 1
        obs = yield act(
            "image_search", {},
            say(f"The question hides a {brief.image_type} behind the image. "
                "A reverse image search should tell me which one it is.",
                f"Which {brief.image_noun or brief.image_type} is in the image?"),
        )
        articles = [h for h in state.learn(obs) if h.is_article]
        choice, hasty = _pick(articles, rng, mistake_rate)
        if choice is None:
            note = say("The image search found no article I can use, "
                       "so the image stays unidentified.", "No article matches the image.")
        else:
            state.names[brief.image_entity_id] = choice.title
            asked_again = resolve(brief.image_description, choice.title)
            verdict = ("also looks plausible, and I will go with it" if hasty
                       else "is the best article match")
            compact = (found_as(brief.image_entity_id, brief.image_description, choice.title)
                       if brief.image_description else f"The image shows {choice.title}.")
            note = say(f"Among the pages with a matching image, {choice.title} {verdict}, "
                       f"so the {brief.image_type} in the image is probably {choice.title}.",
                       compact) + asked_again

    for number, step in enumerate(brief.steps):
        description = state.fill(step.template)
        visible_names = [state.value_of(c) for c in step.clues if c.kind == "entity"]
        known = set(state.names.values()) | {n for n in visible_names if n}
        # calls this step may spend beyond its first search: one search for every later step, and
        # three for the answer (find the seed's page, read it, search a snippet)
        spare = max_tool_calls - calls - (len(brief.steps) - number) - 3
        query = ask(description)
        if query != description and varied():
            query = description  # the same search, worded as the description alone
        calls += 1
        line = f"[{numbers[step.entity_id]}] {query}" if step.entity_id in numbers else query
        if as_planned and step.entity_id in plan_lines:
            line = plan_lines[step.entity_id]
        obs = yield act("text_search", {"query": query},
                        say(f"{note} Next I need {description}; I will search for it.",
                            f"{note}\n{NEXT_LINE_CUE}{line}".strip() if cue else note or "Search."
                            ).strip())
        candidates = [h for h in state.learn(obs) if h.is_article and h.title not in known]
        found, how = None, ""

        noun = next((c.text for c in step.clues if c.relation in ("instance_of", "occupation")), "")

        def kind_of(name: str, text: str | None = None) -> int:
            return kind_evidence(state.snippets.get(name, "") if text is None else text, name, noun)

        def rank(hit: Hit) -> tuple:
            """Snippet support, then what the snippet says of the kind, then the search's order."""
            return (support(hit.snippet, hit.title, step.clues, state),
                    kind_of(hit.title), -hit.rank)

        def of_kind(names: list[str]) -> Generator[Action, str, str | None]:
            """The first of ``names`` seen to be of the wanted kind; a name nothing was seen of
            yet is searched for (its snippet opens with what it is) while calls are spare."""
            nonlocal spare, calls
            for name in names:
                if kind_of(name) > 0:
                    return name
            for name in names:
                if kind_of(name) != 0 or spare <= 0:
                    continue
                spare -= 1
                calls += 1
                obs = yield act("text_search", {"query": name},
                                say(f"Several names fit; is {name} {description}? "
                                    "Its article will say what it is.", f"Check {name}."))
                state.learn(obs)
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
            source = state.value_of(clue)
            url = state.urls.get(source)
            if url and spare > 0:
                spare -= 1
                calls += 1
                obs = yield act(
                    "visit", {"url": url, "goal": ask(description)},
                    say("The results do not name it directly. "
                        f"The page of {source} should say {description}.",
                        f"Read the page of {source}."),
                )
                title, _, content = parse_visit(obs)
                values = read_values(content, clue.relation, [source, title])
                stated = [n for v in values for n in split_names(v)]
                stated = [n for n in stated if n not in known and kind_of(n) >= 0]
                if len(stated) > 1:
                    # several values ("flows through A, B and C"): prefer one seen to be of the
                    # right kind, then one a search result ties to the description
                    hit_support = {h.title: support(h.snippet, h.title, step.clues, state)
                                   for h in candidates}
                    stated.sort(key=lambda n: (-kind_of(n), -hit_support.get(n, 0)))
                if len(stated) > 1 and noun:
                    stated.insert(0, (yield from of_kind(stated)) or stated[0])
                if stated:
                    found, how = stated[0], say(f"The page of {source} names {stated[0]}",
                                                "The page names it")
        if found is None:
            choice, hasty = _pick(candidates, rng, mistake_rate, noun)
            if hasty and spare > 0 and varied():
                # a hasty pick, checked this time: its page decides, and a wrong one is dropped
                spare -= 1
                calls += 1
                obs = yield act("visit", {"url": choice.url, "goal": ask(description)},
                                say(f"{choice.title} may be {description}; its page will tell.",
                                    f"Check {choice.title}."))
                title, _, content = parse_visit(obs)
                state.snippets[choice.title] = (state.snippets.get(choice.title, "") + " "
                                                + content).strip()
                if (support(content, choice.title, step.clues, state) >= 2
                        and kind_of(choice.title, content) >= 0):
                    found, how = choice.title, say(
                        f"The page of {choice.title} confirms it is {description}",
                        "The page confirms it")
                else:
                    aside = say(f"The page of {choice.title} does not fit.",
                                f"{choice.title} does not fit.")
                    candidates = [h for h in candidates if h.title != choice.title]
                    hasty = False
        if found is None:
            fit = None if hasty else snippet_fit()
            if fit is None and not hasty and query != description and spare > 0:
                # (compact) the restated question found nothing that fits: the description alone
                spare -= 1
                calls += 1
                obs = yield act("text_search", {"query": description},
                                say(f"Nothing there fits. I will search for {description} "
                                    "alone.", "Search again."))
                more = state.learn(obs)
                seen = {h.title for h in candidates}
                candidates += [h for h in more if h.is_article and h.title not in known | seen]
                fit = snippet_fit()
            if hasty:
                found, how = choice.title, say(f"{choice.title} looks like a fit from the results",
                                               "A result fits")
            elif fit is not None:
                if spare > 0 and varied():
                    spare -= 1
                    calls += 1  # the snippet fits; its page is opened all the same
                    yield act("visit", {"url": fit.url, "goal": ask(description)},
                              say(f"The snippet of {fit.title} fits; I will read its page to be "
                                  "sure.", f"Check {fit.title}."))
                found, how = fit.title, say(f"The snippet of {fit.title} fits {description}",
                                            "A snippet fits")
            else:
                ordered = sorted((h for h in candidates if kind_of(h.title) >= 0), key=rank,
                                 reverse=True)
                for hit in ordered[:max_visits]:
                    if spare <= 0:
                        break
                    spare -= 1
                    calls += 1
                    obs = yield act(
                        "visit", {"url": hit.url, "goal": ask(description)},
                        say("The snippets are not enough to be sure. I will open "
                            f"{hit.title} and check whether it is {description}.",
                            f"Check {hit.title}."),
                    )
                    title, _, content = parse_visit(obs)
                    seen_text = state.snippets.get(hit.title, "") + " " + content
                    state.snippets[hit.title] = seen_text.strip()  # what it is
                    fits = support(content, hit.title, step.clues, state) >= 2
                    if fits and kind_of(hit.title, content) >= 0:
                        found, how = hit.title, say(
                            f"The page of {hit.title} confirms it is {description}",
                            "The page confirms it")
                        break
                outward = [c for c in step.clues if c.direction == "out" and c.kind == "entity"]
                target = state.value_of(outward[0]) if outward else ""
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
                        obs = yield act(
                            "visit", {"url": state.urls[target], "goal": description},
                            say(f"No result is clearly {description}. "
                                f"The page of {target} should list it.",
                                f"Read the page of {target}."),
                        )
                        title, _, content = parse_visit(obs)
                        listed = listed_in(content, title)
                    hit_support = {h.title: rank(h) for h in candidates}
                    listed.sort(key=lambda n: (-kind_of(n),
                                               [-x for x in hit_support.get(n, (0, 0, 0))]))
                    if len(listed) > 1 and noun:
                        listed.insert(0, (yield from of_kind(listed)) or listed[0])
                    if listed:
                        found, how = listed[0], say(f"The page of {target} names {listed[0]}",
                                                    "The page names it")
                # the pages opened may have said what they are
                ordered = [h for h in ordered if kind_of(h.title) >= 0]
                best = ordered[0] if ordered else None
                if found is None and best is not None and rank(best)[0] >= 1:
                    found, how = best.title, say(
                        f"{best.title} is the result that mentions the right names",
                        "A result mentions the right names")
                elif found is None and best is not None:
                    found, how = best.title, say(
                        f"Nothing confirms it, so I take the top result, {best.title}",
                        "Nothing confirms it; I take the top result")
        if found is None:
            note = lead(say(f"I could not find {description}.", "Not found."))
            continue
        state.names[step.entity_id] = found
        asked_again = resolve(description, found)
        note = lead(found_as(step.entity_id, description, found) + asked_again if short
                    else f"{how}; so it is {found}.")

    seed = brief.seed_name or state.names.get(brief.seed_id, "")
    if not seed:
        return Final(UNKNOWN_ANSWER,
                     say(f"{note} I could not identify what the question asks about, "
                         "so I cannot answer.",
                         f"{note} I cannot tell what the question is about.").strip())
    goal = answer_goal(brief.answer_label, seed)
    if short and restated != brief.question and mentions(restated, seed):
        goal = restated  # every description resolved: the question about the seed, copied
    elif short and brief.seed_question:
        goal = restated_question(brief.seed_question, seed)
    url = state.urls.get(seed)
    if url is None:
        obs = yield act("text_search", {"query": seed},
                        say(f"{note} Now I need the page of {seed}.",
                            f"{note} Find {seed}.").strip())
        hits = state.learn(obs)
        url = state.urls.get(seed) or next((h.url for h in hits if h.is_article), None)
        note = (say(f"The search gives the page of {seed}.", "Found it.") if url
                else say(f"I found no page for {seed}.", "No page."))
    values: list[str] = []
    searched = False  # the answer's search is spent
    if url and short and goal.endswith("?") and varied():
        # a snippet may already state the answer: search for it before reading the page
        searched = True
        obs = yield act("text_search", {"query": goal}, f"{note} Search.".strip())
        note = ""
        for hit in parse_hits(obs):
            values = read_values(hit.snippet, brief.answer_relation, [seed])
            if values:
                break
    if url and not values:
        obs = yield act("visit", {"url": url, "goal": goal},
                        say(f"{note} The question asks for {goal}; the page of {seed} "
                            "should say.",
                            f"{note}\n{NEXT_LINE_CUE}{asked if as_planned else goal}" if cue
                            else note or f"Read {seed}.").strip())
        title, _, content = parse_visit(obs)
        values = read_values(content, brief.answer_relation, [seed, title])
    if not values and not searched:
        obs = yield act(
            "text_search",
            {"query": goal if short and goal.endswith("?") else f"{seed} {brief.answer_label}"},
            say(f"The page summary does not state {goal} clearly. "
                "A search may show it in a snippet.", "Search."),
        )
        for hit in parse_hits(obs):
            values = read_values(hit.snippet, brief.answer_relation, [seed])
            if values:
                break
    if not values:
        return Final(UNKNOWN_ANSWER,
                     say(f"I could not find {goal} in what I read.", f"No {goal} found."))
    # compact: the page-reading documents of the pretraining corpus end "Q: <question>\nA: <answer>"
    answer_note = (f"{question_text(goal, 'compact')}\nA: {values[0]}" if goal.endswith("?")
                   else f"It gives {values[0]}.")
    return Final(values[0],
                 say(f"I was looking for {goal}, and the page gives {values[0]}. "
                     "That answers the question.", answer_note))


# ---------------------------------------------------------------------------------------------
# The teacher as a chat backend


def conversation_observations(messages: list[dict]) -> list[str]:
    """The tool responses of a conversation, in order (the user turns after the question)."""
    users = [m for m in messages if m.get("role") == "user"]
    return [message_text(m) for m in users[1:]]


def _seed_int(*parts: Any) -> int:
    return int(hashlib.sha256(":".join(str(p) for p in parts).encode()).hexdigest()[:16], 16)


class HeuristicTeacher(ChatBackend):
    """The offline sandbox teacher for one task: ``chat`` replays its search program over the
    observations so far, so the next turn depends only on the conversation (and ``seed``)."""

    name = "heuristic"

    def __init__(self, task: Task, *, seed: int = 0, mistake_rate: float = 0.1, max_visits: int = 2,
                 style: str = "full", max_tool_calls: int = PAPER_MAX_TOOL_CALLS,
                 variety: float = 0.0, plan_hops: bool = False, plan_order: str = "inner",
                 plan_next: bool = False, next_form: str = "filled"):
        if style not in THOUGHT_STYLES:
            known = ", ".join(THOUGHT_STYLES)
            raise ValueError(f"unknown thought style {style!r}: use one of {known}")
        if not 0.0 <= variety <= 1.0:
            raise ValueError(f"variety must be between 0 and 1, got {variety}")
        self.style = style
        self.brief = TeacherBrief.from_task(task)
        self.seed = seed
        self.mistake_rate = mistake_rate
        self.max_visits = max_visits
        self.max_tool_calls = max_tool_calls  # the episode's limit: checks are spent within it
        self.variety = variety  # how often an optional choice leaves the default plan
        self.plan_hops = plan_hops  # (compact) the question's hops listed first
        self.plan_order = plan_order  # innermost first, or in the question's reading order
        self.plan_next = plan_next  # each search's line written before it is searched
        self.next_form = next_form  # that line with the names filled in, or as the plan has it

    def chat(self, messages: list[dict], **sampling: Any) -> str:
        rng = random.Random(_seed_int("heuristic-teacher", self.seed, self.brief.task_id))
        program = solve(self.brief, rng, self.mistake_rate, self.max_visits, self.style,
                        self.max_tool_calls, self.variety, self.plan_hops, self.plan_order,
                        self.plan_next, self.next_form)
        try:
            step = next(program)
            for observation in conversation_observations(messages):
                step = program.send(observation)
        except StopIteration as stop:
            final: Final = stop.value
            return format_assistant_turn(final.think, answer=final.answer)
        return format_assistant_turn(step.think, tool_call=(step.tool, step.arguments))
