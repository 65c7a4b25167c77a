"""labkit.reference against TensorFlow (CPU, float32).

Every reference layer is compared with the TensorFlow op of the same meaning on
random inputs, with relative error ||y - ref|| / ||ref|| < 1e-5 (TensorFlow
computes in float32, the references in float64).  The random inputs are seeded
(``SEED`` below, one generator per test) so that a failure can be reproduced.

The whole module is skipped, with its reason, where TensorFlow is not installed;
the import cost is paid once, here.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
tf = pytest.importorskip(
    "tensorflow",
    reason="TensorFlow is the independent oracle for these tests; "
           "install it with `pip install tensorflow-cpu`",
)

from labkit import reference as ref  # noqa: E402
from labkit.reference import cpu_conv, layers  # noqa: E402

SEED = 20240408
TOL = 1e-5


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(SEED)


def rel_err(y: np.ndarray, expected: np.ndarray) -> float:
    y = np.asarray(y, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert y.shape == expected.shape, f"shape {y.shape} != expected {expected.shape}"
    denom = np.linalg.norm(expected)
    return float(np.linalg.norm(y - expected) / (denom if denom > 0 else 1.0))


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


# --------------------------------------------------------------------------
# TensorFlow oracles (NCHW/MCKK in, NCHW out)
# --------------------------------------------------------------------------
def tf_conv2d(x, w, b=None, stride=1, pad=0, groups=1, split_groups=False):
    sh, sw = _pair(stride)
    ph, pw = _pair(pad)
    xt = tf.constant(np.asarray(x, np.float32).transpose(0, 2, 3, 1))   # NHWC
    wt = tf.constant(np.asarray(w, np.float32).transpose(2, 3, 1, 0))   # KH KW Cg M
    padding = [[0, 0], [ph, ph], [pw, pw], [0, 0]]
    if split_groups and groups > 1:
        xs = tf.split(xt, groups, axis=3)
        ws = tf.split(wt, groups, axis=3)
        y = tf.concat([tf.nn.conv2d(a, k, [1, sh, sw, 1], padding)
                       for a, k in zip(xs, ws)], axis=3)
    else:
        y = tf.nn.conv2d(xt, wt, [1, sh, sw, 1], padding)
    if b is not None:
        y = tf.nn.bias_add(y, np.asarray(b, np.float32))
    return y.numpy().transpose(0, 3, 1, 2)


def tf_max_pool(x, k, stride=None, pad=0):
    k = _pair(k)
    s = k if stride is None else _pair(stride)
    p = _pair(pad)
    xt = np.asarray(x, np.float32).transpose(0, 2, 3, 1)
    xt = np.pad(xt, ((0, 0), (p[0], p[0]), (p[1], p[1]), (0, 0)),
                constant_values=-np.inf)
    return tf.nn.max_pool2d(xt, k, s, "VALID").numpy().transpose(0, 3, 1, 2)


def tf_avg_pool(x, k, stride=None, pad=0):
    """Average over in-bounds elements: avg of zero-padded x / avg of zero-padded ones."""
    k = _pair(k)
    s = k if stride is None else _pair(stride)
    p = _pair(pad)
    xt = np.asarray(x, np.float32).transpose(0, 2, 3, 1)
    padw = ((0, 0), (p[0], p[0]), (p[1], p[1]), (0, 0))
    num = tf.nn.avg_pool2d(np.pad(xt, padw), k, s, "VALID").numpy()
    den = tf.nn.avg_pool2d(np.pad(np.ones_like(xt[:1, :, :, :1]), padw), k, s,
                           "VALID").numpy()
    return (num / den).transpose(0, 3, 1, 2)


def tf_lrn(x, r, bias, alpha, beta):
    xt = np.asarray(x, np.float32).transpose(0, 2, 3, 1)
    y = tf.nn.local_response_normalization(xt, depth_radius=r, bias=bias,
                                           alpha=alpha, beta=beta)
    return y.numpy().transpose(0, 3, 1, 2)


# --------------------------------------------------------------------------
# conv2d
# --------------------------------------------------------------------------
CONV_CASES = [
    # (N, C, H, W, M, K, stride, pad, groups)
    (2, 3, 13, 17, 4, 1, 1, 0, 1),
    (2, 3, 13, 17, 5, 3, 1, 1, 1),
    (1, 4, 13, 17, 6, 3, 2, 0, 2),
    (2, 1, 13, 17, 6, 5, 1, 0, 1),
    (2, 6, 15, 13, 4, 5, 2, 2, 2),
    (1, 3, 19, 23, 8, 7, 1, 3, 1),
    (1, 6, 21, 21, 6, 7, 3, (1, 2), 3),
    (2, 3, 13, 17, 4, 11, 1, 0, 1),
    (1, 3, 35, 39, 8, 11, 4, 0, 1),
    (1, 4, 31, 29, 8, 11, 4, 2, 2),
    (2, 2, 16, 16, 4, 4, (2, 3), 0, 1),
    (1, 1, 48, 48, 6, 5, 1, 0, 1),      # course layer 1
    (1, 6, 22, 22, 16, 5, 1, 0, 1),     # course layer 2
]


@pytest.mark.parametrize("n,c,h,w,m,k,stride,pad,groups", CONV_CASES)
@pytest.mark.parametrize("with_bias", [False, True])
def test_conv2d_matches_tf(rng, n, c, h, w, m, k, stride, pad, groups, with_bias):
    x = rng.standard_normal((n, c, h, w))
    wt = rng.standard_normal((m, c // groups, k, k))
    b = rng.standard_normal(m) if with_bias else None
    y = ref.conv2d(x, wt, b, stride=stride, pad=pad, groups=groups)
    assert y.dtype == np.float64
    expected = tf_conv2d(x, wt, b, stride, pad, groups)
    assert rel_err(y, expected) < TOL


def test_conv2d_grouped_matches_tf_split_concat(rng):
    """groups=2 as TensorFlow's per-group split + concat (independent of TF's grouped kernel)."""
    x = rng.standard_normal((2, 8, 15, 17))
    w = rng.standard_normal((6, 4, 3, 3))
    b = rng.standard_normal(6)
    y = ref.conv2d(x, w, b, stride=2, pad=1, groups=2)
    assert rel_err(y, tf_conv2d(x, w, b, 2, 1, 2, split_groups=True)) < TOL


def test_conv2d_non_square_kernel(rng):
    x = rng.standard_normal((2, 3, 13, 17))
    w = rng.standard_normal((4, 3, 3, 5))
    y = ref.conv2d(x, w, stride=(1, 2), pad=(2, 1))
    assert y.shape == (2, 4, 15, 8)
    assert rel_err(y, tf_conv2d(x, w, stride=(1, 2), pad=(2, 1))) < TOL


def test_conv2d_alexnet_conv1_and_conv2_shapes(rng):
    x = rng.standard_normal((1, 3, 227, 227))
    w1 = rng.standard_normal((96, 3, 11, 11)) * 0.05
    y1 = ref.conv2d(x, w1, stride=4)
    assert y1.shape == (1, 96, 55, 55)
    assert rel_err(y1, tf_conv2d(x, w1, stride=4)) < TOL
    x2 = rng.standard_normal((1, 96, 27, 27))
    w2 = rng.standard_normal((256, 48, 5, 5)) * 0.05
    y2 = ref.conv2d(x2, w2, pad=2, groups=2)
    assert y2.shape == (1, 256, 27, 27)
    assert rel_err(y2, tf_conv2d(x2, w2, pad=2, groups=2)) < TOL


def test_conv2d_dtype_keyword(rng):
    x = rng.standard_normal((2, 3, 9, 9)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    y64 = ref.conv2d(x, w)
    y32 = ref.conv2d(x, w, dtype=np.float32)
    assert y64.dtype == np.float64 and y32.dtype == np.float32
    assert rel_err(y32, y64) < 1e-6
    # integer input is converted
    xi = rng.integers(-3, 4, size=(1, 2, 6, 6))
    wi = rng.integers(-2, 3, size=(3, 2, 3, 3))
    assert np.array_equal(ref.conv2d(xi, wi), ref.conv2d(xi.astype(float), wi.astype(float)))


# --------------------------------------------------------------------------
# pooling
# --------------------------------------------------------------------------
POOL_CASES = [
    # (H, W, k, stride, pad)
    (13, 17, 2, None, 0),
    (13, 17, 3, 2, 0),
    (13, 17, 3, 1, 1),
    (27, 27, 3, 2, 0),     # AlexNet pooling
    (55, 55, 3, 2, 1),
    (15, 14, (2, 3), (1, 2), (1, 0)),
    (44, 44, 2, 2, 0),     # course model
    (7, 9, 4, 3, 2),
]


@pytest.mark.parametrize("h,w,k,stride,pad", POOL_CASES)
def test_max_pool2d_matches_tf(rng, h, w, k, stride, pad):
    x = rng.standard_normal((2, 3, h, w))
    y = ref.max_pool2d(x, k, stride, pad)
    assert rel_err(y, tf_max_pool(x, k, stride, pad)) < TOL


@pytest.mark.parametrize("h,w,k,stride,pad", POOL_CASES)
def test_avg_pool2d_matches_tf(rng, h, w, k, stride, pad):
    x = rng.standard_normal((2, 3, h, w))
    y = ref.avg_pool2d(x, k, stride, pad)
    assert rel_err(y, tf_avg_pool(x, k, stride, pad)) < TOL


def test_pool_valid_and_same_semantics(rng):
    x = rng.standard_normal((2, 4, 13, 17))
    xt = x.astype(np.float32).transpose(0, 2, 3, 1)
    # pad=0 is TF 'VALID'
    for op, tf_op in ((ref.max_pool2d, tf.nn.max_pool2d), (ref.avg_pool2d, tf.nn.avg_pool2d)):
        expected = tf_op(xt, 3, 2, "VALID").numpy().transpose(0, 3, 1, 2)
        assert rel_err(op(x, 3, 2), expected) < TOL
    # k=3, stride 1, pad 1 pads like TF 'SAME'; avg counts only in-bounds elements
    for op, tf_op in ((ref.max_pool2d, tf.nn.max_pool2d), (ref.avg_pool2d, tf.nn.avg_pool2d)):
        expected = tf_op(xt, 3, 1, "SAME").numpy().transpose(0, 3, 1, 2)
        assert rel_err(op(x, 3, 1, 1), expected) < TOL


def test_max_pool_with_padding_all_negative(rng):
    x = -np.abs(rng.standard_normal((1, 2, 5, 5))) - 1.0
    y = ref.max_pool2d(x, 3, 2, 1)
    assert np.all(y < 0), "padding must never win the max"
    assert rel_err(y, tf_max_pool(x, 3, 2, 1)) < TOL


def test_global_avg_pool_matches_tf(rng):
    x = rng.standard_normal((3, 5, 13, 17))
    y = ref.global_avg_pool(x)
    assert y.shape == (3, 5)
    expected = tf.reduce_mean(x.astype(np.float32), axis=(2, 3)).numpy()
    assert rel_err(y, expected) < TOL


# --------------------------------------------------------------------------
# activations, LRN, dense, softmax
# --------------------------------------------------------------------------
def test_activations_match_tf(rng):
    x = rng.standard_normal((2, 3, 13, 17)) * 5
    x32 = x.astype(np.float32)
    assert rel_err(ref.relu(x), tf.nn.relu(x32).numpy()) < TOL
    assert rel_err(ref.relu6(x), tf.nn.relu6(x32).numpy()) < TOL
    assert rel_err(ref.tanh(x), tf.math.tanh(x32).numpy()) < TOL
    for f in (ref.relu, ref.relu6, ref.tanh):
        assert f(x).dtype == np.float64
        assert f(x, dtype=np.float32).dtype == np.float32
        assert f(x).shape == x.shape
    assert ref.relu6(np.array([-1.0, 3.0, 7.0])).tolist() == [0.0, 3.0, 6.0]


@pytest.mark.parametrize("c,r,bias,alpha,beta", [
    (1, 2, 1.0, 2e-5, 0.75),
    (3, 2, 1.0, 2e-5, 0.75),
    (8, 2, 1.0, 2e-5, 0.75),
    (96, 2, 1.0, 2e-5, 0.75),   # AlexNet LRN parameters
    (7, 1, 2.0, 1e-1, 0.5),
    (10, 0, 0.5, 0.3, 1.0),
    (5, 6, 1.5, 0.05, 0.9),     # radius larger than the channel count
])
def test_lrn_matches_tf(rng, c, r, bias, alpha, beta):
    # large activations so that the normalization term matters
    x = rng.standard_normal((2, c, 7, 9)) * 20
    y = ref.lrn(x, depth_radius=r, bias=bias, alpha=alpha, beta=beta)
    assert rel_err(y, tf_lrn(x, r, bias, alpha, beta)) < TOL


def test_lrn_defaults_match_tf(rng):
    x = rng.standard_normal((1, 16, 5, 5)) * 50
    assert rel_err(ref.lrn(x), tf_lrn(x, 2, 1.0, 2e-5, 0.75)) < TOL


def test_dense_matches_tf(rng):
    x = rng.standard_normal((5, 37))
    w = rng.standard_normal((37, 11))
    b = rng.standard_normal(11)
    expected = (tf.matmul(x.astype(np.float32), w.astype(np.float32)) + b.astype(np.float32)).numpy()
    assert rel_err(ref.dense(x, w, b), expected) < TOL
    assert rel_err(ref.dense(x, w), tf.matmul(x.astype(np.float32), w.astype(np.float32)).numpy()) < TOL
    assert ref.dense(x[0], w, b).shape == (11,)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_matches_tf(rng, axis):
    x = rng.standard_normal((4, 10, 3)) * 3
    y = ref.softmax(x, axis=axis)
    assert rel_err(y, tf.nn.softmax(x.astype(np.float32), axis=axis).numpy()) < TOL
    assert np.allclose(y.sum(axis=axis), 1.0)


@pytest.mark.check
def test_softmax_is_numerically_stable():
    x = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, -1001.0, -1002.0]])
    y = ref.softmax(x)
    assert np.all(np.isfinite(y))
    expected = tf.nn.softmax(x.astype(np.float32)).numpy()
    assert rel_err(y, expected) < TOL


# --------------------------------------------------------------------------
# the three CPU convolutions of notebook 01
# --------------------------------------------------------------------------
@pytest.mark.check
@pytest.mark.parametrize("stride,pad", [(1, 0), (2, 1), ((1, 2), (2, 0))])
def test_conv2d_loops_tiny(rng, stride, pad):
    x = rng.standard_normal((2, 2, 6, 7)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    y = ref.conv2d_loops(x, w, b, stride=stride, pad=pad)
    assert y.dtype == np.float32
    assert rel_err(y, ref.conv2d(x, w, b, stride=stride, pad=pad)) < TOL
    assert rel_err(y, tf_conv2d(x, w, b, stride, pad)) < TOL


@pytest.mark.parametrize("shape_x,shape_w", [
    ((8, 1, 48, 48), (6, 1, 5, 5)),     # course layer 1
    ((8, 6, 22, 22), (16, 6, 5, 5)),    # course layer 2
    ((3, 3, 13, 17), (4, 3, 3, 5)),
])
@pytest.mark.parametrize("fn", ["conv2d_vectorized", "conv2d_im2col"])
def test_fast_cpu_convs_match_reference(rng, shape_x, shape_w, fn):
    conv = getattr(ref, fn)
    x = rng.standard_normal(shape_x).astype(np.float32)
    w = rng.standard_normal(shape_w).astype(np.float32)
    b = rng.standard_normal(shape_w[0]).astype(np.float32)
    y = conv(x, w, b)
    assert y.dtype == np.float32 and y.flags.c_contiguous
    assert rel_err(y, ref.conv2d(x, w, b)) < TOL
    assert rel_err(y, tf_conv2d(x, w, b)) < TOL
    # float64 input computes in float64
    y64 = conv(x.astype(np.float64), w, b)
    assert y64.dtype == np.float64
    assert rel_err(y64, ref.conv2d(x, w, b)) < 1e-12


@pytest.mark.check
@pytest.mark.parametrize("fn", ["conv2d_vectorized", "conv2d_im2col"])
def test_fast_cpu_convs_stride_pad(rng, fn):
    x = rng.standard_normal((2, 3, 13, 17))
    w = rng.standard_normal((4, 3, 5, 3))
    y = getattr(ref, fn)(x, w, stride=(2, 3), pad=(1, 2))
    assert rel_err(y, ref.conv2d(x, w, stride=(2, 3), pad=(1, 2))) < 1e-12


@pytest.mark.parametrize("threads", [None, 1, 2, 3])
@pytest.mark.parametrize("chunk", [None, 1, 3, 32, 1000])
def test_conv2d_im2col_chunking_gives_same_result(rng, chunk, threads):
    x = rng.standard_normal((7, 2, 9, 8)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    y = ref.conv2d_im2col(x, w, chunk=chunk, threads=threads)
    assert np.allclose(y, ref.conv2d_im2col(x, w, chunk=None), rtol=1e-6, atol=1e-6)
    assert rel_err(y, ref.conv2d(x, w)) < TOL


def test_im2col_layout(rng):
    n, c, h, w_, k = 2, 3, 6, 7, 3
    x = rng.standard_normal((n, c, h, w_)).astype(np.float32)
    cols = ref.im2col(x, k)
    ho, wo = h - k + 1, w_ - k + 1
    assert cols.shape == (n, c * k * k, ho * wo)
    assert cols.dtype == np.float32
    # column j of image n is the window under output pixel (j // wo, j % wo), (c, p, q) order
    for j in (0, 5, ho * wo - 1):
        i0, j0 = divmod(j, wo)
        assert np.array_equal(cols[1, :, j], x[1, :, i0:i0 + k, j0:j0 + k].reshape(-1))
    wt = rng.standard_normal((4, c, k, k)).astype(np.float32)
    y = (wt.reshape(4, -1) @ cols).reshape(n, 4, ho, wo)
    assert rel_err(y, ref.conv2d(x, wt)) < TOL
    assert ref.im2col(x, (3, 2), stride=2, pad=1).shape == (n, c * 6, 3 * 4)


# --------------------------------------------------------------------------
# bad input raises early with a helpful message
# --------------------------------------------------------------------------
def _raises(exc, match, fn, *args, **kwargs):
    with pytest.raises(exc, match=match):
        fn(*args, **kwargs)


@pytest.mark.check
def test_conv2d_rejects_bad_input():
    x = np.zeros((1, 6, 8, 8))
    w = np.zeros((4, 3, 3, 3))
    _raises(ValueError, r"x must be 4-D NCHW, got shape \(3, 4\)", ref.conv2d, np.zeros((3, 4)), w)
    _raises(ValueError, r"add a batch axis", ref.conv2d, np.zeros((6, 8, 8)), w)
    _raises(ValueError, r"w must be 4-D \(M, C/groups, KH, KW\)", ref.conv2d, x, np.zeros((4, 3, 3)))
    _raises(ValueError, r"channels of x \(6\) must equal groups\*C/groups of w \(1\*3 = 3\)",
            ref.conv2d, x, w)
    _raises(ValueError, r"divisible by groups", ref.conv2d, x, np.zeros((5, 2, 3, 3)), groups=3)
    _raises(ValueError, r"b must have shape \(4,\)", ref.conv2d, x, w, np.zeros(3), groups=2)
    _raises(ValueError, r"kernel height \(11\) is larger than the padded input height",
            ref.conv2d, x, np.zeros((4, 6, 11, 3)))
    _raises(ValueError, r"stride must be >= 1", ref.conv2d, x, w, groups=2, stride=0)
    _raises(ValueError, r"pad must be >= 0", ref.conv2d, x, w, groups=2, pad=-1)
    _raises(TypeError, r"stride must be an int or a \(h, w\) pair", ref.conv2d, x, w, groups=2,
            stride=1.5)
    _raises(TypeError, r"groups must be an int", ref.conv2d, x, w, groups=2.0)
    _raises(ValueError, r"groups must be >= 1", ref.conv2d, x, w, groups=0)
    _raises(TypeError, r"dtype must be np.float32 or np.float64", ref.conv2d, x, w, groups=2,
            dtype=np.int32)
    _raises(TypeError, r"x must hold real numbers", ref.conv2d, np.full((1, 6, 8, 8), "a"), w)
    _raises(TypeError, r"x must hold real numbers", ref.conv2d, x.astype(complex), w, groups=2)
    _raises(TypeError, r"w must be an array, got None", ref.conv2d, x, None)
    _raises(ValueError, r"x must not be empty", ref.conv2d, np.zeros((0, 6, 8, 8)), w, groups=2)


@pytest.mark.check
def test_other_layers_reject_bad_input():
    x = np.zeros((1, 3, 8, 8))
    _raises(ValueError, r"x must be 4-D NCHW", ref.max_pool2d, np.zeros((8, 8)), 2)
    _raises(ValueError, r"pooling window height \(9\) is larger", ref.max_pool2d, x, 9)
    _raises(ValueError, r"pad \(2, 2\) must be smaller than the pooling window", ref.avg_pool2d,
            x, 2, 1, 2)
    _raises(TypeError, r"k must be an int", ref.avg_pool2d, x, "2")
    _raises(ValueError, r"x must be 4-D NCHW", ref.global_avg_pool, np.zeros((3, 8)))
    _raises(ValueError, r"x must be 4-D NCHW", ref.lrn, np.zeros((3, 8)))
    _raises(ValueError, r"depth_radius must be >= 0", ref.lrn, x, -1)
    _raises(TypeError, r"depth_radius must be an int", ref.lrn, x, 2.5)
    _raises(ValueError, r"features of x \(5\) must equal the rows of w \(4\)", ref.dense,
            np.zeros((2, 5)), np.zeros((4, 3)))
    _raises(ValueError, r"flatten the activations", ref.dense, x, np.zeros((192, 3)))
    _raises(ValueError, r"b must have shape \(3,\)", ref.dense, np.zeros((2, 4)),
            np.zeros((4, 3)), np.zeros(4))
    _raises(ValueError, r"axis 2 is out of range", ref.softmax, np.zeros((2, 3)), axis=2)
    _raises(TypeError, r"x must hold real numbers", ref.relu, ["a", "b"])
    _raises(TypeError, r"dtype must be np.float32 or np.float64", ref.tanh, x, dtype="float16")


@pytest.mark.check
def test_cpu_convs_reject_bad_input():
    x = np.zeros((1, 2, 8, 8), np.float32)
    for f in (ref.conv2d_loops, ref.conv2d_vectorized, ref.conv2d_im2col):
        _raises(ValueError, r"x must be 4-D NCHW", f, np.zeros((2, 8, 8)), np.zeros((3, 2, 3, 3)))
        _raises(ValueError, r"channels of x \(2\)", f, x, np.zeros((3, 4, 3, 3)))
    _raises(ValueError, r"chunk must be >= 1", ref.conv2d_im2col, x, np.zeros((3, 2, 3, 3)),
            chunk=0)
    _raises(TypeError, r"chunk must be a positive int or None", ref.conv2d_im2col, x,
            np.zeros((3, 2, 3, 3)), chunk=2.5)
    _raises(ValueError, r"threads must be >= 1", ref.conv2d_im2col, x, np.zeros((3, 2, 3, 3)),
            threads=0)
    _raises(ValueError, r"x must be 4-D NCHW", ref.im2col, np.zeros((8, 8)), 3)
    _raises(ValueError, r"kernel width \(9\) is larger", ref.im2col, x, (3, 9))


@pytest.mark.check
def test_public_api_is_reexported():
    for name in layers.__all__ + cpu_conv.__all__:
        assert getattr(ref, name) is getattr(layers if name in layers.__all__ else cpu_conv, name)
        assert getattr(ref, name).__doc__
