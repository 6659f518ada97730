"""Classroom exercises: each notebook's exercises, their checks, and how the tests run them.

An exercise is a function ``check(answer) -> str | None`` registered under a name: it returns
None when the answer is right and otherwise a sentence that says specifically what is wrong.
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

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable

REGISTRY: dict[str, "Exercise"] = {}


@dataclass
class Exercise:
    name: str  # "<notebook>.<solution function name>", e.g. "04.discounted_return"
    prompt: str  # one line: what to write
    check: Callable[[Any], str | None]  # None = right, else specific feedback
    wrong: list[Callable] = field(default_factory=list)  # answers that must get feedback (tested)


def exercise(name: str, prompt: str, wrong: list[Callable] | None = None):
    """Decorator registering ``check`` as the checker of exercise ``name``."""

    def register(fn: Callable[[Any], str | None]) -> Callable:
        REGISTRY[name] = Exercise(name, prompt, fn, list(wrong or []))
        return fn

    return register


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
