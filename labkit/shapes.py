"""Shapes of the layers the series works on: a convolution's geometry, and the networks' layers.

    layer = ConvLayer(C=96, H=27, W=27, M=256, K=5, pad=2, groups=2)
    layer.out_hw                 # (27, 27)
    ALEXNET_CONVS["conv3"]       # AlexNet's five convolutions
"""
from __future__ import annotations

from typing import NamedTuple

from .errors import check_int

__all__ = ["out_size", "pair", "ConvLayer", "ALEXNET_CONVS", "SEED_LAYERS"]


def out_size(n: int, K: int, stride: int = 1, pad: int = 0, dilation: int = 1) -> int:
    """Output length of a convolution or pooling window along one axis (PyTorch's formula)."""
    return (n + 2 * pad - dilation * (K - 1) - 1) // stride + 1


class ConvLayer(NamedTuple):
    """A convolution's shape: input channels and plane, output channels, the kernel, and how it
    slides (stride, zero padding on both sides, dilation, groups).

    K, stride, pad are the height's (KH, SH, PH); KW, SW, PW and DW are the width's where they
    differ (None: the same as the height's), ``dilation`` the height's DH.  ``ConvLayer.of`` builds
    one from ints or (h, w) pairs, as conv2d takes them, in the canonical form (an extra equal to
    its height twin is None), so that equal geometries are equal layers and keep the square
    layers' keys."""
    C: int
    H: int
    W: int
    M: int
    K: int
    stride: int = 1
    pad: int = 0
    groups: int = 1
    KW: int | None = None
    SW: int | None = None
    PW: int | None = None
    dilation: int = 1
    DW: int | None = None

    @classmethod
    def of(cls, C: int, H: int, W: int, M: int, kernel, stride=1, pad=0, dilation=1, groups: int = 1) -> "ConvLayer":
        """The layer of C -> M channels on H x W, ``kernel``, ``stride``, ``pad``, ``dilation`` each an
        int or an (h, w) pair."""
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = (pair(v, name, low) for v, name, low in
                                                  ((kernel, "kernel", 1), (stride, "stride", 1), (pad, "pad", 0),
                                                   (dilation, "dilation", 1)))
        return cls(C, H, W, M, kh, sh, ph, groups, kw, sw, pw, dh, dw).canonical()

    def canonical(self) -> "ConvLayer":
        """The same geometry with every width extra that equals its height twin set to None."""
        return self._replace(KW=None if self.KW in (None, self.K) else self.KW,
                             SW=None if self.SW in (None, self.stride) else self.SW,
                             PW=None if self.PW in (None, self.pad) else self.PW,
                             DW=None if self.DW in (None, self.dilation) else self.DW)

    @property
    def kernel_hw(self) -> tuple[int, int]:
        return self.K, self.K if self.KW is None else self.KW

    @property
    def stride_hw(self) -> tuple[int, int]:
        return self.stride, self.stride if self.SW is None else self.SW

    @property
    def pad_hw(self) -> tuple[int, int]:
        return self.pad, self.pad if self.PW is None else self.PW

    @property
    def dilation_hw(self) -> tuple[int, int]:
        return self.dilation, self.dilation if self.DW is None else self.DW

    @property
    def square(self) -> bool:
        """A square kernel, one stride and one padding for both axes, no dilation: the geometry
        every kernel of the course's networks takes (ConvLayer's first eight fields say it all)."""
        return (self.kernel_hw[0] == self.kernel_hw[1] and self.stride_hw[0] == self.stride_hw[1]
                and self.pad_hw[0] == self.pad_hw[1] and self.dilation_hw == (1, 1))

    @property
    def out_hw(self) -> tuple[int, int]:
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = self.kernel_hw, self.stride_hw, self.pad_hw, self.dilation_hw
        return out_size(self.H, kh, sh, ph, dh), out_size(self.W, kw, sw, pw, dw)

    @property
    def taps(self) -> int:
        """Kernel positions per input channel: KH * KW."""
        kh, kw = self.kernel_hw
        return kh * kw

    @property
    def key(self) -> str:
        if self.square:
            return (f"C{self.C}_H{self.H}_W{self.W}_M{self.M}_K{self.K}_S{self.stride}_P{self.pad}"
                    f"_G{self.groups}")
        hw = lambda p: f"{p[0]}x{p[1]}"   # noqa: E731
        return (f"C{self.C}_H{self.H}_W{self.W}_M{self.M}_K{hw(self.kernel_hw)}_S{hw(self.stride_hw)}"
                f"_P{hw(self.pad_hw)}_D{hw(self.dilation_hw)}_G{self.groups}")

    def gemm_shape(self, N: int) -> tuple[int, int, int]:
        """(rows, columns, depth) of each group's GEMM: M/G, N*Ho*Wo, C/G*KH*KW."""
        ho, wo = self.out_hw
        return self.M // self.groups, N * ho * wo, self.C // self.groups * self.taps

    def flops(self, N: int) -> int:
        """Multiply-adds times 2, as a direct convolution counts them."""
        m, p, k = self.gemm_shape(N)
        return 2 * self.groups * m * p * k

    def defines(self) -> dict:
        """The kernels' compile-time shape; the width's and dilation's only where the layer is not
        square (kernels default them to the height's, so a square layer compiles as it always has)."""
        d = {"LAYER_C": self.C, "LAYER_H": self.H, "LAYER_W": self.W, "LAYER_M": self.M,
             "LAYER_K": self.K, "LAYER_S": self.stride, "LAYER_P": self.pad, "LAYER_G": self.groups}
        if not self.square:
            (_, kw), (_, sw), (_, pw), (dh, dw) = self.kernel_hw, self.stride_hw, self.pad_hw, self.dilation_hw
            d.update(LAYER_KW=kw, LAYER_SW=sw, LAYER_PW=pw, LAYER_DH=dh, LAYER_DW=dw)
        return d

    def check(self) -> None:
        """ValueError, naming the fix, for a shape no kernel can run.  Padding may exceed the kernel
        (as in PyTorch: windows of padding alone give the bias)."""
        for name, v, low in zip(self._fields, self, (1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1)):
            if v is not None:
                check_int(v, name, low)
        if self.C % self.groups or self.M % self.groups:
            raise ValueError(f"groups={self.groups} must divide C={self.C} and M={self.M}")
        if min(self.out_hw) < 1:
            (kh, kw), (dh, dw) = self.kernel_hw, self.dilation_hw
            raise ValueError(f"a {kh}x{kw} window (dilation {dh}x{dw}) with padding {self.pad_hw} does not fit "
                             f"{self.H}x{self.W}: the padded input must hold one dilated window")

    def require_square(self, what: str) -> None:
        """ValueError, before anything compiles, where ``what`` (a kernel taking one K, stride and pad)
        is given a rectangular, dilated or per-axis layer."""
        if not self.square:
            raise ValueError(f"{what} takes a square kernel with one stride and padding and no dilation, "
                             f"got {self.key}: use labkit.conv2d(variant='auto') or variant='implicit'")


