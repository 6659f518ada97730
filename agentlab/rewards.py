"""Reward shaping: what happens to the environment's rewards before advantages are computed.

The environments already compose each step's reward from named components (outcome,
process, format, penalties — see ``info["reward_components"]``). This module holds the
shaping done on a whole batch of episodes, each step a small function you can switch on
in `RewardShaping`:

    episode rewards (N,) ─ floor_reward ─ diversity_penalty ─ zscore ─▶ shaped rewards (N,)

* `floor_reward` — when every sample of a task fails, GRPO sees equal rewards and learns
  nothing from that task. Giving the most complete attempt a small floor reward turns the
  group into a signal: "get further next time".
* `diversity_penalty` — mode collapse shows as samples that repeat each other. Penalising
  near-duplicates inside a group keeps exploration alive.
* `zscore` — keeps process and outcome rewards on one scale across iterations, so the same
  learning rate works as the reward mix changes.
* `three_layer` — a way to build one reward from outcome, process and format scores.

Rewards are laid out as in `agentlab.advantages.group_advantages`: ``(N,)``, in contiguous
groups of ``group_size`` samples of the same task.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agentlab.advantages import _as_groups
from agentlab.metrics import sentence_bleu

__all__ = [
    "RewardShaping",
    "zscore",
    "floor_reward",
    "diversity_penalty",
    "three_layer",
    "shape_group_rewards",
]


@dataclass
class RewardShaping:
    """Which batch-level reward shaping to apply (all off by default).

    The repeated-action penalty (S20: the same action twice in a row costs a little) is not
    here: it is a per-step reward component applied by the environments, set in their
    reward configuration, so it shows up in ``info["reward_components"]``.
    """

    zscore: bool = False  # normalise the batch's rewards to mean 0, std 1 (applied last)
    eps: float = 1e-6  # added to the std in z-scoring
    floor_reward: float = 0.0  # extra reward for the most complete try of an all-failed group; 0 = off
    fail_threshold: float = 0.0  # a group failed if all its rewards are <= this (or all the batch min)
    diversity_penalty: float = 0.0  # subtracted from samples with a near-duplicate in the group; 0 = off
    diversity_threshold: float = 0.8  # BLEU similarity at or above which two samples are near-duplicates


def zscore(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Normalise rewards over the batch: ``(r − mean) / (std + eps)`` (population std).

    Args:
        rewards: ``(N,)`` rewards of one iteration.

    Returns:
        ``(N,)`` with mean 0 and std ≈ 1; all 0 if the rewards are all equal.
    """
    rewards = torch.as_tensor(rewards)
    if not rewards.is_floating_point():
        rewards = rewards.float()
    if rewards.numel() == 0:
        return rewards
    return (rewards - rewards.mean()) / (rewards.std(unbiased=False) + eps)


def floor_reward(
    rewards: torch.Tensor,
    completeness: torch.Tensor,
    group_size: int,
    floor: float,
    fail_threshold: float = 0.0,
) -> torch.Tensor:
    """Give the most complete attempt of an all-failed group a small extra reward ``floor``.

    A group has failed when every reward is ``<= fail_threshold``, or when every reward
    equals the batch's lowest reward while some other sample in the batch did better.
    In a failed group, the sample(s) with the highest ``completeness`` get ``+floor``. If all
    samples in the group are equally complete, nothing changes: there is nothing to prefer.

    Args:
        rewards: ``(N,)`` episode rewards in contiguous groups.
        completeness: ``(N,)`` how far each episode got, e.g. the fraction of valid steps or
            of sub-goals reached; only its order within a group matters.
        group_size: samples per task.
        floor: the extra reward, small next to a success (e.g. 0.1 when success is 1).
        fail_threshold: see above.

    Returns:
        ``(N,)`` new rewards (the input is not modified).
    """
    groups = _as_groups(rewards, group_size).clone()  # (N/G, G)
    scores = _as_groups(completeness, group_size)  # (N/G, G)
    if groups.numel() == 0 or floor == 0.0:
        return groups.reshape(-1)
    batch_min, batch_max = groups.min(), groups.max()
    group_max = groups.amax(dim=1)  # (N/G,)
    all_at_batch_min = (groups == batch_min).all(dim=1) & (batch_max > batch_min)  # (N/G,)
    failed = (group_max <= fail_threshold) | all_at_batch_min  # (N/G,)
    best = scores == scores.amax(dim=1, keepdim=True)  # (N/G, G) most complete
    distinguishable = ~best.all(dim=1)  # (N/G,) someone is less complete than the best
    gets_floor = best & (failed & distinguishable)[:, None]  # (N/G, G)
    return (groups + floor * gets_floor.to(groups.dtype)).reshape(-1)


