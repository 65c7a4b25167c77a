"""Local response normalization across channels (labkit/kernels/lrn.cu), TensorFlow's semantics.

    y = lrn(x, depth_radius=2, bias=1.0, alpha=2e-5, beta=0.75)   # x float32 NCHW
    norm = LRN(depth_radius=2, alpha=2e-5); y = norm(x)
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from .. import backends
from ..checks import array_type, check_array, check_int, fast_input, output
from ..device_query import gpu_sm_count
from ..loader import load
from .plans import PlanCache, ShapeLayer, cdiv, ints

__all__ = ["lrn", "LRN", "channel_chunk"]

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
