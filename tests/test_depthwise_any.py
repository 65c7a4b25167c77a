"""labkit.ops.depthwise_any: depthwise convolution of any geometry against the float64 reference, into
output buffers poisoned with NaN; NaN kept through ReLU and ReLU6 where PyTorch keeps it; bad input
refused before anything launches; the tiles' checks, defaults and candidates; the autotuner's bench.

The geometries are drawn afresh each run from one seed (every case's id says its geometry, and a
failure says the seed): ``LABKIT_TEST_SEED=<seed>`` draws the same cases and inputs again.  Under
pytest-xdist the workers draw the same cases from the run's id (they must collect the same tests).
"""
from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import dataclass

import numpy as np
import pytest

import labkit
from labkit import reference
from labkit.backends.limits import SHARED_MEM_PER_BLOCK
from labkit.checks import rel_error, to_numpy
from labkit.loader import load
from labkit.ops import depthwise_any as dwa
from labkit.ops.depthwise_any import (DepthwiseAnyConv2d, Tiling, config_of, default_tiling, depthwise_any_conv2d,
                                      depthwise_any_layer, floor_bytes, tiling_candidates, tiling_of)
from labkit.ops.plans import cdiv, ints
from labkit.shapes import ConvLayer

ON_GPU = labkit.backend() == "cuda"
ACTIVATIONS = {None: lambda v: v, "relu": lambda v: np.where(v < 0, 0.0, v),
               "relu6": lambda v: np.where(v < 0, 0.0, np.where(v > 6, 6.0, v))}   # NaN kept, as PyTorch does


def run_seed() -> int:
    """$LABKIT_TEST_SEED, else one drawn from the xdist run's id (the same in every worker), else a fresh one."""
    if os.environ.get("LABKIT_TEST_SEED"):
        return int(os.environ["LABKIT_TEST_SEED"])
    uid = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if uid:
        return int(hashlib.sha256(uid.encode()).hexdigest()[:8], 16)
    return random.SystemRandom().randrange(2**32)


SEED = run_seed()


def dev(a):
    return labkit.xp.asarray(a)


def reproduce(case_id: str) -> str:
    return f"(seed {SEED}: LABKIT_TEST_SEED={SEED} pytest tests/test_depthwise_any.py -k '{case_id}')"


@dataclass(frozen=True)
class Case:
    index: int
    N: int
    layer: ConvLayer
    bias: bool
    activation: str | None
    tiling: Tiling | None      # None: the default (through the autotuner's choice)

    @property
    def id(self) -> str:
        L = self.layer
        hw = lambda p: f"{p[0]}x{p[1]}"   # noqa: E731
        t = "default" if self.tiling is None else \
            f"r{self.tiling.rx}x{self.tiling.ry}t{self.tiling.tx}x{self.tiling.ty}p{self.tiling.planes}" \
            f"{'ws' if self.tiling.wshared else ''}"
        return (f"{self.index:02d}-n{self.N}c{L.C}-{L.H}x{L.W}-k{hw(L.kernel_hw)}-s{hw(L.stride_hw)}-p{hw(L.pad_hw)}"
                f"-d{hw(L.dilation_hw)}-{'bias' if self.bias else 'nobias'}-{self.activation}-{t}")


def small_tiling(r, layer: ConvLayer) -> Tiling:
    """A valid tile of a few threads, so that a small plane still spans several tiles (ragged ones)."""
    ho, wo = layer.out_hw
    while True:
        rx, ry = int(r.integers(1, 5)), int(r.integers(1, 5))
        t = Tiling(rx, ry, int(r.integers(1, min(6, cdiv(wo, rx)) + 1)), int(r.integers(1, min(6, cdiv(ho, ry)) + 1)),
                   int(r.integers(1, 4)), bool(r.random() < 0.5))
        try:
            t.check(layer)
            return t
        except ValueError:
            continue


def side(r, k: int, pad: int, dilation: int) -> int:
    """A plane side that holds one dilated window once padded, and up to 11 more; odd half the time."""
    n = max(1, dilation * (k - 1) + 1 - 2 * pad) + int(r.integers(0, 12))
    return n | 1 if r.random() < 0.5 else n


