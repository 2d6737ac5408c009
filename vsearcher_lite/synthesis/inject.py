"""Stages `inject-text` and `inject-image`: iterative injection (paper sections 2.1, 2.4, A.2).

Text injection: an initial QA about the seed, then N rounds; each round picks a named entity in
the question, takes one fact about it from its page, and rewrites the question with the name
replaced by a description built from that fact. Easy / medium / hard tasks get 1 / 3 / 5
rounds, exam tasks 10 (paper 2.4). Image injection then picks the entity most critical to the
answer, replaces its name by "the <type> shown in the image", and attaches a perturbed copy of
its picture as the question image.

Unlike the released code, every round is recorded (``InjectionRound``), and in the sandbox the
finished question is re-solved through its chain (``chain.answer_invariance``): a task whose
answer no longer follows is dropped, and the rate is reported (it must be 1.0).

Both stages are resumable: tasks go to an append-only ``tasks.jsonl`` keyed by task id,
dropped tasks (with their reason) to ``failed.jsonl``; a rerun skips both. Work runs in a
bounded thread pool (the LLM writer waits on the network), but results are consumed in seed
order and each task has its own random generator, so the output does not depend on the
number of threads.

Task ids read ``<split>-<difficulty>-<seed id>``: one task per seed and level.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from vsearcher_lite.runio import InputError, JsonlLog, RunDir
from vsearcher_lite.synthesis.chain import answer_invariance, is_checkable
from vsearcher_lite.synthesis.describe import FactIndex
from vsearcher_lite.synthesis.seeds import DEFAULT_MIX, SeedConfig, ensure_seeds, seed_from_record, split_counts
from vsearcher_lite.synthesis.task import (
    DIFFICULTY_ROUNDS,
    EXAM_ROUNDS,
    LEVEL_ORDER,
    ONEHOP,
    ImageInjection,
    InjectionRound,
    Task,
)
from vsearcher_lite.synthesis.text import contains_name, mentions_answer, word_count
from vsearcher_lite.synthesis.writer import FactChoice, WriteContext, Writer, WriterError
from vsearcher_lite.world.model import KnowledgeSource, Seed

PROFILE_SIZES = {
    # training tasks (split by the mix), held-out tasks, exam tasks (every profile asks for the paper's
    # 283; the default 2,000-entity world has 347 exam starts, 51 exam seeds and 296 rare people, and
    # 281 of them carry a ten-round chain)
    "cpu": (100, 30, 283),
    "single_gpu": (1000, 100, 283),
    "multi_gpu": (1000, 200, 283),  # paper: 1K RL tasks; MM-SearchExam has 283 questions
}
#: One-hop warm-up tasks (``task.ONEHOP``) per profile: training, held-out. Only the tiny cpu model needs them.
#: The cpu numbers are caps: the default 2,000-entity world has fewer entities than that to draw from.
PROFILE_ONEHOP = {"cpu": (2000, 2000), "single_gpu": (0, 0), "multi_gpu": (0, 0)}
#: Share of the warm-up entities (``warmup_pools``) that go to the held-out split.
WARMUP_HELDOUT_SHARE = 0.5
#: Easy and medium tasks per profile on top of the seed pools' (training, held-out), drawn from the
#: warm-up entities too. The paper's levels as they are, only more of them: the default 2,000-entity
#: world has 34 held-out seeds, so without these the cpu profile measured easy and medium accuracy
#: on 6 and 3 tasks, and its SFT data held 40 easy and 20 medium tasks against 593 one-hop ones.
PROFILE_WARMUP_LEVELS = {"cpu": {"easy": (600, 200), "medium": (300, 100)}, "single_gpu": {}, "multi_gpu": {}}


@dataclass
class InjectConfig:
    """Settings of the injection stages (text and image)."""

    n_train: int = 100
    n_heldout: int = 30
    n_exam: int = 30
    mix: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_MIX))
    rounds: dict[str, int] = field(default_factory=lambda: dict(DIFFICULTY_ROUNDS))
    exam_rounds: int = EXAM_ROUNDS
    onehop_train: int = 0  # one-hop warm-up tasks (no text round), from the training seeds
    onehop_heldout: int = 0  # and from the held-out seeds
    # also from every other entity a seed could be apart from its popularity (``warmup_pools``; sandbox only)
    onehop_warmup: bool = False
    onehop_warmup_heldout_share: float = WARMUP_HELDOUT_SHARE
    # more tasks of these levels from the warm-up entities: level -> (training, held-out) (sandbox only)
    warmup_levels: dict[str, tuple[int, int]] = field(default_factory=dict)
    # the exam also starts chains at rare people, whom no other pool starts from (``exam_people``; sandbox only)
    exam_people: bool = True
    writer: str = "rule"  # rule | llm
    chat: Any = None  # chat backend spec (make_chat) for the LLM writer
    concurrency: int = 1  # tasks in flight; the LLM writer benefits from 8-32
    max_attempts: int = 3  # LLM replies per writer operation
    max_picks: int = 4  # entities tried per round before the task is dropped
    seed: int = 0
    progress: bool = True

    @classmethod
    def for_profile(cls, profile: str = "cpu", **overrides) -> "InjectConfig":
        n_train, n_heldout, n_exam = PROFILE_SIZES.get(profile, PROFILE_SIZES["cpu"])
        onehop_train, onehop_heldout = PROFILE_ONEHOP.get(profile, PROFILE_ONEHOP["cpu"])
        warmup_levels = {k: tuple(v) for k, v in PROFILE_WARMUP_LEVELS.get(profile, PROFILE_WARMUP_LEVELS["cpu"]).items()}
        return cls(**{"n_train": n_train, "n_heldout": n_heldout, "n_exam": n_exam, "onehop_train": onehop_train,
                      "onehop_heldout": onehop_heldout, "onehop_warmup": bool(onehop_train or onehop_heldout),
                      "warmup_levels": warmup_levels, **overrides})

    def uses_warmup(self) -> bool:
        """Whether any level draws on the warm-up entities (``warmup_pools``)."""
        return (self.onehop_warmup and bool(self.onehop_train or self.onehop_heldout)) or any(
            n for pair in self.warmup_levels.values() for n in pair)

    def targets(self) -> list[tuple[str, str, int, int]]:
        """(split, difficulty, tasks wanted, rounds) for every job of the stage."""
        jobs = []
        unknown = sorted(set(self.warmup_levels) - set(self.rounds))
        if unknown:
            raise ValueError(f"warmup_levels names unknown level(s) {unknown}; known: {', '.join(self.rounds)}")
        for index, (split, total) in enumerate((("train", self.n_train), ("heldout", self.n_heldout))):
            counts = split_counts(total, self.mix)
            for diff in self.mix:
                extra = self.warmup_levels.get(diff, (0, 0))[index]
                jobs.append((split, diff, counts.get(diff, 0) + extra, self.rounds[diff]))
        jobs.append(("exam", "exam", self.n_exam, self.exam_rounds))
        if self.onehop_train > 0:
            jobs.append(("train", ONEHOP, self.onehop_train, 0))
        if self.onehop_heldout > 0:
            jobs.append(("heldout", ONEHOP, self.onehop_heldout, 0))
        return jobs


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
    """The part of ``after`` that replaced something in ``before`` (common prefix and suffix removed).

    >>> inserted_text("Who designed Orsk Bridge?", "Who designed the bridge shown in the image?")
    'the bridge shown in the image'
    >>> inserted_text("Which town is on the Drun River?", "Which town is on the river shown in the image?")
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
    """Builds tasks from seeds with one writer over one knowledge source.

    ``index`` (sandbox) enables the answer-invariance check; without it (live) tasks are kept
    as the writer validated them and counted as unchecked.
    """

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
        """The entity id behind a name in the question: a known mention, else the source's lookup."""
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
    def initial_task(self, seed: Seed, tid: str, split: str, difficulty: str, rng: random.Random) -> tuple[Task, WriteContext]:
        task = Task(id=tid, question="", answer="", difficulty=difficulty, split=split, seed_id=seed.id,
                    seed_title=seed.title, world=getattr(self.source, "name", "sandbox"))
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
                break  # the writer has nothing (valid) left to pick
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
                round=number,
                entity_id=eid,
                entity=name,
                fact=fact.fact,
                description=fact.description,
                question_before=question,
                question_after=new,
                entity_type=fact.entity_type,
                constraints=[c.to_dict() for c in fact.constraints],
            )
            ctx.mentions.pop(name, None)
            ctx.mentions.update(fact.new_mentions)
            ctx.used.add(eid)
            ctx.used.update(fact.new_mentions.values())
            ctx.task.question = new
            return rnd
        assert last is not None
        raise TaskDropped(last.reason, last.detail, number)

    def text_task(self, seed: Seed, split: str, difficulty: str, n_rounds: int, rng: random.Random) -> Task:
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
        chosen = None
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
            chosen = (name, eid, ref, new)
            break
        if chosen is None:
            assert last is not None
            raise TaskDropped(last.reason, last.detail)
        name, eid, ref, new = chosen
        etype = self.index.type_of(eid) if self.index is not None and eid in self.index.entities else self.source.entity(eid).type
        task.image = ImageInjection(
            entity_id=eid,
            entity=name,
            source_image=ref.location,
            description=inserted_text(question, new),
            question_before=question,
            question_after=new,
            entity_type=etype,
        )
        task.question = new
        task.extra["mentions"] = {n: i for n, i in ctx.mentions.items() if n != name}
        task.image_path = str(self.write_question_image(ref, image_dir / f"{task.id}.jpg", rng))
        self.check_invariance(task, "image")
        return task

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

                src = str(download_image(ref.location, dst.with_suffix(".orig"), client=self.http_client))
            perturb(src, str(dst), rng.randrange(2**31))
        except (OSError, ValueError) as exc:  # unreachable URL, not an image, unreadable file
            raise TaskDropped("image_unreadable", str(exc)) from None
        return dst.resolve()


