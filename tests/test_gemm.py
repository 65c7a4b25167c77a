"""The GEMM ladder (labkit.ops.gemm.gemm: naive, tiled, regtile, vec, dbuf) against float64 NumPy.

Runs on whichever backend is active: the GPU where CuPy sees one, the CPU executor otherwise.
Inputs are fresh random arrays, sizes are odd and do not divide the tiles, and the output is
poisoned with NaN before each launch, so an element a kernel forgot to write fails the comparison.
"""
from __future__ import annotations

import numpy as np
import pytest

import labkit
from labkit.ladder.harness import reference_activation
from labkit.checks import rel_error
from labkit.ops.gemm import DEFAULT_PARAMS, VARIANTS, gemm, gemm_launch_config

from helpers import FakeCupyArray, with_changes

rng = np.random.default_rng()
ACTIVATIONS = (None, "tanh", "relu")


def to_numpy(a) -> np.ndarray:
    if type(a).__module__.startswith("cupy"):
        import cupy
        return cupy.asnumpy(a)
    return np.asarray(a)


def make(M, N, K, *, bias=True):
    """Random float32 a (M, K), b (K, N), bias (N,) as NumPy arrays (bias None without)."""
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float32)
    return a, b, rng.standard_normal(N).astype(np.float32) if bias else None


def expected(a, b, bias, activation):
    c = a.astype(np.float64) @ b.astype(np.float64)
    return reference_activation(c if bias is None else c + bias.astype(np.float64), activation)


def run(a, b, bias, **kw):
    """gemm on the backend's arrays, into a NaN-poisoned out; the result as NumPy."""
    xp = labkit.xp
    out = xp.full((a.shape[0], b.shape[1]), np.nan, dtype=xp.float32)
    c = gemm(xp.asarray(a), xp.asarray(b), None if bias is None else xp.asarray(bias), out=out, **kw)
    assert c is out
    return to_numpy(c)


# (M, N, K): a single element, sizes no tile divides, a K that is a multiple of 4 (the float4
# path of vec and dbuf) and ones that are not (their scalar fallback), a wide and flat C.
SHAPES = [(1, 1, 1), (17, 33, 9), (65, 70, 129), (128, 64, 100), (3, 200, 31)]


@pytest.mark.check
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "M{}N{}K{}".format(*s))
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("activation", ACTIVATIONS, ids=str)
@pytest.mark.parametrize("variant", VARIANTS)
def test_matches_reference(variant, activation, bias, shape):
    a, b, bv = make(*shape, bias=bias)
    c = run(a, b, bv, variant=variant, activation=activation)
    assert not np.isnan(c).any(), "some outputs were never written"
    # Against the terms' sizes: M1N1K1's one product and its bias may all but cancel.
    terms = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    if bv is not None:
        terms = terms + np.abs(bv)
    assert rel_error(c, expected(a, b, bv, activation), terms=terms) < 1e-5


