// conv_winograd_gemm.cu -- a 3x3 convolution (stride 1, any zero padding, one group) by Winograd's
// F(2x2, 3x3) in three passes through global memory ("non-fused" Winograd, as cuDNN's
// WINOGRAD_NONFUSED): the input transform, 16 independent GEMMs, the output transform.
//
//   y = A^T [ U . V ] A, summed over the input channels, per 2x2 tile of outputs
//   V = B^T d B: d the tile's 4x4 input patch (rows 2 i - PH .. 2 i - PH + 3, columns likewise; zeros
//   outside the plane), B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1];
//   U = G g G^T: g a 3x3 filter, G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1] (the host transforms the
//   weights once, in float64: labkit.ops.conv_winograd_gemm);
//   A^T = [1 1 1 0; 0 1 -1 -1].
// Position xi = 4 a + b of the transforms is one GEMM: Mx[xi] (M x T) = U[xi] (M x C) @ V[xi] (C x T),
// T the batch's tiles.  That is 16 multiply-adds per (m, c, tile) for the direct method's 36.
//
// conv_winograd.cu does the same arithmetic in one kernel, its transforms in shared memory: it wins
// where a block's few output channels and one row of tiles keep the GEMMs busy (ResNet-small's 16-64
// channels on 28 x 28).  With hundreds of channels on small planes (14 x 14, 7 x 7) its blocks have too
// little to multiply; here the GEMMs are whole-batch products of the tuned GEMM kernel
// (gemm.cu's gemm_dbuf_batched), at the price of V and Mx travelling through memory: 16 values per
// (channel, tile) each way, 4x the input's and the output's size.  The autotuner weighs the two.
//
// wgg_input(x, v, N)    v[xi][c][t] = (B^T d B)[xi] for channel c of tile t = (n, ti, tj), t fastest:
//   one thread per (c, t), its 16 stores coalesced across the warp.  Grid (ceil(C * T / 256),),
//   block (256,).
// wgg_output(mx, b, res, gate, y, N, act)    y[n][m][2 ti + a][2 tj + b] = finish(A^T Mx A + bias + res):
//   one thread per (m, t), its 16 loads coalesced.  act: 0 none, 1 tanh, 2 ReLU, 3 ReLU6, a NaN kept
//   as PyTorch keeps it (conv_implicit.cu's finish); then 0 where gate <= 0 (WGG_GATE: a training
//   step's ReLU backward riding in the store; a NaN gate passes the value, as conv_small.cu's
//   epilogue does).  b read where WGG_BIAS, res where WGG_ADD, gate where WGG_GATE.
//   Grid (ceil(M * T / 256),), block (256,).
// wgg_weights(wt, u)    U (16, M, C) on the GPU from a training layer's weights wt, the forward
//   layer's (C_f * 9, M_f) layout, read at every step (the step changes them); with WGG_FLIP the
//   backward-data pass's: the forward's filters turned 180 degrees, its C_f and M_f swapped (the
//   kernel's C is M_f, its M is C_f).  One thread per (m, c).  Grid (ceil(M * C / 256),), block (256,).
// NaN: F(2x2)'s transforms carry a NaN of x to exactly the outputs whose windows hold it (B^T's
// columns 0 and 3 reach only the rows A^T's rows 1 and 0 drop), as the direct convolution does.
// x (N, C, H, W), y and res (N, M, HO, WO), v (16, C, T), mx (16, M, T), float32, C-contiguous.
// Compile-time: WGG_C, WGG_H, WGG_W, WGG_M, WGG_PH, WGG_PW, WGG_BIAS, WGG_ADD, WGG_GATE, WGG_FLIP.

#ifndef WGG_C
#define WGG_C 8
#endif
#ifndef WGG_H
#define WGG_H 14
#endif
#ifndef WGG_W
#define WGG_W 14
#endif
#ifndef WGG_M
#define WGG_M 8
#endif
#ifndef WGG_PH
#define WGG_PH 1
#endif
#ifndef WGG_PW
#define WGG_PW 1
#endif
#ifndef WGG_BIAS
#define WGG_BIAS 1
#endif
#ifndef WGG_ADD
#define WGG_ADD 0
#endif
#ifndef WGG_GATE
#define WGG_GATE 0
#endif
#ifndef WGG_FLIP
#define WGG_FLIP 0
#endif

namespace wgg {
constexpr int C = WGG_C, H = WGG_H, W = WGG_W, M = WGG_M, PH = WGG_PH, PW = WGG_PW;
constexpr int HO = H + 2 * PH - 2, WO = W + 2 * PW - 2;   // a 3x3 window at stride 1
constexpr int TH = (HO + 1) / 2, TW = (WO + 1) / 2;        // 2x2 tiles of the output plane
static_assert(HO >= 1 && WO >= 1, "the 3x3 window does not fit the padded input");
}  // namespace wgg

