"""Grade one Python exercise of one student: the program of ``notebook_exercises.program_for`` run in
the grader's sandbox (labkit.course.sandbox: the student's cell is hostile until proven otherwise),
with a time and a memory limit, and its verdict in words.  Where no sandbox can be made, only with
``sandboxed=False`` (--unsafe-no-sandbox): a plain child process.

An exercise whose solution returns a kernel file (labkit.course.grading.source_exercises: notebook
03's ``fix``) is graded there instead: its check would compile what the student returned, host code
and all, beside the check's result."""
from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
from pathlib import Path

from ...backends.cpu.compiler import SEED_ENV, cache_dir
from .. import sandbox
from .limits import run_limited
from .run_cells import REPLIES_ENV, REQUESTS_ENV
from .notebook_exercises import NotebookExercise, WrittenQuestion, program_for, student_cell
from .source_exercises import SOURCE_EXERCISES, grade_source

__all__ = ["grade_python_exercise", "written_answer"]


def _row(ex: NotebookExercise, ok: bool, message: str) -> dict:
    return {"exercise": ex.grade_id, "kind": "python", "notebook": ex.notebook, "max_points": ex.points,
            "points": ex.points if ok else 0, "ok": ok, "message": message}


RUN_CELLS = "labkit.course.grading.run_cells"


def _sandbox_args(job: Path, timeout: float, memory_gib) -> dict:
    # The notebook's cells read data/ and benchmarks/results/ where labkit computes them inside the
    # sandbox (its repository root there is sandbox.LABKIT_MOUNT): bound there, read-only.
    return dict(jobs={"/job": job, **sandbox.repository_files(), "/seed": cache_dir()},
                env={"LABKIT_BACKEND": "cpu", "LABKIT_RESULTS_DIR": "/tmp/results", "MPLBACKEND": "Agg",
                     "LABKIT_CACHE_DIR": "/tmp/labkit-cache", SEED_ENV: "/seed", "PYTHONDONTWRITEBYTECODE": "1"},
                limits=sandbox.Limits(seconds=timeout, memory_gib=memory_gib or 6.0, result_bytes=4 << 20))


def _two_sandboxes(job: Path, timeout: float, memory_gib) -> tuple[sandbox.Finished, str | None]:
    """The student's side and the check's side (run_cells --serve and --check), each in a sandbox of
    its own, talking on two pipes; the check's result, and what could not cross, if anything did not."""
    to_student, from_check = os.pipe()
    to_check, from_student = os.pipe()
    args = _sandbox_args(job, timeout, memory_gib)
    student: dict = {}
    serving = threading.Thread(target=lambda: student.update(done=sandbox.run(
        [sys.executable, "-m", RUN_CELLS, "/job/program.json", "--serve"],
        fds={REQUESTS_ENV: to_student, REPLIES_ENV: from_student}, **args)), daemon=True)
    serving.start()
    done = sandbox.run([sys.executable, "-m", RUN_CELLS, "/job/program.json", "-", "--check"],
                       fds={REQUESTS_ENV: from_check, REPLIES_ENV: to_check}, **args)
    serving.join(timeout + 30)
    if student.get("done") is not None and student["done"].limit in ("time", "memory"):
        return student["done"], None          # the student's side ran out: that is the verdict's reason
    crossing = None
    if done.result:
        try:
            r = json.loads(done.result.decode())
            crossing = r.get("crossing") if isinstance(r, dict) else None
        except (ValueError, UnicodeDecodeError):
            pass
    return done, crossing


