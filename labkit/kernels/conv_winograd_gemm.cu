// conv_winograd_gemm.cu -- a KH x KW convolution (stride 1, any zero padding, any dilation, any groups)
// by Winograd's F(2, r) in each direction, in three passes through global memory ("non-fused"
// Winograd, as cuDNN's WINOGRAD_NONFUSED): the input transform, independent GEMMs, the output
// transform.  A 3x3 window is F(2x2, 3x3); a 5x5 one F(2x2, 5x5); a 1 x 7 one F(1x2, 1x7).
//
//   y = AH^T [ U . V ] AW, summed over a group's input channels, per MH x MW tile of outputs
//   V = BH^T d BW: d the tile's AH x AW input patch (rows MH i - PH .. MH i - PH + AH - 1, columns
//   likewise; zeros outside the plane);  U = GH g GW^T: g a KH x KW filter.
// Per direction, r = KH (or KW) > 1 takes m = 2 outputs a tile and alpha = r + 1 transform points
// (Toom-Cook at 0, 1, -1, 2, -2, 1/2, -1/2 and infinity); r = 1 is the identity (m = alpha = 1).  The
// host makes the matrices exactly (fractions: labkit.ops.conv_winograd_gemm.toom_cook) and passes them
// as WGG_BTH, WGG_ATH, WGG_GH (and _W); F(2x2, 3x3)'s, the defaults, are
//   B^T = [1 0 -1 0; 0 1 1 0; 0 1 -1 0; 0 1 0 -1], G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1],
//   A^T = [1 1 -1 0; 0 1 1 -1].
// The transforms multiply by the matrices' entries with every loop unrolled: the compiler keeps only
// the nonzero terms, and a 1 or -1 costs no multiply (a zero term is left out, not multiplied: 0 * NaN
// would be NaN).
// Dilation (DH, DW): the outputs of one phase (rows oh = p (mod DH), likewise columns) are an undilated
// convolution of the input rows of the same phase, so a tile takes MH outputs DH rows apart and its patch
// AH input rows DH apart; tiles are counted phase by phase (TH = DH ceil(ceil(HO / DH) / MH)), each
// phase's last ones guarded where they pass the plane.  Nothing is copied (no space-to-batch).
// Position xi = AW a + b of the transforms is one GEMM per group: Mx[xi, g] (Mg x T) = U[xi, g] (Mg x Cg)
// @ V[xi, g] (Cg x T), T the batch's tiles.  That is AH AW multiply-adds per (m, c, tile) for the direct
// method's MH MW KH KW: 16 for 36 at 3x3, 36 for 100 at 5x5.
//
// conv_winograd.cu does F(2x2, 3x3) in one kernel, its transforms in shared memory: it wins where a
// block's few output channels and one row of tiles keep the GEMMs busy (ResNet-small's 16-64 channels
// on 28 x 28).  With hundreds of channels on small planes (14 x 14, 7 x 7) its blocks have too little
// to multiply; here the GEMMs are whole-batch products of the tuned GEMM kernel (gemm.cu's
// gemm_dbuf_batched), at the price of V and Mx travelling through memory: AH AW values per (channel,
// tile) each way, 4x the input's and the output's size at 3x3, 9x at 5x5.  The autotuner weighs them.
//
// wgg_input(x, v, N)    v[xi][c][t] = (BH^T d BW)[xi] for channel c of tile t = (n, ri, rj), t fastest:
//   one thread per (c, t), its AH AW stores coalesced across the warp.  Grid (ceil(C * T / 256),),
//   block (256,).
// wgg_output(mx, b, res, gate, y, N, act)    y[n][m][oh0 + DH a][ow0 + DW b] = finish(AH^T Mx AW + bias
//   + res): one thread per (m, t), its AH AW loads coalesced.  act: 0 none, 1 tanh, 2 ReLU, 3 ReLU6, a
//   NaN kept as PyTorch keeps it (conv_implicit.cu's finish); then 0 where gate <= 0 (WGG_GATE: a
//   training step's ReLU backward riding in the store; a NaN gate passes the value, as conv_small.cu's
//   epilogue does).  b read where WGG_BIAS, res where WGG_ADD, gate where WGG_GATE.
//   Grid (ceil(M * T / 256),), block (256,).
// wgg_weights(wt, u)    U (AH AW, M, C/groups) on the GPU.  WGG_MCKK: wt is a layer's own weights
//   (M, C/groups, KH, KW), transformed once when the layer plans (a call of labkit.conv2d makes its
//   layer anew: a host transform would download and multiply at every call).  Else a training layer's
//   weights (one group), the forward layer's (C_f * KH * KW, M_f) layout, read at every step (the step
//   changes them); with WGG_FLIP the backward-data pass's: the forward's filters turned 180 degrees,
//   its C_f and M_f swapped (the kernel's C is M_f, its M is C_f).  One thread per (m, c).
//   Grid (ceil(M * C/groups / 256),), block (256,).
// NaN: with m = 2 and the points 0 and infinity, input column 0 of BH^T reaches only the point 0, which
// A^T's second row drops, and the last column only infinity, which its first row drops: a NaN of x
// reaches exactly the outputs whose windows hold it, as in the direct convolution.  (F(4x4, 3x3) would
// spread it over the tile: it is not offered here.)
// x (N, C, H, W), y and res (N, M, HO, WO), v (AH AW, C, T), mx (AH AW, M, T), float32, C-contiguous.
// Compile-time: WGG_C, WGG_H, WGG_W, WGG_M, WGG_G (groups), WGG_KH, WGG_KW, WGG_PH, WGG_PW, WGG_DH, WGG_DW, the
// matrices, WGG_BIAS, WGG_ADD, WGG_GATE, WGG_FLIP, WGG_MCKK.

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
#ifndef WGG_KH
#define WGG_KH 3
#endif
#ifndef WGG_KW
#define WGG_KW 3
#endif
#ifndef WGG_PH
#define WGG_PH 1
#endif
#ifndef WGG_PW
#define WGG_PW 1
#endif
#ifndef WGG_DH
#define WGG_DH 1
#endif
#ifndef WGG_DW
#define WGG_DW 1
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
#ifndef WGG_MCKK
#define WGG_MCKK 0
#endif
#ifndef WGG_G
#define WGG_G 1
#endif
// F(2, 3)'s matrices, the defaults of both directions (a 3x3 window)
#ifndef WGG_BTH
#define WGG_BTH {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, 1, -1, 0}, {0, 1, 0, -1}}
#define WGG_ATH {{1, 1, -1, 0}, {0, 1, 1, -1}}
#define WGG_GH {{1, 0, 0}, {0.5f, 0.5f, 0.5f}, {0.5f, -0.5f, 0.5f}, {0, 0, 1}}
#endif
#ifndef WGG_BTW
#define WGG_BTW WGG_BTH
#define WGG_ATW WGG_ATH
#define WGG_GW WGG_GH
#endif