// The epilogue: bias, residual, activation; the comparisons keep a NaN (fmaxf(NaN, 0) would be 0).
__device__ __forceinline__ float wgg_finish(float v, float bias, float res, int act) {
  v += bias + res;
  if (act == 1) v = tanhf(v);
  else if (act == 2) v = v < 0.0f ? 0.0f : v;
  else if (act == 3) v = v < 0.0f ? 0.0f : (v > 6.0f ? 6.0f : v);
  return v;
}

extern "C" __global__ void wgg_input(const float* __restrict__ x, float* __restrict__ v, int N) {
  using namespace wgg;
  const long long T = (long long)N * TH * TW;
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= C * T) return;
  const int c = (int)(i / T);
  const long long t = i - c * T;
  const int n = (int)(t / (TH * TW)), r = (int)(t % (TH * TW));
  const int h0 = 2 * (r / TW) - PH, w0 = 2 * (r % TW) - PW;
  const float* __restrict__ plane = x + ((size_t)n * C + c) * H * W;
  float d[4][4];
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    const bool row = h0 + a >= 0 && h0 + a < H;
#pragma unroll
    for (int b = 0; b < 4; ++b)
      d[a][b] = row && w0 + b >= 0 && w0 + b < W ? plane[(h0 + a) * W + w0 + b] : 0.0f;
  }
  float s[4][4];   // B^T d: each column of d
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    s[0][b] = d[0][b] - d[2][b];
    s[1][b] = d[1][b] + d[2][b];
    s[2][b] = d[2][b] - d[1][b];
    s[3][b] = d[1][b] - d[3][b];
  }
  float* __restrict__ out = v + (size_t)c * T + t;
  const size_t step = (size_t)C * T;   // from one transform position to the next
#pragma unroll
  for (int a = 0; a < 4; ++a) {        // (B^T d) B: each row
    out[(4 * a + 0) * step] = s[a][0] - s[a][2];
    out[(4 * a + 1) * step] = s[a][1] + s[a][2];
    out[(4 * a + 2) * step] = s[a][2] - s[a][1];
    out[(4 * a + 3) * step] = s[a][1] - s[a][3];
  }
}

extern "C" __global__ void wgg_output(const float* __restrict__ mx, const float* __restrict__ b,
                                      const float* __restrict__ res, const float* __restrict__ gate,
                                      float* __restrict__ y, int N, int act) {
  using namespace wgg;
  const long long T = (long long)N * TH * TW;
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= M * T) return;
  const int m = (int)(i / T);
  const long long t = i - m * T;
  const int n = (int)(t / (TH * TW)), r = (int)(t % (TH * TW));
  const int oh = 2 * (r / TW), ow = 2 * (r % TW);
  const float* __restrict__ in = mx + (size_t)m * T + t;
  const size_t step = (size_t)M * T;
  float q[4][4];
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int c = 0; c < 4; ++c) q[a][c] = in[(4 * a + c) * step];
  float s[2][4];   // A^T q: each column
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    s[0][c] = q[0][c] + q[1][c] + q[2][c];
    s[1][c] = q[1][c] - q[2][c] - q[3][c];
  }
  const float bias = WGG_BIAS ? b[m] : 0.0f;
  const size_t base = ((size_t)n * M + m) * HO * WO;
#pragma unroll
  for (int a = 0; a < 2; ++a) {
    if (oh + a >= HO) break;
    const float o[2] = {s[a][0] + s[a][1] + s[a][2], s[a][1] - s[a][2] - s[a][3]};   // (A^T q) A
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      if (ow + c >= WO) break;
      const size_t at = base + (size_t)(oh + a) * WO + ow + c;
      float v = wgg_finish(o[c], bias, WGG_ADD ? res[at] : 0.0f, act);
      if (WGG_GATE && gate[at] <= 0.0f) v = 0.0f;
      y[at] = v;
    }
  }
}

extern "C" __global__ void wgg_weights(const float* __restrict__ wt, float* __restrict__ u) {
  using namespace wgg;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= M * C) return;
  const int m = i / C, c = i % C;
  float g[3][3];
#pragma unroll
  for (int tap = 0; tap < 9; ++tap)
    g[tap / 3][tap % 3] = WGG_FLIP ? wt[(m * 9 + 8 - tap) * C + c] : wt[(c * 9 + tap) * M + m];
  float t[4][3];   // G g: each column of g
#pragma unroll
  for (int j = 0; j < 3; ++j) {
    t[0][j] = g[0][j];
    t[1][j] = 0.5f * (g[0][j] + g[1][j] + g[2][j]);
    t[2][j] = 0.5f * (g[0][j] - g[1][j] + g[2][j]);
    t[3][j] = g[2][j];
  }
  float* __restrict__ out = u + (size_t)m * C + c;
  const size_t step = (size_t)M * C;
#pragma unroll
  for (int a = 0; a < 4; ++a) {   // (G g) G^T: each row
    out[(4 * a + 0) * step] = t[a][0];
    out[(4 * a + 1) * step] = 0.5f * (t[a][0] + t[a][1] + t[a][2]);
    out[(4 * a + 2) * step] = 0.5f * (t[a][0] - t[a][1] + t[a][2]);
    out[(4 * a + 3) * step] = t[a][2];
  }
}
