"""Stage `filter`: the paper's four filters, the kept task files and the exam (paper 2.1, 2.4, A.2).

Each filter labels a task ``True`` when it *removes* it (the released code's convention):
``answer_in_question``, ``image_too_simple``, ``can_be_directly_answered`` and
``can_be_directly_answered_with_text``. Each has an offline (sandbox) version and an LLM/VLM
version for live runs, whose answers the judge role grades. A filter that reaches no verdict
marks the task unverified, and unverified tasks are not kept.

Outputs in ``RUN_DIR/filter/``: ``labeled.jsonl`` (every task with its labels; resumable),
``train.jsonl`` and ``train_<level>.jsonl``, ``heldout.jsonl``, ``exam.jsonl`` (the
MM-SearchExam counterpart), ``rl_tasks.jsonl`` (the RL pool, on seeds SFT never sees:
``split_rl_pool``), ``validation.jsonl`` (on seeds neither SFT nor the RL pool sees: where the
SFT model's Pass@k is measured, a bound on what RL can reach), ``funnel.csv`` and ``metrics.json``.
"""

from __future__ import annotations

import abc
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vsearcher_lite.agent.task import DIFFICULTY_ROUNDS, LEVEL_ORDER, ONEHOP, Task
from vsearcher_lite.chat import ChatBackend, ChatError, roles_usage
from vsearcher_lite.options import option
from vsearcher_lite.runio import InputError, JsonlLog, RunDir, atomic_write_text, write_jsonl
from vsearcher_lite.runtime import progress_bar
from vsearcher_lite.synthesis.chain import is_checkable, solve_chain
from vsearcher_lite.synthesis.describe import FactIndex
from vsearcher_lite.synthesis.seeds import rows_to_csv
from vsearcher_lite.synthesis.text import clean_line_reply, fold, mentions_answer, read_prompts

FILTER_ORDER = (
    "answer_in_question",
    "image_too_simple",
    "can_be_directly_answered",
    "can_be_directly_answered_with_text",
)
LEVELS = LEVEL_ORDER


@dataclass
class FilterLabel:
    removes: bool | None  # None: no verdict could be reached (the task is not kept)
    detail: Any = ""


class TaskFilter(abc.ABC):
    name: str = "filter"

    @abc.abstractmethod
    def label(self, task: Task) -> FilterLabel: ...


# ---------------------------------------------------------------------------------------------
# 1. answer leak


class AnswerInQuestion(TaskFilter):
    """The answer (or an alias) written in the question, compared the way the judge compares."""

    name = "answer_in_question"

    def label(self, task: Task) -> FilterLabel:
        leaked = mentions_answer(task.question, task.answer, task.aliases)
        return FilterLabel(leaked, "answer found in the question" if leaked else "")


# ---------------------------------------------------------------------------------------------
# 2. image too simple


@dataclass
class ComplexityThresholds:
    """An image is too simple when its colours carry little information: low colour entropy
    (calibrated on perturbed sandbox pictures; docs/results.md) or a handful of colours."""

    max_entropy: float = 3.0  # bits of colour entropy (16 levels per channel)
    max_colours: int = 8  # distinct colours


def image_measures(path: str | Path) -> dict:
    """Colour count, colour entropy and edge density of an image file."""
    from PIL import Image

    from vsearcher_lite.world.images import image_complexity

    with Image.open(path) as img:
        return image_complexity(img)


def is_simple(measures: dict, t: ComplexityThresholds) -> bool:
    """Too simple = low colour entropy, or hardly any colours.

    >>> is_simple({"colours": 3, "entropy": 1.2, "edge_density": 0.02}, ComplexityThresholds())
    True
    >>> is_simple({"colours": 400, "entropy": 6.5, "edge_density": 0.2}, ComplexityThresholds())
    False
    """
    return bool(measures["entropy"] <= t.max_entropy or measures["colours"] <= t.max_colours)


