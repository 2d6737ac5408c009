"""Pretraining the tiny base: tokenizer, model, packed copy-dense text, probes, model card.

``pretrain(config) -> metrics`` is the whole stage. The full recipe (``default_stages``) makes
the base from scratch in one command, in five stages of copy-dense documents (``corpus``):
A builds the copy circuit (the loss on the repeated half of repeat documents, ``loss_repeat``,
shows the induction phase transition), B reads at the agent's lengths, C chooses what to copy
from result lists and pages, D copies names drawn afresh in every document (so a copy cannot
come from memory) and E trains rows of a whole hard episode's length. ``RECIPES`` name other
stage lists that continue a trained checkpoint. With a state folder the run is resumable
(``resume``): rerunning the command goes on from its last save.

Each stage stops at its step cap or its clock cap, whichever comes first. The full run is sized
by steps with generous clock caps, so it is deterministic in ``seed`` however busy the CPU is.
The learning rate follows the larger of the step and the time fraction, so a run cut by the
clock still ends annealed. On a CPU: fp32 (bf16 autocast is slower there).

Deviation from the paper: the paper starts from Qwen3-VL-8B; the cpu profile pretrains a
5M-parameter model of the same architecture on sandbox text and leaves the vision tower at its
random initialisation (no image captions in this corpus), as the card states.
"""

from __future__ import annotations

import json
import math
import platform
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from vsearcher_lite.model.tiny import declare_positions
from vsearcher_lite.model.tokenizer import DEFAULT_VOCAB_SIZE, build_tokenizer
from vsearcher_lite.options import option, positive, positive_number
from vsearcher_lite.recipes.pretraining.card import (
    CARD_NAME,
    LOG_FIELDS,
    LOG_NAME,
    LOSS_KEYS,
    METRICS_NAME,
    model_card,
    previous_runs,
    probe_summary,
    read_log_rows,
    with_new_probes,
)
from vsearcher_lite.recipes.pretraining.corpus import DEFAULT_MIX, STAGE_B_MIX, Corpus
from vsearcher_lite.recipes.pretraining.packing import (
    Packer,
    role_means,
    token_losses,
    weighted_mean,
)
from vsearcher_lite.recipes.pretraining.probes import run_agent_probe, run_copy_probes
from vsearcher_lite.recipes.pretraining.resume import fingerprint, load_state, save_state
from vsearcher_lite.recipes.pretraining.worlds import CORPUS_WORLD_SEEDS, probe_world
from vsearcher_lite.runio import atomic_write_json, atomic_write_text, csv_text, mean
from vsearcher_lite.runtime import resolve_device, set_threads
from vsearcher_lite.world.rename import DEFAULT_WORLD_ENTITIES, DEFAULT_WORLD_SEED


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
    fresh_names: bool | None = None  # names drawn afresh in every document; None: the run's
    copy_weight: float | None = None  # loss weight of copy targets; None: the run's


#: Stage C's mix: more result lists and pages, since choosing *what* to copy is what is left.
CHOOSING_MIX = {**DEFAULT_MIX, "lookup": 3.0, "pageqa": 1.5}
#: Stages D and E: frequent restate documents, the reading behind every argument of the teacher.
FRESH_MIX = {**CHOOSING_MIX, "restate": 2.0}
#: Positions the last stage trains: a hard task's teacher episode runs to about 4,300 tokens.
LONG_SEQ_LEN = 4096


