"""Pretraining the tiny base: tokenizer, model, packed copy-dense text, probes, model card.

``pretrain(config) -> metrics`` is the whole stage; ``vsearcher-lite pretrain`` and the notebook
call it. It has two stages of copy-dense documents:

- **Stage A** builds the copy circuit: rows of 512 tokens x 6 (copying must work at the positions of a search-result list, not only in the first 256), lr 3e-3 with warmup and a
  cosine decay. The loss on the *repeat* half of the repeat documents shows the induction phase
  transition (a sudden drop, logged as ``loss_repeat``).
- **Stage B** teaches reading at the lengths the agent will see: long rows (1,024 tokens x 3),
  lr 1e-3, more lookup / page-reading / pick documents, half of them with an "Answer: X" restate.

``--recipe continue`` (``continue_stages``) continues a trained checkpoint with one stage A of
512 x 8 rows at lr 2e-3, heavier on lookup and page reading; the shipped base's last run is this
recipe. ``probe_checkpoint`` (``--probe-only``) re-runs the probes on a saved checkpoint and
rewrites its metrics and card, keeping the training records.

Both stages stop at whichever comes first, their step cap or their wall-clock cap. The full run
is sized by steps (1,800 + 500) with generous clock
caps, so it is deterministic in ``seed`` and does not train less when other jobs share the CPU
(measured: a clock-capped run lost a third of its steps to a neighbour's job). ``--minutes``
caps it by the clock instead. The learning rate follows warmup + cosine over the stage's
progress, the larger of the step fraction and the time fraction, so a run cut by the clock still
ends annealed; the model card records which cap stopped each stage.

CPU settings: fp32 (bf16 autocast is slower on a CPU), a fixed number of torch threads, batched
greedy generation for the probes.

Deviation from the paper: the paper starts from Qwen3-VL-8B. The cpu profile cannot download a
checkpoint, so it pretrains a 5M-parameter model of the same architecture on sandbox text;
the vision tower is left at its random initialisation (no image captions in this corpus), which
the card states.
"""

from __future__ import annotations

import csv
import json
import math
import platform
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from vsearcher_lite.model.corpus import (
    CORPUS_WORLD_SEEDS,
    DEFAULT_MIX,
    DEFAULT_WORLD_ENTITIES,
    DEFAULT_WORLD_SEED,
    ROLE_IDS,
    STAGE_B_MIX,
    Corpus,
    Doc,
    doc_kv,
    doc_lookup,
    doc_page,
    doc_pageqa,
    doc_pick,
    doc_repeat,
    doc_restate,
    probe_world,
)
from vsearcher_lite.model.tokenizer import DEFAULT_VOCAB_SIZE, DOC_SEPARATOR, PAD_TOKEN, build_tokenizer, token_id
from vsearcher_lite.runio import atomic_write_json, atomic_write_text, csv_text
from vsearcher_lite.runtime import resolve_device, set_threads

CARD_NAME = "MODEL_CARD.md"
COPY_TARGET = 0.9  # the copy target: accuracy on the lookup probe
LOG_NAME = "train_log.csv"
METRICS_NAME = "metrics.json"
LOG_FIELDS = ("stage", "step", "seconds", "lr", "loss", "loss_repeat", "loss_recall", "loss_answer", "tokens",
              "pad_share")


@dataclass
class StageConfig:
    """One pretraining stage: its caps, its learning-rate schedule, its rows and its mix."""

    name: str
    max_steps: int
    minutes: float
    lr: float
    warmup_steps: int
    seq_len: int
    batch_size: int
    mix: dict[str, float]
    min_lr_ratio: float = 0.1


def default_stages() -> list[StageConfig]:
    """Stage A (copy circuit) and stage B (reading at agent lengths), the full run's settings."""
    return [
        StageConfig("A", max_steps=1800, minutes=45.0, lr=3e-3, warmup_steps=80, seq_len=512, batch_size=6,
                    mix=dict(DEFAULT_MIX)),
        StageConfig("B", max_steps=500, minutes=15.0, lr=1e-3, warmup_steps=20, seq_len=1024, batch_size=3,
                    mix=dict(STAGE_B_MIX)),
    ]


def continue_stages() -> list[StageConfig]:
    """One stage A that continues a trained checkpoint (``--recipe continue``; the shipped base's last run).

    Rows of 512 x 8 at a lower peak lr (2e-3) than a run from scratch, and more lookup (3.0) and
    page-reading (1.5) documents: the copy circuit exists already, choosing *what* to copy does not.
    Capped at 2,400 steps or 30 minutes, whichever comes first.
    """
    mix = dict(DEFAULT_MIX)
    mix.update(lookup=3.0, pageqa=1.5)
    return [StageConfig("A", max_steps=2400, minutes=30.0, lr=2e-3, warmup_steps=50, seq_len=512, batch_size=8,
                        mix=mix)]


def fresh_stages() -> list[StageConfig]:
    """One stage that continues a trained checkpoint on documents whose names are drawn afresh
    (``--recipe fresh``; the shipped base's last runs).

    Why fresh names: the corpus comes from 20 fixed worlds, and after hours of training the model
    had memorised their names; it copied them far better than names it had never seen (the same
    probes on a training world and on the evaluation world; docs/results.md). With a new name in
    every document, every copy is a real one (the model card's history shows the probes rising
    run by run). Copy targets weigh twice in the loss (``copy_weight``); rows of
    1,024 tokens, so copying is practised at the positions of a whole agent episode; lr 1e-3;
    ``restate`` documents (a question asked again with the name of what it described), the reading
    behind every argument of the cpu profile's compact teacher. Capped at 40 minutes.
    """
    mix = dict(DEFAULT_MIX)
    mix.update(lookup=3.0, pageqa=1.5, restate=2.0)
    return [StageConfig("A", max_steps=100_000, minutes=40.0, lr=1e-3, warmup_steps=30, seq_len=1024, batch_size=4,
                        mix=mix)]


