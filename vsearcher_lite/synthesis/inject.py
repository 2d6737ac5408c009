"""Stages `inject-text` and `inject-image`: iterative injection (paper sections 2.1, 2.4, A.2).

Text injection: an initial QA about the seed, then N rounds (easy / medium / hard 1 / 3 / 5,
exam 10), each replacing a named entity by a description built from one fact on its page.
Image injection then hides the entity most critical to the answer behind a perturbed copy of
its picture (``synthesizer.Synthesizer``). In the sandbox the finished question is re-solved
through its chain, and a task whose answer no longer follows is dropped and counted.

Both stages are resumable (``tasks.jsonl`` and ``failed.jsonl``, keyed by task id
``<split>-<difficulty>-<seed id>``) and their output does not depend on the number of threads
(``runner``).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vsearcher_lite.agent.task import (
    DIFFICULTY_ROUNDS,
    EXAM_ROUNDS,
    LEVEL_ORDER,
    ONEHOP,
    Task,
    read_tasks,
)
from vsearcher_lite.options import option
from vsearcher_lite.profiles import load_profile
from vsearcher_lite.runio import InputError, JsonlLog, RunDir, mean
from vsearcher_lite.runtime import end_progress, progress_bar
from vsearcher_lite.synthesis.describe import FactIndex
from vsearcher_lite.synthesis.runner import drop_record, guarded, process_in_order
from vsearcher_lite.synthesis.seeds import (
    DEFAULT_MIX,
    SeedConfig,
    ensure_seeds,
    interleave,
    parse_mix,
    seed_from_record,
    split_counts,
)
from vsearcher_lite.synthesis.synthesizer import Synthesizer, task_id, task_record, task_rng
from vsearcher_lite.synthesis.text import word_count
from vsearcher_lite.synthesis.writer import Writer
from vsearcher_lite.world.model import KnowledgeSource

#: Share of the warm-up entities (``warmup_pools``) that go to the held-out split.
WARMUP_HELDOUT_SHARE = 0.5
#: The options of ``inject-text``, ``inject-image`` and ``filter``, by field.
CLI_OPTIONS = ("n_train", "n_heldout", "n_exam", "mix", "exam_rounds", "onehop_train",
               "onehop_heldout", "onehop_warmup", "exam_people", "warmup_levels", "writer", "chat",
               "concurrency", "max_attempts")


def parse_warmup_levels(text: str) -> dict[str, tuple[int, int]]:
    """Parse ``--warmup-levels``: ``LEVEL:TRAIN:HELDOUT,...`` or ``none``.

    >>> parse_warmup_levels("easy:600:200,medium:300:100"), parse_warmup_levels("none")
    ({'easy': (600, 200), 'medium': (300, 100)}, {})
    """
    if text.strip().lower() in ("none", ""):
        return {}
    out: dict[str, tuple[int, int]] = {}
    for part in text.split(","):
        level, *counts = part.strip().split(":")
        if len(counts) != 2 or level not in DIFFICULTY_ROUNDS or not all(map(str.isdigit, counts)):
            raise InputError(f"--warmup-levels: {part.strip()!r} is not LEVEL:TRAIN:HELDOUT with "
                             f"LEVEL one of {', '.join(DIFFICULTY_ROUNDS)} and two counts "
                             "(e.g. easy:600:200)")
        out[level] = (int(counts[0]), int(counts[1]))
    return out


@dataclass
class InjectConfig:
    """Settings of the injection stages (text and image)."""

    n_train: int = option(100, "training tasks, split by --mix (default: by profile; cpu 100)")
    n_heldout: int = option(30, "held-out tasks (default: by profile; cpu 30)")
    n_exam: int = option(30, "exam tasks (default: 283, the paper's; the sandbox starts them at "
                         "the exam seeds, then at rare people)", "--n-exam", "--exam-size")
    mix: dict[str, int] = option(DEFAULT_MIX, "easy:medium:hard ratio (default: 4:3:3, paper's "
                                 "RL mix)", parse=parse_mix)
    rounds: dict[str, int] = field(default_factory=lambda: dict(DIFFICULTY_ROUNDS))
    exam_rounds: int = option(EXAM_ROUNDS, "injection rounds of exam tasks (default: 10, paper "
                              "2.4)")
    # one-hop warm-up tasks (no text round)
    onehop_train: int = option(0, "one-hop warm-up training tasks, not in the paper (default: by "
                               "profile; cpu at most 2000, GPU profiles 0)")
    onehop_heldout: int = option(0, "one-hop warm-up held-out tasks (default: by profile; cpu at "
                                 "most 2000, GPU profiles 0)")
    onehop_warmup: bool = option(False, "draw one-hop tasks from the seeds only, not also from "
                                 "the other pictured entities (the cpu default draws on both; "
                                 "half of those others are held out)", "--onehop-seeds-only",
                                 action="store_const", const=False)
    onehop_warmup_heldout_share: float = WARMUP_HELDOUT_SHARE
    warmup_levels: dict[str, tuple[int, int]] = option(
        {}, "more tasks of a level from the other pictured entities too, e.g. "
        "easy:480:320,medium:450:340,hard:450:345 (the cpu default); 'none': seeds only (GPU "
        "default)",
        metavar="LEVEL:TRAIN:HELDOUT,...", parse=parse_warmup_levels)
    exam_people: bool = option(True, "start exam tasks at the exam seeds only, not also at the "
                               "world's rare people", "--exam-seeds-only", action="store_const",
                               const=False)
    writer: str = option("rule", "question writer (default: rule in the sandbox, llm live)",
                         choices=("rule", "llm"))
    chat: Any = option(None, "chat backend of the LLM writer, e.g. openai:<model>@<base_url>")
    concurrency: int = option(1, "tasks in flight (default: 1 for rule, 8 for llm)")
    max_attempts: int = option(3, "LLM replies per writer operation (default: 3)")
    max_picks: int = 4  # entities tried per round before the task is dropped
    seed: int = 0
    progress: bool = True

    @classmethod
    def for_profile(cls, profile: str = "cpu", **overrides) -> "InjectConfig":
        """The profile's ``[inject]`` table (``vsearcher_lite/profiles/``) with ``overrides``."""
        preset = load_profile(profile).get("inject", {})
        preset["warmup_levels"] = {k: tuple(v) for k, v in preset.get("warmup_levels", {}).items()}
        return cls(**{**preset, **overrides})

    def uses_warmup(self) -> bool:
        """Whether any level draws on the warm-up entities (``warmup_pools``)."""
        return (self.onehop_warmup and bool(self.onehop_train or self.onehop_heldout)) or any(
            n for pair in self.warmup_levels.values() for n in pair)

    def targets(self) -> list[tuple[str, str, int, int]]:
        """(split, difficulty, tasks wanted, rounds) for every job of the stage."""
        jobs = []
        unknown = sorted(set(self.warmup_levels) - set(self.rounds))
        if unknown:
            known = ", ".join(self.rounds)
            raise ValueError(f"warmup_levels names unknown level(s) {unknown}; known: {known}")
        sizes = (("train", self.n_train), ("heldout", self.n_heldout))
        for index, (split, total) in enumerate(sizes):
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


