"""Convolution as an implicit GEMM: labkit/kernels/conv_implicit.cu (FP32) and
conv_implicit_tf32.cu (TF32 tensor cores, GPU only), for any stride, padding and groups.

    layer = ConvLayer(C=96, H=27, W=27, M=256, K=5, pad=2, groups=2)
    conv = ImplicitConv2d(w, b, layer, activation="relu", precision="tf32")   # prepares the weights once
    y = conv(x)                                              # x (N, 96, 27, 27) -> y (N, 256, 27, 27)
    y = conv2d_implicit(x, w, b, pad=2, groups=2)            # the same in one call (prepares each time)

The weights are re-laid out once per layer, (M, C/G, K, K) -> (G, C/G*K*K, M/G): each group's weight
matrix transposed, so the kernels read a tile of it as rows of neighbouring floats.  A layer object
does that when it is made, as an inference engine prepares a model when it loads it.

The tile sizes are compile-time parameters, chosen per layer shape and GPU from the tuned table
``labkit/tuned/conv_implicit.json`` (written by ``benchmarks/tune_implicit.py``), else a default
that is sensible everywhere.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Iterable, NamedTuple

import numpy as np

from . import backends
from .conv import ACTIVATIONS, _check_array
from .loader import load, set_constant
from .tuning import read_table, write_entry

__all__ = ["ConvLayer", "Tiles", "ImplicitConv2d", "conv2d_implicit", "tiles_for", "default_tiles",
           "candidates", "sweep_implicit", "record_tiles", "ALEXNET_CONVS", "PRECISIONS", "TABLE"]

PRECISIONS = ("fp32", "tf32")
TOLERANCE = {"fp32": 1e-5, "tf32": 5e-3}   # relative error against the float64 reference
TABLE = Path(__file__).resolve().parent / "tuned" / "conv_implicit.json"
SHARED_LIMIT = 48 * 1024          # static shared memory of a block (the FP32 kernel's two stages)
DYNAMIC_SHARED_LIMIT = 227 * 1024  # the most dynamic shared memory any GPU lets a block opt into (sm_90)


def shared_optin_limit() -> int:
    """The dynamic shared memory a block may opt into on the GPU in use (99 KiB on sm_86/89, 163 KiB
    on sm_80, 227 KiB on sm_90), or DYNAMIC_SHARED_LIMIT where there is no GPU."""
    if backends.current() != "cuda":
        return DYNAMIC_SHARED_LIMIT
    import cupy
    return int(cupy.cuda.runtime.deviceGetAttribute(cupy.cuda.runtime.cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                                    cupy.cuda.Device().id))


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
        return ((self.H + 2 * self.pad - self.K) // self.stride + 1,
                (self.W + 2 * self.pad - self.K) // self.stride + 1)

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
        for name, v, low in zip(self._fields, self, (1, 1, 1, 1, 1, 1, 0, 1)):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < low:
                raise ValueError(f"{name} must be an int >= {low}, got {v!r}")
        if self.C % self.groups or self.M % self.groups:
            raise ValueError(f"groups={self.groups} must divide C={self.C} and M={self.M}")
        if self.pad >= self.K:
            raise ValueError(f"pad={self.pad} must be smaller than K={self.K}")
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


@dataclass(frozen=True)
class Tiles:
    """The kernels' compile-time tile sizes.  Both: a block computes a bm x bn tile of a group's
    output (channels x pixels), bk deep at a time.  fp32: each thread tm x tn outputs.  tf32: a
    block of wm x wn warps, each owning a (bm/wm) x (bn/wn) piece as 16 x 8 mma tiles, with
    ``stages`` tiles in flight (cp.async) and registers budgeted for ``minb`` blocks per SM."""
    precision: str = "fp32"
    bm: int = 128
    bn: int = 128
    bk: int = 8
    tm: int = 8
    tn: int = 8
    wm: int = 2
    wn: int = 4
    stages: int = 3
    minb: int = 1

    @property
    def threads(self) -> int:
        if self.precision == "tf32":
            return 32 * self.wm * self.wn
        return (self.bm // self.tm) * (self.bn // self.tn)

    @property
    def kernel(self) -> str:
        return "conv_implicit" if self.precision == "fp32" else "conv_implicit_tf32"

    def short(self) -> str:
        inner = (f"T{self.tm}x{self.tn}" if self.precision == "fp32"
                 else f"W{self.wm}x{self.wn} S{self.stages} B{self.minb}")
        return f"{self.bm}x{self.bn}x{self.bk} {inner}"

    def defines(self) -> dict:
        if self.precision == "fp32":
            return {"IG_BM": self.bm, "IG_BN": self.bn, "IG_BK": self.bk, "IG_TM": self.tm, "IG_TN": self.tn}
        return {"TC_BM": self.bm, "TC_BN": self.bn, "TC_BK": self.bk, "TC_WM": self.wm, "TC_WN": self.wn,
                "TC_STAGES": self.stages, "TC_MINB": self.minb}

    def shared_bytes(self) -> int:
        """fp32: the static tiles; tf32: the dynamic shared memory given at launch."""
        if self.precision == "fp32":
            return 2 * (self.bm + self.bn) * self.bk * 4
        return self.stages * self.bk * (self.bm + self.bn + 8) * 4

    def check(self) -> None:
        """Raise ValueError, naming the fix, where the kernels' static_asserts would fail."""
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        vals = asdict(self)
        for k in ("bm", "bn", "bk", "tm", "tn", "wm", "wn", "stages", "minb"):
            v = vals[k]
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{k} must be a positive int, got {v!r}")
        if self.precision == "fp32":
            if self.bm % self.tm or self.bn % self.tn or self.tm % 4 or self.tn % 4 or self.bk % 4:
                raise ValueError(f"tm, tn, bk must be multiples of 4, tm dividing bm and tn dividing bn: {self}")
        else:
            if self.bm % (16 * self.wm) or self.bn % (8 * self.wn) or self.bk % 8 or self.bm % 4:
                raise ValueError(f"bm must be a multiple of 16*wm, bn of 8*wn, bk of 8: {self}")
            if self.stages < 2:
                raise ValueError(f"stages must be at least 2 (one tile computed, one arriving): {self}")
        t = self.threads
        if t > 1024 or t % self.bn:
            raise ValueError(f"{t} threads per block: at most 1024, and a multiple of bn={self.bn} "
                             f"(each thread gathers one column of the input tile): {self}")
        limit = SHARED_LIMIT if self.precision == "fp32" else DYNAMIC_SHARED_LIMIT
        if self.shared_bytes() > limit:
            raise ValueError(f"the shared stages take {self.shared_bytes()} bytes, over {limit // 1024} KiB: {self}")


