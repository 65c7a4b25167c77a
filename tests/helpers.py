"""Helpers shared by the test modules: plain functions, imported as ``from helpers import ...``.

A test module imports from here, never from another test module (tests/test_architecture.py checks
it): a test file then runs, moves or is deleted on its own.  conftest.py puts this folder on
sys.path, so the import works under any of pytest's import modes.
"""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np

import labkit
from labkit.ladder.harness import reference_activation
from labkit import reference
from labkit.checks import to_numpy
from labkit.ops.conv import conv2d

rng = np.random.default_rng()


class FakeCupyArray:
    """Stands in for a cupy.ndarray where CuPy is not installed (labkit looks at the module name)."""


FakeCupyArray.__module__ = "cupy._core.core"


def with_changes(good, **changes):
    """A maker of arguments: ``good()``'s dict with each named entry replaced by ``f(args)``."""
    def make():
        args = good()
        for k, f in changes.items():
            args[k] = f(args)
        return args
    return make


def f32(a):
    """``a`` as a C-contiguous float32 array on the backend in use."""
    return labkit.xp.asarray(np.ascontiguousarray(a, dtype=np.float32))


def poisoned(*shape):
    """A float32 output of ``shape`` on the backend, filled with NaN: an element never written stays NaN."""
    return f32(np.full(shape, np.nan))


def kink_margin(pre_activations: dict) -> float:
    """The smallest |z| among float64 sums before ReLUs, over the RMS of its own layer's sums."""
    return min(float(np.abs(z).min() / max(np.sqrt(np.mean(np.square(z))), 1e-300))
               for z in pre_activations.values())


def away_from_kinks(draw, pre_activations, margin: float = 2e-5, tries: int = 100):
    """``draw()``'s first result whose float64 sums before the ReLUs, ``pre_activations(*result)``,
    all lie more than ``margin`` of their layer's RMS from 0.

    float32 computes each sum within about 1e-6 of that RMS. A sum nearer 0 may change sides: the
    ReLU then opens or shuts one pixel's path, and a gradient moves by ~1e-2 against float64, a
    chance failure (about 1e-3 a run for the ResNet's checks) that says nothing of the kernels. A
    central difference of step 1e-6 can cross the kink the same way. Kept 2e-5 away, neither can."""
    for _ in range(tries):
        drawn = draw()
        if kink_margin(pre_activations(*drawn)) > margin:
            return drawn
    raise AssertionError(f"no draw in {tries} kept its sums {margin:g} of their RMS away from 0")


# --- a convolution layer of the ladder (labkit.ops.conv.conv2d) --------------------------------------
def make_layer(N, C, H, W, M, K, *, bias=True):
    """Random float32 x, w, b as NumPy arrays (b None without bias)."""
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = (rng.standard_normal((M, C, K, K)) / np.sqrt(C * K * K)).astype(np.float32)
    b = rng.standard_normal(M).astype(np.float32) if bias else None
    return x, w, b


def expected(x, w, b, activation):
    """The float64 reference of ``conv2d(x, w, b, activation=activation)`` (no stride, no padding)."""
    return reference_activation(reference.conv2d(x, w, b), activation)


def run(x, w, b, **kw):
    """conv2d on the backend's arrays, into a NaN-poisoned out; the result as NumPy."""
    xp = labkit.xp
    N, _, H, W = x.shape
    M, _, K, _ = w.shape
    out = xp.full((N, M, H - K + 1, W - K + 1), np.nan, dtype=xp.float32)
    y = conv2d(xp.asarray(x), xp.asarray(w), None if b is None else xp.asarray(b), out=out, **kw)
    assert y is out
    return to_numpy(y)


def lab_recipe() -> tuple[dict, list[str]]:
    """The Makefile's `lab` recipe as make expands it (`make -n lab`, VENV this Python's environment):
    the variables it sets, and the command line."""
    venv = Path(sys.executable).parent.parent
    shown = subprocess.run(["make", "-n", "-s", "lab", f"VENV={venv}"], cwd=Path(__file__).resolve().parent.parent,
                           capture_output=True, text=True, check=True).stdout
    recipe = [line for line in shown.splitlines() if " lab " in line and "/bin/jupyter" in line]
    assert len(recipe) == 1, f"`make -n lab` shows no single `jupyter lab` line:\n{shown}"
    words = shlex.split(recipe[0])
    env = {}
    while re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    return env, words


def pool_ref(x, mode, k, s=(1, 1), pads=(0, 0, 0, 0), d=(1, 1), ceil=False, include_pad=False):
    """ONNX MaxPool / AveragePool in float64, written out window by window (pads top, left, bottom,
    right; a window's average over its inside cells, or with count_include_pad over the padded ones)."""
    x = x.astype(np.float64)
    N, C, H, W = x.shape
    t, l, b, r = pads

    def size(n, k, s, d, p0, p1):
        span = d * (k - 1) + 1
        out = (np.ceil if ceil else np.floor)((n + p0 + p1 - span) / s).astype(int) + 1
        return out - 1 if ceil and (out - 1) * s >= n + p0 else out
    Ho, Wo = size(H, k[0], s[0], d[0], t, b), size(W, k[1], s[1], d[1], l, r)
    y = np.empty((N, C, Ho, Wo))
    for i in range(Ho):
        for j in range(Wo):
            rows = [i * s[0] - t + p * d[0] for p in range(k[0])]
            cols = [j * s[1] - l + q * d[1] for q in range(k[1])]
            ri, ci = [h for h in rows if 0 <= h < H], [w for w in cols if 0 <= w < W]
            win = x[:, :, ri][:, :, :, ci]
            if mode == "max":
                y[:, :, i, j] = win.max(axis=(2, 3))
            else:
                count = (sum(-t <= h < H + b for h in rows) * sum(-l <= w < W + r for w in cols) if include_pad
                         else len(ri) * len(ci))
                y[:, :, i, j] = win.sum(axis=(2, 3)) / count
    return y
