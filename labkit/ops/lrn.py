"""Local response normalization across channels (labkit/kernels/lrn.cu), TensorFlow's semantics, and
LRN followed by a max-pool in one kernel (AlexNet's lrn + pool).

    y = lrn(x, depth_radius=2, bias=1.0, alpha=2e-5, beta=0.75)   # x float32 NCHW
    norm = LRN(depth_radius=2, alpha=2e-5); y = norm(x)
    z = lrn_max_pool(x, 3, 2, depth_radius=2, alpha=2e-5)          # == max_pool2d(lrn(x), 3, 2)
    both = LRNMaxPool(3, 2, depth_radius=2, alpha=2e-5); z = both(x)
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from .. import backends
from ..checks import array_type, check_array, check_int, fast_input, output
from ..device_query import gpu_sm_count
from ..loader import load
from .plans import PlanCache, ShapeLayer, cdiv, ints

__all__ = ["lrn", "LRN", "channel_chunk", "lrn_max_pool", "LRNMaxPool", "fused_band", "fused_chunk", "fused_defines",
           "fused_shared_bytes", "MAX_FUSED_THREADS"]

THREADS = 256
_PLANS = PlanCache()


class _Plan(NamedTuple):
    launch: Callable           # launch(x, y)
    out_shape: tuple


def _check_params(depth_radius, bias, alpha, beta) -> tuple:
    check_int(depth_radius, "depth_radius", low=0)
    for name, v in (("bias", bias), ("alpha", alpha), ("beta", beta)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not np.isfinite(v):
            raise ValueError(f"{name} must be a finite number, got {v!r}")
    if bias <= 0 or alpha < 0:
        raise ValueError(f"bias must be > 0 and alpha >= 0 (the base of the power stays positive), "
                         f"got bias={bias}, alpha={alpha}")
    return int(depth_radius), float(bias), float(alpha), float(beta)


def channel_chunk(N: int, C: int, HW: int, sms: int) -> int:
    """Channels per thread: 4 where that still gives every SM 8 warps' worth of threads 4 times over,
    else 2 (measured on an H100 at AlexNet's sizes: 4 best from batch 64 up, 79% of the memory floor
    at batch 1,024 against 49% for a thread per output; 2 best at batch 1)."""
    return 4 if N * cdiv(C, 4) * HW >= 4 * sms * 2048 else 2


def _plan(backend: str, shape: tuple, params: tuple) -> _Plan:
    key = (backend, shape, params)

    def make():
        depth_radius, bias, alpha, beta = _check_params(*params)
        N, C, H, W = (int(v) for v in shape)
        if N > 65535:
            raise ValueError(f"lrn runs one grid layer per image: at most 65535, got N={N}: split the batch")
        chunk = channel_chunk(N, C, H * W, gpu_sm_count())
        return _Plan(load("lrn", defines={"LRN_R": depth_radius}).get_function("lrn_across_channels").launcher(
            (cdiv(H * W, THREADS), cdiv(C, chunk), N), (THREADS,),
            (None, None) + ints(N, C, H * W, chunk) + (np.float32(bias), np.float32(alpha), np.float32(beta))),
            (N, C, H, W))
    return _PLANS.get_or_make(key, make)


def lrn(x, depth_radius: int = 2, bias: float = 1.0, alpha: float = 2e-5, beta: float = 0.75, *, out=None):
    """Local response normalization across the channels of float32 NCHW ``x``, with TensorFlow's
    parameters and semantics (``tf.nn.local_response_normalization``)."""
    backend = backends.current()
    if not (fast_input(x, array_type(backend)) and x.ndim == 4):
        check_array(x, "x", "NCHW", 4, backend)
    try:
        plan = _PLANS.get((backend, x.shape, (depth_radius, bias, alpha, beta)))
    except TypeError:   # an unhashable parameter: the checks name it
        plan = None
    if plan is None:
        _check_params(depth_radius, bias, alpha, beta)
        plan = _plan(backend, x.shape, (depth_radius, bias, alpha, beta))
    y = output(out, plan.out_shape, "NCHW", (x,), backend=backend)
    plan.launch(x, y)
    return y


class LRN(ShapeLayer):
    """lrn as a layer with its parameters fixed: ``LRN(depth_radius=2, alpha=2e-5)(x)``, its plans per
    input shape held here."""

    def __init__(self, depth_radius: int = 2, bias: float = 1.0, alpha: float = 2e-5, beta: float = 0.75):
        super().__init__()
        self.params = _check_params(depth_radius, bias, alpha, beta)

    def _make(self, shape):
        return _plan(self.backend, shape, self.params)


# lrn_max_pool: a block's threads are the input pixels of its band of pooled rows, at most this many.
MAX_FUSED_THREADS = 512


def fused_band(H: int, W: int, k: int, s: int) -> int:
    """Pooled rows per block of lrn_max_pool: at most as many as fit MAX_FUSED_THREADS threads (their
    (band-1)*s + k input rows, W pixels each), evened out over the bands the plane then needs, so the
    last band is not left nearly empty (27x27 planes: 7 + 6 pooled rows, not 8 + 5); 0 where even one
    pooled row's k input rows do not fit (a plane wider than MAX_FUSED_THREADS / k: use lrn, then
    max_pool2d)."""
    PH = (H - k) // s + 1
    if k * W > MAX_FUSED_THREADS:
        return 0
    most = max(1, min(PH, (MAX_FUSED_THREADS // W - k) // s + 1))
    return cdiv(PH, cdiv(PH, most))


def fused_defines(depth_radius: int, k: int, s: int, chunk: int, C: int, H: int, W: int, band: int) -> dict:
    """lrn_max_pool's compile-time constants: the window, the chunk, and the layer's sizes (a module per
    layer: its divisions become multiplies and its offsets immediates)."""
    return {"LRN_R": depth_radius, "LMP_K": k, "LMP_S": s, "LMP_CHUNK": chunk, "LMP_C": C, "LMP_H": H, "LMP_W": W,
            "LMP_BAND": band}


def fused_shared_bytes(chunk: int, band: int, W: int, k: int, s: int) -> int:
    """Dynamic shared memory of lrn_max_pool: the chunk's normalized planes of the band's input rows."""
    return chunk * ((band - 1) * s + k) * W * 4


def fused_chunk(N: int, C: int, blocks_per_image: int, sms: int) -> int:
    """Channels per block: the most of 16, 8 and 4 that still gives every SM 4 blocks (the halo of 2r
    channels is read once per chunk, and a block's loads go out together).  On an H200 at AlexNet's
    two sizes, batch 64 and 1,024, 16 was the fastest of 8 and 16 (lrn1 + pool1 at batch 1,024:
    0.743 against 1.016 ms, the band as fused_band gives, 4 blocks an SM, the kernel's version before
    its sizes were compile-time constants)."""
    for chunk in (16, 8):
        if N * cdiv(C, chunk) * blocks_per_image >= 4 * sms:
            return chunk
    return 4


def _check_pool(k, s) -> tuple:
    check_int(k, "k", low=1)
    check_int(s, "s", low=1)
    return int(k), int(s)


def _fused_plan(backend: str, shape: tuple, pool: tuple, params: tuple) -> _Plan:
    key = (backend, shape, pool, params, "lrn_max_pool")

    def make():
        depth_radius, bias, alpha, beta = _check_params(*params)
        k, s = _check_pool(*pool)
        N, C, H, W = (int(v) for v in shape)
        if H < k or W < k:
            raise ValueError(f"a {k}x{k} pooling window does not fit a {H}x{W} plane")
        if N > 65535:
            raise ValueError(f"lrn_max_pool runs one grid layer per image: at most 65535, got N={N}: split the batch")
        band = fused_band(H, W, k, s)
        if band == 0:
            raise ValueError(f"lrn_max_pool takes planes at most {MAX_FUSED_THREADS // k} wide for a {k}x{k} window "
                             f"(a block holds {k} whole input rows), got W={W}: use lrn, then max_pool2d")
        PH, PW = (H - k) // s + 1, (W - k) // s + 1
        rows = (band - 1) * s + k
        chunk = fused_chunk(N, C, cdiv(PH, band), gpu_sm_count())
        fn = load("lrn", defines=fused_defines(depth_radius, k, s, chunk, C, H, W, band)).get_function("lrn_max_pool")
        return _Plan(fn.launcher((cdiv(C, chunk), cdiv(PH, band), N), (cdiv(rows * W, 32) * 32,),
                                 (None, None, np.float32(bias), np.float32(alpha), np.float32(beta)),
                                 shared_mem=fused_shared_bytes(chunk, band, W, k, s)),
                     (N, C, PH, PW))
    return _PLANS.get_or_make(key, make)


def lrn_max_pool(x, k: int, s: int, depth_radius: int = 2, bias: float = 1.0, alpha: float = 2e-5,
                 beta: float = 0.75, *, out=None):
    """``max_pool2d(lrn(x, ...), k, s)`` (no padding) in one kernel: the normalized values never leave
    the chip.  Planes at most MAX_FUSED_THREADS / k wide."""
    backend = backends.current()
    if not (fast_input(x, array_type(backend)) and x.ndim == 4):
        check_array(x, "x", "NCHW", 4, backend)
    try:       # a shape and parameters seen before: the plan made then, no checks again
        plan = _PLANS.get((backend, x.shape, (k, s), (depth_radius, bias, alpha, beta), "lrn_max_pool"))
    except TypeError:   # an unhashable parameter: the checks name it
        plan = None
    if plan is None:
        _check_params(depth_radius, bias, alpha, beta)
        plan = _fused_plan(backend, tuple(int(v) for v in x.shape), _check_pool(k, s),
                           (depth_radius, bias, alpha, beta))
    y = output(out, plan.out_shape, "NCHW", (x,), backend=backend)
    plan.launch(x, y)
    return y


class LRNMaxPool(ShapeLayer):
    """lrn_max_pool as a layer with its parameters fixed: ``LRNMaxPool(3, 2, depth_radius=2, alpha=2e-5)(x)``."""

    def __init__(self, k: int, s: int, depth_radius: int = 2, bias: float = 1.0, alpha: float = 2e-5,
                 beta: float = 0.75):
        super().__init__()
        self.pool = _check_pool(k, s)
        self.params = _check_params(depth_radius, bias, alpha, beta)

    def _make(self, shape):
        return _fused_plan(self.backend, shape, self.pool, self.params)
