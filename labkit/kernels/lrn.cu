// lrn.cu -- local response normalization across channels (AlexNet), TensorFlow's semantics:
//
//   y[n, c, h, w] = x[n, c, h, w] / (bias + alpha * sum_{c' = c-r .. c+r, 0 <= c' < C} x[n, c', h, w]^2)^beta
//
// (TensorFlow's alpha multiplies the plain sum; Caffe's is divided by the window size 2r+1.)
//
// lrn_across_channels(x, y, N, C, HW, chunk, bias, alpha, beta), the radius r = LRN_R fixed when the
// module is compiled (labkit.ops.lrn compiles one module per radius): a thread per pixel and chunk of
// `chunk` channels.  It reads its chunk's values, and r more on each side, once each, down the
// channel planes (its warp's neighbours read the neighbouring pixels: every read a contiguous row
// segment), keeps the last 2r+1 of them in registers, and for each channel adds the window's
// squares afresh.  A thread per output instead reads each value 2r+1 times, from different blocks
// (through L2, not L1): at AlexNet's sizes that held it under half of the memory's speed.  A running
// sum that subtracted the square leaving the window would save the adds but keep a NaN (or a large
// value's rounding) in every later channel.  The chunk trades the halo's re-reads (2r per chunk)
// against threads: labkit.ops.lrn takes 4 channels where that leaves enough threads to fill the GPU,
// else 2.
// The grid names the element: blockIdx.z the image, blockIdx.y the chunk, the x dimension the pixel
// (no 64-bit division or remainder decodes a flat index).  beta = 0.75, AlexNet's, takes two
// reciprocal square roots instead of powf (lrn_scale).
// Launch (Python: labkit.ops.lrn.lrn): grid (ceil(HW / 256), ceil(C / chunk), N), block (256,).

#ifndef LRN_R
#define LRN_R 2
#endif

// base^-beta.  AlexNet's beta = 0.75 by two reciprocal square roots (the multi-function unit's fast
// ones; powf or an IEEE sqrtf cost ten times the instructions): with r = base^-1/2, rsqrt(r) =
// base^1/4, so r * (r * rsqrt(r)) = base^-3/4; no intermediate is smaller than the result (no
// underflow before it), within a few ulp.
__device__ __forceinline__ float lrn_scale(float base, float beta) {
  if (beta == 0.75f) {
    const float r = rsqrtf(base);
    return r * (r * rsqrtf(r));
  }
  return powf(base, -beta);
}

extern "C" __global__ void lrn_across_channels(const float* __restrict__ x, float* __restrict__ y, int N, int C,
                                               int HW, int chunk, float bias, float alpha, float beta) {
  const int pix = blockIdx.x * blockDim.x + threadIdx.x;
  if (pix >= HW) return;
  const int c0 = blockIdx.y * chunk, c1 = min(C, c0 + chunk);
  const float* xp = x + (size_t)blockIdx.z * C * HW + pix;   // channel 0 of this pixel
  float* yp = y + (size_t)blockIdx.z * C * HW + pix;
  constexpr int WIN = 2 * LRN_R + 1;
  // v[j]: channel c - r + j of this pixel, 0 outside [0, C) (its square adds nothing).
  float v[WIN];
  v[0] = 0.0f;
#pragma unroll
  for (int j = 0; j < WIN - 1; ++j) {
    const int d = c0 - LRN_R + j;
    v[j + 1] = d >= 0 && d < C ? xp[(size_t)d * HW] : 0.0f;
  }
  for (int c = c0; c < c1; ++c) {
#pragma unroll
    for (int j = 0; j < WIN - 1; ++j) v[j] = v[j + 1];
    const int d = c + LRN_R;
    v[WIN - 1] = d < C ? xp[(size_t)d * HW] : 0.0f;
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < WIN; ++j) sum = fmaf(v[j], v[j], sum);   // fused: the same sums in lrn_max_pool
    yp[(size_t)c * HW] = v[LRN_R] * lrn_scale(fmaf(alpha, sum, bias), beta);
  }
}

