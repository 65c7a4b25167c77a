"""Multi-GPU scaling of the sub-batch pipeline: every GPU count of this host, input copies included.

    python benchmarks/multi_gpu.py [--out results/benchmarks] [--repeat 5] [--quick]
    python benchmarks/multi_gpu.py --rederive benchmarks/results/multi_gpu_h100x2.json --out DIR

For AlexNet FP32 at batch 2,048 and 4,096 and Fashion-MNIST at 10,000 x j images (j = 1 .. the GPU
count), from pinned host memory to host probabilities, through labkit.pipeline.SubBatchPipeline on
k = 1, 2, ... GPUs (devices=k: a replica of the model per GPU, its streams, sub-batches dealt to the
GPUs in turn): the time per batch (median), images per second and the scaling efficiency
(images/s on k GPUs / (k x images/s on one); for Fashion-MNIST also 10,000 x k images on k GPUs
against 10,000 on one), for each of a few schedules (streams per GPU,
sub-batch size), the best kept per (model, batch, k).  The outputs on k GPUs are compared with the
one-GPU outputs of the same schedule (the same kernels and sub-batches: bitwise equal is expected).
Then one run of the largest AlexNet batch on every GPU with a Timeline: each GPU's and stream's
copies and forwards.  Writes multi_gpu.json (the device names and count, every row, the per-device
timeline, the targets with verdicts: >= 1.9x one GPU's images/s on 2 GPUs, >= 3.6x on 4) and
multi_gpu.png (images/s against GPUs; the timeline).  On the CPU executor (--quick there) the
"GPUs" are replicas run one after the other: tiny sizes, no timing means anything.
"""
from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit import measure  # noqa: E402
from labkit.data import load_fashion_mnist  # noqa: E402
from labkit.ladder import streams  # noqa: E402
from labkit.models import alexnet, fashion_mnist as fm  # noqa: E402
from labkit.pipeline import SubBatchPipeline, pinned_empty, plot_timeline  # noqa: E402

TARGETS = {2: 1.9, 4: 3.6}      # images/s on k GPUs over one GPU's, input copies included


def gpu_names() -> list[str]:
    if not labkit.device().is_gpu:
        return []
    import cupy
    return [cupy.cuda.runtime.getDeviceProperties(d)["name"].decode()
            for d in range(cupy.cuda.runtime.getDeviceCount())]


def scaling_rows(model, name: str, x: np.ndarray, counts, schedules, *, repeat: int, warmup: int) -> list[dict]:
    """For each schedule and GPU count k: the batch's time, images/s, and whether its outputs equal
    the one-GPU outputs of the same schedule."""
    N = int(x.shape[0])
    rows = []
    for sched in schedules:
        reference_out = None
        for k in counts:
            pipe = SubBatchPipeline(model, devices=k, **sched)
            out = pinned_empty((N,) + pipe.output_shape)
            pipe.prepare(N)
            ms = labkit.measure.time_fn(lambda: pipe.run(x, out, sync=False), repeat=repeat, warmup=warmup, sync=True).median_ms
            pipe.synchronize()
            got = np.array(out)
            if reference_out is None:
                reference_out = got
            rows.append({"kind": "scaling", "model": name, "batch": N, "gpus": len(pipe.devices),
                         "streams_per_gpu": pipe.streams, "sub_batch": sched.get("sub_batch"),
                         "sub_batches": len(pipe.chunks(N)), "median_ms": ms, "images_per_s": N / ms * 1e3,
                         "equal_to_one_gpu": bool(np.array_equal(got, reference_out)),
                         "max_abs_diff_to_one_gpu": float(np.max(np.abs(got - reference_out))),
                         "device": labkit.device().label})
            print(f"{name:8s} batch {N:6d} {len(pipe.devices)} GPU(s), {pipe.streams} streams each, sub-batch "
                  f"{sched.get('sub_batch')}: {ms:9.3f} ms, {N / ms * 1e3:9.0f} images/s, "
                  f"equal to one GPU: {rows[-1]['equal_to_one_gpu']}", flush=True)
            pipe.release()
            del pipe
            measure.release_gpu_memory()
    return rows


