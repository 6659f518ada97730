"""Advantages: discounted returns, GAE with a critic, and group-relative advantages (GRPO).

Everything here works on *turns*, not tokens: an agent episode is a short list of turns
(one action, one observation, one reward each), and a batch of episodes is padded into
tensors of shape ``(B, T)`` — B trajectories by T turns — with a ``mask`` that is 1 on real
turns. Real turns are a prefix of each row: row b has ``mask[b].sum()`` turns, then padding.

What happens after the last real turn depends on why the episode stopped (Gymnasium keeps
the two apart, and so do we):

* **terminated** — the task ended (solved, failed for good): the future is worth 0.
* **truncated** — we ran out of turns: the future is worth what the critic says,
  ``last_values[b]`` = V(s_T), so we *bootstrap* from it.

``last_values=None`` means every row terminated. Mixed batches pass ``last_values`` with 0
in the rows that terminated.

For the policy loss, turn-level advantages are spread over each turn's action tokens with
`spread_to_tokens`. GRPO needs no critic: `group_advantages` compares each sample with the
others drawn for the same task.

    PPO:   values (B, T) ─ gae ─▶ adv (B, T) ─ spread_to_tokens ─▶ adv per token (B, L)
    GRPO:  rewards (N,)  ─ group_advantages ─▶ adv (N,) ─ one value for every token

Between the two sit critic-free estimators that still give each turn its own advantage, from
the other samples of the same task:

    GiGPO:          rewards (B, T) + anchor states ─ gigpo_advantages ─▶ adv (B, T)
    turn baseline:  rewards (B, T) ─ turn_baseline_advantages ─▶ adv (B, T)      (unbiased)
    turn-index norm rewards (B, T) ─ turn_index_advantages ─▶ adv (B, T)         (biased, for comparison)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = [
    "discounted_cumsum",
    "discounted_returns",
    "gae",
    "gigpo_advantages",
    "group_advantages",
    "spread_to_tokens",
    "step_group_advantages",
    "turn_baseline_advantages",
    "turn_index_advantages",
    "zero_variance_fraction",
    "zero_variance_mask",
]

_BLOCK = 16  # turns per block of `discounted_cumsum`


# ---------------------------------------------------------------------------------------------
# Discounted sums over turns
# ---------------------------------------------------------------------------------------------
def discounted_cumsum(x: torch.Tensor, discount: float) -> torch.Tensor:
    """Reverse discounted cumulative sum along the last dim: ``y_t = Σ_k discount^k x_{t+k}``.

    Args:
        x: ``(B, T)`` values per turn (padding must already be 0).
        discount: the factor per step, e.g. ``gamma`` for returns or ``gamma * gae_lambda``
            for GAE. ``0`` gives ``y = x``; ``1`` gives a plain reverse cumulative sum.

    Returns:
        ``(B, T)``, same dtype as ``x``.

    Computed in blocks of ``_BLOCK`` turns. Inside a block the sum is a matrix product with
    ``Γ[t, s] = discount^(s - t)`` for ``s >= t`` (0 below the diagonal) — literally the sum in
    the formula. Each turn then adds what lies beyond its block: ``discount^(turns to the next
    block) × y`` at that block's first turn, and those first-turn values are the same sum over
    the blocks, with ``discount^_BLOCK`` per block (the recursive call). The work is B·T·_BLOCK
    instead of the B·T² of one (T, T) matrix, and it equals the recursion
    ``y_t = x_t + discount · y_{t+1}`` (`_discounted_cumsum_loop`).
    """
    T = x.shape[-1]
    if T <= _BLOCK:
        return x @ _discount_matrix(T, discount, x).T  # (B, T) @ (T, T)
    pad = (-T) % _BLOCK
    blocks = F.pad(x, (0, pad)).unflatten(-1, (-1, _BLOCK))  # (B, nb, K); the zeros added at the end add nothing
    inside = blocks @ _discount_matrix(_BLOCK, discount, x).T  # (B, nb, K) the sum within each block
    firsts = discounted_cumsum(inside[..., 0], discount**_BLOCK)  # (B, nb) y at each block's first turn
    beyond = F.pad(firsts[..., 1:], (0, 1))  # (B, nb) y at the next block's first turn; 0 after the last
    steps = torch.arange(_BLOCK, 0, -1, device=x.device, dtype=x.dtype)  # (K,) turns from j to the next block
    y = inside + beyond[..., None] * torch.tensor(discount, dtype=x.dtype, device=x.device) ** steps
    return y.flatten(-2)[..., :T]


def _discount_matrix(n: int, discount: float, like: torch.Tensor) -> torch.Tensor:
    """``Γ (n, n)`` with ``Γ[t, s] = discount^(s - t)`` for ``s >= t``, 0 below the diagonal."""
    t = torch.arange(n, device=like.device)
    k = t[None, :] - t[:, None]  # (n, n): k = s - t, how far turn s lies after turn t
    powers = torch.tensor(discount, dtype=like.dtype, device=like.device) ** k.clamp(min=0)
    return torch.where(k >= 0, powers, torch.zeros((), dtype=like.dtype, device=like.device))


def _discounted_cumsum_loop(x: torch.Tensor, discount: float) -> torch.Tensor:
    """The same sum as a reverse loop over turns (batch-vectorised): ``y_t = x_t + d * y_{t+1}``."""
    y = torch.empty_like(x)
    running = torch.zeros_like(x[..., 0])  # (B,)
    for t in reversed(range(x.shape[-1])):
        running = x[..., t] + discount * running
        y[..., t] = running
    return y


def _check_turn_batch(rewards: torch.Tensor, mask: torch.Tensor, last_values) -> torch.Tensor:
    """Validate shapes and the prefix mask; return the mask as bool ``(B, T)``."""
    if rewards.dim() != 2:
        raise ValueError(f"expected (B, T) tensors over turns, got rewards of shape {tuple(rewards.shape)}")
    if mask.shape != rewards.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} != rewards shape {tuple(rewards.shape)}")
    mask = mask.bool()
    if (mask[:, 1:] & ~mask[:, :-1]).any():
        raise ValueError("mask must mark a prefix of each row (real turns first, then padding)")
    if last_values is not None and last_values.shape != rewards.shape[:1]:
        raise ValueError(
            f"last_values must have shape (B,) = ({rewards.shape[0]},), got {tuple(last_values.shape)}"
        )
    return mask


def _next_turn(x: torch.Tensor) -> torch.Tensor:
    """``x`` one turn ahead: ``out[:, t] = x[:, t + 1]``, and 0 / False after the last column."""
    return torch.cat([x[:, 1:], torch.zeros_like(x[:, :1])], dim=1)


def _next_values(values: torch.Tensor, mask: torch.Tensor, last_values) -> torch.Tensor:
    """V(s_{t+1}) for every turn: the next turn's value, or the value after the last real turn.

    Args:
        values: ``(B, T)`` V(s_t); mask: ``(B, T)`` bool; last_values: ``(B,)`` or None.

    Returns:
        ``(B, T)``. After the last real turn: 0 (terminated) or ``last_values`` (truncated).
    """
    B, T = values.shape
    if last_values is None:  # every row terminated: the future is worth 0
        bootstrap = torch.zeros(B, dtype=values.dtype, device=values.device)
    else:
        bootstrap = last_values.to(values.dtype)  # (B,)
    next_is_real = _next_turn(mask)  # (B, T) is turn t+1 a real turn?
    return torch.where(next_is_real, _next_turn(values), bootstrap[:, None].expand(B, T))


def discounted_returns(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    last_values: torch.Tensor | None = None,
) -> torch.Tensor:
    """Discounted return of every turn: ``G_t = r_t + γ r_{t+1} + γ² r_{t+2} + …``.

    Args:
        rewards: ``(B, T)`` reward of each turn.
        mask: ``(B, T)`` 1 on real turns (a prefix of each row), 0 on padding.
        gamma: discount factor in [0, 1].
        last_values: ``(B,)`` value after the last real turn for truncated rows (bootstrap),
            0 for terminated rows; None means every row terminated.

    Returns:
        ``(B, T)`` returns; 0 on padding.
    """
    mask = _check_turn_batch(rewards, mask, last_values)
    zero = torch.zeros((), dtype=rewards.dtype, device=rewards.device)
    r = torch.where(mask, rewards, zero)  # (B, T) padding may hold anything; make it 0
    if last_values is not None:
        # The bootstrap value arrives one step after the last real turn: add γ·V(s_T) there.
        is_last = mask & ~_next_turn(mask)  # (B, T) True at the last real turn of each row
        r = torch.where(is_last, r + gamma * last_values.to(r.dtype)[:, None], r)
    return torch.where(mask, discounted_cumsum(r, gamma), zero)


# ---------------------------------------------------------------------------------------------
# Generalised Advantage Estimation (Schulman et al., 2016)
# ---------------------------------------------------------------------------------------------
def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    gae_lambda: float,
    last_values: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over turns.

        δ_t = r_t + γ V(s_{t+1}) − V(s_t)          one-step TD error
        A_t = Σ_k (γλ)^k δ_{t+k}                   advantage
        R_t = A_t + V(s_t)                         target for the value loss

    ``gae_lambda=0`` gives the one-step δ (low variance, biased by the critic);
    ``gae_lambda=1`` gives ``discounted_returns − values`` (unbiased, high variance).
    Long horizons with noisy advantages call for a higher λ.

    Args:
        rewards: ``(B, T)`` reward of each turn.
        values: ``(B, T)`` critic's V(s_t) at each turn.
        mask: ``(B, T)`` 1 on real turns (a prefix of each row), 0 on padding.
        gamma: discount factor γ in [0, 1].
        gae_lambda: λ in [0, 1].
        last_values: ``(B,)`` V of the state after the last real turn, used only for truncated
            rows (put 0 in terminated rows); None means every row terminated.

    Returns:
        ``(advantages, returns)``, both ``(B, T)`` and 0 on padding.
    """
    mask = _check_turn_batch(rewards, mask, last_values)
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    values = torch.where(mask, values, zero)  # (B, T) padding may hold anything; make it 0
    next_values = _next_values(values, mask, last_values)  # (B, T) V(s_{t+1})
    deltas = torch.where(mask, rewards + gamma * next_values - values, zero)  # (B, T) δ_t
    # Padding has δ = 0 and follows the last real turn, so the sum stops there by itself.
    advantages = torch.where(mask, discounted_cumsum(deltas, gamma * gae_lambda), zero)  # (B, T)
    returns = torch.where(mask, advantages + values, zero)  # (B, T)
    return advantages, returns


