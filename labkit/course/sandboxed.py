"""Kernel checks for a grader: the student's kernel runs in the sandbox, the verdict is made here.

    runner = sandboxed_runner(Path("notebooks/exercises/02_conv_naive.cu"))
    verdict = kernel_checks.check_conv_kernel(student_file, "conv_naive_exercise", layers=fresh, runner=runner)

For each check the grader (this process):

1. splices the student's regions into the instructor's file (labkit.course.regions: nothing else of
   the student's file is taken, and a region that could reach outside the kernel's body is refused);
2. compiles that file with NVRTC, CUDA's device compiler, where it is installed: code that is not
   device code (a call of a host function) is refused before anything runs;
3. builds the check's cases itself (fresh inputs, NaN-poisoned outputs, float64 answers), writes the
   inputs into a job folder, and runs ``labkit.course.kernel_runner`` in the sandbox
   (labkit.course.sandbox) on them: the CPU executor, with the check's memory, barrier and race
   checks, and a compile cache of its own that starts empty;
4. reads back the outputs (at most what the cases' outputs take, every array's header checked before
   it is read) and compares each with its answer, here.

The sandbox never sees an answer and nothing it writes is taken as a verdict; what it prints only
reaches the student's feedback after every path outside the submission is cut from it.

``file_runner`` does steps 2 to 4 for a kernel file the grader has built itself (the kernels' bodies
a student's function returned, in the instructor's file: labkit.course.grading.source_exercises).

``sandboxed_program_runner`` is the runner of a whole-program exercise (labkit.course.host_program:
the host side of a CUDA program): the student's regions spliced into the instructor's program, which
the sandbox builds for the CPU executor and runs on the check's cases
(labkit.course.program_runner); this process reads back each run's exit status, what it printed and
the bytes of its output, and judges them against answers the sandbox never sees.
"""
from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

from .. import backends
from ..backends import nvrtc_check
from ..backends.cpu.compiler import SEED_ENV, cache_dir
from ..data.npz import read_npz
from ..errors import ArrayFileError
from ..loader import load
from ..verdict import Verdict
from . import sandbox
from .kernel_checks import Case, executor_error, judge
from .host_program import ProgramOutcome, ProgramRun
from .kernel_runner import INPUTS, JOB_JSON, SCALARS
from .program_runner import JOB_JSON as PROGRAM_JOB_JSON
from .regions import RegionError, splice

__all__ = ["sandboxed_runner", "file_runner", "run_source", "read_submission", "warm_seed", "spliced_source",
           "MAX_SOURCE_BYTES", "sandboxed_program_runner", "warm_program_seed"]

MAX_SOURCE_BYTES = 256 << 10       # a kernel exercise is a page or two; a larger file is not one
_STATUS_BYTES = 1 << 20


