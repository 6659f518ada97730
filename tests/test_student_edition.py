"""The student edition (`make student`, `agentlab.course.student_edition`): solutions and instructor notes are
gone, the notebooks are valid nbformat, and the exercise checks they call still work from there. JSON only: no
notebook is run."""

import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import nbformat
import pytest

from agentlab.course import ANSWER_STUB, student_edition
from agentlab.exercises import load_all

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
CHECK_CALL = re.compile(r"""check\(\s*["']([0-9a-z]+\.[A-Za-z_0-9]+)["']""")


def cell(kind, source, **metadata):
    c = {"cell_type": kind, "metadata": metadata, "source": source}
    if kind == "code":
        c.update(execution_count=3, outputs=[{"output_type": "stream", "name": "stdout", "text": "secret output\n"}])
    return c


def write_notebook(path, cells):
    nb = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 4}
    path.write_text(json.dumps(nb))


@pytest.fixture(scope="module")
def course_edition(tmp_path_factory):
    """The student edition of the real notebooks/ folder."""
    out = tmp_path_factory.mktemp("student")
    return out, student_edition(NOTEBOOKS, out)


def test_solutions_instructor_cells_and_outputs_are_removed(tmp_path):
    src = tmp_path / "src"
    (src / "solutions").mkdir(parents=True)
    (src / "solutions" / "ex01.py").write_text("def answer(): return 42\n")
    write_notebook(src / "01_demo.ipynb", [
        cell("markdown", "## Exercises\n\nRun the cell; reference solutions are in `notebooks/solutions/ex01.py`."),
        cell("markdown", "Grade it leniently.", tags=["instructor"]),
        cell("code", "def answer():\n    ### BEGIN SOLUTION\n    return 42\n    ### END SOLUTION\n",
             nbgrader={"solution": True, "grade_id": "answer"}),
        cell("code", "assert answer() == 42\n### BEGIN HIDDEN TESTS\nassert answer() != 41\n### END HIDDEN TESTS\n"),
        cell("markdown", "Because the ratio is unbiased.", nbgrader={"solution": True}),
        cell("code", "print('kept')", tags=["nbval-ignore-output"]),
    ])
    written = student_edition(src, tmp_path / "out")

    assert [p.name for p in written] == ["01_demo.ipynb"] and not (tmp_path / "out" / "solutions").exists()
    nb = nbformat.read(written[0], as_version=4)
    nbformat.validate(nb)
    text = "\n".join(c.source for c in nb.cells)
    assert "leniently" not in text and "return 42" not in text and "41" not in text and "solutions/" not in text
    assert "def answer():\n    # YOUR CODE HERE\n    raise NotImplementedError()\n" in text
    assert "Run the cell." in text and ANSWER_STUB in text and "unbiased" not in text
    assert "print('kept')" in text and "assert answer() == 42" in text
    assert all(c.outputs == [] and c.execution_count is None for c in nb.cells if c.cell_type == "code")


def test_every_course_notebook_is_handed_out_valid_and_clean(course_edition):
    out, written = course_edition
    assert [p.name for p in written] == sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    assert not (out / "solutions").exists() and (out / "README.md").exists()
    assert "solutions/" not in (out / "README.md").read_text()
    for path in written:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a missing cell id only warns in nbformat 5
            nb = nbformat.read(path, as_version=4)
            nbformat.validate(nb)
        for c in nb.cells:
            assert "instructor" not in c.metadata.get("tags", []), path.name
            if c.cell_type == "markdown":
                assert "solutions/" not in c.source, f"{path.name} still points at the reference solutions"
            else:
                assert c.outputs == [], path.name


def test_the_diagrams_travel_with_the_notebooks(course_edition):
    out, written = course_edition
    shown = [(path.name, link) for path in written for c in nbformat.read(path, as_version=4).cells
             if c.cell_type == "markdown" for link in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", c.source)]
    assert shown, "no notebook shows a diagram"
    missing = [(name, link) for name, link in shown if not link.startswith("http") and not (out / link).is_file()]
    assert not missing, f"images the student edition shows but does not ship: {missing}"


def test_the_capstone_instructor_note_is_left_out(course_edition):
    out, _ = course_edition
    source = json.loads((NOTEBOOKS / "15_capstone.ipynb").read_text())
    handed = json.loads((out / "15_capstone.ipynb").read_text())
    assert any("Instructor note" in "".join(c["source"]) for c in source["cells"])
    assert not any("Instructor note" in "".join(c["source"]) for c in handed["cells"])
    assert len(handed["cells"]) == len(source["cells"]) - 1


def test_the_exercise_checks_still_work_there(course_edition):
    out, written = course_edition
    called = {name for path in written for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"
              for name in CHECK_CALL.findall(c.source)}
    assert called, "the notebooks call no check(...)"
    assert called <= set(load_all()), f"unknown exercises: {sorted(called - set(load_all()))}"
    # from the handed-out folder, with nothing of notebooks/solutions on the path: a wrong answer gets feedback
    script = ("from agentlab.exercises import check\n"
              "check('04.credit_horizon', lambda gamma, gae_lambda, threshold=0.1: 3)")
    run = subprocess.run([sys.executable, "-c", script], cwd=out, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    assert "[04.credit_horizon] not yet:" in run.stdout
