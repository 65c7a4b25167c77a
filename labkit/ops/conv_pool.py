"""The seed's first layer in one kernel: valid convolution + bias + tanh + 2x2 max-pool
(labkit/kernels/conv_pool.cu); only the pooled output is written.

    y = conv_pool_tanh(x, w, b)                    # (N, M, (H-K+1)//2, (W-K+1)//2)
    layer = ConvPoolTanh(w, b); y = layer(x)       # weights uploaded to constant memory once

The layer's shape is compiled into the kernel (one module per shape, cached) and the weights live
in constant memory: ``conv_pool_tanh`` uploads them on every call (the next call may bring others),
a ``ConvPoolTanh`` once, into a module of its own.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .. import backends
from ..backends.limits import CONSTANT_MEMORY, SHARED_MEM_PER_BLOCK
from ..checks import array_module, array_type, check_array, check_int, fast_input, output
from ..loader import constant_uploader, load
from .plans import PlanCache, cdiv, ints

__all__ = ["conv_pool_tanh", "ConvPoolTanh", "CONV_POOL_THREADS", "conv_pool_shared_bytes"]

CONV_POOL_THREADS = 128
_PLANS = PlanCache()


def conv_pool_shared_bytes(C: int, H: int, W: int, imgs: int = 1) -> int:
    """Static shared memory of conv_pool_tanh's block: ``imgs`` whole C x H x W images."""
    return imgs * C * H * W * 4


@dataclass
class _Plan:
    module: object
    launch: Callable           # launch(x, y)
    out_shape: tuple

    def __post_init__(self) -> None:
        self._uploads = (constant_uploader(self.module, "c_weights"), constant_uploader(self.module, "c_bias"))

    def upload(self, w, b) -> None:
        self._uploads[0](w.reshape(-1))
        self._uploads[1](b)


def _check(x, w, b, threads, imgs, backend) -> tuple:
    """Every check, before anything is compiled: (N, C, H, W, M, K)."""
    xp = array_module(backend)
    check_array(x, "x", "NCHW", 4, backend, xp)
    check_array(w, "w", "MCKK", 4, backend, xp)
    check_array(b, "b", "(M,)", 1, backend, xp)
    check_int(imgs, "imgs", 1, 64)
    check_int(threads, "threads", 32, 1024)
    if threads % 32:
        raise ValueError(f"threads must be a multiple of 32 from 32 to 1024, got {threads}")
    N, C, H, W = (int(v) for v in x.shape)
    M, Cw, K, K2 = (int(v) for v in w.shape)
    if Cw != C or K != K2:
        raise ValueError(f"w must be (M, C={C}, K, K) for x of shape {tuple(x.shape)}, got {tuple(w.shape)}")
    if tuple(b.shape) != (M,):
        raise ValueError(f"b must have shape ({M},), got {tuple(b.shape)}")
    if (H - K + 1) // 2 < 1 or (W - K + 1) // 2 < 1:
        raise ValueError(f"a {K}x{K} kernel on a {H}x{W} plane leaves nothing to pool")
    if (M * C * K * K + M) * 4 > CONSTANT_MEMORY:
        raise ValueError(f"conv_pool_tanh keeps the weights in constant memory: {M * C * K * K} weights "
                         "do not fit 64 KiB; use labkit.conv2d and labkit.ops.max_pool2d")
    if conv_pool_shared_bytes(C, H, W, imgs) > SHARED_MEM_PER_BLOCK:
        raise ValueError(f"conv_pool_tanh stages {imgs} whole {C}x{H}x{W} image(s) in shared memory, "
                         f"{conv_pool_shared_bytes(C, H, W, imgs)} bytes, over 48 KiB: use "
                         "labkit.conv2d and labkit.ops.max_pool2d")
    return N, C, H, W, M, K


def _make_plan(sizes, threads: int, imgs: int, own: bool) -> _Plan:
    N, C, H, W, M, K = sizes
    mod = load("conv_pool", own=own, defines={"LAYER_C": C, "LAYER_M": M, "LAYER_K": K, "LAYER_H": H,
                                              "LAYER_W": W, "THREADS": threads, "IMGS": imgs})
    return _Plan(mod, mod.get_function("conv_pool_tanh").launcher((cdiv(N, imgs),), (threads,), (None, None) + ints(N)),
                 (N, M, (H - K + 1) // 2, (W - K + 1) // 2))


def conv_pool_tanh(x, w, b, *, out=None, threads: int = CONV_POOL_THREADS, imgs: int = 1):
    """Valid convolution (stride 1) + bias + tanh + 2x2 max-pool (stride 2), in one kernel.

    x float32 NCHW (N, C, H, W); w float32 MCKK (M, C, K, K); b float32 (M,).  Returns
    (N, M, (H-K+1)//2, (W-K+1)//2).
    """
    backend = backends.current()
    kind = array_type(backend)
    ok = fast_input(x, kind) and fast_input(w, kind) and fast_input(b, kind)
    key = (backend, getattr(x, "shape", None), getattr(w, "shape", None), getattr(b, "shape", None), threads, imgs)
    try:
        plan = _PLANS.get(key) if ok else None
    except TypeError:    # an unhashable option: the checks name it
        plan = None
    if plan is None:
        plan = _PLANS[key] = _make_plan(_check(x, w, b, threads, imgs, backend), threads, imgs, own=False)
    y = output(out, plan.out_shape, "NCHW", (x, w, b), backend=backend)
    plan.upload(w, b)        # the cached module may have served another layer since: every call
    plan.launch(x, y)
    return y


class ConvPoolTanh:
    """conv_pool_tanh as a layer: its weights copied into constant memory of its own, once per shape."""

    def __init__(self, w, b, *, threads: int = CONV_POOL_THREADS, imgs: int = 1):
        self.backend = backends.current()
        xp = array_module(self.backend)
        check_array(w, "w", "MCKK", 4, self.backend, xp)
        check_array(b, "b", "(M,)", 1, self.backend, xp)
        self.w, self.b, self.threads, self.imgs = xp.array(w), xp.array(b), threads, imgs
        self._kind = xp.ndarray
        self._plans: dict[tuple, _Plan] = {}

    def plan(self, x) -> _Plan:
        p = self._plans.get(x.shape)
        if p is None:
            p = _make_plan(_check(x, self.w, self.b, self.threads, self.imgs, self.backend), self.threads,
                           self.imgs, own=True)
            p.upload(self.w, self.b)
            self._plans[x.shape] = p
        return p

    def __call__(self, x, out=None):
        if not fast_input(x, self._kind):
            check_array(x, "x", "NCHW", 4, self.backend)
        p = self._plans.get(x.shape) or self.plan(x)
        y = output(out, p.out_shape, "NCHW", (x, self.w, self.b), backend=self.backend)
        p.launch(x, y)
        return y
