// Each block writes its partial; after the grid sync the first thread adds them.  With an argument the
// sync is skipped: the race check reports the read of partials that other blocks write.
#include <cooperative_groups.h>
#include <cstdio>
namespace cg = cooperative_groups;
__global__ void k(int* partial, int* out, int synced) {
  cg::grid_group g = cg::this_grid();
  if (threadIdx.x == 0) partial[blockIdx.x] = int(blockIdx.x) + 1;
  if (synced) g.sync();
  if (g.thread_rank() == 0) *out = partial[0] + partial[1] + partial[2] + partial[3];
}
int main(int argc, char** argv) {
  int *p, *o;
  cudaMalloc(&p, 4 * sizeof(int));
  cudaMalloc(&o, sizeof(int));
  int synced = argc == 1;
  void* args[] = {&p, &o, &synced};
  cudaLaunchCooperativeKernel((void*)k, dim3(4), dim3(32), args, 0, 0);
  int r = 0;
  cudaMemcpy(&r, o, sizeof r, cudaMemcpyDeviceToHost);
  printf("%d\n", r);
  return 0;
}
