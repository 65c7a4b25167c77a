"""labkit.layers: max-pooling, softmax and the fused conv + tanh + max-pool, against the reference."""
from __future__ import annotations

import numpy as np
import pytest

import labkit
from labkit import layers, reference
from labkit.checks import rel_error, to_numpy

from helpers import make_layer

rng = np.random.default_rng()


def dev(a):
    return labkit.xp.asarray(a)


def poisoned(shape):
    return labkit.xp.full(shape, np.nan, dtype=labkit.xp.float32)


@pytest.mark.parametrize("shape, k, s", [((2, 3, 13, 11), 2, 2), ((1, 4, 9, 9), 3, 2), ((3, 2, 7, 10), 2, 1),
                                         ((2, 1, 44, 44), 2, 2)])
def test_max_pool_matches_reference(shape, k, s):
    x = rng.standard_normal(shape).astype(np.float32)
    ref = reference.max_pool2d(x, k, s)
    y = layers.max_pool2d(dev(x), k, s, out=poisoned(ref.shape))
    assert np.array_equal(to_numpy(y), ref.astype(np.float32))      # a max is exact


def test_max_pool_decodes_64_bit_indices_too():
    """Outputs past 2^32 elements decode their index in 64 bits: forced here on a small tensor."""
    x = rng.standard_normal((3, 5, 11, 13)).astype(np.float32)
    ref = reference.max_pool2d(x, 3, 2).astype(np.float32)
    y = poisoned(ref.shape)
    for fixed in ({}, {"MP_H": 11, "MP_W": 13, "MP_K": 3, "MP_S": 2}):   # run-time sizes, compile-time ones
        y = poisoned(ref.shape)
        fn = labkit.load("pool_softmax", defines={"POOL_INDEX32_BELOW": 0, **fixed}).get_function("max_pool2d")
        fn((-(-y.size // 256),), (256,), (dev(x), y) + tuple(np.int32(v) for v in (15, 11, 13, 5, 6, 3, 2)))
        assert np.array_equal(to_numpy(y), ref)


@pytest.mark.check
@pytest.mark.parametrize("k, s", [(2, 2), (3, 2), (3, 1)])
def test_max_pool_keeps_a_nan_as_the_reference_does(k, s):
    """A NaN anywhere in a window (first, last or between) makes that output NaN, as in the reference
    and PyTorch: fmaxf would return the window's largest number instead."""
    x = rng.standard_normal((2, 3, 11, 9)).astype(np.float32)
    flat = x.reshape(-1)
    flat[rng.choice(flat.size, 12, replace=False)] = np.nan
    x[0, 0, 0, 0] = x[1, 2, -1, -1] = np.nan                           # a window's first and last element
    ref = reference.max_pool2d(x, k, s).astype(np.float32)
    assert np.isnan(ref).any() and not np.isnan(ref).all()
    y = to_numpy(layers.max_pool2d(dev(x), k, s, out=labkit.xp.full(ref.shape, 7e30, dtype=labkit.xp.float32)))
    assert np.array_equal(y, ref, equal_nan=True)


@pytest.mark.check
@pytest.mark.parametrize("shape", [(1, 10), (37, 10), (5, 33), (9, 100), (3, 1), (67, 3), (11, 1000),
                                   (3, 1024), (2, 1025), (3, 2500)])
def test_softmax_matches_reference(shape):
    """Rows held in registers by groups of 1 to 32 lanes (up to MAX_HELD_ROW values), longer ones a warp
    per row; row counts that leave a block's last groups without a row."""
    x = (rng.standard_normal(shape) * 8).astype(np.float32)
    x[0, 0] = 80.0                                                    # exp(80) overflows float32
    ref = reference.softmax(x)
    y = to_numpy(layers.softmax(dev(x), out=poisoned(shape)))
    assert rel_error(y, ref) < 1e-5
    assert np.allclose(y.sum(axis=1), 1.0, atol=1e-5)


def test_softmax_held_in_registers_equals_the_warp_loop_bit_for_bit():
    """With a warp per row, softmax_rows_held adds the same terms in the same order as softmax_rows."""
    from labkit.ops.pool_softmax import lane_group
    x = (rng.standard_normal((13, 1000)) * 8).astype(np.float32)
    assert lane_group(1000) == 32
    y = to_numpy(layers.softmax(dev(x)))
    loop = poisoned(x.shape)
    labkit.load("pool_softmax").get_function("softmax_rows")((2,), (256,), (dev(x), loop, np.int32(13), np.int32(1000)))
    assert np.array_equal(y, to_numpy(loop))


def test_lane_groups():
    from labkit.ops.pool_softmax import lane_group
    assert [lane_group(n) for n in (1, 4, 5, 10, 33, 49, 100, 128, 129, 1000, 5000)] == \
        [1, 1, 2, 4, 16, 16, 32, 32, 32, 32, 32]


@pytest.mark.check
@pytest.mark.parametrize("shape", [(3, 1, 48, 48, 6, 5), (2, 3, 13, 12, 4, 3), (2, 2, 10, 9, 5, 1)],
                         ids=lambda s: "N{}C{}H{}W{}M{}K{}".format(*s))
@pytest.mark.parametrize("threads, imgs", [(128, 1), (64, 2)])
def test_conv_pool_tanh_matches_reference(shape, threads, imgs):
    x, w, b = make_layer(*shape)
    ref = reference.max_pool2d(np.tanh(reference.conv2d(x, w, b)), 2, 2)
    y = layers.conv_pool_tanh(dev(x), dev(w), dev(b), out=poisoned(ref.shape), threads=threads, imgs=imgs)
    assert rel_error(y, ref) < 1e-5


def test_conv_pool_tanh_keeps_a_nan_as_the_reference_does():
    """A NaN in the input reaches every pooled output whose windows touch it (fmaxf would have
    pooled it away where another value of the 2x2 window is a number)."""
    x, w, b = make_layer(2, 1, 16, 14, 3, 5)
    x[0, 0, 5, 6] = x[1, 0, 15, 13] = np.nan
    ref = reference.max_pool2d(np.tanh(reference.conv2d(x, w, b)), 2, 2)
    assert np.isnan(ref).any() and not np.isnan(ref).all()
    y = to_numpy(layers.conv_pool_tanh(dev(x), dev(w), dev(b), out=poisoned(ref.shape)))
    assert np.array_equal(np.isnan(y), np.isnan(ref))
    assert np.allclose(y[~np.isnan(y)], ref[~np.isnan(ref)], rtol=1e-5, atol=1e-6)


@pytest.mark.check
def test_fused_equals_unfused_pipeline():
    from labkit.ops.conv import conv2d
    x, w, b = make_layer(3, 1, 48, 48, 6, 5)
    fused = to_numpy(layers.conv_pool_tanh(dev(x), dev(w), dev(b)))
    unfused = to_numpy(layers.max_pool2d(conv2d(dev(x), dev(w), dev(b), variant="tuned", activation="tanh")))
    assert rel_error(fused, unfused.astype(np.float64)) < 1e-6


@pytest.mark.parametrize("check", ["barrier", "shuffle", "memory", "race"])
def test_checking_modes(check):
    if labkit.backend() != "cpu":
        pytest.skip("the checking modes belong to the CPU executor (compute-sanitizer on a GPU)")
    x = rng.standard_normal((3, 2, 9, 9)).astype(np.float32)
    mod = labkit.load("pool_softmax", check=check)
    y = np.full((3, 2, 4, 4), np.nan, np.float32)
    mod.get_function("max_pool2d")((1,), (256,), (x, y) + tuple(np.int32(v) for v in (6, 9, 9, 4, 4, 2, 2)))
    assert np.array_equal(y, reference.max_pool2d(x, 2, 2).astype(np.float32))
    logits = rng.standard_normal((20, 10)).astype(np.float32)
    s = np.full((20, 10), np.nan, np.float32)
    mod.get_function("softmax_rows")((3,), (256,), (logits, s, np.int32(20), np.int32(10)))
    assert rel_error(s, reference.softmax(logits)) < 1e-5
    s[:] = np.nan        # groups of 4 lanes, 3 values each; the block's last 44 groups have no row
    labkit.load("pool_softmax", defines={"SM_G": 4, "SM_VPL": 3}, check=check).get_function("softmax_rows_held")(
        (1,), (256,), (logits, s, np.int32(20), np.int32(10)))
    assert rel_error(s, reference.softmax(logits)) < 1e-5
    planes, means = x.reshape(6, 81), np.full(6, np.nan, np.float32)
    mod.get_function("global_avg_pool")((1,), (256,), (x, means, np.int32(6), np.int32(81)))
    assert rel_error(means, planes.astype(np.float64).mean(axis=1)) < 1e-6
    small = rng.standard_normal((70, 9)).astype(np.float32)      # 70 planes of 9, fixed at compile time
    means = np.full(70, np.nan, np.float32)
    labkit.load("pool_softmax", defines={"AVG_G": 4, "AVG_HW": 9}, check=check).get_function(
        "global_avg_pool")((2,), (256,), (small, means, np.int32(70), np.int32(9)))
    assert rel_error(means, small.astype(np.float64).mean(axis=1)) < 1e-6


@pytest.mark.check
@pytest.mark.parametrize("call, match", [
    (lambda: layers.max_pool2d(dev(np.zeros((1, 1, 4, 4), np.float64))), "float32"),
    (lambda: layers.max_pool2d(dev(np.zeros((1, 4, 4), np.float32))), "4-D"),
    (lambda: layers.max_pool2d(dev(np.zeros((1, 1, 4, 4), np.float32)), k=5), "does not fit"),
    (lambda: layers.softmax(dev(np.zeros((2, 3, 4), np.float32))), "2-D"),
    (lambda: layers.softmax(dev(np.zeros((2, 3), np.float32)), out=dev(np.zeros((2, 3), np.float64))),
     r"out must be float32 \(N, D\), got float64"),
    (lambda: layers.max_pool2d(dev(np.zeros((1, 1, 4, 4), np.float32)), out=dev(np.zeros((1, 1, 3, 3), np.float32))),
     r"out must have shape \(1, 1, 2, 2\)"),
    (lambda: layers.conv_pool_tanh(dev(np.zeros((1, 2, 8, 8), np.float32)),
                                   dev(np.zeros((3, 1, 3, 3), np.float32)), dev(np.zeros(3, np.float32))), "w must be"),
    (lambda: layers.conv_pool_tanh(dev(np.zeros((1, 8, 60, 60), np.float32)),
                                   dev(np.zeros((3, 8, 3, 3), np.float32)), dev(np.zeros(3, np.float32))), "48 KiB"),
    (lambda: layers.conv_pool_tanh(dev(np.zeros((1, 1, 5, 5), np.float32)),
                                   dev(np.zeros((2, 1, 5, 5), np.float32)), dev(np.zeros(2, np.float32))), "nothing to pool"),
])
def test_bad_input_is_refused(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()
