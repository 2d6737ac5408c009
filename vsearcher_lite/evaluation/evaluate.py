"""Stage `eval`: any policy through the ReAct loop on a benchmark, judged (paper 2.4, 3.2, 4; fig. 4).

``evaluate(run_dir, tasks, policy, *, judge, toolbox, concurrency, name) -> metrics`` runs one
episode per task (``agent.loop.run_episode``: the same system prompt, tools and strict format
check as the teacher, SFT and GRPO), judges the final answer, and reports Pass@1 (the share of
tasks answered correctly in one attempt, the paper's metric), accuracy per difficulty and per
split, mean tool calls by type, termination reasons and time per task.

Two times are recorded. ``seconds_per_task`` is each episode's latency, from its start to its
judged answer; episodes run concurrently (a batched model answers 16 at a time), so it includes
the time an episode waits for the others of its batch and is not a cost. ``wall_seconds_per_task``
is the cost: the evaluation's wall time divided by the tasks it ran (``wall_timed_tasks``).

Policies (``make_policy(spec)``), all of them ``ChatBackend``s in the loop:

- ``teacher`` (or ``heuristic``): the sandbox's heuristic teacher, one per task;
- ``base``: the shipped tiny base model (``data/tiny_base``) as a local transformers policy;
- a chat spec for ``make_chat``: ``openai:<model>@<base_url>``, ``transformers:<path or hub id>``,
  or just the path of a saved checkpoint folder;
- ``direct`` / ``direct:<spec>``: the no-tools ablation of a policy (default: the base model).
  The policy is shown a system prompt without tools that asks for a direct answer, and the
  episode allows no tool call (a call ends it with ``max_tool_calls``).

Runs are bounded in concurrency (threads), resumable and cached:

- ``RUN_DIR/eval/<name>/results.jsonl`` is an append-only log keyed by task id; a rerun skips the
  tasks already done (a task whose question or answer changed since, or whose episode ended on a
  policy error such as an unreachable server, is run again);
- ``config.json`` there records what the results were produced with; rerunning the same name
  with another policy, judge or sampling is refused (use another ``--name``, or ``fresh=True``);
- every tool call goes through the run's tool cache (``RUN_DIR/cache/tools.sqlite``).

Outputs: ``RUN_DIR/eval/<name>/results.jsonl``, ``results.csv`` (one row per task, for plots),
``metrics.json``; ``RUN_DIR/eval/metrics.json`` (one entry per evaluated policy name, the table
behind the paper's table 1 / figure 4) and ``RUN_DIR/eval/table.csv``.

Deviations from the paper on the cpu profile: greedy decoding (temperature 0) for the tiny model,
top-3 search results and the compact prompt (what it was trained with), a 2-minute wall-clock
budget per episode, and the offline match judge instead of an LLM judge.
"""

from __future__ import annotations

import csv
import hashlib
import io
import statistics
import threading
import time
import zlib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable

from vsearcher_lite.agent.judge import Judge, make_judge
from vsearcher_lite.agent.loop import (
    TERMINATIONS,
    TRANSIENT_TERMINATIONS,
    EpisodeLimits,
    Sampling,
    Trajectory,
    run_episode,
)
from vsearcher_lite.agent.protocol import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    SANDBOX_TODAY,
    THINK_CLOSE,
    THINK_OPEN,
    prompt_variant_for,
    resolve_today,
)
from vsearcher_lite.chat import ChatBackend, usage_of
from vsearcher_lite.net.secrets import redact
from vsearcher_lite.runio import (
    InputError,
    JsonlLog,
    RunDir,
    atomic_write_json,
    atomic_write_text,
    check_folder_name,
    read_json,
)
from vsearcher_lite.runtime import check_device_name, resolve_device
from vsearcher_lite.synthesis.task import Task, in_level_order
from vsearcher_lite.training.config import check_sampling

STAGE = "eval"
TOOL_NAMES = ("text_search", "image_search", "visit")
NO_TURN = "no_turn"  # the format error of an episode whose policy wrote no turn at all
# Settings that change what an episode produces; a resumed run must use the same ones.
RESULT_SETTINGS = ("judge", "top_k", "prompt_variant", "today", "max_tool_calls", "max_context_chars",
                   "temperature", "top_p", "max_tokens", "repeat_guard", "seed", "mistake_rate", "world")


# ---------------------------------------------------------------------------------------------
# Settings


