"""Settings shared by the stages: ``EvalConfig`` (SFT, GRPO and ``eval``), the training settings
SFT and GRPO share, range checks, and views of a run's settings against the paper's.

A stage's settings are a dataclass whose defaults are the paper's; ``vsearcher_lite/profiles/``
holds, per profile, every setting that differs, with the reason beside it, and
``for_profile(profile, **overrides)`` reads the stage's table there.
"""

from __future__ import annotations

import zlib
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from typing import Any

from vsearcher_lite.agent.loop import EpisodeLimits, Sampling, check_sampling
from vsearcher_lite.agent.protocol import SANDBOX_TODAY
from vsearcher_lite.options import option, positive
from vsearcher_lite.profiles import load_profile, with_overrides
from vsearcher_lite.runio import InputError
from vsearcher_lite.runtime import check_device_name, resolve_device


def check_at_least_one(config: Any, keys: tuple[str, ...]) -> None:
    """Raise ``ValueError`` naming the first of ``keys`` that is set and below 1."""
    for key in keys:
        value = getattr(config, key)
        if value is not None and value < 1:
            raise ValueError(f"{key} must be at least 1 (or unset), got {value}")


def check_positive(config: Any, keys: tuple[str, ...]) -> None:
    """Raise ``ValueError`` naming the first of ``keys`` that is set and not above 0."""
    for key in keys:
        value = getattr(config, key)
        if value is not None and value <= 0:
            raise ValueError(f"{key} must be positive, got {value}")


def check_choices(config: Any) -> None:
    """Raise ``ValueError`` naming the first field whose value is not one of its ``choices``."""
    for f in fields(config):
        value, choices = getattr(config, f.name), f.metadata.get("choices")
        if choices and value not in choices:
            raise ValueError(f"{f.name} must be one of {', '.join(choices)}, got {value!r}")


# ---------------------------------------------------------------------------------------------
# Evaluation settings (the eval command's, and the held-out evaluations of SFT and GRPO)

#: Settings that change what an episode produces; a resumed evaluation must use the same ones.
RESULT_SETTINGS = ("judge", "top_k", "prompt_variant", "today", "max_tool_calls",
                   "max_context_chars", "temperature", "top_p", "max_tokens", "seed",
                   "mistake_rate", "world")
#: Settings the evaluation takes from the profile's trajectories stage: a model is evaluated the
#: way its training data looked.
FROM_TRAJECTORIES = ("top_k", "wall_clock_s", "max_tokens", "concurrency")


@dataclass
class TrainingSettings:
    """What the training stages' settings (SFT and GRPO) share: the run settings and helpers."""

    device: str = "auto"  # auto (the GPU when there is one) | cpu | cuda, whatever the profile
    seed: int = 0
    world: str = "sandbox"
    progress: bool = True
    report_to: list[str] = field(default_factory=list)

    @property
    def use_cpu(self) -> bool:
        """Whether training runs on the CPU (``InputError`` for cuda without a GPU)."""
        return resolve_device(self.device).type == "cpu"

    def torch_dtype(self):
        import torch

        return getattr(torch, self.dtype)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["eval_difficulties"] = list(self.eval_difficulties) if self.eval_difficulties else None
        return d

    @classmethod
    def from_profile(cls, profile: str, overrides: dict[str, Any], table: str, stage: str,
                     eval_base: EvalConfig):
        """The profile's ``[table]`` with ``overrides``, its ``eval`` table laid over
        ``eval_base`` and this stage's run settings; checked."""
        settings = with_overrides(cls, profile, load_profile(profile).get(table, {}), overrides,
                                  stage)
        eval_table = settings.pop("eval")
        config = cls(**settings)
        config.eval = replace(eval_base, **run_settings(config), **eval_table)
        config.check()
        return config


