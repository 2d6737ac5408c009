"""The offline sandbox teacher that writes the trajectories SFT learns from (paper 2.2, A.3).

Any ``ChatBackend`` can be a teacher (the paper's Gemini-3-Pro-Thinking is one ``openai:``
configuration). ``HeuristicTeacher`` knows how its question was built (``brief``), never the
answer or a hidden name; every name it uses comes out of a tool observation: an image search
names the pictured entity, then each round from the last to the first is a text search for its
description (a confirming snippet is taken, else pages are visited and read), then the seed's
page gives the answer.

It is fallible on purpose: with probability ``mistake_rate`` a decision takes the runner-up
unchecked, so rejection sampling has wrong trajectories to reject and harder tasks fail more
often, as with a real teacher.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, field
from typing import Any, Generator

from vsearcher_lite.agent.brief import (
    Clue,
    Step,
    TeacherBrief,
    answer_goal,
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
# Tool calls, and what the teacher learns from their results


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
                self.remember(h.title, h.snippet)
        return hits

    def remember(self, title: str, text: str) -> None:
        """Add ``text`` to what has been seen of ``title`` (a snippet, or its page)."""
        self.snippets[title] = (self.snippets.get(title, "") + " " + text).strip()

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


# ---------------------------------------------------------------------------------------------
# What a search carries from step to step


@dataclass
class Episode:
    """One run of the search program: its settings, what it has learned, the note that opens the
    next thought, and the tool calls made so far (the budget that checks are spent from)."""

    brief: TeacherBrief
    rng: random.Random  # every hasty decision draws from it, in the order the search makes them
    mistake_rate: float
    max_visits: int
    short: bool  # the compact thought style
    max_tool_calls: int
    restated: str  # compact: the question, each description resolved so far replaced by its name
    state: SearchState = field(default_factory=SearchState)
    note: str = ""  # what the last observation taught, opening the next <think>
    calls: int = 0  # tool calls made so far

    def say(self, full: str, compact: str) -> str:
        return compact if self.short else full

    def call(self, tool: str, arguments: dict, think: str) -> Action:
        """A tool call, counted against ``max_tool_calls``."""
        self.calls += 1
        return Action(tool, arguments, think)

    def can_check(self, hop: Hop) -> bool:
        """Whether a check (one more call) still leaves the calls the rest of the episode needs
        (``Hop.reserve``) within ``max_tool_calls``."""
        return self.calls + 1 + hop.reserve <= self.max_tool_calls

    def searchable(self) -> bool:
        """(compact) Whether the restated question is short enough to search with."""
        return (self.short and len(self.restated.split()) <= RESTATED_MAX_WORDS
                and len(self.restated) <= RESTATED_MAX_CHARS)

    def resolve(self, description: str, name: str) -> str:
        """Put ``name`` in place of ``description`` in the restated question; returns the line
        that (compact) asks it again, or "" when it did not change or is too long."""
        before = self.restated
        if description and description in self.restated:
            self.restated = self.restated.replace(description, name, 1)
        changed = self.restated != before and self.searchable()
        return "\n" + question_text(self.restated, "compact") if changed else ""

    def ask(self, description: str) -> str:
        """What a search or visit asks for: the description or (compact) the restated question."""
        return self.restated if description in self.restated and self.searchable() else description


@dataclass
class Hop:
    """One hidden entity of the chain being searched for, and what its searches turned up."""

    step: Step
    description: str  # the step's template with the names found so far filled in
    known: set[str]  # names it cannot be: found for other entities, or visible in the question
    noun: str  # the kind noun of the description ("bridge"), or ""
    # calls the episode needs after this hop: one search for every later hop, and three for the
    # answer (find the seed's page, read it, search a snippet)
    reserve: int
    state: SearchState
    query: str = ""  # the hop's first search
    candidates: list[Hit] = field(default_factory=list)  # article hits not already known

    def kind_of(self, name: str, text: str | None = None) -> int:
        """What the text seen of ``name`` (or ``text``) says of its kind (``kind_evidence``)."""
        seen = self.state.snippets.get(name, "") if text is None else text
        return kind_evidence(seen, name, self.noun)

    def rank(self, hit: Hit) -> tuple:
        """Snippet support, then what the snippet says of the kind, then the search's order."""
        return (support(hit.snippet, hit.title, self.step.clues, self.state),
                self.kind_of(hit.title), -hit.rank)

    def snippet_fit(self) -> Hit | None:
        """The best candidate when its snippet states every clue and does not contradict the
        kind, else None."""
        best = max(self.candidates, key=self.rank, default=None)
        if best is None:
            return None
        stated, kind, _ = self.rank(best)
        return None if stated < 2 or kind < 0 else best