@pytest.mark.parametrize("shape", [(19, 37, 13), (20, 36, 12)], ids=["odd", "float4"])
@pytest.mark.parametrize("check", ["barrier", "shuffle", "memory", "race"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_checking_modes(variant, check, shape):
    # On the CPU executor: barriers reached by the whole block, a result that does not depend on
    # the order of the threads, and no access outside the arrays.  On a GPU `check` is ignored.
    a, b, bias = make(*shape)
    c = run(a, b, bias, variant=variant, activation="tanh", check=check)
    assert rel_error(c, expected(a, b, bias, "tanh")) < 1e-5


def _misaligned(x: np.ndarray):
    """A C-contiguous copy of x that starts 4 bytes past a 16-byte boundary, on the backend."""
    xp = labkit.xp
    buf = xp.zeros(x.size + 4, dtype=xp.float32)
    base = buf.__array_interface__["data"][0] if xp is np else buf.data.ptr
    off = next(i for i in range(4) if (base + 4 * i) % 16 == 4)
    view = buf[off:off + x.size].reshape(x.shape)
    view[...] = xp.asarray(x)
    assert view.flags.c_contiguous
    return view


@pytest.mark.parametrize("variant", VARIANTS)
def test_misaligned_rows_fall_back_to_scalar_loads(variant):
    # K and N are multiples of 4, but the matrices start off a 16-byte boundary: float4 loads
    # would be misaligned, so vec and dbuf must see it at run time and load floats one by one.
    a, b, bias = make(21, 44, 36)
    xp = labkit.xp
    out = xp.full((21, 44), np.nan, dtype=xp.float32)
    c = gemm(_misaligned(a), _misaligned(b), xp.asarray(bias), variant=variant, out=out)
    assert rel_error(c, expected(a, b, bias, None)) < 1e-5


PARAMS = [
    {"GEMM_TILE": 8},
    {"GEMM_TM": 8, "GEMM_TN": 8},                                              # 64 threads
    {"GEMM_BM": 32, "GEMM_BN": 64, "GEMM_BK": 4, "GEMM_TM": 4, "GEMM_TN": 8},  # non-square tiles
    {"GEMM_BM": 128, "GEMM_BN": 64, "GEMM_BK": 16, "GEMM_TM": 16, "GEMM_TN": 8},  # 4 x 2 groups of 4 x 4
]


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: ",".join(f"{k[5:]}={v}" for k, v in p.items()))
@pytest.mark.parametrize("variant", VARIANTS)
def test_other_tile_sizes(variant, params):
    a, b, bias = make(37, 75, 22)
    c = run(a, b, bias, variant=variant, activation="relu", params=params)
    assert rel_error(c, expected(a, b, bias, "relu")) < 1e-5


@pytest.mark.check
@pytest.mark.parametrize("variant", VARIANTS)
def test_without_bias_and_without_out(variant):
    a, b, _ = make(9, 13, 7, bias=False)
    xp = labkit.xp
    c = gemm(xp.asarray(a), xp.asarray(b), variant=variant)
    assert isinstance(c, xp.ndarray) and c.dtype == np.float32 and c.shape == (9, 13)
    assert rel_error(c, expected(a, b, None, None)) < 1e-5


# --- launch configuration ---------------------------------------------------------------------
def test_variants_and_defaults():
    assert VARIANTS == ("naive", "tiled", "regtile", "vec", "dbuf")
    assert DEFAULT_PARAMS == {"GEMM_TILE": 16, "GEMM_BM": 64, "GEMM_BN": 64, "GEMM_BK": 8,
                              "GEMM_TM": 4, "GEMM_TN": 4}


@pytest.mark.check
def test_launch_config():
    for v in ("naive", "tiled"):
        assert gemm_launch_config(v, 65, 70, 129) == ((5, 5, 1), (16, 16, 1), 0)
    for v in ("regtile", "vec", "dbuf"):
        assert gemm_launch_config(v, 65, 70, 129) == ((2, 2, 1), (256, 1, 1), 0)
        assert gemm_launch_config(v, 3, 200, 31) == ((4, 1, 1), (256, 1, 1), 0)
    assert gemm_launch_config("dbuf", 128, 128, 8, {"GEMM_TM": 8, "GEMM_TN": 8}) == ((2, 2, 1), (64, 1, 1), 0)
    assert gemm_launch_config("tiled", 17, 33, 9, {"GEMM_TILE": 8}) == ((5, 3, 1), (8, 8, 1), 0)


@pytest.mark.parametrize("args, match", [
    (("fast", 1, 1, 1), "variant must be one of"),
    (("naive", 0, 1, 1), "M must be a positive int"),
    (("naive", 1, 1, 2.0), "K must be a positive int"),
    (("naive", 16 * 65536, 1, 1), "grid y holds at most 65535"),
    (("tiled", 1, 1, 1, {"GEMM_TILE": 33}), "GEMM_TILE must be 1 to 32"),
    (("vec", 1, 1, 1, {"GEMM_TM": 6}), "GEMM_TM must divide GEMM_BM"),
    (("vec", 1, 1, 1, {"GEMM_BK": 6}), "multiples of 4"),
    (("vec", 1, 1, 1, {"GEMM_BM": 256, "GEMM_BN": 256}), "at most 1024"),
    (("vec", 1, 1, 1, {"GEMM_BK": 128}), "over 48 KiB"),
    (("vec", 1, 1, 1, {"BM": 64}), "unknown gemm parameter 'BM'"),
])
def test_launch_config_errors(args, match):
    with pytest.raises(ValueError, match=match):
        gemm_launch_config(*args)


# --- errors, raised before anything is compiled or launched ------------------------------------
def good():
    xp = labkit.xp
    a, b, bias = make(5, 7, 3)
    return dict(a=xp.asarray(a), b=xp.asarray(b), bias=xp.asarray(bias))


def _with(**changes):
    return with_changes(good, **changes)


_FakeCupyArray = FakeCupyArray

BAD = [
    # (name, arguments, extra keywords, exception, part of the message)
    ("a-float64", _with(a=lambda x: x["a"].astype("float64")), {}, TypeError,
     r"a must be float32 row-major \(M, K\), got float64: a\.astype\(np\.float32\)"),
    ("b-int32", _with(b=lambda x: x["b"].astype("int32")), {}, TypeError,
     r"b must be float32 row-major \(K, N\), got int32: b\.astype\(np\.float32\)"),
    ("bias-float64", _with(bias=lambda x: x["bias"].astype("float64")), {}, TypeError,
     r"bias must be float32"),
    ("a-list", _with(a=lambda x: to_numpy(x["a"]).tolist()), {}, TypeError,
     r"a must be a (numpy|cupy)\.ndarray, got list"),
    ("a-1d", _with(a=lambda x: x["a"][0]), {}, ValueError, r"a must be 2-D row-major \(M, K\), got shape \(3,\)"),
    ("b-3d", _with(b=lambda x: x["b"][None]), {}, ValueError, r"b must be 2-D"),
    ("bias-2d", _with(bias=lambda x: x["bias"][None]), {}, ValueError, r"bias must be 1-D"),
    ("a-empty", _with(a=lambda x: x["a"][:0]), {}, ValueError, r"a must not be empty"),
    ("a-strided", _with(a=lambda x: x["a"][:, ::2]), {}, ValueError,
     r"a must be C-contiguous.*ascontiguousarray\(a\)"),
    ("b-transposed-view", _with(b=lambda x: x["b"].T.copy().T), {}, ValueError, r"b must be C-contiguous"),
    ("mismatched-k", _with(b=lambda x: x["b"][:2].copy()), {}, ValueError,
     r"inner dimensions differ: a is \(M, K\) = \(5, 3\) but b is \(2, 7\); b must be \(K, N\) with K=3"),
    ("b-transposed", _with(b=lambda x: x["b"].T.copy()), {}, ValueError,
     r"inner dimensions differ.*b looks transposed.*ascontiguousarray\(b\.T\)"),
    ("bias-shape", _with(bias=lambda x: x["bias"][:5].copy()), {}, ValueError,
     r"bias must have shape \(7,\), one value per column of b, got \(5,\)"),
    ("activation", good, {"activation": "sigmoid"}, ValueError,
     r"activation must be None, 'tanh', 'relu', 'gelu' or 'gelu_tanh', got 'sigmoid'"),
    ("variant", good, {"variant": "fast"}, ValueError,
     r"variant must be auto or one of 'naive', 'tiled', 'regtile', 'vec', 'dbuf', got 'fast'"),
    ("params", good, {"params": {"GEMM_TN": 3}}, ValueError, r"GEMM_TN divide GEMM_BN, got .*TN=3"),
]


@pytest.mark.parametrize("name, build, kw, exc, match", BAD, ids=[c[0] for c in BAD])
def test_bad_input(name, build, kw, exc, match):
    with pytest.raises(exc, match=match):
        gemm(**build(), **kw)


def test_bad_out():
    xp = labkit.xp
    args = good()
    with pytest.raises(ValueError, match=r"out must have shape \(5, 7\)"):
        gemm(**args, out=xp.empty((5, 6), dtype=xp.float32))
    with pytest.raises(TypeError, match=r"out must be float32 row-major \(M, N\), got float64: allocate it"):
        gemm(**args, out=xp.empty((5, 7), dtype=xp.float64))
    with pytest.raises(ValueError, match=r"out must be C-contiguous"):
        gemm(**args, out=xp.empty((5, 14), dtype=xp.float32)[:, ::2])


def test_read_only_out(monkeypatch):
    monkeypatch.setenv("LABKIT_BACKEND", "cpu")  # NumPy arrays can be read-only, CuPy arrays cannot
    a, b, bias = make(4, 5, 3)
    out = np.full((4, 5), np.nan, np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="out is read-only"):
        gemm(a, b, bias, out=out)


def test_gpu_array_on_cpu_executor(monkeypatch):
    monkeypatch.setenv("LABKIT_BACKEND", "cpu")
    a, b, bias = make(4, 5, 3)
    with pytest.raises(TypeError, match=r"a is a CuPy array.*CPU executor.*cupy\.asnumpy\(a\)"):
        gemm(_FakeCupyArray(), b, bias)
    with pytest.raises(TypeError, match=r"bias is a CuPy array.*cupy\.asnumpy\(bias\)"):
        gemm(a, b, _FakeCupyArray())


@pytest.mark.gpu
def test_host_array_on_gpu():
    a, b, bias = make(4, 5, 3)
    import cupy
    with pytest.raises(TypeError, match=r"b is a NumPy array.*cupy\.asarray\(b\)"):
        gemm(cupy.asarray(a), b, cupy.asarray(bias))


@pytest.mark.parametrize("M, N, K, splits", [(1, 70, 293, 3), (5, 130, 1000, 7), (37, 64, 40, 2), (3, 33, 17, 9)])
@pytest.mark.parametrize("bias_per", ["column", "row"])
@pytest.mark.parametrize("params", [{"GEMM_BM": 16, "GEMM_BN": 64, "GEMM_BK": 8, "GEMM_TM": 4, "GEMM_TN": 4},
                                    {"GEMM_BM": 64, "GEMM_BN": 128, "GEMM_BK": 8, "GEMM_TM": 8, "GEMM_TN": 8}],
                         ids=["16x64/4x4", "64x128/8x8"])
def test_split_k_matches_the_float64_product(M, N, K, splits, bias_per, params):
    rng = np.random.default_rng()
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    bias = rng.standard_normal(N if bias_per == "column" else M).astype(np.float32)
    out = labkit.xp.full((M, N), np.nan, dtype=labkit.xp.float32)
    c = gemm(labkit.xp.asarray(a), labkit.xp.asarray(b), labkit.xp.asarray(bias), variant="dbuf", params=params,
             splits=splits, bias_per=bias_per, activation="relu", out=out)
    want = a.astype(np.float64) @ b + (bias[None, :] if bias_per == "column" else bias[:, None])
    got = np.asarray(c.get() if hasattr(c, "get") else c)
    assert c is out and np.abs(got - np.maximum(want, 0)).max() / np.abs(want).max() < 1e-5


@pytest.mark.check
def test_split_k_choice_and_refusals():
    from labkit.ops.gemm import splits_for
    big = {"GEMM_BM": 64, "GEMM_BN": 128, "GEMM_BK": 8, "GEMM_TM": 8, "GEMM_TN": 8}
    assert splits_for(1, 4096, 9216, big, sms=132) == 9          # 32 blocks -> 264 wanted
    assert splits_for(4096, 4096, 4096, big, sms=132) == 1       # plenty of blocks already
    assert splits_for(1, 4096, 64, big, sms=132) == 1            # 8 k-tiles: too shallow to split
    a = labkit.xp.zeros((2, 16), dtype=labkit.xp.float32)
    with pytest.raises(ValueError, match="split-K is built on variant 'dbuf'"):
        gemm(a, labkit.xp.zeros((16, 4), dtype=labkit.xp.float32), variant="vec", splits=2)
    with pytest.raises(ValueError, match="splits must be a positive int or 'auto'"):
        gemm(a, labkit.xp.zeros((16, 4), dtype=labkit.xp.float32), variant="dbuf", splits=0)


@pytest.mark.parametrize("act", ["gelu", "gelu_tanh"])
@pytest.mark.parametrize("M, N, K, how", [(37, 45, 19, {"variant": "dbuf"}), (40, 70, 300, {"variant": "dbuf", "splits": 3}),
                                          (3, 130, 100, {"variant": "auto"}), (21, 33, 17, {"variant": "vec"})])
def test_gelu_in_the_epilogue(act, M, N, K, how):
    """GELU (exact, and its tanh form) after the bias, in every path's epilogue (one kernel, split-K's
    reduce, few rows), against float64; a NaN product stays NaN."""
    from math import erf
    rng = np.random.default_rng()
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float32)
    bias = rng.standard_normal(N).astype(np.float32)
    a[1, 0] = np.nan
    v = a.astype(np.float64) @ b + bias
    if act == "gelu":
        want = 0.5 * v * (1 + np.vectorize(erf)(v / np.sqrt(2)))
    else:
        want = 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3)))
    xp = labkit.xp
    out = xp.full((M, N), 7.0, dtype=xp.float32)
    c = gemm(xp.asarray(a), xp.asarray(b), xp.asarray(bias), activation=act, out=out, **how)
    got = labkit.checks.to_numpy(c)
    assert c is out and np.isnan(got[1]).all() and not np.isnan(np.delete(got, 1, axis=0)).any()
    assert rel_error(np.delete(got, 1, axis=0), np.delete(want, 1, axis=0)) < 1e-5


