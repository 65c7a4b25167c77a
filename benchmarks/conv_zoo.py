"""Any convolution: a zoo of large problems on labkit.conv2d / conv_transpose2d (variant="auto") against
cuDNN and cuBLAS (through PyTorch), same run, each checked first.

    python benchmarks/conv_zoo.py [--out benchmarks/results] [--only KIND ...] [--ids ID ...] [--repeat 10]
                                  [--budget SECONDS] [--no-tf32] [--samples 2048]
    python benchmarks/conv_zoo.py --list                    # the zoo: shapes, GFLOP, GB, a rough H100 time
    python benchmarks/conv_zoo.py --smoke                   # 3 tiny problems, any backend (CPU executor too)
    python benchmarks/conv_zoo.py --merge benchmarks/results/conv_zoo_h100_*.json   # parts -> one file

The zoo (ZOO, 71 problems, none tuned to a list of known layers: dense 14, rect 8, dilated 6,
strided 7, transposed 8, depthwise 13, separable 4, pointwise 5, grouped 6): dense square 3x3 ..
11x11, rectangular kernels (1x7, 7x1, 3x5, 5x7, 5x9, 3x1, 3x7, 1x3), dilated (2, 3, (1,2)), strided
(2, 3, 4, (1,2)), transposed (stride 2 with kernels 2, 3, 4, output_padding, dilation, groups; stride
1 and 3), depthwise (3x3 .. 7x7, square and rectangular, padded or not, stride 1 / 2, dilation, a
channel multiplier), depthwise-separable pairs (timed as a pair), pointwise and grouped (2, 4, 8,
32); images 128^2 .. 1024^2, batches 8 .. 64, 3 .. 512 channels; each problem's working set at most
~6.4 GB (one exception on purpose, pw64_128_n16_1024: 2^31 output elements, 12.9 GB), each about
1 to 12 ms at cuDNN-like rates on an H100 (--list shows the estimate).  A cold run (empty autotune
and kernel caches) searches each problem twice (FP32 and TF32): split it by kind (--only) and join
the parts (--merge) where one command may not run for long.

Per problem, in this order:
1. labkit, variant "auto" (FP32), its outputs filled with NaN first: the first call timed on its own
   (plans, NVRTC compiles, the autotuner's search: ``first_call_s``; what the autotuner decided:
   labkit.autotune.history()'s new entries), then checked: no NaN left anywhere, and float64 sums at
   ``--samples`` positions (labkit.reference.samples.conv_samples; conv_transpose_samples for
   the transposed problems; each stage of a separable pair from its own input), the error being
   max |y - ref| / sum|terms| (float32's rounding bound; FP32 tolerance 1e-4).  Small problems
   (the smoke test's) are checked against the whole float64 reference (labkit.reference.layers).
2. PyTorch (cuDNN), FP32 with TF32 off (torch.backends.cudnn.allow_tf32 = False and
   torch.backends.cuda.matmul.allow_tf32 = False), cudnn.benchmark = True, eager, bias included:
   its output compared with labkit's (max |y - y_torch| / max |y_torch|), then both timed with CUDA
   events (warm-up, then the median of ``--repeat`` calls queued back to back; labkit writes into a
   preallocated ``out``, PyTorch allocates as it does).  ratio = labkit / cuDNN.
3. Pointwise: cuBLAS FP32, torch.matmul of the same GEMM, (M x C) @ (C x H*W) batched over N.
4. Dense-type problems (one conv2d with groups < C: dense, rect, dilated, strided, grouped,
   pointwise) on a GPU: labkit variant "implicit_tf32" (checked, tolerance 1e-2) beside PyTorch
   with TF32 on.
FLOPs = 2 * N * M * Ho * Wo * C/groups * KH * KW (a transposed convolution counts its adjoint's
products, 2 * N * C_in * H * W * C_out/groups * KH * KW); % of the FP32 peak against the nominal peak
(SMs x FP32 lanes x 2 x clock) and against the measured one (labkit.device().ceilings(): cuBLAS SGEMM
8192^3); the floor is max(FLOPs / measured peak, bytes / measured copy bandwidth), bytes = x read
once + y written once + weights and bias (a separable pair: the fused ideal, its intermediate never
leaving the chip); the memory floor is the bytes term alone.

Writes conv_zoo_<gpu>.json (device, versions, settings, rows) and conv_zoo_<gpu>.png (ratio to cuDNN
per problem grouped by kind, lines at 1.0 and 1.5; % of the floor) in --out; --only / --ids write
conv_zoo_<gpu>_<what>.json, which --merge joins into conv_zoo_<gpu>.json.  Exit status 1 when a
problem failed its check or raised.  --smoke: 3 tiny problems on whatever backend runs (the CPU
executor too; PyTorch optional, peers skipped where cuDNN is not available), written to
results/benchmarks.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit.measure import device_tag as gpu_tag  # noqa: E402

KINDS = ("dense", "rect", "dilated", "strided", "transposed", "depthwise", "separable", "pointwise", "grouped")
TF32_KINDS = ("dense", "rect", "dilated", "strided", "grouped", "pointwise")
TOL = {"fp32": 1e-4, "tf32": 1e-2}           # max |y - ref| / sum |terms| over the checked outputs
TORCH_TOL = {"fp32": 1e-3, "tf32": 5e-2}     # max |y - y_torch| / max |y_torch|: flagged above this
FULL_REFERENCE_MACS = 5e7                    # at most this many multiply-adds: the whole float64 reference
WORKING_SET_LIMIT = 6.0e9
FP32_BYTES = 4


def pair(v) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, (int, np.integer)) else (int(v[0]), int(v[1]))


def as_arg(p: tuple[int, int]):
    """An (h, w) pair as conv2d takes it: an int where both are equal."""
    return p[0] if p[0] == p[1] else tuple(p)


# --- the problems ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Conv:
    """One convolution (or transposed convolution) of a C x H x W input to M channels."""
    C: int
    H: int
    W: int
    M: int
    kernel: tuple
    stride: tuple = (1, 1)
    pad: tuple = (0, 0)
    dilation: tuple = (1, 1)
    groups: int = 1
    transposed: bool = False
    output_padding: tuple = (0, 0)

    @property
    def out_hw(self) -> tuple[int, int]:
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = self.kernel, self.stride, self.pad, self.dilation
        if self.transposed:
            oph, opw = self.output_padding
            return ((self.H - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1,
                    (self.W - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1)
        return (self.H + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (self.W + 2 * pw - dw * (kw - 1) - 1) // sw + 1

    @property
    def w_shape(self) -> tuple:
        kh, kw = self.kernel
        if self.transposed:
            return (self.C, self.M // self.groups, kh, kw)
        return (self.M, self.C // self.groups, kh, kw)

    def x_shape(self, N: int) -> tuple:
        return (N, self.C, self.H, self.W)

    def y_shape(self, N: int) -> tuple:
        return (N, self.M, *self.out_hw)

    def flops(self, N: int) -> float:
        kh, kw = self.kernel
        if self.transposed:    # the adjoint convolution's products
            return 2.0 * N * self.C * self.H * self.W * (self.M // self.groups) * kh * kw
        ho, wo = self.out_hw
        return 2.0 * N * self.M * ho * wo * (self.C // self.groups) * kh * kw

    def kwargs(self) -> dict:
        """labkit's keywords (ints where both axes agree)."""
        kw = {"stride": as_arg(self.stride), "pad": as_arg(self.pad), "dilation": as_arg(self.dilation),
              "groups": self.groups}
        if self.transposed:
            kw["output_padding"] = as_arg(self.output_padding)
        return kw

    def torch_kwargs(self) -> dict:
        kw = {"stride": self.stride, "padding": self.pad, "dilation": self.dilation, "groups": self.groups}
        if self.transposed:
            kw["output_padding"] = self.output_padding
        return kw

    def describe(self) -> dict:
        d = {"op": "conv_transpose2d" if self.transposed else "conv2d", "C": self.C, "H": self.H, "W": self.W,
             "M": self.M, "kernel": list(self.kernel), "stride": list(self.stride), "pad": list(self.pad),
             "dilation": list(self.dilation), "groups": self.groups, "out_hw": list(self.out_hw)}
        if self.transposed:
            d["output_padding"] = list(self.output_padding)
        return d

    def text(self) -> str:
        """Short: "conv 64->128 256x256 k3x3 s2 p(1,0) g4"; what equals its default left out."""
        shown = lambda v: str(v[0]) if v[0] == v[1] else "(%d,%d)" % v   # noqa: E731
        k = "x".join(map(str, self.kernel))
        t = f"{'convT' if self.transposed else 'conv'} {self.C}->{self.M} {self.H}x{self.W} k{k}"
        for name, v, unit in (("s", self.stride, 1), ("p", self.pad, 0), ("d", self.dilation, 1)):
            if v != (unit, unit):
                t += f" {name}{shown(v)}"
        if self.groups > 1:
            t += f" g{self.groups}"
        if self.transposed and self.output_padding != (0, 0):
            t += f" op{shown(self.output_padding)}"
        return t


