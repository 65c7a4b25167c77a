"""Transfers, streams and graphs: host<->device bandwidth, and a forward from host memory, serial
against the sub-batch pipeline, beside PyTorch in the same run.

    python benchmarks/streams.py [--out results/benchmarks] [--repeat 10] [--quick]

1. Bandwidth: host-to-device and device-to-host copies of 4 KiB .. 512 MiB from pinned and from
   pageable host memory (CUDA events, median).
2. AlexNet FP32 at batch 1,024 from pinned host memory to host probabilities: the compute alone (one
   CUDA graph), the serial pass (copy in, graph, copy out), the pipeline with 1, 2, 4 and 8 streams and
   several sub-batch schedules; PyTorch (cuDNN) forward alone and serial with copies.
3. The sub-batch size at batch 1,024 on 4 streams (4 .. 512 images), with graphs and eagerly.
4. Every batch from 64 to 1,024: serial against the pipeline on 4 streams.
5. Fashion-MNIST at batch 10,000 the same way; every GPU of the host (devices="all").
Writes streams.json (device, versions, every row, the targets with verdicts), streams.png (bandwidth,
sub-batch curve, batch sweep) and streams_timeline.png (the pipeline's stages per stream).  On the
CPU executor (--quick there): tiny sizes, and the times are not GPU timings.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit import measure, peers  # noqa: E402
from labkit.data import load_fashion_mnist  # noqa: E402
from labkit.ladder import streams  # noqa: E402
from labkit.models import alexnet, fashion_mnist as fm  # noqa: E402
from labkit.pipeline import plot_timeline  # noqa: E402


def targets(rows: list[dict]) -> list[str]:
    out = []
    bw = [r for r in rows if r.get("kind") == "bandwidth" and r["direction"] == "H2D" and r["host_memory"] == "pinned"]
    if bw:
        best = max(r["GBps"] for r in bw)
        big = [r for r in bw if r["bytes"] >= 64 << 20]
        worst = min(big, key=lambda r: r["GBps"])
        out.append(f"pinned H2D at >= 64 MiB: lowest {worst['GBps']:.1f} GB/s ({worst['bytes'] >> 20} MiB) = "
                   f"{100 * worst['GBps'] / best:.1f}% of the best measured {best:.1f} GB/s (>= 90%: "
                   f"{'met' if worst['GBps'] >= 0.9 * best else 'MISSED'})")
    a = [r for r in rows if r.get("kind") == "forward" and r.get("model") == "alexnet" and r["batch"] == 1024]
    comp = next((r["median_ms"] for r in a if r["label"] == "compute only (graph)"), None)
    pipes = [r for r in a if r["label"].startswith("pipeline")]
    if comp and pipes:
        best = min(pipes, key=lambda r: r["median_ms"])
        out.append(f"AlexNet FP32 batch 1024, copies in and out, best pipeline ({best['label']}): "
                   f"{best['median_ms']:.2f} ms / compute-only graph {comp:.2f} ms = {best['median_ms'] / comp:.3f}x "
                   f"(<= 1.05x: {'met' if best['median_ms'] <= 1.05 * comp else 'MISSED'})")
        tc = next((r["median_ms"] for r in a if r["label"] == "PyTorch compute only"), None)
        ts = next((r["median_ms"] for r in a if r["label"].startswith("PyTorch serial")), None)
        if tc and ts:
            out.append(f"  PyTorch serial with copies / its forward alone: {ts:.2f} / {tc:.2f} ms = {ts / tc:.3f}x; "
                       f"labkit pipeline / PyTorch serial = {best['median_ms'] / ts:.2f}x")
    sweep = [r for r in rows if r.get("kind") == "forward" and r.get("model") == "alexnet-sweep"]
    verdicts = []
    for n in sorted({r["batch"] for r in sweep}):
        ser = next(r["median_ms"] for r in sweep if r["batch"] == n and r["label"].startswith("serial"))
        for r in sweep:
            if r["batch"] == n and r["label"].startswith("pipeline") and r.get("streams", 0) >= 4 and \
                    r["label"].endswith(("tuned", "best split")):
                verdicts.append((r["median_ms"] <= ser, f"batch {n}: {r['label']} ({r['schedule']}) "
                                 f"{r['median_ms']:.3f} vs serial {ser:.3f} ms"))
    if verdicts:
        out.append("pipeline with >= 4 streams, tuned, never slower than serial at batch >= 64: "
                   + ("met" if all(ok for ok, _ in verdicts if "tuned" in _) else "MISSED"))
        out += ["  " + ("ok    " if ok else "slower ") + text for ok, text in verdicts]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/benchmarks")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="tiny sizes only (the CPU executor)")
    args = ap.parse_args()
    dev = labkit.device()
    quick = args.quick or not dev.is_gpu
    rep = 2 if quick else args.repeat
    rows = streams.bandwidth_rows([4 << 10, 1 << 20] if quick else streams.COPY_SIZES, repeat=rep)

    weights, source = alexnet.load_weights()
    net = alexnet.AlexNet(weights)
    photos = alexnet.preprocess(alexnet.load_photos()[0])
    N = 4 if quick else 1024
    x = streams.host_batch(net, N, source=photos)
    peer = None
    if peers.cudnn_available() is None:
        peer = streams.torch_serial(peers.torch_alexnet(weights).forward, repeat=rep)
    if quick:
        configs = [dict(streams=2, sub_batch=2)]
    else:
        configs = [dict(streams=s, sub_batch=b) for s in (1, 2, 4, 8) for b in (128, 256)]
        configs += [dict(streams=4, sub_batch=None), dict(streams=8, sub_batch=64), dict(streams=16, sub_batch=64),
                    dict(streams=8, sub_batch=[32, 96, 128]), dict(streams=8, sub_batch=[16, 112, 128]),
                    dict(streams=4, sub_batch=[32, 96, 256]), dict(streams=4, sub_batch=[16, 48, 192, 384]),
                    dict(streams=3, sub_batch=[64, 192, 384]), dict(streams=2, sub_batch=[64, 320]),
                    dict(streams=2, sub_batch=[32, 160, 416])]
    fw = streams.pipeline_rows(net, x, configs, repeat=rep, peer=peer)
    rows += [{**r, "model": "alexnet"} for r in fw]
    best = min((r for r in fw if r["label"].startswith("pipeline")), key=lambda r: r["median_ms"])
    best_cfg = next(c for c in configs if streams.schedule_label(c["streams"], c.get("sub_batch")) == best["label"])

    sizes = [1, 2] if quick else [4, 8, 16, 32, 64, 128, 256, 512]
    for graphs in (True, False):
        sb = streams.sub_batch_rows(net, x, streams=4 if not quick else 2, sizes=sizes, graphs=graphs, repeat=rep)
        rows += [{**r, "model": "alexnet"} for r in sb]

    for n in ([2, 4] if quick else [64, 128, 256, 512, 1024]):
        xs = x[:n]
        sw = streams.pipeline_rows(net, xs, [dict(streams=4, sub_batch=None)], repeat=rep)
        sw += streams.tuned_rows(net, xs, streams=(2,) if quick else (4, 8), repeat=rep)
        rows += [{**r, "model": "alexnet-sweep"} for r in sw]

    # What a pipeline call costs the host (queueing every copy and graph launch of every sub-batch).
    for n, sb_ in ([(4, 2)] if quick else [(64, [8, 64]), (1024, [64, 256]), (1024, 128)]):
        rows += [{**r, "model": "alexnet"} for r in streams.host_rows(net, x[:n], streams=4, sub_batch=sb_,
                                                                       repeat=5 if quick else 50)]

    # The best schedule's timeline, and the serial one, for the plot.
    tl_rows = {"serial": streams.timeline_rows(net, x, serial=True, **best_cfg),
               "pipeline": streams.timeline_rows(net, x, **best_cfg)}
    net.clear_plans()
    measure.release_gpu_memory()

    fnet = fm.FashionNet()
    images = fm.preprocess(load_fashion_mnist("test")[0][:2000])
    nf = 16 if quick else 10_000
    xf = streams.host_batch(fnet, nf, seed=1, source=images)
    fpeer = None
    if peers.cudnn_available() is None:
        fpeer = streams.torch_serial(peers.cudnn_fashion_net(fm.load_weights()).forward, repeat=rep)
    fcfg = [dict(streams=2, sub_batch=4)] if quick else [dict(streams=s, sub_batch=b) for s in (2, 4)
                                                          for b in (1000, 2500, 5000)]
    fcfg.append(dict(streams=2, sub_batch=nf // 4, devices="all"))
    rows += [{**r, "model": "fashion"} for r in streams.pipeline_rows(fnet, xf, fcfg, repeat=rep, peer=fpeer)]

    lines = targets(rows) if dev.is_gpu else ["the CPU executor ran: these are not GPU timings, no target is judged"]
    out = Path(args.out)
    path = measure.save_rows(rows, out / "streams.json",
                             meta={"benchmark": "streams", "weights": source, "repeat": rep, "targets": lines,
                                   "best_alexnet_schedule": best["label"], "timeline": tl_rows})
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from labkit import plots
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.6))
    for lab in ("H2D pinned", "H2D pageable", "D2H pinned", "D2H pageable"):
        sel = [r for r in rows if r.get("kind") == "bandwidth" and r["label"] == lab]
        axes[0].plot([r["bytes"] for r in sel], [r["GBps"] for r in sel], marker="o", label=lab)
    axes[0].set(xscale="log", xlabel="bytes per copy", ylabel="GB/s", title="host <-> device bandwidth")
    axes[0].legend(fontsize=8)
    for graphs in (True, False):
        sel = [r for r in rows if r.get("kind") == "sub_batch" and r["graphs"] == graphs]
        axes[1].plot([r["first_sub_batch"] for r in sel], [r["median_ms"] for r in sel], marker="o",
                     label="graphs" if graphs else "eager")
    comp = next(r["median_ms"] for r in rows if r.get("model") == "alexnet" and r["label"] == "compute only (graph)")
    axes[1].axhline(comp, color="k", ls="--", lw=1, label="compute only")
    axes[1].set(xscale="log", xlabel="sub-batch size", ylabel="ms", title=f"AlexNet batch {N}, 4 streams")
    axes[1].legend(fontsize=8)
    plots.batch_curves([r for r in rows if r.get("model") == "alexnet-sweep"], ax=axes[2],
                       title="AlexNet from host memory: serial vs pipeline")
    plots.save_figure(fig, out / "streams.png")
    fig2, ax2 = plt.subplots(2, 1, figsize=(13, 6.5))
    plot_timeline(tl_rows["serial"], ax=ax2[0], title=f"serial, batch {N}")
    plot_timeline(tl_rows["pipeline"], ax=ax2[1], title=best["label"])
    plots.save_figure(fig2, out / "streams_timeline.png")
    for r in rows:
        if r.get("kind") in ("forward", "sub_batch"):
            print(f"{r.get('model', ''):14s} {r['batch']:6d} {r['label']:52s} {r['median_ms']:9.3f} ms")
        elif r.get("kind") == "host_us":
            print(f"{'host time':14s} {r['batch']:6d} {r['label']:52s} {r['median_us']:9.1f} µs "
                  f"({r['sub_batches']} sub-batches, {r['per_sub_batch_us']:.1f} µs each)")
    print("\n" + "\n".join(lines))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
