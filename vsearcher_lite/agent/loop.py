"""The ReAct loop (paper section 2.2, appendix A.3): one episode of a policy with the tools.

Each step the policy writes one assistant turn, generation stopping before ``<tool_response>``;
the turn is format-checked and its one tool call executed, the result coming back as a
``<tool_response>`` user turn (an unknown tool or bad arguments as an error observation). A
backend whose chat template's generation prompt opens the reasoning (Qwen3-VL Thinking's
``<think>\n``) names it as ``reply_prefix``: the turn checked and kept is that plus the reply. Every
trajectory ends with one of ``TERMINATIONS``; a format error ends it at once unless
``strict_format=False``.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from vsearcher_lite.agent.format import strict_format_check
from vsearcher_lite.agent.protocol import (
    SANDBOX_TODAY,
    STOP_SEQUENCES,
    error_message,
    initial_messages,
    tool_message,
)
from vsearcher_lite.agent.task import Task
from vsearcher_lite.chat import ChatBackend, message_text
from vsearcher_lite.tools.base import ToolResult
from vsearcher_lite.world.model import ImageRef

TERMINATIONS = ("answer", "format_error", "max_tool_calls", "context_exceeded", "timeout",
                "policy_error")
# Terminations a rerun tries again: the policy could not answer (a server down, a failed call).
TRANSIENT_TERMINATIONS = ("policy_error",)

PAPER_MAX_TOOL_CALLS = 30  # paper A.3 and A.4
PAPER_WALL_CLOCK_S = 2.5 * 3600  # paper A.3: 2 hours 30 minutes per trajectory
PAPER_CONTEXT_TOKENS = 200_000  # paper A.3
CHARS_PER_TOKEN = 4  # a rough ratio for English text, used when no token counter is given
IMAGE_CONTEXT_CHARS = 256 * CHARS_PER_TOKEN  # a small sandbox image costs about 256 tokens or fewer


@dataclass
class EpisodeLimits:
    """The budgets of one episode, the paper's by default (A.3). The context budget is in tokens
    when ``token_counter`` is given, else in characters (``IMAGE_CONTEXT_CHARS`` per image)."""

    max_tool_calls: int = PAPER_MAX_TOOL_CALLS
    max_context_chars: int | None = PAPER_CONTEXT_TOKENS * CHARS_PER_TOKEN
    max_context_tokens: int | None = None
    wall_clock_s: float | None = PAPER_WALL_CLOCK_S
    strict_format: bool = True
    max_format_errors: int = 3  # only used with strict_format=False
    token_counter: Callable[[list[dict]], int] | None = field(default=None, repr=False,
                                                              compare=False)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("token_counter")
        return d


def check_sampling(temperature: float, top_p: float) -> None:
    """Raise ``ValueError`` unless ``temperature >= 0`` and ``0 < top_p <= 1``."""
    if temperature < 0 or not 0 < top_p <= 1:
        raise ValueError(f"temperature must be >= 0 and top_p in (0, 1], "
                         f"got {temperature} and {top_p}")


@dataclass
class Sampling:
    """Sampling settings for the policy, the paper's by default (A.3); its
    ``presence_penalty=1.5`` goes in ``extra`` for backends that take it."""

    temperature: float = 0.6
    top_p: float = 0.95
    max_tokens: int = 10_000
    seed: int | None = None
    extra: dict = field(default_factory=dict)

    def to_kwargs(self) -> dict:
        kwargs = {"temperature": self.temperature, "top_p": self.top_p,
                  "max_tokens": self.max_tokens}
        if self.seed is not None:
            kwargs["seed"] = self.seed
        kwargs.update(self.extra)
        kwargs["stop"] = list(STOP_SEQUENCES)
        return kwargs


@dataclass
class TurnRecord:
    """One assistant turn: its text, its format verdict, and the tool call it made (if any)."""

    index: int
    text: str
    verdict: dict
    tool: str | None = None
    arguments: Any = None
    observation: dict | None = None  # ToolResult.to_dict(), or the loop's own error observation
    policy_seconds: float = 0.0
    tool_seconds: float = 0.0


@dataclass
class Trajectory:
    task_id: str
    question: str
    image_path: str | None
    messages: list[dict]
    turns: list[TurnRecord]
    termination: str
    prediction: str | None = None
    n_tool_calls: int = 0
    seconds: float = 0.0
    error: str | None = None
    policy: str = ""
    sample_index: int = 0
    # gold answer, difficulty, judge verdict ... added by callers
    meta: dict = field(default_factory=dict)

    @property
    def tool_calls(self) -> list[TurnRecord]:
        """The turns that executed a tool, in order."""
        return [t for t in self.turns if t.tool is not None and t.observation is not None]

    def tool_counts(self) -> dict[str, int]:
        return dict(Counter(t.tool for t in self.tool_calls))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Trajectory":
        required = ("task_id", "question", "messages", "turns", "termination")
        missing = [k for k in required if k not in d]
        if missing:
            raise KeyError(f"trajectory record is missing field(s): {', '.join(missing)}")
        known = set(cls.__dataclass_fields__)
        data = {k: v for k, v in d.items() if k in known}
        data["turns"] = [TurnRecord(**t) for t in d["turns"]]
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> "Trajectory":
        return cls.from_dict(json.loads(text))


def context_size(messages: list[dict], limits: EpisodeLimits) -> tuple[int, int | None, str]:
    """``(size, budget, unit)`` of the conversation under the limits' way of counting."""
    if limits.token_counter is not None and limits.max_context_tokens is not None:
        return int(limits.token_counter(messages)), limits.max_context_tokens, "tokens"
    chars = 0
    for m in messages:
        chars += len(message_text(m))
        content = m.get("content")
        if isinstance(content, list):
            images = sum(1 for p in content if isinstance(p, dict) and p.get("type") == "image")
            chars += IMAGE_CONTEXT_CHARS * images
    return chars, limits.max_context_chars, "characters"


