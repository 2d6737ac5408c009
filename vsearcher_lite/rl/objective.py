"""The maths of multi-turn GRPO as small pure functions (paper 2.3 and A.4), shared by both
engines and worked through in notebook 07.

In the order a step applies them: the reward (eq. 6, optionally MMSearch-R1's search penalty);
the group-normalised advantage (unbiased std and TRL's eps, so both engines agree); the
policy-token mask (assistant turns only); the fatal-aware option (OpenSearch-VL: masked from the
first of K = 3 consecutive erroneous steps, advantage clamped at >= 0); the A.4 exclusions (in
the group's statistics, not in the loss); the clipped ratio loss, aggregated per token (DAPO,
TRL's default) or per sequence (GRPO), plus ``beta`` times a k3 KL (0 in the paper); and the
paired difference of two policies on the same tasks.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

from vsearcher_lite.training.data import IGNORE_INDEX

ADVANTAGE_EPS = 1e-4  # TRL's constant, so both engines give the same numbers
FATAL_K = 3  # OpenSearch-VL: three consecutive erroneous steps make a cascade
PAPER_SEARCH_PENALTY = 0.9  # MMSearch-R1: a correct answer that searched is worth 1 - 0.1
AGGREGATIONS = ("token", "sequence")
#: Terminations that leave a trajectory out of the loss (paper A.4): a limit, a timeout, an error.
EXCLUDED_TERMINATIONS = ("max_tool_calls", "context_exceeded", "timeout", "policy_error")


# ---------------------------------------------------------------------------------------------
# Reward and advantages


def trajectory_reward(correct: bool, format_ok: bool, n_searches: int = 0,
                      search_penalty: float | None = None) -> float:
    """The reward of one trajectory (eq. 6, optional search penalty).

    >>> [trajectory_reward(c, f) for c, f in ((True, True), (False, True), (True, False))]
    [1.0, 0.0, 0.0]
    >>> trajectory_reward(True, True, 2, search_penalty=0.9), trajectory_reward(True, True, 0, 0.9)
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


def group_advantages(rewards: Sequence[float], eps: float = ADVANTAGE_EPS,
                     scale: bool = True) -> GroupAdvantages:
    """``(r - mean) / (std + eps)`` with the unbiased std (``scale=False``: ``r - mean``) over
    every reward of the group, excluded and fatal ones too; equal rewards give zeros.

    >>> g = group_advantages([1.0, 0.0, 0.0, 1.0])
    >>> [round(a, 4) for a in g.advantages], round(g.std, 4), g.zero_variance
    ([0.8659, -0.8659, -0.8659, 0.8659], 0.5774, False)
    >>> flat = group_advantages([0.0, 0.0, 0.0])
    >>> flat.advantages, flat.zero_variance
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
    """OpenSearch-VL's one-sided clamp: ``max(A, 0)`` for a fatal trajectory, else ``A``.

    >>> clamp_fatal_advantage(-0.7, True), clamp_fatal_advantage(0.5, True)
    (0.0, 0.5)
    >>> clamp_fatal_advantage(-0.7, False)
    -0.7
    """
    return max(advantage, 0.0) if fatal else advantage


# ---------------------------------------------------------------------------------------------
# Which trajectories and which tokens are trained


def exclusion_reason(termination: str, prompt_tokens: int = 0, response_tokens: int = 0, *,
                     max_prompt_tokens: int | None = None,
                     max_response_tokens: int | None = None) -> str | None:
    """Why a trajectory is left out of the loss (A.4), or ``None``. A format error is not
    excluded: it is the policy's own mistake, trained with reward 0 (A.3).

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


def policy_token_mask(labels: Sequence[int], end_id: int,
                      ignore_index: int = IGNORE_INDEX) -> list[int]:
    """1 on the tokens the policy generated, from the collator's assistant-only labels; tokens
    after ``end_id`` (``<|im_end|>``) in a turn are template glue and get 0 too.

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
    """The assistant turn (run of 1s) each policy token belongs to, -1 elsewhere.

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
    """The first step (0-based) of the first run of ``k`` erroneous steps; ``None`` if none
    (the paper's f = L + 1).

    >>> fatal_step([False, True, True, True, False]), fatal_step([True, True, False, True])
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
    """``mask`` with the tokens of step ``fatal`` and later set to 0 (unchanged for ``None``).

    >>> post_fatal_mask([0, 1, 1, 0, 1, 0, 1, 1], fatal=1)
    [0, 1, 1, 0, 0, 0, 0, 0]
    >>> post_fatal_mask([0, 1, 0, 1], fatal=None)
    [0, 1, 0, 1]
    """
    if fatal is None:
        return list(mask)
    return [m if 0 <= t < fatal else 0 for m, t in zip(mask, turn_of_token(mask))]


def in_update(excluded: bool, fatal: int | None) -> bool:
    """A trajectory is trained unless excluded or fatal from its first step.

    >>> in_update(False, None), in_update(True, None), in_update(False, 0), in_update(False, 2)
    (True, False, False, True)
    """
    return not excluded and fatal != 0


def loss_mask(mask: Sequence[int], *, excluded: bool = False, fatal: int | None = None,
              fatal_aware: bool = False) -> list[int]:
    """The tokens a trajectory trains: its policy tokens minus the post-fatal ones (fatal-aware
    option); none when it is out of the update.

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
    """The advantage a trajectory trains with: clamped at 0 when fatal-aware and fatal.

    >>> [final_advantage(-0.5, fatal=2, fatal_aware=aware) for aware in (True, False)]
    [0.0, -0.5]
    """
    return clamp_fatal_advantage(advantage, fatal_aware and fatal is not None)


