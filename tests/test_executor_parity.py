"""The same kernels on the GPU (CuPy) and on the CPU executor give the same results.

Integer results must be bit-exact; float results agree within 1e-6 relative
(the GPU fuses multiply-adds and orders float atomics differently).  Runs only
where CuPy sees a GPU: that is, on the device machine, by scripts/gpu_round.sh.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

FEATURES = Path(__file__).resolve().parent / "cuda" / "feature_kernels.cu"
EXPR = ("scale_by<3, float>", "scale_by<2, int>")
rng = np.random.default_rng()


def launch_cases():
    n = 4099
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    i32 = lambda lo, hi, *s: rng.integers(lo, hi, s).astype(np.int32)  # noqa: E731
    nan = lambda *s: np.full(s, np.nan, np.float32)  # noqa: E731
    m = 45
    return [
        ("saxpy", (9,), (128,), lambda: [f(n), f(n), np.float32(1.5), np.int32(n)], [1], 0),
        ("block_sum", (17,), (256,), lambda: [f(n), nan(17), np.int32(n)], [1], 0),
        ("matmul_tiled", (3, 3), (16, 16), lambda: [f(m, m), f(m, m), nan(m, m), np.int32(m)], [2], 0),
        ("warp_ops", (33,), (128,), lambda: [i32(-99, 99, n), np.zeros(129, np.int32),
                                             np.zeros(n, np.int32), np.zeros(n, np.int32),
                                             np.zeros(n, np.int32), np.int32(n)], [1, 2, 3, 4], 0),
        ("warp_votes", (2,), (96,), lambda: [i32(-2, 3, 192), np.zeros(6, np.uint32),
                                             np.zeros(12, np.int32), np.int32(180)], [1, 2], 0),
        ("histogram", (5,), (64,), lambda: [i32(0, 50, n), np.zeros(50, np.uint32), np.int32(n),
                                            np.int32(50)], [1], 0),
        # float atomics add in a different order on each run: multiples of 1/8 make every
        # order give the same sum, so the float outputs can be compared exactly too
        ("atomic_misc", (9,), (128,), lambda: [i32(-1000, 1000, 1111),
                                               (i32(-800, 800, 1111) / 8).astype(np.float32),
                                               np.array([-2**31, 2**31 - 1, 0, 0], np.int32),
                                               np.array([0, -np.inf, 0], np.float32), np.int32(1111)],
         [2, 3], 0),
        ("reverse_blocks", (11,), (96,), lambda: [f(1000), nan(1000), np.int32(1000)], [1], 96 * 4),
        ("coords3d", (4, 3, 2), (4, 3, 3), lambda: [np.full((5, 7, 13), -1, np.int32), np.int32(13),
                                                    np.int32(7), np.int32(5)], [0], 0),
        ("math_fns", (1,), (128,), lambda: [rng.uniform(0.01, 2, 101).astype(np.float32),
                                            nan(808), np.int32(101)], [1], 0),
        ("add_float4", (1,), (64,), lambda: [f(132), f(132), nan(132), np.int32(33)], [2], 0),
        ("scale_by<3, float>", (1,), (128,), lambda: [f(77), nan(77), np.int32(77)], [1], 0),
        ("scale_by<2, int>", (1,), (128,), lambda: [i32(-9, 9, 77), np.zeros(77, np.int32),
                                                    np.int32(77)], [1], 0),
    ]


@pytest.fixture(scope="module")
def modules():
    from labkit.backends.cpu import CPUModule
    from labkit.backends.cuda import CUDAModule
    code = FEATURES.read_text()
    return (CUDAModule(code, path=str(FEATURES), name_expressions=EXPR),
            CPUModule(code, path=str(FEATURES), name_expressions=EXPR))


@pytest.mark.parametrize("case", launch_cases(), ids=lambda c: c[0])
def test_gpu_and_cpu_executor_agree(modules, case):
    import cupy as cp
    gpu, cpu = modules
    name, grid, block, make, outs, shmem = case
    host = make()
    dev = [cp.asarray(a) if isinstance(a, np.ndarray) else a for a in host]
    gpu.get_function(name)(grid, block, dev, shared_mem=shmem)
    cp.cuda.Device().synchronize()
    cpu.get_function(name)(grid, block, host, shared_mem=shmem)
    for k in outs:
        g, c = cp.asnumpy(dev[k]), host[k]
        if np.issubdtype(c.dtype, np.integer):
            np.testing.assert_array_equal(g, c, err_msg=f"{name} output {k}")
        else:
            assert np.isfinite(g).all() and np.isfinite(c).all(), f"{name} left outputs unwritten"
            err = np.linalg.norm(g.astype(np.float64) - c) / np.linalg.norm(c.astype(np.float64))
            assert err < 1e-6, f"{name} output {k}: relative difference {err:.2e}"


def test_constant_memory_agrees(modules):
    import cupy as cp
    from labkit import set_constant
    gpu, cpu = modules
    c = rng.standard_normal(8).astype(np.float32)
    set_constant(gpu, "coeffs", c)
    set_constant(cpu, "coeffs", c)
    x = rng.uniform(-1, 1, 999).astype(np.float32)
    y_cpu = np.full(999, np.nan, np.float32)
    y_gpu = cp.full(999, cp.nan, cp.float32)
    gpu.get_function("poly")((4,), (256,), (cp.asarray(x), y_gpu, np.int32(999), np.int32(7)))
    cpu.get_function("poly")((4,), (256,), (x, y_cpu, np.int32(999), np.int32(7)))
    g = cp.asnumpy(y_gpu)
    assert np.linalg.norm(g - y_cpu) / np.linalg.norm(y_cpu) < 1e-6


def test_constant_memory_over_64_kib_is_refused_on_gpu():
    from labkit.backends.cuda import CUDAModule
    from labkit.backends.kernel_source import ConstantMemoryError
    src = '__constant__ float w[20000];\nextern "C" __global__ void k(float* y) { y[0] = w[0]; }\n'
    with pytest.raises(ConstantMemoryError):
        CUDAModule(src, path="big.cu")


def test_gpu_refuses_host_arrays_and_wrong_dtypes(modules):
    import cupy as cp
    gpu, _ = modules
    f = gpu.get_function("saxpy")
    x = cp.zeros(10, cp.float32)
    with pytest.raises(TypeError, match="cupy.asarray"):
        f((1,), (32,), (np.zeros(10, np.float32), x, np.float32(1), np.int32(10)))
    with pytest.raises(TypeError, match="float64"):
        f((1,), (32,), (cp.zeros(10, cp.float64), x, np.float32(1), np.int32(10)))
    with pytest.raises(TypeError, match="Python int"):
        f((1,), (32,), (x, x, np.float32(1), 10))
