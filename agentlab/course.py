"""The student edition: the course's notebooks as a class is handed them, without what only the
instructor should see.

    python -m agentlab.course build/student        # what `make student` runs

`student_edition(src, out)` copies every notebook of ``src`` (``notebooks/``) into ``out`` and, in each:

- drops the cells tagged ``instructor`` (or ``remove-cell``, Jupyter Book's tag for the same thing);
- follows nbgrader's cell conventions where a notebook uses them: in a cell whose metadata says
  ``"nbgrader": {"solution": true}``, the code between ``### BEGIN SOLUTION`` and ``### END SOLUTION``
  becomes ``# YOUR CODE HERE`` / ``raise NotImplementedError()`` (the whole cell, when it has no markers;
  a markdown answer becomes ``YOUR ANSWER HERE``), and ``### BEGIN HIDDEN TESTS`` ... ``### END HIDDEN
  TESTS`` blocks are removed;
- removes the sentences that point at the reference solutions (``notebooks/solutions/``), which the
  student edition does not ship;
- clears outputs and execution counts, and gives a cell id to a cell that lacks one (nbformat 4.5).

The exercises themselves need nothing from ``src``: each notebook calls ``agentlab.exercises.check``,
which lives in the installed package and compares an answer with the library's own reference code,
not with ``notebooks/solutions/``. So the checks work in ``out`` as they do in the course.

Only nbgrader's cell conventions are followed, not nbgrader itself: its release step needs a gradebook
database and a course directory layout, and its autograder grades hidden tests, where this course
gives feedback through ``check`` instead. A notebook written with nbgrader's markers is handled
the same way nbgrader's release step would handle it.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

INSTRUCTOR_TAGS = {"instructor", "remove-cell"}
SOLUTION_STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
ANSWER_STUB = "YOUR ANSWER HERE"
_SOLUTION = re.compile(r"^([ \t]*)### BEGIN SOLUTION[^\n]*\n.*?^[ \t]*### END SOLUTION[^\n]*(\n|$)",
                       re.MULTILINE | re.DOTALL)
_HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS[^\n]*\n.*?^[ \t]*### END HIDDEN TESTS[^\n]*(\n|$)",
                     re.MULTILINE | re.DOTALL)
# "...run the cell; reference solutions are in `notebooks/solutions/ex02.py`." and "Reference solutions are in ..."
_POINTER_CLAUSE = re.compile(r";\s*reference\s+solutions\s+are\s+in\s+`[^`]+`.*?\.(?=\s|$)", re.DOTALL)
_POINTER_SENTENCE = re.compile(r"\s*Reference\s+solutions\s+are\s+in\s+`[^`]+`.*?\.(?=\s|$)", re.DOTALL)


def is_instructor_only(cell: dict) -> bool:
    return bool(INSTRUCTOR_TAGS & set(cell.get("metadata", {}).get("tags", [])))


def is_solution(cell: dict) -> bool:
    return bool(cell.get("metadata", {}).get("nbgrader", {}).get("solution"))


def without_solution_pointers(text: str) -> str:
    """``text`` with the sentences that send the reader to ``notebooks/solutions/`` removed."""
    return _POINTER_SENTENCE.sub("", _POINTER_CLAUSE.sub(".", text))


def _stub(solution: re.Match) -> str:
    """nbgrader's stub in place of one BEGIN/END SOLUTION block, at the block's indentation."""
    return "".join(f"{solution.group(1)}{line}\n" for line in SOLUTION_STUB.splitlines())


def student_cell(cell: dict) -> dict:
    """One cell as the student sees it (the cell is not modified)."""
    cell = json.loads(json.dumps(cell))
    source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
    if is_solution(cell):
        if cell["cell_type"] == "code":
            source = _SOLUTION.sub(_stub, source) if _SOLUTION.search(source) else SOLUTION_STUB
        else:
            source = ANSWER_STUB
    if cell["cell_type"] == "code":
        source = _HIDDEN.sub("", source)
        cell["outputs"], cell["execution_count"] = [], None
    else:
        source = without_solution_pointers(source)
    cell["source"] = source.splitlines(keepends=True)
    return cell


def student_notebook(nb: dict) -> dict:
    """A notebook (nbformat 4 JSON) without instructor-only cells, solutions and outputs."""
    nb = dict(nb)
    nb["cells"] = [student_cell(c) for c in nb["cells"] if not is_instructor_only(c)]
    if (nb.get("nbformat"), nb.get("nbformat_minor", 0)) >= (4, 5):  # cell ids are required from 4.5 on
        taken = {c["id"] for c in nb["cells"] if "id" in c}
        for i, c in enumerate(nb["cells"]):
            if "id" not in c:
                c["id"] = next(f"cell-{i}-{k}" for k in range(len(taken) + 1) if f"cell-{i}-{k}" not in taken)
                taken.add(c["id"])
    return nb


STUDENT_NOTE = """> **Student edition** (written by `make student`): the exercises' reference solutions and the
> instructor notes are left out. Every exercise's `check(...)` works as in the full course: it lives in
> the installed `agentlab` package (`make install` in the course's repository).

"""


# a Markdown image whose file sits outside the notebooks' folder, e.g. ![GAE](../docs/images/gae_recursion.png)
OUTSIDE_IMAGE = re.compile(r"(!\[[^\]]*\]\()(\.\./[^)\s]+\.(?:png|svg|jpg|jpeg|gif))(\))")


def with_local_images(nb: dict, src: Path, out: Path) -> dict:
    """Copy the images the notebook's Markdown shows from outside ``src`` into ``out/images`` and point the
    links there: the handed-out folder has no ``docs/`` beside it, so those links would show nothing."""
    def local(match: re.Match) -> str:
        image = (src / match.group(2)).resolve()
        if not image.is_file():
            return match.group(0)  # a broken link stays as broken as it is in the course
        (out / "images").mkdir(exist_ok=True)
        shutil.copy2(image, out / "images" / image.name)
        return f"{match.group(1)}images/{image.name}{match.group(3)}"

    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            text = "".join(cell["source"])
            cell["source"] = OUTSIDE_IMAGE.sub(local, text).splitlines(keepends=True)
    return nb


def student_edition(src: str | Path = "notebooks", out: str | Path = "build/student") -> list[Path]:
    """Write the student edition of every notebook in ``src`` (and its README) into ``out``, which is
    emptied first; return the notebooks written. ``src/solutions`` is not copied."""
    src, out = Path(src), Path(out)
    if out.resolve() == src.resolve():
        raise ValueError("the student edition must go to another folder than its source")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    written = []
    for path in sorted(src.glob("*.ipynb")):
        nb = with_local_images(student_notebook(json.loads(path.read_text(encoding="utf-8"))), src, out)
        target = out / path.name
        target.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        written.append(target)
    readme = src / "README.md"
    if readme.exists():
        (out / "README.md").write_text(STUDENT_NOTE + without_solution_pointers(readme.read_text(encoding="utf-8")),
                                       encoding="utf-8")
    return written


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    out = args[0] if args else "build/student"
    src = args[1] if len(args) > 1 else "notebooks"
    written = student_edition(src, out)
    print(f"student edition: {len(written)} notebooks in {out} (no solutions, no instructor notes, no outputs)")


if __name__ == "__main__":
    main()
