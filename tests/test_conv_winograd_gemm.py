"""Winograd F(2x2, 3x3) in three passes (conv_winograd_gemm.cu + gemm.cu's gemm_dbuf_batched,
labkit.ops.conv_winograd_gemm) against the float64 reference: fresh random inputs of odd sizes, every
padding per side up to 3, each epilogue (bias, residual, activation), a NaN-poisoned output; NaN and
infinity where PyTorch's convolution puts them; the batched GEMM alone; the refusals, the workspace
bound said before anything is allocated; ``auto`` offering it."""
from __future__ import annotations

import numpy as np
import pytest

import labkit
from labkit import reference
from labkit.checks import rel_error, to_numpy
from labkit.ops import conv_auto, conv_winograd_gemm as wgemm
from labkit.ops.gemm import batched_launcher
from labkit.shapes import ConvLayer

pytestmark = pytest.mark.check
rng = np.random.default_rng()
dev = labkit.xp.asarray


def _reference(x, w, b, pad, act, res):
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    y = reference.conv2d(x64, w64, None if b is None else b.astype(np.float64), pad=pad)
    terms = reference.conv2d(np.abs(x64), np.abs(w64), None if b is None else np.abs(b.astype(np.float64)), pad=pad)
    if res is not None:
        y, terms = y + res, terms + np.abs(res)
    if act == "relu":
        y = np.maximum(y, 0)
    elif act == "relu6":
        y = np.clip(y, 0, 6)
    elif act == "tanh":
        y = np.tanh(y)
    return y, terms


CASES = [  # N, C, H, W, M, pad (h, w), activation, bias, residual
    (2, 3, 7, 9, 5, (1, 1), "relu", True, True),
    (1, 5, 6, 5, 4, (0, 2), None, False, False),
    (3, 4, 5, 5, 6, (2, 0), "relu6", True, False),
    (1, 7, 3, 4, 3, (3, 1), "tanh", True, True),
    (2, 2, 11, 1, 7, (0, 1), None, True, False),
    (1, 9, 8, 8, 10, (1, 1), "relu", False, True),
]


@pytest.mark.parametrize("N, C, H, W, M, pad, act, bias, res", CASES)
def test_matches_the_reference(N, C, H, W, M, pad, act, bias, res):
    L = ConvLayer.of(C, H, W, M, 3, 1, pad)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((M, C, 3, 3)).astype(np.float32)
    b = rng.standard_normal(M).astype(np.float32) if bias else None
    r = rng.standard_normal((N, M) + L.out_hw).astype(np.float32) if res else None
    conv = wgemm.WinogradGemmConv2d(dev(w), None if b is None else dev(b), L, activation=act, residual=res)
    out = labkit.xp.full((N, M) + L.out_hw, np.nan, dtype=labkit.xp.float32)
    y = conv(dev(x), out, residual=None if r is None else dev(r))
    want, terms = _reference(x, w, b, pad, act, r)
    assert y is out and y.shape == want.shape
    assert rel_error(y, want, terms) < 1e-6


def test_nan_and_infinity_where_the_direct_convolution_puts_them():
    """One NaN and one infinity in x: NaN exactly in the outputs whose 3x3 windows hold the NaN (ReLU
    keeps it, as PyTorch's does); the infinity's windows non-finite, every other output finite."""
    L = ConvLayer.of(3, 9, 10, 4, 3, 1, 1)
    x = rng.standard_normal((2, 3, 9, 10)).astype(np.float32)
    x[1, 2, 4, 5] = np.nan
    x[0, 1, 0, 9] = np.inf
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    y = to_numpy(wgemm.WinogradGemmConv2d(dev(w), None, L, activation="relu")(dev(x)))
    nan_windows = np.zeros(y.shape, bool)
    nan_windows[1, :, 3:6, 4:7] = True
    inf_windows = np.zeros(y.shape, bool)
    inf_windows[0, :, 0:2, 8:10] = True
    assert np.array_equal(np.isnan(y) & ~inf_windows, nan_windows)
    assert np.isfinite(y[~(nan_windows | inf_windows)]).all()
    assert not np.isfinite(y[inf_windows]).all()


def test_the_batched_gemm():
    P, M, N, K = 3, 37, 45, 19
    a = rng.standard_normal((P, M, K)).astype(np.float32)
    b = rng.standard_normal((P, K, N)).astype(np.float32)
    c = labkit.xp.full((P, M, N), np.nan, dtype=labkit.xp.float32)
    batched_launcher(M, N, K, P, {"GEMM_BM": 32, "GEMM_BN": 32, "GEMM_BK": 8, "GEMM_TM": 4, "GEMM_TN": 4})(
        dev(a), dev(b), c)
    want = np.einsum("pmk,pkn->pmn", a.astype(np.float64), b.astype(np.float64))
    terms = np.einsum("pmk,pkn->pmn", np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))
    assert rel_error(c, want, terms) < 1e-6


