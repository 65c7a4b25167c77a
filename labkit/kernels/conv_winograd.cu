// conv_winograd.cu -- 3x3 convolutions (stride 1, zero padding 1) by Winograd's minimal filtering
// F(2x2, 3x3): each 2x2 block of outputs from a 4x4 block of inputs with 16 multiplications per
// (input, output) channel pair instead of the direct method's 36, 2.25x fewer.
//
//   y = A^T [ (G g G^T) . (B^T d B) ] A        summed over the input channels, per 2x2 output tile
//   d: the tile's 4x4 input patch (rows 2i - 1 .. 2i + 2, columns 2j - 1 .. 2j + 2, zeros outside);
//   g: a 3x3 filter; "." elementwise.  With U = G g G^T and V = B^T d B precomputed, the sum over
//   input channels c is 16 independent products, one per position xi of the 4x4 transforms:
//       Mx[xi][m][t] = sum over c of U[xi][m][c] * V[xi][c][t]          (16 GEMMs, M x C by C x tiles)
//   and the output tile is A^T Mx A.  The transforms are additions only (B, A have entries 0, +-1;
//   G has +-1/2), done once per weight and once per (input channel, tile), so the multiply-adds are
//   the GEMMs': 16 * M * C per tile of 4 outputs.
//   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1],
//   A^T = [1 1 1 0; 0 1 -1 -1].  The rounding error grows a little (sums of up to 4 terms in each
//   transform): still about 1e-7 of the output's size in float32.
//
// winograd_weights(wt, u)    U for every (m, c): 16 x C x M values (the GEMMs' A operand), laid out
//   for the convolution's blocks (wg_u_index: a block's slice of a chunk is one contiguous run).
//   wt: the forward layer's weights in the (C*9, M) layout; with WG_FLIP it transforms the
//   backward-data filters, the forward's turned 180 degrees with C and M swapped.  Grid
//   (ceil(C * M / 256),), block (256,).  Weights change every training step, so this runs before
//   each convolution (16 * C * M values: a few microseconds).
// winograd_conv(x, u, b, addend, gate, y, N, relu)    the convolution and conv_small's epilogue:
//   v = acc + b[m] (WG_BIAS) + addend (WG_ADD); ReLU if relu; 0 where gate <= 0 (WG_GATE).
//   A block owns WG_MB output channels of WG_TR rows of tiles of one image (TB = WG_TR * ceil(W / 2)
//   tiles) and walks the input channels WG_CK at a time.  Per chunk:
//   * copies: the chunk's input rows (2 * WG_TR + 2 of each channel; zeros above and below the
//     plane, and zero columns either side written once, so the transform reads any patch unchecked)
//     and its slice of U travel from global to shared memory with cp.async, one chunk ahead: while a
//     chunk is transformed and multiplied the next one's bytes are in flight, and no register holds
//     them on the way.  (On the CPU executor a copy is a plain load and store: it lands at once,
//     which the barriers' order makes the same computation.)
//   * the transform: a thread per (channel, tile) turns its 4x4 patch of the staged rows into V
//     (shared memory, 16 slices, one per transform position xi);
//   * the 16 GEMMs: a group of G = (WG_MB / WG_RM) * (TB / WG_RT) threads per position xi (a warp
//     when G is 32), each thread a WG_RM x WG_RT block of Mx[xi] (output channels by tiles) in
//     registers.  A thread's channels are WG_MG apart, or runs of 4 that far apart (16-byte loads), and
//     so are its tiles: the lanes of a group that share a tile column read the same V value (one
//     broadcast), those that share channels the same U value, and the runs of neighbouring lanes
//     fall in different banks.  Per input channel a thread loads WG_RM + WG_RT values for
//     WG_RM * WG_RT multiply-adds; its group reads only WG_MB + TB distinct ones.
//   The output transform needs a tile's 16 positions, which 16 groups hold: they meet in shared
//   memory, and each thread then finishes whole tiles.  Grid (N * ceil(ceil(H / 2) / WG_TR) * M / WG_MB,),
//   block (WG_THREADS,), dynamic shared memory WG_SHARED_FLOATS * 4 bytes.
// x (N, C, H, W), y (N, M, H, W), b (M,), addend and gate as y; u 16 * C * M; float32, C-contiguous.
// Compile-time parameters: WG_C, WG_M (the kernel's input and output channels: for backward data the
// forward's M and C), WG_H, WG_W, the tile (WG_MB, WG_RM, WG_TR, WG_RT, WG_CK) and the epilogue
// (WG_BIAS, WG_ADD, WG_GATE); WG_FLIP for the weight transform.