# ---------------------------------------------------------------------------------------------
# Group-relative advantages (GRPO, Shao et al., 2024)
# ---------------------------------------------------------------------------------------------
def _as_groups(rewards, group_size: int) -> torch.Tensor:
    """Reshape rewards ``(N,)`` into ``(N // group_size, group_size)`` after checking N."""
    rewards = torch.as_tensor(rewards)
    if not rewards.is_floating_point():
        rewards = rewards.float()
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D (N,), got shape {tuple(rewards.shape)}")
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if rewards.numel() % group_size != 0:
        raise ValueError(
            f"{rewards.numel()} rewards are not a whole number of groups of {group_size}: "
            "lay out samples for the same task contiguously, group_size per task"
        )
    return rewards.view(-1, group_size)


def group_advantages(rewards, group_size: int, scale: str = "group", eps: float = 1e-6) -> torch.Tensor:
    """GRPO's advantage: each sample's reward relative to the other samples of its task.

        A_i = (r_i − mean(group)) / (std + eps)

    Args:
        rewards: ``(N,)`` one reward per sample, in contiguous groups of ``group_size``
            (samples 0..G-1 answer task 0, G..2G-1 task 1, …).
        group_size: G, the samples per task.
        scale: ``"group"`` divides by each group's std (the GRPO paper); ``"batch"`` by the
            std of all N rewards (one scale for every task, so easy tasks with tiny spreads
            are not blown up); ``"none"`` only subtracts the mean (Dr. GRPO).
        eps: added to the std; a group whose rewards are all equal gets advantage 0.

    Returns:
        ``(N,)`` advantages; every group has mean 0. Stds are population stds (divide by n).
    """
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"scale must be 'group', 'batch' or 'none', got {scale!r}")
    groups = _as_groups(rewards, group_size)  # (N/G, G)
    adv = groups - groups.mean(dim=1, keepdim=True)  # (N/G, G)
    if scale == "group":
        adv = adv / (groups.std(dim=1, unbiased=False, keepdim=True) + eps)
    elif scale == "batch":
        adv = adv / (groups.std(unbiased=False) + eps)
    return adv.reshape(-1)


