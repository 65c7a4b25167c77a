"""Inside the grader's sandbox: build a student's whole CUDA program for the CPU executor and run it
on the cases the grader chose.  ``python -m labkit.course.program_runner /job``

/job holds ``job.json`` (the program file's name, the cases: (seed, N, C, H, W, M, K) each, and the
seconds a run may take) and the program (the instructor's file with the student's regions in it).
The program is built under the memory check and run once per case, each writing its y into this
sandbox's own /tmp (labkit.course.host_program.run_cases).

It writes one .npz to the result pipe: ``status`` (JSON bytes: the compiler's words, or each run's
exit status and the last of what it printed) and ``out<i>``, the bytes of y each run wrote.  It never
sees an answer, and says nothing of whether y is right: the grader computes the float64 reference
from the seed and compares, after the sandbox is gone.
"""
from __future__ import annotations

import io
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from . import sandbox
from .host_program import run_cases

__all__ = ["main", "run_job", "JOB_JSON"]

JOB_JSON = "job.json"


def run_job(job_dir: Path) -> bytes:
    """The .npz bytes the grader reads back: status and the outputs."""
    job = json.loads((job_dir / JOB_JSON).read_text())
    cases = [tuple(int(v) for v in c) for c in job["cases"]]
    with tempfile.TemporaryDirectory(prefix="labkit-program-") as tmp:
        outcome = run_cases(job_dir / job["file"], cases, tmp, timeout=float(job["timeout"]))
    status = {"compile_error": outcome.compile_error,
              "runs": [{"returncode": r.returncode, "stdout": r.stdout, "stderr": r.stderr} for r in outcome.runs]}
    outputs = {f"out{i}": np.frombuffer(r.output, np.uint8) for i, r in enumerate(outcome.runs) if r.output is not None}
    buf = io.BytesIO()
    np.savez(buf, status=np.frombuffer(json.dumps(status).encode(), dtype=np.uint8), **outputs)
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    sandbox.write_result(run_job(Path(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
