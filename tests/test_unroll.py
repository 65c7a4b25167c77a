"""labkit.ops.unroll: im2col, col2im and the convolution as im2col + GEMM, against the references."""
from __future__ import annotations

import numpy as np
import pytest

import labkit
from labkit import reference
from labkit.checks import rel_error, to_numpy
from labkit.ops import unroll
from labkit.ops.gemm import gemm


rng = np.random.default_rng()
GEOMETRY = [((2, 3, 11, 13), 3, 1, 1), ((1, 2, 23, 23), 11, 4, 0), ((2, 4, 9, 8), 5, 2, 2),
            ((1, 1, 7, 7), 1, 1, 0), ((3, 2, 6, 5), 3, 3, 2)]


def dev(a):
    return labkit.xp.asarray(a)


@pytest.mark.check
@pytest.mark.parametrize("shape, K, stride, pad", GEOMETRY)
def test_im2col_matches_reference(shape, K, stride, pad):
    x = rng.standard_normal(shape).astype(np.float32)
    ref = reference.im2col(x, K, stride=stride, pad=pad)
    out = labkit.xp.full(ref.shape, np.nan, dtype=labkit.xp.float32)
    cols = to_numpy(unroll.im2col(dev(x), K, stride=stride, pad=pad, out=out))
    assert np.array_equal(cols, ref)                                   # a copy: exact


@pytest.mark.parametrize("shape, K, stride, pad", GEOMETRY)
def test_col2im_is_the_adjoint_of_im2col(shape, K, stride, pad):
    # <im2col(x), c> == <x, col2im(c)> for every x and c: the defining property of the adjoint.
    x = rng.standard_normal(shape).astype(np.float32)
    c = rng.standard_normal(reference.im2col(x, K, stride=stride, pad=pad).shape).astype(np.float32)
    lhs = float(np.vdot(reference.im2col(x, K, stride=stride, pad=pad).astype(np.float64), c))
    dx = to_numpy(unroll.col2im(dev(c), shape, K, stride=stride, pad=pad))
    rhs = float(np.vdot(x.astype(np.float64), dx))
    assert abs(lhs - rhs) <= 1e-5 * (abs(lhs) + np.linalg.norm(c))


CONVS = [  # N, C, H, W, M, K, stride, pad, groups
    (2, 3, 21, 19, 5, 3, 1, 1, 1), (1, 3, 35, 35, 8, 11, 4, 0, 1), (2, 8, 13, 13, 6, 5, 1, 2, 2),
    (1, 4, 9, 11, 4, 3, 2, 1, 4), (3, 2, 10, 7, 3, 1, 1, 0, 1)]