def zero_variance_mask(rewards, group_size: int, atol: float = 0.0) -> torch.Tensor:
    """``(N,)`` bool: True for samples whose whole group got equal rewards (within ``atol``).

    Such groups have advantage 0 everywhere, so they add no policy gradient — only KL and
    cost. Drop them from the backward pass and log how many there were.
    """
    groups = _as_groups(rewards, group_size)  # (N/G, G)
    spread = groups.amax(dim=1) - groups.amin(dim=1)  # (N/G,)
    return (spread <= atol).repeat_interleave(group_size)


def zero_variance_fraction(rewards, group_size: int, atol: float = 0.0) -> float:
    """Fraction of groups whose rewards are all equal (within ``atol``); see `zero_variance_mask`."""
    groups = _as_groups(rewards, group_size)  # (N/G, G)
    if groups.shape[0] == 0:
        return 0.0
    spread = groups.amax(dim=1) - groups.amin(dim=1)  # (N/G,)
    return int((spread <= atol).sum()) / groups.shape[0]


# ---------------------------------------------------------------------------------------------
# Per-turn credit without a critic: step groups (GiGPO) and per-turn baselines
# ---------------------------------------------------------------------------------------------
def _turn_groups(rewards: torch.Tensor, mask: torch.Tensor, group_size: int) -> torch.Tensor:
    """Check a (B, T) batch laid out in contiguous groups; returns the bool mask."""
    mask = _check_turn_batch(rewards, mask, None)
    _as_groups(torch.zeros(rewards.shape[0]), group_size)  # B must be whole groups
    return mask


