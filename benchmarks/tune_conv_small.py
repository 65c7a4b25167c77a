"""The tile sweep of the direct 3x3 kernels (labkit/kernels/conv_small.cu) on this GPU, pass by pass,
beside cuDNN's fastest algorithm on the same pass; winners go into the tuned table.

    python benchmarks/tune_conv_small.py [--out results/benchmarks] [--sizes 16x256 64x1024]
                                         [--passes forward data weight] [--algorithms direct winograd]
                                         [--layers stem block]
                                         [--repeat 10] [--write-table]

For each size (channels x batch, the small ResNet's 28x28 planes) and each pass (forward, backward
data, backward weight) of the block convolution (c -> c), and of the stem (1 -> c) for forward and
weight: every candidate tile (labkit.ladder.resnet_kernels.candidates) of the direct kernels and
of the Winograd ones (conv_winograd.cu, conv_winograd_wgrad.cu), checked against float64,
timed as GPU ms per launch; cuDNN's time for the pass (PyTorch, cudnn.benchmark, FP32) and the
pass's floor.  Writes tune_conv_small.json; with --write-table the fastest tile per pass and shape
under this GPU's name in labkit/tuned/conv_small.json, which labkit.ops.conv_small then uses.
Needs a GPU.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit import measure  # noqa: E402
from labkit.ladder import resnet_kernels as study  # noqa: E402
from labkit.ops.conv_small import table_key  # noqa: E402
from labkit.shapes import ConvLayer  # noqa: E402
from labkit.tuned import CONV_SMALL, write_entry  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/benchmarks")
    ap.add_argument("--sizes", nargs="+", default=["16x256", "64x1024"])
    ap.add_argument("--passes", nargs="+", default=list(study.PASSES), choices=study.PASSES)
    ap.add_argument("--algorithms", nargs="+", default=["direct", "winograd"], choices=("direct", "winograd"),
                    help="the kernels to sweep: the direct ones (conv_small.cu), Winograd's (conv_winograd.cu, "
                    "conv_winograd_wgrad.cu)")
    ap.add_argument("--layers", nargs="+", default=["stem", "block"], choices=("stem", "block"),
                    help="the stem (1 -> c; forward and weight) and the block convolution (c -> c)")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--write-table", action="store_true")
    args = ap.parse_args()
    dev = labkit.device()
    if not dev.is_gpu:
        print("tune_conv_small needs a GPU (the CPU executor's timings say nothing about one); skipped")
        return 0
    rows, path = [], Path(args.out) / "tune_conv_small.json"
    print(f"{'pass':>12s} {'layer':>22s} {'batch':>5s} {'tiles':>5s} {'default':>8s} {'best':>8s} {'cuDNN':>8s} "
          f"{'floor':>8s} {'x cuDNN':>7s}  best tile")
    for size in args.sizes:
        c, N = (int(v) for v in size.split("x"))
        for kind in args.passes:
            for algorithm in args.algorithms:
                # the stem has no backward data
                for cin in [1] * ("stem" in args.layers and kind != "data") + [c] * ("block" in args.layers):
                    layer = ConvLayer(cin, 28, 28, c, 3, 1, 1)
                    shape = study.kernel_shape(kind, layer)
                    tiles = study.candidates(kind, *shape, algorithm=algorithm)
                    if not tiles:      # Winograd's weight gradient of the stem: one input channel, no tile
                        continue
                    got = study.sweep_pass(kind, layer, N, tiles, repeat=args.repeat, algorithm=algorithm,
                                           progress=False)     # a line per sweep is printed below
                    cudnn = study.cudnn_pass_ms(kind, layer, N, repeat=args.repeat)
                    for r in got:
                        r["cudnn_ms"] = cudnn
                    rows += got
                    win = min(got, key=lambda r: r["median_ms"])
                    default = next((r["median_ms"] for r in got if r["default"]), float("nan"))
                    ratio = win["median_ms"] / cudnn if cudnn else float("nan")
                    name = kind if algorithm == "direct" else f"{kind}/wino"
                    print(f"{name:>12s} {layer.key:>22s} {N:5d} {len(got):5d} {default:8.4f} {win['median_ms']:8.4f} "
                          f"{cudnn or float('nan'):8.4f} {win['floor_ms']:8.4f} {ratio:7.2f}  {win['tile']}", flush=True)
                    if args.write_table:
                        key = table_key(kind if algorithm == "direct" else f"winograd_{kind}", *shape)
                        write_entry(CONV_SMALL, dev.name, key,
                                    {**win["tile"], "batch": N, "median_ms": win["median_ms"], "cudnn_ms": cudnn})
                    # saved after every pass: a sweep stopped part way keeps what it measured
                    measure.save_rows(rows, path, meta={"benchmark": "tune_conv_small", "sizes": args.sizes})
    print(f"wrote {path}" + (f"; tuned table {CONV_SMALL}" if args.write_table else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
