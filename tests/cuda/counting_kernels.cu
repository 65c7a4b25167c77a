// Access patterns whose counts are known by construction, for labkit.counters (tests/test_counters.py).
// Each is launched with whole warps; the comments give what one warp instruction costs.

// y[i] = x[i * stride]: stride 1 reads 4 sectors per warp (128 bytes), stride 2 reads 8, stride 32
// reads 32 (one per lane); the store is always 4.
extern "C" __global__ void copy_strided(const float* __restrict__ x, float* __restrict__ y, int stride, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i * stride];
}

// Lane t writes, then reads, word (t * stride) % 1024 of a shared array: stride 1 is conflict-free,
// stride 2 puts two words in each used bank (2 wavefronts), stride 32 all in bank 0 (32), stride 0
// is one word for every lane (a broadcast: 1).
extern "C" __global__ void shared_strided(float* __restrict__ y, int stride) {
  __shared__ float s[1024];
  int t = threadIdx.x;
  s[(t * stride) % 1024] = float(t);
  __syncthreads();
  y[blockIdx.x * blockDim.x + t] = s[(t * stride) % 1024];
}

// 128-bit shared accesses: lane t reads element t * stride of a float4 array.  Served in four phases
// of 8 lanes: stride 1 costs 4 wavefronts (none a conflict), stride 2 costs 8.
extern "C" __global__ void shared_float4(float4* __restrict__ y, int stride) {
  __shared__ float4 s[256];
  int t = threadIdx.x;
  s[(t * stride) % 256] = make_float4(t, t + 1, t + 2, t + 3);
  __syncthreads();
  y[blockIdx.x * blockDim.x + t] = s[(t * stride) % 256];
}

// k fused multiply-adds per thread in the loop, then one add and one multiply.
extern "C" __global__ void fma_chain(const float* __restrict__ x, float* __restrict__ y, int k) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float a = x[i], acc = 0.0f;
  for (int j = 0; j < k; ++j) acc = acc * a + 1.0f;
  y[i] = (acc + a) * a;
}

// Lanes that run a loop a different number of times: even lanes once, odd lanes twice.  The first
// iteration is one instruction of all 32 lanes (4 sectors), the second one of the 16 odd lanes, whose
// addresses still span the same 128 bytes (4 sectors): 2 requests, 8 sectors per warp.
extern "C" __global__ void ragged(const float* __restrict__ x, float* __restrict__ y) {
  const int t = threadIdx.x, lane = t % 32;
  float acc = 0.0f;
  for (int j = 0; j <= (t & 1); ++j) acc += x[j * 32 + lane];
  y[blockIdx.x * blockDim.x + t] = acc;
}

// Lanes that reach one load at different points of their own sequences: odd lanes first make a
// load of their own (1 request, floats 65..95: 4 sectors), then every lane runs the loop 1 + lane / 8
// times.  The loop's j-th iteration is one instruction of the lanes that run it, whatever each
// did before: j = 0, all 32 lanes (floats 0..31: 4 sectors); j = 1, lanes 8..31 (floats 40..63:
// 3); j = 2, lanes 16..31 (floats 80..95: 2); j = 3, lanes 24..31 (floats 120..127: 1).  Per warp:
// 5 requests, 14 sectors; the sectors read, 12 distinct (0-3, 5-11, 15).
extern "C" __global__ void diverge_then_loop(const float* __restrict__ x, float* __restrict__ y) {
  const int t = threadIdx.x, lane = t % 32;
  float acc = 0.0f;
  if (lane & 1) acc = x[64 + lane];
  for (int j = 0; j < 1 + lane / 8; ++j) acc += x[j * 32 + lane];
  y[blockIdx.x * blockDim.x + t] = acc;
}

// One fused multiply-add, then an expf and a division: work a GPU does with FFMA/FMUL sequences.
// nvcc 13's sm_90 code for it runs 10 FFMA, 1 FADD and 1 FMUL a thread (its division's slow path aside).
extern "C" __global__ void with_maths(const float* __restrict__ x, float* __restrict__ y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const float v = x[i] * x[i] + 1.0f;
  y[i] = expf(v) / v;
}

// A sum of expf (its last FMUL fused with the add, as nvcc fuses it: 5 FFMA and 1 FADD an element),
// then a tanhf, which the counting does not model: its record says how many ran.
extern "C" __global__ void exp_sum_tanh(const float* __restrict__ x, float* __restrict__ y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  float sum = 0.0f;
  for (int j = 0; j < n; ++j) sum += expf(x[j]);
  y[i] = tanhf(sum);
}