@dataclass(frozen=True)
class Problem:
    """A problem of the zoo: one convolution, or a pair (a depthwise-separable one) run one after the other."""
    id: str
    kind: str
    N: int
    stages: tuple
    note: str = ""

    @property
    def x_shape(self) -> tuple:
        return self.stages[0].x_shape(self.N)

    @property
    def y_shape(self) -> tuple:
        return self.stages[-1].y_shape(self.N)

    @property
    def flops(self) -> float:
        return sum(s.flops(self.N) for s in self.stages)

    @property
    def weight_elems(self) -> int:
        return sum(math.prod(s.w_shape) + s.M for s in self.stages)

    @property
    def floor_bytes(self) -> float:
        """x read once, y written once, weights and bias read once (a pair: its intermediate stays on chip)."""
        return float(FP32_BYTES * (math.prod(self.x_shape) + math.prod(self.y_shape) + self.weight_elems))

    @property
    def working_set_bytes(self) -> float:
        """labkit's arrays: x, every stage's output, the weights."""
        elems = math.prod(self.x_shape) + sum(math.prod(s.y_shape(self.N)) for s in self.stages) + self.weight_elems
        return float(FP32_BYTES * elems)

    @property
    def max_elems(self) -> int:
        return max([math.prod(self.x_shape)] + [math.prod(s.y_shape(self.N)) for s in self.stages])

    def text(self) -> str:
        return f"n{self.N} " + " + ".join(s.text() for s in self.stages)


def conv(id, kind, N, C, H, W, M, k, s=1, p=0, d=1, g=1, note=""):
    return Problem(id, kind, N, (Conv(C, H, W, M, pair(k), pair(s), pair(p), pair(d), g),), note)


def tconv(id, N, C, H, W, M, k, s, p=0, op=0, d=1, g=1, note=""):
    """Transposed: C_in = C, C_out = M."""
    return Problem(id, "transposed", N, (Conv(C, H, W, M, pair(k), pair(s), pair(p), pair(d), g, True, pair(op)),),
                   note)


def dw(id, N, C, H, W, k, s=1, p=0, d=1, mult=1, note=""):
    return Problem(id, "depthwise", N, (Conv(C, H, W, C * mult, pair(k), pair(s), pair(p), pair(d), C),), note)


def sep(id, N, C, H, W, M, k, s=1, p=0, d=1, note=""):
    first = Conv(C, H, W, C, pair(k), pair(s), pair(p), pair(d), C)
    ho, wo = first.out_hw
    return Problem(id, "separable", N, (first, Conv(C, ho, wo, M, (1, 1))), note)


def pw(id, N, C, H, W, M, note=""):
    return conv(id, "pointwise", N, C, H, W, M, 1, note=note)


