"""Exercises of notebook 08 (verifiable rewards): comparing SQL result sets, and an exact-result
reward that a reward hacker cannot farm."""

from __future__ import annotations

from collections import Counter

from agentlab.envs.sql import same_result as _same_result
from agentlab.exercises import Feedback, exercise, first_mismatch

# ---------------------------------------------------------------------------- same_result

# (what the case is about, got, gold, ordered)
RESULT_CASES = [
    ("identical rows", [("Lyon", 7), ("Oslo", 2)], [("Lyon", 7), ("Oslo", 2)], False),
    ("the same rows in another order", [("Oslo", 2), ("Lyon", 7)], [("Lyon", 7), ("Oslo", 2)], False),
    ("another order when the question asks for one", [("Oslo", 2), ("Lyon", 7)], [("Lyon", 7), ("Oslo", 2)], True),
    ("the same order when the question asks for one", [("Lyon", 7), ("Oslo", 2)], [("Lyon", 7), ("Oslo", 2)], True),
    ("duplicates in other numbers", [("Ana",), ("Ana",), ("Ben",)], [("Ana",), ("Ben",), ("Ben",)], False),
    ("a duplicate row too many", [("Ana",), ("Ana",), ("Ben",)], [("Ana",), ("Ben",)], False),
    ("3 against 3.0", [("toys", 3)], [("toys", 3.0)], False),
    ("0.1 + 0.2 against 0.3", [(0.1 + 0.2,)], [(0.3,)], False),
    ("a rounding difference in the 5th decimal", [(12.345671,)], [(12.345674,)], True),
    ("a real difference in the 3rd decimal", [(12.341,)], [(12.349,)], False),
    ("NULL values", [(None, 1)], [(None, 1)], False),
    ("a missing row", [("Lyon", 7)], [("Lyon", 7), ("Oslo", 2)], False),
    ("no rows at all", [], [("Lyon", 7)], False),
]


def _same_as_sets(got, gold, ordered):
    return set(got) == set(gold) if not ordered else list(got) == list(gold)


def _same_always_ordered(got, gold, ordered):
    def norm(rows):
        return [tuple(round(v, 4) if isinstance(v, float) else v for v in row) for row in rows]
    return norm(got) == norm(gold)


def _same_no_rounding(got, gold, ordered):
    return list(got) == list(gold) if ordered else Counter(got) == Counter(gold)


def _same_sorted(got, gold, ordered):
    def norm(rows):
        return sorted((tuple(round(v, 4) if isinstance(v, float) else v for v in row) for row in rows), key=repr)
    return norm(got) == norm(gold)


@exercise("08.same_result", wrong=[_same_as_sets, _same_always_ordered, _same_no_rounding, _same_sorted])
def check_same_result(fn) -> str | None:
    """write same_result(got, gold, ordered) -> bool: same rows (a multiset, or a list when ordered), numbers
    rounded to 4 decimals"""
    return first_mismatch(RESULT_CASES, lambda case: fn(list(case[1]), list(case[2]), case[3]),
                          lambda case: _same_result(*case[1:]),
                          lambda answer, expected: bool(answer) == expected and isinstance(answer, (bool, int)),
                          _explain_same)


def _explain_same(case, answer, expected) -> str:
    about, got, gold, ordered = case
    if not isinstance(answer, (bool, int)):
        return f"return True or False; for {about} you returned {answer!r}"
    if "duplicate" in about:
        return (f"{about}: got={got}, gold={gold} should be {expected}. Duplicates count: compare the rows as a "
                "multiset (collections.Counter), not as a set")
    if "order" in about and not ordered:
        return f"{about}: when ordered is False the order of the rows does not matter (got={got}, gold={gold})"
    if "order" in about and ordered:
        return f"{about}: when ordered is True the rows must come in the same order (got={got}, gold={gold})"
    if "3.0" in about or "0.3" in about or "decimal" in about:
        return (f"{about}: got={got}, gold={gold} should be {expected}. Round numbers to 4 decimals before "
                "comparing (floats carry binary noise such as 0.30000000000000004)")
    return f"{about}: got={got}, gold={gold}, ordered={ordered} should be {expected}, you said {bool(answer)}"


