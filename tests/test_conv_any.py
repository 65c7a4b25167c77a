"""labkit.conv2d and labkit.conv_transpose2d on any geometry: a randomized zoo against the float64
reference (kernels 1..11 x 1..11, stride 1..5, padding per axis, dilation 1..3, groups including
depthwise, bias, activations, odd sizes), each output buffer poisoned with NaN; conv_transpose2d also
checked as the exact adjoint of conv2d; NaN through the activations; batches past 32-bit offsets;
and the refusals of rungs that cannot run a shape.

The zoo's shapes come from a fixed seed (every test process must collect the same cases), its data
is drawn fresh on every run: a failure message carries the data's seed to replay it.
"""
from __future__ import annotations

import numpy as np
import pytest

import labkit
from labkit import reference
from labkit.checks import to_numpy
from labkit.ops import conv_auto, conv_phased, conv_transpose, implicit
from labkit.ops.conv_transpose import ConvTranspose2d, TransposeGeometry, axis_phases
from labkit.shapes import ConvLayer

SHAPE_SEED = 20261128
ACTIVATIONS = [None, "relu", "relu6", "tanh"]


def _draw_conv(r: np.random.Generator) -> dict:
    """One convolution of the zoo: a fifth depthwise, a fifth grouped, the rest dense."""
    while True:
        kind = r.choice(["dense", "dense", "dense", "grouped", "depthwise"])
        kh, kw = (int(v) for v in r.integers(1, 12, 2))
        if r.random() < 0.4:
            kw = kh                                     # square kernels are common: keep many
        sh, sw = (int(v) for v in r.integers(1, 6, 2))
        dh, dw = (int(v) for v in r.choice([1, 1, 2, 3], 2))
        ph, pw = (int(v) for v in r.integers(0, 6, 2))
        H = int(r.integers(max(1, dh * (kh - 1) + 1 - 2 * ph), dh * (kh - 1) + 14))
        W = int(r.integers(max(1, dw * (kw - 1) + 1 - 2 * pw), dw * (kw - 1) + 14))
        if kind == "depthwise":            # a channel multiplier (M = 2C, 3C) a third of the time
            g = C = int(r.integers(1, 10))
            M = C * int(r.choice([1, 1, 1, 1, 2, 3]))
        else:
            g = int(r.integers(2, 4)) if kind == "grouped" else 1
            C, M = g * int(r.integers(1, 5)), g * int(r.integers(1, 5))
        layer = ConvLayer.of(C, H, W, M, (kh, kw), (sh, sw), (ph, pw), (dh, dw), g)
        if min(layer.out_hw) >= 1 and H * W <= 900:
            return dict(N=int(r.integers(1, 4)), layer=layer, bias=bool(r.random() < 0.7),
                        activation=ACTIVATIONS[int(r.integers(0, 4))])


def _draw_transpose(r: np.random.Generator) -> TransposeGeometry:
    while True:
        g = int(r.choice([1, 1, 1, 2, 3]))
        C, M = g * int(r.integers(1, 4)), g * int(r.integers(1, 4))
        kh, kw = (int(v) for v in r.integers(1, 8, 2))
        sh, sw = (int(v) for v in r.choice([1, 2, 2, 3], 2))   # each of the sh * sw phases compiles
        dh, dw = (int(v) for v in r.choice([1, 1, 2, 3], 2))
        ph, pw = (int(v) for v in r.integers(0, 5, 2))
        oph, opw = int(r.integers(0, max(sh, dh))), int(r.integers(0, max(sw, dw)))
        H, W = (int(v) for v in r.integers(1, 10, 2))
        try:
            return TransposeGeometry.of(C, H, W, M, (kh, kw), (sh, sw), (ph, pw), (oph, opw), (dh, dw), g)
        except ValueError:
            continue


_r = np.random.default_rng(SHAPE_SEED)
CONV_ZOO = [_draw_conv(_r) for _ in range(300)]
TRANSPOSE_ZOO = [_draw_transpose(_r) for _ in range(36)]


def _data(seed: int, *shapes):
    r = np.random.default_rng(seed)
    return [r.standard_normal(s).astype(np.float32) for s in shapes]


