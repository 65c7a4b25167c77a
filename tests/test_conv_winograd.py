"""conv_winograd.cu, Winograd's F(2x2, 3x3) and F(4x4, 3x3): forward (bias, skip, ReLU fused) and
backward data (the ReLU's backward and a skip's gradient fused) against the float64 references on
odd shapes (odd planes leave part-empty 2x2 and 4x4 tiles on the right and bottom edges) with
poisoned outputs; tiles with ragged edges; the weights transformed again at every call; what it
refuses."""
from __future__ import annotations

import numpy as np
import pytest

from labkit import reference
from labkit.checks import rel_error
from labkit.ladder import resnet_kernels
from labkit.models.resnet_small import to_ckkm
from labkit.ops.conv_winograd import WinogradConv3x3, WinogradTile, default_winograd_tile
from labkit.reference import backward as rb
from labkit.shapes import ConvLayer
from helpers import f32, poisoned

rng = np.random.default_rng()


# (N, C, M, H, W, tile): odd planes, one input channel, a tile whose rows of 2x2 tiles do not divide
# the plane's and whose thread groups leave idle lanes, float4 (rm, rt multiples of 4) and not.
CASES = [(3, 5, 4, 13, 11, None), (1, 1, 16, 5, 6, None), (2, 8, 8, 10, 9, WinogradTile(8, 4, 3, 5, 4)),
         (2, 8, 8, 9, 7, WinogradTile(8, 4, 2, 4, 4)),
         # rows of a multiple of 4 floats (16-byte copies of x), three chunks (both copy stages reused),
         # output channels not a multiple of 4 (U copied a value at a time)
         (2, 12, 8, 9, 8, WinogradTile(8, 4, 2, 4, 4)), (1, 9, 6, 7, 12, WinogradTile(3, 1, 1, 3, 3)),
         # one group of tiles a position, an even number a thread (8-byte loads of V)
         (2, 8, 8, 9, 11, WinogradTile(8, 4, 1, 6, 4)),
         # F(4x4, 3x3): planes of 1, 2 and 3 columns past a multiple of 4, a band of rows of tiles
         # past the plane's last, 16-byte copies of x and of U, groups of tiles of 1 and 2
         (3, 5, 4, 13, 11, WinogradTile(4, 4, 1, 4, 5, 4)), (2, 8, 8, 10, 9, WinogradTile(8, 4, 2, 2, 4, 4)),
         (1, 9, 6, 7, 12, WinogradTile(3, 1, 1, 3, 3, 4)), (2, 8, 8, 9, 10, WinogradTile(8, 4, 2, 8, 4, 4)),
         # C a single chunk (U transformed by the block, patches read from x, runs of tiles across rows
         # and images, the batch's last run part-empty, the last block with fewer runs), F(2x2, 3x3)
         # and F(4x4, 3x3)
         (2, 8, 8, 9, 7, WinogradTile(8, 4, 2, 4, 8)), (3, 5, 4, 13, 11, WinogradTile(4, 4, 1, 7, 5)),
         (3, 8, 8, 10, 9, WinogradTile(8, 4, 1, 3, 8, 4)), (2, 8, 4, 9, 12, WinogradTile(4, 4, 2, 4, 8, 4))]


@pytest.mark.parametrize("N,C,M,H,W,tile", CASES)
def test_forward_with_bias_skip_and_relu_matches_float64(N, C, M, H, W, tile):
    L = ConvLayer(C, H, W, M, 3, 1, 1)
    x, w = rng.standard_normal((N, C, H, W)), rng.standard_normal((M, C, 3, 3))
    b, res = rng.standard_normal(M), rng.standard_normal((N, M, H, W))
    conv = WinogradConv3x3(f32(to_ckkm(w)), f32(b), L, activation="relu", residual=True, tile=tile)
    y = conv(f32(x), poisoned(N, M, H, W), residual=f32(res))
    assert rel_error(y, np.maximum(reference.conv2d(x, w, b, pad=1) + res, 0)) < 1e-5
    plain = WinogradConv3x3(f32(to_ckkm(w)), None, L, tile=tile)
    assert rel_error(plain(f32(x), poisoned(N, M, H, W)), reference.conv2d(x, w, None, pad=1)) < 1e-5


@pytest.mark.parametrize("N,C,M,H,W,tile", [(3, 4, 5, 11, 9, None), (2, 8, 8, 9, 7, WinogradTile(8, 4, 2, 4, 4)),
                                            (2, 8, 8, 9, 7, WinogradTile(8, 4, 2, 4, 4, 4)),
                                            (3, 8, 6, 9, 7, WinogradTile(8, 4, 1, 4, 6))])
def test_backward_data_with_gate_and_skip_matches_float64(N, C, M, H, W, tile):
    # The data pass is a forward convolution of dy (M channels in, C out) by the weights turned 180
    # degrees, so the tile is the one of an M -> C layer.
    L = ConvLayer(C, H, W, M, 3, 1, 1)
    x, w, dy = rng.standard_normal((N, C, H, W)), rng.standard_normal((M, C, 3, 3)), rng.standard_normal((N, M, H, W))
    gate, skip = rng.standard_normal((N, C, H, W)), rng.standard_normal((N, C, H, W))
    dx_ref = rb.conv2d_backward(x, w, dy, pad=1)[0]
    bwd = WinogradConv3x3(f32(to_ckkm(w)), None, L, transpose=True, gate=True, residual=True, tile=tile)
    got = bwd(f32(dy), poisoned(N, C, H, W), gate=f32(gate), residual=f32(skip))
    assert rel_error(got, np.where(gate > 0, dx_ref + skip, 0)) < 1e-5


