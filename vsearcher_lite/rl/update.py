"""The cpu engine's update: a step's advantages and masks, the old and reference
log-probabilities, and ``mu`` clipped-ratio AdamW updates (``objective.grpo_loss``).
"""

from __future__ import annotations

from typing import Any

from vsearcher_lite.rl.config import GRPOConfig
from vsearcher_lite.rl.objective import (
    final_advantage,
    group_advantages,
    grpo_loss,
    loss_mask,
    token_entropy,
)
from vsearcher_lite.rl.rollout import RolloutSample, TrajectoryEncoder


def assign_advantages(groups: list[list[RolloutSample]], config: GRPOConfig) -> dict:
    """Set each sample's ``advantage``, ``loss_mask`` and ``in_loss``; returns group counts. Every
    reward enters its group's baseline; the fatal-aware option, the A.4 exclusions and the
    zero-variance drop then decide what reaches the loss."""
    zero_variance = 0
    for group in groups:
        stats = group_advantages([s.reward for s in group], scale=config.scale_rewards)
        zero_variance += int(stats.zero_variance)
        for sample, adv in zip(group, stats.advantages):
            fatal = sample.fatal if config.fatal_aware else None
            sample.advantage = final_advantage(adv, fatal=fatal, fatal_aware=config.fatal_aware)
            policy = sample.encoded.policy_mask if sample.encoded is not None else []
            mask = loss_mask(policy, excluded=sample.excluded, fatal=fatal,
                             fatal_aware=config.fatal_aware)
            if stats.zero_variance and config.drop_zero_variance:
                mask = [0] * len(mask)
            sample.loss_mask = mask
            sample.in_loss = any(mask)
    return {"zero_variance_groups": zero_variance, "groups": len(groups)}


def padded_masks(samples: list[RolloutSample], length: int, attr: str = "loss_mask"):
    """A ``(B, length)`` tensor of per-sample masks, right-padded with 0."""
    import torch

    masks = [getattr(s, attr) if attr != "policy_mask" else s.encoded.policy_mask for s in samples]
    return padded_values(masks, length, torch.long)


def token_logps(model, batch: dict, positions_mask, *, temperature: float = 1.0,
                with_entropy: bool = False):
    """``log p(ids[b, t] | ids[b, :t])`` where ``positions_mask`` is 1, ``(B, T)`` (0 elsewhere),
    and with ``with_entropy`` those distributions' entropies. ``p`` is the policy at the sampling
    ``temperature`` (logits divided by it, as TRL's GRPO does), so the ratio and the clip act on
    the distribution the rollouts were drawn from. Only the masked positions go through the output
    layer: policy tokens are a small share of a trajectory.
    """
    import torch

    device = next(model.parameters()).device
    keep = ("input_ids", "attention_mask", "pixel_values", "image_grid_thw", "mm_token_type_ids")
    inputs = {k: v.to(device) if hasattr(v, "to") else v for k, v in batch.items() if k in keep}
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
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
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


def score_samples(model, samples: list[RolloutSample], encoder: TrajectoryEncoder,
                  config: GRPOConfig, ref_model=None) -> dict:
    """No-grad pass at the config's sampling temperature, in its micro-batches: the mean entropy
    over the policy tokens; each sample's old (and reference) log-probs stored on it as
    ``old_logp`` / ``ref_logp``, aligned with its ids."""
    import torch

    ent_sum, ent_n = 0.0, 0
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for part in chunks(samples, config.micro_batch_size):
                batch = encoder.collate([s.example for s in part])
                length = batch["input_ids"].shape[1]
                policy = padded_masks(part, length,
                                      "policy_mask").to(next(model.parameters()).device)
                logp, ent = token_logps(model, batch, policy, temperature=config.temperature,
                                        with_entropy=True)
                ent_sum += float((ent * policy).sum())
                ent_n += int(policy.sum())
                ref = None
                if ref_model is not None and any(s.in_loss for s in part):
                    ref, _ = token_logps(ref_model, batch, policy,
                                         temperature=config.temperature)
                for i, s in enumerate(part):
                    n = len(s.encoded.input_ids)
                    s.old_logp = logp[i, :n].tolist()
                    s.ref_logp = ref[i, :n].tolist() if ref is not None else None
    finally:
        model.train(was_training)
    return {"entropy": ent_sum / ent_n if ent_n else None}


def padded_values(rows: list[list[float]], length: int, dtype=None):
    import torch

    out = torch.zeros(len(rows), length, dtype=dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r[:length], dtype=dtype)
    return out


def update_policy(model, optimizer, samples: list[RolloutSample], encoder: TrajectoryEncoder,
                  config: GRPOConfig) -> dict:
    """``mu`` optimizer updates on the samples in the loss; returns the logged statistics."""
    import torch

    trained = [s for s in samples if s.in_loss]
    if not trained:
        return {"kl": None, "policy_loss": None, "clip_fraction": None, "grad_norm": None,
                "trained_tokens": 0}
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
            logp, _ = token_logps(model, batch, mask, temperature=config.temperature)
            old = padded_values([s.old_logp for s in part], length).to(logp.device)
            ref = None
            if config.beta and part[0].ref_logp is not None:
                ref = padded_values([s.ref_logp for s in part], length).to(logp.device)
            adv = torch.tensor([s.advantage for s in part], dtype=logp.dtype, device=logp.device)
            loss, part_stats = grpo_loss(logp, old, adv, mask, ref_logp=ref, beta=config.beta,
                                         clip_low=config.clip_low, clip_high=config.clip_high,
                                         aggregation=config.aggregation, n_tokens=normaliser)
            loss.backward()
            for key in weighted:
                if part_stats.get(key) is not None:
                    weighted[key] += part_stats[key] * part_stats["tokens"]
        grad_norm = torch.nn.utils.clip_grad_norm_([p for p in model.parameters()
                                                    if p.requires_grad], config.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if epoch == 0:
            stats["kl"] = weighted["kl"] / n_tokens if config.beta else None
            stats["grad_norm"] = float(grad_norm)
        stats["policy_loss"] = weighted["policy_loss"] / n_tokens
        # the last update's (0 when mu = 1)
        stats["clip_fraction"] = weighted["clip_fraction"] / n_tokens
    return stats
