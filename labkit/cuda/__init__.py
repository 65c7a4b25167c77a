"""Whole CUDA programs -- host code, ``<<<>>>`` launches, the runtime API -- on the CPU executor.

    python -m labkit.cuda run vectorAdd.cu [args...]
    python -m labkit.cuda run --check memory prog.cu

    rc, out, err = labkit.cuda.run_program("vectorAdd.cu", ["-n=1000"])

The program is built with the host C++ compiler against labkit's own ``cuda_runtime.h`` and the
cuda-samples' common headers (``helper_cuda.h``, ``helper_string.h``, ``helper_timer.h``,
``helper_functions.h``), and runs in a child process.  What the executor does not model (textures,
graphics interop, the driver API, several GPUs, dynamic parallelism, CUDA libraries) is refused
before anything is compiled, by name.  The device the program sees is one modelled on an H100 whose
name says it is the CPU executor (``cudaDeviceProp::labkitCpuExecutor`` is 1).
"""
from __future__ import annotations

import os
from typing import Sequence

from ..backends.cpu import program as _program

CHECKS = _program.PROGRAM_CHECKS
__all__ = ["run_program", "build_program", "CHECKS"]


def _paths(path) -> list:
    return list(path) if isinstance(path, (list, tuple)) else [path]


def build_program(path: str | os.PathLike | Sequence[str | os.PathLike], *, check: str | None = None) -> str:
    """Build a program (a .cu file, several source files, or a folder of them) and return the path of
    its executable (``check``: 'memory', 'race' or 'shuffle' for that check's build)."""
    return str(_program.build(_paths(path), check=check).exe)


def run_program(path: str | os.PathLike | Sequence[str | os.PathLike], args: Sequence[str] = (), *,
                check: str | None = None, timeout: float | None = None,
                cwd: str | os.PathLike | None = None) -> tuple[int, str, str]:
    """Build and run a whole CUDA program on the CPU executor: (exit status, stdout, stderr).

    ``check``: checking modes separated by commas ('memory', 'barrier', 'shuffle', 'race' or 'all').
    Mistakes of the host side are reported on stderr in lines that start with ``labkit:`` (a host pointer
    passed to a kernel, a copy past an allocation, a use after cudaFree, a read of pinned memory that an
    asynchronous copy is still writing)."""
    return _program.run(_paths(path), [str(a) for a in args], check=check, timeout=timeout, cwd=cwd)
