"""Benchmark of notebook 01's CPU convolutions against TensorFlow's own CPU convolution.

    python benchmarks/cpu_conv.py [--out results/benchmarks] [--batch 1000] [--repeat 5]

On the two layers of the seed's Fashion-MNIST model (layer 1: 1 -> 6 channels, K5, 48x48;
layer 2: 6 -> 16 channels, K5, 22x22), at one batch size, times labkit.reference's
vectorized and im2col + GEMM convolutions and TensorFlow's tf.nn.conv2d (float32, on this
machine's CPU; the same NCHW arrays in, TensorFlow's NHWC transposes counted in its time,
as a NumPy user would pay them).  Each result is first checked against the float64 reference.

Writes cpu_conv.json (machine, versions, medians, ratios to TensorFlow) and cpu_conv.png.
Goal: im2col + GEMM within 3x of TensorFlow.  These are CPU timings, not GPU timings.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from labkit import measure, reference  # noqa: E402
from labkit.device_query import cpu_model  # noqa: E402
from labkit.reference import tensorflow_cases as tc  # noqa: E402

LAYERS = {"layer 1": dict(C=1, H=48, W=48, M=6, K=5),
          "layer 2": dict(C=6, H=22, W=22, M=16, K=5)}
GOAL_IM2COL_OVER_TF = 3.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/benchmarks")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    if not tc.tensorflow_available():
        print("TensorFlow is not installed here: this benchmark compares against it "
              "(pip install tensorflow-cpu); nothing measured")
        return 0
    import tensorflow as tf

    rng = np.random.default_rng()
    versions = {"vectorized": reference.conv2d_vectorized, "im2col + GEMM": reference.conv2d_im2col,
                "TensorFlow": tc.tensorflow_conv2d}
    rows, summary = [], {}
    for name, L in LAYERS.items():
        x = rng.standard_normal((args.batch, L["C"], L["H"], L["W"])).astype(np.float32)
        w = rng.standard_normal((L["M"], L["C"], L["K"], L["K"])).astype(np.float32)
        b = rng.standard_normal(L["M"]).astype(np.float32)
        ref = reference.conv2d(x[:8], w, b)
        times = {}
        for label, fn in versions.items():
            y = fn(x[:8], w, b)
            err = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
            if not err < 1e-5:
                print(f"{label} on {name} disagrees with the float64 reference: {err:.2e}")
                return 1
            t = measure.time_fn(lambda fn=fn: fn(x, w, b), warmup=1, repeat=args.repeat)
            times[label] = t.median_ms
            rows.append({"layer": name, "label": label, "batch": args.batch,
                         "median_ms": t.median_ms, "min_ms": t.min_ms, "repeat": t.repeat,
                         "device": f"CPU: {cpu_model()} (host timings, not GPU)",
                         "backend": "host (NumPy / TensorFlow)",
                         "rel_err_vs_float64": err})
        ratios = {k: times[k] / times["TensorFlow"] for k in ("vectorized", "im2col + GEMM")}
        summary[name] = {"ms": times, "ratio_to_tensorflow": ratios,
                         "im2col_within_goal": ratios["im2col + GEMM"] <= GOAL_IM2COL_OVER_TF}
        print(f"{name}, batch {args.batch}: " + ", ".join(f"{k} {v:.1f} ms" for k, v in times.items())
              + f"; vectorized/TF {ratios['vectorized']:.2f}x, im2col/TF {ratios['im2col + GEMM']:.2f}x")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    out = Path(args.out)
    meta = {"benchmark": "cpu_conv", "machine": {"cpu": platform.processor() or platform.machine(),
                                                  "cores": os.cpu_count()},
            "tensorflow": tf.__version__, "goal": f"im2col + GEMM <= {GOAL_IM2COL_OVER_TF}x TensorFlow",
            "summary": summary, "note": "CPU timings (NumPy and TensorFlow on the host), not GPU timings"}
    path = measure.save_rows(rows, out / "cpu_conv.json", meta=meta)
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / len(versions)
    for i, label in enumerate(versions):
        ax.bar([j + i * width for j in range(len(LAYERS))], [summary[n]["ms"][label] for n in LAYERS],
               width=width, label=label)
    ax.set_xticks([j + width for j in range(len(LAYERS))], list(LAYERS))
    ax.set_ylabel("time (ms)")
    ax.set_title(f"CPU convolutions at batch {args.batch}\nCPU: {cpu_model()} (host timings)", fontsize=10)
    ax.legend(fontsize=8)
    fig.savefig(out / "cpu_conv.png", dpi=120, bbox_inches="tight")
    print(f"wrote {path} and {out / 'cpu_conv.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
