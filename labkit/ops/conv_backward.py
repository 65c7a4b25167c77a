"""The convolution's backward pass (labkit/kernels/conv_backward.cu), on the backend in use.

    dx = conv2d_backward_data(dy, w, layer)          # dL/dx, (N, C, H, W)
    dw = conv2d_backward_weight(x, dy, layer)        # dL/dw, (M, C, K, K)
    db = conv2d_backward_bias(dy)                    # dL/db, (M,)

``layer`` is the forward convolution's ``ConvLayer`` (groups 1).  Weights and their gradient are
(M, C, K, K), or with ``layout="CKKM"`` (C*K*K, M): the transposed layout the implicit GEMM's forward
kernel reads, in which a training loop keeps its weights.  The first rung, direct: a thread per dx
element, a block per dw and db element; the plan of each shape is made once, a call checks its
arrays and launches.
"""
from __future__ import annotations

from .. import backends
from ..checks import check_array, check_shape, output
from ..loader import load
from ..shapes import ConvLayer
from .plans import PlanCache, cdiv, ints

__all__ = ["conv2d_backward_data", "conv2d_backward_weight", "conv2d_backward_bias", "LAYOUTS", "THREADS"]

LAYOUTS = ("MCKK", "CKKM")

THREADS = 256
_PLANS = PlanCache()


def _layer(layer) -> ConvLayer:
    layer = ConvLayer(*layer)
    layer.check()
    if layer.groups != 1:
        raise ValueError(f"conv_backward.cu takes groups = 1, got {layer}")
    return layer


def _dy_shape(dy, layer: ConvLayer, backend: str) -> int:
    """Check dy against the layer; its batch size."""
    check_array(dy, "dy", "NCHW", 4, backend)
    N = int(dy.shape[0])
    check_shape(dy, "dy", (N, layer.M) + layer.out_hw, f"(N, M, HO, WO) of {layer}")
    return N


def _launch(kernel: str, key: tuple, grid, block, tail: tuple, arrays: tuple, out):
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = load("conv_backward").get_function(kernel).launcher(
            grid, block, (None,) * len(arrays) + (None,) + tail)
    plan(*arrays, out)
    return out


def _weight_shape(L: ConvLayer, layout: str) -> tuple:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    return (L.M, L.C, L.K, L.K) if layout == "MCKK" else (L.C * L.K * L.K, L.M)


def conv2d_backward_data(dy, w, layer, *, layout: str = "MCKK", out=None):
    """dL/dx of y = conv2d(x, w) for float32 dy (N, M, HO, WO) and w (M, C, K, K) (or (C*K*K, M)
    with layout="CKKM"): (N, C, H, W)."""
    backend = backends.current()
    L = _layer(layer)
    N = _dy_shape(dy, L, backend)
    want = _weight_shape(L, layout)
    check_array(w, "w", layout, len(want), backend)
    check_shape(w, "w", want, f"{layout} of {L}")
    dx = output(out, (N, L.C, L.H, L.W), "NCHW", (dy, w), backend=backend)
    ho, wo = L.out_hw
    total = N * L.C * L.H * L.W
    return _launch("conv_bwd_data_direct", (backend, "data", L, N, layout), (cdiv(total, THREADS),), (THREADS,),
                   ints(N, L.C, L.H, L.W, L.M, L.K, L.stride, L.pad, ho, wo, layout == "CKKM"), (dy, w), dx)


def conv2d_backward_weight(x, dy, layer, *, layout: str = "MCKK", out=None):
    """dL/dw of y = conv2d(x, w) for float32 x (N, C, H, W) and dy (N, M, HO, WO): (M, C, K, K), or
    (C*K*K, M) with layout="CKKM"."""
    backend = backends.current()
    L = _layer(layer)
    N = _dy_shape(dy, L, backend)
    check_array(x, "x", "NCHW", 4, backend)
    check_shape(x, "x", (N, L.C, L.H, L.W), f"(N, C, H, W) of {L}")
    dw = output(out, _weight_shape(L, layout), layout, (x, dy), backend=backend)
    ho, wo = L.out_hw
    return _launch("conv_bwd_weight_direct", (backend, "weight", L, N, layout), (L.M * L.C * L.K * L.K,),
                   (THREADS,), ints(N, L.C, L.H, L.W, L.M, L.K, L.stride, L.pad, ho, wo, layout == "CKKM"), (x, dy), dw)


def conv2d_backward_bias(dy, *, out=None):
    """dL/db of y = conv2d(x, w, b) for float32 dy (N, M, HO, WO): (M,), the sum over all but M."""
    backend = backends.current()
    check_array(dy, "dy", "NCHW", 4, backend)
    N, M, HO, WO = (int(v) for v in dy.shape)
    db = output(out, (M,), "(M,)", (dy,), backend=backend)
    return _launch("conv_bwd_bias", (backend, "bias", N, M, HO * WO), (M,), (THREADS,), ints(N, M, HO * WO),
                   (dy,), db)
