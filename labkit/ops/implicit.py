"""Convolution as an implicit GEMM: labkit/kernels/conv_implicit.cu (FP32) and
conv_implicit_tf32.cu (TF32 tensor cores, GPU only), for any kernel size, stride, padding and
dilation (each per axis) and groups; a batch past the kernels' 32-bit offsets runs as sub-batches.

    layer = ConvLayer(C=96, H=27, W=27, M=256, K=5, pad=2, groups=2)
    conv = ImplicitConv2d(w, b, layer, activation="relu", precision="tf32")   # prepares the weights once
    y = conv(x)                                              # x (N, 96, 27, 27) -> y (N, 256, 27, 27)
    y = conv2d_implicit(x, w, b, pad=2, groups=2)            # the same in one call (prepares each time)

The weights are re-laid out once per layer, (M, C/G, KH, KW) -> (G, C/G*KH*KW, M/G): each group's weight
matrix transposed, so the kernels read a tile of it as rows of neighbouring floats (TF32: packed in
the tensor cores' fragment order).  A layer object does that when it is made, as an inference engine
prepares a model when it loads it; per batch size it resolves once its tiles, split-K slices,
functions, grids and split-K workspace, and a call checks x and launches.

The tile sizes are compile-time parameters, chosen per layer shape and GPU from the tuned table
``labkit/tuned/conv_implicit.json`` (written by ``benchmarks/tune_implicit.py``), else a default
that is sensible everywhere; on a GPU the autotuner (labkit.autotune) picks tiles and split-K slices
per batch size among ``ImplicitConv2d.tuning_candidates``, that choice first.  Small batches whose grid would leave SMs idle take small tiles and
split K among blocks (``splits_at``), in both precisions.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
import numpy as np

from ..errors import check_int
from .. import autotune, backends
from ..backends.limits import SHARED_MEM_OPTIN_MAX, SHARED_MEM_PER_BLOCK
from ..checks import (BASIC_ACTIVATIONS, array_module, array_type, check_activation, check_array, check_bias,
                      check_no_alias, check_residual, fast_input, output)
from ..device_query import device, gpu_sm_count
from ..loader import load, set_constant
from ..shapes import ALEXNET_CONVS, ConvLayer
from ..tuned import CONV_IMPLICIT, lookup
from ..reference.samples import conv_samples, sample_positions
from .plans import PlanCache, cdiv, ints, sampled_mismatch
from .pool_pad import channels_last_copy

__all__ = ["ConvLayer", "Tiles", "ImplicitConv2d", "conv2d_implicit", "tiles_for", "default_tiles",
           "candidates", "ALEXNET_CONVS", "PRECISIONS", "TOLERANCE", "TABLE", "SMALL_TILES", "k_taps",
           "pack_weights_tf32", "round_to_tf32", "prepare_weights", "shared_optin_limit", "TILE_FIELDS", "LAYOUTS",
           "nhwc_fits", "nhwc_preferred", "channels4", "taps_fit", "MAX_TAPS",
           "ACTIVATIONS"]

PRECISIONS = ("fp32", "tf32")
TOLERANCE = {"fp32": 1e-5, "tf32": 5e-3}   # relative error against the float64 reference
TABLE = CONV_IMPLICIT
INDEX_LIMIT = 2**31   # the kernels' offsets are int32: x and y of one launch hold fewer elements
ACTIVATIONS = BASIC_ACTIVATIONS + ("relu6",)   # the epilogue's (conv_implicit.cu's finish)


def shared_optin_limit() -> int:
    """The dynamic shared memory a block may opt into on the GPU in use (99 KiB on sm_86/89, 163 KiB
    on sm_80, 227 KiB on sm_90), or SHARED_MEM_OPTIN_MAX where there is no GPU."""
    dev = device()
    return dev.shared_mem_per_block_optin if dev.is_gpu and dev.shared_mem_per_block_optin else \
        SHARED_MEM_OPTIN_MAX


@dataclass(frozen=True)
class Tiles:
    """The kernels' compile-time tile sizes.  Both: a block computes a bm x bn tile of a group's
    output (channels x pixels), bk deep at a time.  fp32: each thread tm x tn outputs.  tf32: a
    block of wm x wn warps, each owning a (bm/wm) x (bn/wn) piece as 16 x 8 mma tiles, with
    ``stages`` tiles in flight (cp.async) and registers budgeted for ``minb`` blocks per SM, gathering
    from x itself (``layout="nchw"``) or from a channels-last copy of it made first (``"nhwc"``: a
    16-byte copy moves 4 channels of a pixel; the copy costs a pass over x)."""
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
    layout: str = "nchw"

    @property
    def threads(self) -> int:
        if self.precision == "tf32":
            return 32 * self.wm * self.wn
        return (self.bm // self.tm) * (self.bn // self.tn)

    @property
    def kernel(self) -> str:
        return "conv_implicit" if self.precision == "fp32" else "conv_implicit_tf32"

    def short(self) -> str:
        inner = (f"T{self.tm}x{self.tn}" + (f" B{self.minb}" if self.minb != 1 else "") if self.precision == "fp32"
                 else f"W{self.wm}x{self.wn} S{self.stages} B{self.minb}" + (" NHWC" if self.nhwc else ""))
        return f"{self.bm}x{self.bn}x{self.bk} {inner}"

    @property
    def nhwc(self) -> bool:
        return self.layout == "nhwc"

    def defines(self) -> dict:
        if self.precision == "fp32":
            return {"IG_BM": self.bm, "IG_BN": self.bn, "IG_BK": self.bk, "IG_TM": self.tm, "IG_TN": self.tn,
                    **({"IG_MINB": self.minb} if self.minb != 1 else {})}
        return {"TC_BM": self.bm, "TC_BN": self.bn, "TC_BK": self.bk, "TC_WM": self.wm, "TC_WN": self.wn,
                "TC_STAGES": self.stages, "TC_MINB": self.minb, **({"TC_NHWC": 1} if self.nhwc else {})}

    def shared_bytes(self) -> int:
        """fp32: the static tiles; tf32: the dynamic shared memory given at launch."""
        if self.precision == "fp32":
            return 2 * (self.bm + self.bn) * self.bk * 4
        if self.nhwc:   # the B tile column by column, each padded by 4 floats
            return self.stages * (self.bk * self.bm + self.bn * (self.bk + 4)) * 4
        return self.stages * self.bk * (self.bm + self.bn + 8) * 4

    def check(self) -> None:
        """Raise ValueError, naming the fix, where the kernels' static_asserts would fail."""
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        vals = asdict(self)
        for k in TILE_FIELDS:
            check_int(vals[k], k)
        if self.layout not in LAYOUTS or (self.nhwc and self.precision != "tf32"):
            raise ValueError(f"layout must be one of {LAYOUTS} ('nhwc' with precision 'tf32'), got {self.layout!r}")
        if self.precision == "fp32":
            if self.bm % self.tm or self.bn % self.tn or self.tm % 4 or self.tn % 4 or self.bk % 4:
                raise ValueError(f"tm, tn, bk must be multiples of 4, tm dividing bm and tn dividing bn: {self}")
        else:
            if self.bm % (16 * self.wm) or self.bn % (8 * self.wn) or self.bk % 8 or self.bm % 4:
                raise ValueError(f"bm must be a multiple of 16*wm, bn of 8*wn, bk of 8: {self}")
            if self.stages < 2:
                raise ValueError(f"stages must be at least 2 (one tile computed, one arriving): {self}")
        t, quads = self.threads, self.bk // 4
        if self.nhwc and (t > 1024 or t % quads or self.bn * quads % t):
            raise ValueError(f"{t} threads per block: at most 1024, splitting the input tile's {self.bn} x "
                             f"{quads} copies of 4 channels evenly: {self}")
        if not self.nhwc and (t > 1024 or t % self.bn):
            raise ValueError(f"{t} threads per block: at most 1024, and a multiple of bn={self.bn} "
                             f"(each thread gathers one column of the input tile): {self}")
        limit = SHARED_MEM_PER_BLOCK if self.precision == "fp32" else SHARED_MEM_OPTIN_MAX
        if self.shared_bytes() > limit:
            raise ValueError(f"the shared stages take {self.shared_bytes()} bytes, over {limit // 1024} KiB: {self}")


