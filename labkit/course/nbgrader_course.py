"""An nbgrader course made from the series:
`python -m labkit.course.nbgrader_course notebooks/ COURSE [--assignments 02_naive_gpu_convolution ...]`.

It writes, for each notebook (an assignment named after it, its file name without .ipynb):

    COURSE/nbgrader_config.py
    COURSE/source/<assignment>/<notebook>.ipynb
    COURSE/source/<assignment>/exercises/<file>.cu     the kernel exercises the notebook uses

then, in COURSE, `nbgrader generate_assignment <assignment>` releases it, and after collecting the
submissions `nbgrader autograde <assignment>` grades them (notebooks/INSTRUCTORS.md, section 4).

* **The kernel exercises** (`exercises/*.cu`, found from the notebook's cells that name them) enter
  `source/` as the student's copy (student_copy.strip_cu_solutions): nbgrader copies every file of
  `source/` into the release, and knows no solution regions in a .cu file, so the instructor's
  solution never enters a folder of nbgrader's.  `c.Autograde.exclude_overwriting` names them, so
  `autograde` never copies them over a student's own file (it copies every other file of `source/`
  over the submission, to put back what a student may not change).
* **Stored outputs**: the written questions ask about the measurements the notebooks stored from a
  GPU run, so a student without a GPU must see them; nbgrader clears every output when it releases
  a notebook, unless `c.ClearOutput.enabled = False`, which the configuration sets (autograde runs
  every code cell again, and each run replaces that cell's outputs).  The outputs that would show a
  solution are cleared in `source/` instead, by the student copy's rules
  (student_copy.reveals_a_solution): a solution cell's, a check cell's (the instructor's solution
  passing), a cell's that prints an exercise's .cu file.  The solutions themselves stay in
  `source/`: nbgrader's `generate_assignment` replaces each `### BEGIN SOLUTION` region, in code
  (`raise NotImplementedError()`) and in the written answers (`YOUR ANSWER HERE`), as the student
  copy does.
* `nbgrader_config.py` is this module's: laying out more assignments later keeps the earlier ones'
  entries, the course id, the cell time limit, and whatever the instructor wrote below its last line
  (MINE); a config it did not write is refused, never overwritten.
* `--check-release` reads what `generate_assignment` wrote (`COURSE/release/<assignment>/`) and
  lists every piece of solution text in it (release_leaks): a solution region's marker, a model
  answer or rubric, a line of the instructor's solution code, written answer or kernel region in a
  cell, an output or a .cu file.  Exit status 1 if there is any.

The course folder must not be the notebooks' folder, nor lie inside it or around it (its `source/`
holds the solutions; pytest collects the notebooks under notebooks/).
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

from .series import notebooks as series_notebooks
from .student_copy import BEGIN, CU_BEGIN, CU_END, END, overlap, reveals_a_solution, strip_cu_solutions

__all__ = ["assignments_in", "exercise_files", "make_course", "config_text", "release_leaks", "main"]

EXERCISE = re.compile(r"exercises/([\w.-]+\.cu)\b")
CELL_TIMEOUT = 600          # seconds a cell may run under autograde (nbgrader's default, 30 s, is too short)
MINE = "# Settings of your own go below this line: laying out more assignments keeps them."


def assignments_in(notebooks: Path) -> dict[str, Path]:
    """{assignment: notebook} for the series' notebooks (NN_*.ipynb) in folder ``notebooks``."""
    return {p.stem: p for p in series_notebooks(notebooks)}


def _cells(path: Path) -> list:
    import nbformat
    return nbformat.read(path, as_version=4).cells


def exercise_files(notebook: Path) -> list[str]:
    """The kernel exercises notebook ``notebook`` uses: the files ``exercises/NAME.cu`` its cells name."""
    return sorted({m.group(1) for c in _cells(notebook) for m in EXERCISE.finditer(c.source)})


