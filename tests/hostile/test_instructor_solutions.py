"""Every Python exercise of every notebook, graded in the grader's sandbox with the instructor's own
solution, gets full points: a set-up cell or a check that reads a file the sandbox does not show
(data/, benchmarks/results/), or a value the check cannot take across from the solution's process,
fails here rather than failing every student.  Skipped, with the reason, where bubblewrap cannot run."""
from __future__ import annotations

import pytest

from labkit.course import sandbox
from labkit.course.grade import INSTRUCTOR_NOTEBOOKS, instructor_exercises
from labkit.course.grading.notebook_exercises import read_notebook, sanitizer
from labkit.course.grading.python_exercises import grade_python_exercise

pytestmark = pytest.mark.skipif(sandbox.unavailable() is not None, reason=f"no sandbox here: {sandbox.unavailable()}")

EXERCISES = [e for ex, _ in instructor_exercises(INSTRUCTOR_NOTEBOOKS).values() for e in ex]
# An exercise whose check needs a GPU would be skipped here, with why; every one runs on the CPU executor now.
NEEDS_GPU: dict[str, str] = {}
# Checks that hand the solution's function what cannot cross as data would run beside it, in one
# sandbox (the feedback would say so).  None may: 06's x_index takes a ConvLayer, which crosses as its
# fields (labkit.course.grading.plain).
BESIDE: set[str] = set()
NOTE = "checked beside the solution in one sandbox"


def test_every_notebook_with_exercises_is_found():
    # 11 asks only written questions and a kernel exercise: no Python exercise
    want = {f"{n:02d}" for n in (*range(1, 11), 12, 13)}
    assert {e.notebook[:2] for e in EXERCISES} == want, sorted({e.notebook for e in EXERCISES})


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.grade_id)
def test_the_instructors_solution_gets_full_points_in_the_sandbox(ex):
    if ex.grade_id in NEEDS_GPU:
        pytest.skip(NEEDS_GPU[ex.grade_id])
    row = grade_python_exercise(ex, read_notebook(INSTRUCTOR_NOTEBOOKS / ex.notebook),
                                clean=sanitizer(INSTRUCTOR_NOTEBOOKS / "nbval_sanitize.cfg"), timeout=300)
    assert row["ok"] and row["points"] == row["max_points"] == ex.points, \
        f"{ex.notebook}, {ex.grade_id}: the instructor's solution got {row['points']} of {ex.points}:\n{row['message']}"
    assert (NOTE in row["message"]) == (ex.grade_id in BESIDE), \
        f"{ex.grade_id}: {'ran' if NOTE in row['message'] else 'did not run'} beside the solution:\n{row['message']}"


def test_the_sandbox_shows_the_repositorys_data_read_only_where_labkit_looks():
    """data/ and benchmarks/results/ at labkit.results' paths inside (the repository's root is the
    sandbox's labkit mount there), readable, not writable; nothing else of the repository."""
    import sys
    code = """
import json, os
from labkit import results
seen = {"root": str(results.REPO_ROOT), "listed": sorted(os.listdir(results.REPO_ROOT))}
for d in results.READ_ONLY_DIRS:
    seen[d.name] = sorted(os.listdir(d))[:3]
    try:
        open(d / "written", "w").write("x"); seen[d.name + " written"] = True
    except OSError as exc:
        seen[d.name + " written"] = type(exc).__name__
seen["shipped"] = len(results.shipped_rows("streams_h100.json")) > 0
print(json.dumps(seen))
"""
    import json
    done = sandbox.run([sys.executable, "-c", code], jobs=sandbox.repository_files(),
                       limits=sandbox.Limits(seconds=60, memory_gib=1.0))
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout)
    assert seen["root"] == sandbox.LABKIT_MOUNT and seen["listed"] == ["benchmarks", "data", "labkit"], seen
    assert seen["data"] and seen["results"] and seen["shipped"], seen
    assert seen["data written"] == seen["results written"] == "OSError", seen