# ---------------------------------------------------------------------------------------------
# Running many tasks


def process_in_order(
    items: Iterable,
    work: Callable[[Any], Any],
    *,
    need: int | None,
    is_success: Callable[[Any], bool],
    on_result: Callable[[Any, Any], None],
    concurrency: int = 1,
) -> int:
    """Run ``work`` over ``items`` in order until ``need`` successes; return the successes.

    At most ``concurrency`` items are in flight, and never more than could still be needed, so
    the successes are exactly the first ``need`` successful items, whatever the thread timing.
    ``on_result`` is called in item order, from this thread only (safe for file appends).
    """
    need = float("inf") if need is None else need
    successes = 0
    if need <= 0:
        return 0
    it = iter(items)
    if concurrency <= 1:
        for item in it:
            result = work(item)
            on_result(item, result)
            successes += bool(is_success(result))
            if successes >= need:
                break
        return successes
    pending: deque = deque()
    pool = ThreadPoolExecutor(max_workers=concurrency)
    try:
        exhausted = False
        while True:
            while not exhausted and len(pending) < concurrency and successes + len(pending) < need:
                try:
                    item = next(it)
                except StopIteration:
                    exhausted = True
                    break
                pending.append((item, pool.submit(work, item)))
            if not pending:
                break
            item, future = pending.popleft()
            result = future.result()
            on_result(item, result)
            successes += bool(is_success(result))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return successes