def config_text(exercises: dict[str, list[str]], course_id: str = "labkit", cell_timeout: int = CELL_TIMEOUT,
                own: str = "") -> str:
    """nbgrader_config.py for assignments ``exercises`` ({assignment: its .cu exercises}), ending in
    the instructor's own settings ``own``."""
    keep = {a: [f"exercises/{f}" for f in files] for a, files in sorted(exercises.items())}
    return f'''# An nbgrader course made from labkit's notebooks by `python -m labkit.course.nbgrader_course`;
# notebooks/INSTRUCTORS.md (section 4) says how to release, collect and grade.  Run nbgrader here.
c = get_config()  # noqa: F821 (nbgrader defines it)

c.CourseDirectory.course_id = {json.dumps(course_id)}

# Keep the stored outputs when releasing: the written questions ask about the GPU measurements the
# notebooks stored.  Those that would show a solution (solution cells, check cells, a printed
# exercise file) were cleared in source/ already.  Autograde runs every code cell again anyway.
c.ClearOutput.enabled = False

# The kernel exercises are the student's own files: autograde copies every other file of source/
# over a submission, these never (source/ holds only their blank copies).
c.Autograde.exclude_overwriting = {json.dumps(keep, indent=4)}

# A cell may run for minutes on the CPU executor (a kernel check compiles and runs the student's
# kernel under its memory and race checks); nbgrader's default is 30 s.
c.Execute.timeout = {int(cell_timeout)}

{MINE}
''' + own


def _configured(config: Path) -> dict:
    """What a config this module wrote before holds: its assignments' .cu files (``exercises``), its
    course id and cell timeout, and the instructor's own settings after the line MINE (``own``); an
    empty dict where there is no such config."""
    if not config.is_file():
        return {}
    text = config.read_text()
    if MINE not in text:
        raise ValueError(f"{config} was not written by labkit.course.nbgrader_course (no line {MINE!r}): "
                         "move it away, or lay out the course in a new folder")
    head, _, own = text.partition(MINE)
    own = own[1:] if own.startswith("\n") else own
    found: dict = {"own": own}
    m = re.search(r"^c\.Autograde\.exclude_overwriting = (\{.*?^\})$", head, re.S | re.M)
    if m:
        found["exercises"] = {a: [Path(f).name for f in files] for a, files in json.loads(m.group(1)).items()}
    m = re.search(r"^c\.CourseDirectory\.course_id = (\".*\")$", head, re.M)
    if m:
        found["course_id"] = json.loads(m.group(1))
    m = re.search(r"^c\.Execute\.timeout = (\d+)$", head, re.M)
    if m:
        found["cell_timeout"] = int(m.group(1))
    return found


def _source_notebook(src: Path, dst: Path) -> int:
    """Copy notebook ``src`` (solutions and all) to ``dst``, its outputs that would show a solution
    cleared; how many cells were cleared."""
    import nbformat
    nb = nbformat.read(src, as_version=4)
    cleared = 0
    for cell in nb.cells:
        if reveals_a_solution(cell) and (cell.outputs or cell.execution_count is not None):
            cell.outputs, cell.execution_count = [], None
            cleared += 1
    dst.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, dst)
    return cleared


