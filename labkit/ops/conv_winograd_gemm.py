"""A convolution of any window up to 7 x 7 (stride 1, any zero padding, any dilation, any groups) by
Winograd's F(2, r) in each direction, in three passes: the input transform, a GEMM per transform
position and group on the tuned GEMM kernel, the output transform with the epilogue
(labkit/kernels/conv_winograd_gemm.cu; cuDNN calls this WINOGRAD_NONFUSED).

    conv = WinogradGemmConv2d(w, b, ConvLayer.of(256, 14, 14, 256, 3, pad=1), activation="relu")
    y = conv(x)                          # x (N, 256, 14, 14) -> y (N, 256, 14, 14)
    conv.workspace_bytes(N)              # V and Mx, the layer's own, made when a batch size is planned
    toom_cook(5)                         # F(2, 5)'s A^T, G, B^T, exact fractions

Where conv_winograd.cu (the fused kernel) keeps a block's GEMMs small (16-32 output channels by one
row of tiles), these GEMMs are the whole batch's: M x C by C x T for T tiles, at the GEMM kernel's
speed.  They win on layers of many channels and small planes (ResNet-18's 256 and 512 channels on
14 x 14 and 7 x 7, AlexNet's conv2-5 on 27 x 27 and 13 x 13) and lose where the transforms' traffic
(V and Mx, (r + 1)^2 values per channel and tile each way) outweighs the fewer multiply-adds
(2.25x fewer at 3x3, 2.8x at 5x5, 3.1x at 7x7): few channels on large planes.
``labkit.conv2d(variant="auto")`` times it beside the other kernels.

Why F(2, r) and not F(4, 3) or F(6, 3): with two outputs a tile and the points 0 and infinity among
the transform's, a NaN of x reaches exactly the outputs whose windows hold it (the kernel's header
says why), and the rounding error stays near the direct sum's up to 7 x 7 (the tests bound it).

The weights' transform U = G g G^T is made once, on the device, by the layer's first plan
(wgg_weights; ``transform_weights`` is its float64 reference on the host): the layer's weights are
fixed (inference).  Its GEMM tiles: ``tiles``, else gemm.cu's defaults for the product's shape.  A
batch whose V and Mx would pass ``workspace_limit()`` runs in chunks of images (``chunk``).

``WinogradGemm3x3`` is the same three passes for a training step's 3x3 layers (stride 1, padding 1),
with conv_small's interface (``Conv3x3Layer``): forward, or backward data (``transpose=True``), its
epilogue's residual and ReLU gate; the weights, which every step changes, transformed on the GPU at
each call (wgg_weights: 16 x C x M values, a few microseconds).  ``labkit.ops.conv3x3_auto`` times it
beside conv_small's direct kernel and the fused Winograd kernel.
"""
from __future__ import annotations

import functools
from fractions import Fraction

import numpy as np

from .. import backends
from ..device_query import device
from ..checks import (array_module, check_activation, check_conv_arguments, check_input, check_residual, fast_input,
                      output, to_numpy)
from ..loader import load
from ..shapes import ConvLayer
from .conv_small import Conv3x3Layer
from .gemm import batched_launcher, default_config, gemm_candidates
from .implicit import ACTIVATIONS
from .plans import cdiv, ints

__all__ = ["WinogradGemmConv2d", "WinogradGemm3x3", "applies", "workspace_bytes", "workspace_limit", "check_workspace",
           "fits", "chunk", "gemm_tiles", "transform_weights", "tiles_of", "positions", "toom_cook", "matrix_defines",
           "MAX_WINDOW", "MIN_GROUP"]

MAX_WINDOW = 7     # the largest window side: F(2, 7) has 8 points; more would grow the rounding error
MIN_GROUP = 4      # channels each of several groups must have in and out (the GEMMs' inner and row dimensions)
# Toom-Cook's points, in the order F(2, r) takes its r finite ones (and infinity): small dyadic
# numbers, so that B^T and A^T are exact in float32.
POINTS = (Fraction(0), Fraction(1), Fraction(-1), Fraction(2), Fraction(-2), Fraction(1, 2), Fraction(-1, 2))


