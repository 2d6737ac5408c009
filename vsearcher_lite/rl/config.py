"""Settings of the GRPO stage: one dataclass, three profile presets.

``GRPOConfig.for_profile(profile, **overrides)``:

=============  ================================================================================
``cpu``        the project's own engine (``trainer.py``, a plain PyTorch loop) on the tiny model
               from ``RUN_DIR/sft/checkpoint``: full fine-tune, fp32, two torch threads; the whole
               command, held-out evaluations included, budgeted at 5.5 minutes on 2 cores
               (``total_minutes``: the SFT model is evaluated first, and training gets what is
               left after the RL evaluation still to come, at most ``minutes`` = 3); constant lr,
               temperature 0.8, k3 KL 0.02 to the SFT model, zero-variance groups dropped, and
               two updates per batch so that the clipping acts; dynamic sampling (2 rounds at most);
               tasks from the RL pool in the mix one-hop : easy : medium = 2 : 2 : 1; episodes with the SFT evaluation's
               limits (200 new tokens per turn, 10 tool calls, 13,000 context characters).
``single_gpu`` TRL's ``GRPOTrainer`` (``trl_engine.py``) with LoRA in bf16 through PEFT
               (``method="qlora"``: the base in 4-bit NF4), the paper's A.4 settings below.
``multi_gpu``  the same engine, full bf16 fine-tune under ``accelerate launch``, generation with
               vLLM as TRL supports it (``use_vllm``; colocated), the paper's settings: 32 prompts
               x 8 rollouts per step, lr 2e-6, temperature 0.6, top_p 0.9, 30 tool calls, 2K prompt /
               28K response tokens, KL disabled, easy:medium:hard 4:3:3 (paper 3.1 and A.4).
=============  ================================================================================

Every profile runs on ``device`` (``auto``, the default, is the GPU when torch sees one): the cpu
engine runs its rollouts, log-probabilities and updates there too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from vsearcher_lite.rl.objective import AGGREGATIONS, FATAL_K, PAPER_SEARCH_PENALTY
from vsearcher_lite.runio import check_folder_name
from vsearcher_lite.runtime import check_device_name, resolve_device
from vsearcher_lite.training.config import (
    LORA_TARGET_REGEX,
    PAPER_BASE,
    check_at_least_one,
    check_sampling,
    with_overrides,
)

ENGINES = ("cpu", "trl")
METHODS = ("full", "lora", "qlora")
DTYPES = ("float32", "bfloat16", "float16")
CURRICULA = ("mix", "variance", "prescreen")
TASK_SOURCES = ("rl", "sft")
#: Paper A.4: easy : medium : hard = 4 : 3 : 3 in the RL data.
PAPER_MIX = {"easy": 4, "medium": 3, "hard": 3}


@dataclass
class GRPOConfig:
    """Everything ``run_grpo`` needs besides the run folder.

    ``prompts_per_step`` (P) tasks are drawn per step and each is rolled out
    ``generations`` (G) times; ``mu`` optimizer updates are made on each batch of P x G
    trajectories (on-policy when 1; the clipping only acts when it is more). ``minutes`` caps
    training by wall clock; ``total_minutes`` (cpu engine) caps the whole command, evaluations
    included, by shortening training.

    ``task_source`` picks the training tasks: ``rl`` (default) the filter stage's RL pool
    ``RUN_DIR/filter/rl_tasks.jsonl``, on seeds no SFT task uses; ``sft`` SFT's own
    ``RUN_DIR/filter/train.jsonl`` (memorised by the SFT model: most groups then have equal rewards);
    ``train_file`` overrides both. ``dynamic_sampling`` (cpu engine; DAPO): groups whose rewards are all
    equal carry no gradient, so they are dropped and more tasks are drawn, P at a time, until the step
    has P groups with reward variance or ``max_draw_rounds`` rollout rounds have run (a step always
    ends; it then trains on the groups it has). On in the cpu preset.
    """

    profile: str = "cpu"
    name: str = "grpo"  # the stage folder RUN_DIR/<name>; the RL evaluation is RUN_DIR/eval/rl
    engine: str = "cpu"  # cpu (trainer.py) | trl (trl_engine.py)
    init: str | None = None  # starting checkpoint; None: RUN_DIR/sft/checkpoint
    method: str = "full"  # full | lora | qlora
    dtype: str = "float32"
    # the batch
    prompts_per_step: int = 4
    generations: int = 4
    max_steps: int | None = 20
    minutes: float | None = None  # wall-clock cap on training
    total_minutes: float | None = None  # cpu engine: the whole command's budget; training gets what the evaluations leave
    micro_batch_size: int = 4  # trajectories per forward/backward pass (gradient accumulation inside a step)
    rollout_batch: int | None = None  # episodes generated together; None: all P x G of a step
    # optimisation (constant learning rate, AdamW)
    learning_rate: float = 3e-5
    adam_beta1: float = 0.9
    adam_beta2: float = 0.99
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    mu: int = 1  # updates per batch (GRPO's mu; TRL's num_iterations)
    clip_low: float = 0.2
    clip_high: float = 0.2
    beta: float = 0.0  # KL coefficient; paper A.4 disables it
    aggregation: str = "token"  # token (DAPO / TRL "dapo") | sequence (GRPO's per-sequence mean)
    scale_rewards: bool = True  # divide by the group's std (Dr. GRPO would not)
    drop_zero_variance: bool = True
    dynamic_sampling: bool = False  # cpu engine: redraw until P groups have reward variance (DAPO)
    max_draw_rounds: int = 4  # rollout rounds of P groups per step at most, with dynamic sampling
    # reward and masking options
    search_penalty: float | None = None  # MMSearch-R1: 0.9 when enabled
    fatal_aware: bool = False  # OpenSearch-VL fatal-aware masking and one-sided clamp
    fatal_k: int = FATAL_K
    # rollouts
    temperature: float = 0.6  # paper A.4
    top_p: float = 0.9  # paper A.4
    max_tokens: int = 10_000  # new tokens per assistant turn (paper A.3)
    max_tool_calls: int = 30  # paper A.4
    max_context_chars: int | None = 800_000
    wall_clock_s: float | None = 2.5 * 3600  # per trajectory (paper A.4)
    max_prompt_tokens: int | None = 2048  # paper A.4: 2K prompt
    max_response_tokens: int | None = 28_672  # paper A.4: 28K response
    judge: str = "match"
    top_k: int | None = None  # search results per call; None: the trajectories stage's (cpu 3, else 5)
    # training data
    task_source: str = "rl"  # rl: RUN_DIR/filter/rl_tasks.jsonl (the RL pool) | sft: RUN_DIR/filter/train.jsonl
    train_file: str | None = None  # overrides task_source
    difficulty_mix: dict = field(default_factory=lambda: dict(PAPER_MIX))
    curriculum: str = "mix"  # mix: draw by difficulty_mix | variance: prefer tasks whose success rate is near 1/2
    # | prescreen (cpu engine): sample prescreen_samples episodes of prescreen_tasks candidates once with the
    # start policy, then train on those solved sometimes but not always
    prescreen_samples: int = 4
    prescreen_tasks: int = 64
    max_train_tasks: int | None = None
    # evaluation (SFT and RL on the same held-out tasks, same greedy settings)
    evaluate: bool = True
    eval_file: str | None = None  # default: RUN_DIR/filter/heldout.jsonl
    eval_max_tasks: int | None = None  # None: every held-out task of eval_difficulties
    eval_difficulties: tuple[str, ...] | None = None
    eval_batch: int = 32  # episodes generated together in one batched forward pass
    reuse_sft_eval: bool = True  # reuse eval/sft when its settings match and a re-run check agrees
    reuse_check_tasks: int = 4
    eval_max_tokens: int | None = None  # None: the SFT stage's (so its evaluation can be reused)
    eval_max_tool_calls: int | None = None
    eval_max_context_chars: int | None = None
    # LoRA / QLoRA (single_gpu)
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    lora_target: str = LORA_TARGET_REGEX
    # runtime
    use_vllm: bool = False
    vllm_mode: str = "colocate"
    gradient_checkpointing: bool = False
    threads: int | None = None
    device: str = "auto"  # auto (the GPU when there is one) | cpu | cuda, whatever the profile
    # cpu engine: save the training state every this many steps (RUN_DIR/<name>/resume.pt); the same
    # command resumes an interrupted run from it (None: no saves)
    save_every: int | None = None
    seed: int = 0
    world: str = "sandbox"
    progress: bool = True
    report_to: list[str] = field(default_factory=list)

    @classmethod
    def for_profile(cls, profile: str = "cpu", **overrides: Any) -> "GRPOConfig":
        """The preset of ``profile`` with ``overrides`` applied (``None`` values are ignored)."""
        from vsearcher_lite.training.config import SFTConfig

        if profile == "cpu":
            sft = SFTConfig.for_profile("cpu")
            preset: dict[str, Any] = dict(
                engine="cpu", method="full", dtype="float32", prompts_per_step=4, generations=8, max_steps=200,
                minutes=3.0, total_minutes=5.5, micro_batch_size=4, learning_rate=5e-5, mu=2, beta=0.02, temperature=0.8, top_p=1.0,
                max_tokens=sft.eval_max_tokens, max_tool_calls=sft.eval_max_tool_calls,
                max_context_chars=sft.eval_max_context_chars, wall_clock_s=None,
                # the tiny model's positions end at 2,048: prompt + response must fit
                max_prompt_tokens=512, max_response_tokens=1536,
                # a 2-core rollout round of 32 episodes takes 40-180 s: at most one extra round per step
                dynamic_sampling=True, max_draw_rounds=2,
                # the levels where the tiny SFT model answers unseen tasks sometimes but not always (held-out
                # Pass@1 of a converged SFT model: one-hop 0.55, easy 0.23, medium 0.02), so that groups have
                # reward variance: one-hop and easy alike, medium a fifth (its groups are mostly all-zero)
                difficulty_mix={"onehop": 2, "easy": 2, "medium": 1}, eval_difficulties=sft.eval_difficulties, eval_max_tasks=sft.eval_max_tasks,
                eval_batch=16,  # as the evaluation's cpu preset (memory)
                # 32 episodes' turns generated in two calls of 16 rows (less transient prefill memory;
                # see runtime.py for the rest of the memory story)
                rollout_batch=16,
                threads=2)
        elif profile == "single_gpu":
            preset = dict(
                engine="trl", init=None, method="lora", dtype="bfloat16", prompts_per_step=32, generations=8,
                max_steps=100, micro_batch_size=8, learning_rate=2e-6, beta=0.0, temperature=0.6, top_p=0.9,
                max_tokens=10_000, max_tool_calls=30, max_prompt_tokens=2048, max_response_tokens=28_672,
                gradient_checkpointing=True, rollout_batch=16, eval_batch=16)
        elif profile == "multi_gpu":
            preset = dict(
                engine="trl", init=None, method="full", dtype="bfloat16", prompts_per_step=32, generations=8,
                max_steps=100, micro_batch_size=4, learning_rate=2e-6, beta=0.0, temperature=0.6, top_p=0.9,
                max_tokens=10_000, max_tool_calls=30, max_prompt_tokens=2048, max_response_tokens=28_672,
                gradient_checkpointing=True, use_vllm=True, eval_batch=16)
        else:
            raise ValueError(f"unknown profile {profile!r}; choose cpu, single_gpu or multi_gpu")
        preset = with_overrides(cls, profile, preset, overrides, "GRPO")
        if isinstance(preset.get("eval_difficulties"), list):
            preset["eval_difficulties"] = tuple(preset["eval_difficulties"])
        config = cls(**preset)
        config.check()
        return config

    def check(self) -> None:
        """Raise ``ValueError`` naming the first setting out of range."""
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {', '.join(AGGREGATIONS)}, got {self.aggregation!r}")
        if self.task_source not in TASK_SOURCES:
            raise ValueError(f"task_source must be one of {', '.join(TASK_SOURCES)}, got {self.task_source!r}")
        if self.prescreen_samples < 2 or self.prescreen_tasks < 1:
            raise ValueError("prescreen_samples must be at least 2 and prescreen_tasks at least 1")
        if self.max_draw_rounds < 1:
            raise ValueError(f"max_draw_rounds must be at least 1, got {self.max_draw_rounds}")
        if self.curriculum not in CURRICULA:
            raise ValueError(f"curriculum must be one of {', '.join(CURRICULA)}, got {self.curriculum!r}")
        if self.prompts_per_step < 1:
            raise ValueError(f"prompts_per_step must be at least 1, got {self.prompts_per_step}")
        if self.generations < 2:
            raise ValueError(f"generations must be at least 2 (a group needs a baseline), got {self.generations}")
        if self.mu < 1 or self.micro_batch_size < 1 or self.eval_batch < 1 or (self.rollout_batch or 1) < 1:
            raise ValueError("mu, micro_batch_size, rollout_batch and eval_batch must be at least 1")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be positive, got {self.learning_rate}")
        if self.beta < 0:
            raise ValueError(f"beta must be >= 0, got {self.beta}")
        if not (0 <= self.clip_low < 1) or self.clip_high < 0:
            raise ValueError("clip_low must be in [0, 1) and clip_high >= 0")
        if self.search_penalty is not None and not (0 < self.search_penalty <= 1):
            raise ValueError(f"search_penalty must be in (0, 1], got {self.search_penalty}")
        if self.fatal_k < 1:
            raise ValueError(f"fatal_k must be at least 1, got {self.fatal_k}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {self.max_steps}")
        if self.minutes is not None and self.minutes <= 0:
            raise ValueError(f"minutes must be positive, got {self.minutes}")
        if self.total_minutes is not None and self.total_minutes <= 0:
            raise ValueError(f"total_minutes must be positive, got {self.total_minutes}")
        if self.max_steps is None and self.minutes is None:
            raise ValueError("give max_steps or minutes (or both): training needs an end")
        if not self.difficulty_mix or any(v < 0 for v in self.difficulty_mix.values()) or not any(self.difficulty_mix.values()):
            raise ValueError(f"difficulty_mix needs a positive weight, got {self.difficulty_mix}")
        if self.engine == "cpu" and self.method != "full":
            raise ValueError("the cpu engine trains the full model; LoRA / QLoRA go through engine='trl'")
        check_sampling(self.temperature, self.top_p)
        check_at_least_one(self, ("eval_max_tasks", "threads", "max_tokens", "save_every"))
        check_device_name(self.device)
        check_folder_name(self.name, "name")

    def torch_dtype(self):
        import torch

        return getattr(torch, self.dtype)

    @property
    def use_cpu(self) -> bool:
        """Whether training runs on the CPU (``device`` resolved; ``InputError`` for cuda without a GPU)."""
        return resolve_device(self.device).type == "cpu"

    @property
    def base(self) -> str | None:
        """The model folder to load (``training.sft.load_model`` reads ``config.base``)."""
        return self.init

    @property
    def batch_trajectories(self) -> int:
        return self.prompts_per_step * self.generations

    def to_dict(self) -> dict:
        d = asdict(self)
        d["eval_difficulties"] = list(self.eval_difficulties) if self.eval_difficulties else None
        return d


PAPER_DEFAULTS = {
    "prompts_per_step": 32, "generations": 8, "learning_rate": 2e-6, "temperature": 0.6, "top_p": 0.9,
    "max_tool_calls": 30, "max_prompt_tokens": 2048, "max_response_tokens": 28_672, "beta": 0.0,
    "difficulty_mix": PAPER_MIX, "search_penalty_when_enabled": PAPER_SEARCH_PENALTY, "base": PAPER_BASE,
}
