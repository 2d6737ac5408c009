"""Stage `comparison` (notebook 08): base, SFT, RL and the teacher on the run's exam and held-out
tasks: this run's table 1 and figure 4 (paper 2.4, 3.2, 4).

Each cell is ``RUN_DIR/eval/<benchmark>-<policy>/``; held-out results the SFT and GRPO stages
wrote with the same settings are adopted, so only missing tasks run, and a checkpoint not trained
yet is reported missing, never guessed at. The exam (``filter/exam.jsonl``: 10 injection rounds,
unseen seeds) gets the paper's 30 tool calls (A.3). Outputs: ``comparison/metrics.json``,
``table.csv``.
"""

from __future__ import annotations

import csv
import gc
import io
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from vsearcher_lite.agent.task import HEADLINE_GROUP, LEVEL_ORDER, Task
from vsearcher_lite.profiles import load_profile, with_overrides
from vsearcher_lite.redaction import redact
from vsearcher_lite.runio import InputError, RunDir, atomic_write_json, atomic_write_text
from vsearcher_lite.scoring.evaluate import EvalConfig, adopt_results, evaluate, resolve_judge
from vsearcher_lite.scoring.identity import run_identity
from vsearcher_lite.scoring.metrics import binomial_se
from vsearcher_lite.scoring.policies import Policy, make_policy
from vsearcher_lite.training.config import SFTConfig
from vsearcher_lite.training.heldout import balanced_head

STAGE = "comparison"
# No no-tools row: the tiny models never learned to answer without tools (their replies are
# fragments of the tool markup), so the row would measure decoding, not knowledge. A model that can
# answer alone is still evaluated with `eval --policy direct:<spec>` or an `extra_policies` row.
POLICIES = ("base", "sft", "rl", "teacher")
BENCHMARKS = ("exam", "heldout")
HELDOUT_DIFFICULTIES = ("onehop", "easy", "medium", "hard")  # onehop: the cpu warm-up level
#: The paper's evaluation settings (2.4, 3.2): what notebook 08 compares a run's settings with.
PAPER_EVAL = {"judge": "llm", "top_k": 5, "prompt_variant": "full", "max_tool_calls": 30,
              "max_context_chars": 800_000, "temperature": 0.6, "top_p": 0.95, "max_tokens": 10_000}
# The evaluation names the SFT and GRPO stages write their held-out results under.
STAGE_EVAL_NAMES = {"base": "base", "sft": "sft", "rl": "rl"}
CHECKPOINTS = {"sft": Path("sft") / "checkpoint", "rl": Path("grpo") / "checkpoint"}
TRAINED_BY = {"sft": "notebook 06 / `vsearcher-lite sft`",
              "rl": "notebook 07 / `vsearcher-lite grpo`"}
# the table's columns: the exam (the paper's MM-SearchExam), each held-out level, the headline
TABLE_GROUPS = ("exam", "onehop", "easy", "medium", "hard", HEADLINE_GROUP)


@dataclass
class ComparisonConfig:
    """Settings of the comparison; ``for_profile`` gives each profile's preset."""

    profile: str = "cpu"
    world: str = "sandbox"
    seed: int = 0
    policies: tuple[str, ...] = POLICIES
    exam_max_tasks: int | None = None  # None: every exam task
    heldout_max_tasks: int | None = None  # None: every held-out task of these difficulties
    heldout_difficulties: tuple[str, ...] = HELDOUT_DIFFICULTIES
    exam_max_tool_calls: int = 30  # paper A.3
    exam_max_context_chars: int | None = 800_000  # about the paper's 200K tokens
    judge: str = "match"
    concurrency: int | None = None  # None: the profile's
    progress: bool = True
    extra_policies: dict[str, str] = field(default_factory=dict)  # more rows: name -> spec
    eval_overrides: dict[str, Any] = field(default_factory=dict)  # EvalConfig settings, both

    @classmethod
    def for_profile(cls, profile: str = "cpu", **overrides: Any) -> "ComparisonConfig":
        preset = load_profile(profile).get("comparison", {})
        config = cls(**with_overrides(cls, profile, preset, overrides, "comparison"))
        bad = [p for p in config.policies if p not in POLICIES]
        if bad:
            raise InputError(f"unknown policy {bad[0]!r} in the comparison; choose from "
                             f"{', '.join(POLICIES)} "
                             "(add others with extra_policies={name: spec})")
        return config

    def to_dict(self) -> dict:
        return asdict(self)

    def heldout_eval_config(self) -> EvalConfig:
        """The SFT stage's evaluation settings (so the numbers match notebooks 06 and 07), with
        this comparison's judge and threads."""
        sft = SFTConfig.for_profile(self.profile, seed=self.seed, world=self.world,
                                    progress=self.progress)
        overrides = {"judge": self.judge, "concurrency": self.concurrency, **self.eval_overrides}
        return sft.eval_config(**overrides)

    def exam_eval_config(self) -> EvalConfig:
        """The held-out settings with the exam's tool-call and context budget."""
        return replace(self.heldout_eval_config(), max_tool_calls=self.exam_max_tool_calls,
                       max_context_chars=self.exam_max_context_chars)

    def eval_config(self, benchmark: str) -> EvalConfig:
        if benchmark not in BENCHMARKS:
            raise ValueError(f"benchmark must be one of {BENCHMARKS}")
        return self.exam_eval_config() if benchmark == "exam" else self.heldout_eval_config()


