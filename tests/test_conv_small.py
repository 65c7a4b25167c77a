"""conv_small.cu, the direct 3x3 kernels for few channels: forward (bias, skip, ReLU fused), backward
data (the ReLU's backward and a skip's gradient fused) and backward weight, against the float64
references on odd shapes with poisoned outputs; tiles with ragged edges; what they refuse."""
from __future__ import annotations

import numpy as np
import pytest

from labkit import reference
from labkit.checks import rel_error
from labkit.ladder import resnet_kernels
from labkit.models.resnet_small import to_ckkm
from labkit.ops.conv_small import SmallConv3x3, SmallWeightGrad, Tile, WeightTile, default_tile, row_pitch
from labkit.reference import backward as rb
from labkit.shapes import ConvLayer
from helpers import f32, poisoned

rng = np.random.default_rng()


def arrays(N, L):
    x = rng.standard_normal((N, L.C, L.H, L.W))
    w = rng.standard_normal((L.M, L.C, 3, 3))
    dy = rng.standard_normal((N, L.M, L.H, L.W))
    return x, w, dy


@pytest.mark.parametrize("N,C,M,H,W,tile", [(3, 5, 4, 13, 11, None), (2, 6, 8, 9, 7, Tile(4, 4, 4, 2, 3))])
def test_forward_with_bias_skip_and_relu_matches_float64(N, C, M, H, W, tile):
    L = ConvLayer(C, H, W, M, 3, 1, 1)
    x, w, _ = arrays(N, L)
    b, res = rng.standard_normal(M), rng.standard_normal((N, M, H, W))
    conv = SmallConv3x3(f32(to_ckkm(w)), f32(b), L, activation="relu", residual=True, tile=tile)
    y = conv(f32(x), poisoned(N, M, H, W), residual=f32(res))
    assert rel_error(y, np.maximum(reference.conv2d(x, w, b, pad=1) + res, 0)) < 1e-5


@pytest.mark.parametrize("N,C,M,H,W,tile", [(3, 7, 4, 9, 11, None), (2, 4, 6, 9, 7, Tile(4, 4, 4, 2, 2))])
def test_backward_data_with_gate_and_skip_matches_float64(N, C, M, H, W, tile):
    L = ConvLayer(C, H, W, M, 3, 1, 1)
    x, w, dy = arrays(N, L)
    gate, skip = rng.standard_normal((N, C, H, W)), rng.standard_normal((N, C, H, W))
    dx_ref = rb.conv2d_backward(x, w, dy, pad=1)[0]
    wt = f32(to_ckkm(w))
    bwd = SmallConv3x3(wt, None, L, transpose=True, gate=True, residual=True, tile=tile)
    got = bwd(f32(dy), poisoned(N, C, H, W), gate=f32(gate), residual=f32(skip))
    assert rel_error(got, np.where(gate > 0, dx_ref + skip, 0)) < 1e-5
    plain = SmallConv3x3(wt, None, L, transpose=True)
    assert rel_error(plain(f32(dy), poisoned(N, C, H, W)), dx_ref) < 1e-5


# odd planes (4-byte copies), rows of an even number of floats (8-byte copies of x) and of a multiple
# of 4 (16-byte copies of dy), several chunks of input and output channels (db from the first input
# chunk's blocks), a thread count that is no multiple of mb (some threads add up no dy), a last unit
# past the plane's rows
@pytest.mark.parametrize("N,C,M,H,W,tile", [(3, 5, 4, 13, 11, None), (2, 4, 8, 9, 7, WeightTile(2, 4, 2, 4, 3)),
                                            (5, 1, 4, 6, 5, None), (3, 8, 8, 10, 12, WeightTile(4, 8, 4, 3, 2)),
                                            (2, 6, 6, 9, 10, WeightTile(3, 6, 2, 4, 3))])
def test_backward_weight_and_bias_match_float64_in_both_layouts(N, C, M, H, W, tile):
    L = ConvLayer(C, H, W, M, 3, 1, 1)
    x, w, dy = arrays(N, L)
    _, dw_ref, db_ref = rb.conv2d_backward(x, w, dy, pad=1)
    db = poisoned(M)
    got = SmallWeightGrad(L, tile=tile)(f32(x), f32(dy), poisoned(C * 9, M), bias=db)
    assert rel_error(got, to_ckkm(dw_ref)) < 1e-5 and rel_error(db, db_ref) < 1e-5
    got = SmallWeightGrad(L, layout="MCKK", tile=tile)(f32(x), f32(dy), poisoned(M, C, 3, 3))
    assert rel_error(got, dw_ref) < 1e-5


