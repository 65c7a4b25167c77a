// libcu++'s asynchronous primitives as CUDA programs use them: cuda::barrier (<cuda/barrier>),
// cuda::memcpy_async with a barrier or a pipeline (<cuda/pipeline>), and the C-style primitives
// (<cuda_pipeline.h>); tests/test_cpu_executor_async_copy.py runs each on the CPU executor against
// NumPy, and on the GPU where there is one.
#include <cooperative_groups.h>
#include <cuda/barrier>
#include <cuda/pipeline>
#include <cuda_pipeline.h>
namespace cg = cooperative_groups;

// Warp 0 produces 32 values a round into one buffer, warp 1 consumes them: `full` says a round is
// written, `empty` that it is read (both count the 64 threads).  out = 2 x + 1.
extern "C" __global__ void aw_producer_consumer(const float* __restrict__ x, float* __restrict__ out, int rounds) {
  __shared__ cuda::barrier<cuda::thread_scope_block> full, empty;
  __shared__ float buf[32];
  if (threadIdx.x == 0) {
    init(&full, blockDim.x);
    init(&empty, blockDim.x);
  }
  __syncthreads();
  const int lane = threadIdx.x % 32;
  const float* xb = x + blockIdx.x * rounds * 32;
  float* ob = out + blockIdx.x * rounds * 32;
  for (int r = 0; r < rounds; ++r) {
    if (threadIdx.x < 32) {
      buf[lane] = 2.0f * xb[r * 32 + lane];
      (void)full.arrive();
      empty.arrive_and_wait();        // the consumers have read this round: the buffer may be refilled
    } else {
      full.arrive_and_wait();
      ob[r * 32 + lane] = buf[lane] + 1.0f;
      (void)empty.arrive();
    }
  }
}

// Phases with split arrive/wait: each thread writes its value, arrives, does other work, waits, then
// reads its neighbours'; in the last phase the upper third drops out (arrive_and_drop) and the rest
// go on once more with the barrier counting only them.  out[p][i] = s[i-1] + s[i+1] of phase p.
extern "C" __global__ void aw_phases(const float* __restrict__ x, float* __restrict__ out, int phases) {
  __shared__ cuda::barrier<cuda::thread_scope_block> bar;
  __shared__ float s[96];
  if (threadIdx.x == 0) init(&bar, blockDim.x);
  __syncthreads();
  const int n = blockDim.x, i = threadIdx.x;
  for (int p = 0; p < phases; ++p) {
    s[i] = x[p * n + i];
    auto token = bar.arrive();
    const float own = x[p * n + i] * 0.5f;     // work between the arrival and the wait
    bar.wait(std::move(token));
    out[p * n + i] = s[(i + n - 1) % n] + s[(i + 1) % n] + own;
    bar.arrive_and_wait();                     // everyone has read s before it is overwritten
  }
  if (i >= 2 * n / 3) {
    bar.arrive_and_drop();
    return;
  }
  const int m = 2 * n / 3;
  s[i] = x[phases * n + i];
  bar.arrive_and_wait();
  out[phases * n + i] = s[(i + m - 1) % m] + s[(i + 1) % m];
}

// Thread 5 returns without arriving: the phase never completes.
extern "C" __global__ void aw_never_completes(float* out) {
  __shared__ cuda::barrier<cuda::thread_scope_block> bar;
  if (threadIdx.x == 0) init(&bar, blockDim.x);
  __syncthreads();
  if (threadIdx.x == 5) return;
  bar.arrive_and_wait();
  out[threadIdx.x] = 1.0f;
}

// No init(): the barrier is shared memory's undefined bytes.
extern "C" __global__ void aw_without_init(float* out) {
  __shared__ cuda::barrier<cuda::thread_scope_block> bar;
  bar.arrive_and_wait();
  out[threadIdx.x] = 1.0f;
}

// A block's row copied into shared memory by memcpy_async, completed by a barrier: by each thread
// (its own float4) or by the block at once (cooperative_groups).  out[i] = row reversed.
extern "C" __global__ void barrier_copy(const float* __restrict__ x, float* __restrict__ out, int whole_block) {
  __shared__ cuda::barrier<cuda::thread_scope_block> bar;
  __shared__ alignas(16) float s[256];
  cg::thread_block block = cg::this_thread_block();
  if (threadIdx.x == 0) init(&bar, blockDim.x);
  block.sync();
  const int n = 4 * blockDim.x;
  const float* row = x + blockIdx.x * n;
  if (whole_block)
    cuda::memcpy_async(block, s, row, cuda::aligned_size_t<16>(sizeof(float) * n), bar);
  else
    cuda::memcpy_async(&s[4 * threadIdx.x], &row[4 * threadIdx.x], cuda::aligned_size_t<16>(sizeof(float4)), bar);
  bar.arrive_and_wait();
  for (int k = threadIdx.x; k < n; k += blockDim.x) out[blockIdx.x * n + k] = s[n - 1 - k];
}

