"""Settings of the GRPO stage (paper 2.3, A.4): one dataclass whose defaults are the paper's;
``for_profile`` applies the profile's ``[grpo]`` table, checks the result and resolves what the
run would otherwise look up elsewhere (the rollouts' ``top_k`` and ``prompt_variant``, the
held-out evaluation's settings), so the run reads plain values. The held-out evaluation
(``eval``) is the SFT stage's, so its results can be reused.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from vsearcher_lite.agent.loop import check_sampling
from vsearcher_lite.agent.protocol import PROMPT_VARIANTS, prompt_variant_for
from vsearcher_lite.config import (
    EvalConfig,
    TrainingSettings,
    check_at_least_one,
    check_choices,
    check_positive,
    paper_settings,
    stage_eval_config,
)
from vsearcher_lite.options import option
from vsearcher_lite.rl.objective import AGGREGATIONS, FATAL_K, PAPER_SEARCH_PENALTY
from vsearcher_lite.runio import check_folder_name
from vsearcher_lite.runtime import check_device_name
from vsearcher_lite.synthesis.trajectories import TrajectoryConfig
from vsearcher_lite.training.config import DTYPES, LORA_TARGET_REGEX, METHODS, PAPER_BASE, SFTConfig

ENGINES = ("cpu", "trl")
CURRICULA = ("mix", "prescreen")
TASK_SOURCES = ("rl", "sft")
#: Paper A.4: easy : medium : hard = 4 : 3 : 3 in the RL data.
PAPER_MIX = {"easy": 4, "medium": 3, "hard": 3}
#: The CLI options of ``vsearcher-lite grpo``, by field (``options.add_config_options``).
CLI_OPTIONS = ("init", "engine", "method", "max_steps", "minutes", "total_minutes",
               "prompts_per_step", "generations", "learning_rate", "mu", "beta", "temperature",
               "max_tokens", "aggregation", "curriculum", "prescreen_samples", "prescreen_tasks",
               "difficulty_mix", "dynamic_sampling", "max_draw_rounds", "save_every",
               "checkpoint_every", "fatal_aware", "search_penalty", "use_vllm", "threads")
CLI_DATA_OPTIONS = ("task_source", "train_file", "eval_file", "eval_max_tasks", "eval_batch",
                    "name")


@dataclass
class GRPOConfig(TrainingSettings):
    """Everything ``run_grpo`` needs besides the run folder. Each step rolls out P tasks G times
    each; ``mu`` updates are made on each batch of P x G trajectories (on-policy when 1: the
    clipping only acts when it is more). Build it with ``for_profile``, changes as its
    overrides: what it resolves is not recomputed when a field is set afterwards."""

    profile: str = "cpu"
    name: str = option("grpo", "output folder RUN_DIR/<name> (default: grpo); the RL evaluation "
                       "is RUN_DIR/eval/rl")
    engine: str = option("trl", "cpu: this project's loop; trl: TRL's GRPOTrainer", choices=ENGINES)
    init: str | None = option(None, "starting checkpoint (default: RUN_DIR/sft/checkpoint)")
    method: str = option("full", "full fine-tune, LoRA or 4-bit QLoRA (trl engine)",
                         choices=METHODS)
    dtype: str = field(default="bfloat16", metadata={"choices": DTYPES})
    # the batch
    prompts_per_step: int = option(32, "tasks per step (P)", "--prompts")
    generations: int = option(8, "rollouts per task (G)")
    max_steps: int | None = option(100, "stop after this many GRPO steps", "--steps")
    minutes: float | None = option(None, "stop training after this many minutes (cpu: 3)")
    total_minutes: float | None = option(None, "cpu engine: budget of the whole command; "
                                         "training gets what the evaluations leave (cpu: 5.5)")
    micro_batch_size: int = 4  # trajectories per forward/backward pass (accumulated in a step)
    rollout_batch: int | None = None  # episodes generated together; None: all P x G of a step
    # optimisation (constant learning rate, AdamW)
    learning_rate: float = option(2e-6, "learning rate (constant)", "--lr")
    adam_beta1: float = 0.9
    adam_beta2: float = 0.99
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    mu: int = option(1, "updates per batch of rollouts (GRPO's mu, TRL's num_iterations)")
    clip_low: float = 0.2
    clip_high: float = 0.2
    beta: float = option(0.0, "k3 KL coefficient to the starting model (0 disables it, as in the "
                         "paper)")
    aggregation: str = option("token", "loss mean over tokens (default) or per sequence",
                              choices=AGGREGATIONS)
    scale_rewards: bool = True  # divide by the group's std (Dr. GRPO would not)
    drop_zero_variance: bool = True
    dynamic_sampling: bool = option(False, "cpu engine, DAPO: drop groups whose rewards are all "
                                    "equal and draw more tasks until the step has P groups with "
                                    "reward variance (cpu default: on)")
    max_draw_rounds: int = option(4, "with dynamic sampling: rollout rounds of P tasks per step "
                                  "at most (default: 4; cpu: 2)")
    # reward and masking options
    search_penalty: float | None = option(None, "MMSearch-R1: scale a correct answer that "
                                          "searched (0.9 when given without a value)",
                                          const=PAPER_SEARCH_PENALTY)
    fatal_aware: bool = option(False, "OpenSearch-VL: mask from the fatal step on, clamp A >= 0")
    fatal_k: int = FATAL_K
    # rollouts (paper A.3, A.4)
    temperature: float = option(0.6, "rollout sampling temperature")
    top_p: float = 0.9
    max_tokens: int = option(10_000, "new tokens per assistant turn in the rollouts (default: "
                             "the profile's)")
    max_tool_calls: int = 30
    # about A.4's model length of 2K + 28K tokens at 4 characters a token: an episode past it ends
    # (context_exceeded) before TRL runs a forward pass over it (the teacher's 200K is A.3's)
    max_context_chars: int | None = 120_000
    wall_clock_s: float | None = 2.5 * 3600  # per trajectory
    max_prompt_tokens: int | None = 2048  # 2K prompt
    max_response_tokens: int | None = 28_672  # 28K response
    judge: str = "match"
    top_k: int | None = None  # search results per call; for_profile: the trajectories stage's
    prompt_variant: str | None = None  # the rollouts' system prompt; for_profile: the profile's
    # training data
    task_source: str = option("rl", "training tasks: rl, the filter stage's RL pool "
                              "RUN_DIR/filter/rl_tasks.jsonl (default), on seeds SFT never saw; "
                              "sft, SFT's own RUN_DIR/filter/train.jsonl", choices=TASK_SOURCES)
    train_file: str | None = option(None, "training tasks from this file instead (overrides "
                                    "--task-source)")
    difficulty_mix: dict = field(default_factory=lambda: dict(PAPER_MIX), metadata={
        "help": "difficulty mix of training tasks, e.g. easy:4,medium:3,hard:3",
        "flags": ("--mix",)})
    curriculum: str = option("mix", "task choice: difficulty mix; or prescreen: sample a few "
                             "episodes of some tasks once with the start policy and train on "
                             "those it solves sometimes but not always", choices=CURRICULA)
    prescreen_samples: int = option(4, "with --curriculum prescreen: episodes per task")
    prescreen_tasks: int | None = option(64, "with --curriculum prescreen: tasks screened "
                                                "(none: the whole pool)")
    max_train_tasks: int | None = None
    # evaluation (SFT and RL on the same held-out tasks, same greedy settings)
    evaluate: bool = True
    eval_file: str | None = option(None, "held-out tasks (default: RUN_DIR/filter/heldout.jsonl)")
    eval_max_tasks: int | None = option(None, "evaluate on at most this many held-out tasks",
                                        "--eval-tasks")
    eval_difficulties: tuple[str, ...] | None = None
    eval_batch: int = option(16, "held-out episodes generated together")
    reuse_sft_eval: bool = True  # reuse eval/sft when its settings match and a re-run check agrees
    reuse_check_tasks: int = 4
    # the SFT stage's, then [grpo.eval]; for_profile: as the run evaluates (``heldout_eval``)
    eval: EvalConfig = field(default_factory=EvalConfig)
    # LoRA / QLoRA (single_gpu)
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    lora_target: str = LORA_TARGET_REGEX
    # runtime
    use_vllm: bool = option(True, "trl engine: generate the rollouts with vLLM (the vllm "
                            "package); --no-vllm decodes with the training model", "--vllm")
    vllm_mode: str = "colocate"
    # colocated vLLM: the share of GPU memory its weights and KV cache take (TRL's default); the
    # training model, its gradients and optimizer state need the rest
    vllm_gpu_memory_utilization: float = 0.3
    gradient_checkpointing: bool = True
    threads: int | None = option(None, "torch threads (cpu default: 2; 1 when another torch job "
                                 "shares the cores)")
    save_every: int | None = option(None, "cpu engine: save the training state every this many "
                                    "steps; rerunning the same command after an interruption "
                                    "resumes from it")
    checkpoint_every: int | None = option(None, "cpu engine: also keep the model every this many "
                                          "steps as checkpoint-stepN, to evaluate it along "
                                          "training")

    @classmethod
    def for_profile(cls, profile: str = "cpu", **overrides: Any) -> GRPOConfig:
        """Like ``SFTConfig.for_profile``; the evaluation starts from the SFT stage's. Resolved
        here, so that the run reads no other stage's settings and no profile: the rollouts'
        ``top_k`` unless given is the trajectories stage's (the tools as the SFT data showed
        them), their ``prompt_variant`` the profile's, and ``eval`` the held-out evaluation's
        settings as the run uses them (``heldout_eval``)."""
        sft_eval = SFTConfig.for_profile(profile).eval
        config = cls.from_profile(profile, overrides, "grpo", "GRPO", sft_eval)
        if config.top_k is None:
            config.top_k = TrajectoryConfig.for_profile(profile).top_k
        if config.prompt_variant is None:
            config.prompt_variant = prompt_variant_for(profile)
        config.eval = config.heldout_eval()
        return config

    def check(self) -> None:
        """Raise ``ValueError`` naming the first setting out of range."""
        check_choices(self)
        check_positive(self, ("learning_rate", "minutes", "total_minutes"))
        if self.prescreen_samples < 2 or (self.prescreen_tasks is not None
                                          and self.prescreen_tasks < 1):
            raise ValueError("prescreen_samples must be at least 2 and prescreen_tasks at least 1")
        if self.generations < 2:
            raise ValueError(f"generations must be at least 2 (a group needs a baseline), "
                             f"got {self.generations}")
        if min(self.mu, self.micro_batch_size, self.eval_batch, self.rollout_batch or 1) < 1:
            raise ValueError("mu, micro_batch_size, rollout_batch and eval_batch must be at "
                             "least 1")
        if self.beta < 0:
            raise ValueError(f"beta must be >= 0, got {self.beta}")
        if not (0 <= self.clip_low < 1) or self.clip_high < 0:
            raise ValueError("clip_low must be in [0, 1) and clip_high >= 0")
        if self.prompt_variant not in (None, *PROMPT_VARIANTS):
            raise ValueError(f"prompt_variant must be one of {', '.join(PROMPT_VARIANTS)}, got "
                             f"{self.prompt_variant!r}")
        if self.search_penalty is not None and not (0 < self.search_penalty <= 1):
            raise ValueError(f"search_penalty must be in (0, 1], got {self.search_penalty}")
        if self.max_steps is None and self.minutes is None:
            raise ValueError("give max_steps or minutes (or both): training needs an end")
        weights = self.difficulty_mix.values() if self.difficulty_mix else ()
        if any(v < 0 for v in weights) or not any(weights):
            raise ValueError(f"difficulty_mix needs a positive weight, got {self.difficulty_mix}")
        if self.engine == "cpu" and self.method != "full":
            raise ValueError("the cpu engine trains the full model; LoRA / QLoRA go through "
                             "engine='trl'")
        check_sampling(self.temperature, self.top_p)
        check_at_least_one(self, ("max_draw_rounds", "prompts_per_step", "fatal_k", "max_steps",
                                  "eval_max_tasks", "threads", "max_tokens", "save_every",
                                  "checkpoint_every"))
        check_device_name(self.device)
        check_folder_name(self.name, "name")
        stage_eval_config(self)

    @property
    def base(self) -> str | None:
        """The model folder to load (``training.sft.load_model`` reads ``config.base``)."""
        return self.init

    @property
    def batch_trajectories(self) -> int:
        return self.prompts_per_step * self.generations

    def heldout_eval(self) -> EvalConfig:
        """The held-out evaluation settings: ``eval`` with this stage's run settings,
        ``eval_batch`` episodes at once and, being batched, no per-episode wall clock."""
        return replace(stage_eval_config(self), wall_clock_s=1e9, concurrency=self.eval_batch)

    def eval_config(self) -> EvalConfig:
        """The held-out evaluation settings as ``for_profile`` resolved them."""
        return self.eval


#: The paper's GRPO settings (A.4): what notebook 07 compares a run's settings with.
PAPER_DEFAULTS = {
    **paper_settings(GRPOConfig, ("prompts_per_step", "generations", "learning_rate",
                                  "temperature", "top_p", "max_tool_calls", "max_prompt_tokens",
                                  "max_response_tokens", "beta", "difficulty_mix")),
    "search_penalty_when_enabled": PAPER_SEARCH_PENALTY, "base": PAPER_BASE,
}
