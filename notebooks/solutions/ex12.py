"""Reference solutions of notebook 12's exercises (checked by tests/test_exercises.py)."""

import math


def wilson_interval(k, n, z=1.96):
    """The Wilson score interval of k successes in n trials (z = 1.96: 95%)."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def within_group_auc(rewards, successes, groups):
    """Share of (success, failure) pairs of the same group where the success earned more; ties half."""
    score = pairs = 0
    for i in range(len(rewards)):
        if not successes[i]:
            continue
        for j in range(len(rewards)):
            if successes[j] or groups[i] != groups[j]:
                continue
            pairs += 1
            score += 1.0 if rewards[i] > rewards[j] else 0.5 if rewards[i] == rewards[j] else 0.0
    return score / pairs if pairs else math.nan