RECIPES: dict[str, Callable[[], list[StageConfig]]] = {"full": default_stages, "continue": continue_stages,
                                                        "fresh": fresh_stages}
#: Recipes that continue a checkpoint (``init_from`` required; the agent probe is left to ``--probe-only``).
CONTINUING_RECIPES = ("continue", "fresh")


@dataclass
class ProbeConfig:
    n_per_kind: int = 150  # documents per probe kind
    batch_size: int = 32
    agent_tasks: int = 20  # sandbox tasks for the base model's agent probe (0: skip it)
    agent_run_dir: str | None = None  # where the sandbox world and tasks live (built if missing)


@dataclass
class PretrainConfig:
    """Everything ``pretrain`` needs. ``full()`` is the shipped run; ``smoke()`` is CI's."""

    out_dir: str = "runs/default/pretrain"
    seed: int = 0
    world_seeds: tuple[int, ...] = CORPUS_WORLD_SEEDS
    world_entities: int = 600
    eval_world_seed: int = DEFAULT_WORLD_SEED
    eval_world_entities: int = DEFAULT_WORLD_ENTITIES
    vocab_size: int = DEFAULT_VOCAB_SIZE
    tokenizer_docs: int = 4000
    stages: list[StageConfig] = field(default_factory=default_stages)
    max_minutes: float | None = None  # a cap on all stages together (scales each stage's minutes)
    max_steps: int | None = None  # a cap on all stages together (scales each stage's steps)
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    threads: int | None = 2
    device: str = "auto"  # auto (the GPU when there is one) | cpu | cuda
    log_every: int = 50
    restate_share: float = 0.5
    fresh_names: bool = False  # every document's names drawn afresh (corpus.refresh_names)
    copy_weight: float = 1.0  # loss weight of copy targets (repeat, recall, answer tokens); 1 = plain LM loss
    text: dict = field(default_factory=dict)  # overrides of tiny.TEXT_CONFIG
    vision: dict = field(default_factory=dict)  # overrides of tiny.VISION_CONFIG
    probes: ProbeConfig = field(default_factory=ProbeConfig)
    init_from: str | None = None  # continue training this checkpoint (its tokenizer and weights)
    command: str = ""  # the command line that ran it (for the card)
    progress: bool = True

    @classmethod
    def smoke(cls, out_dir: str, **overrides: Any) -> "PretrainConfig":
        """A seconds-long run on two small worlds: keeps the command working in CI."""
        stages = [
            StageConfig("A", max_steps=4, minutes=1.0, lr=3e-3, warmup_steps=1, seq_len=128, batch_size=4,
                        mix=dict(DEFAULT_MIX)),
            StageConfig("B", max_steps=2, minutes=1.0, lr=1e-3, warmup_steps=1, seq_len=256, batch_size=2,
                        mix=dict(STAGE_B_MIX)),
        ]
        preset = dict(out_dir=out_dir, world_seeds=(101, 102), world_entities=120, vocab_size=512,
                      tokenizer_docs=300, stages=stages, log_every=1, eval_world_entities=300,
                      probes=ProbeConfig(n_per_kind=4, batch_size=8, agent_tasks=0), progress=False)
        preset.update(overrides)
        return cls(**preset)

    @classmethod
    def for_recipe(cls, recipe: str, out_dir: str, init_from: str | None = None, **overrides: Any) -> "PretrainConfig":
        """The config of a named recipe: ``full`` trains from scratch (``default_stages``) unless
        ``init_from`` is given; ``continue`` continues ``init_from`` with ``continue_stages``; ``fresh``
        continues it with ``fresh_stages`` on fresh-name documents (the shipped base's last runs). The
        continuing recipes skip the agent probe (``--probe-only`` measures it afterwards)."""
        if recipe not in RECIPES:
            raise ValueError(f"unknown pretraining recipe {recipe!r} (known: {', '.join(RECIPES)})")
        if recipe in CONTINUING_RECIPES and not init_from:
            raise ValueError(f"the {recipe} recipe continues a checkpoint: it needs init_from")
        preset: dict[str, Any] = dict(out_dir=out_dir, init_from=init_from, stages=RECIPES[recipe]())
        if recipe in CONTINUING_RECIPES:
            preset["probes"] = ProbeConfig(n_per_kind=150, batch_size=32, agent_tasks=0)
        if recipe == "fresh":
            preset.update(fresh_names=True, copy_weight=2.0)
        preset.update(overrides)
        return cls(**preset)

    def scaled_stages(self) -> list[StageConfig]:
        """The stages with the global caps shared out in proportion to each stage's own caps."""
        stages = [StageConfig(**asdict(s)) for s in self.stages]
        if self.max_minutes is not None:
            total = sum(s.minutes for s in stages)
            for s in stages:
                s.minutes = self.max_minutes * s.minutes / total
        if self.max_steps is not None:
            total = sum(s.max_steps for s in stages)
            for s in stages:
                s.max_steps = max(1, round(self.max_steps * s.max_steps / total))
                s.warmup_steps = min(s.warmup_steps, max(1, s.max_steps // 10))
        return stages

    def to_dict(self) -> dict:
        d = asdict(self)
        d["stages"] = [asdict(s) for s in self.scaled_stages()]
        return d


# ---------------------------------------------------------------------------------------------
# Pure helpers: schedule, packing, losses
# ---------------------------------------------------------------------------------------------


def lr_at(progress: float, step: int, base_lr: float, warmup_steps: int, min_ratio: float = 0.1) -> float:
    """Linear warmup over ``warmup_steps``, then cosine from ``base_lr`` to ``min_ratio * base_lr``
    as ``progress`` goes from 0 to 1.

    >>> lr_at(0.0, 0, 1.0, 10)
    0.1
    >>> round(lr_at(0.5, 100, 1.0, 10, 0.0), 6)
    0.5
    >>> lr_at(1.0, 100, 1.0, 10, 0.1)
    0.1
    """
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    p = min(max(progress, 0.0), 1.0)
    return base_lr * (min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * p)))