TILE_FIELDS = ("bm", "bn", "bk", "tm", "tn", "wm", "wn", "stages", "minb")   # the integers; and layout
LAYOUTS = ("nchw", "nhwc")

# Small tiles for small batches: a layer whose tuned tiles make fewer blocks than the GPU has SMs
# (AlexNet's conv3 at batch 1: 169 pixels, 6 blocks of 128 x 128) runs these instead, which make
# up to 8 times as many (ImplicitConv2d.tiles_at).
SMALL_TILES = {"fp32": Tiles("fp32", bm=32, bn=64, bk=8, tm=4, tn=4),
               "tf32": Tiles("tf32", bm=64, bn=64, bk=16, wm=2, wn=2, stages=3, minb=1)}


def default_tiles(layer: ConvLayer, precision: str = "fp32") -> Tiles:
    """Sensible on any GPU: 128 pixels a block; 64 or 128 channels, whichever wastes less.  TF32: two
    blocks an SM where the GPU's shared memory holds two (the mma.sync kernel waits on latency with
    one block's 8 warps), k-tiles of 32 where it holds two of those (half the barriers a product):
    on an H200 128 x 128 x 32, two blocks, ran AlexNet's conv2 at batch 1,024 in 4.55 ms against
    6.96 for 128 x 128 x 16, one block; and gathering from a channels-last copy where the layer
    pays (``nhwc_preferred``): 3.57 ms with the copy, conv3-5 1.27-1.58x faster than from NCHW."""
    mg = layer.M // layer.groups
    bm = 64 if mg <= 64 or (mg % 128 and mg % 64 == 0) else 128
    if precision == "tf32":
        per_sm = shared_optin_limit() + 1024           # the block's reserved KiB back: the SM's shared memory
        layout = "nhwc" if nhwc_preferred(layer) else "nchw"
        for bk, minb in ((32, 2), (16, 2), (16, 1)):
            t = Tiles("tf32", bm=bm, bn=128, bk=bk, wm=2, wn=4, stages=3, minb=minb, layout=layout)
            if minb * (t.shared_bytes() + 1024) <= per_sm:
                return t
        return t
    return Tiles("fp32", bm=bm, bn=128, bk=8, tm=8, tn=8)


def tiles_for(layer: ConvLayer, precision: str = "fp32", device_name: str | None = None) -> Tiles:
    """The tuned table's tiles for this layer, precision and GPU, else ``default_tiles``."""
    entry = (lookup(TABLE, layer.key, device_name) or {}).get(precision)
    if entry:
        return Tiles(precision, **{k: entry[k] for k in TILE_FIELDS + ("layout",) if k in entry})
    return default_tiles(layer, precision)


