"""PPO with a critic: turn-level GAE advantages and a value head (Schulman et al., 2017).

    V(s_t)  = value head on the policy's last hidden state at the token before turn t's action
    A_t     = GAE over turns: δ_t = r_t + γ V(s_{t+1}) − V(s_t),  A_t = Σ (γλ)^k δ_{t+k}
    loss    = clipped surrogate(ratio, A_t) on every action token of turn t
            + c_v · ½ (V(s_t) − R_t)²          R_t = A_t + V_old(s_t)
            − c_ent · entropy   (+ β · KL to the reference, off by default)

Why a value head and not a separate critic model: it shares the policy's trunk (and its
LoRA adapter), so it costs one linear layer and no second forward pass; on a GPU a
separate critic would double the memory of a 4-bit model. The price is that value and
policy gradients meet in the shared trunk, which ``vf_coef`` balances.

The difference from GRPO is only here: advantages come from a critic per turn, not from
a group per episode, so PPO gives credit turn by turn (S14, S19).

On GuessNumber with the outcome reward the critic explains little of the return: the text
before a guess says little about whether the game will be won, so the advantage is mostly the
episode's outcome minus a baseline. With the process reward a critic that has not learned yet
favours early turns (notebook 05, section 6). Reward shaping (`RewardShaping`) is GRPO's only:
`train` refuses it with PPO.

``is_correction`` corrects for a sampler that is not the trainer as GRPO does (`agentlab.algos.losses`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from agentlab.advantages import gae, spread_to_tokens
from agentlab.algos.losses import (AccumulatedStep, clipped_surrogate, correct_for_sampler, kl_to_reference,
                                   measure_sampler, micro_batches, minibatches, reference_logp, share)
from agentlab.rollout import Trajectory, pad_batch
from agentlab.tensors import explained_variance, masked_mean


@dataclass
class PPOSettings:
    """PPO's hyperparameters (the articles' defaults)."""

    clip_coef: float = 0.2  # ε of the clipped surrogate
    vf_coef: float = 0.5  # value-loss weight
    ent_coef: float = 0.01  # entropy bonus (raise to 0.05 against entropy collapse, S20)
    beta: float = 0.0  # optional KL weight to the reference
    epochs: int = 4  # passes over the batch per update [3, 5]
    minibatch_size: int = 32  # episodes per gradient step
    gamma: float = 0.99  # discount over turns
    gae_lambda: float = 0.95  # GAE λ; raise for long horizons [0.95, 0.99]
    max_grad_norm: float = 1.0  # gradient clipping
    norm_adv: bool = True  # normalise advantages over the batch's real turns
    target_kl: float | None = None  # end the update early once a minibatch's approx_kl passes 1.5 × this (e.g. 0.02)
    is_correction: str | None = None  # sampler ≠ trainer: "token_truncated", "token_masked", "sequence_truncated", ...
    is_cap: float = 3.0  # the importance weight's cap for is_correction (`agentlab.algos.losses.is_weights`)


class ValueHead(nn.Module):
    """V(s) = w · h + b on the last hidden state h; starts at exactly 0."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.linear = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.linear(hidden.float()).squeeze(-1)  # (B, L, H) -> (B, L)


def turn_batch(trajs: list[Trajectory]) -> dict[str, torch.Tensor]:
    """Per-turn tensors: ``rewards``/``mask`` (B, T), ``value_pos`` (B, T) — the token whose
    hidden state values the state before each turn — and ``last_pos``/``truncated`` (B,)."""
    B, T = len(trajs), max(t.num_turns for t in trajs)
    rewards, mask = torch.zeros(B, T), torch.zeros(B, T, dtype=torch.bool)
    value_pos = torch.zeros(B, T, dtype=torch.long)
    for b, t in enumerate(trajs):
        rewards[b, : t.num_turns] = torch.tensor(t.rewards)
        mask[b, : t.num_turns] = True
        for k, (start, _) in enumerate(t.turn_spans()):
            value_pos[b, k] = start - 1  # the last token before the action: the state s_k
    last_pos = torch.tensor([len(t.token_ids) - 1 for t in trajs])  # after the last turn
    truncated = torch.tensor([t.truncated for t in trajs], dtype=torch.bool)
    return {"rewards": rewards, "mask": mask, "value_pos": value_pos, "last_pos": last_pos, "truncated": truncated}


