"""The CPU executor's race check (check="race", ThreadSanitizer with one fiber per CUDA thread) and the
shuffled schedule's switch points at memory accesses (check="shuffle").

The race check must flag what a GPU hides -- a read-modify-write of one location by many threads, a
missing __syncthreads() around shared memory, blocks writing one location -- with both threads and
both lines, and must stay silent on correct kernels: barriers, __syncwarp, atomics, the last-block
pattern (__threadfence and an atomic counter), threads that return early, and every kernel family
of the series."""
from __future__ import annotations

import numpy as np
import pytest

import labkit
from labkit import reference
from labkit.backends.cpu import CPUModule, compiler
from labkit.checks import rel_error
from labkit.errors import KernelCompileError, KernelRaceError
from labkit.ops.conv import conv_launch_config


rng = np.random.default_rng()
pytestmark = pytest.mark.skipif(labkit.backend() != "cpu", reason="the race check belongs to the CPU executor "
                                "(compute-sanitizer's racecheck on a GPU)")

RACY = r'''
extern "C" __global__ void count(int* y) {
  y[0] += 1;                                             // every thread: read, add, write
}
extern "C" __global__ void shift(const float* x, float* y) {
  __shared__ float s[64];
  const int t = threadIdx.x;
  s[t] = x[blockIdx.x * 64 + t];
  y[blockIdx.x * 64 + t] = t > 0 ? s[t - 1] : 0.0f;      // no __syncthreads() before reading a neighbour
}
extern "C" __global__ void last_writer(int* y) {
  if (threadIdx.x == 0) y[0] = blockIdx.x;               // one thread per block, every block the same place
}
extern "C" __global__ void dyn_shift(float* y) {
  extern __shared__ float d[];
  d[threadIdx.x] = float(threadIdx.x);
  y[threadIdx.x] = d[(threadIdx.x + 1) % blockDim.x];    // no barrier
}
'''

CORRECT = r'''
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void count_atomic(int* y) { atomicAdd(y, 1); }
extern "C" __global__ void block_sum(const float* x, float* y, int n) {
  __shared__ float s[128];
  const int t = threadIdx.x, i = blockIdx.x * 128 + t;
  if (blockIdx.x * 128 >= n) return;                     // whole blocks past the end leave at once
  s[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int k = 64; k > 0; k /= 2) {
    if (t < k) s[t] += s[t + k];
    __syncthreads();
  }
  if (t == 0) atomicAdd(y, s[0]);
}
extern "C" __global__ void warp_pass(int* y) {
  __shared__ int s[64];
  s[threadIdx.x] = threadIdx.x;
  __syncwarp();                                          // orders the lanes of each warp
  y[threadIdx.x] = s[(threadIdx.x & ~31u) | ((threadIdx.x + 1) & 31u)];
  auto tile = cg::tiled_partition<8>(cg::this_thread_block());
  __syncwarp();                                          // every lane has read s before it changes
  s[threadIdx.x] = 2 * threadIdx.x;
  tile.sync();                                           // a tile's sync orders its 8 lanes
  y[threadIdx.x] += s[(threadIdx.x & ~7u) | ((threadIdx.x + 3) & 7u)];
}
__device__ unsigned done_blocks = 0;
extern "C" __global__ void last_block_sum(const float* x, float* partial, float* y) {
  // The classic "last block finishes the sum": each block writes its partial sum, fences, counts
  // itself in; the block that counts last reads every partial.
  __shared__ float s[32];
  __shared__ bool last;
  s[threadIdx.x] = x[blockIdx.x * 32 + threadIdx.x];
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (int k = 0; k < 32; ++k) sum += s[k];
    partial[blockIdx.x] = sum;
    __threadfence();
    last = atomicInc(&done_blocks, gridDim.x) == gridDim.x - 1;
  }
  __syncthreads();
  if (last && threadIdx.x == 0) {
    float total = 0.0f;
    for (unsigned b = 0; b < gridDim.x; ++b) total += partial[b];
    y[0] = total;
    done_blocks = 0;                                     // ready for the next launch
  }
}
extern "C" __global__ void early_exit_then_barrier(const float* x, float* y, int n) {
  __shared__ float s[64];
  const int t = threadIdx.x;
  s[t] = x[t];
  if (t >= n) return;                                    // these threads wrote s[t], then left
  __syncthreads();
  y[t] = s[63 - t];
}
'''


