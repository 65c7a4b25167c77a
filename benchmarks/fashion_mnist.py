"""Benchmark of the seed's Fashion-MNIST network end to end, against the same network in PyTorch.

    python benchmarks/fashion_mnist.py [--out results/benchmarks] [--batches 100 1000 10000]

For each batch size: the accuracy on the shipped test images ("Correctness", as the seed's
harness prints it), every layer's op time (CUDA events around each layer, labkit.measure.breakdown),
the whole forward pass with the data on the device, and the same network in PyTorch (cuDNN and
cuBLAS, FP32, TF32 off) with the same weights, timed in this run.  Every labkit variant's
predictions are compared with the float64 reference's first.

Writes fashion_mnist.json and fashion_mnist.png.  Targets (H100, batch 10,000): the two
convolutions' op times summed <= 1.0 ms; the whole forward <= 1.5 ms and <= 0.5x PyTorch.
On the CPU executor it runs batch 100 as a smoke test; those times are not GPU timings.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit import measure, peers  # noqa: E402
from labkit.data import load_fashion_mnist  # noqa: E402
from labkit.models import fashion_mnist as fm  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/benchmarks")
    ap.add_argument("--batches", type=int, nargs="*")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    dev = labkit.device()
    xp = labkit.xp
    batches = args.batches or labkit.sizes(gpu=[100, 1000, 10000], cpu=[100])
    weights = fm.load_weights()
    images, labels = load_fashion_mnist("test")
    x_all = fm.preprocess(images[:max(batches)])
    ref_pred = fm.reference_predict(weights, x_all[:500])
    why_no_peer = peers.cudnn_available()
    torch_net = peers.cudnn_fashion_net(weights) if why_no_peer is None else None
    rows = []
    for batch in batches:
        x = xp.asarray(x_all[:batch])
        for variant in fm.CONV_VARIANTS:
            net = fm.FashionNet(weights, variant=variant)
            probs = net(x)
            pred = np.argmax(probs.get() if hasattr(probs, "get") else probs, axis=1)
            k = min(batch, len(ref_pred))
            agree = float((pred[:k] == ref_pred[:k]).mean())
            if agree < 0.999:
                print(f"{variant} agrees with the float64 reference on only {agree:.4f} of the images")
                return 1
            acc = float((pred == labels[:batch]).mean())
            bd = measure.breakdown([(name, "kernel", fn) for name, fn in net.layers(x)],
                                   repeat=args.repeat)
            whole = measure.time_fn(lambda: net(x), warmup=3, repeat=args.repeat, sync=False)
            conv_ms = sum(p.median_ms for p in bd.parts if p.name.startswith(("conv", "max-pool")))
            rows.append({"label": variant, "batch": batch, "accuracy": acc, "median_ms": whole.median_ms,
                         "conv_op_ms": conv_ms, "layers_ms": {p.name: p.median_ms for p in bd.parts},
                         "device": whole.device, "backend": whole.backend})
            print(f"batch {batch:6d} {variant:9s} Correctness: {acc:.4f}  whole forward {whole.median_ms:8.3f} ms"
                  f"  conv layers {conv_ms:7.3f} ms")
        if torch_net is not None:
            p = torch_net(x)
            acc = float((p.argmax(1).cpu().numpy() == labels[:batch]).mean())
            t = measure.time_fn(lambda: torch_net(x), warmup=3, repeat=args.repeat, sync=False)
            rows.append({"label": "PyTorch (cuDNN)", "batch": batch, "accuracy": acc, "median_ms": t.median_ms,
                         "device": t.device, "backend": t.backend})
            print(f"batch {batch:6d} PyTorch   Correctness: {acc:.4f}  whole forward {t.median_ms:8.3f} ms")
    for r in rows:
        peer = next((q["median_ms"] for q in rows if q["batch"] == r["batch"] and q["label"].startswith("PyTorch")), None)
        r["ratio_to_pytorch"] = None if peer is None else r["median_ms"] / peer
    meta = {"benchmark": "fashion_mnist", "model": fm.load_metadata() if hasattr(fm, "load_metadata") else None,
            "peer": "PyTorch (cuDNN, cuBLAS), FP32, TF32 off" if why_no_peer is None else why_no_peer,
            "targets": "batch 10,000: conv op times <= 1.0 ms; whole forward <= 1.5 ms and <= 0.5x PyTorch"}
    out = Path(args.out)
    path = measure.save_rows(rows, out / "fashion_mnist.json", meta=meta)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from labkit import plots
    fig = plots.batch_curves(rows, title="Fashion-MNIST network: whole forward, data on the device")
    plots.save_figure(fig, out / "fashion_mnist.png")
    plt.close(fig)
    print("\nbatch   network          whole ms  x PyTorch  accuracy")
    for r in rows:
        ratio = "n/a" if r["ratio_to_pytorch"] is None else f"{r['ratio_to_pytorch']:.2f}"
        print(f"{r['batch']:6d}  {r['label']:16s} {r['median_ms']:8.3f}  {ratio:>9s}  {r['accuracy']:.4f}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