def draw_cases(count: int = 60) -> list[Case]:
    r = np.random.default_rng(SEED)
    cases = []
    for i in range(count):
        kh = int(r.integers(1, 8))
        kw = kh if r.random() < 0.4 else int(r.integers(1, 8))
        (sh, sw), (ph, pw), (dh, dw) = r.integers(1, 4, 2), r.integers(0, 5, 2), r.integers(1, 4, 2)
        H, W = side(r, kh, ph, dh), side(r, kw, pw, dw)
        layer = depthwise_any_layer(int(r.integers(1, 10)), H, W, (kh, kw), (int(sh), int(sw)), (int(ph), int(pw)),
                                    (int(dh), int(dw)))
        N = int(r.integers(1, 4))
        tiling = None
        if i % 3 == 1:        # one of the autotuner's candidates
            cands = tiling_candidates(layer, N)
            tiling = cands[int(r.integers(0, len(cands)))]
        elif i % 3 == 2:
            tiling = small_tiling(r, layer)
        cases.append(Case(i, N, layer, bool(r.random() < 0.5), [None, "relu", "relu6"][int(r.integers(0, 3))], tiling))
    return cases


CASES = draw_cases()


def inputs(case_seed: int, N: int, layer: ConvLayer, bias: bool = True):
    """x, w, b (or None) as float32 NumPy arrays, from the case's own generator."""
    r = np.random.default_rng(case_seed)
    x = r.standard_normal((N, layer.C, layer.H, layer.W)).astype(np.float32)
    w = (r.standard_normal((layer.C, 1) + layer.kernel_hw) / np.sqrt(layer.taps)).astype(np.float32)
    b = r.standard_normal(layer.C).astype(np.float32) if bias else None
    return x, w, b


def expected(x, w, b, layer: ConvLayer, activation=None):
    y = reference.conv2d(x, w, b, stride=layer.stride_hw, pad=layer.pad_hw, dilation=layer.dilation_hw,
                         groups=layer.C)
    return ACTIVATIONS[activation](y)


def poisoned(shape):
    return labkit.xp.full(shape, np.nan, dtype=labkit.xp.float32)


# --- any geometry against the float64 reference ---------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_any_geometry_matches_the_reference(case):
    L = case.layer
    x, w, b = inputs(SEED + case.index, case.N, L, case.bias)
    ref = expected(x, w, b, L, case.activation)
    out = poisoned(ref.shape)
    conv = DepthwiseAnyConv2d(dev(w), None if b is None else dev(b), L, activation=case.activation, tiling=case.tiling)
    y = conv(dev(x), out=out)
    err = rel_error(y, ref)
    assert y is out and err < 1e-5, f"relative error {err} with {conv.plan(case.N).tiling} {reproduce(case.id)}"


@pytest.mark.check
def test_the_one_call_function_takes_ints_and_pairs_and_runs_without_bias():
    L = depthwise_any_layer(4, 13, 10, (3, 5), stride=(2, 1), pad=(3, 1), dilation=(1, 2))
    x, w, b = inputs(SEED, 2, L)
    y = depthwise_any_conv2d(dev(x), dev(w), dev(b), stride=(2, 1), pad=(3, 1), dilation=(1, 2), activation="relu6")
    assert rel_error(y, expected(x, w, b, L, "relu6")) < 1e-5, reproduce("one_call")
    square = depthwise_any_layer(4, 13, 10, 3, stride=2, pad=1)
    _, w3, _ = inputs(SEED + 1, 2, square)
    y0 = depthwise_any_conv2d(dev(x), dev(w3), None, stride=2, pad=1, out=poisoned((2, 4) + square.out_hw))
    assert rel_error(y0, expected(x, w3, None, square)) < 1e-5, reproduce("one_call")


