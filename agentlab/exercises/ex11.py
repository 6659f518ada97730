"""Exercises of notebook 11 (reflection, best-of-N and the thinking budget): the unbiased pass@k
estimator, and best-of-N selection with a verifier."""

from __future__ import annotations

import math

from agentlab.evaluate import best_of_n_pick
from agentlab.exercises import Feedback, all_close, exercise, first_mismatch
from agentlab.metrics import pass_at_k as _reference_pass_at_k
from agentlab.rollout import Trajectory

# ---------------------------------------------------------------------------- 11.pass_at_k

# (n samples, c correct, k): ordinary cases, the edges, and one where every k-subset must hit
PASS_CASES = [(8, 2, 4), (8, 1, 1), (10, 3, 5), (8, 0, 3), (8, 8, 1), (8, 6, 3), (20, 5, 10), (100, 7, 50), (1, 1, 1),
              (16, 4, 2)]


def _with_replacement(n, c, k):
    return 1 - (1 - c / n) ** k


def _missing_complement(n, c, k):
    return math.comb(n - c, k) / math.comb(n, k)


def _linear(n, c, k):
    return min(1.0, k * c / n)


def _ignores_k(n, c, k):
    return c / n


@exercise("11.pass_at_k", wrong=[_with_replacement, _missing_complement, _linear, _ignores_k])
def check_pass_at_k(fn) -> str | None:
    """write pass_at_k(n, c, k) -> float: the chance that k of the n samples, drawn without replacement,
    include at least one of the c correct ones"""
    def answer(case):
        n, c, k = case
        return _number(fn(n, c, k), "return a number", f"for n={n}, c={c}, k={k}")

    return first_mismatch(PASS_CASES, answer, lambda case: _reference_pass_at_k(*case),
                          lambda got, want: math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12), _explain_pass)


def _number(value, ask: str, where: str) -> float:
    """``value`` as a float, or stop the check: "<ask>; <where> you returned <value>"."""
    try:
        return float(value)
    except (TypeError, ValueError):
        raise Feedback(f"{ask}; {where} you returned {value!r}") from None


def _explain_pass(case, got, want) -> str:
    n, c, k = case
    case = f"n={n}, c={c}, k={k}"
    if math.isclose(got, _missing_complement(n, c, k), abs_tol=1e-12):
        return (f"for {case} you returned C(n−c, k) / C(n, k) = {got:.4f}: that is the chance that all k draws "
                "are wrong; pass@k is one minus it")
    if math.isclose(got, _with_replacement(n, c, k), abs_tol=1e-12):
        return (f"for {case} you returned 1 − (1 − c/n)^k = {got:.4f}, which draws with replacement: the k "
                f"attempts are k different samples of the n, so use 1 − C(n−c, k) / C(n, k) = {want:.4f}")
    if math.isclose(got, _linear(n, c, k), abs_tol=1e-12) and k > 1:
        return (f"for {case} you returned min(1, k·c/n) = {got:.4f}: chances of overlapping events do not add; "
                f"the answer is {want:.4f}")
    if math.isclose(got, c / n, abs_tol=1e-12) and k > 1:
        return f"for {case} you returned c/n = {got:.4f}, which is pass@1; with k tries the answer is {want:.4f}"
    if n - c < k and got != 1.0:
        return (f"for {case} only {n - c} samples are wrong, fewer than k = {k}: every draw of k includes a "
                f"correct one, so pass@k = 1; you returned {got!r}")
    return f"for {case} pass@k is {want:.6f}; you returned {got:.6f}"


# ---------------------------------------------------------------------------- 11.best_of_n_success

def _t(rewards: list[float], success: bool) -> Trajectory:
    return Trajectory(env_id="agentlab/GuessNumber-v0", task_id="t", rewards=list(rewards),
                      components=[{} for _ in rewards], success=success, terminated=True)


