// printf in kernels: when its lines show beside the host's (a GPU keeps them in a buffer that the
// synchronizing calls show, and drops what is left at exit).  device_printf_flush.h200.txt is what this program
// printed under nvcc on an H200; tests/test_cuda_programs.py wants the same from the CPU executor.
#include <cstdio>
__global__ void hello(int tag) { printf("kernel %d block %d thread %d\n", tag, blockIdx.x, threadIdx.x); }
int main() {
  int* d; cudaMalloc(&d, 4);
  hello<<<1, 2>>>(1);
  printf("host: after launch 1\n");
  hello<<<1, 1>>>(2);
  printf("host: after launch 2\n");
  cudaMemcpy(&d, d, 0, cudaMemcpyDeviceToHost);
  int h; cudaMemcpy(&h, d, 4, cudaMemcpyDeviceToHost);
  printf("host: after a blocking memcpy\n");
  hello<<<1, 1>>>(3);
  cudaStream_t s; cudaStreamCreate(&s);
  cudaStreamSynchronize(s);
  printf("host: after syncing another stream\n");
  cudaDeviceReset();
  printf("host: after reset\n");
  return 0;
}
