"""GRPO: group-relative policy optimisation with a KL to the reference (Shao et al., 2024).

    for each task, sample a group of G episodes with the current policy
    A_i   = (R_i − mean(R_group)) / std(R_group)           one advantage per episode
    loss  = clipped surrogate(ratio, A_i) on every action token of episode i
          + β · KL(π_θ ‖ π_ref)                              k3, per action token
          − c_ent · entropy

No critic: the group is the baseline. π_ref is the policy with its LoRA adapter switched off,
so the reference costs one extra forward pass and no second model. At the first update the
adapter is zero, π_θ = π_ref, the ratio is 1 and the KL is 0: the loss starts at about
−mean(A) ≈ 0, which is why "the loss is zero" at the start is expected, not a bug.

Each update takes several small steps (two passes over minibatches of 32 episodes) rather than
one large one: more steps move the policy further per batch of rollouts, and the clipped ratio
keeps the extra steps close to the sampling policy.

A group whose episodes all got the same reward has A = 0 everywhere and gives no gradient;
such groups are dropped from the backward pass and their share is logged (``zero_var_frac``).

With ``micro_batch_tokens`` a minibatch too large for memory runs in micro-batches whose
gradients add up to the same step (`agentlab.algos.losses.micro_batches`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agentlab.advantages import group_advantages, zero_variance_mask
from agentlab.algos.losses import (AccumulatedStep, clipped_surrogate, kl_to_reference, micro_batches, minibatches,
                                   reference_logp, share)
from agentlab.rollout import Trajectory, pad_batch
from agentlab.tensors import masked_mean


@dataclass
class GRPOSettings:
    """GRPO's hyperparameters (the articles' ranges in brackets)."""

    clip_coef: float = 0.2  # ε of the clipped surrogate
    beta: float = 0.04  # KL weight to the reference [0.01, 0.1]
    ent_coef: float = 0.0  # entropy bonus weight
    epochs: int = 2  # passes over the batch per update
    minibatch_size: int = 32  # episodes per gradient step (2 passes x 128 episodes / 32 = 8 steps per update)
    max_grad_norm: float = 1.0  # gradient clipping
    adv_scale: str = "group"  # "group" (divide by the group's std), "batch" or "none"
    drop_zero_variance: bool = True  # skip groups whose rewards are all equal


def update(policy, optimizer, trajs: list[Trajectory], rewards: torch.Tensor, group_size: int,
           s: GRPOSettings, generator: torch.Generator | None = None, micro_batch_tokens: int | None = None) -> dict:
    """One GRPO update on ``trajs`` (contiguous groups of ``group_size``) with episode ``rewards`` (N,).

    ``micro_batch_tokens``: the most tokens (rows × padded length) one forward pass may hold;
    None runs every minibatch in one pass."""
    adv = group_advantages(rewards, group_size, scale=s.adv_scale)  # (N,)
    flat = zero_variance_mask(rewards, group_size)  # (N,) True where the group's rewards are all equal
    keep = [i for i in range(len(trajs)) if not (s.drop_zero_variance and flat[i])]
    metrics = {"zero_var_frac": float(flat.float().mean()), "adv_abs": float(adv.abs().mean())}
    if not keep:
        return {**metrics, "skipped": 1.0}
    device, temperature = policy.device, trajs[0].temperature
    batch = {k: v.to(device) for k, v in pad_batch([trajs[i] for i in keep], policy.pad_id).items()}
    mask = batch["loss_mask"]  # (B, L-1) 1 on action tokens
    batch["ref_logp"] = reference_logp(policy, batch, temperature, micro_batch_tokens)  # (B, L-1)
    batch["adv"] = adv[keep].to(device)[:, None] * mask  # (B, L-1) the episode's advantage on each action token
    params = policy.trainable_parameters()
    logs: dict[str, list[float]] = {}
    for _ in range(s.epochs):
        for mb in minibatches(len(keep), s.minibatch_size, generator):
            step = AccumulatedStep(params, optimizer, s.max_grad_norm)
            for _, part in micro_batches(batch, mb, micro_batch_tokens):
                m = part["loss_mask"]
                w = share(m, mask[mb])  # this micro-batch's share of the minibatch's action tokens
                out = policy.score(part["ids"], part["attn"], temperature, entropy=True, only=m)
                pg_loss, stats = clipped_surrogate(out["logp"], part["old_logp"], part["adv"], m, s.clip_coef)
                kl = kl_to_reference(out["logp"], part["ref_logp"], m)
                entropy = masked_mean(out["entropy"], m)
                loss = w * (pg_loss + s.beta * kl - s.ent_coef * entropy)
                step.add(loss, {**{k: w * v for k, v in stats.items()}, "loss": loss.item(),
                                "pg_loss": w * pg_loss.item(), "kl": w * kl.item(), "entropy": w * entropy.item()})
            for k, v in step.step().items():
                logs.setdefault(k, []).append(v)
    return {**metrics, **{k: sum(v) / len(v) for k, v in logs.items()}}
