"""Exercises of notebook 05 (PPO with a critic): the clipped surrogate and explained variance."""

from __future__ import annotations

import math

import torch

from agentlab.algos.losses import clipped_surrogate
from agentlab.exercises import exercise, first_mismatch, scalar
from agentlab.tensors import explained_variance as _explained_variance

# (ratio, advantage) pairs covering every branch of the min/clip: inside the band, above and
# below it, with positive and negative advantages.
RATIO_CASES = [0.5, 0.79, 0.8, 0.95, 1.0, 1.1, 1.2, 1.21, 1.6, 3.0]
ADV_CASES = [1.0, -1.0, 2.5, -0.4]


def _reference_loss(ratio: float, adv: float, clip_coef: float) -> float:
    logp = torch.tensor([[math.log(ratio)]], dtype=torch.float64)
    loss, _ = clipped_surrogate(logp, torch.zeros_like(logp), torch.tensor([[adv]], dtype=torch.float64),
                                torch.ones_like(logp), clip_coef)
    return float(loss)


# -- wrong answers
def _only_clipped(ratio, adv, clip_coef=0.2):
    return -min(max(ratio, 1 - clip_coef), 1 + clip_coef) * adv


def _max_instead_of_min(ratio, adv, clip_coef=0.2):
    return -max(ratio * adv, min(max(ratio, 1 - clip_coef), 1 + clip_coef) * adv)


def _no_minus(ratio, adv, clip_coef=0.2):
    return min(ratio * adv, min(max(ratio, 1 - clip_coef), 1 + clip_coef) * adv)


@exercise("05.clipped_loss", wrong=[_only_clipped, _max_instead_of_min, _no_minus])
def check_clipped_loss(clipped_loss) -> str | None:
    """write clipped_loss(ratio, adv, clip_coef=0.2) -> float: PPO's loss for one token,
    −min(ratio·A, clip(ratio, 1−ε, 1+ε)·A)"""
    cases = [(ratio, adv, eps) for eps in (0.2, 0.1) for adv in ADV_CASES for ratio in RATIO_CASES]
    return first_mismatch(cases, lambda case: float(scalar(clipped_loss(*case))), lambda case: _reference_loss(*case),
                          _close, _explain_loss)


def _close(got, want) -> bool:
    return math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9)


def _explain_loss(case, got, want) -> str:
    ratio, adv, eps = case
    if _close(got, -want):
        return (f"ratio={ratio}, A={adv}: you returned {got:+.4f}, the loss is {want:+.4f}. The "
                "surrogate is an objective to maximise; the loss is its negative.")
    where = "inside" if 1 - eps <= ratio <= 1 + eps else "outside"
    hint = (" Outside the band the min keeps the unclipped term when it is the worse (smaller) "
            "one: clipping may only remove the incentive to move further, never hide a loss."
            if where == "outside" else "")
    return (f"ratio={ratio}, A={adv}, ε={eps} ({where} the band [1−ε, 1+ε]): the loss is "
            f"{want:+.4f}, you returned {got:+.4f}.{hint}")


# ---------------------------------------------------------------------------- 05.explained_variance

EV_CASES = [
    ([0.0, 0.5, 1.0, 1.5], [0.1, 0.4, 1.1, 1.4]),  # a good critic
    ([0.5, 0.5, 0.5, 0.5], [0.0, 1.0, 0.0, 1.0]),  # predicts the mean: 0
    ([1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]),  # anti-correlated: negative
    ([2.0, 3.0, 4.0], [0.0, 1.0, 2.0]),  # right shape, offset by 2: still explains all variance
]


def _ev_ratio_of_vars(values, returns):
    v, r = torch.as_tensor(values, dtype=torch.float64), torch.as_tensor(returns, dtype=torch.float64)
    return float(v.var() / r.var())


def _ev_missing_one_minus(values, returns):
    v, r = torch.as_tensor(values, dtype=torch.float64), torch.as_tensor(returns, dtype=torch.float64)
    return float((r - v).var() / r.var())


def _ev_mse(values, returns):
    v, r = torch.as_tensor(values, dtype=torch.float64), torch.as_tensor(returns, dtype=torch.float64)
    return float(1 - ((r - v) ** 2).mean() / r.var(unbiased=False))


def _reference_ev(case) -> float:
    values, returns = case
    return _explained_variance(torch.tensor(values, dtype=torch.float64), torch.tensor(returns, dtype=torch.float64))


@exercise("05.explained_variance", wrong=[_ev_ratio_of_vars, _ev_missing_one_minus, _ev_mse])
def check_explained_variance(explained_variance) -> str | None:
    """write explained_variance(values, returns) -> float: 1 − Var[returns − values] / Var[returns]"""
    return first_mismatch(EV_CASES, lambda case: float(scalar(explained_variance(*map(list, case)))), _reference_ev,
                          _close, _explain_ev)


def _explain_ev(case, got, want) -> str:
    values, returns = case
    if _close(got, 1 - want):
        return (f"values={values}, returns={returns}: you returned the unexplained share {got:.4f}; "
                f"explained variance is 1 minus it, {want:.4f}.")
    hint = ""
    if values == [2.0, 3.0, 4.0]:
        hint = (" A critic off by a constant still explains all the variance: use the variance of the "
                "error returns − values, not its mean square.")
    return f"values={values}, returns={returns}: explained variance is {want:.4f}, you returned {got:.4f}.{hint}"
