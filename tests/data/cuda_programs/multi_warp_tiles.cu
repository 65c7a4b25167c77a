// Tiles of several warps (cooperative_groups' thread_block_tile<64>, <128>): their sync() waits for
// the tile's threads only, and cg::reduce sums over the tile.
#include <cstdio>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

template <unsigned N>
__global__ void tile_sums(const int* in, int* sums, int* neighbours) {
  __shared__ cg::block_tile_memory<256> scratch;
  __shared__ int stage[256];
  cg::thread_block block = cg::this_thread_block(scratch);
  cg::thread_block_tile<N> tile = cg::tiled_partition<N>(block);
  int v = in[blockIdx.x * blockDim.x + threadIdx.x];
  int s = cg::reduce(tile, v, cg::plus<int>());
  if (tile.thread_rank() == 0) sums[blockIdx.x * (256 / N) + tile.meta_group_rank()] = s;
  // Each thread reads the value of the tile's thread one warp further on, after the tile's sync.
  stage[threadIdx.x] = v;
  tile.sync();
  unsigned other = tile.meta_group_rank() * N + (tile.thread_rank() + 32) % N;
  neighbours[blockIdx.x * blockDim.x + threadIdx.x] = stage[other];
}

template <unsigned N> int check(const int* d_in, const int* h_in, int blocks) {
  int *d_sums, *d_nb;
  const int tiles = blocks * (256 / N);
  cudaMalloc(&d_sums, tiles * sizeof(int));
  cudaMalloc(&d_nb, blocks * 256 * sizeof(int));
  tile_sums<N><<<blocks, 256>>>(d_in, d_sums, d_nb);
  int sums[64], nb[1024];
  cudaMemcpy(sums, d_sums, tiles * sizeof(int), cudaMemcpyDeviceToHost);
  cudaMemcpy(nb, d_nb, blocks * 256 * sizeof(int), cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int t = 0; t < tiles; ++t) {
    int want = 0;
    for (unsigned i = 0; i < N; ++i) want += h_in[t * N + i];
    bad += sums[t] != want;
  }
  for (int i = 0; i < blocks * 256; ++i) bad += nb[i] != h_in[i / N * N + (i % N + 32) % N];
  printf("tiles of %u: first sum %d, %d wrong\n", N, sums[0], bad);
  cudaFree(d_sums);
  cudaFree(d_nb);
  return bad;
}

int main() {
  const int blocks = 4, n = blocks * 256;
  int h_in[n];
  for (int i = 0; i < n; ++i) h_in[i] = (i * 7) % 13 - 6;
  int* d_in;
  cudaMalloc(&d_in, sizeof h_in);
  cudaMemcpy(d_in, h_in, sizeof h_in, cudaMemcpyHostToDevice);
  int bad = check<64>(d_in, h_in, blocks) + check<128>(d_in, h_in, blocks) + check<256>(d_in, h_in, blocks);
  cudaFree(d_in);
  printf(bad ? "FAILED\n" : "PASSED\n");
  return bad ? 1 : 0;
}
