"""The weight gradient of a 3x3 convolution (stride 1, padding 1) by Winograd's F(3x3, 2x2)
(labkit/kernels/conv_winograd_wgrad.cu): 2.25x fewer multiply-adds than conv_small's direct kernel.

    wgrad = WinogradWeightGrad(layer)          # as SmallWeightGrad: dL/dw in the (C*9, M) layout
    dw = wgrad(x, dy, bias=db)                 # and dL/db into db

Two launches a call: the partial sums of the batch's slices, then their sum in a fixed order with
the output transform.  A ``WinogradWeightTile`` fixes the kernel's compile-time tile;
``labkit/tuned/conv_small.json`` holds a GPU's winner under "winograd_weight_..." keys.
"""
from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass

from ..checks import array_module
from ..device_query import gpu_sm_count
from ..loader import load
from ..shapes import ConvLayer
from ..tuned import CONV_SMALL, lookup
from .conv_small import SmallWeightGrad, table_key
from .implicit import shared_optin_limit
from .plans import allow_shared, cdiv, divisors_among, ints, largest_divisor, pitch4, tile_fits

__all__ = ["WinogradWeightTile", "WinogradWeightGrad", "default_winograd_weight_tile", "winograd_weight_tile_for",
           "winograd_weight_candidates"]

MAX_THREADS = 1024
REDUCE_PAIRS = 16      # (m, c) pairs a block of winograd_wgrad_reduce


def _up4(n: int) -> int:
    return cdiv(n, 4) * 4


