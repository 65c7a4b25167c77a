"""Speed that travels: each network autotuned for its batch sizes on this GPU, then timed as a CUDA graph
beside PyTorch's CUDA graph in the same run; and what a second process pays (the disk cache's lookups).

    python benchmarks/autotune.py [--out results/benchmarks] [--nets fashion alexnet mobilenet]
                                  [--no-shipped] [--budget 2] [--repeat 20]

1. Per network, ``labkit.tune(net, batch_sizes)`` in this process: the seconds it took, the problems
   searched and how long the searches took.  ``--no-shipped`` sets LABKIT_SHIPPED_TABLES=0 (the H100's
   tables ignored: a GPU measured as if labkit had never seen it).
2. The same in a fresh process (``--second``): only the disk cache's lookups (0 searches expected).
3. Per network and headline batch size, labkit as one CUDA graph and PyTorch as one CUDA graph (FP32,
   TF32 off), checked first (the graph against the eager pass, both against the float64 reference in
   the networks' own tests), and the ratio labkit / PyTorch.

Writes autotune_<gpu>.json and autotune_<gpu>.png (<gpu>: h100, h200, ... from the device's name).
Needs a GPU: the CPU executor tunes nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit import autotune, measure, peers  # noqa: E402
from labkit.ladder import overhead  # noqa: E402
from labkit.ladder import mobilenet as mobilenet_study  # noqa: E402
from labkit.models import alexnet, fashion_mnist as fm, mobilenet_v2 as mb  # noqa: E402
from labkit.models.mobilenet_v2_weights import load_weights as mobilenet_weights  # noqa: E402

# The batch sizes each network is tuned for, and those its headline ratios are read at.
TUNED = {"fashion": [100, 1000, 10000], "alexnet": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024],
         "mobilenet": [1, 32, 128, 256]}
HEADLINE = {"fashion": [10000], "alexnet": [1, 8, 64, 128, 256, 1024], "mobilenet": [256]}


def make(net: str):
    if net == "fashion":
        return fm.FashionNet(fm.load_weights())
    if net == "alexnet":
        return alexnet.AlexNet(alexnet.load_weights()[0])
    return mb.MobileNetV2(mobilenet_weights()[0])


def tune_all(nets, progress: bool) -> dict:
    out = {}
    for net in nets:
        model = make(net)
        report = labkit.tune(model, TUNED[net], progress=progress)
        out[net] = {"seconds": report.seconds, "searched": report.searched, "from_cache": report.from_cache,
                    "search_seconds": report.search_seconds, "decisions": len(report.decisions),
                    "batch_sizes": TUNED[net]}
        print(f"{net}: {report.summary()}", flush=True)
        costly = sorted((d for d in report.decisions if d["source"] == "search"), key=lambda d: -d["seconds"])
        for d in costly[:4]:
            print(f"    {d['family']} {d['key']}: {d['seconds']:.2f} s ({d['build_seconds']:.2f} s building), "
                  f"{d['timed']} timed, {d['failed']} failed of {d['candidates']}; {d['ms']:.4f} ms "
                  f"against {d['first_ms']:.4f} ms untuned", flush=True)
        model.clear_plans()
        measure.release_gpu_memory()
    return out


def graph_rows(net: str, repeat: int) -> list[dict]:
    if net in ("fashion", "alexnet"):
        rows = overhead.forward_times(net, HEADLINE[net], repeat=repeat)
        return [dict(r, net=net) for r in rows if r["label"] in ("labkit graph", "PyTorch graph")]
    weights = mobilenet_weights()[0]
    model = mb.MobileNetV2(weights)
    torch_run = peers.torch_mobilenet_v2(weights) if peers.cudnn_available() is None else None
    rows = mobilenet_study.network_rows(model, torch_run, HEADLINE[net], repeat=repeat)
    keep = {"labkit fp32 graph": "labkit graph", "PyTorch fp32 graph": "PyTorch graph"}
    return [dict(r, net=net, label=keep[r["label"]]) for r in rows if r["label"] in keep]


def ratios(rows: list[dict]) -> list[dict]:
    out = []
    for net in dict.fromkeys(r["net"] for r in rows):
        for n in dict.fromkeys(r["batch"] for r in rows if r["net"] == net):
            pick = {r["label"]: r["median_ms"] for r in rows if r["net"] == net and r["batch"] == n}
            if "labkit graph" in pick and "PyTorch graph" in pick:
                out.append({"net": net, "batch": n, "labkit_ms": pick["labkit graph"],
                            "pytorch_ms": pick["PyTorch graph"], "ratio": pick["labkit graph"] / pick["PyTorch graph"]})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/benchmarks")
    ap.add_argument("--nets", nargs="+", default=list(TUNED), choices=list(TUNED))
    ap.add_argument("--no-shipped", action="store_true")
    ap.add_argument("--budget", type=float)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--second", action="store_true", help="the second process: tune again, print JSON")
    args = ap.parse_args()
    if args.no_shipped:
        os.environ["LABKIT_SHIPPED_TABLES"] = "0"
    if args.budget:
        os.environ[autotune.BUDGET_ENV] = str(args.budget)
    dev = labkit.device()
    if not dev.is_gpu:
        print("autotuning needs a GPU (the CPU executor tunes nothing); skipped")
        return 0
    if args.second:
        print(json.dumps(tune_all(args.nets, progress=False)))
        return 0
    t0 = time.perf_counter()
    first = tune_all(args.nets, progress=False)
    cmd = [sys.executable, __file__, "--second", "--nets", *args.nets] + (["--no-shipped"] if args.no_shipped else [])
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    second = json.loads(done.stdout.strip().splitlines()[-1])
    for net in args.nets:
        print(f"{net}: second process {second[net]['seconds']:.2f} s, {second[net]['searched']} searched, "
              f"{second[net]['from_cache']} from the cache")
    rows = []
    for net in args.nets:
        rows += graph_rows(net, args.repeat)
    table = ratios(rows)
    for r in table:
        print(f"{r['net']:>10s} batch {r['batch']:>6d}: labkit graph {r['labkit_ms']:9.4f} ms, PyTorch graph "
              f"{r['pytorch_ms']:9.4f} ms, ratio {r['ratio']:.3f}")
    tag = measure.device_tag(dev.name)
    meta = {"benchmark": "autotune", "shipped_tables": not args.no_shipped, "budget_s": autotune.budget_s(),
            "first_process": first, "second_process": second, "ratios": table,
            "wall_s": time.perf_counter() - t0}
    path = measure.save_rows(rows, Path(args.out) / f"autotune_{tag}.json", meta=meta)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 3.6))
    labels = [f"{r['net']}\n{r['batch']}" for r in table]
    ax.bar(np.arange(len(table)), [r["ratio"] for r in table], color="tab:blue")
    ax.axhline(1.0, color="grey", lw=1, ls="--")
    ax.set_xticks(np.arange(len(table)), labels, fontsize=8)
    ax.set_ylabel("labkit graph / PyTorch graph")
    ax.set_title(f"After one autotuning pass on {dev.name}" + (" (no shipped tables)" if args.no_shipped else ""),
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path.with_suffix(".png"), dpi=120)
    print(f"wrote {path} and {path.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