ZOO: tuple[Problem, ...] = (
    # dense, square kernels 3x3 .. 11x11 ("same" padding unless p0), first layers and wide ones
    conv("d3_c3_512_n64", "dense", 64, 3, 512, 512, 64, 3, p=1),
    conv("d3_c64_256_n32", "dense", 32, 64, 256, 256, 64, 3, p=1),
    conv("d3_c128_128_n64_p0", "dense", 64, 128, 128, 128, 128, 3),
    conv("d3_c256_128_n32", "dense", 32, 256, 128, 128, 256, 3, p=1),
    conv("d3_c512_128_n8", "dense", 8, 512, 128, 128, 512, 3, p=1),
    conv("d3_c16_1024_n16", "dense", 16, 16, 1024, 1024, 16, 3, p=1),
    conv("d3_c96_223_n12", "dense", 12, 96, 223, 223, 80, 3, p=1, note="odd plane, channels, batch"),
    conv("d3_c64_256x512_n16", "dense", 16, 64, 256, 512, 64, 3, p=1, note="rectangular image"),
    conv("d5_c64_256_n16", "dense", 16, 64, 256, 256, 64, 5, p=2),
    conv("d5_c128_128_n16_p0", "dense", 16, 128, 128, 128, 128, 5),
    conv("d7_c32_256_n16", "dense", 16, 32, 256, 256, 64, 7, p=3),
    conv("d9_c32_256_n8", "dense", 8, 32, 256, 256, 32, 9, p=4),
    conv("d11_c3_512_n16", "dense", 16, 3, 512, 512, 96, 11, p=5),
    conv("d11_c64_128_n8", "dense", 8, 64, 128, 128, 64, 11, p=5),
    # rectangular kernels
    conv("r1x7_c128_128_n32", "rect", 32, 128, 128, 128, 128, (1, 7), p=(0, 3)),
    conv("r7x1_c128_128_n32", "rect", 32, 128, 128, 128, 128, (7, 1), p=(3, 0)),
    conv("r3x5_c64_256_n16", "rect", 16, 64, 256, 256, 64, (3, 5), p=(1, 2)),
    conv("r5x7_c64_256_n16", "rect", 16, 64, 256, 256, 64, (5, 7), p=(2, 3)),
    conv("r5x9_c32_256_n16", "rect", 16, 32, 256, 256, 32, (5, 9), p=(2, 4)),
    conv("r3x1_c256_128_n16", "rect", 16, 256, 128, 128, 256, (3, 1), p=(1, 0)),
    conv("r3x7_c64_512_n8_p0", "rect", 8, 64, 512, 512, 64, (3, 7)),
    conv("r1x3_c512_128_n16", "rect", 16, 512, 128, 128, 256, (1, 3), p=(0, 1)),
    # dilated
    conv("dil2_c128_256_n16", "dilated", 16, 128, 256, 256, 128, 3, p=2, d=2),
    conv("dil3_c64_256_n16", "dilated", 16, 64, 256, 256, 64, 3, p=3, d=3),
    conv("dil1x2_c64_256_n16", "dilated", 16, 64, 256, 256, 64, 3, p=(1, 2), d=(1, 2)),
    conv("dil2_k5_c32_256_n16", "dilated", 16, 32, 256, 256, 64, 5, p=4, d=2),
    conv("dil2_c256_128_n16", "dilated", 16, 256, 128, 128, 256, 3, p=2, d=2),
    conv("dil3_c64_256_n16_p0", "dilated", 16, 64, 256, 256, 64, 3, d=3),
    # strided
    conv("s2_c64_256_n32", "strided", 32, 64, 256, 256, 128, 3, s=2, p=1),
    conv("s2_k7_c3_512_n64", "strided", 64, 3, 512, 512, 64, 7, s=2, p=3),
    conv("s3_c128_384_n16", "strided", 16, 128, 384, 384, 256, 3, s=3),
    conv("s4_k4_c3_1024_n64", "strided", 64, 3, 1024, 1024, 96, 4, s=4, note="patchify"),
    conv("s4_k8_c64_256_n16", "strided", 16, 64, 256, 256, 128, 8, s=4, p=2),
    conv("s1x2_c64_256_n16", "strided", 16, 64, 256, 256, 128, 3, s=(1, 2), p=1),
    conv("s2_k1_c256_128_n64", "strided", 64, 256, 128, 128, 512, 1, s=2, note="1x1 projection, stride 2"),
    # transposed (C_in -> C_out)
    tconv("t2s2_c256_128_n32", 32, 256, 128, 128, 128, 2, 2),
    tconv("t3s2_c128_128_n32_op1", 32, 128, 128, 128, 64, 3, 2, p=1, op=1),
    tconv("t4s2_c128_128_n16", 16, 128, 128, 128, 64, 4, 2, p=1),
    tconv("t3s2_d2_c128_128_n32_op1", 32, 128, 128, 128, 64, 3, 2, p=2, op=1, d=2),
    tconv("t4s2_g4_c256_128_n16", 16, 256, 128, 128, 256, 4, 2, p=1, g=4),
    tconv("t3s1_c64_256_n16", 16, 64, 256, 256, 64, 3, 1, p=1),
    tconv("t2s2_c512_128_n8", 8, 512, 128, 128, 256, 2, 2),
    tconv("t5s3_c64_128_n32_op2", 32, 64, 128, 128, 32, 5, 3, p=1, op=2),
    # depthwise (groups = C)
    dw("dw3_c128_256_n64", 64, 128, 256, 256, 3, p=1),
    dw("dw3_c512_128_n64", 64, 512, 128, 128, 3, p=1),
    dw("dw3_c256_256_n32_p0", 32, 256, 256, 256, 3),
    dw("dw3_s2_c256_256_n32", 32, 256, 256, 256, 3, s=2, p=1),
    dw("dw5_c256_256_n32", 32, 256, 256, 256, 5, p=2),
    dw("dw5_s2_c256_256_n32", 32, 256, 256, 256, 5, s=2, p=2),
    dw("dw7_c128_256_n48", 48, 128, 256, 256, 7, p=3),
    dw("dw7_c128_256_n48_p0", 48, 128, 256, 256, 7),
    dw("dw3x5_c128_256_n48", 48, 128, 256, 256, (3, 5), p=(1, 2)),
    dw("dw1x7_c256_256_n32", 32, 256, 256, 256, (1, 7), p=(0, 3)),
    dw("dw7x1_c256_256_n32_p0", 32, 256, 256, 256, (7, 1)),
    dw("dw3_d2_c256_256_n32", 32, 256, 256, 256, 3, p=2, d=2),
    dw("dw3_m2_c128_256_n32", 32, 128, 256, 256, 3, p=1, mult=2, note="channel multiplier 2"),
    # depthwise-separable pairs (depthwise, then pointwise; timed as a pair)
    sep("sep3_c128_256_n16", 16, 128, 256, 256, 256, 3, p=1),
    sep("sep3_s2_c128_256_n32", 32, 128, 256, 256, 256, 3, s=2, p=1),
    sep("sep5_c256_128_n32", 32, 256, 128, 128, 256, 5, p=2),
    sep("sep7_c96_256_n32", 32, 96, 256, 256, 96, 7, p=3),
    # pointwise 1x1
    pw("pw64_128_n8_1024", 8, 64, 1024, 1024, 128),
    pw("pw64_128_n16_1024", 16, 64, 1024, 1024, 128,
       note="2^31 output elements (12.9 GB: over the 6 GB budget on purpose)"),
    pw("pw256_256_n32_128", 32, 256, 128, 128, 256),
    pw("pw512_128_n32_128", 32, 512, 128, 128, 128),
    pw("pw32_192_n64_256", 64, 32, 256, 256, 192),
    # grouped
    conv("g2_c256_128_n16", "grouped", 16, 256, 128, 128, 256, 3, p=1, g=2),
    conv("g4_c256_128_n32", "grouped", 32, 256, 128, 128, 256, 3, p=1, g=4),
    conv("g32_c256_256_n32", "grouped", 32, 256, 256, 256, 256, 3, p=1, g=32),
    conv("g32_s2_c512_128_n64", "grouped", 64, 512, 128, 128, 512, 3, s=2, p=1, g=32),
    conv("g8_k1_c256_256_n32", "grouped", 32, 256, 256, 256, 256, 1, g=8),
    conv("g2_k5_c96_256_n16", "grouped", 16, 96, 256, 256, 128, 5, p=2, g=2),
)

SMOKE: tuple[Problem, ...] = (
    conv("smoke_dilated_strided", "dilated", 2, 3, 13, 11, 5, (3, 2), s=(1, 2), p=(2, 1), d=(2, 1)),
    tconv("smoke_transposed", 2, 4, 5, 6, 6, 3, 2, p=1, op=(1, 0), g=2),
    sep("smoke_separable", 2, 4, 9, 10, 6, 3, s=2, p=1),
)


def rough_h100_ms(p: Problem, tflops: float = 50.0, gbps: float = 2800.0) -> float:
    """A rough time on an H100 (cuDNN-like FP32 rate, HBM3 copy bandwidth): to keep the zoo's sizes sane."""
    return max(p.flops / (tflops * 1e12), p.floor_bytes / (gbps * 1e9)) * 1e3


# --- data, references, checks ---------------------------------------------------------------------

def device_tag(dev) -> str:
    return gpu_tag(dev.name) if dev.is_gpu else "cpu"


def randn(xp, shape, seed: int, scale: float = 1.0):
    """float32 standard normals on the backend, made there (no host copy of a GB-sized array); an array
    of more than 2^28 elements one slice of its first axis at a time."""
    shape = tuple(int(v) for v in shape)
    gen = np.random.default_rng(seed) if xp is np else xp.random.RandomState(seed)   # CuPy's: cuRAND
    draw = lambda sh: gen.standard_normal(sh, dtype=xp.float32)   # noqa: E731
    if math.prod(shape) <= 2**28 or len(shape) < 2:
        a = draw(shape)
    else:
        a = xp.empty(shape, xp.float32)
        for i in range(shape[0]):
            a[i] = draw(shape[1:])
    if scale != 1.0:
        a *= xp.float32(scale)
    return a


