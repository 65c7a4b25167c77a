// matmul_tiled.cu -- C = A B with 16x16 tiles in static shared memory (`static __shared__`, and the
// plain form), timed with events; checked against the host.
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <helper_cuda.h>
#include <helper_functions.h>

#define TILE 16

__global__ void matmul(const float* A, const float* B, float* C, int M, int N, int K) {
  static __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE];
  int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0.f;
  for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
    int ka = t * TILE + threadIdx.x, kb = t * TILE + threadIdx.y;
    As[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? A[row * K + ka] : 0.f;
    Bs[threadIdx.y][threadIdx.x] = (kb < K && col < N) ? B[kb * N + col] : 0.f;
    __syncthreads();
    for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  if (row < M && col < N) C[row * N + col] = acc;
}

int main(int argc, char** argv) {
  int M = 70, N = 50, K = 40;
  if (checkCmdLineFlag(argc, (const char**)argv, "M")) M = getCmdLineArgumentInt(argc, (const char**)argv, "M");
  float *A = new float[M * K], *B = new float[K * N], *C = new float[M * N], *R = new float[M * N];
  for (int i = 0; i < M * K; ++i) A[i] = float((i * 37) % 11) / 11.f - 0.5f;
  for (int i = 0; i < K * N; ++i) B[i] = float((i * 53) % 7) / 7.f - 0.5f;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double s = 0;
      for (int k = 0; k < K; ++k) s += double(A[m * K + k]) * B[k * N + n];
      R[m * N + n] = float(s);
    }
  float *dA, *dB, *dC;
  checkCudaErrors(cudaMalloc(&dA, M * K * sizeof(float)));
  checkCudaErrors(cudaMalloc(&dB, K * N * sizeof(float)));
  checkCudaErrors(cudaMalloc(&dC, M * N * sizeof(float)));
  checkCudaErrors(cudaMemcpy(dA, A, M * K * sizeof(float), cudaMemcpyHostToDevice));
  checkCudaErrors(cudaMemcpy(dB, B, K * N * sizeof(float), cudaMemcpyHostToDevice));
  StopWatchInterface* timer = nullptr;
  sdkCreateTimer(&timer);
  sdkStartTimer(&timer);
  dim3 block(TILE, TILE), grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
  matmul<<<grid, block>>>(dA, dB, dC, M, N, K);
  checkCudaErrors(cudaGetLastError());
  checkCudaErrors(cudaDeviceSynchronize());
  sdkStopTimer(&timer);
  checkCudaErrors(cudaMemcpy(C, dC, M * N * sizeof(float), cudaMemcpyDeviceToHost));
  bool ok = sdkCompareL2fe(R, C, M * N, 1e-5f);
  printf("M=%d N=%d K=%d C[0]=%.5f timer_ok=%d\n", M, N, K, C[0], sdkGetTimerValue(&timer) >= 0.f);
  printf(ok ? "PASSED\n" : "FAILED\n");
  sdkDeleteTimer(&timer);
  checkCudaErrors(cudaFree(dA)); checkCudaErrors(cudaFree(dB)); checkCudaErrors(cudaFree(dC));
  delete[] A; delete[] B; delete[] C; delete[] R;
  return ok ? 0 : 1;
}