#ifndef WG_C
#define WG_C 16
#endif
#ifndef WG_M
#define WG_M 16
#endif
#ifndef WG_H
#define WG_H 28
#endif
#ifndef WG_W
#define WG_W 28
#endif
#ifndef WG_MB
#define WG_MB 16
#endif
#ifndef WG_RM
#define WG_RM 4
#endif
#ifndef WG_TR
#define WG_TR 2
#endif
#ifndef WG_RT
#define WG_RT 7
#endif
#ifndef WG_CK
#define WG_CK 8
#endif
#ifndef WG_BIAS
#define WG_BIAS 0
#endif
#ifndef WG_ADD
#define WG_ADD 0
#endif
#ifndef WG_GATE
#define WG_GATE 0
#endif
#ifndef WG_FLIP
#define WG_FLIP 0
#endif

static_assert(WG_M % WG_MB == 0 && WG_MB % WG_RM == 0 && WG_C % WG_CK == 0,
              "WG_MB must divide WG_M, WG_RM WG_MB and WG_CK WG_C");

constexpr int WG_TW = (WG_W + 1) / 2, WG_TH = (WG_H + 1) / 2;   // tiles across and down a plane
constexpr int WG_BANDS = (WG_TH + WG_TR - 1) / WG_TR;            // bands of WG_TR tile rows
constexpr int WG_TB = WG_TR * WG_TW;                             // tiles a block owns
constexpr int WG_MG = WG_MB / WG_RM;                             // groups of output channels
constexpr int WG_TG = (WG_TB + WG_RT - 1) / WG_RT;               // groups of tiles
constexpr int WG_TBP = WG_TG * WG_RT;                            // tiles, padded to whole groups
constexpr int WG_G = WG_MG * WG_TG;                              // threads per transform position
constexpr int WG_THREADS = 16 * WG_G;
// Pitches of the 16 positions' slices: 4 more than a multiple of 32 floats, so that positions read
// side by side (when a group is smaller than a quarter-warp) fall in different banks.
__host__ __device__ constexpr int wg_pitch4(int n) { return n + (36 - n % 32) % 32; }
constexpr bool WG_VEC_U = WG_RM % 4 == 0, WG_VEC_V = WG_RT % 4 == 0;   // 16-byte register loads
constexpr bool WG_PAIR_V = WG_TG == 1 && WG_RT % 2 == 0;              // else 8-byte ones
constexpr int WG_CHUNKS = WG_C / WG_CK, WG_MCHUNKS = WG_M / WG_MB;
constexpr int WG_USLICE = WG_CK * WG_MB;                        // U values of one position, block and chunk
constexpr bool WG_COPY16_U = WG_USLICE % 4 == 0;                // 16-byte copies of U
constexpr bool WG_COPY16_X = WG_W % 4 == 0;                     // 16-byte copies of x's rows
constexpr int WG_RROWS = 2 * WG_TR + 2;                         // input rows a chunk's channel stages
// A staged row: 4 zeros (column -1 of the plane is the last of them), the W values from a 16-byte
// boundary, zeros up to the pitch (column W, and W + 1 of an odd W's last tile): the transform reads
// any patch without a bounds check.  The zeros are written once; copies never touch them.
constexpr int WG_RAW0 = 4, WG_RAWP = (WG_RAW0 + WG_W + 2 + 3) / 4 * 4;
constexpr int WG_RAW_FLOATS = WG_CK * WG_RROWS * WG_RAWP;
constexpr int WG_VS = wg_pitch4(WG_CK * WG_TBP);
constexpr int WG_US = wg_pitch4(WG_USLICE);
constexpr int WG_SS = (WG_MB * WG_TBP) | 1;                     // the sums' slices, for the output transform
// Shared memory: U's two stages, the raw rows' two stages, V; the sums reuse it after the last chunk.
constexpr int WG_U_AT = 0, WG_RAW_AT = 2 * 16 * WG_US, WG_V_AT = WG_RAW_AT + 2 * WG_RAW_FLOATS;
constexpr int WG_GEMM_FLOATS = WG_V_AT + 16 * WG_VS;
constexpr int WG_SUM_FLOATS = 16 * WG_SS;
constexpr int WG_SHARED_FLOATS = WG_GEMM_FLOATS > WG_SUM_FLOATS ? WG_GEMM_FLOATS : WG_SUM_FLOATS;
static_assert(WG_THREADS <= 1024, "WG_THREADS: at most 1024 (fewer output channels or tiles a block)");
// Blocks an SM should hold at once, for __launch_bounds__: at least 512 threads an SM, which caps a
// thread at 128 registers (more would leave too few warps to hide the shared loads' latency).
#ifndef WG_MINB
#define WG_MINB (WG_THREADS >= 512 ? 1 : 512 / WG_THREADS)
#endif