def make_arrays(xp, p: Problem, seed: int):
    """x, and per stage its weights (scaled by 1/sqrt(fan-in)) and bias."""
    x = randn(xp, p.x_shape, seed)
    params = []
    for i, s in enumerate(p.stages):
        fan_in = s.w_shape[1] * s.kernel[0] * s.kernel[1]
        params.append((randn(xp, s.w_shape, seed + 101 * (i + 1), 1.0 / math.sqrt(fan_in)),
                       randn(xp, (s.M,), seed + 211 * (i + 1), 0.1)))
    return x, params


def sync() -> None:
    """Wait for the GPU (CuPy's stream, and PyTorch's where it runs)."""
    if labkit.backend() == "cuda":
        import cupy
        cupy.cuda.get_current_stream().synchronize()
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.synchronize()


def nan_count(xp, y) -> int:
    """NaN elements of y, image by image where y is large (no 2^31-element temporaries)."""
    if y.size <= 2**28:
        return int(xp.isnan(y).sum())
    return sum(int(xp.isnan(y[i]).sum()) for i in range(y.shape[0]))


def sample_idx(xp, size: int, count: int, seed: int):
    """``count`` flat positions of a ``size``-element output (all where fewer), the first and the last
    always among them; int64 (an output may hold more than 2^31 elements)."""
    if size <= count:
        return xp.arange(size, dtype=xp.int64)
    rng = np.random.default_rng(seed)
    idx = np.concatenate([[0, size - 1], rng.integers(0, size, count - 2, dtype=np.int64)])
    return xp.asarray(idx)


