"""Several GPUs of one host: each device gets its own loaded modules and launch plans (a function
loaded into one device's context launches only there), and the sub-batch pipeline over two GPUs
gives the one-GPU outputs.  Runs where CuPy sees two GPUs or more; the CPU executor's stand-in (two
replicas run one after the other) is tested with the pipeline."""
from __future__ import annotations

import numpy as np
import pytest

import labkit


def _gpu_count() -> int:
    if labkit.backends.current() != "cuda":
        return 0
    import cupy
    return cupy.cuda.runtime.getDeviceCount()


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_gpu_count() < 2, reason="needs a host with two or more GPUs")]


def test_each_device_loads_its_own_module_and_plans():
    import cupy
    from labkit import layers
    from labkit.loader import load
    x = np.random.default_rng(0).standard_normal((2, 5, 7, 9)).astype(np.float32)
    out = []
    for d in (0, 1):
        with cupy.cuda.Device(d):
            mods = load("lrn"), load("lrn")
            assert mods[0] is mods[1]
            out.append((mods[0], cupy.asnumpy(layers.LRN()(cupy.asarray(x)))))
    assert out[0][0] is not out[1][0]
    assert np.array_equal(out[0][1], out[1][1])


def test_pipeline_on_two_gpus_gives_the_one_gpu_outputs():
    from labkit.models.fashion_mnist import FashionNet
    from labkit.pipeline import SubBatchPipeline
    net = FashionNet()
    x = np.random.default_rng(1).standard_normal((37, 1, 48, 48)).astype(np.float32)
    one = SubBatchPipeline(net, streams=2, sub_batch=5).run(x).copy()
    two = SubBatchPipeline(net, streams=2, sub_batch=5, devices=2)
    assert sorted(set(two.devices)) == [0, 1]
    assert np.array_equal(two.run(x), one)
