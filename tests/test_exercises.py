"""Every exercise: its check accepts its reference solution, gives feedback on wrong answers and shows its prompt."""

import importlib.util
from pathlib import Path

import pytest

from agentlab.exercises import check, load_all

SOLUTIONS = Path(__file__).resolve().parent.parent / "notebooks" / "solutions"
EXERCISES = load_all()


def solution(name: str):
    notebook, func = name.split(".", 1)
    path = SOLUTIONS / f"ex{notebook}.py"
    spec = importlib.util.spec_from_file_location(f"solution_{notebook}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, func)


def test_there_are_exercises():
    assert len(EXERCISES) >= 1


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_reference_solution_passes(name):
    assert EXERCISES[name].check(solution(name)) is None


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_wrong_answers_get_specific_feedback(name, capsys):
    assert EXERCISES[name].wrong, f"{name} has no wrong answers to test its feedback on"
    for wrong in EXERCISES[name].wrong:
        assert EXERCISES[name].check(wrong) is not None
        check(name, wrong)
        out = capsys.readouterr().out
        assert "not yet:" in out and len(out) > 30


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_an_unanswered_exercise_shows_its_prompt(name, capsys):
    """The prompt is the check's docstring on one line, and it names the function to write."""
    check(name, None)
    assert capsys.readouterr().out == f"[{name}] not answered yet: {EXERCISES[name].prompt}\n"
    assert EXERCISES[name].prompt.startswith(f"write {name.split('.', 1)[1]}(")
