"""The GEMM's tile sweep: gemm_dbuf's candidate tiles (split-K as "auto" chooses) on the products the
series runs, each checked against a float64 product first; with --write-table, the fastest tiles per
shape under this GPU's name in labkit/tuned/gemm.json, which gemm()'s defaults (gemm_config) read.

    python benchmarks/tune_gemm.py [--out results/benchmarks] [--write-table]

Shapes: 4096^3 (notebook 06's SGEMM), AlexNet's dense layers at batch 128, Fashion-MNIST's first dense
layer at batch 10,000.  Needs a GPU.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit import measure  # noqa: E402
from labkit.ladder import sgemm  # noqa: E402
from labkit.tuned import GEMM  # noqa: E402

SHAPES = [(4096, 4096, 4096), (128, 4096, 9216), (128, 4096, 4096), (128, 1000, 4096), (10_000, 140, 5184)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/benchmarks")
    ap.add_argument("--write-table", action="store_true")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    dev = labkit.device()
    if not dev.is_gpu:
        print("the tile sweep needs a GPU: the CPU executor's times say nothing about one")
        return 0
    rows = []
    for M, N, K in SHAPES:
        shape_rows, best = sgemm.sweep_gemm(M, N, K, repeat=args.repeat)
        rows += shape_rows
        best_ms = min(r["median_ms"] for r in shape_rows)
        default_ms = next(r["median_ms"] for r in shape_rows if r["default"])
        print(f"M{M}_N{N}_K{K}: best {best} {best_ms:.3f} ms, the rules' default {default_ms:.3f} ms")
        if args.write_table:
            sgemm.record_gemm(M, N, K, best, device_name=dev.name, median_ms=best_ms)
    path = measure.save_rows(rows, Path(args.out) / "tune_gemm.json", meta={"benchmark": "tune_gemm"})
    print(f"wrote {path}" + (f" and {GEMM}" if args.write_table else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
