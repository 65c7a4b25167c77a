"""libcu++'s asynchronous primitives on the CPU executor: cuda::barrier (<cuda/barrier>) between warps
and over several phases with split arrive/wait tokens, arrive_and_drop, a phase that never completes
reported in words (not a hang), cuda::memcpy_async completed by a barrier or by a thread's or a block's
pipeline (<cuda/pipeline>), the C-style primitives (<cuda_pipeline.h>) and cooperative groups' collective copies
(<cooperative_groups/memcpy_async.h>).  Each kernel of
tests/cuda/async_copy_kernels.cu against NumPy, on the GPU too where there is one."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from labkit.backends.cpu import BarrierError, CPUModule, LaunchError
from labkit.errors import KernelMemoryError

SOURCE = Path(__file__).resolve().parent / "cuda" / "async_copy_kernels.cu"
rng = np.random.default_rng()


def run(name, grid, block, args, check=None, on_gpu=False):
    """Launch on the CPU executor (or the GPU) and return the arguments as NumPy arrays."""
    if on_gpu:
        import cupy
        from labkit.backends.cuda import CUDAModule
        dev = [cupy.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
        CUDAModule(SOURCE.read_text(), path=str(SOURCE)).get_function(name)(grid, block, dev)
        return [cupy.asnumpy(a) if isinstance(a, cupy.ndarray) else a for a in dev]
    CPUModule(SOURCE.read_text(), path=str(SOURCE), check=check).get_function(name)(grid, block, args)
    return args


WHERE = [pytest.param("cpu", None, id="cpu"), pytest.param("cpu", "shuffle", id="cpu-shuffle"),
         pytest.param("gpu", None, id="gpu", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("where, check", WHERE + [pytest.param("cpu", "race", id="cpu-race")])
def test_producer_and_consumer_warps_through_two_barriers(where, check):
    rounds, blocks = 5, 3
    x = rng.standard_normal(blocks * rounds * 32).astype(np.float32)
    out = np.full_like(x, np.nan)
    _, out, _ = run("aw_producer_consumer", (blocks,), (64,), [x, out, np.int32(rounds)], check, where == "gpu")
    np.testing.assert_array_equal(out, 2 * x + 1)


@pytest.mark.parametrize("where, check", WHERE)
def test_arrive_and_wait_tokens_over_phases_then_a_drop(where, check):
    n, phases = 96, 4
    x = rng.standard_normal((phases + 1) * n).astype(np.float32)
    out = np.full_like(x, np.nan)
    _, out, _ = run("aw_phases", (2,), (n,), [x, out, np.int32(phases)], check, where == "gpu")
    s = x.reshape(phases + 1, n)
    want = np.roll(s[:phases], 1, axis=1) + np.roll(s[:phases], -1, axis=1) + s[:phases] * np.float32(0.5)
    np.testing.assert_allclose(out.reshape(phases + 1, n)[:phases], want, rtol=1e-6)
    m = 2 * n // 3           # after the upper third dropped out, the barrier counts the others only
    last = s[phases, :m]
    np.testing.assert_allclose(out[phases * n:phases * n + m], np.roll(last, 1) + np.roll(last, -1), rtol=1e-6)
    assert np.isnan(out[phases * n + m:]).all()


def test_a_phase_that_never_completes_is_reported_in_words():
    out = np.zeros(64, np.float32)
    with pytest.raises(BarrierError, match=r"deadlock in kernel 'aw_never_completes', block \(0,0,0\): .*"
                       r"63 at a cuda::barrier \(line \d+\) whose phase still waits for 1 of its 64 expected arrivals"):
        run("aw_never_completes", (1,), (64,), [out])


def test_a_barrier_used_before_init_is_reported():
    with pytest.raises(BarrierError, match=r"cuda::barrier at line \d+ is used before init"):
        run("aw_without_init", (1,), (32,), [np.zeros(32, np.float32)])


@pytest.mark.parametrize("whole_block", [0, 1], ids=["per-thread", "whole-block"])
@pytest.mark.parametrize("where, check", WHERE + [pytest.param("cpu", "memory", id="cpu-memory")])
def test_memcpy_async_completed_by_a_barrier(where, check, whole_block):
    threads, blocks = 64, 3
    x = rng.standard_normal(blocks * 4 * threads).astype(np.float32)
    out = np.full_like(x, np.nan)
    _, out, _ = run("barrier_copy", (blocks,), (threads,), [x, out, np.int32(whole_block)], check, where == "gpu")
    np.testing.assert_array_equal(out.reshape(blocks, -1), x.reshape(blocks, -1)[:, ::-1])


@pytest.mark.parametrize("wait_prior", [0, 1], ids=["consumer_wait", "wait_prior"])
@pytest.mark.parametrize("where, check", WHERE + [pytest.param("cpu", "race", id="cpu-race")])
def test_a_threads_pipeline_into_shared_memory(where, check, wait_prior):
    n, tiles = 128, 7
    x = rng.standard_normal(2 * tiles * n).astype(np.float32)
    out = np.full_like(x, np.nan)
    _, out, _, _ = run("pipe_thread", (2,), (n,), [x, out, np.int32(tiles), np.int32(wait_prior)], check,
                       where == "gpu")
    np.testing.assert_array_equal(out.reshape(2, tiles, n), 3 * np.roll(x.reshape(2, tiles, n), -1, axis=2))


def test_a_copy_read_before_its_wait_is_not_there_yet():
    # The executor keeps each copy pending until its wait: the early read sees shared memory's
    # undefined bytes (NaN here), the read after the wait the data.
    x = rng.standard_normal(64).astype(np.float32)
    early, late = np.zeros(64, np.float32), np.zeros(64, np.float32)
    _, early, late = run("pipe_read_too_soon", (1,), (64,), [x, early, late])
    assert np.isnan(early).all()
    np.testing.assert_array_equal(late, x)


def test_the_memory_check_finds_a_copy_past_a_shared_array():
    x = np.zeros(65, np.float32)
    with pytest.raises(KernelMemoryError, match=r"0 bytes past the end of the 256-byte __shared__ array 's'"):
        run("pipe_copy_past_end", (1,), (64,), [x, np.zeros(64, np.float32)], check="memory")


@pytest.mark.parametrize("where, check", WHERE + [pytest.param("cpu", "race", id="cpu-race")])
def test_a_blocks_pipeline_with_a_producer_warp(where, check):
    tiles, consumers = 6, 64
    x = rng.standard_normal(tiles * 32).astype(np.float32)
    out = np.full(tiles * consumers, np.nan, np.float32)
    _, out, _ = run("pipe_block_roles", (1,), (consumers + 32,), [x, out, np.int32(tiles)], check, where == "gpu")
    sums = x.reshape(tiles, 32).astype(np.float64).sum(axis=1)
    want = sums[:, None] * np.arange(1, consumers + 1)
    np.testing.assert_allclose(out.reshape(tiles, consumers), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("where, check", WHERE)
def test_a_blocks_pipeline_every_thread_producing_and_consuming(where, check):
    n, tiles = 128, 5
    x = rng.standard_normal(2 * tiles * n).astype(np.float32)
    out = np.full_like(x, np.nan)
    _, out, _ = run("pipe_block_all", (2,), (n,), [x, out, np.int32(tiles)], check, where == "gpu")
    np.testing.assert_array_equal(out.reshape(2, tiles, n), x.reshape(2, tiles, n)[:, :, ::-1])


@pytest.mark.parametrize("where, check", WHERE + [pytest.param("cpu", "memory", id="cpu-memory")])
def test_c_style_pipeline_primitives(where, check):
    n, tiles = 128, 6
    x = rng.standard_normal(2 * tiles * n).astype(np.float32)
    out = np.full_like(x, np.nan)
    _, out, _ = run("pipe_primitives", (2,), (n,), [x, out, np.int32(tiles)], check, where == "gpu")
    want = np.roll(x.reshape(2, tiles, n), -1, axis=2) + np.arange(tiles, dtype=np.float32)[:, None]
    np.testing.assert_array_equal(out.reshape(2, tiles, n), want)


def test_pipeline_primitive_of_a_size_not_copied_is_refused():
    # Only sizes a GPU copies asynchronously: 4, 8 or 16 bytes.
    src = SOURCE.read_text().replace("__pipeline_memcpy_async(&s[0][i], &x[i], sizeof(float));",
                                     "__pipeline_memcpy_async(&s[0][i], &x[i], 3);")
    x = np.zeros(2 * 128, np.float32)   # one block, two tiles
    with pytest.raises(LaunchError, match="copies 4, 8 or 16 bytes"):
        CPUModule(src, path=str(SOURCE)).get_function("pipe_primitives")((1,), (128,), [x, np.zeros_like(x), np.int32(2)])


@pytest.mark.parametrize("where, check", WHERE + [pytest.param("cpu", "race", id="cpu-race")])
def test_cooperative_groups_collective_copies(where, check):
    blocks, warps = 2, 8
    tiles = rng.standard_normal(blocks * warps * 64).astype(np.float32)
    rows = rng.standard_normal(blocks * warps * 32).astype(np.float32)
    out = np.full(blocks * warps * 32, np.nan, np.float32)
    _, _, out = run("cg_copies", (blocks,), (warps * 32,), [tiles, rows, out], check, where == "gpu")
    t = tiles.reshape(blocks, warps, 2, 32)
    want = t[:, :, 0, :] + t[:, :, 1, ::-1] + rows.reshape(blocks, warps, 32)
    np.testing.assert_array_equal(out.reshape(blocks, warps, 32), want)