def encode_doc(tokenizer, doc: Doc) -> tuple[list[int], list[int]]:
    """Token ids of a document and each token's role id (segments tokenized one by one)."""
    ids: list[int] = []
    roles: list[int] = []
    for text, role in doc.segments:
        if not text:
            continue
        piece = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids.extend(piece)
        roles.extend([ROLE_IDS[role]] * len(piece))
    return ids, roles


class Packer:
    """Packs documents into rows of ``seq_len`` tokens, separated by ``<|endoftext|>``.

    Whole documents only (a copy document cut in half would teach nothing), except pages, which
    may be cut to fill the end of a row. A document longer than a row is skipped (counted).
    """

    def __init__(self, tokenizer, docs: Iterator[Doc]):
        self.tokenizer = tokenizer
        self.docs = docs
        self.sep = token_id(tokenizer, DOC_SEPARATOR)
        self.pad = token_id(tokenizer, PAD_TOKEN)
        self.pending: tuple[str, list[int], list[int]] | None = None
        self.skipped = 0

    def _next(self) -> tuple[str, list[int], list[int]]:
        if self.pending is not None:
            item, self.pending = self.pending, None
            return item
        doc = next(self.docs)
        ids, roles = encode_doc(self.tokenizer, doc)
        return doc.kind, ids + [self.sep], roles + [0]

    def row(self, seq_len: int) -> tuple[list[int], list[int], list[int]]:
        """``(ids, roles, mask)`` of one row; ``mask`` is 0 on padding."""
        ids: list[int] = []
        roles: list[int] = []
        while len(ids) < seq_len:
            kind, d_ids, d_roles = self._next()
            room = seq_len - len(ids)
            if len(d_ids) <= room:
                ids += d_ids
                roles += d_roles
            elif kind == "page" and (room >= 32 or not ids):
                ids += d_ids[:room]
                roles += d_roles[:room]
            elif kind == "page":  # too little room left: the page starts the next row
                self.pending = (kind, d_ids, d_roles)
                break
            elif len(d_ids) > seq_len:
                self.skipped += 1
            else:
                self.pending = (kind, d_ids, d_roles)
                break
        n = len(ids)
        return ids + [self.pad] * (seq_len - n), roles + [0] * (seq_len - n), [1] * n + [0] * (seq_len - n)

    def batch(self, batch_size: int, seq_len: int):
        import torch

        rows = [self.row(seq_len) for _ in range(batch_size)]
        ids = torch.tensor([r[0] for r in rows], dtype=torch.long)
        roles = torch.tensor([r[1] for r in rows], dtype=torch.long)
        mask = torch.tensor([r[2] for r in rows], dtype=torch.long)
        return ids, roles, mask


def token_losses(logits, ids, mask):
    """Per-position next-token losses ``[B, T-1]`` and the matching validity mask."""
    import torch.nn.functional as F

    targets = ids[:, 1:]
    valid = mask[:, 1:].bool()
    losses = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), targets.reshape(-1),
                             reduction="none").view_as(targets)
    return losses, valid


def weighted_mean(losses, valid, roles, copy_weight: float = 1.0):
    """The mean next-token loss over valid targets, copy targets (``roles`` > 0) weighted ``copy_weight``.

    >>> import torch
    >>> l, v, r = torch.tensor([[1.0, 3.0]]), torch.tensor([[True, True]]), torch.tensor([[0, 0, 1]])
    >>> float(weighted_mean(l, v, r)), float(weighted_mean(l, v, r, 3.0))
    (2.0, 2.5)
    """
    if copy_weight == 1.0:
        return losses[valid].mean()
    w = valid.float() * (1.0 + (copy_weight - 1.0) * (roles[:, 1:] > 0).float())
    return (losses * w).sum() / w.sum().clamp(min=1.0)


def role_means(losses, valid, roles) -> dict[str, float | None]:
    """Mean loss over all valid targets and over the targets of each copy role (None if absent)."""
    out: dict[str, float | None] = {"loss": float(losses[valid].mean()) if valid.any() else None}
    target_roles = roles[:, 1:]
    for name, rid in (("loss_repeat", ROLE_IDS["repeat"]), ("loss_recall", ROLE_IDS["recall"]),
                      ("loss_answer", ROLE_IDS["answer"])):
        sel = valid & (target_roles == rid)
        out[name] = float(losses[sel].mean()) if sel.any() else None
    return out


# ---------------------------------------------------------------------------------------------
# Probes
# ---------------------------------------------------------------------------------------------

def doc_lookup_far(world, rng: random.Random) -> Doc:
    """A lookup document after two pages of other text: the copy happens 600-1,200 tokens in, where
    an agent's later tool responses sit (an easy compact episode is about 1,000 tokens)."""
    pages = [doc_page(world, rng) for _ in range(2)]
    doc = doc_lookup(world, rng)
    return Doc("lookup", [(p.text, "") for p in pages] + doc.segments, dict(doc.meta, far=True))


PROBE_KINDS = {"lookup": doc_lookup, "recall": doc_kv, "repeat": doc_repeat, "pick": doc_pick,
               "page_reading": doc_pageqa, "lookup_far": doc_lookup_far, "restate": doc_restate}


PROBE_DOC_KIND = {"recall": "kv", "page_reading": "pageqa", "lookup_far": "lookup"}


def probe_documents(world, kind: str, n: int, seed: int) -> list[Doc]:
    """``n`` probe documents of ``kind`` from ``world`` (the evaluation world: names never trained on)."""
    rng = random.Random(f"vsearcher-probe:{seed}:{kind}")
    writer = PROBE_KINDS[kind]
    docs = []
    while len(docs) < n:
        doc = writer(world, rng)
        if kind in ("lookup", "lookup_far") and doc.meta.get("mode") != "fact":
            continue  # the lookup probe copies a fact from a result list
        if doc.kind == PROBE_DOC_KIND.get(kind, kind) and any(role for _, role in doc.segments):
            docs.append(doc)
    return docs


