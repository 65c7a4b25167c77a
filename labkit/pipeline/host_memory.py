"""Host buffers the GPU's copy engines can read directly, and what a copy between host and device costs.

    x = pinned_empty((1024, 3, 227, 227))          # page-locked, from CuPy's pinned memory pool
    is_pinned(x)                                   # True (asks the CUDA driver); False for np.empty
    rows = copy_bandwidth([4 << 10, 1 << 20, 64 << 20], pinned=True)   # H2D and D2H, GB/s per size

A plain NumPy array is *pageable*: the operating system may move its pages, so the driver first
copies it into a page-locked staging buffer of its own, on the CPU, and only then lets the copy
engine send it.  A pinned buffer is sent straight away, and asynchronously: the host goes on
queueing work while the copy runs, which is what lets copies overlap kernels.  Pinned memory is
taken from RAM that nothing else can then page out: allocate it once and reuse it (CuPy's pool
keeps freed pinned blocks for the next allocation of that size).

On the CPU executor there is no device: "pinned" buffers are ordinary arrays and a "copy" is a
memcpy between two host arrays (labelled so).
"""
from __future__ import annotations

import ctypes
import statistics

import numpy as np

from .. import backends
from ..backends.clock import times_ms

__all__ = ["pinned_empty", "is_pinned", "copy_bandwidth", "host_pointer", "copy_in", "copy_out"]

# cudaMemoryType: what cudaPointerGetAttributes says of a host pointer.
_PAGE_LOCKED = 1


def pinned_empty(shape, dtype=np.float32) -> np.ndarray:
    """An uninitialised host array in page-locked memory (CuPy's pinned memory pool) on a GPU;
    an ordinary NumPy array on the CPU executor."""
    shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"shape must not have negative sizes, got {shape}")
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    if backends.current() != "cuda":
        return np.empty(shape, dtype)
    import cupy
    mem = cupy.cuda.alloc_pinned_memory(max(1, count * dtype.itemsize))
    # The array keeps ``mem`` alive (it is the buffer's owner): freed to the pool with the array.
    return np.frombuffer(mem, dtype, count).reshape(shape)


def host_pointer(a: np.ndarray) -> int:
    """The address of a C-contiguous NumPy array's first byte (what a cudaMemcpy is given)."""
    return int(a.ctypes.data)


def _same_bytes(a, b, what: str) -> int:
    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
        raise ValueError(f"{what}: shapes or dtypes differ ({a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)})")
    if not (a.flags.c_contiguous and b.flags.c_contiguous):
        raise ValueError(f"{what}: both arrays must be C-contiguous (one block of bytes each)")
    return int(a.nbytes)


def copy_in(device_array, host_array: np.ndarray, stream=None) -> None:
    """Queue the copy of ``host_array`` into ``device_array`` (same shape and dtype) on ``stream`` and
    return at once (cudaMemcpyAsync; truly asynchronous from pinned memory).  On the CPU executor,
    np.copyto, done when this returns."""
    _copy(device_array, host_array, stream, to_device=True)


def copy_out(host_array: np.ndarray, device_array, stream=None) -> None:
    """Queue the copy of ``device_array`` into ``host_array`` on ``stream`` (see copy_in)."""
    _copy(device_array, host_array, stream, to_device=False)


def _copy(device_array, host_array: np.ndarray, stream, *, to_device: bool) -> None:
    what = "copy_in" if to_device else "copy_out"
    if device_array.dtype != host_array.dtype or tuple(device_array.shape) != tuple(host_array.shape):
        raise ValueError(f"{what}: shapes or dtypes differ ({device_array.dtype}{tuple(device_array.shape)} "
                         f"vs {host_array.dtype}{tuple(host_array.shape)})")
    if not (device_array.flags.c_contiguous and host_array.flags.c_contiguous):
        raise ValueError(f"{what}: both arrays must be C-contiguous (one block of bytes each)")
    if isinstance(device_array, np.ndarray):          # the CPU executor: "device" arrays are host arrays
        np.copyto(*((device_array, host_array) if to_device else (host_array, device_array)))
        return
    import cupy
    stream = stream if stream is not None else cupy.cuda.get_current_stream()
    host = ctypes.c_void_p(host_pointer(host_array))
    if to_device:
        device_array.data.copy_from_host_async(host, int(host_array.nbytes), stream)
    else:
        device_array.data.copy_to_host_async(host, int(host_array.nbytes), stream)


def is_pinned(a: np.ndarray) -> bool:
    """Whether the CUDA driver knows ``a``'s memory as page-locked host memory (False on the CPU
    executor, where nothing is)."""
    if backends.current() != "cuda" or a.size == 0:
        return False
    import cupy
    try:
        attrs = cupy.cuda.runtime.pointerGetAttributes(host_pointer(a))
    except cupy.cuda.runtime.CUDARuntimeError:
        return False
    return int(attrs.type) == _PAGE_LOCKED


def copy_bandwidth(sizes, *, pinned: bool, directions=("H2D", "D2H"), repeat: int = 10,
                   warmup: int = 2) -> list[dict]:
    """Median GB/s (1e9 bytes per second) of host<->device copies of each size in bytes, from pinned or
    pageable host memory: one row per (direction, size).  On a GPU, CUDA events around each
    cudaMemcpyAsync on the current stream; on the CPU executor, a host memcpy timed by the clock."""
    on_gpu = backends.current() == "cuda"
    rows = []
    for nbytes in sizes:
        nbytes = int(nbytes)
        if nbytes <= 0:
            raise ValueError(f"copy sizes must be positive, got {nbytes}")
        host = pinned_empty(nbytes, np.uint8) if pinned else np.empty(nbytes, np.uint8)
        host[...] = 1
        if on_gpu:
            import cupy
            dev = cupy.empty(nbytes, cupy.uint8)
            stream = cupy.cuda.get_current_stream()
            ptr = ctypes.c_void_p(host_pointer(host))
            ops = {"H2D": lambda: dev.data.copy_from_host_async(ptr, nbytes, stream),
                   "D2H": lambda: dev.data.copy_to_host_async(ptr, nbytes, stream)}
        else:
            other = np.empty(nbytes, np.uint8)
            ops = {"H2D": lambda: np.copyto(other, host), "D2H": lambda: np.copyto(host, other)}
        for direction in directions:
            times = times_ms(ops[direction], warmup=warmup, repeat=repeat, sync=True, on_gpu=on_gpu)
            ms = statistics.median(times)
            rows.append({"direction": direction, "bytes": nbytes, "median_ms": ms,
                         "GBps": nbytes / (ms * 1e-3) / 1e9 if ms > 0 else float("inf"),
                         "host_memory": "pinned" if pinned and on_gpu else "pageable",
                         "label": f"{direction} {'pinned' if pinned else 'pageable'}",
                         "backend": "cuda" if on_gpu else "cpu"})
        del host
    return rows