class ImageComplexity(TaskFilter):
    name = "image_too_simple"

    def __init__(self, thresholds: ComplexityThresholds | None = None):
        self.thresholds = thresholds or ComplexityThresholds()

    def label(self, task: Task) -> FilterLabel:
        if not task.image_path:
            return FilterLabel(True, "no question image")
        if not Path(task.image_path).is_file():
            return FilterLabel(None, f"question image {task.image_path} not found")
        m = image_measures(task.image_path)
        return FilterLabel(is_simple(m, self.thresholds), {k: round(v, 4) for k, v in m.items()})


# ---------------------------------------------------------------------------------------------
# 3. direct answer (offline: a one-step retrieval shortcut)


class RetrievalShortcut(TaskFilter):
    """Offline stand-in for "a weaker VLM answers directly": one search gives the answer away
    (the question as a text query finds the seed's page at rank 1 or shows the answer in the
    top snippet, or the question image's top image hit is the seed's own page)."""

    name = "can_be_directly_answered"

    def __init__(self, text_search, image_search=None, *, seed_url):
        self.text_search = text_search
        self.image_search = image_search
        self.seed_url = seed_url  # seed id -> URL of its page

    def label(self, task: Task) -> FilterLabel:
        target = self.seed_url(task.seed_id)
        hits = self.text_search.search(task.question, 1)
        if hits:
            top = hits[0]
            if top.url == target:
                return FilterLabel(True, f"text search: top hit is the seed page {top.url}")
            if mentions_answer(f"{top.title} {top.snippet}", task.answer, task.aliases):
                return FilterLabel(True, f"text search: the top hit shows the answer ({top.url})")
        if self.image_search is not None and task.image_path and task.difficulty != ONEHOP:
            # (a one-hop warm-up task is one image hop by design: the image search is its only step)
            from vsearcher_lite.world.model import ImageRef

            ihits = self.image_search.search(ImageRef(task.image_path), 1)
            if ihits and ihits[0].url == target:
                return FilterLabel(True, f"image search: top hit is the seed page {ihits[0].url}")
        return FilterLabel(False, "")


# ---------------------------------------------------------------------------------------------
# 4. text-only answer (offline: the chain solved with the image withheld)


class TextOnlyChain(TaskFilter):
    """Offline text-only answerer: the chain solved with the image entity unknown. Removes a
    task (paper 2.1, filter 2) when this gives exactly one answer *and* no step had more
    candidates than one page of search results: an unbounded solver would "answer" questions
    needing dozens of searches per step."""

    name = "can_be_directly_answered_with_text"

    def __init__(self, index: FactIndex, max_candidates: int = 5):
        self.index = index
        self.max_candidates = max_candidates

    def label(self, task: Task) -> FilterLabel:
        if not is_checkable(task) or task.image is None:
            return FilterLabel(None, "the task has no structured chain to solve")
        solution = solve_chain(task, self.index, image_known=False)
        widths = [len(solution.candidates.get(r.entity_id, ())) for r in task.rounds]
        widest = max(widths, default=1)
        unique = solution.answers == {fold(task.answer)}
        removes = unique and widest <= self.max_candidates
        why = f"{len(solution.answers)} possible answers, widest step {widest} candidates"
        return FilterLabel(removes, why)


# ---------------------------------------------------------------------------------------------
# LLM / VLM filters (live runs)

#: The LLM filters' prompts (package data: a prompt's lines are its own).
PROMPTS = read_prompts(Path(__file__).with_name("filter_prompts.txt"))
DIRECT_ANSWER_PROMPT = PROMPTS["DIRECT_ANSWER_PROMPT"]
IMAGE_SIMPLE_PROMPT = PROMPTS["IMAGE_SIMPLE_PROMPT"]


def image_part(path: str) -> dict:
    return {"type": "image", "image": path}


