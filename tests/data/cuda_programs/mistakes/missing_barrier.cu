// missing_barrier.cu -- a mistake: threads read their neighbour's shared-memory slot with no
// __syncthreads() between the write and the read.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void shift(const int* in, int* out) {
  __shared__ int buf[64];
  int t = threadIdx.x;
  buf[t] = in[t];
  out[t] = buf[(t + 1) % 64];       // a __syncthreads() belongs before this line
}

int main() {
  int h[64], *din, *dout;
  for (int i = 0; i < 64; ++i) h[i] = i;
  cudaMalloc(&din, sizeof h);
  cudaMalloc(&dout, sizeof h);
  cudaMemcpy(din, h, sizeof h, cudaMemcpyHostToDevice);
  shift<<<1, 64>>>(din, dout);
  cudaMemcpy(h, dout, sizeof h, cudaMemcpyDeviceToHost);
  printf("out[0] = %d\n", h[0]);
  return 0;
}
