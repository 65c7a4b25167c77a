"""Benchmark of the GEMM ladder (labkit/kernels/gemm.cu) against cuBLAS, same run.

    python benchmarks/gemm_ladder.py [--out results/benchmarks] [--n 4096]

An FP32 SGEMM of n x n x n (TF32 off) for every variant, with two tile shapes for the
register-tiled ones (64x64 blocks of 4x4 per thread, 128x128 blocks of 8x8), each first checked
against a float64 product of a 256-row slice (labkit.ladder.sgemm.sgemm_ladder).  Reports median ms,
TFLOP/s, % of cuBLAS (cupy.matmul) measured in this same run, and % of the device's FP32 floor.
Writes gemm_ladder.json.  Target (H100, n = 4096): the best variant at >= 70% of cuBLAS.
On the CPU executor it runs n = 96 as a smoke test; those times are not GPU timings.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit import measure  # noqa: E402
from labkit.ladder.sgemm import BIG_TILES, ladder_table, sgemm_ladder  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/benchmarks")
    ap.add_argument("--n", type=int)
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    os.environ.setdefault("CUPY_TF32", "0")
    dev = labkit.device()
    n = args.n or labkit.sizes(gpu=[4096], cpu=[96])[0]
    try:
        rows = sgemm_ladder(n, repeat=args.repeat)
    except AssertionError as exc:
        print(exc)
        return 1
    path = measure.save_rows(rows, Path(args.out) / "gemm_ladder.json",
                             meta={"benchmark": "gemm_ladder", "n": n, "CUPY_TF32": os.environ["CUPY_TF32"],
                                   "params_big": BIG_TILES, "target": ">= 70% of cuBLAS FP32 at n = 4096"})
    print(f"SGEMM {n}^3 on {dev.label}")
    print(ladder_table(rows))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
