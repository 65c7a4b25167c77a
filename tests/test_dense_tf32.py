"""labkit.ops.dense_tf32: a dense layer as a 1x1 TF32 convolution on the tensor cores (GPU), against the
float64 reference on odd sizes into a poisoned output; on the CPU executor it says it needs a GPU."""
from __future__ import annotations

import numpy as np
import pytest

import labkit
from labkit import reference
from labkit.checks import rel_error, to_numpy
from labkit.ops.dense_tf32 import DenseTF32

rng = np.random.default_rng()
ON_GPU = labkit.backend() == "cuda"


def dev(a):
    return labkit.xp.asarray(a)


@pytest.mark.gpu     # TF32 runs on the tensor cores (conv_implicit_tf32.cu declares requires-gpu)
@pytest.mark.parametrize("rows, k, n", [(3, 20, 13), (37, 21, 70), (130, 300, 9)])   # in 21: the copy pads to 24
@pytest.mark.parametrize("activation", [None, "relu"])
def test_matches_the_reference_within_tf32_rounding(rows, k, n, activation):
    x = rng.standard_normal((rows, k)).astype(np.float32)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    ref = reference.dense(x, w, b)
    if activation == "relu":
        ref = np.maximum(ref, 0)
    fc = DenseTF32(dev(w), dev(b), activation=activation)
    out = labkit.xp.full((rows, n), np.nan, dtype=labkit.xp.float32)
    ws = None if fc.workspace_shape(rows) is None else labkit.xp.empty(fc.workspace_shape(rows), labkit.xp.float32)
    y = fc(dev(x), out=out, workspace=ws)
    assert y.shape == (rows, n) and y.data.ptr == out.data.ptr
    assert 1e-7 < rel_error(to_numpy(y), ref) < 3e-3        # TF32: about 1e-3, and not FP32's 1e-7
    assert rel_error(to_numpy(fc(dev(x))), ref) < 3e-3      # its own output and workspace


@pytest.mark.gpu
def test_bad_input_is_refused_before_a_launch():
    fc = DenseTF32(dev(np.zeros((8, 5), np.float32)), None)
    with pytest.raises(ValueError, match="x must have 8 columns"):
        fc(dev(np.zeros((2, 7), np.float32)))
    with pytest.raises(ValueError, match=r"out must have shape \(2, 5\)"):
        fc(dev(np.zeros((2, 8), np.float32)), out=dev(np.zeros((2, 6), np.float32)))
    with pytest.raises((ValueError, TypeError), match="float32"):
        fc(dev(np.zeros((2, 8), np.float64)))
    with pytest.raises(ValueError, match=r"b must have shape \(5,\)"):
        DenseTF32(dev(np.zeros((8, 5), np.float32)), dev(np.zeros(4, np.float32)))


@pytest.mark.check
def test_on_the_cpu_executor_it_says_it_needs_a_gpu():
    if ON_GPU:
        pytest.skip("on a GPU the layer runs (the tests above); this checks the CPU executor's refusal")
    with pytest.raises(RuntimeError, match="tensor cores.*CPU executor runs precision='fp32'"):
        DenseTF32(dev(np.zeros((8, 5), np.float32)), None)