def guarded(fn: Callable[[], Task]) -> Task | TaskDropped:
    """Run one task; a drop (or an unexpected error) becomes a ``TaskDropped`` value, not a crash."""
    try:
        return fn()
    except TaskDropped as exc:
        return exc
    except WriterError as exc:
        return TaskDropped(exc.reason, exc.detail)
    except LookupError as exc:
        return TaskDropped("page_not_found", str(exc))
    except Exception as exc:  # a bug must not end a long run; it is counted and shown in metrics
        return TaskDropped(f"internal_error:{type(exc).__name__}", str(exc))


def make_writer(config: InjectConfig, source: KnowledgeSource, index: FactIndex | None) -> Writer:
    if config.writer == "rule":
        from vsearcher_lite.synthesis.writer import RuleWriter

        if index is None:
            raise InputError("the rule writer needs a structured world (the sandbox); use --writer llm for the live world")
        return RuleWriter(source, index)
    if config.writer == "llm":
        from vsearcher_lite.chat import make_chat
        from vsearcher_lite.synthesis.llm_writer import LLMWriter

        chat = config.chat if config.chat is not None else make_chat_from_env()
        return LLMWriter(make_chat(chat), max_attempts=config.max_attempts)
    raise InputError(f"unknown writer {config.writer!r}: use 'rule' or 'llm'")


