"""Settings of the SFT stage: one dataclass, three profile presets.

``SFTConfig.for_profile(profile, **overrides)``:

=============  ================================================================================
``cpu``        full fine-tune, fp32, of the shipped tiny base (``data/tiny_base``), at most 1,000
               steps of batch 1 or 2.75 minutes of training and the whole stage, both evaluations
               included, within 2.8 minutes (``total_minutes``), yet at least 200 steps
               (``min_steps``) so a slow CPU never hands back an untrained model; two torch threads
               (with another torch job beside it pass ``threads=1``: oversubscribed threads spin);
               the markup tokens' embeddings started from plain-text cues; answer-bearing tokens
               weighted x10 (a single answer per trajectory is too little signal for minutes of
               training). Held-out evaluation covers the one-hop warm-up level and easy and medium
               tasks; gradient checkpointing off (it only costs time on CPU); vision tokens
               suppressed in generation. Plain greedy evaluation; the repeat guard
               (``eval_repeat_guard``, ``--repeat-guard 3``: no block of 3 or more tokens twice in a
               row within a reply, ``chat.repeat_ban``) is an option, off by default (its measured
               effect is in ``docs/results.md``).
``single_gpu`` LoRA in bf16 through PEFT on a real Qwen3-VL checkpoint (``method="qlora"``: the
               same with the base quantised to 4-bit NF4 by bitsandbytes).
``multi_gpu``  full fine-tune in bf16 under ``accelerate launch`` with the shipped FSDP or
               DeepSpeed ZeRO-3 configs (``configs/accelerate/``); the paper's released settings:
               lr 1e-5, 5 epochs, cutoff 20480 tokens, per-device batch 1 x gradient accumulation
               2, cosine schedule, warmup 0.1, vision tower and projector frozen (the released config).
=============  ================================================================================

A profile is a recipe, not a place: every profile trains and evaluates on ``device`` (``auto``, the
default, is the GPU when torch sees one; ``--device cpu`` keeps the cpu recipe on the CPU).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from vsearcher_lite.runio import check_folder_name
from vsearcher_lite.runtime import check_device_name, resolve_device

METHODS = ("full", "lora", "qlora")
DTYPES = ("float32", "bfloat16", "float16")
#: The paper's base model (section 3.1) and the GPU profiles' default.
PAPER_BASE = "Qwen/Qwen3-VL-8B-Thinking"
#: Linear layers of the language model only (the vision tower stays frozen, as in the paper).
LORA_TARGET_REGEX = r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"
ACCELERATE_CONFIGS = ("fsdp", "zero3")
#: The paper's SFT settings (section 3.1, appendix A.3), by ``SFTConfig`` field: what notebook 06
#: compares a run's settings with. The loss additions of the cpu recipe are off in the paper.
PAPER_SFT = {
    "base": PAPER_BASE, "method": "full", "dtype": "bfloat16", "learning_rate": 1e-5, "epochs": 5.0,
    "batch_size": 1, "grad_accum": 2, "max_length": 20480, "scheduler": "cosine", "warmup_ratio": 0.1,
    "freeze_vision": True, "answer_weight": 1.0, "copy_weight": 1.0, "init_markup_embeddings": False,
}


def paper_differences(settings: dict[str, Any], paper: dict[str, Any]) -> list[dict[str, Any]]:
    """``{"setting", "paper", "this run"}`` for every setting of ``paper`` whose value in ``settings``
    differs (settings missing from ``settings`` are skipped), in ``paper``'s order.

    >>> paper_differences({"learning_rate": 1e-3, "scheduler": "cosine"}, {"learning_rate": 1e-5, "scheduler": "cosine"})
    [{'setting': 'learning_rate', 'paper': 1e-05, 'this run': 0.001}]
    """
    def same(a: Any, b: Any) -> bool:
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
            return abs(a - b) <= 1e-12 * max(abs(a), abs(b), 1)
        return (list(a) if isinstance(a, tuple) else a) == (list(b) if isinstance(b, tuple) else b)

    return [{"setting": k, "paper": v, "this run": settings[k]} for k, v in paper.items()
            if k in settings and not same(settings[k], v)]


def settings_html(settings: dict[str, Any], paper: dict[str, Any], *, title: str = "Settings") -> str:
    """The settings that differ from the paper as a small table, then every setting in a collapsed
    ``<details>`` view: how notebooks 06-08 show a configuration without a wall of output."""
    import html
    import json

    def cell(v: Any) -> str:
        return html.escape(json.dumps(v) if isinstance(v, (dict, list, tuple, bool)) or v is None else str(v))

    rows = paper_differences(settings, paper)
    compared = len([k for k in paper if k in settings])
    body = "".join(f"<tr><td><code>{html.escape(r['setting'])}</code></td><td>{cell(r['paper'])}</td>"
                   f"<td><b>{cell(r['this run'])}</b></td></tr>" for r in rows)
    table = (f"<table><tr><th>setting</th><th>paper</th><th>this run</th></tr>{body}</table>" if rows
             else "<p>every compared setting is the paper's</p>")
    everything = html.escape(json.dumps(settings, indent=1, default=str), quote=False)
    return (f"<div><b>{html.escape(title)}</b>: {len(rows)} of the {compared} settings compared with the paper "
            f"differ.{table}<details><summary>all {len(settings)} settings</summary>"
            f"<pre>{everything}</pre></details></div>")


def training_budget_s(minutes: float | None, total_minutes: float | None, elapsed_s: float, still_to_come_s: float,
                      margin_s: float, floor_s: float = 0.0) -> float | None:
    """Seconds a training loop may run: the ``minutes`` cap, and what a whole-command budget of
    ``total_minutes`` leaves after the ``elapsed_s`` already spent, the ``still_to_come_s`` estimated
    for what follows training (an evaluation) and a margin for saving; never below ``floor_s``.
    ``None`` when neither cap is set. (The sft and grpo stages' cpu presets.)

    >>> training_budget_s(2.5, 3.0, 20.0, 25.0, 5.0), training_budget_s(1.0, 3.0, 20.0, 25.0, 5.0)
    (130.0, 60.0)
    >>> training_budget_s(2.5, 6.0, 200.0, 120.0, 15.0), training_budget_s(None, 1.0, 70.0, 0.0, 5.0, floor_s=10.0)
    (25.0, 10.0)
    """
    budgets = []
    if minutes:
        budgets.append(minutes * 60)
    if total_minutes:
        budgets.append(total_minutes * 60 - elapsed_s - still_to_come_s - margin_s)
    return max(min(budgets), floor_s) if budgets else None


def check_at_least_one(config: Any, keys: tuple[str, ...]) -> None:
    """Raise ``ValueError`` naming the first of ``keys`` that is set (not ``None``) and below 1."""
    for key in keys:
        value = getattr(config, key)
        if value is not None and value < 1:
            raise ValueError(f"{key} must be at least 1 (or unset), got {value}")


def check_sampling(temperature: float, top_p: float) -> None:
    """Raise ``ValueError`` unless ``temperature >= 0`` and ``0 < top_p <= 1``."""
    if temperature < 0 or not 0 < top_p <= 1:
        raise ValueError(f"temperature must be >= 0 and top_p in (0, 1], got {temperature} and {top_p}")


def with_overrides(cls, profile: str, preset: dict[str, Any], overrides: dict[str, Any], stage: str) -> dict[str, Any]:
    """A profile preset with the caller's overrides applied (``None`` means "the preset's"); a
    ``TypeError`` names any setting the dataclass ``cls`` does not have."""
    merged = {**preset, "profile": profile, **{k: v for k, v in overrides.items() if v is not None}}
    unknown = sorted(set(merged) - {f.name for f in fields(cls)})
    if unknown:
        raise TypeError(f"unknown {stage} setting(s): {', '.join(unknown)}")
    return merged


@dataclass
class SFTConfig:
    """Everything ``run_sft`` needs besides the run folder.

    ``answer_weight``: the loss weight of answer-bearing assistant tokens (the tokens inside
    ``<answer>...</answer>`` and every earlier occurrence of the same token sequence in the
    assistant turns, i.e. where the reasoning states the answer); 1.0 is the plain
    assistant-only loss. ``minutes`` caps training by wall clock (the learning-rate schedule
    then runs on whichever of steps or time is further along, so a capped run still ends at
    the low learning rate).
    """

    profile: str = "cpu"
    name: str = "sft"  # the stage folder RUN_DIR/<name> and the evaluation name (ablations use another)
    base: str | None = None  # None: the shipped tiny base; else a local folder or a hub id
    method: str = "full"  # full | lora | qlora
    dtype: str = "float32"
    # optimisation
    learning_rate: float = 1e-3
    epochs: float = 5.0
    max_steps: int | None = None  # None: epochs decide
    minutes: float | None = None  # wall-clock cap on training
    # a floor on optimizer steps that outlasts the time caps (a slow machine trains on to it; 0 = none)
    min_steps: int = 0
    batch_size: int = 8  # per device
    grad_accum: int = 1
    max_length: int | None = 2048  # cutoff in tokens (paper: 20480)
    scheduler: str = "cosine"
    warmup_ratio: float = 0.1
    min_lr_ratio: float = 0.0  # the cosine floor, as a share of the peak
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    gradient_checkpointing: bool = False
    freeze_vision: bool = True  # vision tower and projector (paper: frozen)
    # the two measured additions of the cpu recipe
    answer_weight: float = 1.0
    copy_weight: float = 1.0  # trained tokens that copy the context (``data.copy_token_weights``)
    init_markup_embeddings: bool = False
    # LoRA / QLoRA
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    lora_target: str = LORA_TARGET_REGEX
    # data
    train_file: str | None = None  # default: RUN_DIR/trajectories/export/sft_trl.jsonl
    max_train_samples: int | None = None
    samples_per_task: int | None = None  # teacher samples per task when trajectories must be generated
    # evaluation (base and SFT on the same held-out tasks, same greedy settings)
    evaluate: bool = True
    eval_file: str | None = None  # default: RUN_DIR/filter/heldout.jsonl
    eval_max_tasks: int | None = None
    eval_difficulties: tuple[str, ...] | None = None  # None: every difficulty in the file
    eval_max_tokens: int | None = None  # new tokens per turn (None: the eval profile's)
    eval_max_tool_calls: int | None = None  # None: the eval profile's (paper: 30)
    eval_max_context_chars: int | None = None  # None: the eval profile's
    eval_wall_clock_s: float | None = None  # per episode; None: the eval profile's
    eval_repeat_guard: int = 0  # local models: no block of this many tokens twice in a row in a reply (0 = off)
    eval_base: bool = True
    # cpu: the whole command's budget; the base is evaluated first and training gets what is left
    total_minutes: float | None = None
    # runtime
    threads: int | None = None  # torch threads (cpu); None: leave torch's default
    device: str = "auto"  # auto (the GPU when there is one) | cpu | cuda, whatever the profile
    accelerate_config: str = "fsdp"  # multi_gpu: fsdp | zero3
    logging_steps: int = 1
    # steps between resumable trainer checkpoints in RUN_DIR/<name>/trainer (None: none); the same command
    # resumes an interrupted run from the last one
    save_every: int | None = None
    seed: int = 0
    world: str = "sandbox"
    progress: bool = True
    report_to: list[str] = field(default_factory=list)

    @classmethod
    def for_profile(cls, profile: str = "cpu", **overrides: Any) -> "SFTConfig":
        """The preset of ``profile`` with ``overrides`` applied (``None`` values are ignored)."""
        if profile == "cpu":
            preset: dict[str, Any] = dict(
                method="full", dtype="float32", learning_rate=1e-3, epochs=100.0, max_steps=1000, minutes=2.75,
                # a slow CPU fits too few steps into the budget to learn the protocol (an all-zero
                # evaluation): below 200 steps, time waits (docs/results.md)
                min_steps=200,
                batch_size=1, grad_accum=1, max_length=2048, warmup_ratio=0.1, min_lr_ratio=0.1,
                answer_weight=10.0, init_markup_embeddings=True, threads=2,
                # 10 held-out tasks per level: the SFT model's evaluation takes about 7x the base model's
                # (sft.SFT_EVAL_FACTOR: it makes tool calls), 60 tasks left training too little of the 3 minutes
                eval_difficulties=("onehop", "easy", "medium"), eval_max_tasks=30,
                # the compact teacher's longest assistant turn is 196 tokens (13,324 turns of the default
                # run's accepted trajectories; median 93, 99th percentile 178): a looping model is cut just
                # above that
                eval_max_tokens=200,
                # The teacher needs at most 9 calls and 12,623 context characters on a medium task
                # (runs/sft-cpu, 8000-entity world); a looping tiny model is stopped a little above that.
                eval_max_tool_calls=10, eval_max_context_chars=13_000, eval_wall_clock_s=60.0, total_minutes=2.8)
        elif profile == "single_gpu":
            preset = dict(
                base=PAPER_BASE, method="lora", dtype="bfloat16", learning_rate=1e-4, epochs=5.0, batch_size=1,
                grad_accum=2, max_length=20480, warmup_ratio=0.1, gradient_checkpointing=True)
        elif profile == "multi_gpu":
            preset = dict(
                base=PAPER_BASE, method="full", dtype="bfloat16", learning_rate=1e-5, epochs=5.0, batch_size=1,
                grad_accum=2, max_length=20480, warmup_ratio=0.1, gradient_checkpointing=True)
        else:
            raise ValueError(f"unknown profile {profile!r}; choose cpu, single_gpu or multi_gpu")
        config = cls(**with_overrides(cls, profile, preset, overrides, "SFT"))
        config.check()
        return config

    def check(self) -> None:
        """Raise ``ValueError`` naming the first setting out of range."""
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.answer_weight <= 0:
            raise ValueError(f"answer_weight must be positive, got {self.answer_weight}")
        if self.copy_weight <= 0:
            raise ValueError(f"copy_weight must be positive, got {self.copy_weight}")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be positive, got {self.learning_rate}")
        if self.batch_size < 1 or self.grad_accum < 1:
            raise ValueError("batch_size and grad_accum must be at least 1")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {self.max_steps}")
        if self.min_steps < 0:
            raise ValueError(f"min_steps must be 0 (no floor) or more, got {self.min_steps}")
        if self.minutes is not None and self.minutes <= 0:
            raise ValueError(f"minutes must be positive, got {self.minutes}")
        if self.total_minutes is not None and self.total_minutes <= 0:
            raise ValueError(f"total_minutes must be positive, got {self.total_minutes}")
        if self.eval_repeat_guard < 0:
            raise ValueError(f"eval_repeat_guard must be 0 (off) or a block length, got {self.eval_repeat_guard}")
        if self.accelerate_config not in ACCELERATE_CONFIGS:
            raise ValueError(f"accelerate_config must be one of {', '.join(ACCELERATE_CONFIGS)}")
        if self.epochs <= 0:
            raise ValueError(f"epochs must be positive, got {self.epochs}")
        check_at_least_one(self, ("max_length", "max_train_samples", "samples_per_task", "eval_max_tasks", "threads",
                                  "save_every"))
        check_device_name(self.device)
        check_folder_name(self.name, "name")

    @property
    def use_cpu(self) -> bool:
        """Whether training runs on the CPU (``device`` resolved; ``InputError`` for cuda without a GPU)."""
        return resolve_device(self.device).type == "cpu"

    def eval_config(self, **overrides: Any):
        """The greedy held-out evaluation settings of this stage (an ``EvalConfig``). Base and SFT model
        are evaluated with them; GRPO and the comparison of notebook 08 use the same, so that the
        results stored under ``RUN_DIR/eval/`` can be reused. ``None`` overrides are ignored."""
        from vsearcher_lite.evaluation.evaluate import EvalConfig

        settings: dict[str, Any] = dict(seed=self.seed, world=self.world, max_tokens=self.eval_max_tokens,
                                        max_tool_calls=self.eval_max_tool_calls,
                                        max_context_chars=self.eval_max_context_chars,
                                        wall_clock_s=self.eval_wall_clock_s, repeat_guard=self.eval_repeat_guard,
                                        device=self.device, progress=self.progress)
        settings.update({k: v for k, v in overrides.items() if v is not None})
        return EvalConfig.for_profile(self.profile, **settings)

    def torch_dtype(self):
        import torch

        return getattr(torch, self.dtype)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["eval_difficulties"] = list(self.eval_difficulties) if self.eval_difficulties else None
        return d
