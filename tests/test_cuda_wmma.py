"""nvcuda::wmma (mma.h) and inline PTX reads of special registers on the CPU executor."""
from __future__ import annotations

import shutil
from fractions import Fraction

import numpy as np
import pytest

from labkit.backends.cpu import CPUModule, program_source
from labkit.cuda import run_program
from labkit.errors import KernelRaceError, LaunchError, UnsupportedOnCPU

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the CPU executor needs g++")

# One warp per TM x TN tile of D = 2 * (C0 + A @ B); A is M x K, B is K x N, each row- or column-major;
# C0 is loaded row-major and D stored with STORE (the accumulator's layout argument).
GEMM = r'''#include <mma.h>
using namespace nvcuda;
extern "C" __global__ void gemm(const TPTR* a, const TPTR* b, const TACC* c0, TACC* d, int M, int N, int K) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int ti = warp / (N / TM_N), tj = warp % (N / TM_N);
  if (ti * TM_M >= M) return;
  wmma::fragment<wmma::matrix_a, TM_M, TM_N, TK, TIN, wmma::LA> fa;
  wmma::fragment<wmma::matrix_b, TM_M, TM_N, TK, TIN, wmma::LB> fb;
  wmma::fragment<wmma::accumulator, TM_M, TM_N, TK, TACC> acc;
  wmma::load_matrix_sync(acc, c0 + ti * TM_M * N + tj * TM_N, N, wmma::mem_row_major);
  const bool ra = LA_ROW, rb = LB_ROW;
  for (int k = 0; k < K; k += TK) {
    wmma::load_matrix_sync(fa, ra ? a + ti * TM_M * K + k : a + ti * TM_M + k * M, ra ? K : M);
    wmma::load_matrix_sync(fb, rb ? b + k * N + tj * TM_N : b + k + tj * TM_N * K, rb ? N : K);
    wmma::mma_sync(acc, fa, fb, acc);
  }
  for (int i = 0; i < acc.num_elements; ++i) acc.x[i] = acc.x[i] * 2;   // elementwise, whatever the layout
  if (STORE_ROW) wmma::store_matrix_sync(d + ti * TM_M * N + tj * TM_N, acc, N, wmma::mem_row_major);
  else wmma::store_matrix_sync(d + ti * TM_M + tj * TM_N * M, acc, M, wmma::mem_col_major);
}
'''


def _gemm(tin: str, tacc: str, la: str, lb: str, store_row: bool, tm=(16, 16), check=None, tk=16):
    defs = {"TK": str(tk), "TPTR": "float" if "tf32" in tin else tin, "TIN": tin, "TACC": tacc, "LA": la, "LB": lb,
            "LA_ROW": str(la == "row_major").lower(),
            "LB_ROW": str(lb == "row_major").lower(), "STORE_ROW": str(store_row).lower(),
            "TM_M": str(tm[0]), "TM_N": str(tm[1])}
    src = GEMM
    for k in sorted(defs, key=len, reverse=True):
        src = src.replace(k, defs[k])
    return CPUModule(src, path="wmma_gemm.cu", check=check).get_function("gemm")


