"""Roofline floors: the least time a layer can take on a device, from its FLOPs and bytes.

    cost = conv2d_cost(10000, 1, 48, 48, 6, 5)       # Cost(flops, bytes, out_shape)
    floor_ms(cost, dev.ceilings())                     # max(FLOPs / peak, bytes / bandwidth)
    percent_of_floor(measured_ms, cost, dev.ceilings())

Bytes count each tensor touched once (inputs, weights, bias read; output written):
the traffic of an ideal kernel that never re-reads DRAM.  Peaks are the *measured*
ceilings (copy GB/s, FP32 GEMM TFLOP/s), not data-sheet numbers.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cost:
    """Work of one operation: FLOPs (multiply and add counted apart), bytes moved, output shape."""
    flops: float
    bytes: float
    out_shape: tuple

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOPs per byte."""
        return self.flops / self.bytes if self.bytes else float("inf")

    def __add__(self, other: "Cost") -> "Cost":
        """Two operations one after the other (the output shape is the second's)."""
        return Cost(self.flops + other.flops, self.bytes + other.bytes, other.out_shape)


def out_size(n: int, k: int, stride: int = 1, pad: int = 0) -> int:
    """Output length of a convolution or pooling window along one axis."""
    return (n + 2 * pad - k) // stride + 1


def conv2d_cost(N: int, C: int, H: int, W: int, M: int, K: int, *, stride: int = 1, pad: int = 0,
                groups: int = 1, dtype_bytes: int = 4, bias: bool = True) -> Cost:
    """A KxK convolution of an NCHW input to M channels: FLOPs = 2*N*M*Hout*Wout*(C/groups)*K*K."""
    if C % groups or M % groups:
        raise ValueError(f"groups={groups} must divide C={C} and M={M}")
    Ho, Wo = out_size(H, K, stride, pad), out_size(W, K, stride, pad)
    if Ho < 1 or Wo < 1:
        raise ValueError(f"a {K}x{K} kernel does not fit a {H}x{W} input (pad={pad})")
    flops = 2 * N * M * Ho * Wo * (C // groups) * K * K
    elems = N * C * H * W + M * (C // groups) * K * K + (M if bias else 0) + N * M * Ho * Wo
    return Cost(float(flops), float(elems * dtype_bytes), (N, M, Ho, Wo))


def dense_cost(N: int, in_features: int, out_features: int, *, dtype_bytes: int = 4,
               bias: bool = True) -> Cost:
    """A fully connected layer on N rows: FLOPs = 2*N*in*out."""
    flops = 2 * N * in_features * out_features
    elems = N * in_features + in_features * out_features + (out_features if bias else 0) \
        + N * out_features
    return Cost(float(flops), float(elems * dtype_bytes), (N, out_features))


def gemm_cost(M: int, N: int, K: int, *, dtype_bytes: int = 4) -> Cost:
    """C[M,N] = A[M,K] @ B[K,N]: FLOPs = 2*M*N*K; A and B read once, C written once."""
    return Cost(float(2 * M * N * K), float((M * K + K * N + M * N) * dtype_bytes), (M, N))


def _ceiling(ceilings, name: str) -> float:
    v = ceilings.get(name) if isinstance(ceilings, dict) else getattr(ceilings, name, None)
    if not v or v <= 0:
        raise ValueError(f"ceilings has no positive {name!r}: {ceilings!r}")
    return float(v)


def floor_ms(cost: Cost, ceilings) -> float:
    """max(FLOPs / peak FP32, bytes / copy bandwidth), in ms.

    ``ceilings``: a labkit.device_query.Ceilings, or anything with ``copy_GBps`` and ``fp32_TFLOPs``.
    """
    t_compute = cost.flops / (_ceiling(ceilings, "fp32_TFLOPs") * 1e12)
    t_memory = cost.bytes / (_ceiling(ceilings, "copy_GBps") * 1e9)
    return max(t_compute, t_memory) * 1e3


def bound(cost: Cost, ceilings) -> str:
    """'memory' or 'compute': which term sets the floor."""
    t_compute = cost.flops / (_ceiling(ceilings, "fp32_TFLOPs") * 1e12)
    t_memory = cost.bytes / (_ceiling(ceilings, "copy_GBps") * 1e9)
    return "memory" if t_memory >= t_compute else "compute"


def percent_of_floor(ms: float, cost: Cost, ceilings) -> float:
    """How close a measured time is to the floor: floor / ms * 100 (100 = at the roofline)."""
    if ms <= 0:
        raise ValueError(f"a measured time must be positive, got {ms} ms")
    return floor_ms(cost, ceilings) / ms * 100.0


def achieved(ms: float, cost: Cost) -> tuple[float, float]:
    """(TFLOP/s, GB/s) that a measured time amounts to, counting the cost's FLOPs and bytes."""
    if ms <= 0:
        raise ValueError(f"a measured time must be positive, got {ms} ms")
    s = ms * 1e-3
    return cost.flops / s / 1e12, cost.bytes / s / 1e9
