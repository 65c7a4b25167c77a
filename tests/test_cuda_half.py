"""Half precision (cuda_fp16.h) on the CPU executor: conversions on the host against known bit patterns,
and the device's arithmetic, comparisons and conversions against numpy's float16 (which rounds to
nearest even) on random halves, subnormals, infinities and NaN among them; NVIDIA's fp16ScalarProduct
runs in test_cuda_programs.  Kernels (CPUModule) take the same header, and cuda_bf16.h's bfloat16,
checked against exact rational results rounded to nearest even."""
from __future__ import annotations

import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from labkit.backends.cpu import CPUModule, program_source
from labkit.cuda import run_program
from labkit.errors import UnsupportedOnCPU

DATA = Path(__file__).parent / "data" / "cuda_programs"
N = 2048


def _inputs(rng):
    bits = rng.integers(0, 1 << 16, size=(3, N), dtype=np.uint16)
    # Values near 1 too, where sums and products round (random bits are mostly far apart in magnitude).
    near = rng.integers(0x3800, 0x4400, size=(3, N // 4), dtype=np.uint16)
    bits[:, :N // 4] = near
    bits[:, N // 4:N // 4 + 8] = [[0x7c00, 0xfc00, 0x7e00, 0x0001, 0x8001, 0x7bff, 0x0000, 0x8000]] * 3
    # An fma that a float intermediate gets wrong: (2^-11 (1 + 2^-10)) (1 - 2^-10) + (1 + 2^-10) is
    # 1 + 3 * 2^-11 - 2^-31, just below a midpoint: 0x3c01; rounded to float first it is the midpoint,
    # and ties to even give 0x3c02.
    bits[:, N // 4 + 8] = [0x1001, 0x3bfe, 0x3c01]
    f = np.concatenate([rng.standard_normal(N // 2) * 100,
                        rng.uniform(-2.0 ** -14, 2.0 ** -14, N // 4),      # subnormal halves
                        rng.uniform(6e4, 7e4, N // 4)]).astype(np.float32)  # about the largest half
    return bits, f


def _same(got, want):
    """Equal bits, or both NaN (a NaN's payload is not specified)."""
    return (got.view(np.uint16) == want.view(np.uint16)) | (np.isnan(got) & np.isnan(want))


def _fma_reference(a, b, c):
    """a*b+c rounded once to half, from the exact rational value: the nearest of the half next to it
    and that half's neighbours, ties to the even bit pattern."""
    out = np.empty(N, np.float16)
    for i in range(N):
        x, y, z = float(a[i]), float(b[i]), float(c[i])
        if not all(np.isfinite([x, y, z])) or not np.isfinite(x * y + z):
            out[i] = np.float16(x * y + z)        # inf and NaN: float64 gives them as fp16 does
            continue
        exact = Fraction(x) * Fraction(y) + Fraction(z)
        h = np.float16(float(exact))
        cands = [h, np.nextafter(h, np.float16(np.inf)), np.nextafter(h, np.float16(-np.inf))]
        cands = [v for v in cands if np.isfinite(v)] or [h]
        best = min(cands, key=lambda v: (abs(Fraction(float(v)) - exact), int(v.view(np.uint16)) & 1))
        if abs(exact) >= 65520:
            best = np.float16(np.inf if exact > 0 else -np.inf)
        out[i] = best
    return out


@pytest.mark.skipif(shutil.which("g++") is None, reason="the CPU executor needs g++")
def test_half_arithmetic_matches_float16_rounded_once(tmp_path):
    bits, f = _inputs(np.random.default_rng(7))
    (tmp_path / "in.bin").write_bytes(bits.tobytes() + f.tobytes())
    rc, out, err = run_program(DATA / "half_precision.cu", [str(tmp_path / "in.bin"), str(tmp_path / "out.bin")])
    assert rc == 0, err[-2000:] + out
    assert out.rstrip().endswith("PASSED") and "WRONG" not in out, out
    assert "warp sum: 496 -992" in out
    raw = (tmp_path / "out.bin").read_bytes()
    res = np.frombuffer(raw[:11 * N * 2], np.uint16).view(np.float16).reshape(11, N)
    cmp = np.frombuffer(raw[11 * N * 2:], np.uint8)
    a, b, c = bits.view(np.float16)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(all="ignore"):
        want = [(a64 + b64).astype(np.float16), (a64 - b64).astype(np.float16), (a64 * b64).astype(np.float16),
                (a64 / b64).astype(np.float16), _fma_reference(a, b, c)]
    for k, name in enumerate(["add", "sub", "mul", "div", "fma"]):
        for form, row in (("__half", k), ("__half2", 5 + k)):
            ok = _same(res[row], want[k])
            assert ok.all(), (f"{name} ({form}) of {a[~ok][:3]}, {b[~ok][:3]}, {c[~ok][:3]}: "
                              f"{res[row][~ok][:3]}, want {want[k][~ok][:3]}")
    with np.errstate(over="ignore"):
        assert _same(res[10], f.astype(np.float16)).all()   # float -> half, round to nearest even
    with np.errstate(invalid="ignore"):
        bits_want = ((a == b) * 1 | (a < b) * 2 | (a <= b) * 4 | (a > b) * 8 | (a >= b) * 16 | (a != b) * 32
                     | (a < b) * 64 | (a != b) * 128)
    assert (cmp == bits_want).all()


@pytest.mark.check
def test_fp8_is_still_refused_by_name():
    src = "#include <cuda_fp8.h>\n__global__ void k(__nv_fp8_e4m3* x) { }\n"
    with pytest.raises(UnsupportedOnCPU, match=r"h.cu:1 includes <cuda_fp8.h>, fp8 types"):
        program_source.check_program_supported(src, "h.cu")
    program_source.check_program_supported("#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
                                           "__global__ void k(__half2* x, __nv_bfloat162* y) { }\n", "h.cu")


@pytest.mark.skipif(shutil.which("g++") is None, reason="the CPU executor needs g++")
def test_a_kernel_of_half2_runs_on_numpy_float16_arrays():
    code = r'''#include <cuda_fp16.h>
extern "C" __global__ void axpy(const __half2* x, __half2* y, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __hfma2(__float2half2_rn(a), x[i], y[i]);
}'''
    x = np.random.default_rng(1).standard_normal(64).astype(np.float16)
    y = np.ones(64, np.float16)
    CPUModule(code, path="axpy.cu").get_function("axpy")((1,), (32,), [x, y, np.float32(0.3), np.int32(32)])
    # a * x + 1 is exact in float64 (a and x halves): one rounding to half, as the GPU's fma.
    want = (np.float64(np.float16(0.3)) * x.astype(np.float64) + 1).astype(np.float16)
    assert (y.view(np.uint16) == want.view(np.uint16)).all()


def _bfloat16_of(x: Fraction) -> int | None:
    """The bfloat16 bits nearest the exact x (ties to even), or None outside the normal range."""
    if x == 0:
        return None
    sign, x = (0x8000 if x < 0 else 0), abs(x)
    e = x.numerator.bit_length() - x.denominator.bit_length()
    if Fraction(2) ** e > x:
        e -= 1
    r = round(x / Fraction(2) ** (e - 7))        # 8 significand bits; round() ties to even
    if r == 256:
        r, e = 128, e + 1
    return None if not -126 <= e <= 127 else sign | (e + 127) << 7 | (r - 128)


@pytest.mark.skipif(shutil.which("g++") is None, reason="the CPU executor needs g++")
def test_bfloat16_arithmetic_and_conversions_round_once():
    code = r'''#include <cuda_bf16.h>
extern "C" __global__ void ops(const unsigned short* a, const unsigned short* b, const float* f,
                               unsigned short* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __nv_bfloat16 x = __ushort_as_bfloat16(a[i]), y = __ushort_as_bfloat16(b[i]);
  out[i] = __bfloat16_as_ushort(x + y);
  out[n + i] = __bfloat16_as_ushort(__hmul(x, y));
  __nv_bfloat162 p = __hfma2(__halves2bfloat162(x, y), __halves2bfloat162(y, x), __bfloat162bfloat162(x));
  out[2 * n + i] = __bfloat16_as_ushort(__low2bfloat16(p));       // x * y + x
  out[3 * n + i] = __bfloat16_as_ushort(__float2bfloat16_rn(f[i]));
  if (i == 0)   // 1.5 * (1 + 2^-7) - 2^-100
    out[4 * n] = __bfloat16_as_ushort(__hfma(__ushort_as_bfloat16(0x3fc0), __ushort_as_bfloat16(0x3f81),
                                             __ushort_as_bfloat16(0x8d80)));
}'''
    rng = np.random.default_rng(3)
    n = 1024
    a = rng.integers(0, 1 << 16, n, dtype=np.uint16)
    b = rng.integers(0, 1 << 16, n, dtype=np.uint16)
    a[:n // 2], b[:n // 2] = rng.integers(0x3f00, 0x4000, n // 2), rng.integers(0x3b00, 0x3f80, n // 2)
    f = (rng.standard_normal(n) * 10).astype(np.float32)
    f[:4] = [1 + 2 ** -8, 1 + 3 * 2 ** -8, 3.4e38, -2.0 ** -130]     # ties to even, overflow, subnormal
    out = np.zeros(4 * n + 1, np.uint16)
    CPUModule(code, path="bf16.cu").get_function("ops")((n // 64,), (64,), [a, b, f, out, np.int32(n)])
    assert list(out[3 * n:3 * n + 4]) == [0x3f80, 0x3f82, 0x7f80, 0x8008]
    # 1.5 * (1 + 2^-7) is a midpoint between bfloat16s; less 2^-100 it rounds down, where the sum
    # rounded to nearest double would be the midpoint itself and tie to even (0x3fc2).
    assert out[4 * n] == 0x3fc1

    def value(u):
        return float(np.array([int(u) << 16], np.uint32).view(np.float32)[0])
    checked = 0
    for i in range(n):
        x, y = value(a[i]), value(b[i])
        if not (np.isfinite(x) and np.isfinite(y)):
            continue
        for k, exact in enumerate([Fraction(x) + Fraction(y), Fraction(x) * Fraction(y),
                                   Fraction(x) * Fraction(y) + Fraction(x)]):
            want = _bfloat16_of(exact)
            if want is not None:
                checked += 1
                assert out[k * n + i] == want, (k, hex(a[i]), hex(b[i]), hex(out[k * n + i]), hex(want))
        want = _bfloat16_of(Fraction(float(f[i])))
        if want is not None and i >= 4:
            assert out[3 * n + i] == want, (f[i], hex(out[3 * n + i]), hex(want))
    assert checked > 1500
