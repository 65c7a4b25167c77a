// out_of_bounds.cu -- a mistake: the bounds check is missing, and the last block writes past the array.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void square(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  x[i] = float(i) * float(i);       // no `if (i < n)`
}

int main() {
  const int n = 1000;
  float* d;
  cudaMalloc(&d, n * sizeof(float));
  square<<<(n + 127) / 128, 128>>>(d, n);
  cudaError_t e = cudaDeviceSynchronize();
  printf("%s\n", cudaGetErrorName(e));
  return 0;
}