def test_refusals():
    w = dev(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    for layer in (ConvLayer.of(3, 8, 8, 4, 3, 2, 1), ConvLayer.of(3, 8, 8, 4, 3, 1, 1, 2),
                  ConvLayer.of(4, 8, 8, 4, 3, 1, 1, 1, 2), ConvLayer.of(3, 8, 8, 4, (3, 5), 1, 1)):
        with pytest.raises(ValueError, match="3x3 windows at stride 1"):
            wgemm.WinogradGemmConv2d(w, None, layer)
    L = ConvLayer.of(3, 8, 8, 4, 3, 1, 1)
    with pytest.raises(ValueError, match="w must have shape"):
        wgemm.WinogradGemmConv2d(dev(np.zeros((4, 2, 3, 3), np.float32)), None, L)
    with pytest.raises(ValueError, match="activation"):
        wgemm.WinogradGemmConv2d(w, None, L, activation="gelu")
    conv = wgemm.WinogradGemmConv2d(w, None, L, residual=True)
    x = dev(rng.standard_normal((2, 3, 8, 8)).astype(np.float32))
    with pytest.raises(ValueError, match="residual"):
        conv(x)
    with pytest.raises(ValueError, match=r"x must be \(N, 3, 8, 8\)"):
        conv(dev(np.zeros((2, 3, 8, 9), np.float32)), residual=dev(np.zeros((2, 4, 8, 8), np.float32)))
    plain = wgemm.WinogradGemmConv2d(dev(rng.standard_normal((3, 3, 3, 3)).astype(np.float32)), None,
                                     ConvLayer.of(3, 8, 8, 3, 3, 1, 1))
    with pytest.raises(ValueError):
        plain(x, out=x)                           # out may not overlap x


def test_the_workspace_is_said_before_it_is_allocated():
    big = ConvLayer.of(512, 64, 64, 512, 3, 1, 1)
    conv = wgemm.WinogradGemmConv2d(dev(np.zeros((512, 512, 3, 3), np.float32)), None, big)
    assert conv.workspace_bytes(64) == 4 * 16 * 1024 * 64 * 32 * 32
    with pytest.raises(ValueError, match="MiB of Winograd workspace"):
        conv.plan(64)
    auto = conv_auto.AutoConv2d(dev(np.zeros((512, 512, 3, 3), np.float32)), None, big)
    assert "winograd_gemm" in [f.name for f in auto.families]
    assert not [c for c in auto.candidates(64) if c["family"] == "winograd_gemm"]   # over workspace_limit(): not offered
    assert [c for c in auto.candidates(1) if c["family"] == "winograd_gemm"]


def test_auto_offers_and_runs_it_with_a_residual():
    L = ConvLayer.of(6, 7, 5, 5, 3, 1, 1)
    w = rng.standard_normal((5, 6, 3, 3)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    auto = conv_auto.AutoConv2d(dev(w), dev(b), L, activation="relu", residual=True)
    configs = [c for c in auto.candidates(3) if c["family"] == "winograd_gemm"]
    assert configs and all("tiles" in c for c in configs)
    x = rng.standard_normal((3, 6, 7, 5)).astype(np.float32)
    r = rng.standard_normal((3, 5, 7, 5)).astype(np.float32)
    y = labkit.xp.full((3, 5, 7, 5), np.nan, dtype=labkit.xp.float32)
    auto.make(configs[-1])(dev(x), y, dev(r))
    want, terms = _reference(x, w, b, (1, 1), "relu", r)
    assert rel_error(y, want, terms) < 1e-6


@pytest.mark.parametrize("transpose, bias, res, gate, relu", [(False, True, True, False, True),
                                                               (True, False, False, True, False),
                                                               (True, False, True, True, True),
                                                               (False, False, False, False, False)])
def test_the_training_passes(transpose, bias, res, gate, relu):
    """WinogradGemm3x3, conv_small's interface: forward and backward data (the forward's filters turned,
    C and M swapped), the weights (C*9, M) transformed on the device at each call (a changed weight
    changes the next output), residual, ReLU, then the gate (0 where gate <= 0; a NaN gate passes)."""
    N, C, H, W, M = 3, 5, 7, 9, 6
    L = ConvLayer.of(C, H, W, M, 3, 1, 1)
    w = rng.standard_normal((M, C, 3, 3)).astype(np.float32)
    wt = dev(np.ascontiguousarray(w.transpose(1, 2, 3, 0).reshape(C * 9, M)))
    b = rng.standard_normal(M).astype(np.float32) if bias else None
    c_in, c_out = (M, C) if transpose else (C, M)
    x = rng.standard_normal((N, c_in, H, W)).astype(np.float32)
    shape = (N, c_out, H, W)
    r = rng.standard_normal(shape).astype(np.float32) if res else None
    g = rng.standard_normal(shape).astype(np.float32) if gate else None
    if gate:
        g[0, 0, 0, :3] = np.nan
    layer = wgemm.WinogradGemm3x3(wt, None if b is None else dev(b), L, activation="relu" if relu else None,
                                  residual=res, gate=gate, transpose=transpose)
    kernel = w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1] if transpose else w
    for step in range(2):
        out = labkit.xp.full(shape, np.nan, dtype=labkit.xp.float32)
        y = layer(dev(x), out, residual=None if r is None else dev(r), gate=None if g is None else dev(g))
        want, terms = _reference(x, np.ascontiguousarray(kernel), b, (1, 1), "relu" if relu else None, r)
        if gate:
            want = np.where(g <= 0, 0.0, want)
        assert y is out and rel_error(y, want, terms) < 1e-6
        w[0, 0, 1, 2] += 1.0                                  # a training step's update, seen by the next call
        wt[...] = dev(np.ascontiguousarray(w.transpose(1, 2, 3, 0).reshape(C * 9, M)))
        kernel = w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1] if transpose else w

