"""The element-wise, pooling, padding and concatenation ops (labkit.ops.pointwise, labkit.ops.pool_pad)
on their own: NaN carried through, PyTorch's ceil_mode rule, odd shapes, and clear errors."""
from __future__ import annotations

import numpy as np
import pytest

import labkit
from labkit.checks import to_numpy
from labkit.ops.pointwise import ACTIVATIONS, Binary, ChannelAffine, Unary, broadcast_shape
from labkit.ops.pool_pad import ConcatCopy, Pad4, Pool2d, pool_out_size

rng = np.random.default_rng(12)


def dev(a):
    return labkit.xp.asarray(np.ascontiguousarray(a, dtype=np.float32))


@pytest.mark.parametrize("act", [a for a in ACTIVATIONS if a is not None])
def test_nan_stays_nan_through_every_activation(act):
    x = rng.standard_normal((3, 37)).astype(np.float32)
    x[1, 5] = np.nan
    y = to_numpy(Unary(act, -1.0 if act == "clip" else 0.2, 1.0 if act == "clip" else 0.5)(dev(x)))
    assert np.isnan(y[1, 5]) and np.isfinite(np.delete(y.ravel(), 37 + 5)).all()


def test_nan_wins_a_max_pool_window_and_odd_shapes_pool_right():
    x = rng.standard_normal((1, 2, 5, 7)).astype(np.float32)
    x[0, 1, 2, 3] = np.nan
    y = to_numpy(Pool2d("max", (3, 3), (2, 2), (1, 1, 1, 1))(dev(x)))
    assert y.shape == (1, 2, 3, 4)
    assert np.isnan(y[0, 1, 1, 1]) and np.isnan(y[0, 1, 1, 2]) and np.isfinite(y[0, 0]).all()


@pytest.mark.parametrize("n,k,s,p0,p1,ceil,want", [
    (7, 3, 2, 1, 1, False, 4), (7, 3, 2, 1, 1, True, 4), (6, 3, 2, 0, 0, True, 3), (6, 3, 2, 0, 0, False, 2),
    (5, 2, 2, 1, 1, True, 3),     # ceil would add a window that starts in the trailing padding: dropped
    (13, 3, 2, 0, 0, True, 6),
])
def test_pool_out_size_follows_pytorch(n, k, s, p0, p1, ceil, want):
    assert pool_out_size(n, k, s, 1, p0, p1, ceil) == want


def test_channel_affine_and_broadcasting():
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    s, t = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    y = to_numpy(ChannelAffine(dev(s), dev(t), "relu")(dev(x)))
    assert np.allclose(y, np.maximum(x * s[:, None, None] + t[:, None, None], 0), atol=1e-6)
    q = rng.standard_normal((4, 1)).astype(np.float32)
    assert np.allclose(to_numpy(Binary("mul")(dev(x), dev(q))), x * q, atol=1e-6)
    assert broadcast_shape((2, 1, 5), (3, 1)) == (2, 3, 5)
    with pytest.raises(ValueError, match=r"do not broadcast \(dimension 4 against 3\)"):
        Binary("add")(dev(x), dev(np.zeros((3, 5))))
    with pytest.raises(ValueError, match="op must be one of 'add', 'mul', 'sub', 'div'"):
        Binary("pow")


def test_pad_and_concat_copy():
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    y = to_numpy(Pad4((0, 1, 2, 0), (0, 0, 1, 3), value=-2.0)(dev(x)))
    assert np.array_equal(y, np.pad(x, ((0, 0), (1, 0), (2, 1), (0, 3)), constant_values=-2.0))
    out = dev(np.full((2, 7, 4, 5), np.nan))
    copy = ConcatCopy(1)
    copy(dev(x), out, 0)
    copy(dev(x[:, :2].copy()), out, 3)
    copy(dev(x[:, :2].copy()), out, 5)
    assert np.array_equal(to_numpy(out), np.concatenate([x, x[:, :2], x[:, :2]], axis=1))
    with pytest.raises(ValueError, match="cannot copy"):
        copy(dev(x), out, 5)
    # negative pads crop: a poisoned output, every element written
    crop = Pad4((0, -1, 1, -2), (0, 0, -2, 1))
    out = dev(np.full((2, 2, 3, 4), np.nan, dtype=np.float32))
    got = to_numpy(crop(dev(x), out))
    assert np.array_equal(got, np.pad(x, ((0, 0), (0, 0), (1, 0), (0, 1)))[:, 1:, :-2, 2:])
    with pytest.raises(ValueError, match="to nothing"):
        Pad4((0, -3), (0, 0))(dev(x[:, :, 0, 0].copy()))
    with pytest.raises(ValueError, match="one per dim"):
        Pad4((0, 1), (0,))


def test_bad_pool_arguments_are_refused():
    with pytest.raises(ValueError, match="mode must be"):
        Pool2d("min", (2, 2))
    with pytest.raises(ValueError, match="pairs of ints >= 1"):
        Pool2d("max", (0, 2))
    with pytest.raises(ValueError, match="does not fit"):
        Pool2d("avg", (5, 5))(dev(np.zeros((1, 1, 3, 3))))


def test_clip_with_crossed_bounds_gives_the_upper_one_as_onnx_defines():
    x = np.linspace(-3, 3, 13, dtype=np.float32)
    assert np.array_equal(to_numpy(Unary("clip", 1.0, -1.0)(dev(x))), np.minimum(np.maximum(x, 1.0), -1.0))