def base_spec(profile: str) -> str:
    """The base model of a profile: the shipped tiny base on cpu, Qwen3-VL elsewhere."""
    base = SFTConfig.for_profile(profile).base
    return "base" if base is None else f"transformers:{base}"


def policy_spec(name: str, run_dir: str | Path, profile: str = "cpu") -> str:
    """The ``make_policy`` spec of a comparison row.

    >>> policy_spec("rl", "runs/r"), policy_spec("teacher", "runs/r")
    ('transformers:runs/r/grpo/checkpoint', 'teacher')
    """
    if name in CHECKPOINTS:
        return f"transformers:{Path(run_dir) / CHECKPOINTS[name]}"
    if name == "base":
        return base_spec(profile)
    if name == "teacher":
        return "teacher"
    raise InputError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")


def unavailable_reason(name: str, spec: str, world: str = "sandbox") -> str | None:
    """Why a comparison row cannot be evaluated now (``None`` when it can).

    >>> reason = unavailable_reason("rl", "transformers:/nonexistent/grpo/checkpoint")
    >>> reason.removesuffix(" (notebook 07 / `vsearcher-lite grpo`)")
    'not trained yet: no checkpoint at /nonexistent/grpo/checkpoint'
    """
    if name == "teacher" and world != "sandbox":
        return "the heuristic teacher exists only in the sandbox world"
    target = spec.removeprefix("direct:")
    if target.startswith("transformers:"):
        path = Path(target.removeprefix("transformers:"))
        local = (path.exists() or path.is_absolute() or str(path).startswith(".")
                 or len(path.parts) > 2)
        if local and not (path / "config.json").is_file():
            # the stage that writes it (an extra row may name one of the trained checkpoints)
            trainer = TRAINED_BY.get(name) or next(
                (TRAINED_BY[k] for k, rel in CHECKPOINTS.items() if path.parts[-2:] == rel.parts),
                None)
            where = f" ({trainer})" if trainer else ""
            return f"not trained yet: no checkpoint at {path}{where}"
    return None


def exam_and_heldout(tasks: list[Task]) -> dict[str, list[Task]]:
    """The run's evaluation tasks split into the two benchmarks (by each task's split)."""
    return {b: [t for t in tasks if t.split == b] for b in BENCHMARKS}


def select_tasks(tasks: dict[str, list[Task]], config: ComparisonConfig) -> dict[str, list[Task]]:
    """The exam's first ``exam_max_tasks``; held-out tasks capped round-robin across
    difficulties (the SFT stage's rule, so its results are reused)."""
    exam = list(tasks.get("exam", []))
    if config.exam_max_tasks is not None:
        exam = exam[: config.exam_max_tasks]
    levels = config.heldout_difficulties
    heldout = [t for t in tasks.get("heldout", []) if t.difficulty in levels]
    heldout = balanced_head(heldout, config.heldout_max_tasks, key=lambda t: t.difficulty)
    return {"exam": exam, "heldout": heldout}


def comparison_tasks(run_dir: str | Path, config: ComparisonConfig) -> dict[str, list[Task]]:
    """The run's exam and held-out tasks (built with the synthesis defaults when missing)."""
    from vsearcher_lite.evaluation.benchmarks import ensure_sandbox_eval_tasks

    tasks = ensure_sandbox_eval_tasks(run_dir, profile=config.profile, seed=config.seed,
                                      world=config.world, progress=config.progress)
    selected = select_tasks(exam_and_heldout(tasks), config)
    if not selected["exam"] and not selected["heldout"]:
        raise InputError(f"{Path(run_dir) / 'filter'}: no exam or held-out tasks to compare on")
    return selected