class DirectAnswerLLM(TaskFilter):
    """A weaker (V)LM answers at once; the judge decides whether it got it right."""

    def __init__(self, chat: ChatBackend, judge, *, with_image: bool, max_attempts: int = 2):
        self.chat = chat
        self.judge = judge
        self.with_image = with_image
        self.max_attempts = max_attempts
        self.name = "can_be_directly_answered" + ("" if with_image else "_with_text")

    def label(self, task: Task) -> FilterLabel:
        note = " and the image" if self.with_image else ""
        text = DIRECT_ANSWER_PROMPT.format(question=task.question, image_note=note)
        content: Any = text
        if self.with_image:
            if not task.image_path:
                return FilterLabel(None, "no question image")
            content = [{"type": "text", "text": text}, image_part(task.image_path)]
        messages = [{"role": "user", "content": content}]
        last = "no attempt made"
        for _ in range(self.max_attempts):
            try:
                reply = self.chat.chat(messages, temperature=0.0, max_tokens=64)
            except ChatError as exc:
                last = str(exc)
                continue
            prediction = clean_line_reply(reply)
            verdict = self.judge.judge(task.question, task.answer, prediction, aliases=task.aliases)
            return FilterLabel(bool(verdict.correct),
                               {"prediction": prediction, "judge": verdict.reason})
        return FilterLabel(None, f"chat failed: {last}")


def parse_yes_no(reply: str) -> bool | None:
    """``True`` for a yes, ``False`` for a no, ``None`` otherwise; case, punctuation, bold ignored
    (the released filter required exactly ``yes``).

    >>> parse_yes_no("**Yes**, it is a flag."), parse_yes_no("no."), parse_yes_no("maybe")
    (True, False, None)
    """
    words = fold(clean_line_reply(reply or "")).split()
    return {"yes": True, "no": False}.get(words[0]) if words else None


class ImageJudgeVLM(TaskFilter):
    name = "image_too_simple"

    def __init__(self, chat: ChatBackend, *, max_attempts: int = 2):
        self.chat = chat
        self.max_attempts = max_attempts

    def label(self, task: Task) -> FilterLabel:
        if not task.image_path:
            return FilterLabel(True, "no question image")
        messages = [{"role": "user",
                     "content": [{"type": "text", "text": IMAGE_SIMPLE_PROMPT},
                                 image_part(task.image_path)]}]
        last = ""
        for _ in range(self.max_attempts):
            try:
                reply = self.chat.chat(messages, temperature=0.0, max_tokens=8)
            except ChatError as exc:
                last = f"chat failed: {exc}"
                continue
            verdict = parse_yes_no(reply)
            if verdict is not None:
                return FilterLabel(verdict, reply.strip()[:80])
            last = f"unreadable reply {reply.strip()[:80]!r}"
        return FilterLabel(None, last)


# ---------------------------------------------------------------------------------------------
# Running the stage


#: The options of ``filter``, by field (dests ``filter_<field>``).
#: The validation split takes at most this share of the training seeds left after the RL pool.
VALIDATION_MAX_SHARE = 0.15
CLI_OPTIONS = ("mode", "chat", "vlm", "judge", "short_circuit", "rl_tasks", "rl_max_share",
               "validation_tasks")


@dataclass
class FilterConfig:
    """Settings of the filter stage; ``vlm`` defaults to ``chat``; the RL pool follows paper A.4
    (1K RL tasks)."""

    mode: str = option("offline", "offline filters (sandbox default) or LLM/VLM filters (live "
                       "default)", "--filter-mode", choices=("offline", "llm"))
    chat: Any = option(None, "text LLM for the text-only direct-answer filter", "--filter-chat")
    vlm: Any = option(None, "VLM for the direct-answer and image filters", "--filter-vlm")
    judge: Any = option("match", "judge of direct answers: match or llm:<chat spec> (default: "
                        "match)")
    thresholds: ComplexityThresholds = field(default_factory=ComplexityThresholds)
    short_circuit: bool = option(False, "skip later filters once one removes a task",
                                 action="store_const", const=True)  # saves LLM calls
    rl_tasks: int = option(1000, "RL task pool (rl_tasks.jsonl): at most this many tasks, on "
                           "seeds SFT never sees (default: 1000; 0: none)")
    rl_max_share: float = option(1 / 3, "the RL pool takes at most this share of the training "
                                 "seeds (default: 1/3)")
    validation_tasks: int = option(200, "validation tasks (validation.jsonl), on training seeds "
                                   "that neither SFT nor the RL pool uses, at most "
                                   "VALIDATION_MAX_SHARE of them (default: 200; 0: none)")
    seed: int = 0
    progress: bool = True

    def __post_init__(self) -> None:
        if self.rl_tasks < 0:
            raise InputError(f"rl_tasks (--rl-tasks) must not be negative, got {self.rl_tasks}")
        if self.validation_tasks < 0:
            raise InputError("validation_tasks (--validation-tasks) must not be negative, got "
                             f"{self.validation_tasks}")
        if not 0 <= self.rl_max_share < 1:
            raise InputError("rl_max_share (--rl-max-share) must be in [0, 1), "
                             f"got {self.rl_max_share}")


