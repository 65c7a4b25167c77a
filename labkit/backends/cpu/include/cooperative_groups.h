// cooperative_groups for the CPU executor: the thread block, tiles of up to 32 threads with their
// shuffles, votes and sync, tiles of several warps (64 to 1024 threads: sync, ranks and cg::reduce,
// as CUDA gives them with block_tile_memory), thread_group (either, chosen at run time), the grid
// (this_grid: ranks in any launch; sync() in a cooperative launch, cudaLaunchCooperativeKernel),
// coalesced groups (coalesced_threads, labeled_partition, binary_partition), cg::reduce and the
// scans (inclusive_scan, exclusive_scan over a tile of up to a warp or a coalesced group).  A tile
// made at run time (tiled_partition(g, n)) is a thread_group of n threads: its sync and ranks.
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
// The scratch memory CUDA's multi-warp tiles need (declared __shared__ by the kernel); the executor's
// tiles keep theirs per block themselves, so it only has to exist.
template <unsigned MaxBlockSize = 1024> struct block_tile_memory { unsigned char reserved[8]; };
template <unsigned M> inline thread_block this_thread_block(block_tile_memory<M>&) { return thread_block{}; }
inline void sync(const thread_block& g, int line = __builtin_LINE()) { g.sync(line); }

template <unsigned N> struct thread_block_tile {
  static_assert(N >= 1 && N <= 1024 && (N & (N - 1)) == 0, "a tile holds a power of two threads, up to 1024");
  static constexpr unsigned size_v = N;
  unsigned thread_rank() const { return ::labkit::tl_fiber->linear % N; }
  unsigned size() const { return N; }
  unsigned num_threads() const { return N; }
  unsigned meta_group_rank() const { return ::labkit::tl_fiber->linear / N; }
  unsigned meta_group_size() const { return (blockDim.x * blockDim.y * blockDim.z + N - 1) / N; }
  unsigned base() const { return N >= 32 ? 0u : (::labkit::tl_fiber->lane / N) * N; }   // its first lane in the warp
  unsigned mask() const { return N >= 32 ? 0xffffffffu : (((1u << (N % 32)) - 1u) << base()); }
  // Orders memory, as __syncwarp; a tile of several warps waits for all of its threads.
  void sync() const {
    if constexpr (N > 32) ::labkit::tile_sync(N);
    else ::labkit::warp_sync(mask(), true);
  }
  // A tile shuffles a value of any size (uint4, a struct), as CUDA's does: in 8-byte pieces.
  template <class T, class F> static T by_pieces(const T& v, F shuffle_piece) {
    if constexpr (sizeof(T) <= 8) {
      return shuffle_piece(v);
    } else {
      static_assert(std::is_trivially_copyable<T>::value, "a tile shuffles trivially copyable values");
      unsigned long long in[(sizeof(T) + 7) / 8] = {}, out[(sizeof(T) + 7) / 8];
      std::memcpy(in, &v, sizeof(T));
      for (size_t k = 0; k < (sizeof(T) + 7) / 8; ++k) out[k] = shuffle_piece(in[k]);
      T r;
      std::memcpy(&r, out, sizeof(T));
      return r;
    }
  }
  template <class T> T shfl(T v, int src, int line = __builtin_LINE()) const {
    static_assert(N <= 32, "a tile of several warps has no shuffles (as in CUDA)");
    return by_pieces(v, [&](auto p) { return __shfl_sync(mask(), p, src, int(N), line); });
  }
  template <class T> T shfl_down(T v, unsigned d, int line = __builtin_LINE()) const {
    static_assert(N <= 32, "a tile of several warps has no shuffles (as in CUDA)");
    return by_pieces(v, [&](auto p) { return __shfl_down_sync(mask(), p, d, int(N), line); });
  }
  template <class T> T shfl_up(T v, unsigned d, int line = __builtin_LINE()) const {
    static_assert(N <= 32, "a tile of several warps has no shuffles (as in CUDA)");
    return by_pieces(v, [&](auto p) { return __shfl_up_sync(mask(), p, d, int(N), line); });
  }
  template <class T> T shfl_xor(T v, int m, int line = __builtin_LINE()) const {
    static_assert(N <= 32, "a tile of several warps has no shuffles (as in CUDA)");
    return by_pieces(v, [&](auto p) { return __shfl_xor_sync(mask(), p, m, int(N), line); });
  }
  unsigned ballot(int pred) const {
    static_assert(N <= 32, "a tile of several warps has no votes here: use cg::reduce");
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

// A group of either kind, chosen at run time (a function taking `thread_group g` serves a block and its
// tiles alike): what it was made from decides what its sync waits for.
class thread_group {
  unsigned tile_ = 0, mask_ = 0;   // tile_ 0: the whole block
 public:
  thread_group(const thread_block&) {}
  template <unsigned N> thread_group(const thread_block_tile<N>& t) : tile_(N), mask_(t.mask()) {}
  void sync(int line = __builtin_LINE()) const {
    if (tile_ == 0) ::labkit::syncthreads(line);
    else if (tile_ > 32) ::labkit::tile_sync(tile_);
    else ::labkit::warp_sync(mask_, true);
  }
  unsigned thread_rank() const { return tile_ ? ::labkit::tl_fiber->linear % tile_ : ::labkit::tl_fiber->linear; }
  unsigned size() const { return tile_ ? tile_ : blockDim.x * blockDim.y * blockDim.z; }
  unsigned num_threads() const { return size(); }
  // A tile of n consecutive threads made at run time: n a power of two up to 1024, as CUDA requires,
  // and no larger than the group it is cut from.
  static thread_group tile_of(unsigned n, unsigned parent_size) {
    if (n == 0 || n > 1024 || (n & (n - 1)) != 0 || n > parent_size)
      ::labkit::fail_from_fiber("cooperative_groups::tiled_partition(g, " + std::to_string(n) + "): a tile holds a "
                                "power of two threads, up to 1024 and no more than its group's " +
                                std::to_string(parent_size));
    thread_group g;
    g.tile_ = n;
    g.mask_ = n >= 32 ? 0xffffffffu : (((1u << n) - 1u) << ((::labkit::tl_fiber->lane / n) * n));
    return g;
  }
 private:
  thread_group() = default;
};
inline void sync(const thread_group& g, int line = __builtin_LINE()) { g.sync(line); }
inline thread_group tiled_partition(const thread_group& parent, unsigned n) {
  return thread_group::tile_of(n, parent.size());
}
inline thread_group tiled_partition(const thread_block& parent, unsigned n) {
  return thread_group::tile_of(n, parent.size());
}

// The grid: every thread of the launch.  Its ranks hold in any launch; sync() waits for every thread of
// every block, which needs a cooperative launch (labkit_cpu.h, grid_sync, says so otherwise).
class grid_group {
 public:
  bool is_valid() const { return (::labkit::g_launch->cfg.flags & ::labkit::LAUNCH_COOPERATIVE) != 0; }
  void sync(int line = __builtin_LINE()) const { ::labkit::grid_sync(line); }
  unsigned long long num_blocks() const { return (unsigned long long)gridDim.x * gridDim.y * gridDim.z; }
  unsigned long long block_rank() const {
    return blockIdx.x + (unsigned long long)gridDim.x * (blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z);
  }
  unsigned long long thread_rank() const {
    return block_rank() * (blockDim.x * blockDim.y * blockDim.z) + ::labkit::tl_fiber->linear;
  }
  unsigned long long size() const { return num_blocks() * (blockDim.x * blockDim.y * blockDim.z); }
  unsigned long long num_threads() const { return size(); }
  dim3 dim_blocks() const { return gridDim; }
  dim3 block_index() const { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
};
inline grid_group this_grid() { return grid_group{}; }
inline void sync(const grid_group& g, int line = __builtin_LINE()) { g.sync(line); }

// A coalesced group: lanes of one warp, any of them (its mask), ranked in lane order.  Shuffles name a
// rank; a ballot comes back packed by rank, as CUDA's.
class coalesced_group {
  unsigned mask_;
  static unsigned lane() { return ::labkit::tl_fiber->lane; }
 public:
  explicit coalesced_group(unsigned mask) : mask_(mask) {}
  unsigned mask() const { return mask_; }
  unsigned size() const { return unsigned(__builtin_popcount(mask_)); }
  unsigned num_threads() const { return size(); }
  unsigned thread_rank() const { return unsigned(__builtin_popcount(mask_ & ((1u << lane()) - 1u))); }
  unsigned meta_group_rank() const { return 0; }
  unsigned meta_group_size() const { return 1; }
  void sync() const { ::labkit::warp_sync(mask_, true); }
  // The lane of rank r (r < size()).
  unsigned lane_of(unsigned r) const {
    unsigned m = mask_;
    for (unsigned k = 0; k < r; ++k) m &= m - 1u;
    return unsigned(__builtin_ctz(m));
  }
  template <class T> T shfl(T v, unsigned src_rank, int line = __builtin_LINE()) const {
    const unsigned src = lane_of(src_rank % size());
    return thread_block_tile<32>::by_pieces(v, [&](auto p) { return __shfl_sync(mask_, p, int(src), 32, line); });
  }
  template <class T> T shfl_down(T v, unsigned d, int line = __builtin_LINE()) const {
    const unsigned r = thread_rank() + d, src = r < size() ? lane_of(r) : lane();
    return thread_block_tile<32>::by_pieces(v, [&](auto p) { return __shfl_sync(mask_, p, int(src), 32, line); });
  }
  template <class T> T shfl_up(T v, unsigned d, int line = __builtin_LINE()) const {
    const unsigned r = thread_rank(), src = r >= d ? lane_of(r - d) : lane();
    return thread_block_tile<32>::by_pieces(v, [&](auto p) { return __shfl_sync(mask_, p, int(src), 32, line); });
  }
  unsigned ballot(int pred) const {
    const unsigned b = __ballot_sync(mask_, pred);
    unsigned packed = 0, k = 0;
    for (unsigned l = 0; l < 32; ++l)
      if ((mask_ >> l) & 1u) packed |= ((b >> l) & 1u) << k++;
    return packed;
  }
  int any(int pred) const { return __ballot_sync(mask_, pred) != 0; }
  int all(int pred) const { return __ballot_sync(mask_, pred) == (mask_ & __activemask()); }
};
// The lanes of the caller's warp that reach this call together (labkit_cpu.h, coalesce).
inline coalesced_group coalesced_threads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return coalesced_group(::labkit::coalesce(file, line));
}
inline void sync(const coalesced_group& g) { g.sync(); }
// The lanes of a group (a coalesced group, or a tile of up to a warp) with the same label / predicate.
template <class Label> inline coalesced_group labeled_partition(const coalesced_group& g, Label label) {
  return coalesced_group(__match_any_sync(g.mask(), label));
}
template <unsigned N, class Label> inline coalesced_group labeled_partition(const thread_block_tile<N>& t, Label label) {
  static_assert(N <= 32, "labeled_partition splits a tile of up to a warp");
  return coalesced_group(__match_any_sync(t.mask(), label));
}
inline coalesced_group binary_partition(const coalesced_group& g, bool pred) {
  const unsigned b = __ballot_sync(g.mask(), pred);
  return coalesced_group(pred ? (g.mask() & b) : (g.mask() & ~b));
}
template <unsigned N> inline coalesced_group binary_partition(const thread_block_tile<N>& t, bool pred) {
  static_assert(N <= 32, "binary_partition splits a tile of up to a warp");
  const unsigned b = __ballot_sync(t.mask(), pred);
  return coalesced_group(pred ? (t.mask() & b) : (t.mask() & ~b));
}

template <class T> struct plus { T operator()(T a, T b) const { return a + b; } };
template <class T> struct less { T operator()(T a, T b) const { return b < a ? b : a; } };
template <class T> struct greater { T operator()(T a, T b) const { return a < b ? b : a; } };
template <class T> struct bit_and { T operator()(T a, T b) const { return a & b; } };
template <class T> struct bit_or { T operator()(T a, T b) const { return a | b; } };
template <class T> struct bit_xor { T operator()(T a, T b) const { return a ^ b; } };

// cg::reduce over a tile: every thread gets the result (a butterfly of xor shuffles).  A tile of
// several warps: each warp's result in the block's scratch (one slot per warp, per worker as
// __shared__ memory is), then every thread combines its tile's slots in warp order.
template <unsigned N, class T, class Op> inline T reduce(const thread_block_tile<N>& t, T v, Op op) {
  if constexpr (N <= 32) {
    for (unsigned o = N / 2; o > 0; o /= 2) v = op(v, t.shfl_xor(v, int(o)));
    return v;
  } else {
    alignas(T) static thread_local unsigned char scratch[::labkit::RACE_SETS][32 * sizeof(T)];
    T* slot = reinterpret_cast<T*>(scratch[::labkit::tl_worker->race_set]);   // the race check's set
    v = reduce(thread_block_tile<32>{}, v, op);
    const unsigned warp = ::labkit::tl_fiber->warp;
    if (::labkit::tl_fiber->lane == 0) slot[warp] = v;
    t.sync();
    const unsigned first = t.meta_group_rank() * (N / 32), threads = blockDim.x * blockDim.y * blockDim.z;
    const unsigned last = std::min(first + N / 32, (threads + 31) / 32);
    T r = slot[first];
    for (unsigned w = first + 1; w < last; ++w) r = op(r, slot[w]);
    t.sync();   // the slots may be written again by the next reduce
    return r;
  }
}

// cg::reduce over a coalesced group: every lane's value combined in lane order; every lane gets it.
template <class T, class Op> inline T reduce(const coalesced_group& g, T v, Op op) {
  static_assert(sizeof(T) <= 8, "cg::reduce over a coalesced group combines values of up to 8 bytes here");
  return ::labkit::warp_reduce(g.mask(), v, op);
}

// cg::inclusive_scan and exclusive_scan over a tile of up to a warp or a coalesced group: each thread
// gets op over the values of the ranks up to its own (inclusive) or before it (exclusive; rank 0 gets
// T()), combined in rank order (a Hillis-Steele scan of up-shuffles).
template <class G, class T, class Op> inline T labkit_scan(const G& g, T v, Op op, bool inclusive) {
  const unsigned r = g.thread_rank(), n = g.size();
  for (unsigned d = 1; d < n; d *= 2) {
    const T u = g.shfl_up(v, d);
    if (r >= d) v = op(u, v);
  }
  if (inclusive) return v;
  const T before = g.shfl_up(v, 1);
  return r == 0 ? T() : before;
}
template <unsigned N, class T, class Op = plus<T>>
inline T inclusive_scan(const thread_block_tile<N>& t, T v, Op op = Op()) {
  static_assert(N <= 32, "cg::inclusive_scan runs on tiles of up to a warp here");
  return labkit_scan(t, v, op, true);
}
template <unsigned N, class T, class Op = plus<T>>
inline T exclusive_scan(const thread_block_tile<N>& t, T v, Op op = Op()) {
  static_assert(N <= 32, "cg::exclusive_scan runs on tiles of up to a warp here");
  return labkit_scan(t, v, op, false);
}
template <class T, class Op = plus<T>> inline T inclusive_scan(const coalesced_group& g, T v, Op op = Op()) {
  return labkit_scan(g, v, op, true);
}
template <class T, class Op = plus<T>> inline T exclusive_scan(const coalesced_group& g, T v, Op op = Op()) {
  return labkit_scan(g, v, op, false);
}

}  // namespace cooperative_groups
