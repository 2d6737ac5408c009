"""Stage `grpo`: multi-turn GRPO in the search environment (paper 2.3, A.4); the cpu engine.

``run_grpo(run_dir, config) -> metrics`` starts from the SFT checkpoint (``RUN_DIR/sft/checkpoint``
or ``config.init``), evaluates it greedily on the held-out tasks (``evaluation.evaluate``, name
``sft``; stored results are reused after a re-run check), trains, saves ``RUN_DIR/grpo/checkpoint``
(the SFT checkpoint's layout, so ``transformers:RUN_DIR/grpo/checkpoint`` is an evaluation
policy), evaluates the RL model on the same tasks with the same settings (name ``rl``) and reports
their paired difference with its standard error. ``config.engine`` picks the engine:
``cpu`` is this module's plain PyTorch loop; ``trl`` is TRL's ``GRPOTrainer``
(``trl_engine.py``, the GPU profiles). Both use the same rollouts (``rollout.py``) and the same
rules (``objective.py``).

One step of the cpu engine:

1. draw P training tasks (``TaskSampler``: the difficulty mix, or the highest-variance tasks) from the
   RL pool (``task_source``: ``RUN_DIR/filter/rl_tasks.jsonl``, seeds SFT never trained on; or SFT's
   own ``train.jsonl``);
2. run G episodes of each in the environment, in lockstep on one batched backend, judge them,
   re-render them into ids and policy-token masks (``rollout.rollout_groups``); with dynamic
   sampling (``draw_groups``, DAPO) groups whose rewards are all equal are dropped and more rounds of
   P tasks are drawn until P groups have reward variance (at most ``max_draw_rounds`` rounds);
3. group-normalise the rewards; apply the fatal-aware clamp and mask (option), the exclusions of
   A.4 and drop zero-variance groups (``assign_advantages``);
4. one no-grad pass over the batch's trajectories: the mean token entropy of the policy tokens (logged),
   the rollout policy's log-probabilities (GRPO's "old" policy) and, when ``beta > 0``, the
   reference model's;
5. ``mu`` AdamW updates on the batch (micro-batches with gradient accumulation, clipped ratio,
   k3 KL, token-level mean), constant learning rate, gradient norm clipped;
6. one row of ``RUN_DIR/grpo/steps.csv``: reward, accuracy, entropy, response length, tool calls by
   type, format-failure, excluded and fatal shares (over every drawn trajectory), groups drawn,
   all-equal (dropped), kept and surplus, rollout rounds, KL, clip fraction, seconds.

Outputs in ``RUN_DIR/grpo/``: ``checkpoint/``, ``steps.csv``, ``rollouts.jsonl`` (one summary per
trajectory, no token ids), ``metrics.json``. The evaluations are in ``RUN_DIR/eval/sft`` and
``RUN_DIR/eval/rl``.

Deviations from the paper (A.4), cpu profile: the 5M-parameter tiny model instead of
Qwen3-VL-8B; 4 prompts x 8 rollouts per step instead of 32 x 8; lr 5e-5 instead of 2e-6; two
updates per batch with clipping; a small KL to the SFT model (0.02) against the collapse seen on
small models without it; temperature 0.8; episodes bounded like the SFT evaluation (200 new tokens per
turn, 10 tool calls, 2,048 positions); training limited to what a 5.5-minute budget leaves after
the two evaluations; one-hop, easy and medium tasks 2 : 2 : 1 instead of easy, medium and hard
4 : 3 : 3 (the levels the tiny SFT model solves sometimes, so that groups have reward variance); the
offline match judge instead of Qwen2.5-72B.
"""

from __future__ import annotations

import copy
import json
import random
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from vsearcher_lite.rl.config import GRPOConfig
from vsearcher_lite.training.config import training_budget_s
from vsearcher_lite.rl.objective import (
    final_advantage,
    group_advantages,
    grpo_loss,
    loss_mask,
    paired_difference,
    share,
    token_entropy,
)
from vsearcher_lite.rl.rollout import RolloutSample, RolloutSettings, RolloutTiming, TrajectoryEncoder, rollout_groups
from vsearcher_lite.runio import (
    InputError,
    JsonlLog,
    RunDir,
    atomic_write_text,
    check_same_settings,
    csv_text,
    read_number_rows,
    write_jsonl,
)

STAGE = "grpo"
SAVE_MARGIN_S = 15.0  # saving the checkpoint and loading the evaluation's second model
RL_EVAL_SLACK = 1.2  # the RL model's episodes may run longer than the start's
TOOL_NAMES = ("text_search", "image_search", "visit")
STEP_FIELDS = ("step", "seconds", "step_seconds", "rollout_seconds", "update_seconds", "reward", "accuracy",
               "entropy", "response_length", "response_tokens", "turns", "tool_calls", "text_search", "image_search",
               "visit", "format_failure_share", "excluded_share", "fatal_share", "zero_variance_groups",
               "groups", "groups_kept", "groups_surplus", "draw_rounds", "zero_variance_share", "trained_trajectories",
               "trained_tokens", "kl", "policy_loss", "clip_fraction", "grad_norm", "learning_rate")


# ---------------------------------------------------------------------------------------------
# Inputs


def resolve_init(run_dir: str | Path, config: GRPOConfig) -> Path:
    """The starting checkpoint: ``config.init`` or ``RUN_DIR/sft/checkpoint``; a clear error when missing."""
    path = Path(config.init) if config.init else Path(run_dir) / "sft" / "checkpoint"
    if not (path / "config.json").is_file():
        if config.init:
            raise InputError(f"{path}: no model here (no config.json); give --init a checkpoint folder")
        raise InputError(f"{path}: no SFT checkpoint; run `vsearcher-lite sft --run-dir {run_dir}` first "
                         "(or give --init PATH)")
    return path


def task_path(run_dir: str | Path, config: GRPOConfig) -> Path:
    """``config.train_file``, else the file of ``config.task_source``: the RL pool or SFT's training tasks."""
    if config.train_file:
        return Path(config.train_file)
    return Path(run_dir) / "filter" / ("rl_tasks.jsonl" if config.task_source == "rl" else "train.jsonl")


def train_tasks(run_dir: str | Path, config: GRPOConfig) -> list:
    """The training tasks of the difficulties in ``difficulty_mix`` (file order), from ``task_path``."""
    from vsearcher_lite.agent.trajectories import load_tasks

    path = task_path(run_dir, config)
    if not path.exists():
        if not config.train_file and config.task_source == "rl":
            raise InputError(f"{path}: no RL task pool; run `vsearcher-lite filter --run-dir {run_dir}` (it writes "
                             "the pool), or train on SFT's tasks with --task-source sft")
        raise InputError(f"{path}: no training tasks; run `vsearcher-lite filter` first")
    wanted = {d for d, w in config.difficulty_mix.items() if w > 0}
    tasks = [t for t in load_tasks(path) if t.difficulty in wanted]
    if config.max_train_tasks is not None:
        tasks = tasks[: config.max_train_tasks]
    if not tasks:
        raise InputError(f"{path}: no training tasks of difficulty {', '.join(sorted(wanted))}")
    return tasks