@pytest.mark.parametrize("N, C, H, W, M, K, stride, pad, groups", CONVS)
@pytest.mark.parametrize("activation", [None, "relu"], ids=str)
def test_unrolled_convolution_matches_reference(N, C, H, W, M, K, stride, pad, groups, activation):
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = (rng.standard_normal((M, C // groups, K, K)) / np.sqrt(C // groups * K * K)).astype(np.float32)
    b = rng.standard_normal(M).astype(np.float32)
    ref = reference.conv2d(x, w, b, stride=stride, pad=pad, groups=groups)
    if activation == "relu":
        ref = np.maximum(ref, 0.0)
    out = labkit.xp.full(ref.shape, np.nan, dtype=labkit.xp.float32)
    y = unroll.conv2d_unrolled(dev(x), dev(w), dev(b), stride=stride, pad=pad, groups=groups,
                               activation=activation, out=out)
    assert y is out and rel_error(y, ref) < 1e-5


@pytest.mark.check
def test_gemm_bias_per_row():
    a = rng.standard_normal((37, 29)).astype(np.float32)
    bm = rng.standard_normal((29, 70)).astype(np.float32)
    bias = rng.standard_normal(37).astype(np.float32)
    for variant in ("naive", "tiled", "regtile", "vec", "dbuf"):
        y = gemm(dev(a), dev(bm), dev(bias), variant=variant, bias_per="row", activation="tanh")
        assert rel_error(y, np.tanh(a.astype(np.float64) @ bm + bias[:, None])) < 1e-5
    with pytest.raises(ValueError, match=r"bias must have shape \(37,\), one value per row of a"):
        gemm(dev(a), dev(bm), dev(rng.standard_normal(70).astype(np.float32)), bias_per="row")
    with pytest.raises(ValueError, match="bias_per must be"):
        gemm(dev(a), dev(bm), dev(bias), bias_per="channel")


def col2im_reference(cols, shape, K, stride, pad):
    """NumPy scatter-add: every column element onto its (padded) input position, in float64."""
    N, C, H, W = shape
    Ho, Wo = (H + 2 * pad - K) // stride + 1, (W + 2 * pad - K) // stride + 1
    c6 = cols.astype(np.float64).reshape(N, C, K, K, Ho, Wo)
    dx = np.zeros((N, C, H + 2 * pad, W + 2 * pad))
    for p in range(K):
        for q in range(K):
            dx[:, :, p:p + stride * Ho:stride, q:q + stride * Wo:stride] += c6[:, :, p, q]
    return dx[:, :, pad:pad + H, pad:pad + W]


@pytest.mark.parametrize("shape, K, stride, pad", GEOMETRY)
def test_col2im_matches_scatter_add(shape, K, stride, pad):
    x = np.zeros(shape, np.float32)
    c = rng.standard_normal(reference.im2col(x, K, stride=stride, pad=pad).shape).astype(np.float32)
    dx = unroll.col2im(dev(c), shape, K, stride=stride, pad=pad)
    assert rel_error(dx, col2im_reference(c, shape, K, stride, pad)) < 1e-6


@pytest.mark.parametrize("check", ["memory", "shuffle", "race"])
def test_checking_modes(check):
    if labkit.backend() != "cpu":
        pytest.skip("the checking modes belong to the CPU executor (compute-sanitizer on a GPU)")
    x = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
    mod = labkit.load("im2col", check=check)
    cols = np.full((2, 27, 7 * 6), np.nan, np.float32)      # K 3, stride 1, pad 1: Ho 7, Wo 6
    args = tuple(np.int32(v) for v in (2, 3, 7, 6, 3, 1, 1, 7, 6))
    mod.get_function("im2col")((-(-cols.size // 256),), (256,), (x, cols) + args)
    assert np.array_equal(cols, reference.im2col(x, 3, stride=1, pad=1))
    dx = np.zeros_like(x)
    mod.get_function("col2im")((-(-cols.size // 256),), (256,), (cols, dx) + args)
    assert rel_error(dx, col2im_reference(cols, x.shape, 3, 1, 1)) < 1e-6


@pytest.mark.check
@pytest.mark.parametrize("call, match", [
    (lambda: unroll.im2col(dev(np.zeros((1, 1, 5, 5), np.float32)), 7), "does not fit"),
    (lambda: unroll.im2col(dev(np.zeros((1, 1, 5, 5), np.float32)), 3, pad=3), "smaller than K"),
    (lambda: unroll.im2col(dev(np.zeros((1, 1, 5, 5), np.float32)), 3, stride=0), "stride must be"),
    (lambda: unroll.conv2d_unrolled(dev(np.zeros((1, 4, 5, 5), np.float32)),
                                    dev(np.zeros((4, 4, 3, 3), np.float32)), groups=2), r"C/groups=2"),
    (lambda: unroll.conv2d_unrolled(dev(np.zeros((1, 4, 5, 5), np.float32)),
                                    dev(np.zeros((3, 2, 3, 3), np.float32)), groups=2), "groups=2 must be"),
    (lambda: unroll.col2im(dev(np.zeros((1, 9, 4), np.float32)), (1, 1, 5, 5), 3), "cols must have shape"),
])
def test_bad_input_is_refused(call, match):
    with pytest.raises(ValueError, match=match):
        call()
