// A grid sync in a kernel launched with <<<>>>: only a cooperative launch (cudaLaunchCooperativeKernel)
// has every block resident at once, as a grid sync needs.
#include <cooperative_groups.h>
#include <cstdio>
namespace cg = cooperative_groups;
__global__ void k(int* y) {
  cg::grid_group g = cg::this_grid();
  y[g.thread_rank()] = int(g.is_valid());
  g.sync();
}
int main() {
  int* y;
  cudaMalloc(&y, 64 * sizeof(int));
  k<<<2, 32>>>(y);
  printf("%s\n", cudaGetErrorName(cudaDeviceSynchronize()));
  return 0;
}
