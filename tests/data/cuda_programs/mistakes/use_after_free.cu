// use_after_free.cu -- a mistake: the result is copied back after its device buffer was freed.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void fill(int* x) { x[threadIdx.x] = threadIdx.x; }

int main() {
  int* d;
  int h[32];
  cudaMalloc(&d, sizeof h);
  fill<<<1, 32>>>(d);
  cudaFree(d);
  cudaError_t e = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  printf("cudaMemcpy: %s\n", cudaGetErrorName(e));
  return e == cudaSuccess ? 0 : 1;
}
