"""The matrix-multiply ladder from Python: C = act(A @ B + bias), any variant, on the backend in use.

    c = gemm(a, b, bias, activation="relu")             # tiles chosen by shape (gemm_config)
    c = gemm(a, b, variant="regtile")                   # one rung of the ladder, its default tiles
    layer = Dense(w, b, activation="relu")              # a dense layer: weights prepared once
    grid, block, shared_mem = gemm_launch_config("regtile", M, N, K)

a float32 (M, K), b float32 (K, N), bias float32 (N,) or None, c float32 (M, N), all row-major
(C-contiguous).  Every variant is one kernel of labkit/kernels/gemm.cu:

    naive     one thread per element of C, global memory only
    tiled     GEMM_TILE x GEMM_TILE tiles of A and B in shared memory
    regtile   2-D block tiling: BM x BN tiles of C, TM x TN outputs per thread in registers
    vec       regtile with float4 loads (global and shared), A transposed in shared memory
    dbuf      vec with two shared-memory stages, the next tile loading while this one computes

Beside the ladder, ``gemm_few_rows(a, b, bias)`` for an ``a`` of 1-16 rows (a dense layer at a small
batch), which streams b once.  ``variant="auto"`` (the default) takes the tuned table's choice for
this shape and GPU (labkit/tuned/gemm.json), else ``default_config``'s rules: few rows streamed,
narrow products in narrow tiles, large ones in 128 x 128 tiles, and split-K wherever the grid would
leave SMs idle.  ``params`` overrides the compile-time tile sizes (DEFAULT_PARAMS).  Each shape's
plan (function, grid, block, int32 arguments) is made once; every argument is checked before
anything is compiled or launched, and errors say the fix.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np

from ..errors import check_int
from .. import autotune, backends
from ..backends.cpu import parse_checks
from ..backends.limits import SHARED_MEM_PER_BLOCK
from ..checks import (BASIC_ACTIVATIONS, array_module, array_type, check_activation, check_array, check_no_alias,
                      fast_input, output)
from ..device_query import gpu_sm_count
from ..loader import load
from ..tuned import GEMM, lookup
from ..reference.samples import gemm_samples, sample_positions
from .plans import PlanCache, cdiv, ints, sampled_mismatch

__all__ = ["gemm", "gemm_few_rows", "Dense", "gemm_config", "default_config", "few_rows_slices", "ROWS_MAX",
           "FEW_ROWS", "gemm_launch_config", "splits_for", "splitk_slices", "VARIANTS", "DEFAULT_PARAMS",
           "BIG_TILES", "gemm_candidates", "tuning_candidates", "tuned_gemm", "batched_launcher",
           "ACTIVATIONS"]

VARIANTS: tuple[str, ...] = ("naive", "tiled", "regtile", "vec", "dbuf")
ACTIVATIONS = BASIC_ACTIVATIONS + ("gelu", "gelu_tanh")   # gemm.cu's epilogue (codes 1, 2, 4, 5)

# The kernels' compile-time parameters (macros of gemm.cu) and their defaults.
DEFAULT_PARAMS: dict[str, int] = {"GEMM_TILE": 16, "GEMM_BM": 64, "GEMM_BN": 64, "GEMM_BK": 8,
                                  "GEMM_TM": 4, "GEMM_TN": 4}
_TILE_KEYS = ("GEMM_TILE",)                                           # naive, tiled
_BLOCK_KEYS = ("GEMM_BM", "GEMM_BN", "GEMM_BK", "GEMM_TM", "GEMM_TN")  # regtile, vec, dbuf

# Tiles default_config picks from (measured on the H100 in notebooks 06-08).
BIG_TILES = {"GEMM_BM": 128, "GEMM_BN": 128, "GEMM_BK": 8, "GEMM_TM": 8, "GEMM_TN": 8}       # 74-77% of cuBLAS at 4096^3
MEDIUM_TILES = {"GEMM_BM": 64, "GEMM_BN": 128, "GEMM_BK": 8, "GEMM_TM": 8, "GEMM_TN": 8}
ROWS_16_TILES = {"GEMM_BM": 16, "GEMM_BN": 128, "GEMM_BK": 8, "GEMM_TM": 4, "GEMM_TN": 8}   # 5-16 rows
NARROW_TILES = {"GEMM_BM": 64, "GEMM_BN": 16, "GEMM_BK": 8, "GEMM_TM": 4, "GEMM_TN": 4}     # N <= 16
FEW_ROWS = 4       # up to this many rows, gemm_few_rows streams b (a dense layer at batch 1-4)
ROWS_MAX = 16      # gemm_few_rows: at most this many rows of A (GEMM_ROWS of gemm.cu)
_ROWS_COLS = 128   # columns of C per block of gemm_few_rows (a warp of float4s)

Dim3 = tuple[int, int, int]


def _params(params: Mapping[str, int] | None) -> dict[str, int]:
    """DEFAULT_PARAMS with `params` on top, checked as gemm.cu's static_asserts would."""
    p = dict(DEFAULT_PARAMS)
    for k, v in (params or {}).items():
        if k not in DEFAULT_PARAMS:
            raise ValueError(f"unknown gemm parameter {k!r}: the parameters are {', '.join(DEFAULT_PARAMS)}")
        p[k] = check_int(v, k)
    bm, bn, bk, tm, tn = (p[k] for k in _BLOCK_KEYS)
    if p["GEMM_TILE"] > 32:
        raise ValueError(f"GEMM_TILE must be 1 to 32 (a block of GEMM_TILE^2 threads holds at most 1024), "
                         f"got {p['GEMM_TILE']}")
    if bm % tm or bn % tn:
        raise ValueError(f"GEMM_TM must divide GEMM_BM and GEMM_TN divide GEMM_BN, got BM={bm}, TM={tm}, "
                         f"BN={bn}, TN={tn}")
    if tm % 4 or tn % 4 or bk % 4:
        raise ValueError(f"GEMM_TM, GEMM_TN and GEMM_BK must be multiples of 4 (the float4 versions read "
                         f"rows of 4), got TM={tm}, TN={tn}, BK={bk}")
    if (bm // tm) * (bn // tn) > 1024:
        raise ValueError(f"(BM/TM)*(BN/TN) = {(bm // tm) * (bn // tn)} threads: a block holds at most 1024; "
                         "use larger TM, TN or smaller BM, BN")
    if 2 * (bm + bn) * bk * 4 > SHARED_MEM_PER_BLOCK:
        raise ValueError(f"gemm_dbuf's two stages take 2*(BM+BN)*BK*4 = {2 * (bm + bn) * bk * 4} bytes of "
                         "shared memory, over 48 KiB: use a smaller BM, BN or BK")
    return p


def _check_variant(variant, auto: bool = False) -> None:
    if not isinstance(variant, str) or (variant not in VARIANTS and not (auto and variant == "auto")):
        raise ValueError(f"variant must be {'auto or ' if auto else ''}one of {', '.join(map(repr, VARIANTS))}, "
                         f"got {variant!r}")


def _positive(**sizes) -> None:
    for name, v in sizes.items():
        check_int(v, name)


def gemm_launch_config(variant: str, M: int, N: int, K: int,
                       params: Mapping[str, int] | None = None) -> tuple[Dim3, Dim3, int]:
    """(grid, block, shared_mem bytes) with which ``gemm`` launches a variant.

    naive and tiled: grid (ceil(N/T), ceil(M/T)), block (T, T), T = GEMM_TILE; regtile, vec and dbuf:
    grid (ceil(N/BN), ceil(M/BM)), block ((BM/TM)*(BN/TN),).  shared_mem is 0: the tiles are static.
    """
    _check_variant(variant)
    _positive(M=M, N=N, K=K)
    p = _params(params)
    if variant in ("naive", "tiled"):
        t = p["GEMM_TILE"]
        grid, block = (cdiv(N, t), cdiv(M, t), 1), (t, t, 1)
    else:
        bm, bn = p["GEMM_BM"], p["GEMM_BN"]
        grid, block = (cdiv(N, bn), cdiv(M, bm), 1), ((bm // p["GEMM_TM"]) * (bn // p["GEMM_TN"]), 1, 1)
    if grid[1] > 65535:
        raise ValueError(f"M={M} needs {grid[1]} row tiles, but grid y holds at most 65535 blocks: "
                         "split a into row blocks and call gemm on each")
    return grid, block, 0


# --- the defaults: which kernel and tiles for a shape ---------------------------------------------
def default_config(M: int, N: int, K: int) -> tuple[str, dict | None]:
    """(kernel, tiles) that suit an M x N x K product on any GPU: "few_rows" (gemm_few_rows) up to
    FEW_ROWS rows; else gemm_dbuf with 16-row tiles up to 16 rows, 16-column tiles for N <= 16, one
    column tile covering N up to 160, 128 x 128 tiles from 1024 x 1024 up, 64 x 128 between."""
    if M <= FEW_ROWS:
        return "few_rows", None
    if M <= 16:
        return "dbuf", dict(ROWS_16_TILES)
    if N <= 16:
        return "dbuf", dict(NARROW_TILES)
    if N <= 160 and N % 128:
        return "dbuf", {"GEMM_BM": 64, "GEMM_BN": cdiv(N, 16) * 16, "GEMM_BK": 8, "GEMM_TM": 8, "GEMM_TN": 4}
    if M >= 1024 and N >= 1024:
        return "dbuf", dict(BIG_TILES)
    return "dbuf", dict(MEDIUM_TILES)


def gemm_config(M: int, N: int, K: int, device_name: str | None = None) -> tuple[str, dict | None]:
    """The tuned table's (kernel, tiles) for this shape on this GPU, else ``default_config``'s."""
    entry = lookup(GEMM, f"M{M}_N{N}_K{K}", device_name)
    if entry:
        return entry["variant"], {k: entry[k] for k in _BLOCK_KEYS if k in entry} or None
    return default_config(M, N, K)


def gemm_candidates(M: int, N: int) -> list[dict]:
    """The gemm_dbuf tiles a sweep tries: the defaults' three sizes and their neighbours."""
    out = [dict(BIG_TILES), dict(MEDIUM_TILES), dict(ROWS_16_TILES),
           {"GEMM_BM": 128, "GEMM_BN": 64, "GEMM_BK": 8, "GEMM_TM": 8, "GEMM_TN": 8},
           {"GEMM_BM": 64, "GEMM_BN": 64, "GEMM_BK": 8, "GEMM_TM": 8, "GEMM_TN": 8},
           {"GEMM_BM": 128, "GEMM_BN": 128, "GEMM_BK": 16, "GEMM_TM": 8, "GEMM_TN": 8},
           {"GEMM_BM": 32, "GEMM_BN": 128, "GEMM_BK": 8, "GEMM_TM": 4, "GEMM_TN": 8}]
    return [p for p in out if p["GEMM_BM"] <= max(16, 2 * M) and p["GEMM_BN"] <= max(16, 2 * N)]


def tuning_candidates(M: int, N: int, K: int) -> list[dict]:
    """The autotuner's configurations of an M x N x K product ({"kernel", "tiles", "splits"}), what
    runs untuned first (``gemm_config`` with ``splits_for``'s slices): gemm_few_rows where M allows,
    and gemm_dbuf with each of ``gemm_candidates``' tiles, with one slice and with ``splits_for``'s."""
    def one(kernel, tiles, splits):
        return {"kernel": kernel, "tiles": tiles, "splits": splits}
    kernel, tiles = gemm_config(M, N, K)
    if kernel == "few_rows":
        out = [one("few_rows", None, 0)]
    else:
        p = _params(tiles)
        out = [one(kernel, {k: p[k] for k in _BLOCK_KEYS}, splits_for(M, N, K, p) if kernel == "dbuf" else 1)]
    if M <= ROWS_MAX and one("few_rows", None, 0) not in out:
        out.append(one("few_rows", None, 0))
    for t in gemm_candidates(M, N):
        p = _params(t)
        for n in (splits_for(M, N, K, p), 1):
            c = one("dbuf", {k: p[k] for k in _BLOCK_KEYS}, n)
            if c not in out:
                out.append(c)
    return out


def _plan_of(config: Mapping, M: int, N: int, K: int, has_bias: int, act: int, check) -> "_Plan":
    if config["kernel"] == "few_rows":
        return _few_rows_plan(M, N, K, "auto", has_bias, act, check)
    return _tile_plan(config["kernel"], M, N, K, _params(config["tiles"]), int(config["splits"]), has_bias, act, check)


class _GemmBench:
    """The autotuner's data for one product (labkit.autotune.search.Bench): random operands (or
    the layer's weights), a poisoned output, float64 samples of the right answer."""

    def __init__(self, M: int, N: int, K: int, b, bias, act: str | None, check):
        xp = backends.xp()
        rng = xp.random.default_rng()
        self.a = rng.standard_normal((M, K), dtype=xp.float32)
        self.b = b if b is not None else rng.standard_normal((K, N), dtype=xp.float32)
        self.bias, self.act, self.check_modes, self.shape = bias, act, check, (M, N, K)
        self.y = xp.empty((M, N), dtype=xp.float32)
        self.idx = sample_positions(xp, M * N)
        self.ref, self.terms = gemm_samples(xp, self.a, self.b, bias, self.idx, act)

    def build(self, config: dict):
        M, N, K = self.shape
        plan = _plan_of(config, M, N, K, int(self.bias is not None), check_activation(self.act, ACTIVATIONS),
                        self.check_modes)
        launch, reduce = plan.bind(self.b, self.a if self.bias is None else self.bias)
        a, y = self.a, self.y
        if reduce is None:
            return lambda: launch(a, y)
        ws = backends.xp().empty(plan.workspace_shape, dtype=np.float32)

        def run():
            launch(a, ws)
            reduce(ws, y)
        return run

    def check(self, launch) -> str | None:
        return sampled_mismatch(self.y, launch, self.idx, self.ref, self.terms, 1e-4)


def tuned_gemm(M: int, N: int, K: int, *, b=None, bias=None, activation: str | None = None, check=None) -> dict:
    """The configuration ({"kernel", "tiles", "splits"}) an M x N x K product runs with on this GPU:
    the autotuner's (labkit.autotune) among ``tuning_candidates``; ``b``, ``bias``: a layer's own
    operands for the search (random ones where None)."""
    configs = tuning_candidates(M, N, K)
    problem = autotune.Problem("gemm", ("gemm",), f"M{M}_N{N}_K{K}_bias{int(bias is not None)}", configs,
                               lambda: _GemmBench(M, N, K, b, bias, activation, check),
                               lookup(GEMM, f"M{M}_N{N}_K{K}") is not None)
    return autotune.choose(problem)


def splits_for(M: int, N: int, K: int, params: Mapping[str, int] | None = None, sms: int | None = None) -> int:
    """How many slices of K ``gemm(..., splits="auto")`` uses: enough blocks for two per SM, each
    slice at least 8 k-tiles deep; 1 when the product has blocks enough (or on the CPU executor)."""
    p = _params(params)
    sms = gpu_sm_count() if sms is None else sms
    blocks = cdiv(N, p["GEMM_BN"]) * cdiv(M, p["GEMM_BM"])
    tiles = cdiv(K, p["GEMM_BK"])
    return max(1, min(cdiv(2 * sms, blocks), tiles // 8))


def splitk_slices(K: int, splits: int, params: Mapping[str, int] | None = None) -> int:
    """The slices split-K really makes (none empty): the first dimension of its workspace."""
    tiles = cdiv(K, _params(params)["GEMM_BK"])
    return cdiv(tiles, cdiv(tiles, splits))


def few_rows_slices(M: int, N: int, K: int, sms: int | None = None) -> tuple[int, int]:
    """(slices, k_per_slice) of gemm_few_rows: enough blocks for four per SM, each slice at least 64
    deep (shallower slices make the partial sums cost more than the products); one slice on the
    CPU executor."""
    sms = gpu_sm_count() if sms is None else sms
    return _slices_of(K, max(1, min(cdiv(4 * sms, cdiv(N, _ROWS_COLS)), K // 64)))


def _slices_of(K: int, slices: int) -> tuple[int, int]:
    """(slices, k_per_slice): K cut in about ``slices`` slices of a multiple of 4 (float4 reads of A), none empty."""
    per = cdiv(cdiv(K, slices), 4) * 4
    return cdiv(K, per), per


# --- plans ----------------------------------------------------------------------------------------
@dataclass
class _Plan:
    """One product shape, ready to launch: one kernel (tail: its int32 arguments), or two (split-K and
    few rows: the partial products into a workspace, then the reduce with the bias and activation)."""
    main: tuple                # (kernel function, grid, block): the GEMM, or split-K's slices
    tail: tuple
    out_shape: tuple
    workspace_shape: tuple | None = None
    reduce: tuple | None = None     # (function, grid, block) of gemm_splitk_reduce
    reduce_tail: tuple = ()
    kernel: str = ""

    def __post_init__(self) -> None:
        self.launch, self.launch_reduce = self.bind(None, None)

    def bind(self, b, bias):
        """(launch, launch of the reduce or None) with b and bias fixed where given (None: per call).
        One kernel: launch(a, [b, bias,] out); split: launch(a, [b,] workspace), reduce(workspace, [bias,] out)."""
        fn, grid, block = self.main
        if self.reduce is None:
            return fn.launcher(grid, block, (None, b, bias, None) + self.tail), None
        rfn, rgrid, rblock = self.reduce
        return (fn.launcher(grid, block, (None, b, None) + self.tail),
                rfn.launcher(rgrid, rblock, (None, bias, None) + self.reduce_tail))

    def run(self, a, b, bias, out, workspace) -> None:
        if self.reduce is None:
            self.launch(a, b, bias, out)
        else:
            self.launch(a, b, workspace)
            self.launch_reduce(workspace, bias, out)


def _reduce(mod, M: int, N: int, slices: int, has_bias: int, act: int) -> tuple[tuple, tuple]:
    """gemm_splitk_reduce: out = act(sum of the slices + bias), one thread per element."""
    return ((mod.get_function("gemm_splitk_reduce"), (cdiv(M * N, 256),), (256,)),
            ints(M, N, slices, has_bias, act))


# The ladder's teaching versions left out of the modules the dense layers and the autotuner build
# (NVRTC builds a third faster).  On the GPU only: the CPU executor makes an entry point for every
# kernel the file declares, whatever the preprocessor keeps.
def _tuned_only() -> dict:
    return {"GEMM_TUNED_ONLY": 1} if backends.current() == "cuda" else {}


def _tile_plan(variant, M, N, K, p, splits, has_bias, act, check) -> _Plan:
    keys = _TILE_KEYS if variant in ("naive", "tiled") else _BLOCK_KEYS
    defines = {k: p[k] for k in keys}
    if variant == "dbuf":
        defines.update(_tuned_only())
    mod = load("gemm", defines=defines, check=check)
    grid, block, _shared = gemm_launch_config(variant, M, N, K, p)
    if splits == 1:
        return _Plan((mod.get_function(f"gemm_{variant}"), grid, block), ints(M, N, K, has_bias, act), (M, N),
                     kernel=f"gemm_{variant}")
    per = cdiv(cdiv(K, p["GEMM_BK"]), splits)        # k-tiles per slice
    slices = splitk_slices(K, splits, p)             # no empty slice
    reduce, tail = _reduce(mod, M, N, slices, has_bias, act)
    return _Plan((mod.get_function("gemm_dbuf_splitk"), (grid[0], grid[1], slices), block), ints(M, N, K, per),
                 (M, N), (slices, M, N), reduce, tail, kernel="gemm_dbuf_splitk")


def batched_launcher(M: int, N: int, K: int, batch: int, params: Mapping[str, int] | None = None):
    """``launch(a, b, c)``: ``batch`` products c[z] = a[z] @ b[z] (a (batch, M, K), b (batch, K, N),
    c (batch, M, N), float32, C-contiguous) on gemm_dbuf_batched with the block tile ``params``
    (GEMM_BM, ... as gemm's; None: the defaults).  No bias, no activation; the caller's arrays are
    its to check (Winograd's transforms, labkit.ops.conv_winograd_gemm, are made for it)."""
    _positive(M=M, N=N, K=K, batch=batch)
    p = _params(params)
    mod = load("gemm", defines={**{k: p[k] for k in _BLOCK_KEYS}, **_tuned_only()})
    grid, block, _shared = gemm_launch_config("dbuf", M, N, K, p)
    strides = tuple(np.int64(s) for s in (M * K, K * N, M * N))
    return mod.get_function("gemm_dbuf_batched").launcher((grid[0], grid[1], batch), block,
                                                          (None, None, None) + ints(M, N, K) + strides)


def _few_rows_plan(M, N, K, slices, has_bias, act, check) -> _Plan:
    if slices == "auto":
        slices, per = few_rows_slices(M, N, K)
    else:
        slices, per = _slices_of(K, int(slices))
    rows = 1 << (M - 1).bit_length()                     # 1, 2, 4, 8 or 16: one module each
    mod = load("gemm", defines={"GEMM_ROWS": rows, **_tuned_only()}, check=check)
    warps = 8 if rows <= 8 else 4
    reduce, tail = _reduce(mod, M, N, slices, has_bias, act)
    return _Plan((mod.get_function("gemm_few_rows"), (cdiv(N, _ROWS_COLS), slices, 1), (32 * warps, 1, 1)),
                 ints(M, N, K, per), (M, N), (slices, M, N), reduce, tail, kernel="gemm_few_rows")


def _check_operands(a, b, bias, activation, bias_per: str, backend: str):
    """gemm's operands checked (dtype, layout, backend, shapes), before anything is compiled or
    launched; returns M, N, K."""
    xp = array_module(backend)
    check_activation(activation, ACTIVATIONS)
    check_array(a, "a", "row-major (M, K)", 2, backend, xp)
    check_array(b, "b", "row-major (K, N)", 2, backend, xp)
    M, K = (int(v) for v in a.shape)
    Kb, N = (int(v) for v in b.shape)
    if Kb != K:
        hint = (f"; b looks transposed: pass {xp.__name__}.ascontiguousarray(b.T)" if N == K else "")
        raise ValueError(f"inner dimensions differ: a is (M, K) = {tuple(a.shape)} but b is "
                         f"{tuple(b.shape)}; b must be (K, N) with K={K} rows{hint}")
    if bias_per not in ("column", "row"):
        raise ValueError(f"bias_per must be 'column' or 'row', got {bias_per!r}")
    if bias is not None:
        want, what = ((N,), "column of b") if bias_per == "column" else ((M,), "row of a")
        check_array(bias, "bias", f"({'N' if bias_per == 'column' else 'M'},)", 1, backend, xp)
        if tuple(bias.shape) != want:
            raise ValueError(f"bias must have shape {want}, one value per {what}, got {tuple(bias.shape)}")
    return M, N, K


def _check_splits(splits, variant: str) -> None:
    if splits == "auto":
        return
    if isinstance(splits, (bool, np.bool_)) or not isinstance(splits, (int, np.integer)) or splits < 1:
        raise ValueError(f"splits must be a positive int or 'auto', got {splits!r}")
    if splits > 1 and variant != "dbuf":
        raise ValueError(f"splits={splits}: split-K is built on variant 'dbuf', got variant={variant!r}")


def _workspace(plan: _Plan, workspace, xp):
    """Split-K's partial products: the caller's (checked), or allocated for this call."""
    if plan.workspace_shape is None:
        return None
    if workspace is None:
        return xp.empty(plan.workspace_shape, dtype=xp.float32)
    if tuple(workspace.shape) != plan.workspace_shape or workspace.dtype != np.float32:
        raise ValueError(f"workspace must be float32 {plan.workspace_shape} (the slices of K, M, N), got "
                         f"{workspace.dtype} {tuple(workspace.shape)}")
    return workspace


_PLANS = PlanCache()


def _plan_key(backend, kernel, a, b, bias, activation, params, bias_per, splits, check):
    return (backend, kernel, getattr(a, "shape", None), getattr(b, "shape", None),
            None if bias is None else getattr(bias, "shape", None), activation,
            None if params is None else frozenset(params.items()) if isinstance(params, Mapping) else params,
            bias_per, splits, None if backend == "cuda" else parse_checks(check))


def _lookup(key):
    try:
        return _PLANS.get(key)
    except TypeError:      # an unhashable option: the checks name it
        return None


def gemm(a, b, bias=None, *, variant: str = "auto", activation: str | None = None, out=None,
         check: str | Iterable[str] | None = None, params: Mapping[str, int] | None = None,
         bias_per: str = "column", splits: int | str = "auto", workspace=None):
    """C = act(a @ b + bias) on the backend in use (``labkit.xp`` arrays: cupy on a GPU, numpy on
    the CPU executor).

    Args:
        a: float32 (M, K), C-contiguous.   b: float32 (K, N), C-contiguous.
        bias: float32 (N,), added to every row of the product (``bias_per="column"``, a dense
            layer), or (M,), added to every column (``bias_per="row"``, a convolution computed as
            weights @ columns); or None.
        variant: "auto" (the autotuner's kernel, tiles and slices for this shape on a GPU, among
            ``tuning_candidates``; the tuned table's or ``default_config``'s first),
            or one of ``VARIANTS``.   activation: None, "tanh", "relu", "gelu" or "gelu_tanh" (after
            the bias).
        out: optional float32 (M, N) C-contiguous array on the backend to write (returned); it must
            not overlap a, b or bias.
        check: the CPU executor's checking modes ("memory", "barrier", "shuffle", a list, "all"), as
            for ``labkit.load``; ignored on a GPU.
        params: compile-time tile sizes overriding DEFAULT_PARAMS (or "auto"'s), e.g.
            {"GEMM_TM": 8, "GEMM_TN": 8}.
        splits: split K among this many slices of blocks (partial products in a workspace, then one
            reduce that adds the bias and the activation), variant "dbuf" only; "auto" (default)
            splits only where the grid would leave SMs idle (``splits_for``).
        workspace: split-K's partial products, float32 (splitk_slices(K, splits), M, N); allocated
            per call when None.  Pass one to keep the call free of allocations (a CUDA graph).
    """
    backend = backends.current()
    kind = array_type(backend)
    ok = fast_input(a, kind) and fast_input(b, kind) and (bias is None or fast_input(bias, kind))
    key = _plan_key(backend, variant, a, b, bias, activation, params, bias_per, splits, check)
    plan = _lookup(key) if ok else None
    if plan is None:
        _check_variant(variant, auto=True)
        M, N, K = _check_operands(a, b, bias, activation, bias_per, backend)
        _check_splits(splits, "dbuf" if variant == "auto" else variant)
        act = check_activation(activation, ACTIVATIONS)
        has_bias = 0 if bias is None else (1 if bias_per == "column" else 2)
        if variant == "auto" and splits == "auto" and params is None and bias_per == "column":
            plan = _plan_of(tuned_gemm(M, N, K, bias=bias, activation=activation, check=check), M, N, K, has_bias,
                            act, check)
        else:
            kernel, auto_params = gemm_config(M, N, K) if variant == "auto" else (variant, None)
            if kernel == "few_rows" and (bias_per != "column" or splits not in ("auto", 1) or params is not None):
                kernel, auto_params = "dbuf", dict(ROWS_16_TILES)   # what gemm_few_rows cannot do
            if kernel == "few_rows":
                plan = _few_rows_plan(M, N, K, "auto", has_bias, act, check)
            else:
                p = _params({**(auto_params or {}), **(params or {})})
                n = (splits_for(M, N, K, p) if kernel == "dbuf" else 1) if splits == "auto" else int(splits)
                plan = _tile_plan(kernel, M, N, K, p, n, has_bias, act, check)
        _PLANS[key] = plan
    y = output(out, plan.out_shape, "row-major (M, N)", (a, b, bias), backend=backend)
    # has_bias = 0: the kernel never reads `bias`, but the argument must still be a float array.
    plan.run(a, b, a if bias is None else bias, y, _workspace(plan, workspace, array_module(backend)))
    return y


def gemm_few_rows(a, b, bias=None, *, activation: str | None = None, out=None, slices: int | str = "auto",
                  workspace=None, check: str | Iterable[str] | None = None):
    """C = act(a @ b + bias) for an ``a`` of at most ROWS_MAX rows (a dense layer at a small
    batch): gemm.cu's gemm_few_rows streams b once with float4 loads, many in flight, each block
    taking a slice of K, then gemm_splitk_reduce adds the slices, the bias (one per column) and
    the activation.  Arguments as for ``gemm``; ``slices``: how many slices of K ("auto":
    ``few_rows_slices``); ``workspace``: float32 (slices, M, N) with the slices really made
    (``few_rows_slices(M, N, K)[0]`` for "auto"), allocated per call when None (pass one to keep
    the call free of allocations, as in a CUDA graph)."""
    backend = backends.current()
    kind = array_type(backend)
    ok = fast_input(a, kind) and fast_input(b, kind) and (bias is None or fast_input(bias, kind))
    key = _plan_key(backend, "few_rows", a, b, bias, activation, None, "column", slices, check)
    plan = _lookup(key) if ok else None
    if plan is None:
        M, N, K = _check_operands(a, b, bias, activation, "column", backend)
        if M > ROWS_MAX:
            raise ValueError(f"gemm_few_rows takes at most {ROWS_MAX} rows of a, got M={M}: use gemm(variant='dbuf')")
        if slices != "auto" and (isinstance(slices, (bool, np.bool_)) or not isinstance(slices, (int, np.integer))
                                 or not 1 <= slices <= K):
            raise ValueError(f"slices must be 'auto' or an int from 1 to K={K}, got {slices!r}")
        plan = _PLANS[key] = _few_rows_plan(M, N, K, slices, int(bias is not None),
                                            check_activation(activation, ACTIVATIONS), check)
    y = output(out, plan.out_shape, "row-major (M, N)", (a, b, bias), backend=backend)
    plan.run(a, b, a if bias is None else bias, y, _workspace(plan, workspace, array_module(backend)))
    return y


class Dense:
    """A dense layer y = act(x @ w + b), its weights on the backend and a plan per number of rows.

        fc = Dense(w, b, activation="relu")     # w float32 (in, out), b (out,) or None; copied once
        y = fc(x)                               # x float32 (rows, in) -> (rows, out)

    Each number of rows gets the kernel and tiles of ``gemm_config`` (streaming the weights for a
    few rows, split-K where the grid would leave SMs idle), and its own split-K workspace, made
    once (and the workspace at the first call that needs it): a call then allocates nothing but its
    output (pass ``out`` to avoid that too).  ``workspace``: one of the plan's shape instead of the
    layer's own (two streams running the same layer at once need one each, and a CUDA graph one
    that outlives it: a model's plan passes its own).
    """

    def __init__(self, w, b=None, *, activation: str | None = None, check: str | Iterable[str] | None = None):
        self.backend = backends.current()
        xp = array_module(self.backend)
        check_activation(activation, ACTIVATIONS)
        check_array(w, "w", "(in, out)", 2, self.backend, xp)
        K, N = (int(v) for v in w.shape)
        if b is not None:
            check_array(b, "b", "(out,)", 1, self.backend, xp)
            if tuple(b.shape) != (N,):
                raise ValueError(f"b must have shape ({N},), one value per output of w (in, out), got {tuple(b.shape)}")
        self.w, self.b = xp.array(w), None if b is None else xp.array(b)
        self.activation, self.check = activation, check
        self.in_features, self.out_features = K, N
        self._kind = xp.ndarray
        self._plans: dict[int, tuple[_Plan, object]] = {}

    def plan(self, rows: int) -> _Plan:
        """The plan for ``rows`` rows (made on first use, with its workspace)."""
        if rows not in self._plans:
            K, N = self.in_features, self.out_features
            act, has_bias = check_activation(self.activation, ACTIVATIONS), int(self.b is not None)
            config = tuned_gemm(rows, N, K, b=self.w, bias=self.b, activation=self.activation, check=self.check)
            p = _plan_of(config, rows, N, K, has_bias, act, self.check)
            # [plan, the layer's own workspace (made on first use), launch, launch of the reduce]
            self._plans[rows] = [p, None, *p.bind(self.w, self.b if self.b is not None else self.w)]
        return self._plans[rows][0]

    def __call__(self, x, out=None, workspace=None):
        """act(x @ w + b) of float32 x (rows, in); ``out``: (rows, out) to write (not overlapping x)."""
        shape = x.shape if fast_input(x, self._kind) else None
        if shape is None or len(shape) != 2 or shape[1] != self.in_features:
            check_array(x, "x", "(rows, in)", 2, self.backend)
            if x.shape[1] != self.in_features:
                raise ValueError(f"x must have {self.in_features} columns (the layer's inputs), got shape "
                                 f"{tuple(x.shape)}")
            shape = x.shape
        rows = shape[0]
        entry = self._plans.get(rows)
        if entry is None:
            self.plan(rows)
            entry = self._plans[rows]
        p, ws, launch, reduce = entry
        y = output(out, p.out_shape, "row-major (rows, out)", (x, self.w, self.b), backend=self.backend)
        if reduce is None:
            launch(x, y)
            return y
        if workspace is not None:
            ws = _workspace(p, workspace, None)
            check_no_alias(ws, (x, y), "workspace")
        elif ws is None:
            ws = entry[1] = _workspace(p, None, array_module(self.backend))
        launch(x, ws)
        reduce(ws, y)
        return y

    def workspace_shape(self, rows: int) -> tuple | None:
        """Split-K's partial products at ``rows`` rows: (slices, rows, out), or None."""
        return self.plan(rows).workspace_shape
