"""AlexNet's five convolutions at batch 128 on the implicit-GEMM kernels, against cuDNN, same run.

    python benchmarks/alexnet_conv.py [--out results/benchmarks] [--batch 128] [--repeat 30]

Every layer of labkit.ALEXNET_CONVS (bias, no activation, as cuDNN is timed in the
anchors) in FP32 (conv_implicit.cu, CUDA cores) and TF32 (conv_implicit_tf32.cu, tensor cores),
each first checked against the float64 reference on two images, then timed with CUDA events;
cuDNN through PyTorch with TF32 off and on, on the same arrays (labkit.ladder.implicit.compare).  The
TF32 ceiling (a TF32 8192^3 matmul in PyTorch) is measured here too, for the TF32 floor.  Writes
alexnet_conv.json and alexnet_conv.png.  Targets (H100): the five FP32 layers summed <= 1.0x cuDNN
FP32, TF32 <= 1.0x cuDNN TF32.  On the CPU executor: FP32 at batch 1 as a smoke test (not GPU timings).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit import measure, peers
from labkit.ladder import implicit
from labkit.shapes import ALEXNET_CONVS  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/benchmarks")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    dev = labkit.device()
    batch = args.batch or labkit.sizes(gpu=[128], cpu=[1])[0]
    tf32_peak = peers.tf32_gemm_TFLOPs() if peers.cudnn_available() is None else None
    rows = implicit.compare(batch=batch, repeat=args.repeat, tf32_peak_TFLOPs=tf32_peak)
    sums, ratios = implicit.summarize(rows)
    path = measure.save_rows(rows, Path(args.out) / "alexnet_conv.json", meta={
        "benchmark": "alexnet_conv", "batch": batch, "sums_ms": sums, "ratio_to_cudnn": ratios,
        "fp32_ceiling_TFLOPs": dev.ceilings().fp32_TFLOPs, "tf32_ceiling_TFLOPs": tf32_peak,
        "peer": peers.cudnn_available() or "cuDNN",
        "targets": "sum of five layers: FP32 <= 1.0x cuDNN FP32, TF32 <= 1.0x cuDNN TF32 (H100)"})
    print(f"AlexNet convolutions, batch {batch}, on {dev.label}"
          + (f"; TF32 ceiling {tf32_peak:.0f} TFLOP/s" if tf32_peak else ""))
    print(implicit.table(rows))
    import matplotlib
    matplotlib.use("Agg")
    from labkit import plots
    labels = list(dict.fromkeys(r["label"] for r in rows))
    fig = plots.grouped_bars(list(ALEXNET_CONVS),
                             {lab: [r["median_ms"] for r in rows if r["label"] == lab] for lab in labels},
                             f"AlexNet convolutions, batch {batch}", "op time (ms)", device=dev.label)
    print(f"wrote {plots.save_figure(fig, Path(args.out) / 'alexnet_conv.png')}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
