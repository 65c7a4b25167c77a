"""Winograd's 3x3 kernel on 3x3 layers it was not written for: dilated, unpadded and grouped ones.

conv_winograd.cu does one geometry, a 3x3 window at stride 1 with padding 1 ("same") over all the
input channels.  Three others become that one by moving data, not by a new kernel:

* Dilation d (per axis): output row oh = i * d + r reads input rows oh - d, oh, oh + d, all of
  phase r (rows r, r + d, r + 2d, ...).  So the d x d phases of the input, each a ceil(H/d) x
  ceil(W/d) plane, are d^2 independent undilated 3x3 convolutions, and phase (r, s) of the output is
  phase (r, s)'s result ("space to batch", TensorFlow's atrous convolution).  Padding d of the
  dilated layer is padding 1 of each phase.  Where d does not divide the side, the shorter phases
  end in a row (column) of zeros, which is what the padding would have read.
* No padding: the "same" result cropped by one row and column on every side (3% more work on a
  128 x 128 image, and a copy of the output): valid output i of a phase reads its rows i .. i + 2,
  as 'same' output i + 1 does.
* A few groups (2 to MAX_GROUPS): each group is its own convolution of C/G -> M/G channels, over
  its slice of the input's channels, which is not contiguous across images: it is copied out.

``PhasedWinograd`` copies each group's phases of x into a batch of N * dh * dw images, runs one
``WinogradConv3x3`` a group on it (bias and ReLU fused there: they act per channel and commute with
the copies), and copies the phases (cropped or not) back into y.  The copies move x and y once more
through memory: on large layers a part of the time Winograd saves over a direct or implicit-GEMM
kernel, which the autotuner weighs (it times these beside the implicit GEMM).
"""
from __future__ import annotations

from ..checks import array_module, output
from ..shapes import ConvLayer
from .conv_winograd import WinogradConv3x3, WinogradTile
from .implicit import prepare_weights

__all__ = ["PhasedWinograd", "phased_geometry", "MAX_GROUPS"]

MAX_GROUPS = 8   # a launch and two copies a group: more groups of fewer channels are not worth it


def phased_geometry(layer: ConvLayer) -> tuple[int, int, int, int, bool] | None:
    """(dh, dw, ceil(H/dh), ceil(W/dw), crop) where ``layer`` is a 3x3 stride-1 layer of at most
    MAX_GROUPS groups that phases, a crop and group slices turn into Winograd's 'same' geometry
    (padding equal to the dilation on both axes, or none on both), else None.  The plain 'same'
    layer of one group (no dilation, padding 1) is not one: it needs no copies."""
    (KH, KW), (SH, SW), (PH, PW), (DH, DW) = layer.kernel_hw, layer.stride_hw, layer.pad_hw, layer.dilation_hw
    if (KH, KW) != (3, 3) or (SH, SW) != (1, 1) or layer.groups > MAX_GROUPS:
        return None
    crop = (PH, PW) == (0, 0)
    if not crop and (PH, PW) != (DH, DW):
        return None
    if not crop and (DH, DW) == (1, 1) and layer.groups == 1:
        return None
    h, w = -(-layer.H // DH), -(-layer.W // DW)
    if crop and min(h, w) < 3:
        return None
    return DH, DW, h, w, crop


class PhasedWinograd:
    """A dilated, unpadded or grouped 3x3 layer on conv_winograd.cu (see the module's docstring).

    Args: ``w`` float32 (M, C/groups, 3, 3) on the backend, ``b`` (M,) or None, ``layer`` (one that
    ``phased_geometry`` accepts), ``activation`` None or "relu", ``tile`` the Winograd tile of each
    group's phase plane (C/G -> M/G on ceil(H/dh) x ceil(W/dw))."""

    def __init__(self, w, b, layer: ConvLayer, *, activation: str | None = None, tile: WinogradTile | None = None):
        geometry = phased_geometry(layer)
        if geometry is None:
            raise ValueError(f"{layer.key} is not a 3x3 stride-1 layer (dilated, unpadded or of at most "
                             f"{MAX_GROUPS} groups) whose phases are 'same' 3x3 convolutions")
        self.dh, self.dw, self.h, self.w, self.crop = geometry
        self.layer = L = layer
        G = L.groups
        self.cg, self.mg = L.C // G, L.M // G
        self.plane = ConvLayer.of(self.cg, self.h, self.w, self.mg, 3, 1, 1)
        wt = prepare_weights(w, G)    # (G, C/G*9, M/G): each group's forward weights as Winograd reads them
        self.convs = [WinogradConv3x3(wt[g], None if b is None else b[g * self.mg:(g + 1) * self.mg], self.plane,
                                      activation=activation, tile=tile) for g in range(G)]
        self.backend = self.convs[0].backend
        self.xp = array_module(self.backend)
        self.direct_input = (self.dh, self.dw, G) == (1, 1, 1)   # unpadded, one group: x is the one phase
        self._buffers: dict[int, tuple] = {}

    def _scratch(self, N: int) -> tuple:
        """Each group's phases of x and of y for a batch of N: zeros where a phase is shorter than
        the plane (never written afterwards)."""
        bufs = self._buffers.get(N)
        if bufs is None:
            xp, G, n = self.xp, self.layer.groups, N * self.dh * self.dw
            bufs = self._buffers[N] = (None if self.direct_input else
                                       xp.zeros((G, N, self.dh, self.dw, self.cg, self.h, self.w), dtype=xp.float32),
                                       xp.empty((G, n, self.mg, self.h, self.w), dtype=xp.float32))
        return bufs

    def plan(self, N: int):
        """Winograd's plans for the N * dh * dw phase images (compiled once)."""
        return [conv.plan(N * self.dh * self.dw) for conv in self.convs]

    def __call__(self, x, out=None):
        L, dh, dw, h, w, cg, mg = self.layer, self.dh, self.dw, self.h, self.w, self.cg, self.mg
        N = int(x.shape[0])
        ho, wo = L.out_hw
        y = output(out, (N, L.M, ho, wo), "NCHW", (x,), backend=self.backend)
        xs, ys = self._scratch(N)
        first = 1 if self.crop else 0      # valid output i is 'same' output i + 1
        for g, conv in enumerate(self.convs):
            if self.direct_input:
                conv(x, out=ys[g])
            else:
                xg = x[:, g * cg:(g + 1) * cg]
                for r in range(dh):        # x[n, g*cg + c, i*dh + r, j*dw + s] -> xs[g, n, r, s, c, i, j]
                    for s in range(dw):
                        xs[g, :, r, s, :, :-(-(L.H - r) // dh), :-(-(L.W - s) // dw)] = xg[:, :, r::dh, s::dw]
                conv(xs[g].reshape(N * dh * dw, cg, h, w), out=ys[g])
            phases = ys[g].reshape(N, dh, dw, mg, h, w)
            yg = y[:, g * mg:(g + 1) * mg]
            for r in range(min(dh, ho)):   # ys[g][(n, r, s), m, first + i, first + j] -> y[n, g*mg + m, i*dh + r, j*dw + s]
                for s in range(min(dw, wo)):
                    rows, cols = -(-(ho - r) // dh), -(-(wo - s) // dw)
                    yg[:, :, r::dh, s::dw] = phases[:, r, s, :, first:first + rows, first:first + cols]
        return y
