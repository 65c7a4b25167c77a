"""Benchmark of the GEMM ladder (labkit/kernels/gemm.cu) against cuBLAS, same run.

    python benchmarks/gemm_ladder.py [--out results/benchmarks] [--n 4096]

An FP32 SGEMM of n x n x n (TF32 off) for every variant, with two tile shapes for the
register-tiled ones (64x64 blocks of 4x4 per thread, 128x128 blocks of 8x8), each first checked
against a float64 product of a 256-row slice.  Reports median ms, TFLOP/s, % of cuBLAS
(cupy.matmul) measured in this same run, and % of the device's FP32 floor.  Writes
gemm_ladder.json.  Target (H100, n = 4096): the best variant at >= 70% of cuBLAS.
On the CPU executor it runs n = 96 as a smoke test; those times are not GPU timings.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit import measure  # noqa: E402
from labkit.gemm import gemm  # noqa: E402

BIG = {"GEMM_BM": 128, "GEMM_BN": 128, "GEMM_BK": 8, "GEMM_TM": 8, "GEMM_TN": 8}
CASES = {"naive": ("naive", None), "tiled": ("tiled", None),
         "regtile 64/4x4": ("regtile", None), "regtile 128/8x8": ("regtile", BIG),
         "vec 128/8x8": ("vec", BIG), "dbuf 128/8x8": ("dbuf", BIG)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/benchmarks")
    ap.add_argument("--n", type=int)
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    os.environ.setdefault("CUPY_TF32", "0")
    dev = labkit.device()
    xp = labkit.xp
    n = args.n or labkit.sizes(gpu=[4096], cpu=[96])[0]
    rng = np.random.default_rng()
    a_h = rng.standard_normal((n, n), dtype=np.float32)
    b_h = rng.standard_normal((n, n), dtype=np.float32)
    rows_check = min(n, 256)
    ref = a_h[:rows_check].astype(np.float64) @ b_h.astype(np.float64)
    a, b = xp.asarray(a_h), xp.asarray(b_h)
    c = xp.empty((n, n), dtype=xp.float32)
    cost = measure.gemm_cost(n, n, n)
    ceil = dev.ceilings()
    runs = {label: (lambda v=v, p=p: gemm(a, b, variant=v, params=p, out=c)) for label, (v, p) in CASES.items()}
    if dev.is_gpu:
        runs["cuBLAS"] = lambda: xp.matmul(a, b, out=c)
    rows = []
    for label, run in runs.items():
        c.fill(float("nan"))
        run()
        got = c[:rows_check].get() if hasattr(c, "get") else c[:rows_check]
        err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
        if not err < 1e-5:
            print(f"{label} disagrees with the float64 product: {err:.2e}")
            return 1
        t = measure.time_fn(run, warmup=2, repeat=args.repeat)
        tf, _ = measure.achieved(t.median_ms, cost)
        rows.append({"label": label, "n": n, "median_ms": t.median_ms, "min_ms": t.min_ms,
                     "TFLOPs": tf, "pct_of_floor": measure.percent_of_floor(t.median_ms, cost, ceil),
                     "rel_err": err, "device": t.device, "backend": t.backend, "batch": n})
    blas = next((r["median_ms"] for r in rows if r["label"] == "cuBLAS"), None)
    for r in rows:
        r["pct_of_cublas"] = None if blas is None else 100.0 * blas / r["median_ms"]
    path = measure.save_rows(rows, Path(args.out) / "gemm_ladder.json",
                             meta={"benchmark": "gemm_ladder", "n": n, "CUPY_TF32": os.environ["CUPY_TF32"],
                                   "params_big": BIG, "target": ">= 70% of cuBLAS FP32 at n = 4096"})
    print(f"SGEMM {n}^3 on {dev.label}")
    print(f"{'kernel':18s} {'ms':>9s} {'TFLOP/s':>8s} {'% cuBLAS':>9s} {'% floor':>8s}")
    for r in rows:
        pc = "n/a" if r["pct_of_cublas"] is None else f"{r['pct_of_cublas']:.1f}%"
        print(f"{r['label']:18s} {r['median_ms']:9.3f} {r['TFLOPs']:8.2f} {pc:>9s} {r['pct_of_floor']:7.1f}%")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