@pytest.mark.parametrize("tile", [WinogradTile(4, 4, 1, 3, 2), WinogradTile(4, 4, 1, 3, 4)])
def test_the_weights_are_transformed_at_every_call(tile):
    # by winograd_weights before the convolution (two chunks), or by the convolution's blocks (one)
    L = ConvLayer(4, 6, 5, 4, 3, 1, 1)
    x, w = rng.standard_normal((2, 4, 6, 5)), rng.standard_normal((4, 4, 3, 3))
    wt = f32(to_ckkm(w))
    conv = WinogradConv3x3(wt, None, L, tile=tile)
    assert (conv.u is None) == tile.fused_weights(4)
    conv(f32(x))
    wt *= 2                      # a training step updates them in place
    assert rel_error(conv(f32(x)), reference.conv2d(x, 2 * w, None, pad=1)) < 1e-5


@pytest.mark.parametrize("f,runs", [(2, 1), (2, 4), (4, 2), (4, 50)])
def test_blocks_walking_any_number_of_runs_of_tiles(f, runs):
    # C a single chunk: each block walks `runs` runs of 7 tiles (on a GPU, as many as make one wave);
    # 5 images of 4 x 3 (F = 2) or 2 x 2 (F = 4) tiles end in a part-empty run and a part-empty block.
    N, C, M, H, W = 5, 6, 8, 8, 6 if f == 2 else 7
    L = ConvLayer(C, H, W, M, 3, 1, 1)
    x, w, b = rng.standard_normal((N, C, H, W)), rng.standard_normal((M, C, 3, 3)), rng.standard_normal(M)
    conv = WinogradConv3x3(f32(to_ckkm(w)), f32(b), L, activation="relu", tile=WinogradTile(4, 4, 3 if f == 2 else 2, 7, 6, f))
    conv.runs_per_block = lambda units, resident: runs
    assert rel_error(conv(f32(x), poisoned(N, M, H, W)), np.maximum(reference.conv2d(x, w, b, pad=1), 0)) < 1e-5


@pytest.mark.check
def test_bad_tiles_and_input_are_refused():
    L = ConvLayer(8, 6, 5, 8, 3, 1, 1)
    wt = f32(np.zeros((72, 8)))
    with pytest.raises(ValueError, match="stride 1"):
        WinogradConv3x3(wt, None, ConvLayer(8, 6, 5, 8, 3, 2, 1))
    with pytest.raises(ValueError, match="mb must divide"):
        WinogradConv3x3(wt, None, L, tile=WinogradTile(3, 1, 1, 4, 8))
    with pytest.raises(ValueError, match="ck C"):
        WinogradConv3x3(wt, None, L, tile=WinogradTile(8, 4, 1, 4, 3))
    with pytest.raises(ValueError, match="rows of tiles"):
        WinogradConv3x3(wt, None, L, tile=WinogradTile(8, 4, 4, 4, 8))
    with pytest.raises(ValueError, match="f must be 2 or 4"):
        WinogradConv3x3(wt, None, L, tile=WinogradTile(8, 4, 1, 4, 8, 3))
    with pytest.raises(ValueError, match="rows of tiles"):
        WinogradConv3x3(wt, None, L, tile=WinogradTile(8, 4, 3, 4, 8, 4))
    with pytest.raises(ValueError, match="at least 1"):
        WinogradConv3x3(wt, None, L, tile=WinogradTile(8, 4, 0, 4, 8))
    with pytest.raises(ValueError, match="shared memory"):
        WinogradConv3x3(f32(np.zeros((64 * 9, 64))), None, ConvLayer(64, 28, 28, 64, 3, 1, 1),
                        tile=WinogradTile(64, 64, 14, 196, 64))
    conv = WinogradConv3x3(wt, None, L)
    with pytest.raises(ValueError, match="x must be"):
        conv(f32(np.zeros((2, 3, 6, 5))))
    x = f32(np.zeros((2, 8, 6, 5)))
    with pytest.raises(ValueError, match="shares memory"):
        conv(x, x)


@pytest.mark.check
def test_every_candidate_and_default_tile_fits():
    for kind in ("forward", "data"):
        for shape in ((16, 16, 28, 28), (64, 64, 28, 28), (1, 16, 28, 28)):
            tiles = resnet_kernels.candidates(kind, *shape, algorithm="winograd")
            assert tiles, (kind, shape)
            for t in tiles + [default_winograd_tile(*shape)]:
                t.check(*shape)


@pytest.mark.check
def test_input_not_16_byte_aligned_is_read_right():
    # Rows of 8 floats go 16 bytes a copy, but a view one float into a larger buffer is not
    # 16-byte aligned: the kernel sees that and copies a value at a time.
    N, C, M, H, W = 2, 4, 4, 5, 8
    L = ConvLayer(C, H, W, M, 3, 1, 1)
    x, w = rng.standard_normal((N, C, H, W)), rng.standard_normal((M, C, 3, 3))
    flat = f32(np.zeros(N * C * H * W + 1))
    view = flat[1:].reshape(N, C, H, W)
    view[...] = f32(x)
    assert (view.data.ptr if hasattr(view.data, "ptr") else view.ctypes.data) % 16
    conv = WinogradConv3x3(f32(to_ckkm(w)), None, L, tile=WinogradTile(4, 4, 2, 4, 2))
    assert rel_error(conv(view, poisoned(N, M, H, W)), reference.conv2d(x, w, None, pad=1)) < 1e-5