def group_cells(by_benchmark: dict[str, dict], key: str) -> dict[str, float | None]:
    """One policy's ``key`` (``accuracy`` or ``se``) in the table's groups: the exam, each
    held-out level and the headline (easy + medium + hard).

    >>> cells = group_cells({"exam": {"n_tasks": 10, "pass_at_1": 0.1},
    ...                      "heldout": {"by_difficulty": {"easy": {"accuracy": 1.0, "se": 0.0}},
    ...                                  "headline": {"accuracy": 0.5, "se": 0.25}}}, "se")
    >>> cells["exam"], cells["easy"], cells["hard"], cells["easy+medium+hard"]
    (0.0949, 0.0, None, 0.25)
    """
    exam, heldout = by_benchmark.get("exam") or {}, by_benchmark.get("heldout") or {}
    older = heldout.get("accuracy_by_difficulty") or {}  # metrics written before the groups
    levels = heldout.get("by_difficulty") or {level: {"accuracy": a} for level, a in older.items()}
    exam_cell = (exam.get("pass_at_1") if key == "accuracy"
                 else binomial_se(exam.get("pass_at_1"), exam.get("n_tasks", 0)))
    return {"exam": exam_cell,
            **{level: (levels.get(level) or {}).get(key) for level in HELDOUT_DIFFICULTIES},
            HEADLINE_GROUP: (heldout.get("headline") or {}).get(key)}


def comparison_metrics(results: dict[str, dict[str, dict]], status: dict[str, dict]) -> dict:
    """The stage's metrics from ``{policy: {benchmark: evaluate() metrics}}`` and each status."""
    names = list(status)
    accuracy = {n: group_cells(results[n], "accuracy") if n in results else None for n in names}
    accuracy_se = {n: group_cells(results[n], "se") if n in results else None for n in names}

    def per(key: Callable[[dict], Any]) -> dict:
        return {n: {b: key(m) for b, m in results[n].items()} if n in results else None
                for n in names}

    def field_of(name: str) -> dict:
        return per(lambda m: m.get(name))

    return {
        "order": names,  # the rows in reading order (JSON objects are stored with sorted keys)
        "policies": status,
        "evaluated": [n for n in names if n in results],
        "missing": {n: s["reason"] for n, s in status.items() if s["state"] != "evaluated"},
        "exam_accuracy": {n: (a or {}).get("exam") for n, a in accuracy.items()},
        # every held-out task, one-hop included (the headline is accuracy[n][HEADLINE_GROUP])
        "heldout_accuracy": {n: (results[n].get("heldout") or {}).get("pass_at_1")
                             if n in results else None for n in names},
        "accuracy": accuracy,
        "accuracy_se": accuracy_se,  # binomial standard errors of the same cells
        "n_correct": field_of("n_correct"),
        "n_tasks_by_policy": field_of("n_tasks"),
        **{k: field_of(k) for k in ("format_valid_rate", "mean_tool_calls",
                                    "mean_tool_calls_by_type", "terminations")},
        # cost: the evaluation's wall time over the tasks it ran (reused results are not timed)
        "wall_seconds_per_task": field_of("wall_seconds_per_task"),
        "wall_timed_tasks": field_of("wall_timed_tasks"),
        # latency: one episode from start to answer, with its wait for the rest of its batch
        "episode_seconds": per(lambda m: (m.get("seconds_per_task") or {}).get("mean")),
    }


def table_rows(metrics: dict) -> list[dict]:
    """The paper's table 1 for this run: per policy, its state and Pass@1 per group (older
    metrics with only ``exam_accuracy``/``heldout_accuracy`` and ``missing`` too).

    >>> row = table_rows({"policies": {"rl": {"state": "missing"}}, "accuracy": {"rl": None}})[0]
    >>> row["policy"], row["state"], row["exam"], row[HEADLINE_GROUP]
    ('rl', 'missing', None, None)
    >>> [(r["policy"], r["state"], r["exam"]) for r in table_rows(
    ...     {"exam_accuracy": {"sft": 0.5}, "missing": {"rl": "not trained yet"}})]
    [('sft', 'evaluated', 0.5), ('rl', 'missing', None)]
    """
    policies, missing = metrics.get("policies") or {}, metrics.get("missing") or {}
    accuracy = metrics.get("accuracy") or {}
    by_benchmark = {b: metrics.get(f"{b}_accuracy") or {} for b in BENCHMARKS}
    names = metrics.get("order") or list(dict.fromkeys(
        [*policies, *accuracy, *by_benchmark["exam"], *by_benchmark["heldout"], *missing]))
    rows = []
    for name in names:
        found = accuracy.get(name) or {b: v.get(name) for b, v in by_benchmark.items()}
        state = (policies.get(name) or {}).get("state")
        state = state or ("missing" if name in missing else "evaluated")
        rows.append({"policy": name, "state": state, **{g: found.get(g) for g in TABLE_GROUPS}})
    return rows