def stage_samples(xp, s: Conv, x, w, b, idx, act=None):
    """(reference, terms) at ``idx`` for one stage, in chunks (cg * KH * KW float64 terms per position)."""
    from labkit.reference.samples import conv_samples, conv_transpose_samples
    from labkit.shapes import ConvLayer
    per = max(1, (s.C // s.groups) * s.kernel[0] * s.kernel[1])
    chunk = max(1, (1 << 22) // per)
    refs, terms = [], []
    layer = None if s.transposed else ConvLayer.of(s.C, s.H, s.W, s.M, s.kernel, s.stride, s.pad, s.dilation,
                                                  s.groups)
    for i in range(0, int(idx.size), chunk):
        part = idx[i:i + chunk]
        r, t = (conv_transpose_samples(xp, x, w, b, s, part, act) if s.transposed
                else conv_samples(xp, x, w, b, layer, part, act))
        refs.append(r)
        terms.append(t)
    return xp.concatenate(refs), xp.concatenate(terms)


def full_reference(s: Conv, x, w, b, act=None):
    """(reference, terms) of the whole output in float64 on the host (labkit.reference.layers)."""
    from labkit.checks import to_numpy
    from labkit.reference import layers
    from labkit.reference.samples import activate
    x, w = to_numpy(x).astype(np.float64), to_numpy(w).astype(np.float64)
    b = None if b is None else to_numpy(b).astype(np.float64)
    kw = {"stride": s.stride, "pad": s.pad, "dilation": s.dilation, "groups": s.groups}
    if s.transposed:
        f = lambda x_, w_, b_: layers.conv_transpose2d(x_, w_, b_, output_padding=s.output_padding, **kw)  # noqa: E731
    else:
        f = lambda x_, w_, b_: layers.conv2d(x_, w_, b_, **kw)  # noqa: E731
    ref = f(x, w, b)
    terms = f(np.abs(x), np.abs(w), None if b is None else np.abs(b))
    return activate(np, ref, act), terms


def stage_error(xp, s: Conv, x, w, b, y, *, act=None, samples: int = 2048, seed: int = 0) -> tuple[float, str]:
    """max |y - ref| / sum|terms| over the checked positions (NaN if y holds NaN there), and how it was
    checked: the whole float64 reference for a small stage, float64 samples otherwise."""
    N = int(x.shape[0])
    macs = s.flops(N) / 2
    if macs <= FULL_REFERENCE_MACS:
        from labkit.checks import to_numpy
        ref, terms = full_reference(s, x, w, b, act)
        got = to_numpy(y).astype(np.float64)
        if got.shape != ref.shape:
            raise ValueError(f"output shape {got.shape}, the reference's {ref.shape}")
        err = np.abs(got - ref) / (terms + 1e-30)
        return (float("nan") if np.isnan(err).any() else float(err.max())), "float64 reference, every output"
    idx = sample_idx(xp, int(y.size), samples, seed)
    ref, terms = stage_samples(xp, s, x, w, b, idx, act)
    got = y.reshape(-1)[idx].astype(xp.float64)
    err = xp.abs(got - ref) / (terms + 1e-30)
    return (float("nan") if bool(xp.isnan(err).any()) else float(err.max())), f"float64 at {int(idx.size)} samples"


def max_rel_diff_torch(y, yt) -> float:
    """max |y - y_torch| / max |y_torch|, image by image (no output-sized temporaries); inf on NaN."""
    import torch
    yl = torch.from_dlpack(y)
    d = r = 0.0
    for i in range(int(y.shape[0])):
        di = float((yl[i] - yt[i]).abs().max())
        d = math.inf if math.isnan(di) else max(d, di)
        r = max(r, float(yt[i].abs().max()))
    return d / max(r, 1e-30)


# --- labkit and the peers ------------------------------------------------------------------------

def labkit_call(s: Conv, x, w, b, variant: str, out=None, activation=None):
    if s.transposed:
        return labkit.conv_transpose2d(x, w, b, variant=variant, activation=activation, out=out, **s.kwargs())
    return labkit.conv2d(x, w, b, variant=variant, activation=activation, out=out, **s.kwargs())


def labkit_runner(p: Problem, x, params, outs, variant: str):
    """A zero-argument callable running every stage, each into its preallocated output."""
    stages = list(zip(p.stages, params, outs))

    def run():
        h = x
        for s, (w, b), y in stages:
            h = labkit_call(s, h, w, b, variant, out=y)
        return h
    return run


def torch_status() -> str | None:
    """None where cuDNN can run through PyTorch on labkit's GPU; else why not."""
    if labkit.backend() != "cuda":
        return "the CPU executor runs labkit: no cuDNN peer"
    try:
        import torch
    except Exception as e:   # noqa: BLE001
        return f"PyTorch is not importable ({type(e).__name__}): peers skipped"
    if not torch.cuda.is_available() or not torch.backends.cudnn.is_available():
        return "PyTorch sees no CUDA device or no cuDNN: peers skipped"
    return None


def set_torch_math(tf32: bool) -> None:
    import torch
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = bool(tf32)
    torch.backends.cuda.matmul.allow_tf32 = bool(tf32)


def torch_runner(p: Problem, x, params, tf32: bool):
    """PyTorch eager on the same memory (DLPack): the problem's stages, bias included."""
    import torch
    import torch.nn.functional as F
    xt = torch.from_dlpack(x)
    ps = [(torch.from_dlpack(w), None if b is None else torch.from_dlpack(b)) for w, b in params]
    stages = list(zip(p.stages, ps))

    def run():
        set_torch_math(tf32)         # process-wide switches: set on every call
        with torch.no_grad():
            h = xt
            for s, (w, b) in stages:
                f = F.conv_transpose2d if s.transposed else F.conv2d
                h = f(h, w, b, **s.torch_kwargs())
            return h
    return run


def cublas_runner(p: Problem, x, params):
    """The pointwise problem's GEMM through cuBLAS (torch.matmul, TF32 off): (M x C) @ (C x H*W), batched."""
    import torch
    s = p.stages[0]
    wm = torch.from_dlpack(params[0][0]).reshape(s.M, s.C)
    x3 = torch.from_dlpack(x).reshape(p.N, s.C, s.H * s.W)

    def run():
        set_torch_math(False)
        with torch.no_grad():
            return torch.matmul(wm, x3)
    return run


def first_call(fn) -> tuple[object, float]:
    t0 = time.perf_counter()
    out = fn()
    sync()
    return out, time.perf_counter() - t0


def timed(fn, warmup: int, repeat: int) -> dict:
    from labkit import measure
    t = measure.time_fn(fn, warmup=warmup, repeat=repeat, sync=False)
    return {"median_ms": t.median_ms, "min_ms": t.min_ms, "spread": (max(t.times_ms) - t.min_ms) / t.median_ms}


def release(*_) -> None:
    from labkit import measure
    measure.release_gpu_memory()
    if labkit.backend() == "cuda" and "torch" in sys.modules:
        import torch
        torch.cuda.empty_cache()


# --- one problem -----------------------------------------------------------------------------------

def nominal_fp32_TFLOPs(dev) -> float | None:
    """SMs x FP32 lanes per SM x 2 (an FMA) x the SM clock: the data sheet's FP32 peak."""
    if not dev.is_gpu or not dev.sm_count or not dev.sm_clock_mhz or not dev.compute_capability:
        return None
    major, minor = dev.compute_capability
    lanes = 128 if (major, minor) >= (8, 6) else 64
    return dev.sm_count * lanes * 2 * dev.sm_clock_mhz * 1e6 / 1e12


def check_stages(xp, p: Problem, x, params, outs, *, samples: int, seed: int, tol: float, what: str,
                 row: dict, prefix: str) -> None:
    """NaN left in any stage's output, and each stage against float64 from its own input."""
    nans = sum(nan_count(xp, y) for y in outs)
    errs, hows = [], []
    h = x
    for i, (s, (w, b), y) in enumerate(zip(p.stages, params, outs)):
        e, how = stage_error(xp, s, h, w, b, y, samples=samples, seed=seed + i)
        errs.append(e)
        hows.append(how)
        h = y
    err = max(errs, key=lambda v: math.inf if math.isnan(v) else v)
    row[f"{prefix}nan_outputs"] = nans
    row[f"{prefix}max_err"] = err
    row[f"{prefix}checked_by"] = "; ".join(dict.fromkeys(hows))
    ok = nans == 0 and not math.isnan(err) and err <= tol
    row[f"{prefix}check"] = "pass" if ok else "FAIL"
    if not ok:
        row["failures"].append(f"{what}: {nans} outputs left NaN, max error {err:.3g} "
                               f"(|y - ref| / sum|terms|, tolerance {tol:g})")


def run_problem(p: Problem, args, ctx: dict) -> dict:
    from labkit import autotune
    xp = labkit.xp
    dev = ctx["device"]
    ceil = ctx["ceilings"]
    row = {"id": p.id, "kind": p.kind, "text": p.text(), "N": p.N, "stages": [s.describe() for s in p.stages],
           "x_shape": list(p.x_shape), "y_shape": list(p.y_shape), "flops": p.flops, "floor_bytes": p.floor_bytes,
           "working_set_GB": p.working_set_bytes / 1e9, "note": p.note, "failures": [], "device": dev.label,
           "backend": dev.backend}
    x, params = make_arrays(xp, p, args.seed)
    outs = [xp.empty(s.y_shape(p.N), xp.float32) for s in p.stages]
    for y in outs:
        y.fill(xp.nan)
    run = labkit_runner(p, x, params, outs, args.variant)

    # labkit: first call (plans, compiles, autotuning), check, then time
    seen = len(autotune.history())
    try:
        y, row["first_call_s"] = first_call(run)
        row["out_respected"] = y is outs[-1]
        decisions = autotune.history()[seen:]
        row["auto_decisions"] = [{k: d.get(k) for k in ("family", "key", "source", "config", "seconds", "ms", "first_ms")}
                                 for d in decisions]
        row["autotune_search_s"] = sum(d.get("seconds") or 0.0 for d in decisions if d.get("source") == "search")
        check_stages(xp, p, x, params, outs, samples=args.samples, seed=args.seed, tol=TOL["fp32"],
                     what=f"labkit {args.variant}", row=row, prefix="")
        t = timed(run, args.warmup, args.repeat)
        row.update({"labkit_ms": t["median_ms"], "labkit_min_ms": t["min_ms"], "labkit_spread": t["spread"]})
    except Exception as e:    # noqa: BLE001  (recorded, flagged, the next problem runs)
        row["failures"].append(f"labkit {args.variant} raised {type(e).__name__}: {e}")
        row["traceback"] = traceback.format_exc(limit=6)

    ms = row.get("labkit_ms")
    if ms:
        row["TFLOPs"] = p.flops / (ms * 1e-3) / 1e12
        row["GBps"] = p.floor_bytes / (ms * 1e-3) / 1e9
        if ctx["nominal_TFLOPs"]:
            row["pct_fp32_peak"] = 100 * row["TFLOPs"] / ctx["nominal_TFLOPs"]
        row["pct_fp32_ceiling"] = 100 * row["TFLOPs"] / ceil.fp32_TFLOPs
    row["compute_floor_ms"] = p.flops / (ceil.fp32_TFLOPs * 1e12) * 1e3
    row["memory_floor_ms"] = p.floor_bytes / (ceil.copy_GBps * 1e9) * 1e3
    row["floor_ms"] = max(row["compute_floor_ms"], row["memory_floor_ms"])
    row["bound"] = "memory" if row["memory_floor_ms"] >= row["compute_floor_ms"] else "compute"
    if ctx["nominal_GBps"]:
        row["memory_floor_nominal_ms"] = p.floor_bytes / (ctx["nominal_GBps"] * 1e9) * 1e3
    if ms:
        row["pct_of_floor"] = 100 * row["floor_ms"] / ms
        row["pct_of_memory_floor"] = 100 * row["memory_floor_ms"] / ms

    # cuDNN (and cuBLAS), FP32 with TF32 off
    if ctx["torch"] is None:
        try:
            trun = torch_runner(p, x, params, tf32=False)
            yt, row["cudnn_first_call_s"] = first_call(trun)
            if "labkit_ms" in row:
                row["max_rel_err_vs_cudnn"] = d = max_rel_diff_torch(outs[-1], yt)
                if not d <= TORCH_TOL["fp32"]:
                    row["failures"].append(f"labkit {args.variant} vs cuDNN FP32: max |diff| / max |y| = {d:.3g} "
                                           f"(> {TORCH_TOL['fp32']:g})")
            del yt
            t = timed(trun, args.warmup, args.repeat)
            row.update({"cudnn_ms": t["median_ms"], "cudnn_min_ms": t["min_ms"]})
            if ms:
                row["ratio"] = ms / t["median_ms"]
            if p.kind == "pointwise":
                crun = cublas_runner(p, x, params)
                t = timed(crun, args.warmup, args.repeat)
                row["cublas_ms"] = t["median_ms"]
                if ms:
                    row["pct_of_cublas"] = 100 * t["median_ms"] / ms
        except Exception as e:    # noqa: BLE001
            row["peer_error"] = f"{type(e).__name__}: {e}"
        release()

    # TF32: labkit's implicit_tf32 beside PyTorch with TF32 on (dense-type problems, on a GPU)
    tf32_ok = (args.tf32 and dev.is_gpu and p.kind in TF32_KINDS and len(p.stages) == 1
               and not p.stages[0].transposed)
    if tf32_ok:
        for y in outs:
            y.fill(xp.nan)
        run32 = labkit_runner(p, x, params, outs, "implicit_tf32")
        try:
            _, row["tf32_first_call_s"] = first_call(run32)
            check_stages(xp, p, x, params, outs, samples=args.samples, seed=args.seed, tol=TOL["tf32"],
                         what="labkit implicit_tf32", row=row, prefix="tf32_")
            t = timed(run32, args.warmup, args.repeat)
            row["labkit_tf32_ms"] = t["median_ms"]
        except Exception as e:    # noqa: BLE001
            row["tf32_error"] = f"{type(e).__name__}: {e}"
            row["failures"].append(f"labkit implicit_tf32 raised {type(e).__name__}: {e}")
        if ctx["torch"] is None:
            try:
                trun = torch_runner(p, x, params, tf32=True)
                first_call(trun)
                t = timed(trun, args.warmup, args.repeat)
                row["cudnn_tf32_ms"] = t["median_ms"]
                if "labkit_tf32_ms" in row:
                    row["ratio_tf32"] = row["labkit_tf32_ms"] / t["median_ms"]
            except Exception as e:    # noqa: BLE001
                row["peer_tf32_error"] = f"{type(e).__name__}: {e}"
    row["ok"] = not row["failures"]
    return row


# --- reports ---------------------------------------------------------------------------------------

def summary(rows: list[dict]) -> dict:
    """The headline numbers: ratios to cuDNN, floors, cuBLAS, failures."""
    s: dict = {"problems": len(rows), "kinds": {k: sum(r["kind"] == k for r in rows) for k in KINDS}}
    rated = [r for r in rows if "ratio" in r]
    if rated:
        worst = max(rated, key=lambda r: r["ratio"])
        s["fraction_ratio_le_1"] = sum(r["ratio"] <= 1.0 for r in rated) / len(rated)
        s["fraction_ratio_le_1.5"] = sum(r["ratio"] <= 1.5 for r in rated) / len(rated)
        s["max_ratio"] = {"id": worst["id"], "ratio": worst["ratio"]}
        s["geomean_ratio"] = math.exp(statistics.fmean(math.log(r["ratio"]) for r in rated))
        s["geomean_ratio_by_kind"] = {k: math.exp(statistics.fmean(math.log(r["ratio"]) for r in rated if r["kind"] == k))
                                      for k in KINDS if any(r["kind"] == k for r in rated)}
    tf = [r for r in rows if "ratio_tf32" in r]
    if tf:
        s["tf32_fraction_ratio_le_1"] = sum(r["ratio_tf32"] <= 1.0 for r in tf) / len(tf)
        s["tf32_max_ratio"] = max(r["ratio_tf32"] for r in tf)
    dws = [r for r in rows if r["kind"] == "depthwise" and "pct_of_memory_floor" in r]
    if dws:
        w = min(dws, key=lambda r: r["pct_of_memory_floor"])
        s["depthwise_worst_pct_of_memory_floor"] = {"id": w["id"], "pct": w["pct_of_memory_floor"]}
    pws = [r for r in rows if r["kind"] == "pointwise" and "pct_of_cublas" in r]
    if pws:
        s["pointwise_pct_of_cublas"] = {r["id"]: r["pct_of_cublas"] for r in pws}
    s["pointwise_pct_of_memory_floor"] = {r["id"]: r["pct_of_memory_floor"] for r in rows
                                          if r["kind"] == "pointwise" and "pct_of_memory_floor" in r}
    s["first_call_s_total"] = sum(r.get("first_call_s") or 0.0 for r in rows)
    s["autotune_search_s_total"] = sum(r.get("autotune_search_s") or 0.0 for r in rows)
    s["failed"] = [r["id"] for r in rows if r.get("failures")]
    return s


def print_table(rows: list[dict]) -> None:
    cols = (("labkit ms", "labkit_ms", 9, ".3f"), ("cuDNN ms", "cudnn_ms", 9, ".3f"), ("ratio", "ratio", 6, ".2f"),
            ("%peak", "pct_fp32_peak", 6, ".1f"), ("%floor", "pct_of_floor", 6, ".1f"),
            ("%memfl", "pct_of_memory_floor", 6, ".1f"), ("%cuBLAS", "pct_of_cublas", 7, ".0f"),
            ("tf32 ms", "labkit_tf32_ms", 8, ".3f"), ("cuDNN tf", "cudnn_tf32_ms", 8, ".3f"),
            ("r_tf32", "ratio_tf32", 6, ".2f"), ("first s", "first_call_s", 7, ".2f"), ("err", "max_err", 8, ".1e"))
    def cell(r, k, w, fmt):
        return format(r[k], f"{w}{fmt}") if isinstance(r.get(k), (int, float)) else "-".rjust(w)
    print(f"{'id':<26s} {'kind':<10s} " + " ".join(h.rjust(w) for h, _, w, _ in cols) + "  check")
    for r in rows:
        print(f"{r['id']:<26s} {r['kind']:<10s} " + " ".join(cell(r, k, w, fmt) for _, k, w, fmt in cols)
              + f"  {'ok' if r.get('ok') else 'FAILED'}")


def print_summary(s: dict, rows: list[dict]) -> None:
    print(f"\n{s['problems']} problems: " + ", ".join(f"{k} {n}" for k, n in s["kinds"].items() if n))
    if "fraction_ratio_le_1" in s:
        print(f"labkit auto / cuDNN FP32: {100 * s['fraction_ratio_le_1']:.0f}% of the shapes at <= 1.0x, "
              f"{100 * s['fraction_ratio_le_1.5']:.0f}% at <= 1.5x; max {s['max_ratio']['ratio']:.2f}x "
              f"({s['max_ratio']['id']}); geometric mean {s['geomean_ratio']:.2f}x")
        print("  geometric mean by kind: " + ", ".join(f"{k} {v:.2f}x" for k, v in s["geomean_ratio_by_kind"].items()))
    else:
        print("no cuDNN ratios (no peer in this run)")
    if "tf32_fraction_ratio_le_1" in s:
        print(f"TF32 (implicit_tf32 / cuDNN TF32): {100 * s['tf32_fraction_ratio_le_1']:.0f}% at <= 1.0x, "
              f"max {s['tf32_max_ratio']:.2f}x")
    if "depthwise_worst_pct_of_memory_floor" in s:
        w = s["depthwise_worst_pct_of_memory_floor"]
        print(f"depthwise: worst {w['pct']:.1f}% of the memory floor ({w['id']})")
    if s.get("pointwise_pct_of_cublas"):
        print("pointwise, % of cuBLAS FP32: " + ", ".join(f"{k} {v:.0f}%" for k, v in s["pointwise_pct_of_cublas"].items()))
    if s.get("pointwise_pct_of_memory_floor"):
        print("pointwise, % of the memory floor: " + ", ".join(
            f"{k} {v:.0f}%" for k, v in s["pointwise_pct_of_memory_floor"].items()))
    print(f"first calls: {s['first_call_s_total']:.1f} s in all, of which autotuning searches "
          f"{s['autotune_search_s_total']:.1f} s")
    bad = [r for r in rows if r.get("failures")]
    if bad:
        print("\n" + "!" * 100)
        print(f"!!! {len(bad)} PROBLEM(S) FAILED: wrong, unwritten or raised")
        for r in bad:
            for msg in r["failures"]:
                print(f"!!!   {r['id']} ({r['text']}): {msg}")
        print("!" * 100)
    else:
        print("every problem checked: no NaN left, float64 samples within tolerance")


def plot(rows: list[dict], path: Path, title: str) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    order = [r for k in KINDS for r in rows if r["kind"] == k]
    colors = dict(zip(KINDS, plt.get_cmap("tab10").colors))
    xs = np.arange(len(order))
    fig, axes = plt.subplots(2, 1, figsize=(max(10.0, 0.24 * len(order) + 3), 9), sharex=True)
    ax = axes[0]
    ratio = [r.get("ratio", np.nan) for r in order]
    ax.bar(xs, ratio, color=[colors[r["kind"]] for r in order], width=0.8)
    tf = [r.get("ratio_tf32", np.nan) for r in order]
    if not all(np.isnan(tf)):
        ax.plot(xs, tf, "k_", ms=9, mew=2, ls="none", label="TF32: implicit_tf32 / cuDNN TF32")
        ax.legend(fontsize=8, loc="upper left")
    for y, ls in ((1.0, "-"), (1.5, "--")):
        ax.axhline(y, color="grey", lw=1, ls=ls)
    bounds = [i for i in range(1, len(order)) if order[i]["kind"] != order[i - 1]["kind"]]
    for a in axes:
        for i in bounds:
            a.axvline(i - 0.5, color="lightgrey", lw=0.8)
    for i, r in enumerate(order):
        if r.get("failures"):
            ax.annotate("FAIL", (i, 0), color="red", fontsize=7, ha="center", va="bottom", rotation=90)
    finite = [v for v in ratio + tf if v == v]
    if finite and max(finite) > 6:
        ax.set_yscale("log")
    elif finite:
        ax.set_ylim(0, max(1.6, 1.05 * max(finite)))
    if not finite:
        ax.text(0.5, 0.5, "no cuDNN in this run", transform=ax.transAxes, ha="center")
    ax.set_ylabel("labkit auto / cuDNN FP32 (lower is faster)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    ax = axes[1]
    floor = [r.get("pct_of_floor", np.nan) for r in order]
    mem = [r.get("pct_of_memory_floor", np.nan) if r["kind"] in ("depthwise", "pointwise") else np.nan for r in order]
    ax.bar(xs, floor, color=[colors[r["kind"]] for r in order], width=0.8)
    if not all(np.isnan(mem)):
        ax.plot(xs, mem, "kx", ls="none", label="depthwise, pointwise: % of the memory floor")
        ax.legend(fontsize=8, loc="upper left")
    ax.axhline(100, color="grey", lw=1)
    ax.set_ylabel("labkit: % of the floor\nmax(FLOPs / FP32 peak, bytes / copy BW)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_xticks(xs, [r["id"] for r in order], rotation=90, fontsize=7)
    from matplotlib.patches import Patch
    kinds_here = [k for k in KINDS if any(r["kind"] == k for r in order)]
    fig.legend([Patch(color=colors[k]) for k in kinds_here], kinds_here, ncol=len(kinds_here), fontsize=8,
               loc="lower center", bbox_to_anchor=(0.5, -0.01))
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def plain(o):
    """JSON for NumPy scalars and arrays and tuples (as labkit.measure.save_rows writes them)."""
    if hasattr(o, "item") and getattr(o, "ndim", 0) == 0:
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(f"{type(o).__name__} is not JSON serializable")


def write(doc: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=plain) + "\n")
    return path


TF32_KEYS = ("tf32_first_call_s", "tf32_nan_outputs", "tf32_max_err", "tf32_checked_by", "tf32_check",
             "labkit_tf32_ms", "cudnn_tf32_ms", "ratio_tf32")


def merge(files: list[str], out: Path | None) -> int:
    """Join the parts of a zoo run (--only / --ids files) into conv_zoo_<gpu>.json and its plot."""
    docs = [json.loads(Path(f).read_text()) for f in files]
    if not docs:
        print("--merge: no files")
        return 2
    devices = {d["device"] for d in docs}
    if len(devices) > 1:
        print(f"--merge: the parts were measured on different devices: {sorted(devices)}")
        return 2
    rows: dict[str, dict] = {}
    for d in docs:
        for r in d["rows"]:
            # each row says how its part was run (the autotuner's mode and budget, TF32 rows or not)
            r.setdefault("run", {"autotune": d["meta"].get("autotune"), "tf32_rows": d["meta"].get("tf32", True),
                                 "part": d["meta"].get("partial", "whole")})
            prev = rows.get(r["id"])
            if prev is not None and "labkit_tf32_ms" not in r and "labkit_tf32_ms" in prev:
                # a part run without TF32 rows keeps the earlier part's, saying which run they are from
                r.update({k: v for k, v in prev.items() if k in TF32_KEYS})
                r["tf32_run"] = prev.get("tf32_run") or dict(prev["run"], date=prev.get("date") or d.get("date"))
            rows[r["id"]] = r           # a later part wins
    order = {p.id: i for i, p in enumerate(ZOO)}
    merged = sorted(rows.values(), key=lambda r: order.get(r["id"], len(order)))
    doc = dict(docs[0], rows=merged, date=max(d["date"] for d in docs))
    doc["meta"] = dict(docs[0]["meta"], merged_from=[str(f) for f in files], only=None, ids=None)
    doc["meta"]["summary"] = s = summary(merged)
    tag = doc["meta"].get("tag") or gpu_tag(doc["device"])
    folder = out or Path(files[0]).parent
    path = write(doc, folder / f"conv_zoo_{tag}.json")
    print_table(merged)
    print_summary(s, merged)
    png = plot(merged, path.with_suffix(".png"), f"Any convolution: labkit auto vs cuDNN, {doc['device_label']}")
    print(f"wrote {path} and {png}")
    return 1 if s["failed"] else 0


# --- main ------------------------------------------------------------------------------------------

def selected(args) -> list[Problem]:
    zoo = list(SMOKE if args.smoke else ZOO)
    if args.only:
        zoo = [p for p in zoo if p.kind in args.only]
    if args.ids:
        unknown = set(args.ids) - {p.id for p in zoo}
        if unknown:
            raise SystemExit(f"--ids: no problem {sorted(unknown)} in the {'smoke set' if args.smoke else 'zoo'}")
        zoo = [p for p in zoo if p.id in args.ids]
    if args.max_elems:
        zoo = [p for p in zoo if p.max_elems < args.max_elems]
    return zoo


def list_zoo(zoo: list[Problem]) -> None:
    print(f"{'id':<26s} {'kind':<10s} {'GFLOP':>8s} {'GB':>6s} {'ws GB':>6s} {'~H100 ms':>8s}  problem")
    for p in zoo:
        print(f"{p.id:<26s} {p.kind:<10s} {p.flops / 1e9:8.1f} {p.floor_bytes / 1e9:6.2f} "
              f"{p.working_set_bytes / 1e9:6.2f} {rough_h100_ms(p):8.2f}  {p.text()}"
              + (f"   [{p.note}]" if p.note else ""))
    counts = {k: sum(p.kind == k for p in zoo) for k in KINDS}
    print(f"{len(zoo)} problems: " + ", ".join(f"{k} {n}" for k, n in counts.items() if n))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="folder for the JSON and PNG (default benchmarks/results; --smoke: results/benchmarks)")
    ap.add_argument("--only", nargs="+", choices=KINDS, metavar="KIND", help=f"only these kinds: {', '.join(KINDS)}")
    ap.add_argument("--ids", nargs="+", metavar="ID", help="only these problems (ids as --list shows them)")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--samples", type=int, default=2048, help="float64-checked positions per output")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--variant", default="auto", help="labkit's variant for the FP32 rows (default auto)")
    ap.add_argument("--budget", type=float, help="LABKIT_AUTOTUNE_BUDGET (seconds a search may spend)")
    ap.add_argument("--no-tf32", dest="tf32", action="store_false", help="skip the TF32 rows")
    ap.add_argument("--max-elems", type=int, help="skip problems with an array of this many elements or more")
    ap.add_argument("--smoke", action="store_true", help="3 tiny problems on any backend (plumbing)")
    ap.add_argument("--list", action="store_true", help="print the zoo and exit")
    ap.add_argument("--merge", nargs="+", metavar="JSON", help="join parts of a run into conv_zoo_<gpu>.json")
    args = ap.parse_args(argv)
    if args.merge:
        return merge(args.merge, Path(args.out) if args.out else None)
    zoo = selected(args)
    if args.list:
        list_zoo(zoo)
        return 0
    if args.budget:
        os.environ["LABKIT_AUTOTUNE_BUDGET"] = str(args.budget)
    if args.smoke:
        args.repeat, args.warmup = min(args.repeat, 3), min(args.warmup, 1)
    out = Path(args.out or ("results/benchmarks" if args.smoke else Path(__file__).resolve().parent / "results"))
    dev = labkit.device()
    from labkit import autotune
    why_no_torch = torch_status()
    ctx = {"device": dev, "ceilings": dev.ceilings(), "nominal_TFLOPs": nominal_fp32_TFLOPs(dev),
           "nominal_GBps": dev.theoretical_bandwidth_GBps, "torch": why_no_torch}
    tag = device_tag(dev)
    meta = {"benchmark": "conv_zoo", "tag": tag, "smoke": args.smoke, "only": args.only, "ids": args.ids,
            "variant": args.variant, "tf32": args.tf32, "repeat": args.repeat, "warmup": args.warmup, "samples": args.samples,
            "seed": args.seed, "tolerance": TOL, "torch_tolerance": TORCH_TOL,
            "autotune": {"mode": autotune.mode(), "budget_s": autotune.budget_s()},
            "fp32_ceiling_TFLOPs (measured, cuBLAS SGEMM)": ctx["ceilings"].fp32_TFLOPs,
            "copy_GBps (measured)": ctx["ceilings"].copy_GBps,
            "fp32_peak_TFLOPs (nominal: SMs x lanes x 2 x clock)": ctx["nominal_TFLOPs"],
            "bandwidth_GBps (nominal)": ctx["nominal_GBps"],
            "timing": "CUDA events, warm-up then the median of --repeat calls queued back to back "
                      "(labkit.measure.time_fn, sync=False); labkit writes into preallocated outputs",
            "flops": "2*N*M*Ho*Wo*C/groups*KH*KW; transposed: the adjoint's, 2*N*Cin*H*W*Cout/groups*KH*KW",
            "floor": "max(FLOPs / measured FP32 ceiling, (x + y + weights + bias) bytes / measured copy GB/s); "
                     "a separable pair: its intermediate never leaving the chip",
            "peer": why_no_torch or "PyTorch eager: cuDNN (F.conv2d / F.conv_transpose2d), cuBLAS (torch.matmul)"}
    if why_no_torch is None:
        import torch
        meta["torch"] = {"version": torch.__version__, "cudnn": torch.backends.cudnn.version(),
                         "cudnn.benchmark": True,
                         "fp32 rows": {"cudnn.allow_tf32": False, "cuda.matmul.allow_tf32": False},
                         "tf32 rows": {"cudnn.allow_tf32": True, "cuda.matmul.allow_tf32": True}}
        set_torch_math(False)
    print(f"conv zoo: {len(zoo)} problems on {dev.label}; peers: {why_no_torch or 'cuDNN / cuBLAS via PyTorch '}"
          f"{meta.get('torch', {}).get('version', '')}; autotune {meta['autotune']}", flush=True)
    rows = []
    t0 = time.perf_counter()
    from labkit import measure
    name = "conv_zoo_smoke" if args.smoke else "conv_zoo"
    suffix = ("_" + "-".join(args.only) if args.only else "") + ("_ids" if args.ids else "")
    suffix += "_max" if args.max_elems else ""
    partial = out / f"{name}_{tag}{suffix}.partial.json"
    for i, p in enumerate(zoo):
        r = run_problem(p, args, ctx)
        release()                  # the problem's arrays are gone now: hand the pools' blocks back
        rows.append(r)
        measure.save_rows(rows, partial, meta={**meta, "partial": f"{len(rows)} of {len(zoo)} problems"})
        print(f"[{i + 1}/{len(zoo)}] {p.id:<26s} labkit {r.get('labkit_ms', float('nan')):9.3f} ms  "
              f"cuDNN {r.get('cudnn_ms', float('nan')):9.3f} ms  ratio {r.get('ratio', float('nan')):5.2f}  "
              f"first call {r.get('first_call_s', float('nan')):6.2f} s  err {r.get('max_err', float('nan')):.1e}  "
              f"{'ok' if r['ok'] else 'FAILED: ' + '; '.join(r['failures'])}", flush=True)
    meta["wall_s"] = time.perf_counter() - t0
    meta["summary"] = s = summary(rows)
    print()
    print_table(rows)
    print_summary(s, rows)
    path = measure.save_rows(rows, out / f"{name}_{tag}{suffix}.json", meta=meta)
    png = plot(rows, path.with_suffix(".png"), f"Any convolution: labkit {args.variant} vs cuDNN, {dev.label}")
    partial.unlink(missing_ok=True)   # the whole run is in the file proper
    print(f"wrote {path} and {png}")
    return 1 if s["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