def _groups() -> list[list[Trajectory]]:
    """Groups of 5 samples, each built so that one mistake picks differently (see the comments)."""
    return [
        # the best of the first 4 is the 4th sample
        [_t([0.1, -0.2], False), _t([0.0], False), _t([0.1, 0.1], False), _t([0.1, 1.1], True), _t([0.0], False)],
        # a tie on total reward between a failure (first) and a success (second): the earliest wins
        [_t([0.5, 0.5], False), _t([0.0, 1.0], True), _t([-0.2], False), _t([0.0], False), _t([0.1], False)],
        # the highest total is a failure; a success scores less
        [_t([0.1, 0.1, 1.0], False), _t([0.5, 0.5], True), _t([0.0], False), _t([0.1], False), _t([0.0], False)],
        # the first sample succeeds and is the best
        [_t([1.1], True), _t([0.1, 0.1], False), _t([0.2, 0.1], False), _t([-0.1], False), _t([0.0], False)],
        # the last turn's reward misleads: the success totals 0.6 (last turn 1.0), the failure 0.9 (last 0.1)
        [_t([0.3, -0.7, 1.0], True), _t([0.8, 0.1], False), _t([0.0], False), _t([0.2], False), _t([0.1], False)],
        # the first sample fails, the second is the best and succeeds
        [_t([0.0], False), _t([1.0], True), _t([0.1], False), _t([0.0], False), _t([0.0], False)],
        # only the 5th sample succeeds: best-of-4 cannot see it
        [_t([0.0], False), _t([0.1], False), _t([0.0], False), _t([0.2], False), _t([0.1, 1.0], True)],
        # nothing succeeds
        [_t([0.1], False), _t([0.2], False), _t([0.0], False), _t([-0.3], False), _t([0.0], False)],
    ]


def _reference_best_of_n(groups, n):
    return sum(best_of_n_pick(g[:n]).success for g in groups) / len(groups)


def _bon_any_success(groups, n):
    return sum(any(t.success for t in g[:n]) for g in groups) / len(groups)


def _bon_all_samples(groups, n):
    return sum(max(g, key=lambda t: t.total_reward).success for g in groups) / len(groups)


def _bon_last_on_ties(groups, n):
    picks = [max(reversed(g[:n]), key=lambda t: t.total_reward) for g in groups]
    return sum(t.success for t in picks) / len(groups)


def _bon_last_turn(groups, n):
    return sum(max(g[:n], key=lambda t: t.rewards[-1]).success for g in groups) / len(groups)


def _bon_first_try(groups, n):
    return sum(g[0].success for g in groups) / len(groups)


@exercise("11.best_of_n_success",
          wrong=[_bon_any_success, _bon_all_samples, _bon_last_on_ties, _bon_last_turn, _bon_first_try])
def check_best_of_n_success(fn) -> str | None:
    """write best_of_n_success(groups, n) -> float: for each group keep the sample with the highest total reward
    among its first n (the earliest on a tie) and return the share of groups whose pick succeeded"""
    groups = _groups()

    def answer(n):  # one group at a time (0 or 1 each), so the feedback can point at the group that differs
        return [_number(fn([g], n), "return the share of groups as a float", f"with n={n}") for g in _groups()]

    return (first_mismatch((4, 2, 1, 3, 5), answer, lambda n: [_reference_best_of_n([g], n) for g in groups],
                           lambda got, want: all_close(got, want, abs_tol=1e-9), _explain_best_of_n)
            or _check_all_groups_at_once(fn))


def _check_all_groups_at_once(fn) -> str | None:
    groups = _groups()
    want = _reference_best_of_n(groups, 4)
    got = fn(_groups(), 4)
    if not math.isclose(float(got), want, abs_tol=1e-9):
        return (f"each group alone is right, but on all {len(groups)} groups together best-of-4 success is "
                f"{want:.4f} (the share of groups whose pick succeeded); you returned {got}")
    return None


def _explain_best_of_n(n, got, want) -> str:
    groups = _groups()
    same = lambda wrong: all(math.isclose(x, wrong([g], n), abs_tol=1e-9) for x, g in zip(got, groups))  # noqa: E731
    if same(_bon_any_success):
        return (f"with n={n} you counted a group as solved when any of its first n samples succeeded: that is "
                "pass@n, a perfect verifier. Best-of-N must pick one sample by the verifier's score (the total "
                "reward), and the highest-scoring sample can still be a failure")
    if same(_bon_first_try) and n > 1:
        return f"with n={n} you kept each group's first sample: that is first-try success, not best-of-{n}"
    if same(_bon_all_samples):
        return f"with n={n} you picked among all {len(groups[0])} samples of each group; use only the first n"
    if same(_bon_last_on_ties):
        return f"with n={n} a tie on total reward went to the later sample; keep the earliest one"
    if same(_bon_last_turn):
        return (f"with n={n} you scored samples by their last turn's reward; the verifier's score is the whole "
                "episode's total reward (t.total_reward)")
    bad = next(i for i, (x, y) in enumerate(zip(got, want)) if not math.isclose(x, y, abs_tol=1e-9))
    totals = [round(t.total_reward, 2) for t in groups[bad][:n]]
    return (f"with n={n}, on a group whose first n samples have total rewards {totals} and successes "
            f"{[t.success for t in groups[bad][:n]]}, the answer is {want[bad]:.0f}; you returned {got[bad]}")