def _scaled(adv: torch.Tensor, mask: torch.Tensor, scale: str, eps: float) -> torch.Tensor:
    """``scale="batch"`` divides by the std over the batch's real turns (one positive number for the
    whole batch, so every sample's direction is kept); ``"none"`` leaves ``adv`` as it is."""
    if scale not in ("batch", "none"):
        raise ValueError(f"scale must be 'batch' or 'none', got {scale!r}")
    if scale == "batch" and mask.any():
        adv = adv / (adv[mask].std(unbiased=False) + eps)
    return torch.where(mask, adv, torch.zeros_like(adv))


def step_group_advantages(rewards: torch.Tensor, mask: torch.Tensor, states: list[list[str]], group_size: int,
                          gamma: float = 0.95, scale: str = "group", eps: float = 1e-6) -> torch.Tensor:
    """GiGPO's step-level advantage (Feng et al., 2025): compare turns taken from the same state.

    Within one group (the samples of one task), every real turn whose state before the action is
    the same is put in one *step group*, wherever it happened in its episode. Each turn is scored by
    its discounted return from there on, relative to the other turns of its step group:

        for each group g, for each state s seen in g:
            members = {(i, t) in g : states[i][t] == s, turn t is real}
            G[i, t] = r[i, t] + γ r[i, t+1] + …                  (to the end of episode i)
            A[i, t] = (G[i, t] − mean(G[members])) / (std(G[members]) + eps)   for (i, t) in members

    A state met once in the group has no comparison and gets 0.

    Args:
        rewards: ``(B, T)`` per-turn rewards; mask ``(B, T)`` real turns, a prefix of each row.
        states: ``states[b][t]`` the canonical state before turn t of row b (``len(states[b])`` at
            least the row's real turns), e.g. the env's ``info["state"]`` of the turn before.
        group_size: samples per task, laid out contiguously as in `group_advantages`.
        gamma: discount of the step returns (GiGPO uses 0.95).
        scale: ``"group"`` divides by each step group's std; ``"none"`` only subtracts the mean.

    Returns:
        ``(B, T)`` step advantages, 0 on padding.
    """
    if scale not in ("group", "none"):
        raise ValueError(f"scale must be 'group' or 'none', got {scale!r}")
    mask = _turn_groups(rewards, mask, group_size)
    if len(states) != rewards.shape[0]:
        raise ValueError(f"states has {len(states)} rows, rewards {rewards.shape[0]}")
    returns = discounted_returns(rewards.float(), mask, gamma)  # (B, T)
    adv = torch.zeros_like(returns)
    for g0 in range(0, rewards.shape[0], group_size):
        members: dict[str, list[tuple[int, int]]] = {}
        for b in range(g0, g0 + group_size):
            n = int(mask[b].sum())
            if len(states[b]) < n:
                raise ValueError(f"row {b} has {n} real turns but {len(states[b])} states")
            for t in range(n):
                members.setdefault(states[b][t], []).append((b, t))
        for cells in members.values():
            if len(cells) < 2:
                continue
            rows, cols = torch.tensor([c[0] for c in cells]), torch.tensor([c[1] for c in cells])
            g = returns[rows, cols]  # (M,) the step group's returns
            a = g - g.mean()
            if scale == "group":
                a = a / (g.std(unbiased=False) + eps)
            adv[rows, cols] = a
    return adv


