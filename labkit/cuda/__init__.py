"""Whole CUDA programs -- host code, ``<<<>>>`` launches, the runtime API -- on the CPU executor.

    python -m labkit.cuda run vectorAdd.cu [args...]
    python -m labkit.cuda run --check memory prog.cu

    rc, out, err = labkit.cuda.run_program("vectorAdd.cu", ["-n=1000"])

The program is built with the host C++ compiler against labkit's own ``cuda_runtime.h`` and the
cuda-samples' common headers (``helper_cuda.h``, ``helper_string.h``, ``helper_timer.h``,
``helper_functions.h``), cuRAND's (``curand.h``, ``curand_kernel.h``), a part of cuBLAS's (``cublas_v2.h``), NVTX's (``nvtx3/nvToolsExt.h``: no-ops, as with no profiler attached), ``cuda_fp16.h`` (``__half``,
``__half2``), ``cuda_bf16.h`` (``__nv_bfloat16``) and ``mma.h`` (``nvcuda::wmma``), and runs in a child
process; inline PTX that reads a special register (``%laneid``, ``%smid``, ``%clock64``, ...) becomes the
executor's call; a kernel launched from device code runs after the grid that launched it.  What the executor does not model (textures, graphics interop, the driver API, several
GPUs, a device-side cudaDeviceSynchronize, the CUDA libraries other than cuRAND and that part of cuBLAS, fp8, other inline PTX) is refused before anything is compiled, by name.  The device the program sees is one modelled on an H100 whose
name says it is the CPU executor (``cudaDeviceProp::labkitCpuExecutor`` is 1).
"""
from __future__ import annotations

import os
from typing import Sequence

from ..backends.cpu import program as _program
from ..errors import KernelCompileError, UnsupportedOnCPU
from ..verdict import Verdict

CHECKS = _program.PROGRAM_CHECKS
__all__ = ["run_program", "build_program", "check_program", "CHECKS"]


def _paths(path) -> list:
    return list(path) if isinstance(path, (list, tuple)) else [path]


def build_program(path: str | os.PathLike | Sequence[str | os.PathLike], *, check: str | None = None) -> str:
    """Build a program (a .cu file, several source files, or a folder of them) and return the path of
    its executable (``check``: 'memory', 'race' or 'shuffle' for that check's build)."""
    return str(_program.build(_paths(path), check=check).exe)


def run_program(path: str | os.PathLike | Sequence[str | os.PathLike], args: Sequence[str] = (), *,
                check: str | None = None, timeout: float | None = None,
                cwd: str | os.PathLike | None = None, live: bool = False) -> tuple[int, str, str]:
    """Build and run a whole CUDA program on the CPU executor: (exit status, stdout, stderr).

    ``check``: checking modes separated by commas ('memory', 'barrier', 'shuffle', 'race' or 'all').
    Mistakes of the host side are reported on stderr in lines that start with ``labkit:`` (a host pointer
    passed to a kernel, a copy past an allocation, a use after cudaFree, a read of pinned memory that an
    asynchronous copy is still writing).  ``live`` (without a check): the program prints to this
    process's stdout and stderr as it runs, as a native build would, and both strings returned are
    empty."""
    return _program.run(_paths(path), [str(a) for a in args], check=check, timeout=timeout, cwd=cwd, live=live)


def check_program(path: str | os.PathLike | Sequence[str | os.PathLike], args: Sequence[str] = (), *,
                  expect: Sequence[str] = (), check: str | None = "memory", timeout: float | None = 300) -> Verdict:
    """A student's whole program judged on the executor: it must build, run under ``check`` (the memory
    check by default: a copy or a kernel past an allocation is caught), exit with 0, say nothing in
    ``labkit:`` words (a host pointer given to a kernel, a copy past an allocation, a use after cudaFree,
    pinned memory read before synchronising), and print every line of ``expect``.  The verdict's message
    is the first thing that went wrong, in the words a student reads."""
    try:
        rc, out, err = run_program(path, args, check=check, timeout=timeout)
    except (UnsupportedOnCPU, KernelCompileError) as e:
        return Verdict(False, str(e))
    said = [ln for ln in err.splitlines() if ln.startswith(("labkit:", "labkit memory check", "labkit race check"))]
    if said:
        detail = "\n".join(ln for ln in err.splitlines()[1:6] if ln.startswith("  ")) if said[0].startswith(
            "labkit memory check") or said[0].startswith("labkit race check") else ""
        return Verdict(False, said[0] + ("\n" + detail if detail else ""))
    if rc != 0:
        tail = err.strip().splitlines()[-3:]
        return Verdict(False, f"the program exited with status {rc}" + (": " + " / ".join(tail) if tail else ""))
    missing = [e for e in expect if e not in out]
    if missing:
        return Verdict(False, f"the program did not print {missing[0]!r}; it printed:\n" + out[-1500:])
    return Verdict(True, "the program built, ran" + (f" under the {check} check" if check else "") +
                   " and printed what it should")
