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


def _gelu_grad(v: np.ndarray) -> np.ndarray:
    t = np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3))
    return 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * np.sqrt(2 / np.pi) * (1 + 3 * 0.044715 * v ** 2)


def test_gemm_ex_and_cublaslt_matmul_match_numpy():
    """gemm_ex_and_lt.cu: every value against numpy, every status as cuBLAS 13 answered on an H200 (the
    same program under nvcc there printed the same statuses, masks and exact values, and the GELU
    family within 5e-5: its tanh is an approximation)."""
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
    # int8: lda 4 and ldb 8 (cuBLAS's int8 products want multiples of 4), into int32 and into float
    a, b = _col(np.arange(24) % 7 - 3.0, 4, 6, 4), _col(np.arange(24) % 5 - 2.0, 6, 3, 8)
    assert got["gemmex_int8"] == [0] + list((2 * a @ b).T.ravel())
    assert got["gemmex_int8_lda2"] == [15] and "int8 product (compute type 32I) needs lda and ldb multiples" in err
    assert got["gemmex_int8_float"] == [0] + list((0.5 * a @ b).T.ravel())
    assert got["gemmex_mixed"] == [15]                          # CUBLAS_STATUS_NOT_SUPPORTED, and why:
    assert "cublasGemmEx: A of CUDA_R_16F, B of CUDA_R_32F and C of CUDA_R_32F" in err
    assert got["batch_counts_differ"] == [7, 0] and "the layouts' batch counts differ" in err
    assert got["heuristic"] == [0, 1]
    m, n, k = 3, 2, 4     # cuBLASLt: gelu(A^T B + bias), A in two strided batches, one B for both
    a, b, bias = _eighths(k * m * 2, 7), _col(_eighths(k * n, 8), k, n), _eighths(m, 9)
    want = np.concatenate([_gelu(_col(a[q * k * m:], k, m).T @ b + bias[:, None]).T.ravel() for q in range(2)])
    assert got["lt_gelu_bias"][0] == 0
    np.testing.assert_allclose(got["lt_gelu_bias"][1:], want, rtol=1e-6, atol=1e-7)
    c = _eighths(m * n, 11).reshape(m, n)                       # row order, ld n
    a1, bt = _col(a, k, m).T, _col(_eighths(n * k, 13), n, k).T  # op(A) of the first batch; op(B) = B^T
    want = np.maximum(a1 @ bt + c, 0)
    assert got["lt_relu_row"] == [0] + list(want.ravel())
    # GELU keeping its input (aux, ld 4: the fourth row keeps what was there), then DGELU_BGRAD through it
    assert got["lt_aux_missing"] == [15] and "no aux pointer was set" in err
    pre = a1 @ b + bias[:, None]
    np.testing.assert_allclose(got["lt_gelu_aux_d"][1:], _gelu(pre).T.ravel(), rtol=1e-6, atol=1e-7)
    aux = np.array(got["lt_gelu_aux"][1:]).reshape(n, 4)
    assert got["lt_gelu_aux"][0] == 0 and np.array_equal(aux[:, :m], pre.T)
    assert np.array_equal(aux[:, m], _eighths(4 * n, 14).reshape(n, 4)[:, m])
    assert got["lt_dgelu_no_workspace"] == [15] and "need a workspace" in err
    dgelu = (a1 @ _col(_eighths(k * n, 16), k, n)) * _gelu_grad(pre)
    assert got["lt_dgelu"][0] == 0 and got["lt_dgelu_bgrad"][0] == 0
    np.testing.assert_allclose(got["lt_dgelu"][1:], dgelu.T.ravel(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got["lt_dgelu_bgrad"][1:], dgelu.sum(axis=1), rtol=1e-6, atol=1e-7)
    # ReLU's bit mask: bit i of column j's byte (ld 128 bits) set where row i's value is positive
    assert got["lt_relu_mask_ld8"] == [7] and "multiple of 128" in err
    relu_in = a1 @ b
    assert got["lt_relu_aux"] == [0] + list(np.maximum(relu_in, 0).T.ravel())
    assert got["lt_relu_mask"] == [sum(1 << i for i in range(m) if relu_in[i, j] > 0) for j in range(n)]
    want = np.where(relu_in > 0, a1 @ _col(_eighths(k * n, 16), k, n), 0)
    assert got["lt_drelu"] == [0] + list(want.T.ravel())
    assert got["lt_stray_bias"] == [7] and "a bias pointer is set, and the epilogue uses no bias" in err
    assert got["lt_bgradb_transb_n"] == [15] and "BGRADB needs op(B) = B^T" in err
    assert got["lt_bgradb_d"] == [0] + list((a1 @ bt).T.ravel())
    assert got["lt_bgradb"] == [0] + list(bt.sum(axis=0))
    assert got["lt_shapes"] == [7] and "cublasLtMatmul: op(A)'s rows are not D's rows" in err
    assert got["lt_huge"] == [15] and "rows or columns over 2^31 - 1" in err


@pytest.mark.parametrize("program", ["cublaslt_status_grid", "cublaslt_epilogue_pointers"])
def test_cublaslt_answers_each_call_as_cublaslt_did_on_an_h200(program):
    """The heuristic's and the matmul's status for 1,242 (and 96) calls, against the lines the same
    program printed under nvcc on an H200: which epilogues need which pointers, leading dimensions,
    transposes and a workspace, and in which order cuBLASLt checks them."""
    folder = Path(__file__).parent / "data" / "cuda_programs"
    rc, out, err = run_program(folder / f"{program}.cu")
    assert rc == 0, err[-2000:]
    want = (folder / f"{program}.h200.txt").read_text().splitlines()
    got = [line for line in out.splitlines() if line.split(" ", 1)[0] in ("grid", "grid2")]
    assert len(got) == len(want) > 90
    wrong = [(w, g) for w, g in zip(want, got) if w != g]
    assert not wrong, f"{len(wrong)} calls answered otherwise than on the H200, e.g. {wrong[:3]}"


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
           "void f(cublasHandle_t h) {\n  cublasCheck(cublasDgeqrfBatched(h, 4, 4, 0, 4, 0, 0, 1));\n}\n")
    with pytest.raises(UnsupportedOnCPU, match=r"lu.cu:4 calls cublasDgeqrfBatched, a cuBLAS routine that labkit's "
                                               r"cublas_v2.h does not provide"):
        program_source.check_program_supported(src, "lu.cu")
    program_source.check_program_supported(src.replace("cublasDgeqrfBatched", "cublasDgemmBatched"), "ok.cu")


