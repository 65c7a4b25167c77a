"""Depthwise 3x3 convolution (labkit/kernels/depthwise.cu): MobileNetV2's per-channel filters, stride 1
or 2, zero padding 1, bias and activation (None, ReLU, ReLU6) fused.

    layer = ConvLayer(C=144, H=56, W=56, M=144, K=3, stride=2, pad=1, groups=144)
    dw = DepthwiseConv2d(w, b, layer, activation="relu6")      # w (C, 1, 3, 3), b (C,)
    y = dw(x)                                                   # (N, 144, 56, 56) -> (N, 144, 28, 28)
    y = depthwise_conv2d(x, w, b, stride=2, activation="relu6") # the same in one call

Two rungs: ``variant="naive"`` (one thread per output, 9 global loads) and ``"tiled"`` (a tile of
input rows in shared memory, the 9 weights in registers, a sliding window down each column).  The
plane's geometry is a compile-time constant of the kernel (``Tiling``), channels and batch are
arguments: one module per plane size and tiling serves every layer of that size.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import backends
from ..backends.limits import SHARED_MEM_PER_BLOCK
from ..checks import (BASIC_ACTIVATIONS, array_module, array_type, check_activation, check_array, check_int,
                      fast_input, output)
from ..loader import load
from ..shapes import ConvLayer
from .plans import PlanCache, cdiv, ints

__all__ = ["DepthwiseConv2d", "depthwise_conv2d", "Tiling", "default_tiling", "depthwise_layer",
           "VARIANTS", "ACTIVATIONS", "NAIVE_THREADS", "floor_bytes"]

VARIANTS = ("naive", "tiled")
ACTIVATIONS = tuple(a for a in BASIC_ACTIVATIONS if a != "tanh") + ("relu6",)   # depthwise.cu's activate
NAIVE_THREADS = 256
_PLANS = PlanCache()


@dataclass(frozen=True)
class Tiling:
    """depthwise_tiled's compile-time tile: ``rows`` output rows of ``planes`` planes per block, each
    thread a column of ``rpt`` of them; ``threads`` per block."""
    rows: int
    planes: int
    rpt: int
    threads: int

    def shared_bytes(self, layer: ConvLayer) -> int:
        return self.planes * ((self.rows - 1) * layer.stride + 3) * (layer.W + 2) * 4

    def check(self, layer: ConvLayer) -> None:
        ho = layer.out_hw[0]
        for name in ("rows", "planes", "rpt", "threads"):
            check_int(getattr(self, name), name)
        if not self.rpt <= self.rows <= ho:
            raise ValueError(f"need 1 <= rpt <= rows <= {ho} (the output's rows): {self}")
        if self.threads > 1024 or self.threads % self.planes:
            raise ValueError(f"threads must be at most 1024 and a multiple of planes: {self}")
        if self.shared_bytes(layer) > SHARED_MEM_PER_BLOCK:
            raise ValueError(f"{self} needs {self.shared_bytes(layer)} bytes of shared memory for "
                             f"{layer.W}-wide planes, over {SHARED_MEM_PER_BLOCK // 1024} KiB: fewer rows or planes")

    def defines(self) -> dict:
        return {"DW_ROWS": self.rows, "DW_PLANES": self.planes, "DW_RPT": self.rpt, "DW_THREADS": self.threads}


def default_tiling(layer: ConvLayer, planes_available: int | None = None) -> Tiling:
    """A tile of about 7-8 outputs per thread and ~224-256 threads: whole planes up to 32 rows (16-row
    strips of taller ones), one thread per column of ``rpt`` rows, as many planes per block as fill
    256 threads (fewer where the batch has fewer planes, or shared memory runs out)."""
    ho, wo = layer.out_hw
    rows = ho if ho <= 32 else 16
    rpt = cdiv(rows, cdiv(rows, 8))
    per_plane = min(1024, wo * cdiv(rows, rpt))
    planes = max(1, 256 // per_plane)
    if planes_available is not None:
        planes = max(1, min(planes, planes_available))
    while planes > 1 and Tiling(rows, planes, rpt, planes * per_plane).shared_bytes(layer) > SHARED_MEM_PER_BLOCK:
        planes //= 2
    t = Tiling(rows, planes, rpt, planes * per_plane)
    while t.shared_bytes(layer) > SHARED_MEM_PER_BLOCK and t.rows > 1:   # very wide planes: shorter strips
        rows = max(1, t.rows // 2)
        t = Tiling(rows, 1, min(t.rpt, rows), min(1024, wo * cdiv(rows, min(t.rpt, rows))))
    return t


def depthwise_layer(C: int, H: int, W: int, stride: int = 1) -> ConvLayer:
    """The ConvLayer of a depthwise 3x3, padding 1: C channels in and out, groups = C."""
    return ConvLayer(C, H, W, C, 3, stride, 1, C)


def floor_bytes(layer: ConvLayer, N: int) -> int:
    """The least memory traffic of the layer: x read once, y written once (weights aside)."""
    ho, wo = layer.out_hw
    return 4 * N * layer.C * (layer.H * layer.W + ho * wo)


def _check_layer(layer) -> ConvLayer:
    layer = ConvLayer(*layer)
    layer.check()
    if not (layer.groups == layer.C == layer.M and layer.K == 3 and layer.pad == 1 and layer.stride in (1, 2)):
        raise ValueError(f"depthwise.cu runs 3x3 depthwise layers (groups = C = M, K=3, pad=1, stride 1 or 2), "
                         f"got {layer}: use labkit.layers.ImplicitConv2d for other convolutions")
    return layer


class _Plan:
    def __init__(self, layer: ConvLayer, variant: str, tiling: Tiling | None, N: int, has_bias: int, act: int):
        ho, wo = layer.out_hw
        defines = {"DW_H": layer.H, "DW_W": layer.W, "DW_S": layer.stride}
        NC = N * layer.C
        if NC * max(layer.H * layer.W, ho * wo) >= 2**31:
            raise ValueError(f"batch {N} makes x or y over 2**31 elements: split the batch")
        tail = ints(NC, layer.C, has_bias, act)
        if variant == "naive":
            # The module is the tiled rung's for this plane (the same defines): one compile serves both.
            defines.update(default_tiling(layer, NC).defines())
            fn = load("depthwise", defines=defines).get_function("depthwise_naive")
            self.grid, self.block, self.shared = (cdiv(NC * ho * wo, NAIVE_THREADS),), (NAIVE_THREADS,), 0
        else:
            tiling = tiling or default_tiling(layer, NC)
            tiling.check(layer)
            defines.update(tiling.defines())
            fn = load("depthwise", defines=defines).get_function("depthwise_tiled")
            self.grid = (cdiv(ho, tiling.rows), cdiv(NC, tiling.planes))
            if self.grid[1] > 65535:
                raise ValueError(f"batch {N} needs {self.grid[1]} blocks along y (at most 65535): split the batch")
            self.block, self.shared = (tiling.threads,), tiling.shared_bytes(layer)
        self.fn, self.tail, self.tiling = fn, tail, tiling
        self.out_shape = (N, layer.C, ho, wo)

    def bind(self, w, b):
        return self.fn.launcher(self.grid, self.block, (None, w, b, None) + self.tail, self.shared)


class DepthwiseConv2d:
    """A depthwise 3x3 layer, its weights placed once; per batch size a plan (function, grid, block,
    shared memory) made once; a call checks x and launches.

    Args:
        w: float32 (C, 1, 3, 3) on the backend;  b: float32 (C,) or None.
        layer: its ``ConvLayer`` (``depthwise_layer(C, H, W, stride)``).
        activation: None, "relu" or "relu6", fused.
        variant: "tiled" (default) or "naive".
        tiling: a ``Tiling`` instead of ``default_tiling`` (a sweep passes each one).
    """

    def __init__(self, w, b, layer: ConvLayer, *, activation: str | None = None, variant: str = "tiled",
                 tiling: Tiling | None = None):
        self.backend = backend = backends.current()
        xp = array_module(backend)
        self.layer = layer = _check_layer(layer)
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
        if tiling is not None:
            if not isinstance(tiling, Tiling):
                raise TypeError(f"tiling must be a labkit.ops.depthwise.Tiling, got {type(tiling).__name__}")
            tiling.check(layer)
        self._act = check_activation(activation, ACTIVATIONS)
        check_array(w, "w", "(C, 1, 3, 3)", 4, backend, xp)
        if tuple(w.shape) != (layer.C, 1, 3, 3):
            raise ValueError(f"w must have shape ({layer.C}, 1, 3, 3) (C, 1, K, K), got {tuple(w.shape)}")
        if b is not None:
            check_array(b, "b", "(C,)", 1, backend, xp)
            if tuple(b.shape) != (layer.C,):
                raise ValueError(f"b must have shape ({layer.C},), got {tuple(b.shape)}")
        self.activation, self.variant, self.tiling = activation, variant, tiling
        self._w9 = xp.ascontiguousarray(w.reshape(layer.C, 9))
        self._w, self.b = w, b
        self._kind = xp.ndarray
        self._x_shape = (layer.C, layer.H, layer.W)
        self._plans: dict[int, tuple] = {}

    def plan(self, N: int) -> _Plan:
        return self._entry(N)[0]

    def _entry(self, N: int) -> tuple:
        entry = self._plans.get(N)
        if entry is None:
            has_bias = int(self.b is not None)
            key = (self.backend, self.layer, self.variant, self.tiling, N, has_bias, self._act)
            plan = _PLANS.get(key)
            if plan is None:
                plan = _PLANS[key] = _Plan(self.layer, self.variant, self.tiling, N, has_bias, self._act)
            entry = self._plans[N] = (plan, plan.bind(self._w9, self._w9 if self.b is None else self.b))
        return entry

    def __call__(self, x, out=None):
        """y = act(depthwise(x) + b) of float32 (N, C, H, W) x."""
        if not (fast_input(x, self._kind) and x.shape[1:] == self._x_shape):
            L = self.layer
            check_array(x, "x", "NCHW", 4, self.backend)
            if tuple(x.shape[1:]) != self._x_shape:
                raise ValueError(f"x must be (N, {L.C}, {L.H}, {L.W}) for this layer, got {tuple(x.shape)}")
        plan, launch = self._plans.get(x.shape[0]) or self._entry(int(x.shape[0]))
        y = output(out, plan.out_shape, "NCHW", (x, self._w, self.b), backend=self.backend)
        launch(x, y)
        return y


def depthwise_conv2d(x, w, b=None, *, stride: int = 1, activation: str | None = None, variant: str = "tiled",
                     tiling: Tiling | None = None, out=None):
    """y = act(depthwise3x3(x, w) + b), padding 1, stride 1 or 2: x float32 (N, C, H, W), w (C, 1, 3, 3)."""
    backend = backends.current()
    if not (fast_input(x, array_type(backend)) and x.ndim == 4):
        check_array(x, "x", "NCHW", 4, backend)
    _, C, H, W = (int(v) for v in x.shape)
    layer = depthwise_layer(C, H, W, check_int(stride, "stride", 1, 2))
    return DepthwiseConv2d(w, b, layer, activation=activation, variant=variant, tiling=tiling)(x, out=out)
