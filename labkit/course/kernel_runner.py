"""Inside the grader's sandbox: run a student's kernel on the inputs the grader chose, and hand the
outputs back as plain data.  ``python -m labkit.course.kernel_runner /job``

/job holds ``job.json`` (the kernel file's name, the kernel, the executor's checks, the defines, and
each case's launch: grid, block, dynamic shared memory, which argument is the output, the arguments:
arrays of inputs.npz by name, or scalars by dtype and value, the constant-memory uploads, and where a
case names them, its own kernel and checks), the arrays in ``inputs.npz``, and the kernel file (the
instructor's, with the student's regions or kernel bodies in it).

It writes one .npz to the result pipe: ``status`` (JSON bytes: a compile error, or each case run, up
to the first that the executor stopped, with the error's kind and words) and ``out<i>``, the output of
each case that ran.  It never sees the answers, and it says nothing of whether an output is right:
the grader compares them with its float64 references after the sandbox is gone.
"""
from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import numpy as np

from ..data.npz import read_npz
from ..errors import KernelCompileError, LaunchError
from ..loader import load_source
from . import sandbox
from .kernel_checks import LAUNCH_ERRORS, Case, launch_case

__all__ = ["main", "JOB_JSON", "INPUTS", "MAX_INPUT_BYTES"]

JOB_JSON = "job.json"
INPUTS = "inputs.npz"
MAX_INPUT_BYTES = 256 << 20
SCALARS = {"int32": np.int32, "float32": np.float32, "int64": np.int64, "float64": np.float64}


def cases_of(job: dict, arrays: dict) -> list[Case]:
    """The job's cases, their arguments resolved (answers are not in a job: ``ref`` is empty)."""
    out = []
    for c in job["cases"]:
        args = tuple(arrays[a["array"]] if "array" in a else SCALARS[a["scalar"]](a["value"]) for a in c["args"])
        out.append(Case(c["what"], tuple(c["grid"]), tuple(c["block"]), args, int(c["out"]), np.empty(0),
                        shared_mem=int(c["shared_mem"]),
                        constants=tuple((name, arrays[key]) for name, key in c["constants"]),
                        kernel=c.get("kernel"), checks=c.get("checks")))
    return out


def run_job(job_dir: Path) -> bytes:
    """The .npz bytes the grader reads back: status and outputs."""
    job = json.loads((job_dir / JOB_JSON).read_text())
    arrays = {k: a.copy() for k, a in read_npz(job_dir / INPUTS, max_bytes=MAX_INPUT_BYTES).items()}   # writeable
    status, outputs = {"compile_error": None, "cases": []}, {}
    functions: dict = {}
    for i, case in enumerate(cases_of(job, arrays)):
        key = (case.kernel or job["kernel"], job["checks"] if case.checks is None else case.checks)
        try:
            if key not in functions:       # one build per kernel and checking modes
                functions[key] = load_source(job_dir / job["file"], defines=job["defines"], check=key[1],
                                             own=True).get_function(key[0])
        except (KernelCompileError, LaunchError) as exc:
            status["compile_error"] = f"{type(exc).__name__}: {exc}"
            break
        try:
            outputs[f"out{i}"] = launch_case(functions[key], case)
            status["cases"].append({"error": None})
        except LAUNCH_ERRORS as exc:
            status["cases"].append({"error": str(exc), "kind": type(exc).__name__})
            break
    buf = io.BytesIO()
    np.savez(buf, status=np.frombuffer(json.dumps(status).encode(), dtype=np.uint8), **outputs)
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    sandbox.write_result(run_job(Path(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
