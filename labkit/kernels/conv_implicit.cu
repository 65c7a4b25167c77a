// conv_implicit.cu -- convolution as an implicit GEMM: the column matrix of im2col is never
// written; each block gathers the slice of it that it needs straight from the NCHW input.
//
// The GEMM of one group g (unroll.conv2d_unrolled does the same with a materialised matrix):
//   Y_g (MG, P) = W_g (MG, KG) @ X_g (KG, P)
//   MG = M / G output channels, KG = (C / G) * KH * KW, P = N * Ho * Wo: every output pixel of every
//   image is one column, so the whole batch is one GEMM (one launch for all images and groups).
//   Column p is pixel (n, oh, ow); row k of X_g is (c, kh, kw) with k = (c * KH + kh) * KW + kw, and
//   X_g[k, p] = x[n, g * C/G + c, oh * SH - PH + kh * DH, ow * SW - PW + kw * DW], zero in the
//   padding: any kernel size, stride, zero padding and dilation, each per axis (PyTorch's conv2d).
//
// The kernel is gemm.cu's gemm_dbuf (register tiles, float4 shared reads, two shared stages with
// the next tile's loads in flight) with two changes:
//   * The B tile is gathered: each thread owns one column p of the tile for the whole launch (its
//     image and window corner are decoded once) and, for each k, decodes (c, kh, kw) and loads one
//     input value, or 0 in the padding.  A warp's 32 threads take 32 neighbouring pixels: for
//     stride 1 that is 32 neighbouring floats of one input row (coalesced).  The layer's shape is a
//     compile-time constant, so those divisions are multiplications and shifts.
//   * A thread's TM x TN outputs are TM/4 x TN/4 groups of 4 x 4, spread BM/(TM/4) rows and
//     BN/(TN/4) columns apart (CUTLASS's layout): the float4 shared-memory reads of 8 neighbouring
//     threads are then 128 neighbouring bytes (no bank conflict), and a warp's stores cover 64
//     neighbouring pixels of an output row.
//
// Weights: the "prepared" layout wt (G, KG, MG), i.e. each group's W_g transposed, which
// labkit.ops.implicit makes once per layer: a tile of it is then BK rows of BM neighbouring floats,
// read with float4 and stored in shared memory as it comes (the A tile must be k-major).
//
// conv_implicit(x, wt, bias, y, N, has_bias, act, res, has_res)
//   x (N, C, H, W), wt (G, KG, MG), bias (M,) (not read when has_bias == 0), y (N, M, Ho, Wo),
//   res (N, M, Ho, Wo) (not read when has_res == 0), all float32 C-contiguous;
//   y = act(conv + bias + res), act: 0 none, 1 tanh, 2 ReLU, 3 ReLU6 (min(max(v, 0), 6)).
//   The residual add is a residual network's skip connection fused into the epilogue: the sum
//   never makes a round trip through memory (MobileNetV2's projections: act 0; ResNet: act 2).
// Launch: grid (ceil(N*Ho*Wo / IG_BN), ceil(MG / IG_BM), G), block ((BM/TM) * (BN/TN),).
// Split-K, for small batches whose grid would leave SMs idle: conv_implicit_splitk(x, wt, P, N,
// splits), grid z G * splits, each block one slice of the k-tiles, raw sums to the workspace P
// (splits, N, M, Ho, Wo); then conv_implicit_reduce(P, bias, y, N, has_bias, act, splits, res,
// has_res) adds them, the bias, the residual and the activation.
//
// Compile-time parameters (labkit.ops.implicit sets them; the tile sizes come from the tuned table
// labkit/tuned/conv_implicit.json):
//   LAYER_C, LAYER_H, LAYER_W, LAYER_M, LAYER_K, LAYER_S, LAYER_P, LAYER_G   the layer
//   LAYER_KW, LAYER_SW, LAYER_PW, LAYER_DH, LAYER_DW   the width's kernel, stride and padding and the
//       dilation of each axis, where they differ from the height's (LAYER_K, LAYER_S, LAYER_P; 1)
//   Offsets are 32-bit: labkit.ops.implicit splits a batch whose x or y has 2^31 elements or more.
//   LAYER_HO, LAYER_WO, OUT_H, OUT_W, OUT_SH, OUT_SW, OUT_H0, OUT_W0   one phase of a transposed
//       convolution (labkit.ops.conv_transpose): a stride-1 convolution over the taps that reach
//       every OUT_SH-th output row from row OUT_H0 (columns alike) of the OUT_H x OUT_W output, its
//       padding LAYER_P, LAYER_PW possibly negative (the window starts inside the input)
//   IG_BM, IG_BN, IG_BK, IG_TM, IG_TN   the block tile of Y, its step along k, outputs per thread
//   IG_MINB   blocks per SM the register budget must allow (__launch_bounds__'s second argument): an
//       8 x 8 tile per thread takes about 130 registers, one block of 256 threads an SM (8 warps, too
//       few to hide the latencies); IG_MINB 2 holds it to 128, two blocks