@dataclass
class EvalConfig:
    """Settings of an evaluation run; ``for_profile`` gives each profile's preset.

    The cpu preset takes the trajectories stage's tool and prompt settings (top-3 results, the
    compact prompt, short episodes), so a model is evaluated the way its training data looked.
    """

    judge: str = "match"  # "match", "llm" (the chat endpoint from the environment) or "llm:<chat spec>"
    concurrency: int = 2
    batch: int = 1  # a local transformers model: episodes whose turns are generated together (1: one at a time)
    top_k: int = 5
    prompt_variant: str = "full"
    today: str | None = SANDBOX_TODAY  # None: the local date (live runs)
    max_tool_calls: int = 30  # paper A.3
    wall_clock_s: float | None = 2.5 * 3600  # paper A.3
    max_context_chars: int | None = 800_000  # about the paper's 200K tokens
    temperature: float = 0.6  # paper A.3 / A.4 rollouts
    top_p: float = 0.95
    max_tokens: int = 10_000
    # a local model: never write the same block of this many or more tokens twice in a row within a reply
    # (chat.repeat_ban); 0 = off
    repeat_guard: int = 0
    seed: int = 0
    mistake_rate: float = 0.1  # the heuristic teacher's (same as in trajectories)
    world: str = "sandbox"
    profile: str = "cpu"
    cache_mode: str = "readwrite"
    device: str = "auto"  # a local model's: auto (the GPU when there is one) | cpu | cuda
    keep_trajectories: bool = True  # store every trajectory in results.jsonl (for viewers)
    progress: bool = True

    @classmethod
    def for_profile(cls, profile: str = "cpu", **overrides: Any) -> "EvalConfig":
        from vsearcher_lite.agent.trajectories import TrajectoryConfig

        traj = TrajectoryConfig.for_profile(profile)
        preset: dict[str, Any] = {
            "profile": profile,
            "prompt_variant": prompt_variant_for(profile),
            "top_k": traj.top_k,
            "wall_clock_s": traj.wall_clock_s,
            "max_tokens": traj.max_tokens,
            "concurrency": traj.concurrency,
        }
        if profile == "cpu":
            preset["temperature"] = 0.0  # the tiny model is evaluated greedily
            # Up to 16 episodes' turns in one generate call: about 2.4x faster than one at a time with
            # the same answers, while 32 rows of long prompts took a kernel past 4 GB
            # (benchmarks/eval_batching.py; numbers in docs/results.md).
            preset["batch"] = 16
        preset.update({k: v for k, v in overrides.items() if v is not None})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(preset) - known)
        if unknown:
            raise TypeError(f"unknown eval setting(s): {', '.join(unknown)}")
        config = cls(**preset)
        config.check()
        return config

    def check(self) -> None:
        """Raise ``InputError`` (a ``ValueError``) naming the first setting out of range (``evaluate``
        calls it too), so the CLI reports it in one line."""
        try:
            check_sampling(self.temperature, self.top_p)
        except ValueError as exc:
            raise InputError(f"{exc} (--temperature)") from None
        if self.max_tool_calls < 0:
            raise InputError(f"max_tool_calls (--max-tool-calls) must be >= 0, got {self.max_tool_calls}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise InputError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.repeat_guard < 0:
            raise InputError(f"repeat_guard (--repeat-guard) must be >= 0, got {self.repeat_guard}")
        check_device_name(self.device)

    def limits(self, tools: bool = True, batched: bool = False) -> EpisodeLimits:
        """The episode limits; a batched policy's episodes have no wall clock (they wait for each other,
        which is not the policy's doing: turns and tokens still bound them)."""
        return EpisodeLimits(max_tool_calls=self.max_tool_calls if tools else 0,
                             wall_clock_s=None if batched else self.wall_clock_s,
                             max_context_chars=self.max_context_chars)

    def sampling(self, task_id: str) -> Sampling:
        """Per-task sampling, seeded from the task id so results do not depend on thread order."""
        return Sampling(temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_tokens,
                        seed=task_seed(self.seed, task_id),
                        extra={"repeat_guard": self.repeat_guard} if self.repeat_guard else {})

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


# ---------------------------------------------------------------------------------------------
# Policies


DIRECT_PROMPT_FULL = (
    "You answer questions about an image and the world from what you already know. In this setting "
    "you have no tools: you cannot search or open pages, so do not ask for them.\n"
    f"Reply with your short reasoning inside {THINK_OPEN}{THINK_CLOSE}, then your final answer inside "
    f"{ANSWER_OPEN}{ANSWER_CLOSE}: only the answer itself, a name, a number or a short phrase. If you are "
    "unsure, give your best guess.\n"
    "Today's date: {today}"
)
DIRECT_PROMPT_COMPACT = (
    f"You are a search agent without tools. Reply with {THINK_OPEN}...{THINK_CLOSE} then "
    f"{ANSWER_OPEN}...{ANSWER_CLOSE}. Date: {{today}}"
)


def direct_system_prompt(today: str | None, variant: str = "full") -> str:
    """The no-tools ablation's system prompt (the tools and their workflow left out)."""
    template = DIRECT_PROMPT_COMPACT if variant == "compact" else DIRECT_PROMPT_FULL
    return template.replace("{today}", resolve_today(today))


class DirectAnswerPolicy(ChatBackend):
    """The no-tools ablation of a policy: its system message is replaced by a prompt without tools.

    The episode it runs in allows no tool call (``EvalConfig.limits(tools=False)``), so a tool
    call ends it with ``max_tool_calls`` and no answer.
    """

    def __init__(self, inner: ChatBackend, *, today: str | None = SANDBOX_TODAY, variant: str = "full"):
        self.inner = inner
        self.system = direct_system_prompt(today, variant)
        self.name = f"direct({getattr(inner, 'name', type(inner).__name__)})"

    @property
    def usage(self) -> dict:
        return usage_of(self.inner)

    def chat(self, messages: list[dict], **sampling: Any) -> str:
        rest = [m for m in messages if m.get("role") != "system"]
        return self.inner.chat([{"role": "system", "content": self.system}, *rest], **sampling)


@dataclass
class Policy:
    """What ``evaluate`` runs: a name for tables, the spec it came from, and a backend per task."""

    name: str
    spec: str
    for_task: Callable[[Task], ChatBackend] = field(repr=False)
    tools: bool = True  # False: the direct-answer ablation
    shared: ChatBackend | None = field(default=None, repr=False)  # the one backend, when one serves every task
    batch: int = 1  # > 1: the backend generates this many episodes' turns at once (run that many threads)
    uses_seed: bool = False  # acts on the run's seed beyond sampling (the heuristic teacher's mistakes)


GENERIC_CHECKPOINT_NAMES = {"model", "final", "checkpoint", "out", "output", "best", "latest", "merged"}


def slug(text: str) -> str:
    """A file-name-safe label: ``"Qwen/Qwen3-VL 8B"`` -> ``"qwen-qwen3-vl-8b"``."""
    out = "".join(c if c.isalnum() or c in "._" else "-" for c in text.strip().lower())
    while "--" in out:
        out = out.replace("--", "-")
    return out.strip("-._") or "policy"


def policy_label(spec: str) -> str:
    """A short name for a policy spec, for folders and tables.

    >>> policy_label("transformers:runs/default/sft/model"), policy_label("openai:qwen3-vl-8b@http://h:8000/v1")
    ('sft', 'qwen3-vl-8b')
    >>> policy_label("direct"), policy_label("direct:transformers:runs/r/grpo/final"), policy_label("heuristic")
    ('direct', 'direct-grpo', 'teacher')
    """
    spec = spec.strip()
    if spec in ("teacher", "heuristic"):
        return "teacher"
    if spec in ("base", "direct"):
        return spec
    if spec.startswith("direct:"):
        return "direct-" + policy_label(spec[len("direct:"):])
    kind, _, rest = spec.partition(":")
    if kind == "openai":
        at = rest.rfind("@http")
        return slug((rest[:at] if at >= 0 else rest) or "openai")
    target = rest if kind == "transformers" else spec
    parts = [p for p in Path(target.rstrip("/")).parts if p not in ("", ".")]
    if not parts:
        return "policy"
    name = parts[-1]
    if name.lower() in GENERIC_CHECKPOINT_NAMES and len(parts) > 1:
        name = parts[-2]
    return slug(name)


def _path_like(spec: str) -> bool:
    """An existing path, or one written as a path (``./``, ``/``, ``~``)."""
    return Path(spec).exists() or spec.startswith((".", "/", "~"))


def _chat_from_spec(spec: str, batch: int = 1, device: str = "auto") -> ChatBackend:
    """The chat backend of a spec, a local model loaded on ``device`` (``runtime.resolve_device``); a
    local image-text model with ``batch`` > 1 comes behind the batcher
    (``rl.batched_chat.BatchedTransformersChat``: concurrent episodes share one ``generate`` call)."""
    from vsearcher_lite.chat import TransformersChat, make_chat

    if spec == "base":
        from vsearcher_lite.model.tiny import default_base_dir

        spec = f"transformers:{default_base_dir()}"
    elif not spec.startswith(("openai", "transformers:")) and (_path_like(spec) or "/" in spec):
        spec = f"transformers:{spec}"  # a bare checkpoint folder (or hub id)
    if spec.startswith("transformers:"):
        path = spec[len("transformers:"):]
        if not path.strip():
            raise InputError("policy 'transformers:' needs a model folder or hub id after the colon")
        # "org/name" is a hub id; anything with a deeper path, or rooted, is meant as a local folder.
        looks_local = _path_like(path) or path.count("/") >= 2
        if looks_local and not (Path(path) / "config.json").is_file():
            raise InputError(f"{path}: no model here (no config.json); train it first or give another --policy")
    local = {"device": str(resolve_device(device))} if spec.startswith("transformers:") else {}
    chat = make_chat(spec, **local)
    if batch > 1 and isinstance(chat, TransformersChat) and chat.processor is not None:
        from vsearcher_lite.rl.batched_chat import BatchedTransformersChat

        return BatchedTransformersChat(chat.model, chat.processor, max_batch=batch, max_wait_s=0.05,
                                       max_new_tokens=chat.max_new_tokens)
    return chat


def backend_batch(backend: ChatBackend) -> int:
    """How many requests ``backend`` answers in one call (1 unless it is a batcher)."""
    from vsearcher_lite.rl.batched_chat import LockstepBatcher

    return backend.max_batch if isinstance(backend, LockstepBatcher) else 1


def direct_policy(backend: ChatBackend, config: EvalConfig | None = None, *, name: str = "direct",
                  spec: str = "direct") -> Policy:
    """The no-tools ablation of ``backend``: a tool-free system prompt and no tool call allowed."""
    config = config or EvalConfig()
    wrapped = DirectAnswerPolicy(backend, today=config.today, variant=config.prompt_variant)
    return Policy(name, spec, lambda task: wrapped, tools=False, shared=wrapped, batch=backend_batch(backend))


def make_policy(spec: str | ChatBackend | Policy, config: EvalConfig | None = None) -> Policy:
    """A ``Policy`` from a spec (see the module docstring), a chat backend, or a ``Policy``."""
    config = config or EvalConfig()
    if isinstance(spec, Policy):
        if spec.spec in ("teacher", "heuristic") and spec.tools:
            # the heuristic teacher plans within the episode's tool-call limit: this evaluation's, not
            # the one it was first built with (the comparison runs it on held-out tasks and the exam)
            return replace(spec, for_task=make_policy(spec.spec, config).for_task)
        return spec
    if isinstance(spec, ChatBackend):
        name = getattr(spec, "name", type(spec).__name__)
        return Policy(slug(name), name, lambda task: spec, shared=spec, batch=backend_batch(spec))
    if not isinstance(spec, str) or not spec.strip():
        raise InputError(f"policy {spec!r}: give teacher, base, direct[:<spec>] or a chat spec")
    spec = spec.strip()
    if spec in ("teacher", "heuristic"):
        if config.world != "sandbox":
            raise InputError("the heuristic teacher only works in the sandbox; give --policy openai:<model>@<base_url>")
        from vsearcher_lite.agent.teacher import HeuristicTeacher

        return Policy("teacher", spec, lambda task: HeuristicTeacher(task, seed=config.seed, mistake_rate=config.mistake_rate,
                                                                     style=config.prompt_variant,
                                                                     max_tool_calls=config.max_tool_calls), uses_seed=True)
    if spec == "direct" or spec.startswith("direct:"):
        inner_spec = spec[len("direct:"):] if spec.startswith("direct:") else "base"
        if inner_spec in ("teacher", "heuristic", "direct") or inner_spec.startswith("direct:"):
            raise InputError(f"policy {spec!r}: the direct ablation needs a model, e.g. direct:base or direct:openai:<model>@<url>")
        return direct_policy(_chat_from_spec(inner_spec, config.batch, config.device), config, name=policy_label(spec), spec=spec)
    backend = _chat_from_spec(spec, config.batch, config.device)
    return Policy(policy_label(spec), spec, lambda task: backend, shared=backend, batch=backend_batch(backend))


# ---------------------------------------------------------------------------------------------
# One task


def first_format_error(traj: Trajectory) -> str | None:
    """The strict format check's code for the first turn that failed it (``agent.format``:
    ``unclosed_think``, ``multiple_answers`` ...); ``no_turn`` when the policy wrote none; ``None``
    when every turn passed (and there was at least one: the episode is format-valid)."""
    if not traj.turns:
        return NO_TURN
    return next((t.verdict.get("code") or "unknown" for t in traj.turns if not t.verdict.get("ok")), None)


def format_error_code(record: dict) -> str | None:
    """``first_format_error`` of a result record, also for records written before the field
    existed (read from the kept trajectory's turns).

    >>> format_error_code({"format_ok": True}), format_error_code({"format_ok": False, "format_error": "no_action"})
    (None, 'no_action')
    >>> format_error_code({"format_ok": False, "trajectory": {"turns": [{"verdict": {"ok": True}},
    ...                                                                  {"verdict": {"ok": False, "code": "multiple_answers"}}]}})
    'multiple_answers'
    """
    if record.get("format_ok"):
        return None
    if record.get("format_error"):
        return record["format_error"]
    turns = (record.get("trajectory") or {}).get("turns")
    if not turns:
        return NO_TURN if turns == [] else "unknown"
    return next((t["verdict"].get("code") or "unknown" for t in turns if not t["verdict"].get("ok")), "unknown")


def result_record(task: Task, traj: Trajectory, verdict, policy: Policy, seconds: float, keep_trajectory: bool) -> dict:
    """One line of ``results.jsonl``."""
    counts = traj.tool_counts()
    format_error = first_format_error(traj)
    record = {
        "id": task.id,
        "policy": policy.name,
        "policy_spec": redact(policy.spec),
        "difficulty": task.difficulty,
        "split": task.split,
        "question": task.question,
        "answer": task.answer,
        "aliases": list(task.aliases),
        "prediction": traj.prediction,
        "correct": bool(verdict.correct),
        "judge": verdict.to_dict(),
        "termination": traj.termination,
        "format_ok": format_error is None,
        "format_error": format_error,
        "n_turns": len(traj.turns),
        "n_tool_calls": traj.n_tool_calls,
        "tool_counts": {name: counts.get(name, 0) for name in sorted(set(TOOL_NAMES) | set(counts))},
        "tool_errors": sum(1 for t in traj.tool_calls if not (t.observation or {}).get("ok", True)),
        "episode_seconds": traj.seconds,
        "seconds": round(seconds, 4),
        "error": traj.error,
    }
    if keep_trajectory:
        traj.meta.update({"answer": task.answer, "difficulty": task.difficulty, "correct": bool(verdict.correct)})
        record["trajectory"] = traj.to_dict()
    return record


# ---------------------------------------------------------------------------------------------
# Metrics


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-quantile (0..1) by linear interpolation.

    >>> percentile([1, 2, 3, 4], 0.5), percentile([5.0], 0.9), percentile([], 0.5)
    (2.5, 5.0, None)
    """
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low, high = int(pos), min(int(pos) + 1, len(ordered) - 1)
    return round(ordered[low] + (ordered[high] - ordered[low]) * (pos - low), 4)


def group_metrics(records: list[dict]) -> dict:
    n_correct = sum(1 for r in records if r["correct"])
    return {
        "n_tasks": len(records),
        "n_correct": n_correct,
        "accuracy": _rate(n_correct, len(records)),
        "mean_tool_calls": _mean([r["n_tool_calls"] for r in records]),
    }


def eval_metrics(records: list[dict]) -> dict:
    """Pass@1 and its breakdowns from result records (one per task)."""
    n = len(records)
    n_correct = sum(1 for r in records if r["correct"])
    terminations = Counter(r["termination"] for r in records)
    format_errors = Counter(code for code in map(format_error_code, records) if code)
    tool_totals: Counter = Counter()
    for r in records:
        tool_totals.update(r.get("tool_counts", {}))
    tools = sorted(set(TOOL_NAMES) | set(tool_totals))
    by_difficulty = {g: group_metrics([r for r in records if r["difficulty"] == g])
                     for g in in_level_order(r["difficulty"] for r in records)}
    by_split = {s: group_metrics([r for r in records if r["split"] == s]) for s in sorted({r["split"] for r in records})}
    seconds = [float(r["seconds"]) for r in records]
    return {
        "n_tasks": n,
        "n_correct": n_correct,
        "pass_at_1": _rate(n_correct, n),
        "n_answered": terminations.get("answer", 0),
        "answer_rate": _rate(terminations.get("answer", 0), n),
        "format_valid_rate": _rate(sum(1 for r in records if r["format_ok"]), n),
        "accuracy_by_difficulty": {g: v["accuracy"] for g, v in by_difficulty.items()},
        "accuracy_by_split": {s: v["accuracy"] for s, v in by_split.items()},
        "by_difficulty": by_difficulty,
        "by_split": by_split,
        "mean_tool_calls": _mean([r["n_tool_calls"] for r in records]),
        "mean_tool_calls_by_type": {t: (round(tool_totals.get(t, 0) / n, 4) if n else None) for t in tools},
        "terminations": {t: terminations.get(t, 0) for t in sorted(set(TERMINATIONS) | set(terminations))},
        # why turns failed the strict format check: the code of each failing episode's first bad turn
        "format_errors": dict(format_errors.most_common()),
        "tool_errors": sum(int(r.get("tool_errors", 0)) for r in records),
        "seconds_per_task": {
            "mean": _mean(seconds),
            "median": round(statistics.median(seconds), 4) if seconds else None,
            "p90": percentile(seconds, 0.9),
            "max": round(max(seconds), 4) if seconds else None,
        },
    }


RESULT_COLUMNS = ("id", "difficulty", "split", "correct", "termination", "format_ok", "n_tool_calls",
                  "text_search", "image_search", "visit", "seconds", "answer", "prediction")


def results_csv(records: list[dict]) -> str:
    """One row per task (for plots that must be redrawn without rerunning)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=RESULT_COLUMNS, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for r in records:
        writer.writerow({**r, **{t: r.get("tool_counts", {}).get(t, 0) for t in TOOL_NAMES}})
    return buf.getvalue()


SUMMARY_KEYS = ("policy", "policy_spec", "benchmark", "judge", "n_tasks", "n_correct", "pass_at_1",
                "accuracy_by_difficulty", "accuracy_by_split", "format_valid_rate", "answer_rate",
                "mean_tool_calls", "mean_tool_calls_by_type", "terminations", "format_errors", "updated_at")


def summary_entry(metrics: dict) -> dict:
    entry = {k: metrics.get(k) for k in SUMMARY_KEYS}
    entry["seconds_per_task"] = (metrics.get("seconds_per_task") or {}).get("mean")
    return entry


TABLE_COLUMNS = ("name", "policy", "benchmark", "n_tasks", "pass_at_1", "format_valid_rate", "mean_tool_calls")


def comparison_rows(summary: dict) -> list[dict]:
    """The summary as table rows (one per evaluated policy name): the paper's table 1 / figure 4 data.

    Accuracy per difficulty and per split become ``acc_<label>`` columns; mean calls per tool
    ``calls_<tool>``.
    """
    rows = []
    for name, entry in summary.items():
        if not isinstance(entry, dict):
            continue
        row = {"name": name, **{k: entry.get(k) for k in TABLE_COLUMNS if k != "name"}}
        for label, acc in (entry.get("accuracy_by_split") or {}).items():
            row[f"acc_{label}"] = acc
        for label, acc in (entry.get("accuracy_by_difficulty") or {}).items():
            row[f"acc_{label}"] = acc
        for tool, calls in (entry.get("mean_tool_calls_by_type") or {}).items():
            row[f"calls_{tool}"] = calls
        rows.append(row)
    return rows


def comparison_csv(summary: dict) -> str:
    rows = comparison_rows(summary)
    columns = list(TABLE_COLUMNS)
    for row in rows:
        columns += [k for k in row if k not in columns]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------
# The stage


def eval_dir(run_dir: str | Path, name: str) -> Path:
    return Path(run_dir) / STAGE / name


def check_name(name: str) -> str:
    """An eval name is a folder name: letters, digits, ``.``, ``_`` and ``-`` (``runio.check_folder_name``).

    >>> check_name("sft-v2")
    'sft-v2'
    """
    return check_folder_name(name, "eval name", hint=f"; e.g. {slug(str(name or 'x'))!r}")


def resolve_judge(judge: Judge | str | None, config: EvalConfig) -> Judge:
    """A judge from an object or a spec; ``"llm"`` alone means the chat endpoint set in the environment."""
    spec = config.judge if judge is None else judge
    if spec == "llm":
        spec = "llm:openai"
    try:
        return make_judge(spec)
    except ValueError as exc:
        if isinstance(spec, str) and spec.startswith("llm"):
            raise InputError(f"the LLM judge ({spec!r}; --judge match is the offline one): {exc}") from None
        raise InputError(str(exc)) from None


def previous_results(log: JsonlLog, tasks: list[Task]) -> dict[str, dict]:
    """The latest result of each task that still matches the task's question and answer, leaving
    out episodes that ended on a policy error (an unreachable server, a failed call): a rerun
    runs those again."""
    wanted = {t.id: t for t in tasks}
    latest: dict[str, dict] = {}
    for r in log.records():
        task = wanted.get(str(r.get("id")))
        if task is not None and r.get("question") == task.question and r.get("answer") == task.answer:
            latest[task.id] = r
    return {k: r for k, r in latest.items() if r.get("termination") not in TRANSIENT_TERMINATIONS}


def guard_resume(out: Path, identity: dict, fresh: bool, log: Callable[[str], None] = print) -> None:
    """Refuse to mix results of different policies or settings under one eval name; results of a
    checkpoint since retrained at the same path (other ``weights``) are stale and start over."""
    config_file = out / "config.json"
    results = out / "results.jsonl"
    if fresh:
        results.unlink(missing_ok=True)
    elif config_file.exists() and results.exists() and results.stat().st_size > 0:
        before = read_json(config_file)
        changed = changed_settings(before, identity, out.parent.parent)
        if changed == ["weights"]:
            log(f"[eval] {out.name}: the checkpoint has other weights than its stored results were made with: "
                "evaluating again")
            results.unlink()
        elif changed:
            raise InputError(
                f"{out} holds results made with other settings ({', '.join(changed)}: "
                f"{before.get(changed[0])!r} there, {identity[changed[0]]!r} now); use another --name or --fresh")
    atomic_write_json(config_file, identity)


def run_identity(policy: Policy, config: EvalConfig, judge: Judge) -> dict:
    """What the results of an evaluation depend on: the policy, every result setting and the judge.

    ``RUN_DIR/eval/<name>/config.json`` stores it; a resumed run must match it (``guard_resume``).
Keys written inline in a spec (``?api_key=...``) are masked (``manifest.scrub_secrets``).
    Greedy decoding does not read the seed, so a model evaluated at temperature 0 under another
    ``--seed`` (GRPO's seeds, say) reuses the same results; ``repeat_guard`` counts only when on. An
    LLM judge served by an endpoint is named by its model and URL (``judge_model``).
    """
    settings = config.result_settings()
    if config.temperature == 0 and not policy.uses_seed:
        settings.pop("seed")
    if not settings.get("repeat_guard"):
        settings.pop("repeat_guard")  # off: results stored before the option existed still match
    from vsearcher_lite.manifest import scrub_secrets

    identity = {"policy": policy.name, "policy_spec": policy.spec, "tools": policy.tools,
                **settings, "judge": getattr(judge, "name", type(judge).__name__)}
    fingerprint = weights_fingerprint(policy.spec)
    if fingerprint:
        identity["weights"] = fingerprint
    chat = getattr(judge, "chat", None)
    if isinstance(getattr(chat, "model", None), str):  # an LLM judge behind an endpoint: which model judged
        identity["judge_model"] = f"{chat.model}@{getattr(chat, 'base_url', '')}"
    return scrub_secrets(identity)


HASHED_WEIGHTS_MB = 256  # larger checkpoints are fingerprinted by file sizes and times, not content


def weights_fingerprint(spec: str) -> str | None:
    """A fingerprint of the weight files of a local checkpoint named by ``spec`` (None for any other
    policy), so that results of a checkpoint retrained at the same path are never reused.

    Checkpoints up to ``HASHED_WEIGHTS_MB`` are hashed by content (a copied run keeps its results);
    larger ones by file names, sizes and modification times.
    """
    rest = spec[len("direct:"):] if spec.startswith("direct:") else spec
    if not rest.startswith("transformers:"):
        return None
    folder = Path(rest[len("transformers:"):]).expanduser()
    files = sorted(p for p in folder.glob("*") if p.suffix in (".safetensors", ".bin") and p.is_file()) \
        if folder.is_dir() else []
    if not files:
        return None
    digest = hashlib.sha256()
    by_content = sum(p.stat().st_size for p in files) <= HASHED_WEIGHTS_MB * 2**20
    for p in files:
        digest.update(p.name.encode())
        if by_content:
            with p.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
        else:
            stat = p.stat()
            digest.update(f"{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def canonical_spec(spec: str, *, follow_links: bool = True) -> str:
    """A policy spec with any local checkpoint path made absolute, so that one checkpoint named
    from two working folders (``runs/a/sft/checkpoint`` and ``../runs/a/sft/checkpoint``) compares equal.
    ``follow_links=False`` keeps a linked checkpoint's own path (for the run's files).

    >>> canonical_spec("teacher"), canonical_spec("openai:m@http://h:8000/v1")
    ('teacher', 'openai:m@http://h:8000/v1')
    """
    prefix = ""
    rest = spec
    if rest.startswith("direct:"):
        prefix, rest = "direct:", rest[len("direct:"):]
    if rest.startswith("transformers:"):
        path = Path(rest[len("transformers:"):]).expanduser()
        if path.exists():
            return f"{prefix}transformers:{path.resolve() if follow_links else path.absolute()}"
    return spec


def canonical_identity(identity: dict, *, follow_links: bool = True) -> dict:
    """``identity`` with its policy spec in canonical form (``canonical_spec``)."""
    out = dict(identity)
    if isinstance(out.get("policy_spec"), str):
        out["policy_spec"] = canonical_spec(out["policy_spec"], follow_links=follow_links)
    return out


def stored_identity(identity: dict, run_dir: str | Path) -> dict:
    """``identity`` as the run's ``config.json`` stores it: a checkpoint in the run named
    relative to it."""
    return RunDir(run_dir).relative(canonical_identity(identity, follow_links=False))


def changed_settings(before: dict, identity: dict, run_dir: str | Path | None = None) -> list[str]:
    """The keys of ``identity`` whose values differ in ``before`` (checkpoint paths compared
    resolved, and relative to ``run_dir`` when given, as its files store them)."""
    if run_dir is not None:
        before, identity = stored_identity(before, run_dir), stored_identity(identity, run_dir)
    a, b = canonical_identity(before), canonical_identity(identity)
    return sorted(k for k in b if a.get(k) != b[k])


def adopt_results(run_dir: str | Path, source: str, name: str, tasks: list[Task], identity: dict) -> int:
    """Copy into ``eval/<name>`` the results ``eval/<source>`` already holds for ``tasks``, when
    ``source`` was produced with the same identity (``run_identity``); the number copied.

    So a later evaluation under another name resumes from an earlier stage's results instead of
    rerunning them (notebook 08 starts from what the SFT and GRPO stages measured). Nothing is
    copied when the settings differ, the source is missing, or the target already has the task.
    """
    identity = stored_identity(identity, run_dir)
    src = eval_dir(run_dir, source)
    if source == name or not (src / "config.json").is_file() or not (src / "results.jsonl").is_file():
        return 0
    if changed_settings(read_json(src / "config.json"), identity, run_dir):
        return 0
    out = eval_dir(run_dir, name)
    out.mkdir(parents=True, exist_ok=True)
    target = JsonlLog(out / "results.jsonl", key="id")
    has_results = target.path.exists() and target.path.stat().st_size > 0
    if (has_results and (out / "config.json").is_file()
            and changed_settings(read_json(out / "config.json"), identity, run_dir)):
        return 0  # evaluate() refuses this name itself, and says why
    have = previous_results(target, tasks)
    found = previous_results(JsonlLog(src / "results.jsonl", key="id"), tasks)
    copied = 0
    for task in tasks:
        if task.id in found and task.id not in have:
            target.append(found[task.id])
            copied += 1
    if copied:
        atomic_write_json(out / "config.json", identity)
    return copied


def update_summary(run_dir: str | Path, name: str, metrics: dict) -> dict:
    """Put this evaluation into ``RUN_DIR/eval/metrics.json`` (merge-safe) and rewrite ``table.csv``."""
    from vsearcher_lite.manifest import update_json_file

    stage = RunDir(run_dir).stage(STAGE)

    def put(summary: dict) -> None:
        summary[name] = summary_entry(metrics)

    summary = update_json_file(stage / "metrics.json", put)
    atomic_write_text(stage / "table.csv", comparison_csv(summary))
    return summary


def read_summary(run_dir: str | Path) -> dict:
    """``RUN_DIR/eval/metrics.json``: every policy evaluated so far, keyed by name."""
    path = Path(run_dir) / STAGE / "metrics.json"
    return read_json(path) if path.exists() else {}


def toolbox_source(toolbox: Any, run_dir: str | Path, config: EvalConfig) -> tuple[Callable[[], Any], list]:
    """``(get, made)``: ``get()`` gives the calling thread the toolbox its episodes use.

    ``toolbox`` is a toolbox (shared by every thread), ``None`` for the run's own
    (``tools.factory.make_toolbox``), built once on first use and shared by every thread (a
    toolbox is thread-safe, and building one per thread re-read the world's image features in
    each), or a function that builds one, called once per thread (for a toolbox that must not be
    shared). ``made`` lists the toolboxes handed out (for their cache statistics).
    """
    made: list[Any] = []
    lock = threading.Lock()
    if toolbox is None or not (callable(toolbox) and not hasattr(toolbox, "call")):
        if toolbox is not None:
            made.append(toolbox)

        def get_shared():
            if not made:
                with lock:
                    if not made:
                        from vsearcher_lite.tools.factory import make_toolbox

                        made.append(make_toolbox(run_dir, world=config.world, cache_mode=config.cache_mode,
                                                 top_k=config.top_k, observations=config.prompt_variant))
            return made[0]

        return get_shared, made
    local = threading.local()

    def get_own():
        box = getattr(local, "toolbox", None)
        if box is None:
            box = local.toolbox = toolbox()
            with lock:
                if all(box is not other for other in made):
                    made.append(box)
        return box

    return get_own, made


def run_pending(todo: list[Task], run_task: Callable[[Task], dict], log: JsonlLog, concurrency: int, *,
                progress: bool = True, desc: str = "eval") -> list[dict]:
    """Run ``run_task`` over ``todo`` on ``concurrency`` threads, appending each record to ``log`` as it
    finishes (so an interrupted run keeps everything finished); the records, in finishing order."""
    from tqdm.auto import tqdm

    records = []
    pool = ThreadPoolExecutor(max_workers=max(1, concurrency))
    try:
        with tqdm(total=len(todo), desc=desc, disable=not progress, leave=False) as bar:
            futures = [pool.submit(run_task, t) for t in todo]
            for future in as_completed(futures):
                record = future.result()
                log.append(record)  # one writer (this thread), whole lines
                records.append(record)
                bar.update(1)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return records


def evaluate(
    run_dir: str | Path,
    tasks: list[Task],
    policy: str | ChatBackend | Policy,
    *,
    judge: Judge | str | None = None,
    toolbox: Any = None,
    concurrency: int | None = None,
    name: str | None = None,
    config: EvalConfig | None = None,
    benchmark: str = "",
    fresh: bool = False,
) -> dict:
    """Evaluate ``policy`` on ``tasks``; writes the outputs listed in the module docstring, returns the metrics.

    ``policy``: a spec for ``make_policy``, a ``ChatBackend`` (one for every task) or a ``Policy``.
    ``judge``: a ``Judge`` or a spec (default ``config.judge``). ``toolbox``: a toolbox, a
    function that builds one (called once per worker thread), or ``None`` for the run's own
    (``tools.factory.make_toolbox``: the run's world and tool cache, one toolbox shared by the
    worker threads). ``name``: the folder under
    ``RUN_DIR/eval/`` and the key in the summary (default: the policy's name).
    """
    config = config or EvalConfig.for_profile("cpu")
    if concurrency is not None:
        config = replace(config, concurrency=concurrency)  # the caller's config stays as it was
    config.check()
    tasks = list(tasks)
    if not tasks:
        raise InputError("no tasks to evaluate")
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise InputError(f"task id {dup!r} appears more than once")
    policy = make_policy(policy, config)
    judge_obj = resolve_judge(judge, config)
    name = check_name(name or policy.name)
    if toolbox is None and policy.tools and config.world == "sandbox":
        from vsearcher_lite.world import open_world

        open_world(run_dir)  # a missing world fails here, before anything is written
    thread_toolbox, made = toolbox_source(toolbox, run_dir, config)
    out = eval_dir(run_dir, name)
    out.mkdir(parents=True, exist_ok=True)
    run = RunDir(run_dir)  # results name the run's images and checkpoints relative to it
    identity = stored_identity(run_identity(policy, config, judge_obj), run_dir)
    guard_resume(out, identity, fresh)

    limits = config.limits(tools=policy.tools, batched=policy.batch > 1)

    def run_task(task: Task) -> dict:
        start = time.perf_counter()
        traj = run_episode(policy.for_task(task), thread_toolbox(), task, limits=limits,
                           sampling=config.sampling(task.id), today=config.today, variant=config.prompt_variant)
        verdict = judge_obj.judge(task.question, task.answer, traj.prediction, task.aliases)
        return run.relative(result_record(task, traj, verdict, policy, time.perf_counter() - start,
                                          config.keep_trajectories))

    log = JsonlLog(out / "results.jsonl", key="id")
    done = previous_results(log, tasks)
    todo = [t for t in tasks if t.id not in done]
    start = time.perf_counter()
    threads = max(config.concurrency, policy.batch)  # a batcher needs its batch's episodes running at once
    for record in run_pending(todo, run_task, log, threads, progress=config.progress, desc=f"eval {name}"):
        done[record["id"]] = record
    elapsed = time.perf_counter() - start
    previous = read_json(out / "metrics.json") if not todo and (out / "metrics.json").is_file() else {}

    records = [done[t.id] for t in tasks]
    atomic_write_text(out / "results.csv", results_csv(records))
    metrics = eval_metrics(records)
    from vsearcher_lite.manifest import utc_now

    from vsearcher_lite.manifest import scrub_secrets

    metrics.update(
        name=name,
        policy=policy.name,
        policy_spec=identity["policy_spec"],
        tools=policy.tools,
        benchmark=redact(benchmark),
        judge=identity["judge"],
        judge_failures=getattr(judge_obj, "failures", 0),
        evaluated_this_run=len(todo),
        seconds=round(elapsed, 3),
        **wall_time(elapsed, len(todo), previous),
        settings=scrub_secrets(config.to_dict()),
        updated_at=utc_now(),
    )
    caches = [getattr(b, "cache", None) for b in made]
    caches = [c for c in caches if c is not None]
    if caches:
        metrics["tool_cache"] = {"hits": sum(c.hits for c in caches), "misses": sum(c.misses for c in caches)}
    if policy.shared is not None and usage_of(policy.shared):
        metrics["policy_usage"] = usage_of(policy.shared)
    metrics = run.relative(metrics)
    atomic_write_json(out / "metrics.json", metrics)
    update_summary(run_dir, name, metrics)
    from vsearcher_lite.manifest import write_manifest

    write_manifest(run_dir, f"{STAGE}/{name}", {**identity, "seed": config.seed, "benchmark": benchmark, "n_tasks": len(tasks),
                                                 "settings": config.to_dict()}, elapsed)
    return metrics


def wall_time(elapsed: float, n_run: int, previous: dict) -> dict:
    """``wall_seconds_per_task`` (wall time over the tasks run) and ``wall_timed_tasks``.

    A rerun that ran nothing keeps the previous run's figures (``previous``: its metrics), so
    resuming a finished evaluation does not erase its cost.

    >>> wall_time(12.0, 4, {})
    {'wall_seconds_per_task': 3.0, 'wall_timed_tasks': 4}
    >>> wall_time(0.01, 0, {'wall_seconds_per_task': 3.0, 'wall_timed_tasks': 4})
    {'wall_seconds_per_task': 3.0, 'wall_timed_tasks': 4}
    >>> wall_time(0.01, 0, {})
    {'wall_seconds_per_task': None, 'wall_timed_tasks': 0}
    """
    if n_run:
        return {"wall_seconds_per_task": round(elapsed / n_run, 4), "wall_timed_tasks": n_run}
    return {"wall_seconds_per_task": previous.get("wall_seconds_per_task"),
            "wall_timed_tasks": previous.get("wall_timed_tasks") or 0}


def load_results(run_dir: str | Path, name: str) -> list[dict]:
    """Every result record of an evaluation (latest per task id, in file order)."""
    path = eval_dir(run_dir, name) / "results.jsonl"
    if not path.exists():
        raise InputError(f"{path} does not exist: run `vsearcher-lite eval --name {name}` first")
    latest: dict[str, dict] = {}
    for r in JsonlLog(path).records():
        latest[str(r.get("id"))] = r
    return RunDir(run_dir).resolve(list(latest.values()))
