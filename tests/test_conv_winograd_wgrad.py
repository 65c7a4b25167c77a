"""conv_winograd_wgrad.cu, the weight gradient by Winograd's F(3x3, 2x2), and its bias gradient, against
the float64 reference on odd shapes (half-empty 2x2 tiles on the right and bottom edges) with
poisoned outputs, in both weight layouts; tiles with ragged units and 16-byte loads or not; one
slice or many (the fixed-order sum); what it refuses."""
from __future__ import annotations

import numpy as np
import pytest

from labkit.checks import rel_error
from labkit.models.resnet_small import to_ckkm
from labkit.ops.conv_winograd_wgrad import WinogradWeightGrad, WinogradWeightTile, default_winograd_weight_tile
from labkit.reference import backward as rb
from labkit.shapes import ConvLayer
from helpers import f32, poisoned

rng = np.random.default_rng()

# (N, C, M, H, W, tile): odd planes and channel counts, one input channel, units of 2 and 3 rows of
# tiles that do not divide the plane's, 16-byte loads of both operands (rm, rc multiples of 4) or neither.
CASES = [(3, 5, 4, 13, 11, None), (5, 1, 4, 6, 5, None), (2, 8, 8, 9, 7, WinogradWeightTile(8, 8, 4, 4, 2)),
         (2, 12, 8, 10, 9, WinogradWeightTile(8, 4, 2, 1, 3)), (1, 6, 12, 7, 12, WinogradWeightTile(12, 6, 4, 2, 1))]


@pytest.mark.parametrize("N,C,M,H,W,tile", CASES)
def test_weight_and_bias_gradients_match_float64_in_both_layouts(N, C, M, H, W, tile):
    L = ConvLayer(C, H, W, M, 3, 1, 1)
    x, w, dy = rng.standard_normal((N, C, H, W)), rng.standard_normal((M, C, 3, 3)), rng.standard_normal((N, M, H, W))
    _, dw_ref, db_ref = rb.conv2d_backward(x, w, dy, pad=1)
    db = poisoned(M)
    got = WinogradWeightGrad(L, tile=tile)(f32(x), f32(dy), poisoned(C * 9, M), bias=db)
    assert rel_error(got, to_ckkm(dw_ref)) < 1e-5 and rel_error(db, db_ref) < 1e-5
    got = WinogradWeightGrad(L, layout="MCKK", tile=tile)(f32(x), f32(dy), poisoned(M, C, 3, 3))
    assert rel_error(got, dw_ref) < 1e-5


@pytest.mark.parametrize("slices", [1, 3, 7])
def test_any_number_of_slices_sums_every_unit_once(slices, monkeypatch):
    """The batch's units split into 1, 3 or 7 slices (7 > the 6 units: empty slices write zeros)."""
    L = ConvLayer(4, 6, 5, 4, 3, 1, 1)
    x, w, dy = rng.standard_normal((2, 4, 6, 5)), rng.standard_normal((4, 4, 3, 3)), rng.standard_normal((2, 4, 6, 5))
    _, dw_ref, db_ref = rb.conv2d_backward(x, w, dy, pad=1)
    op = WinogradWeightGrad(L, tile=WinogradWeightTile(4, 4, 4, 4, 1))
    monkeypatch.setattr(op, "slices", lambda N, resident: slices)
    db = poisoned(4)
    assert rel_error(op(f32(x), f32(dy), bias=db), to_ckkm(dw_ref)) < 1e-5 and rel_error(db, db_ref) < 1e-5


@pytest.mark.check
def test_default_tiles_fit_odd_channel_counts():
    for C, M in [(1, 64), (3, 5), (64, 64), (7, 16)]:
        default_winograd_weight_tile(C, M, 28, 28).check(C, M, 28, 28)


@pytest.mark.check
def test_bad_tiles_and_input_are_refused():
    L = ConvLayer(8, 6, 5, 8, 3, 1, 1)
    with pytest.raises(ValueError, match="stride 1"):
        WinogradWeightGrad(ConvLayer(8, 6, 5, 8, 3, 2, 1))
    with pytest.raises(ValueError, match="mb must divide"):
        WinogradWeightGrad(L, tile=WinogradWeightTile(3, 8, 1, 4, 1))
    with pytest.raises(ValueError, match="rows of tiles"):
        WinogradWeightGrad(L, tile=WinogradWeightTile(8, 8, 4, 4, 4))
    with pytest.raises(ValueError, match="at least 1"):
        WinogradWeightGrad(L, tile=WinogradWeightTile(8, 8, 0, 4, 1))
    with pytest.raises(ValueError, match="threads a block"):
        WinogradWeightGrad(ConvLayer(16, 6, 5, 16, 3, 1, 1), tile=WinogradWeightTile(16, 16, 1, 1, 1))
    op = WinogradWeightGrad(L)
    x, dy = f32(np.zeros((2, 8, 6, 5))), f32(np.zeros((2, 8, 6, 5)))
    with pytest.raises(ValueError, match=r"\(N, M, H, W\)"):
        op(x, f32(np.zeros((2, 8, 6, 6))))
    with pytest.raises(TypeError, match="float32"):
        op(x.astype(np.float64), dy)
