// What real CUDA teaching code uses (NVIDIA's samples, llm.c's dev/cuda), one small kernel each: the CPU
// executor must run these unchanged, and the GPU runs the same file (tests/test_cpu_executor_cuda_code.py
// compares both with NumPy).
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

// A block reduction with cooperative groups: warp tiles reduce with shuffles, the block through
// shared memory (llm.c's softmax and layernorm kernels do this).
extern "C" __global__ void cg_block_sum(const float* __restrict__ x, float* __restrict__ out, int n) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  __shared__ float partial[32];
  float v = 0.0f;
  for (int i = block.thread_rank(); i < n; i += block.size()) v += x[i];
  v = cg::reduce(warp, v, cg::plus<float>());
  if (warp.thread_rank() == 0) partial[warp.meta_group_rank()] = v;
  block.sync();
  if (warp.meta_group_rank() == 0) {
    float w = warp.thread_rank() < warp.meta_group_size() ? partial[warp.thread_rank()] : 0.0f;
    w = cg::reduce(warp, w, cg::plus<float>());
    if (warp.thread_rank() == 0) out[blockIdx.x] = w;
  }
}

// Tiles of 8: each tile's maximum by shfl_down, and its rank, per thread.
extern "C" __global__ void cg_tile8(const int* __restrict__ x, int* __restrict__ tile_max, int* __restrict__ rank) {
  cg::thread_block_tile<8> t = cg::tiled_partition<8>(cg::this_thread_block());
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = x[i];
  for (int o = 4; o > 0; o /= 2) v = max(v, t.shfl_down(v, o));
  v = t.shfl(v, 0);
  tile_max[i] = cg::reduce(t, x[i], cg::greater<int>()) == v ? v : -1;
  rank[i] = t.thread_rank() + 100 * t.meta_group_rank();
}

// Warp reductions and matches (sm_80), and the counting barriers.
extern "C" __global__ void warp_reduce_match(const unsigned* __restrict__ x, unsigned* __restrict__ out) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned v = x[i];
  out[6 * i + 0] = __reduce_add_sync(0xffffffffu, v);
  out[6 * i + 1] = __reduce_max_sync(0xffffffffu, v);
  out[6 * i + 2] = __reduce_or_sync(0xffffffffu, v);
  out[6 * i + 3] = __match_any_sync(0xffffffffu, v % 4);
  out[6 * i + 4] = __syncthreads_count(v % 3 == 0);
  out[6 * i + 5] = __syncthreads_or(v == 7) * 2 + __syncthreads_and(v < 1000);
}

// atomicInc / atomicDec (a ring counter), and loads and stores with cache hints.
extern "C" __global__ void ring_and_hints(const float* __restrict__ x, float* __restrict__ y, unsigned* counters, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    atomicInc(&counters[0], 9u);        // counts 0..9, then wraps to 0
    atomicDec(&counters[1], 4u);        // from 0: to 4, then 3, 2, 1, 0, 4, ...
    __stcs(&y[i], 2.0f * __ldcs(&x[i]) + __ldcg(&x[i]));
  }
}

// A NULL pointer argument: the optional bias, read only when given.  And __CUDA_ARCH__, defined in
// device code.
extern "C" __global__ void optional_bias(const float* __restrict__ x, const float* __restrict__ bias,
                                         float* __restrict__ y, int* __restrict__ arch, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + (bias ? bias[i] : 0.0f);
#ifdef __CUDA_ARCH__
  if (i == 0) arch[0] = __CUDA_ARCH__ >= 800 ? 1 : 2;
#else
  if (i == 0) arch[0] = 3;
#endif
}

// A volatile shared array: the classic warp-synchronous tail of a reduction (NVIDIA's reduction
// sample), with __syncwarp between steps as sm_70 and later need.
extern "C" __global__ void volatile_tail(const float* __restrict__ x, float* __restrict__ out) {
  __shared__ volatile float s[64];
  const unsigned t = threadIdx.x;
  s[t] = x[blockIdx.x * 64 + t] + x[blockIdx.x * 64 + t + 32];
  __syncwarp();
  for (unsigned o = 16; o > 0; o >>= 1) {
    if (t < o) s[t] += s[t + o];
    __syncwarp();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

// In place: one array passed twice (x plays input and output), as a bitonic merge step does.
extern "C" __global__ void add_one(const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}
