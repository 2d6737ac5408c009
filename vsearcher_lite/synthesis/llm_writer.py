"""The LLM writer: the six writer operations as prompts to any chat backend (paper A.2).

The prompts (``writer_prompts.txt``) are this project's own. Every reply is validated; an
invalid reply or a failed call is retried up to ``max_attempts`` times with a note on what was
wrong, and what still fails raises a counted ``WriterError``.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path
from typing import Callable

from vsearcher_lite.chat import ChatBackend, ChatError
from vsearcher_lite.synthesis.text import (
    clean_line_reply,
    contains_name,
    find_name_span,
    first_json_object,
    fold,
    mentions_answer,
    read_prompts,
    strip_code_fences,
)
from vsearcher_lite.synthesis.writer import (
    MAX_ANSWER_WORDS,
    FactChoice,
    InitialQA,
    WriteContext,
    Writer,
    WriterError,
)
from vsearcher_lite.world.model import Fact, PageContent, Seed

MAX_PAGE_CHARS = 6000  # enough for the lead paragraphs of a Wikipedia article
MAX_FACT_WORDS = 45
IMAGE_MARKERS = ("in the image", "in the picture", "in the photo")

#: The writer's prompts (package data: a prompt's lines are its own).
PROMPTS = read_prompts(Path(__file__).with_name("writer_prompts.txt"))
INITIAL_QA_PROMPT = PROMPTS["INITIAL_QA_PROMPT"]
PICK_ENTITY_PROMPT = PROMPTS["PICK_ENTITY_PROMPT"]
EXTRACT_FACT_PROMPT = PROMPTS["EXTRACT_FACT_PROMPT"]
REWRITE_PROMPT = PROMPTS["REWRITE_PROMPT"]
PICK_CRITICAL_PROMPT = PROMPTS["PICK_CRITICAL_PROMPT"]
HIDE_FOR_IMAGE_PROMPT = PROMPTS["HIDE_FOR_IMAGE_PROMPT"]


def avoid_note(answer: str, names: list[str] | tuple = ()) -> str:
    """The sentence that tells the model what must not appear."""
    parts = []
    if names:
        parts.append(" Do not choose any of: " + ", ".join(f'"{n}"' for n in names) + ".")
    if answer:
        parts.append(f' Never mention "{answer}".')
    return "".join(parts)


def cut_page(text: str, limit: int = MAX_PAGE_CHARS) -> str:
    """The page text cut at a paragraph or sentence boundary under ``limit`` characters."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    for sep in ("\n\n", ". ", "\n"):
        pos = head.rfind(sep)
        if pos > limit // 2:
            return head[: pos + len(sep)].rstrip()
    return head.rstrip()


def parse_qa_json(reply: str) -> dict:
    """Read ``{"question": ..., "answer": ...}`` out of a reply; ``WriterError`` when impossible.

    >>> parse_qa_json('```json\\n{"question": "Who?", "answer": "Ilsa"}\\n```')["answer"]
    'Ilsa'
    """
    text = strip_code_fences(reply)
    blob = first_json_object(text) or first_json_object(reply)
    if blob is None:
        raise WriterError("malformed_json", "no JSON object in the reply")
    try:
        obj = json.loads(blob)
    except json.JSONDecodeError as exc:
        raise WriterError("malformed_json", exc.msg) from None
    if not isinstance(obj, dict):
        raise WriterError("malformed_json", "the JSON is not an object")
    lowered = {str(k).strip().lower(): v for k, v in obj.items()}
    out = {}
    for key in ("question", "answer"):
        value = lowered.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str) or not value.strip():
            raise WriterError("missing_field", f"the JSON has no non-empty {key!r}")
        out[key] = value.strip()
    return out


