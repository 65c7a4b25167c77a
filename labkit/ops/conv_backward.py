"""The convolution's backward pass (labkit/kernels/conv_backward.cu), on the backend in use.

    dx = conv2d_backward_data(dy, w, layer)          # dL/dx, (N, C, H, W)
    dw = conv2d_backward_weight(x, dy, layer)        # dL/dw, (M, C, K, K)
    db = conv2d_backward_bias(dy)                    # dL/db, (M,)
    bwd = BackwardData(wt, layer); dx = bwd(dy)      # stride 1: the implicit GEMM on flipped weights

``layer`` is the forward convolution's ``ConvLayer`` (groups 1).  Weights and their gradient are
(M, C, K, K), or with ``layout="CKKM"`` (C*K*K, M): the transposed layout the implicit GEMM's forward
kernel reads, in which a training loop keeps its weights.  Rungs: ``variant="direct"`` (a thread per
dx element, a block per dw and db element) and, for the weights, ``"tiled"`` (the default: a tiled
GEMM over the output pixels, split over the grid, the slices added in a fixed order).  The plan of
each shape is made once (with the tiled rung's workspace), a call checks its arrays and launches.
"""
from __future__ import annotations

import numpy as np

from .. import backends
from ..checks import array_module, check_array, check_shape, output
from ..device_query import gpu_sm_count
from ..loader import load
from ..shapes import ConvLayer
from .implicit import ImplicitConv2d
from .plans import PlanCache, cdiv, ints

__all__ = ["conv2d_backward_data", "conv2d_backward_weight", "BackwardData", "conv2d_backward_bias", "LAYOUTS",
           "WEIGHT_VARIANTS", "THREADS", "TILE_J", "TILE_M", "TILE_R"]

LAYOUTS = ("MCKK", "CKKM")
WEIGHT_VARIANTS = ("direct", "tiled")
TILE_J, TILE_M, TILE_R = 64, 16, 32       # conv_backward.cu's CB_J, CB_M, CB_R

THREADS = 256
_PLANS = PlanCache()


def _layer(layer) -> ConvLayer:
    layer = ConvLayer(*layer)
    layer.check()
    layer.require_square("conv_backward.cu")
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
    plan = _PLANS.get_or_make(key, lambda: load("conv_backward").get_function(kernel).launcher(
        grid, block, (None,) * len(arrays) + (None,) + tail))
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


def _slices(L: ConvLayer, N: int, backend: str) -> tuple[int, int]:
    """(slices, pixels per slice) of the tiled rung: about 4 blocks per SM in all on a GPU (2 slices
    at most on the CPU executor, where the grid runs on 2 cores), each slice a whole number of
    TILE_R pixels."""
    R = N * L.out_hw[0] * L.out_hw[1]
    tiles = cdiv(L.C * L.K * L.K, TILE_J) * cdiv(L.M, TILE_M)
    want = max(1, 4 * gpu_sm_count() // tiles) if backend == "cuda" else 2
    per = cdiv(cdiv(R, min(want, cdiv(R, TILE_R))), TILE_R) * TILE_R
    return cdiv(R, per), per


def conv2d_backward_weight(x, dy, layer, *, layout: str = "MCKK", variant: str = "tiled", out=None):
    """dL/dw of y = conv2d(x, w) for float32 x (N, C, H, W) and dy (N, M, HO, WO): (M, C, K, K), or
    (C*K*K, M) with layout="CKKM"."""
    if variant not in WEIGHT_VARIANTS:
        raise ValueError(f"variant must be one of {WEIGHT_VARIANTS}, got {variant!r}")
    backend = backends.current()
    L = _layer(layer)
    N = _dy_shape(dy, L, backend)
    check_array(x, "x", "NCHW", 4, backend)
    check_shape(x, "x", (N, L.C, L.H, L.W), f"(N, C, H, W) of {L}")
    dw = output(out, _weight_shape(L, layout), layout, (x, dy), backend=backend)
    ho, wo = L.out_hw
    if variant == "tiled":

        def make():
            slices, per = _slices(L, N, backend)
            J = L.C * L.K * L.K
            mod = load("conv_backward")
            ws = array_module(backend).empty((slices, J, L.M), dtype=np.float32)
            tiled = mod.get_function("conv_bwd_weight_tiled").launcher(
                (cdiv(J, TILE_J), cdiv(L.M, TILE_M), slices), (THREADS,),
                (None, None, ws) + ints(N, L.C, L.H, L.W, L.M, L.K, L.stride, L.pad, ho, wo, per))
            reduce = mod.get_function("conv_bwd_weight_reduce").launcher(
                (cdiv(J * L.M, THREADS),), (THREADS,), (ws, None) + ints(slices, J * L.M, L.M, layout == "CKKM"))
            return tiled, reduce
        tiled, reduce = _PLANS.get_or_make((backend, "weight_tiled", L, N, layout), make)
        tiled(x, dy)
        reduce(dw)
        return dw
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


class BackwardData:
    """Backward data of a stride-1 convolution on the implicit GEMM's forward kernel: dx = conv(dy, w')
    with w' = w turned 180 degrees, C and M swapped, padding K - 1 - P.  ``wt``: the layer's weights in
    the (C*K*K, M) layout, read at each call (a training loop updates them in place): each call first
    lays w' out (flip_weights, one small launch), then runs the convolution.

        bwd = BackwardData(net.params["block1.conv1.w"], layer)
        dx = bwd(dy, out=dx)
    """

    def __init__(self, wt, layer):
        backend = backends.current()
        L = _layer(layer)
        if L.stride != 1 or L.pad > L.K - 1:
            raise ValueError(f"BackwardData runs stride-1 layers with pad <= K - 1, got {L}: use "
                             "conv2d_backward_data")
        want = _weight_shape(L, "CKKM")
        check_array(wt, "wt", "CKKM", 2, backend)
        check_shape(wt, "wt", want, f"(C*K*K, M) of {L}")
        self.layer, self.wt = L, wt
        ho, wo = L.out_hw
        self.wf = array_module(backend).empty((L.M * L.K * L.K, L.C), dtype=np.float32)
        self.conv = ImplicitConv2d(self.wf, None, ConvLayer(L.M, ho, wo, L.C, L.K, 1, L.K - 1 - L.pad),
                                   weights_layout="CKKM")
        n = L.C * L.K * L.K * L.M
        self._flip = load("conv_backward").get_function("flip_weights").launcher(
            (cdiv(n, THREADS),), (THREADS,), (wt, self.wf) + ints(L.C, L.M, L.K))

    def plan(self, N: int):
        """The convolution's launch of batch size N (the flip's launch is made in __init__)."""
        return self.conv.plan(N)

    def __call__(self, dy, out=None):
        self._flip()
        return self.conv(dy, out)
