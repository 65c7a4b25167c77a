"""The small ResNet's training step on labkit's kernels against PyTorch/cuDNN, in the same run.

    python benchmarks/resnet.py [--out results/benchmarks] [--sizes 16x64 16x256 64x1024] [--repeat 20]
                                [--backward small|gemm|direct]

For each size (channels x batch, 28x28 inputs): labkit's step (forward, backward, SGD with momentum;
labkit.models.resnet_small) eager and captured as one CUDA graph, and the same network in PyTorch
(labkit.peers.TorchResNetSmall, cuDNN's fastest algorithms, FP32) eager and as a CUDA graph; first,
one step from the same parameters and batch in both, and the largest relative difference of the
parameters after it; then one block convolution's forward, backward-weight and backward-data times
and the whole forward.  Each step's time beside the anchors' (../shared/anchors).  Writes
resnet_<backward>.json and .png.  Needs a GPU with PyTorch for the comparison; on the CPU executor it
times labkit's step alone at a small size.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit import autotune, measure, peers, plots  # noqa: E402
from labkit.backends.graph import Graph  # noqa: E402
from labkit.checks import rel_error  # noqa: E402
from labkit.models.resnet_small import BACKWARDS, ResNetSmall  # noqa: E402
from labkit.ops import conv_backward as cb  # noqa: E402

ANCHOR_MS = {(16, 64): (1.89, 0.62), (16, 256): (2.79, 1.19), (64, 1024): (15.60, 15.13)}  # PyTorch eager, graph
LR, MOMENTUM, WD = 0.05, 0.9, 5e-4


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/benchmarks")
    ap.add_argument("--sizes", nargs="+", default=["16x64", "16x256", "64x1024"])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--backward", default="small", choices=BACKWARDS, help="the kernels' rung (ResNetSmall)")
    args = ap.parse_args()
    dev = labkit.device()
    xp = labkit.xp
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes] if dev.is_gpu else [(4, 8)]
    peer = peers.cudnn_available() is None
    rng = np.random.default_rng(0)
    rows, meta = [], {"benchmark": "resnet", "lr": LR, "momentum": MOMENTUM, "weight_decay": WD,
                      "backward": args.backward}
    for c, N in sizes:
        net = ResNetSmall(c, seed=0, backward=args.backward)
        x_h = rng.random((N, 1, 28, 28), dtype=np.float32)
        y_h = rng.integers(0, 10, N).astype(np.int32)
        x, labels = xp.asarray(x_h), xp.asarray(y_h)
        row = {"channels": c, "batch": N, "backward": args.backward, "device": dev.label}
        if peer:
            import torch
            tnet = peers.TorchResNetSmall(net.state(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
            tx, tl = torch.as_tensor(x_h, device="cuda"), torch.as_tensor(y_h.astype(np.int64), device="cuda")
            before, start = len(autotune.history()), time.perf_counter()
            net.train_step(x, labels, lr=LR, momentum=MOMENTUM, weight_decay=WD)   # where the autotuner searches
            if dev.is_gpu:
                labkit.xp.cuda.get_current_stream().synchronize()
            decisions = autotune.history()[before:]
            row["first_step_s"] = time.perf_counter() - start
            row["autotune"] = {"searched": sum(d["source"] == "search" for d in decisions),
                               "decisions": len(decisions),
                               "search_s": sum(d.get("seconds") or 0.0 for d in decisions if d["source"] == "search"),
                               "sources": sorted({d["source"] for d in decisions})}
            tnet.step(tx, tl)
            mine, theirs = net.state(), tnet.state()
            row["params_rel_diff_after_one_step"] = max(rel_error(mine[k], theirs[k]) for k in mine)
        step = lambda: net.train_step(x, labels, lr=LR, momentum=MOMENTUM, weight_decay=WD)  # noqa: E731
        row["labkit_eager_ms"] = measure.time_fn(step, repeat=args.repeat).median_ms
        if dev.is_gpu:
            g = Graph([step])
            row["labkit_graph_ms"] = measure.time_fn(g.launch, repeat=args.repeat).median_ms
        if peer:
            row["pytorch_eager_ms"] = measure.time_fn(lambda: tnet.step(tx, tl), repeat=args.repeat).median_ms
            replay = tnet.graph(tx, tl)
            row["pytorch_graph_ms"] = measure.time_fn(replay, repeat=args.repeat).median_ms
        b = net.forward(x)                        # one block convolution's three passes, and the rest
        name, L, d = "block1.conv1", net.layers["block1.conv1"], b["d2"]
        parts = {"block conv forward": lambda: net.convs[name](b["a0"], b["h1"])}
        if args.backward == "small":   # as in the step: the bias gradient and the ReLU's backward fused
            parts["block conv backward weight"] = lambda: net.wgrad[name](b["a0"], d, net.grads[f"{name}.w"],
                                                                          bias=net.grads[f"{name}.b"])
            parts["block conv backward data"] = lambda: net.bwd_data[name](d, b["d3"], residual=b["d4"],
                                                                           gate=b["a0"])
        else:
            bwd = "tiled" if args.backward == "gemm" else "direct"
            parts["block conv backward weight"] = lambda: cb.conv2d_backward_weight(
                b["a0"], d, L, layout="CKKM", variant=bwd, out=net.grads[f"{name}.w"])
            parts["block conv backward data"] = (lambda: net.bwd_data[name](d, out=b["d3"])) \
                if args.backward == "gemm" else \
                (lambda: cb.conv2d_backward_data(d, net.params[f"{name}.w"], L, layout="CKKM", out=b["d3"]))
        parts["forward (all)"] = lambda: net.forward(x)
        row["parts_ms"] = {k: measure.time_fn(f, repeat=args.repeat).median_ms for k, f in parts.items()}
        if (c, N) in ANCHOR_MS:
            row["anchor_pytorch_eager_ms"], row["anchor_pytorch_graph_ms"] = ANCHOR_MS[(c, N)]
        rows.append(row)
        print(", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()
                        if k not in ("parts_ms", "autotune")), flush=True)
        if "autotune" in row:
            print(f"    first step {row['first_step_s']:.1f} s: {row['autotune']}", flush=True)
        print("    " + ", ".join(f"{k} {v:.4f} ms" for k, v in row["parts_ms"].items()), flush=True)
    out = Path(args.out)
    path = measure.save_rows(rows, out / f"resnet_{args.backward}.json", meta=meta)
    import matplotlib
    matplotlib.use("Agg")
    names = [f"c{r['channels']} b{r['batch']}" for r in rows]
    series = {k.replace("_ms", "").replace("_", " "): [r.get(k, float("nan")) for r in rows]
              for k in ("labkit_eager_ms", "labkit_graph_ms", "pytorch_eager_ms", "pytorch_graph_ms") if k in rows[0]}
    fig = plots.grouped_bars(names, series, title="small ResNet: one training step", ylabel="ms", device=dev.label)
    plots.save_figure(fig, out / f"resnet_{args.backward}.png")
    print(f"wrote {path} and {out / f'resnet_{args.backward}.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
