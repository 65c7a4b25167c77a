// conv_small.cu -- direct kernels for 3x3 convolutions (stride 1, zero padding 1) with few channels:
// the small ResNet's layers (16 or 64 channels on 28x28 planes), forward and backward.
//
//   forward         y[n, m, h, v] = epi(sum over c, kh, kw of w[m, c, kh, kw] * x[n, c, h - 1 + kh, v - 1 + kw])
//   backward data   dx = the same convolution of dy with w turned 180 degrees and C, M swapped
//   backward weight dw[m, c, kh, kw] = sum over n, h, v of dy[n, m, h, v] * x[n, c, h - 1 + kh, v - 1 + kw]
//   backward bias   db[m] = sum over n, h, v of dy[n, m, h, v]
//
// Why a kernel of its own: at 16 channels a 3x3 layer is a GEMM of 16 rows (M) by 144 (C*9) by
// 200,704 pixels (batch 256 on 28x28).  A GEMM kernel's tiles are made for large M and K: here they
// are mostly padding, and the implicit GEMM's im2col indexing costs more than the 144 multiply-adds
// each output needs.  A direct kernel keeps the plane's geometry in the compiler's hands (every
// index below is a compile-time constant plus a thread's offset) and reuses each value it loads
// from shared memory in as many multiply-adds as registers allow.
//
// conv_small(x, wt, b, addend, gate, y, N, relu)         forward, and backward data with SC_FLIP
//   A block computes SC_MB output channels of SC_ROWS rows of one image.  It stages SC_CB input
//   channels at a time -- their rows (with a zero halo, so the loop has no bounds checks) and their
//   weights -- in shared memory.  A thread owns SC_TM consecutive output channels of a vertical
//   strip of SC_L pixels in one column: for each input channel and each of the 3 columns of the
//   window it loads SC_L + 2 input values once and uses each in up to 3 * SC_TM multiply-adds (one
//   per kernel row and output channel), with the SC_TM weights of a tap read as one vector that
//   every thread of a warp shares (a broadcast).  Neighbouring threads take neighbouring columns, so
//   a warp's loads of x hit consecutive banks.
//   The epilogue, all optional (compile-time): v = acc + b[m] (SC_BIAS) + addend (SC_ADD);
//   v = max(v, 0) if relu; v = 0 where gate <= 0 (SC_GATE).  Forward: bias, the residual block's
//   skip as addend, ReLU.  Backward data: the ReLU's backward as the gate (dL/dh = 0 where h <= 0,
//   else dL/dy') and the skip's gradient as the addend: the elementwise passes of the backward ride
//   in the convolution's one store.  NaN as in PyTorch: the ReLU keeps a NaN, and a NaN gate lets
//   the gradient through (threshold_backward's rule).
//   wt: the forward layer's weights in the (C*9, M) layout (row (c, kh, kw), column m).  With
//   SC_FLIP the kernel reads them turned and transposed while staging them (backward data needs no
//   flipped copy): its input channels are the forward's M, its outputs the forward's C.
//   Grid (N * ceil(H / SC_ROWS) * SC_M / SC_MB,), the output-channel chunk fastest (blocks that
//   share an image tile run together and find it in L2); block (SC_THREADS,) =
//   (SC_MB / SC_TM) * (SC_ROWS / SC_L) * W; dynamic shared memory
//   SC_SHARED_FLOATS * 4 bytes (labkit.ops.conv_small computes the same).
//
// conv_small_wgrad(x, dy, ws, N, slices)                backward weight and bias, partial sums per slice
//   The sum runs over every pixel of the batch.  A unit of work is SW_ROWS rows of one image; a
//   block owns SW_CB input channels by SW_MB output channels of dw and a slice of consecutive units
//   (the N * ceil(H / SW_ROWS) units split as evenly as whole units allow).  It stages a unit's rows
//   of x (zero halo) and of dy in shared memory by asynchronous copies (cp.async: 8 and 16 bytes
//   at a time where the rows allow), the next unit's while it works on this one: two stages.  A
//   thread owns one input channel c and SW_TM output channels, all 9 taps: 9 * SW_TM sums in
//   registers.  It walks along a row of dy keeping the 3x3 window of x in registers (3 new values
//   a step) and loads SW_TM values of dy: 3 + SW_TM loads for 9 * SW_TM multiply-adds.  The lanes of
//   a warp take different c (x loads in distinct banks: the plane pitch is twice an odd number) and
//   share the dy loads (broadcasts).  SW_G groups of threads take the unit's rows in turn; at the
//   end the groups' sums are added in shared memory and written to ws[slice].  The bias gradient
//   db[m] = the sum of dy[n, m] comes from the staged dy as well: the block's threads split each
//   unit's dy values between them (a few adds a thread, in the blocks of the first input channels
//   only), where a kernel of its own would read dy again.
//   conv_small_wgrad_reduce(ws, dw, db, slices, wt) adds the slices in a fixed order (no atomics:
//   the same bits every run), dw in the (C*9, M) layout (wt = 1) or (M, C, 3, 3).
//   Grid (slices * C / SW_CB * M / SW_MB,), block (SW_THREADS,) = SW_CB * (SW_MB / SW_TM) * SW_G;
//   ws (slices, C*9 + 1, M); dynamic shared memory
//   SW_SHARED_FLOATS * 4 bytes.
//
// x (N, C, H, W), y (N, M, H, W), dy (N, M, H, W), b (M,), addend and gate as y; float32,
// C-contiguous.  Unused pointers (b, addend, gate without their flags) are never read.
// Compile-time parameters: SC_C, SC_M (the kernel's input and output channels: for backward data the
// forward's M and C), SC_H, SC_W, the tile (SC_MB, SC_TM, SC_ROWS, SC_L, SC_CB) and the epilogue
// (SC_BIAS, SC_ADD, SC_GATE, SC_FLIP); for the weight gradient SW_CB, SW_MB, SW_TM, SW_ROWS, SW_G.