def gigpo_advantages(rewards: torch.Tensor, mask: torch.Tensor, states: list[list[str]], group_size: int,
                     gamma: float = 0.95, step_weight: float = 1.0, episode_rewards: torch.Tensor | None = None,
                     scale: str = "group", eps: float = 1e-6) -> torch.Tensor:
    """GiGPO (Feng et al., 2025): the episode's group-relative advantage plus a step-level one.

        A[i, t] = A_episode[i] + step_weight · A_step[i, t]

    ``A_episode`` is `group_advantages` of the episode rewards (``episode_rewards``, else the sum
    of each row's real turns); ``A_step`` is `step_group_advantages`. With every state distinct
    (no step groups) this is trajectory GRPO, spread over the turns.

    Returns ``(B, T)``, 0 on padding.
    """
    mask = _turn_groups(rewards, mask, group_size)
    if episode_rewards is None:
        episode_rewards = torch.where(mask, rewards.float(), torch.zeros((), dtype=torch.float32)).sum(1)
    episode = group_advantages(episode_rewards, group_size, scale="group" if scale == "group" else "none", eps=eps)
    step = step_group_advantages(rewards, mask, states, group_size, gamma, scale, eps)
    return torch.where(mask, episode[:, None].to(step.dtype) + step_weight * step, torch.zeros_like(step))


def turn_baseline_advantages(rewards: torch.Tensor, mask: torch.Tensor, group_size: int, gamma: float = 1.0,
                             scale: str = "batch", eps: float = 1e-6) -> torch.Tensor:
    """A per-turn baseline that stays unbiased when the policy decides how long the episode is.

        G[i, t] = r[i, t] + γ r[i, t+1] + …       (to the end of episode i)
        A[i, t] = G[i, t] − mean{ G[j, t] : j ≠ i in i's group, episode j has a turn t }

    The baseline for turn t uses only the *other* samples that reached turn t, so it does not depend
    on what sample i does at turn t or later, which is the condition for a baseline to leave the
    policy gradient unbiased. A turn no other sample reached gets baseline 0 (plain REINFORCE).
    Compare `turn_index_advantages`, which subtracts per-turn means over the turns the sample
    itself went on to take.

    ``scale="batch"`` then divides by the std over the batch's real turns, to put the advantages on
    GRPO's scale; ``"none"`` keeps reward units. Returns ``(B, T)``, 0 on padding.
    """
    mask = _turn_groups(rewards, mask, group_size)
    returns = discounted_returns(rewards.float(), mask, gamma)  # (B, T)
    B, T = returns.shape
    g = returns.view(-1, group_size, T)  # (N/G, G, T)
    m = mask.view(-1, group_size, T).to(g.dtype)  # (N/G, G, T)
    others = m.sum(1, keepdim=True) - m  # (N/G, G, T) how many other samples reached turn t
    other_sum = (g * m).sum(1, keepdim=True) - g * m  # (N/G, G, T)
    baseline = torch.where(others > 0, other_sum / others.clamp(min=1), torch.zeros_like(g))
    return _scaled((g - baseline).view(B, T), mask, scale, eps)


