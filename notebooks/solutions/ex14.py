"""Reference solution of notebook 14's exercise (checked by tests/test_exercises.py)."""

from collections import Counter


def feedback(guess, secret):
    """Right-place letters first; the others take what is left of the secret's letters, left to right."""
    marks = ["+" if g == s else "-" for g, s in zip(guess, secret)]
    left = Counter(s for g, s in zip(guess, secret) if g != s)
    for i, g in enumerate(guess):
        if marks[i] == "-" and left[g] > 0:
            marks[i] = "?"
            left[g] -= 1
    return "".join(marks)