def tasks_in_sft_data(run_dir: str | Path, tasks: list) -> int | None:
    """How many of ``tasks`` have accepted teacher trajectories (``RUN_DIR/trajectories/accepted.jsonl``, SFT's
    data); ``None`` when there are none. Non-zero for the RL pool when the SFT data predates the pool."""
    from vsearcher_lite.runio import read_jsonl

    path = Path(run_dir) / "trajectories" / "accepted.jsonl"
    if not path.is_file():
        return None
    ids = {t.id for t in tasks}
    return len(ids & {r.get("task_id") for r in read_jsonl(path)})


def check_pool_unseen(run_dir: str | Path, tasks: list, config: GRPOConfig, log: Callable[[str], None]) -> int | None:
    """For the RL pool: warn when SFT's data holds some of its tasks (an older run folder filtered again)."""
    if config.train_file or config.task_source != "rl":
        return None
    seen = tasks_in_sft_data(run_dir, tasks)
    if seen:
        log(f"[grpo] warning: {seen} of the {len(tasks)} RL-pool tasks have SFT trajectories in "
            f"{Path(run_dir) / 'trajectories' / 'accepted.jsonl'} (made before the pool): run `trajectories` and `sft` "
            "again for a pool the SFT model has not seen")
    return seen


def mix_counts(n: int, mix: dict[str, float], available: set[str]) -> dict[str, int]:
    """``n`` draws split over the difficulties by ``mix`` (largest remainder), only those ``available``.

    >>> mix_counts(10, {"easy": 4, "medium": 3, "hard": 3}, {"easy", "medium", "hard"})
    {'easy': 4, 'medium': 3, 'hard': 3}
    >>> mix_counts(4, {"easy": 4, "medium": 3, "hard": 3}, {"easy", "medium"})
    {'easy': 2, 'medium': 2}
    """
    weights = {d: float(w) for d, w in mix.items() if w > 0 and d in available}
    if not weights:
        raise ValueError(f"no task of the difficulties {sorted(mix)} is available")
    total = sum(weights.values())
    exact = {d: n * w / total for d, w in weights.items()}
    counts = {d: int(v) for d, v in exact.items()}
    rest = n - sum(counts.values())
    for d in sorted(exact, key=lambda d: (-(exact[d] - counts[d]), list(weights).index(d)))[:rest]:
        counts[d] += 1
    return counts


class TaskSampler:
    """Draws the P tasks of each step.

    ``mix``: each difficulty gets its share of the P draws (``mix_counts``); within a difficulty the
    tasks come in a seeded shuffled order, reshuffled after each pass. ``variance``: the same
    shares, but within a difficulty the tasks whose estimated success rate ``p = (s + 1) / (n + 2)``
    (s successes in n sampled trajectories so far) maximises ``p (1 - p)`` come first, so the
    groups GRPO sees are the ones most likely to have reward variance (unseen tasks have p = 1/2).
    """

    def __init__(self, tasks: list, mix: dict[str, float], seed: int = 0, curriculum: str = "mix"):
        self.rng = random.Random(seed)
        self.mix = mix
        self.curriculum = curriculum
        self.pools: dict[str, list] = {}
        for t in tasks:
            self.pools.setdefault(t.difficulty, []).append(t)
        self.order: dict[str, list] = {}
        self.successes: dict[str, int] = {}
        self.trials: dict[str, int] = {}

    def _next_in_order(self, difficulty: str) -> Any:
        queue = self.order.get(difficulty)
        if not queue:
            queue = list(self.pools[difficulty])
            self.rng.shuffle(queue)
            self.order[difficulty] = queue
        return queue.pop()

    def variance_score(self, task_id: str) -> float:
        p = (self.successes.get(task_id, 0) + 1) / (self.trials.get(task_id, 0) + 2)
        return p * (1 - p)

    def draw(self, n: int) -> list:
        counts = mix_counts(n, self.mix, set(self.pools))
        picked: list = []
        for difficulty, k in counts.items():
            if self.curriculum == "variance":
                pool = list(self.pools[difficulty])
                self.rng.shuffle(pool)  # random order among equal scores
                pool.sort(key=lambda t: -self.variance_score(t.id))
                chosen = pool[:k]
                while len(chosen) < k:  # fewer tasks than draws: repeat
                    chosen.append(pool[len(chosen) % len(pool)])
            else:
                chosen = [self._next_in_order(difficulty) for _ in range(k)]
            picked.extend(chosen)
        return picked

    def record(self, task_id: str, rewards: list[float]) -> None:
        self.successes[task_id] = self.successes.get(task_id, 0) + sum(1 for r in rewards if r > 0)
        self.trials[task_id] = self.trials.get(task_id, 0) + len(rewards)

    def state(self) -> dict:
        """What ``restore`` needs to continue the same sequence of draws (tasks named by id)."""
        return {"rng": self.rng.getstate(), "order": {d: [t.id for t in q] for d, q in self.order.items()},
                "successes": dict(self.successes), "trials": dict(self.trials)}

    def restore(self, state: dict) -> None:
        by_id = {t.id: t for pool in self.pools.values() for t in pool}
        self.rng.setstate(state["rng"])
        self.order = {d: [by_id[i] for i in ids] for d, ids in state["order"].items()}
        self.successes, self.trials = dict(state["successes"]), dict(state["trials"])


def rollout_settings(config: GRPOConfig) -> RolloutSettings:
    from vsearcher_lite.agent.loop import EpisodeLimits
    from vsearcher_lite.agent.protocol import SANDBOX_TODAY, prompt_variant_for

    limits = EpisodeLimits(max_tool_calls=config.max_tool_calls, max_context_chars=config.max_context_chars,
                           wall_clock_s=config.wall_clock_s)
    return RolloutSettings(limits=limits, temperature=config.temperature, top_p=config.top_p,
                           max_tokens=config.max_tokens, prompt_variant=prompt_variant_for(config.profile),
                           today=SANDBOX_TODAY if config.world == "sandbox" else None, seed=config.seed,
                           search_penalty=config.search_penalty, fatal_k=config.fatal_k,
                           max_prompt_tokens=config.max_prompt_tokens, max_response_tokens=config.max_response_tokens)