def default_stages() -> list[StageConfig]:
    """The full recipe, the base from scratch: A copy circuit, B reading at agent lengths,
    C choosing what to copy, D fresh names with copies weighed x2, E rows of ``LONG_SEQ_LEN``.
    Step-capped (about 2.6 hours on 2 idle cores); the clock caps are a safety net."""
    return [
        StageConfig("A", max_steps=1800, minutes=45.0, lr=3e-3, warmup_steps=80, seq_len=512,
                    batch_size=6, mix=dict(DEFAULT_MIX)),
        StageConfig("B", max_steps=500, minutes=15.0, lr=1e-3, warmup_steps=20, seq_len=1024,
                    batch_size=3, mix=dict(STAGE_B_MIX)),
        StageConfig("C", max_steps=1500, minutes=40.0, lr=2e-3, warmup_steps=50, seq_len=512,
                    batch_size=8, mix=dict(CHOOSING_MIX)),
        StageConfig("D", max_steps=1200, minutes=60.0, lr=1e-3, warmup_steps=30, seq_len=1024,
                    batch_size=4, mix=dict(FRESH_MIX), fresh_names=True, copy_weight=2.0),
        StageConfig("E", max_steps=1000, minutes=90.0, lr=5e-4, warmup_steps=30,
                    seq_len=LONG_SEQ_LEN, batch_size=1, mix=dict(FRESH_MIX), fresh_names=True,
                    copy_weight=2.0),
    ]


def continue_stages() -> list[StageConfig]:
    """``--recipe continue``: a lower peak lr and more lookup and page-reading documents, since
    choosing *what* to copy is what is left to learn."""
    return [StageConfig("A", max_steps=2400, minutes=30.0, lr=2e-3, warmup_steps=50, seq_len=512,
                        batch_size=8, mix=dict(CHOOSING_MIX))]


def fresh_stages() -> list[StageConfig]:
    """``--recipe fresh`` (the shipped base's last runs): names drawn afresh in every document
    (``corpus.refresh_names``), rows of a whole agent episode, and frequent ``restate``
    documents, the reading behind every argument of the compact teacher."""
    return [StageConfig("A", max_steps=100_000, minutes=40.0, lr=1e-3, warmup_steps=30,
                        seq_len=1024, batch_size=4, mix=dict(FRESH_MIX))]


def long_stages() -> list[StageConfig]:
    """``--recipe long``: the fresh recipe's documents packed into rows of ``LONG_SEQ_LEN``
    tokens, one row per step, so that every position a medium or hard episode reaches has been
    trained on (the earlier runs' rows stopped at 1,024), at a lower peak lr than the fresh run's.
    Step-capped: about 40 minutes on 2 cores."""
    return [StageConfig("A", max_steps=1000, minutes=90.0, lr=5e-4, warmup_steps=30,
                        seq_len=LONG_SEQ_LEN, batch_size=1, mix=dict(FRESH_MIX))]


RECIPES: dict[str, Callable[[], list[StageConfig]]] = {
    "full": default_stages, "continue": continue_stages, "fresh": fresh_stages,
    "long": long_stages}
#: Recipes that continue a checkpoint (``init_from`` required; no agent probe: ``--probe-only``).
CONTINUING_RECIPES = ("continue", "fresh", "long")


@dataclass
class ProbeConfig:
    n_per_kind: int = option(150, "probe documents per probe kind (default: 150)", "--probe-n",
                             type=positive)
    batch_size: int = 32
    agent_tasks: int = option(20, "held-out tasks for the base model's agent probe; 0 skips it "
                              "(default: 20; 0 with --recipe continue or fresh)")
    agent_run_dir: str | None = None  # where the sandbox world and tasks live (built if missing)


