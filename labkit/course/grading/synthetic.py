"""Synthetic submissions, made from the instructor's own notebooks and kernel exercises, with the
points each must get: ``python -m labkit.grade --synthetic OUT`` writes OUT/submissions/ and
OUT/expected.json; then ``python -m labkit.grade OUT/submissions`` must grade them to those points.

    correct          the instructor's solutions, everything
    unattempted      the student version (labkit.course.student_copy), untouched
    wrong_index      a wrong index in two kernels, wrong answers in two Python exercises
    missing_barrier  the tiled kernel without its first barrier
    out_of_bounds    two kernels without their bounds check, LRN's window not clipped at the last
                     channel, and a transposed convolution that reads row -1 (C's -2 / 2)
    endless_loop     a kernel and a Python solution that never end
    checks_deleted   wrong_index's wrong Python answers, their check cells deleted, the rest skipped
                     (NBVAL_SKIP) and re-ordered: still wrong  (an archive: checks_deleted.zip)
    outputs_forged   the same wrong answers, each check cell rewritten to print what a right
                     answer prints, its stored output copied from the instructor's  (a .tar.gz)

Every mistake is a text change of the instructor's source, inside a solution region (the grader takes
nothing else of a student's kernel file); a change that no longer applies (the
source moved on) stops with an error instead of building a submission that is right by accident.
"""
from __future__ import annotations

import copy
import json
import shutil
import tarfile
import zipfile
from pathlib import Path

from ..series import notebooks as series_notebooks
from ..student_copy import strip_cu_solutions, strip_solutions
from .notebook_exercises import KERNEL_CHECK

__all__ = ["STUDENTS", "KERNEL_MISTAKES", "PYTHON_MISTAKES", "write_synthetic", "expected_points"]

# (exercise, text in the instructor's source, what the student wrote instead)
KERNEL_MISTAKES = {
    "wrong_index": [("02_conv_naive", "  m = blockIdx.y;", "  m = 0;"),
                    ("05_conv_rows", "k4d(m, c, p, j - r)", "k4d(m, c, j - r, p)"),
                    ("11_depthwise", "const int c = (int)(plane % C);", "const int c = 0;")],
    "missing_barrier": [("03_conv_tiled", "    }\n    __syncthreads();\n    // END SOLUTION", "    }\n    // END SOLUTION")],
    "out_of_bounds": [("02_conv_naive", "  if (n >= N || h >= Ho || w >= Wo) return;", ""),
                      ("08_lrn", "d <= min(c + r, C - 1)", "d <= c + r"),
                      ("09_preprocess", "i < total; i += stride", "i <= total; i += stride"),
                      ("12_conv_transpose", "if (th < 0 || th % SH != 0) continue;", "if (th % SH != 0) continue;"),
                      ("02_host_code", "CHECK(cudaMalloc(&d_x, x_count * sizeof(float)));",
                       "CHECK(cudaMalloc(&d_x, x_count));")],
    "endless_loop": [("02_conv_naive", "  n = blockIdx.x;", "  for (volatile int spin = 0; spin >= 0;) {}\n  n = blockIdx.x;")],
}
_WRONG_PYTHON = [("01_conv2d_einsum", " + b[None, :, None, None]", ""),
                 ("02_naive_grid", "tiles = -(-Ho // tile_width) * -(-Wo // tile_width)",
                  "tiles = (Ho // tile_width) * (Wo // tile_width)")]
PYTHON_MISTAKES = {
    "wrong_index": _WRONG_PYTHON, "checks_deleted": _WRONG_PYTHON, "outputs_forged": _WRONG_PYTHON,
    "endless_loop": [("05_count_loads_and_fmas", "    loads = fmas = 0", "    while True:\n        pass")],
}
STUDENTS = ["correct", "unattempted", "wrong_index", "missing_barrier", "out_of_bounds", "endless_loop",
            "checks_deleted", "outputs_forged"]
ARCHIVES = {"checks_deleted": "zip", "outputs_forged": "tar.gz"}


def _replace(text: str, old: str, new: str, where: str) -> str:
    if old not in text:
        raise ValueError(f"{where}: the synthetic mistake no longer applies (no {old!r} in the source)")
    return text.replace(old, new, 1)


