"""The convolution ladder on the seed model's layers: check, time, compare with cuDNN and the floor.

    from labkit import ladder
    ladder.check("tiled")                              # a Verdict: True, or False and what is wrong
    rows = ladder.compare(["naive", "tiled"], batches=labkit.sizes(gpu=[100, 1000, 10000], cpu=[2]))
    print(ladder.table(rows))                          # ms, % of floor, x cuDNN per variant and batch

The seed's two convolution layers (ECE408 Spring 2019, Fashion-MNIST at 48x48):
layer 1 is 1 -> 6 channels, K5, on 48x48 inputs; layer 2 is 6 -> 16 channels, K5, on 22x22.
Notebooks 02-05 and ``benchmarks/conv_ladder.py`` share this code, so what a notebook shows is
what the benchmark measures.
"""
from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np

from .. import backends, measure, peers, reference
from ..checks import rel_error, to_numpy
from ..device_query import device
from ..measure.sweep import progress_bar
from ..ops.conv import conv2d
from ..shapes import SEED_LAYERS
from .harness import checked_time, random_layer, reference_activation
from ..verdict import Verdict, describe_mismatch

__all__ = ["SEED_LAYERS", "TILE_WIDTH", "PEER", "check", "compare", "table"]

# The tile width the tiled rungs use on each layer: 16 suits layer 1's 44x44 output plane; layer 2's
# 18x18 plane fits 8-wide tiles better (conv_tiled.cu explains why).
TILE_WIDTH = {"layer 1": 16, "layer 2": 8}
PEER = "cuDNN"


def _options(spec) -> dict:
    return dict(variant=spec) if isinstance(spec, str) else dict(spec)


def check(variant: str | Mapping = "naive", *, layers: Mapping[str, Mapping[str, int]] = SEED_LAYERS,
          batch: int = 3, activation: str | None = "tanh", odd: bool = True, tol: float = 1e-5) -> Verdict:
    """Does the variant match the float64 reference on fresh random inputs?  A ``Verdict``: true or
    false as a bool, printed "True" or "False: " and what is wrong (which outputs, never written or
    other values, edge or interior, the largest error).

    Runs each layer (and, with ``odd``, an odd-sized layer that no tile divides) into an output
    poisoned with NaN, so an element the kernel forgot to write fails the check.  ``variant`` is
    a name or a dict of conv2d keyword arguments (``{"variant": "tiled", "tile_width": 8}``).
    """
    xp = backends.xp()
    opts = _options(variant)
    shapes = [dict(L, N=batch) for L in layers.values()]
    if odd:
        shapes.append(dict(N=batch, C=3, H=23, W=19, M=5, K=5))
    for s in shapes:
        x, w, b = random_layer(**s)
        ref = reference_activation(reference.conv2d(x, w, b), activation)
        out = xp.full(ref.shape, np.nan, dtype=xp.float32)
        conv2d(xp.asarray(x), xp.asarray(w), xp.asarray(b), activation=activation, out=out, **opts)
        err = rel_error(out, ref)
        if not err < tol:
            what = describe_mismatch(to_numpy(out), ref, tol=tol) or f"relative error {err:.3g} (at most {tol:g})"
            return Verdict(False, f"layer N={s['N']} C={s['C']} {s['H']}x{s['W']} -> M={s['M']}, K={s['K']}:\n{what}")
    return Verdict(True, f"matches the float64 reference on {len(shapes)} layers")


def compare(variants: Iterable | Mapping[str, Mapping], *, batches: Iterable[int],
            layers: Mapping[str, Mapping[str, int]] = SEED_LAYERS, activation: str | None = "tanh",
            peer: bool = True, repeat: int = 20, warmup: int = 3, progress: bool = True) -> list[dict]:
    """Op time of each variant on each layer and batch, beside cuDNN's from the same run.

    ``variants``: names (each run with the layer's TILE_WIDTH), or a mapping label -> conv2d
    keyword arguments.  Each row: layer, label, batch, median_ms, min_ms, floor_ms, pct_of_floor,
    ratio_to_cudnn (None without the peer), device, backend.  Every variant, and the peer, is
    checked against the reference on the first images of each batch before it is timed.
    """
    xp = backends.xp()
    ceil = device().ceilings()
    if isinstance(variants, Mapping):
        specs = {label: dict(opts) for label, opts in variants.items()}
    else:
        specs = {v: {"variant": v} for v in variants}
    use_peer = peer and peers.cudnn_available() is None
    rows: list[dict] = []
    jobs = [(name, L, n) for name, L in layers.items() for n in batches]
    for name, L, batch in progress_bar(jobs, desc="ladder", show=progress):
        x_h, w_h, b_h = random_layer(batch, **L)
        x, w, b = xp.asarray(x_h), xp.asarray(w_h), xp.asarray(b_h)
        Ho, Wo = L["H"] - L["K"] + 1, L["W"] - L["K"] + 1
        y = xp.empty((batch, L["M"], Ho, Wo), dtype=xp.float32)
        ref = reference_activation(reference.conv2d(x_h[:min(batch, 4)], w_h, b_h), activation)
        cost = measure.conv2d_cost(batch, **L)
        runs = {}
        for label, opts in specs.items():
            opts = {"tile_width": TILE_WIDTH.get(name, 16), **opts}
            runs[label] = (lambda opts=opts: conv2d(x, w, b, activation=activation, out=y, **opts)), None
        if use_peer:   # timed alone, without the copy into y that the check needs
            runs[PEER] = (peers.cudnn_conv2d(x, w, b, activation=activation, out=y),
                          peers.cudnn_conv2d(x, w, b, activation=activation))
        batch_rows = []
        for label, (run, timed) in runs.items():
            t, _ = checked_time(f"{label} on {name} at batch {batch}", run, y, ref, tol=1e-5, warmup=warmup,
                                repeat=repeat, timed=timed)
            batch_rows.append({"layer": name, "label": label, "batch": batch,
                               "median_ms": t.median_ms, "min_ms": t.min_ms, "repeat": t.repeat,
                               "floor_ms": measure.floor_ms(cost, ceil),
                               "pct_of_floor": measure.percent_of_floor(t.median_ms, cost, ceil),
                               "device": t.device, "backend": t.backend})
        peer_ms = next((r["median_ms"] for r in batch_rows if r["label"] == PEER), None)
        for r in batch_rows:
            r["ratio_to_cudnn"] = None if peer_ms is None else r["median_ms"] / peer_ms
        rows += batch_rows
        del x, w, b, y
        measure.release_gpu_memory()
    return rows


def table(rows: Iterable[dict]) -> str:
    """The rows as a fixed-width table: layer, batch, label, ms, % of floor, x cuDNN."""
    lines = [f"{'layer':8s} {'batch':>6s}  {'kernel':14s} {'ms':>9s} {'% floor':>8s} {'x cuDNN':>8s}"]
    for r in rows:
        ratio = "n/a" if r.get("ratio_to_cudnn") is None else f"{r['ratio_to_cudnn']:.2f}"
        lines.append(f"{r['layer']:8s} {r['batch']:6d}  {r['label']:14s} {r['median_ms']:9.3f} "
                     f"{r['pct_of_floor']:7.1f}% {ratio:>8s}")
    return "\n".join(lines)
