"""Grade a folder of submissions: `python -m labkit.grade SUBMISSIONS_DIR [--out DIR]`.

    SUBMISSIONS_DIR/
        alice/...                 one sub-folder per student (or alice.zip, bob.tar.gz: archives are
        bob.zip                   unpacked safely first), holding the student's notebooks and the .cu
                                  files of the kernel exercises, anywhere below it, found by file name

Two kinds of exercise, each graded by the instructor's check, never by anything of the submission's:

* kernel exercises (notebooks/exercises/*.cu): the check of labkit.course.kernel_checks (odd shapes,
  a poisoned output, the float64 reference; on the CPU executor the memory, barrier and race checks)
  runs on the *student's* .cu file;
* the whole-program exercise of notebook 02b (notebooks/exercises/02_host_code.cu: the host side of
  the naive convolution): the student's regions spliced into the instructor's program, which the
  sandbox builds and runs on the CPU executor under the memory check, on the student's own sizes and
  seeds; y is judged here against the float64 reference (labkit.course.host_program);
* Python exercises (a solution cell followed by its locked check cell in notebooks 01-10, 12 and 13): the
  instructor's cells the exercise needs, then the student's solution cell, then the instructor's
  check cell, in a fresh process (labkit.course.grading.notebook_exercises): deleted, skipped, edited or
  re-ordered check cells and forged outputs change nothing.  One whose solution returns a kernel file
  (notebook 03's ``fix``) is graded as a kernel exercise instead: the function in one sandbox, the
  kernels' bodies it returned in another (labkit.course.grading.source_exercises).

Written questions (markdown answer cells) are graded by hand: the feedback page carries the answer.

Every exercise of every student runs in a process of its own with a time limit and a memory limit: a
crash, a hang or an endless loop fails that exercise, with the reason, and the rest go on, one
process per core.  The checks run on the CPU executor on every machine: its memory, barrier and
race checks catch what a GPU can let pass (an out-of-bounds write that lands in another buffer, a
missing barrier on a lucky run), so the points are the same anywhere; ``--backend cuda`` runs each
passing kernel's check again on the GPU (a wrong answer there costs the points too) and adds a
leaderboard of the passing kernels' op times.

Writes into --out (default SUBMISSIONS_DIR/../grades): gradebook.csv (a row per student, points per
exercise), gradebook.json (the same with every check's words), feedback/<student>.md, and with
``--backend cuda`` leaderboard.md.  ``--slurm`` writes a Slurm array job instead (one task per
student, then a merge: labkit.course.grading.slurm).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .grading import gradebook, slurm, synthetic
from .grading.limits import DEFAULT_MEMORY_GIB, run_limited
from .grading.notebook_exercises import NotebookError, exercises_of, read_notebook, sanitizer, written_questions_of
from .grading.python_exercises import grade_python_exercise, written_answer
from .grading.submissions import Student, find_file, name_problem, students_in
from ..device_query import device
from . import kernel_checks, sandbox
from ..results import REPO_ROOT
from .regions import RegionError
from .series import notebooks as series_notebooks
from .sandboxed import sandboxed_program_runner, sandboxed_runner, spliced_source

__all__ = ["EXERCISES", "Exercise", "BACKENDS", "INSTRUCTOR_NOTEBOOKS", "grade_file", "grade_folder", "main"]

INSTRUCTOR_NOTEBOOKS = REPO_ROOT / "notebooks"


@dataclass(frozen=True)
class Exercise:
    """A kernel exercise: its file name, the kernel, the check (a function of labkit.course.kernel_checks
    and its keyword arguments, by name: they cross a process boundary), points; ``program``: the file
    is a whole CUDA program (host code and kernel), built and run as one in the sandbox
    (labkit.course.host_program), not a kernel the check launches."""
    file: str
    kernel: str
    check: str
    points: int
    options: tuple = ()
    program: bool = False

    def check_options(self) -> dict:
        """The check's keyword arguments, names resolved (shared_mem names a function of kernel_checks)."""
        return {k: getattr(kernel_checks, v) if k == "shared_mem" else v for k, v in self.options}


