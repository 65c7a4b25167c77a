"""The small ResNet trained with labkit's kernels: every parameter's gradient of a whole step against
the float64 NumPy network (itself checked against central differences), SGD's step against the
reference update, and a few steps lowering the loss."""
from __future__ import annotations

import numpy as np
import pytest

import labkit
from labkit.checks import rel_error, to_numpy
from labkit.models import resnet_small as rs
from labkit.ops.conv_small import SmallConv3x3, SmallWeightGrad
from labkit.ops.conv_winograd import WinogradConv3x3
from labkit.ops.conv_winograd_wgrad import WinogradWeightGrad
from labkit.reference import backward as rb

from helpers import away_from_kinks

rng = np.random.default_rng()
xp = labkit.xp
HW = (9, 7)          # odd, small planes: the network is the same at any size


def batch(N, hw=HW):
    x = rng.standard_normal((N, 1) + hw).astype(np.float32)
    labels = rng.integers(0, 10, N).astype(np.int32)
    return x, labels


def pre_activations(state, x, _labels):
    return rs.reference_pre_activations(state, x)


def test_reference_gradients_pass_a_gradient_check():
    def draw():
        state = rs.init_parameters(3, seed=int(rng.integers(1 << 30)))
        state = {k: v + 0.1 * rng.standard_normal(v.shape) for k, v in state.items()}   # biases not all zero
        return (state, *batch(2, (6, 5)))
    state, x, labels = away_from_kinks(draw, pre_activations)     # no difference step crosses a ReLU's kink
    _, grads = rs.reference_loss_and_grads(state, x, labels)
    for name in state:
        def loss_of(v, name=name):
            return rs.reference_loss_and_grads({**state, name: v}, x, labels)[0]
        err = rb.gradient_check(loss_of, state[name], grads[name], samples=12, rng=rng)
        assert err < 1e-5, (name, err)


@pytest.mark.parametrize("channels,N,backward,winograd", [(6, 3, "small", False), (8, 3, "small", True),
                                                          (4, 2, "gemm", None), (4, 2, "direct", None)])
def test_every_gradient_of_a_step_matches_float64(channels, N, backward, winograd):
    net = rs.ResNetSmall(channels, seed=int(rng.integers(1 << 30)), input_hw=HW, backward=backward,
                         winograd=winograd)
    if backward == "small":     # the rung's forward, backward-data and weight convolutions: Winograd's or direct
        want = WinogradConv3x3 if winograd else SmallConv3x3
        assert all(type(c) is want for c in [*net.convs.values(), *net.bwd_data.values()])
        want = WinogradWeightGrad if winograd else SmallWeightGrad
        assert all(type(c) is want for c in net.wgrad.values())
    start = net.state()
    state, x, labels = away_from_kinks(   # float32's sums on the same side of every ReLU as float64's
        lambda: ({k: v + 0.05 * rng.standard_normal(v.shape).astype(np.float32) for k, v in start.items()},
                 *batch(N)), pre_activations)
    net.load_state(state)
    net.grads.flat[...] = xp.asarray(np.full(net.grads.size, np.nan, np.float32))    # poisoned
    loss = float(to_numpy(net.loss_and_gradients(xp.asarray(x), xp.asarray(labels)))[0])
    rloss, rgrads = rs.reference_loss_and_grads(net.state(), x, labels)
    assert abs(loss - rloss) <= 1e-5 * max(1.0, abs(rloss))
    got = net.gradients()
    for name, r in rgrads.items():
        assert rel_error(got[name], r) < 1e-4, name


@pytest.mark.check
def test_sgd_step_updates_every_parameter_as_the_reference():
    net = rs.ResNetSmall(6, seed=3, input_hw=HW)
    x, labels = batch(3)
    before = net.state()
    net.velocity.flat[...] = xp.asarray(rng.standard_normal(net.velocity.size).astype(np.float32))
    v0 = to_numpy(net.velocity.flat).copy()
    net.train_step(xp.asarray(x), xp.asarray(labels), lr=0.05, momentum=0.9, weight_decay=1e-3)
    g = to_numpy(net.grads.flat)
    p0 = np.concatenate([rs.to_ckkm(before[n]).ravel() if n.endswith(".w") and n != "fc.w" else before[n].ravel()
                         for n in net.params.shapes])
    rp, rv = rb.sgd_momentum(p0, g, v0, lr=0.05, momentum=0.9, weight_decay=1e-3)
    assert rel_error(net.params.flat, rp) < 1e-6 and rel_error(net.velocity.flat, rv) < 1e-6