def test_batched_lu_factors_solves_and_inverts_as_lapack(tmp_path):
    """cublasDgetrfBatched with pivots (P A = L U, LAPACK's 1-based pivots), getrsBatched for A x = b and
    A^T x = b, getriBatched's inverse; a singular matrix's info names its first zero pivot."""
    src = tmp_path / "lu.cu"
    src.write_text(r"""
#include <cstdio>
#include <cublas_v2.h>
int main() {
  const int n = 5, batch = 2;
  double *a, *lu, *b, *c, **pa, **pb, **pc;
  int *piv, *info;
  cudaMallocManaged(&a, batch * n * n * sizeof(double));
  cudaMallocManaged(&b, batch * n * 2 * sizeof(double));
  cudaMallocManaged(&c, batch * n * n * sizeof(double));
  cudaMallocManaged(&pa, batch * sizeof(double*));
  cudaMallocManaged(&pb, batch * sizeof(double*));
  cudaMallocManaged(&pc, batch * sizeof(double*));
  cudaMallocManaged(&piv, batch * n * sizeof(int));
  cudaMallocManaged(&info, batch * sizeof(int));
  for (int i = 0; i < batch * n * n; ++i) a[i] = ((i * 17 + 3) % 13) * 0.5 - 3 + ((i * i) % 7) * 0.125;
  for (int j = 0; j < n; ++j) a[n * n + 2 * n + j] = 0;   // the second matrix's third row: 0, so singular
  for (int i = 0; i < batch * n * 2; ++i) b[i] = i % 5 - 2;
  for (int q = 0; q < batch; ++q) { pa[q] = a + q * n * n; pb[q] = b + q * n * 2; pc[q] = c + q * n * n; }
  for (int i = 0; i < batch * n * n; ++i) printf("%.17g ", a[i]);
  printf("\n");
  cublasHandle_t h; cublasCreate(&h);
  int s = cublasDgetrfBatched(h, n, pa, n, piv, info, batch);
  cudaDeviceSynchronize();
  printf("getrf %d info %d %d\n", s, info[0], info[1]);
  for (int i = 0; i < n * n; ++i) printf("%.17g ", a[i]);
  printf("\npiv");
  for (int i = 0; i < n; ++i) printf(" %d", piv[i]);
  int hinfo = 0;
  s = cublasDgetrsBatched(h, CUBLAS_OP_N, n, 1, (const double* const*)pa, n, piv, pb, n, &hinfo, 1);
  cudaDeviceSynchronize();
  printf("\ngetrs %d %d", s, hinfo);
  for (int i = 0; i < n; ++i) printf(" %.17g", b[i]);
  s = cublasDgetrsBatched(h, CUBLAS_OP_T, n, 1, (const double* const*)pa, n, piv, pb, n, &hinfo, 1);
  cudaDeviceSynchronize();
  printf("\ngetrsT %d %d", s, hinfo);
  for (int i = 0; i < n; ++i) printf(" %.17g", b[i]);
  s = cublasDgetriBatched(h, n, (const double* const*)pa, n, piv, pc, n, info, batch);
  cudaDeviceSynchronize();
  printf("\ngetri %d info %d %d", s, info[0], info[1]);
  for (int i = 0; i < n * n; ++i) printf(" %.17g", c[i]);
  printf("\n");
}
""")
    rc, out, err = run_program(src)
    assert rc == 0, err
    lines = out.splitlines()
    n = 5
    a = np.array(lines[0].split(), float).reshape(2, n, n).transpose(0, 2, 1)    # column-major
    head = lines[1].split()
    assert head[:2] == ["getrf", "0"] and head[3] == "0" and head[4] == "3"     # U(3, 3) of the second is 0
    lu = np.array(lines[2].split(), float).reshape(n, n).T
    piv = [int(v) for v in lines[3].split()[1:]]
    perm = list(range(n))
    for k, p in enumerate(piv):                      # LAPACK's row interchanges, in order
        perm[k], perm[p - 1] = perm[p - 1], perm[k]
    low, up = np.tril(lu, -1) + np.eye(n), np.triu(lu)
    np.testing.assert_allclose(low @ up, a[0][perm], rtol=1e-12, atol=1e-12)
    assert all(abs(low[i, j]) <= 1 for i in range(n) for j in range(i))   # partial pivoting: |L| <= 1
    b = (np.arange(10) % 5 - 2.0)[:n]
    x = np.array(lines[4].split()[3:], float)
    np.testing.assert_allclose(x, np.linalg.solve(a[0], b), rtol=1e-10)
    xt = np.array(lines[5].split()[3:], float)
    np.testing.assert_allclose(xt, np.linalg.solve(a[0].T, x), rtol=1e-10)
    inv = lines[6].split()
    assert inv[:5] == ["getri", "0", "info", "0", "3"]
    np.testing.assert_allclose(np.array(inv[5:5 + n * n], float).reshape(n, n).T, np.linalg.inv(a[0]), rtol=1e-9,
                               atol=1e-12)


