"""The slow loops behind notebooks 08 to 11 go through labkit.measure.sweep.progress_bar: each
function's loop is driven by the bar it is given (one step per batch, configuration, schedule, tile
or layer), shows one by default, and passes ``progress=False`` on (the benchmarks that print their
own lines use it).  The bar is swapped for a recorder here; the real one is tested in test_measure."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

from labkit.ladder import mobilenet, overhead, resnet_kernels, streams
from labkit.models import fashion_mnist as fm
from labkit.models import mobilenet_v2 as mb
from labkit.peers import cudnn
from labkit.pipeline import SubBatchPipeline, pinned_empty, sub_batch
from labkit.shapes import ConvLayer

pytestmark = pytest.mark.check

BARRED = [overhead.forward_times, streams.pipeline_rows, streams.sub_batch_rows, streams.tuned_rows,
          SubBatchPipeline.tune, resnet_kernels.sweep_pass, mobilenet.depthwise_rows, mobilenet.network_rows,
          cudnn.find_algorithms]        # (cuDNN's needs a GPU: its loop is not run here)


@pytest.fixture
def bars(monkeypatch):
    """Stands in for progress_bar in each module: records (desc, show, items taken by the loop)."""
    seen = []

    def record(items, *, desc, show=True):
        bar = {"desc": desc, "show": show, "taken": []}
        seen.append(bar)

        def walk():
            for item in items:
                bar["taken"].append(item)
                yield item
        return walk()

    for module in (overhead, streams, resnet_kernels, mobilenet, sub_batch):
        monkeypatch.setattr(module, "progress_bar", record)
    return seen


@pytest.mark.parametrize("fn", BARRED, ids=lambda f: f.__qualname__)
def test_a_bar_is_shown_unless_progress_is_false(fn):
    assert inspect.signature(fn).parameters["progress"].default is True


@pytest.fixture(scope="module")
def fashion():
    return fm.FashionNet()


@pytest.fixture(scope="module")
def images():
    x = pinned_empty((3,) + fm.INPUT_SHAPE)
    x[...] = np.random.default_rng(0).standard_normal(x.shape, dtype=np.float32)
    return x


def test_forward_times_steps_the_bar_once_per_batch(bars):
    rows = overhead.forward_times("fashion", [1, 2], repeat=1, warmup=0, peers=False, progress=False)
    assert [(b["desc"], b["show"], b["taken"]) for b in bars] == [("fashion fp32 forward", False, [1, 2])]
    assert sorted({r["batch"] for r in rows}) == [1, 2]


def test_the_pipeline_studies_step_their_bars(bars, fashion, images):
    rows = streams.sub_batch_rows(fashion, images, streams=2, sizes=[1, 2], repeat=1, warmup=0, progress=False)
    assert [(b["desc"], b["show"], len(b["taken"])) for b in bars] == [("pipelines, batch 3", False, 2)]
    assert [r["first_sub_batch"] for r in rows] == [1, 2]
    bars.clear()
    rows = streams.tuned_rows(fashion, images, streams=(2,), repeat=1, warmup=0, tune_repeat=1, candidates=[3, 1])
    # the tune's bar over both candidates; keeping each timed schedule again (tuned, best split) shows none
    assert [(b["desc"], b["show"], b["taken"]) for b in bars] == (
        [("tuning schedules, batch 3", True, [3, 1])]
        + [("tuning schedules, batch 3", False, [r["sub_batch"]]) for r in rows])
    assert rows[0]["label"] == "pipeline, 2 streams, tuned" and len(rows[0]["tried"]) == 2


def test_the_tile_and_layer_sweeps_step_their_bars(bars):
    layer = ConvLayer(16, 8, 8, 16, 3, 1, 1)
    tiles = resnet_kernels.candidates("forward", *resnet_kernels.kernel_shape("forward", layer))[:2]
    rows = resnet_kernels.sweep_pass("forward", layer, 1, tiles, repeat=1, progress=False)
    dw = ConvLayer(8, 9, 9, 8, 3, 2, 1, 8)
    rows += mobilenet.depthwise_rows([("a", 1, dw), ("b", 2, dw)], repeat=1, progress=False)
    assert [(b["desc"], b["show"], len(b["taken"])) for b in bars] == [("forward pass tiles, batch 1", False, 2),
                                                                      ("depthwise layers", False, 2)]
    assert len(rows) == 4 and [r["batch"] for r in rows[2:]] == [1, 2]


def test_network_rows_steps_its_bar_once_per_batch(bars):
    net = mb.MobileNetV2(mb.synthetic_weights(), input_hw=(32, 32))
    rows = mobilenet.network_rows(net, None, [1], repeat=1, progress=False)
    assert [(b["desc"], b["show"], b["taken"]) for b in bars] == [("MobileNetV2 fp32 batches", False, [1])]
    assert [r["label"] for r in rows] == ["labkit fp32 eager", "labkit fp32 graph"]