def test_a_layer_plans_each_batch_size_once_and_reruns():
    L = depthwise_any_layer(3, 12, 9, 3, 1, 1)
    x, w, b = inputs(SEED + 1000, 3, L)
    conv = DepthwiseAnyConv2d(dev(w), dev(b), L, activation="relu")
    for n in (3, 1, 3):
        assert rel_error(conv(dev(x[:n])), expected(x[:n], w, b, L, "relu")) < 1e-5, reproduce("plans")
    assert set(conv._plans) == {1, 3} and conv.plan(3) is conv.plan(3)
    # no tiling given: the autotuner's choice, which is the default on the CPU executor
    if not ON_GPU:
        assert conv.plan(3).tiling == default_tiling(L, 3 * L.C)


def test_tiles_along_both_axes_with_ragged_edges_and_planes_past_the_batch():
    """A 29x37 output in tiles of 3x6 and 4x4 outputs, 2 and 3 planes a block over 5 planes."""
    L = depthwise_any_layer(5, 31, 40, (3, 4), 1, (1, 0))
    x, w, b = inputs(SEED + 1001, 1, L)
    for t in (Tiling(rx=2, ry=3, tx=3, ty=1, planes=2), Tiling(rx=4, ry=1, tx=1, ty=4, planes=3, wshared=True)):
        y = DepthwiseAnyConv2d(dev(w), dev(b), L, tiling=t)(dev(x), out=poisoned((1, 5) + L.out_hw))
        assert rel_error(y, expected(x, w, b, L)) < 1e-5, f"{t} {reproduce('ragged')}"


def test_wide_planes_in_tiles_along_the_width_into_an_output_not_aligned_for_float4s():
    """1,030 and 1,024 columns: 17 and 16 tiles of 64 across; y one float past a 16-byte boundary
    (the scalar stores), then aligned (the float4 stores)."""
    for W in (1030, 1024):
        L = depthwise_any_layer(2, 6, W, 3, 1, 1)
        x, w, b = inputs(SEED + W, 1, L)
        ref = expected(x, w, b, L, "relu")
        buf = labkit.xp.full(ref.size + 1, np.nan, dtype=labkit.xp.float32)
        conv = DepthwiseAnyConv2d(dev(w), dev(b), L, activation="relu")
        plan = conv.plan(1)
        assert plan.tiling.tile_hw[1] == 64 and plan.grid[0] % cdiv(W, 64) == 0    # tiles across
        for out in (buf[1:].reshape(ref.shape), poisoned(ref.shape)):
            assert rel_error(conv(dev(x), out=out), ref) < 1e-5, f"W = {W} {reproduce('wide')}"


def test_padding_wider_than_the_kernel_gives_the_bias_alone_at_the_edges():
    L = depthwise_any_layer(2, 3, 4, (2, 1), 1, (4, 3))
    x, w, b = inputs(SEED + 1002, 1, L)
    y = to_numpy(DepthwiseAnyConv2d(dev(w), dev(b), L, activation="relu")(dev(x)))
    assert y.shape == (1, 2, 10, 10)
    edge = np.maximum(b, 0)[:, None]
    assert (y[0, :, 0, :] == edge).all() and (y[0, :, :, 0] == edge).all(), reproduce("wide_pad")
    assert rel_error(y, expected(x, w, b, L, "relu")) < 1e-5, reproduce("wide_pad")