def pair(v, name: str, low: int = 1) -> tuple[int, int]:
    """An int or an (h, w) pair of ints, each at least ``low``, as a pair."""
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise TypeError(f"{name} must be an int or an (h, w) pair, got {v!r}")
        return check_int(v[0], name, low), check_int(v[1], name, low)
    v = check_int(v, name, low)
    return v, v


# AlexNet's five convolutions (the original grouped network, 227x227 input), as cuDNN is timed on
# them in ../shared/anchors: the GEMM ladder's large layers.
ALEXNET_CONVS: dict[str, ConvLayer] = {
    "conv1": ConvLayer(3, 227, 227, 96, 11, stride=4),
    "conv2": ConvLayer(96, 27, 27, 256, 5, pad=2, groups=2),
    "conv3": ConvLayer(256, 13, 13, 384, 3, pad=1),
    "conv4": ConvLayer(384, 13, 13, 384, 3, pad=1, groups=2),
    "conv5": ConvLayer(384, 13, 13, 256, 3, pad=1, groups=2),
}

# The seed's two convolution layers (ECE408 Spring 2019, Fashion-MNIST at 48x48), stride 1, no
# padding: layer 1 is 1 -> 6 channels on 48x48, layer 2 is 6 -> 16 channels on 22x22, both K5.
SEED_LAYERS: dict[str, dict[str, int]] = {
    "layer 1": dict(C=1, H=48, W=48, M=6, K=5),
    "layer 2": dict(C=6, H=22, W=22, M=16, K=5),
}
