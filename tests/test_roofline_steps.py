"""Every step of every network's plan has a cost (no step the roofline table would leave out), and
the costs add up to what the networks' layers are known to do."""
from __future__ import annotations

import numpy as np
import pytest

import labkit
from labkit.checks import to_numpy
from labkit.measure import roofline as rf
from labkit.models import alexnet, fashion_mnist as fm, mobilenet_v2 as mb, resnet_small as rs


def _names(steps) -> list[str]:
    return [name for name, _fn in steps]


def _same_steps(steps, costs) -> None:
    names = _names(steps)
    assert len(names) == len(set(names)), "two steps share a name: the table could not tell them apart"
    assert set(costs) == set(names), (f"steps without a cost: {sorted(set(names) - set(costs))}; "
                                      f"costs without a step: {sorted(set(costs) - set(names))}")
    for name, c in costs.items():
        assert c.flops > 0 and c.bytes > 0, name


@pytest.mark.parametrize("variant", ["fused", "naive"])
def test_fashion_net(variant):
    net = fm.FashionNet(variant=variant)
    costs = net.step_costs(3)
    _same_steps(net.plan(3).steps, costs)
    # The two convolutions and two dense layers: 2 * (44*44*6*25 + 18*18*16*150 + 5184*140 + 140*10) per image.
    per_image = 2 * (44 * 44 * 6 * 25 + 18 * 18 * 16 * 150 + 5184 * 140 + 140 * 10)
    macs = sum(c.flops for n, c in costs.items() if "conv" in n or "dense" in n)
    pool_ops = 3 * 6 * 22 * 22 * 4
    assert macs == 3 * per_image + (pool_ops if variant == "fused" else 0)
    if variant == "fused":   # input, weights, bias and the pooled output only
        assert costs["conv1 + tanh + pool (fused)"].bytes == 4 * (3 * 48 * 48 + 150 + 6 + 3 * 6 * 22 * 22)


def test_alexnet():
    net = alexnet.AlexNet(alexnet.load_weights()[0])
    costs = net.step_costs(2)
    _same_steps(net.plan(2).steps, costs)
    # 2 * 724M multiply-adds per image (the grouped network's convolutions and dense layers: 666M + 58.6M).
    macs = sum(c.flops for n, c in costs.items() if n.startswith(("conv", "fc"))) / 2 / 2
    assert macs == 665_784_864 + 58_621_952
    assert costs["fc6"].bytes == 4 * (2 * 9216 + 9216 * 4096 + 4096 + 2 * 4096)


@pytest.mark.parametrize("fuse", [0, 3])
def test_mobilenet_v2(fuse):
    net = mb.MobileNetV2(mb.synthetic_weights(), input_hw=(40, 40), fuse_below=fuse)
    costs = net.step_costs(2)
    _same_steps(net.plan(2).steps, costs)
    assert costs["softmax"].out_shape == (2, 1000)
    # A projection that adds its input reads it: features.3 (24 -> 24 channels, stride 1) does.
    if not fuse:
        p = costs["features.3.project"]
        assert p.bytes == 4 * (2 * 144 * 10 * 10 + 144 * 24 + 24 + 2 * 2 * 24 * 10 * 10)   # its 10x10 plane


def test_mobilenet_v2_at_224_counts_torchvisions_multiply_adds():
    """300.8M multiply-adds per image at 224x224 (torchvision's figure for MobileNetV2, 300.77M)."""
    costs = mb.MobileNetV2(mb.synthetic_weights()).step_costs(1)      # shapes only: no plan is made
    macs = sum(c.flops for n, c in costs.items() if n not in ("pool", "softmax")) / 2
    assert macs == 300_774_272


def test_resnet_small_step_list_is_one_training_step():
    """The step list, run in order, is train_step: the same parameters after it, and a cost for each."""
    rng = np.random.default_rng(5)
    hw, N, c = (6, 5), 3, 4
    x = labkit.xp.asarray(rng.random((N, 1) + hw, dtype=np.float32))
    labels = labkit.xp.asarray(rng.integers(0, 10, N).astype(np.int32))
    a, b = rs.ResNetSmall(c, seed=1, input_hw=hw), rs.ResNetSmall(c, seed=1, input_hw=hw)
    a.train_step(x, labels, lr=0.05, weight_decay=5e-4)
    steps = b.step_list(x, labels, lr=0.05, weight_decay=5e-4)
    for _name, fn in steps:
        fn()
    for k, v in a.state().items():
        np.testing.assert_allclose(b.state()[k], v, rtol=1e-6, atol=1e-7, err_msg=k)
    _same_steps(steps, b.step_costs(N))
    # stem 1*9 x 4 + 4, four block convolutions 4*9 x 4 + 4, dense 4 x 10 + 10: 682 parameters
    assert to_numpy(b.params.flat).size == 9 * 4 + 4 + 4 * (36 * 4 + 4) + 4 * 10 + 10 == 682
    assert b.step_costs(N)["SGD update"].bytes == 5 * 4 * b.params.size
    with pytest.raises(ValueError, match="'small' rung"):
        rs.ResNetSmall(c, input_hw=hw, backward="gemm").step_list(x, labels, lr=0.05)


def test_step_costs_floors_are_positive():
    net = fm.FashionNet()
    ceil = {"copy_GBps": 100.0, "fp32_TFLOPs": 1.0}
    for c in net.step_costs(4).values():
        assert rf.floor_ms(c, ceil) > 0 and rf.bound(c, ceil) in ("memory", "compute")
