// A part of cuBLAS on the CPU executor (cublas_v2.h): column-major matrices with leading dimensions,
// transposes, strided vectors, the pointer modes, and a host pointer given as an operand.  Inputs are
// small integers (exact sums); tests/test_cuda_cublas.py checks the printed results against numpy.
#include <cstdio>
#include <cublas_v2.h>
#include <helper_cuda.h>
int main(int argc, char**) {
  const int m = 3, n = 4, k = 5, lda = 6, ldb = 7, ldc = 4;
  float ha[lda * m], hb[ldb * n], hc[ldc * n];   // A: k x m (used transposed), B: k x n, C: m x n
  for (int i = 0; i < lda * m; ++i) ha[i] = float(i % 7 - 3);
  for (int i = 0; i < ldb * n; ++i) hb[i] = float(i % 5 - 2);
  for (int i = 0; i < ldc * n; ++i) hc[i] = float(i % 3);
  float *a, *b, *c;
  checkCudaErrors(cudaMalloc(&a, sizeof ha));
  checkCudaErrors(cudaMalloc(&b, sizeof hb));
  checkCudaErrors(cudaMalloc(&c, sizeof hc));
  cublasHandle_t h;
  checkCudaErrors(cublasCreate(&h));
  checkCudaErrors(cublasSetMatrix(lda, m, sizeof(float), ha, lda, a, lda));
  checkCudaErrors(cublasSetMatrix(ldb, n, sizeof(float), hb, ldb, b, ldb));
  checkCudaErrors(cublasSetMatrix(ldc, n, sizeof(float), hc, ldc, c, ldc));
  const float alpha = 2, beta = -1;
  // C = 2 * A^T B - C
  checkCudaErrors(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc));
  checkCudaErrors(cublasGetMatrix(m, n, sizeof(float), c, ldc, hc, m));
  printf("sgemm:");
  for (int i = 0; i < m * n; ++i) printf(" %g", hc[i]);
  printf("\n");
  // y = A x (double, 3 x 4 with lda 5), x strided by 2; then y += 0.5 x' and y's dot with itself.
  double hA[5 * 4], hx[8], hy[3] = {1, 1, 1};
  for (int i = 0; i < 20; ++i) hA[i] = i % 4 - 1.5;
  for (int i = 0; i < 8; ++i) hx[i] = i - 3;
  double *dA, *dx, *dy, *dot;
  checkCudaErrors(cudaMalloc(&dA, sizeof hA));
  checkCudaErrors(cudaMalloc(&dx, sizeof hx));
  checkCudaErrors(cudaMallocManaged(&dy, sizeof hy));
  checkCudaErrors(cudaMallocManaged(&dot, sizeof(double)));
  checkCudaErrors(cudaMemcpy(dA, hA, sizeof hA, cudaMemcpyHostToDevice));
  checkCudaErrors(cublasSetVector(8, sizeof(double), hx, 1, dx, 1));
  checkCudaErrors(cudaMemcpy(dy, hy, sizeof hy, cudaMemcpyHostToDevice));
  const double one = 1, zero = 0, half = 0.5;
  checkCudaErrors(cublasDgemv(h, CUBLAS_OP_N, 3, 4, &one, dA, 5, dx, 2, &zero, dy, 1));
  checkCudaErrors(cublasDaxpy(h, 3, &half, dx, 1, dy, 1));
  checkCudaErrors(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
  checkCudaErrors(cublasDdot(h, 3, dy, 1, dy, 1, dot));
  cudaDeviceSynchronize();
  printf("dgemv, daxpy: %g %g %g; ddot %g\n", dy[0], dy[1], dy[2], *dot);
  checkCudaErrors(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  int imax;
  double nrm;
  checkCudaErrors(cublasIdamax(h, 8, dx, 1, &imax));
  checkCudaErrors(cublasDnrm2(h, 8, dx, 1, &nrm));
  printf("idamax %d, dnrm2^2 %g\n", imax, nrm * nrm);
  if (argc > 1) {   // a host array as the vector x
    cublasStatus_t s = cublasDaxpy(h, 8, &half, hx, 1, dx, 1);
    printf("host operand: %s\n", cublasGetStatusName(s));
  }
  checkCudaErrors(cublasDestroy(h));
  return 0;
}
