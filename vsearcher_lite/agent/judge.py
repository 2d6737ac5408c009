"""Judges: is a predicted answer the gold answer? One interface for the filters, rejection
sampling, the GRPO reward and evaluation: ``MatchJudge`` (offline, the sandbox default: a
normalised match, and a number only as the gold's number written another way) and ``LLMJudge``
(live runs, the paper's choice).

A verdict says how it matched (``Verdict.match``): ``exact`` (the gold as written), ``normalised``
(case, accents, punctuation, articles or a parenthetical qualifier aside), ``alias`` (one of the
task's other accepted spellings) or ``number`` (the gold's number written another way).
"""

from __future__ import annotations

import abc
import re
import unicodedata
from dataclasses import asdict, dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Iterable, NamedTuple

from vsearcher_lite.backends.chat import make_chat
from vsearcher_lite.chat import ChatBackend, ChatError

ARTICLES = frozenset({"a", "an", "the"})
# Words that may surround a number without changing it ("in 1874", "about 1,200", "1874 AD").
NUMBER_FILLER = frozenset({"in", "the", "year", "about", "approximately", "around", "circa", "ca",
                           "c", "roughly", "some", "ad", "ce"})
#: Words that scale the number before them ("1.2 million").
SCALE_WORDS = {"thousand": 3, "million": 6, "billion": 9, "trillion": 12}
#: How a unit may be spelled, by the one name it is compared under (the same unit spelled
#: differently: no unit is converted into another). Spellings are ``normalize_answer``'d text,
#: where ``km²`` reads ``km2``.
UNIT_SPELLINGS = {
    "km2": ("km2", "km 2", "sq km", "sqkm", "square km", "square kilometre", "square kilometres",
            "square kilometer", "square kilometers"),
    "m2": ("m2", "m 2", "sq m", "square m", "square metre", "square metres", "square meter",
           "square meters"),
    "km": ("km", "kilometre", "kilometres", "kilometer", "kilometers"),
    "m": ("m", "metre", "metres", "meter", "meters"),
    "cm": ("cm", "centimetre", "centimetres", "centimeter", "centimeters"),
    "mm": ("mm", "millimetre", "millimetres", "millimeter", "millimeters"),
}
_UNIT_NAME = {spelling: name for name, spellings in UNIT_SPELLINGS.items()
              for spelling in spellings}
#: The kinds of match a verdict names, from the strictest.
MATCH_KINDS = ("exact", "normalised", "alias", "number")


@dataclass(frozen=True)
class Verdict:
    correct: bool
    reason: str
    extracted: str | None = None  # the final answer as the judge read it (LLM judge)
    method: str = "match"
    match: str | None = None  # how an accepted answer matched (MATCH_KINDS); None otherwise

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
    >>> normalize_answer("37,381 km²")
    '37381 km2'
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
# a thousands separator: a comma or a space before a group of exactly three digits
_SEPARATOR = re.compile(r"(?<=\d)[, ](?=\d{3}(?!\d))")


class Quantity(NamedTuple):
    """A number as written: its value, the place of its last digit written (``exponent``: 0 for
    925, -1 for 3.5, 5 for 1.2 million) and its unit (one name per unit, ``UNIT_SPELLINGS``;
    other words kept as they are; ``""`` when none)."""

    value: Decimal
    exponent: int
    unit: str


def parse_quantity(text: Any) -> Quantity | None:
    """The text as one number and a unit, filler words aside; ``None`` when it is not.

    >>> parse_quantity("about 1,234 m")
    Quantity(value=Decimal('1234'), exponent=0, unit='m')
    >>> parse_quantity("37 381 square kilometres").unit, parse_quantity("\u22125 km").value
    ('km2', Decimal('-5'))
    >>> q = parse_quantity("1.2 million")
    >>> q.value == 1_200_000, q.exponent
    (True, 5)
    >>> parse_quantity("two"), parse_quantity("1874 or 1875")
    (None, None)
    """
    raw = _strip_accents(str(text if text is not None else "")).casefold().replace("\u2212", "-")
    raw = _SEPARATOR.sub("", raw)
    numbers = _NUMBER.findall(raw)
    if len(numbers) != 1:
        return None
    token = numbers[0]
    try:
        value = Decimal(token)
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimal numerals
        return None
    exponent = -len(token.split(".")[1]) if "." in token else 0
    words = [w for w in normalize_answer(_NUMBER.sub(" ", raw, count=1)).split()
             if w not in NUMBER_FILLER]
    if words and words[0] in SCALE_WORDS:
        scale = SCALE_WORDS[words.pop(0)]
        value, exponent = value.scaleb(scale), exponent + scale
    unit = " ".join(words)
    return Quantity(value, exponent, _UNIT_NAME.get(unit, unit))


def looks_like_year(q: Quantity) -> bool:
    """Four-digit whole numbers without a unit are years: they must match exactly."""
    return q.exponent == 0 and not q.unit and 1000 <= q.value <= 2999