def read_submission(path: str | os.PathLike) -> str:
    """The student's file as text: a plain file of at most MAX_SOURCE_BYTES, UTF-8; RegionError if not."""
    p = Path(path)
    if p.is_symlink() or not p.is_file():
        raise RegionError(f"{p.name} is not a plain file")
    with open(p, "rb") as f:
        data = f.read(MAX_SOURCE_BYTES + 1)
    if len(data) > MAX_SOURCE_BYTES:
        raise RegionError(f"{p.name} is larger than {MAX_SOURCE_BYTES >> 10} KiB: not a kernel exercise")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RegionError(f"{p.name} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def spliced_source(instructor: Path, student: str | os.PathLike) -> str:
    """The instructor's file with the student's regions in it (RegionError says why it cannot be)."""
    return splice(Path(instructor).read_text(), read_submission(student), name=Path(instructor).name)


_warmed: set = set()


def warm_seed(checks) -> None:
    """Build, in this (trusted) process's cache, the CPU executor's runtime, precompiled header and
    check runners for each of ``checks`` (checking modes, as labkit.load takes them), by running a
    tiny kernel of labkit's own under each: a sandbox then starts from them, read-only, and compiles
    only the student's kernel."""
    for mode in checks:
        if mode in _warmed:
            continue
        with backends.use("cpu"):          # the executor's parts, also where this process has a GPU
            fn = load("vector_add", check=mode).get_function("vector_add")
            x = np.ones(33, np.float32)
            y = np.zeros(33, np.float32)
            fn((2,), (32,), (x, y, np.float32(2.0), np.int32(33)))
        _warmed.add(mode)


def _plain(text: str, file_name: str) -> str:
    """What the sandbox printed, fit for a student's feedback: the sandbox's own paths cut to the
    kernel file's name, any line that names another file dropped, at most 8,000 characters."""
    text = text.replace(f"/job/{file_name}", file_name)
    lines = [ln for ln in text.splitlines()
             if not re.search(r"(?<![\w.])/(?:[\w.+-]+/)+[\w.+-]+", ln) or file_name in ln]
    text = "\n".join(lines)
    return text if len(text) <= 8000 else text[:8000] + "\n[... cut]"


def _job(cases: list[Case], file_name: str, kernel: str, checks: str, defines: dict) -> tuple[dict, dict]:
    arrays, specs = {}, []
    for i, c in enumerate(cases):
        args = []
        for j, a in enumerate(c.args):
            if isinstance(a, np.ndarray):
                key = f"c{i}a{j}"
                arrays[key] = np.ascontiguousarray(a)
                args.append({"array": key})
            else:
                dtype = np.asarray(a).dtype.name
                if dtype not in SCALARS:
                    raise TypeError(f"a case's scalar argument of dtype {dtype} cannot cross to the sandbox")
                args.append({"scalar": dtype, "value": a.item() if hasattr(a, "item") else a})
        consts = []
        for k, (name, values) in enumerate(c.constants):
            arrays[f"c{i}k{k}"] = np.ascontiguousarray(values)
            consts.append([name, f"c{i}k{k}"])
        spec = {"what": c.what, "grid": list(c.grid), "block": list(c.block), "shared_mem": int(c.shared_mem),
                "out": int(c.out), "args": args, "constants": consts}
        spec.update({k: getattr(c, k) for k in ("kernel", "checks") if getattr(c, k) is not None})
        specs.append(spec)
    job = {"file": file_name, "kernel": kernel, "checks": checks, "defines": dict(defines or {}), "cases": specs}
    return job, arrays


def sandboxed_runner(instructor: Path, *, limits: sandbox.Limits = sandbox.Limits(), nvrtc: bool = True):
    """A runner for labkit.course.kernel_checks' checks (``runner=``): splice, NVRTC, sandbox, judge."""
    instructor = Path(instructor)

    def run(path, kernel: str, cases, *, checks: str, right: str, defines: dict | None = None) -> Verdict:
        try:
            text = spliced_source(instructor, path)
        except RegionError as exc:
            return Verdict(False, f"{instructor.name}: {kernel}: {exc}")
        return run_source(text, instructor.name, kernel, cases, checks=checks, right=right, defines=defines,
                          limits=limits, nvrtc=nvrtc)
    return run


def file_runner(*, limits: sandbox.Limits = sandbox.Limits(), nvrtc: bool = True):
    """A runner for a kernel file the grader has built itself, taken whole (the instructor's file with
    the kernel bodies a student's function returned in it: labkit.course.grading.source_exercises):
    NVRTC, sandbox, judge."""
    def run(path, kernel: str, cases, *, checks: str, right: str, defines: dict | None = None) -> Verdict:
        try:
            text = read_submission(path)
        except RegionError as exc:
            return Verdict(False, f"{Path(path).name}: {kernel}: {exc}")
        return run_source(text, Path(path).name, kernel, cases, checks=checks, right=right, defines=defines,
                          limits=limits, nvrtc=nvrtc)
    return run


def run_source(text: str, file_name: str, kernel: str, cases, *, checks: str, right: str, defines: dict | None = None,
               limits: sandbox.Limits = sandbox.Limits(), nvrtc: bool = True) -> Verdict:
    """Check the kernel file ``text`` (named ``file_name``): NVRTC where installed, then
    labkit.course.kernel_runner in the sandbox on ``cases``, whose outputs this process judges."""
    name = f"{file_name}: {kernel}"
    if nvrtc and nvrtc_check.library() is not None:
        ok, log = nvrtc_check.compile_source(
            text, file_name, ("-std=c++17", "--gpu-architecture=compute_90")
            + tuple(f"-D{k}={v}" for k, v in (defines or {}).items()))
        if not ok:
            return Verdict(False, f"{name}: does not compile as CUDA device code (NVRTC, the compiler "
                                  f"a GPU uses):\n{_plain(log, file_name)}")
    cases = list(cases)
    # Each case's checking modes (the check's where it names none) built first in this process's cache.
    warm_seed(dict.fromkeys(checks if c.checks is None else c.checks for c in cases) or [checks])
    job, arrays = _job(cases, file_name, kernel, checks, defines or {})
    expected = sum(int(c.args[c.out].nbytes) for c in cases)
    with tempfile.TemporaryDirectory(prefix="labkit-job-") as tmp:
        job_dir = Path(tmp, "job")
        job_dir.mkdir()
        (job_dir / file_name).write_text(text)
        (job_dir / JOB_JSON).write_text(json.dumps(job))
        np.savez(job_dir / INPUTS, **arrays)
        for p in [Path(tmp), job_dir, *job_dir.iterdir()]:
            p.chmod(0o755 if p.is_dir() else 0o644)      # readable by the sandbox's own user
        done = sandbox.run([sys.executable, "-m", "labkit.course.kernel_runner", "/job"],
                           jobs={"/job": job_dir, "/seed": cache_dir()},
                           env={"LABKIT_BACKEND": "cpu", "LABKIT_CACHE_DIR": "/tmp/labkit-cache",
                                SEED_ENV: "/seed", "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "Agg",
                                "LABKIT_CPU_TIMEOUT_S": str(max(5, int(limits.seconds * 0.8)))},
                           limits=sandbox.Limits(**{**limits.__dict__,
                                                    "result_bytes": expected + _STATUS_BYTES + (1 << 20)}))
        return _verdict(done, cases, kernel, file_name, right, limits, tmp)


def _read_back(done: sandbox.Finished, name: str, file_name: str, what: str, limits: sandbox.Limits,
               tmp: str) -> tuple[dict, dict] | Verdict:
    """What the sandbox sent back, as (arrays, status: a dict), or the Verdict of why there is none: a
    limit reached, no result, or one that does not read as an .npz with a JSON status."""
    if done.limit == "time":
        return Verdict(False, f"{name}: the check did not finish within {limits.seconds:.0f} s (a {what} that never "
                              "ends: a loop whose exit is never reached?)")
    if done.limit == "memory":
        return Verdict(False, f"{name}: the check used more than {limits.memory_gib:g} GiB of memory")
    if done.limit == "result" or not done.result:
        tail = _plain("\n".join((done.stderr or done.stdout).strip().splitlines()[-8:]), file_name)
        return Verdict(False, f"{name}: the check's process ended with code {done.returncode} and no result "
                              f"(a crash?):\n{tail}")
    back = Path(tmp, "result.npz")
    back.write_bytes(done.result)
    try:
        arrays = read_npz(back, max_bytes=len(done.result))
        status = json.loads(arrays.pop("status").tobytes().decode())
    except (ArrayFileError, KeyError, ValueError, UnicodeDecodeError) as exc:
        return Verdict(False, f"{name}: the check's result could not be read ({type(exc).__name__})")
    if not isinstance(status, dict):
        return Verdict(False, f"{name}: the check's result could not be read")
    return arrays, status


def _verdict(done: sandbox.Finished, cases: list[Case], kernel: str, file_name: str, right: str,
             limits: sandbox.Limits, tmp: str) -> Verdict:
    name = f"{file_name}: {kernel}"
    back = _read_back(done, name, file_name, "kernel", limits, tmp)
    if isinstance(back, Verdict):
        return back
    arrays, status = back
    if not isinstance(status.get("cases"), list):
        return Verdict(False, f"{name}: the check's result could not be read")
    if status.get("compile_error"):
        return Verdict(False, f"{name}: does not compile:\n{_plain(str(status['compile_error']), file_name)}")
    for i, case in enumerate(cases):
        here = f"{file_name}: {case.kernel or kernel}"
        if i >= len(status["cases"]) or not isinstance(status["cases"][i], dict):
            return Verdict(False, f"{here}: on the {case.what}: the check's process stopped before this case ran")
        err = status["cases"][i].get("error")
        if err is not None:
            kind = re.sub(r"\W", "", str(status["cases"][i].get("kind", "Error")))[:40]
            return executor_error(here, case, kind, _plain(str(err), file_name))
        out, sent = arrays.get(f"out{i}"), case.args[case.out]
        if out is None or out.dtype != sent.dtype or out.shape != sent.shape or out.shape != case.ref.shape:
            return Verdict(False, f"{here}: on the {case.what}: the output did not come back whole")
        wrong = judge(here, case, out)
        if wrong is not None:
            return wrong
    return Verdict(True, f"{name}: {right}")


_PROGRAM_WARMUP = """__global__ void twice(float* v, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) v[i] *= 2; }
int main() { float* d; cudaMalloc(&d, 64 * sizeof(float)); twice<<<2, 32>>>(d, 64); cudaDeviceSynchronize(); cudaFree(d); return 0; }
"""


def warm_program_seed() -> None:
    """Build, in this (trusted) process's cache, the CPU executor's runtime for whole programs under the
    memory check, by building a tiny program of labkit's own: a sandbox then starts from it, read-only,
    and compiles only the student's program."""
    if "program:memory" in _warmed:
        return
    from .. import cuda                  # the program builder: only where programs are graded
    with tempfile.TemporaryDirectory(prefix="labkit-warm-") as tmp:
        src = Path(tmp, "warm.cu")
        src.write_text(_PROGRAM_WARMUP)
        cuda.build_program(src, check="memory")
    _warmed.add("program:memory")


def sandboxed_program_runner(instructor: Path, *, limits: sandbox.Limits = sandbox.Limits()):
    """A runner for labkit.course.host_program.check_host_program (``runner=``): the student's regions
    spliced into the instructor's program, built and run in the sandbox on the cases; the outcome as
    plain data (a Verdict where there is none: a region refused, a limit reached, no result)."""
    instructor = Path(instructor)

    def run(path, cases) -> ProgramOutcome | Verdict:
        try:
            text = spliced_source(instructor, path)
        except RegionError as exc:
            return Verdict(False, f"{instructor.name}: {exc}")
        return run_program_source(text, instructor.name, cases, limits=limits)
    return run


def run_program_source(text: str, file_name: str, cases, *, limits: sandbox.Limits = sandbox.Limits()
                       ) -> ProgramOutcome | Verdict:
    """Build and run the program ``text`` (named ``file_name``) in the sandbox on ``cases`` ((seed, N, C,
    H, W, M, K) each): what came back, read as plain data."""
    cases = [tuple(int(v) for v in c) for c in cases]
    warm_program_seed()
    out_bytes = sum(4 * c[1] * c[5] * (c[3] - c[6] + 1) * (c[4] - c[6] + 1) + 1 for c in cases)
    with tempfile.TemporaryDirectory(prefix="labkit-job-") as tmp:
        job_dir = Path(tmp, "job")
        job_dir.mkdir()
        (job_dir / file_name).write_text(text)
        (job_dir / PROGRAM_JOB_JSON).write_text(json.dumps(
            {"file": file_name, "cases": cases, "timeout": max(5, int(limits.seconds * 0.8) // max(1, len(cases)))}))
        for p in [Path(tmp), job_dir, *job_dir.iterdir()]:
            p.chmod(0o755 if p.is_dir() else 0o644)      # readable by the sandbox's own user
        done = sandbox.run([sys.executable, "-m", "labkit.course.program_runner", "/job"],
                           jobs={"/job": job_dir, "/seed": cache_dir()},
                           env={"LABKIT_BACKEND": "cpu", "LABKIT_CACHE_DIR": "/tmp/labkit-cache",
                                SEED_ENV: "/seed", "PYTHONDONTWRITEBYTECODE": "1"},
                           limits=sandbox.Limits(**{**limits.__dict__,
                                                    "result_bytes": out_bytes + 2 * _STATUS_BYTES}))
        return _program_outcome(done, file_name, limits, tmp, len(cases))


def _program_outcome(done: sandbox.Finished, file_name: str, limits: sandbox.Limits, tmp: str,
                     n_cases: int) -> ProgramOutcome | Verdict:
    back = _read_back(done, file_name, file_name, "program", limits, tmp)
    if isinstance(back, Verdict):
        return back
    arrays, status = back
    unreadable = Verdict(False, f"{file_name}: the check's result could not be read")
    if not isinstance(status.get("runs"), list) or len(status["runs"]) > n_cases:
        return unreadable
    error = status.get("compile_error")
    outcome = ProgramOutcome(compile_error=None if error is None else _plain(str(error), file_name), file_name=file_name)
    for i, r in enumerate(status["runs"]):
        if not isinstance(r, dict) or not isinstance(r.get("returncode"), int) or \
                not all(isinstance(r.get(k), str) for k in ("stdout", "stderr")):
            return unreadable
        out = arrays.get(f"out{i}")
        data = None if out is None or out.dtype != np.uint8 or out.ndim != 1 else out.tobytes()
        outcome.runs.append(ProgramRun(r["returncode"], r["stdout"][-8000:], r["stderr"][-8000:], data))
    return outcome