def _close(got, ref, what: str, tol: float = 2e-5, pre_activation=None):
    """The largest error relative to the largest output. Float32 rounding is relative to the sum
    before the activation: tanh and relu6 squash a sum of 400 products near 20 to 1 but pass its
    rounding (about 1e-6 of 20) on where the sum is near 0, so an activated output is measured
    against its pre-activation scale (the activations are 1-Lipschitz: they never grow an error)."""
    got = to_numpy(got).astype(np.float64)
    assert got.shape == ref.shape, f"{what}: shape {got.shape}, expected {ref.shape}"
    assert not np.isnan(got).any(), f"{what}: NaN in the output (an element never written, the buffer was poisoned)"
    scale = np.abs(ref if pre_activation is None else pre_activation).max()
    err = np.abs(got - ref).max() / max(1.0, scale)
    assert err < tol, f"{what}: max error {err:.2e} relative to the largest output"


def _activate(v, activation):
    return {None: lambda a: a, "relu": reference.relu, "relu6": reference.relu6, "tanh": reference.tanh}[activation](v)


@pytest.mark.parametrize("i", range(len(CONV_ZOO)), ids=lambda i: f"{i}-{CONV_ZOO[i]['layer'].key}")
def test_conv2d_auto_matches_the_float64_reference(i):
    case = CONV_ZOO[i]
    L, N = case["layer"], case["N"]
    seed = int(np.random.SeedSequence().entropy % 2**32)
    x, w, b = _data(seed, (N, L.C, L.H, L.W), (L.M, L.C // L.groups) + L.kernel_hw, (L.M,))
    b = b if case["bias"] else None
    pre = reference.conv2d(x, w, b, stride=L.stride_hw, pad=L.pad_hw, dilation=L.dilation_hw, groups=L.groups)
    ref = _activate(pre, case["activation"])
    xp = labkit.xp
    out = xp.full(ref.shape, np.nan, dtype=xp.float32)
    y = labkit.conv2d(xp.asarray(x), xp.asarray(w), None if b is None else xp.asarray(b), stride=L.stride_hw,
                      pad=L.pad_hw, dilation=L.dilation_hw, groups=L.groups, activation=case["activation"], out=out)
    assert y is out
    _close(y, ref, f"{L.key} N={N} {case['activation']} bias={case['bias']} (data seed {seed})", pre_activation=pre)


@pytest.mark.parametrize("i", range(len(TRANSPOSE_ZOO)), ids=lambda i: f"{i}-{TRANSPOSE_ZOO[i].key}")
def test_conv_transpose2d_matches_the_reference_and_is_the_adjoint_of_conv2d(i):
    geo = TRANSPOSE_ZOO[i]
    seed = int(np.random.SeedSequence().entropy % 2**32)
    N = 2
    x, w, b = _data(seed, (N, geo.C, geo.H, geo.W), (geo.C, geo.M // geo.groups) + geo.kernel, (geo.M,))
    kw = dict(stride=geo.stride, pad=geo.pad, dilation=geo.dilation, groups=geo.groups)
    ref = reference.conv_transpose2d(x, w, b, output_padding=geo.output_padding, **kw)
    xp = labkit.xp
    out = xp.full(ref.shape, np.nan, dtype=xp.float32)
    y = labkit.conv_transpose2d(xp.asarray(x), xp.asarray(w), xp.asarray(b), output_padding=geo.output_padding,
                                out=out, **kw)
    _close(y, ref, f"{geo.key} (data seed {seed})")
    # The adjoint: <conv2d(u, w), x> = <u, conv_transpose2d(x, w)> for u of the transposed output's shape,
    # both sides computed by labkit's kernels (no bias), summed in float64.
    (u,) = _data(seed + 1, ref.shape)
    fwd = labkit.conv2d(xp.asarray(u), xp.asarray(w), **kw)
    if tuple(fwd.shape) != x.shape:
        # output_padding at or past the stride (allowed below the dilation) adds rows no window of the
        # forward convolution ends on: conv2d of that size has one more output than x has inputs
        assert any(op >= s for op, s in zip(geo.output_padding, geo.stride)), (fwd.shape, x.shape)
        return
    back = labkit.conv_transpose2d(xp.asarray(x), xp.asarray(w), output_padding=geo.output_padding, **kw)
    lhs = float((to_numpy(fwd).astype(np.float64) * x).sum())
    rhs = float((u.astype(np.float64) * to_numpy(back)).sum())
    scale = float(np.abs(to_numpy(fwd)).astype(np.float64).sum() * np.abs(x).max()) + 1.0
    assert abs(lhs - rhs) <= 1e-5 * scale, f"{geo.key}: <conv(u), x> = {lhs} but <u, convT(x)> = {rhs} (seed {seed})"


def test_every_family_auto_may_choose_is_right_on_its_shapes():
    """Every candidate of every family that can run a few shapes (not only the untuned first one, the
    only one the CPU executor runs from labkit.conv2d) matches the reference."""
    xp = labkit.xp
    shapes = [ConvLayer.of(4, 9, 11, 4, 3, 1, 1, 1, 4), ConvLayer.of(5, 8, 7, 6, 3, 1, 1),
              ConvLayer.of(3, 10, 9, 5, 3), ConvLayer.of(6, 12, 13, 6, (3, 5), 2, (1, 2), (2, 1), 6)]
    tried = set()
    for L in shapes:
        x, w, b = _data(7, (2, L.C, L.H, L.W), (L.M, L.C // L.groups) + L.kernel_hw, (L.M,))
        ref = reference.relu(reference.conv2d(x, w, b, stride=L.stride_hw, pad=L.pad_hw, dilation=L.dilation_hw,
                                              groups=L.groups))
        conv = conv_auto.AutoConv2d(xp.asarray(w), xp.asarray(b), L, activation="relu")
        configs = conv.candidates(2)
        by_family = {}
        for c in configs:
            by_family.setdefault(c["family"], []).append(c)
        for family, cs in by_family.items():
            for c in cs[:3]:
                out = xp.full(ref.shape, np.nan, dtype=xp.float32)
                run = conv.make(c)
                if family != "tuned":   # compiled ahead of the first launch (the search does it in threads)
                    run.prepare(2)
                _close(run(xp.asarray(x), out), ref, f"{L.key} {c}")
                tried.add(family)
    assert {"implicit", "depthwise", "depthwise3x3", "winograd", "tuned"} <= tried


@pytest.mark.parametrize("L, activation", [(ConvLayer.of(5, 9, 7, 6, 3, 1, 1), "relu"),
                                           (ConvLayer.of(3, 11, 10, 5, 3, 2, 1), None),
                                           (ConvLayer.of(4, 8, 9, 8, 1), "relu")], ids=lambda v: str(v))
def test_a_residual_is_added_by_every_family_that_offers_one(L, activation):
    """y = act(conv(x) + b + residual) from each candidate of the families whose epilogue adds one
    (the implicit GEMM; Winograd and conv_small's direct kernel on 3x3, stride 1, padding 1; the
    whole-batch Winograd GEMMs on 3x3, stride 1), on a poisoned output; the families that cannot add
    one are not offered."""
    xp = labkit.xp
    seed = int(np.random.SeedSequence().entropy % 2**32)
    x, w, b = _data(seed, (3, L.C, L.H, L.W), (L.M, L.C // L.groups) + L.kernel_hw, (L.M,))
    conv = conv_auto.AutoConv2d(xp.asarray(w), xp.asarray(b), L, activation=activation, residual=True)
    plain = reference.conv2d(x, w, b, stride=L.stride_hw, pad=L.pad_hw, dilation=L.dilation_hw, groups=L.groups)
    (res,) = _data(seed + 1, plain.shape)
    ref = _activate(plain + res.astype(np.float64), activation)
    families = {c["family"] for c in conv.candidates(3)}
    same_3x3 = L.K == 3 and L.stride == 1 and L.pad == 1
    assert families == ({"implicit", "winograd", "winograd_gemm"} if same_3x3 else {"implicit"})
    tried = 0
    for c in conv.candidates(3)[:6]:
        out = xp.full(ref.shape, np.nan, dtype=xp.float32)
        run = conv.make(c)
        run.prepare(3)
        _close(run(xp.asarray(x), out, xp.asarray(res)), ref, f"{L.key} {c} (data seed {seed})",
               pre_activation=plain + res)
        tried += 1
    out = xp.full(ref.shape, np.nan, dtype=xp.float32)
    _close(conv(xp.asarray(x), out, residual=xp.asarray(res)), ref, f"{L.key} auto (data seed {seed})",
           pre_activation=plain + res)
    assert tried >= 2
    with pytest.raises(ValueError, match="adds a residual"):
        conv(xp.asarray(x))
    with pytest.raises(ValueError, match="without residual=True"):
        conv_auto.AutoConv2d(xp.asarray(w), xp.asarray(b), L, activation=activation)(xp.asarray(x), residual=xp.asarray(res))
    with pytest.raises(TypeError, match="residual must be True or False"):
        conv_auto.AutoConv2d(xp.asarray(w), xp.asarray(b), L, residual="yes")


def test_auto_times_winograd_tiles_of_both_transforms_and_each_is_right():
    """auto's Winograd candidates carry their tiles (F(2x2) only: F(4x4) spreads a NaN beyond the windows
    that hold it), and every one of them, and conv_small's kernel, matches the reference on a 3x3
    'same' layer."""
    xp = labkit.xp
    L = ConvLayer.of(8, 6, 32, 32, 3, 1, 1)
    x, w, b = _data(11, (3, L.C, L.H, L.W), (L.M, L.C, 3, 3), (L.M,))
    ref = reference.relu(reference.conv2d(x, w, b, pad=1))
    conv = conv_auto.AutoConv2d(xp.asarray(w), xp.asarray(b), L, activation="relu")
    configs = [c for c in conv.candidates(3) if c["family"] == "winograd"]
    tiles = [c["tile"] for c in configs if c["kernel"] == "winograd"]
    assert len(tiles) >= 2 and {t["f"] for t in tiles} == {2}, tiles
    assert configs[-1] == {"family": "winograd", "kernel": "small"}
    for c in configs:
        out = xp.full(ref.shape, np.nan, dtype=xp.float32)
        _close(conv.make(c)(xp.asarray(x), out), ref, f"{L.key} {c}")


PHASED = [ConvLayer.of(8, 12, 12, 16, 3, 1, 2, 2), ConvLayer.of(5, 12, 12, 16, 3, 1, 0, 2),
          ConvLayer.of(8, 12, 10, 16, 3, 1, 0, 1), ConvLayer.of(8, 12, 12, 16, 3, 1, (1, 2), (1, 2)),
          ConvLayer.of(8, 10, 11, 16, 3, 1, 3, 3), ConvLayer.of(3, 11, 13, 16, 3, 1, 0, (3, 2)),
          ConvLayer.of(8, 7, 8, 16, 3, 1, 0, 3), ConvLayer.of(8, 9, 64, 32, 3, 1, 2, 2),
          ConvLayer.of(8, 9, 10, 12, 3, 1, 1, 1, 2), ConvLayer.of(12, 9, 10, 8, 3, 1, 0, 2, 4),
          ConvLayer.of(16, 11, 9, 16, 3, 1, (2, 1), (2, 1), 8)]


@pytest.mark.parametrize("L", PHASED, ids=lambda L: L.key)
def test_dilated_and_unpadded_3x3_layers_run_on_winograd_through_phases(L):
    """Phases of the input as a batch (dilation, also where it does not divide the side), a crop (no
    padding) and group slices give the reference's answer with every tile auto would time, into a
    poisoned out."""
    xp = labkit.xp
    x, w, b = _data(5, (2, L.C, L.H, L.W), (L.M, L.C // L.groups, 3, 3), (L.M,))
    ref = reference.relu(reference.conv2d(x, w, b, pad=L.pad_hw, dilation=L.dilation_hw, groups=L.groups))
    conv = conv_auto.AutoConv2d(xp.asarray(w), xp.asarray(b), L, activation="relu")
    configs = [c for c in conv.candidates(2) if c["family"] == "phased"]
    assert configs, L.key
    for c in configs:
        out = xp.full(ref.shape, np.nan, dtype=xp.float32)
        y = conv.make(c)(xp.asarray(x), out)
        assert y is out
        _close(y, ref, f"{L.key} {c}")


@pytest.mark.parametrize("kw", [dict(stride=2, pad=2, dilation=2), dict(pad=1, dilation=2), dict(pad=(2, 0), dilation=2),
                                dict(kernel=5, pad=2), dict(groups=16, pad=2, dilation=2), dict(pad=1)])
def test_phases_are_offered_only_where_they_make_winograd_s_geometry(kw):
    kw = {"kernel": 3, **kw}
    L = ConvLayer.of(16, 12, 12, 16, kw.pop("kernel"), kw.pop("stride", 1), kw.pop("pad", 0), kw.pop("dilation", 1),
                     kw.pop("groups", 1))
    assert conv_phased.phased_geometry(L) is None
    with pytest.raises(ValueError, match="whose phases are 'same' 3x3"):
        conv_phased.PhasedWinograd(labkit.xp.zeros((L.M, L.C // L.groups) + L.kernel_hw, np.float32), None, L)


def test_a_nan_reaches_through_the_phases_exactly_the_outputs_whose_windows_hold_it():
    xp = labkit.xp
    L = ConvLayer.of(4, 10, 12, 16, 3, 1, 2, 2)
    x, w, b = _data(9, (1, L.C, L.H, L.W), (L.M, L.C, 3, 3), (L.M,))
    x[0, 2, 5, 6] = np.nan
    ref = reference.relu(reference.conv2d(x, w, b, pad=2, dilation=2))
    conv = conv_auto.AutoConv2d(xp.asarray(w), xp.asarray(b), L, activation="relu")
    c = next(c for c in conv.candidates(1) if c["family"] == "phased")
    y = to_numpy(conv.make(c)(xp.asarray(x)))
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    assert np.isnan(ref).sum() == 9 * L.M


def test_phases_refuse_an_out_that_overlaps_x_before_launching():
    xp = labkit.xp
    L = ConvLayer.of(4, 8, 8, 4, 3, 1, 2, 2)
    x, w = _data(2, (1, 4, 8, 8), (4, 4, 3, 3))
    xd = xp.asarray(x)
    layer = conv_phased.PhasedWinograd(xp.asarray(w), None, L)
    with pytest.raises(ValueError, match="shares memory"):
        layer(xd, out=xd)


@pytest.mark.check
def test_auto_runs_the_depthwise_kernel_on_depthwise_shapes_and_the_implicit_gemm_on_dense_ones():
    xp = labkit.xp
    dw = conv_auto.AutoConv2d(xp.zeros((6, 1, 5, 3), xp.float32), None, ConvLayer.of(6, 9, 9, 6, (5, 3), groups=6))
    dense = conv_auto.AutoConv2d(xp.zeros((4, 2, 2, 7), xp.float32), None, ConvLayer.of(2, 9, 9, 4, (2, 7), pad=3))
    assert dw.choice(1)["family"] == "depthwise"
    assert dense.choice(1)["family"] == "implicit"
    assert [f.name for f in dense.families] == ["implicit", "winograd_gemm"]     # untuned: the first


@pytest.mark.check
@pytest.mark.parametrize("activation", ["relu", "relu6", None])
def test_nan_in_the_input_reaches_the_outputs_it_touches(activation):
    xp = labkit.xp
    x, w, b = _data(3, (1, 2, 9, 8), (3, 2, 3, 3), (3,))
    x[0, 1, 4, 5] = np.nan
    ref = _activate(reference.conv2d(x, w, b, pad=1), activation)
    y = to_numpy(labkit.conv2d(xp.asarray(x), xp.asarray(w), xp.asarray(b), pad=1, activation=activation))
    assert np.isnan(ref).sum() == 27
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    np.testing.assert_allclose(y[~np.isnan(y)], ref[~np.isnan(ref)], rtol=1e-5, atol=1e-5)


def test_a_batch_past_32_bit_offsets_runs_as_sub_batches(monkeypatch):
    """The kernels' offsets are int32: a batch whose x or y would reach 2^31 elements runs in
    sub-batches.  The limit is lowered here so that a small batch crosses it."""
    xp = labkit.xp
    monkeypatch.setattr(implicit, "INDEX_LIMIT", 4 * 6 * 10 * 9 + 1)       # 4 images of y per launch
    monkeypatch.setattr(conv_transpose, "INDEX_LIMIT", 2 * 3 * 20 * 18 + 1)   # 2 images of y per launch
    x, w, b = _data(5, (11, 3, 10, 9), (6, 3, 3, 3), (6,))
    conv = implicit.ImplicitConv2d(xp.asarray(w), xp.asarray(b), ConvLayer.of(3, 10, 9, 6, 3, pad=1))
    assert conv.max_batch == 4
    _close(conv(xp.asarray(x)), reference.conv2d(x, w, b, pad=1), "sub-batches of 4")
    wt = _data(6, (3, 3, 2, 2))[0]
    up = ConvTranspose2d(xp.asarray(wt), None, TransposeGeometry.of(3, 10, 9, 3, 2, 2))
    assert up.max_batch == 2
    _close(up(xp.asarray(x)), reference.conv_transpose2d(x, wt, stride=2), "transposed, sub-batches of 2")


def test_one_image_past_32_bit_offsets_is_refused_before_anything_runs(monkeypatch):
    monkeypatch.setattr(implicit, "INDEX_LIMIT", 100)
    xp = labkit.xp
    with pytest.raises(ValueError, match="one image of x or y .* over the kernels' 32-bit offsets"):
        implicit.ImplicitConv2d(xp.zeros((6, 3, 3, 3), xp.float32), None, ConvLayer.of(3, 10, 9, 6, 3, pad=1))


@pytest.mark.check
@pytest.mark.parametrize("kw", [dict(kernel=3, pad=1), dict(kernel=(3, 5), pad=(0, 2), dilation=(2, 1), groups=2),
                                dict(kernel=3, pad=(1, 0), groups=6), dict(kernel=(2, 3), pad=(1, 3)),
                                dict(kernel=3, pad=(3, 1), dilation=(1, 2)),
                                dict(kernel=(1, 3), pad=(0, 1), dilation=(1, 2), output_padding=(0, 1))])
def test_a_stride_1_transposed_convolution_runs_as_its_equivalent_convolution(kw):
    """Stride 1: the kernel turned, C_in and C_out swapped per group, padding D(K-1) - P on auto's
    convolution families; a padding past D(K-1), or an output padding (at stride 1 only where
    dilated: one more row at the end), keeps the phase path.  Both against the reference."""
    xp = labkit.xp
    kw = dict(kw)
    K = kw.pop("kernel")
    g = kw.get("groups", 1)
    geo = conv_transpose.TransposeGeometry.of(6, 9, 11, 6, K, **kw)
    x, w, b = _data(4, (2, 6, 9, 11), (6, 6 // g) + geo.kernel, (6,))
    ref = reference.relu(reference.conv_transpose2d(x, w, b, pad=geo.pad, dilation=geo.dilation, groups=g,
                                                    output_padding=geo.output_padding))
    up = ConvTranspose2d(xp.asarray(w), xp.asarray(b), geo, activation="relu")
    negative = any(p > d * (k - 1) for k, p, d in zip(geo.kernel, geo.pad, geo.dilation))
    assert (up.as_conv is None) == (negative or any(geo.output_padding))
    out = xp.full(ref.shape, np.nan, dtype=xp.float32)
    _close(up(xp.asarray(x), out), ref, geo.key)


def test_phases_of_a_stride_2_axis():
    # kernel 4, stride 2, padding 1 (the usual 2x upsampling): even outputs take taps 3 and 1, odd 2 and 0
    even, odd = axis_phases(5, 10, 4, 2, 1, 1)
    assert (even.r, even.count, even.taps, even.pad, even.dilation) == (0, 5, (3, 1), 1, 1)
    assert (odd.r, odd.count, odd.taps, odd.pad, odd.dilation) == (1, 5, (2, 0), 0, 1)
    # stride 2, dilation 2: the odd phase is reached by no tap (the bias alone)
    assert [p.taps for p in axis_phases(4, 9, 3, 2, 0, 2)] == [(2, 1, 0), ()]


@pytest.mark.check
@pytest.mark.parametrize("variant, kw, match", [
    ("tiled", dict(dilation=2), "variant 'tiled' takes square kernels"),
    ("naive", dict(stride=(1, 2)), "variant 'naive' takes square kernels"),
    ("unrolled", dict(pad=(1, 0)), "variant 'unrolled' takes square kernels"),
    ("tiled", dict(w_shape=(3, 2, 3, 5)), "variant 'tiled' takes square kernels only: w has 3x5 kernels"),
    ("tuned", dict(pad=1), "the seed's valid convolutions"),
    ("auto", dict(dilation=0), "dilation must be a positive int"),
    ("auto", dict(pad=(1, 2, 3)), r"pad must be an int or an \(h, w\) pair"),
    ("auto", dict(dilation=6), "does not fit"),
    ("best", {}, "variant must be one of 'auto'"),
])
def test_a_variant_that_cannot_run_a_shape_says_so_before_compiling(variant, kw, match):
    xp = labkit.xp
    x, w = xp.zeros((1, 2, 9, 9), xp.float32), xp.zeros(kw.pop("w_shape", (3, 2, 3, 3)), xp.float32)
    with pytest.raises(ValueError if variant != "auto" or "pair" not in match else TypeError, match=match):
        labkit.conv2d(x, w, variant=variant, **kw)


@pytest.mark.check
@pytest.mark.parametrize("kw, match", [
    (dict(output_padding=2, stride=2), "output_padding .* must be smaller than the stride or the dilation"),
    (dict(w_shape=(3, 2, 3, 3)), r"w must be \(C_in=2"),
    (dict(groups=4, w_shape=(2, 3, 3, 3)), "groups=4 must divide C_in=2"),
    (dict(pad=6), "the output would be"),
    (dict(variant="direct"), "variant must be one of 'auto', 'implicit'"),
    (dict(out_shape=(1, 3, 10, 10)), r"out must have shape \(1, 3, 11, 11\)"),
])
def test_conv_transpose2d_refuses_bad_input_before_launching(kw, match):
    xp = labkit.xp
    x = xp.zeros((1, 2, 9, 9), xp.float32)
    w = xp.zeros(kw.pop("w_shape", (2, 3, 3, 3)), xp.float32)
    out_shape = kw.pop("out_shape", None)
    out = None if out_shape is None else xp.zeros(out_shape, xp.float32)
    with pytest.raises((ValueError, TypeError), match=match):
        labkit.conv_transpose2d(x, w, out=out, **kw)


@pytest.mark.check
def test_conv_transpose2d_refuses_an_output_that_aliases_its_input():
    xp = labkit.xp
    x = xp.zeros((1, 3, 9, 9), xp.float32)
    with pytest.raises(ValueError, match="shares memory with input"):
        labkit.conv_transpose2d(x, xp.zeros((3, 3, 1, 1), xp.float32), out=x)


@pytest.mark.check
def test_the_unrolled_rung_says_how_large_its_column_matrix_would_be_before_allocating(monkeypatch):
    from labkit import backends
    monkeypatch.setattr(backends, "free_memory_bytes", lambda: 10**6)   # 1 MB free
    xp = labkit.xp
    x, w = xp.zeros((4, 8, 40, 40), xp.float32), xp.zeros((8, 8, 3, 3), xp.float32)
    with pytest.raises(ValueError, match=r"column matrix of N\*C\*K\*K\*Ho\*Wo = 460800 floats \(1\.8 MiB\), "
                                         r"over the 1\.0 MiB free: use variant='auto'"):
        labkit.conv2d(x, w, variant="unrolled", pad=1)


def test_the_tuned_rung_is_offered_only_where_its_images_fit_a_block():
    """conv_tuned.cu stages whole images in shared memory: auto offers it a valid convolution whose
    plane fits, and not one that would fail to compile (256 x 14 x 14 floats are 200 KB)."""
    small = ConvLayer.of(6, 22, 22, 16, 5)
    big = ConvLayer.of(256, 14, 14, 256, 3)
    names = lambda L: [f.name for f in conv_auto.families_for(L, None)]   # noqa: E731
    assert "tuned" in names(small) and "tuned" not in names(big)
    assert {"implicit", "winograd_gemm"} <= set(names(big))