def grade_python_exercise(ex: NotebookExercise, student_nb: dict | None, *, clean, timeout: float = 300.0,
                          memory_gib: float | None = None, backend: str = "cpu", sandboxed: bool = True,
                          seed: int | None = None) -> dict:
    """{"exercise", "points", "max_points", "ok", "message"} for exercise ``ex`` of ``student_nb``
    (None: the notebook was not submitted).  ``seed``: the student's, from which a source exercise's
    kernel check draws its inputs."""
    where = f"{ex.notebook}, {ex.grade_id}"
    if student_nb is None:
        return _row(ex, False, f"{where}: not submitted (no {ex.notebook} in the submission)")
    program = program_for(ex, student_nb)
    if program is None:
        return _row(ex, False, f"{where}: the solution cell is missing (no cell with grade_id {ex.grade_id!r})")
    note_crossing = None
    with tempfile.TemporaryDirectory(prefix="labkit-grade-") as tmp:
        prog, result = Path(tmp, "program.json"), Path(tmp, "result.json")
        prog.write_text(json.dumps(program))
        if sandboxed:
            Path(tmp).chmod(0o755)
            prog.chmod(0o644)
            spec = SOURCE_EXERCISES.get(ex.grade_id)
            if spec is not None:
                r = grade_source(spec, Path(tmp), _sandbox_args(Path(tmp), timeout, memory_gib), timeout=timeout,
                                 memory_gib=memory_gib, seed=seed)
                return _source_verdict(ex, r, clean, program["solution"])
            done, crossing = _two_sandboxes(Path(tmp), timeout, memory_gib)
            if crossing:
                # The check hands the solution's functions what cannot cross (a model, a stream): it
                # runs beside the solution, in one sandbox, as before; the feedback says so.
                note_crossing = crossing
                done = sandbox.run([sys.executable, "-m", RUN_CELLS, "/job/program.json", "-"], **_sandbox_args(
                    Path(tmp), timeout, memory_gib))
            if done.result:
                result.write_bytes(done.result)
        else:
            env = {**os.environ, "LABKIT_BACKEND": backend, "LABKIT_RESULTS_DIR": str(Path(tmp, "results")),
                   "MPLBACKEND": "Agg"}
            done = run_limited([sys.executable, "-m", "labkit.course.grading.run_cells", str(prog), str(result)],
                               timeout=timeout, memory_gib=memory_gib, env=env, cwd=tmp)
        if done.limit == "time":
            return _row(ex, False, f"{where}: did not finish within {timeout:.0f} s (a loop that never ends?)")
        if done.limit == "memory":
            return _row(ex, False, f"{where}: used more than the {memory_gib:g} GiB of memory a grading process "
                                   "may have (an array far larger than the exercise needs?)")
        if not result.is_file():
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-6:])
            return _row(ex, False, f"{where}: the grading process ended with code {done.returncode} (a crash?):\n{tail}")
        try:
            r = json.loads(result.read_text())
            if not isinstance(r, dict) or r.get("stage") not in ("setup", "solution", "check"):
                raise ValueError("not a grading result")
        except (ValueError, UnicodeDecodeError):
            return _row(ex, False, f"{where}: the grading process's result could not be read")
    row = _verdict(ex, r, clean, program["solution"])
    if note_crossing:
        row["message"] += (f"\n(checked beside the solution in one sandbox: {note_crossing}, which cannot cross "
                           "to another process)")
    return row


def _source_verdict(ex: NotebookExercise, r: dict, clean, solution: str) -> dict:
    """The row of a source exercise: its student's side's failure, or the verdict made here."""
    if r["stage"] != "kernel":
        return _verdict(ex, r, clean, solution)
    if r.get("not_attempted") and "raise NotImplementedError()" in solution:
        return _row(ex, False, f"{ex.notebook}, {ex.grade_id}: not attempted (the solution still raises "
                               "NotImplementedError)")
    return _row(ex, r["ok"], f"{ex.notebook}, {ex.grade_id}: {r['message']}")


def _verdict(ex: NotebookExercise, r: dict, clean, solution: str) -> dict:
    where = f"{ex.notebook}, {ex.grade_id}"
    note = ""
    if r.get("put_back"):
        note = ("\n(the solution changed " + ", ".join(r["put_back"][:8]) +
                "; put back before the check: a solution defines its own names only)")
    if r["stage"] == "setup":
        return _row(ex, False, f"{where}: the notebook's own cells before the exercise failed (not the "
                               f"student's code; tell the instructor):\n{r['error']}")
    if r["stage"] == "solution":
        if r.get("not_attempted"):
            return _row(ex, False, f"{where}: not attempted (the solution cell raises NotImplementedError)")
        return _row(ex, False, f"{where}: the solution cell fails:\n{r['error']}{note}")
    got, want = clean(r["stdout"]), clean(ex.expected)
    if r["error"] is not None:
        if r["error"].rstrip().endswith("NotImplementedError") and "raise NotImplementedError()" in solution:
            return _row(ex, False, f"{where}: not attempted (the solution cell still raises NotImplementedError)")
        if r.get("failed"):
            # A wrong answer: the check's own words (what it prints on a right one, False in place of
            # True, or what is wrong), after anything it printed before.
            return _row(ex, False, f"{where}: the check fails:\n{got}{r['failed']}{note}")
        return _row(ex, False, f"{where}: the check fails with an error:\n{got}{r['error']}{note}")
    if got != want:
        extra = all(line in got.splitlines() for line in want.splitlines())
        return _row(ex, False, f"{where}: the check printed\n{got.rstrip()}\nwhere a right solution prints\n"
                               f"{want.rstrip()}" + ("\n(the lines the solution printed itself while the check "
                                                     "ran count too: remove debugging prints)" if extra else "")
                    + note)
    return _row(ex, True, f"{where}: {got.strip()}{note}")


def written_answer(q: WrittenQuestion, student_nb: dict | None) -> dict:
    """A written question: graded by hand; the row carries the student's answer for the grader."""
    answer = student_cell(student_nb, q.grade_id, None, cell_type="markdown")
    if answer is None or not answer.strip() or answer.strip() == "YOUR ANSWER HERE":
        text = "(no answer)"
    else:
        text = answer.strip()
    return {"exercise": q.grade_id, "kind": "written", "notebook": q.notebook, "max_points": q.points,
            "points": None, "ok": None, "message": f"{q.notebook}, {q.grade_id} (graded by hand):\n\n"
                                                   f"Question:\n{q.question.strip()}\n\nAnswer:\n{text}"}
