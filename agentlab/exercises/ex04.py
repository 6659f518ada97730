"""Exercises of notebook 04 (returns and GAE): GAE for one episode, and how far credit reaches."""

from __future__ import annotations

import math
import operator

import torch

from agentlab.advantages import gae
from agentlab.exercises import all_close, exercise, first_mismatch, floats

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


# -- wrong answers (each is a mistake learners make; the check must name it)
def _backwards(rewards, values, last_value, step) -> list[float]:
    """The recursion from the last turn back, a_t = step(r_t, V(s_t), V(s_t+1), a_t+1), in turn order."""
    out, a = [], 0.0
    nxt = [*values[1:], 0.0 if last_value is None else last_value]
    for r, v, vn in zip(reversed(rewards), reversed(values), reversed(nxt)):
        a = step(r, v, vn, a)
        out.append(a)
    return out[::-1]


def _gae_no_bootstrap(rewards, values, gamma, gae_lambda, last_value=None):
    return _reference(rewards, values, gamma, gae_lambda, None)  # treats a truncated episode as terminated


def _gae_lambda_only(rewards, values, gamma, gae_lambda, last_value=None):
    # discounts by λ instead of γλ
    return _backwards(rewards, values, last_value, lambda r, v, vn, a: r + gamma * vn - v + gae_lambda * a)


def _gae_undiscounted_delta(rewards, values, gamma, gae_lambda, last_value=None):
    # forgot γ on V(s_t+1)
    return _backwards(rewards, values, last_value, lambda r, v, vn, a: r + vn - v + gamma * gae_lambda * a)


def _gae_forward(rewards, values, gamma, gae_lambda, last_value=None):
    return _reference(rewards, values, gamma, gae_lambda, last_value)[::-1]


def _show(case) -> str:
    rewards, values, gamma, lam, last = case
    return f"rewards={rewards}, values={values}, gamma={gamma}, gae_lambda={lam}, last_value={last}"


@exercise("04.gae_advantages", wrong=[_gae_no_bootstrap, _gae_lambda_only, _gae_undiscounted_delta, _gae_forward])
def check_gae_advantages(fn) -> str | None:
    """write gae_advantages(rewards, values, gamma, gae_lambda, last_value=None) -> list of advantages, one per turn"""
    return first_mismatch(GAE_CASES, lambda case: floats(fn(*case)), lambda case: _reference(*case), _close,
                          _explain_gae)


def _close(a, b) -> bool:
    return all_close(a, b, rel_tol=1e-6, abs_tol=1e-8)


def _explain_gae(case, got, expected) -> str:
    rewards, values, gamma, lam, last = case
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


# ---------------------------------------------------------------------------- credit horizon

# (gamma, gae_lambda, threshold); γ = λ = 1, where nothing decays, is checked first, on its own.
HORIZON_CASES = [(0.99, 0.9, 0.1), (0.99, 0.99, 0.1), (0.99, 0.95, 0.1), (0.5, 1.0, 0.1), (0.9, 1.0, 0.5),
                 (0.99, 0.0, 0.1), (0.97, 0.97, 0.01)]


def _horizon(gamma, lam, threshold):
    """How many turns back a reward keeps >= threshold of its weight, read off the kit's own GAE:
    on an episode paid only at its last turn (values 0), A_t is that reward's weight at t."""
    if gamma * lam >= 1.0:
        return math.inf
    turns = 1000  # longer than any horizon asked here (γλ = 0.99 falls below 0.1 after 230 turns)
    rewards = torch.zeros(1, turns, dtype=torch.float64)
    rewards[0, -1] = 1.0
    weights, _ = gae(rewards, torch.zeros_like(rewards), torch.ones_like(rewards), gamma, lam)
    return int((weights >= threshold).sum())


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


@exercise("04.credit_horizon", wrong=[_horizon_gamma_only, _horizon_floor, _horizon_no_inf])
def check_credit_horizon(fn) -> str | None:
    """write credit_horizon(gamma, gae_lambda, threshold=0.1) -> the smallest k with (γλ)^k < threshold
    (math.inf if none)"""
    try:
        got = fn(1.0, 1.0, 0.1)
    except Exception as err:  # noqa: BLE001 - say which case broke it
        return f"with γ = λ = 1 nothing decays, so return math.inf; your function raised {type(err).__name__}: {err}"
    if got != math.inf:
        return f"with γ = λ = 1 nothing decays, so the answer is math.inf; you returned {got!r}"
    return first_mismatch(HORIZON_CASES, lambda case: fn(*case), lambda case: _horizon(*case), operator.eq,
                          _explain_horizon)


def _explain_horizon(case, got, expected) -> str:
    gamma, lam, threshold = case
    if lam != 1.0 and got == _horizon(gamma, 1.0, threshold):
        return f"λ matters too: with γ = {gamma}, λ = {lam} the weight per turn is γλ = {gamma * lam:.4f}, not γ"
    if isinstance(got, (int, float)) and got == expected - 1:
        return (f"off by one for γ = {gamma}, λ = {lam}, threshold {threshold}: after {got} turns the weight "
                f"(γλ)^{got} = {(gamma * lam) ** got:.4f} is not yet below {threshold}")
    return f"for γ = {gamma}, λ = {lam}, threshold {threshold} the answer is {expected}; you returned {got!r}"
