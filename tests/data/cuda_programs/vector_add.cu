// vector_add.cu -- the first CUDA program of a course: allocate, copy, launch, check, time, copy back.
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cuda_runtime.h>

#define CHECK(call)                                                                      \
  do {                                                                                   \
    cudaError_t err_ = (call);                                                           \
    if (err_ != cudaSuccess) {                                                           \
      fprintf(stderr, "%s:%d: %s (%s)\n", __FILE__, __LINE__, cudaGetErrorString(err_),  \
              cudaGetErrorName(err_));                                                   \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

__global__ void vecAdd(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 10000;
  size_t bytes = n * sizeof(float);
  float *h_a = (float*)malloc(bytes), *h_b = (float*)malloc(bytes), *h_c = (float*)malloc(bytes);
  for (int i = 0; i < n; ++i) { h_a[i] = i * 0.5f; h_b[i] = 2.0f * i; }
  float *d_a, *d_b, *d_c;
  CHECK(cudaMalloc(&d_a, bytes));
  CHECK(cudaMalloc((void**)&d_b, bytes));
  CHECK(cudaMalloc(&d_c, bytes));
  CHECK(cudaMemcpy(d_a, h_a, bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_b, h_b, bytes, cudaMemcpyHostToDevice));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  int threads = 256, blocks = (n + threads - 1) / threads;
  CHECK(cudaEventRecord(start));
  vecAdd<<<blocks, threads>>>(d_a, d_b, d_c, n);
  CHECK(cudaGetLastError());
  CHECK(cudaEventRecord(stop));
  CHECK(cudaEventSynchronize(stop));
  float ms = -1.f;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  CHECK(cudaMemcpy(h_c, d_c, bytes, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < n; ++i)
    if (fabsf(h_c[i] - 2.5f * i) > 1e-3f) bad++;
  printf("n=%d blocks=%d elapsed_ms_nonnegative=%d\n", n, blocks, ms >= 0.f);
  printf("c[%d] = %.1f\n", n - 1, h_c[n - 1]);
  printf(bad ? "FAILED (%d wrong)\n" : "PASSED\n", bad);
  CHECK(cudaFree(d_a)); CHECK(cudaFree(d_b)); CHECK(cudaFree(d_c));
  CHECK(cudaEventDestroy(start)); CHECK(cudaEventDestroy(stop));
  free(h_a); free(h_b); free(h_c);
  return bad ? 1 : 0;
}
