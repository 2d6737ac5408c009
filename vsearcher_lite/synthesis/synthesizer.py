"""One task at a time: the initial question, the text rounds and the image round.

``Synthesizer`` builds a task from a seed with one writer over one knowledge source; every
rewrite passes the same checks whoever wrote it, and in the sandbox the finished question is
re-solved through its chain (``chain.answer_invariance``) and dropped if its answer changed.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any, Callable

from vsearcher_lite.agent.task import ImageInjection, InjectionRound, Task
from vsearcher_lite.synthesis.chain import answer_invariance, is_checkable
from vsearcher_lite.synthesis.describe import FactIndex
from vsearcher_lite.synthesis.text import contains_name, mentions_answer
from vsearcher_lite.synthesis.writer import FactChoice, WriteContext, Writer, WriterError
from vsearcher_lite.world.model import KnowledgeSource, Seed


class TaskDropped(Exception):
    """A task could not be built; ``reason`` is the counted key."""

    def __init__(self, reason: str, detail: str = "", round: int | None = None):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
        self.round = round


def task_record(task: Task) -> dict:
    """``task.to_dict()`` without its deep copy: for records serialised at once (a hot path)."""
    record = dict(vars(task))
    record["rounds"] = [dict(vars(r)) for r in task.rounds]
    record["image"] = dict(vars(task.image)) if task.image is not None else None
    return record


def task_id(split: str, difficulty: str, seed_id: str) -> str:
    return f"{split}-{difficulty}-{seed_id}"


def task_rng(seed: int, stage: str, tid: str) -> random.Random:
    """A generator of its own per task and stage: results do not depend on thread scheduling."""
    return random.Random(f"vsearcher-synthesis:{seed}:{stage}:{tid}")


def inserted_text(before: str, after: str) -> str:
    """The part of ``after`` that replaced something in ``before``, widened to whole words.

    >>> inserted_text("Who designed Orsk Bridge?", "Who designed the bridge shown in the image?")
    'the bridge shown in the image'
    >>> inserted_text("Which town is on the Drun River?",
    ...               "Which town is on the river shown in the image?")
    'the river shown in the image'
    """
    i = 0
    while i < min(len(before), len(after)) and before[i] == after[i]:
        i += 1
    j = 0
    while j < min(len(before), len(after)) - i and before[-1 - j] == after[-1 - j]:
        j += 1
    middle = after[i : len(after) - j]
    # widen to whole words so the phrase reads on its own, with its article
    while i > 0 and middle and after[i - 1].isalnum():
        i -= 1
    while j > 0 and after[len(after) - j].isalnum():
        j -= 1
    if after[:i].lower().endswith(("the ", "a ", "an ")):
        i = after[:i].rstrip().rfind(" ") + 1
    return after[i : len(after) - j].strip()


class Synthesizer:
    """Builds tasks from seeds with one writer over one knowledge source. ``index`` (sandbox)
    enables the answer-invariance check; without it (live) tasks are counted as unchecked."""

    def __init__(
        self,
        source: KnowledgeSource,
        writer: Writer,
        *,
        index: FactIndex | None = None,
        max_picks: int = 4,
        perturb: Callable[[str, str, int], Any] | None = None,
        http_client: Any = None,
    ):
        self.source = source
        self.http_client = http_client  # downloads live images (an HttpClient); None: a default one
        self.writer = writer
        self.index = index
        self.max_picks = max_picks
        self._perturb = perturb

    # -- helpers -----------------------------------------------------------------------------
    def resolve(self, name: str, ctx: WriteContext) -> str:
        """The entity id behind a name: a known mention, else the source's lookup."""
        eid = ctx.mentions.get(name)
        if eid is None:
            for known, kid in ctx.mentions.items():
                if known.casefold() == name.casefold():
                    return kid
            eid = self.source.find(name)
        if eid is None:
            raise WriterError("page_not_found", f"no page for {name!r}")
        return eid

    def page(self, entity_id: str):
        try:
            return self.source.page(entity_id)
        except LookupError as exc:
            raise WriterError("page_not_found", str(exc)) from None

    def noun_of(self, entity_id: str) -> str:
        if self.index is not None and entity_id in self.index.entities:
            return self.index.noun_of(entity_id)
        return self.source.entity(entity_id).type.replace("_", " ")

    def check_question(self, new: str, hidden: str, ctx: WriteContext) -> None:
        """Checks every rewrite must pass, whoever wrote it."""
        if not new.strip():
            raise WriterError("empty_output", "empty question")
        if contains_name(new, hidden):
            raise WriterError("entity_still_in_question", hidden)
        if mentions_answer(new, ctx.task.answer, ctx.task.aliases):
            raise WriterError("answer_leaked", "the question contains the answer")

    def check_invariance(self, task: Task, stage: str) -> None:
        if self.index is None or not is_checkable(task):
            task.extra["answer_invariant"] = None
            return
        result = answer_invariance(task, self.index)
        task.extra["answer_invariant"] = result.ok
        if not result.ok:
            raise TaskDropped("answer_not_invariant", f"{stage}: {result.reason}")

    # -- text injection ----------------------------------------------------------------------
    def initial_task(self, seed: Seed, tid: str, split: str, difficulty: str,
                     rng: random.Random) -> tuple[Task, WriteContext]:
        task = Task(id=tid, question="", answer="", difficulty=difficulty, split=split,
                    seed_id=seed.id, seed_title=seed.title,
                    world=getattr(self.source, "name", "sandbox"))
        ctx = WriteContext(task=task, rng=rng)
        try:
            page = self.source.page(seed.id)
        except LookupError as exc:
            raise TaskDropped("page_not_found", str(exc), 0) from None
        try:
            qa = self.writer.initial_qa(seed, page, ctx)
        except WriterError as exc:
            raise TaskDropped(exc.reason, exc.detail, 0) from None
        if mentions_answer(qa.question, qa.answer, qa.aliases):
            raise TaskDropped("answer_leaked", "the initial question contains its answer", 0)
        task.question = task.initial_question = qa.question
        task.answer = qa.answer
        task.aliases = list(qa.aliases)
        task.answer_relation = qa.relation
        if qa.answer_entity_id:
            task.extra["answer_entity_id"] = qa.answer_entity_id
            ctx.used.add(qa.answer_entity_id)
        name = self.seed_name(seed)
        if contains_name(qa.question, name):
            ctx.mentions[name] = seed.id
        ctx.used.add(seed.id)
        return task, ctx

    def seed_name(self, seed: Seed) -> str:
        if self.index is not None and seed.id in self.index.entities:
            return self.index.name_of(seed.id)
        return seed.title

    def inject_round(self, ctx: WriteContext, number: int) -> InjectionRound:
        """One round: pick, fetch, extract, rewrite; up to ``max_picks`` entities are tried."""
        question = ctx.task.question
        ctx.tried = set()
        last: WriterError | None = None
        for _ in range(self.max_picks):
            try:
                name = self.writer.pick_entity(question, ctx)
            except WriterError as exc:
                last = last or exc  # why the earlier picks failed says more than "nothing left"
                break
            try:
                eid = self.resolve(name, ctx)
                if eid == ctx.task.extra.get("answer_entity_id"):
                    raise WriterError("picked_answer", name)
                fact: FactChoice = self.writer.extract_fact(eid, name, self.page(eid), ctx)
                new = self.writer.rewrite(question, name, fact, ctx)
                self.check_question(new, name, ctx)
            except WriterError as exc:
                last = exc
                ctx.tried.add(name)
                continue
            rnd = InjectionRound(
                round=number, entity_id=eid, entity=name, fact=fact.fact,
                description=fact.description, question_before=question, question_after=new,
                entity_type=fact.entity_type, constraints=[c.to_dict() for c in fact.constraints])
            ctx.mentions.pop(name, None)
            ctx.mentions.update(fact.new_mentions)
            ctx.used.add(eid)
            ctx.used.update(fact.new_mentions.values())
            ctx.task.question = new
            return rnd
        assert last is not None
        raise TaskDropped(last.reason, last.detail, number)

    def text_task(self, seed: Seed, split: str, difficulty: str, n_rounds: int,
                  rng: random.Random) -> Task:
        tid = task_id(split, difficulty, seed.id)
        task, ctx = self.initial_task(seed, tid, split, difficulty, rng)
        for number in range(1, n_rounds + 1):
            ctx.rounds_left = n_rounds - number
            task.rounds.append(self.inject_round(ctx, number))
        task.extra["mentions"] = dict(ctx.mentions)
        task.extra["used"] = sorted(ctx.used)
        self.check_invariance(task, "text")
        return task

    # -- image injection ---------------------------------------------------------------------
    def image_task(self, task: Task, rng: random.Random, image_dir: Path) -> Task:
        # a copy: only the question, the image fields and ``extra`` change
        task = dataclasses.replace(task, extra=dict(task.extra), filters=dict(task.filters))
        ctx = WriteContext(task=task, rng=rng, mentions=dict(task.extra.get("mentions", {})),
                           used=set(task.extra.get("used", [])))
        question = task.question
        last: WriterError | None = None
        for _ in range(self.max_picks):
            try:
                name = self.writer.pick_critical_entity(question, ctx)
            except WriterError as exc:
                last = last or exc
                break
            try:
                eid = self.resolve(name, ctx)
                ref = self.source.image(eid)
                if ref is None:
                    raise WriterError("no_image", f"{name!r} has no image")
                new = self.writer.hide_for_image(question, name, self.noun_of(eid), ctx)
                self.check_question(new, name, ctx)
            except WriterError as exc:
                last = exc
                ctx.tried.add(name)
                continue
            indexed = self.index is not None and eid in self.index.entities
            etype = self.index.type_of(eid) if indexed else self.source.entity(eid).type
            task.image = ImageInjection(
                entity_id=eid, entity=name, source_image=ref.location,
                description=inserted_text(question, new), question_before=question,
                question_after=new, entity_type=etype)
            task.question = new
            task.extra["mentions"] = {n: i for n, i in ctx.mentions.items() if n != name}
            task.image_path = str(self.write_question_image(ref, image_dir / f"{task.id}.jpg", rng))
            self.check_invariance(task, "image")
            return task
        assert last is not None
        raise TaskDropped(last.reason, last.detail)

    def write_question_image(self, ref, dst: Path, rng: random.Random) -> Path:
        """A perturbed copy of the entity's image: the question image."""
        dst.parent.mkdir(parents=True, exist_ok=True)
        src = ref.location
        perturb = self._perturb
        if perturb is None:
            from vsearcher_lite.world.images import perturb_image as perturb
        try:
            if ref.is_url:
                from vsearcher_lite.synthesis.images import download_image

                orig = dst.with_suffix(".orig")
                src = str(download_image(ref.location, orig, client=self.http_client))
            perturb(src, str(dst), rng.randrange(2**31))
        except (OSError, ValueError) as exc:  # unreachable URL, not an image, unreadable file
            raise TaskDropped("image_unreadable", str(exc)) from None
        return dst.resolve()
