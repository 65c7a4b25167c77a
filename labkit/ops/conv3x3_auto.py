"""The 3x3 passes of a residual network's training step (stride 1, padding 1) on the kernel and tile
the autotuner finds fastest on this GPU, per batch size.

    fwd = Auto3x3(wt, b, layer, activation="relu", residual=True)     # as SmallConv3x3 / WinogradConv3x3
    y = fwd(x, residual=r)                                            # the first call of a batch size chooses
    dw = AutoWeightGrad3x3(layer)(x, dy, out=dw, bias=db)             # as SmallWeightGrad / WinogradWeightGrad

Each pass (forward, backward data, weight gradient) can run on conv_small's direct kernel or on
Winograd's F(2x2, 3x3), each with many tiles (forward and backward data also on Winograd's
F(2x2, 3x3) as 16 whole-batch GEMMs, conv_winograd_gemm.cu, with a few GEMM tiles, where its
workspace fits); which wins depends on the layer, the batch and the GPU.
The tuned table holds the answers measured on the GPUs it names (labkit/tuned/conv_small.json); on
any other GPU the candidates below are checked against float64 samples and timed once
(labkit.autotune), the winner kept on disk.  Candidates, the table's choice (or the defaults) first:

* this GPU's table choice, or the defaults and the choice ``winograd_pays`` makes;
* every other GPU's table entry for the same shape (a head start: a tile that won on an H100 is a
  good guess on an H200);
* the likeliest tiles of each kernel's space (``direct_candidates``, ``winograd_candidates`` with
  F(2x2) only, ``weight_candidates``, ``winograd_weight_candidates``): about 24 sums a thread and
  256 threads a block first, LIMIT of each; GEMM_TILES GEMM tiles of conv_winograd_gemm.cu.

On the CPU executor, with LABKIT_AUTOTUNE=0 and where the table knows this GPU, the first candidate
runs: what the network ran before it had an autotuner.
"""
from __future__ import annotations

import math
from dataclasses import asdict

from .. import autotune, backends
from ..checks import array_module
from ..reference.samples import activate, conv_samples, sample_positions
from ..shapes import ConvLayer
from ..tuned import CONV_SMALL, lookup, read_table
from .conv_small import (SmallConv3x3, SmallWeightGrad, Tile, WeightTile, check_small_layer, direct_candidates,
                         table_key, tile_for, weight_candidates, weight_tile_for)
from .conv_winograd import WinogradConv3x3, WinogradTile, winograd_candidates, winograd_pays, winograd_tile_for
from .conv_winograd_gemm import WinogradGemm3x3, fits as winograd_gemm_fits, gemm_tiles
from .conv_winograd_wgrad import (WinogradWeightGrad, WinogradWeightTile, winograd_weight_candidates,
                                  winograd_weight_tile_for)
from .implicit import TOLERANCE
from .plans import sampled_mismatch

__all__ = ["Auto3x3", "AutoWeightGrad3x3", "pass_candidates", "untuned_choice", "fits", "LIMIT", "GEMM_TILES"]

LIMIT = 8                       # tiles of each kernel the search times, beyond the table's
GEMM_TILES = 3                  # GEMM tiles of conv_winograd_gemm.cu it times
_TYPICAL_TILES = 4096           # the GEMMs' columns (2x2 tiles of the batch) the tile choice assumes


def _likely(tiles: list, sums, threads, limit: int) -> list:
    """``tiles`` ordered by how far their sums a thread and threads a block are from 24 and 256
    (octaves), the first ``limit``."""
    def score(t):
        return abs(math.log2(sums(t) / 24)) + abs(math.log2(threads(t) / 256))
    return sorted(tiles, key=score)[:limit]


def _table_tiles(key: str, cls) -> list:
    """Every GPU's table entry for ``key`` as a tile of ``cls`` (the head start)."""
    fields = set(asdict(cls()))
    out = []
    for entries in read_table(CONV_SMALL).get("gpus", {}).values():
        e = entries.get(key)
        if e:
            t = cls(**{k: int(v) for k, v in e.items() if k in fields})
            if t not in out:
                out.append(t)
    return out


def untuned_choice(kind: str, C: int, M: int, H: int, W: int) -> dict:
    """What the pass runs untuned: this GPU's table choice between the kernels (``winograd_pays``)
    with its tile, else the direct kernel with the default tile."""
    if kind == "weight":
        use = winograd_pays("weight", C, M, H, W)
        tile = winograd_weight_tile_for(C, M, H, W) if use else weight_tile_for(C, M, H, W)
    else:
        use = winograd_pays(kind, C, M, H, W)
        tile = winograd_tile_for(kind, C, M, H, W) if use else tile_for(kind, C, M, H, W)
    return {"algorithm": "winograd" if use else "direct", "tile": asdict(tile)}