def _run(fn, a, b, c0, la, lb, store_row, tm=(16, 16)):
    M, K = a.shape
    N = b.shape[1]
    am = a if la == "row_major" else np.asfortranarray(a)
    bm = b if lb == "row_major" else np.asfortranarray(b)
    d = np.zeros(M * N, c0.dtype)
    warps = (M // tm[0]) * (N // tm[1])
    fn((warps,), (32,), [am.ravel(order="K").copy(), bm.ravel(order="K").copy(), c0.ravel().copy(), d,
                         np.int32(M), np.int32(N), np.int32(K)])
    return d.reshape(M, N) if store_row else d.reshape(N, M).T


@pytest.mark.parametrize("la, lb, store_row, tm", [
    ("row_major", "col_major", True, (16, 16)),
    ("col_major", "row_major", False, (16, 16)),
    ("row_major", "row_major", True, (32, 8)),
])
def test_half_gemm_with_float_accumulators_matches_float64(la, lb, store_row, tm):
    rng = np.random.default_rng(3)
    M, N, K = 32, 32, 48
    a = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    b = rng.uniform(-1, 1, (K, N)).astype(np.float16)
    c0 = rng.uniform(-1, 1, (M, N)).astype(np.float32)
    d = _run(_gemm("half", "float", la, lb, store_row, tm), a, b, c0, la, lb, store_row, tm)
    exact = c0.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)
    # Products are exact in float; K additions in float each round by at most half an ulp of the sum.
    bound = 2 * (K + 1) * 2.0 ** -24 * (np.abs(c0) + np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
    assert (np.abs(d - 2 * exact) <= bound).all()
    assert np.abs(d - 2 * exact).max() < 1e-4 and np.abs(d).max() > 1


def test_bf16_and_tf32_inputs_multiply_exactly():
    rng = np.random.default_rng(6)
    M, N, K = 16, 32, 32
    # bf16 (m8n32k16): floats whose low 16 bits are zero are bf16 values; their bits go in as uint16.
    a = (rng.uniform(-1, 1, (M, K)).astype(np.float32).view(np.uint32) & 0xffff0000).view(np.float32)
    b = (rng.uniform(-1, 1, (K, N)).astype(np.float32).view(np.uint32) & 0xffff0000).view(np.float32)
    c0 = np.zeros((M, N), np.float32)
    fn = _gemm("__nv_bfloat16", "float", "row_major", "col_major", True, tm=(8, 32))
    d = _run(fn, (a.view(np.uint32) >> 16).astype(np.uint16), (b.view(np.uint32) >> 16).astype(np.uint16), c0,
             "row_major", "col_major", True, tm=(8, 32))
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(d - 2 * exact).max() <= 2 * (K + 1) * 2.0 ** -24 * (np.abs(a) @ np.abs(b)).max()
    # tf32 (m16n16k8): the low 13 bits of each float are not read.
    a32 = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    b32 = rng.uniform(-1, 1, (K, N)).astype(np.float32)
    fn = _gemm("wmma::precision::tf32", "float", "col_major", "row_major", False, tk=8)
    d = _run(fn, a32, b32, c0, "col_major", "row_major", False)
    tf = lambda x: (x.view(np.uint32) & ~np.uint32(0x1fff)).view(np.float32).astype(np.float64)  # noqa: E731
    exact = tf(a32) @ tf(b32)
    assert np.abs(d - 2 * exact).max() <= 2 * (K + 1) * 2.0 ** -24 * (np.abs(a32) @ np.abs(b32)).max()
    assert np.abs(d - 2 * a32.astype(np.float64) @ b32).max() > 1e-5    # the dropped bits do count


@pytest.mark.parametrize("tin, dtype, la, lb, store_row", [
    ("signed char", np.int8, "row_major", "col_major", True),
    ("unsigned char", np.uint8, "col_major", "col_major", False),
])
def test_int8_gemm_with_int_accumulators_is_exact(tin, dtype, la, lb, store_row):
    rng = np.random.default_rng(4)
    M, N, K = 16, 32, 32
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max + 1, (M, K)).astype(dtype)
    b = rng.integers(info.min, info.max + 1, (K, N)).astype(dtype)
    c0 = rng.integers(-1000, 1000, (M, N)).astype(np.int32)
    d = _run(_gemm(tin, "int", la, lb, store_row), a, b, c0, la, lb, store_row)
    want = 2 * (c0.astype(np.int64) + a.astype(np.int64) @ b.astype(np.int64))
    assert (d.astype(np.int64) == want).all()


def test_int_mma_wraps_or_saturates_with_satf():
    src = r'''#include <mma.h>
using namespace nvcuda;
extern "C" __global__ void k(const signed char* a, const int* c, int* d) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, signed char, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, signed char, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, int> fc, fd;
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, a, 16);
  wmma::load_matrix_sync(fc, c, 16, wmma::mem_row_major);
  wmma::mma_sync(fd, fa, fb, fc);
  wmma::store_matrix_sync(d, fd, 16, wmma::mem_row_major);
  wmma::mma_sync(fd, fa, fb, fc, true);
  wmma::store_matrix_sync(d + 256, fd, 16, wmma::mem_row_major);
}
'''
    a = np.full(256, -128, np.int8)                   # each sum of products: 16 * 2^14 = 2^18
    c = np.where(np.arange(256) % 2 == 0, 2**31 - 2**17, 7).astype(np.int32)
    d = np.zeros(512, np.int32)
    CPUModule(src, path="satf.cu").get_function("k")((1,), (32,), [a, c, d])
    exact = c.astype(np.int64) + 2**18
    assert (d[:256] == ((exact + 2**31) % 2**32 - 2**31)).all()      # wraps modulo 2^32
    assert (d[256:] == np.minimum(exact, 2**31 - 1)).all()            # saturates
    assert d[0] < 0 and d[256] == 2**31 - 1


