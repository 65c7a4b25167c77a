"""Layer normalization (layer_norm.cu, labkit.ops.layer_norm) against the float64 reference on fresh
random inputs of odd sizes and a poisoned output; a large mean against a small spread (the two-pass
variance); NaN kept to its row; the refusals.  Pointwise's new codes (erf, GELU) and ops (sub, div)."""
from __future__ import annotations

from math import erf

import numpy as np
import pytest

import labkit
from labkit import reference
from labkit.checks import rel_error, to_numpy
from labkit.ops.layer_norm import LayerNorm
from labkit.ops.pointwise import Binary, Unary

pytestmark = pytest.mark.check
rng = np.random.default_rng()
dev = labkit.xp.asarray


@pytest.mark.parametrize("shape, norm", [((3, 5, 7, 33), (33,)), ((2, 1), (1,)), ((4, 1000), (1000,)),
                                         ((2, 3, 4, 5), (3, 4, 5)), ((7, 9, 64), (64,))])
def test_matches_the_reference(shape, norm):
    x = (rng.standard_normal(shape) * 3 + rng.standard_normal()).astype(np.float32)
    g, b = (rng.random(norm) + 0.5).astype(np.float32), rng.standard_normal(norm).astype(np.float32)
    out = labkit.xp.full(shape, np.nan, dtype=labkit.xp.float32)
    y = LayerNorm(dev(g), dev(b), 1e-6)(dev(x), out=out)
    assert y is out and rel_error(y, reference.layer_norm(x, g, b, 1e-6)) < 1e-5


def test_a_large_mean_against_a_small_spread():
    """x = 1000 + N(0, 0.01): a one-pass E[x^2] - mean^2 loses every digit in float32; two passes keep them."""
    x = (1000 + 0.01 * rng.standard_normal((5, 96))).astype(np.float32)
    g, b = np.ones(96, np.float32), np.zeros(96, np.float32)
    y = to_numpy(LayerNorm(dev(g), dev(b), 1e-12)(dev(x)))
    ref = reference.layer_norm(x, g, b, 1e-12)
    assert np.abs(y - ref).max() < 5e-3 * np.abs(ref).max()     # float32 x itself holds 1000 to ~6e-5


def test_a_nan_makes_its_row_nan_only():
    x = rng.standard_normal((4, 37)).astype(np.float32)
    x[2, 5] = np.nan
    y = to_numpy(LayerNorm(dev(np.ones(37, np.float32)), dev(np.zeros(37, np.float32)))(dev(x)))
    assert np.isnan(y[2]).all() and not np.isnan(np.delete(y, 2, axis=0)).any()


def test_refusals():
    g = dev(np.ones(5, np.float32))
    with pytest.raises(ValueError, match="end in the normalized shape"):
        LayerNorm(g, g)(dev(np.zeros((3, 4), np.float32)))
    with pytest.raises(ValueError, match="eps"):
        LayerNorm(g, g, eps=-1.0)
    with pytest.raises(ValueError, match="one non-empty shape"):
        LayerNorm(g, dev(np.ones(4, np.float32)))
    with pytest.raises(TypeError, match="float32"):
        LayerNorm(g, g)(dev(np.zeros((3, 5), np.float64)))
    x = dev(np.zeros((3, 5), np.float32))
    with pytest.raises(ValueError):
        LayerNorm(g, g)(x, out=x)                  # out may not overlap x


@pytest.mark.parametrize("kind, f", [("erf", np.vectorize(erf)),
                                     ("gelu", lambda t: 0.5 * t * (1 + np.vectorize(erf)(t / np.sqrt(2)))),
                                     ("gelu_tanh", lambda t: 0.5 * t * (1 + np.tanh(np.sqrt(2 / np.pi) *
                                                                                   (t + 0.044715 * t ** 3))))])
def test_erf_and_gelu(kind, f):
    v = (rng.standard_normal((3, 41)) * 3).astype(np.float32)
    v[0, 0] = np.nan
    out = labkit.xp.full(v.shape, 7.0, dtype=labkit.xp.float32)
    y = to_numpy(Unary(kind)(dev(v), out=out))
    want = f(v.astype(np.float64))
    assert np.isnan(y[0, 0]) and rel_error(y[1:], want[1:]) < 1e-6


@pytest.mark.parametrize("op, f", [("sub", np.subtract), ("div", np.divide)])
def test_sub_and_div_broadcast(op, f):
    p, q = rng.standard_normal((2, 3, 5)).astype(np.float32), (rng.random((3, 1)) + 1).astype(np.float32)
    assert rel_error(Binary(op)(dev(p), dev(q)), f(p.astype(np.float64), q)) < 1e-6
    assert rel_error(Binary(op)(dev(q), dev(p)), f(q.astype(np.float64), p)) < 1e-6
    with pytest.raises(ValueError, match="op must be one of"):
        Binary("pow")
