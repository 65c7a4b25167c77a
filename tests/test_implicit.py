"""labkit.ops.implicit: the implicit-GEMM convolutions (FP32 everywhere, TF32 on a GPU) against the
float64 reference, on odd shapes with stride, padding and groups, into poisoned output buffers."""
from __future__ import annotations

import json

import numpy as np
import pytest

import labkit
from labkit import reference
from labkit.checks import rel_error, to_numpy
from labkit.ladder import implicit as study
from labkit.ops import implicit
from labkit.ops.implicit import ConvLayer, ImplicitConv2d, Tiles, conv2d_implicit
from labkit.ops.pool_pad import channels_last_copy


rng = np.random.default_rng()
ON_GPU = labkit.backend() == "cuda"

CONVS = [  # N, C, H, W, M, K, stride, pad, groups
    (2, 3, 21, 19, 5, 3, 1, 1, 1), (1, 3, 35, 35, 8, 11, 4, 0, 1), (2, 8, 13, 13, 6, 5, 1, 2, 2),
    (1, 4, 9, 11, 4, 3, 2, 1, 4), (3, 2, 10, 7, 3, 1, 1, 0, 1), (1, 6, 7, 9, 66, 3, 1, 1, 3)]
FP32_TILES = [Tiles("fp32", bm=32, bn=64, bk=8, tm=4, tn=4), Tiles("fp32", bm=64, bn=128, bk=16, tm=8, tn=8),
              Tiles("fp32", bm=128, bn=64, bk=8, tm=8, tn=4)]
TF32_TILES = [Tiles("tf32", bm=64, bn=64, bk=16, wm=2, wn=2, stages=2),
              Tiles("tf32", bm=128, bn=128, bk=16, wm=2, wn=4, stages=4, minb=2),   # 69 KiB: opts in past 48
              Tiles("tf32", bm=96, bn=256, bk=8, wm=2, wn=4, stages=3),
              # gathering from the channels-last copy: 4, 8 and 2 copies of 4 channels down a column
              Tiles("tf32", bm=64, bn=64, bk=16, wm=2, wn=2, stages=2, layout="nhwc"),
              Tiles("tf32", bm=128, bn=128, bk=32, wm=2, wn=4, stages=3, minb=2, layout="nhwc"),
              Tiles("tf32", bm=96, bn=256, bk=8, wm=2, wn=4, stages=3, layout="nhwc")]


def dev(a):
    return labkit.xp.asarray(a)


