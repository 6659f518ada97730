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

``advantage`` picks how the episode's credit reaches its turns: ``"episode"`` gives every turn the
episode's A_i as above; ``"gigpo"`` adds a step-level advantage between turns taken from the same
state (`agentlab.advantages.gigpo_advantages`); ``"turn_baseline"`` scores each turn's return
against the other samples' returns from the same turn (unbiased); ``"turn_index"`` is the biased
per-turn-index normalisation, kept to show its bias. The last three give each turn its own
advantage, spread over that turn's tokens.

A group whose episodes all got the same reward has A = 0 everywhere and gives no gradient;
such groups are dropped from the backward pass and their share is logged (``zero_var_frac``).

With ``micro_batch_tokens`` a minibatch too large for memory runs in micro-batches whose
gradients add up to the same step (`agentlab.algos.losses.micro_batches`).

With ``is_correction`` the batch came from a sampler that is not the trainer (an int8 copy,
another dtype): one more pass without gradient scores it with the trainer (``prox_logp``), the
ratio is taken against that, and each token's loss is weighted by a capped importance weight
(`agentlab.algos.losses.is_weights`); ``sampler_kl`` says how far apart the two were.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agentlab.advantages import (gigpo_advantages, group_advantages, spread_to_tokens, turn_baseline_advantages,
                                 turn_index_advantages, zero_variance_mask)
from agentlab.algos.losses import (AccumulatedStep, clipped_surrogate, correct_for_sampler, kl_to_reference,
                                   measure_sampler, micro_batches, minibatches, reference_logp, share)
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
    drop_zero_variance: bool = True  # skip groups whose rewards are all equal (per-turn advantages: rows all 0)
    advantage: str = "episode"  # "episode", "gigpo", "turn_baseline" or "turn_index" (biased; for comparison)
    turn_gamma: float = 0.95  # discount of the per-turn returns of "gigpo", "turn_baseline" and "turn_index"
    step_weight: float = 1.0  # GiGPO's weight on the step-level advantage
    is_correction: str | None = None  # sampler ≠ trainer: "token_truncated", "token_masked", "sequence_truncated", ...
    is_cap: float = 3.0  # the importance weight's cap for is_correction (`agentlab.algos.losses.is_weights`)


ADVANTAGES = ("episode", "gigpo", "turn_baseline", "turn_index")


def anchor_states(traj: Trajectory) -> list[str]:
    """The state each turn's action was taken from, as a key GiGPO groups turns by.

    Turn 0 starts from the task itself, the same for every sample of a group (keyed by the env's
    state at reset where it has one, so a later return to the start joins it). Turn t > 0 starts
    from where turn t − 1 left the env: its ``info["state"]`` where the env gives a canonical key
    (`agentlab.envs.base.TextEnv.state_key`), else the text of the env's reply. A reply that was
    never shown (a full context) gets a key no other turn shares."""
    replies = []  # the message after each of the policy's, when it is the env's reply
    for k, m in enumerate(traj.messages):
        if m["role"] == "assistant":
            after = traj.messages[k + 1] if k + 1 < len(traj.messages) else None
            replies.append(after["content"] if after is not None and after["role"] == "user" else None)
    states = ["" if traj.start_state is None else f"state:{traj.start_state}"]
    for t in range(1, traj.num_turns):
        info = traj.infos[t - 1] if t - 1 < len(traj.infos) else {}
        if "state" in info:
            states.append(f"state:{info['state']}")
        elif t - 1 < len(replies) and replies[t - 1] is not None:
            states.append(f"reply:{replies[t - 1]}")
        else:
            states.append(f"unseen:{id(traj)}:{t}")
    return states