# ---------------------------------------------------------------------------------------------
# The search program: the image, one hop per round, the answer


def solve(brief: TeacherBrief, rng: random.Random, mistake_rate: float, max_visits: int = 2,
          style: str = "full", max_tool_calls: int = PAPER_MAX_TOOL_CALLS) -> Program:
    """The heuristic teacher's search, as a generator: it yields tool calls, receives observations.

    The image is named first, then one hop per round from the last injected to the seed's, then
    the seed's page gives the answer. Checks beyond a hop's first search are spent only while
    ``max_tool_calls`` leaves one search for every later hop and three for the answer, so a
    ten-round exam chain fits the episode."""
    if style not in THOUGHT_STYLES:
        known = ", ".join(THOUGHT_STYLES)
        raise ValueError(f"unknown thought style {style!r}: use one of {known}")
    episode = Episode(brief, rng, mistake_rate, max_visits, style == "compact", max_tool_calls,
                      restated=brief.question)
    if brief.has_image and brief.image_entity_id:
        yield from identify_image(episode)
    for number, step in enumerate(brief.steps):
        yield from find_hop(episode, step, later_hops=len(brief.steps) - number - 1)
    return (yield from find_answer(episode))


def identify_image(ep: Episode) -> Generator[Action, str, None]:
    """Name the pictured entity: a reverse image search, and its first article (or, hastily, the
    runner-up)."""
    brief, say = ep.brief, ep.say
    obs = yield ep.call("image_search", {},
                        say(f"The question hides a {brief.image_type} behind the image. "
                            "A reverse image search should tell me which one it is.",
                            f"Which {brief.image_noun or brief.image_type} is in the image?"))
    articles = [h for h in ep.state.learn(obs) if h.is_article]
    choice, hasty = _pick(articles, ep.rng, ep.mistake_rate)
    if choice is None:
        ep.note = say("The image search found no article I can use, "
                      "so the image stays unidentified.", "No article matches the image.")
        return
    ep.state.names[brief.image_entity_id] = choice.title
    asked_again = ep.resolve(brief.image_description, choice.title)
    verdict = ("also looks plausible, and I will go with it" if hasty
               else "is the best article match")
    compact = (identified(brief.image_description, choice.title) if brief.image_description
               else f"The image shows {choice.title}.")
    ep.note = say(f"Among the pages with a matching image, {choice.title} {verdict}, "
                  f"so the {brief.image_type} in the image is probably {choice.title}.",
                  compact) + asked_again


def find_hop(ep: Episode, step: Step, later_hops: int) -> Generator[Action, str, None]:
    """One hop: search for its description, name the entity it stands for (from the page of the
    entity it describes it through, else from the results), and say what was found."""
    hop = yield from search_hop(ep, step, later_hops)
    found, how = yield from read_source_page(ep, hop)
    if found is None:
        found, how = yield from from_results(ep, hop)
    if found is None:
        ep.note = ep.say(f"I could not find {hop.description}.", "Not found.")
        return
    ep.state.names[step.entity_id] = found
    asked_again = ep.resolve(hop.description, found)
    ep.note = (identified(hop.description, found) + asked_again if ep.short
               else f"{how}; so it is {found}.")


def search_hop(ep: Episode, step: Step, later_hops: int) -> Generator[Action, str, Hop]:
    """The hop's first search, always made: its description or (compact) the restated question."""
    state = ep.state
    description = state.fill(step.template)
    visible_names = [state.value_of(c) for c in step.clues if c.kind == "entity"]
    known = set(state.names.values()) | {n for n in visible_names if n}
    noun = next((c.text for c in step.clues if c.relation in ("instance_of", "occupation")), "")
    hop = Hop(step, description, known, noun, reserve=later_hops + 3, state=state,
              query=ep.ask(description))
    obs = yield ep.call("text_search", {"query": hop.query},
                        ep.say(f"{ep.note} Next I need {description}; I will search for it.",
                               ep.note or "Search.").strip())
    hop.candidates = [h for h in state.learn(obs) if h.is_article and h.title not in known]
    return hop


