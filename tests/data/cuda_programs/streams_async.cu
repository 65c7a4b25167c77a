// streams_async.cu -- pinned host memory, two streams each copying in, scaling and copying out its half
// asynchronously, then one synchronisation per stream before the host reads.
#include <cstdio>
#include <cuda_runtime.h>
#include <helper_cuda.h>

__global__ void scale(float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}

int main() {
  const int n = 1 << 14, half = n / 2;
  float *h, *d;
  checkCudaErrors(cudaMallocHost(&h, n * sizeof(float)));
  checkCudaErrors(cudaMalloc(&d, n * sizeof(float)));
  for (int i = 0; i < n; ++i) h[i] = float(i);
  cudaStream_t s[2];
  cudaEvent_t done[2];
  for (int k = 0; k < 2; ++k) {
    checkCudaErrors(cudaStreamCreateWithFlags(&s[k], cudaStreamNonBlocking));
    checkCudaErrors(cudaEventCreate(&done[k]));
  }
  for (int k = 0; k < 2; ++k) {
    float* hp = h + k * half;
    float* dp = d + k * half;
    checkCudaErrors(cudaMemcpyAsync(dp, hp, half * sizeof(float), cudaMemcpyHostToDevice, s[k]));
    scale<<<(half + 255) / 256, 256, 0, s[k]>>>(dp, 3.0f, half);
    checkCudaErrors(cudaMemcpyAsync(hp, dp, half * sizeof(float), cudaMemcpyDeviceToHost, s[k]));
    checkCudaErrors(cudaEventRecord(done[k], s[k]));
  }
  checkCudaErrors(cudaStreamSynchronize(s[0]));
  checkCudaErrors(cudaEventSynchronize(done[1]));
  int bad = 0;
  for (int i = 0; i < n; ++i) bad += h[i] != 3.0f * i;
  printf("h[%d] = %.1f\n", n - 1, h[n - 1]);
  printf(bad ? "FAILED\n" : "PASSED\n");
  for (int k = 0; k < 2; ++k) { cudaStreamDestroy(s[k]); cudaEventDestroy(done[k]); }
  checkCudaErrors(cudaFreeHost(h));
  checkCudaErrors(cudaFree(d));
  return bad != 0;
}