// Where U(xi, c, m) lives in u: the block of (output channels m / WG_MB, chunk c / WG_CK) is one
// contiguous run of 16 * WG_USLICE values ([xi][c % WG_CK][m % WG_MB]), which a block copies as is.
__host__ __device__ constexpr long long wg_u_index(int xi, int c, int m) {
  return (((long long)(m / WG_MB) * WG_CHUNKS + c / WG_CK) * 16 + xi) * WG_USLICE + (c % WG_CK) * WG_MB + m % WG_MB;
}

extern "C" __global__ void winograd_weights(const float* __restrict__ wt, float* __restrict__ u) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;     // (c, m) of the kernel's orientation
  if (i >= WG_C * WG_M) return;
  const int m = i % WG_M, c = i / WG_M;
  float g[3][3];
#pragma unroll
  for (int kh = 0; kh < 3; ++kh)
#pragma unroll
    for (int kw = 0; kw < 3; ++kw)
#if WG_FLIP
      // Backward data: g[m][c] = w_forward[c][m] turned; wt rows (m * 9 + tap) of the forward's
      // (M_kernel * 9, C_kernel) layout.
      g[kh][kw] = wt[(m * 9 + 8 - (kh * 3 + kw)) * WG_C + c];
#else
      g[kh][kw] = wt[(c * 9 + kh * 3 + kw) * WG_M + m];
#endif
  float t[4][3];                                            // G g
#pragma unroll
  for (int j = 0; j < 3; ++j) {
    t[0][j] = g[0][j];
    t[1][j] = 0.5f * (g[0][j] + g[1][j] + g[2][j]);
    t[2][j] = 0.5f * (g[0][j] - g[1][j] + g[2][j]);
    t[3][j] = g[2][j];
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {                             // (G g) G^T
    const float v[4] = {t[r][0], 0.5f * (t[r][0] + t[r][1] + t[r][2]), 0.5f * (t[r][0] - t[r][1] + t[r][2]),
                        t[r][2]};
#pragma unroll
    for (int s = 0; s < 4; ++s) u[wg_u_index(r * 4 + s, c, m)] = v[s];
  }
}

// Global-to-shared copies that complete in the background (cp.async, sm_80 and later); a copy
// whose `read` is false writes zeros.  wg_copies_wait: every copy this thread issued has landed.
#if defined(LABKIT_CUDA_ARCH)
__device__ __forceinline__ void wg_copy4(float* dst, const float* src, bool read) { *dst = read ? *src : 0.0f; }
__device__ __forceinline__ void wg_copy16(float* dst, const float* src, bool read) {
  *reinterpret_cast<float4*>(dst) = read ? *reinterpret_cast<const float4*>(src) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}
