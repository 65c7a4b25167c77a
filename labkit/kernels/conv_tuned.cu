// conv_tuned.cu -- the convolution specialised at compile time for one layer shape.
//
// Versions (the ladder: conv_naive.cu, conv_tiled.cu, conv_constant.cu, this file):
//   conv_tuned_const   the layer's C, M, K, H, W are compile-time constants; a block stages whole
//                      images in shared memory and each thread computes OUT_W neighbouring outputs
//                      of one row for ALL M output channels, with the weights in __constant__
//   conv_tuned_smem    the same, with the weights staged in shared memory instead and read as
//                      16-byte broadcasts, M_CHUNK output channels at a time: for layers whose
//                      weights are too many for the constant cache to serve every FMA (layer 2)
//
// The layer: valid convolution, stride 1, no padding, bias, optional activation (act: 0 none,
// 1 tanh, 2 ReLU), x (N, C, H, W) NCHW, w (M, C, K, K) MCKK, b (M,), y (N, M, Ho, Wo).
//
// Compile-time parameters (labkit.load(..., defines={...}); labkit.ops.conv picks them per layer from
// the tuned table, labkit/tuned/conv_tuned.json, which a launch-parameter sweep writes):
//   LAYER_C, LAYER_M, LAYER_K, LAYER_H, LAYER_W   the layer's shape
//   THREADS   threads per block (a 1-D block)
//   IMGS      images per block, staged in shared memory together
//   OUT_W     outputs per thread along a row (register blocking)
//   M_CHUNK   output channels a thread accumulates at once (conv_tuned_smem; divides M)
//   WEIGHTS_IN_CONSTANT  1: conv_tuned_const is compiled, 0: conv_tuned_smem (the other one is an
//             empty stub, so a module pays the compile time of the kernel it uses only)
//
// Launch: grid (ceil(N / IMGS),), block (THREADS,), no dynamic shared memory;
//   conv_tuned_const(x, y, N, act) after copying w and b to c_weights and c_bias;
//   conv_tuned_smem(x, w, b, y, N, act).
//
// What changed from conv_constant, and why it is faster on the seed's small layers:
//   * Every loop bound is a constant, so the compiler unrolls the C*K*K*M multiply-adds completely:
//     no loop counters, no index arithmetic, and (in conv_tuned_const) every weight is an
//     immediate operand of its FMA instruction, read from the constant cache by the whole warp.
//   * One thread computes all M output channels of its outputs: an input value loaded from shared
//     memory once feeds M*OUT_W FMAs from registers (conv_constant: 1 FMA per shared load).
//   * A block covers whole images (no halo is loaded twice) and the 1-D block is sized for the
//     GPU, not for the plane: 18x18 outputs no longer need a 32x32 block of mostly idle threads.
//   * Neighbouring threads take neighbouring outputs of a row, so their shared-memory reads fall in
//     different banks and their stores to y coalesce.

#ifndef LAYER_C
#define LAYER_C 6
#endif
#ifndef LAYER_M
#define LAYER_M 16
#endif
#ifndef LAYER_K
#define LAYER_K 5
#endif
#ifndef LAYER_H
#define LAYER_H 22
#endif
#ifndef LAYER_W
#define LAYER_W 22
#endif
#ifndef THREADS
#define THREADS 128
#endif
#ifndef IMGS
#define IMGS 1
#endif
#ifndef OUT_W
#define OUT_W 2
#endif
#ifndef M_CHUNK
#define M_CHUNK LAYER_M
#endif
#ifndef WEIGHTS_IN_CONSTANT
#define WEIGHTS_IN_CONSTANT 1
#endif

#define ACT_NONE 0
#define ACT_TANH 1
#define ACT_RELU 2

namespace tuned {
constexpr int C = LAYER_C, M = LAYER_M, K = LAYER_K, H = LAYER_H, W = LAYER_W;
constexpr int HO = H - K + 1, WO = W - K + 1;
constexpr int WG = (WO + OUT_W - 1) / OUT_W;    // work units (groups of OUT_W outputs) per row
constexpr int UNITS = IMGS * HO * WG;           // work units per block
constexpr int IMG_FLOATS = C * H * W;
// The last unit of a row reads up to OUT_W - 1 floats past the row's end: inside the next row,
// or, for the very last row, inside this padding.  Those values only feed outputs never written.
constexpr int XS_FLOATS = IMGS * IMG_FLOATS + OUT_W;
constexpr int W_FLOATS = M * C * K * K;
constexpr int MC = M_CHUNK;
// Where rows and units line up with 16-byte boundaries, outputs are stored four at a time.
constexpr bool VEC_STORE = OUT_W % 4 == 0 && WO % 4 == 0;
static_assert(HO > 0 && WO > 0, "the kernel must fit the input plane (K <= H, K <= W)");
static_assert(M % MC == 0, "M_CHUNK must divide M");
}  // namespace tuned

