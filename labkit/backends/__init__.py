"""Backend selection: the GPU through CuPy, or the CPU executor.

The caller never needs to know which one runs.  ``current()`` picks the GPU when
CuPy is importable and sees a device, the CPU executor otherwise.  The
environment variable ``LABKIT_BACKEND`` forces either (``cuda`` or ``cpu``);
``auto`` (the default) chooses as above.
"""
from __future__ import annotations

import functools
import os

from ..errors import BackendUnavailable

BACKENDS = ("cuda", "cpu")
ENV_VAR = "LABKIT_BACKEND"
__all__ = ["BACKENDS", "ENV_VAR", "BackendUnavailable", "cuda_unavailable", "current", "xp", "use"]


@functools.lru_cache(maxsize=1)
def cuda_unavailable() -> str | None:
    """None if CuPy sees a GPU, else the reason it does not."""
    try:
        import cupy  # noqa: F401
    except Exception as exc:  # ImportError, or a broken CUDA install
        return f"CuPy is not importable ({type(exc).__name__}: {exc})"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return f"CuPy sees no CUDA driver ({type(exc).__name__}: {exc})"
    return None if n > 0 else "CuPy sees no CUDA device"


_RESOLVED: dict[str | None, str] = {}   # $LABKIT_BACKEND as set -> the backend it means (CuPy's view is fixed)


def current() -> str:
    """The backend in use: ``'cuda'`` or ``'cpu'`` (read from $LABKIT_BACKEND on every call, cheaply:
    ops ask on each launch, and a notebook may switch backends with ``use``)."""
    raw = os.environ.get(ENV_VAR)
    backend = _RESOLVED.get(raw)
    if backend is None:
        backend = _RESOLVED[raw] = _resolve(raw)
    return backend


def _resolve(raw: str | None) -> str:
    wanted = (raw or "auto").strip().lower() or "auto"
    if wanted not in BACKENDS + ("auto",):
        raise BackendUnavailable(
            f"{ENV_VAR}={wanted!r} is not a backend; use one of 'cuda', 'cpu' or 'auto'")
    if wanted == "cpu":
        return "cpu"
    reason = cuda_unavailable()
    if wanted == "cuda" and reason is not None:
        raise BackendUnavailable(f"{ENV_VAR}=cuda but {reason}; unset it to use the CPU executor")
    return "cuda" if reason is None else "cpu"


def xp():
    """The array module matching the backend: ``cupy`` on the GPU, ``numpy`` on the CPU executor."""
    if current() == "cuda":
        import cupy
        return cupy
    import numpy
    return numpy


class use:
    """Run a block on one backend: ``with labkit.backends.use("cpu"): ...`` (restores the previous choice).

    The CPU executor runs on any machine with a C++ compiler, a GPU machine included, so a
    notebook can show what only the executor checks (barriers, shuffled schedules) everywhere.
    """

    def __init__(self, backend: str) -> None:
        if backend not in BACKENDS + ("auto",):
            raise BackendUnavailable(f"{backend!r} is not a backend; use one of 'cuda', 'cpu' or 'auto'")
        self.backend = backend
        self._saved: str | None = None

    def __enter__(self) -> "use":
        self._saved = os.environ.get(ENV_VAR)
        os.environ[ENV_VAR] = self.backend
        current()  # fail here, not at the first launch, if the backend cannot run
        return self

    def __exit__(self, *exc) -> bool:
        if self._saved is None:
            os.environ.pop(ENV_VAR, None)
        else:
            os.environ[ENV_VAR] = self._saved
        return False


def free_memory_bytes() -> int:
    """Bytes an op may still allocate on the backend in use: the GPU's free memory plus the blocks
    CuPy's pool holds unused; on the CPU executor, the host's available physical memory."""
    if current() == "cuda":
        import cupy
        free, _ = cupy.cuda.runtime.memGetInfo()
        pool = cupy.get_default_memory_pool()
        return int(free + pool.free_bytes())
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):   # no sysconf here: no limit known
        return 2**63 - 1