@dataclass
class PretrainConfig:
    """Everything ``pretrain`` needs. ``full()`` is the shipped run; ``smoke()`` is CI's."""

    out_dir: str = option("runs/default/pretrain", "output folder (default: RUN_DIR/pretrain)",
                          "--out")
    seed: int = 0
    world_seeds: tuple[int, ...] = CORPUS_WORLD_SEEDS
    world_entities: int = 600
    eval_world_seed: int = DEFAULT_WORLD_SEED
    eval_world_entities: int = DEFAULT_WORLD_ENTITIES
    vocab_size: int = DEFAULT_VOCAB_SIZE
    tokenizer_docs: int = 4000
    stages: list[StageConfig] = field(default_factory=default_stages)
    max_minutes: float | None = option(None, "clock cap on training, shared by the stages in "
                                       "proportion to their own (default: each stage's, a "
                                       "safety net: the step caps end the full run first)",
                                       "--minutes", type=positive_number)
    max_steps: int | None = option(None, "step cap on training, shared by the stages in "
                                   "proportion to their own (default: each stage's; the full "
                                   "recipe's add up to 6,000)", type=positive)
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    threads: int | None = option(2, "torch threads (default: 2)", type=positive)
    device: str = "auto"  # auto (the GPU when there is one) | cpu | cuda
    log_every: int = 50
    restate_share: float = 0.5
    fresh_names: bool = False  # every document's names drawn afresh (corpus.refresh_names)
    copy_weight: float = 1.0  # loss weight of copy targets (repeat, recall, answer); 1: plain loss
    text: dict = field(default_factory=dict)  # overrides of tiny.TEXT_CONFIG
    vision: dict = field(default_factory=dict)  # overrides of tiny.VISION_CONFIG
    probes: ProbeConfig = field(default_factory=ProbeConfig)
    init_from: str | None = option(None, "start from this checkpoint (tokenizer and weights), "
                                   "not from scratch", "--init")
    state_dir: str | None = None  # resumable: the run's state is saved here (``resume``)
    save_every: int = option(200, "save the state every this many steps (and at each stage's "
                             "end); rerunning the same command after an interruption resumes "
                             "from it (default: 200)", type=positive)
    command: str = ""  # the command line that ran it (for the card)
    progress: bool = option(True, "no progress lines", "--quiet", action="store_const", const=False)

    @classmethod
    def smoke(cls, out_dir: str, **overrides: Any) -> "PretrainConfig":
        """A seconds-long run on two small worlds: keeps the command working in CI."""
        stages = [
            StageConfig("A", max_steps=4, minutes=1.0, lr=3e-3, warmup_steps=1, seq_len=128,
                        batch_size=4, mix=dict(DEFAULT_MIX)),
            StageConfig("B", max_steps=2, minutes=1.0, lr=1e-3, warmup_steps=1, seq_len=256,
                        batch_size=2, mix=dict(STAGE_B_MIX)),
        ]
        preset = dict(out_dir=out_dir, world_seeds=(101, 102), world_entities=120, vocab_size=512,
                      tokenizer_docs=300, stages=stages, log_every=1, eval_world_entities=300,
                      probes=ProbeConfig(n_per_kind=4, batch_size=8, agent_tasks=0), progress=False)
        preset.update(overrides)
        return cls(**preset)

    @classmethod
    def for_recipe(cls, recipe: str, out_dir: str, init_from: str | None = None,
                   **overrides: Any) -> "PretrainConfig":
        """The config of a named recipe (``RECIPES``); the continuing ones skip the agent probe
        (``--probe-only`` measures it afterwards)."""
        if recipe not in RECIPES:
            raise ValueError(f"unknown pretraining recipe {recipe!r} (known: {', '.join(RECIPES)})")
        if recipe in CONTINUING_RECIPES and not init_from:
            raise ValueError(f"the {recipe} recipe continues a checkpoint: it needs init_from")
        preset: dict[str, Any] = dict(out_dir=out_dir, init_from=init_from,
                                      stages=RECIPES[recipe]())
        if recipe in CONTINUING_RECIPES:
            preset["probes"] = ProbeConfig(n_per_kind=150, batch_size=32, agent_tasks=0)
        if recipe in ("fresh", "long"):
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


