"""Winograd F(2, r) in three passes (conv_winograd_gemm.cu + gemm.cu's gemm_dbuf_batched,
labkit.ops.conv_winograd_gemm) against the float64 reference: fresh random inputs of odd sizes, windows
from 2x2 to 7x7 square and rectangular (1 x 7, 5 x 3, ...), every padding per side up to 3, groups, each
epilogue (bias, residual, activation), a NaN-poisoned output; NaN and infinity where PyTorch's
convolution puts them; Toom-Cook's matrices exact; the batched GEMM alone; the refusals, the workspace
bound said before anything is allocated; ``auto`` offering it."""
from __future__ import annotations

from fractions import Fraction
from itertools import product

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


def _reference(x, w, b, pad, act, res, groups=1, dilation=1):
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    y = reference.conv2d(x64, w64, None if b is None else b.astype(np.float64), pad=pad, groups=groups,
                         dilation=dilation)
    terms = reference.conv2d(np.abs(x64), np.abs(w64), None if b is None else np.abs(b.astype(np.float64)), pad=pad,
                             groups=groups, dilation=dilation)
    if res is not None:
        y, terms = y + res, terms + np.abs(res)
    if act == "relu":
        y = np.maximum(y, 0)
    elif act == "relu6":
        y = np.clip(y, 0, 6)
    elif act == "tanh":
        y = np.tanh(y)
    return y, terms


CASES = [  # N, C, H, W, M, window, pad (h, w), groups, activation, bias, residual
    (2, 3, 7, 9, 5, 3, (1, 1), 1, "relu", True, True),
    (1, 5, 6, 5, 4, 3, (0, 2), 1, None, False, False),
    (3, 4, 5, 5, 6, 3, (2, 0), 1, "relu6", True, False),
    (1, 7, 3, 4, 3, 3, (3, 1), 1, "tanh", True, True),
    (2, 2, 11, 1, 7, 3, (0, 1), 1, None, True, False),
    (1, 9, 8, 8, 10, 3, (1, 1), 1, "relu", False, True),
    (2, 5, 9, 11, 6, 5, (2, 2), 1, "relu", True, False),      # AlexNet's conv2, small
    (1, 8, 13, 10, 12, 5, (2, 2), 2, "relu", True, True),     # ... with its two groups
    (2, 3, 12, 9, 4, 7, (3, 0), 1, None, True, False),
    (1, 4, 10, 13, 5, (1, 7), (0, 3), 1, "relu6", False, False),
    (2, 6, 13, 6, 3, (7, 1), (3, 0), 1, None, True, True),
    (1, 16, 9, 9, 20, (5, 3), (1, 2), 4, "tanh", True, False),
    (3, 4, 6, 7, 5, 2, (1, 0), 1, "relu", True, False),       # even windows
    (1, 5, 11, 8, 6, (4, 6), (3, 1), 1, None, False, True),
    (1, 3, 5, 9, 4, (3, 1), (1, 0), 1, None, True, False),
]