# --- NaN where PyTorch has it -----------------------------------------------------------------------------
def covering(layer: ConvLayer, r: int, c: int) -> np.ndarray:
    """The outputs whose window holds input pixel (r, c): a boolean (Ho, Wo)."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = layer.kernel_hw, layer.stride_hw, layer.pad_hw, layer.dilation_hw
    ho, wo = layer.out_hw
    rows = {oh for oh in range(ho) for k in range(kh) if oh * sh - ph + k * dh == r}
    cols = {ow for ow in range(wo) for k in range(kw) if ow * sw - pw + k * dw == c}
    mask = np.zeros((ho, wo), dtype=bool)
    mask[np.ix_(sorted(rows), sorted(cols))] = True
    return mask


@pytest.mark.parametrize("activation", ["relu", "relu6"])
def test_a_nan_pixel_gives_nan_exactly_where_its_windows_reach(activation):
    L = depthwise_any_layer(3, 13, 12, (3, 2), (2, 1), (1, 2), (2, 3))
    x, w, b = inputs(SEED + 1003, 2, L)
    x[1, 2, 5, 5] = np.nan
    x[0, 1, 6, 5] = np.nan      # a row no window reads (stride 2, dilation 2, padding 1: odd rows only)
    y = to_numpy(DepthwiseAnyConv2d(dev(w), dev(b), L, activation=activation)(dev(x), out=poisoned((2, 3) + L.out_hw)))
    want = np.zeros(y.shape, dtype=bool)
    want[1, 2] = covering(L, 5, 5)
    assert 0 < want.sum() < want[1, 2].size and not covering(L, 6, 5).any()
    assert (np.isnan(y) == want).all(), reproduce("nan")
    ref = expected(x, w, b, L, activation)             # PyTorch's semantics, in float64
    assert (np.isnan(ref) == want).all()
    assert rel_error(np.where(want, 0, y), np.where(want, 0, ref)) < 1e-5


# --- bad input, refused before anything launches --------------------------------------------------------
def good():
    L = depthwise_any_layer(3, 9, 8, 3, 1, 1)
    x, w, b = inputs(SEED + 1004, 2, L)
    return L, dev(x), dev(w), dev(b)


@pytest.mark.check
def test_bad_input_is_refused_with_the_fix():
    L, x, w, b = good()
    with pytest.raises(TypeError, match="float32"):
        DepthwiseAnyConv2d(w.astype(labkit.xp.float64), b, L)
    with pytest.raises(ValueError, match=r"w must have shape \(3, 1, 3, 3\)"):
        DepthwiseAnyConv2d(w[:, :, :, :2].copy(), b, L)
    with pytest.raises(ValueError, match=r"groups = C, M a multiple of C"):
        DepthwiseAnyConv2d(w, b, ConvLayer.of(3, 9, 8, 3, 3, 1, 1, groups=1))
    with pytest.raises(ValueError, match="groups = C"):
        depthwise_any_conv2d(x, labkit.xp.concatenate([w, w], axis=1), b, pad=1)
    with pytest.raises(ValueError, match="does not fit"):                      # 7x7 window, 4x4 padded plane
        depthwise_any_conv2d(x[:, :, :2, :2].copy(), labkit.xp.ones((3, 1, 7, 7), dtype=labkit.xp.float32), pad=1)
    with pytest.raises(ValueError, match="no tile.*shared memory"):   # a 14,001-float row of window
        DepthwiseAnyConv2d(labkit.xp.ones((1, 1, 1, 3), dtype=labkit.xp.float32), None,
                           depthwise_any_layer(1, 2, 14001, (1, 3), dilation=(1, 7000)))
    with pytest.raises(ValueError, match="activation"):
        DepthwiseAnyConv2d(w, b, L, activation="tanh")
    with pytest.raises(TypeError, match="Tiling"):
        DepthwiseAnyConv2d(w, b, L, tiling={"rx": 4})
    conv = DepthwiseAnyConv2d(w, b, L)
    with pytest.raises(ValueError, match=r"x must be \(N, 3, 9, 8\)"):
        conv(x[:, :2].copy())
    with pytest.raises(ValueError, match="C-contiguous"):
        conv(x[:, :, :, ::-1])
    before = to_numpy(x).copy()
    with pytest.raises(ValueError, match="shares memory"):
        conv(x, out=x)
    with pytest.raises(ValueError, match=r"out must have shape \(2, 3, 9, 8\)"):
        conv(x, out=poisoned((2, 3, 8, 8)))
    assert np.array_equal(to_numpy(x), before)           # nothing ran into x
    assert conv._plans == {}                             # nor was anything planned


# --- the tiles --------------------------------------------------------------------------------------------
BIG = depthwise_any_layer(8, 512, 512, 7, 1, 3)


@pytest.mark.check
def test_tiling_check_refuses_with_the_fix():
    small = depthwise_any_layer(2, 9, 9, 3, 1, 1)
    refusals = [
        (Tiling(rx=0), small, "rx must be a positive int"),
        (Tiling(wshared=1), small, "wshared must be True or False"),
        (Tiling(4, 4, 16, 16, 8), BIG, "over 1024"),
        (Tiling(4, 4, 4, 1), small, "at most tx = 3"),
        (Tiling(1, 4, 1, 4), small, "ty = 3"),
        (Tiling(8, 16, 4, 4), BIG, "or wshared=True"),
        (Tiling(4, 8, 16, 8, 1, True), depthwise_any_layer(8, 512, 512, 9, 3, 4), "shared memory"),
    ]
    for t, layer, match in refusals:
        with pytest.raises(ValueError, match=match):
            t.check(layer)


LAYERS = [depthwise_any_layer(*a) for a in [
    (32, 1024, 1024, 3, 1, 1), (32, 1024, 1024, 3, 2, 1), (32, 128, 128, 7, 1, 3), (32, 256, 256, (5, 3), 1, 0, 2),
    (16, 56, 56, 11, 1, 5), (96, 7, 7, 3, 1, 1), (4, 1, 1, 1), (2, 5, 300, (1, 9), (1, 3), (0, 4), (1, 3))]]


@pytest.mark.parametrize("layer", LAYERS, ids=lambda L: L.key)
def test_defaults_and_candidates_are_valid_and_json_able(layer):
    t = default_tiling(layer)
    t.check(layer)
    assert 1 <= t.threads <= 1024 and t.shared_bytes(layer) <= SHARED_MEM_PER_BLOCK
    if min(layer.out_hw) >= 64:      # large planes: 64-column tiles, float4 stores
        assert (t.rx, t.tx) == (4, 16)
    assert default_tiling(layer, planes_available=3).planes <= 3
    cands = tiling_candidates(layer, 2)
    assert cands[0] == default_tiling(layer, 2 * layer.C) and len(set(cands)) == len(cands) <= 64
    for c in cands:
        c.check(layer)
        assert tiling_of(json.loads(json.dumps(config_of(c)))) == c
    assert floor_bytes(layer, 2) == 8 * layer.C * (layer.H * layer.W + layer.out_hw[0] * layer.out_hw[1])


def test_the_layout_takes_the_fewest_bank_conflicts():
    assert dwa.wavefronts(list(range(32)), 1) == 1                       # neighbouring floats: one wavefront
    assert dwa.wavefronts([2 * i for i in range(32)], 1) == 2            # every other float: two lanes a bank
    assert dwa.wavefronts([4 * i for i in range(32)], 4) == 4            # float4s side by side: the least
    # 8 threads along a row, 4 rows of them a warp: packed rows (a pitch of 10 floats) put two lanes on
    # some banks; a pitch of 24 puts each row's 8 lanes on 8 banks of their own
    L = depthwise_any_layer(1, 40, 8, 3, 1, 1)
    t = Tiling(rx=1, ry=1, tx=8, ty=8)
    pitch, ps = t.layout(L)
    assert t.input_hw(L) == (10, 10) and pitch == 24 and ps >= 10 * pitch
    cost = lambda p: dwa.wavefronts([lane // 8 * p + lane % 8 for lane in range(32)], 1)   # noqa: E731
    assert cost(24) == 1 < cost(10) == 2


# --- the autotuner's bench, and the launches a chooser across families builds ----------------------------
def test_the_bench_checks_candidates_and_catches_a_wrong_or_unwritten_output():
    L = depthwise_any_layer(3, 11, 9, (3, 5), (1, 2), (1, 2), (2, 1))
    x, w, b = inputs(SEED + 1005, 2, L)
    conv = DepthwiseAnyConv2d(dev(w), dev(b), L, activation="relu6")
    bench = dwa._DepthwiseAnyBench(conv, 2)
    configs = conv.configs(2)
    assert configs[0] == config_of(default_tiling(L, 2 * L.C))
    for config in configs[:2]:
        assert bench.check(bench.build(config)) is None, config
    run = bench.build(configs[0])

    def wrong():
        run()
        bench.y.reshape(-1)[bench.idx[-1]] += 1.0

    def unwritten():
        run()
        bench.y.reshape(-1)[-3:] = np.nan
    assert "sampled outputs wrong" in bench.check(wrong)
    assert "NaN (never written)" in bench.check(unwritten)


def test_the_bench_of_a_channel_multiplier_layer_passes_its_right_candidates():
    """With M = 2C the bench's output is (N, M, Ho, Wo): each candidate builds and passes its check."""
    xp = labkit.xp
    r = np.random.default_rng()
    L = ConvLayer.of(3, 11, 9, 6, (3, 5), (1, 2), (1, 2), (2, 1), 3)
    conv = DepthwiseAnyConv2d(xp.asarray(r.standard_normal((6, 1, 3, 5)).astype(np.float32)),
                              xp.asarray(r.standard_normal(6).astype(np.float32)), L, activation="relu6")
    bench = dwa._DepthwiseAnyBench(conv, 2)
    assert tuple(bench.y.shape) == (2, 6) + L.out_hw
    for config in conv.configs(2)[:2]:
        assert bench.check(bench.build(config)) is None, config