@pytest.fixture(scope="module")
def racy():
    return CPUModule(RACY, path="racy.cu")


@pytest.fixture(scope="module")
def correct():
    return CPUModule(CORRECT, path="correct.cu")


@pytest.mark.check
def test_a_global_read_modify_write_is_a_race(racy):
    y = np.zeros(1, np.int32)
    racy.get_function("count")((2,), (64,), (y,))                     # no check: exactly 128, a GPU loses most
    assert y[0] == 128
    with pytest.raises(KernelRaceError) as info:
        racy.get_function("count")((2,), (64,), (y,), check="race")
    msg = str(info.value)
    assert "kernel 'count' has a data race on the 4-byte array passed as argument 0 ('y'), element 0" in msg
    assert msg.count("racy.cu:3") >= 2 and "thread (" in msg and "atomicAdd" in msg


@pytest.mark.check
def test_a_missing_shared_memory_barrier_is_a_race(racy):
    x = rng.standard_normal(128).astype(np.float32)
    y = np.full(128, np.nan, np.float32)
    racy.get_function("shift")((2,), (64,), (x, y))                   # the default schedule hides it
    assert np.array_equal(y.reshape(2, 64)[:, 1:], x.reshape(2, 64)[:, :-1])
    with pytest.raises(KernelRaceError, match=r"(?s)on the 256-byte __shared__ array 's', element \d+.*"
                                              r"racy.cu:9.*racy.cu:8.*__syncthreads\(\)"):
        racy.get_function("shift")((2,), (64,), (x, y), check="race")


def test_blocks_writing_one_location_race(racy):
    with pytest.raises(KernelRaceError, match=r"(?s)argument 0 \('y'\).*racy.cu:12.*of another block.*"
                                              r"different blocks"):
        racy.get_function("last_writer")((8,), (32,), (np.zeros(1, np.int32),), check="race")


def test_dynamic_shared_memory_is_named(racy):
    with pytest.raises(KernelRaceError, match=r"dynamic shared memory \(extern __shared__\)"):
        racy.get_function("dyn_shift")((1,), (32,), (np.zeros(32, np.float32),), shared_mem=128, check="race")


@pytest.mark.parametrize("check", ["race", "race,memory", "race,barrier,shuffle"])
def test_correct_kernels_raise_nothing_and_compute_the_same(correct, check):
    y = np.zeros(1, np.int32)
    correct.get_function("count_atomic")((3,), (64,), (y,), check=check)
    assert y[0] == 192
    x = rng.standard_normal(300).astype(np.float32)
    s = np.zeros(1, np.float32)
    correct.get_function("block_sum")((4,), (128,), (x, s, np.int32(300)), check=check)
    assert np.isclose(s[0], x.astype(np.float64).sum(), rtol=1e-4, atol=1e-4)
    w = np.zeros(64, np.int32)
    correct.get_function("warp_pass")((1,), (64,), (w,), check=check)
    t = np.arange(64)
    assert np.array_equal(w, ((t & ~31) | ((t + 1) & 31)) + 2 * ((t & ~7) | ((t + 3) & 7)))
    x = rng.standard_normal(6 * 32).astype(np.float32)
    partial, total = np.zeros(6, np.float32), np.zeros(1, np.float32)
    correct.get_function("last_block_sum")((6,), (32,), (x, partial, total), check=check)
    assert np.isclose(total[0], x.astype(np.float64).sum(), rtol=1e-4, atol=1e-4)


def test_threads_that_returned_count_as_arrived(correct):
    """Threads that wrote shared memory and returned before a barrier: on a GPU the barrier waits only
    for the others, and their writes are visible after it (the barrier check calls the early return
    itself a bug: a barrier inside divergent code)."""
    x = rng.standard_normal(64).astype(np.float32)
    y = np.full(64, np.nan, np.float32)
    correct.get_function("early_exit_then_barrier")((1,), (64,), (x, y, np.int32(40)), check="race")
    assert np.array_equal(y[:40], x[::-1][:40])


