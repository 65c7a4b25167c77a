"""The convolution ladder on the seed model's layers: check, time, compare with cuDNN and the floor.

    from labkit import ladder
    ladder.check("tiled")                              # True: matches the float64 reference
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

from . import backends, measure, peers, reference
from .conv import conv2d

SEED_LAYERS: dict[str, dict[str, int]] = {
    "layer 1": dict(C=1, H=48, W=48, M=6, K=5),
    "layer 2": dict(C=6, H=22, W=22, M=16, K=5),
}
# The tile width the tiled rungs use on each layer: 16 suits layer 1's 44x44 output plane; layer 2's
# 18x18 plane fits 8-wide tiles better (conv_tiled.cu explains why).
TILE_WIDTH = {"layer 1": 16, "layer 2": 8}
PEER = "cuDNN"


def random_layer(N: int, C: int, H: int, W: int, M: int, K: int, rng=None):
    """Fresh random float32 x (N, C, H, W), w (M, C, K, K) scaled by 1/sqrt(C*K*K), and b (M,)."""
    rng = rng or np.random.default_rng()
    x = rng.standard_normal((N, C, H, W), dtype=np.float32)
    w = (rng.standard_normal((M, C, K, K)) / np.sqrt(C * K * K)).astype(np.float32)
    b = rng.standard_normal(M).astype(np.float32)
    return x, w, b


def reference_activation(y: np.ndarray, activation: str | None) -> np.ndarray:
    """The activation the kernels fuse, applied to a float64 reference output."""
    return {None: y, "tanh": np.tanh(y), "relu": np.maximum(y, 0.0)}[activation]


def _to_numpy(a) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.asarray(a)


def rel_error(y, ref) -> float:
    """||y - ref|| / ||ref||, in float64; NaN anywhere in y (an unwritten output) gives NaN."""
    y = _to_numpy(y).astype(np.float64)
    return float(np.linalg.norm(y - ref) / max(np.linalg.norm(ref), 1e-300))


def _options(spec) -> dict:
    return dict(variant=spec) if isinstance(spec, str) else dict(spec)


def check(variant: str | Mapping = "naive", *, layers: Mapping[str, Mapping[str, int]] = SEED_LAYERS,
          batch: int = 3, activation: str | None = "tanh", odd: bool = True, tol: float = 1e-5) -> bool:
    """Does the variant match the float64 reference on fresh random inputs?

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
        if not rel_error(out, ref) < tol:
            return False
    return True


def compare(variants: Iterable | Mapping[str, Mapping], *, batches: Iterable[int],
            layers: Mapping[str, Mapping[str, int]] = SEED_LAYERS, activation: str | None = "tanh",
            peer: bool = True, repeat: int = 20, warmup: int = 3, progress: bool = True) -> list[dict]:
    """Op time of each variant on each layer and batch, beside cuDNN's from the same run.

    ``variants``: names (each run with the layer's TILE_WIDTH), or a mapping label -> conv2d
    keyword arguments.  Each row: layer, label, batch, median_ms, min_ms, floor_ms, pct_of_floor,
    ratio_to_cudnn (None without the peer), device, backend.  Every variant, and the peer, is
    checked against the reference on the first images of each batch before it is timed.  Timing:
    CUDA events around each call, calls queued back to back (``time_fn(sync=False)``).
    """
    from .device_query import device
    from .measure.sweep import progress_bar

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
        n_check = min(batch, 4)
        ref = reference_activation(reference.conv2d(x_h[:n_check], w_h, b_h), activation)
        cost = measure.conv2d_cost(batch, **L)
        runs = {}
        for label, opts in specs.items():
            opts = {"tile_width": TILE_WIDTH.get(name, 16), **opts}
            runs[label] = (lambda opts=opts: conv2d(x, w, b, activation=activation, out=y, **opts))
        if use_peer:
            runs[PEER] = peers.cudnn_conv2d(x, w, b, activation=activation, out=y)
        batch_rows = []
        for label, run in runs.items():
            y.fill(float("nan"))
            run()
            err = rel_error(y[:n_check], ref)
            if not err < 1e-5:
                raise AssertionError(f"{label} on {name} at batch {batch} disagrees with the "
                                     f"float64 reference: relative error {err:.2e}")
            if label == PEER:  # time cuDNN's convolution alone, without the copy into y
                run = peers.cudnn_conv2d(x, w, b, activation=activation)
            # Calls queued back to back: the host's launch overhead (Python, argument checks)
            # overlaps the GPU's work, as between the layers of a network, so what is timed is
            # the GPU's time, for labkit and cuDNN alike.
            t = measure.time_fn(run, warmup=warmup, repeat=repeat, sync=False)
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
        if backends.current() == "cuda":
            import cupy
            cupy.get_default_memory_pool().free_all_blocks()
    return rows


def table(rows: Iterable[dict]) -> str:
    """The rows as a fixed-width table: layer, batch, label, ms, % of floor, x cuDNN."""
    lines = [f"{'layer':8s} {'batch':>6s}  {'kernel':14s} {'ms':>9s} {'% floor':>8s} {'x cuDNN':>8s}"]
    for r in rows:
        ratio = "n/a" if r.get("ratio_to_cudnn") is None else f"{r['ratio_to_cudnn']:.2f}"
        lines.append(f"{r['layer']:8s} {r['batch']:6d}  {r['label']:14s} {r['median_ms']:9.3f} "
                     f"{r['pct_of_floor']:7.1f}% {ratio:>8s}")
    return "\n".join(lines)
