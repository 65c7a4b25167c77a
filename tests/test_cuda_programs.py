"""Whole CUDA programs (host code, <<<>>> launches, the runtime API) on the CPU executor: labkit.cuda.

Teaching programs written for these tests (tests/data/cuda_programs/*.cu), programs with one mistake each
(mistakes/), samples from NVIDIA's cuda-samples, unchanged (cuda-samples/, see its README), and programs
the executor refuses by name."""
from __future__ import annotations

import ctypes
import ctypes.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.backends import kernel_source
from labkit.backends.cpu import cccl, program_source
from labkit.cuda import run_program
from labkit.errors import UnsupportedOnCPU

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the CPU executor needs g++")

DATA = Path(__file__).parent / "data" / "cuda_programs"
MISTAKES = DATA / "mistakes"
SAMPLES = DATA / "cuda-samples"


# --- the launch rewrite ---------------------------------------------------------------------------
@pytest.mark.check
def test_launch_rewrite_keeps_lines_and_skips_strings():
    src = ('// k<<<1, 2>>>(x) in a comment\nconst char* s = "k<<<1,2>>>";\n'
           'ns::k<float, 4><<<dim3(a, b), threads,\n  0, stream>>>(x, y);\n')
    out = program_source.rewrite_launches(src)
    assert out.count("\n") == src.count("\n")
    assert out.splitlines()[0] == src.splitlines()[0] and out.splitlines()[1] == src.splitlines()[1]
    assert ('::labkit::kernel_call([=](auto&... labkit_a) { ns::k<float, 4>(labkit_a...); }, "ns::k<float, 4>", '
            'dim3(a, b), threads,') in out
    assert "0, stream)(x, y);" in out


def test_host_variables_named_grid_dim_and_block_dim(tmp_path):
    """A host function's `dim3 gridDim, blockDim` are its own; the kernel's built-ins stay the kernel's."""
    src = tmp_path / "dims.cu"
    src.write_text("#include <cstdio>\n#define WIDTH blockDim.x\n"
                   "__global__ void k(int* x) { x[blockIdx.x * WIDTH + threadIdx.x] = gridDim.x * 100 + blockDim.x; }\n"
                   "void run(int* x, const dim3& blockDim) {\n  dim3 gridDim;\n  gridDim.x = 12 / blockDim.x;\n"
                   "  k<<<gridDim, blockDim>>>(x);\n}\n"
                   "int main() {\n  int* x;\n  cudaMallocManaged(&x, 12 * sizeof(int));\n  run(x, dim3(4));\n"
                   "  cudaDeviceSynchronize();\n  printf(\"%d %d\\n\", x[0], x[11]);\n}\n")
    rc, out, err = run_program(src)
    assert rc == 0, err
    assert out == "304 304\n"
    text = program_source.rewrite_host_dims(src.read_text())
    assert "dim3 labkit_host_gridDim;" in text and "#define WIDTH blockDim.x" in text
    assert "= gridDim.x * 100 + blockDim.x;" in text


def test_nvtx_ranges_a_single_percent_timer_read_and_event_flags(tmp_path):
    """NVTX annotations are no-ops with no profiler; `%globaltimer` written with one % (as nvcc takes it)
    reads the timer; cudaEventCreate's C++ form takes flags."""
    src = tmp_path / "annotated.cu"
    src.write_text(r"""#include <cstdio>
#include <nvtx3/nvToolsExt.h>
__global__ void k(unsigned long long* t) {
  unsigned long long g;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(g));
  *t = g;
}
int main() {
  nvtxRangePushA("outer");
  unsigned long long* t;
  cudaMallocManaged(&t, sizeof *t);
  cudaEvent_t e;
  printf("%s ", cudaGetErrorName(cudaEventCreate(&e, cudaEventDisableTiming)));
  k<<<1, 1>>>(t);
  cudaEventRecord(e);
  cudaEventSynchronize(e);
  printf("timer past 2017: %d, depth %d\n", *t > 1500000000ull * 1000000000ull, nvtxRangePop());
}
""")
    rc, out, err = run_program(src)
    assert rc == 0, err
    assert out == "cudaSuccess timer past 2017: 1, depth 0\n"


@pytest.mark.check
def test_a_device_side_wait_for_child_grids_and_the_driver_api_refused_by_name(tmp_path):
    dp = tmp_path / "dp.cu"
    dp.write_text("__global__ void child() {}\n__global__ void parent() {\n  child<<<1, 1>>>();\n"
                  "  cudaDeviceSynchronize();\n}\nint main() { parent<<<1, 1>>>(); }\n")
    with pytest.raises(UnsupportedOnCPU, match=r"dp.cu:4 calls cudaDeviceSynchronize in device code.*CUDA 12 removed"):
        run_program(dp)
    drv = tmp_path / "drv.cu"
    drv.write_text("#include <cuda.h>\nint main() { CUdevice d; cuInit(0); return 0; }\n")
    with pytest.raises(UnsupportedOnCPU, match=r"drv.cu:2 uses the CUDA driver API"):
        run_program(drv)
    tex = tmp_path / "tex.cu"
    tex.write_text("cudaTextureObject_t t;\nint main() { cudaCreateTextureObject(&t, 0, 0, 0); }\n")
    with pytest.raises(UnsupportedOnCPU, match=r"tex.cu:\d uses textures"):
        run_program(tex)
    p2p = tmp_path / "p2p.cu"
    p2p.write_text("int main() {\n  cudaDeviceEnablePeerAccess(1, 0);\n}\n")
    with pytest.raises(UnsupportedOnCPU, match=r"p2p.cu:2 uses peer access between GPUs"):
        run_program(p2p)
    lib = tmp_path / "solver.cu"
    lib.write_text("#include <cusolverDn.h>\nint main() {}\n")
    with pytest.raises(UnsupportedOnCPU, match=r"solver.cu:1 includes <cusolverDn.h>, a CUDA library"):
        run_program(lib)


@pytest.mark.check
def test_the_command_line_names_a_missing_source_and_splits_the_program_s_arguments(tmp_path, capsys):
    from labkit.cuda import __main__ as cli
    with pytest.raises(SystemExit):
        cli.main(["run", str(tmp_path / "absent.cu")])
    assert "absent.cu: no such file" in capsys.readouterr().err
    src = tmp_path / "p.cu"
    src.write_text("int main() {}\n")
    assert cli.split_sources([str(src), "7", "--x"]) == ([str(src)], ["7", "--x"])
    assert cli.split_sources([str(src), "--", str(src)]) == ([str(src)], [str(src)])


# --- teaching programs ----------------------------------------------------------------------------
def test_vector_add_with_error_checks_and_events():
    rc, out, err = run_program(DATA / "vector_add.cu", ["5000"])
    assert rc == 0, err
    assert "n=5000 blocks=20 elapsed_ms_nonnegative=1" in out
    assert "c[4999] = 12497.5" in out and "PASSED" in out


def test_shared_memory_reduction_with_extern_shared_and_a_stream():
    rc, out, err = run_program(DATA / "reduce_shared.cu")
    assert rc == 0, err
    assert 'GPU Device 0: "Hopper" with compute capability 9.0' in out
    assert "sum = -10 (expected -10)" in out and "PASSED" in out


def test_tiled_matrix_multiply_with_static_shared_and_helper_timer():
    rc, out, err = run_program(DATA / "matmul_tiled.cu", ["-M=33"])
    assert rc == 0, err
    assert "M=33 N=50 K=40" in out and "timer_ok=1" in out and "PASSED" in out


def test_streams_and_async_copies_into_pinned_memory():
    rc, out, err = run_program(DATA / "streams_async.cu")
    assert rc == 0, err
    assert "h[16383] = 49149.0" in out and "PASSED" in out
    assert "labkit:" not in err    # synchronised correctly: no complaint


