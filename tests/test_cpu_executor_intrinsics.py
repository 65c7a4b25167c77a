"""Device code as CUDA writes it, on the CPU executor: every form of a __shared__ declaration
(``static``, ``extern T __shared__ x[]``, qualifiers in any order) and CUDA's integer intrinsics,
each against its definition computed here in Python on random inputs."""
from __future__ import annotations

import numpy as np
import pytest

from labkit.backends.cpu import CPUModule

pytestmark = pytest.mark.check

SHARED_FORMS = r'''
extern "C" __global__ void forms(float* y) {
  extern float __shared__ dyn[];
  static __shared__ float s[64];
  __shared__ static float t[8];
  float __shared__ u[4];
  volatile __shared__ int v[2];
  const int i = threadIdx.x;
  s[i] = i; dyn[i] = 2 * i;
  if (i < 8) t[i] = 3;
  if (i < 4) u[i] = 4;
  if (i < 2) v[i] = 5;
  __syncthreads();
  y[i] = s[63 - i] + dyn[i] + t[i % 8] + u[i % 4] + v[i % 2];
}
'''


@pytest.mark.parametrize("check", ["", "memory"])
def test_every_form_of_a_shared_declaration(check):
    fn = CPUModule(SHARED_FORMS, check=check).get_function("forms")
    y = np.full(64, np.nan, np.float32)
    fn((1,), (64,), (y,), shared_mem=64 * 4)
    i = np.arange(64)
    assert np.array_equal(y, (63 - i) + 2 * i + 3 + 4 + 5)


INTRINSICS = r'''
extern "C" __global__ void ints(const unsigned* a, const unsigned* b, const unsigned* s, unsigned* o32,
                                unsigned long long* o64, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const unsigned x = a[i], y = b[i], z = s[i];
  const long long X = ((long long)x << 32) | y, Y = ((long long)y << 32) | z;
  unsigned* r = o32 + 18 * i;
  r[0] = umin(x, y); r[1] = umax(x, y); r[2] = __umulhi(x, y); r[3] = __sad((int)x, (int)y, z);
  r[4] = __usad(x, y, z); r[5] = (unsigned)__hadd((int)x, (int)y); r[6] = (unsigned)__rhadd((int)x, (int)y);
  r[7] = __uhadd(x, y); r[8] = __urhadd(x, y); r[9] = __byte_perm(x, y, z);
  r[10] = __funnelshift_l(x, y, z); r[11] = __funnelshift_lc(x, y, z); r[12] = __funnelshift_r(x, y, z);
  r[13] = __funnelshift_rc(x, y, z); r[14] = (unsigned)__clzll(X >> (z & 63)); r[15] = (unsigned)__ffsll(X);
  r[16] = (unsigned)__popc(x); r[17] = __brev(x);
  unsigned long long* q = o64 + 6 * i;
  q[0] = (unsigned long long)__mul64hi(X, Y); q[1] = __umul64hi((unsigned long long)X, (unsigned long long)Y);
  q[2] = __brevll((unsigned long long)X); q[3] = (unsigned long long)llmin(X, Y);
  q[4] = (unsigned long long)llmax(X, Y); q[5] = ullmin((unsigned long long)X, (unsigned long long)Y);
}
'''


def _s32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >> 31 else v


def _s64(v: int) -> int:
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >> 63 else v


