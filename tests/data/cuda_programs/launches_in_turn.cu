// Three launches of one kernel, each after the last: the race check must stay quiet.  With argument 1,
// a fourth kernel whose threads all write one element follows: the race check must name it.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

__global__ void add_one(float* a, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] += 1.0f;
}

__global__ void every_thread_writes(float* a) {
  a[0] = (float)threadIdx.x;
}

int main(int argc, char** argv) {
  const bool racy = argc > 1 && atoi(argv[1]) == 1;
  const int n = 1000;
  float* d;
  cudaMalloc(&d, n * sizeof(float));
  cudaMemset(d, 0, n * sizeof(float));
  for (int k = 0; k < 3; ++k) add_one<<<(n + 255) / 256, 256>>>(d, n);
  if (racy) every_thread_writes<<<1, 64>>>(d);
  float h[n];
  cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  printf("%g %g\n", h[1], h[n - 1]);
  cudaFree(d);
  return 0;
}
