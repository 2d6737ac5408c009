"""The agent protocol, defined once (paper sections 2.2 and B): the system prompt, the first
user message and how a tool result comes back, so teacher trajectories, SFT data, GRPO rollouts
and evaluation show the model the same words.

Tool output comes back in a *user* turn inside ``<tool_response>`` tags, images included (an
OpenAI-compatible server rejects ``tool`` messages without structured ``tool_calls``; with
Qwen's template the tokens are the same). The tool block is in the system text, since TRL's
vision collator does not pass ``tools=`` to the template. The ``compact`` variant, for the cpu
profile's tiny model, is a documented deviation from the paper.
"""

from __future__ import annotations

import datetime as _dt
import json
from typing import Any, Iterable

from vsearcher_lite.tools.base import TOOL_SPECS, ToolResult, ToolSpec, tool_schemas

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE = "<tool_response>", "</tool_response>"

#: Every tag the protocol uses, open and close.
PROTOCOL_TAGS = (THINK_OPEN, THINK_CLOSE, TOOL_CALL_OPEN, TOOL_CALL_CLOSE, ANSWER_OPEN,
                 ANSWER_CLOSE, TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE)

#: Generation stops before the model starts writing a tool response itself (paper B.4).
STOP_SEQUENCES = (TOOL_RESPONSE_OPEN,)

#: The sandbox has no real calendar; a fixed date keeps prompts, and so SFT data, byte-identical
#: from one day to the next. Live runs pass today's date.
SANDBOX_TODAY = "2025-09-01"

PROMPT_VARIANTS = ("full", "compact")


def prompt_variant_for(profile: str) -> str:
    """The profile's ``prompt_variant`` (default ``"full"``): every stage asks here, so a model is
    evaluated with the prompt it was trained on."""
    from vsearcher_lite.profiles import load_profile

    return load_profile(profile).get("prompt_variant", "full")


def resolve_today(today: str | _dt.date | None) -> str:
    """The ``YYYY-MM-DD`` date the prompt shows: the given one, else today's.

    >>> resolve_today("2025-09-01"), resolve_today(_dt.date(2024, 2, 29))
    ('2025-09-01', '2024-02-29')
    """
    if today is None:
        return _dt.date.today().isoformat()
    if isinstance(today, _dt.date):
        return today.isoformat()
    text = str(today).strip()
    try:
        return _dt.date.fromisoformat(text).isoformat()
    except ValueError:
        raise ValueError(f"today must be a YYYY-MM-DD date, got {today!r}") from None


def render_tools_block(schemas: Iterable[dict] | None = None) -> str:
    """The ``<tools>`` block of the full prompt: one JSON function schema per line.

    >>> render_tools_block([{"type": "function", "function": {"name": "f"}}])
    '<tools>\\n{"type": "function", "function": {"name": "f"}}\\n</tools>'
    """
    schemas = tool_schemas() if schemas is None else list(schemas)
    lines = [json.dumps(s, ensure_ascii=False) for s in schemas]
    return "<tools>\n" + "\n".join(lines) + "\n</tools>"


def tool_signature(spec: ToolSpec) -> str:
    """A one-line signature of a tool for the compact prompt.

    >>> from vsearcher_lite.tools.base import VISIT
    >>> tool_signature(VISIT)
    'visit(url, goal)'
    """
    return f"{spec.name}({', '.join(a.name for a in spec.args)})"


def format_tool_call(name: str, arguments: dict | None = None) -> str:
    """The canonical text of one tool call, tags included.

    >>> print(format_tool_call("text_search", {"query": "red bridge"}))
    <tool_call>
    {"name": "text_search", "arguments": {"query": "red bridge"}}
    </tool_call>
    """
    payload = json.dumps({"name": name, "arguments": arguments or {}}, ensure_ascii=False)
    return f"{TOOL_CALL_OPEN}\n{payload}\n{TOOL_CALL_CLOSE}"


def format_assistant_turn(think: str, *, tool_call: tuple[str, dict] | None = None,
                          answer: str | None = None) -> str:
    """A well-formed assistant turn: the reasoning, then one tool call or the answer.

    >>> format_assistant_turn("Easy.", answer="Paris")
    '<think>\\nEasy.\\n</think>\\n<answer>Paris</answer>'
    """
    if (tool_call is None) == (answer is None):
        raise ValueError("a turn has exactly one of tool_call or answer")
    head = f"{THINK_OPEN}\n{think.strip()}\n{THINK_CLOSE}\n"
    if tool_call is not None:
        return head + format_tool_call(*tool_call)
    return head + f"{ANSWER_OPEN}{answer.strip()}{ANSWER_CLOSE}"


def _full_prompt(today: str, schemas: list[dict]) -> str:
    example_call = format_tool_call("text_search", {"query": "year the Zanura bridge was built"})
    return "\n".join(
        [
            "You are a research agent that answers hard questions about images and the world "
            "by searching the web.",
            "The question may come with an image. Search, read and reason until you are sure, "
            "then answer.",
            "",
            "# How you work",
            "Every reply you write has two parts, in this order:",
            f"1. Your reasoning inside {THINK_OPEN}{THINK_CLOSE}: what you know so far, "
            "what the last tool output told you, and what to do next.",
            "2. Exactly one of the following:",
            f"   - one tool call inside {TOOL_CALL_OPEN}{TOOL_CALL_CLOSE}, as a JSON object "
            'with the keys "name" and "arguments";',
            f"   - your final answer inside {ANSWER_OPEN}{ANSWER_CLOSE}: only the answer itself, "
            "a name, a number or a short phrase, with no explanation.",
            f"After a tool call, stop. The tool's output comes back to you inside "
            f"{TOOL_RESPONSE_OPEN}{TOOL_RESPONSE_CLOSE}; never write that tag yourself.",
            "",
            "# Rules",
            "- Call at most one tool per reply.",
            "- Never put a tool call and an answer in the same reply.",
            "- Close every tag you open; write nothing after the closing tag of the tool call "
            "or the answer.",
            "- Facts come from tool outputs, not from memory: the pages you find are the evidence.",
            "",
            "# Tools",
            "These are the tools you can call, described as JSON function schemas:",
            render_tools_block(schemas),
            "",
            "A tool call looks like this:",
            example_call,
            "",
            f"Today's date: {today}",
        ]
    )