def case(N, C, H, W, M, K, stride, pad, groups):
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = (rng.standard_normal((M, C // groups, K, K)) / np.sqrt(C // groups * K * K)).astype(np.float32)
    b = rng.standard_normal(M).astype(np.float32)
    return x, w, b, reference.conv2d(x, w, b, stride=stride, pad=pad, groups=groups)


@pytest.mark.parametrize("shape", CONVS, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("tiles", FP32_TILES, ids=Tiles.short)
def test_fp32_matches_reference(shape, tiles):
    N, C, H, W, M, K, stride, pad, groups = shape
    x, w, b, ref = case(*shape)
    out = labkit.xp.full(ref.shape, np.nan, dtype=labkit.xp.float32)   # poisoned: every element must be written
    y = conv2d_implicit(dev(x), dev(w), dev(b), stride=stride, pad=pad, groups=groups, tiles=tiles, out=out)
    assert y is out and rel_error(y, ref) < 1e-5


@pytest.mark.check
@pytest.mark.parametrize("activation", ["relu", "tanh", None], ids=str)
def test_fused_bias_and_activation(activation):
    x, w, b, ref = case(2, 5, 12, 10, 7, 3, 1, 1, 1)
    act = {"relu": lambda v: np.maximum(v, 0), "tanh": np.tanh, None: lambda v: v}[activation]
    y = conv2d_implicit(dev(x), dev(w), dev(b), pad=1, activation=activation)
    assert rel_error(y, act(ref)) < 1e-5
    y0 = conv2d_implicit(dev(x), dev(w), None, pad=1)   # no bias: the kernel must not add one
    assert rel_error(y0, ref - b[None, :, None, None]) < 1e-5


@pytest.mark.check
def test_layer_object_prepares_weights_once_and_reruns():
    layer = ConvLayer(6, 11, 9, 10, 3, stride=2, pad=1, groups=2)
    x, w, b, ref = case(3, *layer[:8])
    conv = ImplicitConv2d(dev(w), dev(b), layer)
    assert tuple(conv.wt.shape) == (2, 3 * 9, 5)       # (G, C/G*K*K, M/G): each group's W transposed
    for _ in range(2):
        assert rel_error(conv(dev(x)), ref) < 1e-5
    x2 = rng.standard_normal((1, 6, 11, 9)).astype(np.float32)   # another batch size, same module
    assert rel_error(conv(dev(x2)), reference.conv2d(x2, w, b, stride=2, pad=1, groups=2)) < 1e-5


@pytest.mark.gpu     # TF32 runs on the tensor cores (conv_implicit_tf32.cu declares requires-gpu)
@pytest.mark.parametrize("shape", CONVS, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("tiles", TF32_TILES, ids=Tiles.short)
def test_tf32_matches_reference_within_tf32_rounding(shape, tiles):
    N, C, H, W, M, K, stride, pad, groups = shape
    x, w, b, ref = case(*shape)
    if tiles.nhwc and groups > 1 and (C // groups) % 4:   # one group: any C (rounded up to 4 in the copy)
        with pytest.raises(ValueError, match="C/groups = .* not a multiple of 4"):
            conv2d_implicit(dev(x), dev(w), dev(b), stride=stride, pad=pad, groups=groups, precision="tf32",
                            tiles=tiles)
        return
    out = labkit.xp.full(ref.shape, np.nan, dtype=labkit.xp.float32)
    y = conv2d_implicit(dev(x), dev(w), dev(b), stride=stride, pad=pad, groups=groups, precision="tf32",
                        tiles=tiles, out=out)
    err = rel_error(y, ref)
    assert err < 3e-3          # TF32 keeps 10 mantissa bits: about 1e-3 per truncated operand
    assert err > 1e-7          # ... and it is really TF32, not FP32
    y_rn = conv2d_implicit(dev(x), dev(w), dev(b), stride=stride, pad=pad, groups=groups, precision="tf32",
                           tiles=tiles, round_tf32=True)
    assert 1e-7 < rel_error(y_rn, ref) < 2e-3


def unpack_tf32(wp, layer, tiles, rows):
    """pack_weights_tf32's inverse: (G, MG, rows) from (G, MB, KT, BK*BM)."""
    G, mb, kt, _ = wp.shape
    a = wp.reshape(G, mb, kt, tiles.bk // 8, tiles.bm // 16, 8, 4, 2, 2)   # G, MB, KT, kb, mi, gid, tig, kh, mh
    a = a.transpose(0, 1, 4, 8, 5, 2, 3, 7, 6).reshape(G, mb * tiles.bm, kt * tiles.bk)
    return a[:, :layer.M // G, :rows]


@pytest.mark.parametrize("layer", [ConvLayer.of(5, 9, 8, 7, (3, 2), (2, 1), (1, 0), (1, 2)),   # C4 = 8: 3 zero channels
                                   ConvLayer.of(8, 7, 6, 6, 3, 1, 2, 2, groups=2),             # 4 channels a group
                                   ConvLayer.of(3, 13, 11, 10, 5, 3, 2)], ids=str)            # an RGB stem
def test_nhwc_taps_and_packing_make_the_convolution(layer):
    """The NHWC kernel's GEMM done in NumPy, as the kernel does it: each column of X_g gathered 4 rows at a
    time through k_taps(nhwc) from pool_pad.cu's channels-last copy (run here), times the weights
    pack_weights_tf32 packed for NHWC tiles, unpacked.  The GPU kernel reads the same table and packing."""
    N, tiles = 2, Tiles("tf32", bm=32, bn=64, bk=16, wm=2, wn=2, layout="nhwc")
    C, H, W, G = layer.C, layer.H, layer.W, layer.groups
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((layer.M, C // G) + layer.kernel_hw).astype(np.float32)
    c4 = implicit.channels4(C)
    x4 = dev(np.full((N, H, W, c4), np.nan, np.float32))               # poisoned: every value is written
    channels_last_copy(N, C, H * W)(dev(x), x4)
    x4 = to_numpy(x4).reshape(-1)
    taps = implicit.k_taps(layer, tiles.bk, nhwc=True)
    rows = layer.kernel_hw[0] * layer.kernel_hw[1] * implicit.channels4(C // G)
    wg = unpack_tf32(to_numpy(implicit.pack_weights_tf32(dev(w), layer, tiles)), layer, tiles, rows)
    (Ho, Wo), (SH, SW), (PH, PW) = layer.out_hw, layer.stride_hw, layer.pad_hw
    y = np.zeros((N, layer.M, Ho, Wo))
    for g in range(G):
        for n in range(N):
            for oh in range(Ho):
                for ow in range(Wo):
                    ih0, iw0 = oh * SH - PH, ow * SW - PW
                    base = ((n * H + ih0) * W + iw0) * c4 + g * (C // G)
                    col = np.zeros(rows)
                    for q, (off, hw) in enumerate(taps[:rows // 4]):
                        if 0 <= ih0 + (hw >> 16) < H and 0 <= iw0 + (hw & 0xFFFF) < W:
                            col[4 * q:4 * q + 4] = x4[base + off:base + off + 4]
                    y[n, g * (layer.M // G):(g + 1) * (layer.M // G), oh, ow] = wg[g] @ col
    assert (taps[rows // 4:, 1] >> 16 == 0x4000).all()          # past the last row: outside every image
    ref = reference.conv2d(x, implicit.round_to_tf32(w), None, stride=layer.stride_hw, pad=layer.pad_hw,
                           dilation=layer.dilation_hw, groups=G)
    assert rel_error(y, ref) < 1e-6


@pytest.mark.parametrize("C, HW", [(3, 37), (8, 5), (64, 45), (130, 33)])
def test_channels_last_copy_pads_to_whole_groups_of_4(C, HW):
    x = rng.standard_normal((3, C, HW)).astype(np.float32)
    c4 = implicit.channels4(C)
    y = dev(np.full((3, HW, c4), np.nan, np.float32))
    channels_last_copy(3, C, HW)(dev(x), y)
    want = np.zeros((3, HW, c4), np.float32)
    want[..., :C] = x.transpose(0, 2, 1)
    assert np.array_equal(to_numpy(y), want)


def test_a_table_past_constant_memory_is_refused_or_gathered_channels_last():
    big = ConvLayer(1024, 3, 3, 8, 3, pad=1)                  # 9,216 rows: past the NCHW table's 7,680
    nchw, nhwc = Tiles("tf32", bm=64, bn=64, bk=16, wm=2, wn=2), Tiles("tf32", bm=64, bn=64, bk=16, wm=2, wn=2,
                                                                        layout="nhwc")
    assert not implicit.taps_fit(big, nchw) and implicit.taps_fit(big, nhwc)
    assert implicit.default_tiles(big, "tf32").nhwc
    assert all(t.nhwc for t in implicit.candidates(big, "tf32"))
    if ON_GPU:
        with pytest.raises(ValueError, match="exceeds constant memory.*use layout='nhwc'"):
            ImplicitConv2d(dev(np.zeros((8, 1024, 3, 3), np.float32)), None, big, precision="tf32", tiles=nchw)


@pytest.mark.check
def test_k_taps_table():
    layer = ConvLayer(4, 9, 7, 6, 3, pad=1, groups=2)          # KG = 2 * 3 * 3 = 18 rows
    taps = implicit.k_taps(layer, 16)
    assert taps.shape == (32, 2) and taps.dtype == np.int32
    k = 13                                                   # c = 1, kh = 1, kw = 1
    assert tuple(taps[k]) == ((1 * 9 + 1) * 7 + 1, (1 << 16) | 1)
    assert (taps[18:, 1] >> 16 == 0x4000).all()               # past KG: outside every image


@pytest.mark.check
def test_tf32_on_the_cpu_executor_says_it_needs_a_gpu():
    if ON_GPU:
        pytest.skip("on a GPU TF32 runs (the test above); this checks the CPU executor's refusal")
    x, w, b, _ = case(1, 3, 8, 8, 4, 3, 1, 1, 1)
    with pytest.raises(RuntimeError, match="tensor cores.*CPU executor runs precision='fp32'"):
        conv2d_implicit(dev(x), dev(w), dev(b), pad=1, precision="tf32")


@pytest.mark.parametrize("bad, match", [
    (dict(x=np.zeros((1, 3, 8, 8), np.float64)), "x must be float32"),
    (dict(x=np.zeros((3, 8, 8), np.float32)), "add the batch axis"),
    (dict(w=np.zeros((4, 2, 3, 3), np.float32)), r"w must have shape \(4, 3, 3, 3\)"),
    (dict(b=np.zeros(5, np.float32)), r"b must have shape \(4,\)"),
    (dict(groups=2), "groups=2 must divide C=3"),
    (dict(pad=0, dilation=5), r"a 3x3 window \(dilation 5x5\) with padding \(0, 0\) does not fit 8x8"),
    (dict(dilation=(1, 0)), "dilation must be a positive int"),
    (dict(pad=-1), "pad must be an int >= 0"),
    (dict(precision="fp16"), "precision must be 'fp32' or 'tf32'"),
    (dict(out=np.zeros((1, 4, 7, 7), np.float32)), r"out must have shape \(1, 4, 8, 8\)"),
])
def test_bad_input_is_refused_before_launch(bad, match):
    args = dict(x=np.zeros((1, 3, 8, 8), np.float32), w=np.zeros((4, 3, 3, 3), np.float32),
                b=np.zeros(4, np.float32), pad=1, groups=1, dilation=1, precision="fp32", out=None)
    args.update(bad)
    args = {k: dev(v) if isinstance(v, np.ndarray) else v for k, v in args.items()}
    with pytest.raises((ValueError, TypeError), match=match):
        conv2d_implicit(args.pop("x"), args.pop("w"), args.pop("b"), **args)


@pytest.mark.parametrize("tiles, match", [
    (Tiles("fp32", bm=64, bn=64, bk=6, tm=8, tn=8), "multiples of 4"),
    (Tiles("fp32", bm=128, bn=128, bk=32, tm=8, tn=8), "over 48 KiB"),
    (Tiles("fp32", bm=32, bn=128, bk=8, tm=8, tn=8), "multiple of bn=128"),
    (Tiles("tf32", bm=48, bn=64, bk=16, wm=2, wn=2), "multiple of 16\\*wm"),
    (Tiles("tf32", bm=128, bn=256, bk=32, wm=2, wn=4, stages=5), "over 227 KiB"),
    (Tiles("tf32", bm=64, bn=64, bk=16, wm=2, wn=2, stages=1), "stages must be at least 2"),
    (Tiles("fp32", bm=64, bn=64, bk=8, tm=8, tn=8, layout="nhwc"), "'nhwc' with precision 'tf32'"),
    (Tiles("tf32", bm=64, bn=64, bk=16, wm=2, wn=2, layout="nchw4"), "layout must be one of"),
    (Tiles("tf32", bm=32, bn=8, bk=16, wm=2, wn=1, layout="nhwc"), "splitting the input tile's 8 x 4 copies"),
])
def test_bad_tiles_are_refused(tiles, match):
    with pytest.raises(ValueError, match=match):
        tiles.check()


@pytest.mark.check
def test_tuned_table_lookup(tmp_path, monkeypatch):
    layer = implicit.ALEXNET_CONVS["conv3"]
    table = tmp_path / "t.json"
    monkeypatch.setattr(implicit, "TABLE", table)
    assert implicit.tiles_for(layer, "fp32", device_name="GPU X") == implicit.default_tiles(layer, "fp32")
    best = Tiles("fp32", bm=64, bn=64, bk=16, tm=8, tn=4)
    study.record_tiles(layer, best, device_name="GPU X", median_ms=1.25, batch=128, table=table)
    study.record_tiles(layer, Tiles("tf32", bm=64, bn=128, bk=32, wm=2, wn=2), device_name="GPU X",
                          median_ms=0.5, batch=128, table=table)
    assert implicit.tiles_for(layer, "fp32", device_name="GPU X") == best      # kept beside the tf32 one
    assert implicit.tiles_for(layer, "tf32", device_name="GPU X").bk == 32
    assert implicit.tiles_for(layer, "fp32", device_name="GPU Y") == implicit.default_tiles(layer, "fp32")
    entry = json.loads(table.read_text())["gpus"]["GPU X"][layer.key]
    assert entry["fp32"]["median_ms"] == 1.25 and entry["tf32"]["median_ms"] == 0.5


@pytest.mark.parametrize("optin_kib, bk, minb", [(227, 32, 2), (163, 16, 2), (99, 16, 1)])
def test_the_tf32_default_follows_the_gpus_shared_memory(monkeypatch, optin_kib, bk, minb):
    """sm_90 holds two blocks of 32-deep k-tiles, sm_80 two of 16-deep ones, sm_86/89 one."""
    monkeypatch.setattr(implicit, "shared_optin_limit", lambda: optin_kib * 1024)
    t = implicit.default_tiles(implicit.ALEXNET_CONVS["conv2"], "tf32")
    assert (t.bk, t.minb, t.stages) == (bk, minb, 3)
    assert minb * (t.shared_bytes() + 1024) <= optin_kib * 1024 + 1024


def test_a_tf32_search_tries_channels_last_two_blocks_and_deep_k_tiles_first():
    cands = implicit.candidates(implicit.ALEXNET_CONVS["conv2"], "tf32")
    assert (cands[0].layout, cands[0].minb, cands[0].bk, cands[0].stages, cands[0].bm) == ("nhwc", 2, 32, 3, 128)
    first_nchw = next(i for i, t in enumerate(cands) if not t.nhwc)
    assert first_nchw == len(cands) // 2 and all(t.nhwc for t in cands[:first_nchw])   # each tile both ways
    first_one_block = next(i for i, t in enumerate(cands) if t.minb == 1)
    assert all(t.minb == 2 for t in cands[:first_one_block])
    conv1 = implicit.candidates(implicit.ALEXNET_CONVS["conv1"], "tf32")
    assert conv1[0].bm == 96                    # 96 output channels: the block's rows fit them
    # groups of 2 channels cannot start on 16-byte boundaries: no channels-last tiles offered
    assert not any(t.nhwc for t in implicit.candidates(ConvLayer(6, 9, 9, 6, 3, groups=3), "tf32"))
    assert implicit.default_tiles(ConvLayer(6, 9, 9, 6, 3, groups=3), "tf32").layout == "nchw"
    assert implicit.default_tiles(ConvLayer(3, 9, 9, 6, 3), "tf32").layout == "nhwc"   # one group: any C
    # a 1x1 convolution of a plane: NCHW first (its gather is coalesced rows; the copy an extra pass)
    pointwise = ConvLayer(32, 14, 14, 64, 1)
    assert implicit.default_tiles(pointwise, "tf32").layout == "nchw"
    assert not implicit.candidates(pointwise, "tf32")[0].nhwc and any(t.nhwc for t in implicit.candidates(pointwise, "tf32"))
    assert implicit.default_tiles(ConvLayer(4096, 1, 1, 10, 1), "tf32").nhwc          # a dense layer: no copy


def test_every_candidate_and_default_is_valid():
    for layer in implicit.ALEXNET_CONVS.values():
        for prec in implicit.PRECISIONS:
            implicit.default_tiles(layer, prec).check()
            cands = implicit.candidates(layer, prec)
            assert cands and all(t.precision == prec for t in cands)
            for t in cands:
                t.check()


def test_alexnet_layer_on_the_cpu_executor_at_batch_1():
    # The layer with the most columns per image; checked on a slice of the outputs to stay quick.
    layer = implicit.ALEXNET_CONVS["conv2"]
    x, w, b, ref = case(1, *layer[:8])
    y = ImplicitConv2d(dev(w), dev(b), layer)(dev(x))
    assert rel_error(to_numpy(y), ref) < 1e-5


def test_tf32_weights_are_packed_in_fragment_order():
    layer = ConvLayer(6, 5, 5, 40, 3, groups=2)               # MG = 20, KG = 27: both padded
    tiles = Tiles("tf32", bm=32, bn=64, bk=16, wm=2, wn=2)
    w = rng.standard_normal((40, 3, 3, 3)).astype(np.float32)
    wp = to_numpy(implicit.pack_weights_tf32(dev(w), layer, tiles))
    assert wp.shape == (2, 1, 2, 16 * 32)                     # (G, MB, KT, BK*BM)
    wg = implicit.round_to_tf32(w).reshape(2, 20, 27)
    for g, mb, t, kb, mi, gid, tig, kh, mh in [(1, 0, 1, 1, 1, 3, 2, 0, 0), (0, 0, 0, 0, 0, 7, 3, 1, 1),
                                                (1, 0, 0, 1, 0, 2, 1, 1, 0)]:
        m, k = mb * 32 + mi * 16 + mh * 8 + gid, t * 16 + kb * 8 + kh * 4 + tig
        got = wp[g, mb, t, ((kb * 2 + mi) * 32 + gid * 4 + tig) * 4 + mh + 2 * kh]
        assert got == (wg[g, m, k] if m < 20 and k < 27 else 0.0)
    assert np.count_nonzero(wp) == np.count_nonzero(wg)      # every weight once, zeros elsewhere


def test_round_to_tf32():
    v = np.array([1.0, 1 + 2**-11, 1 + 2**-10 + 2**-12, -3.14159], dtype=np.float32)
    r = implicit.round_to_tf32(v)
    assert r[0] == 1.0 and r[1] == 1 + 2**-10 and r[2] == 1 + 2**-10     # ties away from zero, then nearest
    assert (r.view(np.uint32) & 0x1FFF == 0).all() and abs(r[3] + 3.14159) < 2**-10 * 4


def test_small_batches_take_small_tiles_on_a_gpu():
    layer = implicit.ALEXNET_CONVS["conv3"]
    x, w, b, ref = case(1, *layer[:8])
    conv = ImplicitConv2d(dev(w), dev(b), layer)
    assert conv.blocks(conv.tiles, 1) == 6 and conv.blocks(implicit.SMALL_TILES["fp32"], 1) == 36
    if not ON_GPU:
        assert conv.tiles_at(1) == conv.tiles          # the CPU executor has no SMs to fill
        return
    for prec in implicit.PRECISIONS:
        conv = ImplicitConv2d(dev(w), dev(b), layer, precision=prec)
        assert conv.tiles_at(1) == implicit.SMALL_TILES[prec] and conv.tiles_at(128) == conv.tiles
        assert rel_error(conv(dev(x)), ref) < (1e-5 if prec == "fp32" else 3e-3)


@pytest.mark.parametrize("shape, splits", [((2, 8, 13, 13, 6, 5, 1, 2, 2), 3), ((1, 6, 7, 9, 66, 3, 1, 1, 3), 2),
                                           ((1, 3, 21, 19, 5, 3, 1, 1, 1), 100)], ids=str)
@pytest.mark.parametrize("activation", ["relu", None], ids=str)
def test_split_k_matches_reference(shape, splits, activation):
    N, C, H, W, M, K, stride, pad, groups = shape
    x, w, b, ref = case(*shape)
    layer = ConvLayer(C, H, W, M, K, stride, pad, groups)
    conv = ImplicitConv2d(dev(w), dev(b), layer, activation=activation,
                          tiles=Tiles("fp32", bm=32, bn=64, bk=8, tm=4, tn=4))
    made = conv.splits_at(N, splits)                   # 100 asks for more slices than there are k-tiles
    k_tiles = -(-layer.gemm_shape(N)[2] // 8)
    assert 1 < made <= min(splits, k_tiles) and conv.workspace_shape(N, splits) == (made, N, M) + layer.out_hw
    ws = labkit.xp.full(conv.workspace_shape(N, splits), np.nan, dtype=labkit.xp.float32)
    out = labkit.xp.full(ref.shape, np.nan, dtype=labkit.xp.float32)
    y = conv(dev(x), out=out, workspace=ws, splits=splits)
    want = np.maximum(ref, 0) if activation == "relu" else ref
    assert y is out and rel_error(y, want) < 1e-5
    with pytest.raises(ValueError, match=r"workspace must be float32"):
        conv(dev(x), workspace=labkit.xp.zeros((1, 1), dtype=labkit.xp.float32), splits=splits)
    with pytest.raises(ValueError, match="splits must be a positive int"):
        conv(dev(x), splits=0)


@pytest.mark.gpu     # TF32 runs on the tensor cores (conv_implicit_tf32.cu declares requires-gpu)
@pytest.mark.parametrize("shape, splits", [((2, 8, 13, 13, 6, 5, 1, 2, 2), 3), ((1, 6, 7, 9, 66, 3, 1, 1, 3), 2),
                                           ((1, 64, 13, 13, 96, 3, 1, 1, 1), 100)], ids=str)
def test_tf32_split_k_matches_reference(shape, splits):
    N, C, H, W, M, K, stride, pad, groups = shape
    x, w, b, ref = case(*shape)
    layer = ConvLayer(C, H, W, M, K, stride, pad, groups)
    conv = ImplicitConv2d(dev(w), dev(b), layer, activation="relu", precision="tf32", tiles=TF32_TILES[0])
    made = conv.splits_at(N, splits)
    assert 1 < made <= splits and conv.workspace_shape(N, splits) == (made, N, M) + layer.out_hw
    ws = labkit.xp.full(conv.workspace_shape(N, splits), np.nan, dtype=labkit.xp.float32)
    out = labkit.xp.full(ref.shape, np.nan, dtype=labkit.xp.float32)
    y = conv(dev(x), out=out, workspace=ws, splits=splits)
    assert y is out and rel_error(y, np.maximum(ref, 0)) < 3e-3


@pytest.mark.check
def test_split_k_is_chosen_where_blocks_are_few():
    layer = implicit.ALEXNET_CONVS["conv3"]
    _x, w, b, _ref = case(1, *layer[:8])
    conv = ImplicitConv2d(dev(w), dev(b), layer)
    if not ON_GPU:
        assert conv.splits_at(1) == 1 and conv.workspace_shape(1) is None   # nothing to fill on a CPU
        return
    sms = labkit.device().sm_count
    assert conv.splits_at(1) > 1 and conv.blocks(conv.tiles_at(1), 1) * conv.splits_at(1) >= sms
    assert conv.splits_at(128) == 1