def test_constant_symbols_and_integer_intrinsics():
    rc, out, err = run_program(DATA / "constant_symbol.cu")
    assert rc == 0, err
    assert "hits=998 y[5]=5.000 too_big=cudaErrorInvalidValue bad=0 bad_bits=0" in out
    assert "cudaMemcpyToSymbol of 16 bytes at offset 0: the symbol holds 12 bytes" in err


def test_tiles_of_several_warps_synchronise_and_reduce():
    rc, out, err = run_program(DATA / "multi_warp_tiles.cu")
    assert rc == 0, err
    assert out.splitlines() == ["tiles of 64: first sum 0, 0 wrong", "tiles of 128: first sum -6, 0 wrong",
                                "tiles of 256: first sum -10, 0 wrong", "PASSED"]


def test_a_tile_sync_that_part_of_the_tile_never_reaches_is_a_deadlock(tmp_path):
    p = tmp_path / "tile_deadlock.cu"
    p.write_text("#include <cooperative_groups.h>\nnamespace cg = cooperative_groups;\n"
                 "__global__ void k() {\n  auto t = cg::tiled_partition<64>(cg::this_thread_block());\n"
                 "  if (t.thread_rank() < 40) t.sync();\n  __syncthreads();\n}\n"
                 "int main() { k<<<1, 128>>>(); return cudaDeviceSynchronize() == cudaSuccess ? 0 : 3; }\n")
    rc, out, err = run_program(p)
    assert rc == 3
    assert "deadlock in kernel 'k'" in err and "at a tile's sync()" in err


def test_host_threads_stream_callbacks_and_the_device_clock():
    rc, out, err = run_program(DATA / "callbacks_threads.cu")
    assert rc == 0, err
    assert "stream 3: sum 4000" in out and "waited 20 ms of cycles: yes" in out and "PASSED" in out


def test_threads_that_wait_on_the_clock_wait_together(tmp_path):
    """512 threads each wait 20 ms of cycles: together, as a block does on a GPU (10 s one after another)."""
    src = tmp_path / "delay.cu"
    src.write_text(r"""
#include <chrono>
#include <cstdio>
__global__ void delay(long long cycles, long long* waited) {
  long long start = clock64(), now = start;
  while (now - start < cycles) now = clock64();
  waited[threadIdx.x] = now - start;
}
int main() {
  int rate;
  cudaDeviceGetAttribute(&rate, cudaDevAttrClockRate, 0);   // kHz
  long long* waited;
  cudaMallocManaged(&waited, 512 * sizeof(long long));
  auto t0 = std::chrono::steady_clock::now();
  delay<<<1, 512>>>(20LL * rate, waited);
  cudaDeviceSynchronize();
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  long long least = waited[0];
  for (int i = 1; i < 512; ++i) least = waited[i] < least ? waited[i] : least;
  printf("each waited 20 ms: %s; all in less than 2 s: %s\n", least >= 20LL * rate ? "yes" : "no", ms < 2000 ? "yes" : "no");
}
""")
    rc, out, err = run_program(src)
    assert rc == 0, err
    assert out == "each waited 20 ms: yes; all in less than 2 s: yes\n"


SHUFFLES = r"""
#include <cstdio>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
// Tiles of 8 lanes shuffle a different number of times each (lane groups go on at their own pace),
// then the whole warp shuffles: every value read is the one its source lane gave in that shuffle.
__global__ void k(int* bad) {
  cg::thread_block_tile<8> tile = cg::tiled_partition<8>(cg::this_thread_block());
  const int lane = threadIdx.x % 32;
  int v = lane;
  for (int r = 0; r < tile.meta_group_rank() + 1; ++r) {
    const int got = tile.shfl_down(v * 100 + r, 1);
    const int want = (tile.thread_rank() < 7 ? lane + 1 : lane) * 100 + r;
    if (got != want) atomicAdd(bad, 1);
  }
  for (int r = 0; r < 3; ++r) {
    const int got = __shfl_sync(0xffffffffu, lane * 10 + r, (lane + 5) % 32);
    if (got != ((lane + 5) % 32) * 10 + r) atomicAdd(bad, 1);
    const int x = __shfl_xor_sync(0xffffffffu, lane + r, 16);
    if (x != (lane ^ 16) + r) atomicAdd(bad, 1);
  }
}
int main() {
  int* bad;
  cudaMallocManaged(&bad, sizeof(int));
  *bad = 0;
  k<<<3, 128>>>(bad);
  cudaDeviceSynchronize();
  printf("wrong values read: %d\n", *bad);
}
"""


@pytest.mark.parametrize("check", [None, "shuffle"])
def test_shuffles_of_tiles_at_their_own_pace_read_their_sources_values(tmp_path, check):
    src = tmp_path / "shuffles.cu"
    src.write_text(SHUFFLES)
    rc, out, err = run_program(src, check=check)
    assert rc == 0, err
    assert out == "wrong values read: 0\n"


ROUNDED = r"""
#include <cstdio>
// Each thread adds with its own rounding mode, between barriers and plain additions: a mode must hold
// for its one operation only, whichever threads run in between.
__global__ void k(int* bad) {
  const double tiny = 1e-30;
  for (int i = 0; i < 4; ++i) {
    const double up = __dadd_ru(1.0, tiny), down = __dadd_rd(1.0, tiny);
    __syncthreads();
    const double plain = 1.0 + tiny, plain_neg = -1.0 - tiny;
    if (up <= 1.0 || down != 1.0 || plain != 1.0 || plain_neg != -1.0) atomicAdd(bad, 1);
    __syncthreads();
  }
}
int main() {
  int* bad;
  cudaMallocManaged(&bad, sizeof(int));
  *bad = 0;
  k<<<2, 256>>>(bad);
  cudaDeviceSynchronize();
  printf("threads that saw another's rounding mode: %d\n", *bad);
}
"""


@pytest.mark.parametrize("check", [None, "shuffle"])
def test_a_rounding_mode_holds_for_its_own_operation_only(tmp_path, check):
    src = tmp_path / "rounded.cu"
    src.write_text(ROUNDED)
    rc, out, err = run_program(src, check=check)
    assert rc == 0, err
    assert out == "threads that saw another's rounding mode: 0\n"


def test_device_properties_describe_the_executor(tmp_path):
    p = tmp_path / "props.cu"
    p.write_text('#include <cstdio>\nint main() {\n  cudaDeviceProp p; int n = -1;\n  cudaGetDeviceCount(&n);\n'
                 '  cudaGetDeviceProperties(&p, 0);\n'
                 '  printf("%d|%s|%d.%d|%d|%d|%d\\n", n, p.name, p.major, p.minor, p.multiProcessorCount, p.warpSize,'
                 ' p.labkitCpuExecutor);\n'
                 '  printf("%s\\n", cudaGetErrorString(cudaSetDevice(1)));\n}\n')
    rc, out, err = run_program(p)
    assert rc == 0, err
    assert out.splitlines() == ["1|NVIDIA H100 80GB HBM3 (labkit CPU executor)|9.0|132|32|1", "invalid device ordinal"]


def test_launch_errors_are_reported_as_cuda_reports_them(tmp_path):
    p = tmp_path / "config.cu"
    p.write_text('#include <cstdio>\n__global__ void k() {}\nint main() {\n  k<<<1, 2048>>>();\n'
                 '  cudaError_t e = cudaGetLastError();\n  printf("%s|%s\\n", cudaGetErrorName(e), '
                 'cudaGetErrorName(cudaGetLastError()));\n}\n')
    rc, out, err = run_program(p)
    assert rc == 0
    assert out.strip() == "cudaErrorInvalidConfiguration|cudaSuccess"
    assert "a block holds at most 1024" in err