def offline_filters(source, index: FactIndex, backends: dict,
                    thresholds: ComplexityThresholds) -> list[TaskFilter]:
    def seed_url(seed_id: str) -> str:
        return source.page(seed_id).url

    return [
        AnswerInQuestion(),
        ImageComplexity(thresholds),
        RetrievalShortcut(backends["text"], backends.get("image"), seed_url=seed_url),
        TextOnlyChain(index),
    ]


def llm_filters(config: FilterConfig) -> list[TaskFilter]:
    from vsearcher_lite.agent.judge import make_judge
    from vsearcher_lite.backends.chat import make_chat

    if config.chat is None and config.vlm is None:
        raise InputError("LLM filters need a chat backend: pass --filter-chat "
                         "(and --filter-vlm for the image filters)")
    llm = make_chat(config.chat if config.chat is not None else config.vlm)
    vlm = make_chat(config.vlm) if config.vlm is not None else llm
    judge = make_judge(config.judge)
    return [
        AnswerInQuestion(),
        ImageJudgeVLM(vlm),
        DirectAnswerLLM(vlm, judge, with_image=True),
        DirectAnswerLLM(llm, judge, with_image=False),
    ]


def label_task(task: Task, filters: list[TaskFilter], short_circuit: bool = False) -> Task:
    """Run the filters on one task; ``task.filters`` holds name -> removes (None: no verdict)."""
    task = Task.from_dict(task.to_dict())
    details = {}
    for f in filters:
        if short_circuit and any(v for v in task.filters.values()):
            continue
        try:
            lab = f.label(task)
        except Exception as exc:  # a failure marks the task unverified, not the run ended
            lab = FilterLabel(None, f"{type(exc).__name__}: {exc}")
        task.filters[f.name] = lab.removes
        if lab.detail:
            details[f.name] = lab.detail
    task.extra["filter_details"] = details
    return task


def is_kept(task: dict) -> bool:
    labels = task.get("filters", {})
    return bool(labels) and all(labels.get(n) is False for n in FILTER_ORDER if n in labels)


def first_removal(task: dict) -> str | None:
    """The first filter in ``FILTER_ORDER`` removing the task, ``"unverified"`` or ``None``."""
    labels = task.get("filters", {})
    first = next((name for name in FILTER_ORDER if labels.get(name) is True), None)
    if first is None and any(name in labels and labels[name] is None for name in FILTER_ORDER):
        return "unverified"
    return first


def funnel_rows(tasks: list[dict]) -> list[dict]:
    """Tasks left after each filter in order, per difficulty: the data of the funnel figure."""
    rows = []
    for level in LEVELS:
        group = [t for t in tasks if t.get("difficulty") == level]
        left = len(group)
        rows.append({"difficulty": level, "stage": "synthesized", "remaining": left})
        removed = Counter(first_removal(t) for t in group)
        for name in FILTER_ORDER:
            left -= removed.get(name, 0)
            rows.append({"difficulty": level, "stage": name, "remaining": left})
        left -= removed.get("unverified", 0)
        rows.append({"difficulty": level, "stage": "kept", "remaining": left})
    return rows


