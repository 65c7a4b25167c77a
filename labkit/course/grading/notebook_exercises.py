"""The Python exercises of the instructor's notebooks, and the program that grades one of them for
one student.

An exercise is a solution cell (nbgrader metadata ``"solution": true, "grade": false``) followed by
its locked check cell (``grade_id`` + ``"_check"``, ``"grade": true``, ``points``).  Grading it runs,
in a fresh process:

1. the instructor's cells the solution and the check need (``cell_names.needed_cells``: what they
   read, back to where it is set), from the *instructor's* notebook;
2. the student's solution cell (found by its ``grade_id``, else by its cell id);
3. the instructor's check cell.

The exercise passes when the check runs without an error and prints what it printed in the
instructor's stored run (times, rates and addresses normalised as strict nbval normalises them).  On a
wrong answer a check raises (``labkit.verdict.require``: CheckFailed, an AssertionError, with the words
it prints on a right one, False in place of True); the verdict then gives those words.
Nothing else of the student's notebook is read: deleted, skipped, edited or re-ordered check cells,
forged outputs and any other cell change nothing.

A written question is a markdown cell with ``"solution": true, "grade": true``: graded by hand; the
grader copies the student's answer into the feedback.
"""
from __future__ import annotations

import configparser
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import NotebookError
from .cell_names import cell_names, needed_cells

__all__ = ["NotebookExercise", "WrittenQuestion", "exercises_of", "written_questions_of", "read_notebook",
           "program_for", "student_cell", "sanitizer", "is_check_cell", "MAX_NOTEBOOK_BYTES", "NotebookError"]

MAX_NOTEBOOK_BYTES = 64 << 20       # a notebook of text and a few plots is far below this
KERNEL_CHECK = re.compile(r'check_\w+_(?:kernel|program)\("exercises/')     # graded from the .cu file instead


def read_notebook(path: str | Path) -> dict:
    """A notebook as plain JSON (never executed, never unpickled), checked for the shape the grader
    reads: ``cells``, each with ``cell_type`` and ``source``."""
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        raise NotebookError(f"{path.name}: {size / 2**20:.0f} MiB, over the {MAX_NOTEBOOK_BYTES >> 20} MiB a notebook may have")
    try:
        nb = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NotebookError(f"{path.name}: not a notebook (not JSON: {exc})") from None
    cells = nb.get("cells") if isinstance(nb, dict) else None
    if not isinstance(cells, list) or not all(isinstance(c, dict) and isinstance(c.get("cell_type"), str) for c in cells):
        raise NotebookError(f"{path.name}: not a notebook (no list of cells)")
    for c in cells:
        src = c.get("source", "")
        c["source"] = "".join(src) if isinstance(src, list) and all(isinstance(s, str) for s in src) else \
            src if isinstance(src, str) else ""
    return nb


def _nbgrader(cell: dict) -> dict:
    meta = cell.get("metadata")
    g = meta.get("nbgrader") if isinstance(meta, dict) else None
    return g if isinstance(g, dict) else {}


def is_check_cell(cell: dict) -> bool:
    """Is ``cell`` a locked check cell (nbgrader's autograded tests: a code cell with ``"grade": true,
    "solution": false``), the check of a Python or a kernel exercise?"""
    g = _nbgrader(cell)
    return cell.get("cell_type") == "code" and g.get("grade") is True and g.get("solution") is False