def make_chat_from_env():
    import os

    spec = os.environ.get("VSEARCHER_CHAT_MODEL")
    if not spec:
        raise InputError(
            "the LLM writer needs a chat backend: pass --chat openai:<model>@<base_url> "
            "(or set VSEARCHER_CHAT_MODEL and VSEARCHER_CHAT_BASE_URL)"
        )
    base = os.environ.get("VSEARCHER_CHAT_BASE_URL", "")
    return f"openai:{spec}@{base}" if base else f"openai:{spec}"


def index_for(source: KnowledgeSource) -> FactIndex | None:
    """A fact index for sources that can list their entities (the sandbox), else ``None``."""
    if not (hasattr(source, "entity_ids") or hasattr(source, "all_entities")):
        return None
    cached = getattr(source, "_synthesis_index", None)
    if cached is None:
        cached = FactIndex.from_source(source)
        try:
            source._synthesis_index = cached  # one index per opened world
        except AttributeError:
            pass
    return cached


def _progress(total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, disable=not enabled, leave=False)


def drop_record(tid: str, item: dict, dropped: TaskDropped, stage: str) -> dict:
    return {
        "id": tid,
        "stage": stage,
        "reason": dropped.reason,
        "detail": dropped.detail[:300],
        "round": dropped.round,
        **{k: item[k] for k in ("seed_id", "split", "difficulty") if k in item},
    }


def run_inject_text(
    run_dir: str | Path,
    config: InjectConfig | None = None,
    *,
    source: KnowledgeSource | None = None,
    writer: Writer | None = None,
    world: str = "sandbox",
    seed_config: SeedConfig | None = None,
) -> dict:
    """Text injection for every pool of the run's seeds; resumable; returns (and writes) metrics."""
    from vsearcher_lite.synthesis.sources import open_source

    config = config or InjectConfig()
    rd = RunDir(run_dir)
    if source is None:
        source = open_source(run_dir, world, seed=config.seed)
    seeds = ensure_seeds(run_dir, seed_config or SeedConfig(seed=config.seed), source=source)
    index = index_for(source)
    writer = writer or make_writer(config, source, index)
    synth = Synthesizer(source, writer, index=index, max_picks=config.max_picks)
    out = rd.stage("inject-text")
    tasks_log = JsonlLog(out / "tasks.jsonl")
    failed_log = JsonlLog(out / "failed.jsonl")
    start = time.perf_counter()
    built_now = 0

    by_pool: dict[str, list[dict]] = {}
    for rec in seeds:
        by_pool.setdefault(rec["pool"], []).append(rec)
    heldout_levels = _heldout_levels(by_pool.get("heldout", []), config.mix)
    warmup = (warmup_pools(source, seeds, seed=config.seed, heldout_share=config.onehop_warmup_heldout_share)
              if config.uses_warmup() else {})

    exam_extra = []
    if config.exam_people and any(split == "exam" and wanted > 0 for split, _, wanted, _ in config.targets()):
        # the rarity bound the run's seeds were selected with
        seeds_metrics = Path(run_dir) / "seeds" / "metrics.json"
        sitelinks_max = rd.read_metrics("seeds").get("sitelinks_max") if seeds_metrics.exists() else None
        if not isinstance(sitelinks_max, int):
            sitelinks_max = (seed_config or SeedConfig(seed=config.seed)).thresholds(source)[0]
        exam_extra = exam_people(source, sitelinks_max, seed=config.seed)

    existing = Counter()
    for rec in tasks_log.records():
        existing[(rec.get("split"), rec.get("difficulty"))] += 1

    for split, difficulty, wanted, n_rounds in config.targets():
        if difficulty == ONEHOP:  # every seed of the split's pools and the warm-up entities, shuffled
            pool = (interleave_pools([by_pool.get(p, []) for p in DIFFICULTY_ROUNDS]) if split == "train"
                    else list(by_pool.get("heldout", [])))
            if config.onehop_warmup:
                pool += warmup.get(split, [])
            # A capped evaluation takes the first tasks of a level: they must be a fair sample of both
            # kinds (the tiny SFT model answers 0 of 26 seed one-hop tasks and 44 of 399 warm-up ones).
            random.Random(f"vsearcher-onehop:{config.seed}:{split}").shuffle(pool)
        elif split == "train":
            pool = by_pool.get(difficulty, [])
        elif split == "heldout":
            pool = heldout_levels.get(difficulty, [])
        else:  # the exam seeds first, then (sandbox) the rare people
            pool = by_pool.get("exam", []) + exam_extra
        if split != "exam" and any(config.warmup_levels.get(difficulty, (0, 0))):
            # the level's seeds and the split's warm-up entities, shuffled together (as for one-hop)
            pool = pool + warmup.get(split, [])
            random.Random(f"vsearcher-warmup-level:{config.seed}:{split}:{difficulty}").shuffle(pool)
        need = wanted - existing[(split, difficulty)]
        todo = [r for r in pool if task_id(split, difficulty, r["id"]) not in tasks_log
                and task_id(split, difficulty, r["id"]) not in failed_log]
        if need <= 0 or not todo:
            continue
        bar = _progress(need, f"inject-text {split}/{difficulty}", config.progress)

        def work(rec, split=split, difficulty=difficulty, n_rounds=n_rounds):
            tid = task_id(split, difficulty, rec["id"])
            rng = task_rng(config.seed, "text", tid)
            return guarded(lambda: synth.text_task(seed_from_record(rec), split, difficulty, n_rounds, rng))

        def on_result(rec, result, split=split, difficulty=difficulty, bar=bar):
            nonlocal built_now
            if isinstance(result, Task):
                tasks_log.append(task_record(result))
                built_now += 1
                bar.update(1)
            else:
                tid = task_id(split, difficulty, rec["id"])
                failed_log.append(drop_record(tid, {"seed_id": rec["id"], "split": split, "difficulty": difficulty}, result, "text"))

        try:
            process_in_order(todo, work, need=need, is_success=lambda r: isinstance(r, Task),
                             on_result=on_result, concurrency=config.concurrency)
        finally:
            bar.close()
    elapsed = time.perf_counter() - start
    metrics = text_metrics(tasks_log.records(), failed_log.records(), config)
    metrics.update(
        world=getattr(source, "name", world),
        writer=writer.name,
        seconds=round(elapsed, 3),
        built_this_run=built_now,
        tasks_per_s=round(built_now / elapsed, 2) if elapsed > 0 and built_now else 0.0,
    )
    if hasattr(writer, "stats"):
        metrics["writer_stats"] = writer.stats
    if hasattr(getattr(writer, "chat", None), "usage"):
        metrics["chat_usage"] = dict(writer.chat.usage)
    rd.write_metrics("inject-text", metrics)
    return metrics