# ---------------------------------------------------------------------------------------------
# The loss (torch)


def clipped_token_loss(logp, old_logp, advantages, clip_low: float = 0.2, clip_high: float = 0.2):
    """Per-token ``-min(r A, clip(r, 1 - clip_low, 1 + clip_high) A)``, ``r = exp(logp - old)``.

    ``logp``, ``old_logp``: ``(B, T)``; ``advantages``: ``(B,)``. Returns the ``(B, T)`` loss and
    where the clip was active.

    >>> import torch
    >>> ratio = torch.log(torch.tensor([[1.5, 0.5]]))
    >>> loss, clipped = clipped_token_loss(ratio, torch.zeros(1, 2), torch.tensor([1.0]))
    >>> loss.tolist(), clipped.tolist()
    ([[-1.2000000476837158, -0.5]], [[True, False]])
    """
    import torch

    ratio = torch.exp(logp - old_logp)
    adv = advantages.unsqueeze(-1).to(ratio.dtype)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    return -torch.minimum(unclipped, clipped), (clipped < unclipped)


def k3_kl(logp, ref_logp):
    """Per-token k3 estimate of KL(pi || pi_ref): ``exp(q) - q - 1``, ``q = ref_logp - logp``.

    >>> import torch
    >>> [round(x, 4) for x in k3_kl(torch.tensor([0.0, -1.0]), torch.tensor([0.0, -2.0])).tolist()]
    [0.0, 0.3679]
    """
    import torch

    q = ref_logp - logp
    return torch.exp(q) - q - 1.0


def aggregate(per_token, mask, mode: str = "token", n_tokens: float | None = None):
    """A ``(B, T)`` per-token quantity reduced over the masked tokens.

    ``"token"``: the masked sum over ``n_tokens`` (default: the masked count; pass the step's
    count when it is split into micro-batches). ``"sequence"``: the mean of each row's masked
    mean over rows with a masked token (``n_tokens``: the step's number of such rows).

    >>> import torch
    >>> x = torch.tensor([[1.0, 3.0, 5.0], [2.0, 0.0, 0.0]])
    >>> m, full = torch.tensor([[1, 1, 0], [1, 0, 0]]), torch.tensor([[1, 1, 1], [1, 0, 0]])
    >>> aggregate(x, m, "token").item(), aggregate(x, m, "sequence").item()
    (2.0, 2.0)
    >>> aggregate(x, full, "token").item(), aggregate(x, full, "sequence").item()
    (2.75, 2.5)
    """
    import torch

    if mode not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {', '.join(AGGREGATIONS)}, got {mode!r}")
    mask = mask.to(per_token.dtype)

    def count(default):
        n = default if n_tokens is None else torch.as_tensor(float(n_tokens), dtype=mask.dtype)
        return n.clamp(min=1.0)

    if mode == "token":
        return (per_token * mask).sum() / count(mask.sum())
    counts = mask.sum(-1)
    rows = counts > 0
    per_row = (per_token * mask).sum(-1) / counts.clamp(min=1.0)
    return (per_row * rows.to(per_row.dtype)).sum() / count(rows.sum())


def grpo_loss(logp, old_logp, advantages, mask, *, ref_logp=None, beta: float = 0.0,
              clip_low: float = 0.2, clip_high: float = 0.2, aggregation: str = "token",
              n_tokens: float | None = None) -> tuple:
    """``(loss, stats)``: the clipped surrogate plus ``beta`` times the k3 KL, aggregated, and the
    detached policy loss, KL and clip fraction. All-zero mask rows contribute nothing.
    """
    import torch

    per_token, clipped = clipped_token_loss(logp, old_logp, advantages, clip_low, clip_high)
    kl = k3_kl(logp, ref_logp) if beta and ref_logp is not None else None
    total = per_token if kl is None else per_token + beta * kl
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
    """``b - a`` over paired per-task outcomes: mean, standard error, n, flips each way."""

    mean: float
    se: float
    n: int
    gained: int  # tasks a got wrong and b got right
    lost: int  # tasks a got right and b got wrong

    def to_dict(self) -> dict:
        return asdict(self)


def paired_difference(a: Sequence[float], b: Sequence[float]) -> PairedDifference:
    """The paired difference ``b - a`` of two policies' outcomes (1 right, 0 wrong) on the same
    tasks; SE: the differences' sample std over sqrt(n) (0 when n < 2). Pairing removes the
    task-difficulty variance two independent accuracies would carry.

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
    """The mean of the first (or last) ``fraction`` of a series, at least one value; None if empty.

    >>> series = [0, 0, 1, 1, 1, 1, 1, 1, 1, 0]
    >>> share(series, first=True), share(series, first=False)
    (0.0, 0.5)
    """
    values = [float(v) for v in values if v is not None]
    if not values:
        return None
    k = max(1, int(round(len(values) * fraction)))
    part = values[:k] if first else values[-k:]
    return sum(part) / len(part)
