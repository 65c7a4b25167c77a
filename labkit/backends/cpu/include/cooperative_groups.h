// cooperative_groups for the CPU executor: the thread block, tiles of up to 32 threads with their
// shuffles, votes and sync, and cg::reduce.  Grid-wide groups (this_grid, grid_group), coalesced
// groups and tiles made at run time (tiled_partition(g, n)) are not modelled: labkit refuses a file
// that uses them, saying so, before compiling it.
#pragma once
#include "labkit_cpu.h"

namespace cooperative_groups {

struct thread_block {
  void sync(int line = __builtin_LINE()) const { ::labkit::syncthreads(line); }
  unsigned thread_rank() const { return ::labkit::tl_fiber->linear; }
  unsigned size() const { return blockDim.x * blockDim.y * blockDim.z; }
  unsigned num_threads() const { return size(); }
  dim3 group_index() const { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
  dim3 thread_index() const { return dim3(threadIdx.x, threadIdx.y, threadIdx.z); }
  dim3 group_dim() const { return blockDim; }
  dim3 dim_threads() const { return blockDim; }
};
inline thread_block this_thread_block() { return thread_block{}; }
inline void sync(const thread_block& g, int line = __builtin_LINE()) { g.sync(line); }

template <unsigned N> struct thread_block_tile {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "a tile holds 1, 2, 4, 8, 16 or 32 threads");
  static constexpr unsigned size_v = N;
  unsigned thread_rank() const { return ::labkit::tl_fiber->linear % N; }
  unsigned size() const { return N; }
  unsigned num_threads() const { return N; }
  unsigned meta_group_rank() const { return ::labkit::tl_fiber->linear / N; }
  unsigned meta_group_size() const { return (blockDim.x * blockDim.y * blockDim.z + N - 1) / N; }
  unsigned base() const { return (::labkit::tl_fiber->lane / N) * N; }   // its first lane in the warp
  unsigned mask() const { return N == 32 ? 0xffffffffu : (((1u << N) - 1u) << base()); }
  void sync() const { ::labkit::warp_sync(mask(), true); }   // orders memory, as __syncwarp
  template <class T> T shfl(T v, int src, int line = __builtin_LINE()) const { return __shfl_sync(mask(), v, src, int(N), line); }
  template <class T> T shfl_down(T v, unsigned d, int line = __builtin_LINE()) const { return __shfl_down_sync(mask(), v, d, int(N), line); }
  template <class T> T shfl_up(T v, unsigned d, int line = __builtin_LINE()) const { return __shfl_up_sync(mask(), v, d, int(N), line); }
  template <class T> T shfl_xor(T v, int m, int line = __builtin_LINE()) const { return __shfl_xor_sync(mask(), v, m, int(N), line); }
  unsigned ballot(int pred) const {
    unsigned b = __ballot_sync(mask(), pred) >> base();
    return N == 32 ? b : (b & ((1u << N) - 1u));
  }
  int any(int pred) const { return ballot(pred) != 0; }
  int all(int pred) const { return ballot(pred) == (N == 32 ? 0xffffffffu : ((1u << N) - 1u)); }
};
template <unsigned N, class Parent> inline thread_block_tile<N> tiled_partition(const Parent&) {
  return thread_block_tile<N>{};
}
template <unsigned N> inline void sync(const thread_block_tile<N>& t) { t.sync(); }

template <class T> struct plus { T operator()(T a, T b) const { return a + b; } };
template <class T> struct less { T operator()(T a, T b) const { return b < a ? b : a; } };
template <class T> struct greater { T operator()(T a, T b) const { return a < b ? b : a; } };
template <class T> struct bit_and { T operator()(T a, T b) const { return a & b; } };
template <class T> struct bit_or { T operator()(T a, T b) const { return a | b; } };
template <class T> struct bit_xor { T operator()(T a, T b) const { return a ^ b; } };

// cg::reduce over a tile: every thread gets the result (a butterfly of xor shuffles).
template <unsigned N, class T, class Op> inline T reduce(const thread_block_tile<N>& t, T v, Op op) {
  for (unsigned o = N / 2; o > 0; o /= 2) v = op(v, t.shfl_xor(v, int(o)));
  return v;
}

}  // namespace cooperative_groups
