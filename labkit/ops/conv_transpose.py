"""Transposed convolution (PyTorch's conv_transpose2d) on the implicit GEMM, without zero-inserted
copies: the adjoint of conv2d, i.e. its backward-data pass.

    geo = TransposeGeometry.of(C=64, H=128, W=128, M=32, kernel=4, stride=2, pad=1)
    up = ConvTranspose2d(w, b, geo, activation="relu")     # w (C_in, C_out/groups, KH, KW), prepared once
    y = up(x)                                              # (N, 64, 128, 128) -> (N, 32, 256, 256)
    y = conv_transpose2d(x, w, b, stride=2, pad=1)         # the same in one call (labkit.conv_transpose2d)

Each input pixel i scatters its window: y[.., i*S - P + k*D] += x[.., i] * w[.., k] (per axis).
Seen from an output row h, only the taps k with (h + P - k*D) divisible by S reach it, from input
row (h + P - k*D) / S.  Output rows of the same phase r = h mod S share that set of taps, and along
a phase (h = r + S*a) the input row they read advances one per step: each phase is an ordinary
convolution of stride 1 over its taps (their order reversed, dilation D / gcd(S, D), a padding that
may be negative: the window may start inside the input), whose outputs land on every S-th row.
conv_implicit.cu runs each phase, told where its outputs go (OUT_SH, OUT_H0, ...): S_h * S_w
launches fill y, each output written once, and no product is spent on an inserted zero (a
zero-inserted input would make S_h * S_w times the work).  A phase that no tap reaches holds the
bias alone (after the activation).

At stride 1 there is one phase, and it is an ordinary convolution: the kernel turned 180 degrees,
C_in and C_out swapped (per group), padding D * (K - 1) - P.  Untuned tiles not asked for, such a
layer runs as that convolution on labkit.conv2d's ``auto`` (AutoConv2d), where Winograd, the
depthwise kernels and the implicit GEMM's own search can take it.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import NamedTuple

import numpy as np

from .. import autotune, backends
from ..checks import array_module, array_type, check_activation, check_array, fast_input, output
from ..errors import check_int
from ..loader import load
from ..reference.samples import activate, conv_transpose_samples, sample_positions
from ..shapes import ConvLayer, pair
from . import rungs
from .conv_auto import AutoConv2d
from .implicit import ACTIVATIONS, INDEX_LIMIT, TOLERANCE, Tiles, candidates, default_tiles, prepare_weights
from .plans import PlanCache, cdiv, ints, sampled_mismatch

__all__ = ["TransposeGeometry", "AxisPhase", "axis_phases", "ConvTranspose2d", "conv_transpose2d", "default_phase_tiles",
           "equivalent_conv",
           "VARIANTS"]


class TransposeGeometry(NamedTuple):
    """A transposed convolution: C input channels on H x W, M output channels, and per axis (h, w)
    the kernel, stride, padding, output padding and dilation of the convolution it is the adjoint of."""
    C: int
    H: int
    W: int
    M: int
    kernel: tuple
    stride: tuple = (1, 1)
    pad: tuple = (0, 0)
    output_padding: tuple = (0, 0)
    dilation: tuple = (1, 1)
    groups: int = 1

    @classmethod
    def of(cls, C: int, H: int, W: int, M: int, kernel, stride=1, pad=0, output_padding=0, dilation=1,
           groups: int = 1) -> "TransposeGeometry":
        """From ints or (h, w) pairs, checked."""
        geo = cls(C, H, W, M, pair(kernel, "kernel"), pair(stride, "stride"), pair(pad, "pad", 0),
                  pair(output_padding, "output_padding", 0), pair(dilation, "dilation"), groups)
        geo.check()
        return geo

    @property
    def out_hw(self) -> tuple[int, int]:
        return tuple((n - 1) * s - 2 * p + d * (k - 1) + op + 1 for n, k, s, p, op, d in
                     zip((self.H, self.W), self.kernel, self.stride, self.pad, self.output_padding, self.dilation))

    @property
    def key(self) -> str:
        hw = lambda p: f"{p[0]}x{p[1]}"   # noqa: E731
        return (f"T_C{self.C}_H{self.H}_W{self.W}_M{self.M}_K{hw(self.kernel)}_S{hw(self.stride)}_P{hw(self.pad)}"
                f"_O{hw(self.output_padding)}_D{hw(self.dilation)}_G{self.groups}")

    def adjoint(self) -> ConvLayer:
        """The convolution (from M channels on the output's plane to C) this is the adjoint of."""
        ho, wo = self.out_hw
        return ConvLayer.of(self.M, ho, wo, self.C, self.kernel, self.stride, self.pad, self.dilation, self.groups)

    def check(self) -> None:
        for name in ("C", "H", "W", "M", "groups"):
            check_int(getattr(self, name), name)
        if self.C % self.groups or self.M % self.groups:
            raise ValueError(f"groups={self.groups} must divide C_in={self.C} and C_out={self.M}")
        for (op, s, d), axis in zip(zip(self.output_padding, self.stride, self.dilation), "hw"):
            if op >= max(s, d):
                raise ValueError(f"output_padding {self.output_padding} must be smaller than the stride or the "
                                 f"dilation along {axis} (as in PyTorch): the extra rows would hold no tap")
        if min(self.out_hw) < 1:
            raise ValueError(f"{self.key}: the output would be {self.out_hw[0]}x{self.out_hw[1]}: use less padding")


class AxisPhase(NamedTuple):
    """The outputs r, r + S, r + 2S, ... of one axis (``count`` of them) and the taps that reach them,
    in the order the phase's stride-1 convolution reads them; it reads input a - pad + t * dilation for
    its output a and tap t."""
    r: int
    count: int
    taps: tuple
    pad: int
    dilation: int


def axis_phases(n_in: int, n_out: int, K: int, S: int, P: int, D: int) -> list[AxisPhase]:
    """The phases of one axis of a transposed convolution (see the module's docstring).  Taps that
    would read only outside the input for every output of the phase are dropped from either end."""
    phases = []
    for r in range(min(S, n_out)):
        count = cdiv(n_out - r, S)
        taps = [k for k in range(K - 1, -1, -1) if (r + P - k * D) % S == 0]   # input offsets ascending
        offs = [(r + P - k * D) // S for k in taps]
        while taps and offs[0] + count - 1 < 0:     # reads before the input's first row, always
            taps, offs = taps[1:], offs[1:]
        while taps and offs[-1] >= n_in:            # reads past the last row, always
            taps, offs = taps[:-1], offs[:-1]
        step = offs[1] - offs[0] if len(offs) > 1 else 1
        phases.append(AxisPhase(r, count, tuple(taps), -offs[0] if offs else 0, step))
    return phases


def default_phase_tiles(geo: TransposeGeometry) -> Tiles:
    """The implicit GEMM's default tiles for the phases of ``geo`` (they depend on the GEMM's rows,
    C_out/G, alone)."""
    return default_tiles(ConvLayer(geo.C, geo.H, geo.W, geo.M, 1, groups=geo.groups))


@dataclass
class _Phase:
    """One phase's launch, or where the bias alone goes (``launch`` None)."""
    rows: AxisPhase
    cols: AxisPhase
    launch: object = None


class ConvTranspose2d:
    """One transposed convolution on the implicit GEMM (FP32), its phase weights prepared once.

    Args:
        w: float32 (C_in, C_out/groups, KH, KW) (PyTorch's ConvTranspose2d layout); b: (C_out,) or None.
        geometry: its ``TransposeGeometry``; checked against w.
        activation: None, "tanh", "relu" or "relu6", fused into the epilogue.
        tiles: the implicit GEMM's tiles for every phase (default: the autotuner's choice on a GPU,
            else ``default_tiles``).  Without tiles, a stride-1 layer runs as its equivalent
            convolution on ``AutoConv2d`` (``as_conv``; see the module's docstring).
    """

    def __init__(self, w, b, geometry: TransposeGeometry, *, activation: str | None = None,
                 tiles: Tiles | None = None):
        self.backend = backend = backends.current()
        xp = array_module(backend)
        geo = TransposeGeometry(*geometry)
        geo.check()
        check_array(w, "w", "(C_in, C_out/groups, KH, KW)", 4, backend, xp)
        want = (geo.C, geo.M // geo.groups) + tuple(geo.kernel)
        if tuple(w.shape) != want:
            raise ValueError(f"w must have shape {want} (C_in, C_out/groups, KH, KW) for {geo.key}, got {tuple(w.shape)}")
        if b is not None:
            check_array(b, "b", "(C_out,)", 1, backend, xp)
            if tuple(b.shape) != (geo.M,):
                raise ValueError(f"b must have shape ({geo.M},), got {tuple(b.shape)}")
        if tiles is not None:
            if not isinstance(tiles, Tiles) or tiles.precision != "fp32":
                raise TypeError(f"tiles must be labkit.ops.implicit.Tiles of precision 'fp32', got {tiles!r}")
            tiles.check()
        self.geometry, self.activation, self.b, self._w = geo, activation, b, w
        self._act = check_activation(activation, ACTIVATIONS)
        self._kind, self._fixed = xp.ndarray, tiles
        ho, wo = geo.out_hw
        self.out_chw = (geo.M, ho, wo)
        self._x_shape = (geo.C, geo.H, geo.W)
        per_image = max(geo.C * geo.H * geo.W, geo.M * ho * wo)
        if per_image >= INDEX_LIMIT:
            raise ValueError(f"one image of x or y of {geo.key} has {per_image} elements, over the kernels' 32-bit "
                             f"offsets ({INDEX_LIMIT}): split the image")
        self.max_batch = (INDEX_LIMIT - 1) // per_image
        (KH, KW), (SH, SW), (PH, PW), (DH, DW) = geo.kernel, geo.stride, geo.pad, geo.dilation
        rows = axis_phases(geo.H, ho, KH, SH, PH, DH)
        cols = axis_phases(geo.W, wo, KW, SW, PW, DW)
        self.phases = [(r, c) for r in rows for c in cols]
        self.as_conv = self._equivalent_conv(w, b, geo, activation) if tiles is None else None
        # The phases' weights, where the phases run (not where the equivalent convolution does).
        self._weights = {} if self.as_conv is not None else \
            {(r, c): self._phase_weights(r, c) for r, c in self.phases if r.taps and c.taps}
        # What a phase no tap reaches holds: act(bias), or act(0) = 0.
        zero = xp.zeros(geo.M, dtype=xp.float32)
        self._fill = activate(xp, zero if b is None else b, activation).astype(xp.float32)[None, :, None, None]
        self._plans: dict[int, list] = {}

    @staticmethod
    def _equivalent_conv(w, b, geo: TransposeGeometry, activation):
        """The stride-1 layer as a convolution on AutoConv2d (``equivalent_conv``), or None."""
        eq = equivalent_conv(w, geo)
        return None if eq is None else AutoConv2d(eq[0], b, eq[1], activation=activation)

    def _phase_weights(self, rows: AxisPhase, cols: AxisPhase):
        """The phase's forward weights (C_out, C_in/G, taps_h, taps_w), in the implicit GEMM's layout."""
        xp = array_module(self.backend)
        geo, G = self.geometry, self.geometry.groups
        cg, og = geo.C // G, geo.M // G
        sel = self._w[:, :, list(rows.taps)][:, :, :, list(cols.taps)]             # (C_in, og, th, tw)
        sel = sel.reshape(G, cg, og, len(rows.taps), len(cols.taps)).transpose(0, 2, 1, 3, 4)
        return prepare_weights(xp.ascontiguousarray(sel.reshape(geo.M, cg, len(rows.taps), len(cols.taps))), G)

    def phase_layer(self, rows: AxisPhase, cols: AxisPhase) -> ConvLayer:
        """A ConvLayer of the phase's GEMM shape (channels, taps, groups): what tile choices look at."""
        geo = self.geometry
        return ConvLayer(geo.C, geo.H, geo.W, geo.M, max(1, len(rows.taps)), groups=geo.groups,
                         KW=max(1, len(cols.taps)))

    def defines(self, rows: AxisPhase, cols: AxisPhase) -> dict:
        """conv_implicit.cu's compile-time shape of one phase."""
        geo = self.geometry
        ho, wo = geo.out_hw
        return {"LAYER_C": geo.C, "LAYER_H": geo.H, "LAYER_W": geo.W, "LAYER_M": geo.M, "LAYER_G": geo.groups,
                "LAYER_K": len(rows.taps), "LAYER_KW": len(cols.taps), "LAYER_S": 1, "LAYER_SW": 1,
                "LAYER_P": rows.pad, "LAYER_PW": cols.pad, "LAYER_DH": rows.dilation, "LAYER_DW": cols.dilation,
                "LAYER_HO": rows.count, "LAYER_WO": cols.count, "OUT_H": ho, "OUT_W": wo,
                "OUT_SH": geo.stride[0], "OUT_SW": geo.stride[1], "OUT_H0": rows.r, "OUT_W0": cols.r}

    def tiles_for(self) -> Tiles:
        """The untuned tiles: ``default_phase_tiles``."""
        return default_phase_tiles(self.geometry)

    def tuning_candidates(self) -> list[Tiles]:
        """The default tiles, then the implicit GEMM's sweep grid: at most 8 in all, since every
        candidate compiles one module per phase (S_h * S_w of them)."""
        first = self.tiles_for()
        return ([first] + [t for t in candidates(self.phase_layer(*self.phases[0])) if t != first])[:8]

    def launches(self, tiles: Tiles, N: int) -> list[_Phase]:
        """Each phase's launch at a batch of N with these tiles: launch(x, y)."""
        geo = self.geometry
        out = []
        has_bias = int(self.b is not None)
        for rows, cols in self.phases:
            phase = _Phase(rows, cols)
            wt = self._weights.get((rows, cols))
            if wt is not None:
                fn, grid, block = _PLANS.get_or_make(
                    (self.backend, geo, rows, cols, tiles, N),
                    lambda: _phase_plan(self.defines(rows, cols), tiles, N, rows.count * cols.count,
                                        geo.M // geo.groups, geo.groups))
                bias = wt if self.b is None else self.b
                phase.launch = fn.launcher(grid, block, (None, wt, bias, None) + ints(N, has_bias, self._act) +
                                           (wt,) + ints(0))
            out.append(phase)
        return out

    def _tiles_at(self, N: int) -> Tiles:
        if self._fixed is not None:
            return self._fixed
        tiles = self.tuning_candidates()
        configs = [{"tiles": asdict(t)} for t in tiles]
        problem = autotune.Problem("conv_transpose_implicit", ("conv_implicit",),
                                   f"{self.geometry.key}_N{N}_bias{int(self.b is not None)}_act{self._act}",
                                   configs, lambda: _TransposeBench(self, N))
        return tiles[configs.index(autotune.choose(problem))]

    def run(self, phases: list[_Phase], x, y) -> None:
        """Every phase of one batch: the launches, and the bias where no tap reaches."""
        SH, SW = self.geometry.stride
        for p in phases:
            if p.launch is not None:
                p.launch(x, y)
            else:
                y[:, :, p.rows.r::SH, p.cols.r::SW] = self._fill

    def __call__(self, x, out=None):
        if not (fast_input(x, self._kind) and x.shape[1:] == self._x_shape):
            check_array(x, "x", "NCHW", 4, self.backend)
            if tuple(x.shape[1:]) != self._x_shape:
                raise ValueError(f"x must be (N, {', '.join(map(str, self._x_shape))}) for {self.geometry.key}, "
                                 f"got {tuple(x.shape)}")
        N = int(x.shape[0])
        y = output(out, (N,) + self.out_chw, "NCHW", (x, self._w, self.b), backend=self.backend)
        if self.as_conv is not None:
            return self.as_conv(x, y)
        for i in range(0, N, self.max_batch):     # sub-batches past the 32-bit offsets
            n = min(self.max_batch, N - i)
            phases = self._plans.get(n)
            if phases is None:
                phases = self._plans[n] = self.launches(self._tiles_at(n), n)
            self.run(phases, x[i:i + n] if n < N else x, y[i:i + n] if n < N else y)
        return y


_PLANS = PlanCache()


def equivalent_conv(w, geo: TransposeGeometry):
    """(w2, layer): the convolution a stride-1 transposed convolution is, its kernel turned 180 degrees
    and C_in, C_out swapped per group (w2 (C_out, C_in/groups, KH, KW), contiguous, on w's backend),
    its padding D * (K - 1) - P; None at a stride above 1, or a padding past D * (K - 1) (a negative
    padding there), or with an output padding (allowed at stride 1 when dilated: the convolution
    would need more padding at the end than at the start)."""
    pads = [d * (k - 1) - p for k, p, d in zip(geo.kernel, geo.pad, geo.dilation)]
    if tuple(geo.stride) != (1, 1) or min(pads) < 0 or any(geo.output_padding):
        return None
    xp = array_module(backends.current())
    g, cig, cog = geo.groups, geo.C // geo.groups, geo.M // geo.groups
    KH, KW = geo.kernel
    # w2[gi*cog + o, i, kh, kw] = w[gi*cig + i, o, KH-1-kh, KW-1-kw]
    w2 = xp.ascontiguousarray(w.reshape(g, cig, cog, KH, KW).transpose(0, 2, 1, 3, 4)
                              .reshape(geo.M, cig, KH, KW)[:, :, ::-1, ::-1])
    return w2, ConvLayer.of(geo.C, geo.H, geo.W, geo.M, geo.kernel, 1, tuple(pads), geo.dilation, geo.groups)


def _phase_plan(defines: dict, tiles: Tiles, N: int, pixels: int, mg: int, groups: int):
    mod = load("conv_implicit", defines={**defines, **tiles.defines()})
    grid = (cdiv(N * pixels, tiles.bn), cdiv(mg, tiles.bm), groups)
    return mod.get_function("conv_implicit"), grid, (tiles.threads, 1, 1)


class _TransposeBench:
    """The autotuner's data for one transposed convolution at a batch of N."""

    def __init__(self, conv: ConvTranspose2d, N: int):
        xp = backends.xp()
        geo, self.conv, self.N = conv.geometry, conv, N
        rng = xp.random.default_rng()
        self.x = rng.standard_normal((N, geo.C, geo.H, geo.W), dtype=xp.float32)
        self.y = xp.empty((N,) + conv.out_chw, dtype=xp.float32)
        self.idx = sample_positions(xp, self.y.size)
        self.ref, self.terms = conv_transpose_samples(xp, self.x, conv._w, conv.b, geo, self.idx, conv.activation)
        self.tol = 4 * TOLERANCE["fp32"]

    def build(self, config: dict):
        tiles = Tiles(**config["tiles"])
        tiles.check()
        phases = self.conv.launches(tiles, self.N)
        return lambda: self.conv.run(phases, self.x, self.y)

    def check(self, launch) -> str | None:
        return sampled_mismatch(self.y, launch, self.idx, self.ref, self.terms, self.tol)


VARIANTS = ("auto", "implicit")


def conv_transpose2d(x, w, b=None, *, stride=1, pad=0, output_padding=0, dilation=1, groups: int = 1,
                     variant: str = "auto", activation: str | None = None, out=None):
    """y = act(conv_transpose2d(x, w) + b): PyTorch's conv_transpose2d, its semantics and output size.

    x float32 (N, C_in, H, W); w float32 (C_in, C_out/groups, KH, KW) (ConvTranspose2d's layout); b
    (C_out,) or None.  ``stride``, ``pad``, ``output_padding``, ``dilation``: an int or an (h, w) pair.
    ``variant``: "auto" (the phases' tiles autotuned on a GPU) or "implicit" (their default tiles).
    The phase weights are prepared on every call: keep a ``ConvTranspose2d`` to run a layer many times.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(map(repr, VARIANTS))}, got {variant!r}")
    backend = backends.current()
    kind = array_type(backend)
    for a, name, layout in ((x, "x", "NCHW"), (w, "w", "(C_in, C_out/groups, KH, KW)")):
        if not fast_input(a, kind) or a.ndim != 4:
            check_array(a, name, layout, 4, backend)
    _, C, H, W = (int(v) for v in x.shape)
    if int(w.shape[0]) != C:
        raise ValueError(f"w must be (C_in={C}, C_out/groups, KH, KW) for x of {C} channels, got {tuple(w.shape)}")
    geo = TransposeGeometry.of(C, H, W, int(w.shape[1]) * check_int(groups, "groups"),
                               tuple(int(v) for v in w.shape[2:]), stride, pad, output_padding, dilation, groups)
    eq = equivalent_conv(w, geo) if variant == "auto" else None
    if eq is not None:   # stride 1: labkit.conv2d's auto, whose choice per shape is kept across calls
        w2, L = eq
        return rungs.conv2d(x, w2, b, stride=1, pad=L.pad_hw, dilation=L.dilation_hw, groups=L.groups,
                            variant="auto", activation=activation, out=out)
    tiles = default_phase_tiles(geo) if variant == "implicit" else None
    return ConvTranspose2d(w, b, geo, activation=activation, tiles=tiles)(x, out=out)