__constant__ float c_weights[tuned::W_FLOATS];  // (M, C, K, K) MCKK
__constant__ float c_bias[tuned::M];

// `act` is the same for every thread of a launch, so this branch never diverges within a warp.
// tanh(v) = 1 - 2 / (exp(2v) + 1) with the fast exponential and division: a handful of
// instructions instead of tanhf's branches (absolute error about 1e-7; exact limits -1 and 1; NaN
// stays NaN).  ReLU as a compare and select, not fmaxf: fmaxf(NaN, 0) is 0, and a NaN must reach the
// output (as in PyTorch's relu), not vanish into a plausible number.
__device__ __forceinline__ float activate(float v, int act) {
  if (act == ACT_TANH) return 1.0f - __fdividef(2.0f, __expf(2.0f * v) + 1.0f);
  if (act == ACT_RELU) return v < 0.0f ? 0.0f : v;
  return v;
}

// Copy images n0 .. n0+IMGS-1 (contiguous in NCHW) into shared memory; zeros for images past N.
__device__ __forceinline__ void load_images(const float* __restrict__ x, float* sx, int n0, int N) {
  using namespace tuned;
  const int real = min(IMGS, N - n0) * IMG_FLOATS;
  const float* src = x + (size_t)n0 * IMG_FLOATS;
  int done = 0;
  // 16-byte loads where the images allow it: a quarter of the load instructions.
  if (IMG_FLOATS % 4 == 0 && (reinterpret_cast<size_t>(src) & 15) == 0) {
    const float4* src4 = reinterpret_cast<const float4*>(src);
    float4* dst4 = reinterpret_cast<float4*>(sx);
    for (int i = threadIdx.x; i < real / 4; i += THREADS) dst4[i] = src4[i];
    done = real;
  }
  for (int i = done + threadIdx.x; i < real; i += THREADS) sx[i] = src[i];
  for (int i = real + threadIdx.x; i < XS_FLOATS; i += THREADS) sx[i] = 0.0f;
}

// Store one unit's outputs of channel m (four at a time where alignment allows).
__device__ __forceinline__ void store_row(float* __restrict__ yrow, const float* v, int w0, int act) {
  using namespace tuned;
  if constexpr (VEC_STORE) {
#pragma unroll
    for (int r = 0; r < OUT_W; r += 4)
      *reinterpret_cast<float4*>(yrow + r) = make_float4(activate(v[r], act), activate(v[r + 1], act),
                                                         activate(v[r + 2], act), activate(v[r + 3], act));
  } else {
#pragma unroll
    for (int r = 0; r < OUT_W; ++r)
      if (WO % OUT_W == 0 || w0 + r < WO) yrow[r] = activate(v[r], act);
  }
}

// Version 4a's work: every unit of the block (OUT_W neighbouring outputs of one row, all M
// channels), each weight an immediate constant-memory operand: every loop is unrolled, so each
// c_weights index is a compile-time constant.
__device__ __forceinline__ void conv_units_const(const float* sx, float* __restrict__ y, int n0, int N,
                                                 int act) {
  using namespace tuned;
  for (int u = threadIdx.x; u < UNITS; u += THREADS) {
    const int img = u / (HO * WG);
    const int rem = u - img * (HO * WG);
    const int h = rem / WG;
    const int w0 = (rem - h * WG) * OUT_W;
    const float* xs = sx + img * IMG_FLOATS + h * W + w0;  // top-left input of the first output

    float acc[M][OUT_W];
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int r = 0; r < OUT_W; ++r) acc[m][r] = c_bias[m];
#pragma unroll
    for (int c = 0; c < C; ++c) {
#pragma unroll
      for (int p = 0; p < K; ++p) {
        // One input row segment serves all K taps of the row for all OUT_W outputs.
        float xr[OUT_W + K - 1];
#pragma unroll
        for (int j = 0; j < OUT_W + K - 1; ++j) xr[j] = xs[(c * H + p) * W + j];
#pragma unroll
        for (int q = 0; q < K; ++q)
#pragma unroll
          for (int m = 0; m < M; ++m) {
            const float wv = c_weights[((m * C + c) * K + p) * K + q];
#pragma unroll
            for (int r = 0; r < OUT_W; ++r) acc[m][r] = fmaf(xr[r + q], wv, acc[m][r]);
          }
      }
    }
    const int n = n0 + img;
    if (n < N)
#pragma unroll
      for (int m = 0; m < M; ++m) store_row(y + (((size_t)n * M + m) * HO + h) * WO + w0, acc[m], w0, act);
  }
}

