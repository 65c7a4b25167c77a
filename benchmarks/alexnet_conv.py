"""AlexNet's five convolutions at batch 128 on the implicit-GEMM kernels, against cuDNN, same run.

    python benchmarks/alexnet_conv.py [--out results/benchmarks] [--batch 128] [--repeat 30]

Every layer of labkit.implicit.ALEXNET_CONVS (bias, no activation, as cuDNN is timed in the
anchors) in FP32 (conv_implicit.cu, CUDA cores) and TF32 (conv_implicit_tf32.cu, tensor cores),
each first checked against the float64 reference on two images, then timed with CUDA events;
cuDNN through PyTorch with TF32 off and on, on the same arrays.  The TF32 ceiling (a TF32
8192^3 matmul in PyTorch) is measured here too, for the TF32 floor.  Writes alexnet_conv.json and
alexnet_conv.png.  Targets (H100): the five FP32 layers summed <= 1.0x cuDNN FP32, TF32 <= 1.0x
cuDNN TF32.  On the CPU executor: FP32 at batch 1 as a smoke test (not GPU timings).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit import measure, peers, reference  # noqa: E402
from labkit.implicit import ALEXNET_CONVS, ImplicitConv2d  # noqa: E402
from labkit.ladder import rel_error  # noqa: E402

TOL = {"fp32": 1e-5, "tf32": 5e-3}


def tf32_ceiling_TFLOPs(n: int = 8192) -> float | None:
    """TF32 tensor-core GEMM rate through PyTorch (cuBLAS), the TF32 floor's peak."""
    if peers.cudnn_available():
        return None
    import torch
    torch.backends.cuda.matmul.allow_tf32 = True
    a = torch.randn(n, n, device="cuda")
    t = measure.time_fn(lambda: a @ a, warmup=3, repeat=10, sync=False)
    torch.backends.cuda.matmul.allow_tf32 = False
    return 2 * n**3 / (t.median_ms * 1e-3) / 1e12


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/benchmarks")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    dev = labkit.device()
    xp = labkit.xp
    batch = args.batch or labkit.sizes(gpu=[128], cpu=[1])[0]
    precisions = ("fp32", "tf32") if dev.is_gpu else ("fp32",)
    why_no_peer = peers.cudnn_available()
    ceil = dev.ceilings()
    tf32_peak = tf32_ceiling_TFLOPs() if dev.is_gpu else None
    rng = np.random.default_rng()
    rows = []
    for name, L in ALEXNET_CONVS.items():
        x_h = rng.standard_normal((batch, L.C, L.H, L.W), dtype=np.float32)
        w_h = (rng.standard_normal((L.M, L.C // L.groups, L.K, L.K)) / np.sqrt(L.C // L.groups * L.K**2)).astype(np.float32)
        b_h = rng.standard_normal(L.M, dtype=np.float32)
        x, w, b = xp.asarray(x_h), xp.asarray(w_h), xp.asarray(b_h)
        ref = reference.conv2d(x_h[:2], w_h, b_h, stride=L.stride, pad=L.pad, groups=L.groups)
        ho, wo = L.out_hw
        y = xp.empty((batch, L.M, ho, wo), dtype=xp.float32)
        cost = measure.conv2d_cost(batch, L.C, L.H, L.W, L.M, L.K, stride=L.stride, pad=L.pad, groups=L.groups)
        runs = {}
        for prec in precisions:
            conv = ImplicitConv2d(w, b, L, precision=prec)
            runs[f"labkit {prec}"] = (prec, conv.tiles.short(), lambda conv=conv: conv(x, out=y))
        if why_no_peer is None:
            for prec in ("fp32", "tf32"):
                runs[f"cuDNN {prec}"] = (prec, "", peers.cudnn_conv2d(x, w, b, stride=L.stride, pad=L.pad,
                                                                      groups=L.groups, tf32=prec == "tf32", out=y))
        for label, (prec, tiles, run) in runs.items():
            y.fill(float("nan"))
            run()
            err = rel_error(y[:2], ref)
            if not err < TOL[prec]:
                print(f"{name} {label} disagrees with the float64 reference: {err:.2e}")
                return 1
            t = measure.time_fn(run, warmup=3, repeat=args.repeat, sync=False)
            peak = tf32_peak if prec == "tf32" else ceil.fp32_TFLOPs
            floor_ms = max(cost.flops / (peak * 1e12), cost.bytes / (ceil.copy_GBps * 1e9)) * 1e3 if peak else None
            rows.append({"layer": name, "shape": L.key, "label": label, "precision": prec, "tiles": tiles,
                         "batch": batch, "median_ms": t.median_ms, "min_ms": t.min_ms,
                         "TFLOPs": cost.flops / (t.median_ms * 1e-3) / 1e12, "rel_err": err,
                         "floor_ms": floor_ms, "pct_of_floor": None if floor_ms is None else 100 * floor_ms / t.median_ms,
                         "device": t.device, "backend": t.backend})
        del x, w, b, y
    labels = list(dict.fromkeys(r["label"] for r in rows))
    sums = {lab: sum(r["median_ms"] for r in rows if r["label"] == lab) for lab in labels}
    ratios = {p: sums[f"labkit {p}"] / sums[f"cuDNN {p}"] for p in precisions if f"cuDNN {p}" in sums}
    path = measure.save_rows(rows, Path(args.out) / "alexnet_conv.json", meta={
        "benchmark": "alexnet_conv", "batch": batch, "sums_ms": sums, "ratio_to_cudnn": ratios,
        "fp32_ceiling_TFLOPs": ceil.fp32_TFLOPs, "tf32_ceiling_TFLOPs": tf32_peak, "peer": why_no_peer or "cuDNN",
        "targets": "sum of five layers: FP32 <= 1.0x cuDNN FP32, TF32 <= 1.0x cuDNN TF32 (H100)"})
    print(f"AlexNet convolutions, batch {batch}, on {dev.label}"
          + (f"; TF32 ceiling {tf32_peak:.0f} TFLOP/s" if tf32_peak else ""))
    print(f"{'layer':6s} " + " ".join(f"{lab:>14s}" for lab in labels))
    for name in ALEXNET_CONVS:
        cells = {r["label"]: r for r in rows if r["layer"] == name}
        print(f"{name:6s} " + " ".join(f"{cells[lab]['median_ms']:9.3f} ms " for lab in labels))
        print(f"{'':6s} " + " ".join(f"{cells[lab]['TFLOPs']:6.1f} TF {cells[lab]['pct_of_floor'] or 0:3.0f}%" for lab in labels))
    print(f"{'sum':6s} " + " ".join(f"{sums[lab]:9.3f} ms " for lab in labels))
    for p, r in ratios.items():
        print(f"labkit {p} / cuDNN {p}: {r:.2f}x")
    import matplotlib
    matplotlib.use("Agg")
    from labkit import plots
    fig = plots.grouped_bars(list(ALEXNET_CONVS), {lab: [next(r["median_ms"] for r in rows if r["label"] == lab
                                                              and r["layer"] == n) for n in ALEXNET_CONVS]
                                                   for lab in labels},
                             f"AlexNet convolutions, batch {batch}", "op time (ms)", device=dev.label)
    print(f"wrote {plots.save_figure(fig, Path(args.out) / 'alexnet_conv.png')}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