def _solve_bt(at: list, g: list) -> list:
    """B^T such that A^T ((G g) * (B^T d)) is the correlation of g and d for every g and d, exactly
    (Gaussian elimination over fractions, one column of B^T at a time)."""
    m, alpha, r = len(at), len(g), len(g[0])
    eqs = [(o, k) for o in range(m) for k in range(r)]
    q = [[at[o][xi] * g[xi][k] for xi in range(alpha)] for o, k in eqs]
    bt = [[Fraction(0)] * alpha for _ in range(alpha)]
    for j in range(alpha):
        rows = [q[e][:] + [Fraction(int(j == o + k))] for e, (o, k) in enumerate(eqs)]
        pivots, top = [], 0
        for col in range(alpha):
            p = next((i for i in range(top, len(rows)) if rows[i][col] != 0), None)
            if p is None:
                continue
            rows[top], rows[p] = rows[p], rows[top]
            rows[top] = [v / rows[top][col] for v in rows[top]]
            for i in range(len(rows)):
                if i != top and rows[i][col] != 0:
                    f = rows[i][col]
                    rows[i] = [a - f * b for a, b in zip(rows[i], rows[top])]
            pivots.append(col)
            top += 1
        if any(row[-1] != 0 and not any(row[:-1]) for row in rows):
            raise ArithmeticError("no B^T makes these A^T and G a correlation: the points are not distinct")
        for i, col in enumerate(pivots):
            bt[col][j] = rows[i][-1]
    return bt


@functools.lru_cache(maxsize=None)
def toom_cook(r: int) -> tuple[tuple, tuple, tuple]:
    """(A^T, G, B^T) of F(2, r), fractions: A^T (2, r + 1), G (r + 1, r), B^T (r + 1, r + 1), with
    y = A^T ((G g) * (B^T d)) the two outputs of the correlation of a filter g (r) and a patch d (r + 1).
    Rows are signed so that each row of B^T and G starts positive.  r = 1: the identity, one point."""
    if not 1 <= r <= MAX_WINDOW:
        raise ValueError(f"F(2, r) is made for 1 <= r <= {MAX_WINDOW}, got r = {r}")
    if r == 1:
        one = ((Fraction(1),),)
        return one, one, one
    points = POINTS[:r]
    norm = [Fraction(np.prod([p - q for q in points if q != p], dtype=object)) for p in points]
    g = [[p ** k / n for k in range(r)] for p, n in zip(points, norm)] + [[Fraction(int(k == r - 1)) for k in range(r)]]
    at = [[p ** o for p in points] + [Fraction(int(o == 1))] for o in range(2)]
    bt = _solve_bt(at, g)     # exists for distinct points (Toom-Cook's construction)
    for xi in range(r + 1):
        if next(v for v in bt[xi] if v) < 0:    # B^T's row and G's row negated: their product is kept
            bt[xi], g[xi] = [-v for v in bt[xi]], [-v for v in g[xi]]
        if next(v for v in g[xi] if v) < 0:     # G's row and A^T's column
            g[xi] = [-v for v in g[xi]]
            for row in at:
                row[xi] = -row[xi]
    return tuple(map(tuple, at)), tuple(map(tuple, g)), tuple(map(tuple, bt))


def _c_matrix(rows) -> str:
    """A matrix of fractions as a C initializer, each entry a float literal (9 significant digits)."""
    return "{" + ", ".join("{" + ", ".join(f"{float(v):.9g}f" if v != int(v) else f"{int(v)}"
                                           for v in row) + "}" for row in rows) + "}"


def matrix_defines(layer: ConvLayer) -> dict:
    """The kernel's WGG_KH, WGG_KW and transform matrices for the layer's window."""
    (kh, kw), out = layer.kernel_hw, {}
    for side, r in (("H", kh), ("W", kw)):
        at, g, bt = toom_cook(r)
        out.update({f"WGG_K{side}": r, f"WGG_BT{side}": _c_matrix(bt), f"WGG_AT{side}": _c_matrix(at),
                    f"WGG_G{side}": _c_matrix(g)})
    return out


def _split(r: int) -> tuple[int, int]:
    """(outputs a tile, transform points) along a direction of window side r."""
    return (2, r + 1) if r > 1 else (1, 1)


def positions(layer: ConvLayer) -> int:
    """Transform positions: one GEMM each (per group); 16 at 3x3, 36 at 5x5, 8 at 1 x 7."""
    (kh, kw) = layer.kernel_hw
    return _split(kh)[1] * _split(kw)[1]


