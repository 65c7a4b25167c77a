"""AlexNet end to end: the batch sweep 1, 2, 4, ..., 1024 with a per-kernel and per-copy breakdown,
the first call and allocation apart, memory per component, pinned against pageable host memory, the
CPU-to-GPU speed-up, and PyTorch (cuDNN) in the same run.

    python benchmarks/alexnet.py [--out results/benchmarks] [--batches 1 2 4 ... 1024] [--repeat 10]

Weights: $LABKIT_ALEXNET_WEIGHTS (a real bvlc_alexnet.npy) or the seeded synthetic ones; timings do
not depend on which.  Before timing, the network is checked against the float64 reference at batch 1
(and against PyTorch's probabilities where PyTorch runs).  Writes alexnet.json and alexnet.png.
Targets (H100): whole forward FP32 at batch 128 <= 1.0x PyTorch/cuDNN FP32 and <= 1.0x at every batch;
TF32 <= 1.0x cuDNN TF32.  On the CPU executor: batches 1 and 2, FP32 (not GPU timings).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit import measure, peers, reference  # noqa: E402
from labkit.checks import rel_error  # noqa: E402
from labkit.models import alexnet, alexnet_bench  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/benchmarks")
    ap.add_argument("--batches", type=int, nargs="+")
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    dev, xp = labkit.device(), labkit.xp
    batches = args.batches or labkit.sizes(gpu=[2**i for i in range(11)], cpu=[1, 2])
    weights, source = alexnet.load_weights()
    no_peer = peers.cudnn_available()
    precisions = ("fp32", "tf32") if dev.is_gpu else ("fp32",)
    meta = {"benchmark": "alexnet", "weights": source, "batches": batches, "peer": no_peer or "PyTorch/cuDNN"}
    rows: list[dict] = []

    # Correct first: batch 1 against the float64 reference (and PyTorch's probabilities).
    x1 = alexnet.preprocess(alexnet.load_photos(["chelsea.png"])[0])
    ref = reference.softmax(alexnet.reference_logits(weights, x1))
    for prec in precisions:
        err = rel_error(alexnet.AlexNet(weights, precision=prec)(xp.asarray(x1)), ref)
        if not err < (1e-5 if prec == "fp32" else 5e-3):
            print(f"AlexNet {prec} disagrees with the float64 reference: {err:.2e}")
            return 1
        meta[f"rel_err_{prec}"] = err
    if no_peer is None:
        p = peers.torch_alexnet(weights)(xp.asarray(x1))
        meta["rel_err_pytorch"] = err = rel_error(xp.asarray(p), ref)
        if not err < 1e-4:
            print(f"the PyTorch peer disagrees with the reference ({err:.2e}): not the same network")
            return 1

    meta["first_call_ms"] = alexnet_bench.first_call(weights, 1)
    for prec in precisions:
        net = alexnet.AlexNet(weights, precision=prec)
        rows += [dict(r, label=f"labkit {prec}") for r in alexnet_bench.sweep(net, batches, repeat=args.repeat)]
        if prec == "fp32" and dev.is_gpu:
            rows += [dict(r, label="labkit fp32 pageable")
                     for r in alexnet_bench.sweep(net, batches, pinned=False, repeat=args.repeat)]
    meta["memory_batch128"] = alexnet_bench.memory(alexnet.AlexNet(weights), 128 if dev.is_gpu else 2)
    if no_peer is None:
        for prec in precisions:
            run = peers.torch_alexnet(weights, tf32=prec == "tf32")
            for n in batches:
                x = xp.asarray(np.random.default_rng(n).standard_normal((n,) + alexnet.INPUT_SHAPE, dtype=np.float32))
                t = measure.time_fn(lambda: run(x), warmup=3, repeat=args.repeat, sync=False)
                rows.append({"name": "whole", "kind": "whole", "batch": n, "op_ms": t.median_ms,
                             "median_ms": t.median_ms, "label": f"PyTorch {prec}", "device": t.device})
                # The same network as one CUDA graph: no Python between its kernels either.
                t = measure.time_fn(peers.torch_alexnet_graph(weights, n, tf32=prec == "tf32"), warmup=3,
                                    repeat=args.repeat, sync=False)
                rows.append({"name": "whole", "kind": "whole", "batch": n, "op_ms": t.median_ms,
                             "median_ms": t.median_ms, "label": f"PyTorch {prec} graph", "device": t.device})
        cpu = peers.torch_alexnet(weights, device="cpu")
        for n in [b for b in batches if b <= 16]:
            xh = np.random.default_rng(n).standard_normal((n,) + alexnet.INPUT_SHAPE, dtype=np.float32)
            t = measure.time_fn(lambda: cpu(xh), warmup=1, repeat=3)
            rows.append({"name": "whole", "kind": "whole", "batch": n, "op_ms": t.median_ms,
                         "median_ms": t.median_ms, "label": "PyTorch CPU", "device": labkit.device_query.cpu_model()})
    path = measure.save_rows(rows, Path(args.out) / "alexnet.json", meta=meta)

    for r in rows:   # labkit's forward as one CUDA graph: a label of its own
        if r["name"] == "graph":
            r["name"], r["label"] = "whole", r["label"] + " graph"
    whole = [r for r in rows if r["name"] == "whole" and "pageable" not in r["label"]]
    labels = list(dict.fromkeys(r["label"] for r in whole))
    print(f"AlexNet forward ({source}) on {dev.label}: op time per batch (kernels only; labkit's whole time "
          "with copies in parentheses; 'graph': the kernels as one CUDA graph; PyTorch without it: eager)")
    print(f"{'batch':>6s} " + " ".join(f"{lab:>22s}" for lab in labels))
    for n in batches:
        cells = {r["label"]: r for r in whole if r["batch"] == n}
        print(f"{n:6d} " + " ".join(
            (f"{cells[lab]['op_ms']:9.3f} ({cells[lab]['median_ms']:8.3f})" if lab.startswith("labkit")
             and not lab.endswith("graph")
             else f"{cells[lab]['op_ms']:20.3f}  ") if lab in cells else f"{'':22s}" for lab in labels))
    for prec in precisions:
        for mine_mode, peer_mode in (("", ""), (" graph", ""), (" graph", " graph")):
            peer = {r["batch"]: r["op_ms"] for r in whole if r["label"] == f"PyTorch {prec}{peer_mode}"}
            mine = {r["batch"]: r["op_ms"] for r in whole if r["label"] == f"labkit {prec}{mine_mode}"}
            if peer:
                ratios = {n: mine[n] / peer[n] for n in batches}
                print(f"labkit {prec}{mine_mode} / PyTorch {prec}{peer_mode}: "
                      + ", ".join(f"{n}: {v:.2f}x" for n, v in ratios.items()))
    pinned = {r["batch"]: r["median_ms"] for r in rows if r["name"] == "whole" and r["label"] == "labkit fp32"}
    pageable = {r["batch"]: r["median_ms"] for r in rows if r["name"] == "whole" and r["label"] == "labkit fp32 pageable"}
    if pageable:
        print("whole time with copies, pinned / pageable host memory: "
              + ", ".join(f"{n}: {pinned[n]:.2f} / {pageable[n]:.2f} ms" for n in batches))
    import matplotlib
    matplotlib.use("Agg")
    from labkit import plots
    fig = plots.batch_curves(whole, y="op_ms", title="AlexNet forward: op time")
    print(f"wrote {plots.save_figure(fig, Path(args.out) / 'alexnet.png')}")
    print("first call:", ", ".join(f"{k} {v:.1f} ms" for k, v in meta["first_call_ms"].items()))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