__device__ __forceinline__ void wg_copies_wait() {}
#else
__device__ __forceinline__ void wg_copy4(float* dst, const float* src, bool read) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(read ? 4 : 0));
}
__device__ __forceinline__ void wg_copy16(float* dst, const float* src, bool read) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(read ? 16 : 0));
}
__device__ __forceinline__ void wg_copies_wait() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
#endif

// The thread's i-th output channel (of WG_RM) or tile (of WG_RT) within the block, g its group
// among `groups`: runs of 4, 4 * groups apart, for 16-byte loads; else single values `groups` apart.
template <int R, int GROUPS>
__device__ __forceinline__ int wg_spread(int i, int g) {
  return R % 4 == 0 ? (i / 4) * (4 * GROUPS) + g * 4 + i % 4 : i * GROUPS + g;
}

// Stage the input rows of chunk c0 (2 * WG_TR + 2 of each channel) into `raw`, VEC floats a copy.
template <int VEC>
__device__ __forceinline__ void wg_stage_rows(const float* __restrict__ x, float* raw, int n, int trow0, int c0,
                                              int tid) {
  constexpr int ROWV = WG_W / VEC, COUNT = WG_CK * WG_RROWS * ROWV;
#pragma unroll 1
  for (int e = tid; e < COUNT; e += WG_THREADS) {
    const int col = e % ROWV, rr = (e / ROWV) % WG_RROWS, cc = e / (ROWV * WG_RROWS);
    const int h = 2 * trow0 - 1 + rr;
    const bool inside = h >= 0 && h < WG_H;
    // Rows outside the plane are zeros; their copies read nothing (x itself stands in as the source).
    const float* src = inside ? x + (((long long)n * WG_C + c0 + cc) * WG_H + h) * WG_W + col * VEC : x;
    float* dst = raw + (cc * WG_RROWS + rr) * WG_RAWP + WG_RAW0 + col * VEC;
    if (VEC == 4) wg_copy16(dst, src, inside);
    else wg_copy4(dst, src, inside);
  }
}

// Stage chunk k's input rows and U slice into the buffers `raw` and `su` (copies in flight).
__device__ __forceinline__ void wg_stage(const float* __restrict__ x, const float* __restrict__ u, float* raw,
                                         float* su, int n, int trow0, int mc, int k, int tid) {
  const float* slice = u + ((long long)mc * WG_CHUNKS + k) * 16 * WG_USLICE;
  constexpr int VEC = WG_COPY16_U ? 4 : 1, ROWV = WG_USLICE / VEC, COUNT = 16 * ROWV;
#pragma unroll 1
  for (int e = tid; e < COUNT; e += WG_THREADS) {   // row p of the slice to row p of su, pitch WG_US
    float* dst = su + (e / ROWV) * WG_US + (e % ROWV) * VEC;
    if (VEC == 4) wg_copy16(dst, slice + e * VEC, true);
    else wg_copy4(dst, slice + e, true);
  }
  // 16-byte copies of x's rows where they are 16-byte aligned (a view into a larger array may not be)
  if (WG_COPY16_X && (reinterpret_cast<unsigned long long>(x) & 15) == 0)
    wg_stage_rows<4>(x, raw, n, trow0, k * WG_CK, tid);
  else
    wg_stage_rows<1>(x, raw, n, trow0, k * WG_CK, tid);
}