@dataclass
class EvalConfig:
    """Settings of an evaluation run; a profile's preset is its ``[eval]`` table over its
    trajectories stage's tool and prompt settings."""

    judge: str = option("match", "match (sandbox default), llm (the chat endpoint from the "
                        "environment) or llm:<chat spec>")
    concurrency: int = option(2, "episodes run at once (threads; default: the profile's)",
                              type=positive)
    batch: int = option(1, "a local transformers model: episodes whose turns are generated "
                        "together (default: 16 on cpu, else 1; sampling at temperature > 0 is "
                        "reproducible only with 1)", type=positive)
    top_k: int = option(5, "results per search (default: the profile's)", type=positive)
    prompt_variant: str = option("full", "system prompt variant (default: the profile's)",
                                 "--prompt", choices=("full", "compact"))
    today: str | None = SANDBOX_TODAY  # None: the local date (live runs)
    max_tool_calls: int = option(30, "tool calls per episode (default: 30, as in the paper)")
    wall_clock_s: float | None = 2.5 * 3600  # per episode (paper A.3)
    max_context_chars: int | None = 800_000  # about the paper's 200K tokens
    temperature: float = option(0.6, "sampling temperature (default: 0 on cpu, 0.6 otherwise)")
    top_p: float = 0.95
    max_tokens: int = option(10_000, "new tokens per turn of a model (default: the profile's)",
                             type=positive)
    seed: int = 0
    mistake_rate: float = 0.1  # the heuristic teacher's (same as in trajectories)
    world: str = "sandbox"
    profile: str = "cpu"
    cache_mode: str = "readwrite"
    device: str = "auto"  # a local model's: auto (the GPU when there is one) | cpu | cuda
    keep_trajectories: bool = True  # store every trajectory in results.jsonl (for viewers)
    progress: bool = True

    @classmethod
    def for_profile(cls, profile: str = "cpu", **overrides: Any) -> EvalConfig:
        """The preset of ``profile`` with ``overrides`` applied (``None`` values are ignored)."""
        from vsearcher_lite.agent.protocol import prompt_variant_for

        settings = load_profile(profile)
        trajectories = settings.get("trajectories", {})
        preset = {"prompt_variant": prompt_variant_for(profile),
                  **{k: trajectories[k] for k in FROM_TRAJECTORIES if k in trajectories},
                  **settings.get("eval", {})}
        config = cls(**with_overrides(cls, profile, preset, overrides, "eval"))
        config.check()
        return config

    def check(self, prefix: str = "") -> None:
        """Raise ``InputError`` (one CLI line) naming the first setting out of range; ``prefix``
        names it as a stage's sub-config (``eval_``)."""
        try:
            check_sampling(self.temperature, self.top_p)
        except ValueError as exc:
            raise InputError(f"{exc} (--temperature)") from None
        if self.max_tool_calls < 0:
            raise InputError(f"{prefix}max_tool_calls (--max-tool-calls) must be >= 0, "
                             f"got {self.max_tool_calls}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise InputError(f"{prefix}max_tokens must be at least 1, got {self.max_tokens}")
        check_device_name(self.device)

    def limits(self, tools: bool = True, batched: bool = False) -> EpisodeLimits:
        """The episode limits; a batched policy's episodes have no wall clock (they wait for each
        other, which is not the policy's doing)."""
        return EpisodeLimits(max_tool_calls=self.max_tool_calls if tools else 0,
                             wall_clock_s=None if batched else self.wall_clock_s,
                             max_context_chars=self.max_context_chars)

    def sampling(self, task_id: str) -> Sampling:
        """Per-task sampling, seeded from the task id so results do not depend on thread order."""
        return Sampling(temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_tokens,
                        seed=task_seed(self.seed, task_id))

    def result_settings(self) -> dict:
        d = asdict(self)
        return {k: d[k] for k in RESULT_SETTINGS}

    def to_dict(self) -> dict:
        return asdict(self)


def task_seed(seed: int, task_id: str) -> int:
    """A sampling seed for one task: stable across runs and thread orders.

    >>> task_seed(0, "exam-0001") == task_seed(0, "exam-0001") != task_seed(1, "exam-0001")
    True
    """
    return (seed * 1_000_003 + zlib.crc32(str(task_id).encode("utf-8"))) % (2**31 - 1)


def run_settings(stage: Any) -> dict[str, Any]:
    """The settings a stage hands to the evaluation it embeds."""
    return {k: getattr(stage, k) for k in ("seed", "world", "device", "progress")}


def stage_eval_config(stage: Any, **overrides: Any) -> EvalConfig:
    """A stage's ``eval`` settings with its run settings and ``overrides`` (``None`` ignored)."""
    given = {k: v for k, v in overrides.items() if v is not None}
    config = replace(stage.eval, **{**run_settings(stage), "profile": stage.profile, **given})
    config.check("eval_")
    return config


# ---------------------------------------------------------------------------------------------
# A run's settings next to the paper's


def paper_settings(cls, names: tuple[str, ...]) -> dict[str, Any]:
    """The dataclass defaults of ``names``: the paper's settings, by field."""
    defaults = {f.name: f.default if f.default_factory is MISSING else f.default_factory()
                for f in fields(cls)}
    return {k: defaults[k] for k in names}


def paper_differences(settings: dict[str, Any], paper: dict[str, Any]) -> list[dict[str, Any]]:
    """``{"setting", "paper", "this run"}`` for each setting of ``paper`` that ``settings`` has
    with another value, in ``paper``'s order.

    >>> paper_differences({"learning_rate": 1e-3, "top_p": 1}, {"learning_rate": 1e-5, "top_p": 1})
    [{'setting': 'learning_rate', 'paper': 1e-05, 'this run': 0.001}]
    """
    def same(a: Any, b: Any) -> bool:
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
            return abs(a - b) <= 1e-12 * max(abs(a), abs(b), 1)
        return (list(a) if isinstance(a, tuple) else a) == (list(b) if isinstance(b, tuple) else b)

    return [{"setting": k, "paper": v, "this run": settings[k]} for k, v in paper.items()
            if k in settings and not same(settings[k], v)]


def settings_html(settings: dict[str, Any], paper: dict[str, Any], *,
                  title: str = "Settings") -> str:
    """Notebooks 06-08's view of a configuration: the settings that differ from the paper as a
    table, then every setting in a collapsed ``<details>``."""
    import html
    import json

    def cell(v: Any) -> str:
        plain = isinstance(v, (dict, list, tuple, bool)) or v is None
        return html.escape(json.dumps(v) if plain else str(v))

    rows = paper_differences(settings, paper)
    compared = len([k for k in paper if k in settings])
    body = "".join(f"<tr><td><code>{html.escape(r['setting'])}</code></td>"
                   f"<td>{cell(r['paper'])}</td><td><b>{cell(r['this run'])}</b></td></tr>"
                   for r in rows)
    head = "<tr><th>setting</th><th>paper</th><th>this run</th></tr>"
    table = (f"<table>{head}{body}</table>" if rows
             else "<p>every compared setting is the paper's</p>")
    everything = html.escape(json.dumps(settings, indent=1, default=str), quote=False)
    return (f"<div><b>{html.escape(title)}</b>: {len(rows)} of the {compared} settings compared "
            f"with the paper differ.{table}<details><summary>all {len(settings)} settings"
            f"</summary><pre>{everything}</pre></details></div>")
