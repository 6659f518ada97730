"""Reference solutions of notebook 11's exercises (checked by tests/test_exercises.py)."""

import math


def pass_at_k(n, c, k):
    """1 − C(n−c, k) / C(n, k): one minus the chance that k draws without replacement are all wrong."""
    if n - c < k:  # fewer wrong samples than draws: some draw must be right
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def best_of_n_success(groups, n):
    """Share of groups whose highest-total-reward sample among the first n (earliest on ties) succeeded."""
    wins = 0
    for group in groups:
        best = group[0]
        for t in group[1:n]:
            if t.total_reward > best.total_reward:  # strictly greater: the earliest of equal scores stays
                best = t
        wins += best.success
    return wins / len(groups)
