// conv_pool.cu -- a convolution fused with its bias, tanh and 2x2 max-pool: only the pooled output
// is written.
//
// Versions:
//   conv_pool_tanh   compile-time layer shape (as conv_tuned.cu); whole images in shared memory,
//                    weights in __constant__; each thread computes the 2x2 window of convolution
//                    outputs under one pooled output, for all M channels, keeps the largest, and
//                    writes tanh of it
//
// The layer: valid convolution, stride 1, bias, tanh, then max-pool 2x2 with stride 2:
//   x (N, C, H, W) NCHW, w (M, C, K, K) MCKK in c_weights, b (M,) in c_bias,
//   y (N, M, PH, PW) with PH = (H - K + 1) / 2, PW = (W - K + 1) / 2 (an odd last row or column
//   of the convolution output is dropped, as max-pooling with stride 2 does).
//   y[n, m, i, j] = tanh(max over dy, dx in {0, 1} of conv(x, w)[n, m, 2i + dy, 2j + dx] + b[m])
// tanh is monotonic, so the max of the tanh's is the tanh of the max: one tanh per pooled output
// instead of four.
//
// Compile-time parameters: LAYER_C, LAYER_M, LAYER_K, LAYER_H, LAYER_W, THREADS, IMGS (as in
// conv_tuned.cu).  Launch: grid (ceil(N / IMGS),), block (THREADS,), after labkit.set_constant of
// c_weights and c_bias: conv_pool_tanh(x, y, N).
//
// Why fuse: the seed's layer 1 writes 6 x 44 x 44 floats per image and the pooling reads them back
// to keep a quarter of them.  Fused, the 44x44 planes never leave the registers: DRAM traffic falls
// from 116 + 465 + 465 + 116 MB to 92 + 116 MB at batch 10,000, and one launch replaces two.

#ifndef LAYER_C
#define LAYER_C 1
#endif
#ifndef LAYER_M
#define LAYER_M 6
#endif
#ifndef LAYER_K
#define LAYER_K 5
#endif
#ifndef LAYER_H
#define LAYER_H 48
#endif
#ifndef LAYER_W
#define LAYER_W 48
#endif
#ifndef THREADS
#define THREADS 128
#endif
#ifndef IMGS
#define IMGS 1
#endif

namespace cp {
constexpr int C = LAYER_C, M = LAYER_M, K = LAYER_K, H = LAYER_H, W = LAYER_W;
constexpr int PH = (H - K + 1) / 2, PW = (W - K + 1) / 2;
constexpr int UNITS = IMGS * PH * PW;           // pooled outputs (all M channels) per block
constexpr int IMG_FLOATS = C * H * W;
constexpr int XS_FLOATS = IMGS * IMG_FLOATS;
static_assert(PH > 0 && PW > 0, "the convolution output must be at least 2x2 to pool");
}  // namespace cp

__constant__ float c_weights[cp::M * cp::C * cp::K * cp::K];  // (M, C, K, K) MCKK
__constant__ float c_bias[cp::M];

// tanh(v) = 1 - 2 / (exp(2v) + 1), with the fast exponential and division (as conv_tuned.cu).
__device__ __forceinline__ float fast_tanh(float v) { return 1.0f - __fdividef(2.0f, __expf(2.0f * v) + 1.0f); }

// The larger of two values, or NaN where either is NaN (fmaxf would drop a NaN for the other operand,
// where the reference's pooling keeps it): a NaN in the input must show in the output.
__device__ __forceinline__ float max_keep_nan(float a, float b) { return (b > a || b != b) ? b : a; }

// Version 1: conv + bias + tanh + 2x2 max-pool, one pooled output (all channels) per work unit.
extern "C" __global__ void __launch_bounds__(THREADS)
conv_pool_tanh(const float* __restrict__ x, float* __restrict__ y, int N) {
  using namespace cp;
  __shared__ __align__(16) float sx[XS_FLOATS];
  const int n0 = blockIdx.x * IMGS;
  const int real = min(IMGS, N - n0) * IMG_FLOATS;
  const float* src = x + (size_t)n0 * IMG_FLOATS;
  for (int i = threadIdx.x; i < real; i += THREADS) sx[i] = src[i];  // consecutive: coalesced
  for (int i = real + threadIdx.x; i < XS_FLOATS; i += THREADS) sx[i] = 0.0f;
  __syncthreads();  // the images are in shared memory before anyone reads a neighbour's load

  for (int u = threadIdx.x; u < UNITS; u += THREADS) {
    const int img = u / (PH * PW);
    const int rem = u - img * (PH * PW);
    const int i = rem / PW, j = rem - (rem / PW) * PW;
    // The (K + 1) x (K + 1) input window under the 2x2 convolution outputs (2i.., 2j..).
    const float* xs = sx + img * IMG_FLOATS + (2 * i) * W + 2 * j;
    float acc[M][2][2];
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int d = 0; d < 4; ++d) acc[m][d / 2][d % 2] = c_bias[m];
#pragma unroll
    for (int c = 0; c < C; ++c) {
#pragma unroll
      for (int r = 0; r <= K; ++r) {  // input row r of the window feeds output rows r and r - 1
        float xr[K + 1];
#pragma unroll
        for (int t = 0; t <= K; ++t) xr[t] = xs[(c * H + r) * W + t];
#pragma unroll
        for (int dy = 0; dy < 2; ++dy) {
          const int p = r - dy;       // the kernel row that input row r is for output row dy
          if (p < 0 || p >= K) continue;  // resolved at compile time: every loop is unrolled
#pragma unroll
          for (int q = 0; q < K; ++q)
#pragma unroll
            for (int m = 0; m < M; ++m) {
              const float wv = c_weights[((m * C + c) * K + p) * K + q];
              acc[m][dy][0] = fmaf(xr[q], wv, acc[m][dy][0]);
              acc[m][dy][1] = fmaf(xr[q + 1], wv, acc[m][dy][1]);
            }
        }
      }
    }
    const int n = n0 + img;
    if (n < N)
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const float v = max_keep_nan(max_keep_nan(acc[m][0][0], acc[m][0][1]),
                                     max_keep_nan(acc[m][1][0], acc[m][1][1]));
        y[(((size_t)n * M + m) * PH + i) * PW + j] = fast_tanh(v);
      }
  }
}
