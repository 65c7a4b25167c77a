"""The roofline's cost functions: exact FLOPs and bytes of small layers counted by hand, and the
floor's precision (FP32 or TF32 peak)."""
from __future__ import annotations

import pytest

from labkit.measure import roofline as rf

CEIL = {"copy_GBps": 1000.0, "fp32_TFLOPs": 50.0, "tf32_TFLOPs": 400.0}


def test_conv2d_cost_with_residual_reads_the_skip_once_more():
    # 1x2x4x4 input, 3 filters 3x3, no pad: 2x2 output; FLOPs 2*1*3*2*2*2*9 = 432.
    c = rf.conv2d_cost(1, 2, 4, 4, 3, 3)
    assert c.flops == 432 and c.bytes == 4 * (32 + 54 + 3 + 12) and c.out_shape == (1, 3, 2, 2)
    r = rf.conv2d_cost(1, 2, 4, 4, 3, 3, residual=True)
    assert r.flops == 432 and r.bytes == c.bytes + 4 * 12


def test_depthwise_is_a_grouped_conv2d():
    # 8 channels 6x6, 3x3 stride 2 pad 1: 3x3 output; each output 9 multiply-adds on its own channel.
    c = rf.conv2d_cost(2, 8, 6, 6, 8, 3, stride=2, pad=1, groups=8)
    assert c.out_shape == (2, 8, 3, 3)
    assert c.flops == 2 * 2 * 8 * 9 * 9
    assert c.bytes == 4 * (2 * 8 * 36 + 8 * 9 + 8 + 2 * 8 * 9)


def test_pooling_lrn_softmax_elementwise():
    p = rf.pool2d_cost(2, 3, 7, 7, 3, 2)
    assert p.out_shape == (2, 3, 3, 3) and p.flops == 2 * 3 * 9 * 9 and p.bytes == 4 * (2 * 3 * 49 + 2 * 3 * 9)
    g = rf.global_avg_pool_cost(2, 5, 3, 4)
    assert g.out_shape == (2, 5) and g.flops == 120 and g.bytes == 4 * (120 + 10)
    n = rf.lrn_cost(1, 4, 2, 3, 2)       # 24 elements, 2*5 + 3 = 13 operations each
    assert n.flops == 24 * 13 and n.bytes == 4 * 48
    s = rf.softmax_cost(3, 10)
    assert s.flops == 120 and s.bytes == 4 * 60
    e = rf.elementwise_cost((2, 3, 4), inputs=2)
    assert e.flops == 24 and e.bytes == 4 * 72
    with pytest.raises(ValueError, match="does not fit"):
        rf.pool2d_cost(1, 1, 2, 2, 3, 1)


def test_training_costs():
    # backward data of 1x2x4x4 -> 3 channels 3x3 pad 1: dy 1x3x4x4 (48), w 54, dx 32, a gate of dx's shape.
    d = rf.conv2d_backward_data_cost(1, 2, 4, 4, 3, 3, pad=1, extra_reads=1)
    assert d.flops == 2 * 3 * 16 * 2 * 9 and d.bytes == 4 * (48 + 54 + 2 * 32) and d.out_shape == (1, 2, 4, 4)
    w = rf.conv2d_backward_weight_cost(1, 2, 4, 4, 3, 3, pad=1)
    assert w.flops == 2 * 3 * 16 * 2 * 9 + 48 and w.bytes == 4 * (32 + 48 + 54 + 3)
    b = rf.dense_backward_cost(4, 6, 10)
    assert b.flops == 4 * 4 * 6 * 10 + 40 and b.bytes == 4 * (2 * 24 + 2 * 60 + 40 + 10)
    x = rf.softmax_cross_entropy_cost(4, 10)
    assert x.flops == 200 and x.bytes == 4 * (80 + 4 + 1) + 4 * 4
    s = rf.sgd_momentum_cost(1000)
    assert s.flops == 5000 and s.bytes == 20000


def test_floor_by_precision():
    # 1 GFLOP over 1 MB: compute-bound at FP32 (0.02 ms against 0.001 ms), at TF32 8x faster.
    c = rf.Cost(1e9, 1e6, ())
    assert rf.floor_ms(c, CEIL) == pytest.approx(0.02)
    assert rf.floor_ms(c, CEIL, "tf32") == pytest.approx(0.0025)
    assert rf.bound(c, CEIL, "tf32") == "compute"
    m = rf.Cost(1e6, 1e7, ())            # 0.01 ms of memory against 2.5e-6 ms of TF32 math
    assert rf.bound(m, CEIL, "tf32") == "memory" and rf.floor_ms(m, CEIL, "tf32") == pytest.approx(0.01)
    assert rf.percent_of_floor(0.04, c, CEIL) == pytest.approx(50.0)
    with pytest.raises(ValueError, match="precision"):
        rf.floor_ms(c, CEIL, "fp16")
    with pytest.raises(ValueError, match="tf32_TFLOPs"):
        rf.floor_ms(c, {"copy_GBps": 1.0, "fp32_TFLOPs": 1.0}, "tf32")