def best_rows(rows: list[dict]) -> list[dict]:
    """The fastest schedule per (model, batch, GPU count), with its speedup and efficiency against one
    GPU's best at the same batch (strong scaling: the batch split over more GPUs); for Fashion-MNIST
    also against one GPU at 10,000 images (weak scaling: 10,000 x k images on k GPUs)."""
    best: dict[tuple, dict] = {}
    for r in rows:
        if r.get("kind") != "scaling":
            continue
        key = (r["model"], r["batch"], r["gpus"])
        if key not in best or r["median_ms"] < best[key]["median_ms"]:
            best[key] = r
    base = {model: min(b for (m, b, k) in best if m == model and k == 1) for (model, _b, _k) in best}
    out = []
    for (model, batch, k), r in sorted(best.items()):
        one = best.get((model, batch, 1))
        speedup = r["images_per_s"] / one["images_per_s"] if one else float("nan")
        row = {**r, "kind": "best", "speedup_vs_one_gpu": speedup, "efficiency": speedup / k}
        if model == "fashion" and batch == base[model] * k:
            weak = r["images_per_s"] / best[(model, base[model], 1)]["images_per_s"]
            row.update(weak_scaling_base_batch=base[model], weak_speedup=weak, weak_efficiency=weak / k)
        out.append(row)
    return out


def targets(best: list[dict], n_gpus: int) -> list[str]:
    """The targets: images/s on k GPUs over one GPU's, input copies included; AlexNet at its two
    batches on k GPUs against one GPU at the same batch, Fashion-MNIST at 10,000 x k images on k GPUs
    against 10,000 on one (and, for reference, split at the same batch)."""
    lines = []
    for k, want in TARGETS.items():
        sel = [r for r in best if r["gpus"] == k]
        if not sel:
            lines.append(f"{k} GPUs: not run (this host has {n_gpus})")
            continue
        for r in sel:
            if r["model"] == "fashion" and "weak_speedup" in r:
                ok = r["weak_speedup"] >= want
                lines.append(f"fashion {r['batch']} images on {k} GPUs against {r['weak_scaling_base_batch']} on one: "
                             f"{r['weak_speedup']:.3f}x one GPU's images/s (>= {want}x: {'met' if ok else 'MISSED'}), "
                             f"efficiency {r['weak_efficiency']:.1%}")
            if r["model"] == "alexnet":
                ok = r["speedup_vs_one_gpu"] >= want
                lines.append(f"alexnet batch {r['batch']} on {k} GPUs: {r['speedup_vs_one_gpu']:.3f}x one GPU's "
                             f"images/s (>= {want}x: {'met' if ok else 'MISSED'}), efficiency {r['efficiency']:.1%}")
            else:
                lines.append(f"  (fashion batch {r['batch']} split over {k} GPUs: {r['speedup_vs_one_gpu']:.3f}x "
                             f"one GPU at the same batch, efficiency {r['efficiency']:.1%})")
    return lines