// lrn_max_pool: LRN, then a K x K max-pool of stride S (no padding), in one pass: AlexNet's lrn1 +
// pool1 and lrn2 + pool2.  Apart, the LRN writes its whole output and the pool reads it back: at
// batch 1,024 after conv1 that is 2.4 GB of traffic for a result of 0.29 GB.  Fused, the normalized
// values live only in shared memory: each input is read once (plus the halos below) and only the
// pooled output is written.
//   A block takes one image (blockIdx.z), a band of LMP_BAND pooled rows (blockIdx.y) and a chunk of
//   LMP_CHUNK channels (16, 8 or 4: labkit.ops.lrn.fused_chunk) (blockIdx.x, the fastest: the blocks
//   of neighbouring chunks run together and share their halo channels through L2).  Two phases, one
//   barrier between them:
//   1. Normalize.  The threads are the band's input pixels, (LMP_BAND-1)*S + K rows of the plane, one
//      each (a warp reads a contiguous run of the plane).  A thread loads its pixel's LMP_CHUNK + 2r
//      channels at once (all the loads in flight together: the memory's latency is paid once per
//      chunk, not per channel), then writes the LRN of each channel of the chunk, from the 2r+1
//      values around it (the same fused multiply-adds as lrn_across_channels, so the results agree
//      bit for bit), into that channel's plane in shared memory.
//   2. Pool.  A thread takes one pooled column of one channel down the band (consecutive threads,
//      consecutive columns: a warp writes a contiguous run of a row), keeping the maxima of the K
//      input rows of its window in registers: the next pooled row shares K - S of them, so each
//      pooled output reads S new rows of K values, not K x K.
//   The layer's sizes (C, H, W, the band) are compile-time constants (labkit.ops.lrn compiles a module
//   per layer): every division is a multiply, every load's and store's offset an immediate, and the
//   blocks whose channel halo lies inside the image load without a bounds test.
//   How it got here, on an H200 at batch 1,024 (lrn1 + pool1 / lrn2 + pool2, ms, % of the memory
//   floor): a first version pooled after each channel, behind a barrier of its own, with only the
//   band's outputs' threads at work (a fifth of the block): 0.889 / 0.648 ms, 39 / 34%.  Nsight Compute
//   found the SMs' instruction issue busy (80-85% of its peak, integer work first), not the memory
//   (26% of DRAM's).  One barrier, every thread pooling, max.NaN and 4 blocks an SM: 0.743 / 0.451 ms;
//   the column walk: 0.697 / 0.409 ms; the sizes at compile time: 0.391 / 0.243 ms, 90 / 93% of the
//   floor (batch 64: 0.031 / 0.021 ms, 72 / 68%).
//   Neighbouring bands share a row of inputs (the pool's windows overlap), which both normalize.
//   NaN: the LRN keeps it, the max takes it (not fmaxf, which would drop it), as in PyTorch.
// lrn_max_pool(x, y, bias, alpha, beta): x (N, LMP_C, LMP_H, LMP_W), y (N, LMP_C, PH, PW),
//   PH = (LMP_H - K) / S + 1, PW likewise.  Launch (labkit.ops.lrn.lrn_max_pool): grid
//   (ceil(C / LMP_CHUNK), ceil(PH / LMP_BAND), N), block (((LMP_BAND-1)*S + K) * W rounded up to a warp,),
//   dynamic shared memory LMP_CHUNK * ((LMP_BAND-1)*S + K) * W floats (labkit.ops.lrn.fused_shared_bytes).
//   Compile-time: LRN_R, LMP_K, LMP_S, LMP_CHUNK, LMP_C, LMP_H, LMP_W, LMP_BAND.

#ifndef LMP_K
#define LMP_K 3
#endif
#ifndef LMP_S
#define LMP_S 2
#endif
#ifndef LMP_CHUNK
#define LMP_CHUNK 8
#endif
#ifndef LMP_C
#define LMP_C 96
#endif
#ifndef LMP_H
#define LMP_H 55
#endif
#ifndef LMP_W
#define LMP_W 55
#endif
#ifndef LMP_BAND
#define LMP_BAND 4
#endif
// Blocks of 512 threads (labkit.ops.lrn.MAX_FUSED_THREADS) that an SM must hold at once: the registers
// a thread may use follow (4: 32 of them, where the compiler would take 40-48 and fit 2 or 3 blocks).
#ifndef LMP_MIN_BLOCKS
#define LMP_MIN_BLOCKS 4
#endif

namespace lmp {
constexpr int C = LMP_C, H = LMP_H, W = LMP_W, K = LMP_K, S = LMP_S, CHUNK = LMP_CHUNK, BAND = LMP_BAND;
constexpr int PH = (H - K) / S + 1, PW = (W - K) / S + 1;
constexpr int ROWS = (BAND - 1) * S + K, NPIX = ROWS * W;   // the band's input rows and pixels
constexpr int LOADS = CHUNK + 2 * LRN_R;                      // a thread's channels: the chunk and its halo
constexpr size_t PLANE = (size_t)H * W;
static_assert(H >= K && W >= K, "the pooling window does not fit the plane");
}  // namespace lmp