@torch.no_grad()
def old_values(policy, value_head: ValueHead, batch: dict, turns: dict, temperature: float,
               max_tokens: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """V_old(s_t) at every turn (B, T) and after the last turn of truncated episodes (B,), by micro-batches."""
    values = torch.zeros(turns["mask"].shape, device=turns["mask"].device)  # (B, T)
    last_values = torch.zeros(turns["mask"].shape[0], device=turns["mask"].device)  # (B,)
    for rows, part in micro_batches(batch, torch.arange(len(values)), max_tokens):
        out = policy.score(part["ids"], part["attn"], temperature, hidden=True, only=part["loss_mask"])
        v_tok = value_head(out["hidden"])  # (b, l)
        values[rows] = v_tok.gather(1, turns["value_pos"][rows]) * turns["mask"][rows]
        last_values[rows] = v_tok.gather(1, turns["last_pos"][rows, None]).squeeze(1) * turns["truncated"][rows]
    return values, last_values


def update(policy, optimizer, trajs: list[Trajectory], s: PPOSettings, value_head: ValueHead,
           generator: torch.Generator | None = None, micro_batch_tokens: int | None = None,
           measure_sampler_gap: bool = False) -> dict:
    """One PPO update: values and GAE with the current weights, then epochs of minibatches.

    ``micro_batch_tokens``: the most tokens (rows × padded length) one forward pass may hold;
    None runs every minibatch in one pass. ``measure_sampler_gap``: the episodes came from another
    sampler; log ``sampler_kl`` and ``sampler_clip_frac`` even without ``is_correction``."""
    device, temperature = policy.device, trajs[0].temperature
    batch = {k: v.to(device) for k, v in pad_batch(trajs, policy.pad_id).items()}
    turns = {k: v.to(device) for k, v in turn_batch(trajs).items()}
    mask = batch["loss_mask"]  # (B, L-1)
    values, last_values = old_values(policy, value_head, batch, turns, temperature, micro_batch_tokens)  # (B, T), (B,)
    with torch.no_grad():
        adv, ret = gae(turns["rewards"], values, turns["mask"], s.gamma, s.gae_lambda, last_values)  # (B, T)
        if s.norm_adv:
            real = adv[turns["mask"]]
            adv = torch.where(turns["mask"], (adv - real.mean()) / (real.std() + 1e-8), adv)
        batch["adv"] = spread_to_tokens(adv, batch["turn_index"])  # (B, L-1) each turn's A on its tokens
    if s.beta > 0:
        batch["ref_logp"] = reference_logp(policy, batch, temperature, micro_batch_tokens)  # (B, L-1)
    mismatch = {}
    if s.is_correction is not None:  # adds prox_logp and is_weight, (B, L-1)
        mismatch = correct_for_sampler(policy, batch, s.is_correction, s.is_cap, s.clip_coef, temperature,
                                       micro_batch_tokens)
    elif measure_sampler_gap:  # the same numbers, the loss uncorrected
        mismatch = measure_sampler(policy, batch, s.clip_coef, temperature, micro_batch_tokens)
    params = policy.trainable_parameters() + list(value_head.parameters())
    logs: dict[str, list[float]] = {}
    steps, stopped = 0, False
    for _ in range(s.epochs):
        if stopped:
            break
        for mb in minibatches(len(trajs), s.minibatch_size, generator):
            step = AccumulatedStep(params, optimizer, s.max_grad_norm)
            for rows, part in micro_batches(batch, mb, micro_batch_tokens):
                m, tm = part["loss_mask"], turns["mask"][rows].float()
                w, wv = share(m, mask[mb]), share(tm, turns["mask"][mb])  # of the minibatch's action tokens, turns
                out = policy.score(part["ids"], part["attn"], temperature, entropy=True if s.ent_coef else "logged",
                                   hidden=True, only=m)  # entropy in the graph only for a bonus, as in GRPO
                centre_logp = part.get("prox_logp", part["old_logp"])  # the clip range's centre: π_prox or π_old
                pg_loss, stats = clipped_surrogate(out["logp"], centre_logp, part["adv"], m, s.clip_coef,
                                                   part.get("is_weight"))
                new_values = value_head(out["hidden"]).gather(1, turns["value_pos"][rows])  # (b, T)
                v_loss = 0.5 * masked_mean((new_values - ret[rows]) ** 2, tm)
                entropy = masked_mean(out["entropy"], m)
                loss = w * pg_loss + s.vf_coef * (wv * v_loss) - s.ent_coef * (w * entropy)
                extra = {}
                if s.beta > 0:
                    kl = kl_to_reference(out["logp"], part["ref_logp"], m)
                    loss = loss + s.beta * (w * kl)
                    extra = {"kl": w * kl.item()}
                step.add(loss, {**{k: w * v for k, v in stats.items()}, "loss": loss.item(),
                                "pg_loss": w * pg_loss.item(), "v_loss": wv * v_loss.item(),
                                "entropy": w * entropy.item(), **extra})
            # approx_kl was measured before this minibatch's step: past the limit, the policy has already
            # moved too far from the one that sampled the batch, so drop this step and end the update.
            stopped = s.target_kl is not None and step.logs.get("approx_kl", 0.0) > 1.5 * s.target_kl
            if stopped:
                optimizer.zero_grad(set_to_none=True)
            for k, v in (step.logs if stopped else step.step()).items():
                logs.setdefault(k, []).append(v)
            if stopped:
                break
            steps += 1
    ev = explained_variance(values[turns["mask"]], ret[turns["mask"]])
    return {"explained_variance": float(ev), "value_mean": float(values[turns["mask"]].mean()),
            "optimizer_steps": steps, **mismatch, **{k: sum(v) / len(v) for k, v in logs.items()}}
