"""Training the small ResNet on (a slice of) Fashion-MNIST with labkit's kernels: the data as the
network takes it, batches staged to the device unchanged, the accuracy counted right, and a few
epochs on a small slice lowering the loss and beating chance on held-out images."""
from __future__ import annotations

import numpy as np
import pytest

import labkit
from labkit.checks import to_numpy
from labkit.models import training
from labkit.models.resnet_small import ResNetSmall

xp = labkit.xp


@pytest.mark.check
def test_fashion_arrays_are_standardized_images_and_int32_labels():
    x, y = training.fashion_arrays("train")
    assert x.shape == (60_000, 1, 28, 28) and x.dtype == np.float32
    assert abs(float(x.mean())) < 1e-3 and abs(float(x.std()) - 1) < 1e-3     # MEAN, STD are the split's
    assert y.dtype == np.int32 and set(np.unique(y)) == set(range(10))


@pytest.mark.check
def test_the_stager_copies_each_batch_unchanged():
    rng = np.random.default_rng()
    stage = training.Stager(7)
    for _ in range(3):                       # the pinned buffers take turns
        images, labels = rng.random((7, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, 7).astype(np.int32)
        x, y = stage.put(images, labels)
        assert np.array_equal(to_numpy(x), images) and np.array_equal(to_numpy(y), labels)


@pytest.mark.check
def test_accuracy_counts_the_argmax():
    net = ResNetSmall(3, seed=1)
    x, y = training.fashion_arrays("test", limit=30)
    logits = to_numpy(net.logits(xp.asarray(x)))
    assert training.accuracy(net, x, y, batch=7) == np.mean(logits.argmax(1) == y)


def test_epochs_on_a_small_slice_lower_the_loss():
    """20 steps (10 epochs of two batches) from Kaiming init: the loss falls (accuracy takes hundreds
    of steps: the GPU run of scripts/train_resnet.py shows it)."""
    net = ResNetSmall(6, seed=0)
    hist = training.fit(net, epochs=10, batch=32, lr=0.05, train_limit=64, test_limit=64, progress=False)
    assert len(hist["step_loss"]) == 10 * 2 and len(hist["test_accuracy"]) == 10
    assert hist["epoch_loss"][-1] < 0.8 * hist["epoch_loss"][0], hist["epoch_loss"]


@pytest.mark.check
def test_a_replayed_step_graph_trains_as_the_eager_steps():
    # The whole step captured once and replayed (a CUDA graph on a GPU) with the rate changing
    # between replays: the same losses as launching every kernel each step.
    runs = []
    for graph in (False, True):
        net = ResNetSmall(6, seed=2)
        runs.append(training.fit(net, epochs=2, batch=16, lr=0.05, schedule="cosine", warmup_steps=2,
                                 train_limit=48, test_limit=16, graph=graph, progress=False))
    assert np.allclose(runs[0]["step_loss"], runs[1]["step_loss"], rtol=1e-5, atol=0)


@pytest.mark.check
def test_the_rate_schedule_and_mirroring():
    rates = [training.rate_at(s, 100, 0.1, "cosine", warmup_steps=10) for s in range(100)]
    assert rates[0] == pytest.approx(0.01) and max(rates) <= 0.1 and rates[-1] < 1e-3
    assert all(b <= a for a, b in zip(rates[10:], rates[11:]))
    assert training.rate_at(50, 100, 0.1) == 0.1
    with pytest.raises(ValueError, match="schedule"):
        training.rate_at(0, 1, 0.1, "step")
    x = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 1, 3, 4)
    m = training.mirrored(x, np.random.default_rng(0))
    for a, b in zip(x, m):
        assert np.array_equal(b, a) or np.array_equal(b, a[..., ::-1])


GOOD = dict(epochs=1, batch=16, lr=0.05, train_limit=32, test_limit=16, progress=False)
BAD_SETTINGS = [
    ("batch", 0), ("batch", -16), ("batch", 2.5), ("batch", True), ("batch", 64),     # 64 > the 32 images
    ("test_limit", 0), ("train_limit", 0), ("train_limit", -1), ("epochs", 0), ("epochs", 1.0),
    ("lr", 0.0), ("lr", -0.05), ("lr", float("nan")), ("lr", float("inf")), ("lr", "0.05"),
    ("seed", -1), ("seed", 0.5), ("warmup_steps", -1), ("schedule", "step"),
]


@pytest.mark.parametrize("name, value", BAD_SETTINGS + [("momentum", -0.1), ("momentum", float("nan")),
                                                         ("weight_decay", float("inf")), ("weight_decay", -1e-4)])
def test_fit_refuses_a_bad_setting_before_any_step(name, value):
    # Each was a ZeroDivisionError, a crash inside a kernel or (test_limit=0) an error after a whole
    # epoch of training; now a ValueError that names the setting, and the network is untouched.
    net = ResNetSmall(3, seed=1)
    before = net.state()
    with pytest.raises(ValueError, match=name if name != "batch" or value != 64 else "larger than"):
        training.fit(net, **{**GOOD, name: value})
    assert all(np.array_equal(v, before[k]) for k, v in net.state().items())


class NoSteps:
    """A trainer that fails the test if fit_peer asks it for anything."""

    def train_batch(self, images, labels, rate):
        raise AssertionError("a step was taken")

    def logits(self, images):
        raise AssertionError("the trainer was evaluated")


@pytest.mark.parametrize("name, value", BAD_SETTINGS)
def test_fit_peer_refuses_a_bad_setting_before_any_step(name, value):
    with pytest.raises(ValueError, match=name if name != "batch" or value != 64 else "larger than"):
        training.fit_peer(NoSteps(), **{**GOOD, name: value})


def test_fit_takes_numpy_numbers():
    # A rate read from a NumPy array reaches the SGD kernel's settings as a Python float.
    net = ResNetSmall(3, seed=1)
    hist = training.fit(net, epochs=1, batch=np.int64(16), lr=np.float32(0.05), momentum=np.float32(0.9),
                        train_limit=16, test_limit=np.int32(8), progress=False)
    assert len(hist["step_loss"]) == 1