def pass_candidates(kind: str, C: int, M: int, H: int, W: int) -> list[dict]:
    """The configurations of one pass ("forward", "data" or "weight"; C -> M as the kernel sees it),
    {"algorithm": "direct" | "winograd" | "winograd_gemm", "tile": {...}}, the untuned choice first,
    then the tuned tables' tiles, then the kernels' likeliest tiles in turn (winograd_gemm's "tile"
    is gemm.cu's block tile; ``fits`` says at which batch sizes its workspace does)."""
    if kind == "weight":
        spaces = {"direct": _likely(weight_candidates(C, M, H, W), lambda t: t.tm * t.rows,
                                    lambda t: t.threads(), LIMIT),
                  "winograd": _likely(winograd_weight_candidates(C, M, H, W), lambda t: t.rm * t.rc,
                                      lambda t: t.threads(), LIMIT)}
        heads = {"direct": _table_tiles(table_key("weight", C, M, H, W), WeightTile),
                 "winograd": _table_tiles(table_key("winograd_weight", C, M, H, W), WinogradWeightTile)}
    else:
        f2 = [t for t in winograd_candidates(C, M, H, W) if t.f == 2]
        spaces = {"direct": _likely(direct_candidates(C, M, H, W), lambda t: t.l * t.tm, lambda t: t.threads(W),
                                    LIMIT),
                  "winograd": _likely(f2, lambda t: t.rm * t.rt, lambda t: t.threads(W), LIMIT)}
        heads = {"direct": _table_tiles(table_key(kind, C, M, H, W), Tile),
                 "winograd": [t for t in _table_tiles(table_key(f"winograd_{kind}", C, M, H, W), WinogradTile)
                              if t.f == 2]}
        spaces["winograd_gemm"] = gemm_tiles(ConvLayer.of(C, H, W, M, 3, 1, 1), _TYPICAL_TILES, GEMM_TILES)
    # The tables' tiles of every GPU first (a head start), then the two kernels' spaces taken in turn:
    # a search that its budget cuts short (a slow or busy host compiles fewer candidates in the same
    # seconds) has then timed both kernels, not only the first one's tiles.  On an H200 beside three
    # other jobs, with the direct tiles first, the searches kept direct kernels and the 64-channel step
    # ran 21.8 ms instead of 14.4.
    ordered = [("direct", t) for t in heads["direct"]] + [("winograd", t) for t in heads["winograd"]]
    rest = {algorithm: list(tiles) for algorithm, tiles in spaces.items()}
    while any(rest.values()):
        for algorithm in rest:
            if rest[algorithm]:
                ordered.append((algorithm, rest[algorithm].pop(0)))
    out = [untuned_choice(kind, C, M, H, W)]
    for algorithm, t in ordered:
        c = {"algorithm": algorithm, "tile": t if isinstance(t, dict) else asdict(t)}
        if c not in out:
            out.append(c)
    return out


def fits(config: dict, C: int, M: int, H: int, W: int, N: int) -> bool:
    """Whether a configuration runs a pass (C -> M on H x W) at a batch of N: winograd_gemm's only
    where its workspace is within ``workspace_limit()``; the others always."""
    return config["algorithm"] != "winograd_gemm" or winograd_gemm_fits(ConvLayer.of(C, H, W, M, 3, 1, 1), N)


def _flags(layer) -> str:
    return f"act{int(layer.relu)}_res{int(layer.residual)}_gate{int(layer.gate)}"


