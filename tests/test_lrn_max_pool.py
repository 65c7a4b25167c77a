"""LRN then max-pool in one kernel (lrn.cu's lrn_max_pool, labkit.ops.lrn.lrn_max_pool): against the
float64 reference of the two in turn on fresh random inputs of odd sizes, bit for bit equal to the two
kernels apart, NaN where PyTorch puts it, every output written, no read outside x; the refusals; and
AlexNet's plan with the fused step."""
from __future__ import annotations

import numpy as np
import pytest

import labkit
from labkit import layers, reference
from labkit.checks import rel_error, to_numpy
from labkit.measure import roofline as rf
from labkit.ops import lrn as lrn_ops

rng = np.random.default_rng()


def _ref(x, k, s, r, alpha, beta=0.75, bias=1.0):
    return reference.max_pool2d(reference.lrn(x.astype(np.float64), r, bias, alpha, beta), k, s)


@pytest.mark.check
@pytest.mark.parametrize("shape, k, s, r", [((2, 13, 15, 17), 3, 2, 2), ((1, 9, 27, 27), 3, 2, 2),
                                            ((3, 7, 9, 8), 2, 2, 1), ((2, 11, 6, 130), 3, 1, 3),
                                            ((1, 3, 5, 5), 5, 1, 0), ((1, 20, 57, 41), 3, 2, 2)])
