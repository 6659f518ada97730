"""Exercises of notebook 12 (evaluation and a recipe): the Wilson interval, and reward/success
agreement within groups."""

from __future__ import annotations

import math

from agentlab.exercises import Feedback, exercise, first_mismatch
from agentlab.metrics import wilson_interval

# ---------------------------------------------------------------------------- 12.wilson_interval

# (k, n, z): small samples, rates at 0 and 1, and another confidence level
_WILSON_CASES = [(8, 10, 1.96), (80, 100, 1.96), (1, 20, 1.96), (0, 20, 1.96), (20, 20, 1.96), (13, 40, 1.96),
                 (3, 7, 2.576), (0, 1, 1.96)]


def _wald(k, n, z=1.96):
    p = k / n
    half = z * math.sqrt(p * (1 - p) / n)
    return max(0.0, p - half), min(1.0, p + half)


def _wilson_uncentred(k, n, z=1.96):
    """The Wilson half-width around p itself, without moving the centre."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    denom = 1 + z * z / n
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, p - half), min(1.0, p + half)


def _wilson_no_n_zero(k, n, z=1.96):
    """The right interval, but p = k / n comes first, with no case for n = 0."""
    k / n  # ZeroDivisionError at n = 0
    return wilson_interval(k, n, z)


def _wilson_fixed_z(k, n, z=1.96):
    return wilson_interval(k, n, 1.96)


def _as_pair(got):
    if isinstance(got, (tuple, list)) and len(got) == 2:
        return float(got[0]), float(got[1])
    raise Feedback(f"return a pair (low, high); you returned {got!r}")


def _near(a, b, tol=1e-6) -> bool:
    return all(math.isclose(x, y, abs_tol=tol) for x, y in zip(a, b))


@exercise("12.wilson_interval", wrong=[_wald, _wilson_uncentred, _wilson_no_n_zero, _wilson_fixed_z])
def check_wilson_interval(fn) -> str | None:
    """write wilson_interval(k, n, z=1.96) -> (low, high): the Wilson score interval of k successes in n,
    (0.0, 1.0) for n = 0"""
    return (first_mismatch(_WILSON_CASES, lambda case: _as_pair(fn(*case)), lambda case: wilson_interval(*case),
                           _near, _explain_wilson)
            or _check_n_zero(fn))


def _check_n_zero(fn) -> str | None:
    try:
        got = _as_pair(fn(0, 0, 1.96))
    except ZeroDivisionError:
        return "with n = 0 your function divided by zero: nothing was measured, so return (0.0, 1.0)"
    if not _near(got, (0.0, 1.0)):
        return f"with n = 0 nothing was measured, so the interval is (0.0, 1.0); you returned {got}"
    return None


def _explain_wilson(case, got, want) -> str:
    k, n, z = case
    shown = f"k={k}, n={n}, z={z}: expected [{want[0]:.4f}, {want[1]:.4f}], got [{got[0]:.4f}, {got[1]:.4f}]"
    if z != 1.96 and _near(got, wilson_interval(k, n, 1.96)):
        return f"{shown}; use the z you are given (1.96 is only the default, for 95%)"
    if _near(got, _wald(k, n, z)):
        return (f"{shown}: that is the Wald interval p ± z·√(p(1−p)/n), which shrinks to nothing at 0/n "
                "and n/n; Wilson's interval adds z²/4n² under the root and moves the centre towards 1/2")
    if _near(got, _wilson_uncentred(k, n, z)):
        return (f"{shown}: the width is right but the centre is not p; it is (p + z²/2n) / (1 + z²/n), pulled "
                "towards 1/2")
    if got[0] < -1e-9 or got[1] > 1 + 1e-9:
        return f"{shown}: a rate's interval must stay inside [0, 1]"
    return shown


# ---------------------------------------------------------------------------- 12.within_group_auc

# (rewards, successes, groups): group "b" has a failure out-earning a success of group "a";
# group "c" has a tie; group "d" has only successes (no pair).
_AUC_CASES = [
    ([1.2, 0.1, 1.3, 2.5, 1.4, 1.1, 1.1, 0.6, 1.0, 1.5],
     [True, False, False, True, False, True, False, False, True, True],
     ["a", "a", "b", "b", "b", "c", "c", "c", "d", "d"]),
    ([1.0, 0.2, 0.9, 1.1, 0.95, 0.3], [True, False, True, False, False, True], [0, 0, 1, 1, 1, 2]),
    ([0.5, 0.5, 0.5, 0.5], [True, False, True, False], ["x", "x", "y", "y"]),
]
_NO_PAIR = ([1.0, 0.0, 0.5], [True, False, True], ["a", "b", "c"])


def _pairs(rewards, successes, groups, same_group=True):
    idx = range(len(rewards))
    return [(rewards[i], rewards[j]) for i in idx for j in idx
            if successes[i] and not successes[j] and (not same_group or groups[i] == groups[j])]


def _score(pairs, tie=0.5):
    return sum(1.0 if a > b else tie if a == b else 0.0 for a, b in pairs) / len(pairs) if pairs else math.nan


def _reference_auc(rewards, successes, groups):
    return _score(_pairs(rewards, successes, groups))


def _auc_all_pairs(rewards, successes, groups):
    return _score(_pairs(rewards, successes, groups, same_group=False))


def _auc_ties_lose(rewards, successes, groups):
    return _score(_pairs(rewards, successes, groups), tie=0.0)


def _auc_mean_of_groups(rewards, successes, groups):
    per_group = []
    for g in dict.fromkeys(groups):
        members = [i for i in range(len(rewards)) if groups[i] == g]
        pairs = _pairs([rewards[i] for i in members], [successes[i] for i in members], [g] * len(members))
        if pairs:
            per_group.append(_score(pairs))
    return sum(per_group) / len(per_group) if per_group else math.nan


def _auc_zero_without_pairs(rewards, successes, groups):
    value = _reference_auc(rewards, successes, groups)
    return 0.0 if math.isnan(value) else value


def _same(x, y) -> bool:
    try:
        x, y = float(x), float(y)
    except (TypeError, ValueError):
        return False
    return (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, abs_tol=1e-9)


@exercise("12.within_group_auc", wrong=[_auc_all_pairs, _auc_ties_lose, _auc_mean_of_groups, _auc_zero_without_pairs])
def check_within_group_auc(fn) -> str | None:
    """write within_group_auc(rewards, successes, groups) -> share of (success, failure) pairs of the same group
    where the success earned more, ties half; math.nan without such pairs"""
    return (first_mismatch(_AUC_CASES, lambda case: fn(*map(list, case)), lambda case: _reference_auc(*case), _same,
                           _explain_auc)
            or _check_no_pair(fn))


def _check_no_pair(fn) -> str | None:
    rewards, successes, groups = _NO_PAIR
    got = fn(list(rewards), list(successes), list(groups))
    if not _same(got, math.nan):
        return (f"no group holds both a success and a failure in rewards={rewards}, successes={successes}, "
                f"groups={groups}: nothing was measured, so return math.nan; you returned {got!r}")
    return None


def _explain_auc(case, got, want) -> str:
    shown = f"for rewards={case[0]}, successes={case[1]}, groups={case[2]} expected {want:.4f}, got {got!r}"
    if _same(got, _auc_all_pairs(*case)):
        return f"{shown}: you compared episodes of different groups too; pair a success only with failures of its own group"
    if _same(got, _auc_ties_lose(*case)):
        return f"{shown}: a tie (equal rewards) counts half, not as a loss: the reward cannot tell that pair apart"
    if _same(got, _auc_mean_of_groups(*case)):
        return (f"{shown}: you averaged one AUC per group; pool the pairs of all groups instead, so a group with "
                "more pairs weighs more")
    return shown