def tool_top_k(config: GRPOConfig) -> int:
    from vsearcher_lite.agent.trajectories import TrajectoryConfig

    return config.top_k or TrajectoryConfig.for_profile(config.profile).top_k


def rollout_toolbox(run_dir: str | Path, config: GRPOConfig):
    """The run's toolbox with the profile's result count and observation style: the tools as the SFT
    data and the evaluation show them (one toolbox, shared by the episode threads)."""
    from vsearcher_lite.agent.protocol import prompt_variant_for
    from vsearcher_lite.tools.factory import make_toolbox

    return make_toolbox(run_dir, world=config.world, top_k=tool_top_k(config),
                        observations=prompt_variant_for(config.profile))


# ---------------------------------------------------------------------------------------------
# Drawing the step's groups (dynamic sampling)


def has_signal(group: list[RolloutSample]) -> bool:
    """Whether a group's rewards differ (equal rewards give every advantage 0: no gradient)."""
    return not group_advantages([s.reward for s in group]).zero_variance


def draw_groups(sampler: "TaskSampler", rollout: Callable[[list, int], list[list[RolloutSample]]],
                config: GRPOConfig) -> tuple[list[list[RolloutSample]], list[RolloutSample], dict]:
    """The step's groups: ``(groups to train on, every sample drawn, accounting)``.

    ``rollout(tasks, round)`` runs one group per task. Without ``dynamic_sampling`` one round of
    P tasks is the batch, as drawn. With it (DAPO), groups whose rewards are all equal are dropped and
    rounds of P more tasks are drawn until P groups with reward variance are in hand or
    ``max_draw_rounds`` rounds have run; the first P such groups (in draw order) are the batch, later
    ones are surplus (drawn, not trained). Every drawn group is recorded by the sampler.
    """
    want = config.prompts_per_step
    rounds = config.max_draw_rounds if config.dynamic_sampling else 1
    batch: list[list[RolloutSample]] = []
    drawn: list[RolloutSample] = []
    stats = {"groups": 0, "zero_variance_groups": 0, "groups_kept": 0, "groups_surplus": 0, "draw_rounds": 0}
    for r in range(rounds):
        tasks = sampler.draw(want)
        groups = rollout(tasks, r)
        stats["draw_rounds"] += 1
        for task, group in zip(tasks, groups):
            sampler.record(task.id, [s.reward for s in group])
            drawn.extend(group)
            stats["groups"] += 1
            signal = has_signal(group)
            stats["zero_variance_groups"] += int(not signal)
            if not config.dynamic_sampling or (signal and len(batch) < want):
                batch.append(group)
                stats["groups_kept"] += int(signal)
            elif signal:
                stats["groups_surplus"] += 1
        if len(batch) >= want:
            break
    stats["zero_variance_share"] = round(stats["zero_variance_groups"] / stats["groups"], 4) if stats["groups"] else None
    return batch, drawn, stats


def prescreen(backend, toolbox, tasks: list, samples: int, settings: RolloutSettings, judge, *,
              tasks_per_call: int = 4) -> dict[str, int]:
    """Task id -> correct answers in ``samples`` sampled episodes of the current policy (no update).

    The episodes are seeded apart from training's (step -1). A task with ``0 < correct < samples``
    is one where the policy succeeds sometimes but not always: the tasks whose groups carry signal.
    """
    out: dict[str, int] = {}
    for part in chunks(tasks, max(1, tasks_per_call)):
        groups = rollout_groups(backend, toolbox, part, samples, settings, judge, None, step=-1)
        for task, group in zip(part, groups):
            out[task.id] = sum(1 for s in group if s.correct)
    return out


