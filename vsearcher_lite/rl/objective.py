"""The maths of multi-turn GRPO, as small pure functions (paper section 2.3 and A.4).

Each function here is one rule of the objective; ``cpu_engine.py`` (the cpu engine) and
``trl_engine.py`` (TRL's ``GRPOTrainer``) both call them, and notebook 07 runs each on a tiny
worked example. Lists of numbers go in and out where that reads best; the loss functions take
torch tensors.

The rules, in the order a training step applies them:

1. **Reward** (paper eq. 6): 1 for a judged-correct final answer, else 0; a trajectory that broke
   the strict format gets 0 whatever it said. Option (MMSearch-R1): a correct
   answer that used search is scaled by ``search_penalty`` (0.9 when enabled).
2. **Group-normalised advantage**: ``(r - mean) / (std + eps)`` over the G samples of one task,
   with the unbiased standard deviation and ``eps = 1e-4``, as TRL computes it (so both engines
   agree). A group whose rewards are all equal has no signal: its advantages are 0 and the group
   is flagged zero-variance (the cpu engine drops it from the loss).
3. **Policy-token mask**: 1 on the tokens the policy wrote (its assistant turns, up to and
   including ``<|im_end|>``), 0 on the system prompt, the question, image tokens and every tool
   response.
4. **Fatal-aware option** (OpenSearch-VL): the fatal step is the first of
   K = 3 consecutive erroneous steps (a tool call that came back as an error, or a turn that broke
   the format); the tokens of that step and of every later step are masked; the trajectory's
   advantage is clamped to be >= 0 (a trajectory that went wrong through a cascade of errors is
   not pushed down for the steps before the cascade); a trajectory whose fatal step is its first
   step leaves the update, but its reward still counts in the group's baseline.
5. **Exclusion** (paper A.4): trajectories that exceed the prompt, response or tool-call limits,
   time out, or hit an unexpected error count in the group statistics and are left out of the loss.
6. **Clipped importance ratio** (PPO / GRPO): per token
   ``-min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A)`` with
   ``ratio = exp(logp - logp_old)``. Aggregation: ``"token"`` (the default, as DAPO and TRL's
   default ``loss_type="dapo"``: the sum over every policy token of the batch divided by their
   number, so long trajectories weigh by their length) or ``"sequence"`` (GRPO's original: the
   mean over each trajectory's tokens, then the mean over trajectories).
7. **KL to a reference** (k3 estimator, Schulman): per token ``exp(q) - q - 1`` with
   ``q = logp_ref - logp``; unbiased for KL(pi || pi_ref), never negative. Weighted by ``beta``;
   the paper's A.4 disables it (``beta = 0``, the default here).
8. **Paired difference** of two policies on the same held-out tasks: the mean of the per-task
   difference, its standard error, and how many tasks flipped each way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

ADVANTAGE_EPS = 1e-4  # TRL's constant, so the cpu engine and the TRL engine give the same numbers
FATAL_K = 3  # OpenSearch-VL: three consecutive erroneous steps make a cascade
PAPER_SEARCH_PENALTY = 0.9  # MMSearch-R1: a correct answer that searched is worth 1 - 0.1
IGNORE_INDEX = -100
AGGREGATIONS = ("token", "sequence")
#: Terminations that leave a trajectory out of the loss (paper A.4): a limit, a timeout, an error.
EXCLUDED_TERMINATIONS = ("max_tool_calls", "context_exceeded", "timeout", "policy_error")


# ---------------------------------------------------------------------------------------------
# Reward and advantages


def trajectory_reward(correct: bool, format_ok: bool, n_searches: int = 0, search_penalty: float | None = None) -> float:
    """The reward of one trajectory (paper eq. 6, optional MMSearch-R1 search penalty).

    >>> trajectory_reward(True, True), trajectory_reward(False, True), trajectory_reward(True, False)
    (1.0, 0.0, 0.0)
    >>> trajectory_reward(True, True, n_searches=2, search_penalty=0.9), trajectory_reward(True, True, 0, 0.9)
    (0.9, 1.0)
    """
    if not format_ok or not correct:
        return 0.0
    if search_penalty is not None and n_searches > 0:
        return float(search_penalty)
    return 1.0


@dataclass(frozen=True)
class GroupAdvantages:
    """The advantages of one group and the statistics they came from."""

    advantages: tuple[float, ...]
    mean: float
    std: float
    zero_variance: bool


def group_advantages(rewards: Sequence[float], eps: float = ADVANTAGE_EPS, scale: bool = True) -> GroupAdvantages:
    """Group-normalised advantages ``(r - mean) / (std + eps)``, unbiased std (``scale=False``: ``r - mean``).

    Every reward of the group enters the mean and the std, excluded and fatal trajectories too.
    Equal rewards give zero advantages and ``zero_variance=True``.

    >>> g = group_advantages([1.0, 0.0, 0.0, 1.0])
    >>> [round(a, 4) for a in g.advantages], round(g.std, 4), g.zero_variance
    ([0.8659, -0.8659, -0.8659, 0.8659], 0.5774, False)
    >>> group_advantages([0.0, 0.0, 0.0]).advantages, group_advantages([0.0, 0.0, 0.0]).zero_variance
    ((0.0, 0.0, 0.0), True)
    """
    values = [float(r) for r in rewards]
    n = len(values)
    if n == 0:
        raise ValueError("a group needs at least one reward")
    mean = sum(values) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in values) / (n - 1)) if n > 1 else 0.0
    if std == 0.0:
        return GroupAdvantages(tuple(0.0 for _ in values), mean, 0.0, True)
    denominator = (std + eps) if scale else 1.0
    return GroupAdvantages(tuple((r - mean) / denominator for r in values), mean, std, False)


def clamp_fatal_advantage(advantage: float, fatal: bool) -> float:
    """OpenSearch-VL's one-sided clamp: a fatal trajectory's advantage is ``max(A, 0)``; others unchanged.

    >>> clamp_fatal_advantage(-0.7, True), clamp_fatal_advantage(0.5, True), clamp_fatal_advantage(-0.7, False)
    (0.0, 0.5, -0.7)
    """
    return max(advantage, 0.0) if fatal else advantage


# ---------------------------------------------------------------------------------------------
# Which trajectories and which tokens are trained


def exclusion_reason(termination: str, prompt_tokens: int = 0, response_tokens: int = 0, *,
                     max_prompt_tokens: int | None = None, max_response_tokens: int | None = None) -> str | None:
    """Why a trajectory is left out of the loss (paper A.4), or ``None`` when it is trained.

    Over the prompt or response budget, over the tool-call limit or the context budget, timed
    out, or ended by a policy error. A format error is *not* excluded: it is the policy's own
    mistake and is trained with reward 0 (paper A.3).

    >>> exclusion_reason("answer"), exclusion_reason("format_error"), exclusion_reason("timeout")
    (None, None, 'timeout')
    >>> exclusion_reason("answer", 100, 5000, max_prompt_tokens=512, max_response_tokens=4096)
    'response_too_long'
    """
    if termination in EXCLUDED_TERMINATIONS:
        return termination
    if max_prompt_tokens is not None and prompt_tokens > max_prompt_tokens:
        return "prompt_too_long"
    if max_response_tokens is not None and response_tokens > max_response_tokens:
        return "response_too_long"
    return None


def policy_token_mask(labels: Sequence[int], end_id: int, ignore_index: int = IGNORE_INDEX) -> list[int]:
    """1 on the tokens the policy generated, from the assistant-only labels of a rendered trajectory.

    ``labels`` are ``training.data``'s collator labels (``ignore_index`` outside the assistant
    turns). Inside each assistant run, tokens after ``end_id`` (``<|im_end|>``) are template
    glue the policy never generated (the newline after it) and are masked too.

    >>> policy_token_mask([-100, -100, 7, 8, 2, 9, -100, 5, 2, 9], end_id=2)
    [0, 0, 1, 1, 1, 0, 0, 1, 1, 0]
    """
    mask, ended = [], False
    for label in labels:
        if label == ignore_index:
            mask.append(0)
            ended = False
            continue
        mask.append(0 if ended else 1)
        if label == end_id:
            ended = True
    return mask


def turn_of_token(mask: Sequence[int]) -> list[int]:
    """The index of the assistant turn each policy token belongs to (-1 elsewhere): runs of 1s in order.

    >>> turn_of_token([0, 1, 1, 0, 0, 1, 0, 1])
    [-1, 0, 0, -1, -1, 1, -1, 2]
    """
    out, turn, previous = [], -1, 0
    for m in mask:
        if m and not previous:
            turn += 1
        out.append(turn if m else -1)
        previous = m
    return out


def fatal_step(step_errors: Sequence[bool], k: int = FATAL_K) -> int | None:
    """The fatal step (0-based): the first step of the first run of ``k`` consecutive erroneous steps.

    ``None`` when no run of ``k`` errors occurs (the paper writes f = L + 1).

    >>> fatal_step([False, True, True, True, False]), fatal_step([True, True, False, True, True])
    (1, None)
    >>> fatal_step([True, True, True]), fatal_step([])
    (0, None)
    """
    run = 0
    for i, error in enumerate(step_errors):
        run = run + 1 if error else 0
        if run == k:
            return i - k + 1
    return None


def post_fatal_mask(mask: Sequence[int], fatal: int | None) -> list[int]:
    """``mask`` with every token of step ``fatal`` and of later steps set to 0 (unchanged for ``None``).

    >>> post_fatal_mask([0, 1, 1, 0, 1, 0, 1, 1], fatal=1)
    [0, 1, 1, 0, 0, 0, 0, 0]
    >>> post_fatal_mask([0, 1, 0, 1], fatal=None)
    [0, 1, 0, 1]
    """
    if fatal is None:
        return list(mask)
    return [m if 0 <= t < fatal else 0 for m, t in zip(mask, turn_of_token(mask))]


def in_update(excluded: bool, fatal: int | None) -> bool:
    """Whether a trajectory takes part in the loss: not excluded, and its fatal step (if any) is not its first.

    >>> in_update(False, None), in_update(True, None), in_update(False, 0), in_update(False, 2)
    (True, False, False, True)
    """
    return not excluded and fatal != 0


def loss_mask(mask: Sequence[int], *, excluded: bool = False, fatal: int | None = None,
              fatal_aware: bool = False) -> list[int]:
    """The tokens one trajectory contributes to the loss: its policy tokens, minus the post-fatal ones
    (fatal-aware option), all zero when it is out of the update.

    >>> loss_mask([0, 1, 1, 0, 1], excluded=True)
    [0, 0, 0, 0, 0]
    >>> loss_mask([0, 1, 1, 0, 1], fatal=1, fatal_aware=True), loss_mask([0, 1, 1, 0, 1], fatal=1)
    ([0, 1, 1, 0, 0], [0, 1, 1, 0, 1])
    """
    fatal = fatal if fatal_aware else None
    if not in_update(excluded, fatal):
        return [0] * len(mask)
    return post_fatal_mask(mask, fatal)


def final_advantage(advantage: float, *, fatal: int | None, fatal_aware: bool) -> float:
    """The advantage a trajectory trains with: clamped at 0 when fatal-aware and it has a fatal step.

    >>> final_advantage(-0.5, fatal=2, fatal_aware=True), final_advantage(-0.5, fatal=2, fatal_aware=False)
    (0.0, -0.5)
    """
    return clamp_fatal_advantage(advantage, fatal_aware and fatal is not None)


# ---------------------------------------------------------------------------------------------
# The loss (torch)


def clipped_token_loss(logp, old_logp, advantages, clip_low: float = 0.2, clip_high: float = 0.2):
    """Per-token clipped surrogate ``-min(r A, clip(r, 1 - clip_low, 1 + clip_high) A)``.

    ``logp`` and ``old_logp``: ``(B, T)`` log-probabilities of the taken tokens under the policy
    being trained and under the rollout policy; ``advantages``: ``(B,)``, broadcast over tokens.
    Returns ``(loss (B, T), clipped (B, T) bool)``: where the clip was active.

    >>> import torch
    >>> loss, clipped = clipped_token_loss(torch.log(torch.tensor([[1.5, 0.5]])), torch.zeros(1, 2), torch.tensor([1.0]))
    >>> loss.tolist(), clipped.tolist()
    ([[-1.2000000476837158, -0.5]], [[True, False]])
    """
    import torch

    ratio = torch.exp(logp - old_logp)
    adv = advantages.unsqueeze(-1).to(ratio.dtype)
    unclipped = ratio * adv
    clipped_ratio = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    clipped = clipped_ratio * adv
    loss = -torch.minimum(unclipped, clipped)
    return loss, (clipped < unclipped)


def k3_kl(logp, ref_logp):
    """Per-token k3 estimate of KL(pi || pi_ref): ``exp(q) - q - 1`` with ``q = ref_logp - logp`` (>= 0).

    >>> import torch
    >>> [round(x, 4) for x in k3_kl(torch.tensor([0.0, -1.0]), torch.tensor([0.0, -2.0])).tolist()]
    [0.0, 0.3679]
    """
    import torch

    q = ref_logp - logp
    return torch.exp(q) - q - 1.0


def aggregate(per_token, mask, mode: str = "token", n_tokens: float | None = None):
    """Reduce a ``(B, T)`` per-token quantity over the masked tokens.

    ``"token"``: the masked sum divided by ``n_tokens`` (default: the number of masked tokens
    here; pass the whole step's count when a step is split into micro-batches, so the pieces add
    up to the step's token mean). ``"sequence"``: each row's masked mean, then the mean over rows
    that have any masked token (``n_tokens`` is then the step's number of such rows).

    >>> import torch
    >>> x, m = torch.tensor([[1.0, 3.0, 5.0], [2.0, 0.0, 0.0]]), torch.tensor([[1, 1, 0], [1, 0, 0]])
    >>> aggregate(x, m, "token").item(), aggregate(x, m, "sequence").item()
    (2.0, 2.0)
    >>> aggregate(x, torch.tensor([[1, 1, 1], [1, 0, 0]]), "token").item(), aggregate(x, torch.tensor([[1, 1, 1], [1, 0, 0]]), "sequence").item()
    (2.75, 2.5)
    """
    import torch

    if mode not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {', '.join(AGGREGATIONS)}, got {mode!r}")
    mask = mask.to(per_token.dtype)
    if mode == "token":
        denominator = mask.sum() if n_tokens is None else torch.as_tensor(float(n_tokens), dtype=per_token.dtype)
        return (per_token * mask).sum() / denominator.clamp(min=1.0)
    counts = mask.sum(-1)
    rows = counts > 0
    per_row = (per_token * mask).sum(-1) / counts.clamp(min=1.0)
    n_rows = rows.sum() if n_tokens is None else torch.as_tensor(float(n_tokens), dtype=per_token.dtype)
    return (per_row * rows.to(per_row.dtype)).sum() / n_rows.clamp(min=1.0)


def grpo_loss(logp, old_logp, advantages, mask, *, ref_logp=None, beta: float = 0.0, clip_low: float = 0.2,
              clip_high: float = 0.2, aggregation: str = "token", n_tokens: float | None = None) -> tuple:
    """The GRPO objective to minimise: clipped surrogate plus ``beta`` times the k3 KL, aggregated.

    Returns ``(loss, stats)``; ``stats`` holds the (detached) policy loss, KL and clip fraction
    over the masked tokens. Rows whose mask is all zero (excluded trajectories, zero-variance
    groups) contribute exactly nothing, gradient included.
    """
    import torch

    per_token, clipped = clipped_token_loss(logp, old_logp, advantages, clip_low, clip_high)
    total = per_token
    kl = None
    if beta and ref_logp is not None:
        kl = k3_kl(logp, ref_logp)
        total = per_token + beta * kl
    loss = aggregate(total, mask, aggregation, n_tokens)
    with torch.no_grad():
        m = mask.to(per_token.dtype)
        count = m.sum().clamp(min=1.0)
        stats = {
            "policy_loss": float((per_token * m).sum() / count),
            "clip_fraction": float((clipped.to(m.dtype) * m).sum() / count),
            "kl": float((kl * m).sum() / count) if kl is not None else None,
            "tokens": int(m.sum().item()),
        }
    return loss, stats


def token_entropy(logits):
    """Entropy (nats) of each position's next-token distribution, ``(B, T, V) -> (B, T)``.

    >>> import torch
    >>> round(token_entropy(torch.zeros(1, 1, 4)).item(), 4)  # uniform over 4 tokens: ln 4
    1.3863
    """
    import torch

    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


# ---------------------------------------------------------------------------------------------
# Comparing two policies on the same tasks


@dataclass(frozen=True)
class PairedDifference:
    """``b - a`` over paired per-task outcomes: mean, standard error, n and the flips each way."""

    mean: float
    se: float
    n: int
    gained: int  # tasks a got wrong and b got right
    lost: int  # tasks a got right and b got wrong

    def to_dict(self) -> dict:
        return {"mean": self.mean, "se": self.se, "n": self.n, "gained": self.gained, "lost": self.lost}


def paired_difference(a: Sequence[float], b: Sequence[float]) -> PairedDifference:
    """The paired difference ``b - a`` of two policies' outcomes (1 correct, 0 wrong) on the same tasks.

    The standard error is the sample standard deviation of the per-task differences over sqrt(n)
    (0 when n < 2). Pairing removes the task-difficulty variance that two independent accuracies
    would carry.

    >>> d = paired_difference([1, 0, 0, 1, 0], [1, 1, 0, 0, 1])
    >>> round(d.mean, 4), round(d.se, 4), d.n, d.gained, d.lost
    (0.2, 0.3742, 5, 2, 1)
    """
    if len(a) != len(b):
        raise ValueError(f"paired outcomes need equal lengths, got {len(a)} and {len(b)}")
    n = len(a)
    if n == 0:
        return PairedDifference(0.0, 0.0, 0, 0, 0)
    diffs = [float(y) - float(x) for x, y in zip(a, b)]
    mean = sum(diffs) / n
    se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1) / n) if n > 1 else 0.0
    gained = sum(1 for x, y in zip(a, b) if not x and y)
    lost = sum(1 for x, y in zip(a, b) if x and not y)
    return PairedDifference(mean, se, n, gained, lost)


def share(values: Sequence[float], first: bool, fraction: float = 0.2) -> float | None:
    """The mean of the first (or last) ``fraction`` of a series (at least one value); None when empty.

    >>> share([0, 0, 1, 1, 1, 1, 1, 1, 1, 0], first=True), share([0, 0, 1, 1, 1, 1, 1, 1, 1, 0], first=False)
    (0.0, 0.5)
    """
    values = [float(v) for v in values if v is not None]
    if not values:
        return None
    k = max(1, int(round(len(values) * fraction)))
    part = values[:k] if first else values[-k:]
    return sum(part) / len(part)
