"""Helpers shared by the test modules."""
from __future__ import annotations

import numpy as np


class FakeCupyArray:
    """Stands in for a cupy.ndarray where CuPy is not installed (labkit looks at the module name)."""


FakeCupyArray.__module__ = "cupy._core.core"


def with_changes(good, **changes):
    """A maker of arguments: ``good()``'s dict with each named entry replaced by ``f(args)``."""
    def make():
        args = good()
        for k, f in changes.items():
            args[k] = f(args)
        return args
    return make


def f32(a):
    """``a`` as a C-contiguous float32 array on the backend in use."""
    import labkit
    return labkit.xp.asarray(np.ascontiguousarray(a, dtype=np.float32))


def poisoned(*shape):
    """A float32 output of ``shape`` on the backend, filled with NaN: an element never written stays NaN."""
    return f32(np.full(shape, np.nan))
