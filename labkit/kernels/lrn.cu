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
//   A block takes one image (blockIdx.z), a band of `band` pooled rows (blockIdx.y) and a chunk of
//   LMP_CHUNK channels (16, 8 or 4: labkit.ops.lrn.fused_chunk) (blockIdx.x, the fastest: the blocks
//   of neighbouring chunks run together and share their halo channels through L2).  Two phases, one
//   barrier between them:
//   1. Normalize.  The threads are the band's input pixels, (band-1)*S + K rows of the plane, one
//      each (a warp reads a contiguous run of the plane).  A thread loads its pixel's LMP_CHUNK + 2r
//      channels at once (all the loads in flight together: the memory's latency is paid once per
//      chunk, not per channel), then writes the LRN of each channel of the chunk, from the 2r+1 values
//      around it (the same fused multiply-adds as lrn_across_channels, so the results agree bit for
//      bit), into that channel's plane in shared memory.
//   2. Pool.  The threads take the pooled outputs, a thread one position of the band in every
//      few channels, consecutive threads consecutive positions (a warp writes a contiguous run of
//      the output): the max over one window of the shared planes.
//   An earlier version pooled after each channel, behind a barrier of its own, with only the band's
//   band * PW outputs' threads at work (a fifth of the block): 16 barriers per chunk, 35-40% of the
//   memory floor on an H200, where Nsight Compute found the SM's issue (not the memory) at 80-85% of
//   its peak.  Fewer instructions per output (one barrier, divisions once per thread, max.NaN) and
//   4 blocks an SM made it 0.889 -> 0.743 ms (lrn1 + pool1, batch 1,024; 47% of the floor) and
//   0.648 -> 0.451 ms (lrn2 + pool2; 49%).
//   Neighbouring bands share a row of inputs (the pool's windows overlap), which both normalize.
//   NaN: the LRN keeps it, the max takes it (not fmaxf, which would drop it), as in PyTorch.
// lrn_max_pool(x, y, C, H, W, PH, PW, band, bias, alpha, beta): x (N, C, H, W), y (N, C, PH, PW),
//   PH = (H - K) / S + 1, PW likewise.  Launch (labkit.ops.lrn.lrn_max_pool): grid
//   (ceil(C / LMP_CHUNK), ceil(PH / band), N), block (((band-1)*S + K) * W rounded up to a warp,),
//   dynamic shared memory LMP_CHUNK * ((band-1)*S + K) * W floats (labkit.ops.lrn.fused_shared_bytes).
//   Compile-time: LRN_R, LMP_K, LMP_S, LMP_CHUNK.

#ifndef LMP_K
#define LMP_K 3
#endif
#ifndef LMP_S
#define LMP_S 2
#endif
#ifndef LMP_CHUNK
#define LMP_CHUNK 8
#endif
// Blocks of 512 threads (labkit.ops.lrn.MAX_FUSED_THREADS) that an SM must hold at once: the registers
// a thread may use follow (4: 32 of them, where the compiler would take 48 and fit only 2 blocks).  On
// an H200 at AlexNet's two sizes, batch 1,024, 4 was the fastest of 2, 3 and 4 (lrn1 + pool1 0.743
// against 0.778 and 0.812 ms; lrn2 + pool2 0.451 against 0.486 and 0.512).
#ifndef LMP_MIN_BLOCKS
#define LMP_MIN_BLOCKS 4
#endif

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

extern "C" __global__ void __launch_bounds__(512, LMP_MIN_BLOCKS)
lrn_max_pool(const float* __restrict__ x, float* __restrict__ y, int C, int H, int W, int PH, int PW, int band,
             float bias, float alpha, float beta) {
  extern __shared__ float normed[];                 // LMP_CHUNK planes of rows * W normalized values
  constexpr int WIN = 2 * LRN_R + 1, LOADS = LMP_CHUNK + 2 * LRN_R;
  const int rows = (band - 1) * LMP_S + LMP_K, npix = rows * W;
  const int t = threadIdx.x, ph0 = blockIdx.y * band, h0 = ph0 * LMP_S;
  const int c0 = blockIdx.x * LMP_CHUNK;
  const size_t plane = (size_t)H * W;
  if (t < npix && h0 + t / W < H) {                 // this thread's input pixel is in the plane
    const float* xp = x + (size_t)blockIdx.z * C * plane + (size_t)h0 * W + t;
    // v[j]: channel c0 - r + j of this pixel, 0 outside [0, C) (its square adds nothing).
    float v[LOADS];
#pragma unroll
    for (int j = 0; j < LOADS; ++j) {
      const int d = c0 - LRN_R + j;
      v[j] = d >= 0 && d < C ? xp[(size_t)d * plane] : 0.0f;
    }
    // Channels past C (the last chunk) are normalized too, from zeros, and never pooled.
#pragma unroll
    for (int i = 0; i < LMP_CHUNK; ++i) {
      float sum = 0.0f;   // fmaf as in lrn_across_channels (a compiler may not split one into * and +)
#pragma unroll
      for (int j = 0; j < WIN; ++j) sum = fmaf(v[i + j], v[i + j], sum);
      normed[i * npix + t] = v[i + LRN_R] * lrn_scale(fmaf(alpha, sum, bias), beta);
    }
  }
  __syncthreads();
  // A thread keeps one pooled position of the band (r = t mod band * PW) and takes it in every
  // `lanes`-th channel from t / (band * PW): its divisions are done once, not per output.  The band's
  // rows are contiguous in y, so consecutive threads write consecutive addresses.
  const int band_outs = band * PW, lanes = blockDim.x / band_outs;
  if (t >= lanes * band_outs) return;               // no barrier follows
  const int r = t % band_outs, prow = r / PW, pcol = r - prow * PW;
  if (ph0 + prow >= PH) return;                     // past the last pooled row
  const float* win = normed + (prow * LMP_S) * W + pcol * LMP_S;
  float* yp = y + (((size_t)blockIdx.z * C + c0) * PH + ph0 + prow) * PW + pcol;
  for (int i = t / band_outs; i < LMP_CHUNK && c0 + i < C; i += lanes) {
    const float* wp = win + i * npix;
    float best = wp[0];
#pragma unroll
    for (int p = 0; p < LMP_K; ++p)
#pragma unroll
      for (int q = 0; q < LMP_K; ++q) best = max_nan(best, wp[p * W + q]);
    yp[(size_t)i * PH * PW] = best;
  }
}
