"""String helpers for question writing: finding and replacing names, cleaning model output.

Names are matched as whole words and without regard to case (a rewrite may move a name to the
start of a sentence); replacement keeps the rest of the question byte for byte.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from vsearcher_lite.agent.judge import normalize_answer


@functools.lru_cache(maxsize=65536)
def _name_pattern(name: str) -> re.Pattern:
    # \w on both sides rather than \b: \b misbehaves when a name starts or ends with punctuation.
    return re.compile(r"(?<!\w)" + re.escape(name.strip()) + r"(?!\w)", re.IGNORECASE)


def contains_name(text: str, name: str) -> bool:
    """True when ``name`` occurs in ``text`` as a whole word sequence, ignoring case.

    >>> contains_name("Who designed the Velmora Bridge?", "velmora bridge")
    True
    >>> contains_name("Who designed the Velmora Bridge?", "Velm")
    False
    """
    name = name.strip()
    return bool(name) and _name_pattern(name).search(text) is not None


def find_name_span(text: str, name: str) -> str | None:
    """The exact spelling of ``name`` as it appears in ``text`` (case may differ), or ``None``.

    >>> find_name_span("Who designed the Velmora Bridge?", "velmora bridge")
    'Velmora Bridge'
    """
    name = name.strip()
    if not name:
        return None
    m = _name_pattern(name).search(text)
    return m.group(0) if m else None


def replace_name(text: str, name: str, replacement: str) -> str:
    """Replace the first whole-word occurrence of ``name``, capitalised at a sentence start.

    >>> replace_name("Velmora lies on the Drun.", "Velmora", "the town founded in 1702")
    'The town founded in 1702 lies on the Drun.'
    >>> replace_name("Who designed the Orsk Bridge?", "Orsk Bridge", "the bridge in the image")
    'Who designed the bridge in the image?'
    """
    m = _name_pattern(name).search(text)
    if m is None:
        raise ValueError(f"{name!r} does not occur in {text!r}")
    start = m.start()
    # "the Velna River" -> "the river ...", not "the the river ..."
    if replacement[:4].lower() == "the ":
        before = re.search(r"(?<!\w)the\s+$", text[:start], re.IGNORECASE)
        if before:
            start = before.start()
    if start == 0 or text[:start].rstrip().endswith((".", "?", "!")):
        replacement = replacement[:1].upper() + replacement[1:]
    return text[:start] + replacement + text[m.end() :]


def sentence_case(text: str) -> str:
    """Capitalise the first letter only.

    >>> sentence_case("the river shown in the image")
    'The river shown in the image'
    """
    return text[:1].upper() + text[1:] if text else text


def fold(text: str) -> str:
    """Text normalised as the judge normalises answers: a leak is judged the way an answer is.

    >>> fold("  Saint-Étienne's  Bridge! ")
    'saint etienne s bridge'
    >>> fold("12,400 m")
    '12400 m'
    """
    return _fold_cached(text) if isinstance(text, str) else normalize_answer(text)


_fold_cached = functools.lru_cache(maxsize=262144)(normalize_answer)


def mentions_answer(text: str, answer: str, aliases=()) -> bool:
    """True when the answer or an alias occurs in ``text`` as whole words, compared after
    ``fold`` (the released filter used a case-sensitive substring test).

    >>> mentions_answer("Which river flows past the DRUN valley mill?", "the Drun")
    True
    >>> mentions_answer("Built in 18745 BC?", "1874")
    False
    """
    haystack = f" {fold(text)} "
    for candidate in (answer, *aliases):
        needle = fold(str(candidate))
        if needle and f" {needle} " in haystack:
            return True
    return False


def word_count(text: str) -> int:
    """Words in a question (what 'question length' means in the metrics).

    >>> word_count("Who designed the bridge shown in the image?")
    8
    """
    return len(text.split())


FENCE_RE = re.compile(r"```[a-zA-Z0-9_-]*\s*(.*?)```", re.DOTALL)


def strip_code_fences(text: str) -> str:
    """The inside of the first fenced block when there is one, else the text itself, stripped.

    >>> strip_code_fences('Sure!\\n```json\\n{"a": 1}\\n```')
    '{"a": 1}'
    """
    m = FENCE_RE.search(text)
    return (m.group(1) if m else text).strip()


def first_json_object(text: str) -> str | None:
    """The first balanced ``{...}`` in ``text`` (strings and escapes respected), or ``None``.

    >>> first_json_object('Here it is: {"q": "a {b}", "n": {"x": 1}} hope that helps')
    '{"q": "a {b}", "n": {"x": 1}}'
    """
    start = text.find("{")
    while start != -1:
        depth, in_string, escaped = 0, False, False
        for i in range(start, len(text)):
            ch = text[i]
            if in_string:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == '"':
                    in_string = False
            elif ch == '"':
                in_string = True
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    return text[start : i + 1]
        start = text.find("{", start + 1)
    return None


LEADING_LABEL_RE = re.compile(
    r"^\s*(?:entity|answer|output|fact|question|name|rewritten question|new question)\s*:\s*",
    re.I)


def clean_line_reply(text: str) -> str:
    """The first line of a one-item reply, without fences, a label, quotes or bold.

    >>> clean_line_reply('**Entity:** "Velmora Bridge"\\n(because it is named)')
    'Velmora Bridge'
    """
    text = strip_code_fences(text).replace("**", "").replace("__", "")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return ""
    line = LEADING_LABEL_RE.sub("", lines[0]).strip()
    while len(line) >= 2 and line[0] == line[-1] and line[0] in "\"'`":
        line = line[1:-1].strip()
    if len(line) >= 2 and line[0] in "“‘" and line[-1] in "”’":
        line = line[1:-1].strip()
    return line


def read_prompts(path: str | Path) -> dict[str, str]:
    """The prompts of a file, each after its ``=== NAME ===`` line, without its last newline."""
    parts = re.split(r"^=== (\w+) ===\n", Path(path).read_text(encoding="utf-8"), flags=re.M)
    return {name: body[:-1] if body.endswith("\n") else body
            for name, body in zip(parts[1::2], parts[2::2])}
