"""Reference solutions of notebook 09's exercises (checked by tests/test_exercises.py)."""

import math


def step_level_rate(episodes, check):
    """Share of the steps carrying `check` that passed it, pooled over all episodes.

    A step counts only when its info["checks"] holds the check with a value other than None;
    with no such step nothing was measured, so the answer is NaN (not 0).
    """
    passed = applicable = 0
    for episode in episodes:
        for info in episode:
            value = info.get("checks", {}).get(check)
            if value is None:
                continue
            applicable += 1
            passed += bool(value)
    return passed / applicable if applicable else math.nan


def horizon_schedule(update, updates, first, last):
    """max_steps at `update` (from 0): linear from `first` at update 0 to `last` at update updates - 1."""
    frac = update / max(1, updates - 1)
    return int(round(first + frac * (last - first)))
