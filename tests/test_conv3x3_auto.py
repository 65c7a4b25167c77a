"""The autotuned 3x3 passes of the residual network (labkit.ops.conv3x3_auto): their candidates (the
untuned choice first, every kernel, F(2x2) Winograd only, every tile valid, the whole-batch Winograd
GEMMs only where their workspace fits), the searches' checks
(each candidate against float64 samples; a wrong or unfinished result is caught), and the untuned
layers equal to the classes the network ran before."""
from __future__ import annotations

import numpy as np
import pytest

import labkit
from labkit import reference
from labkit.autotune.search import search
from labkit.checks import rel_error, to_numpy
from labkit.ops import conv3x3_auto as auto
from labkit.ops.conv_small import SmallConv3x3, SmallWeightGrad, Tile, WeightTile
from labkit.ops.conv_winograd import WinogradConv3x3, WinogradTile
from labkit.ops.conv_winograd_wgrad import WinogradWeightGrad, WinogradWeightTile
from labkit.ops.gemm import gemm_launch_config
from labkit.shapes import ConvLayer

L = ConvLayer.of(8, 9, 10, 16, 3, 1, 1)
TILES = {("forward", "direct"): Tile, ("forward", "winograd"): WinogradTile, ("data", "direct"): Tile,
         ("data", "winograd"): WinogradTile, ("weight", "direct"): WeightTile, ("weight", "winograd"): WinogradWeightTile}


def _weights(seed=0):
    rng = np.random.default_rng(seed)
    xp = labkit.xp
    wt = xp.asarray((rng.standard_normal((L.C * 9, L.M)) * 0.2).astype(np.float32))
    b = xp.asarray(rng.standard_normal(L.M).astype(np.float32))
    return wt, b


@pytest.mark.parametrize("kind", ["forward", "data", "weight"])
@pytest.mark.parametrize("shape", [(16, 16, 28, 28), (64, 64, 32, 32), (1, 16, 28, 28), (8, 16, 9, 10)])
def test_the_candidates_are_valid_and_untuned_first(kind, shape):
    C, M, H, W = shape
    if kind == "data":
        C, M = M, C
    configs = auto.pass_candidates(kind, C, M, H, W)
    assert len(configs) == len({repr(c) for c in configs}) and 1 <= len(configs) <= 2 * auto.LIMIT + 4
    for c in configs:
        if c["algorithm"] == "winograd_gemm":          # gemm.cu's block tile: a valid launch of the GEMMs
            gemm_launch_config("dbuf", M, 4096, C, c["tile"])
            continue
        t = TILES[kind, c["algorithm"]](**c["tile"])
        t.check(C, M, H, W)
        assert getattr(t, "f", 2) == 2
    algorithms = {"direct", "winograd"} | ({"winograd_gemm"} if kind != "weight" else set())
    if shape[0] > 1 and H >= 28:   # smaller planes leave Winograd's blocks too few threads
        assert {c["algorithm"] for c in configs} == algorithms
        # every kernel early (after the few tuned tables' tiles): a search cut short by its budget has
        # timed each, whichever comes first untuned
        assert {c["algorithm"] for c in configs[:9]} == algorithms


def test_the_whole_batch_gemms_are_offered_only_where_their_workspace_fits():
    gemm = {"algorithm": "winograd_gemm", "tile": {}}
    assert auto.fits(gemm, 64, 64, 28, 28, 16)
    assert not auto.fits(gemm, 512, 512, 256, 256, 64)            # 4 GiB of V and Mx
    assert auto.fits({"algorithm": "direct", "tile": {}}, 512, 512, 256, 256, 64)


def test_every_whole_batch_gemm_candidate_passes_its_check_forward_and_gated_data():
    wt, b = _weights(2)
    for kind, layer in (("forward", auto.Auto3x3(wt, b, L, activation="relu", residual=True)),
                        ("data", auto.Auto3x3(wt, None, L, residual=True, gate=True, transpose=True))):
        configs = [c for c in auto.pass_candidates(kind, layer.c_in, layer.c_out, L.H, L.W)
                   if c["algorithm"] == "winograd_gemm"]
        assert configs
        _search(auto._PassBench(layer, 3), configs)