@pytest.mark.parametrize("drop", [0, 1], ids=["after-load", "before-next-load"])
def test_each_barrier_of_the_tiled_convolution_is_needed(drop):
    """conv_tiled from labkit/kernels with one of its two __syncthreads() removed: the race check names
    the dynamic shared tile and both lines; the default run of the second mutant is even right."""
    src = labkit.kernels.source("conv_tiled")
    lines = src.split("\n")
    at = [i for i, ln in enumerate(lines) if ln.strip().startswith("__syncthreads();")]
    assert len(at) == 2
    lines[at[drop]] = lines[at[drop]].replace("__syncthreads();", "")
    mod = CPUModule("\n".join(lines), path="conv_tiled_bug.cu")
    N, C, H, W, M, K = 2, 3, 13, 11, 4, 3
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((M, C, K, K)).astype(np.float32)
    b = rng.standard_normal(M).astype(np.float32)
    grid, block, shm = conv_launch_config("tiled", N, C, H, W, M, K, tile_width=16)
    args = (x, w, b, np.zeros((N, M, H - K + 1, W - K + 1), np.float32)) + \
        tuple(np.int32(v) for v in (N, C, H, W, M, K, 0))
    with pytest.raises(KernelRaceError, match=r"(?s)dynamic shared memory.*conv_tiled_bug.cu:\d+.*"
                                              r"conv_tiled_bug.cu:\d+.*__syncthreads"):
        mod.get_function("conv_tiled")(grid, block, args, shared_mem=shm, check="race")
    mod.get_function("conv_tiled")(grid, block, args, shared_mem=shm)
    if drop == 1:
        assert rel_error(args[3], reference.conv2d(x, w, b)) < 1e-5


@pytest.fixture
def race_everywhere(monkeypatch):
    """Every labkit op loads its kernels with the race check (as LABKIT_CHECK=race does)."""
    monkeypatch.setenv("LABKIT_CHECK", "race")
    labkit.reload()
    yield
    monkeypatch.delenv("LABKIT_CHECK")
    labkit.reload()


def test_the_series_other_kernel_families_are_race_free(race_everywhere):
    """What the checking-mode tests of the ladders do not reach: the implicit GEMM with split-K, the
    split-K GEMM and its reduce, the few-rows GEMM, LRN, the fused convolution + pooling."""
    from labkit import layers
    from labkit.ops.gemm import gemm, gemm_few_rows
    from labkit.ops.implicit import ConvLayer, ImplicitConv2d, Tiles

    x = rng.standard_normal((2, 4, 9, 7)).astype(np.float32)
    w = (rng.standard_normal((6, 4, 3, 3)) / 6).astype(np.float32)
    conv = ImplicitConv2d(w, np.zeros(6, np.float32), ConvLayer(4, 9, 7, 6, 3, 1, 1, 1),
                          tiles=Tiles("fp32", bm=32, bn=64, bk=8, tm=4, tn=4))
    assert rel_error(conv(x, splits=3), reference.conv2d(x, w, None, pad=1)) < 1e-5
    a = rng.standard_normal((5, 77)).astype(np.float32)
    bm = rng.standard_normal((77, 40)).astype(np.float32)
    want = a.astype(np.float64) @ bm
    assert rel_error(gemm(a, bm, variant="dbuf", splits=3), want) < 1e-5
    assert rel_error(gemm_few_rows(a[:3], bm, slices=4), want[:3]) < 1e-5
    v = rng.standard_normal((2, 7, 5, 3)).astype(np.float32)
    assert rel_error(layers.lrn(v, 2), reference.lrn(v, 2)) < 1e-5
    img = rng.standard_normal((2, 1, 12, 12)).astype(np.float32)
    k = rng.standard_normal((3, 1, 5, 5)).astype(np.float32)
    bias = rng.standard_normal(3).astype(np.float32)
    fused = layers.conv_pool_tanh(img, k, bias)
    assert rel_error(fused, reference.max_pool2d(np.tanh(reference.conv2d(img, k, bias)), 2, 2)) < 1e-5


def test_the_shuffled_schedule_switches_threads_at_memory_accesses(racy, correct):
    """With switch points at loads and stores, y[0] += 1 loses updates as on a GPU (the default
    schedule runs each thread to its next barrier and counts exactly); atomics still count exactly."""
    y = np.zeros(1, np.int32)
    racy.get_function("count")((4,), (256,), (y,), check="shuffle")
    assert 0 < y[0] < 1024
    y[0] = 0
    correct.get_function("count_atomic")((4,), (256,), (y,), check="shuffle")
    assert y[0] == 1024


