"""Launch every kernel of the series once on small odd-sized inputs, for compute-sanitizer.

    compute-sanitizer --tool memcheck python3 scripts/sanitize_kernels.py
    compute-sanitizer --tool racecheck python3 scripts/sanitize_kernels.py
    compute-sanitizer --tool synccheck python3 scripts/sanitize_kernels.py
    compute-sanitizer --tool racecheck python3 scripts/sanitize_kernels.py --find-the-bug   # must report
    compute-sanitizer --tool memcheck python3 scripts/sanitize_kernels.py --exercises     # the exercises alone
    compute-sanitizer --tool initcheck python3 scripts/sanitize_kernels.py --pointwise    # pointwise, layer_norm,
                                                         # conv_winograd_gemm, transpose_tiles, GEMM's GELU

labkit/kernels/find_the_bug.cu is left out of the clean run: its kernels are racy on purpose (notebook
03's exercise). `--find-the-bug` launches only them, so that a racecheck run shows the tool does report
the shared-memory race of block_sum (racecheck does not look at global memory: the histogram's race is
the CPU executor's race check's to find).

The executor's feature kernels are launched through the cases of the GPU parity test, the CUDA
teaching kernels (tests/cuda/teaching_kernels.cu) through the GPU cases of their test, the
convolution ladder (labkit/kernels/conv_*.cu) through labkit.ops.conv.conv2d, the GEMM ladder
(labkit/kernels/gemm.cu) through labkit.ops.gemm.gemm, the implicit-GEMM convolutions through
labkit.ops.implicit, depthwise_any.cu through labkit.ops.depthwise_any, the solutions of the kernel
exercises (notebooks/exercises/*.cu) through their checks.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import cupy as cp  # noqa: E402

from labkit.backends.cuda import CUDAModule  # noqa: E402
import test_executor_parity as parity  # noqa: E402


def launch_conv_ladder() -> int:
    """Every variant of labkit.ops.conv once per shape: odd sizes, so edge tiles hang over the plane."""
    from labkit.ops.conv import VARIANTS, conv2d

    rng = np.random.default_rng()
    # Odd shapes, and the seed layers (odd batches), which run the tuned table's configurations.
    shapes = [((2, 3, 21, 19, 5, 5), 16), ((1, 2, 13, 17, 3, 3), 8), ((2, 1, 11, 9, 2, 1), 8),
              ((3, 1, 48, 48, 6, 5), 16), ((3, 6, 22, 22, 16, 5), 8)]
    n = 0
    for variant in VARIANTS:
        for (N, C, H, W, M, K), tile_width in shapes:
            x = cp.asarray(rng.standard_normal((N, C, H, W), dtype=np.float32))
            w = cp.asarray(rng.standard_normal((M, C, K, K), dtype=np.float32))
            b = cp.asarray(rng.standard_normal(M, dtype=np.float32))
            conv2d(x, w, b, variant=variant, activation="tanh", tile_width=tile_width)
            n += 1
    return n


def launch_gemm_ladder() -> int:
    """Every GEMM variant once on odd sizes (tiles hang over every edge), with and without bias."""
    from labkit.ops.gemm import VARIANTS, gemm

    rng = np.random.default_rng()
    n = 0
    for variant in VARIANTS:
        for M, N, K in [(37, 70, 29), (64, 128, 96)]:
            a = cp.asarray(rng.standard_normal((M, K), dtype=np.float32))
            b = cp.asarray(rng.standard_normal((K, N), dtype=np.float32))
            bias = cp.asarray(rng.standard_normal(N, dtype=np.float32))
            gemm(a, b, bias, variant=variant, activation="relu")
            n += 1
    # The float4 versions with 8 x 8 per thread: two 4 x 4 groups per thread along each axis.
    big = {"GEMM_BM": 64, "GEMM_BN": 128, "GEMM_BK": 8, "GEMM_TM": 8, "GEMM_TN": 8}
    a = cp.asarray(rng.standard_normal((131, 77), dtype=np.float32))
    b = cp.asarray(rng.standard_normal((77, 259), dtype=np.float32))
    for variant in ("vec", "dbuf"):
        gemm(a, b, cp.zeros(259, cp.float32), variant=variant, activation="relu", params=big)
        n += 1
    gemm(a[:5], b, None, variant="dbuf", splits=3, params=big)
    return n + 2


def launch_layers() -> int:
    """Pooling, softmax and the fused conv + tanh + pool, on odd sizes."""
    from labkit import layers

    rng = np.random.default_rng()
    x = cp.asarray(rng.standard_normal((3, 5, 13, 11), dtype=np.float32))
    layers.max_pool2d(x, 2, 2)
    layers.max_pool2d(x, 3, 2)
    x[0, 0, 0, 0] = cp.nan                                          # the NaN-keeping branch of the pools
    layers.max_pool2d(x, 2, 2)
    layers.softmax(cp.asarray(rng.standard_normal((37, 10), dtype=np.float32)))
    for (N, C, H, W, M, K), imgs in [((3, 1, 48, 48, 6, 5), 2), ((2, 3, 13, 12, 4, 3), 1)]:
        layers.conv_pool_tanh(cp.asarray(rng.standard_normal((N, C, H, W), dtype=np.float32)),
                              cp.asarray(rng.standard_normal((M, C, K, K), dtype=np.float32)),
                              cp.asarray(rng.standard_normal(M, dtype=np.float32)), imgs=imgs)
    return 6


def launch_pointwise_and_layer_norm() -> int:
    """pointwise.cu (every activation code, the four broadcasting ops) and layer_norm.cu, on odd sizes."""
    from labkit.ops.layer_norm import LayerNorm
    from labkit.ops.pointwise import ACTIVATIONS, OPS, Binary, Unary

    rng = np.random.default_rng()
    f32 = lambda *s: cp.asarray(rng.standard_normal(s, dtype=np.float32))  # noqa: E731
    n = 0
    for act in ACTIVATIONS:
        if act is not None:
            Unary(act, -1.0, 1.0)(f32(3, 37))
            n += 1
    for op in OPS:
        Binary(op)(f32(2, 3, 5), f32(3, 1))
        n += 1
    for shape, norm in (((3, 5, 33), (33,)), ((2, 3, 4, 5), (3, 4, 5)), ((7, 1), (1,))):
        LayerNorm(f32(*norm), f32(*norm))(f32(*shape))
        n += 1
    return n


def launch_winograd_gemm() -> int:
    """conv_winograd_gemm.cu's transforms and gemm.cu's batched GEMM: odd planes, uneven padding,
    bias, residual and ReLU; windows 3x3, 5x5 in two groups, 7x7, 1 x 7 and 5 x 3, a dilated 3x3."""
    from labkit.ops.conv_winograd_gemm import WinogradGemmConv2d
    from labkit.shapes import ConvLayer

    rng = np.random.default_rng()
    f32 = lambda *s: cp.asarray(rng.standard_normal(s, dtype=np.float32))  # noqa: E731
    n = 0
    cases = (  # (N, C, H, W, M), window, pad, dilation, groups, residual
        ((3, 5, 9, 7, 6), 3, (1, 1), 1, 1, True),
        ((2, 3, 6, 5, 37), 3, (0, 2), 1, 1, False),
        ((2, 10, 11, 9, 12), 5, (2, 2), 1, 2, True),
        ((1, 3, 13, 10, 5), 7, (3, 1), 1, 1, False),
        ((2, 6, 9, 12, 7), (1, 7), (0, 3), 1, 1, True),
        ((1, 4, 8, 7, 9), (5, 3), (1, 2), 1, 1, False),
        ((2, 3, 13, 11, 5), 3, (0, 1), (3, 2), 1, False),      # dilated: phases of unequal length
    )
    for (N, C, H, W, M), window, pad, dilation, groups, res in cases:
        layer = ConvLayer.of(C, H, W, M, window, 1, pad, dilation, groups)
        conv = WinogradGemmConv2d(f32(M, C // groups, *layer.kernel_hw), f32(M), layer, activation="relu",
                                  residual=res)
        conv(f32(N, C, H, W), residual=f32(N, M, *layer.out_hw) if res else None)
        n += 3
    return n


def launch_transpose_and_gelu() -> int:
    """pool_pad.cu's transpose_tiles (NCHW <-> NHWC, odd sizes) and gather_axis, and gemm.cu's GELU
    epilogues (one kernel, split-K's reduce, few rows)."""
    from labkit.ops.gemm import gemm
    from labkit.ops.pool_pad import Permute, gather_axis

    rng = np.random.default_rng()
    f32 = lambda *s: cp.asarray(rng.standard_normal(s, dtype=np.float32))  # noqa: E731
    Permute((0, 2, 3, 1))(f32(3, 37, 5, 7))
    Permute((0, 3, 1, 2))(f32(2, 5, 7, 45))
    gemm(f32(37, 19), f32(19, 45), f32(45), variant="dbuf", activation="gelu")
    gemm(f32(40, 300), f32(300, 70), f32(70), variant="dbuf", splits=3, activation="gelu_tanh")
    gemm(f32(3, 100), f32(100, 130), f32(130), activation="gelu")
    x = f32(3, 5, 7, 9)
    gather_axis(x.shape, 1, np.array([4, 0, 2]), cp)(x, cp.empty((3, 3, 7, 9), cp.float32))
    return 8


def launch_unroll() -> int:
    """im2col and col2im (padding, stride), and the unrolled convolution with groups."""
    from labkit.ops import unroll

    rng = np.random.default_rng()
    x = cp.asarray(rng.standard_normal((2, 4, 13, 11), dtype=np.float32))
    cols = unroll.im2col(x, 3, stride=2, pad=1)
    unroll.col2im(cols, x.shape, 3, stride=2, pad=1)
    w = cp.asarray(rng.standard_normal((6, 2, 3, 3), dtype=np.float32))
    unroll.conv2d_unrolled(x, w, cp.zeros(6, cp.float32), stride=2, pad=1, groups=2, activation="relu")
    return 3


def launch_implicit() -> int:
    """The implicit-GEMM convolutions, FP32 and TF32, on odd shapes: partial tiles along every edge,
    padding, stride, groups, and output channels per group that are not a multiple of 4."""
    from labkit.ops.implicit import Tiles, conv2d_implicit

    rng = np.random.default_rng()
    n = 0
    for (N, C, H, W, M, K, s, p, g) in [(2, 3, 21, 19, 5, 3, 1, 1, 1), (1, 8, 13, 13, 12, 5, 2, 2, 2),
                                        (3, 6, 7, 9, 66, 3, 1, 1, 3)]:
        x = cp.asarray(rng.standard_normal((N, C, H, W), dtype=np.float32))
        w = cp.asarray(rng.standard_normal((M, C // g, K, K), dtype=np.float32))
        b = cp.asarray(rng.standard_normal(M, dtype=np.float32))
        nhwc = (Tiles("tf32", bm=64, bn=64, bk=16, wm=2, wn=2, layout="nhwc"),   # channels-last gather
                Tiles("tf32", bm=128, bn=128, bk=32, wm=2, wn=4, stages=3, layout="nhwc")) if (C // g) % 4 == 0 or g == 1 \
            else ()
        for t in (Tiles("fp32", bm=32, bn=64, bk=8, tm=4, tn=4), Tiles("fp32", bm=64, bn=128, bk=16, tm=8, tn=8),
                  Tiles("tf32", bm=64, bn=64, bk=16, wm=2, wn=2), Tiles("tf32", bm=128, bn=128, bk=16, wm=2, wn=4, stages=4)) + nhwc:
            conv2d_implicit(x, w, b, stride=s, pad=p, groups=g, activation="relu", precision=t.precision, tiles=t)
            n += 1 + t.nhwc   # the channels-last copy first
    return n


def launch_training_parts() -> int:
    """The backward pass and the training step: conv_backward.cu (both weight layouts, stride 2,
    padding 2), train.cu (every kernel, a label out of range included), conv_small.cu (each kernel,
    a ragged tile), conv_winograd.cu (forward and backward data, ragged tiles), conv_winograd_wgrad.cu
    (ragged tiles, any number of units a slice), a whole step of the small ResNet (forward, backward,
    SGD) on two rungs, with Winograd's kernels and without."""
    from labkit.models.resnet_small import ResNetSmall
    from labkit.ops import conv_backward as cb
    from labkit.ops import training as tr
    from labkit.ops.implicit import ConvLayer

    rng = np.random.default_rng()
    f32 = lambda *s: cp.asarray(rng.standard_normal(s, dtype=np.float32))  # noqa: E731
    n = 0
    for L in (ConvLayer(3, 7, 9, 5, 3, 1, 1), ConvLayer(3, 8, 7, 2, 5, 2, 2)):
        x, dy = f32(2, L.C, L.H, L.W), f32(2, L.M, *L.out_hw)
        cb.conv2d_backward_data(dy, f32(L.M, L.C, L.K, L.K), L)
        cb.conv2d_backward_data(dy, f32(L.C * L.K * L.K, L.M), L, layout="CKKM")
        cb.conv2d_backward_weight(x, dy, L)
        cb.conv2d_backward_weight(x, dy, L, layout="CKKM")
        cb.conv2d_backward_bias(dy)
        n += 5
    a, b = f32(3, 5, 7), f32(3, 5, 7)
    tr.relu_backward(a, b), tr.add(a, b), tr.gap_backward(f32(3, 5), (3, 5, 7, 9))
    tr.gap_relu_backward(f32(3, 5, 7, 9), f32(3, 5)), tr.gap_relu_backward(f32(3, 5, 6, 6), f32(3, 5))  # scalar, float4
    tr.dense_forward(f32(7, 11), f32(11, 10), f32(10)), tr.dense_backward(f32(7, 11), f32(11, 10), f32(7, 10))
    tr.softmax_cross_entropy(f32(9, 10), cp.asarray(np.array([0, 1, 2, 3, 4, 5, 6, 7, 12], np.int32)))
    tr.sgd_momentum(f32(1001), f32(1001), f32(1001), lr=0.1, momentum=0.9, weight_decay=1e-4)
    n += 11
    from labkit.ops.conv_small import SmallConv3x3, SmallWeightGrad, Tile, WeightTile
    L = ConvLayer(8, 9, 7, 4, 3, 1, 1)             # conv_small.cu: a ragged last tile of rows
    wt = f32(L.C * 9, L.M)
    x, dy = f32(3, L.C, L.H, L.W), f32(3, L.M, L.H, L.W)
    SmallConv3x3(wt, f32(L.M), L, activation="relu", residual=True, tile=Tile(4, 4, 4, 2, 4))(x, residual=dy)
    SmallConv3x3(wt, None, L, transpose=True, gate=True, residual=True)(dy, gate=x, residual=x)
    SmallWeightGrad(L, tile=WeightTile(4, 4, 2, 4, 3))(x, dy)
    n += 3
    # conv_winograd.cu: odd planes (a ragged last 2x2 or 4x4 tile), idle lanes, float4 and scalar tiles,
    # 4- and 16-byte asynchronous copies and U's bulk copies (the 64-channel tile), both copy stages
    # reused; forward with bias, skip and ReLU, backward data with gate and skip (its tile is one of
    # an M -> C layer).
    from labkit.ops.conv_winograd import WinogradConv3x3, WinogradTile as WT
    for (N, C, M, H, W), tile, data_tile in [
            ((3, 5, 4, 13, 11), None, None), ((2, 8, 8, 10, 9), WT(8, 4, 3, 5, 4), WT(8, 4, 3, 4, 4)),
            ((2, 8, 8, 9, 7), WT(8, 4, 2, 4, 4), WT(8, 4, 2, 4, 4)),
            ((2, 12, 8, 9, 8), WT(8, 4, 2, 4, 4), WT(12, 4, 2, 4, 4)),   # 16-byte row copies, 3 chunks
            ((1, 9, 6, 7, 12), WT(3, 1, 1, 3, 3), WT(3, 1, 1, 3, 3)),    # U copied a value at a time
            ((2, 8, 8, 9, 11), WT(8, 4, 1, 6, 4), WT(8, 4, 1, 6, 4)),    # 8-byte loads of V
            # F(4x4, 3x3): ragged 4x4 tiles, a band past the last row of tiles, 16-byte copies
            ((3, 5, 4, 13, 11), WT(4, 4, 1, 4, 5, 4), WT(5, 1, 1, 4, 4, 4)),
            ((2, 8, 8, 9, 10), WT(8, 4, 2, 8, 4, 4), WT(8, 4, 2, 8, 4, 4)),
            ((1, 64, 64, 28, 28), WT(64, 4, 2, 14, 8, 4), WT(64, 4, 2, 14, 8, 4)),   # the H100's tile
            # C a single chunk (U transformed by the block, patches read from x, runs of tiles across
            # rows and images, a part-empty last run), F(2x2) and F(4x4); and the 16-channel layer
            ((2, 8, 8, 9, 7), WT(8, 4, 2, 4, 8), WT(8, 4, 1, 4, 8)),
            ((3, 8, 8, 10, 9), WT(8, 4, 1, 3, 8, 4), WT(8, 4, 1, 3, 8, 4)),
            ((5, 16, 16, 28, 28), WT(16, 8, 2, 8, 16), WT(16, 8, 1, 4, 16))]:
        Lw = ConvLayer(C, H, W, M, 3, 1, 1)
        x, dy, wt = f32(N, C, H, W), f32(N, M, H, W), f32(C * 9, M)
        WinogradConv3x3(wt, f32(M), Lw, activation="relu", residual=True, tile=tile)(x, residual=dy)
        WinogradConv3x3(wt, None, Lw, transpose=True, gate=True, residual=True, tile=data_tile)(dy, gate=x, residual=x)
        n += 2
    # conv_winograd_wgrad.cu: odd planes and channel counts, units of 1-3 rows of tiles, 16-byte loads
    # or scalar ones, and slices of 0, 1, 2 and more units (the copy/transform/GEMM pipeline's ends).
    from labkit.ops.conv_winograd_wgrad import WinogradWeightGrad, WinogradWeightTile as WW
    for (N, C, M, H, W), tile, slices in [((3, 5, 4, 13, 11), None, None), ((2, 8, 8, 9, 7), WW(8, 8, 4, 4, 2), 3),
                                          ((2, 12, 8, 10, 9), WW(8, 4, 2, 1, 3), 5),
                                          ((1, 6, 12, 7, 12), WW(12, 6, 4, 2, 1), 9)]:
        Lw = ConvLayer(C, H, W, M, 3, 1, 1)
        op = WinogradWeightGrad(Lw, tile=tile)
        if slices:
            op.slices = lambda N, resident, s=slices: s
        op(f32(N, C, H, W), f32(N, M, H, W), bias=f32(M))
        n += 1
    for backward, winograd in (("small", False), ("small", True), ("gemm", None)):
        net = ResNetSmall(5, input_hw=(9, 7), backward=backward, winograd=winograd)
        net.train_step(f32(3, 1, 9, 7), cp.asarray(np.array([1, 0, 9], np.int32)), lr=0.1)
        n += 1
    return n


def launch_depthwise_any() -> int:
    """Depthwise convolution of any geometry (rectangular, strided, padded past the kernel, dilated, a
    1,030-wide plane): the default tiles and small ones (ragged edge tiles, several planes a block over
    a remainder, weights in shared memory; float4, float2 and scalar reads and stores).  No search: the
    tiles are the default's or given."""
    from labkit import autotune
    from labkit.ops.depthwise_any import DepthwiseAnyConv2d, Tiling, depthwise_any_layer

    rng = np.random.default_rng()
    tilings = [None, Tiling(rx=2, ry=3, tx=3, ty=2, planes=2), Tiling(rx=1, ry=2, tx=4, ty=2, planes=3, wshared=True),
               Tiling(rx=4, ry=1, tx=2, ty=3, planes=2)]
    n = 0
    with autotune.forced("off"):
        for (N, C, H, W, kernel, stride, pad, dilation) in [
                (2, 3, 13, 11, 3, 1, 1, 1), (1, 5, 17, 70, (5, 3), (2, 1), (4, 1), (1, 2)),
                (3, 2, 19, 21, 7, 2, 3, 2), (1, 4, 6, 1030, 3, 1, 1, 1)]:
            L = depthwise_any_layer(C, H, W, kernel, stride, pad, dilation)
            x = cp.asarray(rng.standard_normal((N, C, H, W), dtype=np.float32))
            w = cp.asarray(rng.standard_normal((C, 1) + L.kernel_hw, dtype=np.float32))
            b = cp.asarray(rng.standard_normal(C, dtype=np.float32))
            for t in tilings:
                try:
                    if t is not None:
                        t.check(L)
                except ValueError:      # threads with no output on this plane: not a tile for it
                    continue
                DepthwiseAnyConv2d(w, b, L, activation="relu6", tiling=t)(x)
                n += 1
    return n


def launch_mobilenet_parts() -> int:
    """Depthwise 3x3 (the three kernels, several tilings, staged outputs, stride 1 and 2, odd planes,
    bias from constant memory), the implicit GEMM's fused residual (with and without split-K), global
    average pooling."""
    from labkit.ops.depthwise import DepthwiseConv2d, Tiling, depthwise_conv2d, depthwise_layer
    from labkit.ops.implicit import ConvLayer, ImplicitConv2d
    from labkit.ops.pool_softmax import global_avg_pool

    rng = np.random.default_rng()
    n = 0
    for (N, C, H, W, S) in [(2, 3, 9, 7, 1), (1, 5, 13, 11, 2), (3, 4, 37, 35, 1), (1, 7, 14, 14, 2)]:
        x = cp.asarray(rng.standard_normal((N, C, H, W), dtype=np.float32))
        w = cp.asarray(rng.standard_normal((C, 1, 3, 3), dtype=np.float32))
        b = cp.asarray(rng.standard_normal(C, dtype=np.float32))
        ho, wo = (H - 1) // S + 1, (W - 1) // S + 1
        whole = [Tiling(ho, 2, min(8, ho), 2 * wo * -(-ho // min(8, ho)), True)]     # staged outputs
        if H <= 32 and W <= 32:
            whole += [Tiling(ho, 3, 1, 3 * ho, by_rows=True), Tiling(ho, 2, 1, 4, by_rows=True)]
        for variant, tiling in (("naive", None), ("tiled", None), ("tiled", Tiling(3, 2, 2, 10)),
                                ("tiled", Tiling(4, 3, 3, 9)), *(("tiled", t) for t in whole)):
            depthwise_conv2d(x, w, b, stride=S, activation="relu6", variant=variant, tiling=tiling)
            n += 1
        DepthwiseConv2d(w, b, depthwise_layer(C, H, W, S), activation="relu6")(x)   # bias in dw_bias
        n += 1
    L = ConvLayer(13, 9, 7, 11, 1)
    x = cp.asarray(rng.standard_normal((3, 13, 9, 7), dtype=np.float32))
    r = cp.asarray(rng.standard_normal((3, 11, 9, 7), dtype=np.float32))
    conv = ImplicitConv2d(cp.asarray(rng.standard_normal((11, 13, 1, 1), dtype=np.float32)),
                          cp.asarray(rng.standard_normal(11, dtype=np.float32)), L, residual=True)
    conv(x, residual=r)
    conv(x, residual=r, splits=3)
    L4 = ConvLayer(13, 8, 6, 11, 1)     # 48-pixel planes: the epilogue's float4 stores
    conv4 = ImplicitConv2d(cp.asarray(rng.standard_normal((11, 13, 1, 1), dtype=np.float32)), None, L4,
                           activation="relu6", residual=True)
    x4 = cp.asarray(rng.standard_normal((3, 13, 8, 6), dtype=np.float32))
    r4 = cp.asarray(rng.standard_normal((3, 11, 8, 6), dtype=np.float32))
    conv4(x4, residual=r4)
    conv4(x4, residual=r4, splits=2)
    global_avg_pool(cp.asarray(rng.standard_normal((3, 40, 7, 5), dtype=np.float32)))
    from labkit.ops.depthwise import depthwise_layer
    from labkit.ops.dw_project import DepthwiseProject, ProjectTiles
    for (N, C, H, W, S, M) in [(2, 13, 7, 7, 1, 11), (3, 9, 10, 9, 2, 37)]:
        ho, wo = (H - 1) // S + 1, (W - 1) // S + 1
        args = [cp.asarray(rng.standard_normal(s, dtype=np.float32)) for s in ((C, 1, 3, 3), (C,), (M, C, 1, 1), (M,))]
        for t in (ProjectTiles(), ProjectTiles(64, 64, 8), ProjectTiles(32, 32, 4)):
            DepthwiseProject(*args, depthwise_layer(C, H, W, S), residual=True, tiles=t)(
                cp.asarray(rng.standard_normal((N, C, H, W), dtype=np.float32)),
                residual=cp.asarray(rng.standard_normal((N, M, ho, wo), dtype=np.float32)))
            n += 1
    return n + 6


def launch_alexnet_parts() -> int:
    """LRN, LRN + max-pool fused (a last band and chunk cut short), split-K GEMM (partial tiles, ragged K)
    and its reduce, on odd sizes."""
    from labkit import layers
    from labkit.ops.gemm import gemm

    rng = np.random.default_rng()
    layers.lrn(cp.asarray(rng.standard_normal((2, 7, 5, 3), dtype=np.float32)), 2)
    layers.lrn_max_pool(cp.asarray(rng.standard_normal((2, 13, 31, 29), dtype=np.float32)), 3, 2)
    a = cp.asarray(rng.standard_normal((3, 293), dtype=np.float32))
    b = cp.asarray(rng.standard_normal((293, 70), dtype=np.float32))
    gemm(a, b, cp.zeros(70, cp.float32), variant="dbuf", splits=5, activation="relu",
         params={"GEMM_BM": 16, "GEMM_BN": 64, "GEMM_BK": 8, "GEMM_TM": 4, "GEMM_TN": 4})
    from labkit.ops.gemm import gemm_few_rows
    from labkit.ops.implicit import ConvLayer, ImplicitConv2d, Tiles
    for rows, slices in ((1, 3), (3, 7), (13, 2)):                   # float4 and scalar reads of A
        gemm_few_rows(a[:rows] if rows <= 3 else cp.asarray(rng.standard_normal((rows, 292), dtype=np.float32)),
                      b if rows <= 3 else b[:292], cp.zeros(70, cp.float32), activation="relu", slices=slices)
    layer = ConvLayer(8, 13, 11, 6, 5, 1, 2, 2)                     # split-K in the FP32 implicit GEMM
    conv = ImplicitConv2d(cp.asarray(rng.standard_normal((6, 4, 5, 5), dtype=np.float32)), cp.zeros(6, cp.float32),
                          layer, activation="relu", tiles=Tiles("fp32", bm=32, bn=64, bk=8, tm=4, tn=4))
    conv(cp.asarray(rng.standard_normal((2, 8, 13, 11), dtype=np.float32)), splits=3)
    conv = ImplicitConv2d(cp.asarray(rng.standard_normal((6, 4, 5, 5), dtype=np.float32)), cp.zeros(6, cp.float32),
                          layer, activation="relu", precision="tf32",      # split-K in the TF32 implicit GEMM
                          tiles=Tiles("tf32", bm=64, bn=64, bk=16, wm=2, wn=2))
    conv(cp.asarray(rng.standard_normal((2, 8, 13, 11), dtype=np.float32)), splits=3)
    return 4 + 2 * 3 + 2 + 2


def launch_prepared_and_graphs() -> int:
    """The defaults and layer objects (gemm by shape, Dense at few and many rows), and both models
    eagerly and as one CUDA graph (FP32 and TF32 AlexNet at batch 1, where split-K runs everywhere)."""
    from labkit import layers
    from labkit.models import alexnet, fashion_mnist as fm
    from labkit.ops.gemm import gemm

    rng = np.random.default_rng()
    n = 0
    for M, N, K in [(1, 70, 293), (9, 130, 100), (37, 10, 50), (70, 140, 333)]:
        gemm(cp.asarray(rng.standard_normal((M, K), dtype=np.float32)),
             cp.asarray(rng.standard_normal((K, N), dtype=np.float32)), cp.zeros(N, cp.float32), activation="tanh")
        n += 2
    fc = layers.Dense(cp.asarray(rng.standard_normal((301, 37), dtype=np.float32)), cp.zeros(37, cp.float32))
    for rows in (3, 17):
        fc(cp.asarray(rng.standard_normal((rows, 301), dtype=np.float32)))
        n += 2

    def eager_and_graph(net, x) -> int:
        net(x)
        plan = net.plan(int(x.shape[0]))
        plan.x[...] = x
        plan.run()
        return 2 * len(plan.steps)

    n += eager_and_graph(fm.FashionNet(), cp.asarray(rng.random((3, 1, 48, 48), dtype=np.float32)))
    weights = alexnet.load_weights()[0]
    for prec in ("fp32", "tf32"):
        n += eager_and_graph(alexnet.AlexNet(weights, precision=prec),
                             cp.asarray(rng.standard_normal((1, 3, 227, 227), dtype=np.float32)))
    return n


def launch_teaching_kernels() -> int:
    """tests/cuda/teaching_kernels.cu: cooperative groups, warp reductions, atomics, a NULL argument,
    an array passed twice; each GPU case of its test checks its answer as well."""
    import test_cpu_executor_cuda_code as teaching

    cases = [getattr(teaching, name) for name in dir(teaching)
             if name.startswith("test_") and "where" in getattr(teaching, name).__code__.co_varnames]
    for case in cases:
        case("gpu", None)
    return len(cases)


def launch_find_the_bug() -> int:
    """The racy kernels of notebook 03's exercise, once each."""
    from labkit.loader import load

    rng = np.random.default_rng()
    mod = load("find_the_bug")
    mod.get_function("histogram")((4,), (256,), (cp.asarray(rng.integers(0, 7, 1000).astype(np.int32)),
                                                 cp.zeros(7, cp.int32), np.int32(1000), np.int32(7)))
    mod.get_function("block_sum")((4,), (256,), (cp.asarray(rng.standard_normal(1000).astype(np.float32)),
                                                 cp.zeros(4, cp.float32), np.int32(1000)))
    cp.cuda.Device().synchronize()
    return 2


def launch_exercise_solutions() -> int:
    """The solutions of the kernel exercises (notebooks/exercises/*.cu), each through its own check: the
    check's odd shapes, NaN-poisoned outputs, constant-memory uploads; a failed check is an error."""
    from labkit.course.grade import EXERCISES
    from labkit.course import kernel_checks

    folder = Path(__file__).resolve().parent.parent / "notebooks" / "exercises"
    kernels = [ex for ex in EXERCISES.values() if not ex.program]
    for ex in kernels:
        # A whole-program exercise (02_host_code.cu) is built and run as its own process with the
        # executor's AddressSanitizer, which refuses to start under compute-sanitizer's preloaded
        # library; its kernel is notebook 02's naive convolution, launched above with the ladder.
        verdict = getattr(kernel_checks, ex.check)(folder / ex.file, ex.kernel, **ex.check_options())
        if not verdict.ok:
            raise SystemExit(f"{ex.file}: {verdict.message}")
    return len(kernels)


def main() -> int:
    if sys.argv[1:] == ["--exercises"]:         # the kernel exercises' solutions alone
        print(f"checked {launch_exercise_solutions()} exercise kernels")
        return 0
    if sys.argv[1:] == ["--find-the-bug"]:
        print(f"launched {launch_find_the_bug()} kernels (racy on purpose)")
        return 0
    if sys.argv[1:] == ["--pointwise"]:         # pointwise, layer norm, Winograd GEMMs, transposes, GELU GEMMs
        n = launch_pointwise_and_layer_norm() + launch_winograd_gemm() + launch_transpose_and_gelu()
        cp.cuda.Device().synchronize()
        print(f"launched {n} kernels")
        return 0
    if sys.argv[1:] == ["--implicit"]:          # the implicit-GEMM convolutions alone (FP32, TF32, NHWC)
        n = launch_implicit()
        cp.cuda.Device().synchronize()
        print(f"launched {n} kernels")
        return 0
    if sys.argv[1:] == ["--training"]:          # the backward pass and training kernels alone
        n = launch_training_parts()
        cp.cuda.Device().synchronize()
        print(f"launched {n} kernels")
        return 0
    code = parity.FEATURES.read_text()
    mod = CUDAModule(code, path=str(parity.FEATURES), name_expressions=parity.EXPR)
    n = 0
    for name, grid, block, make, _outs, shmem in parity.launch_cases():
        args = [cp.asarray(a) if isinstance(a, np.ndarray) else a for a in make()]
        mod.get_function(name)(grid, block, args, shared_mem=shmem)
        n += 1
    n += launch_teaching_kernels()
    n += launch_conv_ladder()
    n += launch_gemm_ladder()
    n += launch_layers()
    n += launch_pointwise_and_layer_norm()
    n += launch_unroll()
    n += launch_winograd_gemm()
    n += launch_transpose_and_gelu()
    n += launch_implicit()
    n += launch_alexnet_parts()
    n += launch_mobilenet_parts()
    n += launch_depthwise_any()
    n += launch_training_parts()
    n += launch_prepared_and_graphs()
    n += launch_exercise_solutions()
    cp.cuda.Device().synchronize()
    print(f"launched {n} kernels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
