"""Benchmark of the convolution ladder (naive, tiled, constant, tuned) against cuDNN, same run.

    python benchmarks/conv_ladder.py [--out results/benchmarks] [--batches 100 1000 10000]

On the seed model's two layers (layer 1: 1 -> 6 channels, K5, 48x48; layer 2: 6 -> 16, K5,
22x22), for every variant and batch: the median op time (kernel only, CUDA events, after
warm-up), the time as a percentage of the device's floor (measured ceilings), and the ratio to
cuDNN (PyTorch, FP32 with TF32 off, cudnn.benchmark on) measured in this same run on the same
arrays.  Every variant and the peer are first checked against the float64 reference.

Writes conv_ladder.json (device, versions, rows, the tuned configurations) and conv_ladder.png.
Targets (H100, batch 10,000): tuned layer 1 <= 0.5 ms, tuned layer 2 <= 0.6 ms.
On the CPU executor it runs at batch 2 as a smoke test; those times are not GPU timings.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit import measure, peers, reference  # noqa: E402
from labkit.conv import conv2d  # noqa: E402
from labkit.tuning import tuned_config  # noqa: E402

LAYERS = {"layer 1": dict(C=1, H=48, W=48, M=6, K=5),
          "layer 2": dict(C=6, H=22, W=22, M=16, K=5)}
# The tile width each direct variant runs with on each layer (conv_tiled.cu explains layer 2's 8).
TILE = {"layer 1": 16, "layer 2": 8}
VARIANTS = ("naive", "tiled", "constant", "tuned")
TARGET_MS = {"layer 1": 0.5, "layer 2": 0.6}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/benchmarks")
    ap.add_argument("--batches", type=int, nargs="*")
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    dev = labkit.device()
    xp = labkit.xp
    batches = args.batches or labkit.sizes(gpu=[100, 1000, 10000], cpu=[2])
    ceil = dev.ceilings()
    why_no_peer = peers.cudnn_available()
    rng = np.random.default_rng()
    rows = []
    print(f"{dev.label}; peer: {'cuDNN via PyTorch' if why_no_peer is None else why_no_peer}")
    for name, L in LAYERS.items():
        for batch in batches:
            x_h = rng.standard_normal((batch, L["C"], L["H"], L["W"]), dtype=np.float32)
            w_h = (rng.standard_normal((L["M"], L["C"], L["K"], L["K"])) / np.sqrt(L["C"] * 25)).astype(np.float32)
            b_h = rng.standard_normal(L["M"]).astype(np.float32)
            x, w, b = xp.asarray(x_h), xp.asarray(w_h), xp.asarray(b_h)
            Ho, Wo = L["H"] - L["K"] + 1, L["W"] - L["K"] + 1
            y = xp.empty((batch, L["M"], Ho, Wo), dtype=xp.float32)
            n_check = min(batch, 4)
            ref = np.tanh(reference.conv2d(x_h[:n_check], w_h, b_h))
            cost = measure.conv2d_cost(batch, L["C"], L["H"], L["W"], L["M"], L["K"])
            runs = {v: (lambda v=v: conv2d(x, w, b, variant=v, activation="tanh", out=y,
                                           tile_width=TILE[name])) for v in VARIANTS}
            if why_no_peer is None:
                runs["cuDNN"] = peers.cudnn_conv2d(x, w, b, activation="tanh", out=y)
            timed = {}
            for label, run in runs.items():
                y.fill(float("nan"))
                run()
                got = y[:n_check].get() if hasattr(y, "get") else y[:n_check]
                err = float(np.linalg.norm(got.astype(np.float64) - ref) / np.linalg.norm(ref))
                if not err < 1e-5:
                    print(f"{label} on {name} at batch {batch} disagrees with the reference: {err:.2e}")
                    return 1
                if label == "cuDNN":   # time the convolution alone, not the copy into y
                    run = peers.cudnn_conv2d(x, w, b, activation="tanh")
                t = measure.time_fn(run, warmup=3, repeat=args.repeat)
                timed[label] = t.median_ms
                tf, gbs = measure.achieved(t.median_ms, cost)
                rows.append({"layer": name, "label": label, "batch": batch, "median_ms": t.median_ms,
                             "min_ms": t.min_ms, "repeat": t.repeat, "device": t.device,
                             "backend": t.backend, "rel_err": err,
                             "floor_ms": measure.floor_ms(cost, ceil),
                             "pct_of_floor": measure.percent_of_floor(t.median_ms, cost, ceil),
                             "TFLOPs": tf, "GBps": gbs})
            for r in rows[-len(runs):]:
                r["ratio_to_cudnn"] = r["median_ms"] / timed["cuDNN"] if "cuDNN" in timed else None
            line = "  ".join(f"{k} {v:8.3f}" for k, v in timed.items())
            print(f"{name} batch {batch:6d} (ms): {line}   floor {rows[-1]['floor_ms']:.3f}")

    tuned = {name: tuned_config(**L).__dict__ for name, L in LAYERS.items()}
    meta = {"benchmark": "conv_ladder", "layers": LAYERS, "tile_width": TILE, "activation": "tanh",
            "ceilings": {"copy_GBps": ceil.copy_GBps, "fp32_TFLOPs": ceil.fp32_TFLOPs},
            "peer": "cuDNN via PyTorch (FP32, TF32 off, cudnn.benchmark)" if why_no_peer is None else why_no_peer,
            "tuned_configs": tuned, "targets_ms_at_batch_10000": TARGET_MS}
    if why_no_peer is None:
        import torch
        meta["torch"] = torch.__version__
        meta["cudnn"] = torch.backends.cudnn.version()
    out = Path(args.out)
    path = measure.save_rows(rows, out / "conv_ladder.json", meta=meta)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from labkit import plots
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4))
    for ax, name in zip(axes, LAYERS):
        plots.batch_curves([r for r in rows if r["layer"] == name], ax=ax, title=f"{name}: op time")
    plots.save_figure(fig, out / "conv_ladder.png")

    print("\nlayer    batch  variant    median ms  % floor  x cuDNN")
    for r in rows:
        ratio = f"{r['ratio_to_cudnn']:.2f}" if r.get("ratio_to_cudnn") else "n/a"
        print(f"{r['layer']:8s} {r['batch']:6d}  {r['label']:9s} {r['median_ms']:9.3f}  "
              f"{r['pct_of_floor']:6.1f}%  {ratio}")
    print(f"wrote {path} and {out / 'conv_ladder.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