@pytest.mark.check
def test_a_few_steps_lower_the_loss_on_one_batch():
    # Small plain steps along the gradient: each must lower the loss (a wrong gradient would not,
    # on the whole); larger steps with momentum on 8 noise images are not monotone.
    net = rs.ResNetSmall(6, seed=int(rng.integers(1 << 30)), input_hw=HW)
    x, labels = (xp.asarray(a) for a in batch(8))
    losses = [float(to_numpy(net.train_step(x, labels, lr=0.02, momentum=0.0))[0]) for _ in range(6)]
    assert all(b < a for a, b in zip(losses, losses[1:])), losses


@pytest.mark.check
def test_init_is_kaiming_and_the_layouts_round_trip():
    s = rs.init_parameters(64, seed=1)
    assert abs(s["block1.conv1.w"].std() - np.sqrt(2 / (64 * 9))) < 0.01 * np.sqrt(2 / (64 * 9)) * 10
    assert all((s[f"{n}.b"] == 0).all() for n in rs.CONVS)
    w = rng.standard_normal((5, 3, 3, 3))
    assert np.array_equal(rs.to_mckk(rs.to_ckkm(w)), w)


@pytest.mark.check
def test_bad_input_is_refused():
    net = rs.ResNetSmall(6, input_hw=HW)
    with pytest.raises(ValueError, match="x must be"):
        net.logits(xp.asarray(np.zeros((2, 1, 8, 7), np.float32)))
    with pytest.raises(TypeError, match="int32"):
        net.loss_and_gradients(xp.asarray(np.zeros((2, 1) + HW, np.float32)), xp.asarray(np.zeros(2, np.int64)))
    with pytest.raises(ValueError, match="must be"):
        net.load_state({**net.state(), "fc.w": np.zeros((5, 10))})


@pytest.mark.parametrize("args, kwargs, name", [
    ((0,), {}, "channels"), ((-4,), {}, "channels"), ((2.5,), {}, "channels"), ((True,), {}, "channels"),
    ((4,), dict(in_channels=0), "in_channels"), ((4,), dict(input_hw=(0, 7)), "input_hw"),
    ((4,), dict(input_hw=(7,)), "input_hw"), ((4,), dict(input_hw=7), "input_hw"),
    ((4,), dict(input_hw=(7, 1.5)), "input_hw"), ((4,), dict(seed=-1), "seed")])
def test_bad_sizes_are_refused_by_name(args, kwargs, name):
    # ResNetSmall(0) divided by zero in the initialization; a plane of 0 pixels failed at the first step.
    with pytest.raises(ValueError, match=name):
        rs.ResNetSmall(*args, **kwargs)


def bad_states(good):
    """(what is wrong, the state, the exception, what its message must say) of each kind of bad state:
    every tensor before the bad one is changed, so a load that wrote as it went would show."""
    moved = {k: v + 1 for k, v in good.items()}
    return [
        ("NaN", {**moved, "fc.b": np.full(10, np.nan, np.float32)}, ValueError, "fc.b holds 10 NaN"),
        ("inf", {**moved, "block2.conv2.w": np.where(good["block2.conv2.w"] > 0, np.inf, 0)}, ValueError,
         "block2.conv2.w holds"),
        ("beyond float32", {**moved, "fc.w": np.full((6, 10), 1e39)}, ValueError, r"fc.w .*float32's range"),
        ("missing", {k: v for k, v in moved.items() if k != "fc.b"}, ValueError, "missing 'fc.b'; unknown none"),
        ("extra", {**moved, "fc2.w": good["fc.w"]}, ValueError, "missing none; unknown 'fc2.w'"),
        ("shape", {**moved, "fc.w": np.zeros((5, 10), np.float32)}, ValueError, r"fc.w must be \(6, 10\)"),
        ("conv layout", {**moved, "stem.w": good["stem.w"].reshape(6, 9)}, ValueError,
         r"stem.w must be \(6, 1, 3, 3\) \(M, C, 3, 3\), got shape \(6, 9\)"),
        ("dtype", {**moved, "fc.b": np.zeros(10, np.int64)}, TypeError, "fc.b must be a float array"),
        ("object", {**moved, "fc.b": None}, TypeError, "fc.b must be a float array"),
        ("not a dict", list(moved.items()), TypeError, "dict"),
    ]


def test_a_refused_state_leaves_the_network_as_it_was():
    net = rs.ResNetSmall(6, input_hw=HW)
    good = net.state()
    velocity = rng.standard_normal(net.velocity.size).astype(np.float32)
    net.velocity.flat[...] = xp.asarray(velocity)
    for what, state, exc, message in bad_states(good):
        with pytest.raises(exc, match=message):
            net.load_state(state)
        assert all(np.array_equal(v, good[k]) for k, v in net.state().items()), what
        assert np.array_equal(to_numpy(net.velocity.flat), velocity), what
    net.load_state({k: v.astype(np.float64) + 1 for k, v in good.items()})    # float64 is taken
    assert all(np.array_equal(v, (good[k] + 1).astype(np.float32)) for k, v in net.state().items())
    assert not to_numpy(net.velocity.flat).any()
