// Block 1 reads what block 0 writes, with nothing ordering the two blocks (on a GPU they may run in
// either order, or side by side): a race, whether one worker runs both blocks in turn or two run them.
#include <cstdio>
__global__ void k(int* x) {
  if (threadIdx.x == 0) {
    if (blockIdx.x == 0) x[0] = 1;
    else x[1] = x[0];
  }
}
int main() {
  int* x;
  cudaMalloc(&x, 2 * sizeof(int));
  cudaMemset(x, 0, 2 * sizeof(int));
  k<<<2, 32>>>(x);
  int h[2];
  cudaMemcpy(h, x, sizeof h, cudaMemcpyDeviceToHost);
  printf("%d\n", h[1]);
  return 0;
}
