"""The convolution ladder (labkit.ops.conv.conv2d: naive, tiled, constant) against the float64 reference.

Runs on whichever backend is active: the GPU where CuPy sees one, the CPU executor otherwise.
Inputs are fresh random arrays, sizes are odd and do not divide the tile, and the output is
poisoned with NaN before each launch, so an element a kernel forgot to write fails the comparison.
"""
from __future__ import annotations

import numpy as np
import pytest

import labkit
from labkit import reference
from labkit.checks import rel_error, to_numpy
from labkit.errors import ConstantMemoryError
from labkit.ops.conv import (CONST_BIAS_FLOATS, CONST_WEIGHT_FLOATS, VARIANTS, conv2d,
                         conv_launch_config)

from helpers import FakeCupyArray, expected, make_layer, run, with_changes

ACTIVATIONS = (None, "tanh", "relu")


# N, C, H, W, M, K: odd sizes that 8 and 16 do not divide, non-square planes, K = 1, 3, 5, 7.
SHAPES = [
    (2, 3, 21, 21, 5, 5),
    (1, 1, 30, 26, 6, 5),
    (2, 2, 13, 17, 3, 1),
    (1, 4, 15, 19, 3, 3),
    (3, 2, 20, 14, 4, 7),
]


@pytest.mark.parametrize("tile_width", [8, 16])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "N{}C{}H{}W{}M{}K{}".format(*s))
@pytest.mark.parametrize("activation", ACTIVATIONS, ids=str)
@pytest.mark.parametrize("variant", VARIANTS)
def test_matches_reference(variant, activation, shape, tile_width):
    x, w, b = make_layer(*shape)
    y = run(x, w, b, variant=variant, activation=activation, tile_width=tile_width)
    assert not np.isnan(y).any(), "some outputs were never written"
    assert rel_error(y, expected(x, w, b, activation)) < 1e-5


# The two convolutions of the seed network, batch 2.
SEED_LAYERS = {"layer1": (2, 1, 48, 48, 6, 5), "layer2": (2, 6, 22, 22, 16, 5)}