EXERCISES: dict[str, Exercise] = {
    "02_conv_naive": Exercise("02_conv_naive.cu", "conv_naive_exercise", "check_conv_kernel", 2),
    "03_conv_tiled": Exercise("03_conv_tiled.cu", "conv_tiled_exercise", "check_conv_kernel", 3,
                              (("shared_mem", "tile_bytes"), ("checks", "memory,barrier,race"))),
    "04_conv_constant": Exercise("04_conv_constant.cu", "conv_constant_exercise", "check_constant_kernel", 2),
    "05_conv_rows": Exercise("05_conv_rows.cu", "conv_rows_exercise", "check_rows_kernel", 3),
    "06_im2col": Exercise("06_im2col.cu", "im2col_exercise", "check_im2col_kernel", 2),
    "07_conv_pool": Exercise("07_conv_pool.cu", "conv_pool_exercise", "check_conv_pool_kernel", 2),
    "08_lrn": Exercise("08_lrn.cu", "lrn_exercise", "check_lrn_kernel", 2),
    "09_preprocess": Exercise("09_preprocess.cu", "preprocess_exercise", "check_preprocess_kernel", 2),
    "10_conv_backward_data": Exercise("10_conv_backward_data.cu", "conv3x3_bwd_data_exercise",
                                      "check_backward_data_kernel", 2),
    "11_depthwise": Exercise("11_depthwise.cu", "depthwise_exercise", "check_depthwise_kernel", 2),
    "12_conv_transpose": Exercise("12_conv_transpose.cu", "conv_transpose_exercise", "check_conv_transpose_kernel",
                                  2),
    "02_host_code": Exercise("02_host_code.cu", "conv_naive", "check_host_program", 2, program=True),
}


# The leaderboard's shape per exercise (the check's options for its timed run): a layer of the
# series at a batch where the kernel, not the launch, takes the time.  An exercise not named here is
# timed on its check's last case.
LEADERBOARD = {
    "02_conv_naive": {"layers": [dict(N=256, C=6, H=22, W=22, M=16, K=5)]},
    "03_conv_tiled": {"layers": [dict(N=256, C=6, H=22, W=22, M=16, K=5)]},
    "04_conv_constant": {"layers": [dict(N=256, C=6, H=22, W=22, M=16, K=5)]},
    "05_conv_rows": {"cases": [(256, 6, 22, 22, 16, 5)]},
    "06_im2col": {"cases": [(32, 64, 27, 27, 5, 1, 2)]},
    "07_conv_pool": {"cases": [(1000, 1, 48, 48, 6, 5)]},
    "08_lrn": {"cases": [(64, 96, 55, 55, 2)]},
    "09_preprocess": {"cases": [(64, 227, 227, 1056)]},       # 8 blocks of 128 threads per SM of an H100
    "10_conv_backward_data": {"cases": [(256, 16, 28, 28, 16)]},
    "11_depthwise": {"cases": [(32, 144, 56, 56, 1)]},
    "12_conv_transpose": {"cases": [(16, 64, 32, 32, 32, (4, 4), (2, 2), (1, 1), (1, 1), (0, 0))]},
}


def _check_in_this_process(name: str, path: str, time_it: bool = False, seed: int | None = None) -> dict:
    """Run exercise ``name``'s check on ``path`` (in the child process), on the shapes drawn from
    ``seed``: {"ok", "message"}; with ``time_it`` (a GPU), then timed on the leaderboard's shape: also
    "ms", "timed_case", "device"."""
    ex = EXERCISES[name]
    rng = np.random.default_rng(seed)
    options = {**ex.check_options(), **kernel_checks.fresh_options(ex.check, rng), "rng": rng}
    check = getattr(kernel_checks, ex.check)
    verdict = check(path, ex.kernel, **options)
    if not time_it or not verdict.ok:
        return {"ok": bool(verdict.ok), "message": verdict.message}
    with kernel_checks.timed():
        board = check(path, ex.kernel, **{**ex.check_options(), **LEADERBOARD.get(name, {})})
    return {"ok": bool(board.ok), "message": board.message, "ms": board.ms, "timed_case": board.timed_case,
            "device": device().label}


BACKENDS = ("cpu", "cuda")
UNSAFE_NOTE = ("graded WITHOUT a sandbox (--unsafe-no-sandbox): the students' code ran with the grader's "
               "rights, and a verdict may have been forged")