def make_course(notebooks: Path, course: Path, assignments: list[str] | None = None, *,
                course_id: str | None = None, cell_timeout: int | None = None) -> dict[str, list[str]]:
    """Lay out the nbgrader course ``course`` from the instructor's folder ``notebooks`` (see the
    module's docstring): {assignment: its .cu exercises}.  ``assignments``: notebook names without
    .ipynb (default every notebook of the series).  ``course_id`` and ``cell_timeout``: None keeps
    what the course's config says (first time: "labkit", CELL_TIMEOUT); the config keeps the
    assignments laid out before, and whatever the instructor added below its line MINE."""
    notebooks, course = Path(notebooks), Path(course)
    if overlap(notebooks, course):
        raise ValueError(f"{course} is the notebooks' folder {notebooks}, or lies inside it or around it: its "
                         "source/ holds the solutions; make the course in a folder of its own, outside the repository")
    config = course / "nbgrader_config.py"
    before = _configured(config)            # each refusal comes before anything is written
    every = assignments_in(notebooks)
    chosen = list(every) if not assignments else list(dict.fromkeys(assignments))
    unknown = [a for a in chosen if a not in every]
    if unknown:
        raise ValueError(f"no notebook {', '.join(a + '.ipynb' for a in unknown)} in {notebooks} "
                         f"(the assignments are: {', '.join(every)})")
    exercises = {name: exercise_files(every[name]) for name in chosen}
    for name, files in exercises.items():
        missing = [f for f in files if not (notebooks / "exercises" / f).is_file()]
        if missing:
            raise ValueError(f"{every[name].name} names {', '.join('exercises/' + f for f in missing)}, "
                             f"not in {notebooks / 'exercises'}")
    for name, files in exercises.items():
        folder = course / "source" / name
        if folder.exists():               # a notebook edited since: the course gets it afresh
            shutil.rmtree(folder)
        _source_notebook(every[name], folder / every[name].name)
        for f in files:
            text, _ = strip_cu_solutions((notebooks / "exercises" / f).read_text())
            (folder / "exercises").mkdir(exist_ok=True)
            (folder / "exercises" / f).write_text(text)
    config.write_text(config_text({**before.get("exercises", {}), **exercises},
                                  course_id or before.get("course_id", "labkit"),
                                  cell_timeout or before.get("cell_timeout", CELL_TIMEOUT), before.get("own", "")))
    return exercises


# --- what a release must not hold --------------------------------------------------------------------

FORBIDDEN = ("BEGIN SOLUTION", "END SOLUTION", "**Model answer.**", "**Rubric")
MIN_LINE = 8        # shorter lines of a solution ("}", "return y") say nothing of it


def _regions(text: str, begin, end) -> tuple[list[str], list[str]]:
    """(the lines inside the solution regions of ``text``, the lines outside them), stripped."""
    inside, outside, within = [], [], False
    for line in text.splitlines():
        if begin.match(line):
            within = True
        elif within and end.match(line):
            within = False
        else:
            (inside if within else outside).append(line.strip())
    return inside, outside


def _output_texts(cell) -> list[str]:
    texts = []
    for o in cell.get("outputs", []):
        texts.append("".join(o.get("text", "")))
        for value in o.get("data", {}).values():
            if isinstance(value, (str, list)):
                texts.append("".join(value))
        texts += [o.get("evalue", "")] + list(o.get("traceback", []))
    return texts


def _solution_lines(notebook: Path, kernels: list[Path]) -> set[str]:
    """The lines that give a solution away: each line of a solution region (code, written answer,
    kernel) that is long enough to say something and appears nowhere else in the instructor's notebook
    (its cells outside the regions, and the outputs a student may see) nor in the kernel files' blank
    copies."""
    inside, outside = [], []
    for cell in _cells(notebook):
        i, o = _regions(cell.source, BEGIN, END)
        inside += i
        outside += o
        if not reveals_a_solution(cell):
            for text in _output_texts(cell):
                outside += [line.strip() for line in text.splitlines()]
    for cu in kernels:
        i, o = _regions(cu.read_text(), CU_BEGIN, CU_END)
        inside += i
        outside += o
    return {line for line in inside if len(line) >= MIN_LINE} - set(outside)


def _kernel_solution_lines(cu: Path) -> set[str]:
    """The lines of kernel file ``cu``'s solution regions that its blank copy does not hold."""
    inside, outside = _regions(cu.read_text(), CU_BEGIN, CU_END)
    return {line for line in inside if len(line) >= MIN_LINE} - set(outside)


