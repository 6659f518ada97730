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
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from agentlab.advantages import gae, spread_to_tokens
from agentlab.algos.losses import backward_step, clipped_surrogate, kl_to_reference, minibatches
from agentlab.metrics import explained_variance, masked_mean
from agentlab.rollout import Trajectory, pad_batch


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


def update(policy, optimizer, trajs: list[Trajectory], s: PPOSettings, value_head: ValueHead,
           generator: torch.Generator | None = None) -> dict:
    """One PPO update: values and GAE with the current weights, then epochs of minibatches."""
    device, temperature = policy.device, trajs[0].temperature
    batch = {k: v.to(device) for k, v in pad_batch(trajs, policy.pad_id).items()}
    turns = {k: v.to(device) for k, v in turn_batch(trajs).items()}
    mask = batch["loss_mask"]  # (B, L-1)
    with torch.no_grad():
        out = policy.score(batch["ids"], batch["attn"], temperature, hidden=True, only=mask)
        v_tok = value_head(out["hidden"])  # (B, L)
        values = v_tok.gather(1, turns["value_pos"]) * turns["mask"]  # (B, T) V_old(s_t)
        last_values = v_tok.gather(1, turns["last_pos"][:, None]).squeeze(1) * turns["truncated"]  # (B,)
        adv, ret = gae(turns["rewards"], values, turns["mask"], s.gamma, s.gae_lambda, last_values)  # (B, T)
        if s.norm_adv:
            real = adv[turns["mask"]]
            adv = torch.where(turns["mask"], (adv - real.mean()) / (real.std() + 1e-8), adv)
        tok_adv = spread_to_tokens(adv, batch["turn_index"])  # (B, L-1) each turn's A on its tokens
        ref_logp = None
        if s.beta > 0:
            with policy.reference():
                ref_logp = policy.score(batch["ids"], batch["attn"], temperature, only=mask)["logp"]
    params = policy.trainable_parameters() + list(value_head.parameters())
    logs: dict[str, list[float]] = {}
    for _ in range(s.epochs):
        for mb in minibatches(len(trajs), s.minibatch_size, generator):
            m = mask[mb]
            out = policy.score(batch["ids"][mb], batch["attn"][mb], temperature, entropy=True, hidden=True, only=m)
            pg_loss, stats = clipped_surrogate(out["logp"], batch["old_logp"][mb], tok_adv[mb], m, s.clip_coef)
            new_values = value_head(out["hidden"]).gather(1, turns["value_pos"][mb])  # (b, T)
            v_loss = 0.5 * masked_mean((new_values - ret[mb]) ** 2, turns["mask"][mb].float())
            entropy = masked_mean(out["entropy"], m)
            loss = pg_loss + s.vf_coef * v_loss - s.ent_coef * entropy
            if ref_logp is not None:
                loss = loss + s.beta * kl_to_reference(out["logp"], ref_logp[mb], m)
            stepped, norm = backward_step(loss, params, optimizer, s.max_grad_norm)
            for k, v in {**stats, "loss": loss.item(), "pg_loss": pg_loss.item(), "v_loss": v_loss.item(),
                         "entropy": entropy.item(), "grad_norm": norm, "nonfinite": float(not stepped)}.items():
                logs.setdefault(k, []).append(v)
    ev = explained_variance(values[turns["mask"]], ret[turns["mask"]])
    return {"explained_variance": float(ev), "value_mean": float(values[turns["mask"]].mean()),
            **{k: sum(v) / len(v) for k, v in logs.items()}}