def run_prescreen(tasks: list, backend, toolbox, settings: RolloutSettings, judge, config: GRPOConfig, out: Path,
                  log: Callable[[str], None]) -> dict:
    """The ``prescreen`` curriculum: screen ``prescreen_tasks`` candidates (drawn by the difficulty mix) with
    ``prescreen_samples`` episodes each, write ``prescreen.jsonl``; returns the kept ``tasks`` and counts."""
    t0 = time.perf_counter()
    candidates = TaskSampler(tasks, config.difficulty_mix, seed=config.seed).draw(min(config.prescreen_tasks, len(tasks)))
    candidates = list({t.id: t for t in candidates}.values())
    k = config.prescreen_samples
    successes = prescreen(backend, toolbox, candidates, k, settings, judge,
                          tasks_per_call=max(1, (config.rollout_batch or config.batch_trajectories) // k))
    write_jsonl(out / "prescreen.jsonl", [{"id": t.id, "difficulty": t.difficulty, "correct": successes[t.id],
                                           "samples": k} for t in candidates])
    kept = prescreened_tasks(candidates, successes, k)
    levels = sorted({t.difficulty for t in candidates})
    counts = {lvl: {"screened": sum(1 for t in candidates if t.difficulty == lvl),
                    "mixed": sum(1 for t in candidates if t.difficulty == lvl and 0 < successes[t.id] < k),
                    "all_correct": sum(1 for t in candidates if t.difficulty == lvl and successes[t.id] == k)}
              for lvl in levels}
    seconds = round(time.perf_counter() - t0, 2)
    log(f"[grpo] pre-screen: {len(candidates)} tasks x {k} episodes in {seconds} s; solved sometimes but not "
        f"always: {sum(c['mixed'] for c in counts.values())}; training on {len(kept)} tasks")
    return {"tasks": kept, "samples": k, "by_difficulty": counts, "n_kept": len(kept), "seconds": seconds}


def prescreened_tasks(tasks: list, successes: dict[str, int], samples: int) -> list:
    """The curriculum of a pre-screen: per difficulty, the tasks solved sometimes but not always
    (``0 < correct < samples``); a difficulty with none keeps all its tasks. File order.

    >>> from types import SimpleNamespace as T
    >>> tasks = [T(id="a", difficulty="easy"), T(id="b", difficulty="easy"), T(id="c", difficulty="medium")]
    >>> [t.id for t in prescreened_tasks(tasks, {"a": 4, "b": 2, "c": 0}, 4)]
    ['b', 'c']
    """
    mixed = {t.id for t in tasks if 0 < successes.get(t.id, 0) < samples}
    levels_with_mixed = {t.difficulty for t in tasks if t.id in mixed}
    return [t for t in tasks if t.id in mixed or t.difficulty not in levels_with_mixed]


# ---------------------------------------------------------------------------------------------
# Advantages and masks of one step


def assign_advantages(groups: list[list[RolloutSample]], config: GRPOConfig) -> dict:
    """Set each sample's ``advantage``, ``loss_mask`` and ``in_loss``; returns the step's group statistics.

    Every reward enters its group's baseline; then the fatal-aware clamp and mask (when enabled),
    the A.4 exclusions, and the zero-variance drop decide what reaches the loss.
    """
    zero_variance = 0
    for group in groups:
        stats = group_advantages([s.reward for s in group], scale=config.scale_rewards)
        zero_variance += int(stats.zero_variance)
        for sample, adv in zip(group, stats.advantages):
            fatal = sample.fatal if config.fatal_aware else None
            sample.advantage = final_advantage(adv, fatal=fatal, fatal_aware=config.fatal_aware)
            policy = sample.encoded.policy_mask if sample.encoded is not None else []
            mask = loss_mask(policy, excluded=sample.excluded, fatal=fatal, fatal_aware=config.fatal_aware)
            if stats.zero_variance and config.drop_zero_variance:
                mask = [0] * len(mask)
            sample.loss_mask = mask
            sample.in_loss = any(mask)
    return {"zero_variance_groups": zero_variance, "groups": len(groups)}


# ---------------------------------------------------------------------------------------------
# Log-probabilities


def padded_masks(samples: list[RolloutSample], length: int, attr: str = "loss_mask"):
    """A ``(B, length)`` tensor of per-sample masks, right-padded with 0."""
    import torch

    out = torch.zeros(len(samples), length, dtype=torch.long)
    for i, s in enumerate(samples):
        m = getattr(s, attr) if attr != "policy_mask" else s.encoded.policy_mask
        out[i, : len(m)] = torch.tensor(m[:length], dtype=torch.long)
    return out


def model_inputs(batch: dict) -> dict:
    keep = ("input_ids", "attention_mask", "pixel_values", "image_grid_thw", "mm_token_type_ids")
    return {k: batch[k] for k in keep if k in batch}


def token_logps(model, batch: dict, positions_mask, *, with_entropy: bool = False):
    """Log-probabilities of the taken tokens at the masked positions, ``(B, T)`` (0 elsewhere).

    ``positions_mask[b, t] = 1`` asks for ``log p(ids[b, t] | ids[b, :t])``. Only those positions go
    through the output layer (the policy tokens are a small share of a trajectory), which saves
    most of the vocabulary projection. With ``with_entropy`` the entropy of each of those
    next-token distributions is returned too.
    """
    import torch

    device = next(model.parameters()).device
    inputs = {k: v.to(device) if hasattr(v, "to") else v for k, v in model_inputs(batch).items()}
    ids = inputs["input_ids"]
    want = positions_mask.to(device).bool().clone()
    want[:, 0] = False  # the first token has no prediction
    source = torch.zeros_like(want)
    source[:, :-1] = want[:, 1:]  # logits at t-1 predict token t
    if hasattr(model, "lm_head") and hasattr(model, "model"):
        hidden = model.model(**inputs, use_cache=False).last_hidden_state
        logits = model.lm_head(hidden[source])
    else:
        logits = model(**inputs, use_cache=False).logits[source]
    logp_all = torch.log_softmax(logits.float(), dim=-1)
    taken = ids[want]
    picked = logp_all.gather(-1, taken.unsqueeze(-1)).squeeze(-1)
    out = torch.zeros(ids.shape, dtype=picked.dtype, device=picked.device)
    out = out.masked_scatter(want, picked)
    if not with_entropy:
        return out, None
    ent = token_entropy(logits)
    ent_out = torch.zeros(ids.shape, dtype=ent.dtype, device=ent.device).masked_scatter(want, ent)
    return out, ent_out


def chunks(items: list, size: int) -> list[list]:
    """``items`` in consecutive pieces of ``size``.

    >>> chunks([1, 2, 3, 4, 5], 2)
    [[1, 2], [3, 4], [5]]
    """
    return [items[i:i + size] for i in range(0, len(items), size)]


def score_samples(model, samples: list[RolloutSample], encoder: TrajectoryEncoder, micro_batch: int,
                  ref_model=None) -> dict:
    """No-grad pass: entropy over every sample's policy tokens; old (and reference) log-probs of the
    samples in the loss, stored on them as ``old_logp`` / ``ref_logp`` lists aligned with their ids."""
    import torch

    ent_sum, ent_n = 0.0, 0
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for part in chunks(samples, micro_batch):
                batch = encoder.collate([s.example for s in part])
                length = batch["input_ids"].shape[1]
                policy = padded_masks(part, length, "policy_mask").to(next(model.parameters()).device)
                logp, ent = token_logps(model, batch, policy, with_entropy=True)
                ent_sum += float((ent * policy).sum())
                ent_n += int(policy.sum())
                ref = None
                if ref_model is not None and any(s.in_loss for s in part):
                    ref, _ = token_logps(ref_model, batch, policy)
                for i, s in enumerate(part):
                    n = len(s.encoded.input_ids)
                    s.old_logp = logp[i, :n].tolist()
                    s.ref_logp = ref[i, :n].tolist() if ref is not None else None
    finally:
        model.train(was_training)
    return {"entropy": ent_sum / ent_n if ent_n else None}


def padded_values(rows: list[list[float]], length: int):
    import torch

    out = torch.zeros(len(rows), length)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r[:length])
    return out


def update_policy(model, optimizer, samples: list[RolloutSample], encoder: TrajectoryEncoder, config: GRPOConfig) -> dict:
    """``mu`` optimizer updates on the samples in the loss; returns the logged statistics."""
    import torch

    trained = [s for s in samples if s.in_loss]
    if not trained:
        return {"kl": None, "policy_loss": None, "clip_fraction": None, "grad_norm": None, "trained_tokens": 0}
    n_tokens = sum(sum(s.loss_mask) for s in trained)
    normaliser = n_tokens if config.aggregation == "token" else len(trained)
    stats: dict[str, Any] = {"trained_tokens": int(n_tokens)}
    model.train()
    for epoch in range(config.mu):
        weighted = {"policy_loss": 0.0, "clip_fraction": 0.0, "kl": 0.0}
        for part in chunks(trained, config.micro_batch_size):
            batch = encoder.collate([s.example for s in part])
            length = batch["input_ids"].shape[1]
            mask = padded_masks(part, length).to(next(model.parameters()).device)
            logp, _ = token_logps(model, batch, mask)
            old = padded_values([s.old_logp for s in part], length).to(logp.device)
            ref = padded_values([s.ref_logp for s in part], length).to(logp.device) if config.beta and part[0].ref_logp is not None else None
            adv = torch.tensor([s.advantage for s in part], dtype=logp.dtype, device=logp.device)
            loss, part_stats = grpo_loss(logp, old, adv, mask, ref_logp=ref, beta=config.beta, clip_low=config.clip_low,
                                         clip_high=config.clip_high, aggregation=config.aggregation, n_tokens=normaliser)
            loss.backward()
            for key in weighted:
                if part_stats.get(key) is not None:
                    weighted[key] += part_stats[key] * part_stats["tokens"]
        grad_norm = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], config.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if epoch == 0:
            stats["kl"] = weighted["kl"] / n_tokens if config.beta else None
            stats["grad_norm"] = float(grad_norm)
        stats["policy_loss"] = weighted["policy_loss"] / n_tokens
        stats["clip_fraction"] = weighted["clip_fraction"] / n_tokens  # the last update's (0 when mu = 1)
    return stats


