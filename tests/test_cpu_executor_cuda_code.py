"""Real CUDA teaching code on the CPU executor: cooperative groups, warp reductions and matches, the
counting barriers, atomicInc/Dec, cache-hinted loads and stores, NULL pointer arguments,
__CUDA_ARCH__, volatile shared memory, one array passed twice; each kernel of
tests/cuda/teaching_kernels.cu against NumPy, in every checking mode, and on the GPU where there is
one.  What the executor does not model is refused before compiling, with a clear message."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from labkit.backends.cpu import CPUModule
from labkit.errors import LaunchError, UnsupportedOnCPU

SOURCE = Path(__file__).resolve().parent / "cuda" / "teaching_kernels.cu"
rng = np.random.default_rng()
MODES = [None, "memory", "barrier", "shuffle", "race"]


def module(check):
    return CPUModule(SOURCE.read_text(), path=str(SOURCE), check=check)


def run(name, grid, block, args, check=None, on_gpu=False):
    """Launch on the CPU executor (or the GPU) and return the arguments as NumPy arrays."""
    if on_gpu:
        import cupy
        from labkit.backends.cuda import CUDAModule
        mod = CUDAModule(SOURCE.read_text(), path=str(SOURCE))
        copies = {id(a): cupy.asarray(a) for a in args if isinstance(a, np.ndarray)}   # one array passed twice
        dev = [copies[id(a)] if isinstance(a, np.ndarray) else a for a in args]         # stays one
        mod.get_function(name)(grid, block, dev)
        return [cupy.asnumpy(a) if isinstance(a, cupy.ndarray) else a for a in dev]
    module(check).get_function(name)(grid, block, args)
    return args


WHERE = [pytest.param("cpu", m, id=f"cpu-{m or 'default'}") for m in MODES] + \
    [pytest.param("gpu", None, id="gpu-default", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("where, check", WHERE)
def test_cooperative_groups_block_reduction(where, check):
    x = rng.standard_normal(1000).astype(np.float32)
    out = np.full(3, np.nan, np.float32)
    _, out, _ = run("cg_block_sum", (3,), (256,), [x, out, np.int32(1000)], check, where == "gpu")
    # float32 adds in any order err by at most n * eps/2 * sum|x|; a bound relative to the sum
    # itself fails whenever the 1,000 draws all but cancel.
    bound = x.size * np.finfo(np.float32).eps / 2 * float(np.abs(x).astype(np.float64).sum())
    assert (np.abs(out - x.astype(np.float64).sum()) <= bound).all()


@pytest.mark.parametrize("where, check", WHERE)
def test_tiles_of_eight(where, check):
    x = rng.integers(-50, 50, 96).astype(np.int32)
    tmax, rank = np.zeros(96, np.int32), np.zeros(96, np.int32)
    _, tmax, rank = run("cg_tile8", (2,), (48,), [x, tmax, rank], check, where == "gpu")
    assert np.array_equal(tmax, np.repeat(x.reshape(-1, 8).max(1), 8))
    local = np.arange(48)
    assert np.array_equal(rank, np.tile(local % 8 + 100 * (local // 8), 2))


@pytest.mark.parametrize("where, check", WHERE)
def test_warp_reductions_matches_and_counting_barriers(where, check):
    x = rng.integers(0, 20, 64).astype(np.uint32)
    x[40] = 7
    out = np.zeros(6 * 64, np.uint32)
    _, out = run("warp_reduce_match", (1,), (64,), [x, out], check, where == "gpu")
    out = out.reshape(64, 6)
    for w in range(2):
        lanes = x[32 * w:32 * w + 32]
        o = out[32 * w:32 * w + 32]
        assert (o[:, 0] == lanes.sum()).all() and (o[:, 1] == lanes.max()).all()
        assert (o[:, 2] == np.bitwise_or.reduce(lanes)).all()
        want = [sum(1 << m for m in range(32) if lanes[m] % 4 == lanes[l] % 4) for l in range(32)]
        assert o[:, 3].tolist() == want
    assert (out[:, 4] == (x % 3 == 0).sum()).all()
    assert (out[:, 5] == 2 * int((x == 7).any()) + 1).all()


@pytest.mark.parametrize("where, check", WHERE)
def test_atomic_inc_dec_and_cache_hints(where, check):
    n = 37
    x = rng.standard_normal(n).astype(np.float32)
    y = np.full(n, np.nan, np.float32)
    counters = np.zeros(2, np.uint32)
    _, y, counters, _ = run("ring_and_hints", (2,), (32,), [x, y, counters, np.int32(n)], check, where == "gpu")
    assert np.allclose(y, 3 * x)
    assert counters.tolist() == [n % 10, [4, 3, 2, 1, 0][(n - 1) % 5]]


@pytest.mark.parametrize("where, check", WHERE)
def test_a_null_pointer_argument_and_cuda_arch(where, check):
    n = 20
    x, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    y, arch = np.full(n, np.nan, np.float32), np.zeros(1, np.int32)
    got = run("optional_bias", (1,), (32,), [x, None, y, arch, np.int32(n)], check, where == "gpu")
    assert np.array_equal(got[2], x) and got[3][0] == 1      # no bias read; __CUDA_ARCH__ >= 800
    got = run("optional_bias", (1,), (32,), [x, b, y.copy(), arch, np.int32(n)], check, where == "gpu")
    assert np.allclose(got[2], x + b)


@pytest.mark.parametrize("where, check", WHERE)
def test_a_volatile_shared_array(where, check):
    x = rng.standard_normal(3 * 64).astype(np.float32)
    out = np.full(3, np.nan, np.float32)
    _, out = run("volatile_tail", (3,), (32,), [x, out], check, where == "gpu")
    rows = x.reshape(3, 64).astype(np.float64)
    # a float32 sum in the kernel's order: its error scales with the sum of |x|, not with the sum
    # itself (which cancellation can bring near zero)
    assert np.all(np.abs(out - rows.sum(1)) <= 1e-6 * np.abs(rows).sum(1))


@pytest.mark.parametrize("where, check", WHERE)
def test_one_array_passed_twice_in_every_mode(where, check):
    x = rng.standard_normal(50).astype(np.float32)
    want = x + 1
    y = x.copy()
    got = run("add_one", (1,), (64,), [y, y, np.int32(50)], check, where == "gpu")
    assert np.array_equal(got[1], want) and np.array_equal(got[0], want)


def test_arrays_that_overlap_without_being_the_same_are_refused_by_the_memory_check():
    buf = np.zeros(60, np.float32)
    with pytest.raises(LaunchError, match=r"arguments 0 and 1 .* overlap without being the same array"):
        module("memory").get_function("add_one")((1,), (64,), [buf[:50], buf[5:55], np.int32(50)])


@pytest.mark.check
def test_a_shuffle_outside_its_mask_is_an_error():
    code = '''extern "C" __global__ void bad_shuffle(int* out) {
  int v = threadIdx.x;
  if (threadIdx.x < 16) out[threadIdx.x] = __shfl_sync(0x0000ffffu, v, threadIdx.x + 16);
}'''
    mod = CPUModule(code, path="bad_shuffle.cu")
    with pytest.raises(LaunchError, match=r"shuffle at line 3 reads lane 16, outside its mask 0x0000ffff"):
        mod.get_function("bad_shuffle")((1,), (32,), [np.zeros(32, np.int32)])


@pytest.mark.check
def test_a_kernel_s_grid_ranks_and_coalesced_groups_run_and_its_grid_sync_needs_a_cooperative_launch():
    """A kernel launched from Python is not cooperative: its grid's ranks hold, its coalesced groups
    aggregate an atomic, and a grid sync is refused in words while it runs."""
    code = '''#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void ranks(unsigned long long* rank, int* slot, int* count, int* largest) {
  cg::grid_group grid = cg::this_grid();
  rank[grid.thread_rank()] = grid.size() * 1000 + grid.block_rank();
  if (threadIdx.x % 3 != 0) {
    cg::coalesced_group g = cg::coalesced_threads();
    int first = 0;
    if (g.thread_rank() == 0) { first = atomicAdd(count, int(g.size())); atomicMax(largest, int(g.size())); }
    slot[grid.thread_rank()] = g.shfl(first, 0) + int(g.thread_rank());
  }
}
extern "C" __global__ void syncs(int* y) { cg::this_grid().sync(); y[0] = 1; }'''
    mod = CPUModule(code, path="grid.cu")
    rank, slot = np.zeros(256, np.uint64), np.full(256, -1, np.int32)
    count, largest = np.zeros(1, np.int32), np.zeros(1, np.int32)
    mod.get_function("ranks")((4,), (64,), [rank, slot, count, largest])
    assert np.array_equal(rank, 256 * 1000 + np.arange(256) // 64)
    taking = np.arange(256) % 64 % 3 != 0
    assert count[0] == taking.sum() and np.array_equal(np.sort(slot[taking]), np.arange(taking.sum()))
    assert (slot[~taking] == -1).all() and 1 < largest[0] <= 32
    with pytest.raises(LaunchError, match=r"grid-wide sync \(grid.sync\(\)\) at line 13 in a launch that is not "
                                          r"cooperative.*cudaLaunchCooperativeKernel"):
        mod.get_function("syncs")((2,), (32,), [np.zeros(1, np.int32)])


def test_a_tile_made_at_run_time_syncs_its_threads_and_ranks_them():
    """cg::tiled_partition(g, n): a thread_group of n threads (dxtc's tiles of 16); its sync orders the
    tile's shared-memory writes before its reads; n of 64 spans two warps; a size that is not a power of
    two is an error in words."""
    code = ('#include <cooperative_groups.h>\nnamespace cg = cooperative_groups;\n'
            'extern "C" __global__ void k(int* y, int n) {\n'
            '  __shared__ int s[128];\n'
            '  cg::thread_group t = cg::tiled_partition(cg::this_thread_block(), n);\n'
            '  s[threadIdx.x] = threadIdx.x;\n  t.sync();\n'
            '  int first = threadIdx.x - t.thread_rank(), sum = 0;\n'
            '  for (int i = 0; i < (int)t.size(); ++i) sum += s[first + i];\n'
            '  y[threadIdx.x] = sum * 1000 + t.thread_rank();\n}\n')
    mod = CPUModule(code, path="tiles.cu")
    for n in (16, 64):
        y = np.zeros(128, np.int32)
        mod.get_function("k")((1,), (128,), [y, np.int32(n)])
        first = np.arange(128) // n * n
        want = (first * n + n * (n - 1) // 2) * 1000 + np.arange(128) % n
        assert np.array_equal(y, want)
    with pytest.raises(LaunchError, match=r"tiled_partition\(g, 12\): a tile holds a power of two threads"):
        mod.get_function("k")((1,), (128,), [np.zeros(128, np.int32), np.int32(12)])


def test_cooperative_groups_scans_over_tiles_and_coalesced_groups():
    """cg::inclusive_scan and exclusive_scan (sum, and max: combined in rank order) over tiles of 4, 16
    and 32 threads, and over the coalesced group of the lanes holding a multiple of 3."""
    code = ('#include <cooperative_groups.h>\n#include <cooperative_groups/scan.h>\n'
            'namespace cg = cooperative_groups;\n'
            'template <unsigned N> __device__ void both(const int* x, int* y) {\n'
            '  auto t = cg::tiled_partition<N>(cg::this_thread_block());\n'
            '  const int i = threadIdx.x;\n'
            '  y[i] = cg::inclusive_scan(t, x[i]);\n  y[96 + i] = cg::exclusive_scan(t, x[i], cg::greater<int>());\n}\n'
            'extern "C" __global__ void k(const int* x, int* y, int n) {\n'
            '  if (n == 4) both<4>(x, y); else if (n == 16) both<16>(x, y); else both<32>(x, y);\n'
            '  if (x[threadIdx.x] % 3 == 0) y[192 + threadIdx.x] = cg::inclusive_scan(cg::coalesced_threads(), x[threadIdx.x]);\n}\n')
    mod = CPUModule(code, path="scan.cu")
    x = np.random.default_rng(5).integers(-50, 50, 96).astype(np.int32)
    for n in (4, 16, 32):
        y = np.full(288, -999, np.int32)
        mod.get_function("k")((1,), (96,), [x, y, np.int32(n)])
        tiles = x.reshape(-1, n)
        assert np.array_equal(y[:96], np.cumsum(tiles, axis=1).ravel())
        # an exclusive max: rank 0's value is CUDA's to leave undefined; every other rank's is the max before it
        ex = np.maximum.accumulate(tiles, axis=1)[:, :-1]
        assert np.array_equal(y[96:192].reshape(-1, n)[:, 1:], ex)
        for w in range(3):
            lanes = x[32 * w:32 * (w + 1)]
            taking = lanes % 3 == 0
            got = y[192 + 32 * w:192 + 32 * (w + 1)]
            assert np.array_equal(got[taking], np.cumsum(lanes[taking])) and (got[~taking] == -999).all()


@pytest.mark.check
@pytest.mark.parametrize("code, what", [
    ('#include <cuda_fp8.h>\nextern "C" __global__ void k(__nv_fp8_e4m3* x) { }', "fp8 types"),
    ('extern "C" __global__ void k(cudaTextureObject_t t, float* y) { y[0] = tex1Dfetch<float>(t, 0); }',
     "textures and surfaces"),
    ('#include <cooperative_groups.h>\nnamespace cg = cooperative_groups;\n'
     'extern "C" __global__ void k(int* y) { cg::this_multi_grid().sync(); }', "multi-device grid groups"),
])
def test_what_the_executor_does_not_model_is_refused_by_name(code, what):
    with pytest.raises(UnsupportedOnCPU, match=rf"uses {what}.*needs a GPU"):
        CPUModule(code, path="k.cu")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc here to check that the file is valid CUDA")
def test_the_teaching_kernels_are_valid_cuda(tmp_path):
    res = subprocess.run(["nvcc", "-std=c++17", "-arch=sm_90", "-c", "-o", str(tmp_path / "k.o"), str(SOURCE)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