def test_without_thread_sanitizer_the_race_check_says_what_to_install():
    with pytest.raises(KernelCompileError, match=r"the race check needs the host compiler's ThreadSanitizer "
                                                 r"\(libtsan\), which is not installed here"):
        compiler.run_compiler(["sh", "-c", "echo '/usr/bin/ld: cannot find -ltsan' >&2; exit 1"], "k.cu", "thread")


def test_the_find_the_bug_kernels_are_found_and_their_fixes_pass():
    """labkit/kernels/find_the_bug.cu: the race check names each bug with its lines; the fix (an atomic
    update, a barrier in the loop) passes the race check and gives the right answer."""
    src = labkit.kernels.source("find_the_bug")
    line = {key: next(i + 1 for i, ln in enumerate(src.splitlines()) if key in ln)
            for key in ("bins[x[i]] += 1", "s[t] += s[t + k]")}
    x = rng.integers(0, 7, 1000).astype(np.int32)
    want = np.bincount(x, minlength=7)
    bugged = CPUModule(src, path="find_the_bug.cu")
    bins = np.zeros(7, np.int32)
    with pytest.raises(KernelRaceError, match=rf"(?s)argument 1 \('bins'\).*find_the_bug.cu:{line['bins[x[i]] += 1']}"
                                              r".*atomicAdd"):
        bugged.get_function("histogram")((4,), (256,), (x, bins, np.int32(1000), np.int32(7)), check="race")
    v = rng.standard_normal(1000).astype(np.float32)
    with pytest.raises(KernelRaceError, match=rf"(?s)__shared__ array 's'.*find_the_bug.cu:{line['s[t] += s[t + k]']}"
                                              r".*the steps of a loop.*need a __syncthreads\(\)"):
        bugged.get_function("block_sum")((4,), (256,), (v, np.zeros(4, np.float32), np.int32(1000)), check="race")

    fixed = CPUModule(src.replace("bins[x[i]] += 1", "atomicAdd(&bins[x[i]], 1)")
                      .replace("if (t < k) s[t] += s[t + k];", "if (t < k) s[t] += s[t + k];\n    __syncthreads();"),
                      path="find_the_bug_fixed.cu")
    for check in (None, "race", "shuffle"):
        bins = np.zeros(7, np.int32)
        fixed.get_function("histogram")((4,), (256,), (x, bins, np.int32(1000), np.int32(7)), check=check)
        assert np.array_equal(bins, want)
        partial = np.full(4, np.nan, np.float32)
        fixed.get_function("block_sum")((4,), (256,), (v, partial, np.int32(1000)), check=check)
        assert np.allclose(partial, np.pad(v, (0, 24)).reshape(4, 256).astype(np.float64).sum(1), atol=1e-4)


NO_BARRIER_IN_LOOP = r'''
extern "C" __global__ void tree_sum(const float* x, float* partial, int racy_block) {
  __shared__ float s[1024];
  const int t = threadIdx.x;
  s[t] = x[blockIdx.x * blockDim.x + t];
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k /= 2) {
    if (t < k) s[t] += s[t + k];
    if (blockIdx.x != racy_block) __syncthreads();
  }
  if (t == 0) partial[blockIdx.x] = s[0];
}'''


@pytest.mark.parametrize("grid, block, racy", [(1, 1024, 0), (4, 512, 0), (4, 64, 3)],
                         ids=["one-block-of-1024", "blocks-of-512", "a-workers-later-block"])
def test_a_missing_barrier_is_found_in_large_blocks_and_in_every_block(grid, block, racy):
    """ThreadSanitizer has vector-clock slots for about 255 threads: larger blocks share the checker's
    fibers (labkit_cpu.h, race_fiber_count), and each block a worker runs is checked, not only its first."""
    fn = CPUModule(NO_BARRIER_IN_LOOP, path="tree_sum.cu").get_function("tree_sum")
    args = (rng.standard_normal(grid * block).astype(np.float32), np.zeros(grid, np.float32), np.int32(racy))
    with pytest.raises(KernelRaceError, match=rf"(?s)__shared__ array 's'.*block \({racy},0,0\).*tree_sum.cu:8"):
        fn((grid,), (block,), args, check="race")
    fn((grid,), (block,), args[:2] + (np.int32(-1),), check="race")        # with every barrier: no race