def test_matches_the_reference_of_lrn_then_max_pool(shape, k, s, r):
    x = (rng.standard_normal(shape) * 30).astype(np.float32)
    N, C, H, W = shape
    out = labkit.xp.full((N, C, (H - k) // s + 1, (W - k) // s + 1), np.nan, np.float32)
    xd = labkit.xp.asarray(x)
    y = layers.lrn_max_pool(xd, k, s, depth_radius=r, alpha=2e-4, out=out)
    assert y is out and rel_error(y, _ref(x, k, s, r, 2e-4)) < 1e-5
    apart = layers.max_pool2d(layers.lrn(xd, r, 1.0, 2e-4, 0.75), k, s)
    np.testing.assert_array_equal(to_numpy(y), to_numpy(apart))      # the same sums in the same order


@pytest.mark.parametrize("beta", [0.5, 0.7499])
def test_other_betas_take_powf(beta):
    x = (rng.standard_normal((2, 6, 11, 9)) * 30).astype(np.float32)
    y = layers.lrn_max_pool(labkit.xp.asarray(x), 3, 2, 2, 2.0, 1e-3, beta)
    assert rel_error(y, _ref(x, 3, 2, 2, 1e-3, beta, 2.0)) < 1e-5


def test_a_nan_reaches_the_pooled_outputs_whose_windows_it_normalizes():
    x = rng.standard_normal((1, 9, 11, 12)).astype(np.float32)
    x[0, 4, 5, 6] = np.nan
    y = to_numpy(layers.lrn_max_pool(labkit.xp.asarray(x), 3, 2, 2, 1.0, 1e-3, 0.75))
    ref = _ref(x, 3, 2, 2, 1e-3)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    assert np.isnan(ref).sum() == 5 * 2     # 5 channels x the windows holding (5, 6): rows 4-6, columns 4-6 and 6-8


@pytest.mark.parametrize("chunk", [1, 3, 8])
@pytest.mark.parametrize("shape, k, s, r, band", [((2, 7, 11, 9), 3, 2, 2, 1), ((1, 10, 13, 7), 3, 2, 1, 2),
                                                  ((2, 5, 9, 10), 2, 1, 2, 3), ((1, 4, 7, 7), 3, 2, 3, 3)])
def test_the_kernel_at_every_chunk_and_band(shape, k, s, r, band, chunk):
    """Chunks and bands the op may not pick: windows across a chunk's edges, C not a multiple of the
    chunk, a last band cut short; every output written (NaN-poisoned), no access outside x and y."""
    from labkit.loader import load
    N, C, H, W = shape
    PH, PW = (H - k) // s + 1, (W - k) // s + 1
    rows = (band - 1) * s + k
    x = rng.standard_normal(shape).astype(np.float32) * 3
    y = labkit.xp.full((N, C, PH, PW), np.nan, dtype=labkit.xp.float32)
    fn = load("lrn", defines=lrn_ops.fused_defines(r, k, s, chunk, C, H, W, band),
              check="memory").get_function("lrn_max_pool")
    fn((-(-C // chunk), -(-PH // band), N), (-(-rows * W // 32) * 32,),
       (labkit.xp.asarray(x), y, np.float32(1.0), np.float32(1e-2), np.float32(0.75)),
       shared_mem=lrn_ops.fused_shared_bytes(chunk, band, W, k, s))
    assert rel_error(y, _ref(x, k, s, r, 1e-2)) < 1e-5


def test_the_band_fills_a_block_and_refuses_wide_planes():
    assert lrn_ops.fused_band(55, 55, 3, 2) == 4          # 9 input rows of 55: 495 threads
    assert lrn_ops.fused_band(27, 27, 3, 2) == 7          # 13 pooled rows in two bands of 7 + 6, not 8 + 5
    assert lrn_ops.fused_band(27, 27, 3, 1) == 13         # 15 input rows of 27 fit 512 threads
    assert lrn_ops.fused_band(5, 5, 3, 2) == 2            # no more than the pooled rows there are
    assert lrn_ops.fused_band(300, 171, 3, 2) == 0        # 3 rows of 171 > 512 threads
    x = labkit.xp.zeros((1, 2, 8, 171), dtype=labkit.xp.float32)
    with pytest.raises(ValueError, match="use lrn, then max_pool2d"):
        layers.lrn_max_pool(x, 3, 2)


def test_bad_input_is_refused_before_a_launch():
    x = labkit.xp.zeros((1, 2, 8, 8), dtype=labkit.xp.float32)
    with pytest.raises(ValueError, match="does not fit"):
        layers.lrn_max_pool(labkit.xp.zeros((1, 2, 2, 8), dtype=labkit.xp.float32), 3, 2)
    with pytest.raises(ValueError, match="bias must be > 0"):
        layers.lrn_max_pool(x, 3, 2, bias=0.0)
    with pytest.raises((ValueError, TypeError), match="k"):
        layers.lrn_max_pool(x, 0, 2)
    with pytest.raises((ValueError, TypeError), match="float32"):
        layers.lrn_max_pool(labkit.xp.zeros((1, 2, 8, 8), dtype=labkit.xp.float64), 3, 2)
    with pytest.raises(ValueError, match="alias|overlap|share"):
        layers.lrn_max_pool(x, 3, 1, out=x.reshape(-1)[:72].reshape(1, 2, 6, 6))   # contiguous, inside x
    with pytest.raises(ValueError, match=r"\(1, 2, 3, 3\)"):
        layers.lrn_max_pool(x, 3, 2, out=labkit.xp.zeros((1, 2, 4, 4), dtype=labkit.xp.float32))
    norm = layers.LRNMaxPool(3, 2, depth_radius=2, alpha=2e-5)
    assert norm(x).shape == (1, 2, 3, 3)


def test_the_fused_cost_reads_x_and_writes_the_pooled_output():
    c = rf.lrn_max_pool_cost(4, 96, 55, 55, 2, 3, 2)
    assert c.bytes == 4 * (4 * 96 * 55 * 55 + 4 * 96 * 27 * 27) and c.out_shape == (4, 96, 27, 27)
    assert c.flops == rf.lrn_cost(4, 96, 55, 55, 2).flops + rf.pool2d_cost(4, 96, 55, 55, 3, 2).flops


def test_the_chunk_is_the_largest_that_keeps_every_sm_busy():
    assert lrn_ops.fused_chunk(1024, 96, 7, 132) == 16
    assert lrn_ops.fused_chunk(64, 256, 2, 132) == 16      # 64 * 16 * 2 = 2,048 blocks
    assert lrn_ops.fused_chunk(8, 96, 7, 132) == 8         # at 16: 8 * 6 * 7 = 336 blocks < 4 * 132
    assert lrn_ops.fused_chunk(1, 96, 7, 132) == 4         # too few blocks even at 8
