// copy_past_end.cu -- a mistake: the copy back counts elements of the wrong array.
#include <cstdio>
#include <helper_cuda.h>

int main() {
  const int n = 100;
  static float h[n + 1];
  float* d;
  checkCudaErrors(cudaMalloc(&d, n * sizeof(float)));
  checkCudaErrors(cudaMemset(d, 0, n * sizeof(float)));
  checkCudaErrors(cudaMemcpy(h, d, (n + 1) * sizeof(float), cudaMemcpyDeviceToHost));
  printf("not reached\n");
  return 0;
}
