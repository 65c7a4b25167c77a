"""Prepared launches: the face (labkit.conv2d on every rung), the layer objects, what a prepared call
still checks (aliasing, dtype, shape), the defaults chosen by shape, and models run eagerly and as
one CUDA graph.  Every result against the float64 reference, on fresh random odd sizes, into
outputs poisoned with NaN."""
from __future__ import annotations

import numpy as np
import pytest

import labkit
from labkit import layers, loader, reference
from labkit.checks import rel_error
from labkit.errors import ConstantMemoryError
from labkit.ops import gemm as G
from labkit.shapes import ConvLayer

rng = np.random.default_rng()
ON_GPU = labkit.backend() == "cuda"


def dev(a):
    return labkit.xp.asarray(a)


def poisoned(shape):
    return labkit.xp.full(shape, np.nan, dtype=labkit.xp.float32)


def conv_case(N, C, H, W, M, K, groups=1):
    x = rng.standard_normal((N, C, H, W), dtype=np.float32)
    w = (rng.standard_normal((M, C // groups, K, K)) / np.sqrt(C // groups * K * K)).astype(np.float32)
    return x, w, rng.standard_normal(M).astype(np.float32)


# --- the face: every rung through labkit.conv2d ------------------------------------------------------
@pytest.mark.check
@pytest.mark.parametrize("variant", [r.name for r in labkit.RUNGS])
def test_the_face_reaches_every_rung(variant):
    x, w, b = conv_case(2, 3, 13, 11, 5, 3)
    ref = np.tanh(reference.conv2d(x, w, b))
    if variant == "implicit_tf32" and not ON_GPU:
        with pytest.raises(RuntimeError, match="tensor cores.*CPU executor runs precision='fp32'"):
            labkit.conv2d(dev(x), dev(w), dev(b), variant=variant, activation="tanh")
        return
    out = poisoned(ref.shape)
    y = labkit.conv2d(dev(x), dev(w), dev(b), variant=variant, activation="tanh", out=out)
    assert y is out and rel_error(y, ref) < (3e-3 if variant == "implicit_tf32" else 1e-5)


@pytest.mark.check
@pytest.mark.parametrize("variant", ["unrolled", "implicit"])
def test_the_face_takes_stride_padding_and_groups(variant):
    x, w, b = conv_case(2, 6, 15, 12, 4, 3, groups=2)
    ref = reference.conv2d(x, w, b, stride=2, pad=1, groups=2)
    y = labkit.conv2d(dev(x), dev(w), dev(b), stride=2, pad=1, groups=2, variant=variant, out=poisoned(ref.shape))
    assert rel_error(y, ref) < 1e-5


@pytest.mark.check
def test_the_face_says_what_a_rung_cannot_do():
    x, w, b = (dev(a) for a in conv_case(1, 2, 9, 9, 3, 3))
    with pytest.raises(ValueError, match=r"variant 'tiled' computes the seed's valid convolutions.*"
                                         r"stride=2.*variant='implicit'"):
        labkit.conv2d(x, w, b, stride=2, variant="tiled")
    with pytest.raises(ValueError, match="variant must be one of 'auto', 'naive', 'tiled'.*'implicit_tf32', got 'fft'"):
        labkit.conv2d(x, w, b, variant="fft")
    with pytest.raises(TypeError, match=r"variant 'implicit' takes no option 'tile_width' \(its options: tiles\)"):
        labkit.conv2d(x, w, b, variant="implicit", tile_width=8)
    xb, wb, bb = (dev(a) for a in conv_case(1, 64, 9, 9, 64, 5))
    with pytest.raises(ConstantMemoryError, match="variant='tiled'"):
        labkit.conv2d(xb, wb, bb, variant="constant")


# --- layer objects --------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["naive", "tiled", "constant", "tuned"])
def test_conv2d_layer_owns_its_weights_and_serves_new_shapes(variant):
    x, w, b = conv_case(3, 2, 12, 10, 4, 3)
    w_dev, b_dev = dev(w.copy()), dev(b)         # on the CPU executor dev() would not copy
    conv = layers.Conv2d(w_dev, b_dev, variant=variant, activation="relu")
    w_dev[...] = 0                    # the layer copied them: changing the caller's arrays changes nothing
    for shape in [(3, 2, 12, 10), (1, 2, 9, 13), (3, 2, 12, 10)]:
        xs = rng.standard_normal(shape, dtype=np.float32)
        out = poisoned((shape[0], 4, shape[2] - 2, shape[3] - 2))
        assert conv(dev(xs), out) is out
        assert rel_error(out, np.maximum(reference.conv2d(xs, w, b), 0)) < 1e-5


@pytest.mark.parametrize("variant", ["constant", "tuned"])
def test_two_constant_memory_layers_of_one_shape_keep_their_own_weights(variant):
    # Each layer has a module of its own: its weights are uploaded once, and the other layer's
    # upload (same kernel, same shape) does not overwrite them.
    x, w1, b1 = conv_case(2, 3, 11, 12, 4, 3)
    _, w2, b2 = conv_case(2, 3, 11, 12, 4, 3)
    one, two = layers.Conv2d(dev(w1), dev(b1), variant=variant), layers.Conv2d(dev(w2), dev(b2), variant=variant)
    for _ in range(2):
        assert rel_error(one(dev(x)), reference.conv2d(x, w1, b1)) < 1e-5
        assert rel_error(two(dev(x)), reference.conv2d(x, w2, b2)) < 1e-5
        # the functional call of the same shape uploads on every call, into the shared module
        assert rel_error(labkit.conv2d(dev(x), dev(w2), dev(b2), variant=variant), reference.conv2d(x, w2, b2)) < 1e-5


def test_conv_pool_layer_matches_the_reference():
    x, w, b = conv_case(3, 1, 16, 14, 5, 5)
    ref = reference.max_pool2d(np.tanh(reference.conv2d(x, w, b)), 2)
    out = poisoned(ref.shape)
    assert layers.ConvPoolTanh(dev(w), dev(b))(dev(x), out) is out and rel_error(out, ref) < 1e-5
    assert rel_error(layers.conv_pool_tanh(dev(x), dev(w), dev(b)), ref) < 1e-5


@pytest.mark.parametrize("rows", [1, 3, 4, 5, 16, 17, 70])
@pytest.mark.parametrize("bias, activation", [(True, "relu"), (False, None), (True, "tanh")], ids=str)
def test_dense_layer_at_every_kernel_it_picks(rows, bias, activation):
    K, N = 301, 37                     # sizes no tile divides
    x = rng.standard_normal((rows, K), dtype=np.float32)
    w = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32) if bias else None
    fc = layers.Dense(dev(w), None if b is None else dev(b), activation=activation)
    ref = reference.dense(x, w, b)
    ref = {"relu": np.maximum(ref, 0), "tanh": np.tanh(ref), None: ref}[activation]
    for _ in range(2):                 # the second call reuses the plan and its workspace
        out = poisoned((rows, N))
        assert fc(dev(x), out) is out and rel_error(out, ref) < 1e-5
    kernel, _tiles = G.gemm_config(rows, N, K)
    assert kernel == ("few_rows" if rows <= G.FEW_ROWS else "dbuf")


@pytest.mark.check
def test_small_layers_as_objects():
    x = (rng.standard_normal((2, 7, 9, 11)) * 10).astype(np.float32)
    assert rel_error(layers.MaxPool2d(3, 2)(dev(x), poisoned((2, 7, 4, 5))), reference.max_pool2d(x, 3, 2)) == 0
    assert rel_error(layers.LRN(2, 1.0, 1e-3, 0.75)(dev(x)), reference.lrn(x, 2, 1.0, 1e-3, 0.75)) < 1e-5
    logits = x.reshape(14, 99)
    assert rel_error(layers.Softmax()(dev(logits), poisoned((14, 99))), reference.softmax(logits)) < 1e-6


# --- what a prepared call still checks --------------------------------------------------------------------
def test_an_output_that_overlaps_an_input_is_refused():
    x, w, b = (dev(a) for a in conv_case(2, 4, 9, 9, 4, 1))        # K=1: y has x's shape
    with pytest.raises(ValueError, match="out shares memory with input 0.*separate output array"):
        labkit.conv2d(x, w, b, out=x)
    with pytest.raises(ValueError, match="out shares memory with input 0"):
        layers.Conv2d(w, b)(x, x)
    a = dev(rng.standard_normal((8, 8), dtype=np.float32))
    with pytest.raises(ValueError, match="out shares memory with input 0"):
        G.gemm(a, dev(np.eye(8, dtype=np.float32)), out=a)
    with pytest.raises(ValueError, match="out shares memory with input 1"):
        G.gemm(dev(np.eye(8, dtype=np.float32)), a, out=a)
    with pytest.raises(ValueError, match="out shares memory"):
        layers.lrn(x, out=x)
    with pytest.raises(ValueError, match="out shares memory"):
        layers.softmax(a, out=a)
    fc = layers.Dense(dev(np.eye(8, dtype=np.float32)))
    with pytest.raises(ValueError, match="out shares memory with input 0"):
        fc(a, a)


def test_a_prepared_call_still_refuses_a_bad_input():
    x, w, b = conv_case(2, 3, 11, 12, 4, 3)
    conv = layers.Conv2d(dev(w), dev(b))
    conv(dev(x))                                           # the plan of this shape exists now
    with pytest.raises(TypeError, match="x must be float32 NCHW, got float64"):
        conv(dev(x.astype(np.float64)))
    with pytest.raises(ValueError, match="x must be C-contiguous"):
        conv(dev(np.concatenate([x, x], axis=3))[..., ::2])
    with pytest.raises(ValueError, match="channels differ"):
        conv(dev(x[:, :2].copy()))
    with pytest.raises(TypeError, match="must be a (numpy|cupy).ndarray, got list"):
        conv(x.tolist())
    fc = layers.Dense(dev(w.reshape(4, -1).T.copy()))
    with pytest.raises(ValueError, match="x must have 27 columns"):
        fc(dev(np.zeros((2, 26), np.float32)))


@pytest.mark.check
def test_reload_forgets_modules_and_plans():
    seen = {}
    loader.register_cache(seen)
    seen["plan"] = object()
    x, w, b = conv_case(1, 2, 7, 7, 2, 3)
    before = labkit.conv2d(dev(x), dev(w), dev(b), variant="tiled")
    labkit.reload()
    assert seen == {}
    assert rel_error(labkit.conv2d(dev(x), dev(w), dev(b), variant="tiled"), reference.conv2d(x, w, b)) < 1e-5
    assert rel_error(before, reference.conv2d(x, w, b)) < 1e-5


@pytest.mark.check
def test_constant_uploads_refuse_what_the_symbol_would_misread():
    mod = labkit.load("conv_constant", defines={"TILE_WIDTH": 8, "CONST_WEIGHT_FLOATS": 64, "CONST_BIAS_FLOATS": 4})
    with pytest.raises(TypeError, match="float32, int32 or uint32 array, got ndarray of float64"):
        labkit.set_constant(mod, "c_bias", np.zeros(4))
    with pytest.raises(ConstantMemoryError, match="do not fit 'c_bias'"):
        labkit.set_constant(mod, "c_bias", np.zeros(5, np.float32))


# --- the defaults ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("M, N, K, kernel, tiles", [
    (1, 4096, 9216, "few_rows", None), (4, 1000, 4096, "few_rows", None),
    (8, 4096, 9216, "dbuf", G.ROWS_16_TILES), (100, 10, 140, "dbuf", G.NARROW_TILES),
    (100, 140, 5184, "dbuf", {"GEMM_BM": 64, "GEMM_BN": 144, "GEMM_BK": 8, "GEMM_TM": 8, "GEMM_TN": 4}),
    (4096, 4096, 4096, "dbuf", G.BIG_TILES), (128, 4096, 9216, "dbuf", G.MEDIUM_TILES)])