// The larger of a and b, NaN if either is (PyTorch's max-pool keeps a NaN; fmaxf would drop it): one
// max.NaN instruction on sm_80 and later, where the comparison and select take three.  The executor
// takes the comparison.
__device__ __forceinline__ float max_nan(float a, float b) {
#if defined(LABKIT_CUDA_ARCH)
  return (b > a || b != b) ? b : a;
#elif __CUDA_ARCH__ >= 800
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return (b > a || b != b) ? b : a;
#endif
}

// The max of K values one apart (a window's row).
__device__ __forceinline__ float row_max(const float* p) {
  float m = p[0];
#pragma unroll
  for (int q = 1; q < LMP_K; ++q) m = max_nan(m, p[q]);
  return m;
}

extern "C" __global__ void __launch_bounds__(512, LMP_MIN_BLOCKS)
lrn_max_pool(const float* __restrict__ x, float* __restrict__ y, float bias, float alpha, float beta) {
  using namespace lmp;
  extern __shared__ float normed[];                 // CHUNK planes of NPIX normalized values
  constexpr int WIN = 2 * LRN_R + 1;
  const int t = threadIdx.x, ph0 = blockIdx.y * BAND, h0 = ph0 * S;
  const int c0 = blockIdx.x * CHUNK;
  if (t < NPIX && h0 + t / W < H) {                 // this thread's input pixel is in the plane
    const float* xp = x + (size_t)blockIdx.z * C * PLANE + (size_t)h0 * W + t;   // its channel 0
    // v[j]: channel c0 - r + j of this pixel, 0 outside [0, C) (its square adds nothing).
    float v[LOADS];
    if (c0 >= LRN_R && c0 - LRN_R + LOADS <= C) {   // the whole halo inside the image: no test
      const float* xc = xp + (size_t)(c0 - LRN_R) * PLANE;
#pragma unroll
      for (int j = 0; j < LOADS; ++j) v[j] = xc[j * PLANE];
    } else {
#pragma unroll
      for (int j = 0; j < LOADS; ++j) {
        const int d = c0 - LRN_R + j;
        v[j] = d >= 0 && d < C ? xp[(size_t)d * PLANE] : 0.0f;
      }
    }
    // Channels past C (the last chunk) are normalized too, from zeros, and never pooled.
#pragma unroll
    for (int i = 0; i < CHUNK; ++i) {
      float sum = 0.0f;   // fmaf as in lrn_across_channels (a compiler may not split one into * and +)
#pragma unroll
      for (int j = 0; j < WIN; ++j) sum = fmaf(v[i + j], v[i + j], sum);
      normed[i * NPIX + t] = v[i + LRN_R] * lrn_scale(fmaf(alpha, sum, bias), beta);
    }
  }
  __syncthreads();
  // Thread t: pooled column t % PW of channel t / PW, then every `lanes`-th channel after it.
  constexpr int lanes = (((NPIX + 31) / 32) * 32) / PW;   // blockDim.x / PW: at least 1 (NPIX >= BAND * PW)
  if (t >= lanes * PW) return;                      // no barrier follows
  const int pcol = t % PW;
  for (int i = t / PW; i < CHUNK && c0 + i < C; i += lanes) {
    const float* col = normed + i * NPIX + pcol * S;
    float rm[K];                                    // the maxima of the window's K input rows
#pragma unroll
    for (int k = 0; k < K; ++k) rm[k] = row_max(col + k * W);
    float* yp = y + (((size_t)blockIdx.z * C + c0 + i) * PH + ph0) * PW + pcol;
#pragma unroll
    for (int pr = 0; pr < BAND; ++pr) {
      if (ph0 + pr >= PH) break;                    // the last band, cut short
      float best = rm[0];
#pragma unroll
      for (int k = 1; k < K; ++k) best = max_nan(best, rm[k]);
      yp[pr * PW] = best;
      if (pr + 1 < BAND && ph0 + pr + 1 < PH) {     // the next pooled row: K - S rows kept, S read
#pragma unroll
        for (int k = 0; k < K; ++k) rm[k] = k + S < K ? rm[k + S] : row_max(col + ((pr + 1) * S + k) * W);
      }
    }
  }
}