def candidates(layer: ConvLayer, precision: str = "fp32") -> list[Tiles]:
    """The tile sizes a sweep tries for a layer: every valid one of a small grid."""
    out = []
    mg = layer.M // layer.groups
    if precision == "fp32":
        if mg <= 32:   # few output channels per group (grouped, depthwise with a multiplier): short tiles
            out += [Tiles("fp32", bm=16, bn=64, bk=8, tm=4, tn=4), Tiles("fp32", bm=16, bn=64, bk=16, tm=4, tn=4),
                    Tiles("fp32", bm=32, bn=128, bk=8, tm=4, tn=8), Tiles("fp32", bm=32, bn=64, bk=16, tm=4, tn=4)]
        for bm in (64, 96, 128):
            for bn in (64, 128):
                for bk in (8, 16):
                    out += [Tiles("fp32", bm=bm, bn=bn, bk=bk, tm=8, tn=8),
                            Tiles("fp32", bm=bm, bn=bn, bk=bk, tm=8, tn=4)]
        # 8 x 8 a thread, registers held to two blocks an SM (IG_MINB): twice the warps to hide latency
        out += [Tiles("fp32", bm=128, bn=128, bk=bk, tm=8, tn=8, minb=2) for bk in (8, 16)]
    else:
        layouts = LAYOUTS if nhwc_fits(layer) else ("nchw",)
        for bm in (64, 96, 128):
            for bn in (128, 256):
                for bk, stages in ((16, 3), (16, 4), (32, 3), (32, 4)):
                    out += [Tiles("tf32", bm=bm, bn=bn, bk=bk, wm=wm, wn=wn, stages=stages, minb=minb, layout=lay)
                            for wm, wn in ((2, 4), (4, 2)) for minb in (1, 2) for lay in layouts]
    good = []
    for t in out:
        try:
            t.check()
        except ValueError:
            continue
        if not (64 if t.bm <= 32 else 128) <= t.threads <= 512:
            continue
        if t.precision == "tf32" and (t.shared_bytes() > shared_optin_limit() or not taps_fit(layer, t)):
            continue
        if (t.bm > 2 * mg and t.bm > 16) or (t.bm == 96 and (mg % 96 or mg % 64 == 0)):
            continue   # half the block idle (the shortest tiles aside), or 96 rows where 64 or 128 fit as well
        good.append(t)
    if precision == "tf32":
        prefer = nhwc_preferred(layer)
        good.sort(key=lambda t: _tf32_prior(t, mg, prefer))
    return good


def _tf32_prior(t: Tiles, mg: int, prefer_nhwc: bool) -> tuple:
    """The order a TF32 search tries tiles in, most promising first, so that a search cut short by its
    budget has timed those: the channels-last gather where ``nhwc_preferred`` (on an H200 1.07-1.71x
    faster on AlexNet's convs at batch 64 and 1,024, the copy included: benchmarks/results/
    tf32_layout_h200.json), two blocks an SM (the mma.sync kernel waits on latency
    with one block's 8 warps: on an H200 the tensor pipe was 31% busy), k-tiles of 32 (half the
    barriers and waits per mma), then 16 four deep; block rows that fit the group's output
    channels, 128 pixels a block."""
    depth = {(32, 3): 0, (16, 4): 1, (32, 4): 2, (16, 3): 3}.get((t.bk, t.stages), 4)
    rows = min(mg, 128)
    return (t.nhwc != prefer_nhwc, t.minb != 2, depth, abs(t.bm - rows), t.bn != 128, t.wm, t.bm, t.bn)


