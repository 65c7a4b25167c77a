"""The notebooks' words about a kernel exercise name what the student's copy of the .cu file shows.

The student copy (labkit.course.student_copy) turns each solution region of notebooks/exercises/*.cu
into the lines CU_PLACEHOLDER; a notebook that says where to write must name those lines, not the
instructor's `// BEGIN SOLUTION` nor "the markers" the student's file does not call by that name.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from labkit.course.series import notebooks as series_notebooks
from labkit.course.student_copy import CU_PLACEHOLDER, strip_cu_solutions

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
PATHS = series_notebooks(NOTEBOOKS)
QUOTED_LINE = re.compile(r"`(//[^`]*)`")


def markdown(path: Path) -> list[str]:
    """The notebook's markdown cells, less the written answers' model answers (the instructor's)."""
    cells = json.loads(path.read_text())["cells"]
    return ["".join(c["source"]) for c in cells
            if c["cell_type"] == "markdown" and "### BEGIN SOLUTION" not in "".join(c["source"])]


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_the_words_name_the_lines_of_the_students_file(path):
    exercise = sorted((NOTEBOOKS / "exercises").glob(f"{path.name[:2]}_*.cu"))
    students = [strip_cu_solutions(cu.read_text())[0] for cu in exercise]
    for text in markdown(path):
        assert not re.search(r"between\s+the\s+markers", text), f"{path.name}: 'between the markers': which lines?"
        if re.search(r"(Write|Edit)[^.]*\bbetween\b", text) and exercise:
            quoted = QUOTED_LINE.findall(text)
            assert {CU_PLACEHOLDER[0], CU_PLACEHOLDER[-1]} <= set(quoted), f"{path.name}: {text[:300]!r}"
            for line in quoted:
                assert any(line in s for s in students), f"{path.name} names {line!r}, not in the student's {exercise}"


def test_the_student_copy_has_the_lines_the_notebooks_name():
    student, n = strip_cu_solutions((NOTEBOOKS / "exercises" / "02_conv_naive.cu").read_text())
    assert n == 1
    lines = [line.strip() for line in student.splitlines()]
    at = lines.index(CU_PLACEHOLDER[0])
    assert tuple(lines[at:at + 3]) == CU_PLACEHOLDER and "// BEGIN SOLUTION" not in student