def run_filter(
    run_dir: str | Path,
    config: FilterConfig | None = None,
    *,
    source=None,
    filters: list[TaskFilter] | None = None,
    world: str = "sandbox",
    inject_config=None,
) -> dict:
    """Label every image task, write the kept files and the exam; resumable; returns metrics."""
    from vsearcher_lite.synthesis.inject import ensure_image_tasks, index_for
    from vsearcher_lite.synthesis.sources import open_sandbox, open_source
    from vsearcher_lite.tools.sandbox import sandbox_backends

    config = config or FilterConfig()
    rd = RunDir(run_dir)
    if source is None:
        source = open_source(run_dir, world, seed=config.seed)
    tasks = ensure_image_tasks(run_dir, inject_config, source=source, world=world)
    if filters is None:
        if config.mode == "llm":
            filters = llm_filters(config)
        else:
            index = index_for(source)
            if index is None:
                raise InputError("offline filters need the sandbox world; use --filter-mode llm "
                                 "with chat backends for live runs")
            world_obj = getattr(source, "world", None)  # SandboxKnowledge keeps its SandboxWorld
            backends = sandbox_backends(world_obj if world_obj is not None
                                        else open_sandbox(run_dir))
            filters = offline_filters(source, index, backends, config.thresholds)
    out = rd.stage("filter")
    log = JsonlLog(out / "labeled.jsonl")
    todo = [t for t in tasks if t.id not in log]
    start = time.perf_counter()
    for task in progress_bar("filter", items=todo, enabled=config.progress):
        log.append(rd.relative(label_task(task, filters, config.short_circuit).to_dict()))
    elapsed = time.perf_counter() - start

    wanted = {t.id for t in tasks}
    labeled = [r for r in log.records() if r["id"] in wanted]
    kept = [r for r in labeled if is_kept(r)]
    by_split = {s: [r for r in kept if r.get("split") == s] for s in ("train", "heldout", "exam")}
    by_split["train"], rl_pool = split_rl_pool(by_split["train"], n_tasks=config.rl_tasks,
                                               max_share=config.rl_max_share, seed=config.seed)
    by_split["train"], validation = split_rl_pool(
        by_split["train"], n_tasks=config.validation_tasks, max_share=VALIDATION_MAX_SHARE,
        seed=config.seed, purpose="validation")
    write_jsonl(out / "rl_tasks.jsonl", rl_pool)
    write_jsonl(out / "validation.jsonl", validation)
    write_jsonl(out / "train.jsonl", by_split["train"])
    for level in (ONEHOP, *DIFFICULTY_ROUNDS):
        write_jsonl(out / f"train_{level}.jsonl",
                    [r for r in by_split["train"] if r.get("difficulty") == level])
    write_jsonl(out / "heldout.jsonl", by_split["heldout"])
    write_jsonl(out / "exam.jsonl", by_split["exam"])
    atomic_write_text(out / "funnel.csv", rows_to_csv(funnel_rows(labeled)))

    metrics = filter_metrics(labeled, kept)
    metrics["n_kept_by_split"].update(train=len(by_split["train"]), rl=len(rl_pool),
                                      validation=len(validation))
    metrics["validation"] = dict(Counter(t.get("difficulty") for t in validation))
    metrics["rl_pool"] = rl_pool_metrics(rl_pool, by_split, validation)
    metrics.update(
        mode=config.mode,
        filters=[f.name for f in filters],
        seconds=round(elapsed, 3),
        labeled_this_run=len(todo),
    )
    roles = {f.name: f for f in filters}
    roles.update({f"{f.name}.judge": f.judge for f in filters
                  if getattr(f, "judge", None) is not None})
    usage = roles_usage(roles)
    if usage:
        metrics["chat_usage"] = usage
    rd.write_metrics("filter", metrics)
    return metrics


