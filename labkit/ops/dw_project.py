"""An inverted residual's depthwise 3x3 (+ ReLU6) and linear 1x1 projection (+ the skip) in one kernel
(labkit/kernels/dw_project.cu): the depthwise outputs are computed in shared memory, never stored.

    dwp = DepthwiseProject(wdw, bdw, wp, bp, depthwise_layer(960, 7, 7, 1), residual=True)
    y = dwp(h, residual=block_input)          # h (N, 960, 7, 7) -> y (N, 160, 7, 7)

The same as ``DepthwiseConv2d(wdw, bdw, layer, activation="relu6")`` followed by
``ImplicitConv2d(wp, bp, ConvLayer(C, Ho, Wo, M, 1), residual=...)``, without the round trip of the
depthwise output through memory and with one launch instead of two -- but, as it stands, slower:
1.8-6.8x the two kernels' time on MobileNetV2's small-plane blocks on an H100 (dw_project.cu says why).
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import backends
from ..backends.limits import SHARED_MEM_PER_BLOCK
from ..checks import array_module, check_array, check_int, check_residual, fast_input, output
from ..loader import load
from ..shapes import ConvLayer
from .depthwise import depthwise_layer
from .implicit import prepare_weights
from .plans import PlanCache, cdiv, ints

__all__ = ["DepthwiseProject", "ProjectTiles"]

_PLANS = PlanCache()


@dataclass(frozen=True)
class ProjectTiles:
    """The block's tile of the projection's output: bm channels x bn pixels, bk channels per step."""
    bm: int = 32
    bn: int = 64
    bk: int = 8

    @property
    def threads(self) -> int:
        return (self.bm // 4) * (self.bn // 4)

    def check(self) -> None:
        for k in ("bm", "bn", "bk"):
            check_int(getattr(self, k), k)
        t = self.threads
        if self.bm % 4 or self.bn % 4 or t % self.bn or self.bk % (t // self.bn) or t > 1024 or \
                (self.bm + self.bn) * self.bk * 4 > SHARED_MEM_PER_BLOCK:
            raise ValueError(f"{self}: bm, bn multiples of 4; (bm/4)*(bn/4) threads (at most 1024) a multiple "
                             "of bn; bk a multiple of threads/bn; the tiles within 48 KiB")


class DepthwiseProject:
    """Depthwise 3x3 + ReLU6 and the linear 1x1 projection (+ residual) as one layer.

    Args:
        wdw (C, 1, 3, 3), bdw (C,): the depthwise layer (BN folded);  wp (M, C, 1, 1), bp (M,): the
        projection (BN folded); all float32 on the backend.
        layer: the depthwise layer's ConvLayer (``depthwise_layer(C, H, W, stride)``).
        residual: True if each call adds ``residual=`` (the block's input, of y's shape).
        tiles: a ``ProjectTiles`` (default 32 x 64 x 8).
    """

    def __init__(self, wdw, bdw, wp, bp, layer: ConvLayer, *, residual: bool = False,
                 tiles: ProjectTiles | None = None):
        self.backend = backend = backends.current()
        xp = array_module(backend)
        layer = ConvLayer(*layer).canonical()
        if layer != depthwise_layer(layer.C, layer.H, layer.W, layer.stride) or layer.stride not in (1, 2):
            raise ValueError(f"{layer} is not a 3x3 depthwise layer of stride 1 or 2 with padding 1")
        C = layer.C
        for a, name, layout, ndim in ((wdw, "wdw", "(C, 1, 3, 3)", 4), (bdw, "bdw", "(C,)", 1),
                                      (wp, "wp", "(M, C, 1, 1)", 4), (bp, "bp", "(M,)", 1)):
            check_array(a, name, layout, ndim, backend, xp)
        if tuple(wdw.shape) != (C, 1, 3, 3) or tuple(bdw.shape) != (C,):
            raise ValueError(f"wdw must be ({C}, 1, 3, 3) and bdw ({C},), got {tuple(wdw.shape)}, {tuple(bdw.shape)}")
        if wp.ndim != 4 or tuple(wp.shape[1:]) != (C, 1, 1) or tuple(bp.shape) != (wp.shape[0],):
            raise ValueError(f"wp must be (M, {C}, 1, 1) and bp (M,), got {tuple(wp.shape)}, {tuple(bp.shape)}")
        if not isinstance(residual, bool):
            raise TypeError(f"residual must be True or False, got {residual!r}")
        self.tiles = tiles or ProjectTiles()
        self.tiles.check()
        self.layer, self.M, self.residual = layer, int(wp.shape[0]), residual
        ho, wo = layer.out_hw
        self._out = (self.M, ho, wo)
        self._wdw = xp.ascontiguousarray(wdw.reshape(C, 9))
        self._wpt = prepare_weights(wp, 1)[0]               # (C, M): the projection's weights transposed
        self._bdw, self._bp = bdw, bp
        self._kind = xp.ndarray
        self._x_shape = (C, layer.H, layer.W)
        self._plans: dict[int, tuple] = {}

    def plan(self, N: int) -> tuple:
        """(output shape, launch) of a batch of N, made once (the kernel compiled on first use)."""
        return self._entry(N)

    def _entry(self, N: int):
        entry = self._plans.get(N)
        if entry is None:
            L, t = self.layer, self.tiles

            def make():
                ho, wo = L.out_hw
                if N * max(L.C * L.H * L.W, self.M * ho * wo) >= 2**31:
                    raise ValueError(f"batch {N} makes x or y over 2**31 elements: split the batch")
                mod = load("dw_project", defines={"DP_C": L.C, "DP_H": L.H, "DP_W": L.W, "DP_S": L.stride,
                                                  "DP_M": self.M, "DP_BM": t.bm, "DP_BN": t.bn, "DP_BK": t.bk})
                return mod.get_function("dw_project"), (cdiv(N * ho * wo, t.bn), cdiv(self.M, t.bm)), (t.threads,)
            fn, grid, block = _PLANS.get_or_make((self.backend, L, self.M, t, N, self.residual), make)
            res = None if self.residual else self._bp            # without a residual: never read
            launch = fn.launcher(grid, block, (None, self._wdw, self._bdw, self._wpt, self._bp, res, None)
                                 + ints(N, int(self.residual)))
            entry = self._plans[N] = ((N,) + self._out, launch)
        return entry

    def __call__(self, x, out=None, *, residual=None):
        """y = project(relu6(depthwise(x) + bdw)) + bp [+ residual]."""
        if not (fast_input(x, self._kind) and x.shape[1:] == self._x_shape):
            check_array(x, "x", "NCHW", 4, self.backend)
            if tuple(x.shape[1:]) != self._x_shape:
                raise ValueError(f"x must be (N, {', '.join(map(str, self._x_shape))}), got {tuple(x.shape)}")
        shape, launch = self._plans.get(x.shape[0]) or self._entry(int(x.shape[0]))
        extra = check_residual(residual, shape, self.residual, self._kind, self.backend, "DepthwiseProject")
        y = output(out, shape, "NCHW", (x, self._wdw, self._wpt) + extra, backend=self.backend)
        launch(x, *extra, y)
        return y