def make_writer(config: InjectConfig, source: KnowledgeSource, index: FactIndex | None) -> Writer:
    if config.writer == "rule":
        from vsearcher_lite.synthesis.writer import RuleWriter

        if index is None:
            raise InputError("the rule writer needs a structured world (the sandbox); "
                             "use --writer llm for the live world")
        return RuleWriter(source, index)
    if config.writer == "llm":
        from vsearcher_lite.backends.chat import make_chat
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
    stage = TextInjection(synth, config, JsonlLog(out / "tasks.jsonl"),
                          JsonlLog(out / "failed.jsonl"))
    start = time.perf_counter()
    pools = seed_pools(rd, source, seeds, config, seed_config)
    existing = Counter((rec.get("split"), rec.get("difficulty"))
                       for rec in stage.tasks_log.records())
    built_now = 0
    for split, difficulty, wanted, n_rounds in config.targets():
        pool = pools.pool(split, difficulty, config)
        need = wanted - existing[(split, difficulty)]
        built_now += stage.inject_level(split, difficulty, n_rounds, pool, need)
    throughput = _throughput(start, built_now, writer)  # the stage's work, not its metrics
    metrics = text_metrics(stage.tasks_log.records(), stage.failed_log.records(), config)
    metrics.update(world=getattr(source, "name", world), writer=writer.name, **throughput)
    if hasattr(getattr(writer, "chat", None), "usage"):
        metrics["chat_usage"] = dict(writer.chat.usage)
    rd.write_metrics("inject-text", metrics)
    return metrics


