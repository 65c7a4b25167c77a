"""What every op module shares: caches of launch plans, and the int32 arguments of a launch.

A *plan* is what an op resolves once for a shape: the compiled function, its grid, block and
shared memory (as a ``launch(args)`` from the backend, see CUDAFunction.launcher), the kernel's
int32 scalars, and buffers that never change.  A call then checks its new input and launches.
"""
from __future__ import annotations

import numpy as np

from .. import backends
from ..backends.cuda import current_device_id
from ..backends.limits import SHARED_MEM_PER_BLOCK
from ..checks import array_type, check_array, fast_input, output
from ..loader import register_cache
from ..reference.samples import to_host


class PlanCache(dict):
    """Plans by key (the backend, the input's shape, the options that change the kernel), made once
    each, and once per GPU: a plan's functions are loaded into one device's context and launch only
    there (a model's replica on another GPU of the host makes its own).  ``labkit.reload()`` empties
    every one (a kernel file was edited)."""

    def __init__(self) -> None:
        super().__init__()
        register_cache(self)

    @staticmethod
    def _here(key):
        return (current_device_id(), key) if backends.current() == "cuda" else key

    def get(self, key, default=None):
        return dict.get(self, self._here(key), default)

    def __getitem__(self, key):
        return dict.__getitem__(self, self._here(key))

    def __setitem__(self, key, value) -> None:
        dict.__setitem__(self, self._here(key), value)

    def __contains__(self, key) -> bool:
        return dict.__contains__(self, self._here(key))

    def get_or_make(self, key, make):
        """The plan for ``key`` on this GPU, made by ``make()`` the first time it is asked for: the one
        way an op caches what it resolves once (a ``make`` that raises leaves nothing behind)."""
        here = self._here(key)
        plan = dict.get(self, here)
        if plan is None:
            plan = make()
            dict.__setitem__(self, here, plan)
        return plan


class ShapeLayer:
    """A layer whose plan depends on its input's shape alone (pooling, LRN, softmax): the plans are
    held here, per shape; a call checks x, looks its plan up and launches ``plan.launch(x, y)``.
    A subclass sets ``NDIM`` and ``LAYOUT`` and makes a plan with ``_make(shape)`` (one with
    ``launch`` and ``out_shape``)."""

    NDIM = 4
    LAYOUT = "NCHW"

    def __init__(self) -> None:
        self.backend = backends.current()
        self._kind = array_type(self.backend)
        self._plans: dict[tuple, object] = {}

    def _make(self, shape: tuple):
        raise NotImplementedError

    def __call__(self, x, out=None):
        if not (fast_input(x, self._kind) and x.ndim == self.NDIM):
            check_array(x, "x", self.LAYOUT, self.NDIM, self.backend)
        shape = x.shape
        plan = self._plans.get(shape)
        if plan is None:
            plan = self._plans[shape] = self._make(tuple(int(v) for v in shape))
        y = output(out, plan.out_shape, self.LAYOUT, (x,), backend=self.backend)
        plan.launch(x, y)
        return y


def ints(*values) -> tuple:
    """The kernels' `int` parameters as NumPy int32 scalars, which both backends pass as 4 bytes."""
    return tuple(np.int32(v) for v in values)


def largest_divisor(n: int, at_most: int) -> int:
    """The largest divisor of n that is at most ``at_most``: a tile side that splits n evenly."""
    return max(d for d in range(1, min(n, at_most) + 1) if n % d == 0)


def divisors_among(n: int, among) -> list[int]:
    """Those of ``among`` that divide n (block sizes of a tile sweep that split n evenly)."""
    return [d for d in among if d <= n and n % d == 0]


def tile_fits(tile, C: int, M: int, H: int, W: int) -> bool:
    """Whether ``tile.check(C, M, H, W)`` accepts the tile (a sweep keeps only those)."""
    try:
        tile.check(C, M, H, W)
    except ValueError:
        return False
    return True


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for positive ints: blocks to cover a elements, b per block."""
    return -(-a // b)


def pitch4(n: int) -> int:
    """n rounded up to 4 more than a multiple of 32: the pitch (in floats) of shared-memory slices
    that a quarter-warp reads side by side, so that their runs of 4 fall in different banks."""
    return n + (36 - n % 32) % 32


def allow_shared(fn, nbytes: int) -> None:
    """Let ``fn`` take ``nbytes`` of dynamic shared memory: past 48 KiB a kernel must ask for it."""
    if nbytes > SHARED_MEM_PER_BLOCK:
        fn.max_dynamic_shared_size_bytes = nbytes


def sampled_mismatch(y, launch, idx, ref, terms, tol: float) -> str | None:
    """The autotuner's check of a candidate (labkit.autotune): ``launch()`` on an output ``y`` filled
    with NaN, then no NaN anywhere (every output written) and ``y`` at the flat positions ``idx``
    within ``tol`` of the float64 ``ref``, relative to ``terms`` (labkit.reference.samples).  None if
    right, else what is wrong.  The comparison runs on the host: on a GPU, the device work is the
    fill, a NaN count over the flat output and one gather, the same few kernels for every family."""
    xp = np if isinstance(y, np.ndarray) else backends.xp()
    # a contiguous output's flat view (the same 1-D kernels for every family's output); else y itself
    flat = y.reshape(-1) if y.flags.c_contiguous else y
    flat.fill(xp.nan)
    launch()
    unwritten = int(xp.isnan(flat).sum())
    if unwritten:
        return f"{unwritten} of {y.size} outputs NaN (never written)"
    pos = to_host(idx).astype(np.int64)
    got = to_host(flat.reshape(-1)[idx]).astype(np.float64)
    want, scale = to_host(ref), to_host(terms)
    err = np.abs(got - want)
    bad = ~(err <= tol * scale + 1e-30)          # a NaN anywhere counts as wrong
    if bool(bad.any()):
        worst = int(np.argmax(np.where(np.isnan(err), np.inf, err / (scale + 1e-30))))
        return (f"{int(bad.sum())} of {pos.size} sampled outputs wrong (at flat position {int(pos[worst])}: "
                f"{float(got[worst]):.6g}, expected {float(want[worst]):.6g})")
    return None