extern "C" __global__ void __launch_bounds__(WG_THREADS, WG_MINB) winograd_conv(
    const float* __restrict__ x, const float* __restrict__ u, const float* __restrict__ b,
    const float* __restrict__ addend, const float* __restrict__ gate, float* __restrict__ y, int N, int relu) {
  extern __shared__ __align__(16) float smem[];
  float* sv = smem + WG_V_AT;        // [16][WG_VS]: V[xi][c][t] of the chunk
  constexpr int MCHUNKS = WG_MCHUNKS, CHUNKS = WG_CHUNKS;
  const int mc = blockIdx.x % MCHUNKS;
  const int band = (blockIdx.x / MCHUNKS) % WG_BANDS;
  const int n = blockIdx.x / (MCHUNKS * WG_BANDS);
  if (n >= N) return;
  const int m0 = mc * WG_MB, trow0 = band * WG_TR;
  const int tid = threadIdx.x;
  const int xi = tid / WG_G, r = tid % WG_G, mg = r % WG_MG, tg = r / WG_MG;
  float acc[WG_RM][WG_RT];
#pragma unroll
  for (int i = 0; i < WG_RM; ++i)
#pragma unroll
    for (int j = 0; j < WG_RT; ++j) acc[i][j] = 0.0f;

  // The rows' zero columns, in both stages, before any copy lands beside them.
  for (int e = tid; e < 2 * WG_CK * WG_RROWS * (WG_RAWP - WG_W); e += WG_THREADS) {
    const int row = e / (WG_RAWP - WG_W), col = e % (WG_RAWP - WG_W);
    smem[WG_RAW_AT + row * WG_RAWP + (col < WG_RAW0 ? col : col + WG_W)] = 0.0f;
  }
  wg_stage(x, u, smem + WG_RAW_AT, smem + WG_U_AT, n, trow0, mc, 0, tid);
  for (int k = 0; k < CHUNKS; ++k) {
    const int s = k & 1;
    float* raw = smem + WG_RAW_AT + s * WG_RAW_FLOATS;
    const float* su = smem + WG_U_AT + s * 16 * WG_US;
    wg_copies_wait();
    __syncthreads();                   // chunk k has landed; every thread is done with chunk k - 1
    if (k + 1 < CHUNKS)                // the other stage was last read before the barrier
      wg_stage(x, u, smem + WG_RAW_AT + (s ^ 1) * WG_RAW_FLOATS, smem + WG_U_AT + (s ^ 1) * 16 * WG_US, n, trow0,
               mc, k + 1, tid);
    // V: one thread per (channel, tile) of the chunk: its 4x4 patch, B^T d B, 16 values.
    for (int e = tid; e < WG_CK * WG_TBP; e += WG_THREADS) {
      const int cc = e / WG_TBP, t = e % WG_TBP;
      const int tr = t / WG_TW, tj = t % WG_TW;
      const bool live = t < WG_TB && trow0 + tr < WG_TH;   // padded tiles multiply zeros
      const float* rows = raw + (cc * WG_RROWS + 2 * tr) * WG_RAWP + WG_RAW0 + 2 * tj - 1;   // column 2 tj - 1
      float d[4][4];
#pragma unroll
      for (int rr = 0; rr < 4; ++rr)
#pragma unroll
        for (int ss = 0; ss < 4; ++ss) d[rr][ss] = live ? rows[rr * WG_RAWP + ss] : 0.0f;
      float bt[4][4];                                        // B^T d
#pragma unroll
      for (int ss = 0; ss < 4; ++ss) {
        bt[0][ss] = d[0][ss] - d[2][ss];
        bt[1][ss] = d[1][ss] + d[2][ss];
        bt[2][ss] = d[2][ss] - d[1][ss];
        bt[3][ss] = d[1][ss] - d[3][ss];
      }
#pragma unroll
      for (int rr = 0; rr < 4; ++rr) {                        // (B^T d) B
        float* out = sv + (rr * 4) * WG_VS + cc * WG_TBP + t;
        out[0 * WG_VS] = bt[rr][0] - bt[rr][2];
        out[1 * WG_VS] = bt[rr][1] + bt[rr][2];
        out[2 * WG_VS] = bt[rr][2] - bt[rr][1];
        out[3 * WG_VS] = bt[rr][1] - bt[rr][3];
      }
    }
    __syncthreads();                   // V complete
    const float* vx = sv + xi * WG_VS;
    const float* ux = su + xi * WG_US;
#pragma unroll
    for (int cc = 0; cc < WG_CK; ++cc) {
      float a[WG_RM], v[WG_RT];
      if (WG_VEC_U) {
#pragma unroll
        for (int i = 0; i < WG_RM; i += 4) {
          const float4 f = *reinterpret_cast<const float4*>(ux + cc * WG_MB + wg_spread<WG_RM, WG_MG>(i, mg));
          a[i] = f.x, a[i + 1] = f.y, a[i + 2] = f.z, a[i + 3] = f.w;
        }
      } else {
#pragma unroll
        for (int i = 0; i < WG_RM; ++i) a[i] = ux[cc * WG_MB + wg_spread<WG_RM, WG_MG>(i, mg)];
      }
      if (WG_VEC_V) {
#pragma unroll
        for (int j = 0; j < WG_RT; j += 4) {
          const float4 f = *reinterpret_cast<const float4*>(vx + cc * WG_TBP + wg_spread<WG_RT, WG_TG>(j, tg));
          v[j] = f.x, v[j + 1] = f.y, v[j + 2] = f.z, v[j + 3] = f.w;
        }
      } else if (WG_PAIR_V) {           // one group of tiles: a thread's are side by side, 8-byte loads
#pragma unroll
        for (int j = 0; j < WG_RT; j += 2) {
          const float2 f = *reinterpret_cast<const float2*>(vx + cc * WG_TBP + j);
          v[j] = f.x, v[j + 1] = f.y;
        }
      } else {
#pragma unroll
        for (int j = 0; j < WG_RT; ++j) v[j] = vx[cc * WG_TBP + wg_spread<WG_RT, WG_TG>(j, tg)];
      }
#pragma unroll
      for (int i = 0; i < WG_RM; ++i)
#pragma unroll
        for (int j = 0; j < WG_RT; ++j) acc[i][j] += a[i] * v[j];
    }
  }
  // The output transform needs a tile's 16 positions, which 16 groups hold: through shared memory.
  __syncthreads();
#pragma unroll
  for (int i = 0; i < WG_RM; ++i)
#pragma unroll
    for (int j = 0; j < WG_RT; ++j)
      smem[xi * WG_SS + wg_spread<WG_RM, WG_MG>(i, mg) * WG_TBP + wg_spread<WG_RT, WG_TG>(j, tg)] = acc[i][j];
  __syncthreads();
  for (int e = tid; e < WG_MB * WG_TB; e += WG_THREADS) {
    const int t = e % WG_TB, mm = e / WG_TB;
    const int ti = trow0 + t / WG_TW, tj = t % WG_TW;
    if (ti >= WG_TH) continue;
    float mx[4][4];
#pragma unroll
    for (int p = 0; p < 16; ++p) mx[p / 4][p % 4] = smem[p * WG_SS + mm * WG_TBP + t];
    float am[2][4];                                          // A^T Mx
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      am[0][s] = mx[0][s] + mx[1][s] + mx[2][s];
      am[1][s] = mx[1][s] - mx[2][s] - mx[3][s];
    }
    const int m = m0 + mm;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int h = 2 * ti + r;
      if (h >= WG_H) break;
      const float out2[2] = {am[r][0] + am[r][1] + am[r][2], am[r][1] - am[r][2] - am[r][3]};   // (A^T Mx) A
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const int w = 2 * tj + s;
        if (w >= WG_W) break;
        const long long idx = (((long long)n * WG_M + m) * WG_H + h) * WG_W + w;
        float v = out2[s];
#if WG_BIAS
        v += b[m];
#endif
#if WG_ADD
        v += addend[idx];
#endif
        if (relu) v = fmaxf(v, 0.0f);
#if WG_GATE
        if (!(gate[idx] > 0.0f)) v = 0.0f;
#endif
        y[idx] = v;
      }
    }
  }
}