_TILE_FIELDS = ("bm", "bn", "bk", "tm", "tn", "wm", "wn", "stages", "minb")

# Small tiles for small batches: a layer whose tuned tiles make fewer blocks than the GPU has SMs
# (AlexNet's conv3 at batch 1: 169 pixels, 6 blocks of 128 x 128) runs these instead, which make
# up to 8 times as many (ImplicitConv2d.tiles_at).
SMALL_TILES = {"fp32": Tiles("fp32", bm=32, bn=64, bk=8, tm=4, tn=4),
               "tf32": Tiles("tf32", bm=64, bn=64, bk=16, wm=2, wn=2, stages=3, minb=1)}


def default_tiles(layer: ConvLayer, precision: str = "fp32") -> Tiles:
    """Sensible on any GPU: 128 pixels a block; 64 or 128 channels, whichever wastes less."""
    mg = layer.M // layer.groups
    bm = 64 if mg <= 64 or (mg % 128 and mg % 64 == 0) else 128
    if precision == "tf32":
        return Tiles("tf32", bm=bm, bn=128, bk=16, wm=2, wn=4, stages=3)
    return Tiles("fp32", bm=bm, bn=128, bk=8, tm=8, tn=8)


def tiles_for(layer: ConvLayer, precision: str = "fp32", device_name: str | None = None) -> Tiles:
    """The tuned table's tiles for this layer, precision and GPU, else ``default_tiles``."""
    if device_name is None:
        from .device_query import device
        dev = device()
        device_name = dev.name if dev.backend == "cuda" else ""
    entry = read_table(TABLE).get("gpus", {}).get(device_name or "", {}).get(layer.key, {}).get(precision)
    if entry:
        return Tiles(precision, **{k: entry[k] for k in _TILE_FIELDS if k in entry})
    return default_tiles(layer, precision)


