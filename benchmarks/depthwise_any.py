"""depthwise_any against its memory floor on this GPU: the default tiling and the autotuner's, per geometry.

    python benchmarks/depthwise_any.py [--sizes 128 256 512 1024] [--batches 8 64] [--channels 32]
                                       [--geometries 3x3 3x3s2 ...] [--budget 20] [--repeat 10]
                                       [--out results/benchmarks]

For each plane size, batch and geometry (3x3 to 7x7, square and rectangular, with and without padding,
stride 1 and 2, dilation 2; bias and ReLU fused), times labkit.ops.depthwise_any with ``default_tiling``
and with the tiling the autotuner chooses (a search of ``--budget`` seconds among ``tiling_candidates``),
each first checked on a NaN-poisoned output against float64 samples (the autotuner's check), as GPU time
per launch (measure.per_launch_ms), beside the floor: x read once and y written once at this GPU's
copy bandwidth (or its FP32 peak, where that is longer).  Writes depthwise_any.json.  On the CPU
executor the times are the executor's (small ``--sizes`` try the script out).
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit import autotune, measure  # noqa: E402
from labkit.ops.depthwise_any import (TOLERANCE, DepthwiseAnyConv2d, default_tiling, depthwise_any_layer,  # noqa: E402
                                      floor_bytes)
from labkit.ops.plans import sampled_mismatch  # noqa: E402
from labkit.reference.samples import conv_samples, sample_positions  # noqa: E402

# name: (kernel, stride, pad, dilation)
GEOMETRIES = {
    "3x3": (3, 1, 1, 1), "3x3s2": (3, 2, 1, 1), "3x3p0": (3, 1, 0, 1), "5x5": (5, 1, 2, 1),
    "7x7": (7, 1, 3, 1), "7x7s2": (7, 2, 3, 1), "5x3": ((5, 3), 1, (2, 1), 1), "3x7s2": ((3, 7), 2, (1, 3), 1),
    "3x3d2": (3, 1, 2, 2), "3x3d2s2": (3, 2, 2, 2),
}


def case_rows(layer, N: int, repeat: int) -> list[dict]:
    """The default and the autotuned tiling of ``layer`` at batch N: checked, then timed."""
    xp = labkit.xp
    rng = np.random.default_rng(0)
    w = xp.asarray((rng.standard_normal((layer.C, 1) + layer.kernel_hw) / np.sqrt(layer.taps)).astype(np.float32))
    b = xp.asarray(rng.standard_normal(layer.C).astype(np.float32))
    x = xp.random.default_rng(1).standard_normal((N, layer.C, layer.H, layer.W), dtype=xp.float32)
    y = xp.empty((N, layer.C) + layer.out_hw, dtype=xp.float32)
    idx = sample_positions(xp, y.size)
    ref, terms = conv_samples(xp, x, w, b, layer, idx, "relu")
    conv = DepthwiseAnyConv2d(w, b, layer, activation="relu")
    with autotune.forced("on"):
        tuned = conv.plan(N).tiling
    ho, wo = layer.out_hw
    cost = measure.Cost(2.0 * layer.taps * N * layer.C * ho * wo, float(floor_bytes(layer, N)), (N, layer.C, ho, wo))
    floor = measure.floor_ms(cost, labkit.device().ceilings())
    rows = []
    for label, tiling in (("default", default_tiling(layer, N * layer.C)), ("autotuned", tuned)):
        launch = conv.build_launch(tiling, N, x, y)
        wrong = sampled_mismatch(y, launch, idx, ref, terms, TOLERANCE)
        if wrong:
            raise SystemExit(f"{layer.key} N={N} {tiling}: {wrong}")
        ms = measure.per_launch_ms(launch, repeat=repeat)
        rows.append({"layer": layer.key, "batch": N, "tiling": label, **asdict(tiling), "ms": ms,
                     "floor_ms": floor, "x_floor": ms / floor, "device": labkit.device().label})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[128, 256, 512, 1024])
    ap.add_argument("--batches", type=int, nargs="+", default=[8, 64])
    ap.add_argument("--channels", type=int, default=32)
    ap.add_argument("--geometries", nargs="+", default=list(GEOMETRIES), choices=list(GEOMETRIES))
    ap.add_argument("--budget", type=float, default=20.0, help="seconds of each autotuner search")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--out", default="results/benchmarks")
    args = ap.parse_args()
    os.environ[autotune.BUDGET_ENV] = str(args.budget)
    if not labkit.device().is_gpu:
        print("on the CPU executor: its times say nothing about a GPU (the check still runs)")
    rows = []
    print(f"{'geometry':>8s} {'size':>5s} {'N':>3s} {'floor ms':>9s} {'default':>8s} {'x floor':>7s} "
          f"{'tuned':>8s} {'x floor':>7s}  tuned tiling")
    for name in args.geometries:
        kernel, stride, pad, dilation = GEOMETRIES[name]
        for size in args.sizes:
            layer = depthwise_any_layer(args.channels, size, size, kernel, stride, pad, dilation)
            for N in args.batches:
                default, tuned = case_rows(layer, N, args.repeat)
                rows += [default, tuned]
                t = {k: tuned[k] for k in ("rx", "ry", "tx", "ty", "planes", "wshared")}
                print(f"{name:>8s} {size:5d} {N:3d} {default['floor_ms']:9.4f} {default['ms']:8.4f} "
                      f"{default['x_floor']:7.2f} {tuned['ms']:8.4f} {tuned['x_floor']:7.2f}  {t}", flush=True)
    path = measure.save_rows(rows, Path(args.out) / "depthwise_any.json", {"channels": args.channels})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
