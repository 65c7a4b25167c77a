// A cooperative launch (cudaLaunchCooperativeKernel) whose grid-wide syncs carry values between blocks:
// each block sums its share of x into partial[block]; after grid.sync() the grid's first thread adds
// the partials; after a second sync every block reads that total.  Without a grid sync that waits for
// every block, the first block would add partials not yet written.  Then the device's limit: a grid
// larger than it holds at once is refused.
#include <cooperative_groups.h>
#include <cstdio>
namespace cg = cooperative_groups;

__global__ void grid_sum(const int* x, int* partial, int* total, int* seen, int n) {
  cg::grid_group grid = cg::this_grid();
  cg::thread_block block = cg::this_thread_block();
  __shared__ int sums[128];
  int acc = 0;
  for (unsigned long long i = grid.thread_rank(); i < (unsigned long long)n; i += grid.size()) acc += x[i];
  sums[block.thread_rank()] = acc;
  block.sync();
  if (block.thread_rank() == 0) {
    int t = 0;
    for (unsigned k = 0; k < block.size(); ++k) t += sums[k];
    partial[grid.block_rank()] = t;
  }
  cg::sync(grid);
  if (grid.thread_rank() == 0) {
    int t = 0;
    for (unsigned long long b = 0; b < grid.num_blocks(); ++b) t += partial[b];
    *total = t;
  }
  grid.sync();
  // The shared array still holds this block's sums after the syncs (another block's never leak in).
  if (block.thread_rank() == 0) {
    int t = 0;
    for (unsigned k = 0; k < block.size(); ++k) t += sums[k];
    seen[grid.block_rank()] = (*total) * 1000 + (t == partial[grid.block_rank()]) + 10 * grid.is_valid();
  }
}

int main() {
  const int n = 100000, blocks = 12, threads = 128;
  int *x, *partial, *total, *seen;
  cudaMallocManaged(&x, n * sizeof(int));
  cudaMallocManaged(&partial, blocks * sizeof(int));
  cudaMallocManaged(&total, sizeof(int));
  cudaMallocManaged(&seen, blocks * sizeof(int));
  long long want = 0;
  for (int i = 0; i < n; ++i) {
    x[i] = (i * 7919) % 101 - 50;
    want += x[i];
  }
  cudaMemset(partial, 0, blocks * sizeof(int));
  int supported = 0;
  cudaDeviceGetAttribute(&supported, cudaDevAttrCooperativeLaunch, 0);
  int n_arg = n;
  void* args[] = {&x, &partial, &total, &seen, &n_arg};
  cudaError_t e = cudaLaunchCooperativeKernel((void*)grid_sum, dim3(blocks), dim3(threads), args, 0, 0);
  cudaError_t s = cudaDeviceSynchronize();
  int bad = 0;
  for (int b = 0; b < blocks; ++b) bad += seen[b] != int(want) * 1000 + 11;
  printf("cooperative %d: %s %s total %d want %lld, %d blocks wrong\n", supported, cudaGetErrorName(e),
         cudaGetErrorName(s), *total, want, bad);

  // The largest grid: blocks per multiprocessor (occupancy) times multiprocessors.
  int per_sm = 0;
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, grid_sum, 1024, 0);
  const int most = per_sm * prop.multiProcessorCount;
  e = cudaLaunchCooperativeKernel((void*)grid_sum, dim3(most + 1), dim3(1024), args, 0, 0);
  printf("%d blocks of 1024: %s\n", most + 1, cudaGetErrorName(e));
  printf("%s\n", bad == 0 && *total == want && e == cudaErrorCooperativeLaunchTooLarge ? "PASSED" : "FAILED");
  return 0;
}
