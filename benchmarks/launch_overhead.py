"""What a launch costs the host, and the small batches it decides: labkit eager and as one CUDA graph
beside PyTorch eager and as a CUDA graph, in the same run.

    python benchmarks/launch_overhead.py [--out results/benchmarks] [--repeat 1000] [--quick]

1. Host µs per call (median of --repeat calls, 10th/90th percentiles): a raw CuPy RawKernel launch and
   PyTorch's add_ (the floors), labkit.load + a checked launch, a prepared launch, and every labkit op
   and layer on shapes whose GPU work is a few microseconds.
2. Time per forward (CUDA events, calls queued back to back): Fashion-MNIST at batch 100 / 1,000 /
   10,000 and AlexNet FP32 at every batch 1 .. 1,024, labkit eager and graph, PyTorch eager and graph,
   and the host's own time for an eager forward; AlexNet TF32 at batch 1 and 8.
Writes launch_overhead.json (device, versions, every row) and launch_overhead.png, and prints each
target of the prepared-launch work with its verdict.  On the CPU executor (--quick there): small
batches, and the times are not GPU timings.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit import measure  # noqa: E402
from labkit.ladder import overhead  # noqa: E402

HOST_TARGET_US = 15.0


def targets(rows: list[dict]) -> list[str]:
    """One line per target: what was measured, and met or missed."""
    out = []
    host = {r["label"]: r["median_us"] for r in rows if r.get("kind") == "host_us"}
    raw = host.get("raw CuPy RawKernel")
    for group in ("conv", "gemm", "pooling", "LRN", "softmax"):
        worst = max((r for r in rows if r.get("kind") == "host_us" and r["group"] == group and "layer" in r["label"]),
                    key=lambda r: r["median_us"], default=None)
        if worst is not None:
            limit = min(HOST_TARGET_US, 2 * raw) if raw else HOST_TARGET_US
            out.append(f"host time, {group} layers (slowest {worst['label']}): {worst['median_us']:.1f} µs "
                       f"<= {limit:.1f} µs: {'met' if worst['median_us'] <= limit else 'MISSED'}")
    fwd = [r for r in rows if r.get("kind") == "forward"]

    def ms(model, label, n, prec="fp32"):
        return next((r["median_ms"] for r in fwd if r["model"] == model and r["label"] == label and r["batch"] == n
                     and r["precision"] == prec), None)

    def line(what, mine, peer, factor=1.0):
        if mine is None or peer is None:
            return f"{what}: not measured here"
        return f"{what}: {mine:.3f} / {peer:.3f} ms = {mine / peer:.2f}x (<= {factor:.1f}x: " \
               f"{'met' if mine <= factor * peer else 'MISSED'})"
    for n in sorted({r["batch"] for r in fwd if r["model"] == "fashion"}):
        out.append(line(f"Fashion-MNIST batch {n}, labkit eager / PyTorch eager", ms("fashion", "labkit eager", n),
                        ms("fashion", "PyTorch eager", n), 0.5 if n >= 10_000 else 1.0))
        if n <= 100:
            out.append(line(f"Fashion-MNIST batch {n}, labkit graph / PyTorch graph", ms("fashion", "labkit graph", n),
                            ms("fashion", "PyTorch graph", n)))
    out.append(line("AlexNet FP32 batch 1, labkit eager / PyTorch eager", ms("alexnet", "labkit eager", 1),
                    ms("alexnet", "PyTorch eager", 1)))
    for n in sorted({r["batch"] for r in fwd if r["model"] == "alexnet" and r["precision"] == "fp32"}):
        out.append(line(f"AlexNet FP32 batch {n}, labkit graph / PyTorch graph", ms("alexnet", "labkit graph", n),
                        ms("alexnet", "PyTorch graph", n)))
    for n in sorted({r["batch"] for r in fwd if r["model"] == "alexnet" and r["precision"] == "tf32"}):
        out.append(line(f"AlexNet TF32 batch {n}, labkit graph / PyTorch graph",
                        ms("alexnet", "labkit graph", n, "tf32"), ms("alexnet", "PyTorch graph", n, "tf32")))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/benchmarks")
    ap.add_argument("--repeat", type=int, default=1000, help="calls per host-time median (>= 1000 for the record)")
    ap.add_argument("--quick", action="store_true", help="small batches only (the CPU executor)")
    args = ap.parse_args()
    dev = labkit.device()
    quick = args.quick or not dev.is_gpu
    rows = overhead.host_costs(repeat=args.repeat)
    fashion = [2, 5] if quick else [100, 1_000, 10_000]
    rows += overhead.forward_times("fashion", fashion, repeat=2 if quick else 20)
    alex = [1] if quick else [2**i for i in range(11)]
    rows += overhead.forward_times("alexnet", alex, repeat=1 if quick else 20)
    if dev.is_gpu:
        rows += overhead.forward_times("alexnet", [1, 8], precision="tf32")
    lines = targets(rows) if dev.is_gpu else ["the CPU executor ran: these are not GPU timings, no target is judged"]
    path = measure.save_rows(rows, Path(args.out) / "launch_overhead.json",
                             meta={"benchmark": "launch_overhead", "repeat": args.repeat, "targets": lines})
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from labkit import plots
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.4))
    overhead.plot_forward([r for r in rows if r.get("model") == "fashion"], "Fashion-MNIST forward", ax=axes[0])
    overhead.plot_forward([r for r in rows if r.get("model") == "alexnet" and r.get("precision") == "fp32"],
                          "AlexNet FP32 forward", ax=axes[1])
    print(overhead.summary(rows))
    print("\n" + "\n".join(lines))
    print(f"wrote {path} and {plots.save_figure(fig, Path(args.out) / 'launch_overhead.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