class LLMWriter(Writer):
    """Writer operations through a chat backend. Thread-safe: one instance serves a thread pool;
    ``stats`` counts calls, retries, invalid replies by reason and final failures."""

    name = "llm"

    def __init__(
        self,
        chat: ChatBackend,
        *,
        max_attempts: int = 3,
        temperature: float = 0.7,
        max_tokens: int = 512,
        max_page_chars: int = MAX_PAGE_CHARS,
    ):
        self.chat = chat
        self.max_attempts = max(1, int(max_attempts))
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.max_page_chars = max_page_chars
        self._lock = threading.Lock()
        self.calls = 0
        self.retries = 0
        self.problems: Counter = Counter()
        self.failures: Counter = Counter()

    @property
    def stats(self) -> dict:
        with self._lock:
            return {
                "calls": self.calls,
                "retries": self.retries,
                "problems": dict(self.problems),
                "failures": dict(self.failures),
            }

    # -- the retry loop ----------------------------------------------------------------------
    def ask(self, operation: str, prompt: str, parse: Callable[[str], object], ctx: WriteContext):
        """Send ``prompt``; return ``parse(reply)``, retrying invalid replies and failed calls."""
        messages = [{"role": "user", "content": prompt}]
        last: WriterError | None = None
        for attempt in range(self.max_attempts):
            if attempt:
                with self._lock:
                    self.retries += 1
            try:
                with self._lock:
                    self.calls += 1
                reply = self.chat.chat(
                    messages,
                    temperature=self.temperature,
                    max_tokens=self.max_tokens,
                    seed=ctx.rng.randrange(2**31),
                )
            except ChatError as exc:
                last = WriterError("chat_error", str(exc))
                with self._lock:
                    self.problems["chat_error"] += 1
                continue
            reply = reply if isinstance(reply, str) else ""
            try:
                return parse(reply)
            except WriterError as exc:
                last = exc
                with self._lock:
                    self.problems[exc.reason] += 1
                messages = messages[:1] + [
                    {"role": "assistant", "content": reply},
                    {"role": "user",
                     "content": f"That reply cannot be used ({exc}). Please answer again, "
                                "following the instructions exactly."},
                ]
        assert last is not None
        with self._lock:
            self.failures[f"{operation}:{last.reason}"] += 1
        raise last

    # -- validation helpers ------------------------------------------------------------------
    @staticmethod
    def _check_question(new: str, old: str, hidden: str, ctx: WriteContext) -> str:
        new = clean_line_reply(new)
        if not new:
            raise WriterError("empty_output", "the reply is empty")
        if fold(new) == fold(old):
            raise WriterError("unchanged_question", "the question was not rewritten")
        if contains_name(new, hidden):
            raise WriterError("entity_still_in_question", f"{hidden!r} is still in the question")
        if mentions_answer(new, ctx.answer, ctx.task.aliases):
            raise WriterError("answer_leaked", "the rewritten question contains the answer")
        return new

    def _pick(self, question: str, ctx: WriteContext, reply: str) -> str:
        name = clean_line_reply(reply).rstrip(".?!,;:")
        if not name:
            raise WriterError("empty_output", "no entity in the reply")
        span = find_name_span(question, name)
        if span is None:
            raise WriterError("entity_not_in_question", f"{name!r} is not in the question")
        if span in ctx.tried:
            raise WriterError("entity_already_tried", span)
        if fold(span) == fold(ctx.answer):
            raise WriterError("picked_answer", span)
        return span

    # -- operations --------------------------------------------------------------------------
    def initial_qa(self, seed: Seed, page: PageContent, ctx: WriteContext) -> InitialQA:
        title = seed.title or page.title
        prompt = INITIAL_QA_PROMPT.format(
            title=title, text=cut_page(page.text, self.max_page_chars), max_words=MAX_ANSWER_WORDS
        )

        def parse(reply: str) -> InitialQA:
            qa = parse_qa_json(reply)
            if len(qa["answer"].split()) > MAX_ANSWER_WORDS:
                raise WriterError("answer_too_long", qa["answer"])
            if not contains_name(qa["question"], title):
                raise WriterError("seed_not_in_question", f"the question does not name {title!r}")
            if mentions_answer(qa["question"], qa["answer"]):
                raise WriterError("answer_leaked", "the question contains its answer")
            return InitialQA(qa["question"], qa["answer"])

        return self.ask("initial_qa", prompt, parse, ctx)

    def pick_entity(self, question: str, ctx: WriteContext) -> str:
        prompt = PICK_ENTITY_PROMPT.format(question=question,
                                           avoid=avoid_note("", sorted(ctx.tried)))
        return self.ask("pick_entity", prompt, lambda r: self._pick(question, ctx, r), ctx)

    def extract_fact(self, entity_id: str, entity: str, page: PageContent,
                     ctx: WriteContext) -> FactChoice:
        prompt = EXTRACT_FACT_PROMPT.format(
            entity=entity,
            text=cut_page(page.text, self.max_page_chars),
            max_words=MAX_FACT_WORDS,
            avoid=avoid_note(ctx.answer),
        )

        def parse(reply: str) -> FactChoice:
            sentence = clean_line_reply(reply)
            if not sentence:
                raise WriterError("empty_output", "no fact in the reply")
            if len(sentence.split()) > 2 * MAX_FACT_WORDS:
                raise WriterError("fact_too_long", f"{len(sentence.split())} words")
            if mentions_answer(sentence, ctx.answer, ctx.task.aliases):
                raise WriterError("answer_in_fact", "the fact contains the answer")
            fact = Fact(entity_id, "text_fact", sentence, "text", "fact", "")
            return FactChoice(entity_id, entity, sentence, sentence, dict(fact.__dict__))

        return self.ask("extract_fact", prompt, parse, ctx)

    def rewrite(self, question: str, entity: str, fact: FactChoice, ctx: WriteContext) -> str:
        prompt = REWRITE_PROMPT.format(question=question, entity=entity, fact=fact.sentence,
                                       avoid=avoid_note(ctx.answer))
        return self.ask("rewrite", prompt,
                        lambda r: self._check_question(r, question, entity, ctx), ctx)

    def pick_critical_entity(self, question: str, ctx: WriteContext) -> str:
        prompt = PICK_CRITICAL_PROMPT.format(question=question,
                                             avoid=avoid_note("", sorted(ctx.tried)))
        return self.ask("pick_critical_entity", prompt, lambda r: self._pick(question, ctx, r), ctx)

    def hide_for_image(self, question: str, entity: str, entity_type: str,
                       ctx: WriteContext) -> str:
        noun = entity_type.replace("_", " ") or "thing"
        prompt = HIDE_FOR_IMAGE_PROMPT.format(
            question=question,
            entity=entity,
            type=noun,
            article="an" if noun[:1].lower() in "aeiou" else "a",
            avoid=avoid_note(ctx.answer),
        )

        def parse(reply: str) -> str:
            new = self._check_question(reply, question, entity, ctx)
            if not any(m in new.lower() for m in IMAGE_MARKERS):
                raise WriterError("no_image_phrase", "the question does not refer to the image")
            return new

        return self.ask("hide_for_image", prompt, parse, ctx)
