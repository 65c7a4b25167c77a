// host_pointer.cu -- a mistake: the kernel is given the host array instead of the device copy.
#include <cstdio>
#include <cstdlib>
#include <helper_cuda.h>

__global__ void twice(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 2.f;
}

int main() {
  const int n = 64;
  float* h = (float*)malloc(n * sizeof(float));
  float* d;
  checkCudaErrors(cudaMalloc(&d, n * sizeof(float)));
  checkCudaErrors(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
  twice<<<1, n>>>(h, n);            // should be d
  checkCudaErrors(cudaDeviceSynchronize());
  printf("not reached\n");
  return 0;
}
