"""Judges: is a predicted answer the gold answer? One interface for the filters, rejection
sampling, the GRPO reward and evaluation: ``MatchJudge`` (offline, the sandbox default: a
normalised match, numbers as numbers) and ``LLMJudge`` (live runs, the paper's choice).
"""

from __future__ import annotations

import abc
import math
import re
import unicodedata
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

from vsearcher_lite.backends.chat import make_chat
from vsearcher_lite.chat import ChatBackend, ChatError

ARTICLES = frozenset({"a", "an", "the"})
# Words that may surround a number without changing it ("in 1874", "about 1,200", "1874 AD").
NUMBER_FILLER = frozenset({"in", "the", "year", "about", "approximately", "around", "circa", "ca",
                           "c", "roughly", "some", "ad", "ce"})
DEFAULT_REL_TOL = 0.01  # non-year numbers may differ by 1 %


@dataclass(frozen=True)
class Verdict:
    correct: bool
    reason: str
    extracted: str | None = None  # the final answer as the judge read it (LLM judge)
    method: str = "match"

    def to_dict(self) -> dict:
        return asdict(self)


class Judge(abc.ABC):
    """Decides whether ``prediction`` answers ``question`` with ``gold`` (or one of ``aliases``)."""

    name: str = "judge"

    @abc.abstractmethod
    def judge(self, question: str, gold: str, prediction: str | None,
              aliases: Iterable[str] = ()) -> Verdict: ...


def _strip_accents(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def normalize_answer(text: Any) -> str:
    """Lower-case, accent-free, punctuation-free, article-free, single-spaced text; thousands
    separators are dropped and decimal points kept, so numbers survive.

    >>> normalize_answer("  The Zanúra-Kel  Bridge! ")
    'zanura kel bridge'
    >>> normalize_answer("1,234.5 m"), normalize_answer("Ｐａｒｉｓ")
    ('1234.5 m', 'paris')
    """
    text = _strip_accents(str(text if text is not None else "")).casefold()
    text = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text)  # 1,234 -> 1234
    text = re.sub(r"(?<=\d)\.(?=\d)", "\x00", text)  # protect decimal points
    text = "".join(" " if unicodedata.category(c)[0] in "PSZC" and c != "\x00" else c for c in text)
    text = text.replace("\x00", ".")
    return " ".join(w for w in text.split() if w not in ARTICLES)


def drop_parentheticals(text: str) -> str:
    """``"Zanura (river)"`` -> ``"Zanura"``: disambiguation qualifiers are not part of a name."""
    return re.sub(r"\s*[\(\[][^\)\]]*[\)\]]", " ", text).strip()


_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?")


def parse_quantity(text: Any) -> tuple[float, str, bool] | None:
    """``(value, unit, is_integer)`` when the text is one number and a unit, filler words aside.

    >>> parse_quantity("about 1,234 m"), parse_quantity("in 1874"), parse_quantity("\u22125 km")
    ((1234.0, 'm', True), (1874.0, '', True), (-5.0, 'km', True))
    >>> parse_quantity("two"), parse_quantity("1874 or 1875")
    (None, None)
    """
    raw = _strip_accents(str(text if text is not None else "")).casefold().replace("\u2212", "-")
    raw = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", raw)
    numbers = _NUMBER.findall(raw)
    if len(numbers) != 1:
        return None
    token = numbers[0]
    value = float(token)
    if not math.isfinite(value):
        return None
    words = normalize_answer(_NUMBER.sub(" ", raw, count=1)).split()
    rest = [w for w in words if w not in NUMBER_FILLER]
    return value, " ".join(rest), "." not in token


def looks_like_year(value: float, unit: str, is_integer: bool) -> bool:
    """Four-digit whole numbers without a unit are years: they must match exactly."""
    return is_integer and not unit and 1000 <= value <= 2999


def numbers_match(gold: Any, prediction: Any,
                  rel_tol: float = DEFAULT_REL_TOL) -> tuple[bool, str] | None:
    """``(match, why)`` when both sides are numbers, ``None`` when either is not.

    >>> [numbers_match(g, p)[0] for g, p in [("1874", "1875"), ("1,234 m", "1230"),
    ...                                      ("1,234 m", "1200")]]
    [False, True, False]
    """
    g, p = parse_quantity(gold), parse_quantity(prediction)
    if g is None or p is None:
        return None
    (gv, gu, gi), (pv, pu, _) = g, p
    if gu and pu and gu != pu:
        return None  # different units: let the text comparison decide
    if looks_like_year(gv, gu, gi):
        return (gv == pv, "year: exact" if gv == pv else f"year {pv:g} is not {gv:g}")
    if math.isclose(gv, pv, rel_tol=rel_tol, abs_tol=1e-9):
        return True, f"number within {rel_tol:.0%}"
    return False, f"number {pv:g} is not within {rel_tol:.0%} of {gv:g}"