def generated_matches(generated: str, target: str) -> bool:
    """The generation reproduces ``target`` exactly and then stops (end of line or of text).

    >>> generated_matches("1874\\nAnswer", "1874"), generated_matches("18745", "1874"), generated_matches("187", "1874")
    (True, False, False)
    """
    if not generated.startswith(target):
        return False
    rest = generated[len(target):]
    return rest == "" or rest[0] in "\n"


def greedy_continuations(model, tokenizer, prompts: list[list[int]], max_new_tokens: list[int],
                         batch_size: int) -> list[str]:
    """Greedy continuations of token-id prompts, batched with left padding."""
    import torch

    pad = token_id(tokenizer, PAD_TOKEN)
    out: list[str] = [""] * len(prompts)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # similar lengths share a batch
    model.eval()
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            width = max(len(prompts[i]) for i in idx)
            ids = torch.tensor([[pad] * (width - len(prompts[i])) + prompts[i] for i in idx], device=model.device)
            mask = torch.tensor([[0] * (width - len(prompts[i])) + [1] * len(prompts[i]) for i in idx], device=model.device)
            new = max(max_new_tokens[i] for i in idx)
            gen = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, do_sample=False,
                                 pad_token_id=pad, eos_token_id=[pad])
            for row, i in enumerate(idx):
                out[i] = tokenizer.decode(gen[row, width:], skip_special_tokens=True)
    return out


def run_copy_probes(model, tokenizer, world, n_per_kind: int, batch_size: int, seed: int = 0) -> dict:
    """Exact-match accuracy of the first copy segment of probe documents, per kind, plus examples."""
    results: dict[str, Any] = {}
    for kind in PROBE_KINDS:
        docs = probe_documents(world, kind, n_per_kind, seed)
        prompts, targets, budgets = [], [], []
        for doc in docs:
            prompt_text_segments = []
            for text, role in doc.segments:
                if role:
                    targets.append(text)
                    break
                prompt_text_segments.append((text, role))
            ids, _ = encode_doc(tokenizer, Doc(doc.kind, prompt_text_segments))
            prompts.append(ids)
            budgets.append(len(tokenizer(targets[-1], add_special_tokens=False)["input_ids"]) + 2)
        generated = greedy_continuations(model, tokenizer, prompts, budgets, batch_size)
        correct = [generated_matches(g, t) for g, t in zip(generated, targets)]
        results[kind] = {
            "accuracy": round(sum(correct) / max(1, len(correct)), 4),
            "n": len(correct),
            "examples": [{"target": t, "generated": g.split("\n")[0][:120]} for g, t in
                         list(zip(generated, targets))[:3]],
        }
    return results


def run_agent_probe(model, processor, config: PretrainConfig) -> dict:
    """The base model as an agent on held-out sandbox tasks (expected near 0: it never saw the protocol).

    Uses the agent's own loop, toolbox and match judge through ``TransformersChat``. Returns
    ``{"measured": False, "reason": ...}`` when the tasks or the agent code are not available.
    """
    n = config.probes.agent_tasks
    if n <= 0:
        return {"measured": False, "reason": "skipped (probes.agent_tasks = 0)"}
    run_dir = Path(config.probes.agent_run_dir or Path(config.out_dir).parent / "pretrain-agent-probe")
    try:
        from vsearcher_lite.agent.judge import MatchJudge
        from vsearcher_lite.agent.loop import EpisodeLimits, Sampling, run_episode
        from vsearcher_lite.agent.trajectories import load_tasks
        from vsearcher_lite.chat_transformers import TransformersChat
        from vsearcher_lite.synthesis.filters import run_filter
        from vsearcher_lite.synthesis.inject import InjectConfig
        from vsearcher_lite.tools.factory import make_toolbox

        heldout = run_dir / "filter" / "heldout.jsonl"
        if not heldout.exists():
            run_filter(run_dir, world="sandbox",
                       inject_config=InjectConfig.for_profile("cpu", seed=config.eval_world_seed, progress=False))
        tasks = [t for t in load_tasks(heldout) if t.difficulty in ("easy", "medium")][:n]
        if not tasks:
            return {"measured": False, "reason": f"no easy/medium held-out tasks in {heldout}"}
        toolbox = make_toolbox(run_dir, world="sandbox", top_k=3, observations="compact")
        policy = TransformersChat(model, processor=processor, max_new_tokens=128)
        judge = MatchJudge()
        limits = EpisodeLimits(max_tool_calls=6, wall_clock_s=60.0, max_context_chars=12_000)
        sampling = Sampling(temperature=0.0, top_p=1.0, max_tokens=128)
        correct = formatted = calls = 0
        terminations: dict[str, int] = {}
        for task in tasks:
            traj = run_episode(policy, toolbox, task, limits=limits, sampling=sampling, variant="compact")
            verdict = judge.judge(task.question, task.answer, traj.prediction, task.aliases)
            correct += int(bool(verdict.correct))
            formatted += int(all(t.verdict.get("ok") for t in traj.turns) and bool(traj.turns))
            calls += traj.n_tool_calls
            terminations[traj.termination] = terminations.get(traj.termination, 0) + 1
        return {"measured": True, "n_tasks": len(tasks), "accuracy": round(correct / len(tasks), 4),
                "format_valid_rate": round(formatted / len(tasks), 4),
                "mean_tool_calls": round(calls / len(tasks), 3), "terminations": terminations,
                "tasks": str(heldout), "prompt_variant": "compact", "top_k": 3}
    except Exception as exc:  # a probe must never throw away the model trained before it
        return {"measured": False, "reason": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}


# ---------------------------------------------------------------------------------------------
# The stage
# ---------------------------------------------------------------------------------------------


