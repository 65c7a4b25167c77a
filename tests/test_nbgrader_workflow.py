"""The nbgrader workflow of notebooks/INSTRUCTORS.md (section 4), run with the real nbgrader on one
notebook with a Python exercise and a kernel exercise (02: naive_grid and exercises/02_conv_naive.cu):
the course laid out by labkit.course.nbgrader_course, `nbgrader generate_assignment`, three
submissions under submitted/<student>/<assignment>/, `nbgrader autograde`, the scores read from
nbgrader's gradebook.

    right   the release with the instructor's solution in its solution cell and the instructor's
            kernel regions in its .cu               -> every autograded point
    blank   the release as it is                    -> 0 (a check that prints False used to pass)
    wrong   wrong code in the solution cell, a kernel region that computes something wrong -> 0

The release holds no solution text (code, written answers, rubrics; in a cell, an output or the .cu)
and keeps the lesson's stored outputs; autograde leaves each student's own .cu in place.

The notebook runs on the CPU executor (LABKIT_BACKEND=cpu) with a HOME, a results folder and a kernel
cache of its own in tmp (the executor's runtime read from the user's cache, as the grader's sandbox
does); about a minute on two cores with a warm cache.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

nbgrader = pytest.importorskip("nbgrader", reason="nbgrader is not installed (the lab extra installs it)")

import nbformat  # noqa: E402

from labkit.backends.cpu.compiler import SEED_ENV, cache_dir  # noqa: E402
from labkit.course import nbgrader_course  # noqa: E402
from labkit.course.grading import synthetic  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"
ASSIGNMENT = "02_naive_gpu_convolution"
KERNEL = "02_conv_naive.cu"
STUDENTS = ("right", "blank", "wrong")


def _env(tmp: Path) -> dict:
    bin_dir = str(Path(sys.executable).parent)        # nbgrader runs `alembic` from PATH
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "LABKIT_", "NBGRADER"))}
    env.update(HOME=str(tmp / "home"), PATH=bin_dir + os.pathsep + env.get("PATH", ""),
               PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""),
               LABKIT_BACKEND="cpu", LABKIT_RESULTS_DIR=str(tmp / "results"),
               LABKIT_CACHE_DIR=str(tmp / "cache"), MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1")
    env[SEED_ENV] = str(cache_dir())                  # the executor's runtime, read only
    (tmp / "home").mkdir(exist_ok=True)
    return env


def _nbgrader(course: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([str(Path(sys.executable).parent / "nbgrader"), *args], cwd=course, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return done


def _solutions() -> dict[str, str]:
    """{grade_id: source} of the instructor's solution code cells."""
    cells = nbformat.read(NOTEBOOKS / f"{ASSIGNMENT}.ipynb", 4).cells
    return {c.metadata.nbgrader["grade_id"]: c.source for c in cells if c.cell_type == "code"
            and c.metadata.get("nbgrader", {}).get("solution")}


def _student_kernel(text: str) -> str:
    """The instructor's kernel as a student hands it in: the regions between the lines the release has."""
    return text.replace("// BEGIN SOLUTION", "// BEGIN YOUR CODE").replace("// END SOLUTION", "// END YOUR CODE")


