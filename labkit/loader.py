"""Loading a kernel family for the backend in use, with a cache.

    mod = labkit.load("conv_tiled", defines={"TILE_WIDTH": 16})
    mod.get_function("conv_tiled")(grid, block, args, shared_mem=...)

The same ``labkit/kernels/<family>.cu`` text is compiled by CuPy (NVRTC) on a
GPU and by the host C++ compiler on the CPU executor.  Compile-time parameters
(``defines``) are written in front of the source, behind a ``#line 1``, so
compiler messages still carry the file's own line numbers.
"""
from __future__ import annotations

import functools
import itertools
import os
import threading
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from . import backends
from .backends.cpu import parse_checks
from .errors import ConstantMemoryError

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"
_cache: dict[tuple, object] = {}
_lock = threading.Lock()
_key_locks: dict[tuple, threading.Lock] = {}
# Caches made from loaded modules (the ops' launch plans): emptied with this one by reload().
_dependents: list = []
CONSTANT_DTYPES = (np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.uint32))
_instances = itertools.count()
# Compiles at once, process-wide: one per core.  Threads compile side by side (a network's layers, an
# autotuning search's candidates, both at once); unbounded, hundreds of NVRTC or g++ runs would hold
# their memory together for no more speed.  Only a compile holds a slot, never a wait for one.
COMPILE_SLOTS = threading.BoundedSemaphore(max(1, os.cpu_count() or 1))


def register_cache(cache) -> None:
    """Have ``reload()`` empty ``cache`` (anything with ``clear()``) too: it holds loaded modules."""
    _dependents.append(cache)


def reload() -> None:
    """Forget every loaded module and every launch plan made from one: the next call of any op
    loads (and, where the source changed, compiles) its kernel file again.  For a notebook whose
    kernel file was edited since it was first loaded.  Layer objects keep what they prepared:
    make them again."""
    with _lock:
        _cache.clear()
        _key_locks.clear()
        for c in _dependents:
            c.clear()


def kernel_path(family: str) -> Path:
    """The file of a kernel family: labkit/kernels/<family>.cu."""
    p = KERNEL_DIR / f"{family}.cu"
    if not p.is_file():
        known = sorted(q.stem for q in KERNEL_DIR.glob("*.cu"))
        raise FileNotFoundError(f"no kernel family {family!r} in {KERNEL_DIR} (known: {', '.join(known)})")
    return p


def _with_defines(code: str, path: str, defines: Mapping[str, object] | None) -> str:
    if not defines:
        return code
    lines = []
    for k, v in sorted(defines.items()):
        if not str(k).isidentifier():
            raise ValueError(f"define name {k!r} is not an identifier")
        lines.append(f"#define {k} {v}")
    shown = path.replace('"', "'")
    return "\n".join(lines) + f'\n#line 1 "{shown}"\n' + code


@functools.lru_cache(maxsize=64)
def _read_cached(path: str, stamp: int) -> str:
    return Path(path).read_text()


def load_source(path: str | Path, *, defines: Mapping[str, object] | None = None,
                name_expressions: Sequence[str] = (), options: Sequence[str] = (),
                check: str | Iterable[str] | None = None, own: bool = False):
    """Compile any .cu file for the current backend (cached per source, defines and backend).

    The key is the file's path and modification time (a stat() per call), not its text: an edited
    file is compiled again.  Ops call this when they prepare a launch, not on every launch.
    ``own=True`` gives a module of the caller's own, with its own ``__constant__`` memory, that no
    other caller is handed (the compiled code still comes from the cache): for a layer that uploads
    its weights to constant memory once.
    """
    path = Path(path)
    stamp = path.stat().st_mtime_ns
    backend = backends.current()
    checks: frozenset = frozenset() if backend == "cuda" else parse_checks(check)
    # A GPU module is loaded into one device's context, its functions launch there only: a model's
    # replica on another GPU of the host gets a module of its own (CuPy's compile cache serves it).
    place = None
    if backend == "cuda":
        from .backends.cuda import current_device_id
        place = current_device_id()
    key = (backend, place, str(path), stamp, tuple(sorted((str(k), str(v)) for k, v in (defines or {}).items())),
           tuple(name_expressions), tuple(options), checks)
    mod = None if own else _cache.get(key)
    if mod is not None:
        return mod
    code = _with_defines(_read_cached(str(path), stamp), str(path), defines)
    if backend == "cuda":
        from .backends.cuda import CUDAModule as Module   # imports CuPy: only where there is a GPU
    else:
        from .backends.cpu import CPUModule as Module
    if own:
        if backend == "cuda":
            # CuPy hands out one loaded module per source text: a module of its own needs a text of
            # its own (a comment, so the code is unchanged; each instance compiles once, then comes
            # from CuPy's cache on disk).  The CPU executor loads a private copy per module already.
            code += f"\n// labkit: a module of its own, instance {next(_instances)}\n"
        with COMPILE_SLOTS:
            return Module(code, path=str(path), name_expressions=tuple(name_expressions),
                          options=tuple(options), check=sorted(checks))
    # One lock per key: two threads asking for the same module wait for one compile, while modules of
    # different keys compile side by side (labkit.backends.parallel).
    with _lock:
        mod = _cache.get(key)
        if mod is not None:
            return mod
        key_lock = _key_locks.setdefault(key, threading.Lock())
    with key_lock:
        mod = _cache.get(key)
        if mod is None:
            with COMPILE_SLOTS:
                mod = Module(code, path=str(path), name_expressions=tuple(name_expressions),
                             options=tuple(options), check=sorted(checks))
            with _lock:
                _cache[key] = mod
    return mod