Found = tuple[str | None, str]  # (the name found, or None; how it was found, in words)


def read_source_page(ep: Episode, hop: Hop) -> Generator[Action, str, Found]:
    """"The architect who designed X": X's own page says who designed it. With several
    candidates a hasty teacher skips the page (``mistake_rate``) and goes by the results."""
    inward = [c for c in hop.step.clues if c.direction == "in" and c.kind == "entity"]
    # skipping the page is a hasty decision only where the results leave a runner-up to take
    if not inward or (len(hop.candidates) > 1 and ep.rng.random() < ep.mistake_rate):
        return None, ""
    clue = inward[0]
    source = ep.state.value_of(clue)
    url = ep.state.urls.get(source)
    if not url or not ep.can_check(hop):
        return None, ""
    obs = yield ep.call("visit", {"url": url, "goal": ep.ask(hop.description)},
                        ep.say("The results do not name it directly. "
                               f"The page of {source} should say {hop.description}.",
                               f"Read the page of {source}."))
    title, _, content = parse_visit(obs)
    values = read_values(content, clue.relation, [source, title])
    stated = [n for v in values for n in split_names(v)]
    stated = [n for n in stated if n not in hop.known and hop.kind_of(n) >= 0]
    if len(stated) > 1:
        # several values ("flows through A, B and C"): prefer one seen to be of the right kind,
        # then one a search result ties to the description
        hit_support = {h.title: support(h.snippet, h.title, hop.step.clues, ep.state)
                       for h in hop.candidates}
        stated.sort(key=lambda n: (-hop.kind_of(n), -hit_support.get(n, 0)))
    if len(stated) > 1 and hop.noun:
        stated.insert(0, (yield from first_of_kind(ep, hop, stated)) or stated[0])
    if not stated:
        return None, ""
    return stated[0], ep.say(f"The page of {source} names {stated[0]}", "The page names it")


def from_results(ep: Episode, hop: Hop) -> Generator[Action, str, Found]:
    """The entity from the search results: a hasty pick taken unchecked; else a snippet that
    fits (searching the description alone when the restated question found none); else the
    pages (``from_pages``)."""
    choice, hasty = _pick(hop.candidates, ep.rng, ep.mistake_rate, hop.noun)
    if hasty:
        return choice.title, ep.say(f"{choice.title} looks like a fit from the results",
                                    "A result fits")
    fit = hop.snippet_fit()
    if fit is None and hop.query != hop.description and ep.can_check(hop):
        # (compact) the restated question found nothing that fits: the description alone
        obs = yield ep.call("text_search", {"query": hop.description},
                            ep.say(f"Nothing there fits. I will search for {hop.description} "
                                   "alone.", "Search again."))
        seen = {h.title for h in hop.candidates} | hop.known
        hop.candidates += [h for h in ep.state.learn(obs) if h.is_article and h.title not in seen]
        fit = hop.snippet_fit()
    if fit is not None:
        return fit.title, ep.say(f"The snippet of {fit.title} fits {hop.description}",
                                 "A snippet fits")
    return (yield from from_pages(ep, hop))


def from_pages(ep: Episode, hop: Hop) -> Generator[Action, str, Found]:
    """No snippet fits: the candidates' own pages, then the page that lists the entity, and last
    the best result unconfirmed: a guess, which the judge rejects when it is wrong."""
    ordered = sorted((h for h in hop.candidates if hop.kind_of(h.title) >= 0), key=hop.rank,
                     reverse=True)
    found, how = yield from open_candidates(ep, hop, ordered)
    if found is None:
        found, how = yield from read_listing(ep, hop)
    if found is not None:
        return found, how
    # the pages opened may have said what they are
    ordered = [h for h in ordered if hop.kind_of(h.title) >= 0]
    if not ordered:
        return None, ""
    best = ordered[0]
    if hop.rank(best)[0] >= 1:
        return best.title, ep.say(f"{best.title} is the result that mentions the right names",
                                  "A result mentions the right names")
    return best.title, ep.say(f"Nothing confirms it, so I take the top result, {best.title}",
                              "Nothing confirms it; I take the top result")