def _submit(course: Path, student: str) -> str:
    """Put ``student``'s submission into submitted/<student>/<assignment>/; the .cu text handed in."""
    release = course / "release" / ASSIGNMENT
    folder = course / "submitted" / student / ASSIGNMENT
    shutil.copytree(release, folder)
    cu = folder / "exercises" / KERNEL
    if student == "blank":
        return cu.read_text()
    solutions = _solutions()
    kernel = (NOTEBOOKS / "exercises" / KERNEL).read_text()
    if student == "wrong":
        for grade_id, old, new in synthetic.PYTHON_MISTAKES["wrong_index"]:
            if grade_id in solutions:
                assert old in solutions[grade_id], grade_id
                solutions[grade_id] = solutions[grade_id].replace(old, new, 1)
        mistakes = [(old, new) for e, old, new in synthetic.KERNEL_MISTAKES["wrong_index"] if e + ".cu" == KERNEL]
        assert mistakes
        for old, new in mistakes:
            assert old in kernel
            kernel = kernel.replace(old, new, 1)
    path = folder / f"{ASSIGNMENT}.ipynb"
    nb = nbformat.read(path, 4)
    filled = 0
    for c in nb.cells:
        gid = c.metadata.get("nbgrader", {}).get("grade_id")
        if c.cell_type == "code" and gid in solutions:
            c.source = solutions[gid]
            filled += 1
    assert filled == len(solutions) >= 1
    nbformat.write(nb, path)
    cu.write_text(_student_kernel(kernel))
    return cu.read_text()


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nbgrader")
    course = tmp / "course"
    env = _env(tmp)
    made = nbgrader_course.make_course(NOTEBOOKS, course, [ASSIGNMENT])
    assert made == {ASSIGNMENT: [KERNEL]}
    _nbgrader(course, env, "generate_assignment", ASSIGNMENT)
    handed_in = {s: _submit(course, s) for s in STUDENTS}
    _nbgrader(course, env, "autograde", ASSIGNMENT)
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        scores = {}
        for s in STUDENTS:
            sub = gb.find_submission(ASSIGNMENT, s)
            scores[s] = (sub.code_score, sub.max_code_score)
        graded_cells = {g.name: g.max_score for g in gb.find_notebook(ASSIGNMENT, ASSIGNMENT).grade_cells}
    return course, handed_in, scores, graded_cells


def test_the_release_holds_no_solution_and_keeps_the_lessons_outputs(graded):
    course, *_ = graded
    release = course / "release" / ASSIGNMENT
    assert nbgrader_course.release_leaks(release, NOTEBOOKS) == []
    assert nbgrader_course.main([str(NOTEBOOKS), str(course), "--check-release"]) == 0
    ours = nbformat.read(release / f"{ASSIGNMENT}.ipynb", 4).cells
    theirs = nbformat.read(NOTEBOOKS / f"{ASSIGNMENT}.ipynb", 4).cells
    kept = [c for c in ours if c.cell_type == "code" and c.outputs]
    assert len(kept) >= 5                       # the lesson's stored runs (the questions' measurements)
    shown = {c.source: c.outputs for c in theirs if c.cell_type == "code"}
    assert all(shown[c.source] == c.outputs for c in kept)
    checks = [c for c in ours if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"]
    assert len(checks) == 2 and all(c.outputs == [] and c.metadata["tags"] == ["raises-exception"] for c in checks)


def test_right_gets_every_point_blank_and_wrong_none(graded):
    _, _, scores, graded_cells = graded
    assert graded_cells == {"02_naive_grid_check": 1.0, "02_conv_naive_check": 2.0,
                            "02_q1": 3.0, "02_q2": 3.0}
    assert scores["right"] == (3.0, 3.0), scores
    assert scores["blank"] == (0.0, 3.0), scores
    assert scores["wrong"] == (0.0, 3.0), scores


def test_autograde_keeps_each_students_own_kernel(graded):
    course, handed_in, _, _ = graded
    for s in STUDENTS:
        assert (course / "autograded" / s / ASSIGNMENT / "exercises" / KERNEL).read_text() == handed_in[s], s
    assert handed_in["right"] != handed_in["blank"] != handed_in["wrong"]


def test_a_failing_check_shows_its_words_not_a_traceback(graded):
    course, *_ = graded
    cells = nbformat.read(course / "autograded" / "wrong" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", 4).cells
    errors = {c.metadata["nbgrader"]["grade_id"]: [o for o in c.outputs if o.output_type == "error"]
              for c in cells if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"}
    naive_grid = errors["02_naive_grid_check"][0]
    assert naive_grid.ename == "CheckFailed" and naive_grid.evalue == "naive_grid matches labkit: False"
    assert naive_grid.traceback == ["CheckFailed: naive_grid matches labkit: False"]
    kernel = errors["02_conv_naive_check"][0]
    assert kernel.ename == "CheckFailed" and kernel.evalue.startswith(f"{KERNEL}: conv_naive_exercise: ")
