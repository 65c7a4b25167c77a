"""The layers around the convolutions, on the backend in use: pooling, softmax, and the fused
convolution + bias + tanh + 2x2 max-pool of the seed's first layer.

    y = layers.max_pool2d(x, k=2, stride=2)            # x float32 NCHW (labkit.xp array)
    p = layers.softmax(logits)                         # (N, D) rows
    y = layers.conv_pool_tanh(x, w, b)                 # (N, M, (H-K+1)//2, (W-K+1)//2)

Kernels: labkit/kernels/pool_softmax.cu and conv_pool.cu.  Every argument is checked before
anything is compiled or launched (the same checks as labkit.conv.conv2d).
"""
from __future__ import annotations

import numpy as np

from . import backends
from .conv import _check_array
from .loader import load, set_constant

__all__ = ["max_pool2d", "softmax", "lrn", "conv_pool_tanh", "CONV_POOL_THREADS", "conv_pool_shared_bytes"]

THREADS = 256
CONV_POOL_THREADS = 128
STATIC_SHARED_LIMIT = 48 * 1024
CONSTANT_LIMIT = 64 * 1024


def _backend():
    return backends.current(), backends.xp()


def _out(out, shape, name_fix, backend, xp):
    if out is None:
        return xp.empty(shape, dtype=xp.float32)
    layout = "NCHW" if len(shape) == 4 else "(N, D)"
    _check_array(out, "out", layout, len(shape), backend, xp,
                 dtype_fix=f"allocate it with {xp.__name__}.empty({shape}, dtype={xp.__name__}.float32)")
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"out must have shape {tuple(shape)} ({name_fix}), got {tuple(out.shape)}")
    return out


