"""Exercises of notebook 06 (GRPO): group-relative advantages and the zero-variance fraction."""

from __future__ import annotations

import math

import torch

from agentlab.advantages import group_advantages, zero_variance_fraction
from agentlab.exercises import all_close, exercise, first_mismatch, floats, scalar

# (rewards, group_size): mixed groups, a group that all failed, groups of different spreads.
GROUP_CASES = [
    ([1.0, 0.0, 0.0, 1.0], 4),
    ([1.1, 0.2, 0.3, 0.2, 1.2, 1.1, 0.0, 0.1], 4),
    ([0.0, 0.0, 0.0, 1.0, 0.0, 0.0], 3),  # the first group all failed
    ([0.5, 0.5, 2.0, 0.0], 2),  # an all-equal group, then a wide one
]


# -- wrong answers
def _batch_mean(rewards, group_size):
    r = torch.tensor(rewards, dtype=torch.float64)
    g = r.view(-1, group_size)
    return ((g - r.mean()) / (g.std(dim=1, unbiased=False, keepdim=True) + 1e-6)).flatten().tolist()


def _sample_std(rewards, group_size):
    g = torch.tensor(rewards, dtype=torch.float64).view(-1, group_size)
    return ((g - g.mean(1, keepdim=True)) / (g.std(dim=1, unbiased=True, keepdim=True) + 1e-6)).flatten().tolist()


def _no_eps(rewards, group_size):
    g = torch.tensor(rewards, dtype=torch.float64).view(-1, group_size)
    return ((g - g.mean(1, keepdim=True)) / g.std(dim=1, unbiased=False, keepdim=True)).flatten().tolist()


def _interleaved(rewards, group_size):
    g = torch.tensor(rewards, dtype=torch.float64).view(group_size, -1)  # groups as columns, not rows
    adv = (g - g.mean(0, keepdim=True)) / (g.std(dim=0, unbiased=False, keepdim=True) + 1e-6)
    return adv.flatten().tolist()


@exercise("06.group_advantages", wrong=[_batch_mean, _sample_std, _no_eps, _interleaved])
def check_group_advantages(fn) -> str | None:
    """write group_advantages(rewards, group_size) -> list: (r − mean of its group) / (population std of its
    group + 1e-6), groups contiguous"""
    return first_mismatch(GROUP_CASES, lambda case: floats(fn(list(case[0]), case[1])), _reference_advantages,
                          lambda got, want: all_close(got, want, rel_tol=1e-5, abs_tol=1e-6), _explain_advantages)


def _reference_advantages(case) -> list[float]:
    rewards, G = case
    return group_advantages(torch.tensor(rewards, dtype=torch.float64), G).tolist()


def _explain_advantages(case, got, want) -> str:
    rewards, G = case
    if any(math.isnan(x) or math.isinf(x) for x in got):
        return (f"rewards={rewards}, G={G}: you returned NaN or inf. A group whose rewards are all equal has "
                "std 0: add 1e-6 to the std, and that group gets advantage 0.")
    if len(got) == len(want):
        groups = [got[i:i + G] for i in range(0, len(got), G)]
        if not all(abs(sum(g)) < 1e-5 for g in groups):
            return (f"rewards={rewards}, G={G}: your advantages {[round(x, 3) for x in got]} do not sum to 0 "
                    "within each group. Subtract each group's own mean (samples 0..G−1 are group 0, G..2G−1 "
                    "group 1, …), not the batch's.")
    return (f"rewards={rewards}, G={G}: want {[round(x, 3) for x in want]}, got {[round(x, 3) for x in got]}. "
            "Divide by the population std (unbiased=False): GRPO compares a sample with its own group.")


# ---------------------------------------------------------------------------- 06.zero_var_fraction

ZV_CASES = [
    ([1.0, 1.0, 0.0, 1.0], 2),
    ([0.0, 0.0, 0.0, 0.0, 0.0, 0.0], 3),
    ([0.2, 0.3, 1.1, 1.1, 0.2, 0.2, 1.1, 0.0], 2),
    ([0.5, 0.6, 0.7], 3),
]


def _counts_samples(rewards, group_size):
    g = torch.tensor(rewards).view(-1, group_size)
    flat = (g.amax(1) == g.amin(1))
    return float(flat.sum())


def _only_failed(rewards, group_size):
    g = torch.tensor(rewards).view(-1, group_size)
    return float((g.amax(1) <= 0).float().mean())


def _std_of_batch(rewards, group_size):
    return float(torch.tensor(rewards).std() == 0)


@exercise("06.zero_var_fraction", wrong=[_counts_samples, _only_failed, _std_of_batch])
def check_zero_var_fraction(fn) -> str | None:
    """write zero_var_fraction(rewards, group_size) -> float: the fraction of groups whose rewards are all equal"""
    return first_mismatch(ZV_CASES, lambda case: float(scalar(fn(list(case[0]), case[1]))),
                          lambda case: zero_variance_fraction(torch.tensor(case[0]), case[1]),
                          lambda got, want: math.isclose(got, want, abs_tol=1e-9), _explain_zero_var)


def _explain_zero_var(case, got, want) -> str:
    rewards, G = case
    if got > 1:
        return f"rewards={rewards}, G={G}: return a fraction of the groups (0 to 1), got {got}."
    return (f"rewards={rewards}, G={G}: {want:.3f} of the groups have equal rewards, you returned {got:.3f}. "
            "A group is flat when all its rewards are equal — all successes count too, not only failures.")