@pytest.mark.parametrize("N, C, H, W, M, window, pad, groups, act, bias, res", CASES)
def test_matches_the_reference(N, C, H, W, M, window, pad, groups, act, bias, res):
    L = ConvLayer.of(C, H, W, M, window, 1, pad, 1, groups)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((M, C // groups) + L.kernel_hw).astype(np.float32)
    b = rng.standard_normal(M).astype(np.float32) if bias else None
    r = rng.standard_normal((N, M) + L.out_hw).astype(np.float32) if res else None
    conv = wgemm.WinogradGemmConv2d(dev(w), None if b is None else dev(b), L, activation=act, residual=res)
    out = labkit.xp.full((N, M) + L.out_hw, np.nan, dtype=labkit.xp.float32)
    y = conv(dev(x), out, residual=None if r is None else dev(r))
    want, terms = _reference(x, w, b, pad, act, r, groups)
    assert y is out and y.shape == want.shape
    assert rel_error(y, want, terms) < 1e-6


DILATED = [  # N, C, H, W, M, window, pad (h, w), dilation (h, w), groups
    (2, 3, 13, 11, 5, 3, (2, 2), (2, 2), 1),
    (1, 4, 17, 15, 6, 3, (0, 3), (3, 3), 1),          # unpadded in height: phases of unequal length
    (2, 5, 12, 13, 4, 5, (4, 2), (2, 1), 1),
    (1, 8, 16, 9, 8, (1, 7), (0, 6), (1, 2), 2),
    (1, 3, 19, 14, 7, (3, 5), (3, 1), (4, 3), 1),     # more phases than a tile's rows
    (2, 2, 9, 10, 3, 2, (1, 0), (5, 2), 1),           # dilation nearly the plane: one output row a phase
]


@pytest.mark.parametrize("N, C, H, W, M, window, pad, dilation, groups", DILATED)
def test_dilated_windows_phase_by_phase(N, C, H, W, M, window, pad, dilation, groups):
    """A dilated window: tiles of outputs DH rows (DW columns) apart, their patches' rows likewise, the
    phases' last tiles guarded: the float64 reference's result, NaN-poisoned output overwritten."""
    L = ConvLayer.of(C, H, W, M, window, 1, pad, dilation, groups)
    assert wgemm.applies(L)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((M, C // groups) + L.kernel_hw).astype(np.float32)
    b = rng.standard_normal(M).astype(np.float32)
    conv = wgemm.WinogradGemmConv2d(dev(w), dev(b), L, activation="relu")
    out = labkit.xp.full((N, M) + L.out_hw, np.nan, dtype=labkit.xp.float32)
    y = conv(dev(x), out)
    want, terms = _reference(x, w, b, pad, "relu", None, groups, dilation)
    assert y is out and y.shape == want.shape
    assert rel_error(y, want, terms) < 1e-6


@pytest.mark.parametrize("window, dilation", [(3, 1), (5, 1), (7, 1), ((1, 7), 1), ((6, 3), 1), (3, 2), (3, (2, 3))])
def test_nan_and_infinity_where_the_direct_convolution_puts_them(window, dilation):
    """One NaN and one infinity in x: NaN exactly in the outputs whose windows hold the NaN (ReLU
    keeps it, as PyTorch's does); the infinity's windows non-finite, every other output finite."""
    L = ConvLayer.of(3, 11, 12, 4, window, 1, 0, dilation)
    (kh, kw), (ho, wo), (dh, dw) = L.kernel_hw, L.out_hw, L.dilation_hw
    x = rng.standard_normal((2, 3, 11, 12)).astype(np.float32)
    nan_at, inf_at = (1, 2, int(rng.integers(11)), int(rng.integers(12))), (0, 1, 0, 11)
    x[nan_at], x[inf_at] = np.nan, np.inf
    w = rng.standard_normal((4, 3) + L.kernel_hw).astype(np.float32)
    w[:, 1] = np.abs(w[:, 1])        # the infinity's channel: +inf before ReLU (a -inf would leave a 0)
    y = to_numpy(wgemm.WinogradGemmConv2d(dev(w), None, L, activation="relu")(dev(x)))

    def windows(n, h, w_):     # the outputs (i, j) whose taps i + dh k, j + dw l reach (h, w_)
        out = np.zeros(y.shape, bool)
        for k, l in product(range(kh), range(kw)):
            i, j = h - dh * k, w_ - dw * l
            if 0 <= i < ho and 0 <= j < wo:
                out[n, :, i, j] = True
        return out
    nan_windows, inf_windows = windows(*nan_at[:1], *nan_at[2:]), windows(*inf_at[:1], *inf_at[2:])
    assert np.array_equal(np.isnan(y) & ~inf_windows, nan_windows)
    assert np.isfinite(y[~(nan_windows | inf_windows)]).all()
    assert not np.isfinite(y[inf_windows]).all()


@pytest.mark.parametrize("r", range(1, wgemm.MAX_WINDOW + 1))
def test_toom_cook_is_exact_and_keeps_nan_in_its_windows(r):
    """F(2, r)'s A^T ((G g) * (B^T d)) is the correlation for every g and d, in exact fractions (the
    bilinear form's coefficient of g_k d_j is 1 where j = o + k, else 0), and the nonzero pattern of
    A^T B^T is the windows': a NaN of d reaches exactly the outputs whose windows hold it."""
    at, g, bt = wgemm.toom_cook(r)
    m, alpha = len(at), len(bt)
    assert (len(g), len(g[0])) == (alpha, r)
    for o, k, j in product(range(m), range(r), range(alpha)):
        coefficient = sum(at[o][xi] * g[xi][k] * bt[xi][j] for xi in range(alpha))
        assert coefficient == Fraction(int(j == o + k))
    reach = [[any(at[o][xi] and bt[xi][j] for xi in range(alpha)) for j in range(alpha)] for o in range(m)]
    assert reach == [[o <= j < o + r for j in range(alpha)] for o in range(m)]
    # B^T and A^T are dyadic (exact in float32): the kernel's transforms add no rounding of their own
    assert all(float(v) == np.float32(float(v)) for row in (*at, *bt) for v in row)


@pytest.mark.parametrize("window, groups", [(3, 1), (5, 2), ((1, 7), 1), ((7, 4), 2)])
def test_the_layer_transforms_its_weights_on_the_device(window, groups):
    """U from wgg_weights (the layer's own (M, C/groups, KH, KW) weights, made by its first plan) is the
    float64 host transform within float32's rounding, and later plans (other batches) keep it."""
    L = ConvLayer.of(8, 9, 10, 12, window, 1, 1, 1, groups)
    w = rng.standard_normal((12, 8 // groups) + L.kernel_hw).astype(np.float32)
    conv = wgemm.WinogradGemmConv2d(dev(w), None, L)
    conv.plan(2)
    u = to_numpy(conv.u).astype(np.float64)
    want = wgemm.transform_weights(w)
    assert u.shape == want.shape == (wgemm.positions(L), 12, 8 // groups)
    assert np.abs(u - want).max() <= 1e-6 * np.abs(want).max()
    conv.plan(3)
    assert np.array_equal(to_numpy(conv.u), u.astype(np.float32))


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
    for layer in (ConvLayer.of(3, 8, 8, 4, 3, 2, 1), ConvLayer.of(4, 8, 8, 4, 3, 1, 1, 1, 2),
                  ConvLayer.of(3, 8, 8, 4, (3, 9), 1, 1),
                  ConvLayer.of(3, 8, 8, 4, 1), ConvLayer.of(6, 8, 8, 6, 3, 1, 1, 1, 2)):
        assert not wgemm.applies(layer)
        with pytest.raises(ValueError, match="windows up to 7x7 .* at stride 1"):
            wgemm.WinogradGemmConv2d(w, None, layer)
    with pytest.raises(ValueError, match="1 <= r <= 7"):
        wgemm.toom_cook(8)
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
    """A batch over the bound runs in chunks (``chunk``: the workspace of one chunk); a layer of which
    one image is over the bound is refused before anything is allocated, and auto does not offer it."""
    big = ConvLayer.of(512, 64, 64, 512, 3, 1, 1)
    assert wgemm.workspace_bytes(big, 64) == 4 * 16 * 1024 * 64 * 32 * 32
    assert wgemm.workspace_bytes(ConvLayer.of(512, 63, 64, 512, 5, 1, 2), 64) == 4 * 36 * 1024 * 64 * 32 * 32
    assert wgemm.workspace_bytes(ConvLayer.of(512, 63, 64, 512, (1, 7), 1, (0, 3)), 64) == 4 * 8 * 1024 * 64 * 63 * 32
    n = wgemm.chunk(big, 64)
    assert 1 <= n < 64 and wgemm.workspace_bytes(big, n) <= wgemm.workspace_limit() < wgemm.workspace_bytes(big, n + 1)
    conv = wgemm.WinogradGemmConv2d(dev(np.zeros((512, 512, 3, 3), np.float32)), None, big)
    assert conv.workspace_bytes(64) == wgemm.workspace_bytes(big, n)
    huge = ConvLayer.of(512, 512, 512, 512, 3, 1, 1)          # one image: 4 GiB of V and Mx, over any bound
    assert wgemm.workspace_bytes(huge, 1) > wgemm.workspace_limit() and wgemm.chunk(huge, 4) == 0
    conv = wgemm.WinogradGemmConv2d(dev(np.zeros((512, 512, 3, 3), np.float32)), None, huge)
    with pytest.raises(ValueError, match="MiB of Winograd workspace"):
        conv.plan(1)
    auto = conv_auto.AutoConv2d(dev(np.zeros((512, 512, 3, 3), np.float32)), None, huge)
    assert "winograd_gemm" in [f.name for f in auto.families]
    assert not [c for c in auto.candidates(1) if c["family"] == "winograd_gemm"]   # over workspace_limit(): not offered
    auto = conv_auto.AutoConv2d(dev(np.zeros((512, 512, 3, 3), np.float32)), None, big)
    assert [c for c in auto.candidates(64) if c["family"] == "winograd_gemm"]


@pytest.mark.parametrize("N, bound_images", [(7, 3), (5, 5), (4, 1)])
def test_a_batch_over_the_bound_runs_in_chunks(monkeypatch, N, bound_images):
    """With the bound at ``bound_images`` images' V and Mx, a batch of N runs chunk by chunk (the last
    one shorter, on the first's V and Mx): the same result as the reference, residual included."""
    L = ConvLayer.of(6, 9, 7, 5, 5, 1, 2)
    monkeypatch.setattr(wgemm, "workspace_limit", lambda: wgemm.workspace_bytes(L, bound_images))
    assert wgemm.chunk(L, N) == min(N, bound_images)
    x = rng.standard_normal((N, 6, 9, 7)).astype(np.float32)
    w = rng.standard_normal((5, 6, 5, 5)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    r = rng.standard_normal((N, 5, 9, 7)).astype(np.float32)
    conv = wgemm.WinogradGemmConv2d(dev(w), dev(b), L, activation="relu", residual=True)
    assert conv.workspace_bytes(N) == wgemm.workspace_bytes(L, min(N, bound_images))
    out = labkit.xp.full((N, 5, 9, 7), np.nan, dtype=labkit.xp.float32)
    for _ in range(2):                                        # the plan, then the plan again
        y = conv(dev(x), out, residual=dev(r))
        want, terms = _reference(x, w, b, (2, 2), "relu", r)
        assert y is out and rel_error(y, want, terms) < 1e-6


def test_auto_searches_only_the_families_asked_for():
    """AutoConv2d(families=...): the search restricted to those names (here winograd_gemm alone); a name
    that is no family, or families none of which runs the layer, refused before anything compiles."""
    L = ConvLayer.of(6, 9, 8, 7, 5, 1, 2)
    w = dev(rng.standard_normal((7, 6, 5, 5)).astype(np.float32))
    auto = conv_auto.AutoConv2d(w, None, L, families=("winograd_gemm",))
    assert [f.name for f in auto.families] == ["winograd_gemm"]
    assert {c["family"] for c in auto.candidates(2)} == {"winograd_gemm"}
    x = rng.standard_normal((2, 6, 9, 8)).astype(np.float32)
    want, terms = _reference(x, to_numpy(w), None, (2, 2), None, None)
    assert auto.choice(2)["family"] == "winograd_gemm" and rel_error(auto(dev(x)), want, terms) < 1e-6
    with pytest.raises(ValueError, match="no kernel family"):
        conv_auto.AutoConv2d(w, None, L, families=("winograd_gem",))
    with pytest.raises(ValueError, match="none of the families"):
        conv_auto.AutoConv2d(w, None, L, families=("depthwise",))


@pytest.mark.parametrize("window, groups, dilation", [(3, 1, 1), (5, 2, 1), (3, 1, 2)])
def test_auto_offers_and_runs_it_with_a_residual(window, groups, dilation):
    L = ConvLayer.of(8, 7, 5, 10, window, 1, dilation * (window // 2), dilation, groups)
    w = rng.standard_normal((10, 8 // groups, window, window)).astype(np.float32)
    b = rng.standard_normal(10).astype(np.float32)
    auto = conv_auto.AutoConv2d(dev(w), dev(b), L, activation="relu", residual=True)
    configs = [c for c in auto.candidates(3) if c["family"] == "winograd_gemm"]
    assert configs and all("tiles" in c for c in configs)
    x = rng.standard_normal((3, 8, 7, 5)).astype(np.float32)
    r = rng.standard_normal((3, 10, 7, 5)).astype(np.float32)
    y = labkit.xp.full((3, 10, 7, 5), np.nan, dtype=labkit.xp.float32)
    auto.make(configs[-1])(dev(x), y, dev(r))
    want, terms = _reference(x, w, b, (dilation * (window // 2),) * 2, "relu", r, groups, dilation)
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

