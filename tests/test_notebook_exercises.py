"""The notebooks' exercises carry nbgrader's cell metadata, so a course that uses nbgrader takes them
as they are: each solution cell (### BEGIN SOLUTION) holds only the solution and is followed by a
locked, graded check cell of its own; each kernel exercise's check cell is locked and graded with
the points labkit.grade gives it; every kernel exercise of notebooks/exercises is checked somewhere."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from labkit.grade import EXERCISES

ROOT = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(ROOT.glob("[0-9][0-9]_*.ipynb"))
KERNEL_CHECK = re.compile(r'check_\w+_kernel\("exercises/([\w.]+)"')


def nbgrader(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_solution_cells_are_followed_by_locked_graded_checks(path):
    cells = [c for c in nbformat.read(path, 4).cells if c.cell_type == "code"]
    ids = [nbgrader(c)["grade_id"] for c in cells if nbgrader(c)]
    assert len(ids) == len(set(ids)), f"grade_ids repeat in {path.name}: {ids}"
    for i, c in enumerate(cells):
        if "### BEGIN SOLUTION" in c.source:
            meta = nbgrader(c)
            assert meta.get("solution") is True and meta.get("locked") is False and meta.get("grade") is False, \
                f"{path.name}: a solution cell without nbgrader's solution metadata:\n{c.source[:200]}"
            last = max(k for k, line in enumerate(c.source.splitlines()) if "### END SOLUTION" in line)
            rest = [line for line in c.source.splitlines()[last + 1:] if line.strip()]
            assert all(line[0].isspace() for line in rest), f"{path.name}: code after the solution in its cell: {rest[:2]}"
            check = cells[i + 1]
            assert nbgrader(check) == {"grade": True, "grade_id": meta["grade_id"] + "_check", "locked": True,
                                       "points": nbgrader(check).get("points"), "schema_version": 3,
                                       "solution": False} and nbgrader(check)["points"] >= 1, path.name
            assert "### BEGIN SOLUTION" not in check.source
        m = KERNEL_CHECK.search(c.source)
        if m:
            meta = nbgrader(c)
            assert meta.get("grade") is True and meta.get("locked") is True, f"{path.name}: {m.group(1)}'s check"
            assert meta["points"] == EXERCISES[m.group(1)[:-3]].points


def test_every_kernel_exercise_is_checked_in_its_notebook():
    checked = {m.group(1) for p in NOTEBOOKS for c in nbformat.read(p, 4).cells
               for m in KERNEL_CHECK.finditer(c.source)}
    on_disk = {p.name for p in (ROOT / "exercises").glob("*.cu")}
    assert on_disk == checked == {e.file for e in EXERCISES.values()}
    for name in checked:
        notebook = next(p for p in NOTEBOOKS if p.name[:2] == name[:2])
        assert name in "".join(c.source for c in nbformat.read(notebook, 4).cells), (name, notebook.name)
