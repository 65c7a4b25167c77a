"""What every study shares (the lab's common.h): fresh random inputs, the check before the timing,
and the activation the kernels fuse, applied to a float64 reference.

    x, w, b = random_layer(N, C, H, W, M, K)
    t, err = checked_time("tiled", run, out, ref, tol=1e-5)    # AssertionError if run is wrong
    ms, err = checked_launch_ms("tiled", run, out, ref, tol=1e-5)   # GPU ms of one launch, same check
    agrees("fused", rel_error(y1, y2), 1e-5)                     # a check computed another way

A kernel is checked before it is timed: run once into an output poisoned with NaN, compared with
the float64 reference, and only then timed; a wrong kernel never gets a time.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .. import measure, reference
from ..checks import rel_error
from ..shapes import ConvLayer

__all__ = ["random_layer", "random_case", "reference_activation", "agrees", "check_output", "checked_time",
           "checked_launch_ms", "rel_error"]


def random_layer(N: int, C: int, H: int, W: int, M: int, K: int, rng=None):
    """Fresh random float32 x (N, C, H, W), w (M, C, K, K) scaled by 1/sqrt(C*K*K), and b (M,)."""
    rng = rng or np.random.default_rng()
    x = rng.standard_normal((N, C, H, W), dtype=np.float32)
    w = (rng.standard_normal((M, C, K, K)) / np.sqrt(C * K * K)).astype(np.float32)
    b = rng.standard_normal(M).astype(np.float32)
    return x, w, b


def random_case(layer: ConvLayer, batch: int, rng=None):
    """Fresh float32 x (batch, C, H, W), w (M, C/G, K, K) scaled by 1/sqrt(C/G*K*K), b (M,) on the host,
    and the float64 reference output of the first two images."""
    rng = rng or np.random.default_rng()
    x = rng.standard_normal((batch, layer.C, layer.H, layer.W), dtype=np.float32)
    w = rng.standard_normal((layer.M, layer.C // layer.groups, layer.K, layer.K), dtype=np.float32)
    w *= np.float32(1.0 / np.sqrt(w[0].size))
    b = rng.standard_normal(layer.M, dtype=np.float32)
    ref = reference.conv2d(x[:2], w, b, stride=layer.stride, pad=layer.pad, groups=layer.groups)
    return x, w, b, ref


def reference_activation(y: np.ndarray, activation: str | None) -> np.ndarray:
    """The activation the kernels fuse, applied to a float64 reference output."""
    return {None: y, "tanh": np.tanh(y), "relu": np.maximum(y, 0.0), "relu6": np.clip(y, 0.0, 6.0)}[activation]


def agrees(label: str, err: float, tol: float, against: str = "the float64 reference") -> float:
    """``err`` if it is below ``tol``, else AssertionError naming ``label`` and what it was compared
    ``against``: the one place a study refuses a kernel that disagrees with its reference (NaN
    disagrees)."""
    if not err < tol:
        raise AssertionError(f"{label} disagrees with {against}: relative error {err:.2e} (bound {tol:.0e})")
    return err


def check_output(label: str, run: Callable[[], object], out, ref: np.ndarray, *, tol: float,
                 against: str = "the float64 reference") -> float:
    """Relative error of ``run``, which writes ``out``: run once into ``out`` poisoned with NaN, its
    first ``len(ref)`` rows compared with ``ref`` (the float64 reference, or what ``against`` names;
    AssertionError naming ``label`` if off)."""
    out.fill(float("nan"))
    run()
    return agrees(label, rel_error(out[:len(ref)], ref), tol, against)


def checked_launch_ms(label: str, run: Callable[[], object], out, ref: np.ndarray, *, tol: float,
                      timed: Callable[[], object] | None = None, repeat: int = 10, capture=None) -> tuple[float, float]:
    """(GPU ms of one launch, relative error): ``run`` checked as ``check_output`` does, then ``timed``
    (or ``run``) timed by ``measure.per_launch_ms``, a CUDA graph of launches (``capture``: how to
    capture a peer's launches, e.g. peers.torch_capture)."""
    err = check_output(label, run, out, ref, tol=tol)
    return measure.per_launch_ms(timed or run, repeat=repeat, capture=capture), err


def checked_time(label: str, run: Callable[[], object], out, ref: np.ndarray, *, tol: float,
                 warmup: int = 3, repeat: int = 20, sync: bool = False,
                 timed: Callable[[], object] | None = None) -> tuple[measure.Timing, float]:
    """(Timing, relative error) of ``run``, which writes ``out``: first run once into ``out`` poisoned
    with NaN and compare its first ``len(ref)`` rows with the float64 ``ref`` (AssertionError naming
    ``label`` if off), then time it (``timed`` instead, when the timed call differs: a peer timed
    without the copy into ``out``).  Calls are queued back to back (``sync=False``), as a network's
    layers are: the host's launch overhead then overlaps the GPU's work."""
    err = check_output(label, run, out, ref, tol=tol)
    return measure.time_fn(timed or run, warmup=warmup, repeat=repeat, sync=sync), err