def test_default_tiles_by_shape(M, N, K, kernel, tiles):
    assert G.default_config(M, N, K) == (kernel, tiles)
    assert G.gemm_config(M, N, K, device_name="a GPU no table knows") == (kernel, tiles)


@pytest.mark.parametrize("M, N, K", [(1, 70, 293), (3, 33, 17), (9, 130, 100), (37, 10, 50), (70, 140, 333),
                                     (130, 200, 70)])
@pytest.mark.parametrize("bias_per", ["column", "row"])
def test_gemm_with_its_defaults_matches_the_float64_product(M, N, K, bias_per):
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    bias = rng.standard_normal(N if bias_per == "column" else M).astype(np.float32)
    out = poisoned((M, N))
    c = G.gemm(dev(a), dev(b), dev(bias), bias_per=bias_per, activation="relu", out=out)
    want = a.astype(np.float64) @ b + (bias[None, :] if bias_per == "column" else bias[:, None])
    assert c is out and rel_error(c, np.maximum(want, 0)) < 1e-5


# --- models: eager and as one CUDA graph ---------------------------------------------------------------------
@pytest.mark.check
def test_fashion_net_eager_and_graph_agree_with_the_reference():
    from labkit.data import load_fashion_mnist
    from labkit.models import fashion_mnist as fm
    images, _ = load_fashion_mnist("test")
    weights = fm.load_weights()
    net = fm.FashionNet(weights)
    idx = rng.choice(len(images), 5, replace=False)
    x = fm.preprocess(images[idx])
    ref = reference.softmax(fm.reference_logits(weights, x))
    plan = net.plan(5)
    plan.x[...] = dev(x)
    plan.out[...] = np.nan
    assert rel_error(plan.run(), ref) < 1e-5       # one CUDA graph on a GPU; the steps on the CPU executor
    graph = labkit.checks.to_numpy(plan.out).copy()
    plan.out[...] = np.nan
    eager = labkit.checks.to_numpy(net(dev(x)))    # the same plan's buffers, step by step, reading x in place
    assert np.array_equal(graph, eager)
    x2 = fm.preprocess(images[idx[::-1]])          # the graph replays on whatever the input buffer holds
    plan.x[...] = dev(x2)
    assert rel_error(plan.run(), reference.softmax(fm.reference_logits(weights, x2))) < 1e-5


@pytest.mark.check
def test_a_graph_refuses_nothing_and_replays_on_the_cpu_executor_step_by_step():
    from labkit.backends.graph import Graph
    calls = []
    g = Graph([lambda: calls.append(1), lambda: calls.append(2)])
    if ON_GPU:
        pytest.skip("on a GPU the steps are captured; the CPU executor's path is what this checks")
    g.launch()
    g.launch()
    assert calls == [1, 2, 1, 2]


@pytest.mark.check
def test_host_time_per_call_is_measured_by_the_clock():
    from labkit.measure import host_us
    times = host_us(lambda: sum(range(100)), warmup=2, repeat=50)
    assert len(times) == 50 and all(t > 0 for t in times)