def test_build_launch_runs_a_candidate_on_given_buffers_checked_once():
    L = depthwise_any_layer(2, 10, 7, 3, 2, 2)
    x, w, b = inputs(SEED + 1006, 3, L)
    conv = DepthwiseAnyConv2d(dev(w), dev(b), L, activation="relu")
    y = poisoned((3, 2) + L.out_hw)
    launch = conv.build_launch(conv.configs(3)[-1], 3, dev(x), y)
    launch()
    assert rel_error(y, expected(x, w, b, L, "relu")) < 1e-5, reproduce("build_launch")
    with pytest.raises(ValueError, match="out must have shape"):
        conv.build_launch(conv.candidates(3)[0], 3, dev(x), poisoned((3, 2, 5, 5)))
    with pytest.raises(ValueError, match=r"x must have shape \(2, 2, 10, 7\)"):
        conv.build_launch(conv.candidates(3)[0], 2, dev(x), y)


# --- the executor's checks: no access out of bounds, no race, no barrier skipped -------------------------
@pytest.mark.skipif(ON_GPU, reason="the memory, barrier and race checks are the CPU executor's")
def test_ragged_tiles_under_the_executor_checks():
    L = depthwise_any_layer(3, 11, 9, (3, 2), (2, 1), (2, 1), (1, 2))
    x, w, b = inputs(SEED + 1007, 1, L)
    t = Tiling(rx=2, ry=2, tx=2, ty=3, planes=2, wshared=True)      # 2 planes a block over 3: one block half empty
    t.check(L)
    mod = load("depthwise_any", defines=dwa.module_defines(L, t), check="all")
    y = np.full((1, 3) + L.out_hw, np.nan, dtype=np.float32)
    mod.get_function("depthwise_any")((t.blocks(L, 3),), (t.threads,), (x, w.reshape(3, -1), b, y) + ints(3, 3, 1, 3),
                                      shared_mem=t.shared_bytes(L))
    assert rel_error(y, expected(x, w, b, L, "relu6")) < 1e-5, reproduce("executor_checks")


@pytest.mark.parametrize("mult, kernel, stride, pad, dilation", [(2, 3, 1, 1, 1), (3, (5, 3), (2, 1), (2, 0), 1),
                                                                 (2, 3, 2, 3, 2)])
def test_a_channel_multiplier_gives_each_channel_its_own_filters(mult, kernel, stride, pad, dilation):
    """M = mult * C: output channel m filters input channel m // mult (PyTorch's groups = C, M = mult * C)."""
    xp = labkit.xp
    r = np.random.default_rng()
    C, H, W = 3, 11, 9
    L = ConvLayer.of(C, H, W, mult * C, kernel, stride, pad, dilation, C)
    x = r.standard_normal((2, C, H, W)).astype(np.float32)
    w = r.standard_normal((mult * C, 1) + L.kernel_hw).astype(np.float32)
    b = r.standard_normal(mult * C).astype(np.float32)
    want = reference.relu6(reference.conv2d(x, w, b, stride=stride, pad=pad, dilation=dilation, groups=C))
    out = xp.full(want.shape, np.nan, dtype=xp.float32)
    DepthwiseAnyConv2d(xp.asarray(w), xp.asarray(b), L, activation="relu6")(xp.asarray(x), out=out)
    got = to_numpy(out)
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
