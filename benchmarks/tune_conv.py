"""The launch-parameter sweep of conv_tuned.cu on this GPU; winners go into the tuned table.

    python benchmarks/tune_conv.py [--out results/benchmarks] [--batch 10000] [--write-table]

For each of the seed model's two layer shapes, times every candidate configuration
(labkit.ops.tuned_config.candidates: threads per block, images per block, outputs per thread, weights in
constant or shared memory), each checked against the float64 reference first.  Writes
tune_conv.json (every row) and, with --write-table, records the fastest configuration per layer
under this GPU's name in labkit/tuned/conv_tuned.json.  Needs a GPU: the point is its timings.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit import measure
from labkit.ladder import tuning as study
from labkit.ops import tuned_config as tuning  # noqa: E402

LAYERS = {"layer 1": dict(C=1, H=48, W=48, M=6, K=5),
          "layer 2": dict(C=6, H=22, W=22, M=16, K=5)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/benchmarks")
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--write-table", action="store_true")
    args = ap.parse_args()
    dev = labkit.device()
    if not dev.is_gpu:
        print("tune_conv needs a GPU (the CPU executor's timings say nothing about one); skipped")
        return 0
    rows = []
    for name, L in LAYERS.items():
        # Constant-weight kernels unroll every weight into the code and compile slowly (about 10 s
        # for layer 2): a smaller grid of them; shared-weight kernels compile in about 2 s.
        configs = (tuning.candidates(**L, threads=(128, 256), imgs=(1,), weights=("constant",))
                   + tuning.candidates(**L, weights=("shared",)))
        layer_rows, best = study.sweep_tuned(**L, batch=args.batch, configs=configs, progress=False)
        rows += [dict(r, layer_name=name) for r in layer_rows]
        best_ms = min(r["median_ms"] for r in layer_rows)
        default = tuning.default_config(**L)
        default_ms = next((r["median_ms"] for r in layer_rows
                           if tuning.TunedConfig(r["threads"], r["imgs"], r["out_w"], r["weights"],
                                                 r["m_chunk"]) == default),
                          None)
        print(f"{name}: best {best.short()} {best_ms:.3f} ms at batch {args.batch}; default "
              f"{default.short()} {default_ms if default_ms is None else round(default_ms, 3)} ms")
        for r in sorted(layer_rows, key=lambda r: r["median_ms"])[:8]:
            print(f"    {r['config']:24s} {r['median_ms']:.3f} ms")
        if args.write_table:
            study.record_winner(**L, config=best, device_name=dev.name, median_ms=best_ms,
                                 batch=args.batch)
    path = measure.save_rows(rows, Path(args.out) / "tune_conv.json",
                             meta={"benchmark": "tune_conv", "batch": args.batch, "layers": LAYERS})
    print(f"wrote {path}" + (f" and {tuning.TABLE}" if args.write_table else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
