"""The matrix-multiply ladder from Python: C = act(A @ B + bias), any variant, on the backend in use.

    from labkit.gemm import gemm, gemm_launch_config, VARIANTS
    c = gemm(a, b, bias, variant="dbuf", activation="relu")     # a, b, bias on the backend (labkit.xp)
    grid, block, shared_mem = gemm_launch_config("regtile", M, N, K)

a float32 (M, K), b float32 (K, N), bias float32 (N,) or None, c float32 (M, N), all row-major
(C-contiguous).  Every variant is one kernel of labkit/kernels/gemm.cu:

    naive     one thread per element of C, global memory only
    tiled     GEMM_TILE x GEMM_TILE tiles of A and B in shared memory
    regtile   2-D block tiling: BM x BN tiles of C, TM x TN outputs per thread in registers
    vec       regtile with float4 loads (global and shared), A transposed in shared memory
    dbuf      vec with two shared-memory stages, the next tile loading while this one computes

Beside the ladder, ``gemm_few_rows(a, b, bias)`` for an ``a`` of 1-16 rows (a dense layer at a small
batch), which streams b once.

``params`` overrides the compile-time tile sizes (DEFAULT_PARAMS); each set is compiled once, then
cached.  Every argument is checked before anything is compiled or launched; errors say the fix.
"""
from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np

from . import backends
from .conv import ACTIVATIONS, _check_array
from .loader import load

__all__ = ["gemm", "gemm_few_rows", "few_rows_slices", "ROWS_MAX", "gemm_launch_config", "splits_for",
           "splitk_slices", "VARIANTS", "DEFAULT_PARAMS"]

VARIANTS: tuple[str, ...] = ("naive", "tiled", "regtile", "vec", "dbuf")

# The kernels' compile-time parameters (macros of gemm.cu) and their defaults.
DEFAULT_PARAMS: dict[str, int] = {"GEMM_TILE": 16, "GEMM_BM": 64, "GEMM_BN": 64, "GEMM_BK": 8,
                                  "GEMM_TM": 4, "GEMM_TN": 4}
_TILE_KEYS = ("GEMM_TILE",)                                           # naive, tiled
_BLOCK_KEYS = ("GEMM_BM", "GEMM_BN", "GEMM_BK", "GEMM_TM", "GEMM_TN")  # regtile, vec, dbuf

Dim3 = tuple[int, int, int]


def _params(params: Mapping[str, int] | None) -> dict[str, int]:
    """DEFAULT_PARAMS with `params` on top, checked as gemm.cu's static_asserts would."""
    p = dict(DEFAULT_PARAMS)
    for k, v in (params or {}).items():
        if k not in DEFAULT_PARAMS:
            raise ValueError(f"unknown gemm parameter {k!r}: the parameters are {', '.join(DEFAULT_PARAMS)}")
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{k} must be a positive int, got {v!r}")
        p[k] = int(v)
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
    if 2 * (bm + bn) * bk * 4 > 48 * 1024:
        raise ValueError(f"gemm_dbuf's two stages take 2*(BM+BN)*BK*4 = {2 * (bm + bn) * bk * 4} bytes of "
                         "shared memory, over 48 KiB: use a smaller BM, BN or BK")
    return p


def _check_variant(variant) -> None:
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(map(repr, VARIANTS))}, got {variant!r}")