// A thread's own pipeline of `stages` tiles in flight: tile t of the input, one float per thread,
// copied ahead into a ring of shared buffers; out[t][i] = tile t's element i+1 (mod n) times 3.
// wait_prior: pipeline_consumer_wait_prior<stages - 1> in place of consumer_wait.
extern "C" __global__ void pipe_thread(const float* __restrict__ xg, float* __restrict__ outg, int tiles, int wait_prior) {
  const float* x = xg + blockIdx.x * tiles * blockDim.x;   // each block its own tiles
  float* out = outg + blockIdx.x * tiles * blockDim.x;
  constexpr int stages = 3;
  __shared__ float s[stages][128];
  const int n = blockDim.x, i = threadIdx.x;
  cuda::pipeline<cuda::thread_scope_thread> pipe = cuda::make_pipeline();
  const auto one = cuda::aligned_size_t<alignof(float)>(sizeof(float));
  int fetched = 0;
  for (; fetched < stages && fetched < tiles; ++fetched) {
    pipe.producer_acquire();
    cuda::memcpy_async(&s[fetched % stages][i], &x[fetched * n + i], one, pipe);
    pipe.producer_commit();
  }
  for (int t = 0; t < tiles; ++t) {
    if (wait_prior && t + stages <= tiles) cuda::pipeline_consumer_wait_prior<stages - 1>(pipe);
    else if (wait_prior) cuda::pipeline_consumer_wait_prior<0>(pipe);
    else pipe.consumer_wait();
    __syncthreads();                     // every thread's copy of tile t is in
    out[t * n + i] = 3.0f * s[t % stages][(i + 1) % n];
    __syncthreads();                     // tile t is read: its buffer may be refilled
    pipe.consumer_release();
    if (fetched < tiles) {
      pipe.producer_acquire();
      cuda::memcpy_async(&s[fetched % stages][i], &x[fetched * n + i], one, pipe);
      pipe.producer_commit();
      ++fetched;
    }
  }
}

// Reads the destination before waiting for the copy: a bug the executor shows (the copy is made at
// the wait, so the read sees shared memory's undefined bytes).
extern "C" __global__ void pipe_read_too_soon(const float* __restrict__ x, float* __restrict__ early, float* __restrict__ late) {
  __shared__ float s[64];
  cuda::pipeline<cuda::thread_scope_thread> pipe = cuda::make_pipeline();
  cuda::memcpy_async(&s[threadIdx.x], &x[threadIdx.x], sizeof(float), pipe);
  pipe.producer_commit();
  early[threadIdx.x] = s[threadIdx.x];
  pipe.consumer_wait();
  late[threadIdx.x] = s[threadIdx.x];
  pipe.consumer_release();
}

// A block's shared pipeline with roles, as globalToShmemAsyncCopy's: the last warp produces (copies
// tiles of 32 floats into a ring of `stages` buffers), the other warps consume.  out[t][j] = sum of
// tile t's 32 values, j + 1 times, for consumer thread j.
extern "C" __global__ void pipe_block_roles(const float* __restrict__ x, float* __restrict__ out, int tiles) {
  constexpr int stages = 2;
  __shared__ float s[stages][32];
  __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, stages> state;
  cg::thread_block block = cg::this_thread_block();
  const int consumers = blockDim.x - 32;
  const bool producer = threadIdx.x >= consumers;
  auto pipe = cuda::make_pipeline(block, &state, producer ? cuda::pipeline_role::producer : cuda::pipeline_role::consumer);
  for (int t = 0; t < tiles; ++t) {
    if (producer) {
      const int lane = threadIdx.x - consumers;
      pipe.producer_acquire();
      cuda::memcpy_async(&s[t % stages][lane], &x[t * 32 + lane], cuda::aligned_size_t<4>(sizeof(float)), pipe);
      pipe.producer_commit();
    } else {
      pipe.consumer_wait();
      float sum = 0.0f;
      for (int k = 0; k < 32; ++k) sum += s[t % stages][k];
      out[t * consumers + threadIdx.x] = sum * (threadIdx.x + 1);
      pipe.consumer_release();
    }
  }
}

