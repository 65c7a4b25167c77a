"""labkit.models.fashion_mnist: the shipped weights, the safe loader and the reference forward pass.

The shipped files are data/models/fashion_mnist_ece408.{npz,json} and
fashion_mnist_keras_logits.npz (written by scripts/train_fashion_mnist.py).
Broken weight files are built in ``tmp_path``.  Only the live Keras comparison
needs TensorFlow and is skipped, with its reason, without it.
"""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from labkit.data import load_fashion_mnist
from labkit.models import fashion_mnist as fm

SEED = 20240408
REL_TOL = 1e-4


@pytest.fixture(scope="module")
def weights() -> dict[str, np.ndarray]:
    return fm.load_weights()


@pytest.fixture(scope="module")
def test_split() -> tuple[np.ndarray, np.ndarray]:
    return load_fashion_mnist("test")


def rel_error(a: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(np.asarray(a, np.float64) - ref).max() / np.abs(ref).max())


# --------------------------------------------------------------------------
# shipped files
# --------------------------------------------------------------------------
@pytest.mark.check
def test_shipped_weights_load_with_shapes_and_dtypes(weights):
    assert list(weights) == list(fm.SHAPES)
    for key, shape in fm.SHAPES.items():
        assert weights[key].shape == shape, key
        assert weights[key].dtype == np.float32, key
        assert weights[key].flags.c_contiguous, key
    assert fm.SHAPES["fc1_w"] == (16 * 18 * 18, 140)


@pytest.mark.check
def test_metadata_records_accuracy_and_layouts():
    meta = json.loads(fm.METADATA_PATH.read_text())
    assert meta["test_accuracy"] >= 0.88
    assert meta["test_images"] == 10_000
    assert meta["seed"] == 408
    assert meta["epochs"] >= 1 and meta["batch_size"] >= 1
    assert set(meta["layouts"]) == set(fm.SHAPES)
    assert "train_fashion_mnist.py" in meta["command"]
    for key in ("tensorflow", "date", "preprocessing"):
        assert meta[key], key


@pytest.mark.check
def test_preprocess_shape_and_range(test_split):
    x = fm.preprocess(test_split[0][:3])
    assert x.shape == (3, 1, 48, 48) and x.dtype == np.float32
    assert 0.0 <= x.min() and x.max() <= 1.0


# --------------------------------------------------------------------------
# the reference forward pass against Keras
# --------------------------------------------------------------------------
def test_reference_matches_recorded_keras_logits(weights, test_split):
    with np.load(fm.KERAS_LOGITS_PATH, allow_pickle=False) as rec:
        idx, logits, labels = rec["indices"], rec["logits"], rec["labels"]
    assert logits.shape == (len(idx), 10) and logits.dtype == np.float32
    images, test_labels = test_split
    np.testing.assert_array_equal(labels, test_labels[idx])
    ref = fm.reference_logits(weights, fm.preprocess(images[idx]))
    assert ref.dtype == np.float64 and ref.shape == logits.shape
    assert rel_error(logits, ref) < REL_TOL
    np.testing.assert_array_equal(np.argmax(logits, 1), fm.reference_predict(
        weights, fm.preprocess(images[idx])))


def _keras_from_npz(tf, w: dict[str, np.ndarray]):
    """Rebuild the model in Keras (NHWC) from the labkit arrays, converting the layouts back."""
    L = tf.keras.layers
    model = tf.keras.Sequential([
        tf.keras.Input(shape=(48, 48, 1)),
        L.Conv2D(6, 5, activation="tanh"), L.MaxPooling2D(2, 2),
        L.Conv2D(16, 5, activation="tanh"), L.Flatten(),
        L.Dense(140, activation="tanh"), L.Dense(10),
    ])
    fc1_hwc = w["fc1_w"].reshape(16, 18, 18, 140).transpose(1, 2, 0, 3).reshape(5184, 140)
    model.set_weights([
        w["conv1_w"].transpose(2, 3, 1, 0), w["conv1_b"],   # MCKK -> KKCM
        w["conv2_w"].transpose(2, 3, 1, 0), w["conv2_b"],
        fc1_hwc, w["fc1_b"], w["fc2_w"], w["fc2_b"],
    ])
    return model