@dataclass
class SeedPools:
    """The seeds text injection draws its tasks from, by where they came from."""

    by_pool: dict[str, list[dict]]  # the seeds stage's pools (a level, "heldout", "exam")
    heldout_levels: dict[str, list[dict]]  # the held-out seeds dealt to the levels of the mix
    warmup: dict[str, list[dict]]  # warm-up entities by split (``warmup_pools``), or none
    exam_extra: list[dict]  # (sandbox) the rare people tried after the exam seeds

    def pool(self, split: str, difficulty: str, config: InjectConfig) -> list[dict]:
        """The seeds of one split and level, in the order they are tried."""
        if difficulty == ONEHOP:  # the split's seeds and warm-up entities, shuffled
            pool = (interleave_pools([self.by_pool.get(p, []) for p in DIFFICULTY_ROUNDS])
                    if split == "train" else list(self.by_pool.get("heldout", [])))
            if config.onehop_warmup:
                pool += self.warmup.get(split, [])
            # a capped evaluation takes a level's first tasks: a fair sample of both kinds
            random.Random(f"vsearcher-onehop:{config.seed}:{split}").shuffle(pool)
        elif split == "train":
            pool = self.by_pool.get(difficulty, [])
        elif split == "heldout":
            pool = self.heldout_levels.get(difficulty, [])
        else:  # the exam seeds first, then (sandbox) the rare people
            pool = self.by_pool.get("exam", []) + self.exam_extra
        if split != "exam" and any(config.warmup_levels.get(difficulty, (0, 0))):
            pool = pool + self.warmup.get(split, [])
            shuffle_key = f"vsearcher-warmup-level:{config.seed}:{split}:{difficulty}"
            random.Random(shuffle_key).shuffle(pool)
        return pool


def seed_pools(rd: RunDir, source: KnowledgeSource, seeds: list[dict], config: InjectConfig,
               seed_config: SeedConfig | None) -> SeedPools:
    """The run's seeds by pool, with the warm-up entities and the exam's extra people."""
    by_pool: dict[str, list[dict]] = {}
    for rec in seeds:
        by_pool.setdefault(rec["pool"], []).append(rec)
    heldout_levels = _heldout_levels(by_pool.get("heldout", []), config.mix)
    share = config.onehop_warmup_heldout_share
    warmup = (warmup_pools(source, seeds, seed=config.seed, heldout_share=share)
              if config.uses_warmup() else {})
    return SeedPools(by_pool, heldout_levels, warmup,
                     _exam_extra(rd, source, config, seed_config))


def _exam_extra(rd: RunDir, source: KnowledgeSource, config: InjectConfig,
                seed_config: SeedConfig | None) -> list[dict]:
    """The rare people (``exam_people``) when exam tasks are wanted and the config takes them."""
    wants_exam = any(split == "exam" and n > 0 for split, _, n, _ in config.targets())
    if not (config.exam_people and wants_exam):
        return []
    # the rarity bound the run's seeds were selected with
    seeds_metrics = rd.root / "seeds" / "metrics.json"
    sitelinks_max = (rd.read_metrics("seeds").get("sitelinks_max")
                     if seeds_metrics.exists() else None)
    if not isinstance(sitelinks_max, int):
        sitelinks_max = (seed_config or SeedConfig(seed=config.seed)).thresholds(source)[0]
    return exam_people(source, sitelinks_max, seed=config.seed)


