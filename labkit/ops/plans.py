"""What every op module shares: caches of launch plans, and the int32 arguments of a launch.

A *plan* is what an op resolves once for a shape: the compiled function, its grid, block and
shared memory (as a ``launch(args)`` from the backend, see CUDAFunction.launcher), the kernel's
int32 scalars, and buffers that never change.  A call then checks its new input and launches.
"""
from __future__ import annotations

import numpy as np

from ..loader import register_cache


class PlanCache(dict):
    """Plans by key (the backend, the input's shape, the options that change the kernel), made once
    each.  ``labkit.reload()`` empties every one (a kernel file was edited)."""

    def __init__(self) -> None:
        super().__init__()
        register_cache(self)


def ints(*values) -> tuple:
    """The kernels' `int` parameters as NumPy int32 scalars, which both backends pass as 4 bytes."""
    return tuple(np.int32(v) for v in values)


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for positive ints: blocks to cover a elements, b per block."""
    return -(-a // b)