def grade_file(name: str, path: str | os.PathLike | None, *, timeout: float = 120.0, backend: str = "cpu",
               memory_gib: float | None = DEFAULT_MEMORY_GIB, time_it: bool = False, seed: int | None = None,
               sandboxed: bool = True, exercises_dir: str | os.PathLike = INSTRUCTOR_NOTEBOOKS / "exercises") -> dict:
    """One kernel exercise of one student: {"exercise", "points", "max_points", "ok", "message"}.

    The student's regions are spliced into the instructor's file (``exercises_dir``) and checked on
    shapes drawn from ``seed`` (the student's own), never the notebook's: with ``sandboxed`` the kernel
    runs in the sandbox (labkit.course.sandboxed: ``timeout`` seconds, ``memory_gib`` GiB) on the CPU
    executor, whose memory, barrier and race checks give the points on any machine, and this process
    judges its outputs; without (--unsafe-no-sandbox), a child process checks the spliced file.  With
    ``backend`` "cuda" a passing kernel runs its check again on the GPU, compiled by NVRTC (device
    code only: the spliced file), and with ``time_it`` is timed there by the grader's own child
    ("ms", "timed_case", "device"); a wrong answer there costs the points too, a run that fails to
    finish only the leaderboard entry.  No file: 0 points, "not submitted"."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if time_it and backend != "cuda":
        raise ValueError("the leaderboard times kernels on a GPU (backend 'cuda'): the CPU executor's times are "
                         "not a GPU's, and a time measured where the student's code runs could be forged")
    ex = EXERCISES[name]
    row = {"exercise": name, "kind": "kernel", "max_points": ex.points, "points": 0, "ok": False}
    if path is None:
        return {**row, "message": f"{ex.file}: not submitted"}
    instructor = Path(exercises_dir) / ex.file
    if sandboxed:
        rng = np.random.default_rng(seed)              # the shapes, then the inputs: the same again for the seed
        options = {**ex.check_options(), **kernel_checks.fresh_options(ex.check, rng), "rng": rng}
        limits = sandbox.Limits(seconds=timeout, memory_gib=memory_gib or DEFAULT_MEMORY_GIB)
        runner = (sandboxed_program_runner(instructor, limits=limits) if ex.program
                  else sandboxed_runner(instructor, limits=limits))
        verdict = getattr(kernel_checks, ex.check)(path, ex.kernel, **options, runner=runner)
        result = {"ok": bool(verdict.ok), "message": verdict.message}
    else:
        result, failed = _spliced_child(name, instructor, path, False, timeout, "cpu", memory_gib, seed)
        if failed:
            return {**row, "message": f"{ex.file}: {failed}"}
    row = {**row, **result, "points": ex.points if result["ok"] else 0}
    if result["ok"] and backend == "cuda" and not ex.program:      # a whole program runs on the executor only
        # A second process, on the spliced file (the student's regions in the instructor's file), which
        # CuPy compiles with NVRTC: device code only.  A GPU run that hangs or crashes costs the
        # leaderboard entry, never the points the executor's checks gave; a wrong answer there is wrong.
        again, failed = _spliced_child(name, instructor, path, time_it, timeout, backend, memory_gib, seed)
        if failed:
            row["message"] += f"\n(not run on the {backend} backend: {failed})"
        elif not again["ok"]:
            row.update(ok=False, points=0, message=row["message"] + f"\nbut on the {backend} backend: {again['message']}")
        elif time_it:
            row.update({k: again[k] for k in ("ms", "timed_case", "device")})
    return row


def _spliced_child(name: str, instructor: Path, path, time_it: bool, timeout: float, backend: str, memory_gib,
                   seed: int | None) -> tuple[dict | None, str | None]:
    """``_child`` on the student's regions spliced into the instructor's file (RegionError: the reason)."""
    with tempfile.TemporaryDirectory(prefix="labkit-spliced-") as tmp:
        spliced = Path(tmp) / instructor.name
        try:
            spliced.write_text(spliced_source(instructor, path))
        except RegionError as exc:
            return None, str(exc)
        return _child(name, spliced, time_it, timeout, backend, memory_gib, seed)


def _child(name: str, path, time_it: bool, timeout: float, backend: str, memory_gib,
           seed: int | None) -> tuple[dict | None, str | None]:
    """(the verdict of a check run in a child process, None) or (None, why there is none)."""
    with tempfile.TemporaryDirectory(prefix="labkit-grade-") as tmp:
        verdict = Path(tmp, "verdict.json")
        # The verdict comes back in a file: whatever the kernel prints (printf on the CPU executor) is ignored.
        done = run_limited([sys.executable, "-m", "labkit.grade", "--one", name, os.fspath(path), str(verdict)]
                           + (["--time"] if time_it else []) + ([] if seed is None else ["--seed", str(seed)]),
                           timeout=timeout, memory_gib=memory_gib, cwd=tmp,
                           env={**os.environ, "LABKIT_BACKEND": backend, "LABKIT_RESULTS_DIR": tmp})
        if done.limit == "time":
            return None, (f"the check did not finish within {timeout:.0f} s "
                          "(a kernel that never ends: a loop whose exit is never reached?)")
        if done.limit == "memory":
            return None, f"the check used more than {memory_gib:g} GiB of memory"
        if done.returncode != 0 or not verdict.is_file():
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-6:])
            return None, f"the check's process ended with code {done.returncode} (a crash?):\n{tail}"
        return json.loads(verdict.read_text()), None


def student_seed(run_seed: int, name: str) -> int:
    """A student's own seed, from the run's and the student's name: the same shapes on a re-run (or
    a Slurm task) with the same run seed, other shapes for every student."""
    digest = hashlib.sha256(f"{run_seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def _jobs(student: Student, names: set | None, notebooks: Path, backend: str, opts: dict, cache: dict) -> list:
    """The grading jobs of one student: (a function of no arguments that returns a result row)."""
    jobs = []
    for name, ex in EXERCISES.items():
        if names is None or name in names:
            path = find_file(student.folder, ex.file)
            jobs.append(lambda n=name, p=path: grade_file(
                n, p, timeout=opts["timeout"], backend=backend, memory_gib=opts["memory_gib"],
                time_it=opts["leaderboard"], seed=student_seed(opts["seed"], student.name),
                sandboxed=opts["sandboxed"], exercises_dir=notebooks / "exercises"))
    for nb_path in series_notebooks(notebooks):
        exercises, questions = cache[nb_path]
        wanted = [e for e in exercises if names is None or e.grade_id in names]
        asked = [q for q in questions if names is None or q.grade_id in names]
        if not wanted and not asked:
            continue
        found = find_file(student.folder, nb_path.name)
        student_nb, problem = None, None
        if found is not None:
            try:
                student_nb = read_notebook(found)
            except NotebookError as exc:
                problem = str(exc)
        for e in wanted:
            if problem:
                jobs.append(lambda e=e, why=problem: {"exercise": e.grade_id, "kind": "python", "notebook": e.notebook,
                                                      "max_points": e.points, "points": 0, "ok": False, "message": why})
            else:
                jobs.append(lambda e=e, nb=student_nb: grade_python_exercise(
                    e, nb, clean=opts["clean"], timeout=opts["notebook_timeout"], memory_gib=opts["memory_gib"],
                    backend=backend, sandboxed=opts["sandboxed"], seed=student_seed(opts["seed"], student.name)))
        for q in asked:
            jobs.append(lambda q=q, nb=student_nb: written_answer(q, nb))
    return jobs


def instructor_exercises(notebooks: Path) -> dict:
    """{notebook path: (its Python exercises, its written questions)} of the instructor's notebooks."""
    return {p: (exercises_of(p), written_questions_of(p)) for p in series_notebooks(notebooks)}