def lr_at(progress: float, step: int, base_lr: float, warmup_steps: int,
          min_ratio: float = 0.1) -> float:
    """Linear warmup, then cosine from ``base_lr`` to ``min_ratio * base_lr`` as ``progress``
    goes from 0 to 1.

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


def hardware_summary(threads: int, device: Any = "cpu") -> str:
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    cpu = platform.processor() or platform.machine()
    return (f"{cpu}, {threads} torch thread(s), {gpu}; model on {device}; "
            f"torch {torch.__version__}")


def train_stage(model, packer: Packer, stage: StageConfig, config: PretrainConfig, rows: list[dict],
                log: Callable[[str], None], step_offset: int = 0, *, resume: dict | None = None,
                save: Callable[[int, float, Any], None] | None = None) -> dict:
    """Run one stage, a log row per ``log_every`` steps into ``rows``; returns its summary.
    ``resume`` (``step``, ``seconds``, ``optimizer`` file) goes on from an interrupted stage whose
    packer was drawn forward to that step; ``save(step, seconds, optimizer)`` is called every
    ``save_every`` steps."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": config.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=stage.lr, betas=(0.9, 0.95), eps=1e-8)
    step, done_s = 0, 0.0
    if resume:
        step, done_s = int(resume["step"]), float(resume["seconds"])
        if resume.get("optimizer"):
            opt.load_state_dict(torch.load(resume["optimizer"]))
    copy_weight = config.copy_weight if stage.copy_weight is None else stage.copy_weight
    model.train()
    device = next(model.parameters()).device
    start = time.perf_counter() - done_s
    budget_s = stage.minutes * 60.0
    window: list[dict] = []
    stopped_by = "steps"
    lr = stage.lr
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
        loss = weighted_mean(losses, valid, roles, copy_weight)
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
            seconds = time.perf_counter() - start
            rows.append(_log_row(stage.name, step_offset + step, seconds, lr, window))
            r = rows[-1]
            log(f"[{stage.name}] step {r['step']} {r['seconds']:.0f}s lr {lr:.2e} loss {r['loss']} "
                f"repeat {r['loss_repeat']} recall {r['loss_recall']} answer {r['loss_answer']}")
            window = []
        if save and step % config.save_every == 0 and step < stage.max_steps:
            save(step, time.perf_counter() - start, opt)
    if window:
        rows.append(_log_row(stage.name, step_offset + step, time.perf_counter() - start, lr,
                             window))
    seconds = time.perf_counter() - start
    return {"name": stage.name, "steps": step, "seconds": round(seconds, 1),
            "stopped_by": stopped_by, "seconds_per_step": round(seconds / max(1, step), 3),
            "seq_len": stage.seq_len, "batch_size": stage.batch_size, "lr": stage.lr,
            "mix": stage.mix, "fresh_names": config.fresh_names if stage.fresh_names is None
            else stage.fresh_names, "copy_weight": copy_weight}


def _mean_of(window: list[dict], key: str) -> float | None:
    return mean(w.get(key) for w in window)


def _log_row(stage: str, step: int, seconds: float, lr: float, window: list[dict]) -> dict:
    return {"stage": stage, "step": step, "seconds": round(seconds, 1), "lr": round(lr, 6),
            **{k: _mean_of(window, k) for k in LOSS_KEYS},
            "tokens": sum(w["tokens"] for w in window), "pad_share": _mean_of(window, "pad_share")}


def starting_model(config: PretrainConfig, corpus: Corpus, state: dict | None):
    """``(model, processor)`` to train: the saved state's, ``init_from``'s, or a new model with
    a tokenizer trained on the corpus."""
    import torch

    from vsearcher_lite.model import tiny

    if state or config.init_from:
        return tiny.load_base(state["model_dir"] if state else config.init_from,
                              dtype=torch.float32)
    texts = corpus.tokenizer_texts(config.tokenizer_docs, config.seed)
    tokenizer = build_tokenizer(texts, config.vocab_size)
    processor = tiny.build_processor(tokenizer)
    model = tiny.build_tiny_model(tokenizer, seed=config.seed, text=config.text,
                                  vision=config.vision)
    return model, processor


