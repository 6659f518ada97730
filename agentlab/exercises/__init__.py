"""Classroom exercises: the registry of every notebook's checks, ``check`` for the notebooks,
and the helpers the checks share (comparing an answer with a reference case by case).

An exercise is a function ``check(answer) -> str | None`` registered under a name: it returns
None when the answer is right and otherwise a sentence that says specifically what is wrong.
Its docstring is the exercise's prompt (what to write), so the registration reads

    @exercise("04.discounted_return", wrong=[_forgets_gamma, ...])
    def check_discounted_return(fn) -> str | None:
        \"\"\"write discounted_return(rewards, gamma) -> ...\"\"\"

In a notebook:

    from agentlab.exercises import check
    def discounted_return(rewards, gamma): ...      # the learner's answer
    check("04.discounted_return", discounted_return)

Reference solutions live in ``notebooks/solutions/exNN.py`` as functions named like the
exercise (``discounted_return``); ``tests/test_exercises.py`` runs every check on its
reference solution (it must pass) and on the exercise's ``wrong`` answers (each must get
feedback).
"""

from __future__ import annotations

import functools
import importlib
import math
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

REGISTRY: dict[str, "Exercise"] = {}


@dataclass
class Exercise:
    name: str  # "<notebook>.<solution function name>", e.g. "04.discounted_return"
    prompt: str  # one line: what to write (the check's docstring)
    check: Callable[[Any], str | None]  # None = right, else specific feedback
    wrong: list[Callable] = field(default_factory=list)  # answers that must get feedback (tested)


class Feedback(Exception):
    """Raised inside a check to stop it: the message is the learner's feedback. For an output a
    check cannot even compare (not a number, a crash it can explain), deep inside a helper."""


def exercise(name: str, wrong: list[Callable] | None = None):
    """Decorator registering ``check`` as the checker of exercise ``name``; its docstring is the prompt."""

    def register(fn: Callable[[Any], str | None]) -> Callable:
        prompt = " ".join((fn.__doc__ or "").split())
        if not prompt:
            raise TypeError(f"the check of exercise {name!r} needs a docstring: the prompt 'write ...'")
        REGISTRY[name] = Exercise(name, prompt, _feedback_returned(fn), list(wrong or []))
        return fn

    return register


def _feedback_returned(check: Callable[[Any], str | None]) -> Callable[[Any], str | None]:
    @functools.wraps(check)
    def run(answer):
        try:
            return check(answer)
        except Feedback as stop:
            return str(stop)

    return run


def load_all() -> dict[str, Exercise]:
    """Import every ``agentlab.exercises.exNN`` module so that its exercises register."""
    for mod in pkgutil.iter_modules(__path__):
        if mod.name.startswith("ex"):
            importlib.import_module(f"{__name__}.{mod.name}")
    return REGISTRY


def check(name: str, answer: Any) -> None:
    """Check an answer and print specific feedback (prints only, so a notebook cell shows no
    stray True/False)."""
    load_all()
    if name not in REGISTRY:
        raise KeyError(f"no exercise {name!r}; known: {sorted(REGISTRY)}")
    if answer is None or answer is Ellipsis:
        print(f"[{name}] not answered yet: {REGISTRY[name].prompt}")
        return
    try:
        feedback = REGISTRY[name].check(answer)
    except Exception as err:  # noqa: BLE001 - the learner's code raised: say so, don't crash the notebook
        feedback = f"your answer raised {type(err).__name__}: {err}"
    print(f"[{name}] correct!" if feedback is None else f"[{name}] not yet: {feedback}")


# ---------------------------------------------------------------------------- shared by the checks


def first_mismatch(cases: Iterable, answer: Callable[[Any], Any], reference: Callable[[Any], Any],
                   same: Callable[[Any, Any], bool], explain: Callable[[Any, Any, Any], str]) -> str | None:
    """Run the learner's ``answer(case)`` and ``reference(case)`` on each case in turn; at the first
    case where ``same(got, want)`` fails, return ``explain(case, got, want)``: the sentence that
    names the mistake on that case. None when they agree on every case."""
    for case in cases:
        want = reference(case)
        got = answer(case)
        if not same(got, want):
            return explain(case, got, want)
    return None


def scalar(out: Any) -> Any:
    """A number the learner returned as a one-element tensor or array, as a Python number
    (anything else unchanged, for the check to say what it is)."""
    item = getattr(out, "item", None)
    if item is None:
        return out
    try:
        return item()
    except (ValueError, RuntimeError):  # more than one element: not a number
        return out


def whole(out: Any) -> Any:
    """A whole number the learner returned as a float (4.0), as an int; anything else unchanged."""
    return int(out) if isinstance(out, float) and out.is_integer() else out


def floats(out: Any) -> list[float]:
    """The learner's numbers (a list, a tuple, a tensor or an array of any shape) as one flat list."""
    out = out.tolist() if hasattr(out, "tolist") else out
    if not isinstance(out, (list, tuple)):
        return [float(out)]
    return [x for item in out for x in floats(item)]


def all_close(a: list[float], b: list[float], rel_tol: float = 1e-9, abs_tol: float = 0.0) -> bool:
    """Two lists of numbers of the same length, equal up to ``math.isclose``'s tolerances."""
    return len(a) == len(b) and all(math.isclose(x, y, rel_tol=rel_tol, abs_tol=abs_tol) for x, y in zip(a, b))
