"""Convolution as a matrix multiply: im2col, col2im, and the unrolled convolution built on them.

    cols = unroll.im2col(x, K=3, stride=1, pad=1)        # (N, C*K*K, Ho*Wo) on the backend
    dx = unroll.col2im(cols, x.shape, K=3, stride=1, pad=1)
    y = unroll.conv2d_unrolled(x, w, b, stride=4, pad=0, groups=1, activation="relu")

``conv2d_unrolled`` is im2col followed, for each image and group, by one GEMM of labkit/kernels/
gemm.cu: ``y[n, group] = w[group] @ cols[n, group rows]`` with the bias per row (output channel)
and the activation fused into the GEMM's epilogue.  The kernels: labkit/kernels/im2col.cu.
"""
from __future__ import annotations

from typing import Mapping


from ..errors import check_int
from .. import backends
from ..checks import array_type, check_activation, check_array, fast_input, output
from ..loader import load
from ..shapes import out_size
from .gemm import gemm
from .plans import PlanCache, cdiv, ints

__all__ = ["im2col", "col2im", "conv2d_unrolled", "check_column_matrix", "out_size"]

THREADS = 256
_PLANS = PlanCache()


def _check_geometry(H: int, W: int, K: int, stride: int, pad: int) -> tuple[int, int]:
    for name, v, low in (("K", K, 1), ("stride", stride, 1), ("pad", pad, 0)):
        check_int(v, name, low)
    if pad >= K:
        raise ValueError(f"pad={pad} must be smaller than K={K}: a window of padding alone has no input")
    Ho, Wo = out_size(H, K, stride, pad), out_size(W, K, stride, pad)
    if Ho < 1 or Wo < 1:
        raise ValueError(f"a {K}x{K} window with pad {pad} does not fit the {H}x{W} input")
    return Ho, Wo


def check_column_matrix(N: int, C: int, K: int, Ho: int, Wo: int) -> None:
    """ValueError, before anything is allocated, where the column matrix (N, C*K*K, Ho*Wo) would not
    fit the backend's free memory or im2col.cu's 32-bit offsets, saying how large it would be."""
    elements = N * C * K * K * Ho * Wo
    need, free = 4 * elements, backends.free_memory_bytes()
    if elements >= 2**31 or need > free:
        size = lambda n: f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"   # noqa: E731
        why = (f"over the {size(free)} free" if need > free else "past im2col.cu's 32-bit offsets")
        raise ValueError(f"variant 'unrolled' writes a column matrix of N*C*K*K*Ho*Wo = {elements} floats "
                         f"({size(need)}), {why}: use variant='auto' or 'implicit', which gather the "
                         "same values without writing them, or a smaller batch")


def _plan(kernel: str, x_shape, K, stride, pad):
    """(launch(src, dst), column-matrix shape) of im2col or col2im for an input of x_shape."""
    key = (backends.current(), kernel, tuple(x_shape), K, stride, pad)

    def make():
        N, C, H, W = (int(v) for v in x_shape)
        Ho, Wo = _check_geometry(H, W, K, stride, pad)
        total = N * C * K * K * Ho * Wo
        return (load("im2col").get_function(kernel).launcher(
            (cdiv(total, THREADS),), (THREADS,), (None, None) + ints(N, C, H, W, K, stride, pad, Ho, Wo)),
            (N, C * K * K, Ho * Wo))
    return _PLANS.get_or_make(key, make)


def im2col(x, K: int, *, stride: int = 1, pad: int = 0, out=None):
    """The column matrix (N, C*K*K, Ho*Wo) of float32 NCHW ``x`` (layout: labkit/kernels/im2col.cu)."""
    backend = backends.current()
    if not fast_input(x, array_type(backend)) or x.ndim != 4:
        check_array(x, "x", "NCHW", 4, backend)
    launch, shape = _plan("im2col", x.shape, K, stride, pad)
    out = output(out, shape, "(N, C*K*K, Ho*Wo)", (x,), backend=backend)
    launch(x, out)
    return out


def col2im(cols, x_shape, K: int, *, stride: int = 1, pad: int = 0):
    """The adjoint of im2col: each column element added back onto its input position (float32 NCHW)."""
    backend, xp = backends.current(), backends.xp()
    launch, shape = _plan("col2im", x_shape, K, stride, pad)
    if not fast_input(cols, array_type(backend)) or cols.ndim != 3:
        check_array(cols, "cols", "(N, C*K*K, Ho*Wo)", 3, backend, xp)
    if tuple(cols.shape) != shape:
        raise ValueError(f"cols must have shape {shape} for x of shape {tuple(x_shape)}, "
                         f"got {tuple(cols.shape)}")
    dx = xp.zeros(tuple(int(v) for v in x_shape), dtype=xp.float32)   # col2im accumulates: it must start at zero
    launch(cols, dx)
    return dx


def conv2d_unrolled(x, w, b=None, *, stride: int = 1, pad: int = 0, groups: int = 1,
                    activation: str | None = None, variant: str = "dbuf",
                    params: Mapping[str, int] | None = None, out=None):
    """Convolution (stride, padding, groups) as im2col + one GEMM per image and group.

    x float32 NCHW (N, C, H, W); w float32 (M, C/groups, K, K); b float32 (M,) or None.  Returns
    y (N, M, Ho, Wo) (``out`` itself when given).  ``variant`` and ``params`` choose the GEMM
    (labkit.ops.gemm).
    """
    backend, xp = backends.current(), backends.xp()
    check_array(x, "x", "NCHW", 4, backend, xp)
    check_array(w, "w", "(M, C/groups, K, K)", 4, backend, xp)
    check_activation(activation)
    N, C, H, W = (int(v) for v in x.shape)
    M, Cg, K, K2 = (int(v) for v in w.shape)
    if check_int(groups, "groups") and (C % groups or M % groups):
        raise ValueError(f"groups={groups!r} must be a positive int dividing C={C} and M={M}")
    if K != K2 or Cg != C // groups:
        raise ValueError(f"w must be (M, C/groups={C // groups}, K, K) for x of shape {tuple(x.shape)} "
                         f"and groups={groups}, got {tuple(w.shape)}")
    if b is not None:
        check_array(b, "b", "(M,)", 1, backend, xp)
        if tuple(b.shape) != (M,):
            raise ValueError(f"b must have shape ({M},), got {tuple(b.shape)}")
    Ho, Wo = _check_geometry(H, W, K, stride, pad)
    y = output(out, (N, M, Ho, Wo), "NCHW", (x, w, b), backend=backend)
    check_column_matrix(N, C, K, Ho, Wo)
    cols = im2col(x, K, stride=stride, pad=pad)
    Mg, rows = M // groups, Cg * K * K
    wg = [xp.ascontiguousarray(w[g * Mg:(g + 1) * Mg].reshape(Mg, rows)) for g in range(groups)]
    bg = [None if b is None else xp.ascontiguousarray(b[g * Mg:(g + 1) * Mg]) for g in range(groups)]
    for n in range(N):
        for g in range(groups):
            gemm(wg[g], cols[n, g * rows:(g + 1) * rows], bg[g], variant=variant, params=params, splits=1,
                 activation=activation, bias_per="row", out=y[n, g * Mg:(g + 1) * Mg].reshape(Mg, Ho * Wo))
    return y