@dataclass
class TextInjection:
    """What building the text tasks of each split and level shares: the synthesizer, the
    settings and the stage's two logs."""

    synth: Synthesizer
    config: InjectConfig
    tasks_log: JsonlLog
    failed_log: JsonlLog

    def inject_level(self, split: str, difficulty: str, n_rounds: int, pool: list[dict],
                     need: int) -> int:
        """Build up to ``need`` tasks of one split and level from the seeds of ``pool`` not yet
        tried, in pool order (``process_in_order``); returns how many were built."""
        ids = [(r, task_id(split, difficulty, r["id"])) for r in pool]
        todo = [r for r, tid in ids if tid not in self.tasks_log and tid not in self.failed_log]
        if need <= 0 or not todo:
            return 0
        bar = progress_bar(f"inject-text {split}/{difficulty}", need, enabled=self.config.progress)

        def work(rec):
            rng = task_rng(self.config.seed, "text", task_id(split, difficulty, rec["id"]))
            seed = seed_from_record(rec)
            return guarded(lambda: self.synth.text_task(seed, split, difficulty, n_rounds, rng))

        def on_result(rec, result):
            if isinstance(result, Task):
                self.tasks_log.append(task_record(result))
                bar.update(1)
            else:
                tid = task_id(split, difficulty, rec["id"])
                item = {"seed_id": rec["id"], "split": split, "difficulty": difficulty}
                self.failed_log.append(drop_record(tid, item, result, "text"))

        try:
            built = process_in_order(todo, work, need=need,
                                     is_success=lambda r: isinstance(r, Task),
                                     on_result=on_result, concurrency=self.config.concurrency)
        except BaseException:
            bar.close()  # left where the failure stopped it
            raise
        end_progress(bar, "no seeds left to try")
        return built


def _throughput(start: float, built_now: int, writer: Writer) -> dict:
    elapsed = time.perf_counter() - start
    out = {"seconds": round(elapsed, 3), "built_this_run": built_now,
           "tasks_per_s": round(built_now / elapsed, 2) if elapsed > 0 and built_now else 0.0}
    if hasattr(writer, "stats"):
        out["writer_stats"] = writer.stats
    return out


def warmup_pools(source: KnowledgeSource, seeds: list[dict], *, seed: int = 0,
                 heldout_share: float = WARMUP_HELDOUT_SHARE) -> dict[str, list[dict]]:
    """Warm-up entities, ``{"train": [...], "heldout": [...]}`` (sandbox only), as seed rows with
    pool ``warmup-<split>``.

    A one-hop task needs only a pictured non-person, not a rare, documented seed: every such
    non-seed entity is dealt to one split, so held-out and training tasks never share one.
    """
    if getattr(source, "name", "") != "sandbox":
        return {"train": [], "heldout": []}
    if not 0.0 <= heldout_share <= 1.0:
        raise ValueError(f"onehop_warmup_heldout_share must be within [0, 1], got {heldout_share}")
    taken = {rec["id"] for rec in seeds}
    candidates = source.seeds(10**9, 0, require_image=True, exclude_people=True)
    extra = [e for e in candidates if e.id not in taken]
    random.Random(f"vsearcher-warmup:{seed}").shuffle(extra)
    n_heldout = int(round(len(extra) * heldout_share))
    return {split: [{**asdict(e), "pool": f"warmup-{split}"} for e in part]
            for split, part in (("heldout", extra[:n_heldout]), ("train", extra[n_heldout:]))}


def exam_people(source: KnowledgeSource, sitelinks_max: int, *, seed: int = 0) -> list[dict]:
    """More exam seeds (sandbox only): the world's rare people, shuffled, pool ``exam-people``.

    No other task starts at a person, so their chains are as disjoint from training as an exam
    seed's (paper 2.4); the exam image never shows the seed, so no picture is needed.
    """
    if getattr(source, "name", "") != "sandbox":
        return []
    people = [e for e in source.seeds(sitelinks_max, 0, require_image=False, exclude_people=False)
              if source.entity(e.id).is_person]
    random.Random(f"vsearcher-exam-people:{seed}").shuffle(people)
    return [{**asdict(e), "pool": "exam-people"} for e in people]


def _heldout_levels(records: list[dict], mix: dict[str, int]) -> dict[str, list[dict]]:
    """Held-out seeds dealt to the difficulty levels in the training mix."""
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


def mean_or_zero(values: list[float]) -> float:
    return mean(values, 2) or 0.0