# --- few rows (dense layers at small batches) ---------------------------------------------------
@pytest.mark.parametrize("M, N, K, slices", [(1, 70, 293, 3), (3, 130, 1000, 7), (5, 33, 17, 1), (16, 257, 129, 5),
                                             (9, 1000, 300, "auto"), (2, 4096, 640, 10)])
def test_few_rows_matches_the_float64_product(M, N, K, slices):
    from labkit.ops.gemm import gemm_few_rows
    rng = np.random.default_rng()
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    bias = rng.standard_normal(N).astype(np.float32)
    xp = labkit.xp
    out = xp.full((M, N), np.nan, dtype=xp.float32)
    c = gemm_few_rows(xp.asarray(a), xp.asarray(b), xp.asarray(bias), activation="relu", out=out, slices=slices)
    want = np.maximum(a.astype(np.float64) @ b + bias, 0)
    assert c is out and rel_error(c, want) < 1e-5


@pytest.mark.check
def test_few_rows_refusals():
    from labkit.ops.gemm import gemm_few_rows
    xp = labkit.xp
    a, b = xp.zeros((17, 8), dtype=xp.float32), xp.zeros((8, 4), dtype=xp.float32)
    with pytest.raises(ValueError, match="at most 16 rows of a, got M=17"):
        gemm_few_rows(a, b)
    with pytest.raises(ValueError, match="slices must be 'auto' or an int from 1 to K=8"):
        gemm_few_rows(a[:2], b, slices=9)
    with pytest.raises(ValueError, match=r"workspace must be float32 \(2, 2, 4\)"):
        gemm_few_rows(a[:2], b, slices=2, workspace=xp.zeros((3, 2, 4), dtype=xp.float32))
    with pytest.raises(TypeError):
        gemm_few_rows(a[:2].astype(xp.float64), b)