def release_leaks(released: Path, notebooks: Path) -> list[str]:
    """What in ``released`` (an assignment's folder that `nbgrader generate_assignment` wrote,
    ``COURSE/release/<assignment>``) would give a student a solution, each in a line: a solution
    region's marker, a model answer or a rubric, or a line of the instructor's solutions (a code
    region, a written answer, a kernel region of ``notebooks/exercises``) in a cell's source or output
    or in a file.  Empty: nothing."""
    released, notebooks = Path(released), Path(notebooks)
    every = assignments_in(notebooks)
    leaks = []
    for nb_path in sorted(released.rglob("*.ipynb")):
        instructor = every.get(nb_path.stem)
        if instructor is None:
            leaks.append(f"{nb_path.name}: not a notebook of {notebooks}, cannot be checked")
            continue
        kernels = [notebooks / "exercises" / f for f in exercise_files(instructor)]
        lines = _solution_lines(instructor, kernels)
        for k, cell in enumerate(_cells(nb_path)):
            for where, texts in (("source", [cell.source]), ("outputs", _output_texts(cell))):
                for text in texts:
                    said = [w for w in FORBIDDEN if w in text]
                    said += sorted({line.strip() for line in text.splitlines()} & lines)
                    leaks += [f"{nb_path.name}, cell {k} ({where}): {s}" for s in said]
    for cu in sorted(released.rglob("*.cu")):
        instructor = notebooks / "exercises" / cu.name
        text = cu.read_text()
        said = [w for w in FORBIDDEN if w in text]
        if instructor.is_file():
            said += sorted({line.strip() for line in text.splitlines()} & _kernel_solution_lines(instructor))
        leaks += [f"{cu.relative_to(released)}: {s}" for s in said]
    return leaks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m labkit.course.nbgrader_course",
                                 description="Lay out an nbgrader course from the series' notebooks "
                                             "(notebooks/INSTRUCTORS.md, section 4).")
    ap.add_argument("notebooks", type=Path, help="the instructor's notebooks (notebooks/)")
    ap.add_argument("course", type=Path, help="the course folder (nbgrader's root), outside the repository")
    ap.add_argument("--assignments", nargs="+", metavar="NAME",
                    help="notebook names without .ipynb (default: every notebook of the series)")
    ap.add_argument("--course-id", help="nbgrader's course id (default: the config's, else labkit)")
    ap.add_argument("--cell-timeout", type=int,
                    help=f"seconds a cell may run under autograde (default: the config's, else {CELL_TIMEOUT})")
    ap.add_argument("--check-release", action="store_true",
                    help="lay out nothing: list the solution text in COURSE/release/<assignment>/ "
                         "(after nbgrader generate_assignment); exit status 1 if there is any")
    a = ap.parse_args(argv)
    if not a.notebooks.is_dir():
        ap.error(f"{a.notebooks} is not a folder (the instructor's notebooks: notebooks/)")
    if a.check_release:
        names = a.assignments or sorted(p.name for p in (a.course / "release").glob("*") if p.is_dir())
        if not names:
            ap.error(f"nothing released in {a.course / 'release'} (run nbgrader generate_assignment first)")
        found = []
        for name in names:
            folder = a.course / "release" / name
            if not folder.is_dir():
                ap.error(f"{folder} does not exist (run nbgrader generate_assignment {name} first)")
            leaks = release_leaks(folder, a.notebooks)
            found += leaks
            print(f"{name}: " + ("no solution text" if not leaks else f"{len(leaks)} piece(s) of solution text:"))
            for leak in leaks:
                print(f"  {leak}")
        return 1 if found else 0
    try:
        made = make_course(a.notebooks, a.course, a.assignments, course_id=a.course_id, cell_timeout=a.cell_timeout)
    except ValueError as exc:           # argparse's error: the message, and exit status 2
        ap.error(str(exc))
    for name, files in made.items():
        print(f"source/{name}/: {name}.ipynb" + "".join(f", exercises/{f} (blank)" for f in files))
    print(f"{a.course / 'nbgrader_config.py'}: outputs kept on release; autograde never overwrites "
          f"{sum(map(len, made.values()))} kernel file(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