class MatchJudge(Judge):
    """The offline judge: a normalised match with aliases (a parenthetical qualifier may be
    dropped); years compare exactly, other numbers within ``rel_tol``.

    >>> j = MatchJudge()
    >>> j.judge("q", "Zanura River", "the zanura river").correct
    True
    >>> j.judge("q", "1874", "1875").correct
    False
    """

    name = "match"

    def __init__(self, rel_tol: float = DEFAULT_REL_TOL):
        self.rel_tol = rel_tol

    def judge(self, question: str, gold: str, prediction: str | None,
              aliases: Iterable[str] = ()) -> Verdict:
        if prediction is None or not str(prediction).strip():
            return Verdict(False, "no answer", method=self.name)
        prediction = str(prediction)
        variants = {prediction, drop_parentheticals(prediction)}
        for accepted in [gold, *aliases]:
            if accepted is None or not str(accepted).strip():
                continue
            label = "gold" if accepted is gold else f"alias {accepted!r}"
            for variant in variants:
                numeric = numbers_match(accepted, variant, self.rel_tol)
                if numeric is not None:
                    if numeric[0]:
                        return Verdict(True, f"matches {label} ({numeric[1]})", extracted=variant,
                                       method=self.name)
                    continue
                normal = normalize_answer(variant)
                if normal and normal == normalize_answer(accepted):
                    return Verdict(True, f"matches {label} after normalisation", extracted=variant,
                                   method=self.name)
        numeric = numbers_match(gold, prediction, self.rel_tol)
        why = numeric[1] if numeric is not None else "no match with the gold answer or its aliases"
        return Verdict(False, why, extracted=prediction, method=self.name)


#: The LLM judge's prompt (shipped as package data: its lines are the prompt's own).
JUDGE_PROMPT = Path(__file__).with_name("judge_prompt.txt").read_text(encoding="utf-8")


_VERDICT_LINE = re.compile(r"(?<![a-z_])correct_*\s*[:：=]\s*[\"'\[_]*\s*(yes|no)\b", re.IGNORECASE)
_EXTRACTED_LINE = re.compile(r"extracted[_ ]final[_ ]answer\s*[:：]\s*(.*)", re.IGNORECASE)


def parse_judge_reply(reply: Any) -> tuple[bool | None, str | None]:
    """``(correct, extracted_answer)`` from a judge reply, read leniently (the last verdict line
    wins); ``correct`` is None when there is no verdict line.

    >>> parse_judge_reply("extracted_final_answer: Paris\\n**Correct:** **Yes**")
    (True, 'Paris')
    >>> parse_judge_reply("I think it is right.")
    (None, None)
    """
    if not isinstance(reply, str):
        return None, None
    plain = re.sub(r"[*`#]", "", reply)
    verdicts = _VERDICT_LINE.findall(plain)
    extracted_match = _EXTRACTED_LINE.search(plain)
    extracted = extracted_match.group(1).strip() if extracted_match else None
    if extracted is not None and extracted.lower() in ("none", "null", ""):
        extracted = None
    if not verdicts:
        return None, extracted
    return verdicts[-1].lower() == "yes", extracted


class LLMJudge(Judge):
    """An LLM as the judge (paper 2.2 and A.3, HLE/BrowseComp style), over any chat backend; a
    reply without a verdict or a failed call is retried, and the last failure counts incorrect."""

    name = "llm"

    def __init__(self, chat: ChatBackend, *, max_attempts: int = 3, sampling: dict | None = None):
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.chat = chat
        self.max_attempts = max_attempts
        self.sampling = {"temperature": 0.0, "max_tokens": 512, **(sampling or {})}
        self.failures = 0  # judgements that fell back to "incorrect" after every attempt

    def prompt(self, question: str, gold: str, prediction: str, aliases: Iterable[str] = ()) -> str:
        aliases = [a for a in aliases if a and str(a).strip()]
        extra = f"\n(also accepted: {'; '.join(aliases)})" if aliases else ""
        return JUDGE_PROMPT.format(question=question.strip(), response=prediction.strip(),
                                   gold=str(gold).strip(), aliases=extra)

    def judge(self, question: str, gold: str, prediction: str | None,
              aliases: Iterable[str] = ()) -> Verdict:
        if prediction is None or not str(prediction).strip():
            return Verdict(False, "no answer", method=self.name)
        messages = [{"role": "user",
                     "content": self.prompt(question, gold, str(prediction), aliases)}]
        problem = "no attempt made"
        for _ in range(self.max_attempts):
            try:
                reply = self.chat.chat(messages, **self.sampling)
            except ChatError as exc:
                problem = f"judge call failed ({exc})"
                continue
            correct, extracted = parse_judge_reply(reply)
            if correct is None:
                problem = "judge reply had no 'correct: yes|no' line"
                continue
            return Verdict(correct, f"LLM judge: correct: {'yes' if correct else 'no'}",
                           extracted=extracted, method=self.name)
        self.failures += 1
        return Verdict(False,
                       f"{problem} after {self.max_attempts} attempt(s); counted as incorrect",
                       method=self.name)


def make_judge(spec: str | Judge | None = "match", **kwargs: Any) -> Judge:
    """A judge from a spec: ``"match"``, ``"llm:<chat spec>"`` or a Judge."""
    if isinstance(spec, Judge):
        return spec
    if spec is None or spec == "match":
        return MatchJudge(**kwargs)
    if isinstance(spec, str) and spec.startswith("llm:"):
        return LLMJudge(make_chat(spec[len("llm:") :]), **kwargs)
    raise ValueError(f"unknown judge {spec!r}: use 'match' or 'llm:<chat spec>'")