namespace wgg {
constexpr int C = WGG_C, H = WGG_H, W = WGG_W, M = WGG_M, KH = WGG_KH, KW = WGG_KW, PH = WGG_PH, PW = WGG_PW;
constexpr int CG = C / WGG_G;                                // a group's input channels (the transforms need no more)
constexpr int MH = KH > 1 ? 2 : 1, MW = KW > 1 ? 2 : 1;      // outputs of a tile, per direction
constexpr int AH = MH + KH - 1, AW = MW + KW - 1;            // transform points, per direction
constexpr int P = AH * AW;                                   // transform positions: GEMMs per group
constexpr int DH = WGG_DH, DW = WGG_DW;
constexpr int HO = H + 2 * PH - DH * (KH - 1), WO = W + 2 * PW - DW * (KW - 1);   // stride 1
static_assert(HO >= 1 && WO >= 1, "the window does not fit the padded input");
// tiles of one phase (outputs DH rows apart), and of the plane: every phase's, phase by phase
constexpr int PTH = ((HO + DH - 1) / DH + MH - 1) / MH, PTW = ((WO + DW - 1) / DW + MW - 1) / MW;
constexpr int TH = DH * PTH, TW = DW * PTW;

// A tile's first output row (column): tile row ri is the ti-th tile of phase ri / PTH.
__device__ __forceinline__ int first_row(int ri) { return ri / PTH + DH * MH * (ri % PTH); }
__device__ __forceinline__ int first_col(int rj) { return rj / PTW + DW * MW * (rj % PTW); }

// The matrices' entries, looked up with indices the unrolled loops make constant.
__host__ __device__ constexpr float bth(int i, int j) { constexpr float a[AH][AH] = WGG_BTH; return a[i][j]; }
__host__ __device__ constexpr float btw(int i, int j) { constexpr float a[AW][AW] = WGG_BTW; return a[i][j]; }
__host__ __device__ constexpr float ath(int i, int j) { constexpr float a[MH][AH] = WGG_ATH; return a[i][j]; }
__host__ __device__ constexpr float atw(int i, int j) { constexpr float a[MW][AW] = WGG_ATW; return a[i][j]; }
__host__ __device__ constexpr float gh(int i, int j) { constexpr float a[AH][KH] = WGG_GH; return a[i][j]; }
__host__ __device__ constexpr float gw(int i, int j) { constexpr float a[AW][KW] = WGG_GW; return a[i][j]; }

// acc += c * v where c is a matrix entry: nothing where c is 0, no multiply where it is 1 or -1, and
// the first term assigned rather than added to 0 (with the loops unrolled, c and `any` are constants).
__device__ __forceinline__ void add_term(float& acc, bool& any, float c, float v) {
  if (c == 0.0f) return;
  const float t = c == 1.0f ? v : (c == -1.0f ? -v : c * v);
  acc = any ? acc + t : t;
  any = true;
}
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
  const int h0 = first_row(r / TW) - PH, w0 = first_col(r % TW) - PW;
  const float* __restrict__ plane = x + ((size_t)n * C + c) * H * W;
  float d[AH][AW];
#pragma unroll
  for (int a = 0; a < AH; ++a) {
    const int h = h0 + DH * a;
    const bool row = h >= 0 && h < H;
#pragma unroll
    for (int b = 0; b < AW; ++b) {
      const int w = w0 + DW * b;
      d[a][b] = row && w >= 0 && w < W ? plane[h * W + w] : 0.0f;
    }
  }
  float s[AH][AW];   // BH^T d: each column of d
#pragma unroll
  for (int a = 0; a < AH; ++a)
#pragma unroll
    for (int b = 0; b < AW; ++b) {
      float acc = 0.0f;
      bool any = false;
#pragma unroll
      for (int k = 0; k < AH; ++k) add_term(acc, any, bth(a, k), d[k][b]);
      s[a][b] = acc;
    }
  float* __restrict__ out = v + (size_t)c * T + t;
  const size_t step = (size_t)C * T;   // from one transform position to the next
#pragma unroll
  for (int a = 0; a < AH; ++a)         // (BH^T d) BW: each row
#pragma unroll
    for (int b = 0; b < AW; ++b) {
      float acc = 0.0f;
      bool any = false;
#pragma unroll
      for (int k = 0; k < AW; ++k) add_term(acc, any, btw(b, k), s[a][k]);
      out[(AW * a + b) * step] = acc;
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
  const int oh = first_row(r / TW), ow = first_col(r % TW);
  const float* __restrict__ in = mx + (size_t)m * T + t;
  const size_t step = (size_t)M * T;
  float q[AH][AW];
#pragma unroll
  for (int a = 0; a < AH; ++a)
#pragma unroll
    for (int c = 0; c < AW; ++c) q[a][c] = in[(AW * a + c) * step];
  float s[MH][AW];   // AH^T q: each column
#pragma unroll
  for (int a = 0; a < MH; ++a)
#pragma unroll
    for (int c = 0; c < AW; ++c) {
      float acc = 0.0f;
      bool any = false;
#pragma unroll
      for (int k = 0; k < AH; ++k) add_term(acc, any, ath(a, k), q[k][c]);
      s[a][c] = acc;
    }
  const float bias = WGG_BIAS ? b[m] : 0.0f;
  const size_t base = ((size_t)n * M + m) * HO * WO;
#pragma unroll
  for (int a = 0; a < MH; ++a) {
    if (oh + DH * a >= HO) break;
#pragma unroll
    for (int c = 0; c < MW; ++c) {
      if (ow + DW * c >= WO) break;
      float o = 0.0f;   // (AH^T q) AW
      bool any = false;
#pragma unroll
      for (int k = 0; k < AW; ++k) add_term(o, any, atw(c, k), s[a][k]);
      const size_t at = base + (size_t)(oh + DH * a) * WO + ow + DW * c;
      float v = wgg_finish(o, bias, WGG_ADD ? res[at] : 0.0f, act);
      if (WGG_GATE && gate[at] <= 0.0f) v = 0.0f;
      y[at] = v;
    }
  }
}

extern "C" __global__ void wgg_weights(const float* __restrict__ wt, float* __restrict__ u) {
  using namespace wgg;
  constexpr int TAPS = KH * KW;
  constexpr int CIN = WGG_MCKK ? CG : C;       // U's columns: a group's channels
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= M * CIN) return;
  const int m = i / CIN, c = i % CIN;
  float g[KH][KW];
#pragma unroll
  for (int tap = 0; tap < TAPS; ++tap)
    g[tap / KW][tap % KW] = WGG_MCKK ? wt[((size_t)m * CIN + c) * TAPS + tap]
                          : WGG_FLIP ? wt[(m * TAPS + TAPS - 1 - tap) * C + c] : wt[(c * TAPS + tap) * M + m];
  float t[AH][KW];   // GH g: each column of g
#pragma unroll
  for (int a = 0; a < AH; ++a)
#pragma unroll
    for (int j = 0; j < KW; ++j) {
      float acc = 0.0f;
      bool any = false;
#pragma unroll
      for (int k = 0; k < KH; ++k) add_term(acc, any, gh(a, k), g[k][j]);
      t[a][j] = acc;
    }
  float* __restrict__ out = u + (size_t)m * CIN + c;
  const size_t step = (size_t)M * CIN;
#pragma unroll
  for (int a = 0; a < AH; ++a)   // (GH g) GW^T: each row
#pragma unroll
    for (int b = 0; b < AW; ++b) {
      float acc = 0.0f;
      bool any = false;
#pragma unroll
      for (int k = 0; k < KW; ++k) add_term(acc, any, gw(b, k), t[a][k]);
      out[(AW * a + b) * step] = acc;
    }
}
