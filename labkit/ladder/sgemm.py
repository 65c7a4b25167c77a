"""The GEMM ladder against cuBLAS (notebook 06), and the sweep that fills the GEMM's tuned table.

    rows = sgemm_ladder(4096)                 # every rung at 4096^3 beside cuBLAS, checked first
    print(ladder_table(rows))
    rows, best = sweep_gemm(128, 4096, 9216)  # tile candidates of gemm_dbuf on one shape
    record_gemm(128, 4096, 9216, best, device_name=dev.name, median_ms=...)
"""
from __future__ import annotations

import os
from typing import Iterable, Mapping

import numpy as np

from .. import backends, measure
from ..device_query import device
from ..measure.sweep import progress_bar
from ..ops.gemm import BIG_TILES, gemm, gemm_candidates, gemm_config, splits_for
from ..tuned import GEMM, write_entry
from .harness import checked_time

__all__ = ["LADDER", "BIG_TILES", "sgemm_ladder", "ladder_table", "gemm_candidates", "sweep_gemm", "record_gemm"]

LADDER = {"naive": ("naive", None), "tiled": ("tiled", None),
          "regtile 64/4x4": ("regtile", None), "regtile 128/8x8": ("regtile", BIG_TILES),
          "vec 128/8x8": ("vec", BIG_TILES), "dbuf 128/8x8": ("dbuf", BIG_TILES)}


def _product(M: int, N: int, K: int, rows_check: int):
    """Fresh a (M, K), b (K, N) on the backend, c, and the float64 product of a's first rows."""
    xp = backends.xp()
    rng = np.random.default_rng()
    a_h = rng.standard_normal((M, K), dtype=np.float32)
    b_h = rng.standard_normal((K, N), dtype=np.float32)
    ref = a_h[:rows_check].astype(np.float64) @ b_h.astype(np.float64)
    return xp.asarray(a_h), xp.asarray(b_h), xp.empty((M, N), dtype=xp.float32), ref


def sgemm_ladder(n: int, *, repeat: int = 10, cases: Mapping[str, tuple] = LADDER,
                 default: bool = True) -> list[dict]:
    """An FP32 n x n x n SGEMM on every rung of ``cases``, ``gemm(a, b)`` with its defaults (label
    "gemm() defaults") and, on a GPU, cuBLAS (cupy.matmul, TF32 off), in this same run.  Each is
    checked first against a float64 product of a 256-row slice (AssertionError if off).  Rows: ms,
    TFLOP/s, % of cuBLAS, % of the device's FP32 floor."""
    dev, xp = device(), backends.xp()
    a, b, c, ref = _product(n, n, n, min(n, 256))
    cost, ceil = measure.gemm_cost(n, n, n), dev.ceilings()
    runs = {label: (lambda v=v, p=p: gemm(a, b, variant=v, params=p, splits=1, out=c))
            for label, (v, p) in cases.items()}
    if default:
        runs["gemm() defaults"] = lambda: gemm(a, b, out=c)
    if dev.is_gpu:
        if os.environ.get("CUPY_TF32", "0") != "0":
            raise RuntimeError("CUPY_TF32 is set: cuBLAS would run in TF32, not FP32; unset it")
        runs["cuBLAS"] = lambda: xp.matmul(a, b, out=c)
    rows = []
    for label, run in runs.items():
        t, err = checked_time(label, run, c, ref, tol=1e-5, warmup=2, repeat=repeat, sync=True)
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


def sweep_gemm(M: int, N: int, K: int, *, candidates: Iterable[Mapping] | None = None, repeat: int = 20,
               progress: bool = False) -> tuple[list[dict], dict]:
    """Time gemm_dbuf (split-K as "auto" chooses) on an M x N x K product for every candidate tile
    size, and the current default (``gemm_config``), each checked first; (rows, fastest tiles)."""
    a, b, c, ref = _product(M, N, K, min(M, 64))
    rows = []
    current = gemm_config(M, N, K)
    cands = list(candidates or gemm_candidates(M, N))
    if current[0] == "dbuf" and current[1] not in cands:
        cands.append(current[1])             # the default is always among the contenders
    for p in progress_bar(cands, desc=f"gemm M{M}_N{N}_K{K}", show=progress):
        t, _ = checked_time(f"gemm_dbuf {p}", lambda p=p: gemm(a, b, variant="dbuf", params=p, out=c), c, ref,
                            tol=1e-5, repeat=repeat)
        rows.append({**p, "M": M, "N": N, "K": K, "splits": splits_for(M, N, K, p), "median_ms": t.median_ms,
                     "device": t.device, "default": (current == ("dbuf", p))})
    best = min(rows, key=lambda r: r["median_ms"])
    return rows, {k: best[k] for k in ("GEMM_BM", "GEMM_BN", "GEMM_BK", "GEMM_TM", "GEMM_TN")}


def record_gemm(M: int, N: int, K: int, tiles: Mapping[str, int], *, device_name: str, median_ms: float,
                table=None) -> None:
    """Keep a winner in the GEMM table (labkit/tuned/gemm.json): one entry per GPU name and shape."""
    write_entry(table or GEMM, device_name, f"M{M}_N{N}_K{K}",
                {"variant": "dbuf", **tiles, "median_ms": round(median_ms, 5)})