def _search(bench, configs):
    out = search(configs, bench, 1e9, workers=2)
    assert out.config in configs and all("error" not in r for r in out.rows), out.rows
    return out


def test_every_forward_candidate_passes_its_check_and_a_wrong_result_does_not():
    wt, b = _weights()
    fw = auto.Auto3x3(wt, b, L, activation="relu", residual=True)
    bench = auto._PassBench(fw, 3)
    _search(bench, auto.pass_candidates("forward", L.C, L.M, L.H, L.W)[:5])
    assert "sampled outputs wrong" in bench.check(lambda: bench.y.fill(0.5))
    assert "never written" in bench.check(lambda: None)


def test_every_gated_data_candidate_passes_its_check():
    wt, _ = _weights(1)
    dt = auto.Auto3x3(wt, None, L, residual=True, gate=True, transpose=True)
    _search(auto._PassBench(dt, 2), auto.pass_candidates("data", L.M, L.C, L.H, L.W)[:4])


def test_every_weight_candidate_passes_its_check_and_a_wrong_bias_gradient_does_not():
    wg = auto.AutoWeightGrad3x3(L)
    bench = auto._WeightBench(wg, 3)
    configs = auto.pass_candidates("weight", L.C, L.M, L.H, L.W)[:4]
    _search(bench, configs)
    layer = wg.make(configs[0])

    def wrong_bias():
        layer(bench.x, bench.dy, bench.dw, bias=bench.db)
        bench.db[0] += 1.0
    assert "db" in bench.check(wrong_bias)


def test_untuned_the_layers_are_the_network_s_former_ones(monkeypatch, tmp_path):
    """Untuned (the CPU executor; on a GPU LABKIT_AUTOTUNE=0 and an empty disk cache, whose winners it
    would otherwise use) nothing is searched: the first candidate runs, the kernel and tile the untuned
    choice names (conv_small's direct kernel unless a tuned table says Winograd pays), bit for bit,
    and both against float64."""
    monkeypatch.setenv("LABKIT_AUTOTUNE", "0")
    if labkit.backends.current() == "cuda":
        monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path))
    xp = labkit.xp
    wt, b = _weights(2)
    rng = np.random.default_rng(3)
    x = xp.asarray(rng.standard_normal((2, L.C, L.H, L.W)).astype(np.float32))
    r = xp.asarray(rng.standard_normal((2, L.M, L.H, L.W)).astype(np.float32))
    y = auto.Auto3x3(wt, b, L, activation="relu", residual=True)(x, residual=r)
    choice = auto.untuned_choice("forward", L.C, L.M, L.H, L.W)   # the direct kernel, unless a table says
    if choice["algorithm"] == "direct":                            # Winograd pays on this GPU
        y0 = SmallConv3x3(wt, b, L, activation="relu", residual=True, tile=Tile(**choice["tile"]))(x, residual=r)
    else:
        y0 = WinogradConv3x3(wt, b, L, activation="relu", residual=True,
                             tile=WinogradTile(**choice["tile"]))(x, residual=r)
    w4 = to_numpy(wt).reshape(L.C, 3, 3, L.M).transpose(3, 0, 1, 2).astype(np.float64)
    ref = reference.relu(reference.conv2d(to_numpy(x), w4, to_numpy(b), pad=1) + to_numpy(r))
    assert np.array_equal(to_numpy(y), to_numpy(y0)) and rel_error(y, ref) < 1e-5
    dy = xp.asarray(rng.standard_normal((2, L.M, L.H, L.W)).astype(np.float32))
    dw = auto.AutoWeightGrad3x3(L)(x, dy)
    wchoice = auto.untuned_choice("weight", L.C, L.M, L.H, L.W)
    if wchoice["algorithm"] == "direct":
        dw0 = SmallWeightGrad(L, tile=WeightTile(**wchoice["tile"]))(x, dy)
    else:
        dw0 = WinogradWeightGrad(L, tile=WinogradWeightTile(**wchoice["tile"]))(x, dy)
    assert np.array_equal(to_numpy(dw), to_numpy(dw0))
