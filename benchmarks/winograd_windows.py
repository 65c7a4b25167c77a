"""Winograd F(2, r) as GEMMs (conv_winograd_gemm.cu) on windows beyond 3x3, against the implicit GEMM
and cuDNN (PyTorch, FP32 with TF32 off), same run, each kernel checked first.

    python benchmarks/winograd_windows.py [--out benchmarks/results] [--repeat 10] [--budget 4]
    python benchmarks/winograd_windows.py --plot-only benchmarks/results/winograd_windows_h200.json

Layers: AlexNet's conv2 (5x5, two groups) to conv5 at batches 64 and 1,024, torchvision AlexNet's conv2
(5x5, one group), and layers of other shapes at batch 64: 7x7, 5x5 and 3x3 dense, 1 x 7 and 7 x 1
(Inception's factorized windows), 5 x 3, a 5x5 of four groups.  Per layer and batch:
- cuDNN FP32 (torch.nn.functional.conv2d, cudnn.benchmark on, TF32 off), eager;
- winograd_gemm: each of its GEMM tiles (gemm_tiles, at most 6; in chunks of images where the batch's
  workspace would pass its bound), checked against cuDNN's output (max
  |error| / max |y| <= 1e-4), the fastest kept;
- the implicit GEMM alone: labkit.conv2d's auto search restricted to the implicit family (budget
  ``--budget`` s);
- auto: labkit.conv2d(variant="auto")'s own choice among every family, and its time.
Times are CUDA-event medians; FLOPs are the direct convolution's (2 N M Ho Wo C/groups KH KW), so a
Winograd time can pass 100% of the FP32 floor.  Writes winograd_windows_<gpu>.json and .png.  Needs a
GPU with PyTorch.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit import measure, plots  # noqa: E402
from labkit.ops import conv_auto, conv_winograd_gemm as wgemm  # noqa: E402
from labkit.shapes import ALEXNET_CONVS, ConvLayer  # noqa: E402

LAYERS = [  # name, layer, batches
    *[(f"alexnet {n}", L, (64, 1024)) for n, L in ALEXNET_CONVS.items() if n != "conv1"],
    ("torchvision alexnet conv2", ConvLayer.of(64, 27, 27, 192, 5, 1, 2), (64,)),
    ("7x7 64->64 56x56", ConvLayer.of(64, 56, 56, 64, 7, 1, 3), (64,)),
    ("5x5 128->128 28x28", ConvLayer.of(128, 28, 28, 128, 5, 1, 2), (64,)),
    ("5x5 g4 256->256 14x14", ConvLayer.of(256, 14, 14, 256, 5, 1, 2, 1, 4), (64,)),
    ("3x3 256->256 28x28", ConvLayer.of(256, 28, 28, 256, 3, 1, 1), (64,)),
    ("1x7 192->192 17x17", ConvLayer.of(192, 17, 17, 192, (1, 7), 1, (0, 3)), (64,)),
    ("7x1 192->192 17x17", ConvLayer.of(192, 17, 17, 192, (7, 1), 1, (3, 0)), (64,)),
    ("5x3 128->128 32x32", ConvLayer.of(128, 32, 32, 128, (5, 3), 1, (2, 1)), (64,)),
]
TOLERANCE = 1e-4


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--budget", type=float, default=4.0, help="autotuner seconds per search")
    ap.add_argument("--plot-only", metavar="JSON", help="draw the .png beside a JSON this script wrote, and stop")
    args = ap.parse_args()
    if args.plot_only:
        print(f"wrote {measure.redraw(args.plot_only, plot)}")
        return 0
    dev = labkit.device()
    if not dev.is_gpu:
        print("needs a GPU (cuDNN beside it)")
        return 1
    os.environ.setdefault("LABKIT_AUTOTUNE_BUDGET", str(args.budget))
    import cupy as cp
    import torch
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    peak = dev.ceilings().fp32_TFLOPs
    rows = []
    for name, L, batches in LAYERS:
        for N in batches:
            rng = np.random.default_rng(0)
            x = cp.asarray(rng.standard_normal((N, L.C, L.H, L.W), dtype=np.float32))
            w = cp.asarray((rng.standard_normal((L.M, L.C // L.groups) + L.kernel_hw)
                            / np.sqrt(L.C // L.groups * L.taps)).astype(np.float32))
            b = cp.asarray(rng.standard_normal(L.M, dtype=np.float32))
            xt, wt, bt = (torch.as_tensor(a, device="cuda") for a in (x, w, b))
            conv = lambda: torch.nn.functional.conv2d(xt, wt, bt, padding=L.pad_hw, groups=L.groups)  # noqa: E731
            ref = conv()
            scale = float(ref.abs().max())
            t_cudnn = measure.time_fn(conv, warmup=2, repeat=args.repeat, sync=False).median_ms
            y = cp.full((N, L.M) + L.out_hw, cp.nan, dtype=cp.float32)

            def checked(run, what):
                y.fill(cp.nan)
                run(x, y)
                err = float((torch.as_tensor(y, device="cuda") - ref).abs().max()) / scale
                if not err <= TOLERANCE:
                    raise SystemExit(f"{name} batch {N} {what}: error {err:.1e} against cuDNN's FP32 convolution")
                ms = measure.time_fn(lambda: run(x, y), warmup=2, repeat=args.repeat, sync=False).median_ms
                return ms, err
            flops = 2.0 * N * L.M * L.out_hw[0] * L.out_hw[1] * (L.C // L.groups) * L.taps
            row = dict(layer=name, key=L.key, batch=N, gflop=flops / 1e9, cudnn_ms=t_cudnn,
                       fp32_peak_TFLOPs=peak, cudnn_pct_fp32_peak=100 * flops / t_cudnn / 1e9 / peak)
            if wgemm.chunk(L, N) >= 1:           # in chunks of images where the whole batch's V and Mx do not fit
                best = None
                for tiles in wgemm.gemm_tiles(L, wgemm.tiles_of(L, N), 6):
                    layer = wgemm.WinogradGemmConv2d(w, b, L, tiles=tiles)
                    ms, err = checked(lambda a, o: layer(a, o), f"winograd_gemm {tiles}")
                    if best is None or ms < best[0]:
                        best = (ms, err, tiles)
                row.update(winograd_gemm_ms=best[0], winograd_gemm_err=best[1], winograd_gemm_tiles=best[2],
                           winograd_gemm_pct_fp32_peak=100 * flops / best[0] / 1e9 / peak)
            else:
                row["winograd_gemm_ms"] = None
                one = wgemm.workspace_bytes(L, 1) / 2**20
                row["winograd_gemm_note"] = (f"one image's V and Mx need {one:.0f} MiB, "
                                             f"over {wgemm.workspace_limit() / 2**20:.0f} MiB")
            implicit = conv_auto.AutoConv2d(w, b, L, families=("implicit",))
            auto = conv_auto.AutoConv2d(w, b, L)
            for what, layer in (("implicit", implicit), ("auto", auto)):
                ms, err = checked(lambda a, o: layer(a, o), what)
                row.update({f"{what}_ms": ms, f"{what}_err": err, f"{what}_choice": layer.choice(N),
                            f"{what}_pct_fp32_peak": 100 * flops / ms / 1e9 / peak})
            row["auto_vs_cudnn"] = row["auto_ms"] / t_cudnn
            rows.append(row)
            wg = row["winograd_gemm_ms"]
            print(f"{name:28s} N={N:5d} cuDNN {t_cudnn:8.3f}  implicit {row['implicit_ms']:8.3f}  winograd_gemm "
                  f"{'-' if wg is None else f'{wg:8.3f}'}  auto {row['auto_ms']:8.3f} "
                  f"({row['auto_choice']['family']}, {row['auto_vs_cudnn']:.2f}x cuDNN)", flush=True)
    tag = measure.device_tag(dev.name)
    out = Path(args.out)
    path = measure.save_rows(rows, out / f"winograd_windows_{tag}.json",
                             meta={"benchmark": "winograd_windows", "statistic": "median of CUDA-event times",
                                   "repeat": args.repeat,
                                   "autotune_budget_s": float(os.environ["LABKIT_AUTOTUNE_BUDGET"]),
                                   "cudnn": "torch.nn.functional.conv2d, cudnn.benchmark, allow_tf32 False",
                                   "tolerance": TOLERANCE, "torch": torch.__version__})
    print(f"wrote {path} and {plot(rows, dev.label, out / f'winograd_windows_{tag}.png')}")
    return 0


def plot(rows: list[dict], device_label: str, png: Path) -> Path:
    """Bars: each layer and batch, time relative to cuDNN FP32 (1.0 the line) of the implicit GEMM,
    winograd_gemm and auto's choice."""
    groups: dict[str, dict[str, float]] = {}
    for r in rows:
        g = groups.setdefault(f"{r['layer']} N={r['batch']}", {})
        for what in ("implicit", "winograd_gemm", "auto"):
            if r.get(f"{what}_ms") is not None:
                g[f"{what}{' (' + r['auto_choice']['family'] + ')' if what == 'auto' else ''}"] = \
                    r[f"{what}_ms"] / r["cudnn_ms"]
    import matplotlib
    matplotlib.use("Agg")
    fig = plots.grouped_hbars(groups, title="Winograd F(2, r) as GEMMs beside the implicit GEMM: time / cuDNN FP32",
                              xlabel="time relative to cuDNN FP32 (lower is faster)", ref=1.0, device=device_label)
    return plots.save_figure(fig, png)


if __name__ == "__main__":
    sys.exit(main())