def open_candidates(ep: Episode, hop: Hop, ordered: list[Hit]) -> Generator[Action, str, Found]:
    """Open the best-ranked candidates' pages (at most ``max_visits``) until one confirms the
    description; what each page says is remembered, so its kind is known afterwards."""
    for hit in ordered[:ep.max_visits]:
        if not ep.can_check(hop):
            break
        obs = yield ep.call("visit", {"url": hit.url, "goal": ep.ask(hop.description)},
                            ep.say("The snippets are not enough to be sure. I will open "
                                   f"{hit.title} and check whether it is {hop.description}.",
                                   f"Check {hit.title}."))
        _, _, content = parse_visit(obs)
        ep.state.remember(hit.title, content)  # what it is
        fits = support(content, hit.title, hop.step.clues, ep.state) >= 2
        if fits and hop.kind_of(hit.title, content) >= 0:
            return hit.title, ep.say(f"The page of {hit.title} confirms it is {hop.description}",
                                     "The page confirms it")
    return None, ""


def read_listing(ep: Episode, hop: Hop) -> Generator[Action, str, Found]:
    """"The composer born in Fenon": the page of Fenon lists who was born there. A snippet of it
    may already show the list; else the page is read while a check fits."""
    outward = [c for c in hop.step.clues if c.direction == "out" and c.kind == "entity"]
    target = ep.state.value_of(outward[0]) if outward else ""
    if not target:
        return None, ""
    relation = outward[0].relation
    listed = listed_in(hop, relation, ep.state.snippets.get(target, ""), [target])
    if not listed and ep.state.urls.get(target) and ep.can_check(hop):
        # the goal is the description alone: the page is read for the names it lists
        obs = yield ep.call("visit", {"url": ep.state.urls[target], "goal": hop.description},
                            ep.say(f"No result is clearly {hop.description}. "
                                   f"The page of {target} should list it.",
                                   f"Read the page of {target}."))
        title, _, content = parse_visit(obs)
        listed = listed_in(hop, relation, content, [target, title])
    hit_support = {h.title: hop.rank(h) for h in hop.candidates}
    listed.sort(key=lambda n: (-hop.kind_of(n), [-x for x in hit_support.get(n, (0, 0, 0))]))
    if len(listed) > 1 and hop.noun:
        listed.insert(0, (yield from first_of_kind(ep, hop, listed)) or listed[0])
    if not listed:
        return None, ""
    return listed[0], ep.say(f"The page of {target} names {listed[0]}", "The page names it")


def listed_in(hop: Hop, relation: str, text: str, subjects: list[str]) -> list[str]:
    """The names ``text`` lists under ``relation`` of ``subjects`` that the hop may still be."""
    return [n for n in read_inbound(text, relation, subjects)
            if n not in hop.known and hop.kind_of(n) >= 0]


def first_of_kind(ep: Episode, hop: Hop, names: list[str]) -> Generator[Action, str, str | None]:
    """The first of ``names`` seen to be of the wanted kind; a name nothing was seen of yet is
    searched for (its snippet opens with what it is) while a check fits."""
    for name in names:
        if hop.kind_of(name) > 0:
            return name
    for name in names:
        if hop.kind_of(name) != 0 or not ep.can_check(hop):
            continue
        obs = yield ep.call("text_search", {"query": name},
                            ep.say(f"Several names fit; is {name} {hop.description}? "
                                   "Its article will say what it is.", f"Check {name}."))
        ep.state.learn(obs)
        if hop.kind_of(name) > 0:
            return name
    return None