def turn_index_advantages(rewards: torch.Tensor, mask: torch.Tensor, group_size: int, gamma: float = 1.0,
                          scale: str = "batch", eps: float = 1e-6) -> torch.Tensor:
    """The per-turn-index normalisation of multi-turn GRPO variants, kept to show its bias.

        r̃[i, k] = r[i, k] − mean{ r[j, k] : j in i's group, episode j has a turn k }
        A[i, t] = r̃[i, t] + γ r̃[i, t+1] + …       (to the end of episode i)

    Written out, ``A[i, t] = G[i, t] − Σ_{k ≥ t, k < T_i} γ^(k−t) mean_k``: the baseline has one term
    per turn that sample i itself went on to take, so it depends on sample i's own later actions.
    Where the policy chooses when to stop, that is an action-dependent baseline and the gradient
    is biased: going on is charged the group's mean reward of every later turn. In the extreme
    case of an outcome reward that every sample reaching the last turn shares, the outcome cancels
    entirely. `turn_baseline_advantages` is the unbiased form.

    Returns ``(B, T)``, 0 on padding.
    """
    mask = _turn_groups(rewards, mask, group_size)
    B, T = rewards.shape
    r = torch.where(mask, rewards.float(), torch.zeros((), dtype=torch.float32)).view(-1, group_size, T)
    m = mask.view(-1, group_size, T).float()
    mean = (r * m).sum(1, keepdim=True) / m.sum(1, keepdim=True).clamp(min=1)  # (N/G, 1, T) mean per turn index
    normed = torch.where(mask, (r - mean).view(B, T), torch.zeros(()))
    return _scaled(torch.where(mask, discounted_cumsum(normed, gamma), torch.zeros(())), mask, scale, eps)


# ---------------------------------------------------------------------------------------------
# From turns to tokens
# ---------------------------------------------------------------------------------------------
def spread_to_tokens(turn_values: torch.Tensor, turn_index: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
    """Give every action token the value (e.g. advantage) of the turn it belongs to.

    Args:
        turn_values: ``(B, T_turns)`` one value per turn.
        turn_index: ``(B, L)`` long; for each token, the turn whose action it is part of,
            or -1 for tokens that are not action tokens (prompt, observations, padding).
        fill: value given to tokens with index -1.

    Returns:
        ``(B, L)`` per-token values, same dtype as ``turn_values``.

    Example: turn_values ``[[0.5, -1.0]]``, turn_index ``[[-1, -1, 0, 0, -1, 1]]``
    → ``[[0, 0, 0.5, 0.5, 0, -1.0]]``.
    """
    if turn_values.dim() != 2 or turn_index.dim() != 2 or turn_values.shape[0] != turn_index.shape[0]:
        raise ValueError(
            f"expected turn_values (B, T_turns) and turn_index (B, L), got "
            f"{tuple(turn_values.shape)} and {tuple(turn_index.shape)}"
        )
    turn_index = turn_index.long()
    if turn_index.numel() and (turn_index.min() < -1 or turn_index.max() >= turn_values.shape[1]):
        raise ValueError(f"turn_index must lie in [-1, {turn_values.shape[1] - 1}]")
    is_action = turn_index >= 0  # (B, L)
    if turn_values.shape[1] == 0:  # no turns at all: every token is a non-action token
        return torch.full(turn_index.shape, fill, dtype=turn_values.dtype, device=turn_values.device)
    gathered = turn_values.gather(1, turn_index.clamp(min=0))  # (B, L)
    return torch.where(is_action, gathered, torch.full_like(gathered, fill))
