"""MobileNetV2 (torchvision's layout, 224x224, BN folded) on labkit's kernels against PyTorch in the
same run: the depthwise layers against cuDNN and the memory floor, the batch sweep eager and as CUDA
graphs, the time per kind of layer, and first-call costs.

    python benchmarks/mobilenet.py [--out results/benchmarks] [--batches 1 8 32 ...] [--repeat 10]

Correct first: the network at batch 2 against its float64 reference (BN applied as BN) and against
PyTorch's probabilities (torchvision's model with the same weights); every depthwise layer against
the float64 reference.  Writes mobilenet.json (device, versions, rows, targets with verdicts) and
mobilenet.png (sweep, depthwise against the floor, layer kinds).  Weights: the seeded synthetic ones
(timings do not depend on the values).  On the CPU executor: a 64x64 input, batches 1 and 2, not
GPU timings.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit import measure, peers, reference  # noqa: E402
from labkit.checks import rel_error, to_numpy  # noqa: E402
from labkit.ladder import mobilenet as study  # noqa: E402
from labkit.models import mobilenet_v2 as mb  # noqa: E402
from labkit.ops.dw_project import ProjectTiles  # noqa: E402

ANCHOR_TORCH_GRAPH_MS = {1: 0.67, 8: 1.24, 32: 3.38, 128: 12.34, 256: 23.85}   # ../shared/anchors (FP32)


def targets(rows: list[dict], dw: list[dict]) -> list[str]:
    out = []
    big = next((r for r in dw if r["name"] == "anchor" and r["C"] == 512 and r["batch"] == 128), None)
    if big and "cudnn_ms" in big:
        r1, r2 = big["tiled_ms"] / big["cudnn_ms"], big["tiled_ms"] / big["floor_ms"]
        out.append(f"depthwise n128 c512 32x32 s1: {big['tiled_ms']:.4f} ms = {r1:.2f}x cuDNN ({big['cudnn_ms']:.4f}) "
                   f"[<= 0.33x: {'met' if r1 <= 0.33 else 'MISSED'}], {r2:.2f}x the floor ({big['floor_ms']:.4f}) "
                   f"[<= 1.2x: {'met' if r2 <= 1.2 else 'MISSED'}]")
    net32 = [r for r in dw if r["name"].startswith("features") and r["batch"] == 32]
    if net32:
        worst = max(net32, key=lambda r: r["tiled_ms"] / r["floor_ms"])
        x = worst["tiled_ms"] / worst["floor_ms"]
        out.append(f"every network depthwise layer at batch 32 <= 1.5x its floor: worst {worst['name']} "
                   f"(c{worst['C']} {worst['H']}x{worst['W']} s{worst['stride']}) {x:.2f}x "
                   f"[{'met' if x <= 1.5 else 'MISSED'}]"
                   + (f"; a device-to-device copy of its bytes takes {worst['copy_ms']:.4f} ms "
                      f"({worst['tiled_ms'] / worst['copy_ms']:.2f}x)" if "copy_ms" in worst else ""))
    by = {(r["label"], r["batch"]): r["median_ms"] for r in rows}
    if ("PyTorch fp32 graph", 1) in by:
        g, p = by[("labkit fp32 graph", 1)], by[("PyTorch fp32 graph", 1)]
        out.append(f"graph at batch 1: labkit {g:.3f} ms / PyTorch {p:.3f} ms = {g / p:.2f}x "
                   f"[<= 1.0x: {'met' if g <= p else 'MISSED'}]")
        e, pe = by[("labkit fp32 eager", 1)], by[("PyTorch fp32 eager", 1)]
        out.append(f"eager at batch 1: labkit {e:.3f} ms / PyTorch {pe:.3f} ms = {e / pe:.2f}x "
                   f"[<= 1.0x: {'met' if e <= pe else 'MISSED'}]")
        big_batches = sorted(n for (lab, n) in by if lab == "PyTorch fp32 graph" and n >= 32)
        if big_batches:
            ratios = {n: by[("labkit fp32 graph", n)] / by[("PyTorch fp32 graph", n)] for n in big_batches}
            ok = all(v <= 0.7 for v in ratios.values())
            out.append("graph at batch >= 32, labkit / PyTorch: " + ", ".join(f"{n}: {v:.2f}x" for n, v in ratios.items())
                       + f" [<= 0.7x: {'met' if ok else 'MISSED'}]")
    tf = sorted(n for (lab, n) in by if lab == "PyTorch tf32 graph")
    if tf:
        out.append("TF32 graph (informational), labkit / PyTorch: " + ", ".join(
            f"{n}: {by[('labkit tf32 graph', n)]:.3f} / {by[('PyTorch tf32 graph', n)]:.3f} ms" for n in tf))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/benchmarks")
    ap.add_argument("--batches", type=int, nargs="+")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--skip-depthwise", action="store_true")
    ap.add_argument("--depthwise-only", action="store_true", help="the depthwise table alone (no sweep, no plot)")
    args = ap.parse_args()
    dev, xp = labkit.device(), labkit.xp
    on_gpu = dev.is_gpu
    hw = (224, 224) if on_gpu else (64, 64)
    batches = args.batches or labkit.sizes(gpu=[1, 2, 4, 8, 16, 32, 64, 128, 256], cpu=[1, 2])
    weights = mb.synthetic_weights()
    no_peer = peers.cudnn_available()
    meta = {"benchmark": "mobilenet", "weights": "synthetic (seed 2018)", "input_hw": hw, "batches": batches,
            "peer": no_peer or "PyTorch/cuDNN FP32 (TF32 off)", "versions": labkit.device_query.versions()}

    # First calls: the network made and run once (NVRTC compiles, or CuPy's cache on disk), then cuDNN's handle.
    t0 = time.perf_counter()
    net = mb.MobileNetV2(weights, input_hw=hw)
    meta["make_network_ms"] = (time.perf_counter() - t0) * 1e3
    rng = np.random.default_rng(1)
    x2 = rng.standard_normal((2, 3) + hw).astype(np.float32)
    t0 = time.perf_counter()
    logits = to_numpy(net.logits(xp.asarray(x2)))
    meta["first_forward_ms"] = (time.perf_counter() - t0) * 1e3
    ref = mb.reference_logits(weights, x2)
    meta["rel_err_labkit"] = err = rel_error(logits, ref)
    top5 = lambda v: np.argsort(-v, axis=1)[:, :5]   # noqa: E731
    meta["top5_labkit_agrees"] = bool((top5(logits) == top5(ref)).all())
    if not (err <= 1e-4 and meta["top5_labkit_agrees"]):
        print(f"labkit's MobileNetV2 disagrees with the float64 reference: {err:.2e}")
        return 1
    torch_run = None
    if no_peer is None:
        meta["cudnn_handle"] = study.cudnn_handle_ms()
        torch_run = peers.torch_mobilenet_v2(weights)
        meta["peer_source"] = torch_run.source
        p = torch_run(xp.asarray(x2))
        meta["rel_err_pytorch"] = perr = rel_error(xp.asarray(p), reference.softmax(ref))
        if not perr <= 1e-4:
            print(f"the PyTorch peer disagrees with the reference ({perr:.2e}): not the same network")
            return 1
    print(f"MobileNetV2 at {hw[0]}x{hw[1]} on {dev.label}: labkit vs float64 reference {err:.2e} "
          f"(top-5 agree: {meta['top5_labkit_agrees']}); PyTorch vs reference {meta.get('rel_err_pytorch', 'n/a')}")

    dw = []
    if not args.skip_depthwise:
        cases = study.network_depthwise(32 if on_gpu else 1, hw)
        if on_gpu:
            cases += [("anchor", n, L) for n, L in study.ANCHOR_DEPTHWISE]
        dw = study.depthwise_rows(cases, repeat=args.repeat)
        print(f"{'layer':>12s} {'N':>4s} {'C':>4s} {'HxW':>8s} s {'naive':>8s} {'tiled':>8s} {'cuDNN':>8s} "
              f"{'floor':>8s} {'x floor':>7s} {'copy':>8s}  tiling")
        for r in dw:
            print(f"{r['name']:>12s} {r['batch']:4d} {r['C']:4d} {r['H']:>4d}x{r['W']:<3d} {r['stride']} "
                  f"{r['naive_ms']:8.4f} {r['tiled_ms']:8.4f} {r.get('cudnn_ms', float('nan')):8.4f} "
                  f"{r['floor_ms']:8.4f} {r['tiled_ms'] / r['floor_ms']:7.2f} {r.get('copy_ms', float('nan')):8.4f}"
                  f"  {r['tiling']}")

    fused = study.fused_rows(32 if on_gpu else 1, hw, repeat=args.repeat)
    for r in fused:
        cols = {k: v for k, v in r.items() if k.endswith(" ms")}
        print(f"{r['name']:>12s} b{r['batch']} c{r['C']} {r['H']}/{r['stride']} -> {r['M']}: two kernels "
              f"{r['two_kernels_ms']:.4f} ms; " + ", ".join(f"{k} {v:.4f}" for k, v in cols.items()))
    if args.depthwise_only:
        for line in targets([], dw):
            print("target:", line)
        return 0
    kinds = [study.layer_kinds(net, n, repeat=args.repeat) for n in batches if n in (1, 32, 128)]
    rows = study.network_rows(net, torch_run, batches, repeat=args.repeat)
    # The blocks of small planes with depthwise and projection fused, each at the fastest tiles measured
    # above (one tile choice for all of them: the one fastest summed over the blocks).
    if fused:
        keys = [k for k in fused[0] if k.startswith("fused ")]
        best = min(keys, key=lambda k: sum(r[k] for r in fused))
        bm, bn, bk = (int(v) for v in best.split()[1].split("x"))
        meta["fused_tiles"] = best
        for side in (7, 14):
            netf = mb.MobileNetV2(weights, input_hw=hw, fuse_below=side, fuse_tiles=ProjectTiles(bm, bn, bk))
            errf = rel_error(to_numpy(netf.logits(xp.asarray(x2))), ref)
            if not errf <= 1e-4:
                print(f"MobileNetV2 with blocks fused up to {side}x{side} disagrees with the reference: {errf:.2e}")
                return 1
            rows += [dict(r, label=f"labkit fp32 graph, fused <= {side}x{side}") for r in
                     study.network_rows(netf, None, batches, repeat=args.repeat) if r["label"].endswith("graph")]
    if on_gpu:   # the GEMM layers on the tensor cores (TF32), against PyTorch with TF32 on: checked first
        net32 = mb.MobileNetV2(weights, input_hw=hw, precision="tf32")
        meta["rel_err_labkit_tf32"] = err32 = rel_error(to_numpy(net32.logits(xp.asarray(x2))), ref)
        if not err32 <= 5e-3:
            print(f"labkit's MobileNetV2 in TF32 disagrees with the float64 reference: {err32:.2e}")
            return 1
        torch32 = peers.torch_mobilenet_v2(weights, tf32=True) if torch_run is not None else None
        rows += study.network_rows(net32, torch32, batches, repeat=args.repeat, torch_label="tf32")
    labels = list(dict.fromkeys(r["label"] for r in rows))
    print(f"{'batch':>6s} " + " ".join(f"{lab:>20s}" for lab in labels) + "   (ms per forward, softmax included)")
    for n in batches:
        cells = {r["label"]: r["median_ms"] for r in rows if r["batch"] == n}
        print(f"{n:6d} " + " ".join(f"{cells.get(lab, float('nan')):20.3f}" for lab in labels))
    for k in kinds:
        print(f"batch {k['batch']}: depthwise {k['depthwise']:.3f} ms, pointwise {k['pointwise']:.3f} ms, "
              f"rest {k['rest']:.3f} ms (kernels timed one by one)")
    if on_gpu:
        meta["first_calls"] = study.first_call_costs(hw)
        for what, costs in meta["first_calls"].items():
            print(f"first call, {what}: " + ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                                                      for k, v in costs.items()))
    meta["targets"] = targets(rows, dw)
    for line in meta["targets"]:
        print("target:", line)
    meta["anchor_pytorch_graph_ms"] = ANCHOR_TORCH_GRAPH_MS
    out = Path(args.out)
    path = measure.save_rows(rows + [dict(r, kind="depthwise") for r in dw] + [dict(k, kind="layer kinds") for k in kinds]
                             + [dict(r, kind="fused") for r in fused],
                             out / "mobilenet.json", meta=meta)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from labkit import plots
    fig, axes = plt.subplots(1, 3, figsize=(18, 4.8))
    plots.batch_curves([r for r in rows if "graph" in r["label"] or "fp32" in r["label"]], ax=axes[0],
                       title="MobileNetV2 forward (FP32 eager and graph; TF32 graph)")
    if dw:
        names = [f"{r['name'].replace('features.', 'f')}\nc{r['C']} {r['H']}/{r['stride']}" for r in dw]
        plots.grouped_bars(names, {"labkit tiled / floor": [r["tiled_ms"] / r["floor_ms"] for r in dw],
                                   **({"cuDNN / floor": [r["cudnn_ms"] / r["floor_ms"] for r in dw]}
                                      if dw and "cudnn_ms" in dw[0] else {})},
                           title="depthwise 3x3: time / memory floor", ylabel="x floor", ax=axes[1])
        axes[1].tick_params(axis="x", labelsize=6)
    if kinds:
        plots.stacked_bars([f"batch {k['batch']}" for k in kinds],
                           {part: [k[part] for k in kinds] for part in ("depthwise", "pointwise", "fused", "rest")
                            if any(k[part] for k in kinds)},
                           title="labkit: time per kind of layer", ax=axes[2])
    fig.tight_layout()
    print(f"wrote {plots.save_figure(fig, out / 'mobilenet.png')}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
