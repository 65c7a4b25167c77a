"""Where a cold autotuning pass spends its time, network by network, on this GPU.

    python benchmarks/autotune_cost.py [--out results/benchmarks] [--nets alexnet mobilenet resnet16x256 ...]

Run it with no shipped table (LABKIT_SHIPPED_TABLES=0) and fresh LABKIT_CACHE_DIR and CUPY_CACHE_DIR to
see a GPU labkit has never met.  Per network: AlexNet tuned for batches 1..1,024 (labkit.tune), MobileNetV2
for 1, 32, 128 and 256, and the small ResNet's first training step (``resnetCxN``: C channels, batch N),
where its layers search.  For each, the seconds it took and the autotuner's decisions (labkit.autotune
history), summed per family: searches, and each search's wall time split into waiting for its builds,
waiting for the GPU (another search timing), checking, and timing.  The networks run in one process in
the order given: the first also pays for CuPy's own kernels that the checks use (compiled once per
machine, then on disk).

Writes autotune_cost_<gpu>.json.  Needs a GPU.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit import autotune, measure  # noqa: E402
from labkit.models import alexnet, mobilenet_v2 as mb  # noqa: E402
from labkit.models.mobilenet_v2_weights import load_weights as mobilenet_weights  # noqa: E402
from labkit.models.resnet_small import ResNetSmall  # noqa: E402

BATCHES = {"alexnet": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024], "mobilenet": [1, 32, 128, 256]}
PARTS = ("build", "wait", "check", "time")
ENV = ("LABKIT_SHIPPED_TABLES", "LABKIT_AUTOTUNE_BUDGET", "LABKIT_CACHE_DIR", "CUPY_CACHE_DIR")


def run(net: str) -> None:
    if net == "alexnet":
        labkit.tune(alexnet.AlexNet(alexnet.load_weights()[0]), BATCHES[net], progress=False)
    elif net == "mobilenet":
        labkit.tune(mb.MobileNetV2(mobilenet_weights()[0]), BATCHES[net], progress=False)
    else:                                   # resnetCxN: the first step searches every layer
        c, n = (int(v) for v in net[len("resnet"):].split("x"))
        model, xp, rng = ResNetSmall(c, seed=0, backward="small"), labkit.xp, np.random.default_rng(0)
        x = xp.asarray(rng.random((n, 1, 28, 28), dtype=np.float32))
        labels = xp.asarray(rng.integers(0, 10, n).astype(np.int32))
        with autotune.forced("on"):
            model.train_step(x, labels, lr=0.05, momentum=0.9, weight_decay=5e-4)
        xp.cuda.get_current_stream().synchronize()


def summary(seconds: float, decisions: list[dict]) -> dict:
    families = defaultdict(lambda: {"searches": 0, "from_cache": 0, **{f"{p}_s": 0.0 for p in PARTS}})
    for d in decisions:
        f = families[d["family"]]
        if d["source"] == "cache":
            f["from_cache"] += 1
        if d["source"] != "search":
            continue
        f["searches"] += 1
        for p in PARTS:
            f[f"{p}_s"] += (d.get("wall") or {}).get(p, 0.0)
    keep = ("family", "key", "source", "candidates", "timed", "failed", "seconds", "wall", "ms", "first_ms", "config")
    return {"seconds": seconds, "searches": sum(d["source"] == "search" for d in decisions),
            "families": {k: {n: round(v, 3) if isinstance(v, float) else v for n, v in f.items()}
                         for k, f in families.items()},
            "decisions": [{k: d.get(k) for k in keep} for d in decisions]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/benchmarks")
    ap.add_argument("--nets", nargs="+", default=["alexnet", "mobilenet", "resnet16x256", "resnet64x1024"])
    args = ap.parse_args()
    dev = labkit.device()
    if not dev.is_gpu:
        print("autotune_cost: needs a GPU (the CPU executor tunes nothing)")
        return 0
    rows = []
    for net in args.nets:
        before, start = len(autotune.history()), time.perf_counter()
        run(net)
        row = {"net": net, "device": dev.label, **summary(time.perf_counter() - start, autotune.history()[before:])}
        rows.append(row)
        print(f"{net}: {row['seconds']:.1f} s, {row['searches']} searches; " + "; ".join(
            f"{k} " + ", ".join(f"{p} {f[p + '_s']:.1f} s" for p in PARTS) for k, f in row["families"].items()),
            flush=True)
    name = dev.name.replace("NVIDIA ", "").split()[0].lower()
    path = measure.save_rows(rows, Path(args.out) / f"autotune_cost_{name}.json",
                             meta={"benchmark": "autotune_cost", "nets": args.nets,
                                   "environment": {k: os.environ.get(k) for k in ENV}})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