def train_stages(model, processor, corpus: Corpus, config: PretrainConfig, state: dict | None,
                 t_setup: float, log: Callable[[str], None]):
    """Every stage not finished in ``state``, saving the state as it goes when the config has a
    state folder; ``(log rows, stage summaries, resumes, documents dropped)``."""
    rows: list[dict] = state["rows"] if state else []
    stage_summaries: list[dict] = state["summaries"] if state else []
    resumes = (state["resumes"] + [{"stage": state["stage"], "step": state["step"]}]
               if state else [])
    dropped_before = state["dropped"] if state else 0
    offset = sum(s["steps"] for s in stage_summaries)

    def position(stage: int, step: int, seconds: float, dropped: int) -> dict:
        return {"fingerprint": fingerprint(config.to_dict()), "stage": stage, "step": step,
                "seconds": round(seconds, 3), "rows": rows, "summaries": stage_summaries,
                "resumes": resumes, "setup_seconds": round(t_setup, 1), "dropped": dropped}

    for i, stage in enumerate(config.scaled_stages()):
        if i < len(stage_summaries):
            continue
        # documents dropped so far (drawing a resumed stage forward counts its drops again)
        at_start = dropped_before + corpus.dropped
        packer = Packer(processor.tokenizer, corpus.stream(stage.mix, seed=config.seed * 1000 + i,
                                                           fresh_names=stage.fresh_names))
        resume = None
        if state and i == state["stage"] and state["step"]:
            for _ in range(state["step"]):  # the same documents as the interrupted run's
                packer.batch(stage.batch_size, stage.seq_len)
            resume = {k: state[k] for k in ("step", "seconds", "optimizer")}
        save = None
        if config.state_dir:
            def save(step, seconds, opt, i=i, at_start=at_start):
                save_state(config.state_dir, model, processor, opt,
                           position(i, step, seconds, at_start))
        summary = train_stage(model, packer, stage, config, rows, log, step_offset=offset,
                              resume=resume, save=save)
        summary["skipped_docs"] = packer.skipped
        stage_summaries.append(summary)
        offset += summary["steps"]
        if config.state_dir:
            save_state(config.state_dir, model, processor, None,
                       position(i + 1, 0, 0.0, dropped_before + corpus.dropped))
    return rows, stage_summaries, resumes, dropped_before + corpus.dropped


