"""The CUDA Math API's functions that C++ lacks, conversions with a rounding mode, and atomicAdd of
half pairs, on the CPU executor (tests/data/cuda_programs/math_functions.cu), each value checked here
against its definition: closed forms and Python's math module, inverses by the round trip, series
summed in Python, and the rounding of each conversion from the exact value (fractions)."""
from __future__ import annotations

import math
import shutil
import struct
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from labkit.cuda import run_program

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the CPU executor needs g++")

PROGRAM = Path(__file__).parent / "data" / "cuda_programs" / "math_functions.cu"


@pytest.fixture(scope="module")
def printed():
    rc, out, err = run_program(PROGRAM)
    assert rc == 0, err[-2000:]
    lines = out.splitlines()
    math_rows = [[float(v) for v in ln.split()[1:]] for ln in lines if ln.startswith("math ")]
    cvt_rows = [[int(v) for v in ln.split()[1:]] for ln in lines if ln.startswith("cvt ")]
    half = [float(v) for v in next(ln for ln in lines if ln.startswith("half ")).split()[1:]]
    return math_rows, cvt_rows, half


def rel(got, want, tol):
    return abs(got - want) <= tol * max(abs(want), 1e-300)


def i0_series(x, order=0):
    term = (x / 2) ** order / math.factorial(order)
    total, k = term, 0
    while abs(term) > 1e-18 * abs(total):
        k += 1
        term *= (x / 2) ** 2 / (k * (k + order))
        total += term
    return total


def test_math_functions_against_their_definitions(printed):
    rows, _, _ = printed
    assert len(rows) == 64
    for r in rows:
        v = r[0]
        f = r[1:]
        on_grid = (2 * v) == math.floor(2 * v)          # integers and halves: exact values
        if on_grid:
            k = round(2 * v) % 4                          # sin(pi v) at v = k/2 (mod 2)
            assert (f[0], f[1]) == ([0, 1, 0, -1][k], [1, 0, -1, 0][k]), v
            assert (f[2], f[3]) == (f[0], f[1])
        else:
            t = math.pi * math.fmod(v, 2.0)               # reduced first: pi * v itself rounds away digits
            assert rel(f[0], math.sin(t), 1e-15) and rel(f[1], math.cos(t), 1e-15)
            assert rel(f[2], math.sin(t), 2e-7) and rel(f[3], math.cos(t), 2e-7)
        y = v / 10
        assert rel(math.erf(f[4]), y, 1e-15)                       # erfinv: the round trip
        assert rel(math.erfc(f[5]), 1 + y, 1e-15)                   # erfcinv
        want = math.exp(v * v) * math.erfc(v) if v < 6 else None
        if want is not None:
            assert rel(f[6], want, 1e-13)
        # in the tails erfc magnifies the rounding of v / sqrt(2) (here, not in the kernel) some 60 times
        assert rel(f[7], 0.5 * math.erfc(-v / math.sqrt(2)), 1e-13)
        p = 0.5 + v / 20
        assert rel(0.5 * math.erfc(-f[8] / math.sqrt(2)), p, 1e-14)  # normcdfinv
        if v != 0:
            assert rel(f[9], math.copysign(abs(v) ** (-1 / 3), v), 1e-15)
        assert rel(f[10], 1 / math.hypot(v, 2), 1e-15)
        assert rel(f[11], math.sqrt(v * v + 13), 1e-15)
        assert rel(f[12], 1 / math.sqrt(v * v + 14), 1e-15)
        assert rel(f[13], i0_series(abs(v)), 1e-14)
        assert rel(f[14], math.copysign(i0_series(abs(v), 1), v), 1e-14)
        assert rel(f[15], f[4], 3e-7)
        assert rel(f[16], f[7], 3e-7)
        assert f[17] == 0 and f[18] == (4 if v < 0 else 0)


def f32(bits):
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def rounded_float(exact: Fraction, mode: str) -> float:
    """The float32 nearest below (rd), above (ru) or toward zero (rz) of an exact value."""
    near = float(np.float32(float(exact)))
    below = near if Fraction(near) <= exact else float(np.nextafter(np.float32(near), np.float32(-np.inf)))
    above = near if Fraction(near) >= exact else float(np.nextafter(np.float32(near), np.float32(np.inf)))
    return {"rd": below, "ru": above, "rz": below if exact >= 0 else above}[mode]


def test_conversions_round_in_their_mode_and_clamp(printed):
    _, rows, _ = printed
    fs = [2.5, -2.5, 3.5, -0.5, float(np.float32(0.49999997)), 3e9, -3e9, float(np.float32(1e20)), -1.0,
          16777216.0, math.nan, -0.0]
    ds = [2.5, -3.5, 0.1, -0.1, 1e300, -1e300, 2147483647.5, 1 / 3, 16777217.0, 1e-50, -1e-50, 0.0]
    ls = [16777217, -16777217, 2147483647, -2147483648, 9007199254740993, 3, -3, 1, 0, 33554435, -33554435, 123456789]
    I32, U32, I64, U64 = (-2**31, 2**31 - 1), (0, 2**32 - 1), (-2**63, 2**63 - 1), (0, 2**64 - 1)

    def to_int(x, rnd, lim):
        if math.isnan(x):    # what a GPU's cvt gives (measured on an H200): 0 in 32 bits, the top bit in 64
            return 2**63 if lim == U64 else (-2**63 if lim == I64 else 0)
        r = {"rn": round(x), "rz": math.trunc(x), "ru": math.ceil(x), "rd": math.floor(x)}[rnd] if math.isfinite(x) \
            else (math.inf if x > 0 else -math.inf)
        return int(min(max(r, lim[0]), lim[1]))

    for f, d, ll, got in zip(fs, ds, ls, rows):
        want = [to_int(f, "rn", I32), to_int(f, "rz", I32), to_int(f, "ru", I32), to_int(f, "rd", I32),
                to_int(f, "rn", U32), to_int(f, "rd", I64), to_int(f, "ru", U64), to_int(d, "rn", I32),
                to_int(d, "rz", I64)]
        # __float2ull_ru printed as a long long: the same 64 bits
        want[6] = want[6] - 2**64 if want[6] >= 2**63 else want[6]
        assert got[:9] == want, (f, d, got[:9], want)
        i32 = max(min(ll, 2**31 - 1), -2**31) if -2**31 <= ll < 2**31 else ((ll + 2**31) % 2**32) - 2**31
        assert f32(got[9]) == rounded_float(Fraction(i32), "rz")
        assert f32(got[10]) == rounded_float(Fraction(i32), "ru")
        assert f32(got[11]) == rounded_float(Fraction(ll), "rd")
        assert f32(got[12]) == (rounded_float(Fraction(d), "rd") if abs(d) < 3.4e38 else
                                (float(np.finfo(np.float32).max) if d > 0 else -math.inf))
        assert f32(got[13]) == (rounded_float(Fraction(d), "ru") if abs(d) < 3.4e38 else
                                (math.inf if d > 0 else -float(np.finfo(np.float32).max)))
        u = ll % 2**64
        q = struct.unpack("<d", struct.pack("<q", got[14]))[0]
        assert Fraction(q) <= u and float(np.nextafter(q, np.inf)) > u


def test_atomic_adds_of_half_pairs_and_halves(printed):
    _, _, half = printed
    assert half == [128.0, 256.0, 64.0]      # 256 threads: 0.5, 1.0 and 0.25 each, all sums exact in half