#ifndef LAYER_C
#define LAYER_C 3
#endif
#ifndef LAYER_H
#define LAYER_H 11
#endif
#ifndef LAYER_W
#define LAYER_W 11
#endif
#ifndef LAYER_M
#define LAYER_M 8
#endif
#ifndef LAYER_K
#define LAYER_K 3
#endif
#ifndef LAYER_S
#define LAYER_S 1
#endif
#ifndef LAYER_P
#define LAYER_P 0
#endif
#ifndef LAYER_G
#define LAYER_G 1
#endif
#ifndef LAYER_KW
#define LAYER_KW LAYER_K
#endif
#ifndef LAYER_SW
#define LAYER_SW LAYER_S
#endif
#ifndef LAYER_PW
#define LAYER_PW LAYER_P
#endif
#ifndef LAYER_DH
#define LAYER_DH 1
#endif
#ifndef LAYER_DW
#define LAYER_DW LAYER_DH
#endif
#ifndef IG_BM
#define IG_BM 64
#endif
#ifndef IG_BN
#define IG_BN 64
#endif
#ifndef IG_BK
#define IG_BK 8
#endif
#ifndef IG_TM
#define IG_TM 4
#endif
#ifndef IG_TN
#define IG_TN 4
#endif
#ifndef IG_MINB
#define IG_MINB 1
#endif

namespace ig {
constexpr int C = LAYER_C, H = LAYER_H, W = LAYER_W, M = LAYER_M, G = LAYER_G;
constexpr int KH = LAYER_K, KW = LAYER_KW, SH = LAYER_S, SW = LAYER_SW, PH = LAYER_P, PW = LAYER_PW;
constexpr int DH = LAYER_DH, DW = LAYER_DW;
constexpr int CG = C / G, MG = M / G, TAPS = KH * KW, KG = CG * TAPS;
#ifdef LAYER_HO   // a transposed convolution's phase: its output rows and columns (below)
constexpr int HO = LAYER_HO, WO = LAYER_WO;
#else
constexpr int HO = (H + 2 * PH - DH * (KH - 1) - 1) / SH + 1, WO = (W + 2 * PW - DW * (KW - 1) - 1) / SW + 1;
#endif
constexpr int HWO = HO * WO;
// Where output pixel (oh, ow) goes: row OUT_H0 + oh * OUT_SH, column OUT_W0 + ow * OUT_SW of an
// OUT_H x OUT_W plane.  The identity for a convolution; a transposed convolution's phase fills every
// OUT_SH-th row and OUT_SW-th column of its output (labkit.ops.conv_transpose).
#ifndef OUT_H
#define OUT_H HO
#define OUT_W WO
#define OUT_SH 1
#define OUT_SW 1
#define OUT_H0 0
#define OUT_W0 0
#endif
constexpr bool PLACED = !(OUT_H == HO && OUT_W == WO && OUT_SH == 1 && OUT_SW == 1 && OUT_H0 == 0 && OUT_W0 == 0);
constexpr int BM = IG_BM, BN = IG_BN, BK = IG_BK, TM = IG_TM, TN = IG_TN;
constexpr int THREADS = (BM / TM) * (BN / TN);
constexpr int TMV = TM / 4, TNV = TN / 4;               // 4x4 groups per thread along m and p
constexpr int ROW_STEP = BM / TMV, COL_STEP = BN / TNV;  // the distance between a thread's groups
constexpr int A_GROUPS = BK * BM / 4;                    // float4s in an A tile
constexpr int A_LOADS = (A_GROUPS + THREADS - 1) / THREADS;
constexpr int B_ROWS = THREADS / BN;                     // tile rows gathered per pass of the block
constexpr int B_LOADS = (BK + B_ROWS - 1) / B_ROWS;
static_assert(C % G == 0 && M % G == 0, "LAYER_G must divide LAYER_C and LAYER_M");
static_assert(HO >= 1 && WO >= 1, "the dilated window does not fit the padded input");
static_assert(BM % TM == 0 && BN % TN == 0 && TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0,
              "IG_TM, IG_TN, IG_BK must be multiples of 4 dividing IG_BM, IG_BN");
static_assert(THREADS % BN == 0, "(BM/TM)*(BN/TN) threads must be a multiple of IG_BN (one column each)");
static_assert(THREADS <= 1024, "a block holds at most 1024 threads");
static_assert(2 * (BM + BN) * BK * 4 <= 48 * 1024, "two shared stages exceed 48 KiB");
}  // namespace ig

