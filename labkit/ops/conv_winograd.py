"""3x3 convolutions (stride 1, padding 1) by Winograd's F(2x2, 3x3) or F(4x4, 3x3)
(labkit/kernels/conv_winograd.cu): forward and backward data, with conv_small's fused epilogue,
2.25x (F = 2) or 4x (F = 4) fewer multiply-adds than the direct kernel.

    conv = WinogradConv3x3(wt, b, layer, activation="relu")            # as SmallConv3x3
    bwd = WinogradConv3x3(wt, None, layer, transpose=True, gate=True)  # dL/dx, 0 where h <= 0

A call transforms the weights (``winograd_weights``: they may have changed since the last call, as
in training) and runs the convolution: two launches; one where the input channels are a single chunk,
as the convolution's blocks then transform their own slice of the weights.  A ``WinogradTile`` fixes the kernel's
compile-time tile, its output tiles' side ``f`` included; ``labkit/tuned/conv_small.json`` holds
the H100's winners under "winograd_forward_..." and "winograd_data_..." keys.
"""
from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass

import numpy as np

from ..checks import array_module
from ..device_query import gpu_sm_count
from ..loader import load
from ..tuned import CONV_SMALL, lookup
from .conv_small import Conv3x3Layer, table_key
from .implicit import shared_optin_limit
from .plans import allow_shared, cdiv, divisors_among, ints, largest_divisor, pitch4, tile_fits

__all__ = ["WinogradTile", "WinogradConv3x3", "default_winograd_tile", "winograd_tile_for", "winograd_pays",
           "winograd_candidates", "winograd_auto_tiles",
           "THREADS_WEIGHTS"]

THREADS_WEIGHTS = 256
MAX_THREADS = 1024


def _odd(n: int) -> int:
    return n | 1


@dataclass(frozen=True)
class WinogradTile:
    """winograd_conv's tile: ``mb`` output channels a block, ``tr`` rows of f x f output tiles a
    block, each thread an ``rm`` x ``rt`` block (output channels x tiles) of one transform position's
    sums, ``ck`` input channels a chunk; ``f`` (2 or 4) picks F(2x2, 3x3) or F(4x4, 3x3).  Where C is
    a single chunk, a block's unit of work is a run of as many consecutive tiles of the batch as its
    thread groups hold (``run_tiles``), not a band of rows."""
    mb: int = 16
    rm: int = 4
    tr: int = 2
    rt: int = 7
    ck: int = 8
    f: int = 2

    @property
    def positions(self) -> int:
        """The transforms' (f + 2)^2 positions: one GEMM each."""
        return (self.f + 2) ** 2

    def groups(self, W: int) -> tuple[int, int]:
        """(output-channel groups, tile groups) of a block."""
        tiles = self.tr * cdiv(W, self.f)
        return self.mb // self.rm, cdiv(tiles, self.rt)

    def run_tiles(self, W: int) -> int:
        """The tiles of a unit of work where C is a single chunk: every thread group's ``rt``."""
        return self.groups(W)[1] * self.rt

    def threads(self, W: int) -> int:
        mg, tg = self.groups(W)
        return self.positions * mg * tg

    def shared_bytes(self, C: int, W: int) -> int:
        """conv_winograd.cu's WG_SHARED_FLOATS * 4.  Several chunks: two stages each of U, the input
        rows and V, or the sums of the output transform, whichever is larger.  One chunk: U, then V or
        the sums.  Then U's mbarriers."""
        mg, tg = self.groups(W)
        tbp, p = tg * self.rt, self.positions
        u, v, sums = p * pitch4(self.ck * self.mb), p * pitch4(self.ck * tbp), p * _odd(self.mb * tbp)
        if self.fused_weights(C):
            data = u + max(v, sums)
        else:
            # a staged input row: 4 zeros, the W values, zeros to column f * tiles across, to a multiple
            # of 4 (conv_winograd.cu's WG_RAWP)
            row = cdiv(4 + self.f * cdiv(W, self.f) + 1, 4) * 4
            data = max(2 * (u + self.ck * (self.f * self.tr + 2) * row + v), sums)
        # then the 16 bytes of U's two mbarriers, 8-byte aligned
        return 4 * (cdiv(data, 2) * 2 + 4)

    def fused_weights(self, C: int) -> bool:
        """Whether C is a single chunk: the convolution then transforms the weights itself and keeps
        them (a call is one launch, not two), reads its patches straight from x and walks several runs
        of tiles a block."""
        return self.ck == C

    def check(self, C: int, M: int, H: int, W: int) -> None:
        if self.f not in (2, 4):
            raise ValueError(f"{self}: f must be 2 or 4 (output tiles of 2x2 or 4x4)")
        if min(self.mb, self.rm, self.tr, self.rt, self.ck) < 1:
            raise ValueError(f"every field of {self} must be at least 1")
        if M % self.mb or self.mb % self.rm or C % self.ck:
            raise ValueError(f"{self}: mb must divide M={M}, rm mb and ck C={C}")
        if self.tr > cdiv(H, self.f):
            raise ValueError(f"{self}: tr must be at most the {cdiv(H, self.f)} rows of tiles")
        if not 1 <= self.threads(W) <= MAX_THREADS:
            raise ValueError(f"{self} makes {self.threads(W)} threads a block on W={W} (at most {MAX_THREADS})")
        if self.shared_bytes(C, W) > shared_optin_limit():
            raise ValueError(f"{self} needs {self.shared_bytes(C, W)} bytes of shared memory (at most "
                             f"{shared_optin_limit()}): take fewer channels or tiles a block")

    def defines(self) -> dict:
        return {"WG_MB": self.mb, "WG_RM": self.rm, "WG_TR": self.tr, "WG_RT": self.rt, "WG_CK": self.ck,
                "WG_F": self.f}


