"""The CPU executor: each feature of the CUDA execution model, checked against NumPy.

Inputs are fresh random arrays, sizes are odd (they do not divide the block),
and outputs are poisoned with NaN (or a sentinel for integers) before each
launch, so an element the kernel forgot to write fails the comparison.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from labkit.backends.cpu import (BarrierError, ConstantMemoryError, CPUModule, KernelCompileError,
                                 KernelMemoryError, LaunchError, UnsupportedOnCPU)
from labkit.checks import rel_error

HERE = Path(__file__).resolve().parent / "cuda"
FEATURES = HERE / "feature_kernels.cu"
BROKEN = HERE / "broken_kernels.cu"
rng = np.random.default_rng()


@pytest.fixture(scope="module")
def feat():
    return CPUModule(FEATURES.read_text(), path=str(FEATURES),
                     name_expressions=("scale_by<3, float>", "scale_by<2, int>"))


@pytest.fixture(scope="module")
def broken():
    return CPUModule(BROKEN.read_text(), path=str(BROKEN))


@pytest.mark.check
def test_kernels_are_found(feat):
    assert {"saxpy", "block_sum", "matmul_tiled", "warp_ops", "histogram", "poly",
            "reverse_blocks", "coords3d", "math_fns"} <= set(feat.kernel_names)
    assert feat.get_function("saxpy").param_types == ["cptr:f32", "ptr:f32", "f32", "i32"]
    assert feat.get_function("saxpy").param_names == ["x", "y", "a", "n"]


@pytest.mark.parametrize("n, grid", [(1, 1), (1000, 3), (4097, 7)])
def test_map_grid_stride(feat, n, grid):
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    ref = 2.5 * x.astype(np.float64) + y
    terms = 2.5 * np.abs(x.astype(np.float64)) + np.abs(y)
    feat.get_function("saxpy")((grid,), (128,), (x, y, np.float32(2.5), np.int32(n)))
    assert rel_error(y, ref, terms=terms) < 1e-6      # n = 1: 2.5 x and y may all but cancel


@pytest.mark.check
def test_shared_memory_reduction(feat):
    n = 5003
    x = rng.standard_normal(n).astype(np.float32)
    nb = (n + 255) // 256
    partial = np.full(nb, np.nan, np.float32)
    feat.get_function("block_sum")((nb,), (256,), (x, partial, np.int32(n)))
    ref = np.array([x[i * 256:(i + 1) * 256].astype(np.float64).sum() for i in range(nb)])
    assert rel_error(partial, ref) < 1e-5


@pytest.mark.parametrize("n", [17, 33, 100])
def test_tiled_matmul(feat, n):
    A = rng.standard_normal((n, n)).astype(np.float32)
    B = rng.standard_normal((n, n)).astype(np.float32)
    C = np.full((n, n), np.nan, np.float32)
    g = (n + 15) // 16
    feat.get_function("matmul_tiled")((g, g), (16, 16), (A, B, C, np.int32(n)))
    assert rel_error(C, A.astype(np.float64) @ B) < 1e-5


@pytest.mark.check
def test_warp_shuffles(feat):
    n = 200  # 7 warps, the last one partly outside the data
    x = rng.integers(-50, 50, n).astype(np.int32)
    sums = np.full((n + 31) // 32, -999, np.int32)
    scan = np.full(n, -999, np.int32)
    bfly = np.full(n, -999, np.int32)
    bcast = np.full(n, -999, np.int32)
    feat.get_function("warp_ops")((2,), (128,), (x, sums, scan, bfly, bcast, np.int32(n)))
    pad = np.zeros(256, np.int64)
    pad[:n] = x
    warps = pad.reshape(-1, 32)[: len(sums)]
    np.testing.assert_array_equal(sums, warps.sum(axis=1))
    np.testing.assert_array_equal(scan, np.cumsum(warps, axis=1).ravel()[:n])
    np.testing.assert_array_equal(bfly, np.repeat(warps.max(axis=1), 32)[:n])
    np.testing.assert_array_equal(bcast, np.repeat(warps[:, 0], 32)[:n])


def test_warp_votes(feat):
    n = 96
    x = rng.integers(-3, 3, n).astype(np.int32)
    x[32:64] = 1  # a warp where every lane votes yes
    ballot = np.zeros(3, np.uint32)
    any_all = np.full(6, -1, np.int32)
    feat.get_function("warp_votes")((1,), (96,), (x, ballot, any_all, np.int32(n)))
    for w in range(3):
        bits = sum(1 << l for l in range(32) if x[32 * w + l] > 0)
        assert ballot[w] == bits
        assert any_all[2 * w] == int(bits != 0)
        assert any_all[2 * w + 1] == int(bits == 0xFFFFFFFF)


@pytest.mark.parametrize("workers", ["1", "0"])
def test_atomic_histogram(feat, monkeypatch, workers):
    monkeypatch.setenv("LABKIT_CPU_WORKERS", workers)
    n, nbins = 10007, 37
    x = rng.integers(0, nbins, n).astype(np.int32)
    bins = np.zeros(nbins, np.uint32)
    feat.get_function("histogram")((9,), (64,), (x, bins, np.int32(n), np.int32(nbins)))
    np.testing.assert_array_equal(bins, np.bincount(x, minlength=nbins))


def test_atomic_max_min_cas_exch(feat):
    n = 1001
    x = rng.integers(-10**6, 10**6, n).astype(np.int32)
    f = rng.standard_normal(n).astype(np.float32)
    out = np.array([np.iinfo(np.int32).min, np.iinfo(np.int32).max, 0, 0], np.int32)
    fout = np.array([0.0, -np.inf, 0.0], np.float32)
    feat.get_function("atomic_misc")((8,), (128,), (x, f, out, fout, np.int32(n)))
    assert out.tolist() == [x.max(), x.min(), n, 7]
    # Atomic float adds land in any order: float32 rounding then bounds the error by
    # n * eps * sum|f| (the sum itself may be near zero, so a relative bound could not hold).
    bound = n * np.finfo(np.float32).eps / 2 * float(np.abs(f).astype(np.float64).sum())
    assert abs(float(fout[0]) - f.astype(np.float64).sum()) <= bound
    assert fout[1] == f.max() and fout[2] == 0.5


@pytest.mark.check
def test_constant_memory(feat):
    c = rng.standard_normal(8).astype(np.float32)
    feat.get_global("coeffs").copy_from_host(c)
    n = 999
    x = rng.uniform(-1, 1, n).astype(np.float32)
    y = np.full(n, np.nan, np.float32)
    feat.get_function("poly")((4,), (256,), (x, y, np.int32(n), np.int32(7)))
    ref = np.polynomial.polynomial.polyval(x.astype(np.float64), c.astype(np.float64))
    assert rel_error(y, ref) < 1e-5
    back = np.empty(8, np.float32)
    feat.get_global("coeffs").copy_to_host(back)
    np.testing.assert_array_equal(back, c)


def test_constant_symbol_overflow_is_refused(feat):
    with pytest.raises(ConstantMemoryError, match="do not fit"):
        feat.get_global("coeffs").copy_from_host(np.zeros(9, np.float32))


def test_dynamic_shared_memory(feat):
    n, b = 1000, 96
    x = rng.standard_normal(n).astype(np.float32)
    y = np.full(n, np.nan, np.float32)
    nb = (n + b - 1) // b
    feat.get_function("reverse_blocks")((nb,), (b,), (x, y, np.int32(n)), shared_mem=b * 4)
    pad = np.zeros(nb * b, np.float32)
    pad[:n] = x
    ref = pad.reshape(nb, b)[:, ::-1].ravel()
    # y[j] for j < n gets the element mirrored inside j's block
    np.testing.assert_array_equal(y, ref[:n])


def test_3d_grid_and_blocks(feat):
    nx, ny, nz = 13, 7, 5
    out = np.full((nz, ny, nx), -1, np.int32)
    feat.get_function("coords3d")((4, 3, 2), (4, 3, 3), (out, np.int32(nx), np.int32(ny), np.int32(nz)))
    z, y, x = np.meshgrid(np.arange(nz), np.arange(ny), np.arange(nx), indexing="ij")
    np.testing.assert_array_equal(out, x + 1000 * y + 1000000 * z)


def test_template_instantiation_by_name(feat):
    n = 77
    xf = rng.standard_normal(n).astype(np.float32)
    yf = np.full(n, np.nan, np.float32)
    feat.get_function("scale_by<3, float>")((1,), (128,), (xf, yf, np.int32(n)))
    np.testing.assert_array_equal(yf, xf * 3)
    xi = rng.integers(-100, 100, n).astype(np.int32)
    yi = np.full(n, -1, np.int32)
    feat.get_function("scale_by<2, int>")((1,), (128,), (xi, yi, np.int32(n)))
    np.testing.assert_array_equal(yi, xi * 2)


def test_math_functions(feat):
    n = 101
    x = rng.uniform(0.01, 2.0, n).astype(np.float32)
    y = np.full(8 * n, np.nan, np.float32)
    feat.get_function("math_fns")((1,), (128,), (x, y, np.int32(n)))
    v = x.astype(np.float64)
    i = np.arange(n)
    ref = np.stack([np.exp(v), np.tanh(v), np.maximum(v, .25) + np.minimum(v, .75),
                    1 / np.sqrt(v + 1), (v + 1) ** .75, v / (v + 2),
                    np.maximum(np.minimum(i, 5), 2), np.exp(-v) + np.sqrt(v) + np.log(v + 1)], axis=1)
    assert rel_error(y.reshape(n, 8), ref) < 1e-6


def test_vector_types(feat):
    n4 = 33
    a = rng.standard_normal(4 * n4).astype(np.float32)
    b = rng.standard_normal(4 * n4).astype(np.float32)
    c = np.full(4 * n4, np.nan, np.float32)
    feat.get_function("add_float4")((1,), (64,), (a, b, c, np.int32(n4)))
    np.testing.assert_array_equal(c, a + b)


# --- arguments are checked against the kernel's parameter types -----------------------------

def test_wrong_dtype_array_is_refused(feat):
    x = np.zeros(10, np.float64)
    with pytest.raises(TypeError, match=r"argument 0 \('x'\).*float64.*float32"):
        feat.get_function("saxpy")((1,), (32,), (x, np.zeros(10, np.float32), np.float32(1), np.int32(10)))


@pytest.mark.parametrize("bad, pattern", [(10, "Python int"), (np.int64(10), "numpy.int64"),
                                          (10.0, "Python float")])
def test_wrong_scalar_is_refused(feat, bad, pattern):
    x = np.zeros(10, np.float32)
    with pytest.raises(TypeError, match=pattern):
        feat.get_function("saxpy")((1,), (32,), (x, x.copy(), np.float32(1), bad))


def test_argument_count_layout_and_writeability(feat):
    f = feat.get_function("saxpy")
    x = np.zeros(10, np.float32)
    with pytest.raises(LaunchError, match="takes 4 arguments"):
        f((1,), (32,), (x, x))
    with pytest.raises(TypeError, match="not C-contiguous"):
        f((1,), (32,), (np.zeros(20, np.float32)[::2], x, np.float32(1), np.int32(10)))
    ro = np.zeros(10, np.float32)
    ro.flags.writeable = False
    with pytest.raises(TypeError, match="read-only"):
        f((1,), (32,), (x, ro, np.float32(1), np.int32(10)))
    with pytest.raises(TypeError, match="NumPy array"):
        f((1,), (32,), ([0.0] * 10, x, np.float32(1), np.int32(10)))


def test_launch_shape_limits(feat):
    f = feat.get_function("saxpy")
    x = np.zeros(10, np.float32)
    args = (x, x.copy(), np.float32(1), np.int32(10))
    with pytest.raises(LaunchError, match="at most 1024"):
        f((1,), (2048,), args)
    with pytest.raises(LaunchError, match="dynamic shared memory"):
        f((1,), (32,), args, shared_mem=64 * 1024)
    with pytest.raises(LaunchError, match="no kernel 'nope'"):
        feat.get_function("nope")


# --- compile errors, unsupported constructs, constant memory limit --------------------------

def test_compile_error_names_the_kernel_file_and_line(tmp_path):
    p = tmp_path / "typo.cu"
    p.write_text('extern "C" __global__ void k(float* y) {\n  y[threadIdx.x] = 1.0f\n}\n')
    with pytest.raises(KernelCompileError, match=r"typo\.cu:2"):
        CPUModule(p.read_text(), path=str(p))


@pytest.mark.check
@pytest.mark.parametrize("body, what", [
    ('asm volatile("mov.u32 %0, 0;" : "=r"(x));', "inline PTX"),
    ("long long t = clock64();", "clock64"),
    ("wmma::fragment<wmma::matrix_a, 8, 8, 32, wmma::experimental::precision::b1, wmma::row_major> f;",
     "sub-byte tensor-core"),
])
def test_unsupported_constructs_are_named(body, what):
    src = f'extern "C" __global__ void k(int* y) {{ int x = 0; {body} y[0] = x; }}\n'
    with pytest.raises(UnsupportedOnCPU, match=what):
        CPUModule(src, path="tc.cu")


def test_declared_gpu_only_kernel_is_refused():
    src = '// labkit: requires-gpu uses tensor cores\nextern "C" __global__ void k(int* y) { y[0] = 1; }\n'
    with pytest.raises(UnsupportedOnCPU, match="uses tensor cores"):
        CPUModule(src, path="tc.cu")


@pytest.mark.parametrize("opening, gpu_first", [
    ("#if defined(LABKIT_CUDA_ARCH)", False), ("#ifdef LABKIT_CUDA_ARCH", False),
    ("#ifndef LABKIT_CUDA_ARCH", True), ("#if !defined(LABKIT_CUDA_ARCH)", True)])
def test_gpu_only_branch_beside_a_plain_one_runs_the_plain_one(opening, gpu_first):
    # A GPU-only path (inline PTX here) kept beside a plain one for the executor is not refused,
    # and the executor runs the plain one; a GPU-only line outside such a conditional still is.
    gpu = 'asm volatile("mov.u32 %0, 7;" : "=r"(v));'
    plain = "v = 3;"
    first, second = (gpu, plain) if gpu_first else (plain, gpu)
    src = (f'extern "C" __global__ void k(int* y) {{\n  int v = 0;\n{opening}\n  {first}\n#else\n'
           f'  {second}\n#endif\n  y[0] = v;\n}}\n')
    y = np.zeros(1, np.int32)
    CPUModule(src, path="both.cu").get_function("k")((1,), (1,), (y,))
    assert y[0] == 3
    with pytest.raises(UnsupportedOnCPU, match="inline PTX"):
        CPUModule(src.replace("#endif\n", f"#endif\n  {gpu}\n"), path="both.cu")


def test_constant_memory_over_64_kib_is_refused():
    src = '__constant__ float w[20000];\nextern "C" __global__ void k(float* y) { y[0] = w[0]; }\n'
    with pytest.raises(ConstantMemoryError, match="80000 bytes of __constant__"):
        CPUModule(src, path="big.cu")


# --- checking modes, each catching a deliberately broken kernel -----------------------------

@pytest.mark.check
def test_memory_check_catches_out_of_bounds_write(broken):
    n = 100
    x = rng.standard_normal(n).astype(np.float32)
    y = np.full(n, np.nan, np.float32)
    f = broken.get_function("off_by_one")
    with pytest.raises(KernelMemoryError) as info:
        f((1,), (128,), (x, y, np.int32(n)), check="memory")
    msg = str(info.value)
    assert "off_by_one" in msg and "WRITE of size 4" in msg
    assert "argument 1 ('y')" in msg and "broken_kernels.cu:6" in msg


STATIC_SHARED = r'''
extern "C" __global__ void shared_past_end(const float* x, float* y, int n) {
  __shared__ float tile[8][16], total;                     // 512 bytes, then a scalar
  const int t = threadIdx.x;
  tile[t / 16][t % 16] = x[t];
  if (t == 0) total = 0.0f;
  __syncthreads();
  y[t] = tile[(t + 1) / 16][(t + 1) % 16];                 // thread 127 reads tile[8][0]
}
extern "C" __global__ void shared_before_start(float* y) {
  __shared__ volatile int flags[32];
  flags[threadIdx.x] = 1;
  __syncthreads();
  y[threadIdx.x] = flags[int(threadIdx.x) - 1];              // thread 0 reads flags[-1]
}
extern "C" __global__ void shared_in_bounds(const float* x, float* y) {
  __shared__ float tile[8][16], total;
  const int t = threadIdx.x;
  tile[t / 16][t % 16] = x[t];
  if (t == 0) total = 1.0f;
  __syncthreads();
  y[t] = tile[(127 - t) / 16][(127 - t) % 16] + total + sizeof(tile) / 4096.0f;
}
extern "C" __global__ void aligned_past_end(const float* x, float* y) {
  __shared__ __align__(16) float rows[2][32];
  const int t = threadIdx.x;
  rows[t / 32][t % 32] = x[t];
  __syncthreads();
  y[t] = rows[(t + 1) / 32][(t + 1) % 32];                 // thread 63 reads rows[2][0]
}
'''


@pytest.mark.parametrize("kernel, want", [
    ("shared_past_end", r"(?s)READ of size 4.*0 bytes past the end of the 512-byte __shared__ array 'tile'.*"
                        r"static_shared.cu:8"),
    ("shared_before_start", r"(?s)READ of size 4.*4 bytes before the start of the 128-byte __shared__ array "
                            r"'flags'.*static_shared.cu:14"),
])
def test_memory_check_catches_static_shared_out_of_bounds(kernel, want):
    mod = CPUModule(STATIC_SHARED, path="static_shared.cu")
    args = (np.ones(128, np.float32), np.zeros(128, np.float32), np.int32(128))
    fn = mod.get_function(kernel)
    fn((1,), (128 if kernel == "shared_past_end" else 32,), args[:len(fn.param_names)])  # runs unchecked
    with pytest.raises(KernelMemoryError, match=want) as info:
        fn((1,), (128 if kernel == "shared_past_end" else 32,), args[:len(fn.param_names)], check="memory")
    assert "LABKIT-SHARED" not in str(info.value)


def test_memory_check_catches_an_aligned_shared_arrays_out_of_bounds():
    """`__shared__ __align__(16) float rows[2][32]` is a shared array like any other: its own heap
    block under the memory check, whose edge is guarded."""
    mod = CPUModule(STATIC_SHARED, path="static_shared.cu")
    with pytest.raises(KernelMemoryError, match=r"(?s)READ of size 4.*0 bytes past the end of the 256-byte "
                                                 r"__shared__ array 'rows'"):
        mod.get_function("aligned_past_end")((1,), (64,), (np.ones(64, np.float32), np.zeros(64, np.float32)),
                                             check="memory")


@pytest.mark.parametrize("check", [None, "memory"])
def test_static_shared_variables_in_bounds_run_in_every_mode(check):
    mod = CPUModule(STATIC_SHARED, path="static_shared.cu")
    x = rng.standard_normal(128).astype(np.float32)
    y = np.full(128, np.nan, np.float32)
    mod.get_function("shared_in_bounds")((3,), (128,), (x, y), check=check)
    np.testing.assert_allclose(y, x[::-1] + 1.0 + 512 / 4096.0, rtol=1e-6)


def test_memory_check_passes_a_correct_kernel_and_returns_results(feat):
    n = 300
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    ref = 2.0 * x + y
    feat.get_function("saxpy")((2,), (128,), (x, y, np.float32(2.0), np.int32(n)), check="memory")
    np.testing.assert_allclose(y, ref, rtol=1e-6)


@pytest.mark.check
def test_barrier_check_catches_early_return(broken):
    n = 100
    x = rng.standard_normal(n).astype(np.float32)
    y = np.full(n, np.nan, np.float32)
    f = broken.get_function("early_return_barrier")
    f((1,), (128,), (x, y, np.int32(n)))  # runs without the check (as hardware often does)
    with pytest.raises(BarrierError, match=r"reached by only 100 of 128 threads"):
        f((1,), (128,), (x, y, np.int32(n)), check="barrier")


def test_barrier_check_catches_divergent_barriers(broken):
    y = np.zeros(64, np.float32)
    with pytest.raises(BarrierError, match="two different __syncthreads"):
        broken.get_function("divergent_barrier")((1,), (64,), (y,), check="barrier")


def test_deadlock_is_reported_not_hung(broken):
    y = np.zeros(64, np.float32)
    with pytest.raises(BarrierError, match="deadlock"):
        broken.get_function("deadlock")((1,), (64,), (y,))


@pytest.mark.check
def test_shuffled_schedule_exposes_missing_barrier(broken):
    n = 256
    x = rng.standard_normal(n).astype(np.float32)
    ref = np.concatenate([[0.0], x[:-1]]).astype(np.float32)
    f = broken.get_function("shift_missing_barrier")
    y = np.full(n, np.nan, np.float32)
    f((1,), (256,), (x, y, np.int32(n)))  # in thread order the bug hides
    np.testing.assert_array_equal(y, ref)
    y[:] = np.nan
    f((1,), (256,), (x, y, np.int32(n)), check="shuffle")
    assert not np.array_equal(y, ref)


def test_checking_modes_from_environment(monkeypatch):
    from labkit.backends.cpu import parse_checks
    monkeypatch.setenv("LABKIT_CHECK", "memory,barrier")
    assert parse_checks(None) == {"memory", "barrier"}
    assert parse_checks("all") == {"memory", "barrier", "shuffle", "race"}
    with pytest.raises(ValueError, match="unknown check"):
        parse_checks("racecheck")


def test_correct_kernels_pass_every_check(feat):
    n = 513
    x = rng.standard_normal(n).astype(np.float32)
    nb = (n + 255) // 256
    partial = np.full(nb, np.nan, np.float32)
    feat.get_function("block_sum")((nb,), (256,), (x, partial, np.int32(n)), check="all")
    blocks = [x[i * 256:(i + 1) * 256].astype(np.float64) for i in range(nb)]
    ref, terms = [b.sum() for b in blocks], [np.abs(b).sum() for b in blocks]
    assert rel_error(partial, np.array(ref), terms=np.array(terms)) < 1e-5   # two sums of 256 may cancel


@pytest.mark.check
def test_results_do_not_depend_on_worker_count(feat, monkeypatch):
    n = 64
    A = rng.standard_normal((n, n)).astype(np.float32)
    B = rng.standard_normal((n, n)).astype(np.float32)
    outs = []
    for w in ("1", "2"):
        monkeypatch.setenv("LABKIT_CPU_WORKERS", w)
        C = np.full((n, n), np.nan, np.float32)
        feat.get_function("matmul_tiled")((4, 4), (16, 16), (A, B, C, np.int32(n)))
        outs.append(C)
    np.testing.assert_array_equal(outs[0], outs[1])


def test_modules_of_one_source_have_their_own_constant_memory():
    a = CPUModule(FEATURES.read_text(), path=str(FEATURES))
    b = CPUModule(FEATURES.read_text(), path=str(FEATURES))
    a.get_global("coeffs").copy_from_host(np.full(8, 1.0, np.float32))
    b.get_global("coeffs").copy_from_host(np.full(8, 2.0, np.float32))
    assert a.get_global("coeffs").view()[0] == 1.0 and b.get_global("coeffs").view()[0] == 2.0


def test_old_modules_give_their_fiber_stacks_back():
    # Each module keeps its workers' fiber stacks (two memory mappings per thread) between launches;
    # beyond KEEP_STACKS modules the oldest release theirs, or a long test run runs out of mappings.
    from labkit.backends.cpu import module as cpu_module

    def maps() -> int:
        return sum(1 for _ in open("/proc/self/maps"))

    src = 'extern "C" __global__ void fill(float* y, float v) { y[blockIdx.x * blockDim.x + threadIdx.x] = v; }'
    y = np.zeros(256, np.float32)
    mods = [CPUModule(src + f"\n// variant {i}\n") for i in range(2 * cpu_module.KEEP_STACKS)]
    for i, m in enumerate(mods[:cpu_module.KEEP_STACKS]):
        m.get_function("fill")((1,), (256,), (y, np.float32(i)))
    before = maps()
    for i, m in enumerate(mods[cpu_module.KEEP_STACKS:]):
        m.get_function("fill")((1,), (256,), (y, np.float32(i)))
        assert np.all(y == i)
    assert len(cpu_module._HOLDING) <= cpu_module.KEEP_STACKS
    # KEEP_STACKS more modules holding 256 stacks each would add 4,000+ mappings; only their code is.
    assert maps() - before < 2 * cpu_module.KEEP_STACKS * 256
    mods[0].get_function("fill")((1,), (256,), (y, np.float32(7)))   # a released module launches again
    assert np.all(y == 7)


def test_modules_linked_with_one_runtime_keep_their_own_state():
    # Every module links the same compiled runtime (compiler.build_runtime), statically: the launch
    # state, the worker pool and the last error are still each module's own.
    src = ('extern "C" __global__ void early(float* y) {\n'
           '  if (threadIdx.x == 0) return;\n  __syncthreads();\n  y[threadIdx.x] = 1.0f;\n}\n'
           "// own runtime state\n")
    a, b = CPUModule(src), CPUModule(src)
    y = np.zeros(64, np.float32)
    with pytest.raises(BarrierError):
        a.get_function("early")((1,), (64,), (y,), check="barrier")
    assert b"barrier check" in a._lib.labkit_error() and a._lib.labkit_switches() > 0
    assert b._lib.labkit_error() == b"" and b._lib.labkit_switches() == 0
    b.get_function("early")((1,), (64,), (y,))
    assert b"barrier check" in a._lib.labkit_error() and b._lib.labkit_error() == b""


def test_runtime_object_built_once_its_frames_counted_and_optional(tmp_path, monkeypatch):
    from labkit.backends.cpu import compiler
    src = 'extern "C" __global__ void fill(float* y, float v) { y[threadIdx.x] = v; }\n'
    y = np.zeros(32, np.float32)
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path / "split"))
    for i in range(2):
        CPUModule(src + f"// {i}\n").get_function("fill")((1,), (32,), (y, np.float32(i)))
    cache = compiler.cache_dir()
    runtimes = list(cache.glob("runtime-fast-*.o"))
    assert len(runtimes) == 1            # one runtime object for both kernels
    runtime_frame = int(runtimes[0].with_suffix(".stack").read_text())
    stacks = list(cache.glob("[0-9a-f]*.stack"))     # the kernels': a fiber's stack holds the runtime's frames too
    assert len(stacks) == 2 and all(int(s.read_text()) >= runtime_frame > 0 for s in stacks)
    # Where the runtime cannot be compiled on its own, a kernel is compiled with all of it inline.
    broken = tmp_path / "runtime.cpp"
    broken.write_text("#error no runtime object here\n")
    monkeypatch.setattr(compiler, "RUNTIME", broken)
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path / "whole"))
    CPUModule(src).get_function("fill")((1,), (32,), (y, np.float32(5)))
    assert np.all(y == 5) and not list(compiler.cache_dir().glob("runtime-*.o"))