def warmup_pools(source: KnowledgeSource, seeds: list[dict], *, seed: int = 0,
                 heldout_share: float = WARMUP_HELDOUT_SHARE) -> dict[str, list[dict]]:
    """The one-hop level's warm-up entities, ``{"train": [...], "heldout": [...]}`` (sandbox only).

    The paper's seeds must be rare and well documented; a one-hop warm-up task only needs an
    entity with a picture that is not a person. So the level also draws on every such entity that
    is not a seed (the default 2,000-entity world has 341 seeds and 1,073 more), dealt at random
    (fixed by ``seed``) to the training or the held-out split, so a held-out one-hop task never
    shows an entity a training one-hop task showed. Seeds stay in their own pools, so the exam's
    seeds are never used. Records look like ``seeds.jsonl`` rows, with pool ``warmup-<split>``.
    """
    if getattr(source, "name", "") != "sandbox":
        return {"train": [], "heldout": []}
    if not 0.0 <= heldout_share <= 1.0:
        raise ValueError(f"onehop_warmup_heldout_share must be within [0, 1], got {heldout_share}")
    taken = {rec["id"] for rec in seeds}
    extra = [e for e in source.seeds(10**9, 0, require_image=True, exclude_people=True) if e.id not in taken]
    random.Random(f"vsearcher-warmup:{seed}").shuffle(extra)
    n_heldout = int(round(len(extra) * heldout_share))
    return {split: [{**asdict(e), "pool": f"warmup-{split}"} for e in part]
            for split, part in (("heldout", extra[:n_heldout]), ("train", extra[n_heldout:]))}


def exam_people(source: KnowledgeSource, sitelinks_max: int, *, seed: int = 0) -> list[dict]:
    """More exam seeds: the world's rare people (at most ``sitelinks_max`` sitelinks), shuffled (sandbox only).

    Seeds exclude people, and so do the warm-up entities, so no training or held-out task starts
    at a person: a person's chain is as disjoint from training as an exam seed's (paper 2.4). An
    exam question's image shows an entity the question still names after its ten rounds, never the
    seed (round 1 hides it), so these seeds need no picture. The default 2,000-entity world has 51
    exam seeds and 296 such people.
    Records look like ``seeds.jsonl`` rows, with pool ``exam-people``.
    """
    if getattr(source, "name", "") != "sandbox":
        return []
    people = [e for e in source.seeds(sitelinks_max, 0, require_image=False, exclude_people=False)
              if source.entity(e.id).is_person]
    random.Random(f"vsearcher-exam-people:{seed}").shuffle(people)
    return [{**asdict(e), "pool": "exam-people"} for e in people]


