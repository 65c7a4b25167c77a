"""The implicit GEMMs studied: the tile sweep that fills labkit/tuned/conv_implicit.json, and the
comparison of AlexNet's convolutions with cuDNN (notebook 06, benchmarks/alexnet_conv.py).

    rows, best = sweep_implicit(ALEXNET_CONVS["conv3"], batch=128, precision="tf32")
    record_tiles(layer, best, device_name=dev.name, median_ms=..., batch=128)
    rows = compare(batch=128); print(table(rows))
"""
from __future__ import annotations

from dataclasses import asdict
from typing import Iterable

import numpy as np

from .. import backends, measure, peers
from ..device_query import device
from ..measure.sweep import progress_bar
from ..ops.implicit import (PRECISIONS, TABLE, TILE_FIELDS, TOLERANCE, ImplicitConv2d, Tiles, candidates)
from ..shapes import ALEXNET_CONVS, ConvLayer
from ..tuned import write_entry
from .harness import checked_time, random_case

__all__ = ["sweep_implicit", "record_tiles", "compare", "summarize", "table", "gemm_candidates", "precompile"]


def gemm_candidates(layer: ConvLayer, precision: str = "fp32") -> list[Tiles]:
    """A grid for memory-bound GEMM layers (MobileNetV2's 1x1 convolutions: few input channels, large
    planes): the usual candidates plus 32-row tiles for layers of few output channels and 4-deep
    k-steps for layers of few input channels."""
    out = list(candidates(layer, precision))
    if precision == "fp32":
        extra = [Tiles("fp32", bm=32, bn=128, bk=8, tm=4, tn=8), Tiles("fp32", bm=32, bn=256, bk=8, tm=4, tn=8),
                 Tiles("fp32", bm=64, bn=256, bk=8, tm=8, tn=8), Tiles("fp32", bm=64, bn=128, bk=4, tm=8, tn=8),
                 Tiles("fp32", bm=128, bn=128, bk=4, tm=8, tn=8), Tiles("fp32", bm=32, bn=64, bk=8, tm=4, tn=4)]
        for t in extra:
            try:
                t.check()
            except ValueError:
                continue
            if t not in out:
                out.append(t)
    return out


