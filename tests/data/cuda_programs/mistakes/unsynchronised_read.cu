// unsynchronised_read.cu -- a mistake: the host reads pinned memory that cudaMemcpyAsync is still
// filling; the cudaStreamSynchronize comes too late.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void iota(int* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = i;
}

int main() {
  const int n = 4096;
  int *h, *d;
  cudaStream_t s;
  cudaStreamCreate(&s);
  cudaMallocHost(&h, n * sizeof(int));
  cudaMalloc(&d, n * sizeof(int));
  iota<<<n / 256, 256, 0, s>>>(d, n);
  cudaMemcpyAsync(h, d, n * sizeof(int), cudaMemcpyDeviceToHost, s);
  long long sum = 0;
  for (int i = 0; i < n; ++i) sum += h[i];      // too early
  cudaStreamSynchronize(s);
  printf("sum = %lld\n", sum);
  return 0;
}