def split_rl_pool(train: list[dict], *, n_tasks: int, max_share: float, seed: int = 0,
                  purpose: str = "rl-pool") -> tuple[list[dict], list[dict]]:
    """``(SFT training tasks, RL pool)``, both in file order: the RL pool takes every task of
    randomly drawn training seeds until it holds ``n_tasks`` tasks or ``max_share`` of the seeds.
    ``purpose`` names the draw, so that the validation split draws its own seeds the same way.

    Taking whole seeds keeps the pool disjoint from SFT's tasks, so GRPO does not train on tasks
    the SFT model has memorised.

    >>> train = [{"id": f"t{i}", "seed_id": f"E{i % 4}"} for i in range(8)]  # 4 seeds, 2 tasks each
    >>> sft, rl = split_rl_pool(train, n_tasks=100, max_share=0.5)
    >>> len(sft), len(rl), {t["seed_id"] for t in sft} & {t["seed_id"] for t in rl}
    (4, 4, set())
    """
    per_seed = Counter(t["seed_id"] for t in train)
    order = sorted(per_seed)
    random.Random(f"vsearcher-{purpose}:{seed}").shuffle(order)
    chosen: set[str] = set()
    total = 0
    for seed_id in order[: int(len(order) * max_share)]:
        if total >= n_tasks:
            break
        chosen.add(seed_id)
        total += per_seed[seed_id]
    return ([t for t in train if t["seed_id"] not in chosen],
            [t for t in train if t["seed_id"] in chosen])


def rl_pool_metrics(pool: list[dict], by_split: dict[str, list[dict]],
                    validation: list[dict] = ()) -> dict:
    """Size and mix of the RL pool, and what it shares with the other files (seeds: 0 by design);
    its share of the training seeds counts the validation split's seeds among them."""
    seeds = {t["seed_id"] for t in pool}
    sft_seeds = {t["seed_id"] for t in by_split["train"]}
    validation_seeds = {t["seed_id"] for t in validation}
    sft_images = {(t.get("image") or {}).get("entity_id") for t in by_split["train"]} - {None}
    by_level = Counter(t.get("difficulty") for t in pool)
    pictured = [(t.get("image") or {}).get("entity_id") for t in pool]
    return {
        "n_tasks": len(pool),
        "n_by_difficulty": {lvl: by_level.get(lvl, 0) for lvl in LEVELS if by_level.get(lvl, 0)},
        "n_seeds": len(seeds),
        "share_of_training_seeds": round(
            len(seeds) / max(1, len(seeds | sft_seeds | validation_seeds)), 4),
        "seed_overlap": {s: len(seeds & {t["seed_id"] for t in by_split[s]})
                         for s in ("train", "heldout", "exam")},
        # like a held-out task, a pool task may picture an entity an SFT task is about or pictures
        "image_entity_in_sft_tasks": sum(1 for e in pictured if e in sft_seeds | sft_images),
    }


def filter_metrics(labeled: list[dict], kept: list[dict]) -> dict:
    flagged = {name: sum(1 for t in labeled if t.get("filters", {}).get(name) is True)
               for name in FILTER_ORDER}
    removed = Counter(first_removal(t) for t in labeled)
    per_level = {}
    for level in LEVELS:
        group = [t for t in labeled if t.get("difficulty") == level]
        r = Counter(first_removal(t) for t in group)
        per_level[level] = {"n_input": len(group),
                            **{name: r.get(name, 0) for name in FILTER_ORDER},
                            "unverified": r.get("unverified", 0),
                            "n_kept": sum(1 for t in kept if t.get("difficulty") == level)}
    train_seeds = {t["seed_id"] for t in labeled if t.get("split") in ("train", "heldout")}
    exam_seeds = {t["seed_id"] for t in labeled if t.get("split") == "exam"}
    return {
        "n_input": len(labeled),
        "n_kept": len(kept),
        "n_kept_by_split": {s: sum(1 for t in kept if t.get("split") == s)
                            for s in ("train", "heldout", "exam")},
        "n_kept_by_difficulty": {lvl: sum(1 for t in kept if t.get("difficulty") == lvl)
                                 for lvl in LEVELS},
        # by the first filter that fires
        "removed": {name: removed.get(name, 0) for name in FILTER_ORDER},
        "flagged": flagged,  # each filter on its own
        "unverified": removed.get("unverified", 0),
        "by_difficulty": per_level,
        "kept_with_answer_in_question": sum(
            1 for t in kept if mentions_answer(t["question"], t["answer"], t.get("aliases", []))),
        "exam_seed_overlap_with_training": len(exam_seeds & train_seeds),
        "n_exam": sum(1 for t in kept if t.get("split") == "exam"),
    }