def _expected(x: int, y: int, z: int) -> tuple[list[int], list[int]]:
    M32, M64 = 0xFFFFFFFF, (1 << 64) - 1
    X, Y = _s64((x << 32) | y), _s64((y << 32) | z)
    both = (y << 32) | x
    perm = 0
    for k in range(4):
        perm |= ((both >> (8 * ((z >> (4 * k)) & 7))) & 0xFF) << (8 * k)
    wide = (y << 32) | x
    clz_in = X >> (z & 63)                         # arithmetic shift, as on a signed long long
    u = clz_in & M64
    r32 = [min(x, y), max(x, y), (x * y) >> 32, (abs(_s32(x) - _s32(y)) + z) & M32, (abs(x - y) + z) & M32,
           ((_s32(x) + _s32(y)) >> 1) & M32, ((_s32(x) + _s32(y) + 1) >> 1) & M32, (x + y) >> 1, (x + y + 1) >> 1,
           perm, ((wide << (z & 31)) >> 32) & M32, ((wide << min(z, 32)) >> 32) & M32,
           (wide >> (z & 31)) & M32, (wide >> min(z, 32)) & M32, 64 if u == 0 else 64 - u.bit_length(),
           0 if X == 0 else ((X & -X).bit_length()), bin(x).count("1"), int(f"{x:032b}"[::-1], 2)]
    r64 = [((X * Y) >> 64) & M64, (((X & M64) * (Y & M64)) >> 64) & M64, int(f"{X & M64:064b}"[::-1], 2),
           min(X, Y) & M64, max(X, Y) & M64, min(X & M64, Y & M64)]
    return r32, r64


@pytest.mark.parametrize("check", ["", "memory"])
def test_integer_intrinsics_match_their_definitions(check):
    rng = np.random.default_rng()
    n = 257
    a = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    s = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    a[:4], b[:4], s[:4] = [0, 1, 0xFFFFFFFF, 0x80000000], [0, 0xFFFFFFFF, 0xFFFFFFFF, 7], [0, 32, 33, 0x3210]
    o32 = np.full(18 * n, 0xDEADBEEF, np.uint32)
    o64 = np.full(6 * n, 0xDEADBEEF, np.uint64)
    fn = CPUModule(INTRINSICS, check=check).get_function("ints")
    fn((3,), (128,), (a, b, s, o32, o64, np.int32(n)))
    for i in range(n):
        r32, r64 = _expected(int(a[i]), int(b[i]), int(s[i]))
        assert list(o32[18 * i:18 * i + 18]) == r32, (i, int(a[i]), int(b[i]), int(s[i]))
        assert list(o64[6 * i:6 * i + 6]) == r64, (i, int(a[i]), int(b[i]), int(s[i]))


def test_these_kernels_are_valid_cuda():
    """What runs here must compile for a GPU too: NVRTC (no GPU needed) takes both sources."""
    from labkit.backends import nvrtc_check
    if nvrtc_check.library() is None:
        pytest.skip("NVRTC (pip install nvidia-cuda-nvrtc) is not installed")
    for source in (SHARED_FORMS, INTRINSICS):
        ok, log = nvrtc_check.compile_source(source)
        assert ok, log


@pytest.mark.gpu
def test_the_gpu_gives_the_same():
    """The same kernels through CuPy on a GPU: the same answers as their definitions (so as the
    executor's)."""
    import cupy as cp
    rng = np.random.default_rng(1)
    n = 257
    a, b, s = (rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32) for _ in range(3))
    o32, o64 = cp.full(18 * n, 0xDEADBEEF, cp.uint32), cp.full(6 * n, 0xDEADBEEF, cp.uint64)
    cp.RawModule(code=INTRINSICS).get_function("ints")(
        (3,), (128,), (cp.asarray(a), cp.asarray(b), cp.asarray(s), o32, o64, np.int32(n)))
    o32, o64 = o32.get(), o64.get()
    for i in range(n):
        r32, r64 = _expected(int(a[i]), int(b[i]), int(s[i]))
        assert list(o32[18 * i:18 * i + 18]) == r32 and list(o64[6 * i:6 * i + 6]) == r64, i
    y = cp.full(64, cp.nan, cp.float32)
    cp.RawModule(code=SHARED_FORMS).get_function("forms")((1,), (64,), (y,), shared_mem=256)
    i = np.arange(64)
    assert np.array_equal(y.get(), (63 - i) + 2 * i + 3 + 4 + 5)
