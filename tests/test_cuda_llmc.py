"""Programs of llm.c's dev/cuda (tests/data/cuda_programs/llm.c, unchanged): each checks its kernels
against its own CPU reference at full size and prints "All results match"; these two also finish their
benchmark loops on the CPU executor in under a minute.  Their shared common.h sets up cuBLAS and
cuBLASLt handles (labkit's cublas_v2.h and cublasLt.h) and uses 128-bit packed loads (__ldcs, __stcs)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from labkit.cuda import run_program

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the CPU executor needs g++")

LLMC = Path(__file__).parent / "data" / "cuda_programs" / "llm.c"


@pytest.mark.parametrize("program, checked", [("adamw.cu", "second moment:"),
                                              ("crossentropy_forward.cu", "Starting benchmarks.")])
def test_llm_c_programs_run_unchanged_and_match_their_cpu_reference(program, checked):
    rc, out, err = run_program(LLMC / program, timeout=600)
    assert rc == 0, err[-2000:]
    assert "All results match" in out and checked in out, out[-2000:]
    assert "Mismatch" not in out and "labkit:" not in err