// A row of `width` floats per lane, read into registers in an unrolled loop (as a tiled GEMM reads a
// thread's rows): nvcc makes one LDS.64 (width 2) or LDS.128 (width 4) of it where the row starts
// aligned, here when `skew` is 0.  Lane t's row starts at word t * width + skew.  Aligned, the warp's
// vector load reads 32 * width consecutive words: 2 wavefronts (width 2: two half-warps of 128
// bytes), 4 (width 4: each half-warp 256 bytes); no conflict.  Skewed, `width` separate 32-bit loads
// of stride `width`: width wavefronts each, width - 1 of them conflicts.
template <int WIDTH>
__device__ __forceinline__ void read_rows(float* __restrict__ y, int skew) {
  __shared__ float s[32 * WIDTH + 4];
  const int t = threadIdx.x;
  for (int i = t; i < 32 * WIDTH + 4; i += 32) s[i] = float(i);
  __syncthreads();
  float r[WIDTH];
#pragma unroll
  for (int j = 0; j < WIDTH; ++j) r[j] = s[t * WIDTH + skew + j];
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < WIDTH; ++j) sum += r[j];
  y[t] = sum;
}
extern "C" __global__ void shared_rows2(float* __restrict__ y, int skew) { read_rows<2>(y, skew); }
extern "C" __global__ void shared_rows4(float* __restrict__ y, int skew) { read_rows<4>(y, skew); }

// A float4 that each half-warp reads as one broadcast (lanes 0-15 group 0, lanes 16-31 group 1):
// 2 wavefronts, none a conflict (two phases of 16 lanes, each one 16-byte word group).
extern "C" __global__ void shared_float4_halves(float4* __restrict__ y) {
  __shared__ float4 s[2];
  const int t = threadIdx.x;
  if (t < 2) s[t] = make_float4(t, t, t, t);
  __syncthreads();
  y[t] = s[t / 16];
}

// A __shared__ array declared with __align__: counted as any other (stride 1: one wavefront for the
// store, one for the load).
extern "C" __global__ void shared_aligned(float* __restrict__ y) {
  __shared__ __align__(16) float s[32];
  const int t = threadIdx.x;
  s[t] = float(t);
  __syncthreads();
  y[t] = s[31 - t];
}

// Rows of 2 floats as in read_rows, in a loop that lanes 0-7 run twice (units 32-39), the others
// once: the lanes' logs differ, and the pairs are still one LDS.64 each.  First pass: 32 lanes, 64
// consecutive words, 2 wavefronts; second: 8 lanes in the first half-warp, 16 words, 1.
extern "C" __global__ void shared_rows2_ragged(float* __restrict__ y) {
  __shared__ float s[80];
  const int t = threadIdx.x;
  for (int i = t; i < 80; i += 32) s[i] = float(i);
  __syncthreads();
  float sum = 0.0f;
  for (int u = t; u < 40; u += 32) {
    float r[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) r[j] = s[u * 2 + j];
    sum += r[0] + r[1];
  }
  y[t] = sum;
}

// One load instruction that reads another array from step to step, the same in every lane: `order`
// names each step's array with two bits (0: a, 1: b, 2: the shared array, 3: the thread's own
// array, not counted), steps being a run-time count so that the loop stays one load.  64 threads.
extern "C" __global__ void pick_source(const float* a, const float* b, float* __restrict__ y, unsigned order,
                                       int steps) {
  __shared__ float s[64];
  float mine[64];
  const int t = threadIdx.x;
  s[t] = float(t);
  mine[t] = 100.0f;
  __syncthreads();
  float sum = 0.0f;
  for (int j = 0; j < steps; ++j) {
    const unsigned k = (order >> (2 * j)) & 3u;
    const float* p = k == 0 ? a : k == 1 ? b : k == 2 ? s : mine;
    sum += p[t];
  }
  y[t] = sum;
}

// Lanes in the same sequence of sites whose accesses a warp instruction cannot count lane by lane
// in order: x read backwards (lane 8 starts below lane 0's sector), and one load whose lanes read
// two arrays (odd lanes a, even lanes b).  64 threads.
extern "C" __global__ void backwards_and_mixed(const float* __restrict__ x, const float* a, const float* b,
                                               float* __restrict__ y) {
  const int t = threadIdx.x;
  const float* p = (t & 1) ? a : b;
  y[t] = x[63 - t] + p[t];
}

// The fast intrinsics: __expf and __fdividef are a MUFU instruction and one FMUL each on a GPU.
extern "C" __global__ void fast_maths(const float* __restrict__ x, float* __restrict__ y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  y[i] = __fdividef(__expf(x[i]), x[i]);
}
