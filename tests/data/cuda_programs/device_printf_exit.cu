// printf in kernels: when its lines show beside the host's (a GPU keeps them in a buffer that the
// synchronizing calls show, and drops what is left at exit).  device_printf_exit.h200.txt is what this program
// printed under nvcc on an H200; tests/test_cuda_programs.py wants the same from the CPU executor.
#include <cstdio>
__global__ void hello() { printf("hello from block %d thread %d\n", blockIdx.x, threadIdx.x); if (threadIdx.x == 0) printf("x\n"); }
int main() {
  hello<<<2, 2>>>();
  printf("host: after the launch\n");
  cudaDeviceSynchronize();
  printf("host: after the sync\n");
  hello<<<1, 1>>>();
  printf("host: exit without a sync\n");
  return 0;
}