#ifndef SC_C
#define SC_C 16
#endif
#ifndef SC_M
#define SC_M 16
#endif
#ifndef SC_H
#define SC_H 28
#endif
#ifndef SC_W
#define SC_W 28
#endif
#ifndef SC_MB
#define SC_MB 16
#endif
#ifndef SC_TM
#define SC_TM 4
#endif
#ifndef SC_ROWS
#define SC_ROWS 14
#endif
#ifndef SC_L
#define SC_L 7
#endif
#ifndef SC_CB
#define SC_CB 16
#endif
#ifndef SC_XP
#define SC_XP (SC_W + 2)
#endif
#ifndef SC_BIAS
#define SC_BIAS 0
#endif
#ifndef SC_ADD
#define SC_ADD 0
#endif
#ifndef SC_GATE
#define SC_GATE 0
#endif
#ifndef SC_FLIP
#define SC_FLIP 0
#endif
#ifndef SW_CB
#define SW_CB 16
#endif
#ifndef SW_MB
#define SW_MB 16
#endif
#ifndef SW_TM
#define SW_TM 4
#endif
#ifndef SW_ROWS
#define SW_ROWS 7
#endif
#ifndef SW_G
#define SW_G 4
#endif

static_assert(SC_M % SC_MB == 0 && SC_MB % SC_TM == 0 && SC_C % SC_CB == 0 && SC_ROWS % SC_L == 0,
              "SC_MB must divide SC_M, SC_TM SC_MB, SC_CB SC_C and SC_L SC_ROWS");
static_assert(SC_XP >= SC_W + 2, "SC_XP: a staged row holds the columns -1 .. W");
static_assert(SC_C % SW_CB == 0 && SC_M % SW_MB == 0 && SW_MB % SW_TM == 0,
              "SW_CB must divide SC_C, SW_MB SC_M and SW_TM SW_MB");

