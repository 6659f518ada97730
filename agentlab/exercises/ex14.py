"""Exercise of notebook 14 (real tasks): Wordle's feedback, repeated letters included."""

from __future__ import annotations

from collections import Counter

from agentlab.envs.wordle import feedback
from agentlab.exercises import Feedback, exercise, first_mismatch

# (guess, secret): plain cases first, then repeated letters in the guess, in the secret, and in both
_CASES = [("crane", "crane"), ("crane", "slate"), ("lemon", "melon"), ("speed", "abide"), ("geese", "those"),
          ("allee", "eagle"), ("robot", "floor"), ("mamma", "maxim"), ("sassy", "essay"), ("array", "rarer")]


def _every_letter(guess, secret):
    """Marks ? for any letter in the secret, however often it is there."""
    return "".join("+" if g == s else "?" if g in secret else "-" for g, s in zip(guess, secret))


def _elsewhere_first(guess, secret):
    """Counts letters left to right before matching the right places."""
    left, marks = Counter(secret), []
    for g, s in zip(guess, secret):
        if left[g] > 0:
            marks.append("+" if g == s else "?")
            left[g] -= 1
        else:
            marks.append("-")
    return "".join(marks)


def _places_not_subtracted(guess, secret):
    """Matches the right places first but leaves their letters in the pool for the others."""
    marks = ["+" if g == s else "-" for g, s in zip(guess, secret)]
    left = Counter(secret)
    for i, g in enumerate(guess):
        if marks[i] == "-" and left[g] > 0:
            marks[i] = "?"
            left[g] -= 1
    return "".join(marks)


def _explain(case, got, want) -> str:
    guess, secret = case
    shown = f"guess {guess!r} against secret {secret!r}: expected {want!r}, got {got!r}"
    if got == _every_letter(guess, secret):
        return (f"{shown}; a letter is marked ? only as many times as the secret still has it after the right-place "
                "matches: count the secret's unmatched letters and spend one per ?")
    if got == _elsewhere_first(guess, secret):
        return (f"{shown}; match every right-place letter first, then hand out ? from what is left: going left to "
                "right in one pass lets an early ? use up a letter a later + needs")
    if got == _places_not_subtracted(guess, secret):
        return f"{shown}; a letter matched in place is used up: take it out of the pool before handing out ?"
    return shown


def _as_marks(got):
    if isinstance(got, str) and len(got) == 5 and set(got) <= set("+?-"):
        return got
    raise Feedback(f"return a string of five marks, each '+', '?' or '-'; you returned {got!r}")


@exercise("14.feedback", wrong=[_every_letter, _elsewhere_first, _places_not_subtracted])
def check_feedback(fn) -> str | None:
    """write feedback(guess, secret) -> five marks: '+' right place, '?' in the secret elsewhere, '-' not
    (or no more) in it, as Wordle-v0 marks a guess"""
    return first_mismatch(_CASES, lambda case: _as_marks(fn(*case)), lambda case: feedback(*case),
                          lambda a, b: a == b, _explain)