def k_taps(layer: ConvLayer, bk: int) -> np.ndarray:
    """conv_implicit_tf32.cu's table k_taps: for each row k = (c*K + kh)*K + kw of a group's column
    matrix, (offset of the tap in the input from the window's corner, kh << 16 | kw); rows past the
    last, up to a whole number of bk-tiles, get kh = 0x4000 (outside every image: zeros)."""
    kg = layer.C // layer.groups * layer.K * layer.K
    k = np.arange(-(-kg // bk) * bk)
    c, kh, kw = k // (layer.K * layer.K), (k // layer.K) % layer.K, k % layer.K
    taps = np.stack([(c * layer.H + kh) * layer.W + kw, (kh << 16) | kw], axis=1).astype(np.int32)
    taps[kg:] = (0, 0x4000 << 16)
    return taps


def round_to_tf32(a: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest TF32 value (10 mantissa bits; ties away from zero, as
    cvt.rna), still stored as float32.  For finite values."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def pack_weights_tf32(w, layer: ConvLayer, tiles: Tiles):
    """conv_implicit_tf32.cu's weight layout: (G, MB, KT, BK*BM) with MB = ceil(MG/BM) block rows and
    KT = ceil(KG/BK) k-tiles, zero-padded, rounded to TF32.  Within a BK x BM chunk the value
    W_g[m, k] of m = mi*16 + mh*8 + gid, k = kb*8 + kh*4 + tig sits at
    ((kb*(BM/16) + mi)*32 + gid*4 + tig)*4 + mh + 2*kh: the 4 values of one thread's mma A fragment
    (rows gid, gid+8; columns tig, tig+4) are neighbours, and a warp's 32 fragments 512
    neighbouring bytes."""
    xp = backends.xp()
    G, bm, bk = layer.groups, tiles.bm, tiles.bk
    mg, kg = layer.M // G, layer.C // G * layer.K * layer.K
    mb, kt = -(-mg // bm), -(-kg // bk)
    host = w.get() if hasattr(w, "get") else np.asarray(w)
    wp = np.zeros((G, mb * bm, kt * bk), dtype=np.float32)
    wp[:, :mg, :kg] = host.reshape(G, mg, kg)
    # axes: G, MB, mi, mh, gid | KT, kb, kh, tig  ->  G, MB, KT, kb, mi, gid, tig, kh, mh
    packed = wp.reshape(G, mb, bm // 16, 2, 8, kt, bk // 8, 2, 4).transpose(0, 1, 5, 6, 2, 4, 8, 7, 3)
    return xp.asarray(round_to_tf32(packed.reshape(G, mb, kt, bk * bm)))


def prepare_weights(w, groups: int):
    """(M, C/G, K, K) -> (G, C/G*K*K, M/G), contiguous, on w's backend: each group's matrix transposed."""
    xp = backends.xp()
    M = int(w.shape[0])
    return xp.ascontiguousarray(w.reshape(groups, M // groups, -1).transpose(0, 2, 1))


class ImplicitConv2d:
    """One convolution layer on the implicit-GEMM kernels, its weights prepared once.

    Args:
        w: float32 (M, C/groups, K, K) on the backend;  b: float32 (M,) or None.
        layer: its ``ConvLayer`` (input plane, stride, padding, groups); checked against w.
        activation: None, "tanh" or "relu", fused into the kernel's epilogue.
        precision: "fp32" (CUDA cores, any backend) or "tf32" (tensor cores, GPU only).
        tiles: a ``Tiles`` to use instead of the tuned table's choice (a sweep passes each one).
        round_tf32: tf32 only: round the inputs to the nearest TF32 value (cvt.rna) rather than let
            the tensor cores drop their low bits (toward zero): less error, a little slower.  (The
            weights are always rounded to nearest, once, when they are packed.)
    """

    def __init__(self, w, b, layer: ConvLayer, *, activation: str | None = None, precision: str = "fp32",
                 tiles: Tiles | None = None, round_tf32: bool = False):
        backend, xp = backends.current(), backends.xp()
        layer = ConvLayer(*layer)
        layer.check()
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be 'fp32' or 'tf32', got {precision!r}")
        if precision == "tf32" and backend != "cuda":
            raise RuntimeError("precision='tf32' runs on the tensor cores (conv_implicit_tf32.cu declares "
                               "that it needs a GPU); the CPU executor runs precision='fp32'")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be None, 'tanh' or 'relu', got {activation!r}")
        _check_array(w, "w", "(M, C/groups, K, K)", 4, backend, xp)
        want = (layer.M, layer.C // layer.groups, layer.K, layer.K)
        if tuple(w.shape) != want:
            raise ValueError(f"w must have shape {want} (M, C/groups, K, K) for {layer}, got {tuple(w.shape)}")
        if b is not None:
            _check_array(b, "b", "(M,)", 1, backend, xp)
            if tuple(b.shape) != (layer.M,):
                raise ValueError(f"b must have shape ({layer.M},), got {tuple(b.shape)}")
        self._fixed = tiles is not None
        if tiles is None:
            tiles = tiles_for(layer, precision)
        elif not isinstance(tiles, Tiles):
            raise TypeError(f"tiles must be a labkit.implicit.Tiles, got {type(tiles).__name__}")
        tiles = replace(tiles, precision=precision)
        tiles.check()
        self.layer, self.tiles, self.activation, self.precision = layer, tiles, activation, precision
        self._w, self._round = w, bool(round_tf32)
        self.b = b
        self._kernels: dict[Tiles, tuple] = {}
        self.wt = self._kernel(tiles)[1]

    def _kernel(self, tiles: Tiles) -> tuple:
        """(function, prepared weights, dynamic shared bytes) for these tiles, made once."""
        if tiles in self._kernels:
            return self._kernels[tiles]
        layer, precision = self.layer, self.precision
        # fp32: each group's matrix transposed; tf32: packed in mma fragment order (see the kernels)
        wt = prepare_weights(self._w, layer.groups) if precision == "fp32" else pack_weights_tf32(self._w, layer, tiles)
        defines = {**layer.defines(), **tiles.defines()}
        if precision == "tf32":
            defines["TC_ROUND"] = int(self._round)
        mod = load("conv_implicit" if precision == "fp32" else "conv_implicit_tf32", defines=defines)
        fn = mod.get_function(tiles.kernel)
        shared = 0 if precision == "fp32" else tiles.shared_bytes()   # fp32's tiles are static
        if precision == "tf32":
            set_constant(mod, "k_taps", k_taps(layer, tiles.bk))
        if shared > shared_optin_limit():
            raise ValueError(f"{tiles.short()} needs {shared} bytes of shared memory; this GPU lets a "
                             f"block have {shared_optin_limit()}: use fewer stages or a smaller bk")
        if shared > SHARED_LIMIT:   # a block may use more than 48 KiB only once the kernel opts in
            fn.max_dynamic_shared_size_bytes = shared
        # FP32's split-K: the kernel over slices of K, then the reduce (bias, activation)
        splitk = (mod.get_function("conv_implicit_splitk"), mod.get_function("conv_implicit_reduce")) \
            if precision == "fp32" else None
        self._kernels[tiles] = (fn, wt, shared, splitk)
        return self._kernels[tiles]

    def tiles_at(self, N: int) -> Tiles:
        """The tiles a batch of N runs with: the table's, or (unless tiles were given) SMALL_TILES
        when the table's would leave SMs idle (fewer blocks than SMs) and the small ones do not."""
        if self._fixed or backends.current() != "cuda":
            return self.tiles
        from .device_query import gpu_sm_count
        sms = gpu_sm_count()
        small = SMALL_TILES[self.precision]
        if self.blocks(self.tiles, N) < sms and self.blocks(small, N) > self.blocks(self.tiles, N):
            return small
        return self.tiles

    def splits_at(self, N: int, splits: int | None = None, tiles: Tiles | None = None) -> int:
        """Split-K's slices of K at a batch of N (FP32 on a GPU): when the tiles of ``tiles_at(N)``
        make fewer than two blocks per SM (conv3-5 of AlexNet at batch 1: 24-36 blocks, each
        walking 1,728-3,456 products), enough slices for four blocks per SM, each slice at least 8
        k-tiles deep; else 1.  ``splits`` asks for a number instead (tests; the CPU executor);
        either way, the slices really made: none is empty.  ``tiles``: ``tiles_at(N)``, if known."""
        tiles = tiles or self.tiles_at(N)
        k_tiles = -(-self.layer.gemm_shape(N)[2] // tiles.bk)
        if splits is None:
            if self.precision != "fp32" or backends.current() != "cuda":
                return 1
            from .device_query import gpu_sm_count
            sms, blocks = gpu_sm_count(), self.blocks(tiles, N)
            splits = max(1, min(-(-4 * sms // blocks), k_tiles // 8)) if blocks < 2 * sms else 1
        elif isinstance(splits, (bool, np.bool_)) or not isinstance(splits, (int, np.integer)) or splits < 1:
            raise ValueError(f"splits must be a positive int, got {splits!r}")
        elif splits > 1 and self.precision != "fp32":
            raise ValueError("split-K is built into the FP32 kernel only (conv_implicit.cu)")
        per = -(-k_tiles // min(int(splits), k_tiles))
        return -(-k_tiles // per)

    def workspace_shape(self, N: int, splits: int | None = None) -> tuple[int, ...] | None:
        """Split-K's partial sums at a batch of N: (slices, N, M, Ho, Wo), or None without split-K."""
        s = self.splits_at(N, splits)
        return None if s == 1 else (s, N, self.layer.M) + self.layer.out_hw

    def blocks(self, tiles: Tiles, N: int) -> int:
        mg, p, _ = self.layer.gemm_shape(N)
        return -(-p // tiles.bn) * -(-mg // tiles.bm) * self.layer.groups

    def launch_config(self, N: int, tiles: Tiles | None = None,
                      splits: int = 1) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """(grid, block): one block per bm x bn tile of each group's output (and slice of K)."""
        t = tiles or self.tiles_at(N)
        mg, p, _ = self.layer.gemm_shape(N)
        grid = (-(-p // t.bn), -(-mg // t.bm), self.layer.groups * splits)
        if grid[0] > 2**31 - 1:
            raise ValueError(f"batch {N} needs {grid[0]} column blocks: split the batch")
        return grid, (t.threads, 1, 1)

    def __call__(self, x, out=None, *, workspace=None, splits: int | None = None):
        """y = act(conv(x) + b).  ``splits``: split-K's slices (default ``splits_at``); with more
        than one, the partial sums go to ``workspace`` (float32 ``workspace_shape(N)``; allocated
        per call when None: pass one to keep the call free of allocations, as in a CUDA graph)."""
        backend, xp = backends.current(), backends.xp()
        L = self.layer
        _check_array(x, "x", "NCHW", 4, backend, xp)
        if tuple(x.shape[1:]) != (L.C, L.H, L.W):
            raise ValueError(f"x must be (N, {L.C}, {L.H}, {L.W}) for this layer, got {tuple(x.shape)}")
        N = int(x.shape[0])
        ho, wo = L.out_hw
        if N * L.C * L.H * L.W >= 2**31 or N * L.M * ho * wo >= 2**31:
            raise ValueError(f"batch {N} makes x or y over 2**31 elements (32-bit offsets): split the batch")
        if out is None:
            out = xp.empty((N, L.M, ho, wo), dtype=xp.float32)
        else:
            _check_array(out, "out", "NCHW", 4, backend, xp)
            if tuple(out.shape) != (N, L.M, ho, wo):
                raise ValueError(f"out must have shape {(N, L.M, ho, wo)}, got {tuple(out.shape)}")
        tiles = self.tiles_at(N)
        splits = self.splits_at(N, splits, tiles)
        fn, wt, shared, splitk = self._kernel(tiles)
        grid, block = self.launch_config(N, tiles, splits)
        bias = self.b if self.b is not None else wt   # not read when has_bias == 0
        flags = (np.int32(self.b is not None), np.int32(ACTIVATIONS[self.activation]))
        if splits == 1:
            fn(grid, block, (x, wt, bias, out, np.int32(N)) + flags, shared_mem=shared)
            return out
        want = (splits, N, L.M, ho, wo)   # workspace_shape(N, splits)
        if workspace is None:
            workspace = xp.empty(want, dtype=xp.float32)
        elif tuple(workspace.shape) != want or workspace.dtype != np.float32:
            raise ValueError(f"workspace must be float32 {want} (slices, N, M, Ho, Wo), got "
                             f"{workspace.dtype} {tuple(workspace.shape)}")
        splitk[0](grid, block, (x, wt, workspace, np.int32(N), np.int32(splits)))
        splitk[1]((-(-out.size // 256),), (256,), (workspace, bias, out, np.int32(N)) + flags + (np.int32(splits),))
        return out


def conv2d_implicit(x, w, b=None, *, stride: int = 1, pad: int = 0, groups: int = 1,
                    activation: str | None = None, precision: str = "fp32", tiles: Tiles | None = None,
                    round_tf32: bool = False, out=None):
    """y = act(conv(x, w) + b) with stride, zero padding and groups, as one implicit-GEMM launch.

    x float32 (N, C, H, W); w float32 (M, C/groups, K, K); b (M,) or None.  Prepares the weights on
    every call: keep an ``ImplicitConv2d`` to run a layer many times.
    """
    backend, xp = backends.current(), backends.xp()
    _check_array(x, "x", "NCHW", 4, backend, xp)
    _check_array(w, "w", "(M, C/groups, K, K)", 4, backend, xp)
    _, C, H, W = (int(v) for v in x.shape)
    M, _, K, _ = (int(v) for v in w.shape)
    layer = ConvLayer(C, H, W, M, K, stride, pad, groups)
    return ImplicitConv2d(w, b, layer, activation=activation, precision=precision, tiles=tiles,
                          round_tf32=round_tf32)(x, out=out)


# --- tuning ---------------------------------------------------------------------------------------

def candidates(layer: ConvLayer, precision: str = "fp32") -> list[Tiles]:
    """The tile sizes a sweep tries for a layer: every valid one of a small grid."""
    out = []
    if precision == "fp32":
        for bm in (64, 96, 128):
            for bn in (64, 128):
                for bk in (8, 16):
                    out += [Tiles("fp32", bm=bm, bn=bn, bk=bk, tm=8, tn=8),
                            Tiles("fp32", bm=bm, bn=bn, bk=bk, tm=8, tn=4)]
    else:
        for bm in (64, 96, 128):
            for bn in (128, 256):
                for bk, stages in ((16, 3), (16, 4), (32, 3), (32, 4)):
                    out += [Tiles("tf32", bm=bm, bn=bn, bk=bk, wm=wm, wn=wn, stages=stages, minb=minb)
                            for wm, wn in ((2, 4), (4, 2)) for minb in (1, 2)]
    good = []
    for t in out:
        try:
            t.check()
        except ValueError:
            continue
        if not 128 <= t.threads <= 512:
            continue
        mg = layer.M // layer.groups
        if t.precision == "tf32" and t.shared_bytes() > shared_optin_limit():
            continue
        if t.bm > 2 * mg or (t.bm == 96 and (mg % 96 or mg % 64 == 0)):
            continue   # half the block idle, or 96 rows where 64 or 128 fit as well
        good.append(t)
    return good


def random_case(layer: ConvLayer, batch: int, rng=None):
    """Fresh float32 x (batch, C, H, W), w (M, C/G, K, K) scaled by 1/sqrt(C/G*K*K), b (M,) on the host,
    and the float64 reference output of the first two images."""
    from . import reference
    rng = rng or np.random.default_rng()
    x = rng.standard_normal((batch, layer.C, layer.H, layer.W), dtype=np.float32)
    w = rng.standard_normal((layer.M, layer.C // layer.groups, layer.K, layer.K), dtype=np.float32)
    w *= np.float32(1.0 / np.sqrt(w[0].size))
    b = rng.standard_normal(layer.M, dtype=np.float32)
    ref = reference.conv2d(x[:2], w, b, stride=layer.stride, pad=layer.pad, groups=layer.groups)
    return x, w, b, ref


def sweep_implicit(layer: ConvLayer, batch: int, precision: str = "fp32", *,
                   tiles: Iterable[Tiles] | None = None, repeat: int = 20, progress: bool = True):
    """Time every candidate on one layer; (rows, fastest Tiles).  Each is first checked against the
    float64 reference on two images (a wrong kernel never wins)."""
    from .ladder import rel_error
    from .measure import time_fn
    from .measure.sweep import progress_bar

    xp = backends.xp()
    x_h, w_h, b_h, ref = random_case(layer, batch, np.random.default_rng(0))
    x, w, b = xp.asarray(x_h), xp.asarray(w_h), xp.asarray(b_h)
    tol = TOLERANCE[precision]
    ho, wo = layer.out_hw
    y = xp.empty((batch, layer.M, ho, wo), dtype=xp.float32)
    rows = []
    for t in progress_bar(list(tiles or candidates(layer, precision)), desc=f"tuning {layer.key} {precision}",
                          show=progress):
        conv = ImplicitConv2d(w, b, layer, precision=precision, tiles=t)
        y.fill(float("nan"))
        conv(x, out=y)
        err = rel_error(y[:2], ref)
        if not err < tol:
            raise AssertionError(f"{t} disagrees with the reference on {layer} ({err:.2e})")
        r = time_fn(lambda: conv(x, out=y), warmup=3, repeat=repeat, sync=False)
        rows.append({**asdict(t), "tiles": t.short(), "layer": layer.key, "batch": batch,
                     "median_ms": r.median_ms, "min_ms": r.min_ms, "device": r.device, "rel_error": err})
    best = min(rows, key=lambda r: r["median_ms"])
    return rows, Tiles(best["precision"], **{k: best[k] for k in _TILE_FIELDS})


def record_tiles(layer: ConvLayer, tiles: Tiles, *, device_name: str, median_ms: float, batch: int,
                 table=None) -> None:
    """Keep a winner in the table: one entry per GPU name, layer shape and precision."""
    used = ("bm", "bn", "bk") + (("tm", "tn") if tiles.precision == "fp32" else ("wm", "wn", "stages", "minb"))
    entry = {k: v for k, v in asdict(tiles).items() if k in used}
    write_entry(table or TABLE, device_name, layer.key, {tiles.precision: {
        **entry, "median_ms": round(median_ms, 5), "batch": batch}}, merge=True)


# --- comparison with cuDNN ------------------------------------------------------------------------

def compare(layers: dict[str, ConvLayer] | None = None, *, batch: int, repeat: int = 30,
            precisions: Iterable[str] | None = None, tf32_peak_TFLOPs: float | None = None) -> list[dict]:
    """Time each layer (bias, no activation) on the implicit-GEMM kernels and, on a GPU with PyTorch,
    on cuDNN with TF32 off and on, in this same run.  Every kernel's output is first checked against
    the float64 reference on two images (AssertionError if it is off).  Rows carry ms, TFLOP/s and %
    of the floor (FP32 rows against the FP32 GEMM ceiling, TF32 rows against ``tf32_peak_TFLOPs``)."""
    from . import measure, peers
    from .device_query import device
    from .ladder import rel_error

    dev, xp = device(), backends.xp()
    ceil = dev.ceilings()
    layers = layers or ALEXNET_CONVS
    precisions = tuple(precisions or (PRECISIONS if dev.is_gpu else ("fp32",)))
    no_peer = peers.cudnn_available()
    rng = np.random.default_rng()
    rows = []
    for name, L in layers.items():
        x_h, w_h, b_h, ref = random_case(L, batch, rng)
        x, w, b = xp.asarray(x_h), xp.asarray(w_h), xp.asarray(b_h)
        y = xp.empty((batch, L.M) + L.out_hw, dtype=xp.float32)
        cost = measure.conv2d_cost(batch, L.C, L.H, L.W, L.M, L.K, stride=L.stride, pad=L.pad, groups=L.groups)
        runs = []
        for prec in precisions:
            conv = ImplicitConv2d(w, b, L, precision=prec)
            runs.append((f"labkit {prec}", prec, conv.tiles.short(), lambda conv=conv: conv(x, out=y)))
        if no_peer is None:
            runs += [(f"cuDNN {prec}", prec, "", peers.cudnn_conv2d(x, w, b, stride=L.stride, pad=L.pad,
                                                                    groups=L.groups, tf32=prec == "tf32", out=y))
                     for prec in precisions]
        for label, prec, tiles, run in runs:
            y.fill(float("nan"))
            run()
            err = rel_error(y[:2], ref)
            if not err < TOLERANCE[prec]:
                raise AssertionError(f"{name} {label} disagrees with the float64 reference: {err:.2e}")
            t = measure.time_fn(run, warmup=3, repeat=repeat, sync=False)
            peak = tf32_peak_TFLOPs if prec == "tf32" else ceil.fp32_TFLOPs
            floor = (max(cost.flops / (peak * 1e12), cost.bytes / (ceil.copy_GBps * 1e9)) * 1e3) if peak else None
            rows.append({"layer": name, "shape": L.key, "label": label, "precision": prec, "tiles": tiles,
                         "batch": batch, "median_ms": t.median_ms, "min_ms": t.min_ms,
                         "TFLOPs": cost.flops / (t.median_ms * 1e-3) / 1e12, "rel_err": err, "floor_ms": floor,
                         "pct_of_floor": None if floor is None else 100 * floor / t.median_ms,
                         "device": t.device, "backend": t.backend})
        del x, w, b, y
    return rows


def summarize(rows: list[dict]) -> tuple[dict[str, float], dict[str, float]]:
    """(sum of the layers' ms per label, labkit / cuDNN ratio of those sums per precision)."""
    sums: dict[str, float] = {}
    for r in rows:
        sums[r["label"]] = sums.get(r["label"], 0.0) + r["median_ms"]
    ratios = {p: sums[f"labkit {p}"] / sums[f"cuDNN {p}"] for p in PRECISIONS
              if f"labkit {p}" in sums and f"cuDNN {p}" in sums}
    return sums, ratios


def table(rows: list[dict]) -> str:
    """A text table: one line per layer with each label's ms (TFLOP/s, % of floor), then the sums."""
    labels = list(dict.fromkeys(r["label"] for r in rows))
    layers = list(dict.fromkeys(r["layer"] for r in rows))
    out = [f"{'layer':7s}" + "".join(f"{lab:>26s}" for lab in labels)]
    for name in layers:
        cells = {r["label"]: r for r in rows if r["layer"] == name}
        out.append(f"{name:7s}" + "".join(
            f"{cells[lab]['median_ms']:8.3f} ms {cells[lab]['TFLOPs']:5.1f} TF "
            + (f"{cells[lab]['pct_of_floor']:3.0f}%" if cells[lab]["pct_of_floor"] else "  - ") for lab in labels))
    sums, ratios = summarize(rows)
    out.append(f"{'sum':7s}" + "".join(f"{sums[lab]:8.3f} ms {'':13s}" for lab in labels))
    out += [f"labkit {p} / cuDNN {p}, five layers summed: {r:.2f}x" for p, r in ratios.items()]
    return "\n".join(out)
