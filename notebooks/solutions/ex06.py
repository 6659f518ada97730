"""Reference solutions of notebook 06's exercises (checked by tests/test_exercises.py)."""

import torch


def group_advantages(rewards, group_size):
    """A_i = (r_i − mean(group)) / (std(group) + 1e-6), population std, contiguous groups."""
    groups = torch.tensor(rewards, dtype=torch.float64).view(-1, group_size)  # (N/G, G)
    adv = (groups - groups.mean(dim=1, keepdim=True)) / (groups.std(dim=1, unbiased=False, keepdim=True) + 1e-6)
    return adv.flatten().tolist()


def zero_var_fraction(rewards, group_size):
    """Fraction of groups whose rewards are all equal: they give GRPO no gradient."""
    groups = torch.tensor(rewards).view(-1, group_size)
    return float((groups.amax(dim=1) == groups.amin(dim=1)).float().mean())