def nhwc_fits(layer: ConvLayer) -> bool:
    """Can the TF32 kernel gather this layer from a channels-last copy?  One group, or groups of a
    multiple of 4 channels (each group's channels must start on a 16-byte boundary)."""
    return layer.groups == 1 or (layer.C // layer.groups) % 4 == 0


# conv_implicit_tf32.cu's k_taps table in constant memory: at most this many int2 entries (60 KiB).
MAX_TAPS = 60 * 1024 // 8


def taps_fit(layer: ConvLayer, tiles: Tiles) -> bool:
    """Does the TF32 kernel's table of rows (one entry per row of X_g, NHWC: per 4 rows) fit constant
    memory?  NCHW: C/groups * KH * KW up to 7,680 rows; NHWC four times as many."""
    if tiles.precision != "tf32":
        return True
    return len(k_taps(layer, tiles.bk, tiles.nhwc)) <= MAX_TAPS


def nhwc_preferred(layer: ConvLayer) -> bool:
    """Where the TF32 kernel starts (untuned) and its search begins: the channels-last gather for a
    window of more than one tap, whose gather it makes 4x cheaper, and for one-pixel planes (a dense
    layer), which need no copy.  A 1x1 convolution of a larger plane gathers coalesced rows from NCHW
    already, and its copy would be a whole extra pass over x in a layer bound by memory."""
    return nhwc_fits(layer) and (layer.taps > 1 or layer.H * layer.W == 1)


def channels4(c: int) -> int:
    """Channels of the channels-last copy: c rounded up to whole 16-byte groups of 4."""
    return cdiv(c, 4) * 4


def k_taps(layer: ConvLayer, bk: int, nhwc: bool = False) -> np.ndarray:
    """conv_implicit_tf32.cu's table k_taps: for each row k = (c*KH + kh)*KW + kw of a group's column
    matrix, (offset of the tap in the input from the window's corner, (kh*DH) << 16 | kw*DW: the
    tap's dilated position in the window); rows past the last, up to a whole number of bk-tiles, get
    0x4000 << 16 (outside every image: zeros).  ``nhwc``: the rows are ordered (kh, kw, c) over the
    group's channels rounded up to 4, and one entry stands for 4 rows k = 4q .. 4q+3 (the same tap,
    channels c .. c+3 from c = 4q mod that count), its offset ((kh*DH)*W + kw*DW)*C4 + c in the
    channels-last copy (N, H, W, C4)."""
    (KH, KW), (DH, DW) = layer.kernel_hw, layer.dilation_hw
    if nhwc:
        cg4 = channels4(layer.C // layer.groups)
        rows = KH * KW * cg4
        q = np.arange(cdiv(rows, bk) * bk // 4)
        tap, c = q // (cg4 // 4), q % (cg4 // 4) * 4
        kh, kw = tap // KW * DH, tap % KW * DW
        taps = np.stack([(kh * layer.W + kw) * channels4(layer.C) + c, (kh << 16) | kw], axis=1).astype(np.int32)
        taps[rows // 4:] = (0, 0x4000 << 16)
        return taps
    kg = layer.C // layer.groups * KH * KW
    k = np.arange(cdiv(kg, bk) * bk)
    c, kh, kw = k // (KH * KW), (k // KW) % KH * DH, k % KW * DW
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
    neighbouring bytes.  NHWC tiles: W_g's columns in the channels-last gather's order (kh, kw, c),
    the group's channels rounded up to 4 with zero columns."""
    xp = backends.xp()
    G, bm, bk = layer.groups, tiles.bm, tiles.bk
    mg = layer.M // G
    host = w.get() if hasattr(w, "get") else np.asarray(w)
    host = host.reshape(G, mg, -1)
    if tiles.nhwc:
        cg = layer.C // G
        (KH, KW), cg4 = layer.kernel_hw, channels4(cg)
        last = np.zeros((G, mg, KH, KW, cg4), dtype=np.float32)
        last[..., :cg] = host.reshape(G, mg, cg, KH, KW).transpose(0, 1, 3, 4, 2)
        host = last.reshape(G, mg, -1)
    kg = host.shape[2]
    mb, kt = cdiv(mg, bm), cdiv(kg, bk)
    wp = np.zeros((G, mb * bm, kt * bk), dtype=np.float32)
    wp[:, :mg, :kg] = host
    # axes: G, MB, mi, mh, gid | KT, kb, kh, tig  ->  G, MB, KT, kb, mi, gid, tig, kh, mh
    packed = wp.reshape(G, mb, bm // 16, 2, 8, kt, bk // 8, 2, 4).transpose(0, 1, 5, 6, 2, 4, 8, 7, 3)
    return xp.asarray(round_to_tf32(packed.reshape(G, mb, kt, bk * bm)))


def prepare_weights(w, groups: int):
    """(M, C/G, KH, KW) -> (G, C/G*KH*KW, M/G), contiguous, on w's backend: each group's matrix transposed."""
    xp = backends.xp()
    M = int(w.shape[0])
    return xp.ascontiguousarray(w.reshape(groups, M // groups, -1).transpose(0, 2, 1))


# --- plans ------------------------------------------------------------------------------------------
@dataclass
class _Plan:
    """One layer at one batch size, weights aside: the kernels, their launch configurations and their
    int32 arguments."""
    tiles: Tiles
    splits: int
    main: tuple                 # (function, grid, block, shared bytes): the GEMM over all of K, or split-K's slices
    tail: tuple
    out_shape: tuple
    workspace_shape: tuple | None = None   # split-K's partial sums, or NHWC's channels-last copy of x
    reduce: tuple | None = None     # (function, grid, block) of conv_implicit_reduce
    reduce_tail: tuple = ()
    has_res: int = 0
    channels_last: object = None    # NHWC tiles: launch(x, workspace) of pool_pad.cu's copy

    @property
    def workspace_what(self) -> str:
        return "(N, H, W, C rounded up to 4): x channels last" if self.channels_last else \
            "(slices, N, M, Ho, Wo): split-K's partial sums"

    def bind(self, wt, bias):
        """``run(x, y, workspace, *res)`` with the prepared weights and the bias fixed: one launch; with
        split-K the slices into the workspace, then the reduce into y; with NHWC tiles the
        channels-last copy of x into the workspace, then the GEMM from it.  With a residual the
        epilogue's launch takes it last; without, the weights stand in for it (has_res = 0: never
        read).  Without a workspace (one launch) run ignores that argument."""
        fn, grid, block, shared = self.main
        res = (None if self.has_res else wt,) + ints(self.has_res)
        if self.reduce is None:
            main = fn.launcher(grid, block, (None, wt, bias, None) + self.tail + res, shared)
            if self.channels_last is None:
                return lambda x, y, ws, *r: main(x, y, *r)
            copy = self.channels_last

            def run(x, y, ws, *r):
                copy(x, ws)
                main(ws, y, *r)
            return run
        rfn, rgrid, rblock = self.reduce
        slices = fn.launcher(grid, block, (None, wt, None) + self.tail, shared)
        reduce = rfn.launcher(rgrid, rblock, (None, bias, None) + self.reduce_tail + res)

        def run_split(x, y, ws, *r):
            slices(x, ws)
            reduce(ws, y, *r)
        return run_split


# Weight-independent plans, shared by every layer object of the same shape and options.
_PLANS = PlanCache()


def _module(layer: ConvLayer, tiles: Tiles, round_tf32: bool):
    """The kernel module of this layer and tiles (k_taps uploaded for TF32; shared memory opted in)."""
    defines = {**layer.defines(), **tiles.defines()}
    if tiles.precision == "tf32":
        defines["TC_ROUND"] = int(round_tf32)
    mod = load("conv_implicit" if tiles.precision == "fp32" else "conv_implicit_tf32", defines=defines)
    if tiles.precision == "tf32":
        set_constant(mod, "k_taps", k_taps(layer, tiles.bk, tiles.nhwc))   # the same for every layer of this shape
        shared = tiles.shared_bytes()
        if shared > shared_optin_limit():
            raise ValueError(f"{tiles.short()} needs {shared} bytes of shared memory; this GPU lets a "
                             f"block have {shared_optin_limit()}: use fewer stages or a smaller bk")
        if shared > SHARED_MEM_PER_BLOCK:   # a block may use more than 48 KiB only once the kernel opts in
            for name in ("conv_implicit_tf32", "conv_implicit_tf32_splitk"):
                mod.get_function(name).max_dynamic_shared_size_bytes = shared
    return mod


def _make_plan(layer: ConvLayer, tiles: Tiles, splits: int, N: int, has_bias: int, act: int,
               round_tf32: bool, has_res: int = 0) -> _Plan:
    mod = _module(layer, tiles, round_tf32)
    shared = 0 if tiles.precision == "fp32" else tiles.shared_bytes()   # fp32's tiles are static
    mg, p, _ = layer.gemm_shape(N)
    grid = (cdiv(p, tiles.bn), cdiv(mg, tiles.bm), layer.groups * splits)
    if grid[0] > 2**31 - 1:
        raise ValueError(f"batch {N} needs {grid[0]} column blocks: split the batch")
    block = (tiles.threads, 1, 1)
    out_shape = (N, layer.M) + layer.out_hw
    if tiles.nhwc and splits != 1:
        raise ValueError(f"NHWC tiles run without split-K (one slice), got {splits}")
    # NHWC: x copied channels last first, unless it is already (one pixel, channels a multiple of 4)
    if tiles.nhwc and not (layer.H * layer.W == 1 and channels4(layer.C) == layer.C):
        return _Plan(tiles, 1, (mod.get_function(tiles.kernel), grid, block, shared), ints(N, has_bias, act),
                     out_shape, (N, layer.H, layer.W, channels4(layer.C)), has_res=has_res,
                     channels_last=channels_last_copy(N, layer.C, layer.H * layer.W))
    if splits == 1:
        return _Plan(tiles, 1, (mod.get_function(tiles.kernel), grid, block, shared), ints(N, has_bias, act),
                     out_shape, has_res=has_res)
    # The slices' raw sums, then conv_implicit.cu's reduce (bias, activation): for TF32 too, from the
    # FP32 module of the same layer (the reduce reads only its shape).
    reducer = mod if tiles.precision == "fp32" else load("conv_implicit", defines=layer.defines())
    total = N * layer.M * layer.out_hw[0] * layer.out_hw[1]
    return _Plan(tiles, splits, (mod.get_function(f"{tiles.kernel}_splitk"), grid, block, shared),
                 ints(N, splits), out_shape, (splits,) + out_shape,
                 (reducer.get_function("conv_implicit_reduce"), (cdiv(total, 256),), (256,)),
                 ints(N, has_bias, act, splits), has_res)


class ImplicitConv2d:
    """One convolution layer on the implicit-GEMM kernels, its weights prepared once.

    Args:
        w: float32 (M, C/groups, KH, KW) on the backend;  b: float32 (M,) or None.
        layer: its ``ConvLayer`` (input plane, kernel, stride, padding, dilation, groups); checked against w.
        activation: None, "tanh", "relu" or "relu6", fused into the kernel's epilogue.
        residual: True for a layer that adds a residual (a skip connection) before the activation,
            y = act(conv(x) + b + res): each call then passes ``residual=`` an array of y's shape.
        precision: "fp32" (CUDA cores, any backend) or "tf32" (tensor cores, GPU only).
        tiles: a ``Tiles`` to use instead of the tuned table's choice (a sweep passes each one).
        round_tf32: tf32 only: round the inputs to the nearest TF32 value (cvt.rna) rather than let
            the tensor cores drop their low bits (toward zero): less error, a little slower.  (The
            weights are always rounded to nearest, once, when they are packed.)
        weights_layout: "MCKK" (w as above, copied once into the kernel's layout) or "CKKM" (fp32,
            groups 1: w is already (C*KH*KW, M), the kernel's layout, and is read in place on every
            launch: a training loop updates it and the next forward sees the new weights).

    Per batch size (and split-K request), ``plan`` resolves once the tiles, slices, functions, grid
    and a split-K workspace of the layer's own; a call checks x and launches.
    """

    def __init__(self, w, b, layer: ConvLayer, *, activation: str | None = None, precision: str = "fp32",
                 tiles: Tiles | None = None, round_tf32: bool = False, residual: bool = False,
                 weights_layout: str = "MCKK"):
        backend = backends.current()
        xp = array_module(backend)
        layer = ConvLayer(*layer)
        layer.check()
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be 'fp32' or 'tf32', got {precision!r}")
        if precision == "tf32" and backend != "cuda":
            raise RuntimeError("precision='tf32' runs on the tensor cores (conv_implicit_tf32.cu declares "
                               "that it needs a GPU); the CPU executor runs precision='fp32'")
        act = check_activation(activation, ACTIVATIONS)
        if not isinstance(residual, (bool, np.bool_)):
            raise TypeError(f"residual must be True or False, got {residual!r}")
        if weights_layout == "CKKM":
            if precision != "fp32" or layer.groups != 1:
                raise ValueError("weights_layout='CKKM' takes precision='fp32' and groups = 1")
            check_array(w, "w", "(C*KH*KW, M)", 2, backend, xp)
            want = (layer.C * layer.taps, layer.M)
        elif weights_layout == "MCKK":
            check_array(w, "w", "(M, C/groups, KH, KW)", 4, backend, xp)
            want = (layer.M, layer.C // layer.groups) + layer.kernel_hw
        else:
            raise ValueError(f"weights_layout must be 'MCKK' or 'CKKM', got {weights_layout!r}")
        if tuple(w.shape) != want:
            raise ValueError(f"w must have shape {want} ({weights_layout}) for {layer}, got {tuple(w.shape)}")
        check_bias(b, layer.M, backend, xp)
        self._fixed = tiles is not None
        if tiles is None:
            tiles = tiles_for(layer, precision)
        elif not isinstance(tiles, Tiles):
            raise TypeError(f"tiles must be a labkit.ops.implicit.Tiles, got {type(tiles).__name__}")
        tiles = replace(tiles, precision=precision)
        tiles.check()
        if tiles.nhwc and not nhwc_fits(layer):
            raise ValueError(f"NHWC tiles gather 4 channels of a group at once: C/groups = {layer.C // layer.groups} "
                             f"is not a multiple of 4 ({tiles.short()}, {layer.key}); use layout='nchw'")
        if not taps_fit(layer, tiles):
            raise ValueError(f"{layer.key} has {layer.C // layer.groups * layer.taps} rows per group: the TF32 kernel's "
                             f"table of them ({len(k_taps(layer, tiles.bk, tiles.nhwc))} entries) exceeds constant "
                             f"memory ({MAX_TAPS}); " + ("use layout='nhwc' (an entry per 4 rows)"
                                                        if nhwc_fits(layer) and not tiles.nhwc else "use precision='fp32'"))
        self.layer, self.tiles, self.activation, self.precision = layer, tiles, activation, precision
        self.backend, self._kind, self._act = backend, xp.ndarray, act
        self.residual = bool(residual)
        self._w, self._round, self.weights_layout = w, bool(round_tf32), weights_layout
        self.b = b
        self._weights: dict[Tiles, object] = {}
        self._plans: dict[tuple, tuple] = {}
        self._x_shape = (layer.C, layer.H, layer.W)
        ho, wo = layer.out_hw
        # (TF32: x's channels-last copy, its channels rounded up to 4, is indexed the same way)
        per_image = max((channels4(layer.C) if precision == "tf32" else layer.C) * layer.H * layer.W, layer.M * ho * wo)
        if per_image >= INDEX_LIMIT:
            raise ValueError(f"one image of x or y of {layer.key} has {per_image} elements, over the kernels' "
                             f"32-bit offsets ({INDEX_LIMIT}): split the image")
        # The kernels index with 32-bit offsets: a batch whose x or y would reach 2^31 elements runs in
        # sub-batches of at most this many images, one after the other on the stream.
        self.max_batch = (INDEX_LIMIT - 1) // per_image
        self.wt = self.weights(tiles)

    def weights(self, tiles: Tiles):
        """The weights as the kernel of these tiles reads them (made once per tiles)."""
        wt = self._weights.get(tiles)
        if wt is None and self.weights_layout == "CKKM":   # the caller's array itself, a view of it
            wt = self._weights[tiles] = self._w.reshape((1,) + tuple(self._w.shape))
        elif wt is None:
            # fp32: each group's matrix transposed; tf32: packed in mma fragment order (see the kernels)
            wt = self._weights[tiles] = prepare_weights(self._w, self.layer.groups) if self.precision == "fp32" \
                else pack_weights_tf32(self._w, self.layer, tiles)
        return wt

    def tiles_at(self, N: int) -> Tiles:
        """The tiles a batch of N runs with: the table's, or (unless tiles were given) SMALL_TILES
        when the table's would leave SMs idle (fewer blocks than SMs) and the small ones do not."""
        if self._fixed or self.backend != "cuda":
            return self.tiles
        sms = gpu_sm_count()
        small = SMALL_TILES[self.precision]
        if not taps_fit(self.layer, small):       # rows past the NCHW table: the channels-last gather
            small = replace(small, layout="nhwc")
            if not (nhwc_fits(self.layer) and taps_fit(self.layer, small)):
                return self.tiles
        if self.blocks(self.tiles, N) < sms and self.blocks(small, N) > self.blocks(self.tiles, N):
            return small
        return self.tiles

    def splits_at(self, N: int, splits: int | None = None, tiles: Tiles | None = None) -> int:
        """Split-K's slices of K at a batch of N (on a GPU): when the tiles of ``tiles_at(N)`` make
        fewer than two blocks per SM (conv3-5 of AlexNet at batch 1: 24-36 blocks, each walking
        1,728-3,456 products), enough slices for four blocks per SM, each slice at least 8 k-tiles
        deep (FP32), or 64 values deep (TF32, whose k-tiles are 16-32 deep); else 1.  ``splits`` asks for a number
        instead (tests; the CPU executor); either way, the slices really made: none is empty.
        ``tiles``: ``tiles_at(N)``, if known."""
        tiles = tiles or self.tiles_at(N)
        k_tiles = cdiv(self.layer.gemm_shape(N)[2], tiles.bk)
        if splits is None:
            if self.backend != "cuda" or tiles.nhwc:   # NHWC tiles: the copy's workspace, no slices
                return 1
            sms, blocks = gpu_sm_count(), self.blocks(tiles, N)
            depth = 8 if self.precision == "fp32" else max(1, 64 // tiles.bk)
            splits = max(1, min(cdiv(4 * sms, blocks), k_tiles // depth)) if blocks < 2 * sms else 1
        else:
            check_int(splits, "splits")
        per = cdiv(k_tiles, min(int(splits), k_tiles))
        return cdiv(k_tiles, per)

    def workspace_shape(self, N: int, splits: int | None = None) -> tuple[int, ...] | None:
        """Split-K's partial sums at a batch of N: (slices, N, M, Ho, Wo), or None without split-K
        (the plan's: on a GPU the autotuner may choose the slices, so the plan is made here)."""
        return self.plan(N, splits).workspace_shape

    def blocks(self, tiles: Tiles, N: int) -> int:
        mg, p, _ = self.layer.gemm_shape(N)
        return cdiv(p, tiles.bn) * cdiv(mg, tiles.bm) * self.layer.groups

    def launch_config(self, N: int, tiles: Tiles | None = None,
                      splits: int = 1) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """(grid, block): one block per bm x bn tile of each group's output (and slice of K)."""
        t = tiles or self.tiles_at(N)
        mg, p, _ = self.layer.gemm_shape(N)
        return (cdiv(p, t.bn), cdiv(mg, t.bm), self.layer.groups * splits), (t.threads, 1, 1)

    def plan(self, N: int, splits: int | None = None) -> _Plan:
        """The plan of a batch of N (and a split-K request), made once: tiles, slices, launches."""
        return self._entry(N, splits)[0]

    def _entry(self, N: int, splits: int | None) -> list:
        """[plan, prepared weights, the layer's own workspace (split-K's or NHWC's, made on first use) or
        None, run] (bias not read when has_bias == 0: the weights stand in)."""
        key = (N, splits)
        entry = self._plans.get(key)
        if entry is None:
            if N > self.max_batch:
                raise ValueError(f"batch {N} makes x or y reach 2**31 elements (32-bit offsets): a call splits it "
                                 f"into sub-batches of {self.max_batch}, plan those")
            if splits is None and not self._fixed and self.backend == "cuda":
                tiles, n = self._tuned(N)
            else:
                tiles = self.tiles_at(N)
                n = self.splits_at(N, splits, tiles)
            plan = self._plan_of(tiles, n, N)
            wt = self.weights(tiles)
            entry = self._plans[key] = [plan, wt, None, plan.bind(wt, wt if self.b is None else self.b)]
        return entry

    def _plan_of(self, tiles: Tiles, n: int, N: int) -> _Plan:
        pkey = (self.backend, self.layer, tiles, n, N, int(self.b is not None), self._act, self._round, self.residual)
        return _PLANS.get_or_make(pkey, lambda: _make_plan(self.layer, tiles, n, N, int(self.b is not None),
                                                           self._act, self._round, int(self.residual)))

    def tuning_candidates(self, N: int) -> list[tuple[Tiles, int]]:
        """(tiles, split-K slices) the autotuner tries at a batch of N, what runs untuned first: the
        table's (or default) tiles and SMALL_TILES, then the sweep's grid (``candidates``), each with
        one slice and with ``splits_at``'s."""
        first = self.tiles_at(N)
        out = [(first, self.splits_at(N, None, first))]
        for t in [self.tiles, SMALL_TILES[self.precision]] + candidates(self.layer, self.precision):
            for n in ((1,) if t.nhwc else (self.splits_at(N, None, t), 1)):
                if (t, n) not in out:
                    out.append((t, n))
        return out

    def _tuned(self, N: int) -> tuple[Tiles, int]:
        """The autotuner's (tiles, slices) for a batch of N on this GPU (labkit.autotune)."""
        L = self.layer
        cands = self.tuning_candidates(N)
        configs = [{"tiles": asdict(t), "splits": n} for t, n in cands]
        shipped = bool((lookup(TABLE, L.key) or {}).get(self.precision))
        problem = autotune.Problem(
            f"conv_implicit_{self.precision}", ("conv_implicit", "conv_implicit_tf32"),
            f"{L.key}_N{N}_bias{int(self.b is not None)}_res{int(self.residual)}_round{int(self._round)}",
            configs, lambda: _ImplicitBench(self, N), shipped,
            shape=f"{L.key}_bias{int(self.b is not None)}_res{int(self.residual)}_round{int(self._round)}")
        chosen = autotune.choose(problem)
        tiles, n = cands[configs.index(chosen)]
        # The weights packed for candidates that lost are dropped; those of plans made stay.
        keep = {e[0].tiles for e in self._plans.values()} | {self.tiles, tiles}
        self._weights = {t: w for t, w in self._weights.items() if t in keep}
        return tiles, n

    def __call__(self, x, out=None, *, workspace=None, splits: int | None = None, residual=None):
        """y = act(conv(x) + b [+ residual]).  ``splits``: split-K's slices (default ``splits_at``);
        with more than one, the partial sums go to ``workspace`` (float32 ``workspace_shape(N)``),
        else to the layer's own, made on first use (two streams running this layer at once need one
        each, and a CUDA graph one that outlives it: a model's plan passes its own).  NHWC tiles
        use the workspace the same way, for x's channels-last copy.  ``residual``:
        float32 of y's shape, required by (and only by) a layer made with ``residual=True``."""
        if not (fast_input(x, self._kind) and x.shape[1:] == self._x_shape):
            L = self.layer
            check_array(x, "x", "NCHW", 4, self.backend)
            if tuple(x.shape[1:]) != self._x_shape:
                raise ValueError(f"x must be (N, {L.C}, {L.H}, {L.W}) for this layer, got {tuple(x.shape)}")
        if x.shape[0] > self.max_batch:
            return self._split_batch(x, out, workspace, splits, residual)
        entry = self._plans.get((x.shape[0], splits)) or self._entry(int(x.shape[0]), splits)
        plan, _wt, ws, run = entry
        res = check_residual(residual, plan.out_shape, self.residual, self._kind, self.backend, "ImplicitConv2d")
        y = output(out, plan.out_shape, "NCHW", (x, self._w, self.b) + res, backend=self.backend)
        if plan.workspace_shape is None:
            run(x, y, None, *res)
            return y
        if workspace is not None:
            if tuple(workspace.shape) != plan.workspace_shape or workspace.dtype != np.float32:
                raise ValueError(f"workspace must be float32 {plan.workspace_shape} {plan.workspace_what}, "
                                 f"got {workspace.dtype} {tuple(workspace.shape)}")
            check_no_alias(workspace, (x, y) + res, "workspace")
            ws = workspace
        elif ws is None:
            xp = array_module(self.backend)
            ws = entry[2] = xp.empty(plan.workspace_shape, dtype=xp.float32)
        run(x, y, ws, *res)
        return y


    def _split_batch(self, x, out, workspace, splits, residual):
        """A batch past the 32-bit offsets, as sub-batches of ``max_batch`` images (views of x, y and the
        residual: no copy)."""
        if workspace is not None:
            raise ValueError(f"a batch of {x.shape[0]} runs in sub-batches of {self.max_batch} (32-bit offsets), "
                             "each with the layer's own workspace: pass workspace=None")
        N = int(x.shape[0])
        res = check_residual(residual, (N, self.layer.M) + self.layer.out_hw, self.residual, self._kind,
                             self.backend, "ImplicitConv2d")
        y = output(out, (N, self.layer.M) + self.layer.out_hw, "NCHW", (x, self._w, self.b) + res,
                   backend=self.backend)
        for i in range(0, N, self.max_batch):
            part = slice(i, i + self.max_batch)
            self(x[part], out=y[part], splits=splits, residual=res[0][part] if res else None)
        return y


class _ImplicitBench:
    """The autotuner's data for one layer at a batch of N (labkit.autotune.search.Bench): random x,
    a poisoned y, float64 samples of the right answer."""

    def __init__(self, conv: ImplicitConv2d, N: int):
        xp = backends.xp()
        L, self.conv, self.N = conv.layer, conv, N
        rng = xp.random.default_rng()
        self.x = rng.standard_normal((N, L.C, L.H, L.W), dtype=xp.float32)
        self.y = xp.empty((N, L.M) + L.out_hw, dtype=xp.float32)
        self.res = (rng.standard_normal(self.y.shape, dtype=xp.float32),) if conv.residual else ()
        w = conv._w if conv.weights_layout == "MCKK" else conv._w.T.reshape((L.M, L.C) + L.kernel_hw)
        self.idx = sample_positions(xp, self.y.size)
        self.ref, self.terms = conv_samples(xp, self.x, w, conv.b, L, self.idx, conv.activation,
                                            self.res[0] if self.res else None)
        self.tol = 4 * TOLERANCE[conv.precision]

    def build(self, config: dict):
        xp = backends.xp()
        tiles, n = Tiles(**config["tiles"]), int(config["splits"])
        tiles.check()
        plan = self.conv._plan_of(tiles, n, self.N)
        wt = self.conv.weights(tiles)
        run = plan.bind(wt, wt if self.conv.b is None else self.conv.b)
        x, y, res = self.x, self.y, self.res
        ws = None if plan.workspace_shape is None else xp.empty(plan.workspace_shape, dtype=xp.float32)
        return lambda: run(x, y, ws, *res)

    def check(self, launch) -> str | None:
        return sampled_mismatch(self.y, launch, self.idx, self.ref, self.terms, self.tol)


def conv2d_implicit(x, w, b=None, *, stride=1, pad=0, dilation=1, groups: int = 1,
                    activation: str | None = None, precision: str = "fp32", tiles: Tiles | None = None,
                    round_tf32: bool = False, out=None):
    """y = act(conv(x, w) + b) with stride, zero padding, dilation (each an int or an (h, w) pair) and
    groups, as one implicit-GEMM launch.

    x float32 (N, C, H, W); w float32 (M, C/groups, KH, KW); b (M,) or None.  The launch plan of each
    shape is made once (shared with the layer objects of that shape), but the weights are re-laid
    out on every call (they may have changed): keep an ``ImplicitConv2d`` to run a layer many times.
    """
    backend = backends.current()
    kind = array_type(backend)
    if not fast_input(x, kind):
        check_array(x, "x", "NCHW", 4, backend)
    if not fast_input(w, kind):
        check_array(w, "w", "(M, C/groups, KH, KW)", 4, backend)
    if x.ndim != 4 or w.ndim != 4:
        check_array(x, "x", "NCHW", 4, backend)
        check_array(w, "w", "(M, C/groups, KH, KW)", 4, backend)
    _, C, H, W = (int(v) for v in x.shape)
    M, _, KH, KW = (int(v) for v in w.shape)
    layer = ConvLayer.of(C, H, W, M, (KH, KW), stride, pad, dilation, groups)
    return ImplicitConv2d(w, b, layer, activation=activation, precision=precision, tiles=tiles,
                          round_tf32=round_tf32)(x, out=out)
