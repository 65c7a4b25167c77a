"""CUDA's SIMD intrinsics (two 16-bit or four 8-bit lanes per word) and Hopper's DPX functions on the
CPU executor (tests/data/cuda_programs/simd_intrinsics.cu), every result checked lane by lane against
the CUDA Math API's definitions written out here, on 256 triples of words drawn to meet each lane's
edges (0, 1, 0x7f, 0x80, 0xff, 0x7fff, 0x8000, 0xffff, ...)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from labkit.cuda import run_program

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the CPU executor needs g++")

PROGRAM = Path(__file__).parent / "data" / "cuda_programs" / "simd_intrinsics.cu"

UNARY = ["abs", "absss", "neg", "negss"]
BINARY = ["absdiffs", "absdiffu", "add", "sub", "addss", "subss", "addus", "subus", "avgs", "avgu", "haddu", "maxs",
          "maxu", "mins", "minu", "sads", "sadu"]
CMPS = ["eq", "ne", "ges", "geu", "gts", "gtu", "les", "leu", "lts", "ltu"]
DPX3 = [(o, t) for o in ("max3", "min3", "addmax", "addmin") for t in ("s32", "u32", "s32_relu", "s16x2", "u16x2",
                                                                       "s16x2_relu")]


def lanes(x, bits, signed):
    out = []
    for i in range(32 // bits):
        v = (x >> (bits * i)) & ((1 << bits) - 1)
        out.append(v - (1 << bits) if signed and v >= 1 << (bits - 1) else v)
    return out


def word(values, bits):
    return sum((v & ((1 << bits) - 1)) << (bits * i) for i, v in enumerate(values))


def clamp(v, lo, hi):
    return max(lo, min(hi, v))


def lanewise(a, b, bits, signed, f):
    return word([f(x, y) for x, y in zip(lanes(a, bits, signed), lanes(b, bits, signed))], bits)


def simd(name, a, b, bits):
    smin, smax, umax = -(1 << (bits - 1)), (1 << (bits - 1)) - 1, (1 << bits) - 1
    S, U = True, False
    table = {
        "abs": (S, lambda x, y: abs(x)), "absss": (S, lambda x, y: clamp(abs(x), 0, smax)),
        "neg": (S, lambda x, y: -x), "negss": (S, lambda x, y: clamp(-x, smin, smax)),
        "absdiffs": (S, lambda x, y: abs(x - y)), "absdiffu": (U, lambda x, y: abs(x - y)),
        "add": (U, lambda x, y: x + y), "sub": (U, lambda x, y: x - y),
        "addss": (S, lambda x, y: clamp(x + y, smin, smax)), "subss": (S, lambda x, y: clamp(x - y, smin, smax)),
        "addus": (U, lambda x, y: clamp(x + y, 0, umax)), "subus": (U, lambda x, y: clamp(x - y, 0, umax)),
        # signed: (a + b) >> 1 where the sum is negative, else (a + b + 1) >> 1 (halves away from zero)
        "avgs": (S, lambda x, y: (x + y) >> 1 if x + y < 0 else (x + y + 1) >> 1),
        "avgu": (U, lambda x, y: (x + y + 1) >> 1), "haddu": (U, lambda x, y: (x + y) >> 1),
        "maxs": (S, max), "maxu": (U, max), "mins": (S, min), "minu": (U, min),
    }
    if name in ("sads", "sadu"):
        signed = name == "sads"
        return sum(abs(x - y) for x, y in zip(lanes(a, bits, signed), lanes(b, bits, signed)))
    for kind, value in (("cmp", -1), ("set", 1)):
        if name.startswith(kind):
            rel = name[len(kind):]
            signed = rel not in ("eq", "ne") and rel.endswith("s")
            op = {"eq": "==", "ne": "!=", "ge": ">=", "gt": ">", "le": "<=", "lt": "<"}[rel[:2]]
            return lanewise(a, b, bits, signed, lambda x, y: value if eval(f"x {op} y") else 0)
    signed, f = table[name]
    return lanewise(a, b, bits, signed, f)


def dpx(op, kind, a, b, c):
    bits = 16 if "16x2" in kind else 32
    signed = kind.startswith("s")

    def wrap(v):
        v &= (1 << bits) - 1
        return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v

    f = {"max3": lambda x, y, z: max(x, y, z), "min3": lambda x, y, z: min(x, y, z),
         "addmax": lambda x, y, z: max(wrap(x + y), z), "addmin": lambda x, y, z: min(wrap(x + y), z)}[op]
    relu = kind.endswith("relu")
    vals = [f(x, y, z) for x, y, z in zip(lanes(a, bits, signed), lanes(b, bits, signed), lanes(c, bits, signed))]
    return word([max(v, 0) if relu else v for v in vals], bits)


@pytest.fixture(scope="module")
def rows():
    rc, out, err = run_program(PROGRAM)
    assert rc == 0, err[-2000:]
    return [[int(v) for v in line.split()] for line in out.splitlines()]


def test_every_simd_and_dpx_result_lane_by_lane(rows):
    assert len(rows) == 256
    for row in rows:
        a, b, c, got = row[0], row[1], row[2], iter(row[3:])
        for n in (2, 4):
            for name in UNARY:
                assert next(got) == simd(name, a, 0, 32 // n), (name, n, hex(a))
        for n in (2, 4):
            for name in BINARY:
                assert next(got) == simd(name, a, b, 32 // n), (name, n, hex(a), hex(b))
        for n in (2, 4):
            for kind in ("cmp", "set"):
                for rel in CMPS:
                    assert next(got) == simd(kind + rel, a, b, 32 // n), (kind + rel, n, hex(a), hex(b))
        for op, kind in DPX3:
            assert next(got) == dpx(op, kind, a, b, c), (op, kind, hex(a), hex(b), hex(c))
        for op, kind in (("max", "s32_relu"), ("min", "s32_relu"), ("max", "s16x2_relu"), ("min", "s16x2_relu")):
            bits = 16 if "16x2" in kind else 32
            f = max if op == "max" else min
            want = word([max(f(x, y), 0) for x, y in zip(lanes(a, bits, True), lanes(b, bits, True))], bits)
            assert next(got) == want, (op, kind, hex(a), hex(b))
        sa, sb = lanes(a, 32, True)[0], lanes(b, 32, True)[0]
        assert [next(got), next(got)] == [max(sa, sb) & 0xffffffff, int(sa >= sb)]
        assert [next(got), next(got)] == [min(a, b), int(a <= b)]
        ah, al = lanes(a, 16, True)[1], lanes(a, 16, True)[0]
        bh, bl = lanes(b, 16, True)[1], lanes(b, 16, True)[0]
        assert [next(got), next(got)] == [word([max(al, bl), max(ah, bh)], 16), 2 * (ah >= bh) + (al >= bl)]
        ah, al, bh, bl = a >> 16, a & 0xffff, b >> 16, b & 0xffff
        assert [next(got), next(got)] == [word([min(al, bl), min(ah, bh)], 16), 2 * (ah <= bh) + (al <= bl)]
        assert next(got, None) is None


def test_dot_products_of_byte_and_halfword_lanes(tmp_path):
    """__dp4a (signed and unsigned bytes, and char4), __dp2a_lo and __dp2a_hi on drawn words, sums
    wrapping in 32 bits, against the lanes' dot products computed here."""
    src = tmp_path / "dp.cu"
    src.write_text(r"""
#include <cstdio>
__global__ void k(const unsigned* x, unsigned* o) {
  const int i = threadIdx.x;
  const unsigned a = x[3 * i], b = x[3 * i + 1], c = x[3 * i + 2];
  o[6 * i] = (unsigned)__dp4a((int)a, (int)b, (int)c);
  o[6 * i + 1] = __dp4a(a, b, c);
  o[6 * i + 2] = (unsigned)__dp2a_lo((int)a, (int)b, (int)c);
  o[6 * i + 3] = (unsigned)__dp2a_hi((int)a, (int)b, (int)c);
  o[6 * i + 4] = __dp2a_lo(a, b, c);
  o[6 * i + 5] = __dp2a_hi(a, b, c);
}
int main() {
  const int n = 128; unsigned h[3 * n], r[6 * n], *x, *o, s = 99;
  for (int i = 0; i < 3 * n; ++i) { s = s * 1664525u + 1013904223u; h[i] = i % 5 == 0 ? 0x80ff7f80u ^ (s & 0x01010101u) : s; }
  cudaMalloc(&x, sizeof h); cudaMalloc(&o, sizeof r); cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice);
  k<<<1, n>>>(x, o); cudaMemcpy(r, o, sizeof r, cudaMemcpyDeviceToHost);
  for (int i = 0; i < n; ++i) { printf("%u %u %u", h[3 * i], h[3 * i + 1], h[3 * i + 2]);
    for (int j = 0; j < 6; ++j) printf(" %u", r[6 * i + j]); printf("\n"); }
}
""")
    rc, out, err = run_program(src)
    assert rc == 0, err[-2000:]
    for line in out.splitlines():
        a, b, c, *got = (int(t) for t in line.split())
        want = []
        for signed in (True, False):
            want.append((c + sum(x * y for x, y in zip(lanes(a, 8, signed), lanes(b, 8, signed)))) % 2**32)
        for signed in (True, False):
            half, byte = lanes(a, 16, signed), lanes(b, 8, signed)
            want += [(c + half[0] * byte[0] + half[1] * byte[1]) % 2**32,
                     (c + half[0] * byte[2] + half[1] * byte[3]) % 2**32]
        assert got == [want[0], want[1], want[2], want[3], want[4], want[5]], (a, b, c)
