// Coalesced groups: the lanes of a warp that reach coalesced_threads() together share one atomicAdd
// (a warp-aggregated increment, as in cuda-samples' warpAggregatedAtomicsCG); labeled_partition splits
// them by bucket, binary_partition a tile by a predicate, and cg::reduce sums over each part.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cstdio>
#include <vector>
namespace cg = cooperative_groups;

__device__ int aggregated_increment(int* counter, int* largest_group) {
  cg::coalesced_group active = cg::coalesced_threads();
  int first = 0;
  if (active.thread_rank() == 0) {
    first = atomicAdd(counter, int(active.size()));
    atomicMax(largest_group, int(active.size()));
  }
  first = active.shfl(first, 0);
  return first + int(active.thread_rank());
}

// Keeps the positive elements of src (in some order) in dst.
__global__ void keep_positive(int* dst, int* count, int* largest_group, const int* src, int n) {
  for (int i = threadIdx.x + blockIdx.x * blockDim.x; i < n; i += gridDim.x * blockDim.x)
    if (src[i] > 0) dst[aggregated_increment(count, largest_group)] = src[i];
}

// Per bucket (src[i] % 4): how many elements (labeled_partition of the coalesced lanes) and, by
// binary_partition of the warp into odd and even values, the sums of the odd and of the even ones.
__global__ void buckets_and_parity(const int* src, int n, int* per_bucket, int* odd_even_sum) {
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(cg::this_thread_block());
  const int i = threadIdx.x + blockIdx.x * blockDim.x;
  const int v = i < n ? src[i] : 0;
  if (i < n && v > 0) {
    cg::coalesced_group active = cg::coalesced_threads();
    cg::coalesced_group same = cg::labeled_partition(active, v % 4);
    const int members = cg::reduce(same, 1, cg::plus<int>());
    if (same.thread_rank() == 0) atomicAdd(&per_bucket[v % 4], members);
  }
  cg::coalesced_group part = cg::binary_partition(warp, v & 1);
  const int sum = cg::reduce(part, v, cg::plus<int>());
  if (part.thread_rank() == 0) atomicAdd(&odd_even_sum[v & 1], sum);
  warp.sync();
}

int main() {
  const int n = 50000;
  int *src, *dst, *count, *largest, *per_bucket, *odd_even;
  cudaMallocManaged(&src, n * sizeof(int));
  cudaMallocManaged(&dst, n * sizeof(int));
  cudaMallocManaged(&count, sizeof(int));
  cudaMallocManaged(&largest, sizeof(int));
  cudaMallocManaged(&per_bucket, 4 * sizeof(int));
  cudaMallocManaged(&odd_even, 2 * sizeof(int));
  std::vector<int> seen(200, 0), want_bucket(4, 0);
  long long want_odd = 0, want_even = 0;
  int positive = 0;
  for (int i = 0; i < n; ++i) {
    src[i] = (i * 37) % 199 - 99;
    if (src[i] > 0) { ++positive; ++seen[src[i]]; ++want_bucket[src[i] % 4]; }
    (src[i] & 1 ? want_odd : want_even) += src[i];
  }
  *count = 0;
  *largest = 0;
  keep_positive<<<40, 128>>>(dst, count, largest, src, n);
  cudaDeviceSynchronize();
  for (int k = 0; k < *count; ++k) --seen[dst[k]];
  int misplaced = 0;
  for (int v = 0; v < 200; ++v) misplaced += seen[v] != 0;
  printf("kept %d of %d positive, %d values misplaced, largest group %d\n", *count, positive, misplaced, *largest);
  for (int b = 0; b < 4; ++b) per_bucket[b] = 0;
  odd_even[0] = odd_even[1] = 0;
  buckets_and_parity<<<(n + 255) / 256, 256>>>(src, n, per_bucket, odd_even);
  cudaDeviceSynchronize();
  int wrong = 0;
  for (int b = 0; b < 4; ++b) wrong += per_bucket[b] != want_bucket[b];
  printf("buckets %d %d %d %d (%d wrong), odd sum %d want %lld, even sum %d want %lld\n", per_bucket[0],
         per_bucket[1], per_bucket[2], per_bucket[3], wrong, odd_even[1], want_odd, odd_even[0], want_even);
  const bool ok = *count == positive && misplaced == 0 && *largest > 1 && wrong == 0 && odd_even[1] == want_odd &&
                  odd_even[0] == want_even;
  printf("%s\n", ok ? "PASSED" : "FAILED");
  return 0;
}
