"""MobileNetV2's kernels and network: depthwise 3x3 (both rungs), the implicit GEMM's ReLU6 and fused
residual, global average pooling, BN folding, and the whole network against its float64 reference
(BN applied as BN), on fresh random odd shapes into poisoned output buffers."""
from __future__ import annotations

import numpy as np
import pytest

import labkit
from labkit import reference
from labkit.checks import rel_error, to_numpy
from labkit.loader import load, set_constant
from labkit.models import mobilenet_v2 as mb
from labkit.ops.depthwise import (DepthwiseConv2d, Tiling, default_tiling, depthwise_conv2d, depthwise_layer,
                                  floor_bytes)
from labkit.ops.dw_project import DepthwiseProject, ProjectTiles
from labkit.ops.implicit import ImplicitConv2d
from labkit.ops.plans import ints
from labkit.ops.pool_softmax import GlobalAvgPool, global_avg_pool
from labkit.shapes import ConvLayer

rng = np.random.default_rng()
xp = labkit.xp
ON_GPU = labkit.backend() == "cuda"
ACT = {None: lambda v: v, "relu": lambda v: np.maximum(v, 0), "relu6": lambda v: np.clip(v, 0, 6)}


def dev(a):
    return xp.asarray(a)


def poisoned(shape):
    return xp.full(shape, np.nan, dtype=xp.float32)