class Auto3x3:
    """A 3x3 forward or backward-data pass on the autotuner's kernel and tile for each batch size.
    Arguments and calls as ``SmallConv3x3``'s (labkit.ops.conv_small.Conv3x3Layer)."""

    def __init__(self, wt, b, layer, *, activation: str | None = None, residual: bool = False, gate: bool = False,
                 transpose: bool = False):
        self.backend = backends.current()
        self.layer = L = check_small_layer(layer)
        self.kind = "data" if transpose else "forward"
        self.c_in, self.c_out = (L.M, L.C) if transpose else (L.C, L.M)
        self.wt, self.b = wt, b
        self.options = dict(activation=activation, residual=residual, gate=gate, transpose=transpose)
        self.default = self.make(untuned_choice(self.kind, self.c_in, self.c_out, L.H, L.W))
        self._layers: dict[int, object] = {}
        self._made: dict[str, object] = {}

    def make(self, config: dict):
        """The layer of one configuration (made once)."""
        if config["algorithm"] == "winograd_gemm":
            return WinogradGemm3x3(self.wt, self.b, self.layer, tiles=config["tile"], **self.options)
        cls = WinogradConv3x3 if config["algorithm"] == "winograd" else SmallConv3x3
        tile = (WinogradTile if cls is WinogradConv3x3 else Tile)(**config["tile"])
        return cls(self.wt, self.b, self.layer, tile=tile, **self.options)

    def layer_at(self, N: int):
        layer = self._layers.get(N)
        if layer is None:
            L, d = self.layer, self.default
            configs = [c for c in pass_candidates(self.kind, self.c_in, self.c_out, L.H, L.W)
                       if fits(c, self.c_in, self.c_out, L.H, L.W, N)]
            shipped = _this_gpu_knows(self.kind, self.c_in, self.c_out, L.H, L.W)
            problem = autotune.Problem(f"conv3x3_{self.kind}",
                                       ("conv_small", "conv_winograd", "conv_winograd_gemm", "gemm"),
                                       f"C{self.c_in}_M{self.c_out}_H{L.H}_W{L.W}_N{N}_{_flags(d)}", configs,
                                       lambda: _PassBench(self, N), shipped=shipped)
            config = autotune.choose(problem)
            key = repr(sorted(config["tile"].items())) + config["algorithm"]
            layer = self._made.get(key)
            if layer is None:
                layer = self._made[key] = d if config == configs[0] else self.make(config)
            self._layers[N] = layer
        return layer

    def plan(self, N: int):
        return self.layer_at(N).plan(N)

    def __call__(self, x, out=None, *, residual=None, gate=None):
        return self.layer_at(int(x.shape[0]))(x, out, residual=residual, gate=gate)


def _this_gpu_knows(kind: str, C: int, M: int, H: int, W: int) -> bool:
    """Whether this GPU's tuned table has the pass's direct tile (a table is measured whole: its
    Winograd entries beside it)."""
    return lookup(CONV_SMALL, table_key(kind, C, M, H, W)) is not None


class _PassBench:
    """A search's data for a forward or data pass: random x (and residual, gate), a poisoned y, float64
    samples of the right answer (the gate and the activation applied to them)."""

    def __init__(self, auto: Auto3x3, N: int):
        xp = array_module(auto.backend)
        L, self.auto, self.N = auto.layer, auto, N
        rng = xp.random.default_rng()
        shape_in, shape_out = (N, auto.c_in, L.H, L.W), (N, auto.c_out, L.H, L.W)
        self.x = rng.standard_normal(shape_in, dtype=xp.float32)
        self.y = xp.empty(shape_out, dtype=xp.float32)
        d = auto.default
        self.residual = rng.standard_normal(shape_out, dtype=xp.float32) if d.residual else None
        self.gate = rng.standard_normal(shape_out, dtype=xp.float32) if d.gate else None
        # the forward weights (M, C, 3, 3) from (C*9, M); the data pass convolves with them turned and swapped
        w = auto.wt.reshape(L.C, 3, 3, L.M).transpose(3, 0, 1, 2)
        if auto.kind == "data":
            w = w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1]
        plane = ConvLayer.of(auto.c_in, L.H, L.W, auto.c_out, 3, 1, 1)
        self.idx = sample_positions(xp, self.y.size)
        ref, self.terms = conv_samples(xp, self.x, xp.ascontiguousarray(w), auto.b, plane, self.idx, None,
                                       residual=self.residual)
        ref = activate(xp, ref, "relu" if d.relu else None)
        if self.gate is not None:   # 0 where the gate is <= 0; a NaN gate passes the value
            g = self.gate.reshape(-1)[self.idx].astype(xp.float64)
            ref = xp.where(g <= 0, 0.0, ref)
        self.ref, self.tol = ref, 4 * TOLERANCE["fp32"]

    def build(self, config: dict):
        layer = self.auto.make(config)
        layer.plan(self.N)   # compiled here, in the search's threads
        x, y, res, gate = self.x, self.y, self.residual, self.gate
        return lambda: layer(x, y, residual=res, gate=gate)

    def check(self, launch) -> str | None:
        return sampled_mismatch(self.y, launch, self.idx, self.ref, self.terms, self.tol)