def _grade_meta(cell: dict) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def _notebook_for(student: str, nb: dict) -> dict:
    nb = copy.deepcopy(nb)
    cells = nb["cells"]
    if student == "unattempted":
        for c in cells:
            if c["cell_type"] == "code":
                src, n = strip_solutions("".join(c["source"]))
                if n:
                    c["source"], c["outputs"], c["execution_count"] = src, [], None
            elif c["cell_type"] == "markdown" and _grade_meta(c).get("solution"):
                c["source"] = "YOUR ANSWER HERE"
        return nb
    for grade_id, old, new in PYTHON_MISTAKES.get(student, []):
        for c in cells:
            if _grade_meta(c).get("grade_id") == grade_id:
                c["source"] = _replace("".join(c["source"]), old, new, grade_id)
    checks = [c for c in cells if c["cell_type"] == "code" and _grade_meta(c).get("grade")
              and not KERNEL_CHECK.search("".join(c["source"]))]
    if student == "checks_deleted":
        wrong = {g + "_check" for g, _, _ in PYTHON_MISTAKES[student]}
        cells[:] = [c for c in cells if _grade_meta(c).get("grade_id") not in wrong]
        for c in checks:
            if c in cells:
                c["source"] = "# NBVAL_SKIP\n" + "".join(c["source"])
        rest = [c for c in cells if c in checks]
        for c in rest:                                  # re-ordered: the checks moved to the top
            cells.remove(c)
        cells[:0] = rest
    if student == "outputs_forged":
        for c in checks:
            printed = "".join("".join(o.get("text", "")) for o in c.get("outputs", []))
            c["source"] = f"print({printed.rstrip(chr(10))!r})"
    return nb


def expected_points(student: str, points: dict) -> int:
    """The points ``student`` must get when the exercises ``points`` ({name: points}) are graded."""
    if student == "unattempted":
        return 0
    lost = {e for e, _, _ in KERNEL_MISTAKES.get(student, [])} | {e for e, _, _ in PYTHON_MISTAKES.get(student, [])}
    return sum(p for e, p in points.items() if e not in lost)


def write_synthetic(out: Path, notebooks: Path, kernel_exercises: dict, python_points: dict,
                    students=None) -> dict:
    """Write the submissions of ``students`` (default all) into out/submissions and the points each
    must get into out/expected.json; returns {student: points}.  ``kernel_exercises``: labkit.grade's
    EXERCISES; ``python_points``: {grade_id: points} of the Python exercises graded."""
    out, notebooks = Path(out), Path(notebooks)
    subs = out / "submissions"
    shutil.rmtree(subs, ignore_errors=True)
    subs.mkdir(parents=True)
    kernel_points = {name: ex.points for name, ex in kernel_exercises.items()}
    expected = {}
    for student in students or STUDENTS:
        folder = subs / student
        (folder / "exercises").mkdir(parents=True)
        for name, ex in kernel_exercises.items():
            text = (notebooks / "exercises" / ex.file).read_text()
            if student == "unattempted":
                text = strip_cu_solutions(text)[0]
            for e, old, new in KERNEL_MISTAKES.get(student, []):
                if e == name:
                    text = _replace(text, old, new, ex.file)
            (folder / "exercises" / ex.file).write_text(text)
        for path in series_notebooks(notebooks):
            nb = json.loads(path.read_text())
            (folder / path.name).write_text(json.dumps(_notebook_for(student, nb), indent=1))
        expected[student] = expected_points(student, {**kernel_points, **python_points})
        kind = ARCHIVES.get(student)
        if kind:
            archive = subs / f"{student}.{kind}"
            if kind == "zip":
                with zipfile.ZipFile(archive, "w") as z:
                    for f in sorted(folder.rglob("*")):
                        if f.is_file():
                            z.write(f, f.relative_to(subs))
            else:
                with tarfile.open(archive, "w:gz") as t:
                    t.add(folder, arcname=student)
            shutil.rmtree(folder)
    (out / "expected.json").write_text(json.dumps(expected, indent=1))
    return expected