# ---------------------------------------------------------------------------------------------
# Logging


def _mean(values) -> float | None:
    values = [float(v) for v in values if v is not None]
    return round(sum(values) / len(values), 5) if values else None


def step_row(step: int, samples: list[RolloutSample], group_stats: dict, score: dict, update: dict,
             times: dict, learning_rate: float) -> dict:
    """One row of ``steps.csv``: what the policy did this step and what the update did."""
    n = len(samples)
    row = {
        "step": step,
        "reward": _mean(s.reward for s in samples),
        "accuracy": _mean(float(s.correct) for s in samples),
        "entropy": round(score["entropy"], 5) if score.get("entropy") is not None else None,
        "response_length": _mean(s.encoded.policy_tokens for s in samples if s.encoded),
        "response_tokens": _mean(s.encoded.response_tokens for s in samples if s.encoded),
        "turns": _mean(len(s.trajectory.turns) for s in samples),
        "tool_calls": _mean(s.trajectory.n_tool_calls for s in samples),
        "format_failure_share": _mean(float(s.format_failure) for s in samples),
        "excluded_share": _mean(float(s.excluded) for s in samples),
        "fatal_share": _mean(float(s.fatal is not None) for s in samples),
        **{k: group_stats.get(k) for k in ("zero_variance_groups", "groups", "groups_kept", "groups_surplus",
                                           "draw_rounds", "zero_variance_share")},
        "trained_trajectories": sum(1 for s in samples if s.in_loss),
        "trained_tokens": update.get("trained_tokens", 0),
        "kl": _round(update.get("kl")),
        "policy_loss": _round(update.get("policy_loss")),
        "clip_fraction": _round(update.get("clip_fraction")),
        "grad_norm": _round(update.get("grad_norm")),
        "learning_rate": learning_rate,
        **{k: round(v, 3) for k, v in times.items()},
    }
    for tool in TOOL_NAMES:
        row[tool] = round(sum(s.tool_counts.get(tool, 0) for s in samples) / n, 4) if n else None
    return row


def _round(value, digits: int = 6):
    return round(float(value), digits) if value is not None else None


def steps_csv(rows: list[dict]) -> str:
    return csv_text(rows, STEP_FIELDS)


def read_steps(run_dir: str | Path, name: str = STAGE) -> list[dict]:
    """The rows of ``RUN_DIR/<name>/steps.csv`` (numbers as floats, blanks as None)."""
    return read_number_rows(RunDir(run_dir).require(name, "vsearcher-lite grpo") / "steps.csv")


def zero_variance_share(rows: list[dict]) -> float | None:
    """The share of groups (over the run) whose rewards were all equal.

    >>> zero_variance_share([{"zero_variance_groups": 1, "groups": 4}, {"zero_variance_groups": 3, "groups": 4}])
    0.5
    """
    counted = [r for r in rows if r.get("zero_variance_groups") is not None and r.get("groups")]
    total = sum(r["groups"] for r in counted)
    return sum(r["zero_variance_groups"] for r in counted) / total if total else None


def training_summary(rows: list[dict], samples_excluded: list[bool]) -> dict:
    """The training part of ``metrics.json``: first and last 20 % of steps, and shares over the run."""
    rewards = [r.get("reward") for r in rows]
    return {
        "steps": len(rows),
        "reward_first_20pct": share(rewards, first=True),
        "reward_last_20pct": share(rewards, first=False),
        "accuracy_first_20pct": share([r.get("accuracy") for r in rows], first=True),
        "accuracy_last_20pct": share([r.get("accuracy") for r in rows], first=False),
        "format_failure_rate_first_20pct": share([r.get("format_failure_share") for r in rows], first=True),
        "format_failure_rate_last_20pct": share([r.get("format_failure_share") for r in rows], first=False),
        "tool_calls_first_20pct": share([r.get("tool_calls") for r in rows], first=True),
        "tool_calls_last_20pct": share([r.get("tool_calls") for r in rows], first=False),
        "excluded_share": (sum(samples_excluded) / len(samples_excluded)) if samples_excluded else None,
        "zero_variance_group_share": zero_variance_share(rows),
        "kl_last": next((r["kl"] for r in reversed(rows) if r.get("kl") is not None), None),
    }


# ---------------------------------------------------------------------------------------------
# Evaluation: SFT and RL on the same held-out tasks


def eval_config_for(config: GRPOConfig):
    """Greedy evaluation settings equal to the SFT stage's (so its ``eval/sft`` results can be reused)."""
    from vsearcher_lite.training.config import SFTConfig

    sft = SFTConfig.for_profile(config.profile)
    # No per-episode wall clock: batched episodes wait for each other, which is not the policy's doing.
    return sft.eval_config(seed=config.seed, world=config.world, max_tokens=config.eval_max_tokens,
                           max_tool_calls=config.eval_max_tool_calls, max_context_chars=config.eval_max_context_chars,
                           wall_clock_s=1e9, concurrency=config.eval_batch, device=config.device, progress=config.progress)


def batched_policy(name: str, spec: str, model, processor, config: GRPOConfig):
    """An evaluation ``Policy`` whose episodes generate together on one batched backend."""
    from vsearcher_lite.evaluation.evaluate import Policy
    from vsearcher_lite.rl.batched_chat import BatchedTransformersChat

    backend = BatchedTransformersChat(model, processor, max_batch=config.eval_batch, max_wait_s=0.05)
    return Policy(name, spec, lambda task: backend, shared=backend, batch=config.eval_batch)


def same_episode(stored: dict, trajectory) -> bool:
    """Whether a stored evaluation record and a fresh trajectory of the same task tell the same story:
    the same termination, prediction and turn texts (what a stale environment or model would change)."""
    turns = [t.get("text") for t in (stored.get("trajectory") or {}).get("turns", [])]
    return (stored.get("termination") == trajectory.termination and stored.get("prediction") == trajectory.prediction
            and turns == [t.text for t in trajectory.turns])


