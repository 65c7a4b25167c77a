"""cuDNN's algorithm table for the small ResNet's convolutions, beside labkit's kernels for the same passes.

    python benchmarks/cudnn_find.py [--out results/benchmarks] [--sizes 16x64 16x256 64x1024] [--repeat 10]

For the stem (1 -> c) and a block convolution (c -> c) at each size (channels x batch, 28x28): every
algorithm of cuDNN's forward, backward-data and backward-filter passes with its time and workspace,
found by cudnnFind*AlgorithmEx (FP32 FMA math and TF32 tensor-op math; labkit.peers.cudnn,
ctypes on libcudnn), and labkit's kernel for the same pass, the one the network runs (the direct
kernel or Winograd's, as the tuned table decides; tuned tiles; GPU ms per launch); the cost of
creating a cuDNN handle.  Writes cudnn_find.json (benchmarks/results/
cudnn_find_h100.json is the H100's, which notebook 10 shows on a machine without cuDNN).  Needs a GPU
with libcudnn.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit import measure  # noqa: E402
from labkit.peers import cudnn as ca  # noqa: E402
from labkit.ladder import resnet_kernels as rk  # noqa: E402
from labkit.measure import per_launch_ms  # noqa: E402
from labkit.shapes import ConvLayer  # noqa: E402

PASSES = {"fwd": "forward", "bwd_data": "data", "bwd_filter": "weight"}   # cuDNN's names -> labkit's


def labkit_ms(layer: ConvLayer, N: int, repeat: int) -> tuple[dict, dict]:
    """GPU ms per launch of labkit's kernel on each pass, the one the network runs, and which that is
    ("direct" or "winograd"); the stem, with C = 1, has no backward data."""
    import cupy as cp
    out, algorithms = {}, {}
    for name, kind in PASSES.items():
        if kind == "data" and layer.C == 1:
            continue
        op, algorithms[name] = rk.network_pass(kind, layer, N)   # as the network chooses it (the autotuner)
        cin = layer.M if kind == "data" else layer.C
        a = cp.random.standard_normal((N, cin, layer.H, layer.W), dtype=cp.float32)
        dy = cp.random.standard_normal((N, layer.M, layer.H, layer.W), dtype=cp.float32)
        run = (lambda: op(a, dy)) if kind == "weight" else (lambda: op(a))
        out[name] = per_launch_ms(run, repeat=repeat)
    return out, algorithms


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/benchmarks")
    ap.add_argument("--sizes", nargs="+", default=["16x64", "16x256", "64x1024"])
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    lib = ca.load_cudnn()
    if not labkit.device().is_gpu or lib is None:
        print("cudnn_find needs a GPU and libcudnn; the H100's table is", ca.STORED)
        return 0
    handle = ca.handle_create_ms(lib)
    rows = []
    for size in args.sizes:
        c, N = (int(v) for v in size.split("x"))
        for name, cin in (("stem", 1), ("block", c)):
            layer = ConvLayer(cin, 28, 28, c, 3, 1, 1)
            ours, algorithms = labkit_ms(layer, N, args.repeat)
            row = {"layer": f"{name} {cin}->{c}", "channels": c, "batch": N, "key": layer.key,
                   **ca.find_algorithms(layer, N, lib=lib, progress=False),      # a line per pass is printed below
                   "labkit_ms": ours, "labkit_algorithm": algorithms,
                   "floor_ms": {p: measure.floor_ms(rk.pass_cost(k, layer, N), labkit.device().ceilings()) for p, k in PASSES.items()}}
            rows.append(row)
            for p in ca.PASS_NAMES:
                best = {m: (row[m][p][0] if row[m][p] else None) for m in ("fp32", "tf32")}
                mine = ours.get(p)
                print(f"{row['layer']:>14s} b{N:<5d} {p:>10s}: cuDNN FP32 {best['fp32']['algo']} {best['fp32']['ms']:.4f} ms, "
                      f"TF32 {best['tf32']['algo']} {best['tf32']['ms']:.4f} ms; labkit "
                      + (f"{mine:.4f} ms ({mine / best['fp32']['ms']:.2f}x cuDNN FP32, {algorithms[p]})" if mine else "-"),
                      flush=True)
    version = int(lib.cudnnGetVersion())
    path = measure.save_rows(rows, Path(args.out) / "cudnn_find.json",
                             meta={"benchmark": "cudnn_find", "cudnn_version": version, **handle,
                                   "workspace_MiB_offered": ca.WORKSPACE >> 20})
    print(f"cuDNN {version}; {handle}; wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