def at_precision(value: Decimal, exponent: int) -> Decimal | None:
    """``value`` rounded (half away from zero) to the place ``10 ** exponent``.

    >>> at_precision(Decimal("925.4"), 0), at_precision(Decimal("1234567"), 5)
    (Decimal('925'), Decimal('1.2E+6'))
    """
    try:
        return value.quantize(Decimal(1).scaleb(exponent), rounding=ROUND_HALF_UP)
    except InvalidOperation:  # more digits than the decimal context holds
        return None


def numbers_match(gold: Any, prediction: Any) -> tuple[bool, str] | None:
    """``(match, why)`` when both sides are numbers in the same unit (or one side names none),
    ``None`` otherwise (the text comparison decides).

    The rule: the prediction must be the gold's number written another way. Separators, the
    spelling of the unit, filler words and a scale word do not matter; the value must equal
    the gold's, or, written with more digits than the gold, round to the gold at the gold's
    last digit (gold 925 accepts 925.4; gold 1.2 million accepts 1,230,000). A prediction with
    fewer digits than the gold is a different number (gold 925.4 rejects 925), and so is a
    nearby number (gold 925 rejects 916). Years (four-digit whole numbers without a unit)
    compare exactly.

    >>> [numbers_match("925", p)[0] for p in ["925", "925.4", "925.5", "916", "930"]]
    [True, True, False, False, False]
    >>> [numbers_match("37,381 km²", p)[0] for p in ["37381", "37 381 km2", "37,020 km²"]]
    [True, True, False]
    >>> numbers_match("1.2 million", "1,200,000"), numbers_match("925.4", "925")[0]
    ((True, '1,200,000 is 1.2 million written another way'), False)
    >>> numbers_match("1874", "1875"), numbers_match("913", "910de")[0]
    ((False, 'year 1875 is not 1874'), False)
    >>> numbers_match("1,234 m", "1,234 km"), numbers_match("Zanura", "12")
    (None, None)
    """
    g, p = parse_quantity(gold), parse_quantity(prediction)
    if g is None or p is None:
        return None
    if g.unit and p.unit and g.unit != p.unit:
        return None  # another unit (or other words): let the text comparison decide
    shown, target = str(prediction).strip(), str(gold).strip()
    if looks_like_year(g):
        same = p.value == g.value
        return same, ("year: exact" if same else f"year {p.value} is not {g.value}")
    if p.value == g.value:
        return True, f"{shown} is {target} written another way"
    if p.exponent > g.exponent:
        return False, f"{shown} has fewer digits than {target}: a different number"
    if at_precision(p.value, g.exponent) == g.value:
        return True, f"{shown} rounds to {target} at the gold's last digit"
    return False, f"{shown} is not {target}"


class MatchJudge(Judge):
    """The offline judge: the gold or an alias, after normalisation (a parenthetical qualifier
    may be dropped), and a number only as the gold's number written another way
    (``numbers_match``): never a nearby number. Each verdict says how it matched.

    >>> j = MatchJudge()
    >>> [(v.correct, v.match) for v in (j.judge("q", "Zanura River", "Zanura River"),
    ...                                 j.judge("q", "Zanura River", "the zanura river"),
    ...                                 j.judge("q", "Bepo Kala", "Kala", aliases=["Kala"]),
    ...                                 j.judge("q", "37,381 km²", "37381 square kilometres"))]
    [(True, 'exact'), (True, 'normalised'), (True, 'alias'), (True, 'number')]
    >>> j.judge("q", "925", "916").correct, j.judge("q", "1874", "1875").correct
    (False, False)
    """

    name = "match"

    def judge(self, question: str, gold: str, prediction: str | None,
              aliases: Iterable[str] = ()) -> Verdict:
        if prediction is None or not str(prediction).strip():
            return Verdict(False, "no answer", method=self.name)
        prediction = str(prediction)
        if gold is not None and prediction.strip() == str(gold).strip():
            return Verdict(True, "the gold answer as written", extracted=prediction,
                           method=self.name, match="exact")
        variants = dict.fromkeys([prediction, drop_parentheticals(prediction)])
        for accepted in [gold, *aliases]:
            if accepted is None or not str(accepted).strip():
                continue
            is_gold = accepted is gold
            label = "the gold" if is_gold else f"alias {accepted!r}"
            for variant in variants:
                numeric = numbers_match(accepted, variant)
                if numeric is not None:
                    if numeric[0]:
                        return Verdict(True, f"matches {label}: {numeric[1]}", extracted=variant,
                                       method=self.name, match="number" if is_gold else "alias")
                    continue
                normal = normalize_answer(variant)
                if normal and normal == normalize_answer(accepted):
                    return Verdict(True, f"matches {label} after normalisation", extracted=variant,
                                   method=self.name, match="normalised" if is_gold else "alias")
        numeric = numbers_match(gold, prediction)
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