def stale_reused_results(run_dir: str | Path, name: str, tasks: list, backend, eval_config, n_check: int) -> list[str] | None:
    """Re-run up to ``n_check`` of the tasks already stored under ``eval/<name>`` and compare (nothing is written).

    Returns the ids whose fresh episode differs (empty: the stored results still hold), or ``None``
    when nothing is stored there. Stored results can go stale without their settings changing: a
    rebuilt world or changed tool code gives the same model other observations (seen on this
    project's own run folder: text-search snippets changed between an SFT evaluation and now).
    """
    from vsearcher_lite.agent.loop import run_episode
    from vsearcher_lite.evaluation.evaluate import eval_dir, load_results, toolbox_source
    from vsearcher_lite.rl.batched_chat import run_lockstep

    if not (eval_dir(run_dir, name) / "results.jsonl").is_file():
        return None
    stored = {r["id"]: r for r in load_results(run_dir, name)}
    check = [t for t in tasks if t.id in stored and stored[t.id].get("question") == t.question][:n_check]
    if not check:
        return None
    thread_toolbox, _ = toolbox_source(None, run_dir, eval_config)  # built exactly as evaluate() builds it

    def run_one(task):
        return run_episode(backend, thread_toolbox(), task, limits=eval_config.limits(), sampling=eval_config.sampling(task.id),
                           today=eval_config.today, variant=eval_config.prompt_variant)

    fresh = run_lockstep(backend, check, run_one)
    return [t.id for t, traj in zip(check, fresh) if not same_episode(stored[t.id], traj)]


def evaluate_start(run_dir: str | Path, init_path: Path, model, processor, config: GRPOConfig,
                   log: Callable[[str], None]) -> dict:
    """Evaluate the starting policy (``model``, the weights of ``init_path``) on the held-out tasks.

    The evaluation is ``eval/sft`` (``eval/init`` for another ``--init``). Results already stored
    there with the same settings are reused (``reuse_sft_eval``) after a check: a few of them are
    re-run and must come out the same; otherwise the start is evaluated afresh as
    ``eval/<name>-sft``, leaving the SFT stage's folder as it was. Returns the metrics and, for
    budgeting the RL evaluation, ``seconds_per_task`` as measured here.
    """
    from vsearcher_lite.evaluation.evaluate import evaluate
    from vsearcher_lite.training.sft import heldout_tasks

    tasks = heldout_tasks(run_dir, config)
    eval_config = eval_config_for(config)
    is_run_sft = init_path.resolve() == (Path(run_dir) / "sft" / "checkpoint").resolve()
    name = "sft" if is_run_sft else "init"
    spec = f"transformers:{init_path.resolve()}"  # absolute: the results must name it from any working folder
    out: dict[str, Any] = {"tasks": tasks, "reuse": "none stored"}
    policy = batched_policy(name, spec, model, processor, config)
    t0 = time.perf_counter()
    fresh, n_checked = False, 0
    if config.reuse_sft_eval:
        stale = stale_reused_results(run_dir, name, tasks, policy.shared, eval_config, config.reuse_check_tasks)
        if stale:
            log(f"[grpo] eval/{name} is stale ({len(stale)} re-run task(s) differ, e.g. {stale[0]}); "
                f"evaluating the start afresh as {config.name}-{name}")
            name, fresh, out["reuse"] = f"{config.name}-{name}", True, "stale"
        elif stale is not None:
            out["reuse"], n_checked = "checked", min(config.reuse_check_tasks, len(tasks))
    else:
        name, fresh, out["reuse"] = f"{config.name}-{name}", True, "off"
    t_checked = time.perf_counter()
    try:
        metrics = evaluate(run_dir, tasks, replace(policy, name=name), name=name, config=eval_config,
                           benchmark="heldout", fresh=fresh)
    except InputError as exc:
        if "other settings" not in str(exc):
            raise
        name, out["reuse"] = f"{config.name}-{name}", "other settings"
        log(f"[grpo] the stored evaluation of the start has other settings; evaluating it as {name}")
        t_checked = time.perf_counter()
        metrics = evaluate(run_dir, tasks, replace(policy, name=name), name=name, config=eval_config,
                           benchmark="heldout", fresh=True)
    ran = metrics.get("evaluated_this_run") or 0
    per_task = ((time.perf_counter() - t_checked) / ran if ran else
                (t_checked - t0) / n_checked if n_checked else None)
    out.update(name=name, metrics=metrics, seconds=round(time.perf_counter() - t0, 2), evaluated_this_run=ran,
               seconds_per_task=per_task)
    log(f"[grpo] eval {name}: accuracy {metrics.get('pass_at_1')} on {len(tasks)} held-out tasks "
        f"({out['seconds']} s, {ran} run now, reuse: {out['reuse']})")
    return out


def evaluate_rl(run_dir: str | Path, start: dict, rl_checkpoint: Path, rl_model, processor, config: GRPOConfig,
                log: Callable[[str], None]) -> dict:
    """Evaluate the RL policy on the start's held-out tasks with the same settings; the paired difference."""
    from vsearcher_lite.evaluation.evaluate import evaluate, load_results

    tasks = start["tasks"]
    t0 = time.perf_counter()
    rl_name = "rl" if config.name == STAGE else f"{config.name}-rl"
    rl_metrics = evaluate(run_dir, tasks, batched_policy(rl_name, f"transformers:{Path(rl_checkpoint).resolve()}", rl_model, processor, config),
                          name=rl_name, config=eval_config_for(config), benchmark="heldout", fresh=True)
    rl_seconds = round(time.perf_counter() - t0, 2)
    log(f"[grpo] eval {rl_name}: accuracy {rl_metrics.get('pass_at_1')} ({rl_seconds} s) on {len(tasks)} held-out tasks")
    by_id_base = {r["id"]: r for r in load_results(run_dir, start["name"])}
    by_id_rl = {r["id"]: r for r in load_results(run_dir, rl_name)}
    ids = [t.id for t in tasks]
    diff = paired_difference([float(by_id_base[i]["correct"]) for i in ids], [float(by_id_rl[i]["correct"]) for i in ids])
    return {"base_name": start["name"], "rl_name": rl_name, "base": start["metrics"], "rl": rl_metrics, "paired": diff,
            "base_seconds": start["seconds"], "rl_seconds": rl_seconds,
            "base_evaluated_this_run": start["evaluated_this_run"], "base_reuse": start["reuse"]}


def evaluate_pair(run_dir: str | Path, init_path: Path, rl_checkpoint: Path, rl_model, processor,
                  config: GRPOConfig, log: Callable[[str], None]) -> dict:
    """Both evaluations after training (the trl engine): the start loaded from ``init_path``, then RL."""
    from vsearcher_lite.model.tiny import load_base

    base_model, _ = load_base(init_path, dtype=config.torch_dtype(), device=str(next(rl_model.parameters()).device))
    start = evaluate_start(run_dir, init_path, base_model, processor, config, log)
    del base_model
    return evaluate_rl(run_dir, start, rl_checkpoint, rl_model, processor, config, log)