def cut_at_stop(text: str, stops=STOP_SEQUENCES) -> str:
    """The reply up to the first stop sequence, for backends that do not honour ``stop``.

    >>> cut_at_stop("<think>a</think><tool_call>{}</tool_call>\\n<tool_response>fake")
    '<think>a</think><tool_call>{}</tool_call>\\n'
    """
    cut = len(text)
    for stop in stops:
        i = text.find(stop)
        if 0 <= i < cut:
            cut = i
    return text[:cut]


def replay_mismatches(trajectory: Trajectory, toolbox: Any) -> list[str]:
    """Re-run every tool call; the calls whose text or images differ from what the policy saw."""
    question_image = ImageRef(trajectory.image_path) if trajectory.image_path else None
    problems = []
    for turn in trajectory.tool_calls:
        again = toolbox.call(turn.tool, turn.arguments, question_image=question_image)
        before = ToolResult.from_dict(turn.observation)
        if again.text != before.text:
            problems.append(f"turn {turn.index} ({turn.tool}): the observation text differs")
        elif [i.location for i in again.images] != [i.location for i in before.images]:
            problems.append(f"turn {turn.index} ({turn.tool}): the returned images differ")
    return problems


def as_task(task: Task | dict) -> Task:
    return task if isinstance(task, Task) else Task.from_dict(task)


def run_episode(
    policy: ChatBackend,
    toolbox: Any,
    task: Task | dict,
    *,
    limits: EpisodeLimits | None = None,
    sampling: Sampling | None = None,
    today: str | None = SANDBOX_TODAY,
    variant: str = "full",
    sample_index: int = 0,
    clock: Callable[[], float] = time.monotonic,
) -> Trajectory:
    """Run one episode of ``policy`` on ``task`` with ``toolbox`` (has ``Toolbox.call``)."""
    task = as_task(task)
    limits = limits or EpisodeLimits()
    sampling = sampling or Sampling()
    sampling_kwargs = sampling.to_kwargs()
    question_image = ImageRef(task.image_path) if task.image_path else None
    messages = initial_messages(task.question, task.image_path, today=today, variant=variant)
    turns: list[TurnRecord] = []
    n_calls = 0
    format_errors = 0
    start = clock()
    termination, prediction, error = None, None, None

    while termination is None:
        if limits.wall_clock_s is not None and clock() - start > limits.wall_clock_s:
            termination, error = "timeout", f"wall-clock budget of {limits.wall_clock_s:g} s spent"
            break
        size, budget, unit = context_size(messages, limits)
        if budget is not None and size > budget:
            termination = "context_exceeded"
            error = f"context is {size} {unit}, over the budget of {budget}"
            break
        t0 = clock()
        try:  # a copy: later turns must not leak into what it saw
            reply = policy.chat(list(messages), **sampling_kwargs)
        except Exception as exc:  # any backend failure ends this episode, not the whole run
            termination, error = "policy_error", f"{type(exc).__name__}: {exc}"
            break
        policy_seconds = clock() - t0
        if not isinstance(reply, str):
            termination = "policy_error"
            error = f"the policy returned {type(reply).__name__}, not text"
            break
        # the turn as the chat template holds it: a Thinking template's generation prompt has
        # already opened the reasoning, so the reply starts inside it
        text = (getattr(policy, "reply_prefix", "") + cut_at_stop(reply)).strip()
        verdict = strict_format_check(text)
        record = TurnRecord(index=len(turns), text=text, verdict=verdict.to_dict(),
                            policy_seconds=round(policy_seconds, 4))
        turns.append(record)
        messages.append({"role": "assistant", "content": text})

        if not verdict.ok:
            format_errors += 1
            if limits.strict_format or format_errors > limits.max_format_errors:
                termination, error = "format_error", str(verdict)
                break
            feedback = (f"your last reply broke the format ({verdict}). Reply with "
                        "<think>...</think> followed by one <tool_call> or one <answer>.")
            record.observation = ToolResult.error("format", feedback).to_dict()
            messages.append(error_message(feedback))
            continue
        if verdict.kind == "answer":
            termination, prediction = "answer", verdict.answer
            break
        if n_calls >= limits.max_tool_calls:
            termination = "max_tool_calls"
            error = (f"the policy asked for call {n_calls + 1}; "
                     f"the limit is {limits.max_tool_calls}")
            break
        record.tool, record.arguments = verdict.call.name, verdict.call.arguments
        t0 = clock()
        result = toolbox.call(verdict.call.name, verdict.call.arguments,
                              question_image=question_image)
        record.tool_seconds = round(clock() - t0, 4)
        record.observation = result.to_dict()
        n_calls += 1
        messages.append(tool_message(result))

    return Trajectory(
        task_id=task.id,
        question=task.question,
        image_path=task.image_path,
        messages=messages,
        turns=turns,
        termination=termination,
        prediction=prediction,
        n_tool_calls=n_calls,
        seconds=round(clock() - start, 4),
        error=error,
        policy=getattr(policy, "name", type(policy).__name__),
        sample_index=sample_index,
    )