def max_pool2d(x, k: int = 2, stride: int | None = None, *, out=None):
    """Max-pooling of float32 NCHW ``x`` with a k x k window and ``stride`` (default k), no padding."""
    backend, xp = _backend()
    _check_array(x, "x", "NCHW", 4, backend, xp)
    stride = k if stride is None else stride
    for name, v in (("k", k), ("stride", stride)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    N, C, H, W = (int(v) for v in x.shape)
    if k > H or k > W:
        raise ValueError(f"a {k}x{k} window does not fit the {H}x{W} plane")
    PH, PW = (H - k) // stride + 1, (W - k) // stride + 1
    y = _out(out, (N, C, PH, PW), "N, C, (H-k)//stride+1, (W-k)//stride+1", backend, xp)
    total = N * C * PH * PW
    fn = load("pool_softmax").get_function("max_pool2d")
    fn((-(-total // THREADS),), (THREADS,),
       (x, y) + tuple(np.int32(v) for v in (N * C, H, W, PH, PW, k, stride)))
    return y


def softmax(x, *, out=None):
    """Softmax of each row of float32 ``x`` (N, D), on the backend: one warp per row."""
    backend, xp = _backend()
    _check_array(x, "x", "(N, D)", 2, backend, xp)
    N, D = (int(v) for v in x.shape)
    y = _out(out, (N, D), "the shape of x", backend, xp)
    rows_per_block = THREADS // 32
    load("pool_softmax").get_function("softmax_rows")(
        (-(-N // rows_per_block),), (THREADS,), (x, y, np.int32(N), np.int32(D)))
    return y


def lrn(x, depth_radius: int = 2, bias: float = 1.0, alpha: float = 2e-5, beta: float = 0.75, *, out=None):
    """Local response normalization across the channels of float32 NCHW ``x``, with TensorFlow's
    parameters and semantics (``tf.nn.local_response_normalization``; kernel: labkit/kernels/lrn.cu)."""
    backend, xp = _backend()
    _check_array(x, "x", "NCHW", 4, backend, xp)
    if isinstance(depth_radius, bool) or not isinstance(depth_radius, (int, np.integer)) or depth_radius < 0:
        raise ValueError(f"depth_radius must be an int >= 0, got {depth_radius!r}")
    for name, v in (("bias", bias), ("alpha", alpha), ("beta", beta)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not np.isfinite(v):
            raise ValueError(f"{name} must be a finite number, got {v!r}")
    if bias <= 0 or alpha < 0:
        raise ValueError(f"bias must be > 0 and alpha >= 0 (the base of the power stays positive), "
                         f"got bias={bias}, alpha={alpha}")
    N, C, H, W = (int(v) for v in x.shape)
    y = _out(out, (N, C, H, W), "the shape of x", backend, xp)
    load("lrn").get_function("lrn_across_channels")(
        (-(-(N * C * H * W) // THREADS),), (THREADS,),
        (x, y, np.int32(N), np.int32(C), np.int32(H * W), np.int32(depth_radius), np.float32(bias),
         np.float32(alpha), np.float32(beta)))
    return y


def conv_pool_shared_bytes(C: int, H: int, W: int, imgs: int = 1) -> int:
    """Static shared memory of conv_pool_tanh's block: ``imgs`` whole C x H x W images."""
    return imgs * C * H * W * 4


def conv_pool_tanh(x, w, b, *, out=None, threads: int = CONV_POOL_THREADS, imgs: int = 1):
    """Valid convolution (stride 1) + bias + tanh + 2x2 max-pool (stride 2), in one kernel.

    x float32 NCHW (N, C, H, W); w float32 MCKK (M, C, K, K); b float32 (M,).  Returns
    (N, M, (H-K+1)//2, (W-K+1)//2).  The layer's shape is compiled into the kernel (one module per
    shape, cached), the weights go to constant memory, and only the pooled output is written.
    """
    backend, xp = _backend()
    _check_array(x, "x", "NCHW", 4, backend, xp)
    _check_array(w, "w", "MCKK", 4, backend, xp)
    _check_array(b, "b", "(M,)", 1, backend, xp)
    N, C, H, W = (int(v) for v in x.shape)
    M, Cw, K, K2 = (int(v) for v in w.shape)
    if Cw != C or K != K2:
        raise ValueError(f"w must be (M, C={C}, K, K) for x of shape {tuple(x.shape)}, got {tuple(w.shape)}")
    if tuple(b.shape) != (M,):
        raise ValueError(f"b must have shape ({M},), got {tuple(b.shape)}")
    PH, PW = (H - K + 1) // 2, (W - K + 1) // 2
    if PH < 1 or PW < 1:
        raise ValueError(f"a {K}x{K} kernel on a {H}x{W} plane leaves nothing to pool")
    if (M * C * K * K + M) * 4 > CONSTANT_LIMIT:
        raise ValueError(f"conv_pool_tanh keeps the weights in constant memory: {M * C * K * K} weights "
                         "do not fit 64 KiB; use labkit.conv.conv2d and max_pool2d")
    if conv_pool_shared_bytes(C, H, W, imgs) > STATIC_SHARED_LIMIT:
        raise ValueError(f"conv_pool_tanh stages {imgs} whole {C}x{H}x{W} image(s) in shared memory, "
                         f"{conv_pool_shared_bytes(C, H, W, imgs)} bytes, over 48 KiB: use "
                         "labkit.conv.conv2d and max_pool2d")
    if threads % 32 or not 32 <= threads <= 1024:
        raise ValueError(f"threads must be a multiple of 32 from 32 to 1024, got {threads}")
    y = _out(out, (N, M, PH, PW), "N, M, (H-K+1)//2, (W-K+1)//2", backend, xp)
    mod = load("conv_pool", defines={"LAYER_C": C, "LAYER_M": M, "LAYER_K": K, "LAYER_H": H,
                                     "LAYER_W": W, "THREADS": threads, "IMGS": imgs})
    set_constant(mod, "c_weights", w.ravel())
    set_constant(mod, "c_bias", b)
    mod.get_function("conv_pool_tanh")((-(-N // imgs),), (threads,), (x, y, np.int32(N)))
    return y
