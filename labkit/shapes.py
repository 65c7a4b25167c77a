"""Shapes of the layers the series works on: a convolution's geometry, and the networks' layers.

    layer = ConvLayer(C=96, H=27, W=27, M=256, K=5, pad=2, groups=2)
    layer.out_hw                 # (27, 27)
    ALEXNET_CONVS["conv3"]       # AlexNet's five convolutions
"""
from __future__ import annotations

from typing import NamedTuple

from .errors import check_int

__all__ = ["out_size", "ConvLayer", "ALEXNET_CONVS", "SEED_LAYERS"]


def out_size(n: int, K: int, stride: int = 1, pad: int = 0) -> int:
    """Output length of a convolution or pooling window along one axis."""
    return (n + 2 * pad - K) // stride + 1


class ConvLayer(NamedTuple):
    """A convolution's shape: input channels and plane, output channels, square kernel, and how it
    slides (stride, zero padding on every side, groups)."""
    C: int
    H: int
    W: int
    M: int
    K: int
    stride: int = 1
    pad: int = 0
    groups: int = 1

    @property
    def out_hw(self) -> tuple[int, int]:
        return out_size(self.H, self.K, self.stride, self.pad), out_size(self.W, self.K, self.stride, self.pad)

    @property
    def key(self) -> str:
        return (f"C{self.C}_H{self.H}_W{self.W}_M{self.M}_K{self.K}_S{self.stride}_P{self.pad}"
                f"_G{self.groups}")

    def gemm_shape(self, N: int) -> tuple[int, int, int]:
        """(rows, columns, depth) of each group's GEMM: M/G, N*Ho*Wo, C/G*K*K."""
        ho, wo = self.out_hw
        return self.M // self.groups, N * ho * wo, self.C // self.groups * self.K * self.K

    def flops(self, N: int) -> int:
        """Multiply-adds times 2, as a direct convolution counts them."""
        m, p, k = self.gemm_shape(N)
        return 2 * self.groups * m * p * k

    def defines(self) -> dict:
        return {"LAYER_C": self.C, "LAYER_H": self.H, "LAYER_W": self.W, "LAYER_M": self.M,
                "LAYER_K": self.K, "LAYER_S": self.stride, "LAYER_P": self.pad, "LAYER_G": self.groups}

    def check(self) -> None:
        """ValueError, naming the fix, for a shape no kernel can run."""
        for name, v, low in zip(self._fields, self, (1, 1, 1, 1, 1, 1, 0, 1)):
            check_int(v, name, low)
        if self.C % self.groups or self.M % self.groups:
            raise ValueError(f"groups={self.groups} must divide C={self.C} and M={self.M}")
        if self.pad >= self.K:
            raise ValueError(f"pad={self.pad} must be smaller than K={self.K}: a window of padding alone "
                             "has no input")
        if min(self.out_hw) < 1:
            raise ValueError(f"a {self.K}x{self.K} window with pad {self.pad} does not fit {self.H}x{self.W}")


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
