"""Reference solutions of notebook 08's exercises (checked by tests/test_exercises.py)."""

import math
from collections import Counter


def same_result(got, gold, ordered):
    """Same rows: as a multiset (duplicates count) or, when ``ordered``, as a list; numbers rounded to 4 decimals."""
    def normal(value):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = round(float(value), 4)
            return int(value) if value.is_integer() else value
        return value

    got = [tuple(normal(v) for v in row) for row in got]
    gold = [tuple(normal(v) for v in row) for row in gold]
    return got == gold if ordered else Counter(got) == Counter(gold)


def exact_reward(stdout, expected):
    """1.0 when the last non-empty line of ``stdout`` is a number within 0.005 of ``expected``, else 0.0."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    if not lines:
        return 0.0
    try:
        value = float(lines[-1])
    except ValueError:
        return 0.0
    return 1.0 if math.isfinite(value) and abs(value - expected) <= 0.005 else 0.0
