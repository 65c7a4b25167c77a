"""The tiling sweep of the depthwise kernel on this GPU; winners go into the tuned table.

    python benchmarks/tune_depthwise.py [--out results/benchmarks] [--batch 32] [--layers features.15 ...]
                                        [--repeat 10] [--write-table]

For each distinct depthwise layer of MobileNetV2 at 224x224 (labkit.ladder.mobilenet.distinct_depthwise),
times every candidate tiling of the tiled rung (labkit.ops.depthwise.tiling_candidates: rows per block, rows per thread,
planes per block), each checked against the float64 reference first, as GPU time per launch (a CUDA
graph of 20 launches, the input L2-warm as in the network), beside the layer's memory floor.  Writes
tune_depthwise.json (every row) and, with --write-table, records the fastest tiling per layer under
this GPU's name in labkit/tuned/depthwise.json, which labkit.ops.depthwise then uses.  Needs a GPU.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit import measure  # noqa: E402
from labkit.ladder import mobilenet as study  # noqa: E402
from labkit.ops.depthwise import tiling_candidates  # noqa: E402
from labkit.tuned import DEPTHWISE, write_entry  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/benchmarks")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--layers", nargs="+")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--write-table", action="store_true")
    args = ap.parse_args()
    dev = labkit.device()
    if not dev.is_gpu:
        print("tune_depthwise needs a GPU (the CPU executor's timings say nothing about one); skipped")
        return 0
    layers = study.distinct_depthwise()
    names = args.layers or list(layers)
    unknown = [n for n in names if n not in layers]
    if unknown:
        print(f"unknown layers {unknown}: choose from {list(layers)}")
        return 2
    rows, best = [], {}
    print(f"{'layer':>12s} {'shape':>16s} {'tilings':>7s} {'default':>8s} {'best':>8s} {'floor':>8s} "
          f"{'x floor':>7s}  best tiling")
    for name in names:
        L = layers[name]
        layer_rows = study.sweep_depthwise(L, args.batch, tiling_candidates(L, args.batch),
                                           repeat=args.repeat)
        for r in layer_rows:
            r["name"] = name
        rows += layer_rows
        win = best[name] = min(layer_rows, key=lambda r: r["median_ms"])
        default = next(r for r in layer_rows if r["default"])
        print(f"{name:>12s} {f'c{L.C} {L.H}x{L.W} s{L.stride}':>16s} {len(layer_rows):7d} "
              f"{default['median_ms']:8.4f} {win['median_ms']:8.4f} {win['floor_ms']:8.4f} "
              f"{win['median_ms'] / win['floor_ms']:7.2f}  rows {win['rows']} planes {win['planes']} "
              f"rpt {win['rpt']} threads {win['threads']}" + (" staged" if win["stage"] else "")
              + (" by rows" if win["by_rows"] else ""))
        if args.write_table:
            write_entry(DEPTHWISE, dev.name, L.key, {k: win[k] for k in ("rows", "planes", "rpt", "threads", "stage", "by_rows",
                                                                          "batch", "median_ms")})
    path = measure.save_rows(rows, Path(args.out) / "tune_depthwise.json",
                             meta={"benchmark": "tune_depthwise", "batch": args.batch,
                                   "layers": {n: layers[n].key for n in names}})
    print(f"wrote {path}" + (f"; tuned table {DEPTHWISE}" if args.write_table else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
