"""Student versions of the notebooks: `python -m labkit.course.student_copy notebooks/ student/`.

Each region between `### BEGIN SOLUTION` and `### END SOLUTION` in a code cell is
replaced by `# YOUR CODE HERE` and `raise NotImplementedError()`, keeping its
indentation; outputs of cells that held a solution are cleared, and so are those of
the check cells (their stored verdict is the instructor's solution passing).  Everything
else -- the explanation, the kernel shown from labkit/kernels/, the check cell's code,
the stored outputs of the lesson's runs, every cell's metadata (nbgrader's, and the check
cells' tag raises-exception, which lets Run All go past a failing check) -- stays as it
is, so a student's answer is graded by the same verdict.

Written questions are graded by hand: a markdown question cell before a measurement the
notebook makes, and after it a markdown answer cell (nbgrader metadata `"solution": true,
"grade": true`, `points`) whose region between `### BEGIN SOLUTION` and `### END SOLUTION`
holds the model answer and its rubric.  In a markdown cell the region is replaced by
`YOUR ANSWER HERE`, nbgrader's placeholder for a written answer, so neither the model answer
nor the rubric reaches the student.

Kernel exercises live beside the notebooks, in `exercises/*.cu`: each region between
`// BEGIN SOLUTION` and `// END SOLUTION` becomes `// YOUR CODE HERE` between the lines
`// BEGIN YOUR CODE` and `// END YOUR CODE` in the student's copy (written to `student/exercises/`),
which still compiles: the check then says which outputs the missing code never wrote.  The grader
takes only what lies between those lines.

The copy is never written into the instructor's folder, nor into a folder inside it or around it:
`student_copy notebooks notebooks` would overwrite the solutions with their blanks.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from .grading.notebook_exercises import is_check_cell

BEGIN = re.compile(r"^(\s*)### BEGIN SOLUTION\s*$")
END = re.compile(r"^\s*### END SOLUTION\s*$")
CU_BEGIN = re.compile(r"^(\s*)// BEGIN SOLUTION\s*$")
CU_END = re.compile(r"^\s*// END SOLUTION\s*$")
# What a kernel exercise's solution region becomes in the student's copy: the notebooks' words name
# these lines (tests/test_student_words.py), the grader reads between the first and the last.
CU_PLACEHOLDER = ("// BEGIN YOUR CODE", "// YOUR CODE HERE", "// END YOUR CODE")


def _strip(source: str, begin, end, placeholder, marker: str) -> tuple[str, int]:
    out, inside, n = [], False, 0
    for line in source.splitlines():
        m = begin.match(line)
        if m and not inside:
            out += [m.group(1) + p for p in placeholder]
            inside, n = True, n + 1
        elif inside and end.match(line):
            inside = False
        elif inside and begin.match(line):
            raise ValueError(f"a {marker} BEGIN SOLUTION region opens inside another")
        elif not inside:
            if end.match(line):
                raise ValueError(f"a {marker} END SOLUTION line has no BEGIN SOLUTION before it")
            out.append(line)
    if inside:
        raise ValueError(f"a {marker} BEGIN SOLUTION region has no {marker} END SOLUTION")
    return "\n".join(out), n


def strip_solutions(source: str) -> tuple[str, int]:
    """(the source with solution regions replaced, how many regions there were)."""
    return _strip(source, BEGIN, END, ["# YOUR CODE HERE", "raise NotImplementedError()"], "###")


ANSWER_HERE = "YOUR ANSWER HERE"


def strip_written_answers(source: str) -> tuple[str, int]:
    """A markdown cell's source with each solution region (a written question's model answer and
    rubric) replaced by `YOUR ANSWER HERE`, and how many regions there were."""
    return _strip(source, BEGIN, END, [ANSWER_HERE], "###")


def strip_cu_solutions(source: str) -> tuple[str, int]:
    """A kernel source with each `// BEGIN SOLUTION` .. `// END SOLUTION` region replaced by
    `// YOUR CODE HERE` between `// BEGIN YOUR CODE` and `// END YOUR CODE` (same indentation): the
    grader takes what the student writes between those two lines, and only that (labkit.course.regions);
    and how many regions there were."""
    text, n = _strip(source, CU_BEGIN, CU_END, list(CU_PLACEHOLDER), "//")
    return text + ("\n" if source.endswith("\n") else ""), n


def _shows_a_solution(outputs) -> bool:
    """Does any stored output hold a solution region's marker (a printed exercise file, say)?"""
    def texts(o):
        yield "".join(o.get("text", ""))
        for value in o.get("data", {}).values():
            if isinstance(value, (str, list)):
                yield "".join(value)
    return any("BEGIN SOLUTION" in t for o in outputs for t in texts(o))