def test_reference_matches_live_keras(weights, test_split):
    tf = pytest.importorskip(
        "tensorflow", reason="TensorFlow not installed: the live Keras comparison needs it "
                             "(the recorded logits are still compared)")
    idx = np.random.default_rng(SEED).choice(len(test_split[0]), size=8, replace=False)
    x = fm.preprocess(test_split[0][idx])
    model = _keras_from_npz(tf, weights)
    keras_logits = model(x.transpose(0, 2, 3, 1), training=False).numpy()
    ref = fm.reference_logits(weights, x)
    assert rel_error(keras_logits, ref) < REL_TOL


def test_reference_accuracy_on_first_1000_test_images(weights, test_split):
    images, labels = test_split
    pred = fm.reference_predict(weights, fm.preprocess(images[:1000]))
    assert pred.shape == (1000,)
    assert float((pred == labels[:1000]).mean()) >= 0.85


def test_reference_logits_refuses_raw_images(weights, test_split):
    with pytest.raises(ValueError, match="preprocess"):
        fm.reference_logits(weights, test_split[0][:2])


# --------------------------------------------------------------------------
# loader refusals
# --------------------------------------------------------------------------
PICKLE_RAN: list[str] = []


def _mark_pickle_ran() -> str:
    PICKLE_RAN.append("ran")
    return "ran"


class _Payload:
    """Unpickling this would call _mark_pickle_ran: the loader must never do so."""

    def __reduce__(self):
        return (_mark_pickle_ran, ())


def _save(path, arrays: dict) -> None:
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def _good(weights) -> dict[str, np.ndarray]:
    return {k: v.copy() for k, v in weights.items()}


def _wrong_shape(w):
    w["conv1_w"] = np.zeros((6, 1, 3, 3), np.float32)
    return w


def _missing_key(w):
    del w["fc2_b"]
    return w


def _extra_key(w):
    w["bonus"] = np.zeros(3, np.float32)
    return w


def _float64(w):
    return {k: v.astype(np.float64) for k, v in w.items()}


def _nan(w):
    w["fc1_w"][3, 7] = np.nan
    return w


def _object_array(w):
    w["conv1_w"] = np.array([_Payload()], dtype=object)
    return w


@pytest.mark.parametrize("mutate, pattern", [
    (_wrong_shape, r"conv1_w has shape \(6, 1, 3, 3\), expected \(6, 1, 5, 5\)"),
    (_missing_key, r"missing: \['fc2_b'\]"),
    (_extra_key, r"extra: \['bonus'\]"),
    (_float64, r"dtype float64, expected float32"),
    (_nan, r"fc1_w holds 1 non-finite"),
    (_object_array, r"object \(pickled\) array"),
], ids=["wrong-shape", "missing-key", "extra-key", "float64", "nan", "object-array"])
def test_loader_refuses_bad_contents(weights, tmp_path, mutate, pattern):
    path = tmp_path / "bad.npz"
    _save(path, mutate(_good(weights)))
    with pytest.raises(ValueError, match=pattern) as info:
        fm.load_weights(path)
    assert str(path) in str(info.value)
    assert "train_fashion_mnist.py" in str(info.value)     # says how to fix it
    assert PICKLE_RAN == []


def test_loader_accepts_a_faithful_copy(weights, tmp_path):
    path = tmp_path / "copy.npz"
    _save(path, _good(weights))
    again = fm.load_weights(path)
    for k in fm.SHAPES:
        np.testing.assert_array_equal(again[k], weights[k])


@pytest.mark.check
def test_loader_refuses_truncated_file(tmp_path):
    data = fm.WEIGHTS_PATH.read_bytes()
    path = tmp_path / "truncated.npz"
    path.write_bytes(data[:len(data) // 2])
    with pytest.raises(ValueError, match=r"truncated or corrupt") as info:
        fm.load_weights(path)
    assert str(path) in str(info.value)


def test_loader_refuses_garbage_and_missing_file(tmp_path):
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"this is not an npz archive at all" * 10)
    with pytest.raises(ValueError, match=re.escape(str(junk))):
        fm.load_weights(junk)
    missing = tmp_path / "nowhere.npz"
    with pytest.raises(ValueError, match=r"not found") as info:
        fm.load_weights(missing)
    assert str(missing) in str(info.value)