// A block's shared pipeline where every thread produces and consumes: tile t copied by the whole
// block (its first thread's memcpy_async for all), out[t][i] = tile t's element n-1-i.
extern "C" __global__ void pipe_block_all(const float* __restrict__ xg, float* __restrict__ outg, int tiles) {
  const float* x = xg + blockIdx.x * tiles * blockDim.x;   // each block its own tiles
  float* out = outg + blockIdx.x * tiles * blockDim.x;
  constexpr int stages = 2;
  __shared__ alignas(16) float s[stages][128];
  __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, stages> state;
  cg::thread_block block = cg::this_thread_block();
  auto pipe = cuda::make_pipeline(block, &state);
  const int n = blockDim.x;
  for (int t = 0; t < tiles; ++t) {
    pipe.producer_acquire();
    cuda::memcpy_async(block, s[t % stages], &x[t * n], cuda::aligned_size_t<16>(sizeof(float) * n), pipe);
    pipe.producer_commit();
    pipe.consumer_wait();
    out[t * n + threadIdx.x] = s[t % stages][n - 1 - threadIdx.x];
    pipe.consumer_release();
  }
}

// The C-style primitives: two batches in flight, the older waited for with __pipeline_wait_prior(1).
// out[t][i] = tile t's element i+1 (mod n) + t.
extern "C" __global__ void pipe_primitives(const float* __restrict__ xg, float* __restrict__ outg, int tiles) {
  const float* x = xg + blockIdx.x * tiles * blockDim.x;   // each block its own tiles
  float* out = outg + blockIdx.x * tiles * blockDim.x;
  __shared__ float s[2][128];
  const int n = blockDim.x, i = threadIdx.x;
  __pipeline_memcpy_async(&s[0][i], &x[i], sizeof(float));
  __pipeline_commit();
  for (int t = 0; t < tiles; ++t) {
    if (t + 1 < tiles) __pipeline_memcpy_async(&s[(t + 1) % 2][i], &x[(t + 1) * n + i], sizeof(float));
    __pipeline_commit();                 // (an empty batch on the last tile, as CUDA allows)
    __pipeline_wait_prior(1);            // tile t is in; tile t + 1 may still be in flight
    __syncthreads();
    out[t * n + i] = s[t % 2][(i + 1) % n] + t;
    __syncthreads();
  }
}

// The last thread's copy of two floats runs past the shared array: the memory check reports it at the
// wait that makes the copy.
extern "C" __global__ void pipe_copy_past_end(const float* __restrict__ x, float* __restrict__ out) {
  __shared__ float s[64];
  cuda::pipeline<cuda::thread_scope_thread> pipe = cuda::make_pipeline();
  cuda::memcpy_async(&s[threadIdx.x], &x[threadIdx.x], 2 * sizeof(float), pipe);
  pipe.producer_commit();
  pipe.consumer_wait();
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x];
}

// cooperative_groups' collective copies: each warp copies two tiles of 32 floats (the second in flight
// while it waits for the first, wait_prior<1>), the block a row of its own (cg::wait).
// out[w][j] = tile 2w's element j + tile 2w+1's element 31-j + the row's element w*32+j.
#include <cooperative_groups/memcpy_async.h>
extern "C" __global__ void cg_copies(const float* __restrict__ tiles, const float* __restrict__ rows, float* __restrict__ out) {
  __shared__ alignas(16) float t[8][2][32];
  __shared__ alignas(16) float row[256];
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  const int w = warp.meta_group_rank(), j = warp.thread_rank(), n = block.size();
  const float* mine = tiles + (blockIdx.x * 8 + w) * 64;
  cg::memcpy_async(warp, t[w][0], mine, cuda::aligned_size_t<16>(32 * sizeof(float)));
  cg::memcpy_async(warp, t[w][1], 32, mine + 32, 32);
  cg::memcpy_async(block, row, rows + blockIdx.x * n, sizeof(float) * n);
  cg::wait_prior<2>(warp);         // the warp's first tile is in
  const float first = t[w][0][j];
  cg::wait(block);                 // and the rest
  out[blockIdx.x * n + w * 32 + j] = first + t[w][1][31 - j] + row[w * 32 + j];
}
