"""Benchmark of the convolution ladder (naive, tiled, constant, tuned) against cuDNN, same run.

    python benchmarks/conv_ladder.py [--out results/benchmarks] [--batches 100 1000 10000]

On the seed model's two layers (layer 1: 1 -> 6 channels, K5, 48x48; layer 2: 6 -> 16, K5,
22x22), for every variant and batch: the median op time (kernel only, CUDA events, after
warm-up), the time as a percentage of the device's floor (measured ceilings), and the ratio to
cuDNN (PyTorch, FP32 with TF32 off, cudnn.benchmark on) measured in this same run on the same
arrays.  Every variant and the peer are first checked against the float64 reference
(labkit.ladder.compare does both; notebooks 02-05 use the same code).

Writes conv_ladder.json (device, versions, rows, the tuned configurations) and conv_ladder.png.
Targets (H100, batch 10,000): tuned layer 1 <= 0.5 ms, tuned layer 2 <= 0.6 ms.
On the CPU executor it runs at batch 2 as a smoke test; those times are not GPU timings.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit import ladder, measure, peers  # noqa: E402
from labkit.ops.tuned_config import tuned_config  # noqa: E402

VARIANTS = ("naive", "tiled", "constant", "tuned")
TARGET_MS = {"layer 1": 0.5, "layer 2": 0.6}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/benchmarks")
    ap.add_argument("--batches", type=int, nargs="*")
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    dev = labkit.device()
    batches = args.batches or labkit.sizes(gpu=[100, 1000, 10000], cpu=[2])
    why_no_peer = peers.cudnn_available()
    print(f"{dev.label}; peer: {'cuDNN via PyTorch' if why_no_peer is None else why_no_peer}")
    rows = ladder.compare(VARIANTS, batches=batches, repeat=args.repeat, progress=False)
    ceil = dev.ceilings()
    meta = {"benchmark": "conv_ladder", "layers": ladder.SEED_LAYERS, "tile_width": ladder.TILE_WIDTH,
            "activation": "tanh",
            "ceilings": {"copy_GBps": ceil.copy_GBps, "fp32_TFLOPs": ceil.fp32_TFLOPs},
            "peer": "cuDNN via PyTorch (FP32, TF32 off, cudnn.benchmark)" if why_no_peer is None else why_no_peer,
            "tuned_configs": {name: asdict(tuned_config(**L)) for name, L in ladder.SEED_LAYERS.items()},
            "targets_ms_at_batch_10000": TARGET_MS}
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
    for ax, name in zip(axes, ladder.SEED_LAYERS):
        plots.batch_curves([r for r in rows if r["layer"] == name], ax=ax, title=f"{name}: op time")
    plots.save_figure(fig, out / "conv_ladder.png")
    print(ladder.table(rows))
    print(f"wrote {path} and {out / 'conv_ladder.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