def find_answer(ep: Episode) -> Generator[Action, str, Final]:
    """The answer: the attribute the question asks of the seed, read from the seed's page, or
    from a search snippet when the page does not state it."""
    seed = ep.brief.seed_name or ep.state.names.get(ep.brief.seed_id, "")
    if not seed:
        return Final(UNKNOWN_ANSWER,
                     ep.say(f"{ep.note} I could not identify what the question asks about, "
                            "so I cannot answer.",
                            f"{ep.note} I cannot tell what the question is about.").strip())
    goal = seed_goal(ep, seed)
    url = yield from seed_page(ep, seed)
    values: list[str] = []
    if url:
        obs = yield ep.call("visit", {"url": url, "goal": goal},
                            ep.say(f"{ep.note} The question asks for {goal}; the page of {seed} "
                                   "should say.", ep.note or f"Read {seed}.").strip())
        title, _, content = parse_visit(obs)
        values = read_values(content, ep.brief.answer_relation, [seed, title])
    if not values:  # the visit's summary keeps only the sentences nearest its goal
        values = yield from search_answer(ep, seed, goal)
    if not values:
        return Final(UNKNOWN_ANSWER,
                     ep.say(f"I could not find {goal} in what I read.", f"No {goal} found."))
    # compact: the page-reading documents of the pretraining corpus end "Q: <question>\nA: <answer>"
    answer_note = (f"{question_text(goal, 'compact')}\nA: {values[0]}" if goal.endswith("?")
                   else f"It gives {values[0]}.")
    return Final(values[0],
                 ep.say(f"I was looking for {goal}, and the page gives {values[0]}. "
                        "That answers the question.", answer_note))


def seed_goal(ep: Episode, seed: str) -> str:
    """What the answer's visit asks for: in words ("the area of X"), or (compact) a question the
    tiny model can copy: the restated question once it is about the seed, else the seed's own."""
    if ep.short and ep.restated != ep.brief.question and mentions(ep.restated, seed):
        return ep.restated  # every description resolved: the question about the seed, copied
    if ep.short and ep.brief.seed_question:
        return restated_question(ep.brief.seed_question, seed)
    return answer_goal(ep.brief.answer_label, seed)


def seed_page(ep: Episode, seed: str) -> Generator[Action, str, str | None]:
    """The URL of the seed's page: from a result seen already, else searched for by name."""
    url = ep.state.urls.get(seed)
    if url is not None:
        return url
    obs = yield ep.call("text_search", {"query": seed},
                        ep.say(f"{ep.note} Now I need the page of {seed}.",
                               f"{ep.note} Find {seed}.").strip())
    hits = ep.state.learn(obs)
    url = ep.state.urls.get(seed) or next((h.url for h in hits if h.is_article), None)
    ep.note = (ep.say(f"The search gives the page of {seed}.", "Found it.") if url
               else ep.say(f"I found no page for {seed}.", "No page."))
    return url


def search_answer(ep: Episode, seed: str, goal: str) -> Generator[Action, str, list[str]]:
    """The values a search snippet states for the answer (no page, or it gave none): (compact) the
    question itself is searched, as the model will copy it, else the seed and the attribute."""
    ask = ep.short and goal.endswith("?")
    obs = yield ep.call("text_search",
                        {"query": goal if ask else f"{seed} {ep.brief.answer_label}"},
                        ep.say(f"The page summary does not state {goal} clearly. "
                               "A search may show it in a snippet.", "Search."))
    for hit in parse_hits(obs):
        values = read_values(hit.snippet, ep.brief.answer_relation, [seed])
        if values:
            return values
    return []


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
                 style: str = "full", max_tool_calls: int = PAPER_MAX_TOOL_CALLS):
        if style not in THOUGHT_STYLES:
            known = ", ".join(THOUGHT_STYLES)
            raise ValueError(f"unknown thought style {style!r}: use one of {known}")
        self.style = style
        self.brief = TeacherBrief.from_task(task)
        self.seed = seed
        self.mistake_rate = mistake_rate
        self.max_visits = max_visits
        self.max_tool_calls = max_tool_calls  # the episode's limit: checks are spent within it

    def chat(self, messages: list[dict], **sampling: Any) -> str:
        rng = random.Random(_seed_int("heuristic-teacher", self.seed, self.brief.task_id))
        program = solve(self.brief, rng, self.mistake_rate, self.max_visits, self.style,
                        self.max_tool_calls)
        try:
            step = next(program)
            for observation in conversation_observations(messages):
                step = program.send(observation)
        except StopIteration as stop:
            final: Final = stop.value
            return format_assistant_turn(final.think, answer=final.answer)
        return format_assistant_turn(step.think, tool_call=(step.tool, step.arguments))
