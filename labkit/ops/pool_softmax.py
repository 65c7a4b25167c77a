"""Max-pooling, global average pooling and softmax (labkit/kernels/pool_softmax.cu), on the backend in use.

    y = max_pool2d(x, k=2, stride=2)            # x float32 NCHW (labkit.xp array)
    v = global_avg_pool(x)                      # (N, C, H, W) -> (N, C): a group of lanes per plane
    p = softmax(logits)                         # (N, D) rows: a group of lanes per row
    pool = MaxPool2d(3, 2); y = pool(x)         # the same, as a layer object

Each shape's plan (function, grid, int32 arguments) is made once; a call checks its input and
launches.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from .. import backends
from ..checks import array_type, check_array, check_int, fast_input, output
from ..loader import load
from .plans import PlanCache, ShapeLayer, cdiv, ints

__all__ = ["max_pool2d", "softmax", "global_avg_pool", "MaxPool2d", "Softmax", "GlobalAvgPool", "THREADS",
           "lane_group", "softmax_kernel", "MAX_HELD_ROW"]

THREADS = 256
_PLANS = PlanCache()


class _Plan(NamedTuple):
    launch: Callable           # launch(x, y)
    out_shape: tuple


def _pool_plan(backend: str, shape: tuple, k: int, stride: int) -> _Plan:
    key = (backend, "pool", shape, k, stride)

    def make():
        N, C, H, W = shape
        if k > H or k > W:
            raise ValueError(f"a {k}x{k} window does not fit the {H}x{W} plane")
        PH, PW = (H - k) // stride + 1, (W - k) // stride + 1
        total = N * C * PH * PW
        # One module per pooling geometry: its sizes compile to constants (pool_softmax.cu, MP_*).
        module = load("pool_softmax", defines={"MP_H": H, "MP_W": W, "MP_K": k, "MP_S": stride})
        return _Plan(module.get_function("max_pool2d").launcher(
            (cdiv(total, THREADS),), (THREADS,), (None, None) + ints(N * C, H, W, PH, PW, k, stride)), (N, C, PH, PW))
    return _PLANS.get_or_make(key, make)


# softmax_rows_held holds a row in registers, at most 32 values a lane: longer rows take softmax_rows.
MAX_HELD_ROW = 32 * 32


def lane_group(n: int) -> int:
    """Lanes per row (softmax) or plane (global average pool) of n values: the power of two, at most a
    warp, nearest above a quarter of n, so each lane takes about 4 values and short rows share a warp."""
    g = 1
    while g < 32 and 4 * g < n:
        g *= 2
    return g


def softmax_kernel(D: int) -> str:
    """The kernel that runs rows of D values: held in registers up to MAX_HELD_ROW, else a warp's loop."""
    return "softmax_rows_held" if D <= MAX_HELD_ROW else "softmax_rows"


def _softmax_plan(backend: str, shape: tuple) -> _Plan:
    key = (backend, "softmax", shape)

    def make():
        N, D = shape
        if softmax_kernel(D) == "softmax_rows":
            rows_per_block = THREADS // 32
            return _Plan(load("pool_softmax").get_function("softmax_rows").launcher(
                (cdiv(N, rows_per_block),), (THREADS,), (None, None) + ints(N, D)), (N, D))
        g = lane_group(D)
        fn = load("pool_softmax", defines={"SM_G": g, "SM_VPL": cdiv(D, g)}).get_function("softmax_rows_held")
        return _Plan(fn.launcher((cdiv(N, THREADS // g),), (THREADS,), (None, None) + ints(N, D)), (N, D))
    return _PLANS.get_or_make(key, make)


def _avg_plan(backend: str, shape: tuple) -> _Plan:
    key = (backend, "avg", shape)

    def make():
        N, C, H, W = shape
        g = lane_group(H * W)
        # One module per plane size: the lanes' loop unrolls (pool_softmax.cu, AVG_HW).
        module = load("pool_softmax", defines={"AVG_G": g, "AVG_HW": H * W})
        return _Plan(module.get_function("global_avg_pool").launcher(
            (cdiv(N * C, THREADS // g),), (THREADS,), (None, None) + ints(N * C, H * W)), (N, C))
    return _PLANS.get_or_make(key, make)


def _shape_op(x, out, kind: str, make, ndim: int, layout: str, out_layout: str):
    """Check x, find (or make) the plan of its shape, launch into ``out``: the functions whose plan
    depends on the input's shape alone."""
    backend = backends.current()
    if not (fast_input(x, array_type(backend)) and x.ndim == ndim):
        check_array(x, "x", layout, ndim, backend)
    plan = _PLANS.get((backend, kind, x.shape)) or make(backend, tuple(int(v) for v in x.shape))
    y = output(out, plan.out_shape, out_layout, (x,), backend=backend)
    plan.launch(x, y)
    return y


def global_avg_pool(x, *, out=None):
    """The mean of each plane of float32 NCHW ``x``: (N, C, H, W) -> (N, C)."""
    return _shape_op(x, out, "avg", _avg_plan, 4, "NCHW", "(N, C)")


def max_pool2d(x, k: int = 2, stride: int | None = None, *, out=None):
    """Max-pooling of float32 NCHW ``x`` with a k x k window and ``stride`` (default k), no padding."""
    backend = backends.current()
    stride = k if stride is None else stride
    if not (fast_input(x, array_type(backend)) and x.ndim == 4):
        check_array(x, "x", "NCHW", 4, backend)
    try:
        plan = _PLANS.get((backend, "pool", x.shape, k, stride))
    except TypeError:   # an unhashable k or stride: check_int names it
        plan = None
    if plan is None:
        plan = _pool_plan(backend, tuple(int(v) for v in x.shape), check_int(k, "k"), check_int(stride, "stride"))
    y = output(out, plan.out_shape, "NCHW", (x,), backend=backend)
    plan.launch(x, y)
    return y


def softmax(x, *, out=None):
    """Softmax of each row of float32 ``x`` (N, D), on the backend: rows of at most MAX_HELD_ROW values
    held in registers by a group of lanes (lane_group), longer ones a warp per row."""
    return _shape_op(x, out, "softmax", _softmax_plan, 2, "(N, D)", "(N, D)")


class MaxPool2d(ShapeLayer):
    """Max-pooling as a layer: ``MaxPool2d(3, 2)(x)``, its plans per input shape held here."""

    def __init__(self, k: int = 2, stride: int | None = None):
        super().__init__()
        self.k = check_int(k, "k")
        self.stride = self.k if stride is None else check_int(stride, "stride")

    def _make(self, shape):
        return _pool_plan(self.backend, shape, self.k, self.stride)


class Softmax(ShapeLayer):
    """Softmax of each row as a layer: ``Softmax()(logits)``, its plans per input shape held here."""
    NDIM, LAYOUT = 2, "(N, D)"

    def _make(self, shape):
        return _softmax_plan(self.backend, shape)


class GlobalAvgPool(ShapeLayer):
    """Global average pooling as a layer: ``GlobalAvgPool()(x)``, (N, C, H, W) -> (N, C)."""

    def _make(self, shape):
        return _avg_plan(self.backend, shape)