# ---------------------------------------------------------------------------- exact_reward

# (what the output is, stdout, expected number, the reward it earns). The rewards are written out by
# hand from the prompt's rule rather than recomputed: the rule's one implementation is the solution's.
OUTPUT_CASES = [
    ("the right number", "1234.5\n", 1234.5, 1.0),
    ("the right number with a rounding difference", "1234.504\n", 1234.5, 1.0),
    ("the right number printed as an integer", "7\n", 7.0, 1.0),
    ("the column names (the hack)", "['id', 'region', 'product', 'units', 'price', 'status']\n", 7.0, 0.0),
    ("nothing at all", "", 7.0, 0.0),
    ("a wrong number", "1234.56\n", 1234.5, 0.0),
    ("a label line, then the number", "The answer is:\n7\n", 7.0, 1.0),
    ("the number, then a trailing blank line", "7\n\n", 7.0, 1.0),
    ("many candidate numbers, the right one among them", "5\n6\n7\n8\n9\n", 7.0, 0.0),
    ("the right number followed by more text", "7\ndone\n", 7.0, 0.0),
    ("nan", "nan\n", 7.0, 0.0),
]


def _exact_ran(stdout, expected):
    return 1.0 if stdout.strip() else 0.0


def _exact_anywhere(stdout, expected):
    for line in stdout.splitlines():
        try:
            if abs(float(line) - expected) <= 0.005:
                return 1.0
        except ValueError:
            pass
    return 0.0


def _exact_equal(stdout, expected):
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    try:
        return 1.0 if lines and float(lines[-1]) == expected else 0.0
    except ValueError:
        return 0.0


def _exact_last_line_raw(stdout, expected):
    try:
        return 1.0 if abs(float(stdout.split("\n")[-2 if stdout.endswith("\n") else -1]) - expected) <= 0.005 else 0.0
    except (ValueError, IndexError):
        return 0.0


@exercise("08.exact_reward", wrong=[_exact_ran, _exact_anywhere, _exact_equal, _exact_last_line_raw])
def check_exact_reward(fn) -> str | None:
    """write exact_reward(stdout, expected) -> 1.0 if the last non-empty line is a number within 0.005 of
    expected, else 0.0"""
    def answer(case):
        about, stdout, expected, _ = case
        try:
            return fn(stdout, expected)
        except Exception as err:  # noqa: BLE001 - a reward function must not crash on odd output
            raise Feedback(f"for {about} ({stdout!r}) your reward raised {type(err).__name__}: {err}; a reward must "
                           "return 0.0 instead") from err

    return first_mismatch(OUTPUT_CASES, answer, lambda case: case[3], _same_reward, _explain_reward)


def _same_reward(got, want) -> bool:
    return isinstance(got, (int, float)) and not isinstance(got, bool) and float(got) == want


def _explain_reward(case, got, want) -> str:
    about, stdout, expected, _ = case
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        return f"return a number, 1.0 or 0.0; for {about} you returned {got!r}"
    if "hack" in about or about == "nothing at all":
        return (f"your reward pays {got} for {about} ({stdout!r}): that is the 'it ran' reward a policy farms "
                "by printing the column names. Pay only when the last line is the right number")
    if "many candidate" in about:
        return ("your reward pays a program that prints many numbers when one of them is right: a policy would "
                "print every plausible answer. Only the last non-empty line counts")
    if "rounding" in about:
        return f"{stdout.strip()} is within 0.005 of {expected}: allow that much difference (rounding), not exact equality"
    if "blank" in about:
        return "skip empty lines at the end: the last *non-empty* line is the answer"
    if about == "a wrong number":
        return f"{stdout.strip()} is not within 0.005 of {expected}: a wrong number must earn 0.0"
    return f"for {about} ({stdout!r}, expected {expected}) the reward is {want}; you returned {got!r}"