def _heldout_levels(records: list[dict], mix: dict[str, int]) -> dict[str, list[dict]]:
    """Held-out seeds dealt to the difficulty levels in the training mix."""
    from vsearcher_lite.synthesis.seeds import interleave

    labels = interleave(split_counts(len(records), mix))
    out: dict[str, list[dict]] = {k: [] for k in mix}
    for rec, label in zip(records, labels):
        out[label].append(rec)
    return out


LEVELS = LEVEL_ORDER


def interleave_pools(pools: list[list[dict]]) -> list[dict]:
    """Round-robin over several seed lists, so the first n seeds draw from every list.

    >>> [r["id"] for r in interleave_pools([[{"id": "a"}, {"id": "b"}], [{"id": "c"}]])]
    ['a', 'c', 'b']
    """
    out: list[dict] = []
    for i in range(max((len(p) for p in pools), default=0)):
        out.extend(p[i] for p in pools if i < len(p))
    return out


def mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 2) if values else 0.0


def question_length_stats(tasks: list[dict]) -> dict:
    """Mean question words per difficulty and per round (round 0 = the initial question)."""
    per_level = {lvl: mean([word_count(t["question"]) for t in tasks if t.get("difficulty") == lvl]) for lvl in LEVELS}
    by_round: dict[int, list[int]] = {}
    for t in tasks:
        by_round.setdefault(0, []).append(word_count(t.get("initial_question") or t["question"]))
        for r in t.get("rounds", []):
            by_round.setdefault(int(r["round"]), []).append(word_count(r["question_after"]))
    return {
        "mean_question_words": per_level,
        "mean_question_words_by_round": {str(k): mean(v) for k, v in sorted(by_round.items())},
    }


def invariance_stats(tasks: list[dict], failed: list[dict]) -> dict:
    """Share of checked tasks whose answer still follows from the chain (dropped ones included)."""
    ok = sum(1 for t in tasks if t.get("extra", {}).get("answer_invariant") is True)
    broken = sum(1 for f in failed if f.get("reason") == "answer_not_invariant")
    checked = ok + broken + sum(1 for t in tasks if t.get("extra", {}).get("answer_invariant") is False)
    return {
        "answer_invariance_rate": round(ok / checked, 4) if checked else None,
        "n_invariance_checked": checked,
        "n_unchecked": sum(1 for t in tasks if t.get("extra", {}).get("answer_invariant") is None),
    }


def text_metrics(tasks: list[dict], failed: list[dict], config: InjectConfig) -> dict:
    by_level = Counter(t.get("difficulty") for t in tasks)
    by_split = Counter(t.get("split") for t in tasks)
    wanted = {f"{s}/{d}": n for s, d, n, _ in config.targets()}
    have = Counter(f"{t.get('split')}/{t.get('difficulty')}" for t in tasks)
    return {
        "n_tasks": len(tasks),
        "n_tasks_by_difficulty": {lvl: by_level.get(lvl, 0) for lvl in LEVELS},
        "n_tasks_by_split": {s: by_split.get(s, 0) for s in ("train", "heldout", "exam")},
        "n_failed": len(failed),
        "failed_reasons": dict(sorted(Counter(f.get("reason", "?") for f in failed).items())),
        "targets": wanted,
        "shortfall": {k: max(0, n - have.get(k, 0)) for k, n in wanted.items() if n - have.get(k, 0) > 0},
        "rounds": {**config.rounds, "exam": config.exam_rounds},
        "mean_rounds": {lvl: mean([len(t.get("rounds", [])) for t in tasks if t.get("difficulty") == lvl]) for lvl in LEVELS},
        **invariance_stats(tasks, failed),
        **question_length_stats(tasks),
    }


