"""Reference solutions of notebook 05's exercises (checked by tests/test_exercises.py)."""

import torch


def clipped_loss(ratio, adv, clip_coef=0.2):
    """PPO's per-token loss: −min(ratio·A, clip(ratio, 1−ε, 1+ε)·A)."""
    clipped = min(max(ratio, 1 - clip_coef), 1 + clip_coef)
    return -min(ratio * adv, clipped * adv)


def explained_variance(values, returns):
    """1 − Var[returns − values] / Var[returns]: the share of the returns' variance the critic predicts."""
    v = torch.as_tensor(values, dtype=torch.float64)
    r = torch.as_tensor(returns, dtype=torch.float64)
    return float(1 - (r - v).var(unbiased=False) / r.var(unbiased=False))