class AutoWeightGrad3x3:
    """dL/dw (and dL/db) of a 3x3 layer on the autotuner's kernel and tile for each batch size.
    Arguments and calls as ``SmallWeightGrad``'s."""

    def __init__(self, layer, *, layout: str = "CKKM"):
        self.backend = backends.current()
        self.layer = L = check_small_layer(layer)
        self.layout = layout
        self.default = self.make(untuned_choice("weight", L.C, L.M, L.H, L.W))
        self.out_shape = self.default.out_shape
        self._layers: dict[int, object] = {}
        self._made: dict[str, object] = {}

    def make(self, config: dict):
        if config["algorithm"] == "winograd":
            return WinogradWeightGrad(self.layer, layout=self.layout, tile=WinogradWeightTile(**config["tile"]))
        return SmallWeightGrad(self.layer, layout=self.layout, tile=WeightTile(**config["tile"]))

    def layer_at(self, N: int):
        layer = self._layers.get(N)
        if layer is None:
            L = self.layer
            configs = pass_candidates("weight", L.C, L.M, L.H, L.W)
            problem = autotune.Problem("conv3x3_weight", ("conv_small", "conv_winograd_wgrad"),
                                       f"C{L.C}_M{L.M}_H{L.H}_W{L.W}_N{N}_{self.layout}", configs,
                                       lambda: _WeightBench(self, N),
                                       shipped=_this_gpu_knows("weight", L.C, L.M, L.H, L.W))
            config = autotune.choose(problem)
            key = repr(sorted(config["tile"].items())) + config["algorithm"]
            layer = self._made.get(key)
            if layer is None:
                layer = self._made[key] = self.default if config == configs[0] else self.make(config)
            self._layers[N] = layer
        return layer

    def plan(self, N: int):
        return self.layer_at(N).plan(N)

    def __call__(self, x, dy, out=None, *, bias=None):
        return self.layer_at(int(x.shape[0]))(x, dy, out, bias=bias)


class _WeightBench:
    """A search's data for a weight gradient: random x and dy, poisoned dw and db, and float64 values
    of dw at sampled (c, kh, kw, m) and of db: each a sum over the batch and the plane."""

    SAMPLES = 64

    def __init__(self, auto: AutoWeightGrad3x3, N: int):
        xp = array_module(auto.backend)
        L, self.auto, self.N = auto.layer, auto, N
        rng = xp.random.default_rng()
        self.x = rng.standard_normal((N, L.C, L.H, L.W), dtype=xp.float32)
        self.dy = rng.standard_normal((N, L.M, L.H, L.W), dtype=xp.float32)
        self.dw = xp.empty(auto.out_shape, dtype=xp.float32)
        self.db = xp.empty(L.M, dtype=xp.float32)
        # dw[c, kh, kw, m] = sum over n, h, w of x[n, c, h + kh - 1, w + kw - 1] * dy[n, m, h, w]
        xpad = xp.pad(self.x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        picks = sample_positions(xp, L.C * 9 * L.M, self.SAMPLES)
        c, kh, kw, m = xp.unravel_index(picks, (L.C, 3, 3, L.M))
        ref, terms = [], []
        for ci, hi, wi, mi in zip(*(a.tolist() for a in (c, kh, kw, m))):
            p = xpad[:, ci, hi:hi + L.H, wi:wi + L.W].astype(xp.float64) * self.dy[:, mi].astype(xp.float64)
            ref.append(p.sum())
            terms.append(xp.abs(p).sum())
        self.ref_w, self.terms_w = xp.stack(ref), xp.stack(terms)
        # the sampled positions in dw's layout: (C*9, M) row (c*9 + kh*3 + kw), or (M, C, 3, 3)
        self.idx_w = (((c * 3 + kh) * 3 + kw) * L.M + m) if auto.layout == "CKKM" else (((m * L.C + c) * 3 + kh) * 3 + kw)
        self.ref_b = self.dy.astype(xp.float64).sum(axis=(0, 2, 3))
        self.terms_b = xp.abs(self.dy).astype(xp.float64).sum(axis=(0, 2, 3))
        self.tol = 4 * TOLERANCE["fp32"]

    def build(self, config: dict):
        layer = self.auto.make(config)
        layer.plan(self.N)   # compiled here, in the search's threads
        x, dy, dw, db = self.x, self.dy, self.dw, self.db
        return lambda: layer(x, dy, dw, bias=db)

    def check(self, launch) -> str | None:
        xp = array_module(self.auto.backend)
        self.db.fill(xp.nan)
        wrong = sampled_mismatch(self.dw, launch, self.idx_w, self.ref_w, self.terms_w, self.tol)
        if wrong:
            return f"dw: {wrong}"
        err = xp.abs(self.db.astype(xp.float64) - self.ref_b)
        if bool(xp.isnan(self.db).any()) or bool((err > self.tol * self.terms_b + 1e-30).any()):
            return "db differs from the float64 sums of dy"
        return None