def read_tasks(path: Path, hint: str) -> list[Task]:
    """Tasks from a stage's JSONL (``RUN_DIR/<stage>/tasks.jsonl``, its paths resolved in that run);
    ``InputError`` names the file and line of a bad record."""
    from vsearcher_lite.runio import read_jsonl

    if not path.exists():
        raise InputError(f"{path} does not exist: run `{hint}` first")
    run = RunDir(path.parent.parent)
    out = []
    for number, rec in enumerate(read_jsonl(path), start=1):
        try:
            out.append(Task.from_dict(run.resolve(rec)))
        except (KeyError, TypeError) as exc:
            raise InputError(f"{path}:{number}: not a task record ({exc})") from None
    return out


def ensure_text_tasks(run_dir: str | Path, config: InjectConfig | None = None, **kw) -> list[Task]:
    path = Path(run_dir) / "inject-text" / "tasks.jsonl"
    if not (Path(run_dir) / "inject-text" / "metrics.json").exists():
        run_inject_text(run_dir, config, **kw)
    return read_tasks(path, f"vsearcher-lite inject-text --run-dir {run_dir}")


def run_inject_image(
    run_dir: str | Path,
    config: InjectConfig | None = None,
    *,
    source: KnowledgeSource | None = None,
    writer: Writer | None = None,
    world: str = "sandbox",
) -> dict:
    """Image injection for every text task of the run; resumable; returns (and writes) metrics."""
    from vsearcher_lite.synthesis.sources import open_source

    config = config or InjectConfig()
    rd = RunDir(run_dir)
    if source is None:
        source = open_source(run_dir, world, seed=config.seed)
    text_tasks = ensure_text_tasks(run_dir, config, source=source, writer=writer, world=world)
    index = index_for(source)
    writer = writer or make_writer(config, source, index)
    synth = Synthesizer(source, writer, index=index, max_picks=config.max_picks)
    out = rd.stage("inject-image")
    image_dir = out / "images"
    tasks_log = JsonlLog(out / "tasks.jsonl")
    failed_log = JsonlLog(out / "failed.jsonl")
    todo = [t for t in text_tasks if t.id not in tasks_log and t.id not in failed_log]
    start = time.perf_counter()
    built_now = 0
    bar = _progress(len(todo), "inject-image", config.progress)

    def work(task: Task):
        return guarded(lambda: synth.image_task(task, task_rng(config.seed, "image", task.id), image_dir))

    def on_result(task: Task, result):
        nonlocal built_now
        bar.update(1)
        if isinstance(result, Task):
            tasks_log.append(rd.relative(task_record(result)))
            built_now += 1
        else:
            where = {"seed_id": task.seed_id, "split": task.split, "difficulty": task.difficulty}
            failed_log.append(rd.relative(drop_record(task.id, where, result, "image")))

    try:
        process_in_order(todo, work, need=None, is_success=lambda r: isinstance(r, Task),
                         on_result=on_result, concurrency=config.concurrency)
    finally:
        bar.close()
    elapsed = time.perf_counter() - start
    tasks = tasks_log.records()
    failed = failed_log.records()
    by_level = Counter(t.get("difficulty") for t in tasks)
    metrics = {
        "world": getattr(source, "name", world),
        "writer": writer.name,
        "n_input_tasks": len(text_tasks),
        "n_tasks": len(tasks),
        "n_tasks_by_difficulty": {lvl: by_level.get(lvl, 0) for lvl in LEVELS},
        "n_failed": len(failed),
        "failed_reasons": dict(sorted(Counter(f.get("reason", "?") for f in failed).items())),
        "image_entity_types": dict(sorted(Counter((t.get("image") or {}).get("entity_type", "") for t in tasks).items())),
        **invariance_stats(tasks, failed),
        **question_length_stats(tasks),
        "seconds": round(elapsed, 3),
        "built_this_run": built_now,
        "tasks_per_s": round(built_now / elapsed, 2) if elapsed > 0 and built_now else 0.0,
    }
    if hasattr(writer, "stats"):
        metrics["writer_stats"] = writer.stats
    rd.write_metrics("inject-image", metrics)
    return metrics


def ensure_image_tasks(run_dir: str | Path, config: InjectConfig | None = None, **kw) -> list[Task]:
    path = Path(run_dir) / "inject-image" / "tasks.jsonl"
    if not (Path(run_dir) / "inject-image" / "metrics.json").exists():
        run_inject_image(run_dir, config, **kw)
    return read_tasks(path, f"vsearcher-lite inject-image --run-dir {run_dir}")