def default_winograd_tile(C: int, M: int, H: int, W: int) -> WinogradTile:
    """Up to 16 output channels a block in groups of 4 (where they divide), two rows of tiles, groups
    of up to 7 tiles, chunks of up to 8 input channels."""
    mb = largest_divisor(M, 16)
    rm = 4 if mb % 4 == 0 else 1
    tiles = min(2, cdiv(H, 2)) * cdiv(W, 2)
    return WinogradTile(mb, rm, min(2, cdiv(H, 2)), min(7, tiles), largest_divisor(C, 8))


def winograd_tile_for(kind: str, C: int, M: int, H: int, W: int, device_name: str | None = None) -> WinogradTile:
    """This GPU's tuned tile for "forward" or "data", else the default (an entry without ``f`` is an
    F(2x2, 3x3) tile)."""
    entry = lookup(CONV_SMALL, table_key(f"winograd_{kind}", C, M, H, W), device_name)
    return WinogradTile(**{k: int(entry.get(k, v)) for k, v in asdict(WinogradTile()).items()}) if entry else \
        default_winograd_tile(C, M, H, W)


def winograd_pays(kind: str, C: int, M: int, H: int, W: int, device_name: str | None = None) -> bool:
    """Whether this GPU's tuned table times the Winograd kernel's best tile below the direct kernel's
    for the pass ("forward" or "data", C -> M as the kernel sees it); False without both entries
    (another GPU, the CPU executor)."""
    wino = lookup(CONV_SMALL, table_key(f"winograd_{kind}", C, M, H, W), device_name)
    direct = lookup(CONV_SMALL, table_key(kind, C, M, H, W), device_name)
    return bool(wino and direct) and float(wino["median_ms"]) < float(direct["median_ms"])


def winograd_candidates(C: int, M: int, H: int, W: int) -> list[WinogradTile]:
    """Every tile of a sweep (C -> M as the kernel sees it) within the bounds that can win: 28 to 64
    sums a thread (fewer were a third slower or more on the H100), 128 to 1024 threads, channel chunks
    that divide C (F(4x4, 3x3)'s U is 36 values a channel pair, 2.25x F(2x2, 3x3)'s: smaller chunks
    may pay there)."""
    chunks = {2: divisors_among(C, (8, 16)) or [C], 4: divisors_among(C, (4, 8, 16)) or [C]}
    out = []
    for mb, rm, tr, rt, ck, f in itertools.product(divisors_among(M, (8, 16, 32, 64)), (4, 8, 16), (1, 2, 4, 7),
                                                   (4, 7, 8, 14), sorted(set(chunks[2] + chunks[4])), (2, 4)):
        t = WinogradTile(mb, rm, tr, rt, ck, f)
        if ck in chunks[f] and mb % rm == 0 and 28 <= rm * rt <= 64 and 128 <= t.threads(W) <= 1024:
            out.append(t)
    return [t for t in out if tile_fits(t, C, M, H, W)]


# The shapes of tile that won on large layers (64 to 512 channels, 128^2 to 256^2 images, H100 and
# H200): one row of tiles a block, a thread 16 channels x 4 tiles or 8 x 8 of one position's sums.
AUTO_SUMS = ((16, 4), (8, 8))