def write(rows: list[dict], meta: dict, out: Path, device_label: str, on_gpu: bool, stored: dict | None = None) -> Path:
    """multi_gpu.json (the measured rows, the best per model, batch and GPU count, the targets) and
    multi_gpu.png, from the measured rows and the timeline in ``meta``; ``stored``: the document of a
    stored run, whose device, versions and date are kept (this machine only re-derived it)."""
    scaling = [r for r in rows if r.get("kind") == "scaling"]
    best = best_rows(scaling)
    n_names = meta["gpu_count"]
    lines = targets(best, n_names) if on_gpu else \
        ["the CPU executor ran: replicas one after the other, not GPUs; no target is judged"]
    for line in lines:
        print(line)
    if stored is None:
        path = measure.save_rows(scaling + best, out / "multi_gpu.json", meta={**meta, "targets": lines})
    else:
        doc = {k: stored[k] for k in ("device", "device_label", "backend", "versions", "date")}
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        doc.update(meta={**meta, "targets": lines, "rederived": now}, rows=scaling + best)
        path = out / "multi_gpu.json"
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=2) + "\n")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from labkit import plots
    t = meta["timeline"]
    counts = sorted({r["gpus"] for r in best})
    fig, axes = plt.subplots(1, 2, figsize=(16, 4.8), gridspec_kw={"width_ratios": [1, 2]})
    for (model, batch) in sorted({(r["model"], r["batch"]) for r in best}):
        sel = sorted((r for r in best if r["model"] == model and r["batch"] == batch), key=lambda r: r["gpus"])
        axes[0].plot([r["gpus"] for r in sel], [r["images_per_s"] for r in sel], marker="o",
                     label=f"{model}, batch {batch}")
    axes[0].set(xlabel="GPUs", ylabel="images / s", title="the pipeline over GPUs, copies included",
                xticks=counts, yscale="log")
    axes[0].legend(fontsize=8)
    plot_timeline(t["rows"], ax=axes[1], title=f"AlexNet batch {t['batch']} on {t['gpus']} GPU(s), "
                                               f"{t['streams_per_gpu']} streams each ({device_label})")
    plots.save_figure(fig, out / "multi_gpu.png")
    print(f"wrote {path} and {out / 'multi_gpu.png'}")
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/benchmarks")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="tiny sizes only (the CPU executor)")
    ap.add_argument("--rederive", type=Path, metavar="JSON",
                    help="recompute the best rows, targets and plot of a stored multi_gpu.json (no timing)")
    args = ap.parse_args()
    if args.rederive:
        return rederive(args.rederive, Path(args.out))
    dev = labkit.device()
    quick = args.quick or not dev.is_gpu
    names = gpu_names()
    n = len(names) if names else 2                     # the CPU executor: two replicas, one after the other
    counts = list(range(1, n + 1))
    repeat, warmup = (1, 1) if quick else (args.repeat, 2)
    rows = []

    weights, source = alexnet.load_weights()
    net = alexnet.AlexNet(weights)
    photos = alexnet.preprocess(alexnet.load_photos()[0])
    a_sched = [dict(streams=2, sub_batch=2)] if quick else [dict(streams=4, sub_batch=128),
                                                              dict(streams=4, sub_batch=256)]
    for N in ([4] if quick else [2048, 4096]):
        x = streams.host_batch(net, N, source=photos)
        rows += scaling_rows(net, "alexnet", x, counts, a_sched, repeat=repeat, warmup=warmup)
        del x
    # The largest batch's stages on every GPU, in the fastest schedule of the most GPUs.
    best = best_rows(rows)
    top = max((r for r in best if r["model"] == "alexnet" and r["gpus"] == n), key=lambda r: r["batch"])
    x = streams.host_batch(net, top["batch"], source=photos)
    timeline = streams.timeline_rows(net, x, devices=n, streams=top["streams_per_gpu"], sub_batch=top["sub_batch"])
    del x
    net.clear_plans()
    measure.release_gpu_memory()

    fnet = fm.FashionNet()
    images = fm.preprocess(load_fashion_mnist("test")[0][:2000])
    f_sched = [dict(streams=2, sub_batch=4)] if quick else [dict(streams=2, sub_batch=2500),
                                                              dict(streams=4, sub_batch=1250)]
    for j in counts:
        xf = streams.host_batch(fnet, (8 if quick else 10_000) * j, seed=1, source=images)
        rows += scaling_rows(fnet, "fashion", xf, counts, f_sched, repeat=repeat, warmup=warmup)
    meta = {"benchmark": "multi_gpu", "gpus": names, "gpu_count": len(names), "weights": source,
            "repeat": repeat, "timeline": {"model": "alexnet", "batch": top["batch"], "gpus": n,
                                           "streams_per_gpu": top["streams_per_gpu"],
                                           "sub_batch": top["sub_batch"], "rows": timeline}}
    write(rows, meta, Path(args.out), dev.label, dev.is_gpu)
    return 0


def rederive(path: Path, out: Path) -> int:
    """The best rows, targets and plot again from a stored run's measured rows (nothing re-timed)."""
    ran = json.loads(path.read_text())
    meta = {k: v for k, v in ran["meta"].items() if k not in ("targets", "rederived")}
    write(ran["rows"], meta, out, ran["device_label"], ran["backend"] == "cuda", stored=ran)
    return 0


if __name__ == "__main__":
    sys.exit(main())
