// dw_project.cu -- an inverted residual's depthwise 3x3 and its projection in one kernel: the depthwise
// outputs, the widest tensor of the block, are computed in shared memory and never go to memory.
//
//   d[c, p]        = relu6(bdw[c] + sum over kh, kw of wdw[c, kh, kw] * x[n, c, oh*S - 1 + kh, ow*S - 1 + kw])
//                    (relu6 keeps a NaN, as PyTorch's does)
//   y[n, m, oh, ow] = bp[m] + sum over c of Wp[m, c] * d[c, p]  (+ res[n, m, oh, ow])      (linear)
//   p = (n, oh, ow): every output pixel of the batch is one column, as in conv_implicit.cu.
//
// The projection is a GEMM, Y (M, P) = Wp (M, C) . D (C, P).  What changes from conv_implicit.cu is
// how a tile of its B operand, D[k0 .. k0+BK, bp .. bp+BN], reaches shared memory: not gathered from
// a tensor, but computed -- each value a 3x3 depthwise sum of x (9 loads, mostly from the L1 cache:
// neighbouring pixels share 6 of their 9 inputs).  A block of BM output channels computes the
// depthwise values of its BN pixels for every channel c; a projection with M > BM recomputes them
// once per row block (9 FMAs per value, against the BM it then feeds).
//
// What it saves against depthwise.cu + conv_implicit.cu: writing d (N * C * HO * WO floats) and
// reading it back, and one launch.  What it costs: the depthwise work redone per row block, 9 loads
// per value where the GEMM it replaces makes one, and one shared stage (no loads in flight during
// the multiply-adds).  Measured on an H100 (benchmarks/results/mobilenet_fused_h100.json) the costs
// win: on MobileNetV2's blocks of 28x28 to 7x7 planes at batch 32 this kernel takes 1.8-6.8x the time
// of the two kernels it replaces (e.g. 0.227 ms against 0.041 for features.15).  A rung to learn
// from, and to improve: compute each block's depthwise tile once from an input tile in shared
// memory (depthwise_tiled's way) and keep the loads in flight while the GEMM runs.
//
// dw_project(x, wdw, bdw, wpt, bp, res, y, N, has_res)
//   x (N, C, H, W); wdw (C, 9); bdw (C,); wpt (C, M): the projection's weights transposed (as
//   conv_implicit's wt); bp (M,); res (N, M, HO, WO), read when has_res; y (N, M, HO, WO).
// Launch: grid (ceil(N*HO*WO / DP_BN), ceil(M / DP_BM)), block ((DP_BM / 4) * (DP_BN / 4),).
// Compile-time: DP_C, DP_H, DP_W, DP_S (the depthwise layer), DP_M (the projection's channels),
// DP_BM, DP_BN (multiples of 4), DP_BK: the block's tile of Y and its step along c.

#ifndef DP_C
#define DP_C 8
#endif
#ifndef DP_H
#define DP_H 7
#endif
#ifndef DP_W
#define DP_W 7
#endif
#ifndef DP_S
#define DP_S 1
#endif
#ifndef DP_M
#define DP_M 4
#endif
#ifndef DP_BM
#define DP_BM 32
#endif
#ifndef DP_BN
#define DP_BN 64
#endif
#ifndef DP_BK
#define DP_BK 8
#endif

namespace dp {
constexpr int C = DP_C, H = DP_H, W = DP_W, S = DP_S, M = DP_M;
constexpr int HO = (H - 1) / S + 1, WO = (W - 1) / S + 1, HWO = HO * WO;
constexpr int BM = DP_BM, BN = DP_BN, BK = DP_BK;
constexpr int THREADS = (BM / 4) * (BN / 4);   // each thread a 4 x 4 piece of the tile
constexpr int B_ROWS = THREADS / BN;            // depthwise rows computed per pass of the block
static_assert(BM % 4 == 0 && BN % 4 == 0 && THREADS % BN == 0 && BK % B_ROWS == 0,
              "DP_BM, DP_BN multiples of 4; (BM/4)*(BN/4) threads a multiple of BN; BK a multiple of the passes");
static_assert(THREADS <= 1024 && (BM + BN) * BK * 4 <= 48 * 1024, "a block of at most 1024 threads and 48 KiB");
}  // namespace dp

