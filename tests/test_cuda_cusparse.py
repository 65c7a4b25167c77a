"""cuSPARSE on the CPU executor (labkit/backends/cpu/program_include/cusparse.h): the generic API's
sparse matrix-vector product over CSR and COO matrices, checked against numpy; hostile indices refused
before anything is read; routines not provided refused by name; NVIDIA's conjugateGradient samples use it."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from labkit.backends.cpu import program_source
from labkit.cuda import run_program
from labkit.errors import UnsupportedOnCPU

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the CPU executor needs g++")

PROGRAM = r"""
#include <cstdio>
#include <cusparse.h>
// A 4 x 5 matrix: row 1 empty; CSR with 32-bit indices, the same entries in COO with 64-bit ones.
int main(int argc, char** argv) {
  const int rows = 4, cols = 5, nnz = 6;
  int *off, *col; long long *row64, *col64; float *val, *x, *y, *xt, *yt; double *vald, *xd, *yd;
  cudaMallocManaged(&off, (rows + 1) * 4); cudaMallocManaged(&col, nnz * 4);
  cudaMallocManaged(&row64, nnz * 8); cudaMallocManaged(&col64, nnz * 8);
  cudaMallocManaged(&val, nnz * 4); cudaMallocManaged(&vald, nnz * 8);
  cudaMallocManaged(&x, cols * 4); cudaMallocManaged(&y, rows * 4);
  cudaMallocManaged(&xt, rows * 4); cudaMallocManaged(&yt, cols * 4);
  cudaMallocManaged(&xd, cols * 8); cudaMallocManaged(&yd, rows * 8);
  const int o[] = {0, 2, 2, 5, 6}, c[] = {0, 3, 1, 2, 4, 0}, r[] = {0, 0, 2, 2, 2, 3};
  for (int i = 0; i <= rows; ++i) off[i] = o[i];
  for (int e = 0; e < nnz; ++e) { col[e] = c[e]; col64[e] = c[e]; row64[e] = r[e]; val[e] = vald[e] = e + 1.5; }
  for (int j = 0; j < cols; ++j) x[j] = xd[j] = j - 1.25;
  for (int i = 0; i < rows; ++i) { y[i] = yd[i] = 10 * i; xt[i] = i + 0.5; }
  for (int j = 0; j < cols; ++j) yt[j] = 1;
  if (argc > 1) col[2] = 7;                           // a column index outside the matrix
  cusparseHandle_t h; cusparseCreate(&h);
  cusparseSpMatDescr_t csr, coo, csrd;
  cusparseCreateCsr(&csr, rows, cols, nnz, off, col, val, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                    CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F);
  cusparseCreateCoo(&coo, rows, cols, nnz, row64, col64, val, CUSPARSE_INDEX_64I, CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F);
  cusparseCreateCsr(&csrd, rows, cols, nnz, off, col, vald, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                    CUSPARSE_INDEX_BASE_ZERO, CUDA_R_64F);
  cusparseDnVecDescr_t vx, vy, vxt, vyt, vxd, vyd;
  cusparseCreateDnVec(&vx, cols, x, CUDA_R_32F); cusparseCreateDnVec(&vy, rows, y, CUDA_R_32F);
  cusparseCreateDnVec(&vxt, rows, xt, CUDA_R_32F); cusparseCreateDnVec(&vyt, cols, yt, CUDA_R_32F);
  cusparseCreateDnVec(&vxd, cols, xd, CUDA_R_64F); cusparseCreateDnVec(&vyd, rows, yd, CUDA_R_64F);
  const float two = 2, half = 0.5f, zero = 0; const double twod = 2, halfd = 0.5;
  size_t bytes = 1;
  cusparseSpMV_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &two, csr, vx, &half, vy, CUDA_R_32F,
                          CUSPARSE_SPMV_ALG_DEFAULT, &bytes);
  int s1 = cusparseSpMV(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &two, csr, vx, &half, vy, CUDA_R_32F,
                        CUSPARSE_SPMV_ALG_DEFAULT, nullptr);
  int s2 = cusparseSpMV(h, CUSPARSE_OPERATION_TRANSPOSE, &two, coo, vxt, &zero, vyt, CUDA_R_32F,
                        CUSPARSE_SPMV_COO_ALG1, nullptr);
  int s3 = cusparseSpMV(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &twod, csrd, vxd, &halfd, vyd, CUDA_R_64F,
                        CUSPARSE_SPMV_CSR_ALG1, nullptr);
  cudaDeviceSynchronize();
  printf("%d %d %d %zu\n", s1, s2, s3, bytes);
  for (int i = 0; i < rows; ++i) printf("%.9g ", y[i]);
  printf("\n");
  for (int j = 0; j < cols; ++j) printf("%.9g ", yt[j]);
  printf("\n");
  for (int i = 0; i < rows; ++i) printf("%.17g ", yd[i]);
  printf("\n");
}
"""


def _matrix() -> np.ndarray:
    a = np.zeros((4, 5))
    for e, (i, j) in enumerate([(0, 0), (0, 3), (2, 1), (2, 2), (2, 4), (3, 0)]):
        a[i, j] = e + 1.5
    return a


def test_spmv_over_csr_and_coo_matches_numpy(tmp_path):
    src = tmp_path / "spmv.cu"
    src.write_text(PROGRAM)
    rc, out, err = run_program(src)
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["0", "0", "0", "0"]               # every status SUCCESS, no workspace
    a, x = _matrix(), np.arange(5) - 1.25
    np.testing.assert_allclose([float(v) for v in lines[1].split()], 2 * a @ x + 0.5 * 10 * np.arange(4), rtol=1e-6)
    np.testing.assert_allclose([float(v) for v in lines[2].split()], 2 * a.T @ (np.arange(4) + 0.5), rtol=1e-6)
    np.testing.assert_allclose([float(v) for v in lines[3].split()], 2 * a @ x + 0.5 * 10 * np.arange(4), rtol=1e-15)


def test_a_column_index_outside_the_matrix_is_refused_before_the_product(tmp_path):
    src = tmp_path / "spmv.cu"
    src.write_text(PROGRAM)
    rc, out, err = run_program(src, ["bad"])
    assert rc == 0, err
    assert out.splitlines()[0].split()[0] == "3"                   # CUSPARSE_STATUS_INVALID_VALUE
    assert "cusparseSpMV: a column index outside the matrix" in err


@pytest.mark.check
def test_a_cusparse_routine_not_provided_is_refused_by_name_and_a_program_s_own_helper_is_not():
    src = ("#include <cusparse.h>\nvoid cusparseCheck(cusparseStatus_t s) {}\n"
           "void f(cusparseHandle_t h) {\n  cusparseCheck(cusparseSpMM(h, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0));\n}\n")
    with pytest.raises(UnsupportedOnCPU, match=r"mm.cu:4 calls cusparseSpMM, a cuSPARSE routine that labkit's "
                                               r"cusparse.h does not provide"):
        program_source.check_program_supported(src, "mm.cu")
    program_source.check_program_supported(src.replace("cusparseSpMM(h, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)",
                                                       "cusparseSetStream(h, 0)"), "ok.cu")
    with pytest.raises(UnsupportedOnCPU, match=r"includes <cusparseLt.h>, a cuSPARSE header other than cusparse.h"):
        program_source.check_program_supported("#include <cusparseLt.h>\n", "lt.cu")