def test_a_correct_wmma_gemm_is_silent_under_the_race_check():
    rng = np.random.default_rng(5)
    a = rng.integers(-3, 4, (16, 16)).astype(np.int8)
    b = rng.integers(-3, 4, (16, 32)).astype(np.int8)
    c0 = np.zeros((16, 32), np.int32)
    fn = _gemm("signed char", "int", "row_major", "col_major", True, check="race")
    d = _run(fn, a, b, c0, "row_major", "col_major", True)
    assert (d == 2 * (a.astype(np.int64) @ b.astype(np.int64))).all()


HANDOFF = r'''#include <mma.h>
using namespace nvcuda;
// Warp 0 stores a tile to shared memory; warp 1 loads it (after a barrier, or not) and stores it out.
extern "C" __global__ void k(int* out) {
  __shared__ int tile[256];
  wmma::fragment<wmma::accumulator, 16, 16, 16, int> f;
  if (threadIdx.x < 32) {
    wmma::fill_fragment(f, 7);
    wmma::store_matrix_sync(tile, f, 16, wmma::mem_row_major);
  }
  BARRIER
  if (threadIdx.x >= 32) {
    wmma::load_matrix_sync(f, tile, 16, wmma::mem_col_major);
    wmma::store_matrix_sync(out, f, 16, wmma::mem_row_major);
  }
}
'''


@pytest.mark.parametrize("barrier", [True, False])
def test_the_race_check_sees_a_tile_handed_between_warps_without_a_barrier(barrier):
    src = HANDOFF.replace("BARRIER", "__syncthreads();" if barrier else "")
    fn = CPUModule(src, path="handoff.cu", check="race").get_function("k")
    out = np.zeros(256, np.int32)
    if barrier:
        fn((1,), (64,), [out])
        assert (out == 7).all()
    else:
        with pytest.raises(KernelRaceError, match="data race"):
            fn((1,), (64,), [out])


PARTIAL = r'''#include <mma.h>
using namespace nvcuda;
extern "C" __global__ void k(const half* a, float* out) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
  if (threadIdx.x % 32 < 16) {
    wmma::load_matrix_sync(fa, a, 16);
    BRANCH
  }
  out[threadIdx.x] = 1.0f;
}
'''


def test_a_load_called_by_part_of_a_warp_is_reported_in_words():
    a = np.zeros(256, np.float16)
    out = np.zeros(32, np.float32)
    fn = CPUModule(PARTIAL.replace("BRANCH", ""), path="partial.cu").get_function("k")
    with pytest.raises(LaunchError, match=r"wmma::load_matrix_sync at line 6 is called by only part of the warp: "
                                          r"lanes 0xffff0000 returned without calling it"):
        fn((1,), (32,), [a, out])


def test_lanes_at_different_wmma_calls_are_reported():
    src = PARTIAL.replace("BRANCH", "} else {\n    wmma::load_matrix_sync(fa, a, 16);")
    fn = CPUModule(src, path="divergent.cu").get_function("k")
    with pytest.raises(LaunchError, match=r"waits at the wmma call at line (6|8).*divergent code"):
        fn((1,), (32,), [np.zeros(256, np.float16), np.zeros(32, np.float32)])


@pytest.mark.parametrize("la, lb, store_row", [("row_major", "col_major", True), ("col_major", "row_major", False)])
def test_double_gemm_adds_each_product_with_one_rounding(la, lb, store_row):
    """m8n8k4 with double: each element's sum, in the order k = 0, 1, ..., takes each product with one
    rounding (an fma, as IEEE FP64 tensor cores do), bit for bit."""
    rng = np.random.default_rng(5)
    M, N, K = 16, 16, 8
    a, b, c0 = rng.uniform(-1, 1, (M, K)), rng.uniform(-1, 1, (K, N)), rng.uniform(-1, 1, (M, N))
    d = _run(_gemm("double", "double", la, lb, store_row, (8, 8), tk=4), a, b, c0, la, lb, store_row, (8, 8))
    want = np.empty((M, N))
    for i in range(M):
        for j in range(N):
            s = Fraction(c0[i, j])
            for k in range(K):
                s = Fraction(float(s + Fraction(a[i, k]) * Fraction(b[k, j])))   # fma: one rounding
            want[i, j] = 2 * float(s)
    assert np.array_equal(d, want)
    plain = 2 * (c0 + a @ b)
    assert not np.array_equal(want, plain) and np.abs(want - plain).max() < 1e-13


