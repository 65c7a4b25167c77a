// A grid sync inside divergent code: reached by half the threads of each block (by default; the
// barrier check reports it) or, with an argument, by the first block only (a GPU would wait forever).
#include <cooperative_groups.h>
#include <cstdio>
namespace cg = cooperative_groups;
__global__ void k(int* y, int by_block) {
  cg::grid_group g = cg::this_grid();
  if (by_block ? blockIdx.x == 0 : threadIdx.x < 16) g.sync();
  y[g.thread_rank()] = 1;
}
int main(int argc, char** argv) {
  int* y;
  cudaMalloc(&y, 64 * sizeof(int));
  int by_block = argc > 1;
  void* args[] = {&y, &by_block};
  cudaLaunchCooperativeKernel((void*)k, dim3(2), dim3(32), args, 0, 0);
  printf("%s\n", cudaGetErrorName(cudaDeviceSynchronize()));
  return 0;
}