# ---------------------------------------------------------------------------------------------
# The stage


def load_policy(init_path: Path, config: GRPOConfig):
    """``(model, processor)`` ready for the cpu engine, on ``config.device``: vision placeholders never
    generated, the vision tower frozen (as in SFT and the paper)."""
    from vsearcher_lite.model.tiny import load_base
    from vsearcher_lite.runtime import resolve_device
    from vsearcher_lite.training.sft import freeze_vision, suppress_vision_tokens

    model, processor = load_base(init_path, dtype=config.torch_dtype(), device=str(resolve_device(config.device)))
    suppress_vision_tokens(model, processor.tokenizer)
    freeze_vision(model)
    return model, processor


RESUME_FILE = "resume.pt"
#: Settings that may change between an interrupted run and its resume (how long, where, how it is shown).
RESUME_FREE = ("max_steps", "minutes", "total_minutes", "save_every", "evaluate", "progress", "threads", "device",
               "report_to")


def resume_identity(config: GRPOConfig) -> dict:
    return {k: v for k, v in config.to_dict().items() if k not in RESUME_FREE and not k.startswith("eval_")}


def save_training_state(out: Path, step: int, model, optimizer, sampler: TaskSampler, rows: list[dict],
                        excluded: list[bool], task_ids: list[str], screened: dict | None, config: GRPOConfig,
                        batch_stats: Any = None) -> Path:
    """Everything the next step depends on, in ``out/resume.pt`` (written aside, then renamed): the
    weights, the optimizer, the task sampler, the rows so far, and the rollout backend's statistics
    (its call count seeds the next batches)."""
    import os

    import torch

    state = {"identity": resume_identity(config), "step": step, "model": model.state_dict(),
             "optimizer": optimizer.state_dict(), "sampler": sampler.state(), "rows": rows, "excluded": excluded,
             "task_ids": task_ids, "screened": screened, "torch_rng": torch.get_rng_state(),
             "batch_stats": batch_stats}
    tmp = out / f".{RESUME_FILE}.tmp"
    torch.save(state, tmp)
    os.replace(tmp, out / RESUME_FILE)
    return out / RESUME_FILE


def load_training_state(out: Path, config: GRPOConfig) -> dict | None:
    """The state an interrupted run of the same settings saved, or None (a run without ``save_every``
    starts over and removes any). Other settings are refused, naming the first that differs."""
    import torch

    path = out / RESUME_FILE
    if not path.exists():
        return None
    if not config.save_every:
        path.unlink()
        return None
    state = torch.load(path, weights_only=False)
    check_same_settings(path, state["identity"], resume_identity(config))
    return state


def run_grpo(run_dir: str | Path, config: GRPOConfig | None = None, *, log: Callable[[str], None] = print) -> dict:
    """Train, save, evaluate; returns the metrics (also written to ``RUN_DIR/<name>/metrics.json``)."""
    config = config or GRPOConfig.for_profile("cpu")
    config.check()
    if config.engine == "trl":
        from vsearcher_lite.rl.trl_engine import run_grpo_trl

        return run_grpo_trl(run_dir, config, log=log)
    return run_grpo_cpu(run_dir, config, log=log)