def pretrain(config: PretrainConfig, log: Callable[[str], None] | None = None) -> dict:
    """Train the tokenizer and the tiny base, probe it, save it with its card and metrics into
    ``config.out_dir`` (replaced atomically); returns the metrics. With ``config.state_dir`` it
    resumes an interrupted run of the same settings from its last save."""
    import torch

    from vsearcher_lite.model import tiny

    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True) if config.progress else None)
    if config.save_every % config.log_every:
        raise ValueError(f"save_every ({config.save_every}) must be a multiple of log_every "
                         f"({config.log_every}): a save falls between two log rows otherwise")
    t0 = time.perf_counter()
    device = resolve_device(config.device)
    threads = set_threads(config.threads, limit_heap=False)  # fixed-shape batches (runtime)
    torch.manual_seed(config.seed)
    corpus = Corpus(config.world_seeds, config.world_entities, exclude_seed=config.eval_world_seed,
                    exclude_entities=config.eval_world_entities, restate_share=config.restate_share,
                    fresh_names=config.fresh_names)
    state = load_state(config.state_dir, config.to_dict()) if config.state_dir else None
    lineage: list[dict] = previous_runs(config.init_from) if config.init_from else []
    if state:
        log(f"resuming {config.state_dir}: stage {state['stage'] + 1}, step {state['step']}")
    model, processor = starting_model(config, corpus, state)
    model.to(device)
    params = tiny.count_parameters(model)
    t_setup = time.perf_counter() - t0 + (state["setup_seconds"] if state else 0.0)
    log(f"corpus + tokenizer + model in {t_setup:.1f}s: vocab {len(processor.tokenizer)}, "
        f"{params['total']:,} parameters")
    rows, stage_summaries, resumes, dropped = train_stages(model, processor, corpus, config,
                                                           state, t_setup, log)
    train_seconds = sum(s["seconds"] for s in stage_summaries)
    declare_positions(model, max((s["seq_len"] for s in stage_summaries), default=0))

    log("probing ...")
    t_probe = time.perf_counter()
    copy = copy_probes(model, processor.tokenizer, config)
    agent = run_agent_probe(model, processor, config)
    probe_seconds = time.perf_counter() - t_probe

    metrics = {
        "parameters": params,
        "vocab_size": len(processor.tokenizer),
        "stages": stage_summaries,
        "total_steps": sum(st["steps"] for st in stage_summaries),
        "train_seconds": round(train_seconds, 1),
        "setup_seconds": round(t_setup, 1),
        "probe_seconds": round(probe_seconds, 1),
        # the parts, which add up across the processes of a resumed run
        "wall_seconds": round(t_setup + train_seconds + probe_seconds, 1),
        "loss_first": rows[0]["loss"] if rows else None,
        "loss_last": rows[-1]["loss"] if rows else None,
        "probes": probe_summary(copy, agent),
        "copy_probes": copy,
        "agent_probe": agent,
        "corpus": {"world_seeds": list(config.world_seeds),
                   "world_entities": config.world_entities,
                   "renamed_roots": sum(w.renamed for w in corpus.worlds),
                   "dropped_docs": dropped,
                   "eval_world_seed": config.eval_world_seed},
        "hardware": hardware_summary(threads, device),
        "threads": threads,
        "seed": config.seed,
        "command": config.command,
        "init_from": config.init_from,
        "previous_runs": lineage,
        "resumed_at": resumes,
        "config": config.to_dict(),
        "finished_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    card = model_card(metrics, rows, tiny.read_config_summary_from_model(model))
    out = tiny.save_base(model, processor, config.out_dir, extra_files={
        CARD_NAME: card,
        LOG_NAME: csv_text(rows, LOG_FIELDS),
        METRICS_NAME: json.dumps(metrics, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
    })
    size = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    metrics["checkpoint_bytes"] = size
    atomic_write_json(out / METRICS_NAME, metrics)
    (out / METRICS_NAME).chmod(0o644)
    if config.state_dir:
        shutil.rmtree(config.state_dir, ignore_errors=True)  # finished: nothing to resume
    log(f"saved {out} ({size / 1e6:.1f} MB)")
    return metrics


def copy_probes(model, tokenizer, config: PretrainConfig) -> dict:
    """The copy probes on the config's evaluation world."""
    world = probe_world(config.eval_world_seed, config.eval_world_entities)
    probes = config.probes
    return run_copy_probes(model, tokenizer, world, probes.n_per_kind, probes.batch_size,
                           config.seed)


def probe_checkpoint(base_dir: str | Path, *, agent_tasks: int = 20,
                     agent_run_dir: str | None = None, n_per_kind: int | None = None,
                     batch_size: int | None = None, threads: int | None = 2, command: str = "",
                     log: Callable[[str], None] | None = None, device: str = "auto") -> dict:
    """Re-run every probe on a saved base with its recorded settings (unless given), and rewrite
    its ``metrics.json`` probes and ``MODEL_CARD.md`` in place; returns the new metrics. The
    folder is rebuilt beside itself and swapped in with one rename, so a card never disagrees
    with its metrics."""
    import tempfile

    import torch

    from vsearcher_lite.model import tiny
    from vsearcher_lite.runio import InputError, replace_dir

    base = Path(base_dir)
    for name in ("config.json", METRICS_NAME, LOG_NAME):
        if not (base / name).is_file():
            raise InputError(f"{base}: no {name} there "
                             "(not a checkpoint saved by `vsearcher-lite pretrain`)")
    try:
        metrics = json.loads((base / METRICS_NAME).read_text(encoding="utf-8"))
        recorded = metrics["config"]
    except (json.JSONDecodeError, KeyError) as exc:
        raise InputError(f"{base / METRICS_NAME}: unreadable or without a 'config' entry "
                         f"({exc})") from None
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
    log(f"probing {base} ({config.probes.n_per_kind} documents per kind, "
        f"{agent_tasks} agent tasks) ...")
    copy = copy_probes(model, processor.tokenizer, config)
    agent = run_agent_probe(model, processor, config)
    probe_run = {"command": command or f"probe_checkpoint({str(base)!r})",
                 "seconds": round(time.perf_counter() - t0, 1),
                 "hardware": hardware_summary(threads, where), "threads": threads,
                 "seed": config.seed,
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