// Forward tile geometry.  SC_XP, the staged row's pitch (at least W + 2: the columns -1 .. W), is
// chosen by labkit.ops.conv_small so that a warp spanning two strips reads them from other banks.
constexpr int SC_TILES = (SC_H + SC_ROWS - 1) / SC_ROWS;
constexpr int SC_STRIPS = SC_ROWS / SC_L;
constexpr int SC_THREADS = (SC_MB / SC_TM) * SC_STRIPS * SC_W;
constexpr int SC_XPL = (SC_ROWS + 2) * SC_XP;         // a staged plane: rows -1 .. SC_ROWS
constexpr int SC_X_FLOATS = SC_CB * SC_XPL;
constexpr int SC_W_AT = (SC_X_FLOATS + 3) / 4 * 4;   // the weights start 16-byte aligned
constexpr int SC_SHARED_FLOATS = SC_W_AT + SC_CB * 9 * SC_MB;

extern "C" __global__ void __launch_bounds__(SC_THREADS) conv_small(
    const float* __restrict__ x, const float* __restrict__ wt, const float* __restrict__ b,
    const float* __restrict__ addend, const float* __restrict__ gate, float* __restrict__ y, int N, int relu) {
  extern __shared__ __align__(16) float smem[];
  float* sx = smem;                 // [SC_CB][SC_ROWS + 2][SC_XP]
  float* sw = smem + SC_W_AT;       // [SC_CB][9][SC_MB]: a tap's SC_MB weights side by side
  constexpr int MCHUNKS = SC_M / SC_MB;
  const int mc = blockIdx.x % MCHUNKS;
  const int tile = (blockIdx.x / MCHUNKS) % SC_TILES;
  const int n = blockIdx.x / (MCHUNKS * SC_TILES);
  if (n >= N) return;
  const int m0 = mc * SC_MB, row0 = tile * SC_ROWS;
  const int t = threadIdx.x;
  const int col = t % SC_W, strip = (t / SC_W) % SC_STRIPS, g = t / (SC_W * SC_STRIPS);
  float acc[SC_L][SC_TM];
#pragma unroll
  for (int i = 0; i < SC_L; ++i)
#pragma unroll
    for (int j = 0; j < SC_TM; ++j) acc[i][j] = 0.0f;

  for (int c0 = 0; c0 < SC_C; c0 += SC_CB) {
    if (c0) __syncthreads();        // every thread is done with the previous chunk
    const float* xn = x + ((long long)n * SC_C + c0) * SC_H * SC_W;
    for (int e = t; e < SC_X_FLOATS; e += SC_THREADS) {
      const int cc = e / SC_XPL, r = (e / SC_XP) % (SC_ROWS + 2), v = e % SC_XP;
      const int h = row0 - 1 + r, u = v - 1;
      sx[e] = (h >= 0 && h < SC_H && u >= 0 && u < SC_W) ? xn[(cc * SC_H + h) * SC_W + u] : 0.0f;
    }
    for (int e = t; e < SC_CB * 9 * SC_MB; e += SC_THREADS) {
      const int mm = e % SC_MB, tap = (e / SC_MB) % 9, cc = e / (9 * SC_MB);
#if SC_FLIP
      // Backward data: output channel o = the forward's c, input channel i = the forward's m;
      // w'[o, i, kh, kw] = w[i, o, 2 - kh, 2 - kw] = wt[(o * 9 + 8 - tap) * (forward M = SC_C) + i].
      sw[e] = wt[((m0 + mm) * 9 + 8 - tap) * SC_C + c0 + cc];
#else
      sw[e] = wt[((c0 + cc) * 9 + tap) * SC_M + m0 + mm];
#endif
    }
    __syncthreads();
#pragma unroll 2
    for (int cc = 0; cc < SC_CB; ++cc) {
      const float* xs = sx + cc * SC_XPL + strip * SC_L * SC_XP + col;   // window's top-left
      const float* wc = sw + cc * 9 * SC_MB + g * SC_TM;                 // the tap's SC_TM weights
#pragma unroll
      for (int kw = 0; kw < 3; ++kw) {
        float v[SC_L + 2];
#pragma unroll
        for (int i = 0; i < SC_L + 2; ++i) v[i] = xs[i * SC_XP + kw];
#pragma unroll
        for (int kh = 0; kh < 3; ++kh) {
          float f[SC_TM];
#if SC_TM % 4 == 0
#pragma unroll
          for (int q = 0; q < SC_TM / 4; ++q) {      // one 16-byte load per 4 weights
            const float4 f4 = reinterpret_cast<const float4*>(wc + (kh * 3 + kw) * SC_MB)[q];
            f[4 * q] = f4.x, f[4 * q + 1] = f4.y, f[4 * q + 2] = f4.z, f[4 * q + 3] = f4.w;
          }
#else
#pragma unroll
          for (int j = 0; j < SC_TM; ++j) f[j] = wc[(kh * 3 + kw) * SC_MB + j];
#endif
#pragma unroll
          for (int i = 0; i < SC_L; ++i)
#pragma unroll
            for (int j = 0; j < SC_TM; ++j) acc[i][j] += v[i + kh] * f[j];
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < SC_L; ++i) {
    const int h = row0 + strip * SC_L + i;
    if (h >= SC_H) break;
#pragma unroll
    for (int j = 0; j < SC_TM; ++j) {
      const int m = m0 + g * SC_TM + j;
      const long long at = (((long long)n * SC_M + m) * SC_H + h) * SC_W + col;
      float s = acc[i][j];
#if SC_BIAS
      s += b[m];
#endif
#if SC_ADD
      s += addend[at];
#endif
      // PyTorch's ReLU and its backward, NaN included: relu(NaN) is NaN (fmaxf would give 0), and
      // the gate zeroes only where gate <= 0, so a NaN gate lets the gradient through.
      if (relu) s = s < 0.0f ? 0.0f : s;
#if SC_GATE
      if (gate[at] <= 0.0f) s = 0.0f;
#endif
      y[at] = s;
    }
  }
}

// Weight-gradient tile geometry.  A staged row of x: SW_X0 zeros (column -1 is the last of them),
// the W values from an 8-byte boundary, zeros to an even pitch (column W is the first).  A channel's
// plane of rows, SW_XPL, is twice an odd number of floats: the SW_CB channels a warp's lanes read at
// one pixel fall in distinct banks, and 8-byte copies stay aligned.  dy's planes are an odd multiple
// of 4 floats (16-byte copies), so the few output channels whose dy a warp shares fall apart too.
constexpr int SW_X0 = 2, SW_XP = (SC_W + 2 * SW_X0 + 1) / 2 * 2;
constexpr int SW_XPL = (SW_ROWS + 2) * SW_XP % 4 ? (SW_ROWS + 2) * SW_XP : (SW_ROWS + 2) * SW_XP + 2;
constexpr int SW_DPL = ((SW_ROWS * SC_W + 3) / 4 * 4) | 4;
constexpr int SW_TASKS = SW_CB * (SW_MB / SW_TM);     // (c, output-channel group) pairs
constexpr int SW_THREADS = SW_TASKS * SW_G;
constexpr int SW_TILES = (SC_H + SW_ROWS - 1) / SW_ROWS;
constexpr int SW_D_AT = (SW_CB * SW_XPL + 3) / 4 * 4;           // dy's planes, 16-byte aligned
constexpr int SW_STAGE_FLOATS = SW_D_AT + SW_MB * SW_DPL;       // a multiple of 4: both stages aligned
constexpr int SW_PER = 9 * SW_TM;                               // a thread's sums
constexpr int SW_DB_AT = (SW_G - 1) * SW_TASKS * SW_PER;        // after the groups' sums: db's partial sums
constexpr int SW_DB_THREADS = SW_THREADS / SW_MB * SW_MB;       // the threads that add up dy, SW_MB a round
constexpr int SW_ROWS_OUT = SC_C * 9 + 1;                       // a slice's rows: dw's, then db's
constexpr int SW_SHARED_FLOATS =
    2 * SW_STAGE_FLOATS > SW_DB_AT + SW_THREADS ? 2 * SW_STAGE_FLOATS : SW_DB_AT + SW_THREADS;
static_assert(SW_THREADS >= SW_MB, "conv_small_wgrad: at least SW_MB threads (one a column of db)");

// Global-to-shared copies of 4, 8 or 16 bytes that complete in the background (cp.async, sm_80 and
// later); a copy whose `read` is false writes zeros.  sc_copies_wait: every copy this thread issued
// has landed.  On the CPU executor a copy is a plain load and store.
template <int VEC>
__device__ __forceinline__ void sc_copy(float* dst, const float* src, bool read) {
#if defined(LABKIT_CUDA_ARCH)
  for (int i = 0; i < VEC; ++i) dst[i] = read ? src[i] : 0.0f;
#else
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  if constexpr (VEC == 4)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(read ? 16 : 0));
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(d), "l"(src), "n"(VEC * 4),
                 "r"(read ? VEC * 4 : 0));
#endif
}
__device__ __forceinline__ void sc_copies_wait() {
#if !defined(LABKIT_CUDA_ARCH)
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// Copy CH x ROWS rows of W floats into shared memory (row i of channel k at dst + k * PLANE + i *
// PITCH), VEC floats a copy; src(k, i) is the global row, or null for a row of zeros.
template <int VEC, int CH, int ROWS, int PLANE, int PITCH, class Src>
__device__ __forceinline__ void sc_stage_rows(float* dst, const Src& src, const float* any, int t) {
  constexpr int RV = SC_W / VEC, COUNT = CH * ROWS * RV;
#pragma unroll 1
  for (int e = t; e < COUNT; e += SW_THREADS) {
    const int col = e % RV, i = (e / RV) % ROWS, k = e / (RV * ROWS);
    const float* row = src(k, i);
    sc_copy<VEC>(dst + k * PLANE + i * PITCH + col * VEC, row ? row + col * VEC : any, row != nullptr);
  }
}

// Stage unit (n, rows from row0) of x (channels c0 ..) and dy (channels m0 ..) into `st`: 8-byte
// copies of x's rows and 16-byte ones of dy's where W and the arrays' alignment allow.
__device__ __forceinline__ void sw_stage(const float* __restrict__ x, const float* __restrict__ dy, float* st, int n,
                                         int row0, int c0, int m0, int t) {
  const float* xn = x + ((long long)n * SC_C + c0) * SC_H * SC_W;
  const auto xrow = [&](int k, int i) -> const float* {      // staged row i: image row row0 - 1 + i
    const int h = row0 - 1 + i;
    return h >= 0 && h < SC_H ? xn + (k * SC_H + h) * SC_W : nullptr;
  };
  if (SC_W % 2 == 0 && (reinterpret_cast<unsigned long long>(x) & 7) == 0)
    sc_stage_rows<2, SW_CB, SW_ROWS + 2, SW_XPL, SW_XP>(st + SW_X0, xrow, x, t);
  else
    sc_stage_rows<1, SW_CB, SW_ROWS + 2, SW_XPL, SW_XP>(st + SW_X0, xrow, x, t);
  const float* dn = dy + ((long long)n * SC_M + m0) * SC_H * SC_W;
  const auto drow = [&](int k, int i) -> const float* {
    const int h = row0 + i;
    return h < SC_H ? dn + (k * SC_H + h) * SC_W : nullptr;
  };
  if (SC_W % 4 == 0 && (reinterpret_cast<unsigned long long>(dy) & 15) == 0)
    sc_stage_rows<4, SW_MB, SW_ROWS, SW_DPL, SC_W>(st + SW_D_AT, drow, dy, t);
  else
    sc_stage_rows<1, SW_MB, SW_ROWS, SW_DPL, SC_W>(st + SW_D_AT, drow, dy, t);
}

extern "C" __global__ void __launch_bounds__(SW_THREADS) conv_small_wgrad(
    const float* __restrict__ x, const float* __restrict__ dy, float* __restrict__ ws, int N, int slices) {
  extern __shared__ __align__(16) float smem[];
  constexpr int CCH = SC_C / SW_CB, MCH = SC_M / SW_MB;
  const int chunk = blockIdx.x % (CCH * MCH), slice = blockIdx.x / (CCH * MCH);
  const int c0 = (chunk % CCH) * SW_CB, m0 = (chunk / CCH) * SW_MB;
  const int t = threadIdx.x;
  const int cl = t % SW_CB, mg = (t / SW_CB) % (SW_MB / SW_TM), g = t / SW_TASKS;
  float acc[SW_TM][9];
#pragma unroll
  for (int j = 0; j < SW_TM; ++j)
#pragma unroll
    for (int k = 0; k < 9; ++k) acc[j][k] = 0.0f;
  float db = 0.0f;                   // this thread's share of db[m0 + t % SW_MB]
  const long long units = (long long)N * SW_TILES;     // slice s takes units [s * units / slices, ...)
  const int u_begin = (int)(slice * units / slices), u_end = (int)((slice + 1) * units / slices);
  // The rows' zero columns, in both stages, before any copy lands beside them.
  for (int e = t; e < 2 * SW_CB * (SW_ROWS + 2); e += SW_THREADS) {
    float* row = smem + (e / (SW_CB * (SW_ROWS + 2))) * SW_STAGE_FLOATS + (e % (SW_CB * (SW_ROWS + 2))) /
                 (SW_ROWS + 2) * SW_XPL + (e % (SW_ROWS + 2)) * SW_XP;
    for (int v = 0; v < SW_X0; ++v) row[v] = 0.0f;
    for (int v = SW_X0 + SC_W; v < SW_XP; ++v) row[v] = 0.0f;
  }
  if (u_begin < u_end)
    sw_stage(x, dy, smem, u_begin / SW_TILES, (u_begin % SW_TILES) * SW_ROWS, c0, m0, t);
  sc_copies_wait();
  __syncthreads();
  for (int u = u_begin; u < u_end; ++u) {
    const float* st = smem + ((u - u_begin) & 1) * SW_STAGE_FLOATS;
    if (u + 1 < u_end)                 // the other stage was last read before the previous barrier
      sw_stage(x, dy, smem + ((u - u_begin + 1) & 1) * SW_STAGE_FLOATS, (u + 1) / SW_TILES,
               ((u + 1) % SW_TILES) * SW_ROWS, c0, m0, t);
    const float* sx = st + SW_X0 - 1;  // column -1 of the first staged row
    const float* sd = st + SW_D_AT;
    if (c0 == 0 && t < SW_DB_THREADS)  // rows past the plane are zeros
      for (int p = t / SW_MB; p < SW_ROWS * SC_W; p += SW_DB_THREADS / SW_MB) db += sd[(t % SW_MB) * SW_DPL + p];
    for (int r = g; r < SW_ROWS; r += SW_G) {
      const float* xr = sx + cl * SW_XPL + r * SW_XP;       // halo rows r .. r + 2: image rows h - 1 .. h + 1
      const float* dr = sd + mg * SW_TM * SW_DPL + r * SC_W;
      float a[3][3];
#pragma unroll
      for (int kh = 0; kh < 3; ++kh) {
        a[kh][0] = xr[kh * SW_XP];
        a[kh][1] = xr[kh * SW_XP + 1];
      }
#pragma unroll
      for (int v = 0; v < SC_W; ++v) {
#pragma unroll
        for (int kh = 0; kh < 3; ++kh) a[kh][2] = xr[kh * SW_XP + v + 2];
#pragma unroll
        for (int j = 0; j < SW_TM; ++j) {
          const float d = dr[j * SW_DPL + v];
#pragma unroll
          for (int kh = 0; kh < 3; ++kh)
#pragma unroll
            for (int kw = 0; kw < 3; ++kw) acc[j][kh * 3 + kw] += d * a[kh][kw];
        }
#pragma unroll
        for (int kh = 0; kh < 3; ++kh) {
          a[kh][0] = a[kh][1];
          a[kh][1] = a[kh][2];
        }
      }
    }
    sc_copies_wait();
    __syncthreads();
  }
  // Add the groups' sums: groups 1.. park theirs in shared memory (free: the loop ended on a
  // barrier), group 0 adds them in order; every thread parks its share of db.
  if (g > 0) {
    float* mine = smem + ((g - 1) * SW_TASKS + t % SW_TASKS) * SW_PER;
#pragma unroll
    for (int j = 0; j < SW_TM; ++j)
#pragma unroll
      for (int k = 0; k < 9; ++k) mine[j * 9 + k] = acc[j][k];
  }
  smem[SW_DB_AT + t] = db;
  __syncthreads();
  if (g == 0) {
    for (int q = 1; q < SW_G; ++q) {
      const float* theirs = smem + ((q - 1) * SW_TASKS + t) * SW_PER;
#pragma unroll
      for (int j = 0; j < SW_TM; ++j)
#pragma unroll
        for (int k = 0; k < 9; ++k) acc[j][k] += theirs[j * 9 + k];
    }
    float* out = ws + (long long)slice * SW_ROWS_OUT * SC_M;
#pragma unroll
    for (int k = 0; k < 9; ++k)
#pragma unroll
      for (int j = 0; j < SW_TM; ++j) out[((c0 + cl) * 9 + k) * SC_M + m0 + mg * SW_TM + j] = acc[j][k];
    if (c0 + cl == 0)               // one channel's threads write the sums of dy, in a fixed order
#pragma unroll
      for (int j = 0; j < SW_TM; ++j) {
        const int mm = mg * SW_TM + j;
        float sum = 0.0f;
        for (int q = 0; q < SW_DB_THREADS / SW_MB; ++q) sum += smem[SW_DB_AT + q * SW_MB + mm];
        out[SC_C * 9 * SC_M + m0 + mm] = sum;
      }
  }
}

// The slices' partial sums added in a fixed order (the same bits on every run): a block takes 32
// consecutive outputs, its 8 warps every 8th slice each, and one warp adds the 8 partial sums in
// order.  Rows 0 .. C*9 - 1 of ws are dw's, in the (C*9, M) layout; row C*9 is db's.
extern "C" __global__ void __launch_bounds__(256) conv_small_wgrad_reduce(const float* __restrict__ ws,
                                                                            float* __restrict__ dw,
                                                                            float* __restrict__ db, int slices,
                                                                            int wt) {
  constexpr int COUNT = SW_ROWS_OUT * SC_M, J = SC_C * 9;
  __shared__ float part[8][33];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int i = blockIdx.x * 32 + lane;
  float sum = 0.0f;
  if (i < COUNT)
    for (int s = warp; s < slices; s += 8) sum += ws[(long long)s * COUNT + i];
  part[warp][lane] = sum;
  __syncthreads();
  if (warp == 0 && i < COUNT) {
    float total = 0.0f;
#pragma unroll
    for (int q = 0; q < 8; ++q) total += part[q][lane];
    const int j = i / SC_M, m = i % SC_M;
    if (j == J) db[m] = total;
    else dw[wt ? i : m * J + j] = total;
  }
}