def _compact_prompt(today: str, specs: list[ToolSpec]) -> str:
    # Two short lines: the tiny model reads this prompt at every turn and its tokenizer spends a
    # token per space; the turn format itself is learned from the examples.
    tools = ", ".join(tool_signature(s) for s in specs)
    return ("You are a search agent: think, then call one tool or answer.\n"
            f"Tools: {tools}. Date: {today}")


def system_prompt(today: str | _dt.date | None = None, *, variant: str = "full",
                  tools: Iterable[ToolSpec] | None = None) -> str:
    """The one system prompt of the agent; tool schemas are generated from the specs.

    >>> "Today's date: 2025-09-01" in system_prompt("2025-09-01")
    True
    >>> system_prompt("2025-09-01", variant="compact").splitlines()[-1]
    'Tools: text_search(query), image_search(), visit(url, goal). Date: 2025-09-01'
    """
    if variant not in PROMPT_VARIANTS:
        known = ", ".join(PROMPT_VARIANTS)
        raise ValueError(f"unknown prompt variant {variant!r}; choose one of {known}")
    specs = list(TOOL_SPECS.values()) if tools is None else list(tools)
    date = resolve_today(today)
    if variant == "compact":
        return _compact_prompt(date, specs)
    return _full_prompt(date, [s.schema() for s in specs])


def text_part(text: str) -> dict:
    return {"type": "text", "text": text}


def image_part(location: str) -> dict:
    return {"type": "image", "image": str(location)}


def question_message(question: str, image_path: str | None = None) -> dict:
    """The first user turn: the question image (when there is one), then the question text.

    >>> question_message("Who?", "q.jpg")["content"]
    [{'type': 'image', 'image': 'q.jpg'}, {'type': 'text', 'text': 'Who?'}]
    """
    parts = [image_part(image_path)] if image_path else []
    parts.append(text_part(question.strip()))
    return {"role": "user", "content": parts}


def tool_response_text(text: str) -> str:
    """Observation text wrapped in the response tags (what Qwen's template does for a tool turn).

    >>> tool_response_text("No results.")
    '<tool_response>\\nNo results.\\n</tool_response>'
    """
    return f"{TOOL_RESPONSE_OPEN}\n{text}\n{TOOL_RESPONSE_CLOSE}"


def tool_message(result: ToolResult) -> dict:
    """A tool result as a user turn, its images inside ``<tool_response>`` so the model reads
    them as part of the result they belong to."""
    if not result.images:
        return {"role": "user", "content": [text_part(tool_response_text(result.text))]}
    parts = [text_part(f"{TOOL_RESPONSE_OPEN}\n{result.text}\n")]
    parts += [image_part(img.location) for img in result.images]
    parts.append(text_part(TOOL_RESPONSE_CLOSE))
    return {"role": "user", "content": parts}


def error_message(message: str) -> dict:
    """An error observation that is not a tool's own (a turn the loop could not run)."""
    return {"role": "user", "content": [text_part(tool_response_text(f"Error: {message}"))]}


#: How the compact variant marks the question: the pretraining corpus's ``restate`` documents
#: ask with "Q: ", so the tiny model finds the same cue in an episode.
COMPACT_QUESTION_CUE = "Q: "


def question_text(question: str, variant: str = "full") -> str:
    """The question as the first user turn shows it (``Q: `` before it in the compact variant).

    >>> question_text("Who?"), question_text("Who?", "compact")
    ('Who?', 'Q: Who?')
    """
    return f"{COMPACT_QUESTION_CUE}{question.strip()}" if variant == "compact" else question.strip()


def initial_messages(
    question: str,
    image_path: str | None = None,
    *,
    today: str | _dt.date | None = None,
    variant: str = "full",
) -> list[dict]:
    """System prompt plus the question: the conversation every episode starts from."""
    return [
        {"role": "system", "content": system_prompt(today, variant=variant)},
        question_message(question_text(question, variant), image_path),
    ]


def message_images(message: dict) -> list[str]:
    """The image locations of one message, in order."""
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [str(p.get("image")) for p in content
            if isinstance(p, dict) and p.get("type") == "image"]


def content_with_placeholders(message: dict, placeholder: str = "<image>") -> str:
    """One string for a message, with ``placeholder`` where each image was (ShareGPT style).

    >>> parts = [image_part("a.png"), text_part("Who?")]
    >>> content_with_placeholders({"role": "user", "content": parts})
    '<image>Who?'
    """
    content: Any = message.get("content", "")
    if isinstance(content, str):
        return content
    out = []
    for part in content:
        if part.get("type") == "image":
            out.append(placeholder)
        elif part.get("type") == "text":
            out.append(str(part.get("text", "")))
    return "".join(out)