def _similarity(a: str, b: str) -> float:
    """Symmetric near-duplicate score: the larger of BLEU(a | b) and BLEU(b | a)."""
    return max(sentence_bleu(a, [b]), sentence_bleu(b, [a]))


def diversity_penalty(
    texts: Sequence[str], group_size: int, threshold: float, penalty: float
) -> torch.Tensor:
    """Penalty for samples that nearly repeat another sample of the same group.

    Two samples are near-duplicates when their BLEU similarity (see `agentlab.metrics`) is
    at least ``threshold``. Every sample with at least one near-duplicate in its group pays
    ``penalty``; samples with no near-duplicate pay nothing. Pass each episode's actions
    joined into one string as its text.

    Args:
        texts: ``N`` texts in contiguous groups of ``group_size``.
        group_size: samples per task.
        threshold: similarity in [0, 1]; 1 penalises only exact repeats (up to tokenisation).
        penalty: the amount, >= 0.

    Returns:
        ``(N,)`` penalties (>= 0) to subtract from the rewards.
    """
    n = len(texts)
    if group_size < 1 or n % group_size != 0:
        raise ValueError(f"{n} texts are not a whole number of groups of {group_size}")
    out = torch.zeros(n)
    if penalty == 0.0:
        return out
    for start in range(0, n, group_size):
        for i in range(start, start + group_size):
            for j in range(i + 1, start + group_size):
                if _similarity(texts[i], texts[j]) >= threshold:
                    out[i] = penalty
                    out[j] = penalty
    return out


def three_layer(outcome, process, fmt, weights: tuple[float, float, float] = (0.6, 0.3, 0.1)):
    """One reward from three layers: ``w_o·outcome + w_p·process + w_f·fmt``.

    * outcome — was the task solved (1/0, or a pass rate of tests);
    * process — were the key reasoning or tool steps present (fraction in [0, 1]);
    * fmt     — format and efficiency (valid actions, few turns), in [0, 1].

    The default 60/30/10 keeps the outcome in charge: no amount of good process or format
    outweighs solving the task. Lowering the process weight helps when a policy collapses
    onto "process-looking" text. Works on floats or tensors of any matching shape.
    """
    if len(weights) != 3:
        raise ValueError(f"weights must be three numbers (outcome, process, format), got {weights!r}")
    w_outcome, w_process, w_format = weights
    return w_outcome * outcome + w_process * process + w_format * fmt


def shape_group_rewards(
    rewards: torch.Tensor,
    texts: Sequence[str] | None,
    group_size: int,
    cfg: RewardShaping,
    completeness: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Apply the shaping switched on in ``cfg``: floor reward, diversity penalty, then z-score.

    Args:
        rewards: ``(N,)`` episode rewards in contiguous groups of ``group_size``.
        texts: ``N`` episode texts (needed when ``cfg.diversity_penalty > 0``).
        group_size: samples per task.
        cfg: the switches.
        completeness: ``(N,)`` progress scores (needed when ``cfg.floor_reward > 0``).

    Returns:
        ``(shaped, info)``: shaped rewards ``(N,)`` and counts for logging —
        ``floor_groups`` (groups given a floor reward), ``near_duplicates`` (samples
        penalised), ``reward_raw_mean`` and ``reward_raw_std``.
    """
    shaped = _as_groups(rewards, group_size).reshape(-1).clone()  # (N,) float copy
    info = {
        "reward_raw_mean": shaped.mean().item() if shaped.numel() else float("nan"),
        "reward_raw_std": shaped.std(unbiased=False).item() if shaped.numel() else float("nan"),
        "floor_groups": 0.0,
        "near_duplicates": 0.0,
    }
    if cfg.floor_reward != 0.0:
        if completeness is None:
            raise ValueError("cfg.floor_reward is on: pass completeness, one progress score per episode")
        floored = floor_reward(
            shaped, torch.as_tensor(completeness), group_size, cfg.floor_reward, cfg.fail_threshold
        )
        info["floor_groups"] = float((floored != shaped).view(-1, group_size).any(dim=1).sum().item())
        shaped = floored
    if cfg.diversity_penalty != 0.0:
        if texts is None or len(texts) != shaped.numel():
            raise ValueError("cfg.diversity_penalty is on: pass texts, one per episode")
        penalties = diversity_penalty(texts, group_size, cfg.diversity_threshold, cfg.diversity_penalty)
        info["near_duplicates"] = float((penalties > 0).sum().item())
        shaped = shaped - penalties.to(shaped.dtype)
    if cfg.zscore:
        shaped = zscore(shaped, cfg.eps)
    return shaped, info
