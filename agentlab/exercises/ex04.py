"""Exercises of notebook 04 (returns and GAE): GAE for one episode, and how far credit reaches."""

from __future__ import annotations

import math

import torch

from agentlab.advantages import gae
from agentlab.exercises import exercise

# (rewards, values, gamma, gae_lambda, last_value): terminated (None) and truncated episodes.
GAE_CASES = [
    ([0.0, 0.0, 1.0], [0.2, 0.4, 0.7], 0.99, 0.95, None),
    ([0.1, 0.1, 1.1], [0.5, 0.6, 0.9], 0.9, 0.0, None),
    ([0.1, -0.2, 0.3, 0.0], [0.0, 0.1, -0.1, 0.2], 0.97, 1.0, None),
    ([0.05, 0.05, 0.05, 0.05], [0.3, 0.4, 0.5, 0.6], 0.99, 0.9, 0.8),
    ([1.0], [0.25], 0.99, 0.95, None),
    ([0.0, 0.5], [0.1, 0.2], 0.8, 0.7, -0.4),
]


def _reference(rewards, values, gamma, lam, last_value):
    r = torch.tensor([rewards], dtype=torch.float64)
    v = torch.tensor([values], dtype=torch.float64)
    last = None if last_value is None else torch.tensor([float(last_value)], dtype=torch.float64)
    adv, _ = gae(r, v, torch.ones_like(r), gamma, lam, last)
    return adv[0].tolist()


def _as_list(out) -> list[float]:
    if isinstance(out, torch.Tensor):
        out = out.detach().flatten().tolist()
    return [float(x) for x in out]


def _close(a, b) -> bool:
    return len(a) == len(b) and all(math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-8) for x, y in zip(a, b))


# -- wrong answers (each is a mistake learners make; the check must name it)
def _gae_no_bootstrap(rewards, values, gamma, gae_lambda, last_value=None):
    return _gae_with(rewards, values, gamma, gae_lambda, None)


def _gae_lambda_only(rewards, values, gamma, gae_lambda, last_value=None):
    out, a = [], 0.0
    nxt = [*values[1:], 0.0 if last_value is None else last_value]
    for r, v, vn in zip(reversed(rewards), reversed(values), reversed(nxt)):
        a = r + gamma * vn - v + gae_lambda * a  # discounts by λ instead of γλ
        out.append(a)
    return out[::-1]


def _gae_undiscounted_delta(rewards, values, gamma, gae_lambda, last_value=None):
    out, a = [], 0.0
    nxt = [*values[1:], 0.0 if last_value is None else last_value]
    for r, v, vn in zip(reversed(rewards), reversed(values), reversed(nxt)):
        a = r + vn - v + gamma * gae_lambda * a  # forgot γ on V(s_t+1)
        out.append(a)
    return out[::-1]


def _gae_forward(rewards, values, gamma, gae_lambda, last_value=None):
    return _gae_with(rewards, values, gamma, gae_lambda, last_value)[::-1]


def _gae_with(rewards, values, gamma, lam, last_value):
    out, a = [], 0.0
    nxt = [*values[1:], 0.0 if last_value is None else last_value]
    for r, v, vn in zip(reversed(rewards), reversed(values), reversed(nxt)):
        a = r + gamma * vn - v + gamma * lam * a
        out.append(a)
    return out[::-1]


def _show(case) -> str:
    rewards, values, gamma, lam, last = case
    return f"rewards={rewards}, values={values}, gamma={gamma}, gae_lambda={lam}, last_value={last}"