def question_length_stats(tasks: list[dict]) -> dict:
    """Mean question words per difficulty and per round (round 0 = the initial question)."""
    words = {lvl: [word_count(t["question"]) for t in tasks if t.get("difficulty") == lvl]
             for lvl in LEVELS}
    by_round: dict[int, list[int]] = {}
    for t in tasks:
        by_round.setdefault(0, []).append(word_count(t.get("initial_question") or t["question"]))
        for r in t.get("rounds", []):
            by_round.setdefault(int(r["round"]), []).append(word_count(r["question_after"]))
    return {
        "mean_question_words": {lvl: mean_or_zero(v) for lvl, v in words.items()},
        "mean_question_words_by_round": {str(k): mean_or_zero(v)
                                         for k, v in sorted(by_round.items())},
    }


def invariance_stats(tasks: list[dict], failed: list[dict]) -> dict:
    """Share of checked tasks whose answer still follows from the chain (dropped ones included)."""
    marks = [t.get("extra", {}).get("answer_invariant") for t in tasks]
    ok = sum(1 for m in marks if m is True)
    broken = sum(1 for m in marks if m is False)
    broken += sum(1 for f in failed if f.get("reason") == "answer_not_invariant")
    return {"answer_invariance_rate": round(ok / (ok + broken), 4) if ok + broken else None,
            "n_invariance_checked": ok + broken, "n_unchecked": sum(1 for m in marks if m is None)}


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
        "shortfall": {k: n - have.get(k, 0) for k, n in wanted.items() if n - have.get(k, 0) > 0},
        "rounds": {**config.rounds, "exam": config.exam_rounds},
        "mean_rounds": {lvl: mean_or_zero([len(t.get("rounds", [])) for t in tasks
                                   if t.get("difficulty") == lvl]) for lvl in LEVELS},
        **invariance_stats(tasks, failed),
        **question_length_stats(tasks),
    }


def _ensure_tasks(stage: str, run, run_dir: str | Path, config, kw: dict) -> list[Task]:
    """The stage's tasks, running it first when it has no metrics yet."""
    if not (Path(run_dir) / stage / "metrics.json").exists():
        run(run_dir, config, **kw)
    return read_tasks(Path(run_dir) / stage / "tasks.jsonl",
                      f"vsearcher-lite {stage} --run-dir {run_dir}")


def ensure_text_tasks(run_dir: str | Path, config: InjectConfig | None = None, **kw) -> list[Task]:
    return _ensure_tasks("inject-text", run_inject_text, run_dir, config, kw)


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
    bar = progress_bar("inject-image", len(todo), enabled=config.progress)

    def work(task: Task):
        rng = task_rng(config.seed, "image", task.id)
        return guarded(lambda: synth.image_task(task, rng, image_dir))

    def on_result(task: Task, result):
        bar.update(1)
        if isinstance(result, Task):
            tasks_log.append(rd.relative(task_record(result)))
        else:
            item = {"seed_id": task.seed_id, "split": task.split, "difficulty": task.difficulty}
            failed_log.append(rd.relative(drop_record(task.id, item, result, "image")))

    try:
        built_now = process_in_order(todo, work, need=None,
                                     is_success=lambda r: isinstance(r, Task),
                                     on_result=on_result, concurrency=config.concurrency)
    finally:
        bar.close()
    throughput = _throughput(start, built_now, writer)
    metrics = {"world": getattr(source, "name", world), "writer": writer.name,
               **image_metrics(tasks_log.records(), failed_log.records(), len(text_tasks)),
               **throughput}
    rd.write_metrics("inject-image", metrics)
    return metrics


def image_metrics(tasks: list[dict], failed: list[dict], n_input: int) -> dict:
    """The counts of the image stage's metrics: tasks by level, drops by reason, pictured types."""
    by_level = Counter(t.get("difficulty") for t in tasks)
    image_types = Counter((t.get("image") or {}).get("entity_type", "") for t in tasks)
    return {
        "n_input_tasks": n_input,
        "n_tasks": len(tasks),
        "n_tasks_by_difficulty": {lvl: by_level.get(lvl, 0) for lvl in LEVELS},
        "n_failed": len(failed),
        "failed_reasons": dict(sorted(Counter(f.get("reason", "?") for f in failed).items())),
        "image_entity_types": dict(sorted(image_types.items())),
        **invariance_stats(tasks, failed),
        **question_length_stats(tasks),
    }


def ensure_image_tasks(run_dir: str | Path, config: InjectConfig | None = None, **kw) -> list[Task]:
    return _ensure_tasks("inject-image", run_inject_image, run_dir, config, kw)