def run_grpo_cpu(run_dir: str | Path, config: GRPOConfig, *, log: Callable[[str], None] = print) -> dict:
    """The cpu engine (see the module docstring)."""
    import torch
    from tqdm.auto import tqdm

    from vsearcher_lite.agent.judge import make_judge
    from vsearcher_lite.model.tiny import save_base
    from vsearcher_lite.rl.batched_chat import BatchedTransformersChat
    from vsearcher_lite.runtime import set_threads

    wall_start = time.perf_counter()
    threads = set_threads(config.threads) if config.use_cpu else torch.get_num_threads()
    torch.manual_seed(config.seed)
    rd = RunDir(run_dir)
    init_path = resolve_init(run_dir, config)
    tasks = train_tasks(run_dir, config)
    pool_seen = check_pool_unseen(run_dir, tasks, config, log)
    model, processor = load_policy(init_path, config)
    out = rd.stage(config.name)  # made once the tasks and the model have loaded: a bad input leaves no folder
    ref_model = None
    if config.beta > 0:
        ref_model = copy.deepcopy(model).eval()
        for p in ref_model.parameters():
            p.requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, betas=(config.adam_beta1, config.adam_beta2),
                                  weight_decay=config.weight_decay)
    encoder = TrajectoryEncoder(processor)
    backend = BatchedTransformersChat(model, processor, max_batch=config.rollout_batch or config.batch_trajectories,
                                      max_new_tokens=config.max_tokens)
    toolbox = rollout_toolbox(run_dir, config)
    judge = make_judge(config.judge)
    settings = rollout_settings(config)
    screened = None
    resumed = load_training_state(out, config)
    if resumed is not None:  # the screened tasks of the interrupted run, without screening again
        screened = resumed["screened"]
        by_id = {t.id: t for t in tasks}
        tasks = [by_id[i] for i in resumed["task_ids"]]
    elif config.curriculum == "prescreen":
        screened = run_prescreen(tasks, backend, toolbox, settings, judge, config, out, log)
        tasks = screened.pop("tasks")
    sampler = TaskSampler(tasks, config.difficulty_mix, seed=config.seed,
                          curriculum="mix" if config.curriculum == "prescreen" else config.curriculum)
    log(f"[grpo] cpu engine: {len(tasks)} training tasks, start {init_path}; P={config.prompts_per_step} x "
        f"G={config.generations}, lr {config.learning_rate:g}, mu {config.mu}, beta {config.beta:g}, "
        f"T {config.temperature:g}; {threads} thread(s)")

    start = None
    rl_estimate = None
    if config.evaluate:  # the start first: its time tells how much is left for training
        start = evaluate_start(run_dir, init_path, model, processor, config, log)
        if start["seconds_per_task"] is not None:
            rl_estimate = start["seconds_per_task"] * len(start["tasks"]) * RL_EVAL_SLACK
    budget_s = training_budget_s(config.minutes, config.total_minutes, time.perf_counter() - wall_start,
                                 rl_estimate or 0.0, SAVE_MARGIN_S)
    if budget_s is not None:
        log(f"[grpo] training budget {budget_s:.0f} s (RL evaluation estimated at {rl_estimate or 0:.0f} s)")

    rows: list[dict] = []
    excluded_flags: list[bool] = []
    step = 0
    earlier_s = 0.0
    if resumed is None:
        (out / "rollouts.jsonl").unlink(missing_ok=True)  # a rerun trains from the start again
    else:
        model.load_state_dict(resumed["model"])
        optimizer.load_state_dict(resumed["optimizer"])
        sampler.restore(resumed["sampler"])
        torch.set_rng_state(resumed["torch_rng"])
        backend.stats = resumed["batch_stats"] or backend.stats
        rows, excluded_flags, step = resumed["rows"], resumed["excluded"], resumed["step"]
        # rollouts of steps after the saved one are sampled again
        kept = [r for r in JsonlLog(out / "rollouts.jsonl", key="id").records() if r["step"] < step]
        write_jsonl(out / "rollouts.jsonl", kept)
        log(f"[grpo] resuming after step {step} from {out / RESUME_FILE}")
        # the stage's time before the interruption: its training steps and its pre-screen
        earlier_s = (rows[-1]["seconds"] if rows else 0.0) + ((screened or {}).get("seconds") or 0.0)
    rollout_log = JsonlLog(out / "rollouts.jsonl", key="id")
    max_steps = config.max_steps or 10**9
    stopped_by = "steps"
    train_start = time.perf_counter()
    offset_s = rows[-1]["seconds"] if rows else 0.0  # training time before a resume
    last_step_s = 0.0
    bar = tqdm(total=config.max_steps, initial=step, desc="grpo", disable=not config.progress, leave=False)
    while step < max_steps:
        elapsed = time.perf_counter() - train_start
        if budget_s is not None and step > 0 and elapsed + last_step_s > budget_s:
            stopped_by = "time"
            break
        t0 = time.perf_counter()
        timing = RolloutTiming()

        def rollout(tasks, draw_round, step=step, timing=timing):
            # later rounds number their samples on, so a task drawn twice in a step gets other seeds
            return rollout_groups(backend, toolbox, tasks, config.generations, settings, judge, encoder, step=step,
                                  first_sample=[draw_round * config.generations] * len(tasks), timing=timing)

        groups, drawn, draw_stats = draw_groups(sampler, rollout, config)
        samples = [s for g in groups for s in g]
        assign_advantages(groups, config)
        t1 = time.perf_counter()
        score = score_samples(model, samples, encoder, config.micro_batch_size, ref_model)
        update = update_policy(model, optimizer, samples, encoder, config)
        t2 = time.perf_counter()
        last_step_s = t2 - t0
        times = {"rollout_seconds": t1 - t0, "update_seconds": t2 - t1, "step_seconds": t2 - t0,
                 "seconds": offset_s + t2 - train_start}
        row = step_row(step, drawn, draw_stats, score, update, times, config.learning_rate)
        rows.append(row)
        excluded_flags.extend(s.excluded for s in drawn)
        for s in drawn:
            rollout_log.append({"id": f"{step}:{s.task_id}:{s.sample_index}", "step": step, **s.summary()})
        atomic_write_text(out / "steps.csv", steps_csv(rows))
        bar.update(1)
        bar.set_postfix(reward=row["reward"], fmt_fail=row["format_failure_share"], trained=row["trained_trajectories"])
        step += 1
        if config.save_every and step % config.save_every == 0:
            save_training_state(out, step, model, optimizer, sampler, rows, excluded_flags, [t.id for t in tasks],
                                screened, config, backend.stats)
    bar.close()
    # training time over every resume (each row carries it; a resume that had no step left adds none)
    train_seconds = rows[-1]["seconds"] if rows else time.perf_counter() - train_start
    log(f"[grpo] {len(rows)} steps in {train_seconds:.1f} s ({train_seconds / max(len(rows), 1):.1f} s/step), "
        f"stopped by {stopped_by}; batching {backend.stats.to_dict()}")

    checkpoint = out / "checkpoint"
    model.eval()
    save_base(model, processor, checkpoint)
    (out / RESUME_FILE).unlink(missing_ok=True)  # the finished run needs no resume
    del ref_model, optimizer
    metrics: dict[str, Any] = training_summary(rows, excluded_flags)
    metrics.update(stopped_by=stopped_by, train_seconds=round(train_seconds, 2),
                   seconds_per_step=round(train_seconds / max(len(rows), 1), 3), threads=threads,
                   init=str(init_path), checkpoint=str(checkpoint), n_train_tasks=len(tasks),
                   trajectories=len(excluded_flags), engine="cpu", batching=backend.stats.to_dict(),
                   task_file=str(task_path(run_dir, config)), pool_tasks_in_sft_data=pool_seen,
                   device=str(next(model.parameters()).device))
    if screened is not None:
        metrics["prescreen"] = screened
    if start is not None:
        evals = evaluate_rl(run_dir, start, checkpoint, model, processor, config, log)
        metrics.update(eval_summary(evals))
        metrics["training_budget_s"] = round(budget_s, 1) if budget_s is not None else None
    metrics["seconds"] = round(time.perf_counter() - wall_start + earlier_s, 2)  # summed over resumes
    metrics["config"] = config.to_dict()
    rd.write_metrics(config.name, metrics)
    from vsearcher_lite.manifest import write_manifest

    write_manifest(run_dir, config.name, config.to_dict(), metrics["seconds"])
    return metrics


def eval_summary(evals: dict) -> dict:
    """The held-out part of ``metrics.json``."""
    base, rl, diff = evals["base"], evals["rl"], evals["paired"]
    return {
        "heldout_accuracy_sft": base.get("pass_at_1"),
        "heldout_accuracy_rl": rl.get("pass_at_1"),
        "heldout_paired_diff": round(diff.mean, 5),
        "heldout_paired_se": round(diff.se, 5),
        "heldout_n": diff.n,
        "heldout_flips_gained": diff.gained,
        "heldout_flips_lost": diff.lost,
        "heldout_format_valid_sft": base.get("format_valid_rate"),
        "heldout_format_valid_rl": rl.get("format_valid_rate"),
        "heldout_tool_calls_sft": base.get("mean_tool_calls"),
        "heldout_tool_calls_rl": rl.get("mean_tool_calls"),
        "heldout_terminations_sft": base.get("terminations"),
        "heldout_terminations_rl": rl.get("terminations"),
        "heldout_format_errors_sft": base.get("format_errors"),
        "heldout_format_errors_rl": rl.get("format_errors"),
        "heldout_eval_names": [evals["base_name"], evals["rl_name"]],
        "heldout_eval_seconds": {"sft": evals["base_seconds"], "rl": evals["rl_seconds"]},
        "heldout_sft_evaluated_this_run": evals["base_evaluated_this_run"],
        "heldout_sft_reuse": evals["base_reuse"],
    }


def read_metrics(run_dir: str | Path, name: str = STAGE) -> dict:
    path = RunDir(run_dir).require(name, "vsearcher-lite grpo") / "metrics.json"
    return json.loads(path.read_text(encoding="utf-8"))