def _compile_one(job) -> int:
    layer, tiles, batch = job
    xp = backends.xp()
    w = xp.zeros((layer.M, layer.C // layer.groups, layer.K, layer.K), dtype=xp.float32)
    ImplicitConv2d(w, None, layer, precision=tiles.precision, tiles=tiles).plan(batch)
    return 1


def precompile(jobs: list[tuple[ConvLayer, Tiles]], batch: int, processes: int = 8) -> int:
    """Compile each (layer, tiles) kernel in ``processes`` worker processes (NVRTC runs in each; the
    results land in CuPy's cache on disk, where this process then finds them).  Returns how many."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn")) as pool:
        return sum(pool.map(_compile_one, [(L, t, batch) for L, t in jobs]))


def sweep_implicit(layer: ConvLayer, batch: int, precision: str = "fp32", *,
                   tiles: Iterable[Tiles] | None = None, repeat: int = 20, progress: bool = True):
    """Time every candidate on one layer; (rows, fastest Tiles).  Each is first checked against the
    float64 reference on two images (a wrong kernel never wins)."""
    xp = backends.xp()
    x_h, w_h, b_h, ref = random_case(layer, batch, np.random.default_rng(0))
    x, w, b = xp.asarray(x_h), xp.asarray(w_h), xp.asarray(b_h)
    ho, wo = layer.out_hw
    y = xp.empty((batch, layer.M, ho, wo), dtype=xp.float32)
    rows = []
    for t in progress_bar(list(tiles or candidates(layer, precision)), desc=f"tuning {layer.key} {precision}",
                          show=progress):
        conv = ImplicitConv2d(w, b, layer, precision=precision, tiles=t)
        r, err = checked_time(f"{t} on {layer}", lambda: conv(x, out=y), y, ref, tol=TOLERANCE[precision],
                              repeat=repeat)
        rows.append({**asdict(t), "tiles": t.short(), "layer": layer.key, "batch": batch,
                     "median_ms": r.median_ms, "min_ms": r.min_ms, "device": r.device, "rel_error": err})
    best = min(rows, key=lambda r: r["median_ms"])
    return rows, Tiles(best["precision"], **{k: best[k] for k in TILE_FIELDS + ("layout",)})


def record_tiles(layer: ConvLayer, tiles: Tiles, *, device_name: str, median_ms: float, batch: int,
                 table=None) -> None:
    """Keep a winner in the table: one entry per GPU name, layer shape and precision."""
    used = ("bm", "bn", "bk") + (("tm", "tn") if tiles.precision == "fp32" else ("wm", "wn", "stages", "minb")) \
        + (("layout",) if tiles.nhwc else ())
    entry = {k: v for k, v in asdict(tiles).items() if k in used}
    write_entry(table or TABLE, device_name, layer.key, {tiles.precision: {
        **entry, "median_ms": round(median_ms, 5), "batch": batch}}, merge=True)


def compare(layers: dict[str, ConvLayer] | None = None, *, batch: int, repeat: int = 30,
            precisions: Iterable[str] | None = None, tf32_peak_TFLOPs: float | None = None) -> list[dict]:
    """Time each layer (bias, no activation) on the implicit-GEMM kernels and, on a GPU with PyTorch,
    on cuDNN with TF32 off and on, in this same run.  Every kernel's output is first checked against
    the float64 reference on two images (AssertionError if it is off).  Rows carry ms, TFLOP/s and %
    of the floor (FP32 rows against the FP32 GEMM ceiling, TF32 rows against ``tf32_peak_TFLOPs``)."""
    dev, xp = device(), backends.xp()
    ceil = dev.ceilings()
    layers = layers or ALEXNET_CONVS
    precisions = tuple(precisions or (PRECISIONS if dev.is_gpu else ("fp32",)))
    no_peer = peers.cudnn_available()
    rng = np.random.default_rng()
    rows = []
    for name, L in layers.items():
        x_h, w_h, b_h, ref = random_case(L, batch, rng)
        x, w, b = xp.asarray(x_h), xp.asarray(w_h), xp.asarray(b_h)
        y = xp.empty((batch, L.M) + L.out_hw, dtype=xp.float32)
        cost = measure.conv2d_cost(batch, L.C, L.H, L.W, L.M, L.K, stride=L.stride, pad=L.pad, groups=L.groups)
        runs = []
        for prec in precisions:
            conv = ImplicitConv2d(w, b, L, precision=prec)
            runs.append((f"labkit {prec}", prec, conv.tiles.short(), lambda conv=conv: conv(x, out=y)))
        if no_peer is None:
            runs += [(f"cuDNN {prec}", prec, "", peers.cudnn_conv2d(x, w, b, stride=L.stride, pad=L.pad,
                                                                    groups=L.groups, tf32=prec == "tf32", out=y))
                     for prec in precisions]
        for label, prec, tiles, run in runs:
            t, err = checked_time(f"{name} {label}", run, y, ref, tol=TOLERANCE[prec], repeat=repeat)
            peak = tf32_peak_TFLOPs if prec == "tf32" else ceil.fp32_TFLOPs
            floor = (max(cost.flops / (peak * 1e12), cost.bytes / (ceil.copy_GBps * 1e9)) * 1e3) if peak else None
            rows.append({"layer": name, "shape": L.key, "label": label, "precision": prec, "tiles": tiles,
                         "batch": batch, "median_ms": t.median_ms, "min_ms": t.min_ms,
                         "TFLOPs": cost.flops / (t.median_ms * 1e-3) / 1e12, "rel_err": err, "floor_ms": floor,
                         "pct_of_floor": None if floor is None else 100 * floor / t.median_ms,
                         "device": t.device, "backend": t.backend})
        del x, w, b, y
    return rows


def summarize(rows: list[dict]) -> tuple[dict[str, float], dict[str, float]]:
    """(sum of the layers' ms per label, labkit / cuDNN ratio of those sums per precision)."""
    sums: dict[str, float] = {}
    for r in rows:
        sums[r["label"]] = sums.get(r["label"], 0.0) + r["median_ms"]
    ratios = {p: sums[f"labkit {p}"] / sums[f"cuDNN {p}"] for p in PRECISIONS
              if f"labkit {p}" in sums and f"cuDNN {p}" in sums}
    return sums, ratios


def table(rows: list[dict]) -> str:
    """A text table: one line per layer with each label's ms (TFLOP/s, % of floor), then the sums."""
    labels = list(dict.fromkeys(r["label"] for r in rows))
    layers = list(dict.fromkeys(r["layer"] for r in rows))
    out = [f"{'layer':7s}" + "".join(f"{lab:>26s}" for lab in labels)]
    for name in layers:
        cells = {r["label"]: r for r in rows if r["layer"] == name}
        out.append(f"{name:7s}" + "".join(
            f"{cells[lab]['median_ms']:8.3f} ms {cells[lab]['TFLOPs']:5.1f} TF "
            + (f"{cells[lab]['pct_of_floor']:3.0f}%" if cells[lab]["pct_of_floor"] else "  - ") for lab in labels))
    sums, ratios = summarize(rows)
    out.append(f"{'sum':7s}" + "".join(f"{sums[lab]:8.3f} ms {'':13s}" for lab in labels))
    out += [f"labkit {p} / cuDNN {p}, five layers summed: {r:.2f}x" for p, r in ratios.items()]
    return "\n".join(out)
