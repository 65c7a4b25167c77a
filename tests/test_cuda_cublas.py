"""cuBLAS on the CPU executor (labkit/backends/cpu/program_include/cublas_v2.h and cublasLt.h): the
routines a program calls, checked against numpy (GemmEx over half, bfloat16 and int8; cuBLASLt's matmul
with its epilogues, orders and batches), and NVIDIA's UnifiedMemoryStreams sample, whose device tasks are
cublasDgemv."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from labkit.backends.cpu import program_source
from labkit.cuda import run_program
from labkit.errors import UnsupportedOnCPU

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the CPU executor needs g++")

PROGRAM = Path(__file__).parent / "data" / "cuda_programs" / "cublas_calls.cu"


def _expected() -> list[str]:
    col_major = lambda values, ld, cols: np.array(values, float).reshape(cols, ld).T   # noqa: E731
    a = col_major([i % 7 - 3 for i in range(18)], 6, 3)[:5]       # k x m, used transposed
    b = col_major([i % 5 - 2 for i in range(28)], 7, 4)[:5]       # k x n
    c = col_major([i % 3 for i in range(16)], 4, 4)[:3]           # m x n
    gemm = 2 * a.T @ b - c
    big_a = col_major([i % 4 - 1.5 for i in range(20)], 5, 4)[:3]
    x = np.arange(8) - 3.0
    y = big_a @ x[0::2] + 0.5 * x[:3]
    fmt = lambda v: f"{v:g}"   # noqa: E731
    return ["sgemm: " + " ".join(fmt(v) for v in gemm.T.ravel()),
            f"dgemv, daxpy: {' '.join(fmt(v) for v in y)}; ddot {fmt(y @ y)}",
            f"idamax {int(np.argmax(np.abs(x))) + 1}, dnrm2^2 {fmt(x @ x)}"]


def test_cublas_routines_match_numpy_and_a_host_operand_is_reported():
    rc, out, err = run_program(PROGRAM)
    assert rc == 0, err
    assert out.splitlines() == _expected()
    rc, out, err = run_program(PROGRAM, ["host"])
    assert rc == 0, err
    assert out.splitlines()[-1] == "host operand: CUBLAS_STATUS_EXECUTION_FAILED"
    assert "cublasDaxpy: the vector x (0x" in err and "is not device or managed memory" in err


@pytest.mark.check
def test_other_cublas_headers_are_refused_by_name():
    with pytest.raises(UnsupportedOnCPU, match=r"xt.cu:1 includes <cublasXt.h>, a cuBLAS header other than cublas_v2.h "
                                               r"and cublasLt.h"):
        program_source.check_program_supported("#include <cublasXt.h>\nint main() {}\n", "xt.cu")
    program_source.check_program_supported("#include <cublas_v2.h>\n#include <cublasLt.h>\nint main() {}\n", "v2.cu")


def _eighths(n: int, salt: int) -> np.ndarray:
    """gemm_ex_and_lt.cu's inputs: small multiples of 1/8, exact in half, bfloat16 and float."""
    return ((np.arange(n) * 37 + salt * 11) % 17 - 8) / 8.0


def _col(values: np.ndarray, rows: int, cols: int, ld: int | None = None) -> np.ndarray:
    """A column-major matrix (leading dimension ld) as numpy's rows x cols."""
    ld = ld or rows
    return values[:ld * cols].reshape(cols, ld).T[:rows]


def _gelu(v: np.ndarray) -> np.ndarray:
    return 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3)))


def test_gemm_ex_and_cublaslt_matmul_match_numpy():
    rc, out, err = run_program(Path(__file__).parent / "data" / "cuda_programs" / "gemm_ex_and_lt.cu")
    assert rc == 0, err
    got = {ln.split()[0]: [float(v) for v in ln.split()[1:]] for ln in out.splitlines()}
    m, n, k = 3, 4, 5     # half A^T B + C / 2 into float: every value exact
    want = _col(_eighths(k * m, 1), k, m).T @ _col(_eighths(k * n, 2), k, n) + 0.5 * _col(_eighths(m * n, 3), m, n)
    assert got["gemmex_half"] == [0] + list(want.T.ravel())
    m, n, k, lda = 3, 2, 4, 4     # bfloat16, two strided batches: sums of 4 products of eighths, exact in bfloat16
    a, b = _eighths(lda * k * 2, 4), _eighths(k * n * 2, 5)
    want = [(_col(a[q * lda * k:], m, k, lda) @ _col(b[q * k * n:], k, n)).T.ravel() for q in range(2)]
    assert got["gemmex_bf16_batched"] == [0] + list(np.concatenate(want))
    a, b = _col(np.arange(12) % 7 - 3.0, 2, 6), _col(np.arange(18) % 5 - 2.0, 6, 3)
    assert got["gemmex_int8"] == [0] + list((2 * a @ b).T.ravel())
    assert got["gemmex_mixed"] == [15]                          # CUBLAS_STATUS_NOT_SUPPORTED, and why:
    assert "cublasGemmEx: A of CUDA_R_16F, B of CUDA_R_32F and C of CUDA_R_32F" in err
    assert got["heuristic"] == [0, 1]
    m, n, k = 3, 2, 4     # cuBLASLt: gelu(A^T B + bias), A in two strided batches, one B for both
    a, b, bias = _eighths(k * m * 2, 7), _col(_eighths(k * n, 8), k, n), _eighths(m, 9)
    want = np.concatenate([_gelu(_col(a[q * k * m:], k, m).T @ b + bias[:, None]).T.ravel() for q in range(2)])
    assert got["lt_gelu_bias"][0] == 0
    np.testing.assert_allclose(got["lt_gelu_bias"][1:], want, rtol=1e-6, atol=1e-7)
    c = _eighths(m * n, 11).reshape(m, n)                       # row order, ld n
    want = np.maximum(_col(a, k, m).T @ _col(_eighths(n * k, 13), n, k).T + c, 0)
    assert got["lt_relu_row"] == [0] + list(want.ravel())
    assert got["lt_aux"] == [15] and "the epilogue (an auxiliary output or a gradient) (160)" in err
    assert got["lt_shapes"] == [7] and "cublasLtMatmul: op(A)'s rows are not D's rows" in err
    assert got["lt_huge"] == [7] and "rows or columns over 2^31 - 1" in err


