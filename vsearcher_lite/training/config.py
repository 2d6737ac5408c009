"""Settings of the SFT stage (paper 2.2, 3.1, A.3): one dataclass whose defaults are the paper's;
``for_profile`` applies the profile's ``[sft]`` table. The held-out evaluation (``eval``) is reused
by GRPO and the comparison. A profile is a recipe, not a place: every profile trains on ``device``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vsearcher_lite.config import (
    EvalConfig,
    TrainingSettings,
    check_at_least_one,
    check_choices,
    check_positive,
    paper_differences,
    paper_settings,
    settings_html,
    stage_eval_config,
)
from vsearcher_lite.options import option
from vsearcher_lite.runio import check_folder_name
from vsearcher_lite.runtime import check_device_name

# the shared helpers the notebooks import from here, too
__all__ = ["PAPER_SFT", "SFTConfig", "paper_differences", "settings_html"]

METHODS = ("full", "lora", "qlora")
DTYPES = ("float32", "bfloat16", "float16")
#: The paper's base model (section 3.1) and the GPU profiles' default.
PAPER_BASE = "Qwen/Qwen3-VL-8B-Thinking"
#: Linear layers of the language model only: the vision tower stays frozen.
LORA_TARGET_REGEX = r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"
ACCELERATE_CONFIGS = ("fsdp", "zero3")
#: The CLI options of ``vsearcher-lite sft``, by field (``options.add_config_options``).
CLI_OPTIONS = ("base", "method", "dtype", "learning_rate", "epochs", "max_steps", "save_every",
               "keep_checkpoints",
               "minutes", "total_minutes", "batch_size", "grad_accum", "max_length",
               "answer_weight", "init_markup_embeddings", "threads")
CLI_DATA_OPTIONS = ("train_file", "max_train_samples", "samples_per_task", "eval_file",
                    "eval_max_tasks", "name")


@dataclass
class SFTConfig(TrainingSettings):
    """Everything ``run_sft`` needs besides the run folder. Build it with ``for_profile``,
    changes as its overrides: the evaluation settings it resolves are not recomputed when a
    field is set afterwards."""

    profile: str = "cpu"
    name: str = option("sft", "output folder RUN_DIR/<name> and evaluation name (default: sft)")
    base: str | None = option(PAPER_BASE, "base model folder or hub id (default: the profile's; "
                              "cpu: data/tiny_base)")
    method: str = option("full", "full fine-tune, LoRA or 4-bit QLoRA", choices=METHODS)
    dtype: str = option("bfloat16", "training dtype", choices=DTYPES)
    # optimisation
    learning_rate: float = option(1e-5, "peak learning rate", "--lr")
    epochs: float = option(5.0, "epochs over the trajectories")
    max_steps: int | None = option(None, "stop after this many optimizer steps")
    minutes: float | None = option(None, "stop training after this many minutes (cpu: 2.75)")
    batch_size: int = option(1, "trajectories per device per step")
    grad_accum: int = option(2, "gradient accumulation steps")
    max_length: int | None = option(20480, "drop trajectories longer than this many tokens")
    scheduler: str = "cosine"
    warmup_ratio: float = 0.1
    min_lr_ratio: float = 0.0  # the cosine floor, as a share of the peak
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    gradient_checkpointing: bool = True
    freeze_vision: bool = True  # vision tower and projector (paper: frozen)
    # the cpu recipe's two additions for a tiny model
    answer_weight: float = option(1.0, "loss weight of answer-bearing assistant tokens (1 = plain "
                                  "loss; cpu default 10; GPU profiles 1)")
    init_markup_embeddings: bool = option(False, "start the markup tokens' embeddings from "
                                          "plain-text cues (cpu default)", "--markup-init")
    # LoRA / QLoRA
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    lora_target: str = LORA_TARGET_REGEX
    # data
    train_file: str | None = option(None, "TRL chat JSONL (default: "
                                    "RUN_DIR/trajectories/export/sft_trl.jsonl)")
    max_train_samples: int | None = option(None, "use at most this many trajectories")
    samples_per_task: int | None = option(None, "teacher samples per task when trajectories must "
                                          "be generated", "--samples")
    # evaluation (base and SFT on the same held-out tasks, same greedy settings)
    evaluate: bool = True
    eval_file: str | None = option(None, "held-out task JSONL (default: "
                                   "RUN_DIR/filter/heldout.jsonl)")
    eval_max_tasks: int | None = option(None, "evaluate on at most this many held-out tasks",
                                        "--eval-tasks")
    eval_difficulties: tuple[str, ...] | None = None  # None: every difficulty in the file
    eval_base: bool = True
    eval: EvalConfig = field(default_factory=EvalConfig)  # the profile's [eval], then [sft.eval]
    total_minutes: float | None = option(None, "budget of the whole command: the base is "
                                         "evaluated first and training gets what the two "
                                         "evaluations leave (cpu default: 2.8)")
    # runtime
    threads: int | None = option(None, "torch threads (cpu default: 2)")
    accelerate_config: str = field(default="fsdp", metadata={"choices": ACCELERATE_CONFIGS})
    logging_steps: int = 1
    save_every: int | None = option(None, "save a resumable checkpoint every this many steps; "
                                    "rerunning the same command after an interruption resumes "
                                    "from the last one")
    keep_checkpoints: bool = option(False, "keep every checkpoint saved by --save-every as "
                                    "RUN_DIR/<name>/snapshots/step-N (a model after N steps, "
                                    "for a scaling table), not only the last for resuming",
                                    action="store_const", const=True)

    @classmethod
    def for_profile(cls, profile: str = "cpu", **overrides: Any) -> SFTConfig:
        """The preset of ``profile`` with ``overrides`` (``None`` ignored; the evaluation's as
        ``eval={...}`` or ``eval_<setting>=...``), checked; ``eval`` resolved to the held-out
        evaluation's settings as the run uses them (``eval_config()``)."""
        config = cls.from_profile(profile, overrides, "sft", "SFT", EvalConfig.for_profile(profile))
        config.eval = config.eval_config()
        return config

    def check(self) -> None:
        """Raise ``ValueError`` naming the first setting out of range."""
        check_choices(self)
        check_positive(self, ("answer_weight", "learning_rate", "epochs", "minutes",
                              "total_minutes"))
        if self.batch_size < 1 or self.grad_accum < 1:
            raise ValueError("batch_size and grad_accum must be at least 1")
        check_at_least_one(self, ("max_steps", "max_length", "max_train_samples",
                                  "samples_per_task", "eval_max_tasks", "threads", "save_every"))
        check_device_name(self.device)
        check_folder_name(self.name, "name")
        stage_eval_config(self)

    def eval_config(self, **overrides: Any) -> EvalConfig:
        """The held-out evaluation settings, the same for GRPO and notebook 08 so results stored
        under ``RUN_DIR/eval/`` can be reused; ``None`` overrides are ignored."""
        return stage_eval_config(self, **overrides)


#: The SFT settings the paper states (3.1, A.3): what notebook 06 compares a run's settings with
#: (the cpu recipe's loss additions are off in the paper). It names no dtype, schedule or frozen
#: modules for SFT; the defaults of those are this project's choices.
PAPER_SFT = paper_settings(SFTConfig, (
    "base", "method", "learning_rate", "epochs", "batch_size", "grad_accum", "max_length",
    "warmup_ratio", "answer_weight", "init_markup_embeddings"))