@exercise(
    "04.gae_advantages",
    "write gae_advantages(rewards, values, gamma, gae_lambda, last_value=None) -> list of advantages, one per turn",
    wrong=[_gae_no_bootstrap, _gae_lambda_only, _gae_undiscounted_delta, _gae_forward],
)
def check_gae_advantages(fn) -> str | None:
    for case in GAE_CASES:
        rewards, values, gamma, lam, last = case
        expected = _reference(*case)
        got = _as_list(fn(list(rewards), list(values), gamma, lam, last))
        if _close(got, expected):
            continue
        if len(got) != len(expected):
            return f"return one advantage per turn: {len(expected)} for {_show(case)}, you returned {len(got)}"
        if last is not None and _close(got, _reference(rewards, values, gamma, lam, None)):
            return ("the episode with last_value={} was truncated: the value after its last turn is last_value, "
                    "not 0 (you treated it as terminated)").format(last)
        if _close(got, _gae_lambda_only(*case)):
            return "each step back discounts by γ·λ, not by λ alone: A_t = δ_t + γλ·A_t+1"
        if _close(got, _gae_undiscounted_delta(*case)):
            return "the TD error is δ_t = r_t + γ·V(s_t+1) − V(s_t): the next value is discounted by γ"
        if _close(got[::-1], expected):
            return "your advantages come out in reverse order: compute backwards, but return them from turn 0 on"
        return (f"for {_show(case)} the advantages should be {[round(x, 4) for x in expected]}, "
                f"you returned {[round(x, 4) for x in got]}")
    return None


# ---------------------------------------------------------------------------- credit horizon

HORIZON_CASES = [(0.99, 0.9, 0.1), (0.99, 0.99, 0.1), (0.99, 0.95, 0.1), (0.5, 1.0, 0.1), (0.9, 1.0, 0.5),
                 (0.99, 0.0, 0.1), (0.97, 0.97, 0.01)]


def _horizon(gamma, lam, threshold):
    x = gamma * lam
    if x >= 1.0:
        return math.inf
    k, w = 0, 1.0
    while w >= threshold:
        w *= x
        k += 1
    return k


def _horizon_gamma_only(gamma, gae_lambda, threshold=0.1):
    return _horizon(gamma, 1.0, threshold)


def _horizon_floor(gamma, gae_lambda, threshold=0.1):
    x = gamma * gae_lambda
    if x >= 1.0:
        return math.inf
    if x == 0.0:
        return 0
    return math.floor(math.log(threshold) / math.log(x))


def _horizon_no_inf(gamma, gae_lambda, threshold=0.1):
    return math.ceil(math.log(threshold) / math.log(gamma * gae_lambda)) if gamma * gae_lambda > 0 else 1


@exercise(
    "04.credit_horizon",
    "write credit_horizon(gamma, gae_lambda, threshold=0.1) -> the smallest k with (γλ)^k < threshold (math.inf if none)",
    wrong=[_horizon_gamma_only, _horizon_floor, _horizon_no_inf],
)
def check_credit_horizon(fn) -> str | None:
    try:
        got = fn(1.0, 1.0, 0.1)
    except Exception as err:  # noqa: BLE001 - say which case broke it
        return f"with γ = λ = 1 nothing decays, so return math.inf; your function raised {type(err).__name__}: {err}"
    if got != math.inf:
        return f"with γ = λ = 1 nothing decays, so the answer is math.inf; you returned {got!r}"
    for gamma, lam, threshold in HORIZON_CASES:
        expected = _horizon(gamma, lam, threshold)
        got = fn(gamma, lam, threshold)
        if got == expected:
            continue
        if lam != 1.0 and got == _horizon(gamma, 1.0, threshold):
            return f"λ matters too: with γ = {gamma}, λ = {lam} the weight per turn is γλ = {gamma * lam:.4f}, not γ"
        if isinstance(got, (int, float)) and got == expected - 1:
            return (f"off by one for γ = {gamma}, λ = {lam}, threshold {threshold}: after {got} turns the weight "
                    f"(γλ)^{got} = {(gamma * lam) ** got:.4f} is not yet below {threshold}")
        return f"for γ = {gamma}, λ = {lam}, threshold {threshold} the answer is {expected}; you returned {got!r}"
    return None
