"""Strict format checking of assistant turns (paper appendix A.3).

A turn is one ``<think>...</think>`` followed by exactly one ``<tool_call>`` (a JSON object with
exactly ``name`` and ``arguments``) or non-empty ``<answer>``, and nothing else; ``REASON_CODES``
lists every way to fail. Tags count inside the reasoning too, as the paper counts them. Whether
the tool exists is not a format question: the toolbox answers with an error observation. The
checkers are pure and never raise (they are fuzzed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from vsearcher_lite.agent.protocol import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    PROTOCOL_TAGS,
    THINK_CLOSE,
    THINK_OPEN,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    TOOL_RESPONSE_CLOSE,
    TOOL_RESPONSE_OPEN,
)

#: Every failure code with what it means; the CLI and the metrics count these codes.
REASON_CODES = {
    "not_text": "the turn is not a string",
    "empty": "the turn is empty",
    "wrote_tool_response": "the turn writes <tool_response> itself; "
                           "tool output comes from the environment",
    "missing_think": "the turn has no <think>...</think> reasoning",
    "multiple_think": "the turn has more than one <think> or </think> tag",
    "unclosed_think": "a <think> tag is not matched by </think> (or the reverse)",
    "text_before_think": "the turn must start with <think>",
    "no_action": "after </think> the turn needs a <tool_call> or an <answer>",
    "tool_call_and_answer": "the turn has both a tool call and an answer",
    "multiple_tool_calls": "the turn has more than one tool call",
    "multiple_answers": "the turn has more than one answer",
    "unclosed_tag": "a tag is opened and not closed, or closed and not opened",
    "action_inside_think": "the tool call or answer starts inside <think>",
    "text_between_think_and_action": "there is text between </think> and the tool call or answer",
    "text_after_action": "there is text after the closing tag of the tool call or answer",
    "empty_answer": "the answer is empty",
    "tool_call_empty": "the tool call is empty",
    "tool_call_bad_json": "the tool call is not valid JSON",
    "tool_call_not_object": "the tool call is not a JSON object",
    "tool_call_missing_name": "the tool call has no \"name\"",
    "tool_call_bad_name": "the tool call's \"name\" is not a non-empty string",
    "tool_call_missing_arguments": "the tool call has no \"arguments\"",
    "tool_call_bad_arguments": "the tool call's \"arguments\" is not a JSON object",
    "tool_call_extra_keys": "the tool call has keys other than \"name\" and \"arguments\"",
    "internal_error": "the checker failed on this input (a bug: please report it)",
}


@dataclass
class ToolCall:
    """One parsed tool call."""

    name: str
    arguments: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"name": self.name, "arguments": self.arguments}


@dataclass
class ToolCallParse:
    """The result of ``parse_tool_call``: ``call`` when ``ok``, else a ``code`` and a ``reason``."""

    ok: bool
    call: ToolCall | None = None
    code: str = "ok"
    reason: str = "ok"


@dataclass
class FormatVerdict:
    """The verdict on one assistant turn; ``str(verdict)`` is the line ``format-check`` prints."""

    ok: bool
    code: str = "ok"
    reason: str = "ok"
    kind: str | None = None  # "tool_call" | "answer" when ok
    think: str | None = None
    call: ToolCall | None = None
    answer: str | None = None

    def __str__(self) -> str:
        return "ok" if self.ok else f"{self.code}: {self.reason}"

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "code": self.code,
            "reason": self.reason,
            "kind": self.kind,
            "call": self.call.to_dict() if self.call else None,
            "answer": self.answer,
        }


def _fail(code: str, detail: str | None = None) -> FormatVerdict:
    return FormatVerdict(ok=False, code=code, reason=detail or REASON_CODES[code])


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict:
    seen: dict = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"duplicate key {key!r}")
        seen[key] = value
    return seen


def loads_strict_json(text: str) -> tuple[Any, str | None]:
    """``(value, None)`` for strict JSON (no NaN, no duplicate keys), else ``(None, why)``.

    >>> loads_strict_json('{"a": 1}'), loads_strict_json('{"a": NaN}')[1]
    (({'a': 1}, None), 'NaN is not valid JSON')
    """
    try:
        return json.loads(text, parse_constant=_reject_constant,
                          object_pairs_hook=_no_duplicate_keys), None
    except json.JSONDecodeError as exc:
        return None, f"{exc.msg} at character {exc.pos}"
    except RecursionError:
        return None, "nested too deeply"
    except (ValueError, TypeError, OverflowError) as exc:
        return None, str(exc)


def _tool_call_payload(text: str) -> tuple[str | None, FormatVerdict | None]:
    """The text between the first tool-call tags, or the whole text when there are none."""
    start = text.find(TOOL_CALL_OPEN)
    if start < 0:
        if TOOL_CALL_CLOSE in text:
            return None, _fail("unclosed_tag", f"{TOOL_CALL_CLOSE} without {TOOL_CALL_OPEN}")
        return text, None
    start += len(TOOL_CALL_OPEN)
    end = text.find(TOOL_CALL_CLOSE, start)
    if end < 0:
        return None, _fail("unclosed_tag", f"{TOOL_CALL_OPEN} is never closed")
    return text[start:end], None


def parse_tool_call(text: Any) -> ToolCallParse:
    """Parse a tool call, the JSON inside ``<tool_call>`` tags or bare; never raises.

    >>> call = '{"name": "visit", "arguments": {"url": "u", "goal": "g"}}'
    >>> parse_tool_call(f"<tool_call>{call}</tool_call>").call
    ToolCall(name='visit', arguments={'url': 'u', 'goal': 'g'})
    >>> parse_tool_call('{"name": "visit"}').code
    'tool_call_missing_arguments'
    """
    try:
        return _parse_tool_call(text)
    except Exception as exc:  # a safety net; the fuzz test asserts it never fires
        return ToolCallParse(False, code="internal_error",
                             reason=f"{REASON_CODES['internal_error']} ({type(exc).__name__})")


def _bad(code: str, detail: str = "") -> ToolCallParse:
    return ToolCallParse(False, code=code, reason=REASON_CODES[code] + detail)


def _parse_tool_call(text: Any) -> ToolCallParse:
    if not isinstance(text, str):
        return _bad("not_text")
    payload, problem = _tool_call_payload(text)
    if problem is not None:
        return ToolCallParse(False, code=problem.code, reason=problem.reason)
    payload = payload.strip()
    if not payload:
        return _bad("tool_call_empty")
    obj, error = loads_strict_json(payload)
    if error is not None:
        return _bad("tool_call_bad_json", f" ({error})")
    if not isinstance(obj, dict):
        return _bad("tool_call_not_object", f" (got {type(obj).__name__})")
    if "name" not in obj:
        return _bad("tool_call_missing_name")
    name = obj["name"]
    if not isinstance(name, str) or not name.strip():
        return _bad("tool_call_bad_name")
    if "arguments" not in obj:
        return _bad("tool_call_missing_arguments")
    arguments = obj["arguments"]
    if not isinstance(arguments, dict):
        return _bad("tool_call_bad_arguments", f" (got {type(arguments).__name__})")
    extra = sorted(str(k) for k in obj if k not in ("name", "arguments"))
    if extra:
        return _bad("tool_call_extra_keys", f": {', '.join(extra)[:200]}")
    return ToolCallParse(True, call=ToolCall(name.strip(), arguments))


def strict_format_check(turn: Any) -> FormatVerdict:
    """Check one assistant turn against the protocol; never raises.

    >>> call = '{"name": "text_search", "arguments": {"query": "x"}}'
    >>> strict_format_check(f"<think>Look it up.</think><tool_call>{call}</tool_call>").kind
    'tool_call'
    >>> str(strict_format_check("<think>Done.</think><answer>Paris</answer><answer>Rome</answer>"))
    'multiple_answers: the turn has more than one answer'
    """
    try:
        return _check(turn)
    except Exception as exc:  # a safety net; the fuzz test asserts it never fires
        return _fail("internal_error", f"{REASON_CODES['internal_error']} ({type(exc).__name__})")


def _check(turn: Any) -> FormatVerdict:
    if not isinstance(turn, str):
        return _fail("not_text", f"{REASON_CODES['not_text']} (got {type(turn).__name__})")
    text = turn.strip()
    if not text:
        return _fail("empty")
    counts = {tag: text.count(tag) for tag in PROTOCOL_TAGS}
    if counts[TOOL_RESPONSE_OPEN] or counts[TOOL_RESPONSE_CLOSE]:
        return _fail("wrote_tool_response")

    # 1. the reasoning
    n_think_open, n_think_close = counts[THINK_OPEN], counts[THINK_CLOSE]
    if n_think_open == 0 and n_think_close == 0:
        return _fail("missing_think")
    if n_think_open > 1 or n_think_close > 1:
        return _fail("multiple_think")
    if n_think_open != n_think_close:
        missing = THINK_CLOSE if n_think_open else THINK_OPEN
        return _fail("unclosed_think", f"{REASON_CODES['unclosed_think']}: {missing} is missing")
    if not text.startswith(THINK_OPEN):
        return _fail("text_before_think")
    think_end = text.find(THINK_CLOSE)
    think = text[len(THINK_OPEN) : think_end]
    after_think = think_end + len(THINK_CLOSE)

    # 2. exactly one action
    calls = (counts[TOOL_CALL_OPEN], counts[TOOL_CALL_CLOSE])
    answers = (counts[ANSWER_OPEN], counts[ANSWER_CLOSE])
    if any(calls) and any(answers):
        return _fail("tool_call_and_answer")
    if max(calls) > 1:
        return _fail("multiple_tool_calls")
    if max(answers) > 1:
        return _fail("multiple_answers")
    if not any(calls) and not any(answers):
        return _fail("no_action")
    open_tag, close_tag = (TOOL_CALL_OPEN, TOOL_CALL_CLOSE) if any(calls) else (ANSWER_OPEN,
                                                                              ANSWER_CLOSE)
    start, end = text.find(open_tag), text.find(close_tag)
    if start < 0:
        return _fail("unclosed_tag", f"{close_tag} without {open_tag}")
    if end < 0:
        return _fail("unclosed_tag", f"{open_tag} is never closed")
    if start < after_think:
        return _fail("action_inside_think")
    if end < start:
        return _fail("unclosed_tag", f"{close_tag} comes before {open_tag}")
    if text[after_think:start].strip():
        return _fail("text_between_think_and_action")
    if text[end + len(close_tag) :].strip():
        return _fail("text_after_action")

    inner = text[start + len(open_tag) : end]
    if open_tag == ANSWER_OPEN:
        answer = inner.strip()
        if not answer:
            return _fail("empty_answer")
        return FormatVerdict(ok=True, kind="answer", think=think.strip(), answer=answer)
    parsed = parse_tool_call(inner)
    if not parsed.ok:
        return _fail(parsed.code, parsed.reason)
    return FormatVerdict(ok=True, kind="tool_call", think=think.strip(), call=parsed.call)