def grade_folder(submissions: str | os.PathLike, out: str | os.PathLike, *, exercises=None, timeout: float = 120.0,
                 notebook_timeout: float = 300.0, memory_gib: float | None = DEFAULT_MEMORY_GIB,
                 workers: int | None = None, backend: str = "cpu", students=None,
                 notebooks: str | os.PathLike = INSTRUCTOR_NOTEBOOKS, leaderboard: bool | None = None,
                 seed: int | None = None, unsafe_no_sandbox: bool = False) -> list[dict]:
    """Grade every student of ``submissions`` (or those named in ``students``) on ``exercises`` (kernel
    exercise names and Python exercise or written question grade_ids; default: all); write the
    gradebook and feedback into ``out``, and with ``leaderboard`` (default: on a GPU backend) the
    passing kernels' op times.  ``seed`` (default: drawn now) decides every student's shapes and is
    written into the gradebook, so that a re-run draws the same.  Kernel exercises run in the sandbox
    (labkit.course.sandbox); where none can be made the run is refused, unless ``unsafe_no_sandbox``,
    which the gradebook then says of every student.  Returns one row per student."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    names = set(exercises) if exercises else None
    submissions, out, notebooks = Path(submissions), Path(out), Path(notebooks)
    if not notebooks.is_dir():
        raise ValueError(f"{notebooks}: the instructor's notebooks are not there (name them with --notebooks)")
    cache = instructor_exercises(notebooks)
    runs_code = names is None or bool(names & (set(EXERCISES) | {e.grade_id for ex, _ in cache.values() for e in ex}))
    if not unsafe_no_sandbox and runs_code and sandbox.unavailable():
        raise RuntimeError(f"students' code is graded in a sandbox, and none can be made here: "
                           f"{sandbox.unavailable()}.  Grade where bubblewrap runs, or pass --unsafe-no-sandbox "
                           "(the students' code then runs with your rights; the gradebook says so)")
    seed = secrets.randbits(63) if seed is None else int(seed)
    opts = {"timeout": timeout, "notebook_timeout": notebook_timeout, "memory_gib": memory_gib,
            "clean": sanitizer(notebooks / "nbval_sanitize.cfg"),
            "leaderboard": backend == "cuda" if leaderboard is None else leaderboard,
            "seed": seed, "sandboxed": not unsafe_no_sandbox}
    if opts["leaderboard"] and backend != "cuda":
        raise ValueError("the leaderboard times kernels on a GPU: pass backend='cuda' (--backend cuda)")
    with tempfile.TemporaryDirectory(prefix="labkit-submissions-") as unpacked:
        everyone = students_in(submissions, Path(unpacked))
        if students is not None:
            missing = set(students) - {s.name for s in everyone}
            if missing:
                raise ValueError(f"no submission for {sorted(missing)} in {submissions}")
            everyone = [s for s in everyone if s.name in set(students)]
        jobs = [(s, job) for s in everyone for job in _jobs(s, names, notebooks, backend, opts, cache)]
        with ThreadPoolExecutor(workers or os.cpu_count() or 1) as pool:
            results = list(pool.map(lambda j: j[1](), jobs))
    rows = [gradebook.student_row(s.name, [r for (t, _), r in zip(jobs, results) if t is s], s.problem)
            for s in everyone]
    for r in rows:
        r["seed"] = student_seed(seed, r["student"])
        r["run_seed"] = seed
        r["sandbox"] = "bubblewrap" if not unsafe_no_sandbox else UNSAFE_NOTE
    gradebook.write_gradebook(rows, out)
    if opts["leaderboard"]:
        gradebook.write_leaderboard([{"student": r["student"], "exercise": n, "ms": e["ms"], "what": e["timed_case"],
                                      "device": e["device"]} for r in rows for n, e in r["exercises"].items()
                                     if e.get("ms") is not None], out)
    return rows


def _all_names(notebooks: Path) -> list[str]:
    cache = instructor_exercises(notebooks)
    return sorted(list(EXERCISES) + [e.grade_id for ex, qs in cache.values() for e in ex + qs])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m labkit.grade", description=__doc__.splitlines()[0])
    ap.add_argument("submissions", nargs="?", help="a folder with one sub-folder or archive per student")
    ap.add_argument("--out", help="where the gradebook and feedback go (default: SUBMISSIONS/../grades)")
    ap.add_argument("--exercises", nargs="+", metavar="NAME",
                    help="grade only these (kernel exercise names, Python exercise or question grade_ids; --list)")
    ap.add_argument("--list", action="store_true", help="list the exercises and questions, then stop")
    ap.add_argument("--notebooks", default=str(INSTRUCTOR_NOTEBOOKS),
                    help="the instructor's notebooks (default: the series' own)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per kernel check (default 120)")
    ap.add_argument("--notebook-timeout", type=float, default=300.0,
                    help="seconds per Python exercise, its notebook's set-up included (default 300)")
    ap.add_argument("--memory-gib", type=float, default=DEFAULT_MEMORY_GIB,
                    help=f"resident memory per grading process (default {DEFAULT_MEMORY_GIB:g}; 0: no limit)")
    ap.add_argument("--workers", type=int, help="grading processes side by side (default: one per core)")
    ap.add_argument("--backend", default="cpu", choices=BACKENDS,
                    help="where the checks run (default cpu: the CPU executor, with its memory, barrier and race "
                         "checks)")
    ap.add_argument("--leaderboard", action=argparse.BooleanOptionalAction, default=None,
                    help="time every passing kernel on a larger shape and rank them (default: with --backend cuda)")
    ap.add_argument("--student", action="append", help="grade only this student (repeatable; a Slurm task's)")
    ap.add_argument("--slurm", action="store_true",
                    help="write a Slurm array job (one task per student) and its merge step into OUT/slurm instead")
    ap.add_argument("--merge", metavar="PARTS", help="join the gradebooks of PARTS/*/ into --out (the merge step)")
    ap.add_argument("--synthetic", metavar="DIR",
                    help="write the synthetic submissions (labkit.course.grading.synthetic) and their expected points "
                         "into DIR, then stop")
    ap.add_argument("--seed", type=int, help="the run's seed: every student's shapes are drawn from it and their "
                                             "name (default: a new one, written into the gradebook)")
    ap.add_argument("--unsafe-no-sandbox", action="store_true",
                    help="grade kernel exercises without the sandbox, where bubblewrap cannot run: the students' code "
                         "then runs with your rights (the gradebook says so)")
    ap.add_argument("--one", nargs=3, metavar=("EXERCISE", "FILE", "VERDICT"), help=argparse.SUPPRESS)
    ap.add_argument("--time", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:   # the child process: one kernel check, its verdict into a file
        Path(args.one[2]).write_text(json.dumps(_check_in_this_process(args.one[0], args.one[1], args.time,
                                                                       args.seed)))
        return 0
    notebooks = Path(args.notebooks)
    if args.list:
        print("\n".join(_all_names(notebooks)))
        return 0
    if args.synthetic:
        python_points = {e.grade_id: e.points for ex, _ in instructor_exercises(notebooks).values() for e in ex}
        expected = synthetic.write_synthetic(Path(args.synthetic), notebooks, EXERCISES, python_points)
        print(f"wrote {Path(args.synthetic) / 'submissions'}; the points each must get: {json.dumps(expected)}")
        return 0
    if args.merge:
        if not args.out:
            ap.error("--merge needs --out")
        rows = gradebook.merge(sorted(p for p in Path(args.merge).iterdir() if (p / "gradebook.json").is_file()),
                               Path(args.out))
        print(f"merged {len(rows)} students into {Path(args.out) / 'gradebook.csv'}")
        return 0
    if not args.submissions:
        ap.error("name the folder of submissions")
    sub = Path(args.submissions)
    if not sub.is_dir():
        print(f"{sub}: not a folder of submissions")
        return 2
    if args.exercises:
        unknown = set(args.exercises) - set(_all_names(notebooks))
        if unknown:
            ap.error(f"unknown exercises {sorted(unknown)} (see --list)")
    out = Path(args.out) if args.out else sub.resolve().parent / "grades"
    if args.slurm:
        with tempfile.TemporaryDirectory() as tmp:
            everyone = [s.name for s in students_in(sub, Path(tmp))]
        names = [s for s in everyone if name_problem(s) is None]
        if not names:
            print(f"{sub}: no student whose name can go into a Slurm job")
            return 2
        refused = [s for s in everyone if name_problem(s) is not None]
        if refused:
            # Their rows (no points, the reason) now, as a part the merge step joins in: a name the job
            # cannot carry never reaches it.  ".refused" is no student's: a name cannot start with ".".
            grade_folder(sub, out / "parts" / ".refused", exercises=args.exercises, students=refused, notebooks=notebooks)
        passed = ["--timeout", str(args.timeout), "--notebook-timeout", str(args.notebook_timeout),
                  "--memory-gib", str(args.memory_gib), "--backend", args.backend, "--notebooks", str(notebooks.resolve())]
        passed += ["--exercises", *args.exercises] if args.exercises else []
        passed += [] if args.leaderboard is None else ["--leaderboard" if args.leaderboard else "--no-leaderboard"]
        passed += ["--seed", str(secrets.randbits(63) if args.seed is None else args.seed)]   # one seed for every task
        passed += ["--unsafe-no-sandbox"] if args.unsafe_no_sandbox else []
        folder = slurm.write_slurm(sub, out, names, passed, memory_gib=max(args.memory_gib, 4.0) + 2)
        print(f"wrote {folder}: {len(names)} tasks; submit with: sh {folder / 'submit.sh'}")
        return 0
    if args.unsafe_no_sandbox:
        print(f"WARNING: {UNSAFE_NOTE}", file=sys.stderr)
    rows = grade_folder(sub, out, exercises=args.exercises, timeout=args.timeout,
                        notebook_timeout=args.notebook_timeout, memory_gib=args.memory_gib or None,
                        workers=args.workers, backend=args.backend, students=args.student, notebooks=notebooks,
                        leaderboard=args.leaderboard, seed=args.seed, unsafe_no_sandbox=args.unsafe_no_sandbox)
    for r in rows:
        print(f"{r['student']:20s} {r['points']:3d} / {r['max_points']}" + (f"  ({r['problem']})" if r["problem"] else ""))
    print(f"wrote {out / 'gradebook.csv'}, {out / 'gradebook.json'} and {out / 'feedback'}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
