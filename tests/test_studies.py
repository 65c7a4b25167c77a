"""The studies check before they time, through the one harness (labkit.ladder.harness): each study
run here at a tiny size on the backend in use, and the harness itself shown refusing a wrong kernel.

On the CPU executor the times are the executor's and mean nothing; what these tests hold is that
every study's rows come out, with a check behind them, and that a wrong output stops the study."""
from __future__ import annotations

import numpy as np
import pytest

import labkit
from labkit.ladder import harness, mobilenet, overhead, resnet_kernels, streams
from labkit.models import fashion_mnist as fm
from labkit.ops.depthwise import tiling_candidates
from labkit.shapes import ConvLayer

pytestmark = pytest.mark.check      # a few seconds with a warm kernel cache: part of make check


def test_the_harness_refuses_an_output_never_written():
    xp = labkit.xp
    out = xp.zeros((2, 3), dtype=xp.float32)
    ref = np.ones((2, 3))
    with pytest.raises(AssertionError, match="lazy disagrees with the float64 reference"):
        harness.check_output("lazy", lambda: None, out, ref, tol=1e-5)    # out stays NaN-poisoned


def test_the_harness_refuses_a_wrong_value_and_nan_and_passes_a_right_one():
    with pytest.raises(AssertionError, match="off by one"):
        harness.agrees("off by one", 1.0, 1e-5)
    with pytest.raises(AssertionError):
        harness.agrees("nan", float("nan"), 1e-5)
    assert harness.agrees("fine", 1e-7, 1e-5) == 1e-7
    xp = labkit.xp
    out = xp.zeros((2, 3), dtype=xp.float32)
    ms, err = harness.checked_launch_ms("fill", lambda: out.fill(1.0), out, np.ones((2, 3)), tol=1e-6, repeat=1)
    assert err == 0.0 and ms > 0


def test_per_launch_ms_refuses_no_launches():
    with pytest.raises(ValueError, match="launches must be a positive int"):
        labkit.measure.per_launch_ms(lambda: None, launches=0)


@pytest.fixture(scope="module")
def small_images():
    return np.random.default_rng(0).standard_normal((3,) + fm.INPUT_SHAPE, dtype=np.float32)


def test_pipeline_rows_check_every_schedule_against_the_serial_pass(small_images):
    net = fm.FashionNet()
    rows = streams.pipeline_rows(net, small_images, [dict(streams=2, sub_batch=1)], repeat=1, warmup=0)
    labels = [r["label"] for r in rows]
    assert labels[:2] == ["compute only (graph)", "serial: copy in, graph, copy out"]
    assert rows[-1]["sub_batches"] == 3 and all(r["median_ms"] > 0 for r in rows)


def test_forward_times_checks_the_graph_against_eager():
    rows = overhead.forward_times("fashion", [2], repeat=1, warmup=0, peers=False)
    assert {r["label"] for r in rows} == {"labkit eager", "host time of an eager forward", "labkit graph"}


def test_depthwise_studies_check_then_time():
    layer = ConvLayer(8, 9, 9, 8, 3, 2, 1, 8)
    rows = mobilenet.depthwise_rows([("tiny", 1, layer)], repeat=1)
    assert rows[0]["rel_err"] < 1e-5 and rows[0]["naive_ms"] > 0 and rows[0]["tiled_ms"] > 0
    tilings = tiling_candidates(layer, 1)[:2]
    swept = mobilenet.sweep_depthwise(layer, 1, tilings, repeat=1)
    assert len(swept) == len(tilings) and all(r["rel_error"] < 1e-5 for r in swept)
    floor = labkit.measure.floor_ms(mobilenet.depthwise_cost(layer, 1), labkit.device().ceilings())
    assert swept[0]["floor_ms"] == pytest.approx(floor)


def test_resnet_pass_sweep_checks_then_times():
    layer = ConvLayer(16, 8, 8, 16, 3, 1, 1)          # the smallest layer with tiles that can win
    tiles = resnet_kernels.candidates("forward", *resnet_kernels.kernel_shape("forward", layer))[:1]
    rows = resnet_kernels.sweep_pass("forward", layer, 2, tiles, repeat=1)
    assert rows[0]["rel_error"] < 1e-5 and rows[0]["median_ms"] > 0
    cost = resnet_kernels.pass_cost("forward", layer, 2)
    assert cost.flops == 2.0 * 2 * 8 * 8 * 16 * 16 * 9


@pytest.mark.parametrize("kind", ["forward", "data", "weight"])
def test_the_network_pass_is_what_the_network_would_run(kind):
    """network_pass builds the pass through the autotuner's entry point (Auto3x3, AutoWeightGrad3x3): on
    the CPU executor nothing is searched, so it is the untuned choice; its output agrees with the same
    algorithm made directly (make_pass: the same weights), so the algorithm it names is the op's."""
    from labkit.checks import rel_error, to_numpy
    from labkit.ops.conv3x3_auto import untuned_choice
    layer = ConvLayer(8, 7, 9, 8, 3, 1, 1)
    op, algorithm = resnet_kernels.network_pass(kind, layer, 2)
    c_in, c_out = (layer.M, layer.C) if kind == "data" else (layer.C, layer.M)
    if kind != "weight" and labkit.backend() == "cpu":     # on a GPU the autotuner may choose either
        assert algorithm == untuned_choice(kind, c_in, c_out, layer.H, layer.W)["algorithm"]
    ref, _ = resnet_kernels.make_pass(kind, layer, algorithm=algorithm)
    rng = np.random.default_rng(3)
    a = labkit.xp.asarray(rng.standard_normal((2, c_in, layer.H, layer.W)).astype(np.float32))
    dy = labkit.xp.asarray(rng.standard_normal((2, layer.M, layer.H, layer.W)).astype(np.float32))
    got, want = (op(a, dy), ref(a, dy)) if kind == "weight" else (op(a), ref(a))
    assert rel_error(got, to_numpy(want).astype(np.float64)) < 1e-5