@pytest.mark.parametrize("slices", [1, 3, 9])
def test_backward_weight_with_any_number_of_slices(slices):
    # slices of one unit, of several (both copy stages reused), and more slices than units (empty ones)
    N, L = 2, ConvLayer(4, 8, 8, 4, 3, 1, 1)
    x, w, dy = arrays(N, L)
    _, dw_ref, db_ref = rb.conv2d_backward(x, w, dy, pad=1)
    op = SmallWeightGrad(L, tile=WeightTile(4, 4, 2, 2, 2))
    op.slices = lambda N, resident: slices
    db = poisoned(4)
    assert rel_error(op(f32(x), f32(dy), poisoned(36, 4), bias=db), to_ckkm(dw_ref)) < 1e-5
    assert rel_error(db, db_ref) < 1e-5


@pytest.mark.check
def test_the_weights_are_read_at_every_call():
    L = ConvLayer(4, 6, 5, 4, 3, 1, 1)
    x, w, _ = arrays(2, L)
    wt = f32(to_ckkm(w))
    conv = SmallConv3x3(wt, None, L)
    conv(f32(x))
    wt *= 2                      # a training step updates them in place
    assert rel_error(conv(f32(x)), reference.conv2d(x, 2 * w, None, pad=1)) < 1e-5


@pytest.mark.check
def test_bad_input_and_tiles_are_refused():
    L = ConvLayer(4, 6, 5, 8, 3, 1, 1)
    wt, x = f32(np.zeros((36, 8))), f32(np.zeros((2, 4, 6, 5)))
    with pytest.raises(ValueError, match="stride 1"):
        SmallConv3x3(wt, None, ConvLayer(4, 6, 5, 8, 3, 2, 1))
    with pytest.raises(ValueError, match=r"\(C\*9, M\)"):
        SmallConv3x3(f32(np.zeros((8, 36))), None, L)
    with pytest.raises(ValueError, match="no bias"):
        SmallConv3x3(wt, f32(np.zeros(8)), L, transpose=True)
    with pytest.raises(ValueError, match="mb must divide"):
        SmallConv3x3(wt, None, L, tile=Tile(3, 1, 2, 1, 4))
    with pytest.raises(ValueError, match="at most H"):
        SmallConv3x3(wt, None, L, tile=Tile(8, 1, 7, 1, 4))
    with pytest.raises(ValueError, match="groups"):
        SmallWeightGrad(L, tile=WeightTile(4, 8, 4, 2, 3))
    conv = SmallConv3x3(wt, None, L, gate=True)
    with pytest.raises(ValueError, match="x must be"):
        conv(f32(np.zeros((2, 3, 6, 5))), gate=f32(np.zeros((2, 8, 6, 5))))
    with pytest.raises(ValueError, match="pass gate="):
        conv(x)
    with pytest.raises(ValueError, match="residual=True"):
        conv(x, gate=f32(np.zeros((2, 8, 6, 5))), residual=f32(np.zeros((2, 8, 6, 5))))
    same = f32(np.zeros((2, 8, 6, 5)))
    with pytest.raises(ValueError, match="shares memory"):
        conv(x, same, gate=same)
    with pytest.raises(ValueError, match="dy"):
        SmallWeightGrad(L)(x, f32(np.zeros((2, 8, 6, 4))))


def test_the_row_pitch_keeps_a_warp_off_shared_banks():
    # 28-wide rows in strips of 7: with pitch 30 the second strip's first lanes share banks with the
    # first strip's; the chosen pitch has fewer such pairs, and never less than W + 2.
    t = Tile(16, 4, 14, 7, 16)
    p = row_pitch(28, 14, 7, t.threads(28))
    assert p >= 30 and p != 30
    assert default_tile(16, 16, 28, 28).threads(28) <= 1024


@pytest.mark.check
def test_every_candidate_tile_of_the_sweep_fits():
    for kind in resnet_kernels.PASSES:
        for shape in ((16, 16, 28, 28), (64, 64, 28, 28), (1, 16, 28, 28)):
            tiles = resnet_kernels.candidates(kind, *shape)
            assert tiles, (kind, shape)
            for t in tiles:
                t.check(*shape)