def winograd_auto_tiles(C: int, M: int, H: int, W: int, limit: int = 8, kind: str = "forward") -> list[WinogradTile]:
    """The few tiles ``labkit.conv2d(variant="auto")`` times for a layer (``kind`` "forward", or "data"
    for a backward-data pass, as the tuned table names them): this GPU's tuned or
    default tile first, then ``winograd_candidates`` of the winning shapes (AUTO_SUMS, one row of tiles,
    16 or 32 channels a block, the largest chunk of up to 8 channels), at most ``limit``.

    F(2x2, 3x3) only.  F(4x4, 3x3) was about 12% faster again on those layers (H200), but its
    transforms carry a NaN or an infinity of the input into outputs whose windows do not hold it
    (conv_winograd.cu), where PyTorch's convolution keeps it to the windows that do, and its error is
    ten times F(2x2)'s; a layer built with WinogradConv3x3 and an f=4 tile still runs it."""
    first = winograd_tile_for(kind, C, M, H, W)
    out = [first] if first.f == 2 and tile_fits(first, C, M, H, W) else []
    chunk = max(divisors_among(C, (4, 8)) or [C])
    for t in sorted(winograd_candidates(C, M, H, W), key=lambda t: (-t.mb, -t.rm)):
        if t.f == 2 and t.tr == 1 and (t.rm, t.rt) in AUTO_SUMS and t.mb in (16, 32) and t.ck == chunk \
                and t not in out:
            out.append(t)
    return out[:limit]


class WinogradConv3x3(Conv3x3Layer):
    """A 3x3 convolution (stride 1, padding 1) by Winograd's F(2x2, 3x3) or F(4x4, 3x3), its epilogue
    fused.  Arguments as ``Conv3x3Layer``'s (labkit.ops.conv_small), and ``tile``: a ``WinogradTile``."""

    def __init__(self, wt, b, layer, *, activation: str | None = None, residual: bool = False, gate: bool = False,
                 transpose: bool = False, tile: WinogradTile | None = None):
        super().__init__(wt, b, layer, activation=activation, residual=residual, gate=gate, transpose=transpose)
        L = self.layer
        self.tile = tile or winograd_tile_for("data" if transpose else "forward", self.c_in, self.c_out, L.H, L.W)
        self.tile.check(self.c_in, self.c_out, L.H, L.W)
        # The transformed weights U, P * C * M values laid out for the tile's blocks, rewritten at each
        # call (none where the convolution transforms its own).
        self.u = None if self.tile.fused_weights(self.c_in) else \
            array_module(self.backend).empty(self.tile.positions * self.c_in * self.c_out, dtype=np.float32)

    def make_plan(self, N: int):
        L, t = self.layer, self.tile
        defines = {"WG_C": self.c_in, "WG_M": self.c_out, "WG_H": L.H, "WG_W": L.W, **self.epilogue_defines("WG"),
                   **t.defines()}
        mod = load("conv_winograd", defines=defines)
        fn = mod.get_function("winograd_conv")
        shared = t.shared_bytes(self.c_in, L.W)
        allow_shared(fn, shared)
        mchunks, tiles, fused = self.c_out // t.mb, N * cdiv(L.H, t.f) * cdiv(L.W, t.f), t.fused_weights(self.c_in)
        if tiles >= 2 ** 31:
            raise ValueError(f"batch {N} has more {t.f}x{t.f} tiles than the kernel's 32-bit tile index counts; "
                             "split the batch")
        if fused:
            units = cdiv(tiles, t.run_tiles(L.W))
            resident = fn.occupancy(t.threads(L.W), shared)["blocks_per_sm"] if self.backend == "cuda" else 1
            runs = self.runs_per_block(units, max(1, resident))
            blocks = cdiv(units, runs)
        else:
            runs, blocks = 1, N * cdiv(cdiv(L.H, t.f), t.tr)
        conv = fn.launcher((blocks * mchunks,), (t.threads(L.W),),
                           (None, self.wt if fused else self.u) + self.fixed_pointers() + (None,)
                           + ints(N, self.relu, runs), shared)
        if fused:
            return conv
        weights = mod.get_function("winograd_weights").launcher(
            (cdiv(self.c_in * self.c_out, THREADS_WEIGHTS),), (THREADS_WEIGHTS,), (self.wt, self.u))

        def launch(*arrays) -> None:
            weights()
            conv(*arrays)
        return launch

    def runs_per_block(self, units: int, resident: int) -> int:
        """How many runs of tiles a block walks (C a single chunk): as few as fill one wave of blocks
        (``resident`` an SM, each output-channel chunk its own blocks), so that every block carries
        the same work; on the CPU executor, two blocks' worth."""
        if self.backend != "cuda":
            return cdiv(units, 2)
        slots = max(1, resident * gpu_sm_count() // (self.c_out // self.tile.mb))
        return cdiv(units, slots)
