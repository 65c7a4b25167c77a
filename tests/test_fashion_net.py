"""FashionNet: the seed's network on labkit's kernels, against the float64 reference and Keras."""
from __future__ import annotations

import numpy as np
import pytest

import labkit
from labkit.data import load_fashion_mnist
from labkit.models import fashion_mnist as fm


@pytest.fixture(scope="module")
def weights():
    return fm.load_weights()


@pytest.fixture(scope="module")
def test_set():
    return load_fashion_mnist("test")


def host(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


@pytest.mark.check
@pytest.mark.parametrize("variant", fm.CONV_VARIANTS)
def test_logits_match_reference_on_random_test_images(variant, weights, test_set):
    images, _ = test_set
    idx = np.random.default_rng().choice(len(images), 7, replace=False)   # odd batch, fresh each run
    x = fm.preprocess(images[idx])
    net = fm.FashionNet(weights, variant=variant)
    logits = host(net.logits(labkit.xp.asarray(x)))
    ref = fm.reference_logits(weights, x)
    assert not np.isnan(logits).any()
    assert np.linalg.norm(logits - ref) / np.linalg.norm(ref) < 1e-5
    probs = host(net(labkit.xp.asarray(x)))
    assert np.allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    assert (probs.argmax(1) == ref.argmax(1)).all()


def test_agrees_with_recorded_keras_outputs(weights, test_set):
    images, labels = test_set
    keras = fm.load_keras_outputs()
    n = 200
    net = fm.FashionNet(weights)
    pred = host(net(labkit.xp.asarray(fm.preprocess(images[:n])))).argmax(1)
    assert (pred == keras["predictions"][:n]).mean() >= 0.995
    lg = host(net.logits(labkit.xp.asarray(fm.preprocess(images[keras["indices"]]))))
    assert np.linalg.norm(lg - keras["logits"]) / np.linalg.norm(keras["logits"]) < 1e-4
    assert (keras["predictions"] == labels).mean() > 0.88      # the shipped model's test accuracy


@pytest.mark.check
def test_layers_are_named_steps(weights):
    x = labkit.xp.zeros((2, 1, 48, 48), dtype=labkit.xp.float32)
    names = [n for n, _ in fm.FashionNet(weights, variant="tiled").layers(x)]
    assert names == ["conv1 + tanh (tiled)", "max-pool 2x2", "conv2 + tanh (tiled)", "dense 5184->140 + tanh",
                     "dense 140->10", "softmax"]
    assert [n for n, _ in fm.FashionNet(weights).layers(x)][0] == "conv1 + tanh + pool (fused)"


@pytest.mark.check
@pytest.mark.parametrize("make, exc, match", [
    (lambda xp: xp.zeros((2, 1, 28, 28), dtype=xp.float32), ValueError, r"\(N, 1, 48, 48\).*preprocess"),
    (lambda xp: xp.zeros((2, 48, 48), dtype=xp.float32), ValueError, r"\(N, 1, 48, 48\)"),
    (lambda xp: xp.zeros((2, 1, 48, 48), dtype=xp.float64), TypeError, "float32"),
])
def test_bad_input_is_refused(weights, make, exc, match):
    with pytest.raises(exc, match=match):
        fm.FashionNet(weights)(make(labkit.xp))


@pytest.mark.check
def test_unknown_variant_and_bad_weights_are_refused(weights):
    with pytest.raises(ValueError, match="variant must be one of"):
        fm.FashionNet(weights, variant="fast")
    bad = dict(weights)
    bad["fc1_w"] = bad["fc1_w"][:100]
    with pytest.raises(ValueError, match="fc1_w"):
        fm.FashionNet(bad)


def test_recorded_keras_outputs_refuse_a_bad_file(tmp_path):
    p = tmp_path / "k.npz"
    np.savez(p, indices=np.arange(3), logits=np.zeros((3, 10), np.float32))
    with pytest.raises(ValueError, match="must have shape"):
        fm.load_keras_outputs(p)
    p.write_bytes(fm.KERAS_LOGITS_PATH.read_bytes()[:500])
    with pytest.raises(ValueError, match="not a readable"):
        fm.load_keras_outputs(p)
