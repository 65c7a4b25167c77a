"""Winograd's 3x3 kernel on 3x3 layers it was not written for: dilated ones and unpadded ones.

conv_winograd.cu does one geometry, a 3x3 window at stride 1 with padding 1 ("same").  Two others
become that one by moving data, not by a new kernel:

* Dilation d (per axis): output row oh = i * d + r reads input rows oh - d, oh, oh + d, all of
  phase r (rows r, r + d, r + 2d, ...).  So the d x d phases of the input, each a ceil(H/d) x
  ceil(W/d) plane, are d^2 independent undilated 3x3 convolutions, and phase (r, s) of the output is
  phase (r, s)'s result ("space to batch", TensorFlow's atrous convolution).  Padding d of the
  dilated layer is padding 1 of each phase.  Where d does not divide the side, the shorter phases
  end in a row (column) of zeros, which is what the padding would have read.
* No padding: the "same" result cropped by one row and column on every side (3% more work on a
  128 x 128 image, and a copy of the output): valid output i of a phase reads its rows i .. i + 2,
  as 'same' output i + 1 does.

``PhasedWinograd`` copies x's phases into a batch of N * dh * dw images, runs ``WinogradConv3x3`` on
it (bias and ReLU fused there: they act per channel and commute with the copies), and copies the
phases (cropped or not) back into y.  The copies move x and y once more through memory: on large
layers a few percent of the time Winograd saves over a direct or implicit-GEMM kernel.
"""
from __future__ import annotations

from ..checks import array_module, output
from ..shapes import ConvLayer
from .conv_winograd import WinogradConv3x3, WinogradTile

__all__ = ["PhasedWinograd", "phased_geometry"]


def phased_geometry(layer: ConvLayer) -> tuple[int, int, int, int, bool] | None:
    """(dh, dw, ceil(H/dh), ceil(W/dw), crop) where ``layer`` is a 3x3 stride-1 single-group layer that phases and
    a crop turn into Winograd's 'same' geometry (padding equal to the dilation on both axes, or none on
    both), else None.  The plain 'same' layer itself (no dilation, padding 1) is not one: it needs
    no copies."""
    (KH, KW), (SH, SW), (PH, PW), (DH, DW) = layer.kernel_hw, layer.stride_hw, layer.pad_hw, layer.dilation_hw
    if (KH, KW) != (3, 3) or (SH, SW) != (1, 1) or layer.groups != 1:
        return None
    crop = (PH, PW) == (0, 0)
    if not crop and (PH, PW) != (DH, DW):
        return None
    if not crop and (DH, DW) == (1, 1):
        return None
    h, w = -(-layer.H // DH), -(-layer.W // DW)
    if crop and min(h, w) < 3:
        return None
    return DH, DW, h, w, crop


class PhasedWinograd:
    """A dilated or unpadded 3x3 layer on conv_winograd.cu (see the module's docstring).

    Args: ``wt`` the forward layer's weights (C*9, M), ``b`` (M,) or None, ``layer`` (one that
    ``phased_geometry`` accepts), ``activation`` None or "relu", ``tile`` the Winograd tile for the
    phase plane (C -> M on H/dh x W/dw)."""

    def __init__(self, wt, b, layer: ConvLayer, *, activation: str | None = None, tile: WinogradTile | None = None):
        geometry = phased_geometry(layer)
        if geometry is None:
            raise ValueError(f"{layer.key} is not a dilated or unpadded 3x3 stride-1 layer whose phases are "
                             "'same' 3x3 convolutions")
        self.dh, self.dw, self.h, self.w, self.crop = geometry
        self.layer = layer
        self.plane = ConvLayer.of(layer.C, self.h, self.w, layer.M, 3, 1, 1)
        self.conv = WinogradConv3x3(wt, b, self.plane, activation=activation, tile=tile)
        self.xp = array_module(self.conv.backend)
        self._buffers: dict[int, tuple] = {}

    def _scratch(self, N: int) -> tuple:
        """The phases of x and of y for a batch of N: zeros where a phase is shorter than the plane
        (never written afterwards)."""
        bufs = self._buffers.get(N)
        if bufs is None:
            L, xp, n = self.layer, self.xp, N * self.dh * self.dw
            bufs = self._buffers[N] = (None if (self.dh, self.dw) == (1, 1) else
                                       xp.zeros((N, self.dh, self.dw, L.C, self.h, self.w), dtype=xp.float32),
                                       xp.empty((n, L.M, self.h, self.w), dtype=xp.float32))
        return bufs

    def plan(self, N: int):
        """Winograd's plan for the N * dh * dw phase images (compiled once)."""
        return self.conv.plan(N * self.dh * self.dw)

    def __call__(self, x, out=None):
        L, dh, dw, h, w = self.layer, self.dh, self.dw, self.h, self.w
        N = int(x.shape[0])
        ho, wo = L.out_hw
        y = output(out, (N, L.M, ho, wo), "NCHW", (x,), backend=self.conv.backend)
        xs, ys = self._scratch(N)
        if xs is None:   # undilated, unpadded: x is already the one phase
            self.conv(x, out=ys)
        else:
            for r in range(dh):      # x[n, c, i*dh + r, j*dw + s] -> xs[n, r, s, c, i, j]
                for s in range(dw):
                    xs[:, r, s, :, :-(-(L.H - r) // dh), :-(-(L.W - s) // dw)] = x[:, :, r::dh, s::dw]
            self.conv(xs.reshape(N * dh * dw, L.C, h, w), out=ys)
        phases = ys.reshape(N, dh, dw, L.M, h, w)
        first = 1 if self.crop else 0      # valid output i is 'same' output i + 1
        for r in range(min(dh, ho)):       # ys[n, r, s, m, first + i, first + j] -> y[n, m, i*dh + r, j*dw + s]
            for s in range(min(dw, wo)):
                rows, cols = -(-(ho - r) // dh), -(-(wo - s) // dw)
                y[:, :, r::dh, s::dw] = phases[:, r, s, :, first:first + rows, first:first + cols]
        return y
