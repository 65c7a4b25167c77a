"""labkit.counters: Nsight Compute's counters from the CPU executor, on access patterns whose counts
are known by construction (tests/cuda/counting_kernels.cu), and on the ladder's kernels."""
from __future__ import annotations

import os
import platform
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

import labkit
from labkit.errors import LaunchError

KERNELS = Path(__file__).resolve().parent / "cuda" / "counting_kernels.cu"

LD_REQ, LD_SEC, ST_REQ, ST_SEC = labkit.measure.counters.METRICS[:4]
SH_LD_WF, SH_LD_BC, SH_ST_WF, SH_ST_BC = labkit.measure.counters.METRICS[4:8]
FFMA, FADD, FMUL = labkit.measure.counters.METRICS[8:11]
DRAM_RD, DRAM_WR = labkit.measure.counters.METRICS[11:13]


def count(kernel: str, grid, block, args) -> dict:
    """The one record of launching `kernel` of counting_kernels.cu (loaded inside the counted
    function, so on the CPU executor whatever the backend)."""
    def launch():
        labkit.load_source(KERNELS).get_function(kernel)(grid, block, args)
    records = labkit.counters(launch)
    assert len(records) == 1
    return records[0]


@pytest.mark.check
def test_a_coalesced_copy_is_one_request_and_four_sectors_per_warp():
    n = 256                                      # 8 warps
    x = np.arange(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    r = count("copy_strided", (2,), (128,), (x, y, np.int32(1), np.int32(n)))
    assert (r["kernel"], r["grid"], r["block"]) == ("copy_strided", (2, 1, 1), (128, 1, 1))
    assert (r[LD_REQ], r[LD_SEC], r[ST_REQ], r[ST_SEC]) == (8, 32, 8, 32)
    assert (r[DRAM_RD], r[DRAM_WR]) == (4 * n, 4 * n)
    assert r[SH_LD_WF] == r[SH_ST_WF] == 0
    np.testing.assert_array_equal(y, x)          # counting runs the kernel: its results are there


@pytest.mark.parametrize("stride, sectors_per_warp", [(2, 8), (32, 32)])
def test_a_strided_copy_reads_a_sector_per_lane_group(stride, sectors_per_warp):
    n = 128                                      # 4 warps
    x = np.arange(n * stride, dtype=np.float32)
    y = np.zeros(n, np.float32)
    r = count("copy_strided", (1,), (128,), (x, y, np.int32(stride), np.int32(n)))
    assert (r[LD_REQ], r[LD_SEC]) == (4, 4 * sectors_per_warp)
    assert (r[ST_REQ], r[ST_SEC]) == (4, 16)
    assert r[DRAM_RD] == 32 * 4 * sectors_per_warp
    np.testing.assert_array_equal(y, x[::stride])


def test_a_partial_warp_touches_only_its_active_lanes_sectors():
    n = 40                                       # warp 0 full, warp 1 with 8 active lanes (one sector)
    x = np.ones(64, np.float32)
    y = np.zeros(64, np.float32)
    r = count("copy_strided", (2,), (32,), (x, y, np.int32(1), np.int32(n)))
    assert (r[LD_REQ], r[LD_SEC], r[ST_REQ], r[ST_SEC]) == (2, 5, 2, 5)


def test_lanes_that_loop_unequally_are_matched_by_iteration():
    x = np.ones(64, np.float32)
    y = np.zeros(64, np.float32)
    r = count("ragged", (1,), (64,), (x, y))     # 2 warps
    assert (r[LD_REQ], r[LD_SEC]) == (4, 16)
    np.testing.assert_array_equal(y, np.where(np.arange(64) % 2, 2.0, 1.0))


def test_lanes_reaching_a_load_at_different_points_are_matched_by_its_executions():
    x = np.arange(128, dtype=np.float32)
    y = np.zeros(64, np.float32)
    r = count("diverge_then_loop", (1,), (64,), (x, y))     # 2 warps
    assert (r[LD_REQ], r[LD_SEC]) == (2 * 5, 2 * 14)
    assert (r[ST_REQ], r[ST_SEC]) == (2, 8)
    assert r[DRAM_RD] == 32 * 12
    lane = np.arange(64) % 32
    want = np.where(lane % 2, 64 + lane, 0) + sum(np.where(j < 1 + lane // 8, 32 * j + lane, 0) for j in range(4))
    np.testing.assert_array_equal(y, want.astype(np.float32))


@pytest.mark.parametrize("stride, wavefronts", [(1, 1), (2, 2), (32, 32), (0, 1)],
                         ids=["stride-1", "stride-2", "stride-32", "broadcast"])
def test_shared_bank_conflicts_of_32_bit_accesses(stride, wavefronts):
    y = np.zeros(64, np.float32)
    r = count("shared_strided", (1,), (64,), (y, np.int32(stride)))    # 2 warps: one load, one store each
    assert (r[SH_LD_WF], r[SH_LD_BC]) == (2 * wavefronts, 2 * (wavefronts - 1))
    assert (r[SH_ST_WF], r[SH_ST_BC]) == (2 * wavefronts, 2 * (wavefronts - 1))
    assert r[LD_REQ] == 0 and r[ST_REQ] == 2


@pytest.mark.parametrize("stride, wavefronts", [(1, 4), (2, 8)])
def test_float4_shared_accesses_are_served_by_half_warps(stride, wavefronts):
    y = np.zeros((32, 4), np.float32)
    r = count("shared_float4", (1,), (32,), (y, np.int32(stride)))
    assert (r[SH_LD_WF], r[SH_LD_BC]) == (wavefronts, wavefronts - 4)
    assert (r[SH_ST_WF], r[SH_ST_BC]) == (wavefronts, wavefronts - 4)
    assert (r[ST_REQ], r[ST_SEC]) == (1, 16)     # one 512-byte warp store
    # Each lane reads back the element it wrote: (t, t + 1, t + 2, t + 3).
    np.testing.assert_array_equal(y, np.arange(32)[:, None] + np.arange(4, dtype=np.float32))


def test_fp32_instructions_of_a_known_kernel():
    k, threads = 10, 64
    x = np.full(threads, 0.5, np.float32)
    y = np.zeros(threads, np.float32)
    r = count("fma_chain", (2,), (32,), (x, y, np.int32(k)))
    if r[FFMA] is None:
        pytest.skip(f"FP32 instructions are not counted here: {r['notes']['fp32']}")
    assert (r[FFMA], r[FADD], r[FMUL]) == (k * threads, threads, threads)


def test_a_launch_counts_the_same_after_the_workers_were_given_back():
    """Counting keeps its workers, their stacks and logs from launch to launch; given back (as the
    executor does beyond its KEEP_STACKS modules), they are made anew and count the same."""
    n = 256
    x = np.arange(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    with labkit.backends.use("cpu"):
        mod = labkit.load_source(KERNELS)
        fn = mod.get_function("copy_strided")
        launch = lambda: fn((2,), (128,), (x, y, np.int32(1), np.int32(n)))   # noqa: E731
        first, = labkit.counters(launch)
        kept, = labkit.counters(launch)
        mod.counting_build()[1].labkit_release()
        again, = labkit.counters(launch)
    for r in (first, kept, again):
        assert (r[LD_REQ], r[LD_SEC], r[ST_REQ], r[ST_SEC]) == (8, 32, 8, 32)
        assert (r[DRAM_RD], r[DRAM_WR]) == (4 * n, 4 * n)


def test_the_lean_build_silences_only_block_hooks_that_count_nothing():
    """The counting build is loaded with the block hook's call a 5-byte no-op wherever its block has
    no FP32 instruction, or its runs are counted as the calls of an access hook in it before any jump
    (counting.lean_build, counting.sited_blocks): every other byte is the build's own, the other
    blocks with FP32 instructions keep their hooks, and every block its count."""
    from labkit.backends.cpu import counting
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the lean build is made on x86-64 only (5-byte calls)")
    with labkit.backends.use("cpu"):
        so, _lib = labkit.load_source(KERNELS).counting_build()
    lean = counting.lean_build(so)
    if lean is None:
        pytest.skip("no disassembly here (objdump): the build is loaded as it is")
    old, new = Path(so).read_bytes(), Path(lean).read_bytes()
    assert len(old) == len(new)
    nop = bytes.fromhex("0f1f440000")
    sites = [i for i in range(len(new) - 4) if new[i:i + 5] == nop and old[i] == 0xE8]
    covered = {i + k for i in sites for k in range(5)}
    changed = {i for i in range(len(old)) if old[i] != new[i]}
    assert changed and changed <= covered
    table, _lo, _hi = counting.fp_table(so)
    sited = counting.sited_blocks(so)
    assert table and sited and set(sited) < set(table)
    assert counting.hooked_blocks(str(lean)) == set(table) - set(sited)      # the lean build's hooks
    code = {int(m.group(1), 16): m.group(2) for m in re.finditer(r"^\s*([0-9a-f]+):\s+(.*)$", subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", so], capture_output=True, text=True, check=True).stdout, re.M)}
    for block, site in sited.items():           # the site follows a call of an access hook, in the block
        call = max(a for a in code if a < site)
        assert block <= call and re.match(r"call\s+[0-9a-f]+ <__tsan_\w*(read|write)", code[call])
    test_fp32_instructions_of_a_known_kernel()     # counted by the lean build, as before


def test_the_ladder_counts_are_consistent():
    """naive and tiled do the same arithmetic and write the same output; tiled reads the input from
    shared memory, so it reads far fewer global sectors."""
    rng = np.random.default_rng(0)
    N, C, H, M, K = 1, 4, 20, 8, 3
    x = rng.standard_normal((N, C, H, H), dtype=np.float32)
    w = rng.standard_normal((M, C, K, K), dtype=np.float32)
    b = rng.standard_normal(M, dtype=np.float32)
    naive, = labkit.counters(labkit.conv2d, x, w, b, variant="naive")
    tiled, = labkit.counters(labkit.conv2d, x, w, b, variant="tiled")
    Ho = H - K + 1
    if naive[FFMA] is not None:
        assert naive[FFMA] == tiled[FFMA] == N * M * Ho * Ho * C * K * K
    assert naive[ST_SEC] == tiled[ST_SEC] and naive[DRAM_WR] == tiled[DRAM_WR] == 4 * N * M * Ho * Ho
    assert naive[SH_LD_WF] == 0 and tiled[SH_LD_WF] > 0
    assert tiled[LD_SEC] < naive[LD_SEC] / 2
    # Both read every input and weight once from DRAM (compulsory traffic): the same bytes.
    assert naive[DRAM_RD] == tiled[DRAM_RD]


def test_one_record_per_launch_in_order():
    x = np.ones(64, np.float32)
    y = np.zeros(64, np.float32)

    def two_launches():
        f = labkit.load_source(KERNELS).get_function("copy_strided")
        f((1,), (32,), (x, y, np.int32(1), np.int32(32)))
        f((2,), (32,), (x, y, np.int32(1), np.int32(64)))
    first, second = labkit.counters(two_launches)
    assert (first["grid"], first[LD_REQ]) == ((1, 1, 1), 1)
    assert (second["grid"], second[LD_REQ]) == ((2, 1, 1), 2)


@pytest.mark.check
def test_bad_input_is_refused_clearly():
    with pytest.raises(LaunchError, match="launched no kernel"):
        labkit.counters(lambda: None)
    with pytest.raises(TypeError, match="must be callable"):
        labkit.counters("conv_naive")


def test_it_runs_on_the_cpu_executor_whatever_the_backend(monkeypatch):
    """On a GPU machine too: fn's launches go to the executor (labkit.xp inside fn is NumPy), and the
    backend asked for is back afterwards."""
    monkeypatch.setenv(labkit.backends.ENV_VAR, "cuda")

    def launch():
        assert labkit.backend() == "cpu" and labkit.xp is np
        x = labkit.xp.ones(32, np.float32)
        y = labkit.xp.zeros(32, np.float32)
        labkit.load_source(KERNELS).get_function("copy_strided")((1,), (32,), (x, y, np.int32(1), np.int32(32)))
    r, = labkit.counters(launch)
    assert r[LD_SEC] == 4
    assert os.environ[labkit.backends.ENV_VAR] == "cuda"


def test_a_launch_on_fewer_workers_than_the_last_counts_its_own_runs_only():
    """A launch of one block runs on one worker; the workers of the launch before (64 blocks, on every
    core) keep their states, whose block runs must not reach its FP32 counts."""
    x = np.full(64 * 32, 0.5, np.float32)
    y = np.zeros(64 * 32, np.float32)
    busy = count("fma_chain", (64,), (32,), (x, y, np.int32(10)))
    if busy[FFMA] is None:
        pytest.skip(f"FP32 instructions are not counted here: {busy['notes']['fp32']}")
    assert (busy[FFMA], busy[FADD], busy[FMUL]) == (10 * 64 * 32, 64 * 32, 64 * 32)
    r = count("with_maths", (1,), (32,), (x[:32], y[:32]))
    assert (r[FFMA], r[FADD], r[FMUL]) == (320, 32, 32)


def test_fp32_counts_say_where_they_fall_short():
    """expf and a division count as nvcc's sm_90 sequences for them (with_maths: 10 FFMA, 1 FADD, 1 FMUL
    a thread, as its SASS runs); expf's last multiply fuses with the add of a sum, as nvcc fuses it;
    tanhf is not modelled, and the record says how many calls ran."""
    x = np.full(32, 0.5, np.float32)
    y = np.zeros(32, np.float32)
    r = count("with_maths", (1,), (32,), (x, y))
    if r[FFMA] is None:
        pytest.skip(f"FP32 instructions are not counted here: {r['notes']['fp32']}")
    assert (r[FFMA], r[FADD], r[FMUL]) == (320, 32, 32)
    assert "short for this launch" not in r["notes"]["fp32"]
    np.testing.assert_allclose(y, np.exp(1.25) / 1.25, rtol=1e-6)
    r = count("exp_sum_tanh", (1,), (32,), (x, y, np.int32(5)))
    assert (r[FFMA], r[FADD], r[FMUL]) == (32 * 5 * 5, 32 * 5, 0)
    assert "ran 32 maths calls (tanhf, sinf, powf, ...)" in r["notes"]["fp32"]
    np.testing.assert_allclose(y, np.tanh(5 * np.exp(0.5)), rtol=1e-6)
    r = count("fast_maths", (1,), (32,), (x, y))
    assert (r[FFMA], r[FADD], r[FMUL]) == (0, 0, 64) and "short for this launch" not in r["notes"]["fp32"]
    np.testing.assert_allclose(y, np.exp(0.5) / 0.5, rtol=1e-6)


def test_atomics_are_neither_loads_nor_stores_and_results_match_the_plain_run():
    """A shared-memory histogram merged into global memory with atomics (tests/cuda/feature_kernels.cu):
    the counted launch computes the histogram, and only its plain accesses are counted."""
    features = Path(__file__).resolve().parent / "cuda" / "feature_kernels.cu"
    n, nbins = 256, 64
    x = np.random.default_rng(1).integers(0, nbins, n).astype(np.int32)
    bins = np.zeros(nbins, np.uint32)

    def launch():
        labkit.load_source(features).get_function("histogram")((1,), (64,), (x, bins, np.int32(n), np.int32(nbins)))
    r, = labkit.counters(launch)
    np.testing.assert_array_equal(bins, np.bincount(x, minlength=nbins))
    assert (r[LD_REQ], r[LD_SEC]) == (n // 32, n // 8)        # x: 4 passes of 2 warps, 4 sectors each
    assert r[ST_REQ] == 0                                      # bins: atomics only
    assert r[SH_ST_WF] == 2 and r[SH_LD_WF] == 2               # local[b] = 0, then read once to merge


def test_the_counting_build_unrolls_where_nvcc_does():
    from labkit.backends.cpu.counting import FULL_UNROLL, unrolled_as_nvcc
    src = "  #pragma unroll\n  for (;;) {}\n#pragma unroll 4\n#pragma unroll (TM)\n#pragma unrolled\n"
    assert unrolled_as_nvcc(src) == (f"  #pragma GCC unroll {FULL_UNROLL}\n  for (;;) {{}}\n#pragma GCC unroll 4\n"
                                     "#pragma GCC unroll (TM)\n#pragma unrolled\n")


def test_a_float4_broadcast_per_half_warp_is_two_wavefronts():
    y = np.zeros((32, 4), np.float32)
    r = count("shared_float4_halves", (1,), (32,), (y,))
    assert (r[SH_LD_WF], r[SH_LD_BC]) == (2, 0)     # quarter-warp phases would make it 4
    np.testing.assert_array_equal(y[:, 0], (np.arange(32) >= 16).astype(np.float32))


@pytest.mark.parametrize("kernel, width, skew, wavefronts, conflicts", [
    ("shared_rows2", 2, 0, 2, 0),       # one LDS.64: two half-warps of 128 bytes
    ("shared_rows4", 4, 0, 4, 0),       # one LDS.128: two half-warps of 256 bytes
    ("shared_rows2", 2, 1, 4, 2),       # misaligned: two 32-bit loads of stride 2
], ids=["pairs", "quads", "pairs-misaligned"])
def test_a_threads_row_of_shared_words_is_one_vector_load_where_aligned(kernel, width, skew, wavefronts,
                                                                          conflicts):
    y = np.zeros(32, np.float32)
    r = count(kernel, (1,), (32,), (y, np.int32(skew)))
    assert (r[SH_LD_WF], r[SH_LD_BC]) == (wavefronts, conflicts)
    first = np.arange(32) * width + skew
    np.testing.assert_array_equal(y, sum(first + j for j in range(width)).astype(np.float32))


def test_vector_loads_are_merged_in_a_warp_whose_lanes_loop_unequally():
    y = np.zeros(32, np.float32)
    r = count("shared_rows2_ragged", (1,), (32,), (y,))
    assert (r[SH_LD_WF], r[SH_LD_BC]) == (3, 0)     # 32-bit loads would make it 6 and 2
    u = np.arange(32)
    np.testing.assert_array_equal(y, (4 * u + 1) + np.where(u < 8, 4 * (u + 32) + 1, 0).astype(np.float32))


def test_a_shared_array_declared_with_align_is_counted():
    y = np.zeros(32, np.float32)
    r = count("shared_aligned", (1,), (32,), (y,))
    assert (r[SH_LD_WF], r[SH_LD_BC], r[SH_ST_WF], r[SH_ST_BC]) == (1, 0, 1, 0)
    np.testing.assert_array_equal(y, np.arange(31, -1, -1, dtype=np.float32))


DOT = """
float dot(const float* __restrict__ a, const float* __restrict__ b, int n, float acc) {
  for (int i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}
"""


def test_the_counting_build_makes_an_accumulators_multiply_add_one_fma(tmp_path):
    """nvcc makes acc += a[i] * b[i] one FFMA; g++ under a tuning that avoids chains of FMAs
    (-mtune=znver2, say) leaves a multiply and an add unless told not to (avoid-fma-max-bits=0)."""
    import shutil
    import subprocess
    from labkit.backends.cpu import compiler
    flags = compiler.SANITIZER_FLAGS["count"]
    if "-mfma" not in flags:
        pytest.skip("this processor has no FMA instructions: FP32 instructions are not counted here")
    if shutil.which("objdump") is None:
        pytest.skip("objdump (GNU binutils) is not installed")
    src = tmp_path / "dot.cc"
    src.write_text(DOT)

    def mnemonics(extra):
        obj = tmp_path / "dot.o"
        subprocess.run([compiler.compiler()[0], *extra, "-mtune=znver2", "-c", str(src), "-o", str(obj)], check=True)
        return subprocess.run(["objdump", "-d", str(obj)], capture_output=True, text=True, check=True).stdout
    counting = mnemonics([f for f in flags if not f.startswith("-fsanitize")])
    assert "vfmadd" in counting and "vmulss" not in counting
    without = mnemonics([f for f in flags if not f.startswith("-fsanitize") and "avoid-fma" not in f])
    assert "vmulss" in without      # the tuning does split it: the flag is what makes it one


def test_the_bias_adds_of_the_unrolled_rung_are_counted_once_per_output():
    """The GEMM's epilogue adds the bias to each output (one FADD each on the GPU, as ncu counts on
    the H100); g++'s cross-jumping would merge some of those adds into other blocks' tails, whose
    hooks miss their runs (7128 of 10368 counted)."""
    rng = np.random.default_rng(0)
    N, C, H, M, K = 2, 6, 22, 16, 5           # the seed model's second layer (the H100 comparison's)
    x = rng.standard_normal((N, C, H, H), dtype=np.float32)
    w = rng.standard_normal((M, C, K, K), dtype=np.float32)
    b = rng.standard_normal(M, dtype=np.float32)
    with pytest.MonkeyPatch.context() as env:    # the default configuration, not a tuned table's
        env.setenv("LABKIT_SHIPPED_TABLES", "0")
        env.setenv("LABKIT_AUTOTUNE", "0")
        records = labkit.counters(labkit.conv2d, x, w, b, variant="unrolled")
    gemm = [r for r in records if r["kernel"].startswith("gemm")]
    if gemm[0][FADD] is None:
        pytest.skip(f"FP32 instructions are not counted here: {gemm[0]['notes']['fp32']}")
    Ho = H - K + 1
    assert sum(r[FADD] for r in gemm) == N * M * Ho * Ho


def test_a_window_loop_loads_what_nvcc_loads():
    """max_pool2d reads xp[0], then every element of its k x k window, xp[0] again among them.  With the
    sizes as arguments nvcc keeps both loads (1 + k*k per thread, as ncu counts on the H100); g++'s
    partial-redundancy elimination would drop one, so the counting build is compiled without it.  With
    the layer's sizes compiled in (labkit.ops.pool_softmax's module per geometry) the window unrolls and
    nvcc loads each element once (k*k, as ncu counts on the H200), and so does the executor."""
    k, planes, side = 2, 4, 16
    x = np.random.default_rng(0).standard_normal((1, planes, side, side), dtype=np.float32)
    warps = planes * (side // k) ** 2 // 32
    r, = labkit.counters(labkit.ops.pool_softmax.max_pool2d, x, k)
    assert (r[LD_REQ], r[ST_REQ]) == (k * k * warps, warps)
    y = np.empty((1, planes, side // k, side // k), np.float32)
    args = tuple(np.int32(v) for v in (planes, side, side, side // k, side // k, k, k))
    r, = labkit.counters(lambda: labkit.load("pool_softmax").get_function("max_pool2d")(
        (-(-y.size // 256),), (256,), (x, y) + args))
    assert (r[LD_REQ], r[ST_REQ]) == ((1 + k * k) * warps, warps)


def test_the_l2_resident_model_keeps_writes_that_fit_the_l2():
    l2 = labkit.measure.counters.l2_resident
    record = {DRAM_RD: 4096, DRAM_WR: 60 * 2**20}
    assert l2(record, 50 * 2**20) == {DRAM_RD: 4096, DRAM_WR: 10 * 2**20}   # 10 MiB cannot stay
    assert l2({**record, DRAM_WR: 40_000}, 50 * 2**20)[DRAM_WR] == 0
    with pytest.raises(ValueError, match="l2_bytes must be a positive int"):
        l2(record, 0)
    with pytest.raises(ValueError, match="the record has no dram__bytes_write.sum"):
        l2({DRAM_RD: 1}, 2**20)


def test_a_records_footprint_is_the_sectors_it_reads_or_writes():
    n = 256
    x = np.arange(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    r = count("copy_strided", (2,), (128,), (x, y, np.int32(1), np.int32(n)))
    assert r["footprint_bytes"] == 2 * 4 * n


PICK_ORDER = (0, 1, 2, 0, 3, 2, 1)        # a, b, shared, a, the thread's own, shared, b


def pick_source(a, b) -> tuple[dict, np.ndarray]:
    """pick_source's record and output, reading a[t] and b[t] twice each, the shared array twice and
    the thread's own array once, all at one load instruction."""
    y = np.zeros(64, np.float32)
    order = sum(k << (2 * j) for j, k in enumerate(PICK_ORDER))
    r = count("pick_source", (1,), (64,), (a, b, y, np.uint32(order), np.int32(len(PICK_ORDER))))
    return r, y


def test_a_load_that_reads_another_array_each_time_is_counted_for_each():
    """The hook remembers which array a load instruction read last (the site's memo): the same
    instruction then reading another array, shared memory or the thread's own array is still counted
    as that one.  Its block's FADD is counted by the load's calls (counting.sited_blocks), each
    counted once: logged (global, shared) or not (the thread's own array)."""
    a = np.arange(64, dtype=np.float32)
    b = np.arange(64, dtype=np.float32) * 10
    r, y = pick_source(a, b)
    t = np.arange(64, dtype=np.float32)
    np.testing.assert_array_equal(y, 2 * a + 2 * b + 2 * t + 100)
    if r[FADD] is not None:
        assert (r[FFMA], r[FADD], r[FMUL]) == (0, len(PICK_ORDER) * 64, 0)
    assert (r[LD_REQ], r[LD_SEC]) == (2 * 4, 2 * 4 * 4)        # 2 warps, 4 global steps, 4 sectors each
    assert (r[SH_LD_WF], r[SH_LD_BC], r[SH_ST_WF]) == (2 * 2, 0, 2)
    assert (r[ST_REQ], r[ST_SEC]) == (2, 8)
    assert (r[DRAM_RD], r[DRAM_WR]) == (2 * 4 * 64, 4 * 64)


def test_arguments_that_view_one_buffer_count_its_sectors_once():
    """a and b overlap (b starts 8 floats into a's buffer): an address in both is a's, as the search
    finds it, whichever array the load instruction read before; b's last 8 floats are b's own."""
    buf = np.arange(72, dtype=np.float32)
    a, b = buf[:64], buf[8:]
    r, y = pick_source(a, b)
    t = np.arange(64, dtype=np.float32)
    np.testing.assert_array_equal(y, 2 * a + 2 * b + 2 * t + 100)
    # Warp 0 reads sectors 0-3 (a) and 1-4 (b), warp 1 sectors 4-7 (a) and 5-8 (b).
    assert (r[LD_REQ], r[LD_SEC]) == (2 * 4, 2 * 4 * 4)
    assert r[DRAM_RD] == 9 * 32                                 # the buffer's 288 bytes, once


def test_a_loop_reading_constant_memory_counts_its_fmas_and_not_the_reads():
    """poly (tests/cuda/feature_kernels.cu): each iteration one FFMA and one load of a __constant__
    coefficient, the block's only access (x[i] is loaded once, before the loop): the load is not
    counted as a global one, and its calls still count the block's runs (counting.sited_blocks)."""
    features = Path(__file__).resolve().parent / "cuda" / "feature_kernels.cu"
    n, degree = 64, 5
    x = np.linspace(-1, 1, n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    c = np.arange(1, 9, dtype=np.float32)

    def launch():
        mod = labkit.load_source(features)
        mod.get_global("coeffs").copy_from_host(c)
        mod.get_function("poly")((2,), (32,), (x, y, np.int32(n), np.int32(degree)))
    r, = labkit.counters(launch)
    np.testing.assert_allclose(y, np.polyval(c[:degree + 1][::-1], x), rtol=1e-5, atol=1e-5)
    assert (r[LD_REQ], r[LD_SEC], r[ST_REQ], r[ST_SEC]) == (2, 8, 2, 8)    # x and y, one request per warp
    assert r[DRAM_RD] == 4 * n
    if r[FFMA] is not None:
        assert (r[FFMA], r[FADD], r[FMUL]) == ((degree + 1) * n, 0, 0)


def test_a_warp_read_backwards_or_from_two_arrays_at_once_counts_distinct_sectors():
    """The warp's lanes run the same loads, but x is read backwards (a lane's sector below the one
    counted before it) and the load of p reads a for odd lanes and b for even ones: each such
    instruction is counted over all its lanes' sectors, not lane by lane (global_by_lanes leaves it
    to instruction())."""
    x = np.arange(64, dtype=np.float32)
    a, b = x * 10, x * 100
    y = np.zeros(64, np.float32)
    r = count("backwards_and_mixed", (1,), (64,), (x, a, b, y))     # 2 warps
    t = np.arange(64)
    np.testing.assert_array_equal(y, x[63 - t] + np.where(t & 1, a, b))
    # Per warp: x's 4 sectors, backwards; p's 4 sectors of a and 4 of b, one request.
    assert (r[LD_REQ], r[LD_SEC]) == (2 * 2, 2 * (4 + 8))
    assert (r[ST_REQ], r[ST_SEC]) == (2, 8)
    assert r[DRAM_RD] == 3 * 4 * 64


def test_fp32_counts_are_the_same_where_the_lean_build_is_not_loaded(monkeypatch):
    """Where the lean build is not made (not x86-64, a call not as expected), the build as compiled
    is loaded, every block hook in place; a block counted by its access hook's calls is counted the
    same."""
    from labkit.backends.cpu import counting
    x = np.full(64, 0.5, np.float32)
    y = np.zeros(64, np.float32)
    lean = count("fma_chain", (2,), (32,), (x, y, np.int32(10)))
    if lean[FFMA] is None:
        pytest.skip(f"FP32 instructions are not counted here: {lean['notes']['fp32']}")
    monkeypatch.setattr(counting, "lean_build", lambda so: None)

    def launch():      # a module of its own: its counting build loaded now, as compiled
        labkit.load_source(KERNELS, own=True).get_function("fma_chain")((2,), (32,), (x, y, np.int32(10)))
    full, = labkit.counters(launch)
    assert (full[FFMA], full[FADD], full[FMUL]) == (lean[FFMA], lean[FADD], lean[FMUL]) == (640, 64, 64)
