"""The tile-size sweep of the implicit-GEMM kernels on this GPU; winners go into the tuned table.

    python benchmarks/tune_implicit.py [--out results/benchmarks] [--batch 128] [--precision fp32 tf32]
                                      [--layers conv1 conv2 ...] [--write-table]

For each of AlexNet's five convolutions (labkit.shapes.ALEXNET_CONVS) and each precision, times
every candidate tile size (labkit.ops.implicit.candidates), each checked against the float64 reference
first.  Writes tune_implicit.json (every row) and, with --write-table, records the fastest tiles per
layer and precision under this GPU's name in labkit/tuned/conv_implicit.json.  Needs a GPU.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit import measure
from labkit.ladder import implicit as study
from labkit.ops import implicit  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/benchmarks")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--precision", nargs="+", default=list(implicit.PRECISIONS), choices=implicit.PRECISIONS)
    ap.add_argument("--layers", nargs="+", default=list(implicit.ALEXNET_CONVS), choices=list(implicit.ALEXNET_CONVS))
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--write-table", action="store_true")
    args = ap.parse_args()
    dev = labkit.device()
    if not dev.is_gpu:
        print("tune_implicit needs a GPU (the CPU executor's timings say nothing about one); skipped")
        return 0
    rows = []
    for name in args.layers:
        L = implicit.ALEXNET_CONVS[name]
        for prec in args.precision:
            layer_rows, best = study.sweep_implicit(L, args.batch, prec, repeat=args.repeat, progress=False)
            rows += [dict(r, layer_name=name) for r in layer_rows]
            best_ms = min(r["median_ms"] for r in layer_rows)
            default = implicit.default_tiles(L, prec)
            dflt = next((r["median_ms"] for r in layer_rows if r["tiles"] == default.short()), None)
            print(f"{name} {prec}: best {best.short()} {best_ms:.3f} ms; default {default.short()} "
                  f"{'not in the grid' if dflt is None else f'{dflt:.3f} ms'} ({len(layer_rows)} candidates)",
                  flush=True)
            for r in sorted(layer_rows, key=lambda r: r["median_ms"])[:4]:
                print(f"    {r['tiles']:22s} {r['median_ms']:.3f} ms")
            if args.write_table:
                study.record_tiles(L, best, device_name=dev.name, median_ms=best_ms, batch=args.batch)
    path = measure.save_rows(rows, Path(args.out) / "tune_implicit.json",
                             meta={"benchmark": "tune_implicit", "batch": args.batch,
                                   "layers": {n: implicit.ALEXNET_CONVS[n].key for n in args.layers}})
    print(f"wrote {path}" + (f" and {implicit.TABLE}" if args.write_table else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