def gemm_launch_config(variant: str, M: int, N: int, K: int,
                       params: Mapping[str, int] | None = None) -> tuple[Dim3, Dim3, int]:
    """(grid, block, shared_mem bytes) with which ``gemm`` launches a variant.

    naive and tiled: grid (ceil(N/T), ceil(M/T)), block (T, T), T = GEMM_TILE; regtile, vec and dbuf:
    grid (ceil(N/BN), ceil(M/BM)), block ((BM/TM)*(BN/TN),).  shared_mem is 0: the tiles are static.
    """
    _check_variant(variant)
    for name, v in zip("MNK", (M, N, K)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    p = _params(params)
    if variant in ("naive", "tiled"):
        t = p["GEMM_TILE"]
        grid, block = (-(-N // t), -(-M // t), 1), (t, t, 1)
    else:
        bm, bn = p["GEMM_BM"], p["GEMM_BN"]
        grid, block = (-(-N // bn), -(-M // bm), 1), ((bm // p["GEMM_TM"]) * (bn // p["GEMM_TN"]), 1, 1)
    if grid[1] > 65535:
        raise ValueError(f"M={M} needs {grid[1]} row tiles, but grid y holds at most 65535 blocks: "
                         "split a into row blocks and call gemm on each")
    return grid, block, 0


def splits_for(M: int, N: int, K: int, params: Mapping[str, int] | None = None, sms: int | None = None) -> int:
    """How many slices of K ``gemm(..., splits="auto")`` uses: enough blocks for two per SM, each
    slice at least 8 k-tiles deep; 1 when the product has blocks enough (or on the CPU executor)."""
    p = _params(params)
    if sms is None:
        from .device_query import gpu_sm_count
        sms = gpu_sm_count()
    blocks = -(-N // p["GEMM_BN"]) * -(-M // p["GEMM_BM"])
    tiles = -(-K // p["GEMM_BK"])
    return max(1, min(-(-2 * sms // blocks), tiles // 8))


def splitk_slices(K: int, splits: int, params: Mapping[str, int] | None = None) -> int:
    """The slices split-K really makes (none empty): the first dimension of its workspace."""
    tiles = -(-K // _params(params)["GEMM_BK"])
    return -(-tiles // -(-tiles // splits))


def _launch_splitk(mod, a, b, bias, out, M, N, K, p, splits, has_bias, act, workspace):
    """gemm_dbuf_splitk over `splits` slices of K into a workspace, then the reduce with the epilogue."""
    xp = backends.xp()
    per = -(-(-(-K // p["GEMM_BK"])) // splits)     # k-tiles per slice
    splits = splitk_slices(K, splits, p)            # no empty slice
    if workspace is None:
        part = xp.empty((splits, M, N), dtype=xp.float32)
    else:
        if tuple(workspace.shape) != (splits, M, N) or workspace.dtype != np.float32:
            raise ValueError(f"workspace must be float32 {(splits, M, N)} (splitk_slices(K, splits), M, N), "
                             f"got {workspace.dtype} {tuple(workspace.shape)}")
        part = workspace
    grid = (-(-N // p["GEMM_BN"]), -(-M // p["GEMM_BM"]), splits)
    block = ((p["GEMM_BM"] // p["GEMM_TM"]) * (p["GEMM_BN"] // p["GEMM_TN"]), 1, 1)
    mod.get_function("gemm_dbuf_splitk")(grid, block, (a, b, part) + tuple(np.int32(v) for v in (M, N, K, per)))
    _launch_reduce(mod, part, bias, out, M, N, splits, has_bias, act)


def _launch_reduce(mod, part, bias, out, M, N, slices, has_bias, act):
    """gemm_splitk_reduce: out = act(sum of the slices of ``part`` + bias), one thread per element."""
    ints = tuple(np.int32(v) for v in (M, N, slices, has_bias, act))
    mod.get_function("gemm_splitk_reduce")((-(-(M * N) // 256),), (256,), (part, bias, out) + ints)


def _check_operands(a, b, bias, activation, bias_per: str, out):
    """gemm's operands checked (dtype, layout, backend, shapes), before anything is compiled or
    launched; returns M, N, K and the output array (allocated when ``out`` is None)."""
    backend = backends.current()
    xp = backends.xp()
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be None, 'tanh' or 'relu', got {activation!r}")
    _check_array(a, "a", "row-major (M, K)", 2, backend, xp)
    _check_array(b, "b", "row-major (K, N)", 2, backend, xp)
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
        _check_array(bias, "bias", f"({'N' if bias_per == 'column' else 'M'},)", 1, backend, xp)
        if tuple(bias.shape) != want:
            raise ValueError(f"bias must have shape {want}, one value per {what}, got {tuple(bias.shape)}")
    if out is None:
        out = xp.empty((M, N), dtype=xp.float32)
    else:
        _check_array(out, "out", "row-major (M, N)", 2, backend, xp, dtype_fix=(
            f"allocate it with {xp.__name__}.empty({(M, N)}, dtype={xp.__name__}.float32)"))
        if tuple(out.shape) != (M, N):
            raise ValueError(f"out must have shape {(M, N)} (M, N), got {tuple(out.shape)}")
        if not getattr(out.flags, "writeable", True):  # CuPy arrays are always writeable
            raise ValueError("out is read-only: pass a writeable array")
    return M, N, K, out


def gemm(a, b, bias=None, *, variant: str = "regtile", activation: str | None = None, out=None,
         check: str | Iterable[str] | None = None, params: Mapping[str, int] | None = None,
         bias_per: str = "column", splits: int | str = 1, workspace=None):
    """C = act(a @ b + bias) on the backend in use (``labkit.xp`` arrays: cupy on a GPU, numpy on
    the CPU executor).

    Args:
        a: float32 (M, K), C-contiguous.   b: float32 (K, N), C-contiguous.
        bias: float32 (N,), added to every row of the product (``bias_per="column"``, a dense
            layer), or (M,), added to every column (``bias_per="row"``, a convolution computed as
            weights @ columns); or None.
        variant: one of ``VARIANTS``.   activation: None, "tanh" or "relu" (after the bias).
        out: optional float32 (M, N) C-contiguous array on the backend to write (returned).
        check: the CPU executor's checking modes ("memory", "barrier", "shuffle", a list, "all"), as
            for ``labkit.load``; ignored on a GPU.
        params: compile-time tile sizes overriding DEFAULT_PARAMS, e.g. {"GEMM_TM": 8, "GEMM_TN": 8}.
        splits: variant "dbuf" only: split K among this many slices of blocks (partial products
            in a workspace, then one reduce that adds the bias and the activation), for products
            with few rows; "auto" picks it from the GPU's SM count (``splits_for``).
        workspace: split-K's partial products, float32 (splitk_slices(K, splits), M, N); allocated
            per call when None.  Pass one to keep the call free of allocations (a CUDA graph).
    """
    _check_variant(variant)
    M, N, K, out = _check_operands(a, b, bias, activation, bias_per, out)
    p = _params(params)
    if splits == "auto":
        splits = splits_for(M, N, K, p) if variant == "dbuf" else 1
    if isinstance(splits, (bool, np.bool_)) or not isinstance(splits, (int, np.integer)) or splits < 1:
        raise ValueError(f"splits must be a positive int or 'auto', got {splits!r}")
    if splits > 1 and variant != "dbuf":
        raise ValueError(f"splits={splits}: split-K is built on variant 'dbuf', got variant={variant!r}")
    grid, block, shared = gemm_launch_config(variant, M, N, K, p)
    keys = _TILE_KEYS if variant in ("naive", "tiled") else _BLOCK_KEYS
    mod = load("gemm", defines={k: p[k] for k in keys}, check=check)
    # has_bias = 0: the kernel never reads `bias`, but the argument must still be a float array.
    bias_arg = bias if bias is not None else a
    has_bias = 0 if bias is None else (1 if bias_per == "column" else 2)
    if splits > 1:
        _launch_splitk(mod, a, b, bias_arg, out, M, N, K, p, int(splits), has_bias, ACTIVATIONS[activation],
                       workspace)
        return out
    args = (a, b, bias_arg, out) + tuple(np.int32(v) for v in (M, N, K, has_bias,
                                                              ACTIVATIONS[activation]))
    mod.get_function(f"gemm_{variant}")(grid, block, args, shared_mem=shared)
    return out


ROWS_MAX = 16          # gemm_few_rows: at most this many rows of A (GEMM_ROWS of gemm.cu)
_ROWS_COLS = 128       # columns of C per block of gemm_few_rows (a warp of float4s)


def few_rows_slices(M: int, N: int, K: int, sms: int | None = None) -> tuple[int, int]:
    """(slices, k_per_slice) of gemm_few_rows: enough blocks for four per SM, each slice at least 64
    deep (shallower slices make the partial sums cost more than the products); one slice on the
    CPU executor."""
    if sms is None:
        from .device_query import gpu_sm_count
        sms = gpu_sm_count()
    blocks = -(-N // _ROWS_COLS)
    return _slices_of(K, max(1, min(-(-4 * sms // blocks), K // 64)))


def _slices_of(K: int, slices: int) -> tuple[int, int]:
    """(slices, k_per_slice): K cut in about ``slices`` slices of a multiple of 4 (float4 reads of A), none empty."""
    per = -(-(-(-K // slices)) // 4) * 4
    return -(-K // per), per


def gemm_few_rows(a, b, bias=None, *, activation: str | None = None, out=None, slices: int | str = "auto",
                  workspace=None, check: str | Iterable[str] | None = None):
    """C = act(a @ b + bias) for an ``a`` of at most ROWS_MAX rows (a dense layer at a small
    batch): gemm.cu's gemm_few_rows streams b once with float4 loads, many in flight, each block
    taking a slice of K, then gemm_splitk_reduce adds the slices, the bias (one per column) and
    the activation.  Arguments as for ``gemm``; ``slices``: how many slices of K ("auto":
    ``few_rows_slices``); ``workspace``: float32 (slices, M, N) with the slices really made
    (``few_rows_slices(M, N, K)[0]`` for "auto"), allocated per call when None (pass one to keep
    the call free of allocations, as in a CUDA graph)."""
    xp = backends.xp()
    M, N, K, out = _check_operands(a, b, bias, activation, "column", out)
    if M > ROWS_MAX:
        raise ValueError(f"gemm_few_rows takes at most {ROWS_MAX} rows of a, got M={M}: use gemm(variant='dbuf')")
    if slices == "auto":
        slices, per = few_rows_slices(M, N, K)
    elif isinstance(slices, (bool, np.bool_)) or not isinstance(slices, (int, np.integer)) or not 1 <= slices <= K:
        raise ValueError(f"slices must be 'auto' or an int from 1 to K={K}, got {slices!r}")
    else:
        slices, per = _slices_of(K, int(slices))
    if workspace is None:
        workspace = xp.empty((slices, M, N), dtype=xp.float32)
    elif tuple(workspace.shape) != (slices, M, N) or workspace.dtype != np.float32:
        raise ValueError(f"workspace must be float32 {(slices, M, N)} (the slices of K, M, N), "
                         f"got {workspace.dtype} {tuple(workspace.shape)}")
    rows = 1 << (M - 1).bit_length()                     # 1, 2, 4, 8 or 16: one module each
    mod = load("gemm", defines={"GEMM_ROWS": rows}, check=check)
    warps = 8 if rows <= 8 else 4
    mod.get_function("gemm_few_rows")((-(-N // _ROWS_COLS), slices, 1), (32 * warps, 1, 1),
                                      (a, b, workspace) + tuple(np.int32(v) for v in (M, N, K, per)))
    # has_bias = 0: the reduce never reads `bias`, but the argument must still be a float array.
    _launch_reduce(mod, workspace, bias if bias is not None else a, out, M, N, slices, int(bias is not None),
                   ACTIVATIONS[activation])
    return out


# --- the ladder against cuBLAS ---------------------------------------------------------------------

BIG_TILES = {"GEMM_BM": 128, "GEMM_BN": 128, "GEMM_BK": 8, "GEMM_TM": 8, "GEMM_TN": 8}
LADDER = {"naive": ("naive", None), "tiled": ("tiled", None),
          "regtile 64/4x4": ("regtile", None), "regtile 128/8x8": ("regtile", BIG_TILES),
          "vec 128/8x8": ("vec", BIG_TILES), "dbuf 128/8x8": ("dbuf", BIG_TILES)}


def sgemm_ladder(n: int, *, repeat: int = 10, cases: Mapping[str, tuple] = LADDER) -> list[dict]:
    """An FP32 n x n x n SGEMM on every rung of ``cases`` and, on a GPU, cuBLAS (cupy.matmul, TF32
    off), in this same run.  Each is checked first against a float64 product of a 256-row slice
    (AssertionError if off).  Rows: ms, TFLOP/s, % of cuBLAS, % of the device's FP32 floor."""
    import os
    from . import measure
    from .device_query import device

    dev, xp = device(), backends.xp()
    rng = np.random.default_rng()
    a_h = rng.standard_normal((n, n), dtype=np.float32)
    b_h = rng.standard_normal((n, n), dtype=np.float32)
    rows_check = min(n, 256)
    ref = a_h[:rows_check].astype(np.float64) @ b_h.astype(np.float64)
    a, b = xp.asarray(a_h), xp.asarray(b_h)
    c = xp.empty((n, n), dtype=xp.float32)
    cost, ceil = measure.gemm_cost(n, n, n), dev.ceilings()
    runs = {label: (lambda v=v, p=p: gemm(a, b, variant=v, params=p, out=c)) for label, (v, p) in cases.items()}
    if dev.is_gpu:
        if os.environ.get("CUPY_TF32", "0") != "0":
            raise RuntimeError("CUPY_TF32 is set: cuBLAS would run in TF32, not FP32; unset it")
        runs["cuBLAS"] = lambda: xp.matmul(a, b, out=c)
    rows = []
    for label, run in runs.items():
        c.fill(float("nan"))
        run()
        got = c[:rows_check].get() if hasattr(c, "get") else c[:rows_check]
        err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
        if not err < 1e-5:
            raise AssertionError(f"{label} disagrees with the float64 product: {err:.2e}")
        t = measure.time_fn(run, warmup=2, repeat=repeat)
        tf, _ = measure.achieved(t.median_ms, cost)
        rows.append({"label": label, "n": n, "median_ms": t.median_ms, "min_ms": t.min_ms, "TFLOPs": tf,
                     "pct_of_floor": measure.percent_of_floor(t.median_ms, cost, ceil), "rel_err": err,
                     "device": t.device, "backend": t.backend, "batch": n})
    blas = next((r["median_ms"] for r in rows if r["label"] == "cuBLAS"), None)
    for r in rows:
        r["pct_of_cublas"] = None if blas is None else 100.0 * blas / r["median_ms"]
    return rows


def ladder_table(rows: list[dict]) -> str:
    out = [f"{'kernel':18s} {'ms':>9s} {'TFLOP/s':>8s} {'% cuBLAS':>9s} {'% floor':>8s}"]
    for r in rows:
        pc = "n/a" if r["pct_of_cublas"] is None else f"{r['pct_of_cublas']:.1f}%"
        out.append(f"{r['label']:18s} {r['median_ms']:9.3f} {r['TFLOPs']:8.2f} {pc:>9s} {r['pct_of_floor']:7.1f}%")
    return "\n".join(out)