def table_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=["policy", "state", *TABLE_GROUPS], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def read_comparison(run_dir: str | Path) -> dict:
    """``RUN_DIR/comparison/metrics.json``, or an ``InputError`` saying what to run."""
    from vsearcher_lite.runio import read_json

    path = Path(run_dir) / STAGE / "metrics.json"
    if not path.exists():
        raise InputError(f"{path} does not exist: run notebook 08 "
                         "(or evaluation.comparison.run_comparison) first")
    return read_json(path)


def eval_name(benchmark: str, policy: str) -> str:
    """The folder under ``RUN_DIR/eval/`` of one cell of the table: ``exam-sft`` ..."""
    return f"{benchmark}-{policy}"


def evaluate_policy(run_dir: str | Path, name: str, policy: Policy, tasks: dict[str, list[Task]],
                    config: ComparisonConfig, log: Callable[[str], None]
                    ) -> tuple[dict[str, dict], dict[str, int]]:
    """One policy on both benchmarks; ``({benchmark: metrics}, {benchmark: results reused})``."""
    out, reused = {}, {}
    for benchmark in BENCHMARKS:
        if not tasks[benchmark]:
            continue
        eval_config = config.eval_config(benchmark)
        target = eval_name(benchmark, name)
        reused[benchmark] = 0
        source = STAGE_EVAL_NAMES.get(name)
        if benchmark == "heldout" and source:
            identity = run_identity(policy, eval_config, resolve_judge(None, eval_config))
            reused[benchmark] = adopt_results(run_dir, source, target, tasks[benchmark], identity)
        start = time.perf_counter()
        m = out[benchmark] = evaluate(run_dir, tasks[benchmark], policy, config=eval_config,
                                      name=target, benchmark=benchmark)
        log(f"[compare] {target}: Pass@1 {m['pass_at_1']} ({m['n_correct']}/{m['n_tasks']}); "
            f"{reused[benchmark]} reused, {m['evaluated_this_run']} run in "
            f"{time.perf_counter() - start:.1f} s")
    return out, reused


def run_comparison(run_dir: str | Path, config: ComparisonConfig | None = None, *,
                   log: Callable[[str], None] = print) -> dict:
    """Evaluate every policy on the exam and the held-out tasks; write and return the metrics."""
    from vsearcher_lite.manifest import utc_now, write_manifest

    config = config or ComparisonConfig.for_profile("cpu")
    start = time.perf_counter()
    tasks = comparison_tasks(run_dir, config)
    rows = {name: policy_spec(name, run_dir, config.profile)
            for name in config.policies}
    rows.update(config.extra_policies)
    status: dict[str, dict] = {}
    results: dict[str, dict[str, dict]] = {}
    for name, spec in rows.items():
        reason = unavailable_reason(name, spec, config.world)
        if reason:
            status[name] = {"state": "missing", "spec": redact(spec), "reason": reason}
            log(f"[compare] {name}: {reason}")
            continue
        policy = make_policy(spec, config.heldout_eval_config())
        policy.name = name  # as the stages name their evaluations, so their results are reused
        results[name], reused = evaluate_policy(run_dir, name, policy, tasks, config, log)
        names = {b: eval_name(b, name) for b in results[name]}
        status[name] = {"state": "evaluated", "spec": redact(spec), "reason": None,
                        "reused": reused, "eval_names": names}
        del policy
        gc.collect()  # one model in memory at a time (8B checkpoints on the GPU profiles)
    metrics = comparison_metrics(results, status)
    levels = [t.difficulty for t in tasks["heldout"]]
    metrics.update(
        n_tasks={"exam": len(tasks["exam"]), "heldout": len(levels),
                 "heldout_by_difficulty": {d: levels.count(d) for d in LEVEL_ORDER if d in levels}},
        settings={"comparison": config.to_dict(),
                  **{b: config.eval_config(b).result_settings() for b in BENCHMARKS}},
        seconds=round(time.perf_counter() - start, 3),
        updated_at=utc_now(),
    )
    stage = RunDir(run_dir).stage(STAGE)
    atomic_write_json(stage / "metrics.json", metrics)
    atomic_write_text(stage / "table.csv", table_csv(table_rows(metrics)))
    write_manifest(run_dir, STAGE, metrics["settings"], metrics["seconds"],
                   extra={"policies": {n: s["spec"] for n, s in status.items()},
                          "missing": metrics["missing"]})
    return metrics