// The epilogue of every output value: bias, residual, activation (0 none, 1 tanh, 2 ReLU, 3 ReLU6).
// The comparisons keep a NaN as it is, as PyTorch's relu and relu6 do (fmaxf(NaN, 0) would be 0: a
// NaN in the input would vanish and the loss look finite).
__device__ __forceinline__ float finish(float v, float bias, float res, int act) {
  v += bias + res;
  if (act == 1) v = tanhf(v);
  else if (act == 2) v = v < 0.0f ? 0.0f : v;
  else if (act == 3) v = v < 0.0f ? 0.0f : (v > 6.0f ? 6.0f : v);
  return v;
}

// The offset in y (and in the residual) of output pixel pix (= oh * WO + ow) of image n, channel oc.
__device__ __forceinline__ size_t out_at(int n, int oc, int pix) {
  using namespace ig;
  if (!PLACED) return ((size_t)n * M + oc) * HWO + pix;
  const int oh = pix / WO, ow = pix - oh * WO;
  return ((size_t)n * M + oc) * (OUT_H * OUT_W) + (OUT_H0 + oh * OUT_SH) * OUT_W + OUT_W0 + ow * OUT_SW;
}

// The thread's column of the B tile: where its pixel's window starts in x, or -1 past the end.
struct Column {
  int base;      // offset in x of channel 0 of this group at row ih0, column iw0 (may be negative)
  int ih0, iw0;  // the window's top-left corner in the unpadded input
};

__device__ __forceinline__ Column column_of(int p, int N, int g) {
  using namespace ig;
  Column col{0, -(1 << 20), -(1 << 20)};  // far outside: every tap reads as padding
  if (p < N * HWO) {
    const int n = p / HWO, r = p - n * HWO, oh = r / WO, ow = r - oh * WO;
    col.ih0 = oh * SH - PH;
    col.iw0 = ow * SW - PW;
    col.base = (n * C + g * CG) * H * W + col.ih0 * W + col.iw0;
  }
  return col;
}

// X_g[k, p] for the thread's column p: one input value, or 0 in the padding or past KG.
__device__ __forceinline__ float gather(const float* __restrict__ x, const Column& col, int k) {
  using namespace ig;
  const int c = k / TAPS, r = k - c * TAPS, kh = (r / KW) * DH, kw = (r - (r / KW) * KW) * DW;
  const bool inside = k < KG && (unsigned)(col.ih0 + kh) < (unsigned)H && (unsigned)(col.iw0 + kw) < (unsigned)W;
  return inside ? x[col.base + (c * H + kh) * W + kw] : 0.0f;
}

// Four neighbouring weights wt[g, k, m .. m+3] (zeros past KG or MG).  MG % 4 == 0 allows one
// float4 (every row then starts 16-byte aligned); otherwise four guarded loads.
__device__ __forceinline__ float4 weights4(const float* __restrict__ wt, int g, int k, int m) {
  using namespace ig;
  const float* row = wt + ((size_t)g * KG + k) * MG;
  if (k >= KG || m >= MG) return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (MG % 4 == 0) return *reinterpret_cast<const float4*>(row + m);
  return make_float4(row[m], m + 1 < MG ? row[m + 1] : 0.0f, m + 2 < MG ? row[m + 2] : 0.0f,
                     m + 3 < MG ? row[m + 3] : 0.0f);
}

