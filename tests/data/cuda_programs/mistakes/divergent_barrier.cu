// divergent_barrier.cu -- a mistake: __syncthreads() inside a branch that only half the block takes.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void k(int* x) {
  if (threadIdx.x < 32) {
    x[threadIdx.x] = 1;
    __syncthreads();
  }
}

int main() {
  int* d;
  cudaMalloc(&d, 64 * sizeof(int));
  k<<<1, 64>>>(d);
  cudaError_t e = cudaDeviceSynchronize();
  printf("%s\n", cudaGetErrorName(e));
  return e == cudaSuccess ? 0 : 1;
}