// d[c, p] for the thread's pixel: (n, oh, ow) decoded once; 0 outside the matrix (c >= C or no pixel).
__device__ __forceinline__ float depthwise_value(const float* __restrict__ x, const float* __restrict__ wdw,
                                                 const float* __restrict__ bdw, int c, int n, int oh, int ow,
                                                 bool pixel) {
  using namespace dp;
  if (c >= C || !pixel) return 0.0f;
  const float* plane = x + ((long long)n * C + c) * H * W;
  float v = bdw[c];
#pragma unroll
  for (int kh = 0; kh < 3; ++kh) {
    const int ih = oh * S - 1 + kh;
    if (ih < 0 || ih >= H) continue;
#pragma unroll
    for (int kw = 0; kw < 3; ++kw) {
      const int iw = ow * S - 1 + kw;
      if (iw >= 0 && iw < W) v += wdw[c * 9 + kh * 3 + kw] * plane[ih * W + iw];
    }
  }
  // ReLU6 by compares, not fminf(fmaxf(v, 0), 6): a NaN stays NaN, as in PyTorch's relu6.
  return v < 0.0f ? 0.0f : (v > 6.0f ? 6.0f : v);
}

extern "C" __global__ void __launch_bounds__(dp::THREADS) dw_project(const float* __restrict__ x,
    const float* __restrict__ wdw, const float* __restrict__ bdw, const float* __restrict__ wpt,
    const float* __restrict__ bp, const float* __restrict__ res, float* __restrict__ y, int N, int has_res) {
  using namespace dp;
  __shared__ float4 As4[BK * BM / 4];  // As[k * BM + m] = Wp[m0 + m, k0 + k]
  __shared__ float4 Bs4[BK * BN / 4];  // Bs[k * BN + j] = d[k0 + k, p0 + j]
  float* As = reinterpret_cast<float*>(As4);
  float* Bs = reinterpret_cast<float*>(Bs4);
  const int tid = threadIdx.x;
  const int m0 = blockIdx.y * BM, p0 = blockIdx.x * BN;
  const int tr = tid / (BN / 4), tc = tid % (BN / 4);      // this thread's 4 x 4 piece
  const int my_col = tid % BN, my_row = tid / BN;          // the column of d it computes, first row
  const int p = p0 + my_col;
  const bool pixel = p < N * HWO;
  const int n = pixel ? p / HWO : 0, pix = pixel ? p % HWO : 0, oh = pix / WO, ow = pix % WO;
  float acc[4][4] = {};

  for (int k0 = 0; k0 < C; k0 += BK) {
    for (int i = tid; i < BK * BM; i += THREADS) {         // the projection's weights: BK rows of BM
      const int k = i / BM, m = i % BM;
      As[i] = (k0 + k < C && m0 + m < M) ? wpt[(k0 + k) * M + m0 + m] : 0.0f;
    }
#pragma unroll
    for (int r = my_row; r < BK; r += B_ROWS)               // the depthwise values: computed, not loaded
      Bs[r * BN + my_col] = depthwise_value(x, wdw, bdw, k0 + r, n, oh, ow, pixel);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      const float4 a = As4[(k * BM) / 4 + tr], b = Bs4[(k * BN) / 4 + tc];
      const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
    }
    __syncthreads();  // the next tile overwrites As and Bs
  }

  // Epilogue: bias, the block's skip (res), and the NCHW store.
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int q = p0 + tc * 4 + j;
    if (q >= N * HWO) continue;
    const int qn = q / HWO, qpix = q % HWO;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int m = m0 + tr * 4 + i;
      if (m >= M) continue;
      const size_t at = ((size_t)qn * M + m) * HWO + qpix;
      y[at] = acc[i][j] + bp[m] + (has_res ? res[at] : 0.0f);
    }
  }
}