def _stdout(cell: dict) -> str:
    return "".join("".join(o.get("text", "")) for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream" and o.get("name") == "stdout")


def sanitizer(cfg: str | Path | None):
    """A function that normalises text as strict nbval does with ``cfg`` (an nbval sanitize file)."""
    rules = []
    if cfg is not None and Path(cfg).is_file():
        parser = configparser.ConfigParser(interpolation=None)
        parser.read(cfg)
        rules = [(re.compile(parser[s]["regex"]), parser[s]["replace"]) for s in parser.sections()]

    def clean(text: str) -> str:
        for rx, rep in rules:
            text = rx.sub(rep, text)
        return text
    return clean


@dataclass
class NotebookExercise:
    notebook: str          # file name, e.g. "01_cpu_reference_convolution.ipynb"
    grade_id: str          # the solution cell's
    points: int            # the check cell's
    solution: str          # the instructor's solution cell (its names say what a solution may define)
    solution_id: str | None
    check: str             # the check cell's source
    expected: str          # what the check printed in the instructor's stored run
    setup: list = field(default_factory=list)   # the instructor's cells to run first, in order


@dataclass
class WrittenQuestion:
    notebook: str
    grade_id: str
    points: int
    question: str          # the markdown cell before the answer cell


def exercises_of(path: str | Path) -> list[NotebookExercise]:
    """The Python exercises of the instructor's notebook ``path`` (kernel checks, graded from the
    student's .cu file, are left out)."""
    nb = read_notebook(path)
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    sources = [c["source"] for c in code]
    out = []
    for i, c in enumerate(code):
        g = _nbgrader(c)
        if not (g.get("solution") is True and g.get("grade") is False):
            continue
        if i + 1 >= len(code) or _nbgrader(code[i + 1]).get("grade_id") != g["grade_id"] + "_check":
            raise ValueError(f"{Path(path).name}: solution cell {g['grade_id']} is not followed by its check cell")
        check = code[i + 1]
        if KERNEL_CHECK.search(check["source"]):
            continue
        if any(o.get("output_type") != "stream" for o in check.get("outputs", [])):
            raise ValueError(f"{Path(path).name}: the check of {g['grade_id']} shows more than printed text")
        out.append(NotebookExercise(Path(path).name, g["grade_id"], int(_nbgrader(check)["points"]), c["source"],
                                    c.get("id"), check["source"], _stdout(check),
                                    [sources[j] for j in needed_cells(sources, [i, i + 1])]))
    return out


def written_questions_of(path: str | Path) -> list[WrittenQuestion]:
    """The written questions (markdown answer cells graded by hand) of notebook ``path``."""
    cells = read_notebook(path)["cells"]
    out = []
    for i, c in enumerate(cells):
        g = _nbgrader(c)
        if c["cell_type"] == "markdown" and g.get("solution") is True and g.get("grade") is True:
            # The question stands before the measurement it asks about: the nearest markdown cell back.
            j = i - 1
            while j >= 0 and cells[j]["cell_type"] != "markdown":
                j -= 1
            question = cells[j]["source"] if j >= 0 else ""
            out.append(WrittenQuestion(Path(path).name, g["grade_id"], int(g.get("points", 0)), question))
    return out


def student_cell(student_nb: dict | None, grade_id: str, cell_id: str | None, cell_type: str = "code") -> str | None:
    """The source of the student's cell with ``grade_id`` (else with id ``cell_id``), or None."""
    if student_nb is None:
        return None
    cells = [c for c in student_nb["cells"] if c["cell_type"] == cell_type]
    for c in cells:
        if _nbgrader(c).get("grade_id") == grade_id:
            return c["source"]
    for c in cells:
        if cell_id is not None and c.get("id") == cell_id:
            return c["source"]
    return None


def program_for(ex: NotebookExercise, student_nb: dict | None) -> dict | None:
    """What the grading process runs for ``ex`` with the student's notebook (None: the student's
    solution cell was not found).  ``allowed``: the names the solution may bind; any other name it
    rebinds is put back before the check runs."""
    solution = student_cell(student_nb, ex.grade_id, ex.solution_id)
    if solution is None:
        return None
    return {"setup": ex.setup, "solution": solution, "check": ex.check,
            "allowed": sorted(cell_names(ex.solution).binds), "imports": _imports(ex.solution)}


def _imports(source: str) -> list[str]:
    """The top-level import statements of the instructor's solution ``source`` (the check's process
    makes them itself: what they bind is labkit's or a library's, never the student's)."""
    import ast
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [ast.get_source_segment(source, s) for s in tree.body
            if isinstance(s, (ast.Import, ast.ImportFrom)) and not (isinstance(s, ast.ImportFrom) and s.level)]