@pytest.mark.check
@pytest.mark.parametrize("activation", [None, "tanh"], ids=str)
@pytest.mark.parametrize("layer", SEED_LAYERS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_seed_layers(variant, layer, activation):
    x, w, b = make_layer(*SEED_LAYERS[layer])
    y = run(x, w, b, variant=variant, activation=activation)
    assert rel_error(y, expected(x, w, b, activation)) < 1e-5


@pytest.mark.check
@pytest.mark.parametrize("variant", VARIANTS)
def test_without_bias_and_without_out(variant):
    x, w, _ = make_layer(2, 3, 17, 19, 4, 3)
    xp = labkit.xp
    y = conv2d(xp.asarray(x), xp.asarray(w), variant=variant)
    assert isinstance(y, xp.ndarray) and y.dtype == np.float32 and y.shape == (2, 4, 15, 17)
    assert rel_error(y, reference.conv2d(x, w)) < 1e-5


def test_constant_weights_are_copied_on_every_call():
    # Two layers of one shape share the cached module, hence its __constant__ arrays.
    for _ in range(2):
        x, w, b = make_layer(1, 2, 19, 19, 3, 5)
        y = run(x, w, b, variant="constant")
        assert rel_error(y, expected(x, w, b, None)) < 1e-5


def test_constant_layer_at_the_limit():
    # M*C*K*K = CONST_WEIGHT_FLOATS exactly: 16 * 31 * 32 = 15872 (K = 1).
    M, C = 16, CONST_WEIGHT_FLOATS // 16
    assert M * C == CONST_WEIGHT_FLOATS
    x, w, b = make_layer(1, C, 3, 5, M, 1)
    y = run(x, w, b, variant="constant", activation="relu")
    assert rel_error(y, expected(x, w, b, "relu")) < 1e-5


@pytest.mark.parametrize("check", ["barrier", "shuffle", "memory", "race"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_checking_modes(variant, check):
    # On the CPU executor: barriers reached by the whole block, a result that does not depend on
    # the order of the threads, and no access outside the arrays.  On a GPU `check` is ignored.
    x, w, b = make_layer(2, 2, 13, 11, 3, 3)
    y = run(x, w, b, variant=variant, activation="tanh", tile_width=8, check=check)
    assert rel_error(y, expected(x, w, b, "tanh")) < 1e-5


# --- launch configuration ---------------------------------------------------------------------
def test_variants():
    assert VARIANTS == ("naive", "tiled", "constant", "tuned")


@pytest.mark.check
def test_launch_config():
    # Layer 2 in 16x16 tiles: an 18x18 output plane needs 2x2 tiles.
    assert conv_launch_config("naive", 2, 6, 22, 22, 16, 5, 16) == ((2, 16, 4), (16, 16, 1), 0)
    for v in ("tiled", "constant"):
        assert conv_launch_config(v, 2, 6, 22, 22, 16, 5, 16) == ((2, 16, 4), (16, 16, 1), 20 * 20 * 4)
    assert conv_launch_config("tiled", 3, 1, 30, 26, 6, 5, tile_width=8) == \
        ((3, 6, 4 * 3), (8, 8, 1), 12 * 12 * 4)


@pytest.mark.parametrize("args, match", [
    (("tiled", 1, 1, 120, 120, 1, 90, 32), "shared memory"),
    (("naive", 1, 1, 300, 300, 1, 1, 1), "grid z holds at most 65535"),
    (("naive", 1, 1, 9, 9, 70000, 3, 16), "grid y holds at most 65535"),
    (("naive", 1, 1, 9, 4, 2, 5, 16), "larger than the 9x4 input plane"),
    (("naive", 0, 1, 9, 9, 2, 3, 16), "N must be a positive int"),
    (("fast", 1, 1, 9, 9, 2, 3, 16), "variant must be one of"),
    (("naive", 1, 1, 9, 9, 2, 3, 33), "tile_width must be 1 to 32"),
])
def test_launch_config_errors(args, match):
    with pytest.raises(ValueError, match=match):
        conv_launch_config(*args)


# --- errors, raised before anything is compiled or launched ------------------------------------
def good():
    xp = labkit.xp
    x, w, b = make_layer(2, 3, 11, 13, 4, 3)
    return dict(x=xp.asarray(x), w=xp.asarray(w), b=xp.asarray(b))


def _with(**changes):
    return with_changes(good, **changes)


_FakeCupyArray = FakeCupyArray

BAD = [
    # (name, arguments, extra keywords, exception, part of the message)
    ("x-float64", _with(x=lambda a: a["x"].astype("float64")), {}, TypeError,
     r"x must be float32 NCHW, got float64: x\.astype\(np\.float32\)"),
    ("w-float64", _with(w=lambda a: a["w"].astype("float64")), {}, TypeError,
     r"w must be float32 MCKK, got float64"),
    ("b-float64", _with(b=lambda a: a["b"].astype("float64")), {}, TypeError,
     r"b must be float32"),
    ("x-list", _with(x=lambda a: to_numpy(a["x"]).tolist()), {}, TypeError,
     r"x must be a (numpy|cupy)\.ndarray, got list"),
    ("x-3d", _with(x=lambda a: a["x"][0]), {}, ValueError, r"x must be 4-D NCHW.*x\[None\]"),
    ("w-3d", _with(w=lambda a: a["w"][0]), {}, ValueError, r"w must be 4-D MCKK"),
    ("b-2d", _with(b=lambda a: a["b"][None]), {}, ValueError, r"b must be 1-D"),
    ("x-empty", _with(x=lambda a: a["x"][:0]), {}, ValueError, r"x must not be empty"),
    ("x-strided", _with(x=lambda a: a["x"][:, :, :, ::2]), {}, ValueError,
     r"x must be C-contiguous.*ascontiguousarray\(x\)"),
    ("w-transposed", _with(w=lambda a: a["w"].transpose(0, 1, 3, 2)), {}, ValueError,
     r"w must be C-contiguous"),
    ("channels", _with(w=lambda a: a["w"][:, :2].copy()), {}, ValueError,
     r"channels differ: x has C=3"),
    ("non-square", _with(w=lambda a: a["w"][:, :, :, :2].copy()), {}, ValueError,
     r"takes square kernels only: w has 3x2 kernels"),
    ("k-too-large", _with(x=lambda a: a["x"][:, :, :2, :].copy()), {}, ValueError,
     r"kernel size K=3 is larger than the 2x13 input plane"),
    ("bias-shape", _with(b=lambda a: a["b"][:3].copy()), {}, ValueError,
     r"b must have shape \(4,\)"),
    ("activation", good, {"activation": "sigmoid"}, ValueError,
     r"activation must be None, 'tanh' or 'relu', got 'sigmoid'"),
    ("variant", good, {"variant": "fast"}, ValueError,
     r"variant must be one of 'naive', 'tiled', 'constant', 'tuned', got 'fast'"),
    ("tile-width-type", good, {"tile_width": 16.0}, TypeError, r"tile_width must be an int"),
    ("tile-width-range", good, {"tile_width": 64}, ValueError, r"tile_width must be 1 to 32"),
]


@pytest.mark.check
@pytest.mark.parametrize("name, make, kw, exc, match", BAD, ids=[c[0] for c in BAD])
def test_bad_input(name, make, kw, exc, match):
    with pytest.raises(exc, match=match):
        conv2d(**make(), **kw)


def test_bad_out():
    xp = labkit.xp
    args = good()
    with pytest.raises(ValueError, match=r"out must have shape \(2, 4, 9, 11\)"):
        conv2d(**args, out=xp.empty((2, 4, 9, 10), dtype=xp.float32))
    with pytest.raises(TypeError, match=r"out must be float32 NCHW, got float64: allocate it"):
        conv2d(**args, out=xp.empty((2, 4, 9, 11), dtype=xp.float64))
    with pytest.raises(ValueError, match=r"out must be C-contiguous"):
        conv2d(**args, out=xp.empty((2, 4, 9, 22), dtype=xp.float32)[..., ::2])


def test_read_only_out(monkeypatch):
    monkeypatch.setenv("LABKIT_BACKEND", "cpu")  # NumPy arrays can be read-only, CuPy arrays cannot
    x, w, b = make_layer(1, 2, 9, 9, 3, 3)
    out = np.full((1, 3, 7, 7), np.nan, np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="out is read-only"):
        conv2d(x, w, b, out=out)


def test_gpu_array_on_cpu_executor(monkeypatch):
    monkeypatch.setenv("LABKIT_BACKEND", "cpu")
    x, w, b = make_layer(1, 2, 9, 9, 3, 3)
    with pytest.raises(TypeError, match=r"x is a CuPy array.*CPU executor.*cupy\.asnumpy\(x\)"):
        conv2d(_FakeCupyArray(), w, b)
    with pytest.raises(TypeError, match=r"b is a CuPy array.*cupy\.asnumpy\(b\)"):
        conv2d(x, w, _FakeCupyArray())


@pytest.mark.gpu
def test_host_array_on_gpu():
    x, w, b = make_layer(1, 2, 9, 9, 3, 3)
    import cupy
    with pytest.raises(TypeError, match=r"w is a NumPy array.*cupy\.asarray\(w\)"):
        conv2d(cupy.asarray(x), w, cupy.asarray(b))


@pytest.mark.check
@pytest.mark.parametrize("M, C, K", [(16, 64, 5), (CONST_BIAS_FLOATS + 1, 1, 1)],
                         ids=["weights", "biases"])
def test_constant_memory_overflow(M, C, K):
    xp = labkit.xp
    x, w, b = make_layer(1, C, 7, 9, M, K)
    need = (M * C * K * K + M) * 4
    with pytest.raises(ConstantMemoryError, match=rf"needs {need} bytes.*64 KiB.*variant='tiled'"):
        conv2d(xp.asarray(x), xp.asarray(w), xp.asarray(b), variant="constant")
    assert issubclass(ConstantMemoryError, ValueError)
    # The variant the message suggests takes the layer.
    y = run(x, w, b, variant="tiled")
    assert rel_error(y, expected(x, w, b, None)) < 1e-5


@pytest.mark.check
@pytest.mark.parametrize("variant", VARIANTS)
def test_kernel_resources(variant):
    from labkit.ops.conv import format_resources, kernel_resources
    info = kernel_resources(variant, 10, 6, 22, 22, 16, 5, tile_width=8)
    assert info["kernel"].startswith(f"conv_{variant}")
    assert (info["grid"], info["block"], info["dynamic_shared_bytes"]) == \
        conv_launch_config(variant, 10, 6, 22, 22, 16, 5, 8)
    text = format_resources(info)
    if labkit.backend() == "cuda":
        assert info["registers_per_thread"] > 0 and 0 < info["occupancy"] <= 1
        assert "registers/thread" in text and "occupancy" in text
    else:
        assert "GPU notions" in text