def test_unified_memory_streams_sample_runs_unchanged():
    sample = Path(__file__).parent / "data" / "cuda_programs" / "cuda-samples" / "UnifiedMemoryStreams"
    rc, out, err = run_program(sample)
    assert rc == 0, err[-2000:]
    tasks = [line for line in out.splitlines() if line.startswith("Task [")]
    assert len(tasks) == 40 and any("executing on device" in t for t in tasks) and out.endswith("All Done!\n")


def test_gemm_batched_reads_its_matrices_addresses_from_device_memory(tmp_path):
    """cublasDgemmBatched: three products, the arrays of their addresses copied to the device first."""
    src = tmp_path / "batched.cu"
    src.write_text(r"""
#include <cstdio>
#include <cublas_v2.h>
int main() {
  const int m = 3, n = 2, k = 4, batch = 3;
  double *a, *b, *c, **pa, **pb, **pc;
  cudaMallocManaged(&a, batch * m * k * sizeof(double));
  cudaMallocManaged(&b, batch * k * n * sizeof(double));
  cudaMallocManaged(&c, batch * m * n * sizeof(double));
  for (int i = 0; i < batch * m * k; ++i) a[i] = i % 5 - 2;
  for (int i = 0; i < batch * k * n; ++i) b[i] = i % 3 - 1;
  double* ha[batch]; double* hb[batch]; double* hc[batch];
  for (int q = 0; q < batch; ++q) { ha[q] = a + q * m * k; hb[q] = b + q * k * n; hc[q] = c + q * m * n; }
  cudaMalloc(&pa, sizeof ha); cudaMalloc(&pb, sizeof hb); cudaMalloc(&pc, sizeof hc);
  cudaMemcpy(pa, ha, sizeof ha, cudaMemcpyHostToDevice);
  cudaMemcpy(pb, hb, sizeof hb, cudaMemcpyHostToDevice);
  cudaMemcpy(pc, hc, sizeof hc, cudaMemcpyHostToDevice);
  cublasHandle_t h; cublasCreate(&h);
  const double one = 1.0, zero = 0.0;
  cublasStatus_t s = cublasDgemmBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, pa, m, pb, k, &zero, pc, m, batch);
  cudaDeviceSynchronize();
  printf("%d", (int)s);
  for (int i = 0; i < batch * m * n; ++i) printf(" %g", c[i]);
  printf("\n");
}
""")
    rc, out, err = run_program(src)
    assert rc == 0, err
    a = (np.arange(36) % 5 - 2.0).reshape(3, 4, 3).transpose(0, 2, 1)     # column-major m x k, per batch
    b = (np.arange(24) % 3 - 1.0).reshape(3, 2, 4).transpose(0, 2, 1)
    want = np.concatenate([(a[q] @ b[q]).T.ravel() for q in range(3)])
    values = out.split()
    assert values[0] == "0" and np.array_equal(np.array(values[1:], float), want)


@pytest.mark.check
def test_a_cublas_routine_not_provided_is_refused_by_name_and_a_program_s_own_helper_is_not():
    src = ("#include <cublas_v2.h>\nvoid cublasCheck(cublasStatus_t s) {}\n"
           "void f(cublasHandle_t h) {\n  cublasCheck(cublasDgetrfBatched(h, 4, 0, 4, 0, 0, 1));\n}\n")
    with pytest.raises(UnsupportedOnCPU, match=r"lu.cu:4 calls cublasDgetrfBatched, a cuBLAS routine that labkit's "
                                               r"cublas_v2.h does not provide"):
        program_source.check_program_supported(src, "lu.cu")
    program_source.check_program_supported(src.replace("cublasDgetrfBatched", "cublasDgemmBatched"), "ok.cu")