def test_command_line_runs_a_program_with_its_arguments():
    proc = subprocess.run([sys.executable, "-m", "labkit.cuda", "run", str(DATA / "vector_add.cu"), "300"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "n=300 blocks=2" in proc.stdout


def test_every_thread_that_fails_an_assert_prints_its_line_and_the_command_line_prints_as_it_runs(tmp_path):
    """As on a GPU (an H200 printed simpleAssert's four lines, at its synchronize): each failing thread
    of the block says so, at the next synchronizing call; the launch fails with cudaErrorAssert, whose
    string is the runtime's; the command line passes the program's stdout and stderr through as it
    runs, so the lines come in the program's order."""
    src = tmp_path / "asserts.cu"
    src.write_text(r"""#include <cassert>
#include <cstdio>
__global__ void check(int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; assert(i < n); }
int main() {
  printf("before\n");
  fflush(stdout);
  check<<<2, 32>>>(60);
  printf("launched\n");
  fflush(stdout);
  cudaError_t e = cudaDeviceSynchronize();
  printf("after: %s | %s\n", cudaGetErrorName(e), cudaGetErrorString(e));
  return 0;
}
""")
    rc, out, err = run_program(src)
    assert rc == 0, err
    assert out.endswith("after: cudaErrorAssert | device-side assert triggered\n")
    failed = [ln for ln in err.splitlines() if "Assertion `i < n` failed." in ln]
    assert [ln.split("thread: ")[1][:8] for ln in failed] == ["[28,0,0]", "[29,0,0]", "[30,0,0]", "[31,0,0]"]
    assert all("block: [1,0,0]" in ln for ln in failed) and "labkit:" not in err
    proc = subprocess.run([sys.executable, "-m", "labkit.cuda", "run", str(src)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and lines[:2] == ["before", "launched"]
    assert lines[-1].startswith("after: cudaErrorAssert") and sum("Assertion" in ln for ln in lines[2:-1]) == 4


def test_kernel_printf_shows_at_the_synchronizing_calls_as_on_a_gpu():
    """A kernel's printf lines wait for a synchronizing call (not the next launch) and are dropped at
    exit without one, line for line as the same programs printed under nvcc on an H200; a warp's
    lanes print each printf in turn.  Across blocks the H200's order is its scheduling's (there block
    1's first lines came before block 0's second): here each block's lines come together."""
    rc, out, err = run_program(DATA / "device_printf_flush.cu")
    assert rc == 0, err
    assert out == (DATA / "device_printf_flush.h200.txt").read_text()
    rc, out, err = run_program(DATA / "device_printf_exit.cu")
    want = (DATA / "device_printf_exit.h200.txt").read_text().splitlines()
    got = out.splitlines()
    assert rc == 0 and sorted(got) == sorted(want) and got[0] == want[0] and got[-2:] == want[-2:]
    assert got[1:7] == ["hello from block 0 thread 0", "hello from block 0 thread 1", "x",
                        "hello from block 1 thread 0", "hello from block 1 thread 1", "x"]
    assert "labkit: 2 lines that kernels printed never showed" in err


# --- host-side mistakes get words -----------------------------------------------------------------
def test_kernel_given_a_host_pointer():
    rc, out, err = run_program(MISTAKES / "host_pointer.cu")
    assert rc == 1 and "not reached" not in out
    assert "host_pointer.cu:17: kernel 'twice': argument 0" in err and "is a host pointer" in err
    assert "code=700(cudaErrorIllegalAddress)" in err


def test_copy_past_the_end_of_an_allocation():
    rc, out, err = run_program(MISTAKES / "copy_past_end.cu")
    assert rc == 1
    assert ("copy_past_end.cu:11: cudaMemcpy of 404 bytes: its source starts 0 bytes into a 400-byte allocation "
            "(cudaMalloc at ") in err and "runs 4 bytes past its end" in err


def test_use_after_cuda_free():
    rc, out, err = run_program(MISTAKES / "use_after_free.cu")
    assert rc == 1 and "cudaMemcpy: cudaErrorInvalidValue" in out
    assert "that cudaFree already released (use after free)" in err


def test_reading_pinned_memory_before_synchronising():
    rc, out, err = run_program(MISTAKES / "unsynchronised_read.cu")
    assert rc == 77 and "sum =" not in out
    assert "cudaMemcpyAsync at " in err and "unsynchronised_read.cu:19 is still writing" in err


# --- the checking modes on whole programs ---------------------------------------------------------
def test_memory_check_finds_a_kernel_writing_past_an_allocation():
    rc, out, err = run_program(MISTAKES / "out_of_bounds.cu", check="memory")
    assert rc != 0
    assert "labkit memory check" in err and "WRITE of size 4" in err
    assert "0 bytes to the right of 4000-byte region, the cudaMalloc at " in err and "out_of_bounds.cu:7" in err
    assert "out_of_bounds.cu:13" in err and "LABKIT-ALLOC" not in err


def test_race_check_finds_a_missing_barrier():
    rc, out, err = run_program(MISTAKES / "missing_barrier.cu", check="race")
    assert rc != 0
    assert "missing_barrier.cu:9" in err and "missing_barrier.cu:10" in err
    assert "__shared__ array 'buf'" in err


def test_race_check_orders_launches_and_still_finds_a_race_after_them():
    """Each launch comes after the last: no report for three launches in turn, each run by new worker
    threads (whose thread-local storage may sit where the last launch's did); threads of a fourth
    launch writing one element are still a race."""
    rc, out, err = run_program(DATA / "launches_in_turn.cu", check="race")
    assert rc == 0 and out.split() == ["3", "3"] and "race" not in err, err[-2000:]
    rc, out, err = run_program(DATA / "launches_in_turn.cu", ["1"], check="race")
    assert rc != 0 and "launches_in_turn.cu:13" in err, err[-2000:]


def test_barrier_check_finds_a_divergent_barrier():
    rc, out, err = run_program(MISTAKES / "divergent_barrier.cu", check="barrier")
    assert rc == 1 and out.strip() == "cudaErrorLaunchFailure"
    assert "__syncthreads() at line 8 is reached by only 32 of 64 threads" in err


def test_correct_programs_pass_every_check():
    rc, out, err = run_program(DATA / "reduce_shared.cu", check="memory,race,barrier,shuffle")
    assert rc == 0, err
    assert "PASSED" in out


# --- grid-wide syncs (cooperative launches) and coalesced groups ----------------------------------
@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_cooperative_launch_syncs_the_whole_grid_and_a_grid_too_large_is_refused(monkeypatch, workers):
    """Every block waits at each grid sync, whether one worker runs them all (each put aside at the sync,
    its stacks and shared memory copied out and back) or two share them."""
    monkeypatch.setenv("LABKIT_CPU_WORKERS", workers)
    rc, out, err = run_program(DATA / "grid_sync.cu")
    assert rc == 0, err[-2000:]
    assert out.splitlines() == ["cooperative 1: cudaSuccess cudaSuccess total -69 want -69, 0 blocks wrong",
                                "265 blocks of 1024: cudaErrorCooperativeLaunchTooLarge", "PASSED"]
    assert "the device holds at most 2 such blocks per multiprocessor, 264 in all" in err


def test_coalesced_groups_aggregate_atomics_and_partition_a_warp():
    rc, out, err = run_program(DATA / "coalesced.cu", check="barrier,shuffle")
    assert rc == 0, err[-2000:]
    lines = out.splitlines()
    assert lines[0].startswith("kept 24874 of 24874 positive, 0 values misplaced, largest group ")
    assert 1 < int(lines[0].split()[-1]) <= 32
    assert lines[1:] == ["buckets 6030 6281 6281 6282 (0 wrong), odd sum -44 want -44, even sum -18 want -18",
                         "PASSED"]


def test_a_grid_sync_in_a_plain_launch_is_refused_in_words():
    rc, out, err = run_program(MISTAKES / "grid_sync_in_a_plain_launch.cu")
    assert rc == 0 and out.strip() == "cudaErrorLaunchFailure"
    # whichever block's thread reaches the sync first reports it (the workers run blocks side by side)
    assert re.search(r"in kernel 'k', block \(\d+,0,0\): a grid-wide sync \(grid\.sync\(\)\) at line 9 in a "
                     r"launch that is not cooperative", err), err[-2000:]
    assert "launch the kernel with cudaLaunchCooperativeKernel" in err


def test_a_grid_sync_in_divergent_code_is_reported():
    rc, out, err = run_program(MISTAKES / "divergent_grid_sync.cu", check="barrier")
    assert rc == 0 and out.strip() == "cudaErrorLaunchFailure"
    assert "the grid sync at line 8 is reached by only 16 of 32 threads" in err
    rc, out, err = run_program(MISTAKES / "divergent_grid_sync.cu", ["by-block"])
    assert rc == 0 and out.strip() == "cudaErrorLaunchFailure"
    assert ("deadlock in kernel 'k': 1 of 2 blocks wait at the grid sync at line 8; the others returned "
            "without reaching it") in err


def test_the_race_check_sees_a_grid_sync_order_memory_and_a_missing_one():
    rc, out, err = run_program(DATA / "grid_partials.cu", check="race,memory")
    assert rc == 0 and out.strip() == "10" and "race" not in err, err[-2000:]
    rc, out, err = run_program(DATA / "grid_partials.cu", ["unsynced"], check="race")
    assert rc != 0 and "data race" in err and "grid_partials.cu:8" in err, err[-2000:]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_the_race_check_finds_a_race_between_two_blocks_that_one_worker_runs_in_turn(monkeypatch, workers):
    """Consecutive blocks of one worker run on two sets of the checker's fibers, stacks and shared memory,
    unordered, as two blocks are on a GPU."""
    monkeypatch.setenv("LABKIT_CPU_WORKERS", workers)
    rc, out, err = run_program(MISTAKES / "race_between_blocks.cu", check="race")
    assert rc != 0 and "data race" in err, err[-2000:]
    assert "race_between_blocks.cu:6" in err and "race_between_blocks.cu:7" in err, err[-2000:]


DYNAMIC_PARALLELISM = r"""
#include <cstdio>
__device__ int order[4];
__device__ int next_slot;
// Each level writes its own four numbers and launches the next level (three deep) from its thread 0.
__global__ void child(int* out, int base, int depth) {
  out[base + threadIdx.x] = depth * 100 + threadIdx.x + out[base - 1];
  __syncthreads();
  if (threadIdx.x == 0 && next_slot < 4) order[atomicAdd(&next_slot, 1)] = depth;
  if (depth < 3 && threadIdx.x == 0) child<<<1, 4>>>(out, base + 4, depth + 1);
}
__global__ void parent(int* out, int deep) {
  out[threadIdx.x] = 7 + threadIdx.x;
  if (threadIdx.x == 0) {
    if (next_slot < 4) order[atomicAdd(&next_slot, 1)] = 0;
    child<<<1, 4, 0, cudaStreamTailLaunch>>>(out, 4, 1);
    if (deep) parent<<<1, 1>>>(out, deep);   // nested past CUDA's 24 levels
  }
}
int main(int argc, char**) {
  int* d;
  cudaMalloc(&d, 16 * sizeof(int));
  parent<<<1, 4>>>(d, argc > 1);
  cudaError_t e = cudaDeviceSynchronize();
  int h[16], o[4];
  cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  cudaMemcpyFromSymbol(o, order, sizeof o);
  for (int i = 0; i < 16; ++i) printf("%d ", h[i]);
  printf("\norder %d %d %d %d: %s\n", o[0], o[1], o[2], o[3], cudaGetErrorName(cudaGetLastError()));
  return e != cudaSuccess;
}
"""


def test_a_kernel_launched_from_device_code_runs_after_its_parent(tmp_path):
    """Dynamic parallelism: each child sees what its parent wrote before the launch (out[base - 1]),
    runs after the whole parent grid (order), and a child's children run before the host's wait returns."""
    src = tmp_path / "dp.cu"
    src.write_text(DYNAMIC_PARALLELISM)
    rc, out, err = run_program(src)
    assert rc == 0, err[-2000:]
    assert "7 8 9 10 110 111 112 113 313 314 315 316 616 617 618 619 \norder 0 1 2 3: cudaSuccess" in out
    rc, out, err = run_program(src, ["deep"])
    assert "at nesting depth 24: CUDA allows 24 levels (cudaErrorLaunchMaxDepthExceeded)" in err, err[-2000:]
    assert "cudaErrorLaunchMaxDepthExceeded" in out


# --- NVIDIA's cuda-samples, unchanged -------------------------------------------------------------
@pytest.mark.parametrize("sample, args, expect", [
    ("vectorAdd", [], ["[Vector addition of 50000 elements]", "Test PASSED"]),
    ("simpleAtomicIntrinsics", [], ["simpleAtomicIntrinsics completed, returned OK"]),
    ("simpleTemplates", [], ["Compare OK", "[simpleTemplates] -> Test Results: 0 Failures"]),
    ("simpleVoteIntrinsics", [], ["[VOTE Kernel Test 3/3]", "\tOK\n\tShutting down..."]),
    ("asyncAPI", [], ["[asyncAPI] - Starting...", "CUDA device [NVIDIA H100 80GB HBM3 (labkit CPU executor)]"]),
    ("simpleAssert", [], ["Device assert failed as expected, CUDA error message is: device-side assert triggered",
                          "simpleAssert completed, returned OK"]),
    ("deviceQuery", [], ['Device 0: "NVIDIA H100 80GB HBM3 (labkit CPU executor)"',
                         "(132) Multiprocessors, (128) CUDA Cores/MP:", "Result = PASS"]),
    ("fp16ScalarProduct", [], ["Result intrinsics", "&&&& fp16ScalarProduct PASSED"]),   # cuda_fp16.h's half2
])
def test_cuda_samples_run_unchanged(sample, args, expect):
    rc, out, err = run_program(SAMPLES / sample, args)
    assert rc == 0, err[-2000:]
    for line in expect:
        assert line in out, out[-2000:]
    assert "Hopper" in out or sample in ("vectorAdd", "deviceQuery")


def test_cuda_samples_with_dynamic_parallelism_run_unchanged():
    """cdpSimplePrint: 2 + 8 + 32 blocks, each level launched by every thread of the one above;
    cdpSimpleQuicksort: two child grids per partition, each in a stream created in device code."""
    rc, out, err = run_program(SAMPLES / "cdpSimplePrint", ["-depth=3"])
    assert rc == 0, err[-2000:]
    assert "In total 2+8+32=42 blocks are launched!!! (40 from the GPU)" in out
    blocks = re.findall(r"^((?:\|  )*)BLOCK (\d+) launched by (?:the host|thread (\d) of block (\d+))$", out, re.M)
    assert sorted(int(b[1]) for b in blocks) == list(range(42))
    assert [len(b[0]) // 3 for b in blocks].count(2) == 32
    rc, out, err = run_program(SAMPLES / "cdpSimpleQuicksort", ["-num_items=1000"])
    assert rc == 0, err[-2000:]
    assert "Running quicksort on 1000 elements" in out and "Validating results: OK" in out


def test_cuda_samples_with_grid_syncs_and_coalesced_groups_run_unchanged():
    """reductionMultiBlockCG: one cooperative launch with a grid sync reduces the array (a smaller one and
    4 blocks here; unchanged, it launches 264 blocks of 1024 threads, as the modelled device holds);
    binaryPartitionCG: a grid-stride loop, binary_partition of a warp and cg::reduce, its counts against
    the same rand() numbers made here."""
    rc, out, err = run_program(SAMPLES / "reductionMultiBlockCG", ["--n=65536", "--maxblocks=4"])
    assert rc == 0, err[-2000:]
    assert "numThreads: 1024\nnumBlocks: 4" in out
    assert "GPU result = 0.003899649251\nCPU result = 0.003899649251" in out
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.srand(1)
    values = [libc.rand() % 50 for _ in range(102400)]
    odd = [v for v in values if v & 1]
    rc, out, err = run_program(SAMPLES / "binaryPartitionCG")
    assert rc == 0, err[-2000:]
    assert (f"Array size = 102400 Num of Odds = {len(odd)} Sum of Odds = {sum(odd)} "
            f"Sum of Evens {sum(values) - sum(odd)}") in out


# Its eight kernels in turn (8 x 8 tiles of 64 x 64 matrices: the default 1,280 x 1,280, a hundred
# times over, is hours here): memcpy_async into a thread's pipeline (0, 1, 4, 5), with a block's
# cuda::barrier (2), into a block's pipeline shared by a producer warp and consumer warps (3), and
# without (6, 7).
@pytest.mark.parametrize("kernel", range(8))
def test_global_to_shared_async_copy_sample_runs_unchanged(kernel):
    args = ["-wA=64", "-hA=64", "-wB=64", "-hB=64", f"-kernel={kernel}"]
    rc, out, err = run_program(SAMPLES / "globalToShmemAsyncCopy", args)
    assert rc == 0, err[-2000:]
    assert "Checking computed result for correctness: Result = PASS" in out, out[-2000:]


# --- single PTX instructions in inline asm (kernel_source.rewrite_ptx_instructions) --------------------
# The PTX ISA's definitions, written out here for the values ptx_instructions.cu prints.
M32 = 0xffffffff


def _ptx_s32(x):
    x &= M32
    return x - (1 << 32) if x >> 31 else x


def _ptx_bfind(v, bits, signed):
    if signed and (v >> (bits - 1)) & 1:          # a negative value: its most significant 0
        v = ~v & ((1 << bits) - 1)
    return v.bit_length() - 1 if v else M32


def _ptx_bfe(a, pos, length, bits, signed):
    pos, length, msb = pos & 0xff, length & 0xff, bits - 1
    sbit = (a >> min(pos + length - 1, msb)) & 1 if signed and length else 0
    return sum(((a >> (pos + i)) & 1 if i < length and pos + i <= msb else sbit) << i for i in range(bits))


def _ptx_bfi(a, b, pos, length, bits):
    pos, length, f = pos & 0xff, length & 0xff, b
    for i in range(min(length, max(bits - pos, 0))):
        f = (f & ~(1 << (pos + i))) | (((a >> i) & 1) << (pos + i))
    return f


def _ptx_prmt(a, b, c):
    both, r = (b << 32) | a, 0
    for i in range(4):
        n = (c >> (4 * i)) & 15
        byte = (both >> (8 * (n & 7))) & 0xff
        if n & 8:                                     # the byte's sign, replicated
            byte = 0xff if byte & 0x80 else 0
        r |= byte << (8 * i)
    return r


def _ptx_expected(a, b):
    w = (a << 32) | b
    return [_ptx_bfind(a, 32, False), _ptx_bfind(a, 32, True), _ptx_bfe(a, b & 63, (b >> 8) & 63, 32, False),
            _ptx_bfe(a, 4, 12, 32, True), _ptx_bfi(a, b, b & 31, a & 31, 32), _ptx_prmt(a, b, 0x73d1),
            bin(a).count("1"), 32 - a.bit_length(), int(f"{a:032b}"[::-1], 2),
            ((((b << 32) | a) << (b & 31)) >> 32) & M32,
            (((b << 32) | a) >> (a & 63)) & M32 if (a & 63) < 32 else b, (a * b) >> 32,
            (_ptx_s32(a) * _ptx_s32(b) + 7) & M32, max(_ptx_s32(a), _ptx_s32(b)) & M32,
            _ptx_bfind(w, 64, False), bin(w).count("1")]


def test_single_ptx_instructions_compute_as_the_ptx_isa_defines():
    """bfind, bfe, bfi, prmt (a sign-replicating selector too), popc, clz, brev, shf (wrap and clamp),
    mul.hi, mad.lo, max, in 32 and 64 bits: each of 8 threads' 16 results as the ISA defines them."""
    rc, out, err = run_program(DATA / "ptx_instructions.cu")
    assert rc == 0, err[-2000:]
    h = [0, 1, 0x80000000, 0xffffffff, 0x12345678, 0xdeadbeef, 0x7fffffff, 0x00f0f000,
         0, 0xffff, 0x0a0b0c0d, 0x1f05, 0x13141516, 0xcafebabe, 0xe1f, 3]
    rows = [[int(v) for v in line.split()] for line in out.splitlines()]
    assert rows == [_ptx_expected(h[t], h[t + 8]) for t in range(8)]


@pytest.mark.check
def test_ptx_instruction_rewrite_keeps_lines_and_leaves_others_to_be_refused():
    src = ('asm volatile("bfind.u32 %0, %1;"\n  : "=r"(r) : "r"(x));\n'
           'asm("bfe.s32 %0, %1, 8, %2;" : "=r"(q) : "r"(a), "r"(n));\n'
           'asm("vabsdiff4.u32.u32.u32.add %0, %1, %2, %3;" : "=r"(v) : "r"(a), "r"(b), "r"(c));\n')
    out = kernel_source.rewrite_special_registers(src)
    assert out.count("\n") == src.count("\n")
    assert out.startswith("((r) = (unsigned int)(::labkit::ptx::bfind((unsigned int)(x))))\n;\n")
    assert "((q) = (int)(::labkit::ptx::bfe((int)(a), (unsigned)(8), (unsigned)(n))));" in out
    assert "vabsdiff4" in out
    with pytest.raises(UnsupportedOnCPU, match=r"k.cu:4 uses inline PTX assembly"):
        kernel_source.check_supported(src, "k.cu")


def test_a_sample_s_headers_in_a_folder_beside_its_sources_are_found(tmp_path):
    """FDTD3d keeps src/ and inc/ side by side and includes "FDTD3d.h" by name, as its build names inc/."""
    (tmp_path / "src").mkdir()
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "scale.h").write_text("#pragma once\n__global__ void scale(float* x) { x[threadIdx.x] *= 3; }\n")
    (tmp_path / "src" / "main.cu").write_text(
        '#include <cstdio>\n#include "scale.h"\nint main() {\n  float* x; cudaMallocManaged(&x, 2 * sizeof(float));\n'
        '  x[0] = 1; x[1] = 2; scale<<<1, 2>>>(x); cudaDeviceSynchronize(); printf("%g %g\\n", x[0], x[1]); }\n')
    rc, out, err = run_program(tmp_path)
    assert rc == 0, err[-2000:]
    assert out == "3 6\n"


@pytest.mark.check
def test_a_runtime_function_not_modelled_is_refused_by_name_and_a_program_s_own_helper_is_not():
    own = ("#define cudaCheck(err) (cuda_check(err, __FILE__, __LINE__))\n"
           "static cudaError_t cudaTry(cudaError_t e) { return e; }\n"
           "int main() {\n  cudaCheck(cudaDeviceSynchronize());\n  return cudaTry(cudaGetLastError());\n}\n")
    program_source.check_runtime_calls({"own.cu": own})
    with pytest.raises(UnsupportedOnCPU, match=r"g.cu:5 calls cudaGraphDebugDotPrint, a CUDA runtime function that "
                                               r"the CPU executor does not model"):
        program_source.check_runtime_calls({"g.cu": own.replace("return cudaTry(cudaGetLastError());",
                                                                "return cudaGraphDebugDotPrint(0, \"g.dot\", 0);")
                                           .replace("static cudaError_t", "//")})


def test_stream_and_pinned_memory_queries(tmp_path):
    src = tmp_path / "queries.cu"
    src.write_text(r"""
#include <cstdio>
int main() {
  cudaStream_t s; unsigned f = 99; int prio = 99, dev = 99;
  cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, -3);
  cudaStreamGetFlags(s, &f); cudaStreamGetPriority(s, &prio); cudaStreamGetDevice(s, &dev);
  printf("stream %u %d %d\n", f, prio, dev);
  float *a, *b; unsigned fa = 0, fb = 0;
  cudaHostAlloc(&a, 64, cudaHostAllocPortable); cudaMallocHost(&b, 64);
  cudaHostGetFlags(&fa, a); cudaHostGetFlags(&fb, b);
  float* d; cudaMalloc(&d, 64);
  printf("pinned %u %u, device memory: %s\n", fa, fb, cudaGetErrorName(cudaHostGetFlags(&fb, d)));
  char* m; size_t pitch; cudaMallocPitch(&m, &pitch, 10, 3);
  cudaMemset2DAsync(m, pitch, 7, 10, 3, s); cudaStreamSynchronize(s);
  char h[3]; cudaMemcpy(h, m + 2 * pitch + 9, 1, cudaMemcpyDeviceToHost);
  size_t smem = 0; cudaOccupancyAvailableDynamicSMemPerBlock(&smem, (void (*)())0, 2, 256);
  printf("memset2d %d, shared for 2 blocks %zu\n", h[0], smem);
}
""")
    rc, out, err = run_program(src)
    assert rc == 0, err[-2000:]
    assert out == ("stream 1 -3 0\npinned 3 2, device memory: cudaErrorInvalidValue\n"
                   "memset2d 7, shared for 2 blocks 115712\n")


def test_spin_waits_with_nanosleep_let_the_threads_they_wait_for_run(tmp_path):
    """Thread 0 raises a flag and waits for the block's last thread to answer; that thread waits for the
    flag before it answers.  Whichever runs first spins, backing off with __nanosleep, and each pause
    lets the block's other threads run (without it, the first to spin would spin for ever)."""
    src = tmp_path / "spin.cu"
    src.write_text("#include <cstdio>\n__global__ void k(int* out) {\n  __shared__ volatile int ask, answer;\n"
                   "  if (threadIdx.x == 0) ask = answer = 0;\n  __syncthreads();\n"
                   "  if (threadIdx.x == 0) { ask = 1; while (!answer) __nanosleep(100); out[0] = answer; }\n"
                   "  if (threadIdx.x == blockDim.x - 1) { while (!ask) __nanosleep(100); answer = 42; }\n}\n"
                   "int main() { int* o; cudaMallocManaged(&o, 8); k<<<1, 96>>>(o); cudaDeviceSynchronize();\n"
                   '  printf("%d\\n", o[0]); }\n')
    rc, out, err = run_program(src)
    assert rc == 0, err[-2000:]
    assert out == "42\n"


def test_a_3d_memset_of_a_pitched_allocation_and_occupancy_with_shared_memory_per_size(tmp_path):
    src = tmp_path / "m3.cu"
    src.write_text(r"""
#include <cstdio>
__global__ void k(float*) {}
int main() {
  cudaPitchedPtr p; cudaExtent e = make_cudaExtent(12, 3, 2);
  cudaMalloc3D(&p, e);
  cudaMemset3D(p, 0, make_cudaExtent(p.pitch, 3, 2));
  cudaMemset3D(p, 5, make_cudaExtent(10, 3, 2));
  unsigned char h[12]; cudaMemcpy(h, (char*)p.ptr + (1 * p.ysize + 2) * p.pitch, 12, cudaMemcpyDeviceToHost);
  int grid = 0, block = 0;
  cudaOccupancyMaxPotentialBlockSizeVariableSMem(&grid, &block, k, [](int b) { return b * 200; });
  printf("%d %d %d %d %d\n", h[0], h[9], h[10], block, grid);
}
""")
    rc, out, err = run_program(src)
    assert rc == 0, err[-2000:]
    h0, h9, h10, block, grid = map(int, out.split())
    assert (h0, h9, h10) == (5, 5, 0)
    # 200 bytes of shared memory per thread: the block size with the most resident threads per SM
    # (228 KiB, 1 KiB more per block, 2,048 threads, 32 blocks), the larger one on a tie.
    counts = {b: b * max(0, min(32, 2048 // b, 233472 // (b * 200 + 1024))) for b in range(32, 1025, 32)}
    best = max(b for b in counts if counts[b] == max(counts.values()))
    assert block == best and grid == counts[best] // best * 132


def test_cucomplex_arithmetic_matches_python_s_complex_numbers(tmp_path):
    """cuComplex.h: products, quotients (scaled: no overflow where the quotient is representable), moduli
    and fused multiply-adds of float and double complex numbers, against Python's complex."""
    src = tmp_path / "cx.cu"
    src.write_text(r"""
#include <cstdio>
#include <cuComplex.h>
__global__ void k(const double* v, double* o) {
  int i = threadIdx.x;
  cuDoubleComplex a = make_cuDoubleComplex(v[4 * i], v[4 * i + 1]), b = make_cuDoubleComplex(v[4 * i + 2], v[4 * i + 3]);
  cuDoubleComplex q = cuCdiv(a, b), m = cuCmul(a, b), f = cuCfma(a, b, a);
  cuFloatComplex qf = cuCdivf(cuComplexDoubleToFloat(a), cuComplexDoubleToFloat(b));
  double r[9] = {cuCreal(q), cuCimag(q), cuCreal(m), cuCimag(m), cuCabs(b), cuCreal(f), cuCimag(f), cuCrealf(qf), cuCimagf(qf)};
  for (int j = 0; j < 9; ++j) o[9 * i + j] = r[j];
}
int main() {
  const int n = 32; double v[4 * n], *dv, *o, h[9 * n];
  unsigned s = 7;
  for (int i = 0; i < 4 * n; ++i) { s = s * 1103515245u + 12345u; v[i] = ((int)(s >> 8) % 2001 - 1000) / 37.0; }
  v[0] = 1e300; v[1] = 1e300; v[2] = 1e300; v[3] = -1e300;
  cudaMalloc(&dv, sizeof v); cudaMalloc(&o, sizeof h); cudaMemcpy(dv, v, sizeof v, cudaMemcpyHostToDevice);
  k<<<1, n>>>(dv, o); cudaMemcpy(h, o, sizeof h, cudaMemcpyDeviceToHost);
  for (int i = 0; i < n; ++i) { printf("%.17g %.17g %.17g %.17g", v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
    for (int j = 0; j < 9; ++j) printf(" %.17g", h[9 * i + j]); printf("\n"); }
}
""")
    rc, out, err = run_program(src)
    assert rc == 0, err[-2000:]
    for line in out.splitlines():
        ar, ai, br, bi, *got = (float(t) for t in line.split())
        a, b = complex(ar, ai), complex(br, bi)
        q = a / b if abs(ar) < 1e200 else 1j       # (1e300 + 1e300i) / (1e300 - 1e300i) = i
        assert abs(complex(got[0], got[1]) - q) <= 1e-15 * abs(q)
        if abs(ar) < 1e200:
            assert abs(complex(got[2], got[3]) - a * b) <= 1e-15 * abs(a * b) + 1e-300
            assert abs(complex(got[5], got[6]) - (a * b + a)) <= 1e-14 * (abs(a * b) + abs(a))
            assert abs(complex(got[7], got[8]) - q) <= 1e-6 * abs(q)
        assert got[4] == pytest.approx(abs(b), rel=1e-15)


def test_a_kernel_whose_name_a_header_overloads_is_launched_by_its_address(tmp_path):
    """cdpAdvancedQuicksort's header declares its kernel with a parameter fewer than the definition:
    the registration that cudaLaunchKernel((void*)k, ...) needs names the definition's signature."""
    (tmp_path / "k.h").write_text("__global__ void k(int* x, int n);\n")
    (tmp_path / "k.cu").write_text(
        '#include <cstdio>\n#include "k.h"\n__global__ void k(int* x, int n, int add) {\n'
        "  x[threadIdx.x] = n + add; }\nint main() {\n  int* x; cudaMallocManaged(&x, 4 * sizeof(int));\n"
        "  int n = 5, add = 2; void* args[] = {&x, &n, &add};\n"
        "  cudaLaunchKernel((void*)static_cast<void (*)(int*, int, int)>(k), dim3(1), dim3(4), args, 0, 0);\n"
        "  size_t pending = 0; cudaDeviceGetLimit(&pending, cudaLimitDevRuntimePendingLaunchCount);\n"
        '  cudaDeviceSynchronize(); printf("%d %d %zu\\n", x[0], x[3], pending); }\n')
    rc, out, err = run_program(tmp_path / "k.cu")
    assert rc == 0, err[-2000:]
    assert out == "7 7 2048\n"


# --- Thrust and libcu++, with CCCL's headers (labkit.backends.cpu.cccl) ---------------------------------
needs_cccl = pytest.mark.skipif(cccl.include_dir() is None, reason="no CCCL headers here: " + cccl.ADVICE)


@needs_cccl
@pytest.mark.parametrize("check", ["none", "memory", "race"])
def test_thrust_next_to_kernels_of_one_s_own(check):
    """Thrust's C++ system stands in for its CUDA system: a device_vector's data and device_malloc's
    memory are the executor's device memory, which a kernel reads through raw_pointer_cast (the launch's
    host-pointer check and the memory check know them); sort, transform, reduce and sequence run."""
    rc, out, err = run_program(DATA / "thrust_with_kernels.cu", check=check)
    assert rc == 0, err[-3000:]
    assert out == "no error d[999] = 1998, sum of squares 1331334000, last 2003\nPASSED\n"


@needs_cccl
def test_a_kernel_past_a_device_vector_is_found_by_the_memory_check(tmp_path):
    p = tmp_path / "past.cu"
    p.write_text("#include <thrust/device_vector.h>\n"
                 "__global__ void k(int* x, int n) { int i = threadIdx.x; if (i <= n) x[i] = i; }\n"
                 "int main() { thrust::device_vector<int> d(100);\n"
                 "  k<<<1, 128>>>(thrust::raw_pointer_cast(d.data()), 100); cudaDeviceSynchronize(); }\n")
    rc, out, err = run_program(p, check="memory")
    assert rc != 0
    assert "0 bytes to the right of 400-byte region, the cudaMalloc at thrust::device_vector\n" in err
    assert "past.cu:2" in err


@needs_cccl
def test_thrust_sample_runs_unchanged():
    """radixSortThrust: thrust::sort and sort_by_key of 32-bit keys (and floats), checked by the sample."""
    rc, out, err = run_program(SAMPLES / "radixSortThrust", ["-n=65536"])
    assert rc == 0, err[-2000:]
    assert "Sorting 65536 32-bit unsigned int keys and values" in out and "Test passed" in out


@pytest.mark.check
@pytest.mark.parametrize("line, why", [
    ("#include <cub/device/device_reduce.cuh>", "includes <cub/device/device_reduce.cuh>, CUB"),
    ("#include <thrust/system/cuda/execution_policy.h>", "Thrust's CUDA system"),
    ("void f(int* b, int* e) { thrust::sort(thrust::cuda::par, b, e); }", "uses Thrust's CUDA system by name"),
    ("void f(int* b, int* e) { thrust::sort(thrust::system::cuda::par, b, e); }", "uses Thrust's CUDA system by name"),
])
def test_cub_and_thrust_s_cuda_system_are_refused_by_name(line, why):
    with pytest.raises(UnsupportedOnCPU, match=re.escape(why)):
        program_source.check_program_supported(line + "\n", "t.cu")


@pytest.mark.check
def test_thrust_without_cccl_headers_is_refused_with_advice(monkeypatch):
    monkeypatch.setattr(cccl, "include_dir", lambda: None)
    with pytest.raises(UnsupportedOnCPU, match=r"t.cu:2 includes <thrust/sort.h>, .*\(pip install nvidia-cuda-cccl\)"):
        program_source.check_program_supported("int x;\n#include <thrust/sort.h>\n", "t.cu")


@pytest.mark.check
def test_cccl_headers_older_than_the_tried_release_are_passed_over(tmp_path, monkeypatch):
    for version, name in ((300001, "old"), (300500, "new")):
        (tmp_path / name / "thrust").mkdir(parents=True)
        (tmp_path / name / "cuda" / "std").mkdir(parents=True)
        (tmp_path / name / "cuda" / "std" / "version").write_text("")
        (tmp_path / name / "thrust" / "version.h").write_text(f"#define THRUST_VERSION {version} // x\n")
    monkeypatch.setattr(cccl, "_candidates", lambda: [tmp_path / "old", tmp_path / "new"])
    cccl.include_dir.cache_clear()
    try:
        assert cccl.include_dir() == (tmp_path / "new").resolve()
    finally:
        cccl.include_dir.cache_clear()


def test_libcu_headers_beyond_barrier_and_pipeline_are_refused_by_name(tmp_path):
    p = tmp_path / "annotated.cu"
    p.write_text("#include <cuda/barrier>\n#include <cuda/annotated_ptr>\nint main() {}\n")
    with pytest.raises(UnsupportedOnCPU, match=r"annotated.cu:2 includes <cuda/annotated_ptr>, a device facility"):
        run_program(p)


def test_branches_for_an_older_cuda_are_not_refused():
    src = ("#if CUDART_VERSION < 5000\nvoid f() { cuDeviceGetAttribute(0, 0, 0); }\n#else\nint g;\n#endif\n"
           "#if CUDART_VERSION >= 5000\nint h;\n#endif\n")
    program_source.check_program_supported(src, "v.cu")          # the driver call is in a dropped branch
    with pytest.raises(UnsupportedOnCPU, match="v.cu:2 uses the CUDA driver API"):
        program_source.check_program_supported(src.replace("< 5000", ">= 5000", 1), "v.cu")


def test_architecture_comparisons_take_the_device_pass_branch(tmp_path):
    src = ("#if __CUDA_ARCH__ >= 800\n__device__ int f(unsigned m, int v) { return __reduce_add_sync(m, v); }\n"
           "#else\n__device__ int f(unsigned, int) { return -1; }\n#endif\n"
           "#ifdef __CUDA_ARCH__\nconst char* pass = \"device\";\n#else\nconst char* pass = \"host\";\n#endif\n")
    assert program_source.rewrite_arch_conditions(src).splitlines()[0] == "#if 800 >= 800"
    p = tmp_path / "arch.cu"
    p.write_text(src + "#include <cstdio>\n__global__ void k(int* o) { o[threadIdx.x] = f(0xffffffffu, 2); }\n"
                 "int main() { int* o; cudaMallocManaged(&o, 32 * sizeof(int)); k<<<1, 32>>>(o);\n"
                 "  cudaDeviceSynchronize(); printf(\"%d %s\\n\", o[5], pass); }\n")
    rc, out, err = run_program(p)
    assert rc == 0, err
    assert out == "64 host\n"     # the sm_80 intrinsic's branch; #ifdef keeps the host pass's meaning


def test_managed_memory_hints_that_name_a_location(tmp_path):
    p = tmp_path / "hints.cu"
    p.write_text("#include <cstdio>\n__global__ void k(float* a) { a[threadIdx.x] *= 2; }\n"
                 "int main() {\n  float* a; cudaMallocManaged(&a, 64 * sizeof(float));\n"
                 "  for (int i = 0; i < 64; ++i) a[i] = i;\n"
                 "  cudaMemLocation dev; dev.type = cudaMemLocationTypeDevice; dev.id = 0;\n"
                 "  cudaMemAdvise(a, 64 * sizeof(float), cudaMemAdviseSetReadMostly, dev);\n"
                 "  cudaMemPrefetchAsync(a, 64 * sizeof(float), dev, 0, 0);\n  k<<<1, 64>>>(a);\n"
                 "  cudaMemLocation host; host.type = cudaMemLocationTypeHost;\n"
                 "  printf(\"%s \", cudaGetErrorName(cudaMemPrefetchAsync(a, 64 * sizeof(float), host, 0)));\n"
                 "  cudaDeviceSynchronize(); printf(\"%g\\n\", a[63]);\n}\n")
    rc, out, err = run_program(p)
    assert rc == 0, err
    assert out == "cudaSuccess 126\n"


def test_stream_ordered_allocation_clock64_and_the_peer_query(tmp_path):
    p = tmp_path / "misc.cu"
    p.write_text('#include <cstdio>\n__global__ void t(long long* out) {\n  long long a = clock64();\n'
                 '  for (volatile int i = 0; i < 100000; ++i) {}\n  out[threadIdx.x] = clock64() - a;\n}\n'
                 'int main() {\n  int can = -1; cudaDeviceCanAccessPeer(&can, 0, 1);\n  cudaStream_t s; cudaStreamCreate(&s);\n'
                 '  long long* d; cudaMallocAsync(&d, 4 * sizeof(long long), s);\n  t<<<1, 4, 0, s>>>(d);\n'
                 '  long long h[4]; cudaMemcpyAsync(h, d, sizeof h, cudaMemcpyDeviceToHost, s);\n'
                 '  cudaFreeAsync(d, s); cudaStreamSynchronize(s);\n'
                 '  printf("can=%d positive=%d\\n", can, h[0] > 0 && h[3] > 0);\n'
                 '  printf("%s\\n", cudaGetErrorName(cudaFree(d)));\n}\n')
    rc, out, err = run_program(p)
    assert rc == 0, err
    assert out.splitlines() == ["can=0 positive=1", "cudaErrorInvalidValue"]
    assert "was already freed (a double free)" in err


def test_check_program_gives_a_verdict_in_words():
    from labkit.cuda import check_program
    good = check_program(DATA / "vector_add.cu", ["1000"], expect=["PASSED"], check=None)
    assert good.ok and "printed what it should" in good.message
    wrong = check_program(DATA / "vector_add.cu", ["1000"], expect=["c[999] = 0.0"], check=None)
    assert not wrong.ok and "did not print 'c[999] = 0.0'" in wrong.message and "c[999] = 2497.5" in wrong.message
    host = check_program(MISTAKES / "host_pointer.cu", check=None)
    assert not host.ok and host.message.startswith("labkit: ") and "is a host pointer" in host.message
    oob = check_program(MISTAKES / "out_of_bounds.cu")
    assert not oob.ok and oob.message.startswith("labkit memory check") and "out_of_bounds.cu:7" in oob.message


@pytest.mark.check
def test_a_switch_nothing_defines_drops_its_branch_from_the_refusals(tmp_path):
    """`#ifdef ENABLE_CUDNN` with nothing defining ENABLE_CUDNN: the preprocessor drops the branch (nvcc's
    build would need -DENABLE_CUDNN), so what it includes is not refused; defined anywhere in the
    program, it is."""
    src = ("#ifdef ENABLE_CUDNN\n#include <cudnn.h>\n#else\nint plain;\n#endif\n"
           "#if !defined(USE_NCCL)\nint one_gpu;\n#else\n#include <nccl.h>\n#endif\nint main() {}\n")
    p = tmp_path / "switch.cu"
    p.write_text(src)
    assert run_program(p)[0] == 0
    p.write_text("#define ENABLE_CUDNN\n" + src)
    with pytest.raises(UnsupportedOnCPU, match=r"switch.cu:3 includes <cudnn.h>"):
        run_program(p)
    (tmp_path / "config.h").write_text("#define USE_NCCL 1\n")
    p.write_text('#include "config.h"\n' + src)
    with pytest.raises(UnsupportedOnCPU, match=r"switch.cu:10 includes <nccl.h>, NCCL \(collectives across several "
                                               r"GPUs\)"):
        run_program(p)
    defined = program_source.defined_macros([])
    assert {"__CUDACC__", "__cplusplus", "CUBLAS_V2_H_"} <= defined and "ENABLE_CUDNN" not in defined


def test_trap_fails_the_launch_and_null_reaches_a_pointer_parameter(tmp_path):
    """__trap() ends the launch with an error the host sees; NULL as a launch's argument converts to the
    kernel's pointer parameter, as in nvcc's direct call (the launch passes arguments through a generic
    lambda, where NULL alone would arrive as a long)."""
    p = tmp_path / "trap.cu"
    p.write_text(r"""
#include <cstdio>
__global__ void k(float* out, const float* maybe, int stop) {
  if (stop && threadIdx.x == 3) __trap();
  out[threadIdx.x] = maybe ? maybe[threadIdx.x] : 1.0f;
}
int main() {
  float* out;
  cudaMallocManaged(&out, 8 * sizeof(float));
  k<<<1, 8>>>(out, NULL, 0);
  cudaError_t e = cudaDeviceSynchronize();
  printf("%s %g\n", cudaGetErrorName(e), out[7]);
  k<<<1, 8>>>(out, NULL, 1);
  e = cudaDeviceSynchronize();
  printf("%s\n", cudaGetErrorName(e));
}
""")
    rc, out, err = run_program(p)
    assert out.splitlines() == ["cudaSuccess 1", "cudaErrorLaunchFailure"], (out, err)
    assert "kernel 'k' called __trap() in block (0,0,0), thread (3,0,0): the launch fails" in err


def test_a_program_stopped_for_time_has_shown_the_lines_it_printed(tmp_path):
    """Standard output goes out line by line into the pipe too: a program stopped after its checks (in a
    benchmark loop) has shown its pass line."""
    p = tmp_path / "endless.cu"
    p.write_text('#include <cstdio>\nint main() {\n  printf("All results match.\\n");\n  for (;;) {}\n}\n')
    rc, out, err = run_program(p, timeout=5)
    assert rc == 124 and out == "All results match.\n" and "ran longer than 5 s" in err


def test_a_kernel_called_without_a_launch_configuration_launches_nothing(tmp_path):
    """Host code calling a __global__ function itself (a benchmark helper given the kernel as an
    argument, as llm.c's benchmark_kernel is): nvcc's stub finds no <<<>>> configuration and launches
    nothing; the executor neither runs the body on the host thread nor crashes, and says so once."""
    p = tmp_path / "unconfigured.cu"
    p.write_text(r"""
#include <cstdio>
__global__ void k(int* x) { x[blockIdx.x * blockDim.x + threadIdx.x] += 1; }
template <class Kernel, class... Args> void call(Kernel kernel, Args... args) { kernel(args...); }
int main() {
  int* x; cudaMallocManaged(&x, 4 * sizeof(int));
  for (int i = 0; i < 4; ++i) x[i] = 0;
  call(k, x);
  call(k, x);
  k<<<1, 4>>>(x);
  cudaDeviceSynchronize();
  printf("%d %d\n", x[0], x[3]);
}
""")
    rc, out, err = run_program(p)
    assert rc == 0, err
    assert out == "1 1\n"
    assert err.count("kernel 'k' was called from host code without a launch configuration") == 1


@pytest.mark.check
def test_a_refused_header_in_quotes_is_refused_too():
    with pytest.raises(UnsupportedOnCPU, match=r'jpeg.cpp:2 includes <helper_nvJPEG.hxx>, the cuda-samples\' helper'):
        program_source.check_program_supported('#include <cuda_runtime_api.h>\n#include "helper_nvJPEG.hxx"\n',
                                               "jpeg.cpp")