@dataclass(frozen=True)
class WinogradWeightTile:
    """winograd_wgrad's tile: ``mb`` output by ``cb`` input channels of dw a block, each thread an
    ``rm`` x ``rc`` block of one transform position's sums, units of ``tr`` rows of 2x2 tiles."""
    mb: int = 16
    cb: int = 16
    rm: int = 4
    rc: int = 4
    tr: int = 1

    def threads(self) -> int:
        return 16 * (self.mb // self.rm) * (self.cb // self.rc)

    def shared_bytes(self, W: int) -> int:
        """conv_winograd_wgrad.cu's WW_SHARED_FLOATS * 4: two stages each of the input and gradient
        rows and of V and Y."""
        tw = cdiv(W, 2)
        tk = self.tr * tw
        xplane = ((2 * self.tr + 2) * (2 * tw + 2)) | 1
        dplane = (2 * self.tr * 2 * tw) | 1
        # a position's slice of V or Y (ww_pitch): padded to 4 more than a multiple of 32 floats
        # where a quarter-warp reads two positions (fewer than 8 threads a position)
        pitch = _up4 if self.threads() // 16 >= 8 else pitch4
        return 4 * (2 * (_up4(self.cb * xplane) + _up4(self.mb * dplane))
                    + 2 * 16 * (pitch(tk * self.cb) + pitch(tk * self.mb)))

    def check(self, C: int, M: int, H: int, W: int) -> None:
        if min(self.mb, self.cb, self.rm, self.rc, self.tr) < 1:
            raise ValueError(f"every field of {self} must be at least 1")
        if M % self.mb or C % self.cb or self.mb % self.rm or self.cb % self.rc:
            raise ValueError(f"{self}: mb must divide M={M}, cb C={C}, rm mb and rc cb")
        if self.tr > cdiv(H, 2):
            raise ValueError(f"{self}: tr must be at most the {cdiv(H, 2)} rows of tiles")
        if not 1 <= self.threads() <= MAX_THREADS or self.threads() % self.mb:
            raise ValueError(f"{self} makes {self.threads()} threads a block (at most {MAX_THREADS}, "
                             f"a multiple of mb)")
        if self.shared_bytes(W) > shared_optin_limit():
            raise ValueError(f"{self} needs {self.shared_bytes(W)} bytes of shared memory (at most "
                             f"{shared_optin_limit()}): take fewer channels or rows a block")

    def defines(self) -> dict:
        return {"WW_MB": self.mb, "WW_CB": self.cb, "WW_RM": self.rm, "WW_RC": self.rc, "WW_TR": self.tr}


def default_winograd_weight_tile(C: int, M: int, H: int, W: int) -> WinogradWeightTile:
    """Up to 16 x 16 channels a block, 4 x 4 a thread where they divide, one row of tiles a unit."""
    mb, cb = largest_divisor(M, 16), largest_divisor(C, 16)
    rm = 4 if mb % 4 == 0 else 1
    rc = 4 if cb % 4 == 0 else 1
    return WinogradWeightTile(mb, cb, rm, rc, 1)


def winograd_weight_tile_for(C: int, M: int, H: int, W: int,
                             device_name: str | None = None) -> WinogradWeightTile:
    """This GPU's tuned tile, else the default."""
    entry = lookup(CONV_SMALL, table_key("winograd_weight", C, M, H, W), device_name)
    return WinogradWeightTile(**{k: int(entry[k]) for k in asdict(WinogradWeightTile())}) if entry else \
        default_winograd_weight_tile(C, M, H, W)


class WinogradWeightGrad(SmallWeightGrad):
    """dL/dw and dL/db of a 3x3 convolution (stride 1, padding 1) by F(3x3, 2x2); arguments and
    calls as ``SmallWeightGrad``'s, ``tile`` a ``WinogradWeightTile``."""

    @staticmethod
    def tile_for(layer: ConvLayer) -> WinogradWeightTile:
        return winograd_weight_tile_for(layer.C, layer.M, layer.H, layer.W)

    def slices(self, N: int, resident: int) -> int:
        """One full wave of blocks on a GPU (``resident`` blocks per SM), two slices on the CPU executor."""
        L, t = self.layer, self.tile
        units = N * cdiv(cdiv(L.H, 2), t.tr)
        blocks = (L.C // t.cb) * (L.M // t.mb)
        want = max(1, resident * gpu_sm_count() // blocks) if self.backend == "cuda" else 2
        return min(want, units)

    def make_plan(self, N: int):
        L, t = self.layer, self.tile
        mod = load("conv_winograd_wgrad", defines={"WW_C": L.C, "WW_M": L.M, "WW_H": L.H, "WW_W": L.W,
                                                   **t.defines()})
        fn = mod.get_function("winograd_wgrad")
        shared = t.shared_bytes(L.W)
        allow_shared(fn, shared)
        resident = fn.occupancy(t.threads(), shared)["blocks_per_sm"] if self.backend == "cuda" else 1
        slices = self.slices(N, max(1, resident))
        blocks = (L.C // t.cb) * (L.M // t.mb)
        xp = array_module(self.backend)
        ws = xp.empty((slices, 16, L.M, L.C), dtype=xp.float32)
        wsdb = xp.empty((slices, L.M), dtype=xp.float32)
        db = xp.empty(L.M, dtype=xp.float32)           # where the bias gradient goes when not asked for
        partial = fn.launcher((slices * blocks,), (t.threads(),), (None, None, ws, wsdb) + ints(N, slices), shared)
        reduce = mod.get_function("winograd_wgrad_reduce").launcher(
            (cdiv(L.M * L.C, REDUCE_PAIRS),), (256,), (ws, wsdb, None, None) + ints(slices, self.layout == "CKKM"))
        return partial, reduce, db


def winograd_weight_candidates(C: int, M: int, H: int, W: int) -> list[WinogradWeightTile]:
    """Every winograd_wgrad tile of a sweep within the bounds that can win: 16 to 128 sums a thread,
    128 to 1024 threads, channel blocks that divide C and M."""
    out = []
    for mb, cb, rm, rc, tr in itertools.product(divisors_among(M, (8, 16, 32, 64)), divisors_among(C, (8, 16, 32, 64)),
                                                (4, 8, 16), (4, 8, 16), (1, 2)):
        t = WinogradWeightTile(mb, cb, rm, rc, tr)
        if mb % rm or cb % rc or not 16 <= rm * rc <= 128 or not 128 <= t.threads() <= 1024:
            continue
        out.append(t)
    return [t for t in out if tile_fits(t, C, M, H, W)]
