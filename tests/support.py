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


def error_vs_terms(y, ref, terms) -> float:
    """||y - ref|| / ||terms||, in float64, where ``terms`` is the same sum taken over the terms'
    absolute values (|a| @ |b| + |bias| for a GEMM).

    float32 rounding is bounded by the size of the terms, not of their sum: a sum that cancels
    (a single product nearly undone by its bias) has a float32 result correct to 1e-7 of its terms
    yet 1e-5 of itself apart from float64. Measured against the terms, such a result passes, and an
    element missing a term, or never written (NaN), fails as before. ReLU, ReLU6 and tanh move no
    two values further apart, so the bound holds after them too."""
    from labkit.checks import to_numpy
    y = to_numpy(y).astype(np.float64)
    return float(np.linalg.norm(y - ref) / max(np.linalg.norm(terms), 1e-300))
