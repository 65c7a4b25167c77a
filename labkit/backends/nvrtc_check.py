"""Compiling a kernel source with NVRTC, the compiler CuPy uses, without a GPU.

NVRTC is a library that needs no device: the tests run every kernel file through it on machines
without a GPU, so a source that only the CPU executor (or nvcc, which includes the CUDA runtime
headers) would accept is caught in CI rather than on a student's GPU.  Found in the
``nvidia-cuda-nvrtc`` wheel (CUDA 13) or wherever the system's loader finds ``libnvrtc``.
"""
from __future__ import annotations

import ctypes
import functools
import glob
import os


@functools.lru_cache(maxsize=1)
def library() -> ctypes.CDLL | None:
    """The NVRTC library, or None where there is none."""
    candidates = []
    try:
        import nvidia
        for root in nvidia.__path__:
            candidates += sorted(glob.glob(os.path.join(root, "cu*", "lib", "libnvrtc.so*")))
            candidates += sorted(glob.glob(os.path.join(root, "cuda_nvrtc", "lib", "libnvrtc.so*")))
    except ImportError:
        pass
    candidates += ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"]
    for name in candidates:
        if "builtins" in name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


@functools.lru_cache(maxsize=1)
def cuda_include_dirs() -> tuple[str, ...]:
    """The CUDA toolkit's header folders on this machine (its include folder and, from CUDA 13, the
    CCCL headers beside), as CuPy passes them to NVRTC on a GPU; () where there is no toolkit.  Kernels
    that include CUDA's own headers (cooperative_groups.h) need them."""
    roots = [os.environ[v] for v in ("CUDA_PATH", "CUDA_HOME") if os.environ.get(v)]
    roots += sorted(glob.glob("/usr/local/cuda*"), reverse=True)
    for root in roots:
        inc = os.path.join(root, "include")
        if os.path.isfile(os.path.join(inc, "cuda_runtime.h")):
            return tuple(d for d in (inc, os.path.join(inc, "cccl")) if os.path.isdir(d))
    return ()


def compile_source(code: str, name: str = "kernel.cu",
                   options: tuple[str, ...] = ("-std=c++17", "--gpu-architecture=compute_90")) -> tuple[bool, str]:
    """(success, log) of NVRTC compiling ``code`` to PTX with CuPy's kind of options (and, like CuPy,
    the CUDA toolkit's headers where this machine has them)."""
    options = tuple(options) + tuple(f"-I{d}" for d in cuda_include_dirs())
    lib = library()
    if lib is None:
        raise RuntimeError("NVRTC is not available: pip install nvidia-cuda-nvrtc")
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), code.encode(), name.encode(), 0, None, None)
    if rc != 0:
        return False, f"nvrtcCreateProgram failed ({rc})"
    try:
        opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        rc = lib.nvrtcCompileProgram(prog, len(options), opts)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        return rc == 0, log.value.decode(errors="replace")
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
