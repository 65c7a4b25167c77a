"""Grade a folder of students' kernel exercises: `python -m labkit.grade SUBMISSIONS_DIR [--out DIR]`.

    SUBMISSIONS_DIR/
        alice/exercises/02_conv_naive.cu     one sub-folder per student, holding the .cu files of the
        alice/exercises/11_depthwise.cu      kernel exercises (anywhere below it, by file name)
        bob/...

Each exercise of each student is checked by the instructor's check (labkit.ladder.kernel_exercise:
odd shapes, a poisoned output, the float64 reference, on the CPU executor the memory, barrier and
race checks) run on the *student's* .cu file -- the checks and the shapes come from this package,
never from the submission, so nothing a student writes outside the kernel changes the verdict.
Each check runs in a process of its own with a time limit: a kernel that crashes, hangs or loops
forever fails that exercise, with the reason, and the others go on.  Checks run side by side, one
per core.  They run on the CPU executor (``--backend cpu``, the default), also on a machine with a
GPU: its memory, barrier and race checks catch what a GPU can let pass (an out-of-bounds write into
memory nobody looks at, a missing barrier that happens to work on one run); ``--backend cuda`` runs
them on the GPU instead.

Writes into --out (default SUBMISSIONS_DIR/../grades): gradebook.csv (a row per student, points per
exercise and the total), gradebook.json (the same with every check's words) and feedback/<student>.md
(what passed, what failed and why, in the check's words).

This grades the CUDA C exercises (notebooks/exercises/*.cu).  The Python exercises inside the
notebooks are graded by their check cells when the instructor re-runs a notebook.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .ladder import kernel_exercise

__all__ = ["EXERCISES", "Exercise", "BACKENDS", "grade_file", "grade_folder", "main"]


@dataclass(frozen=True)
class Exercise:
    """A kernel exercise: its file name, the kernel, the check (a function of labkit.ladder.kernel_exercise
    and its keyword arguments, by name: they cross a process boundary), points."""
    file: str
    kernel: str
    check: str
    points: int
    options: tuple = ()


EXERCISES: dict[str, Exercise] = {
    "02_conv_naive": Exercise("02_conv_naive.cu", "conv_naive_exercise", "check_conv_kernel", 2),
    "03_conv_tiled": Exercise("03_conv_tiled.cu", "conv_tiled_exercise", "check_conv_kernel", 3,
                              (("shared_mem", "tile_bytes"), ("checks", "memory,barrier,race"))),
    "06_im2col": Exercise("06_im2col.cu", "im2col_exercise", "check_im2col_kernel", 2),
    "08_lrn": Exercise("08_lrn.cu", "lrn_exercise", "check_lrn_kernel", 2),
    "10_conv_backward_data": Exercise("10_conv_backward_data.cu", "conv3x3_bwd_data_exercise",
                                      "check_backward_data_kernel", 2),
    "11_depthwise": Exercise("11_depthwise.cu", "depthwise_exercise", "check_depthwise_kernel", 2),
}


def _check_in_this_process(name: str, path: str) -> dict:
    """Run exercise ``name``'s check on ``path`` (in the child process): {"ok", "message"}."""
    ex = EXERCISES[name]
    options = {k: getattr(kernel_exercise, v) if k == "shared_mem" else v for k, v in ex.options}
    verdict = getattr(kernel_exercise, ex.check)(path, ex.kernel, **options)
    return {"ok": bool(verdict.ok), "message": verdict.message}


BACKENDS = ("cpu", "cuda")