def test_library_calls_on_a_capturing_stream_are_recorded_into_the_graph(tmp_path):
    """A GPU's cuBLAS, cuSPARSE and cuFFT launch kernels, which a stream capture records; labkit's record
    their work as the graph's nodes: nothing is done during the capture, each launch of the graph does
    it again, a host alpha is the value at the capture, and a device result (cublasSdot in device
    pointer mode) is written when the graph runs."""
    src = tmp_path / "capture.cu"
    src.write_text(r"""
#include <cstdio>
#include <cublas_v2.h>
#include <cusparse.h>
#include <cufft.h>
__global__ void add_one(float* x) { x[threadIdx.x] += 1; }
int main() {
  const int n = 4;
  float *x, *y, *dot, *val; int *off, *col; cufftComplex* z;
  cudaMallocManaged(&x, n * 4); cudaMallocManaged(&y, n * 4); cudaMallocManaged(&dot, 4);
  cudaMallocManaged(&val, n * 4); cudaMallocManaged(&off, (n + 1) * 4); cudaMallocManaged(&col, n * 4);
  cudaMallocManaged(&z, n * sizeof(cufftComplex));
  for (int i = 0; i < n; ++i) {
    x[i] = 1; y[i] = 0; val[i] = 3; col[i] = n - 1 - i; off[i] = i; z[i] = make_cuFloatComplex(1, 0);
  }
  off[n] = n; *dot = -1;
  cudaStream_t s; cudaStreamCreate(&s);
  cublasHandle_t h; cublasCreate(&h); cublasSetStream(h, s); cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE);
  cusparseHandle_t sp; cusparseCreate(&sp); cusparseSetStream(sp, s);
  cusparseSpMatDescr_t A; cusparseDnVecDescr_t vx, vy;
  cusparseCreateCsr(&A, n, n, n, off, col, val, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO,
                    CUDA_R_32F);
  cusparseCreateDnVec(&vx, n, x, CUDA_R_32F); cusparseCreateDnVec(&vy, n, y, CUDA_R_32F);
  cufftHandle f; cufftPlan1d(&f, n, CUFFT_C2C, 1); cufftSetStream(f, s);
  float* two; cudaMallocManaged(&two, 4); *two = 2;
  const float one = 1, zero = 0;
  cudaGraph_t g;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
  int s1 = cublasSscal(h, n, two, x, 1);                           // x *= 2 (alpha on the device)
  add_one<<<1, n, 0, s>>>(x);                                      // x += 1
  int s2 = cusparseSpMV(sp, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, A, vx, &zero, vy, CUDA_R_32F,
                        CUSPARSE_SPMV_ALG_DEFAULT, nullptr);       // y = 3 * reversed x
  int s3 = cublasSdot(h, n, x, 1, y, 1, dot);                      // dot = x . y, on the device
  int s4 = cufftExecC2C(f, z, z, CUFFT_FORWARD);                   // z = fft(z)
  cudaStreamEndCapture(s, &g);
  cudaDeviceSynchronize();
  printf("captured %d %d %d %d: x %g dot %g z %g\n", s1, s2, s3, s4, x[0], *dot, z[0].x);
  cudaGraphExec_t e; cudaGraphInstantiate(&e, g, 0);
  for (int r = 0; r < 2; ++r) {
    cudaGraphLaunch(e, s); cudaStreamSynchronize(s);
    printf("run %d: x %g y %g dot %g z %g\n", r, x[0], y[0], *dot, z[0].x);
  }
}
""")
    rc, out, err = run_program(src)
    assert rc == 0, err
    assert out.splitlines() == ["captured 0 0 0 0: x 1 dot -1 z 1",      # nothing done during the capture
                                "run 0: x 3 y 9 dot 108 z 4",              # x = 2*1+1, y = 3*3, dot = 4*3*9
                                "run 1: x 7 y 21 dot 588 z 4"]             # again: x = 2*3+1; fft(4,0,0,0) = 4s