// The thread's TM x TN products over one BK slice, from the shared tiles As[k][m], Bs[k][p].
__device__ __forceinline__ void fma_slice(const float* As, const float* Bs, float (&acc)[ig::TM][ig::TN],
                                          int tr, int tc) {
  using namespace ig;
#pragma unroll
  for (int k = 0; k < BK; ++k) {
    float a[TM], b[TN];
#pragma unroll
    for (int q = 0; q < TMV; ++q) {
      const float4 v = *reinterpret_cast<const float4*>(As + k * BM + q * ROW_STEP + tr * 4);
      a[4 * q] = v.x, a[4 * q + 1] = v.y, a[4 * q + 2] = v.z, a[4 * q + 3] = v.w;
    }
#pragma unroll
    for (int q = 0; q < TNV; ++q) {
      const float4 v = *reinterpret_cast<const float4*>(Bs + k * BN + q * COL_STEP + tc * 4);
      b[4 * q] = v.x, b[4 * q + 1] = v.y, b[4 * q + 2] = v.z, b[4 * q + 3] = v.w;
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
  }
}

// The block's work: group g's output tile (blockIdx.x, blockIdx.y) over the k-tiles [t_begin, t_end)
// (all of them in conv_implicit, a slice in conv_implicit_splitk).  `partial`: write the raw sums
// (split-K's workspace slice, same layout as y) instead of bias + activation.  Inlined into both
// kernels with constant arguments, so conv_implicit compiles as if split-K did not exist.
constexpr int K_TILES = (ig::KG + ig::BK - 1) / ig::BK;

__device__ __forceinline__ void implicit_gemm(const float* __restrict__ x, const float* __restrict__ wt,
                                              const float* __restrict__ bias, float* __restrict__ y, int N,
                                              int has_bias, int act, const float* __restrict__ res,
                                              int has_res, int g, int t_begin, int t_end, bool partial) {
  using namespace ig;
  __shared__ float4 As4[2][BK * BM / 4];  // As[k * BM + m] = W_g[bm + m, k0 + k]
  __shared__ float4 Bs4[2][BK * BN / 4];  // Bs[k * BN + j] = X_g[k0 + k, bp + j]
  const int tid = threadIdx.x;
  const int bm = blockIdx.y * BM, bp = blockIdx.x * BN;
  const int tr = tid / (BN / TN), tc = tid % (BN / TN);
  const int my_col = tid % BN, my_row = tid / BN;  // the B tile's column and first row this thread gathers
  const Column col = column_of(bp + my_col, N, g);
  float acc[TM][TN] = {};
  float4 ra[A_LOADS];
  float rb[B_LOADS];

  // Tile t into registers: A as float4 groups (row k = i / (BM/4)), B one value per gathered row.
  auto fetch = [&](int t) {
    const int k0 = t * BK;
#pragma unroll
    for (int l = 0; l < A_LOADS; ++l) {
      const int i = tid + l * THREADS;
      if (i < A_GROUPS) ra[l] = weights4(wt, g, k0 + i / (BM / 4), bm + (i % (BM / 4)) * 4);
    }
#pragma unroll
    for (int l = 0; l < B_LOADS; ++l) {
      const int r = my_row + l * B_ROWS;
      if (r < BK) rb[l] = gather(x, col, k0 + r);
    }
  };
  auto stash = [&](int stage) {
    float* As = reinterpret_cast<float*>(As4[stage]);
    float* Bs = reinterpret_cast<float*>(Bs4[stage]);
#pragma unroll
    for (int l = 0; l < A_LOADS; ++l) {
      const int i = tid + l * THREADS;
      if (i < A_GROUPS) reinterpret_cast<float4*>(As)[i] = ra[l];  // group i sits at 4 * i
    }
#pragma unroll
    for (int l = 0; l < B_LOADS; ++l) {
      const int r = my_row + l * B_ROWS;
      if (r < BK) Bs[r * BN + my_col] = rb[l];
    }
  };

  if (t_begin < t_end) {  // the same for the whole block (an empty last slice writes zeros)
    fetch(t_begin);
    stash(0);
    __syncthreads();
  }
  for (int t = t_begin; t < t_end; ++t) {
    const int cur = (t - t_begin) & 1;
    if (t + 1 < t_end) fetch(t + 1);  // in flight while this tile is computed
    fma_slice(reinterpret_cast<const float*>(As4[cur]), reinterpret_cast<const float*>(Bs4[cur]), acc, tr, tc);
    if (t + 1 < t_end) {  // the same for the whole block: the barrier is uniform
      stash(cur ^ 1);    // that stage was last read in tile t-1, before the previous barrier
      __syncthreads();
    }
  }

  // Epilogue: bias, residual, activation, and the NCHW store of each output pixel (raw sums if
  // partial).  A thread's columns come in groups of 4 neighbouring pixels; when an image's plane
  // holds a multiple of 4 pixels (and y, res are 16-byte aligned) such a group is 4 neighbouring
  // floats of one output row: one float4 store, and a warp's stores cover whole 128-byte lines.
  // A memory-bound layer (a 1x1 convolution with few input channels) lives on its stores.
  const bool vec = !PLACED && HWO % 4 == 0 &&
                   ((reinterpret_cast<size_t>(y) | reinterpret_cast<size_t>(res)) & 15) == 0;
  if (vec) {
#pragma unroll
    for (int q = 0; q < TNV; ++q) {
      const int p = bp + q * COL_STEP + tc * 4;
      if (p >= N * HWO) continue;  // all 4 or none: N * HWO is a multiple of 4
      const int n = p / HWO, pix = p - n * HWO;
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const int m = bm + (i / 4) * ROW_STEP + tr * 4 + (i % 4);
        if (m >= MG) continue;
        const int oc = g * MG + m;
        const size_t at = ((size_t)n * M + oc) * HWO + pix;
        float4 v = make_float4(acc[i][4 * q], acc[i][4 * q + 1], acc[i][4 * q + 2], acc[i][4 * q + 3]);
        if (!partial) {
          const float b = has_bias ? bias[oc] : 0.0f;
          const float4 r = has_res ? *reinterpret_cast<const float4*>(res + at) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          v = make_float4(finish(v.x, b, r.x, act), finish(v.y, b, r.y, act), finish(v.z, b, r.z, act),
                          finish(v.w, b, r.w, act));
        }
        *reinterpret_cast<float4*>(y + at) = v;
      }
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < TN; ++j) {
    const int p = bp + (j / 4) * COL_STEP + tc * 4 + (j % 4);
    if (p >= N * HWO) continue;
    const int n = p / HWO, pix = p - n * HWO;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int m = bm + (i / 4) * ROW_STEP + tr * 4 + (i % 4);
      if (m >= MG) continue;
      const int oc = g * MG + m;
      const size_t at = partial ? ((size_t)n * M + oc) * HWO + pix : out_at(n, oc, pix);  // the workspace is unplaced
      float v = acc[i][j];
      if (!partial) v = finish(v, has_bias ? bias[oc] : 0.0f, has_res ? res[at] : 0.0f, act);
      y[at] = v;
    }
  }
}