def previous_runs(path: str | Path) -> list[dict]:
    """What made the checkpoint at ``path``: its own earlier runs, then its run (from its metrics.json)."""
    try:
        m = json.loads((Path(path) / METRICS_NAME).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return [{"command": f"(unknown: no readable {METRICS_NAME} in {path})"}]
    run = {k: m.get(k) for k in ("command", "seed", "total_steps", "train_seconds", "hardware", "finished_at", "note")}
    if m.get("probe_run"):
        run["probes_by"] = m["probe_run"].get("command")
    run["stages"] = [{k: s.get(k) for k in ("name", "steps", "seconds", "seq_len", "batch_size", "lr", "mix",
                                            "stopped_by")}
                     for s in m.get("stages", [])]
    run["probes"] = m.get("probes")
    log_path = Path(path) / LOG_NAME
    if log_path.is_file():
        rows = [{"step": int(r["step"]), **{k: (float(r[k]) if r.get(k) else None)
                                            for k in ("loss", "loss_repeat", "loss_recall", "loss_answer")}}
                for r in csv.DictReader(log_path.open(encoding="utf-8"))]
        by_step = {r["step"]: r for r in rows}
        run["curve"] = [by_step[step] for step, _ in _curve_points(rows, "loss")]
    return list(m.get("previous_runs") or []) + [run]


def hardware_summary(threads: int, device: Any = "cpu") -> str:
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (f"{platform.processor() or platform.machine()}, {threads} torch thread(s), {gpu}; model on {device}; "
            f"torch {torch.__version__}")


def train_stage(model, packer: Packer, stage: StageConfig, config: PretrainConfig, rows: list[dict],
                log: Callable[[str], None], step_offset: int = 0) -> dict:
    """Run one stage; appends one log row per ``log_every`` steps to ``rows``; returns its summary."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=stage.lr, betas=(0.9, 0.95), eps=1e-8)
    model.train()
    device = next(model.parameters()).device
    start = time.perf_counter()
    budget_s = stage.minutes * 60.0
    step = 0
    window: list[dict] = []
    stopped_by = "steps"
    while step < stage.max_steps:
        elapsed = time.perf_counter() - start
        if elapsed >= budget_s:
            stopped_by = "time"
            break
        progress = max(step / stage.max_steps, elapsed / budget_s)
        lr = lr_at(progress, step, stage.lr, stage.warmup_steps, stage.min_lr_ratio)
        for g in opt.param_groups:
            g["lr"] = lr
        ids, roles, mask = (t.to(device) for t in packer.batch(stage.batch_size, stage.seq_len))
        logits = model(input_ids=ids, attention_mask=mask).logits
        losses, valid = token_losses(logits, ids, mask)
        loss = weighted_mean(losses, valid, roles, config.copy_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if config.grad_clip:
            torch.nn.utils.clip_grad_norm_(params, config.grad_clip)
        opt.step()
        with torch.no_grad():
            stats = role_means(losses.detach(), valid, roles)
        stats["tokens"] = int(valid.sum())
        stats["pad_share"] = float(1.0 - mask.float().mean())
        window.append(stats)
        step += 1
        if step % config.log_every == 0 or step == stage.max_steps:
            rows.append(_log_row(stage.name, step_offset + step, time.perf_counter() - start, lr, window))
            r = rows[-1]
            log(f"[{stage.name}] step {r['step']} {r['seconds']:.0f}s lr {lr:.2e} loss {r['loss']} "
                f"repeat {r['loss_repeat']} recall {r['loss_recall']} answer {r['loss_answer']}")
            window = []
    if window:
        rows.append(_log_row(stage.name, step_offset + step, time.perf_counter() - start, lr, window))
    seconds = time.perf_counter() - start
    return {"name": stage.name, "steps": step, "seconds": round(seconds, 1), "stopped_by": stopped_by,
            "seconds_per_step": round(seconds / max(1, step), 3), "seq_len": stage.seq_len,
            "batch_size": stage.batch_size, "lr": stage.lr, "mix": stage.mix}


def _mean_of(window: list[dict], key: str) -> float | None:
    values = [w[key] for w in window if w.get(key) is not None]
    return round(sum(values) / len(values), 4) if values else None


def _log_row(stage: str, step: int, seconds: float, lr: float, window: list[dict]) -> dict:
    return {"stage": stage, "step": step, "seconds": round(seconds, 1), "lr": round(lr, 6),
            "loss": _mean_of(window, "loss"), "loss_repeat": _mean_of(window, "loss_repeat"),
            "loss_recall": _mean_of(window, "loss_recall"), "loss_answer": _mean_of(window, "loss_answer"),
            "tokens": sum(w["tokens"] for w in window), "pad_share": _mean_of(window, "pad_share")}


def log_csv(rows: list[dict]) -> str:
    return csv_text(rows, LOG_FIELDS)


def pretrain(config: PretrainConfig, log: Callable[[str], None] | None = None) -> dict:
    """Train the tokenizer and the tiny base, probe it, save it with its card; returns the metrics.

    Writes into ``config.out_dir`` (replaced atomically at the end): the model (safetensors),
    tokenizer and processor, ``metrics.json``, ``train_log.csv`` and ``MODEL_CARD.md``.
    """
    import torch

    from vsearcher_lite.model import tiny

    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True) if config.progress else None)
    t0 = time.perf_counter()
    device = resolve_device(config.device)
    threads = set_threads(config.threads, limit_heap=False)  # fixed-shape batches: see runtime.set_threads
    torch.manual_seed(config.seed)
    corpus = Corpus(config.world_seeds, config.world_entities, exclude_seed=config.eval_world_seed,
                    exclude_entities=config.eval_world_entities, restate_share=config.restate_share,
                    fresh_names=config.fresh_names)
    lineage: list[dict] = []
    if config.init_from:
        # Continue an earlier run: its tokenizer and weights; the card keeps the earlier runs' commands.
        model, processor = tiny.load_base(config.init_from, dtype=torch.float32)
        tokenizer = processor.tokenizer
        lineage = previous_runs(config.init_from)
    else:
        tokenizer = build_tokenizer(corpus.tokenizer_texts(config.tokenizer_docs, config.seed), config.vocab_size)
        processor = tiny.build_processor(tokenizer)
        model = tiny.build_tiny_model(tokenizer, seed=config.seed, text=config.text, vision=config.vision)
    model.to(device)
    params = tiny.count_parameters(model)
    t_setup = time.perf_counter() - t0
    log(f"corpus + tokenizer + model in {t_setup:.1f}s: vocab {len(tokenizer)}, {params['total']:,} parameters")

    rows: list[dict] = []
    stage_summaries = []
    offset = 0
    for i, stage in enumerate(config.scaled_stages()):
        packer = Packer(tokenizer, corpus.stream(stage.mix, seed=config.seed * 1000 + i))
        summary = train_stage(model, packer, stage, config, rows, log, step_offset=offset)
        summary["skipped_docs"] = packer.skipped
        stage_summaries.append(summary)
        offset += summary["steps"]
    train_seconds = sum(s["seconds"] for s in stage_summaries)

    log("probing ...")
    t_probe = time.perf_counter()
    world = probe_world(config.eval_world_seed, config.eval_world_entities)
    copy = run_copy_probes(model, tokenizer, world, config.probes.n_per_kind, config.probes.batch_size, config.seed)
    agent = run_agent_probe(model, processor, config)
    probe_seconds = time.perf_counter() - t_probe

    metrics = {
        "parameters": params,
        "vocab_size": len(tokenizer),
        "stages": stage_summaries,
        "total_steps": offset,
        "train_seconds": round(train_seconds, 1),
        "setup_seconds": round(t_setup, 1),
        "probe_seconds": round(probe_seconds, 1),
        "wall_seconds": round(time.perf_counter() - t0, 1),
        "loss_first": rows[0]["loss"] if rows else None,
        "loss_last": rows[-1]["loss"] if rows else None,
        "probes": {**{k: v["accuracy"] for k, v in copy.items()},
                   "agent_accuracy": agent.get("accuracy") if agent.get("measured") else None},
        "copy_probes": copy,
        "agent_probe": agent,
        "corpus": {"world_seeds": list(config.world_seeds), "world_entities": config.world_entities,
                   "renamed_roots": sum(w.renamed for w in corpus.worlds), "dropped_docs": corpus.dropped,
                   "eval_world_seed": config.eval_world_seed},
        "hardware": hardware_summary(threads, device),
        "threads": threads,
        "seed": config.seed,
        "command": config.command,
        "init_from": config.init_from,
        "previous_runs": lineage,
        "config": config.to_dict(),
        "finished_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    card = model_card(metrics, rows, tiny.read_config_summary_from_model(model))
    out = tiny.save_base(model, processor, config.out_dir, extra_files={
        CARD_NAME: card,
        LOG_NAME: log_csv(rows),
        METRICS_NAME: json.dumps(metrics, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
    })
    size = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    metrics["checkpoint_bytes"] = size
    atomic_write_json(out / METRICS_NAME, metrics)
    (out / METRICS_NAME).chmod(0o644)
    log(f"saved {out} ({size / 1e6:.1f} MB)")
    return metrics


# ---------------------------------------------------------------------------------------------
# The model card
# ---------------------------------------------------------------------------------------------


def _curve_points(rows: list[dict], key: str, n: int = 12) -> list[tuple[int, float]]:
    pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
    if len(pts) <= n:
        return pts
    idx = sorted({round(i * (len(pts) - 1) / (n - 1)) for i in range(n)})
    return [pts[i] for i in idx]


def model_card(metrics: dict, rows: list[dict], arch: dict) -> str:
    """The model card, written from the run's own numbers (``test_model_card`` checks it against the config)."""
    p = metrics["parameters"]
    lines = [
        "# tiny_base: the cpu profile's pretrained tiny Qwen3-VL",
        "",
        "A 5M-parameter `Qwen3VLForConditionalGeneration` pretrained by `vsearcher-lite pretrain` to read and to",
        "copy names, years and URLs from text. It has never seen the agent protocol (no chat template, no",
        "`<tool_call>` / `<answer>` markup, no trajectories): SFT teaches that. It is the starting point of the",
        "cpu profile; it loads with `AutoModelForImageTextToText` / `AutoProcessor` (after",
        "`import vsearcher_lite.model.tiny`, which registers the image-only processor) or `load_base()`.",
        "",
        "## How it was made",
        "",
        f"- Command: `{metrics['command'] or 'pretrain(PretrainConfig(...)) from Python'}`",
        f"- Seed: {metrics['seed']}",
        f"- Hardware: {metrics['hardware']}",
        f"- Wall time: {metrics['wall_seconds'] / 60:.1f} min in all ({metrics['train_seconds'] / 60:.1f} min training, "
        f"{metrics['probe_seconds'] / 60:.1f} min probes); finished {metrics['finished_at']}",
        f"- Steps: {metrics['total_steps']}",
    ]
    if metrics.get("note"):
        lines.append(f"  {metrics['note']}")
    probe_run = metrics.get("probe_run")
    if probe_run:
        lines.append(f"- Probes re-run on this checkpoint by `{probe_run['command']}` "
                     f"({probe_run['seconds'] / 60:.1f} min, {probe_run['hardware']}; finished "
                     f"{probe_run['finished_at']}): the probe table below is theirs.")
    for i, prev in enumerate(metrics.get("previous_runs") or [], start=1):
        lines.append(f"- Continued from run {i}: `{prev.get('command')}` ({prev.get('total_steps')} steps, "
                     f"{(prev.get('train_seconds') or 0) / 60:.1f} min training, seed {prev.get('seed')}, "
                     f"{prev.get('hardware')}; stages " + "; ".join(
                         f"{st['name']} {st['steps']} steps of {st['batch_size']} x {st['seq_len']} at lr {st['lr']:g}"
                         + (f", stopped by its {'clock' if st.get('stopped_by') == 'time' else 'step'} cap"
                            if st.get("stopped_by") else "")
                         for st in prev.get("stages", [])) + ")")
        if prev.get("note"):
            lines.append(f"  {prev['note']}")
        if prev.get("curve"):
            lines.append(f"  Its loss curve (step: loss / repeat-half / recall / answer): " + "; ".join(
                f"{r['step']}: {r['loss']} / {r['loss_repeat']} / {r['loss_recall']} / {r['loss_answer']}"
                for r in prev["curve"]))
        if prev.get("probes"):
            lines.append("  Its probes" + (f" (by `{prev['probes_by']}`)" if prev.get("probes_by") else "") + ": "
                         + ", ".join(f"{k} {v}" for k, v in prev["probes"].items()))
    lines += [
        "",
        "| stage | steps | stopped by | s/step | rows x tokens | peak lr | mix |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in metrics["stages"]:
        mix = ", ".join(f"{k} {v:g}" for k, v in s["mix"].items())
        lines.append(f"| {s['name']} | {s['steps']} | {s['stopped_by']} | {s['seconds_per_step']} | "
                     f"{s['batch_size']} x {s['seq_len']} | {s['lr']:g} | {mix} |")
    c = metrics["corpus"]
    lines += [
        "",
        f"Data: documents generated from sandbox worlds with seeds {c['world_seeds'][0]}..{c['world_seeds'][-1]} "
        f"({len(c['world_seeds'])} worlds of {c['world_entities']} entities), never the evaluation world (seed "
        f"{c['eval_world_seed']}): {c['renamed_roots']} name roots shared with it were renamed and "
        f"{c['dropped_docs']} documents that still named one of its entities were dropped. Kinds: page (articles, "
        "lists, news, travel notes), repeat (a list then its exact repeat), kv (key: value lines then recall), "
        "pick (a result list then the entry of the asked kind), lookup (a search-result list then a fact, title "
        "or URL copied from it), pageqa (pages, a question, the answer copied; half restate \"Answer: X\"), "
        "restate (a question about \"the <kind> shown in the image\" or a description, what that names, the "
        "question asked again with the name). " + fresh_note(metrics.get("config") or {})
        + "The vision tower keeps its random initialisation (no image documents).",
        "",
        "## Architecture",
        "",
        f"- Parameters: {p['total']:,} (vision {p['vision']:,}, text {p['text']:,})",
        f"- Vocabulary: {metrics['vocab_size']} tokens (byte-level BPE trained here; years 1000-2030 single tokens; "
        "a pre-tokenizer that never glues a space or quote to a word)",
        f"- Text: hidden {arch['hidden_size']}, {arch['num_hidden_layers']} layers, {arch['num_attention_heads']} heads, "
        f"{arch['num_key_value_heads']} kv heads, head_dim {arch['head_dim']}, intermediate {arch['intermediate_size']}",
        f"- Vision: depth {arch['vision_depth']}, hidden {arch['vision_hidden_size']}, patch {arch['patch_size']}, "
        f"merge {arch['spatial_merge_size']}",
        f"- Checkpoint: fp32 safetensors; chat template: TRL's `qwen3_vl.jinja`; `suppress_tokens` = vision ids",
        "",
        "## Loss curve (mean over each logging window)",
        "",
        "| step | loss | repeat-half loss | recall loss | answer loss |",
        "|---|---|---|---|---|",
    ]
    by_step = {r["step"]: r for r in rows}
    for step, _ in _curve_points(rows, "loss"):
        r = by_step[step]
        lines.append(f"| {step} | {r['loss']} | {r['loss_repeat']} | {r['loss_recall']} | {r['loss_answer']} |")
    pr = metrics["copy_probes"]
    agent = metrics["agent_probe"]
    lines += [
        "",
        "Full log: `train_log.csv`; every number here: `metrics.json`.",
        "",
        f"## Probes (greedy, exact match, on the evaluation world seed {c['eval_world_seed']}, whose names were never trained on)",
        "",
        "| probe | accuracy | n |",
        "|---|---|---|",
    ]
    for kind, res in pr.items():
        lines.append(f"| {kind} | {res['accuracy']:.3f} | {res['n']} |")
    if agent.get("measured"):
        lines.append(f"| agent (held-out sandbox tasks, compact prompt, top-3) | {agent['accuracy']:.3f} | "
                     f"{agent['n_tasks']} |")
        lines += ["", f"As an agent the base model's format-valid rate is {agent['format_valid_rate']:.3f} and it "
                      f"makes {agent['mean_tool_calls']} tool calls per task: it does not know the protocol."]
    else:
        lines += ["", f"Agent probe: not measured ({agent.get('reason', 'unknown')})."]
    lookup = pr.get("lookup", {}).get("accuracy")
    if lookup is not None and lookup < COPY_TARGET:
        lines += ["", f"**Below the copy target**: the lookup probe is {lookup:.3f}, the target is {COPY_TARGET}. "
                      "The model copies names and values from a result list, but not yet reliably the one the "
                      "question asks for."]
        plain = {k: pr[k]["accuracy"] for k in ("recall", "repeat") if k in pr}
        if plain:
            below = [k for k, v in plain.items() if v < COPY_TARGET]
            lines[-1] += (" The copy target can also be read as copy accuracy on held-out repeat/recall sequences; on "
                          "those it scores " + " and ".join(f"{k} {v:.3f}" for k, v in plain.items())
                          + (f", {'both' if len(below) == 2 else ' and '.join(below)} also below {COPY_TARGET}."
                             if below else f", above {COPY_TARGET}.")
                          + " The target is checked on lookup, the probe closest to an agent's copy from a result list.")
    lines.append("")
    return "\n".join(lines)


def fresh_note(config: dict) -> str:
    """The card's sentence on fresh names and copy weighting, when the last run used them."""
    if not config.get("fresh_names"):
        return ""
    weight = config.get("copy_weight", 1.0)
    return ("In the last run every document's names were drawn afresh (`fresh_names`: a name is never seen "
            "twice, so a copy cannot come from memory)" + (f" and copy targets weighed x{weight:g} in the loss"
                                                             if weight != 1.0 else "") + ". ")


def write_model_card(out_dir: str | Path) -> str:
    """(Re)write ``MODEL_CARD.md`` of a saved base from its ``metrics.json``, ``train_log.csv`` and config."""
    from vsearcher_lite.model.tiny import read_config_summary

    out = Path(out_dir)
    metrics = json.loads((out / METRICS_NAME).read_text(encoding="utf-8"))
    card = model_card(metrics, read_log_rows(out / LOG_NAME), read_config_summary(out))
    atomic_write_text(out / CARD_NAME, card)
    return card


def read_log_rows(path: str | Path) -> list[dict]:
    """The rows of a saved ``train_log.csv``, numbers parsed (empty cells are None)."""
    rows = []
    for r in csv.DictReader(Path(path).open(encoding="utf-8")):
        row: dict[str, Any] = {"stage": r["stage"], "step": int(r["step"])}
        for k in LOG_FIELDS[2:]:
            row[k] = float(r[k]) if r.get(k) not in (None, "") else None
        rows.append(row)
    return rows


def with_new_probes(metrics: dict, copy: dict, agent: dict, probe_run: dict) -> dict:
    """``metrics`` with its probe results replaced by a later probe run; the training records stay.

    >>> m = with_new_probes({"total_steps": 9, "probes": {"lookup": 0.1}}, {"lookup": {"accuracy": 0.5}},
    ...                     {"measured": False}, {"command": "c"})
    >>> m["total_steps"], m["probes"], m["probe_run"]["command"]
    (9, {'lookup': 0.5, 'agent_accuracy': None}, 'c')
    """
    out = dict(metrics)
    out["probes"] = {**{k: v["accuracy"] for k, v in copy.items()},
                     "agent_accuracy": agent.get("accuracy") if agent.get("measured") else None}
    out["copy_probes"] = copy
    out["agent_probe"] = agent
    out["probe_run"] = probe_run
    return out


def probe_checkpoint(base_dir: str | Path, *, agent_tasks: int = 20, agent_run_dir: str | None = None,
                     n_per_kind: int | None = None, batch_size: int | None = None, threads: int | None = 2,
                     command: str = "", log: Callable[[str], None] | None = None, device: str = "auto") -> dict:
    """Re-run every probe (the copy probes and the agent probe) on a saved base and rewrite its
    ``metrics.json`` probe entries and ``MODEL_CARD.md`` in place; returns the new metrics.

    The probes use the checkpoint's own recorded seed and evaluation world, so their documents
    are the ones its training run probed; ``n_per_kind`` and ``batch_size`` default to its recorded
    probe settings. The weights, tokenizer, ``train_log.csv`` and the training records of
    ``metrics.json`` are kept. The folder is rebuilt beside itself and swapped in with one rename,
    so a crash leaves the old folder or the new one, never a card that disagrees with its metrics.
    """
    import shutil
    import tempfile

    import torch

    from vsearcher_lite.model import tiny
    from vsearcher_lite.runio import InputError, replace_dir

    base = Path(base_dir)
    for name in ("config.json", METRICS_NAME, LOG_NAME):
        if not (base / name).is_file():
            raise InputError(f"{base}: no {name} there (not a checkpoint saved by `vsearcher-lite pretrain`)")
    try:
        metrics = json.loads((base / METRICS_NAME).read_text(encoding="utf-8"))
        recorded = metrics["config"]
    except (json.JSONDecodeError, KeyError) as exc:
        raise InputError(f"{base / METRICS_NAME}: unreadable or without a 'config' entry ({exc})") from None
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    t0 = time.perf_counter()
    where = resolve_device(device)
    threads = set_threads(threads)
    rec_probes = recorded.get("probes") or {}
    config = PretrainConfig(
        out_dir=str(base), seed=int(recorded.get("seed", 0)),
        eval_world_seed=int(recorded.get("eval_world_seed", DEFAULT_WORLD_SEED)),
        eval_world_entities=int(recorded.get("eval_world_entities", DEFAULT_WORLD_ENTITIES)),
        probes=ProbeConfig(n_per_kind=int(n_per_kind or rec_probes.get("n_per_kind", 150)),
                           batch_size=int(batch_size or rec_probes.get("batch_size", 32)),
                           agent_tasks=int(agent_tasks), agent_run_dir=agent_run_dir))
    model, processor = tiny.load_base(base, dtype=torch.float32, device=str(where))
    log(f"probing {base} ({config.probes.n_per_kind} documents per kind, {agent_tasks} agent tasks) ...")
    world = probe_world(config.eval_world_seed, config.eval_world_entities)
    copy = run_copy_probes(model, processor.tokenizer, world, config.probes.n_per_kind, config.probes.batch_size,
                           config.seed)
    agent = run_agent_probe(model, processor, config)
    probe_run = {"command": command or f"probe_checkpoint({str(base)!r})", "seconds": round(time.perf_counter() - t0, 1),
                 "hardware": hardware_summary(threads, where), "threads": threads, "seed": config.seed,
                 "n_per_kind": config.probes.n_per_kind, "batch_size": config.probes.batch_size,
                 "agent_tasks": config.probes.agent_tasks, "agent_run_dir": agent_run_dir,
                 "finished_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    new = with_new_probes(metrics, copy, agent, probe_run)
    card = model_card(new, read_log_rows(base / LOG_NAME), tiny.read_config_summary(base))

    tmp = Path(tempfile.mkdtemp(prefix=f".{base.name}.probe-", dir=base.parent))
    try:
        shutil.copytree(base, tmp, dirs_exist_ok=True)
        atomic_write_text(tmp / CARD_NAME, card)
        atomic_write_json(tmp / METRICS_NAME, new)
        new["checkpoint_bytes"] = sum(p.stat().st_size for p in tmp.iterdir() if p.is_file())
        atomic_write_json(tmp / METRICS_NAME, new)
        tmp.chmod(0o755)
        replace_dir(tmp, base)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log(f"rewrote the probes of {base}: " + ", ".join(f"{k} {v}" for k, v in new["probes"].items()))
    return new