def turn_rewards(trajs: list[Trajectory], rewards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(N, T)`` per-turn rewards and real-turn mask. Batch-level shaping changed each episode's
    total (``rewards``) without saying which turn earned it, so the change goes on the last turn."""
    T = max((t.num_turns for t in trajs), default=0)
    r, mask = torch.zeros(len(trajs), T), torch.zeros(len(trajs), T, dtype=torch.bool)
    for i, traj in enumerate(trajs):
        n = traj.num_turns
        if n:
            r[i, :n] = torch.tensor(traj.rewards, dtype=torch.float32)
            r[i, n - 1] += float(rewards[i]) - float(sum(traj.rewards))
            mask[i, :n] = True
    return r, mask


def turn_advantages(trajs: list[Trajectory], rewards: torch.Tensor, group_size: int, s: GRPOSettings) -> torch.Tensor:
    """``(N, T)`` per-turn advantages of the estimator ``s.advantage`` names (not ``"episode"``)."""
    r, mask = turn_rewards(trajs, rewards)
    if s.advantage == "gigpo":
        scale = "none" if s.adv_scale == "none" else "group"
        return gigpo_advantages(r, mask, [anchor_states(t) for t in trajs], group_size, s.turn_gamma, s.step_weight,
                                episode_rewards=torch.as_tensor(rewards, dtype=torch.float32), scale=scale)
    scale = "none" if s.adv_scale == "none" else "batch"
    if s.advantage == "turn_baseline":
        return turn_baseline_advantages(r, mask, group_size, s.turn_gamma, scale)
    if s.advantage == "turn_index":
        return turn_index_advantages(r, mask, group_size, s.turn_gamma, scale)
    raise ValueError(f"grpo advantage must be one of {ADVANTAGES}, got {s.advantage!r}")


def update(policy, optimizer, trajs: list[Trajectory], rewards: torch.Tensor, group_size: int,
           s: GRPOSettings, generator: torch.Generator | None = None, micro_batch_tokens: int | None = None,
           measure_sampler_gap: bool = False) -> dict:
    """One GRPO update on ``trajs`` (contiguous groups of ``group_size``) with episode ``rewards`` (N,).

    ``micro_batch_tokens``: the most tokens (rows × padded length) one forward pass may hold;
    None runs every minibatch in one pass. ``measure_sampler_gap``: the episodes came from another
    sampler; log ``sampler_kl`` and ``sampler_clip_frac`` even without ``is_correction``."""
    flat = zero_variance_mask(rewards, group_size)  # (N,) True where the group's rewards are all equal
    if s.advantage == "episode":
        adv = group_advantages(rewards, group_size, scale=s.adv_scale)  # (N,)
        keep = [i for i in range(len(trajs)) if not (s.drop_zero_variance and flat[i])]
        metrics = {"zero_var_frac": float(flat.float().mean()), "adv_abs": float(adv.abs().mean())}
    else:
        adv = turn_advantages(trajs, rewards, group_size, s)  # (N, T)
        # a step group can tell turns apart in a group whose episodes all scored the same
        keep = [i for i in range(len(trajs)) if not (s.drop_zero_variance and not adv[i].any())]
        real = torch.arange(adv.shape[1]) < torch.tensor([t.num_turns for t in trajs])[:, None]  # (N, T)
        metrics = {"zero_var_frac": float(flat.float().mean()),
                   "adv_abs": float(adv[real].abs().mean()) if real.any() else 0.0}
    if not keep:
        return {**metrics, "skipped": 1.0}
    device, temperature = policy.device, trajs[0].temperature
    batch = {k: v.to(device) for k, v in pad_batch([trajs[i] for i in keep], policy.pad_id).items()}
    mask = batch["loss_mask"]  # (B, L-1) 1 on action tokens
    batch["ref_logp"] = reference_logp(policy, batch, temperature, micro_batch_tokens)  # (B, L-1)
    if s.is_correction is not None:  # adds prox_logp and is_weight, (B, L-1)
        metrics |= correct_for_sampler(policy, batch, s.is_correction, s.is_cap, s.clip_coef, temperature,
                                       micro_batch_tokens)
    elif measure_sampler_gap:  # the same numbers, the loss uncorrected: the run "without the correction"
        metrics |= measure_sampler(policy, batch, s.clip_coef, temperature, micro_batch_tokens)
    if s.advantage == "episode":
        batch["adv"] = adv[keep].to(device)[:, None] * mask  # (B, L-1) the episode's advantage on each action token
    else:  # (B, L-1) each turn's advantage on that turn's tokens
        batch["adv"] = spread_to_tokens(adv[keep].to(device), batch["turn_index"]) * mask
    params = policy.trainable_parameters()
    logs: dict[str, list[float]] = {}
    for _ in range(s.epochs):
        for mb in minibatches(len(keep), s.minibatch_size, generator):
            step = AccumulatedStep(params, optimizer, s.max_grad_norm)
            for _, part in micro_batches(batch, mb, micro_batch_tokens):
                m = part["loss_mask"]
                w = share(m, mask[mb])  # this micro-batch's share of the minibatch's action tokens
                # without an entropy bonus the entropy is only logged: kept out of the graph, which saves the update
                # allocating and differentiating vocabulary-sized tensors (bench/RESULTS.md, "Each phase of an update")
                out = policy.score(part["ids"], part["attn"], temperature, entropy=True if s.ent_coef else "logged",
                                   only=m)
                centre_logp = part.get("prox_logp", part["old_logp"])  # the clip range's centre: π_prox or π_old
                pg_loss, stats = clipped_surrogate(out["logp"], centre_logp, part["adv"], m, s.clip_coef,
                                                   part.get("is_weight"))
                kl = kl_to_reference(out["logp"], part["ref_logp"], m)
                entropy = masked_mean(out["entropy"], m)
                loss = w * (pg_loss + s.beta * kl - s.ent_coef * entropy)
                step.add(loss, {**{k: w * v for k, v in stats.items()}, "loss": loss.item(),
                                "pg_loss": w * pg_loss.item(), "kl": w * kl.item(), "entropy": w * entropy.item()})
            for k, v in step.step().items():
                logs.setdefault(k, []).append(v)
    return {**metrics, **{k: sum(v) / len(v) for k, v in logs.items()}}
