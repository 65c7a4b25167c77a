"""The TF32 implicit GEMM gathering from NCHW x against gathering from a channels-last copy (the copy
included), on AlexNet's five convolutions, beside cuDNN (PyTorch) FP32 and TF32 in the same run.

    python benchmarks/tf32_layout.py [--out benchmarks/results] [--batches 1024 64] [--repeat 10]
    python benchmarks/tf32_layout.py --plot-only benchmarks/results/tf32_layout_h200.json   # redraw its .png

Each layer runs the NCHW default tiles (labkit.ops.implicit.default_tiles with layout='nchw') and ten
NHWC tiles around the default, each checked against PyTorch's FP32 convolution (max |error| over the
largest output, at most 3e-3) before it is timed with CUDA events (median).  Writes
tf32_layout_<gpu>.json and .png.  Needs a GPU with PyTorch.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit import measure, plots  # noqa: E402
from labkit.ops import implicit  # noqa: E402
from labkit.ops.implicit import ALEXNET_CONVS, ImplicitConv2d, Tiles  # noqa: E402

NHWC = [Tiles("tf32", bm=bm, bn=bn, bk=bk, wm=wm, wn=wn, stages=st, minb=mb, layout="nhwc")
        for bm, bn, bk, wm, wn, st, mb in [
            (128, 128, 32, 2, 4, 3, 2), (128, 128, 32, 2, 4, 4, 1), (128, 128, 16, 2, 4, 4, 2), (128, 256, 32, 2, 4, 3, 1),
            (128, 256, 16, 2, 4, 4, 1), (64, 128, 32, 2, 4, 3, 2), (128, 128, 32, 4, 2, 3, 2), (128, 256, 32, 4, 2, 3, 1),
            (64, 256, 32, 2, 4, 3, 2), (128, 128, 16, 2, 4, 3, 2)]]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--batches", type=int, nargs="+", default=[1024, 64])
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--plot-only", metavar="JSON", help="draw the .png beside a JSON this script wrote, and stop")
    args = ap.parse_args()
    if args.plot_only:
        print(f"wrote {measure.redraw(args.plot_only, plot)}")
        return 0
    dev = labkit.device()
    if not dev.is_gpu:
        print("needs a GPU (TF32 runs on the tensor cores)")
        return 1
    import cupy as cp
    import torch
    torch.backends.cudnn.benchmark = True
    rows = []
    for N in args.batches:
        for name, L in ALEXNET_CONVS.items():
            rng = np.random.default_rng(0)
            x = cp.asarray(rng.standard_normal((N, L.C, L.H, L.W), dtype=np.float32))
            w = cp.asarray((rng.standard_normal((L.M, L.C // L.groups) + L.kernel_hw)
                            / np.sqrt(L.C // L.groups * L.taps)).astype(np.float32))
            b = cp.asarray(rng.standard_normal(L.M, dtype=np.float32))
            xt, wt, bt = (torch.as_tensor(a, device="cuda") for a in (x, w, b))
            conv = lambda: torch.nn.functional.conv2d(xt, wt, bt, stride=L.stride_hw, padding=L.pad_hw,  # noqa: E731
                                                      groups=L.groups)
            torch.backends.cudnn.allow_tf32 = False
            ref = conv().double()
            t_fp32 = measure.time_fn(conv, warmup=1, repeat=args.repeat, sync=False).median_ms
            torch.backends.cudnn.allow_tf32 = True
            t_tf32 = measure.time_fn(conv, warmup=1, repeat=args.repeat, sync=False).median_ms
            flops = 2.0 * N * L.M * L.out_hw[0] * L.out_hw[1] * (L.C // L.groups) * L.taps
            base = dict(layer=name, batch=N, cudnn_tf32_ms=t_tf32, cudnn_fp32_ms=t_fp32, gflop=flops / 1e9)
            tiles = [replace(implicit.default_tiles(L, "tf32"), layout="nchw")] + \
                [t for t in NHWC if t.shared_bytes() <= implicit.shared_optin_limit()]
            for t in tiles:
                c = ImplicitConv2d(w, b, L, precision="tf32", tiles=t)
                y = cp.full((N, L.M) + L.out_hw, cp.nan, dtype=cp.float32)
                ws = None if c.workspace_shape(N) is None else cp.empty(c.workspace_shape(N), cp.float32)
                c(x, out=y, workspace=ws)
                err = float((torch.as_tensor(y, device="cuda").double() - ref).abs().max() / ref.abs().max())
                if not err < 3e-3:
                    raise SystemExit(f"{name} {t.short()}: error {err:.1e} against PyTorch's FP32 convolution")
                ms = measure.time_fn(lambda: c(x, out=y, workspace=ws), warmup=1, repeat=args.repeat,
                                     sync=False).median_ms
                rows.append({**base, "tiles": t.short(), "layout": t.layout, "splits": c.plan(N).splits, "ms": ms,
                             "tflops": flops / ms / 1e9, "rel_err": err, "vs_cudnn_tf32": ms / t_tf32})
                print(f"batch {N} {name} {t.short():34s} {ms:8.3f} ms {flops / ms / 1e9:6.1f} TFLOP/s "
                      f"(cuDNN TF32 {t_tf32:.3f}, FP32 {t_fp32:.3f})", flush=True)
    tag = measure.device_tag(dev.name)
    out = Path(args.out)
    path = measure.save_rows(rows, out / f"tf32_layout_{tag}.json",
                             meta={"benchmark": "tf32_layout", "statistic": "median of CUDA-event times",
                                   "repeat": args.repeat})
    print(f"wrote {path} and {plot(rows, dev.label, out / f'tf32_layout_{tag}.png')}")
    return 0


def plot(rows: list[dict], device_label: str, png: Path) -> Path:
    """Bars: each layer and batch, the fastest tiles of each layout (ms)."""
    best: dict[tuple, float] = {}
    for r in rows:
        key = (r["batch"], r["layer"], r["layout"])
        best[key] = min(best.get(key, np.inf), r["ms"])
    groups: dict[str, dict[str, float]] = {}
    for (n, layer, lay), ms in best.items():
        groups.setdefault(f"batch {n}", {})[f"{layer} {lay}"] = ms
    import matplotlib
    matplotlib.use("Agg")
    fig = plots.grouped_hbars(groups, title="TF32 implicit GEMM: NCHW gather against the channels-last copy "
                                            "(best tiles of each)", xlabel="ms", device=device_label)
    return plots.save_figure(fig, png)


if __name__ == "__main__":
    sys.exit(main())