def dw_case(N, C, H, W, S):
    x = rng.standard_normal((N, C, H, W)).astype(np.float32) * 2
    w = rng.standard_normal((C, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(C).astype(np.float32)
    return x, w, b, reference.conv2d(x, w, b, stride=S, pad=1, groups=C)


DW_SHAPES = [(2, 3, 9, 7, 1), (1, 5, 13, 11, 2), (3, 4, 7, 7, 1), (1, 2, 37, 35, 1), (2, 3, 36, 33, 2),
             (1, 7, 14, 14, 2), (2, 1, 1, 1, 1), (1, 2, 2, 3, 2),
             (2, 3, 13, 16, 1), (1, 4, 21, 24, 2)]   # rows of a multiple of 4 floats: float4 copies


@pytest.mark.parametrize("shape", DW_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("variant", ["naive", "tiled"])
def test_depthwise_matches_reference(shape, variant):
    N, C, H, W, S = shape
    x, w, b, ref = dw_case(*shape)
    out = poisoned(ref.shape)
    y = depthwise_conv2d(dev(x), dev(w), dev(b), stride=S, activation="relu6", variant=variant, out=out)
    # Against the terms' sizes: at 1x1 each output is one product and a bias, which may all but cancel.
    terms = reference.conv2d(np.abs(x), np.abs(w), np.abs(b), stride=S, pad=1, groups=C)
    assert y is out and rel_error(y, np.clip(ref, 0, 6), terms=terms) < 1e-5


@pytest.mark.check
@pytest.mark.parametrize("activation", [None, "relu", "relu6"], ids=str)
def test_depthwise_activations_and_no_bias(activation):
    x, w, b, ref = dw_case(2, 6, 11, 9, 1)
    L = depthwise_layer(6, 11, 9, 1)
    for variant in ("naive", "tiled"):
        y = DepthwiseConv2d(dev(w), dev(b), L, activation=activation, variant=variant)(dev(x), poisoned(ref.shape))
        assert rel_error(y, ACT[activation](ref)) < 1e-5
        y0 = DepthwiseConv2d(dev(w), None, L, variant=variant)(dev(x), poisoned(ref.shape))
        assert rel_error(y0, ref - b[None, :, None, None]) < 1e-5


# Tiles that leave ragged edges everywhere: rows not dividing the output's, a column group cut short,
# fewer threads than items (each thread loops), planes per block not dividing N*C.
TILINGS = [Tiling(3, 2, 2, 10), Tiling(1, 1, 1, 5), Tiling(4, 3, 3, 9), Tiling(5, 4, 2, 64)]
# Whole planes: outputs staged in shared memory; a row per thread (depthwise_planes), also with
# fewer threads than rows (each loops) and ragged last blocks.
WHOLE = [lambda ho: Tiling(ho, 4, min(3, ho), 4 * 6, True), lambda ho: Tiling(ho, 3, 1, 3 * ho, by_rows=True),
         lambda ho: Tiling(ho, 4, 1, 8, by_rows=True), lambda ho: Tiling(ho, 1, 1, ho, by_rows=True)]


@pytest.mark.parametrize("tiling", TILINGS, ids=str)
@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_tilings(tiling, stride):
    x, w, b, ref = dw_case(3, 5, 13, 12, stride)
    y = depthwise_conv2d(dev(x), dev(w), dev(b), stride=stride, tiling=tiling, out=poisoned(ref.shape))
    assert rel_error(y, ref) < 1e-5


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_whole_plane_tiles_with_a_ragged_last_block(stride):
    """Tiles of whole planes are copied as one flat run per block (float4s where 4 planes' floats
    make whole 4-groups); 5 planes in blocks of 4 leave a last block of one plane, 49 floats."""
    H = 7 if stride == 1 else 13
    x, w, b, ref = dw_case(1, 5, H, H, stride)
    ho = ref.shape[2]
    for t in (Tiling(ho, 4, ho, 4 * 7), Tiling(ho, 4, 3, 8), Tiling(ho, 3, 2, 12)):
        y = depthwise_conv2d(dev(x), dev(w), dev(b), stride=stride, tiling=t, out=poisoned(ref.shape))
        assert rel_error(y, ref) < 1e-5, t


@pytest.mark.parametrize("make", WHOLE, ids=["staged", "by rows", "by rows, 8 threads", "by rows, 1 plane"])
@pytest.mark.parametrize("shape", [(3, 5, 7, 7, 1), (2, 3, 13, 14, 2), (1, 7, 5, 6, 1), (2, 3, 2, 3, 2)],
                         ids=lambda s: "x".join(map(str, s)))
def test_depthwise_whole_plane_variants(make, shape):
    N, C, H, W, S = shape
    x, w, b, ref = dw_case(*shape)
    t = make(ref.shape[2])
    y = depthwise_conv2d(dev(x), dev(w), dev(b), stride=S, activation="relu6", tiling=t, out=poisoned(ref.shape))
    # Against the terms' sizes: 2x3x2x3's twelve outputs of four products and a bias may nearly all be <= 0.
    terms = reference.conv2d(np.abs(x), np.abs(w), np.abs(b), stride=S, pad=1, groups=C)
    assert rel_error(y, np.clip(ref, 0, 6), terms=terms) < 1e-5, t


@pytest.mark.check
def test_by_rows_takes_small_whole_planes():
    with pytest.raises(ValueError, match="by_rows takes whole planes"):
        Tiling(4, 2, 1, 8, by_rows=True).check(depthwise_layer(3, 7, 7, 1))
    with pytest.raises(ValueError, match="by_rows takes whole planes"):
        Tiling(33, 1, 1, 33, by_rows=True).check(depthwise_layer(3, 33, 33, 1))


def test_default_tiling_fills_a_block_within_shared_memory():
    for C, H, W, S in [(32, 112, 112, 1), (96, 112, 112, 2), (144, 56, 56, 1), (960, 7, 7, 1), (3, 500, 900, 1)]:
        L = depthwise_layer(C, H, W, S)
        t = default_tiling(L)
        t.check(L)
        assert 64 <= t.threads <= 1024
    assert default_tiling(depthwise_layer(960, 7, 7, 1), planes_available=3).planes == 3


@pytest.mark.skipif(ON_GPU, reason="the memory, barrier and race checks are the CPU executor's")
@pytest.mark.parametrize("stride,W", [(1, 8), (2, 7)])
def test_depthwise_tiled_under_the_executor_checks(stride, W):
    """No read or write out of bounds, no barrier divergence, no shared-memory race (float4 copies of
    the tile at stride 1, scalar ones at stride 2: each module compiled with the checks takes half a
    minute, so two cover both strides and both kinds of copy)."""
    N, C, H = 1, 3, 9
    x, w, b, ref = dw_case(N, C, H, W, stride)
    L = depthwise_layer(C, H, W, stride)
    ho = L.out_hw[0]
    # strips; whole planes (a ragged last block), staged; a row per thread (6 threads: looping)
    for t in (Tiling(3, 2, 2, 8), Tiling(ho, 2, 3, 6, True), Tiling(ho, 2, 1, 6, by_rows=True)):
        mod = load("depthwise", defines={"DW_H": H, "DW_W": W, "DW_S": stride, **t.defines()}, check="all")
        set_constant(mod, "dw_bias", np.concatenate([np.zeros(3, np.float32), b]))   # has_bias 2, bias_at 3
        y = np.full(ref.shape, np.nan, dtype=np.float32)
        grid = (-(-N * C // t.planes),) if t.by_rows else (-(-ho // t.rows), -(-N * C // t.planes))
        mod.get_function(t.kernel)(grid, (t.threads,), (x, w.reshape(C, 9), b * np.nan, y) + ints(N * C, C, 2, 0, 3),
                                   shared_mem=t.shared_bytes(L))
        assert rel_error(y, ref) < 1e-5, t


def test_depthwise_bias_from_constant_memory_a_run_per_layer():
    """Layers sharing one module each upload their bias to a run of its constant array of their own;
    when no run is free a layer reads its bias from global memory, and a collected layer's run is
    free again."""
    import gc
    C, H, W = 2900, 5, 3                   # an odd plane size: a module of this test's own
    L = depthwise_layer(C, H, W, 1)
    layers, refs = [], []
    x, w, _, _ = dw_case(1, C, H, W, 1)
    for _ in range(3):                     # 3 x 2900 floats: over the 8192 of dw_bias
        b = rng.standard_normal(C).astype(np.float32)
        layers.append(DepthwiseConv2d(dev(w), dev(b), L))
        refs.append(reference.conv2d(x, w, b, pad=1, groups=C))
    ys = [d(dev(x), poisoned(r.shape)) for d, r in zip(layers, refs)]   # all three prepared, then run
    assert [d.bias_memory for d in layers] == ["constant", "constant", "global"]
    assert all(rel_error(y, r) < 1e-5 for y, r in zip(ys, refs))
    del layers[0], ys
    gc.collect()
    b = rng.standard_normal(C).astype(np.float32)
    again = DepthwiseConv2d(dev(w), dev(b), L)
    y = again(dev(x), poisoned(refs[0].shape))
    assert again.bias_memory == "constant"
    assert rel_error(y, reference.conv2d(x, w, b, pad=1, groups=C)) < 1e-5
    assert rel_error(layers[0](dev(x)), refs[1]) < 1e-5     # the second layer's run was left alone


@pytest.mark.check
def test_depthwise_refuses_bad_input():
    L = depthwise_layer(4, 8, 8, 1)
    w, b = dev(np.ones((4, 1, 3, 3), np.float32)), dev(np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="3x3 depthwise"):
        DepthwiseConv2d(w, b, ConvLayer(4, 8, 8, 4, 5, 1, 2, 4))
    with pytest.raises(ValueError, match="3x3 depthwise"):
        DepthwiseConv2d(w, b, ConvLayer(4, 8, 8, 8, 3, 1, 1, 4))
    with pytest.raises(ValueError, match=r"w must have shape \(4, 1, 3, 3\)"):
        DepthwiseConv2d(dev(np.ones((4, 1, 1, 9), np.float32)), b, L)
    with pytest.raises(ValueError, match="activation must be"):
        DepthwiseConv2d(w, b, L, activation="tanh")
    with pytest.raises(ValueError, match="variant"):
        DepthwiseConv2d(w, b, L, variant="fast")
    with pytest.raises(ValueError, match="shared memory"):
        DepthwiseConv2d(w, b, depthwise_layer(4, 64, 4000, 1), tiling=Tiling(32, 1, 8, 500))
    layer = DepthwiseConv2d(w, b, L)
    with pytest.raises(ValueError, match=r"x must be \(N, 4, 8, 8\)"):
        layer(dev(np.ones((1, 4, 8, 9), np.float32)))
    with pytest.raises(TypeError, match="float32"):
        layer(dev(np.ones((1, 4, 8, 8), np.float64)))
    x = dev(np.ones((1, 4, 8, 8), np.float32))
    with pytest.raises(ValueError, match="shares memory"):
        layer(x, out=x)


# Planes of 63 pixels (scalar stores) and of 48 (float4 stores: 4 neighbouring pixels of one row).
@pytest.mark.parametrize("layer", [ConvLayer(13, 9, 7, 11, 1), ConvLayer(13, 8, 6, 11, 1), ConvLayer(5, 12, 8, 7, 3, 1, 1)],
                         ids=lambda L: L.key)
@pytest.mark.parametrize("splits", [None, 3])
@pytest.mark.parametrize("activation", [None, "relu6"], ids=str)
def test_implicit_relu6_and_fused_residual(layer, splits, activation):
    L = layer   # 1x1 layers as MobileNetV2's projections, and a 3x3 one
    x = rng.standard_normal((3, L.C, L.H, L.W)).astype(np.float32)
    w = rng.standard_normal((L.M, L.C, L.K, L.K)).astype(np.float32)
    b = rng.standard_normal(L.M).astype(np.float32)
    ref = reference.conv2d(x, w, b, pad=L.pad)
    r = rng.standard_normal(ref.shape).astype(np.float32) * 3
    conv = ImplicitConv2d(dev(w), dev(b), L, activation=activation, residual=True)
    y = conv(dev(x), poisoned(ref.shape), residual=dev(r), splits=splits)
    assert rel_error(y, ACT[activation](ref + r)) < 1e-5
    plain = ImplicitConv2d(dev(w), dev(b), L, activation="relu6")
    assert rel_error(plain(dev(x), poisoned(ref.shape), splits=splits), np.clip(ref, 0, 6)) < 1e-5
    # An output one float past an aligned start: the kernel must fall back to scalar stores.
    big = poisoned((int(np.prod(ref.shape)) + 1,))
    out = big[1:].reshape(ref.shape)
    y = conv(dev(x), out, residual=dev(r), splits=splits)
    assert rel_error(out, ACT[activation](ref + r)) < 1e-5


def test_implicit_residual_is_checked():
    L = ConvLayer(4, 5, 5, 6, 1)
    w, b = dev(np.ones((6, 4, 1, 1), np.float32)), dev(np.zeros(6, np.float32))
    x = dev(np.ones((2, 4, 5, 5), np.float32))
    with pytest.raises(ValueError, match="pass residual="):
        ImplicitConv2d(w, b, L, residual=True)(x)
    with pytest.raises(ValueError, match="without residual=True"):
        ImplicitConv2d(w, b, L)(x, residual=dev(np.ones((2, 6, 5, 5), np.float32)))
    conv = ImplicitConv2d(w, b, L, residual=True)
    with pytest.raises(ValueError, match="output's shape"):
        conv(x, residual=dev(np.ones((2, 6, 5, 4), np.float32)))
    r = dev(np.ones((2, 6, 5, 5), np.float32))
    with pytest.raises(ValueError, match="shares memory"):
        conv(x, out=r, residual=r)
    with pytest.raises(TypeError, match="residual must be True or False"):
        ImplicitConv2d(w, b, L, residual="yes")
    with pytest.raises(ValueError, match="activation must be"):
        ImplicitConv2d(w, b, L, activation="relu7")


@pytest.mark.check
@pytest.mark.parametrize("shape", [(2, 5, 7, 7), (1, 3, 1, 1), (3, 2, 13, 11), (1, 40, 2, 33), (3, 37, 2, 2),
                                   (2, 70, 3, 3), (3, 70, 8, 8), (2, 96, 7, 7), (1, 65, 5, 13)])
def test_global_avg_pool(shape):
    """Planes of 1 to 143 values: groups of 1 to 32 lanes, the last block's last groups without a plane."""
    x = rng.standard_normal(shape).astype(np.float32)
    out = poisoned(shape[:2])
    assert global_avg_pool(dev(x), out=out) is out
    ref, terms = reference.global_avg_pool(x), reference.global_avg_pool(np.abs(x))   # a few means may cancel
    assert rel_error(out, ref, terms=terms) < 1e-6
    assert rel_error(GlobalAvgPool()(dev(x)), ref, terms=terms) < 1e-6


@pytest.mark.check
@pytest.mark.parametrize("hw", [(7, 7), (11, 13)])
def test_global_avg_pool_unaligned_and_nan(hw):
    """x starting 4 bytes past a 16-byte boundary, and NaN: a plane holding one has a NaN mean, as in
    PyTorch; the other planes' stay finite."""
    N, C = 2, 70
    size = N * C * hw[0] * hw[1]
    base = rng.standard_normal(size + 1).astype(np.float32)
    base[1 + 3 * hw[0] * hw[1] + 5] = np.nan                      # plane 3 of the view
    buf = dev(base)
    x = buf[1:].reshape(N, C, *hw)
    out = poisoned((N, C))
    global_avg_pool(x, out=out)
    host = base[1:].reshape(N, C, *hw)
    ref = reference.global_avg_pool(host)
    got = to_numpy(out)
    assert np.isnan(got[0, 3]) and np.isnan(ref[0, 3])
    finite = ~np.isnan(ref)
    assert np.isfinite(got[finite]).all()
    assert rel_error(got[finite], ref[finite], terms=reference.global_avg_pool(np.abs(host))[finite]) < 1e-6


@pytest.mark.check
def test_floor_bytes():
    assert floor_bytes(depthwise_layer(512, 32, 32, 1), 128) == 4 * 128 * 512 * 2 * 32 * 32


# --- depthwise and projection fused ---------------------------------------------------------------
def dwp_case(N, C, H, W, S, M):
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    wdw = rng.standard_normal((C, 1, 3, 3)).astype(np.float32)
    bdw = rng.standard_normal(C).astype(np.float32)
    wp = (rng.standard_normal((M, C, 1, 1)) / np.sqrt(C)).astype(np.float32)
    bp = rng.standard_normal(M).astype(np.float32)
    d = reference.relu6(reference.conv2d(x, wdw, bdw, stride=S, pad=1, groups=C))
    return (x, wdw, bdw, wp, bp), reference.conv2d(d, wp, bp)


@pytest.mark.parametrize("tiles", [ProjectTiles(), ProjectTiles(64, 64, 8), ProjectTiles(32, 32, 4)], ids=str)
@pytest.mark.parametrize("shape", [(2, 13, 7, 7, 1, 11), (3, 9, 10, 9, 2, 37), (1, 70, 5, 6, 1, 5)],
                         ids=lambda s: "x".join(map(str, s)))
def test_depthwise_project_matches_the_two_layers(shape, tiles):
    N, C, H, W, S, M = shape
    (x, wdw, bdw, wp, bp), ref = dwp_case(*shape)
    layer = depthwise_layer(C, H, W, S)
    plain = DepthwiseProject(*(dev(a) for a in (wdw, bdw, wp, bp)), layer, tiles=tiles)
    y = plain(dev(x), poisoned(ref.shape))
    assert rel_error(y, ref) < 1e-5
    r = rng.standard_normal(ref.shape).astype(np.float32)
    skip = DepthwiseProject(*(dev(a) for a in (wdw, bdw, wp, bp)), layer, residual=True, tiles=tiles)
    assert rel_error(skip(dev(x), poisoned(ref.shape), residual=dev(r)), ref + r) < 1e-5


@pytest.mark.skipif(ON_GPU, reason="the memory, barrier and race checks are the CPU executor's")
def test_depthwise_project_under_the_executor_checks():
    N, C, H, W, S, M = 1, 9, 5, 6, 2, 7
    (x, wdw, bdw, wp, bp), ref = dwp_case(N, C, H, W, S, M)
    t = ProjectTiles(32, 32, 4)
    ho, wo = ref.shape[2:]
    mod = load("dw_project", defines={"DP_C": C, "DP_H": H, "DP_W": W, "DP_S": S, "DP_M": M, "DP_BM": t.bm,
                                      "DP_BN": t.bn, "DP_BK": t.bk}, check="all")
    y = np.full(ref.shape, np.nan, dtype=np.float32)
    wpt = np.ascontiguousarray(wp.reshape(M, C).T)
    mod.get_function("dw_project")((-(-N * ho * wo // t.bn), -(-M // t.bm)), (t.threads,),
                                   (x, wdw.reshape(C, 9), bdw, wpt, bp, bp, y) + ints(N, 0))
    assert rel_error(y, ref) < 1e-5


@pytest.mark.check
def test_depthwise_project_refuses_bad_input():
    (x, wdw, bdw, wp, bp), ref = dwp_case(1, 4, 6, 6, 1, 3)
    args = [dev(a) for a in (wdw, bdw, wp, bp)]
    with pytest.raises(ValueError, match="not a 3x3 depthwise layer"):
        DepthwiseProject(*args, ConvLayer(4, 6, 6, 4, 3, 1, 1, 1))
    with pytest.raises(ValueError, match=r"wp must be \(M, 4, 1, 1\)"):
        DepthwiseProject(*args[:2], dev(np.ones((3, 5, 1, 1), np.float32)), args[3], depthwise_layer(4, 6, 6, 1))
    with pytest.raises(ValueError, match="bm, bn multiples of 4"):
        DepthwiseProject(*args, depthwise_layer(4, 6, 6, 1), tiles=ProjectTiles(30, 64, 8))
    layer = DepthwiseProject(*args, depthwise_layer(4, 6, 6, 1), residual=True)
    with pytest.raises(ValueError, match="pass residual="):
        layer(dev(x))
    with pytest.raises(ValueError, match="output's shape"):
        layer(dev(x), residual=dev(np.ones((1, 3, 6, 5), np.float32)))
    with pytest.raises(ValueError, match=r"x must be \(N, 4, 6, 6\)"):
        layer(dev(np.ones((1, 4, 6, 7), np.float32)), residual=dev(np.ones((1, 3, 6, 7), np.float32)))


# --- the network ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def weights():
    return mb.synthetic_weights()


def test_parameters_are_torchvisions(weights):
    assert mb.parameter_count() == 3_504_872          # torchvision's mobilenet_v2(), width 1.0
    shapes = mb.parameter_shapes()
    assert shapes["features.0.0.weight"] == (32, 3, 3, 3)
    assert shapes["features.1.conv.0.0.weight"] == (32, 1, 3, 3)     # t=1: depthwise first
    assert shapes["features.1.conv.1.weight"] == (16, 32, 1, 1)      # ... then the bare projection
    assert shapes["features.1.conv.2.running_var"] == (16,)
    assert shapes["features.2.conv.1.0.weight"] == (96, 1, 3, 3)
    assert shapes["features.17.conv.2.weight"] == (320, 960, 1, 1)
    assert shapes["features.18.0.weight"] == (1280, 320, 1, 1)
    assert shapes["classifier.1.weight"] == (1000, 1280)
    bs = mb.blocks()
    assert len(bs) == 17 and sum(b.residual for b in bs) == 10
    assert bs[-1].out_hw == (7, 7)


@pytest.mark.check
def test_folding_equals_conv_then_batch_norm(weights):
    folded = mb.fold_batch_norm(weights)
    x = rng.standard_normal((1, 96, 9, 9))
    w, b = folded["features.2.conv.1"]                 # a depthwise layer's conv + BN
    bn = {p: weights[f"features.2.conv.1.1.{p}"].astype(np.float64) for p in mb.BN_PARTS}
    h = reference.conv2d(x, weights["features.2.conv.1.0.weight"], None, pad=1, groups=96)
    want = (h - bn["running_mean"][None, :, None, None]) / np.sqrt(bn["running_var"] + mb.BN_EPS)[None, :, None, None] \
        * bn["weight"][None, :, None, None] + bn["bias"][None, :, None, None]
    assert rel_error(reference.conv2d(x, w, b, pad=1, groups=96), want) < 1e-6


@pytest.mark.check
def test_weights_are_checked(weights):
    bad = dict(weights)
    del bad["features.5.conv.1.1.running_var"]
    with pytest.raises(ValueError, match="running_var' is missing"):
        mb.MobileNetV2(bad, input_hw=(32, 32))
    with pytest.raises(ValueError, match="depthwise must be one of"):
        mb.MobileNetV2(weights, input_hw=(32, 32), depthwise="any")
    bad = {**weights, "features.3.conv.0.0.weight": weights["features.3.conv.0.0.weight"][:, :, :, :0]}
    with pytest.raises(ValueError, match="must be float32"):
        mb.fold_batch_norm(bad)
    bad = {**weights, "classifier.1.bias": weights["classifier.1.bias"].copy()}
    bad["classifier.1.bias"][3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        mb.check_weights(bad)


@pytest.mark.parametrize("depthwise,fuse", [("tiled", 0), ("naive", 0), ("tiled", 3), ("auto", 0)])
def test_network_matches_float64_reference(weights, depthwise, fuse):
    """At 40x40 (planes 20 .. 2; the same layers as at 224, smaller planes), batch 2; fuse=3: the
    blocks of 3x3 and 2x2 planes with depthwise and projection as one kernel; depthwise="auto": the
    depthwise layers on labkit.conv2d's auto choice (untuned on the executor: depthwise_any.cu)."""
    hw = (40, 40)
    x = rng.standard_normal((2, 3) + hw).astype(np.float32)
    ref = mb.reference_logits(weights, x)
    net = mb.MobileNetV2(weights, input_hw=hw, depthwise=depthwise, fuse_below=fuse)
    assert len(net.fused) == (11 if fuse else 0)
    logits = to_numpy(net.logits(dev(x)))
    assert rel_error(logits, ref) < 1e-4
    # The same five classes in the same order, but for logits nearer each other than float32's error
    # (the reference's logits at our top five are its five largest, each within twice the largest error).
    ours = np.take_along_axis(ref, np.argsort(-logits, axis=1)[:, :5], axis=1)
    assert (np.abs(ours - -np.sort(-ref, axis=1)[:, :5]) <= 2 * np.abs(logits - ref).max()).all()
    plan = net.plan(2)
    plan.x[...] = dev(x)
    probs = to_numpy(plan.run())                # the whole pass as one CUDA graph on a GPU
    assert rel_error(probs, reference.softmax(ref)) < 1e-4
    with pytest.raises(ValueError, match=r"x must be \(N, 3, 40, 40\)"):
        net(dev(np.zeros((1, 3, 32, 32), np.float32)))