extern "C" __global__ void __launch_bounds__(ig::THREADS, IG_MINB) conv_implicit(const float* __restrict__ x, const float* __restrict__ wt,
                                         const float* __restrict__ bias, float* __restrict__ y,
                                         int N, int has_bias, int act, const float* __restrict__ res,
                                         int has_res) {
  implicit_gemm(x, wt, bias, y, N, has_bias, act, res, has_res, blockIdx.z, 0, K_TILES, false);
}

// Split-K's first step: blockIdx.z = g * splits + slice; the block takes its slice of the k-tiles
// and writes raw sums to P[slice], P (splits, N, M, HO, WO).
extern "C" __global__ void __launch_bounds__(ig::THREADS, IG_MINB) conv_implicit_splitk(const float* __restrict__ x, const float* __restrict__ wt,
                                                float* __restrict__ P, int N, int splits) {
  const int g = blockIdx.z / splits, slice = blockIdx.z % splits;
  const int per_slice = (K_TILES + splits - 1) / splits;
  const int t_begin = slice * per_slice;
  implicit_gemm(x, wt, nullptr, P + (size_t)slice * N * ig::M * ig::HWO, N, 0, 0, nullptr, 0, g, t_begin,
                min(K_TILES, t_begin + per_slice), true);
}

// Split-K's second step: y = act(sum over s of P[s] + bias + res), P (splits, N, M, HO, WO), in a
// fixed order of the slices.  Launch: grid (ceil(N*M*HO*WO / 256),), block (256,).
extern "C" __global__ void conv_implicit_reduce(const float* __restrict__ P, const float* __restrict__ bias,
                                                float* __restrict__ y, int N, int has_bias, int act, int splits,
                                                const float* __restrict__ res, int has_res) {
  using namespace ig;
  const long long total = (long long)N * M * HWO;
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= total) return;
  float v = 0.0f;
  for (int s = 0; s < splits; ++s) v += P[s * total + i];
  const size_t at = out_at((int)(i / ((long long)M * HWO)), (int)(i / HWO % M), (int)(i % HWO));
  y[at] = finish(v, has_bias ? bias[(i / HWO) % M] : 0.0f, has_res ? res[at] : 0.0f, act);
}