def workspace_limit() -> int:
    """Bytes of V and Mx one layer may hold: 1/64 of the GPU's memory, between 128 MiB and 2 GiB (an
    8 GiB card 128 MiB, an 80 GiB H100 1.25 GiB, a 141 GiB H200 2 GiB); 512 MiB on the CPU executor.
    Each layer that runs this kernel keeps its own (two layers may run at once on two streams), and
    an autotuner's search holds a few candidates' at once: the bound keeps a network's share small."""
    dev = device()
    if not dev.is_gpu or not dev.total_memory_bytes:
        return 2 ** 29
    return max(2 ** 27, min(2 ** 31, dev.total_memory_bytes // 64))


def applies(layer: ConvLayer) -> bool:
    """Can conv_winograd_gemm.cu run ``layer``: stride 1, any dilation, each window side at most
    MAX_WINDOW and not 1 x 1 (a GEMM already); one group, or groups of at least MIN_GROUP channels in
    and out (a depthwise layer's products would be 1 x 1)."""
    kh, kw = layer.kernel_hw
    return (max(kh, kw) <= MAX_WINDOW and (kh, kw) != (1, 1) and layer.stride_hw == (1, 1)
            and (layer.groups == 1 or min(layer.C, layer.M) // layer.groups >= MIN_GROUP))


def tiles_of(layer: ConvLayer, N: int) -> int:
    """T: the output tiles (2x2; 1x2 or 2x1 where a window side is 1) of a batch of N (the GEMMs'
    columns), counted phase by phase where the layer is dilated (each phase's outputs a tile)."""
    (ho, wo), (kh, kw), (dh, dw) = layer.out_hw, layer.kernel_hw, layer.dilation_hw
    return N * dh * cdiv(cdiv(ho, dh), _split(kh)[0]) * dw * cdiv(cdiv(wo, dw), _split(kw)[0])


def workspace_bytes(layer: ConvLayer, N: int) -> int:
    """V (P, C, T) and Mx (P, M, T), float32, P the transform positions: what a batch of N needs
    besides x and y."""
    return 4 * positions(layer) * (layer.C + layer.M) * tiles_of(layer, N)


def check_workspace(layer: ConvLayer, N: int, fix: str) -> None:
    """ValueError, saying how much and what to use instead (``fix``), where a batch of N would need more
    V and Mx than ``workspace_limit()``: said before anything is compiled or allocated."""
    need, limit = workspace_bytes(layer, N), workspace_limit()
    if need > limit:
        raise ValueError(f"{layer.key} at batch {N} needs {need / 2**20:.0f} MiB of Winograd workspace (V and Mx), "
                         f"over this device's {limit // 2**20} MiB: {fix}")


def fits(layer: ConvLayer, N: int) -> bool:
    """Whether a batch of N of ``layer`` keeps its V and Mx within ``workspace_limit()``."""
    return workspace_bytes(layer, N) <= workspace_limit()


def chunk(layer: ConvLayer, N: int) -> int:
    """The most images of a batch of N that one pass of ``WinogradGemmConv2d`` takes within
    ``workspace_limit()`` (N where the whole batch fits; 0 where not even one image does).  A larger
    batch runs in chunks of this many, one after another on the same V and Mx."""
    return min(N, workspace_limit() // workspace_bytes(layer, 1))


def gemm_tiles(layer: ConvLayer, T: int, limit: int) -> list[dict]:
    """gemm.cu's block tiles an autotuner times for the GEMMs (M/groups x C/groups by C/groups x T):
    its default for the shape first, then its sweep's likeliest, at most ``limit``."""
    mg, cg = layer.M // layer.groups, layer.C // layer.groups
    out = [t for t in [default_config(mg, T, cg)[1]] if t]     # None: few rows, not a block tile
    out += [t for t in gemm_candidates(mg, T) if t not in out]
    return out[:limit]


def _passes(G: ConvLayer, N: int, tiles: dict | None, epilogue: dict, fix: str, xp,
            room: tuple | None = None) -> tuple:
    """What both layers share at a batch of N of the pass ``G`` (as a forward layer): (module, Mx, the
    input transform's launch(x) into V, the GEMMs' launch(u) from V into Mx, (V, Mx)), V and Mx
    allocated here (before any CUDA graph captures the pass), or taken from the front of ``room``, a
    larger batch's (V, Mx).  ``epilogue``: the output transform's flags (WGG_BIAS, WGG_ADD, WGG_GATE,
    WGG_FLIP); ``fix``: what to use instead where the workspace is too large."""
    check_workspace(G, N, fix)
    T, P = tiles_of(G, N), positions(G)
    (ph, pw), (dh, dw) = G.pad_hw, G.dilation_hw
    mod = load("conv_winograd_gemm", defines={"WGG_C": G.C, "WGG_H": G.H, "WGG_W": G.W, "WGG_M": G.M,
                                              "WGG_PH": ph, "WGG_PW": pw, "WGG_DH": dh, "WGG_DW": dw,
                                              **matrix_defines(G), **epilogue})
    if room is None:
        v = xp.empty((P, G.C, T), dtype=xp.float32)
        mx = xp.empty((P, G.M, T), dtype=xp.float32)
    else:
        v, mx = (a.reshape(-1)[:P * rows * T].reshape(P, rows, T) for a, rows in zip(room, (G.C, G.M)))
    to_v = mod.get_function("wgg_input").launcher((cdiv(G.C * T, 256),), (256,), (None, v) + ints(N))
    # (P, C, T) is (P * groups, C/groups, T): one product per (position, group), at even strides
    mg, cg = G.M // G.groups, G.C // G.groups
    gemms = batched_launcher(mg, T, cg, P * G.groups, tiles or default_config(mg, T, cg)[1])
    return mod, mx, to_v, lambda u: gemms(u, v, mx), (v, mx)


def _output_launch(mod, G: ConvLayer, N: int, mx, b, addend, gate, act: int):
    """wgg_output's launch from Mx: None among b, addend, gate where each call passes one, then y."""
    return mod.get_function("wgg_output").launcher(
        (cdiv(G.M * tiles_of(G, N), 256),), (256,), (mx, b, addend, gate, None) + ints(N, act))


def transform_weights(w) -> np.ndarray:
    """U = GH g GW^T of each (m, c) filter (w (M, C/groups, KH, KW)), float64 on the host:
    (P, M, C/groups), position AW a + b first; it is (P * groups, M/groups, C/groups), the GEMMs' A.
    (The layers make theirs on the device, wgg_weights; this is the float64 reference of it.)"""
    g = to_numpy(w).astype(np.float64)
    gh, gw = (np.array(toom_cook(r)[1], dtype=np.float64) for r in g.shape[2:])
    u = np.einsum("ai,mcij,bj->abmc", gh, g, gw, optimize=True)
    return u.reshape(-1, g.shape[0], g.shape[1])


class WinogradGemmConv2d:
    """One convolution layer on conv_winograd_gemm.cu and gemm.cu's batched GEMM.

    Args: ``w`` float32 (M, C/groups, KH, KW) on the backend, ``b`` (M,) or None, ``layer`` its
    ConvLayer (``applies``: stride 1, any padding and dilation, windows up to 7 x 7, groups),
    ``activation`` None, "tanh", "relu" or "relu6",
    ``residual``: y = act(conv(x) + b + residual), each call passing ``residual=``; ``tiles``: gemm.cu's
    block tile (GEMM_BM, GEMM_BN, GEMM_BK, GEMM_TM, GEMM_TN) for the GEMMs, else its defaults.
    Per batch size ``plan`` makes the three launches and the layer's V and Mx once; a call checks x
    and launches.  A batch whose V and Mx would pass ``workspace_limit()`` runs in chunks of images
    (``chunk``), one after another on one chunk's V and Mx."""

    def __init__(self, w, b, layer: ConvLayer, *, activation: str | None = None, residual: bool = False,
                 tiles: dict | None = None):
        self.backend = backend = backends.current()
        xp = array_module(backend)
        layer = ConvLayer(*layer).canonical()
        layer.check()
        if not applies(layer):
            raise ValueError(f"conv_winograd_gemm.cu runs windows up to {MAX_WINDOW}x{MAX_WINDOW} (not 1x1) at "
                             f"stride 1, in one group or groups of {MIN_GROUP} or more channels; got "
                             f"{layer.key}: use labkit.conv2d(variant='auto')")
        self._act = check_activation(activation, ACTIVATIONS)
        check_conv_arguments(w, b, layer, residual, backend, xp)
        self.layer, self.activation, self.residual, self.tiles = layer, activation, bool(residual), tiles
        self.w, self.b = w, b
        # U = G g G^T, made on the device by the first plan (wgg_weights): no download of w, no host
        # arithmetic (labkit.conv2d makes its layer anew at every call)
        self.u = xp.empty((positions(layer), layer.M, layer.C // layer.groups), dtype=xp.float32)
        self._u_made = False
        self._kind, self._x_shape = xp.ndarray, (layer.C, layer.H, layer.W)
        self._plans: dict[int, tuple] = {}

    def workspace_bytes(self, N: int) -> int:
        """V and Mx of a batch of N: one chunk's (``chunk``) where the batch runs in chunks."""
        return workspace_bytes(self.layer, max(1, chunk(self.layer, N)))

    def plan(self, N: int) -> tuple:
        """(run(x, y, res), y's shape) of a batch of N, made once: the three launches on the layer's V
        and Mx, per chunk of images where the batch is split (``chunk``).  ValueError, before anything
        is compiled or allocated, where one image's V and Mx would pass ``workspace_limit()``."""
        entry = self._plans.get(N)
        if entry is not None:
            return entry
        L, n = self.layer, max(1, chunk(self.layer, N))
        bias = self.b if self.b is not None else self.u      # not read without a bias (nor the gate)
        steps, room = {}, None
        for size in sorted({n, N % n} - {0}, reverse=True):  # a chunk, then what is left (on its V and Mx)
            mod, mx, to_v, gemms, room = _passes(L, size, self.tiles, {"WGG_BIAS": int(self.b is not None),
                                                                       "WGG_ADD": int(self.residual),
                                                                       "WGG_MCKK": 1, "WGG_G": L.groups},
                                                 "another kernel (labkit.conv2d(variant='auto') picks one that fits)",
                                                 array_module(self.backend), room)
            from_mx = _output_launch(mod, L, size, mx, bias, None, bias, self._act)
            if not self._u_made:
                cells = L.M * (L.C // L.groups)
                mod.get_function("wgg_weights")((cdiv(cells, 256),), (256,), (self.w, self.u))
                self._u_made = True

            def step(x, y, res, to_v=to_v, gemms=gemms, from_mx=from_mx):
                to_v(x)
                gemms(self.u)
                from_mx(res, y)
            steps[size] = step
        if n == N:
            run = steps[N]
        else:
            def run(x, y, res):
                for i in range(0, N, n):
                    part = slice(i, min(i + n, N))
                    steps[part.stop - i](x[part], y[part], res[part])
        entry = self._plans[N] = (run, (N, L.M) + L.out_hw)
        return entry

    def __call__(self, x, out=None, *, residual=None):
        if not (fast_input(x, self._kind) and x.shape[1:] == self._x_shape):
            check_input(x, self._x_shape, self.layer.key, self.backend)
        run, out_shape = self._plans.get(x.shape[0]) or self.plan(int(x.shape[0]))
        res = check_residual(residual, out_shape, self.residual, self._kind, self.backend, "WinogradGemmConv2d")
        y = output(out, out_shape, "NCHW", (x, self.w, self.b) + res, backend=self.backend)
        run(x, y, res[0] if res else y)      # without a residual the kernel reads none (y stands in)
        return y


class WinogradGemm3x3(Conv3x3Layer):
    """A 3x3 pass of a training step on conv_winograd_gemm.cu: ``Conv3x3Layer``'s arguments and calls
    (wt the forward layer's weights (C*9, M), read at every call; ``transpose`` for backward data), and
    ``tiles``: gemm.cu's block tile for the GEMMs (None: its defaults).  A batch size's plan holds U, V
    and Mx, made with it (before any CUDA graph captures the pass); ValueError, before anything is
    compiled or allocated, where V and Mx would pass ``workspace_limit()``."""

    def __init__(self, wt, b, layer, *, activation: str | None = None, residual: bool = False, gate: bool = False,
                 transpose: bool = False, tiles: dict | None = None):
        super().__init__(wt, b, layer, activation=activation, residual=residual, gate=gate, transpose=transpose)
        L = self.layer
        self.tiles = tiles
        self.geometry = ConvLayer.of(self.c_in, L.H, L.W, self.c_out, 3, 1, 1)   # the pass, as a forward layer

    def workspace_bytes(self, N: int) -> int:
        return workspace_bytes(self.geometry, N)

    def make_plan(self, N: int):
        G, xp = self.geometry, array_module(self.backend)
        mod, mx, to_v, gemms, _ = _passes(G, N, self.tiles, self.epilogue_defines("WGG"),
                                          "conv_small's or conv_winograd's kernels (labkit.ops.conv3x3_auto picks "
                                          "one that fits)", xp)
        u = xp.empty((positions(G), G.M, G.C), dtype=xp.float32)
        to_u = mod.get_function("wgg_weights").launcher((cdiv(G.M * G.C, 256),), (256,), (self.wt, u))
        from_mx = _output_launch(mod, G, N, mx, *self.fixed_pointers(), 2 if self.relu else 0)

        def run(x, *per_call):     # per_call: (residual,) (gate,) as the layer was made, then y
            to_u()
            to_v(x)
            gemms(u)
            from_mx(*per_call)
        return run