def reveals_a_solution(cell) -> bool:
    """Would code cell ``cell``'s stored outputs show a student a solution?  A solution cell's (the
    instructor's code ran there); a check cell's (its verdict on the instructor's solution, "...: True":
    the student would see the exercise pass before writing anything; the grader compares with the
    instructor's stored run, never the student's, so nothing it reads is lost); and a cell whose output
    holds a solution region's marker (one that prints an exercise's .cu file: the student's run prints
    their own file)."""
    return (cell.cell_type == "code" and
            (any(BEGIN.match(line) for line in cell.source.splitlines()) or is_check_cell(cell)
             or _shows_a_solution(cell.get("outputs", []))))


def _strip_notebook(src: Path, dst: Path) -> tuple[int, int]:
    """Write the student's copy of notebook ``src`` to ``dst``: (the code cells' solution regions,
    the markdown cells' written answers) it removed."""
    import nbformat
    nb = nbformat.read(src, as_version=4)
    code = written = 0
    for cell in nb.cells:
        if cell.cell_type == "code":
            if reveals_a_solution(cell):
                cell.outputs, cell.execution_count = [], None
            new, n = strip_solutions(cell.source)
            if n:
                cell.source = new
                code += n
        elif cell.cell_type == "markdown":
            new, n = strip_written_answers(cell.source)
            if n:
                cell.source = new
                written += n
    nbformat.write(nb, dst)
    return code, written


def student_notebook(src: Path, dst: Path) -> int:
    """Write the student's copy of notebook ``src`` to ``dst``; the number of solution regions
    removed (code exercises and written answers)."""
    return sum(_strip_notebook(src, dst))


def student_kernel(src: Path, dst: Path) -> int:
    """Write the student's copy of a kernel exercise; the number of solution regions."""
    text, n = strip_cu_solutions(src.read_text())
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(text)
    return n


def overlap(src: Path, dst: Path) -> str | None:
    """Why the student copy of folder ``src`` must not be written to ``dst`` (the same folder, once
    links and ``..`` are resolved, or one inside the other), or None where it may."""
    s, d = src.resolve(), dst.resolve()
    if s == d:
        return f"{dst} is the source folder {src}: the copy would overwrite the instructor's solutions"
    if s in d.parents:
        return (f"{dst} lies inside the source folder {src}: the student copy would sit among (and be "
                "handed out or committed with) the instructor's solutions")
    if d in s.parents:
        return (f"the source folder {src} lies inside {dst}: the student's folder would hold the "
                "instructor's solutions")
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    a = ap.parse_args(argv)
    if not a.src.is_dir():
        ap.error(f"{a.src} is not a folder (the instructor's notebooks: notebooks/)")
    problem = overlap(a.src, a.dst)
    if problem:                         # argparse's error: the message, and exit status 2
        ap.error(f"{problem}; write the copy to a folder of its own (make student writes student/)")
    a.dst.mkdir(parents=True, exist_ok=True)
    for nb in sorted(a.src.glob("*.ipynb")):
        code, written = _strip_notebook(nb, a.dst / nb.name)
        print(f"{nb.name}: {code} exercise(s), {written} written question(s)")
    for cu in sorted((a.src / "exercises").glob("*.cu")):
        n = student_kernel(cu, a.dst / "exercises" / cu.name)
        print(f"exercises/{cu.name}: {n} region(s) to write")
    return 0


if __name__ == "__main__":
    sys.exit(main())