def grade_file(name: str, path: str | os.PathLike | None, *, timeout: float = 120.0, backend: str = "cpu") -> dict:
    """One exercise of one student: {"exercise", "points", "max_points", "ok", "message"}.  The check
    runs in a child process (``timeout`` seconds at most) on ``backend``; no file: 0 points, "not
    submitted"."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    ex = EXERCISES[name]
    row = {"exercise": name, "max_points": ex.points, "points": 0, "ok": False}
    if path is None:
        return {**row, "message": f"{ex.file}: not submitted"}
    cmd = [sys.executable, "-m", "labkit.grade", "--one", name, os.fspath(path)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, "LABKIT_BACKEND": backend})
    except subprocess.TimeoutExpired:
        return {**row, "message": f"{ex.file}: the check did not finish within {timeout:.0f} s "
                                  "(a kernel that never ends: a loop whose exit is never reached?)"}
    result = None
    for line in reversed(r.stdout.splitlines()):
        if line.startswith("{"):
            try:
                result = json.loads(line)
                break
            except json.JSONDecodeError:
                continue
    if r.returncode != 0 or result is None:
        tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-6:])
        return {**row, "message": f"{ex.file}: the check's process ended with code {r.returncode} "
                                  f"(a crash?):\n{tail}"}
    return {**row, "ok": result["ok"], "points": ex.points if result["ok"] else 0, "message": result["message"]}


def _find(folder: Path, file: str) -> Path | None:
    hits = sorted(p for p in folder.rglob(file) if p.is_file() and not p.is_symlink())
    return hits[0] if hits else None


def grade_folder(submissions: str | os.PathLike, out: str | os.PathLike, *, exercises=None,
                 timeout: float = 120.0, workers: int | None = None, backend: str = "cpu") -> list[dict]:
    """Grade every student sub-folder of ``submissions`` on ``exercises`` (default: all); write the
    gradebook and feedback into ``out``.  Returns one dict per student."""
    submissions, out = Path(submissions), Path(out)
    names = list(exercises or EXERCISES)
    students = sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith("."))
    jobs = [(s, n, _find(s, EXERCISES[n].file)) for s in students for n in names]
    with ThreadPoolExecutor(workers or os.cpu_count() or 1) as pool:
        results = list(pool.map(lambda j: grade_file(j[1], j[2], timeout=timeout, backend=backend), jobs))
    book: dict[str, dict] = {s.name: {"student": s.name, "exercises": {}} for s in students}
    for (s, n, _), res in zip(jobs, results):
        book[s.name]["exercises"][n] = res
    rows = []
    for entry in book.values():
        entry["points"] = sum(r["points"] for r in entry["exercises"].values())
        entry["max_points"] = sum(r["max_points"] for r in entry["exercises"].values())
        rows.append(entry)
    _write(rows, names, out)
    return rows


def _write(rows: list[dict], names: list[str], out: Path) -> None:
    (out / "feedback").mkdir(parents=True, exist_ok=True)
    with open(out / "gradebook.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student"] + names + ["total", "max"])
        for r in rows:
            w.writerow([r["student"]] + [r["exercises"][n]["points"] for n in names] + [r["points"], r["max_points"]])
    (out / "gradebook.json").write_text(json.dumps(rows, indent=1))
    for r in rows:
        lines = [f"# Kernel exercises: {r['student']}", "", f"**{r['points']} of {r['max_points']} points**", ""]
        for n in names:
            e = r["exercises"][n]
            lines += [f"## {n}: {e['points']} / {e['max_points']} ({'passed' if e['ok'] else 'not passed'})", "",
                      "```", e["message"], "```", ""]
        (out / "feedback" / f"{r['student']}.md").write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m labkit.grade", description=__doc__.splitlines()[0])
    ap.add_argument("submissions", nargs="?", help="a folder with one sub-folder per student")
    ap.add_argument("--out", help="where the gradebook and feedback go (default: SUBMISSIONS/../grades)")
    ap.add_argument("--exercises", nargs="+", choices=list(EXERCISES))
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per check (default 120)")
    ap.add_argument("--workers", type=int)
    ap.add_argument("--backend", default="cpu", choices=BACKENDS,
                    help="where the checks run (default cpu: the CPU executor, with its memory, barrier and race "
                         "checks)")
    ap.add_argument("--one", nargs=2, metavar=("EXERCISE", "FILE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:   # the child process: one check, its verdict as one JSON line
        print(json.dumps(_check_in_this_process(*args.one)))
        return 0
    if not args.submissions:
        ap.error("name the folder of submissions")
    sub = Path(args.submissions)
    if not sub.is_dir():
        print(f"{sub}: not a folder of submissions")
        return 2
    out = Path(args.out) if args.out else sub.resolve().parent / "grades"
    rows = grade_folder(sub, out, exercises=args.exercises, timeout=args.timeout, workers=args.workers,
                        backend=args.backend)
    for r in rows:
        print(f"{r['student']:20s} {r['points']:3d} / {r['max_points']}")
    print(f"wrote {out / 'gradebook.csv'}, {out / 'gradebook.json'} and {out / 'feedback'}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