def test_shapes_and_types_not_modelled_are_refused_by_name():
    with pytest.raises(UnsupportedOnCPU, match="sub-byte tensor-core operations"):
        CPUModule('#include <mma.h>\nusing namespace nvcuda;\nextern "C" __global__ void k(int* y) {\n'
                  '  wmma::fragment<wmma::matrix_a, 8, 8, 32, wmma::experimental::precision::u4, wmma::row_major> f;\n}\n',
                  path="u4.cu")
    program_source.check_program_supported(   # <mma.h> itself is provided now
        "#include <mma.h>\nusing namespace nvcuda;\n__global__ void k() {\n"
        "  wmma::fragment<wmma::accumulator, 16, 16, 16, float> f;\n}\n", "f.cu")


SREG = r'''extern "C" __global__ void k(unsigned* out) {
  unsigned lane, lt, ge, warp, tid;
  asm("mov.u32 %0, %%laneid;" : "=r"(lane));
  asm volatile("mov.u32 %0, %%lanemask_lt;" : "=r"(lt));
  asm volatile ("mov.u32 %0, %%lanemask_ge;"
                : "=r"(ge));
  asm("mov.u32 %0, %%warpid;" : "=r"(warp));
  asm("mov.u32 %0, %%tid.x;" : "=r"(tid));
  unsigned* o = out + 5 * threadIdx.x;
  o[0] = lane; o[1] = lt; o[2] = ge; o[3] = warp; o[4] = tid;
}
'''


def test_inline_ptx_reads_of_special_registers_run():
    out = np.zeros((64, 5), np.uint32)
    CPUModule(SREG, path="sreg.cu").get_function("k")((1,), (64,), [out])
    t = np.arange(64, dtype=np.uint64)
    lane = t % 32
    assert (out[:, 0] == lane).all()
    assert (out[:, 1] == (1 << lane) - 1).all()
    assert (out[:, 2] == (~((1 << lane) - 1)) & 0xffffffff).all()
    assert (out[:, 3] == t // 32).all() and (out[:, 4] == t).all()


def test_other_inline_ptx_is_still_refused():
    # (single integer instructions such as add.u32 are rewritten: kernel_source.rewrite_ptx_instructions)
    for body in ('asm("cvta.to.global.u64 %0, %1;" : "=l"(t) : "l"(t));',
                 'asm("mov.u64 %0, %%clock64;" : "=l"(t));'):   # time: in a whole program only
        with pytest.raises(UnsupportedOnCPU, match=r"sreg\.cu:1 uses inline PTX"):
            CPUModule(f'extern "C" __global__ void k(int* y) {{ int x = 0; long long t; {body} y[0] = x; }}\n',
                      path="sreg.cu")
    program_source.check_program_supported(
        '__global__ void k(long long* y) { long long t;\n asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); '
        "y[0] = t; }\n", "t.cu")


def test_a_program_reads_special_registers_and_clocks(tmp_path):
    p = tmp_path / "sreg.cu"
    p.write_text(r'''#include <cstdio>
__global__ void k(unsigned* out, unsigned long long* t) {
  unsigned lane, sm, nsm, clk;
  unsigned long long c0, c1, g;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(c0));
  asm("mov.u32 %0, %%laneid;" : "=r"(lane));
  asm("mov.u32 %0, %%smid;" : "=r"(sm));
  asm("mov.u32 %0, %%nsmid;" : "=r"(nsm));
  asm volatile("mov.u32 %0, %%clock;" : "=r"(clk));
  (void)clk;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(c1));
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = lane == threadIdx.x % 32 && sm < nsm && nsm > 0;
  t[i] = (c1 >= c0) + 2 * (g > 1500000000ull * 1000000000ull);
}
int main() {
  unsigned* out; unsigned long long* t;
  cudaMallocManaged(&out, 128 * sizeof(unsigned));
  cudaMallocManaged(&t, 128 * sizeof(unsigned long long));
  k<<<2, 64>>>(out, t);
  cudaDeviceSynchronize();
  int ok = 0;
  for (int i = 0; i < 128; ++i) ok += out[i] == 1 && t[i] == 3;
  printf("%d\n", ok);
  return 0;
}
''')
    rc, out, err = run_program(p)
    assert rc == 0, err
    assert out.strip() == "128"