// Version 4b's work: the same units, M_CHUNK channels at a time, weights from shared memory in the
// layout (C, K, K, M): the M_CHUNK weights one input meets are contiguous, read with 16-byte loads
// at one address for the whole warp (a broadcast, no bank conflict).  The channel loop stays a
// loop, and so is the input-channel loop: the code is C * M / M_CHUNK times smaller (it compiles in
// seconds, not tens of seconds), and shared-memory weights need no compile-time address.
__device__ __forceinline__ void conv_units_smem(const float* sx, const float* sw, const float* sb,
                                                float* __restrict__ y, int n0, int N, int act) {
  using namespace tuned;
  for (int u = threadIdx.x; u < UNITS; u += THREADS) {
    const int img = u / (HO * WG);
    const int rem = u - img * (HO * WG);
    const int h = rem / WG;
    const int w0 = (rem - h * WG) * OUT_W;
    const float* xs = sx + img * IMG_FLOATS + h * W + w0;
    const int n = n0 + img;
#pragma unroll 1
    for (int m0 = 0; m0 < M; m0 += MC) {
      float acc[MC][OUT_W];
#pragma unroll
      for (int m = 0; m < MC; ++m)
#pragma unroll
        for (int r = 0; r < OUT_W; ++r) acc[m][r] = sb[m0 + m];
#pragma unroll 1
      for (int c = 0; c < C; ++c) {  // a loop: K*K*M_CHUNK*OUT_W FMAs a trip are plenty to unroll
#pragma unroll
        for (int p = 0; p < K; ++p) {
          float xr[OUT_W + K - 1];
#pragma unroll
          for (int j = 0; j < OUT_W + K - 1; ++j) xr[j] = xs[(c * H + p) * W + j];
#pragma unroll
          for (int q = 0; q < K; ++q) {
            const float* wq = sw + ((c * K + p) * K + q) * M + m0;
            float wv[MC];
            if constexpr (MC % 4 == 0 && M % 4 == 0) {
#pragma unroll
              for (int j = 0; j < MC; j += 4) {
                const float4 t = *reinterpret_cast<const float4*>(wq + j);
                wv[j] = t.x; wv[j + 1] = t.y; wv[j + 2] = t.z; wv[j + 3] = t.w;
              }
            } else {
#pragma unroll
              for (int j = 0; j < MC; ++j) wv[j] = wq[j];
            }
#pragma unroll
            for (int m = 0; m < MC; ++m)
#pragma unroll
              for (int r = 0; r < OUT_W; ++r) acc[m][r] = fmaf(xr[r + q], wv[m], acc[m][r]);
          }
        }
      }
      if (n < N)
#pragma unroll
        for (int m = 0; m < MC; ++m)
          store_row(y + (((size_t)n * M + m0 + m) * HO + h) * WO + w0, acc[m], w0, act);
    }
  }
}

// Version 4a: weights and bias in constant memory (labkit.set_constant before the launch).
extern "C" __global__ void __launch_bounds__(THREADS)
conv_tuned_const(const float* __restrict__ x, float* __restrict__ y, int N, int act) {
#if WEIGHTS_IN_CONSTANT
  __shared__ __align__(16) float sx[tuned::XS_FLOATS];
  const int n0 = blockIdx.x * IMGS;
  load_images(x, sx, n0, N);
  __syncthreads();  // every image is in shared memory before any thread reads a neighbour's load
  conv_units_const(sx, y, n0, N, act);
#endif
}

// Version 4b: weights staged in shared memory, transposed to (C, K, K, M), once per block.
extern "C" __global__ void __launch_bounds__(THREADS)
conv_tuned_smem(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                float* __restrict__ y, int N, int act) {
#if !WEIGHTS_IN_CONSTANT
  using namespace tuned;
  __shared__ __align__(16) float sx[XS_FLOATS];
  __shared__ __align__(16) float sw[W_FLOATS];
  __shared__ float sb[M];
  const int n0 = blockIdx.x * IMGS;
  for (int i = threadIdx.x; i < W_FLOATS; i += THREADS) {
    const int m = i / (C * K * K), ckk = i - m * (C * K * K);
    sw[ckk * M + m] = w[i];
  }
  for (int i = threadIdx.x; i < M; i += THREADS) sb[i] = b[i];
  load_images(x, sx, n0, N);
  __syncthreads();  // images, weights and bias are all in shared memory
  conv_units_smem(sx, sw, sb, y, n0, N, act);
#endif
}