def load(family: str, *, defines: Mapping[str, object] | None = None,
         name_expressions: Sequence[str] = (), options: Sequence[str] = (),
         check: str | Iterable[str] | None = None, own: bool = False):
    """Compile labkit/kernels/<family>.cu for the current backend (cached; ``own``: see load_source)."""
    return load_source(kernel_path(family), defines=defines, name_expressions=name_expressions,
                       options=options, check=check, own=own)


def constant_nbytes(module, name: str) -> int:
    """The size in bytes of ``module``'s __constant__ (or __device__) variable ``name``, on either backend."""
    return module.get_global(name).nbytes if module.backend == "cpu" else module.symbol_sizes[name]


def set_constant(module, name: str, array) -> None:
    """Copy a host array into a __constant__ (or __device__) variable, on either backend.

    Takes a NumPy array, or on the GPU a CuPy array (copied device to device).
    Refuses data larger than the symbol (the symbol's size is fixed in the kernel
    source) before anything is copied.
    """
    on_gpu = type(array).__module__.startswith("cupy")
    dtype = getattr(array, "dtype", None)
    if dtype is None or np.dtype(dtype) not in CONSTANT_DTYPES:
        # Only bytes travel: the symbol's type is fixed in the source, and float64 bytes read as
        # float32 are garbage.  Every constant symbol of the series holds 4-byte values.
        raise TypeError(f"set_constant({name!r}) takes a float32, int32 or uint32 array, got "
                        f"{type(array).__name__} of {dtype}: pass a.astype(numpy.float32)")
    if on_gpu and module.backend != "cuda":
        raise TypeError("set_constant on the CPU executor takes a NumPy array: use cupy.asnumpy(a)")
    data = array if on_gpu else np.ascontiguousarray(array)
    if on_gpu:
        import cupy
        data = cupy.ascontiguousarray(array)
    ptr = module.get_global(name)
    size = constant_nbytes(module, name)
    if data.nbytes > size:
        raise ConstantMemoryError(
            f"{data.nbytes} bytes ({data.shape} {data.dtype}) do not fit '{name}' "
            f"({size} bytes) in {module.path}; constant memory holds 64 KiB in all")
    if on_gpu:
        ptr.copy_from_device(data.data, data.nbytes)     # device to constant memory, no host trip
    elif module.backend == "cuda":
        ptr.copy_from_host(data.ctypes.data, data.nbytes)
    else:
        ptr.copy_from_host(data)


def constant_uploader(module, name: str):
    """``upload(array)``: ``set_constant(module, name, array)`` with the symbol looked up once, for a
    call that uploads on every launch (the functional conv2d of the constant-memory kernels).  The
    array's dtype and size are still checked on each upload, cheaply; anything unusual goes through
    set_constant, which says what is wrong."""
    ptr = module.get_global(name)
    size = constant_nbytes(module, name)
    f32 = CONSTANT_DTYPES[0]
    if module.backend != "cuda":
        def upload(array) -> None:
            if type(array) is not np.ndarray or array.dtype != f32 or array.nbytes > size:
                return set_constant(module, name, array)
            ptr.copy_from_host(array)
        return upload

    def upload(array) -> None:
        if array.dtype is not f32 or array.nbytes > size or not array.flags.c_contiguous or \
                not type(array).__module__.startswith("cupy"):
            return set_constant(module, name, array)
        ptr.copy_from_device(array.data, array.nbytes)   # device to constant memory, on the current stream
    return upload
