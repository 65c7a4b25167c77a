"""The tile-size sweep of the implicit-GEMM kernels on this GPU; winners go into the tuned table.

    python benchmarks/tune_implicit.py [--out results/benchmarks] [--batch 128] [--precision fp32 tf32]
                                      [--layers conv1 conv2 ...] [--network alexnet|mobilenet]
                                      [--jobs 8] [--write-table]

For each of AlexNet's five convolutions (labkit.shapes.ALEXNET_CONVS) -- or, with --network mobilenet,
each distinct GEMM layer of MobileNetV2 at 224x224 (the stem, the 1x1 expansions, projections and
head; labkit.ladder.mobilenet.gemm_layers) with its own candidate grid -- and each precision, times
every candidate tile size (labkit.ops.implicit.candidates), each checked against the float64 reference
first.  ``--jobs``: compile the candidates in that many processes first (NVRTC, into CuPy's cache
on disk), so that the sweep itself loads them.  Writes tune_implicit.json (every row) and, with --write-table, records the fastest tiles per
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
from labkit.ladder import mobilenet  # noqa: E402
from labkit.ops import implicit  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/benchmarks")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--precision", nargs="+", default=list(implicit.PRECISIONS), choices=implicit.PRECISIONS)
    ap.add_argument("--layers", nargs="+")
    ap.add_argument("--network", default="alexnet", choices=("alexnet", "mobilenet"))
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--write-table", action="store_true")
    args = ap.parse_args()
    dev = labkit.device()
    if not dev.is_gpu:
        print("tune_implicit needs a GPU (the CPU executor's timings say nothing about one); skipped")
        return 0
    layers = dict(implicit.ALEXNET_CONVS) if args.network == "alexnet" else mobilenet.gemm_layers()
    names = args.layers or list(layers)
    unknown = [n for n in names if n not in layers]
    if unknown:
        print(f"unknown layers {unknown}: choose from {list(layers)}")
        return 2
    grid = {(n, prec): (implicit.candidates(layers[n], prec) if args.network == "alexnet"
                        else study.gemm_candidates(layers[n], prec)) for n in names for prec in args.precision}
    if args.jobs > 1:
        study.precompile([(layers[n], t) for (n, _p), ts in grid.items() for t in ts], args.batch, args.jobs)
    rows = []
    for name in names:
        L = layers[name]
        for prec in args.precision:
            layer_rows, best = study.sweep_implicit(L, args.batch, prec, tiles=grid[(name, prec)],
                                                    repeat=args.repeat, progress=False)
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
                                   "network": args.network, "layers": {n: layers[n].key for n in names}})
    print(f"wrote {path}" + (f" and {implicit.TABLE}" if args.write_table else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
