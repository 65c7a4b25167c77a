"""Roofline floors: the least time a layer can take on a device, from its FLOPs and bytes.

    cost = conv2d_cost(10000, 1, 48, 48, 6, 5)       # Cost(flops, bytes, out_shape)
    floor_ms(cost, dev.ceilings())                     # max(FLOPs / peak, bytes / bandwidth)
    percent_of_floor(measured_ms, cost, dev.ceilings())

Bytes count each tensor touched once (inputs, weights, bias read; output written):
the traffic of an ideal kernel that never re-reads DRAM.  Peaks are the *measured*
ceilings (copy GB/s, FP32 GEMM TFLOP/s), not data-sheet numbers; ``precision="tf32"``
reads a ``tf32_TFLOPs`` ceiling instead (a TF32 tensor-core GEMM, measured by its caller).

FLOPs count the multiply-adds of convolutions and GEMMs (2 each), one operation per
element for comparisons (max-pooling), sums (average pooling, bias gradients) and
element-wise maps; a fused bias or activation adds no FLOPs (it costs no extra bytes
either: it is applied to the output on its way out).  The small layers are memory-bound
by orders of magnitude, so their FLOP counts never set a floor.
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
                groups: int = 1, dtype_bytes: int = 4, bias: bool = True, residual: bool = False) -> Cost:
    """A KxK convolution of an NCHW input to M channels: FLOPs = 2*N*M*Hout*Wout*(C/groups)*K*K.

    ``residual``: a tensor of the output's shape is added in the epilogue (read once more)."""
    if C % groups or M % groups:
        raise ValueError(f"groups={groups} must divide C={C} and M={M}")
    Ho, Wo = out_size(H, K, stride, pad), out_size(W, K, stride, pad)
    if Ho < 1 or Wo < 1:
        raise ValueError(f"a {K}x{K} kernel does not fit a {H}x{W} input (pad={pad})")
    flops = 2 * N * M * Ho * Wo * (C // groups) * K * K
    elems = N * C * H * W + M * (C // groups) * K * K + (M if bias else 0) + N * M * Ho * Wo * (2 if residual else 1)
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


def pool2d_cost(N: int, C: int, H: int, W: int, K: int, stride: int, *, pad: int = 0,
                dtype_bytes: int = 4) -> Cost:
    """A KxK max- (or average-) pooling window of stride ``stride``: one operation per window element."""
    Ho, Wo = out_size(H, K, stride, pad), out_size(W, K, stride, pad)
    if Ho < 1 or Wo < 1:
        raise ValueError(f"a {K}x{K} window does not fit a {H}x{W} input (pad={pad})")
    out = N * C * Ho * Wo
    return Cost(float(out * K * K), float((N * C * H * W + out) * dtype_bytes), (N, C, Ho, Wo))


def global_avg_pool_cost(N: int, C: int, H: int, W: int, *, dtype_bytes: int = 4) -> Cost:
    """The mean of each (n, c) plane: one add per input element; reads N*C*H*W, writes N*C."""
    return Cost(float(N * C * H * W), float((N * C * H * W + N * C) * dtype_bytes), (N, C))


def lrn_cost(N: int, C: int, H: int, W: int, depth_radius: int, *, dtype_bytes: int = 4) -> Cost:
    """Local response normalization across channels: per element, a square and an add for each of the
    2r+1 neighbours, then scale, power and multiply (3); reads x once, writes y once."""
    elems = N * C * H * W
    return Cost(float(elems * (2 * (2 * depth_radius + 1) + 3)), float(2 * elems * dtype_bytes), (N, C, H, W))


def lrn_max_pool_cost(N: int, C: int, H: int, W: int, depth_radius: int, K: int, stride: int, *,
                      dtype_bytes: int = 4) -> Cost:
    """LRN then a KxK max-pool in one kernel: both operations' FLOPs, but the normalized values never
    reach memory: reads x once, writes the pooled output once."""
    norm, pool = lrn_cost(N, C, H, W, depth_radius, dtype_bytes=dtype_bytes), pool2d_cost(N, C, H, W, K, stride,
                                                                                         dtype_bytes=dtype_bytes)
    return Cost(norm.flops + pool.flops, pool.bytes, pool.out_shape)


def softmax_cost(rows: int, cols: int, *, dtype_bytes: int = 4) -> Cost:
    """Softmax of each row: max, subtract-exp, sum, divide (4 per element); reads and writes rows*cols."""
    return Cost(float(4 * rows * cols), float(2 * rows * cols * dtype_bytes), (rows, cols))


def elementwise_cost(shape: tuple, *, inputs: int, outputs: int = 1, flops_per_element: int = 1,
                     dtype_bytes: int = 4) -> Cost:
    """A map over ``shape``: ``inputs`` tensors of that shape read, ``outputs`` written."""
    n = 1
    for v in shape:
        n *= int(v)
    return Cost(float(n * flops_per_element), float(n * (inputs + outputs) * dtype_bytes), tuple(shape))


def conv2d_backward_data_cost(N: int, C: int, H: int, W: int, M: int, K: int, *, stride: int = 1, pad: int = 0,
                              extra_reads: int = 0, dtype_bytes: int = 4) -> Cost:
    """dL/dx of a convolution: the forward's FLOPs; reads dy (N, M, Ho, Wo) and the weights, writes dx
    (N, C, H, W); ``extra_reads``: tensors of dx's shape also read (a ReLU's gate, a skip's gradient)."""
    fwd = conv2d_cost(N, C, H, W, M, K, stride=stride, pad=pad, bias=False)
    Ho, Wo = fwd.out_shape[2:]
    elems = N * M * Ho * Wo + M * C * K * K + N * C * H * W * (1 + extra_reads)
    return Cost(fwd.flops, float(elems * dtype_bytes), (N, C, H, W))


def conv2d_backward_weight_cost(N: int, C: int, H: int, W: int, M: int, K: int, *, stride: int = 1, pad: int = 0,
                                bias: bool = True, dtype_bytes: int = 4) -> Cost:
    """dL/dw (and dL/db: one add per dy element) of a convolution: the forward's FLOPs; reads x and dy,
    writes dw (and db)."""
    fwd = conv2d_cost(N, C, H, W, M, K, stride=stride, pad=pad, bias=False)
    Ho, Wo = fwd.out_shape[2:]
    dy = N * M * Ho * Wo
    elems = N * C * H * W + dy + M * C * K * K + (M if bias else 0)
    return Cost(fwd.flops + (dy if bias else 0), float(elems * dtype_bytes), (M, C, K, K))


def dense_backward_cost(N: int, in_features: int, out_features: int, *, dtype_bytes: int = 4) -> Cost:
    """dL/dx = dy w^T, dL/dw = x^T dy, dL/db = the column sums of dy: reads x, w, dy; writes dx, dw, db."""
    flops = 4 * N * in_features * out_features + N * out_features
    elems = 2 * N * in_features + 2 * in_features * out_features + N * out_features + out_features
    return Cost(float(flops), float(elems * dtype_bytes), (N, in_features))


def softmax_cross_entropy_cost(rows: int, classes: int, *, dtype_bytes: int = 4, label_bytes: int = 4) -> Cost:
    """The mean loss and its gradient in one pass: reads the logits and the labels, writes dL/dz, each
    row's loss and the mean (softmax's 4 operations per element, 1 more for the gradient)."""
    elems = 2 * rows * classes + rows + 1
    return Cost(float(5 * rows * classes), float(elems * dtype_bytes + rows * label_bytes), (rows, classes))


def sgd_momentum_cost(parameters: int, *, dtype_bytes: int = 4) -> Cost:
    """SGD with momentum and weight decay: v = m v + g + wd p; p -= lr v (5 operations per parameter);
    reads p, g, v, writes p and v."""
    return Cost(float(5 * parameters), float(5 * parameters * dtype_bytes), (parameters,))


def _ceiling(ceilings, name: str) -> float:
    v = ceilings.get(name) if isinstance(ceilings, dict) else getattr(ceilings, name, None)
    if not v or v <= 0:
        raise ValueError(f"ceilings has no positive {name!r}: {ceilings!r}")
    return float(v)


PRECISIONS = ("fp32", "tf32")


def _terms(cost: Cost, ceilings, precision: str) -> tuple[float, float]:
    """(compute seconds, memory seconds) of a cost at the ceilings."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    t_compute = cost.flops / (_ceiling(ceilings, f"{precision}_TFLOPs") * 1e12)
    t_memory = cost.bytes / (_ceiling(ceilings, "copy_GBps") * 1e9)
    return t_compute, t_memory


def floor_ms(cost: Cost, ceilings, precision: str = "fp32") -> float:
    """max(FLOPs / peak of the precision, bytes / copy bandwidth), in ms.

    ``ceilings``: a labkit.device_query.Ceilings, or anything with ``copy_GBps`` and ``fp32_TFLOPs``
    (``tf32_TFLOPs`` for precision="tf32"; a dict will do).
    """
    return max(_terms(cost, ceilings, precision)) * 1e3


def bound(cost: Cost, ceilings, precision: str = "fp32") -> str:
    """'memory' or 'compute': which term sets the floor."""
    t_compute, t_memory = _terms(cost, ceilings, precision)
    return "memory" if t_memory >= t_compute else "compute"


def percent_of_floor(ms: float, cost: Cost, ceilings, precision: str = "fp32") -> float:
    """How close a measured time is to the floor: floor / ms * 100 (100 = at the roofline)."""
    if ms <= 0:
        raise ValueError(f"a measured time must be positive, got {ms} ms")
    return floor_ms(cost, ceilings, precision) / ms * 100.0


def achieved(ms: float, cost: Cost) -> tuple[float, float]:
    """(TFLOP/s, GB/s) that a measured time amounts to, counting the cost's FLOPs and bytes."""
    if ms <= 0:
        raise ValueError(f"a measured time must be positive, got {ms} ms")
    s = ms * 1e-3
    return cost.flops / s / 1e12, cost.bytes / s / 1e9
