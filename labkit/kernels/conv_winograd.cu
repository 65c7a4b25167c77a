// conv_winograd.cu -- 3x3 convolutions (stride 1, zero padding 1) by Winograd's minimal filtering
// F(F x F, 3x3) with F = 2 or 4: each F x F block of outputs from an (F + 2) x (F + 2) block of
// inputs with (F + 2)^2 multiplications per (input, output) channel pair instead of the direct
// method's 9 F^2: 16 for 36 (2.25x fewer) at F = 2, 36 for 144 (4x fewer) at F = 4.
//
//   y = A^T [ (G g G^T) . (B^T d B) ] A        summed over the input channels, per output tile
//   d: the tile's input patch (rows F i - 1 .. F i + F, columns F j - 1 .. F j + F, zeros outside);
//   g: a 3x3 filter; "." elementwise.  With U = G g G^T and V = B^T d B precomputed, the sum over
//   input channels c is P = (F + 2)^2 independent products, one per position xi of the transforms:
//       Mx[xi][m][t] = sum over c of U[xi][m][c] * V[xi][c][t]          (P GEMMs, M x C by C x tiles)
//   and the output tile is A^T Mx A.  The transforms are done once per weight and once per (input
//   channel, tile), so the multiply-adds are the GEMMs': P * M * C per tile of F^2 outputs.
//   F = 2 (interpolation points 0, 1, -1 and infinity):
//     B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1],
//     A^T = [1 1 1 0; 0 1 -1 -1]: additions only, and a rounding error of about 1e-7 of the output.
//   F = 4 (points 0, 1, -1, 2, -2 and infinity):
//     B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1],
//     G = [1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6; 1/24 1/12 1/6; 1/24 -1/12 1/6; 0 0 1],
//     A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1]: the larger entries cost
//     accuracy, about 1e-6 of the output in float32 (still 10x inside the checks' bound).
//
// winograd_weights(wt, u)    U for every (m, c): P x C x M values (the GEMMs' A operand), laid out
//   for the convolution's blocks (wg_u_index: a block's slice of a chunk is one contiguous run).
//   wt: the forward layer's weights in the (C*9, M) layout; with WG_FLIP it transforms the
//   backward-data filters, the forward's turned 180 degrees with C and M swapped.  Grid
//   (ceil(C * M / 256),), block (256,).  Weights change every training step, so this runs before
//   each convolution (P * C * M values: a few microseconds).
// winograd_conv(x, u, b, addend, gate, y, N, relu, runs)    the convolution and conv_small's epilogue:
//   v = acc + b[m] (WG_BIAS) + addend (WG_ADD); ReLU if relu; 0 where gate <= 0 (WG_GATE); NaN kept
//   by the ReLU and passed by a NaN gate, as in PyTorch.  (With F = 4 a NaN or an infinity in x may
//   reach more outputs of the tiles whose patches hold it than the 3x3 windows that hold it: the
//   transforms add it into sums where a finite value's contributions cancel.  F = 2's transforms
//   reach exactly the direct convolution's outputs.)
//   A block owns WG_MB output channels of WG_TR rows of tiles of one image (TB = WG_TR * ceil(W / F)
//   tiles) and walks the input channels WG_CK at a time.  Per chunk:
//   * copies: the chunk's input rows (F * WG_TR + 2 of each channel; zeros above and below the
//     plane, and zero columns either side written once, so the transform reads any patch unchecked)
//     travel from global to shared memory with cp.async, and its slice of U by bulk copies (a row of
//     WG_MB * WG_CK values an instruction, counted in by an mbarrier): while a chunk is multiplied,
//     the next one's U and the one after's rows are in flight, and no register holds them on the
//     way.  (On the CPU executor a copy is a plain load and store: it lands at once, which the
//     barriers' order makes the same computation.)
//   * the transform: a thread per (channel, tile) turns its patch of the staged rows into V
//     (shared memory, P slices, one per transform position xi);
//   * the P GEMMs: a group of G = (WG_MB / WG_RM) * (TB / WG_RT) threads per position xi (a warp
//     when G is 32), each thread a WG_RM x WG_RT block of Mx[xi] (output channels by tiles) in
//     registers.  A thread's channels are WG_MG apart, or runs of 4 that far apart (16-byte loads), and
//     so are its tiles: the lanes of a group that share a tile column read the same V value (one
//     broadcast), those that share channels the same U value, and the runs of neighbouring lanes
//     fall in different banks.  Per input channel a thread loads WG_RM + WG_RT values for
//     WG_RM * WG_RT multiply-adds; its group reads only WG_MB + TB distinct ones.
//   The output transform needs a tile's P positions, which P groups hold: they meet in shared
//   memory, and each thread then finishes whole tiles.  Grid (N * ceil(ceil(H / F) / WG_TR) * M / WG_MB,),
//   block (WG_THREADS,), dynamic shared memory WG_SHARED_FLOATS * 4 bytes.
//   Where C is a single chunk (WG_CK = C) there is nothing to overlap, and the kernel works otherwise:
//   u is the layer's weights wt, which each block transforms into its slice of U once; its unit of
//   work is a run of TBP = WG_TG * WG_RT consecutive tiles of the batch (across rows and images, so no
//   tile is padding), and it walks `runs` of them, the transform reading each patch straight from x.
//   Grid (ceil(ceil(N * tiles / TBP) / runs) * M / WG_MB,): labkit.ops.conv_winograd picks runs to
//   make one wave of blocks.
// x (N, C, H, W), y (N, M, H, W), b (M,), addend and gate as y; u P * C * M (or wt, C * 9 * M);
// float32, C-contiguous.
// Compile-time parameters: WG_C, WG_M (the kernel's input and output channels: for backward data the
// forward's M and C), WG_H, WG_W, WG_F (2 or 4), the tile (WG_MB, WG_RM, WG_TR, WG_RT, WG_CK) and the
// epilogue (WG_BIAS, WG_ADD, WG_GATE); WG_FLIP for the weight transform.

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
#ifndef WG_F
#define WG_F 2
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
static_assert(WG_F == 2 || WG_F == 4, "WG_F: output tiles of 2x2 or 4x4");

constexpr int WG_A = WG_F + 2, WG_P = WG_A * WG_A;              // a patch's side; transform positions
constexpr int WG_TW = (WG_W + WG_F - 1) / WG_F, WG_TH = (WG_H + WG_F - 1) / WG_F;   // tiles across, down
constexpr int WG_BANDS = (WG_TH + WG_TR - 1) / WG_TR;            // bands of WG_TR tile rows
constexpr int WG_TB = WG_TR * WG_TW;                             // tiles a block owns
constexpr int WG_MG = WG_MB / WG_RM;                             // groups of output channels
constexpr int WG_TG = (WG_TB + WG_RT - 1) / WG_RT;               // groups of tiles
constexpr int WG_TBP = WG_TG * WG_RT;                            // tiles, padded to whole groups
constexpr int WG_G = WG_MG * WG_TG;                              // threads per transform position
constexpr int WG_THREADS = WG_P * WG_G;
// Pitches of the P positions' slices: 4 more than a multiple of 32 floats, so that positions read
// side by side (when a group is smaller than a quarter-warp) fall in different banks.
__host__ __device__ constexpr int wg_pitch4(int n) { return n + (36 - n % 32) % 32; }
constexpr bool WG_VEC_U = WG_RM % 4 == 0, WG_VEC_V = WG_RT % 4 == 0;   // 16-byte register loads
constexpr bool WG_PAIR_V = WG_TG == 1 && WG_RT % 2 == 0;              // else 8-byte ones
constexpr int WG_CHUNKS = WG_C / WG_CK, WG_MCHUNKS = WG_M / WG_MB;
constexpr int WG_USLICE = WG_CK * WG_MB;                        // U values of one position, block and chunk
constexpr bool WG_COPY16_U = WG_USLICE % 4 == 0;                // 16-byte copies of U
constexpr bool WG_COPY16_X = WG_W % 4 == 0;                     // 16-byte copies of x's rows
constexpr int WG_RROWS = WG_F * WG_TR + 2;                      // input rows a chunk's channel stages
// A staged row: 4 zeros (column -1 of the plane is the last of them), the W values from a 16-byte
// boundary, zeros up to the pitch (columns W .. F * TW, which the last tile's patch reaches): the
// transform reads any patch without a bounds check.  The zeros are written once; copies never touch them.
constexpr int WG_RAW0 = 4, WG_RAWP = (WG_RAW0 + WG_F * WG_TW + 1 + 3) / 4 * 4;
constexpr int WG_RAW_FLOATS = WG_CK * WG_RROWS * WG_RAWP;
constexpr int WG_VS = wg_pitch4(WG_CK * WG_TBP);
constexpr int WG_US = wg_pitch4(WG_USLICE);
constexpr int WG_SS = (WG_MB * WG_TBP) | 1;                     // the sums' slices, for the output transform
// Where C is a single chunk (WG_ONE_CHUNK) there is nothing to pipeline, and U is the same for all
// of a block's work: the block transforms its slice of the weights itself, once (no launch of
// winograd_weights, no trip of U through global memory), keeps it, and walks several runs of WG_TBP
// consecutive tiles of the batch (image by image, row by row: a run may span rows and images, so no
// tile is padding but the batch's last ones); the transform reads its patches straight from x (L1
// serves the overlaps), so no rows are staged and more blocks fit an SM.  The number of runs a block
// walks is a launch argument: as many as make one wave of blocks.
constexpr bool WG_ONE_CHUNK = WG_CHUNKS == 1;
// Shared memory.  Several chunks: two stages each of U, the raw rows and V; the sums of the output
// transform reuse them after the last chunk.  One chunk: U, then V, which the sums reuse.
constexpr int WG_STAGES = WG_ONE_CHUNK ? 1 : 2;
__host__ __device__ constexpr int wg_stage_of(int k) { return WG_STAGES == 2 ? (k & 1) : 0; }
constexpr int WG_U_AT = 0, WG_RAW_AT = WG_STAGES * WG_P * WG_US;
constexpr int WG_V_AT = WG_RAW_AT + (WG_ONE_CHUNK ? 0 : WG_STAGES * WG_RAW_FLOATS);
constexpr int WG_GEMM_FLOATS = WG_V_AT + WG_STAGES * WG_P * WG_VS;
constexpr int WG_SUM_FLOATS = WG_P * WG_SS;
constexpr int WG_SUM_AT = WG_ONE_CHUNK ? WG_V_AT : 0;
constexpr int WG_DATA_FLOATS = WG_GEMM_FLOATS > WG_SUM_AT + WG_SUM_FLOATS ? WG_GEMM_FLOATS : WG_SUM_AT + WG_SUM_FLOATS;
// Then, 8-byte aligned, the mbarriers of U's two stages' bulk copies (16 bytes).
constexpr int WG_MBAR_AT = (WG_DATA_FLOATS + 1) / 2 * 2;
constexpr int WG_SHARED_FLOATS = WG_MBAR_AT + 4;
static_assert(WG_THREADS <= 1024, "WG_THREADS: at most 1024 (fewer output channels or tiles a block)");
// Blocks an SM should hold at once, for __launch_bounds__: at least 512 threads an SM, which caps a
// thread at 128 registers (more would leave too few warps to hide the shared loads' latency).  Where C
// is a single chunk, as many as shared memory lets in (of the H100's 228 KiB, 1 KiB a block for the
// driver), as long as a thread keeps registers for its sums and about 48 more (fewer spill): the
// blocks' phases then overlap one another.
constexpr int WG_SM_SHARED = 233472, WG_SM_FIT = WG_SM_SHARED / (WG_SHARED_FLOATS * 4 + 1024);
constexpr int WG_SM_REG_FIT = 65536 / (WG_THREADS * (WG_RM * WG_RT + 48));
#ifndef WG_MINB
#define WG_MINB (WG_ONE_CHUNK && WG_SM_FIT > 1 && WG_SM_REG_FIT > 1 \
                 ? (WG_SM_FIT < WG_SM_REG_FIT ? WG_SM_FIT : WG_SM_REG_FIT) : WG_THREADS >= 512 ? 1 : 512 / WG_THREADS)
#endif

// Where U(xi, c, m) lives in u: the block of (output channels m / WG_MB, chunk c / WG_CK) is one
// contiguous run of P * WG_USLICE values ([xi][c % WG_CK][m % WG_MB]), which a block copies as is.
__host__ __device__ constexpr long long wg_u_index(int xi, int c, int m) {
  return (((long long)(m / WG_MB) * WG_CHUNKS + c / WG_CK) * WG_P + xi) * WG_USLICE + (c % WG_CK) * WG_MB + m % WG_MB;
}

// The three transforms, each applied to one column (or row) of WG_A values.  out[i][j] (column j of
// a 2-D result) = (G g)[i] for the three filter values g0, g1, g2.
template <int COLS>
__device__ __forceinline__ void wg_g(float g0, float g1, float g2, float (&out)[WG_A][COLS], int j) {
  if constexpr (WG_F == 2) {
    out[0][j] = g0;
    out[1][j] = 0.5f * (g0 + g1 + g2);
    out[2][j] = 0.5f * (g0 - g1 + g2);
    out[3][j] = g2;
  } else {
    const float even = g0 + g2, s0 = g0 * (1.0f / 24.0f) + g2 * (1.0f / 6.0f);
    out[0][j] = 0.25f * g0;
    out[1][j] = -(even + g1) * (1.0f / 6.0f);
    out[2][j] = -(even - g1) * (1.0f / 6.0f);
    out[3][j] = s0 + g1 * (1.0f / 12.0f);
    out[4][j] = s0 - g1 * (1.0f / 12.0f);
    out[5][j] = g2;
  }
}

// B^T d for one column d[0 .. WG_A) of a patch: out[0 .. WG_A).
__device__ __forceinline__ void wg_bt(const float (&d)[WG_A], float (&out)[WG_A]) {
  if constexpr (WG_F == 2) {
    out[0] = d[0] - d[2];
    out[1] = d[1] + d[2];
    out[2] = d[2] - d[1];
    out[3] = d[1] - d[3];
  } else {
    const float p = d[4] - 4.0f * d[2], q = d[3] - 4.0f * d[1], r = d[4] - d[2], s = 2.0f * (d[3] - d[1]);
    out[0] = 4.0f * d[0] - 5.0f * d[2] + d[4];
    out[1] = p + q;
    out[2] = p - q;
    out[3] = r + s;
    out[4] = r - s;
    out[5] = 4.0f * d[1] - 5.0f * d[3] + d[5];
  }
}

// A^T m for one column m[0 .. WG_A) of the sums: out[0 .. WG_F).
__device__ __forceinline__ void wg_at(const float (&m)[WG_A], float (&out)[WG_F]) {
  if constexpr (WG_F == 2) {
    out[0] = m[0] + m[1] + m[2];
    out[1] = m[1] - m[2] - m[3];
  } else {
    const float a = m[1] + m[2], b = m[1] - m[2], c = m[3] + m[4], d = m[3] - m[4];
    out[0] = m[0] + a + c;
    out[1] = b + 2.0f * d;
    out[2] = a + 4.0f * c;
    out[3] = b + 8.0f * d + m[5];
  }
}

// U = G g G^T for the filter of (input channel c, output channel m) of the kernel's orientation,
// from wt, the forward layer's weights in the (C*9, M) layout: uu[xi] for position xi = r * WG_A + s.
__device__ __forceinline__ void wg_filter(const float* __restrict__ wt, int c, int m, float (&uu)[WG_P]) {
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
  float t[WG_A][3];                                         // G g
#pragma unroll
  for (int j = 0; j < 3; ++j) wg_g(g[0][j], g[1][j], g[2][j], t, j);
#pragma unroll
  for (int r = 0; r < WG_A; ++r) {                          // (G g) G^T
    float v[WG_A][1];
    wg_g(t[r][0], t[r][1], t[r][2], v, 0);
#pragma unroll
    for (int s = 0; s < WG_A; ++s) uu[r * WG_A + s] = v[s][0];
  }
}

extern "C" __global__ void winograd_weights(const float* __restrict__ wt, float* __restrict__ u) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;     // (c, m) of the kernel's orientation
  if (i >= WG_C * WG_M) return;
  const int m = i % WG_M, c = i / WG_M;
  float uu[WG_P];
  wg_filter(wt, c, m, uu);
#pragma unroll
  for (int xi = 0; xi < WG_P; ++xi) u[wg_u_index(xi, c, m)] = uu[xi];
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

// U's slices go by bulk copies (cp.async.bulk, sm_90): one instruction moves a position's whole row
// of WG_USLICE values, where 16-byte copies by every thread took a good part of a chunk's issue
// slots.  An mbarrier per stage counts the bytes: wg_bulk_expect announces them, each copy adds what
// it landed, and wg_bulk_wait returns once the stage's phase (the parity of its fills) is complete.
// On the CPU executor the copies are plain and the barrier calls do nothing.
#if defined(LABKIT_CUDA_ARCH)
constexpr bool WG_BULK_U = false;
__device__ __forceinline__ void wg_bulk_init(unsigned long long*) {}
__device__ __forceinline__ void wg_bulk_expect(unsigned long long*, unsigned) {}
__device__ __forceinline__ void wg_bulk_copy(float* dst, const float* src, unsigned bytes, unsigned long long*) {
  for (unsigned i = 0; i < bytes / 4; ++i) dst[i] = src[i];
}
__device__ __forceinline__ void wg_bulk_wait(unsigned long long*, unsigned) {}
#else
// Rows of 16-byte multiples, as bulk copies need, and of at least 1 KiB: shorter ones (the stem's
// single input channel) went faster by the threads' own copies on the H100.
constexpr bool WG_BULK_U = WG_COPY16_U && WG_USLICE >= 256 && !WG_ONE_CHUNK;
__device__ __forceinline__ unsigned wg_shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void wg_bulk_init(unsigned long long* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(wg_shared_address(bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void wg_bulk_expect(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(wg_shared_address(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void wg_bulk_copy(float* dst, const float* src, unsigned bytes, unsigned long long* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(wg_shared_address(dst)), "l"(src), "r"(bytes), "r"(wg_shared_address(bar)) : "memory");
}
__device__ __forceinline__ void wg_bulk_wait(unsigned long long* bar, unsigned parity) {
  unsigned done = 0;
  while (!done)
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(wg_shared_address(bar)), "r"(parity) : "memory");
}
#endif

// The thread's i-th output channel (of WG_RM) or tile (of WG_RT) within the block, g its group
// among `groups`: runs of 4, 4 * groups apart, for 16-byte loads; else single values `groups` apart.
template <int R, int GROUPS>
__device__ __forceinline__ int wg_spread(int i, int g) {
  return R % 4 == 0 ? (i / 4) * (4 * GROUPS) + g * 4 + i % 4 : i * GROUPS + g;
}

// Stage the input rows of chunk c0 (F * WG_TR + 2 of each channel) into `raw`, VEC floats a copy.
template <int VEC>
__device__ __forceinline__ void wg_stage_rows(const float* __restrict__ x, float* raw, int n, int trow0, int c0,
                                              int tid) {
  constexpr int ROWV = WG_W / VEC, COUNT = WG_CK * WG_RROWS * ROWV;
#pragma unroll 1
  for (int e = tid; e < COUNT; e += WG_THREADS) {
    const int col = e % ROWV, rr = (e / ROWV) % WG_RROWS, cc = e / (ROWV * WG_RROWS);
    const int h = WG_F * trow0 - 1 + rr;
    const bool inside = h >= 0 && h < WG_H;
    // Rows outside the plane are zeros; their copies read nothing (x itself stands in as the source).
    const float* src = inside ? x + (((long long)n * WG_C + c0 + cc) * WG_H + h) * WG_W + col * VEC : x;
    float* dst = raw + (cc * WG_RROWS + rr) * WG_RAWP + WG_RAW0 + col * VEC;
    if (VEC == 4) wg_copy16(dst, src, inside);
    else wg_copy4(dst, src, inside);
  }
}

// Stage chunk k's slice of U into `su` (copies in flight; bulk copies are issued by warp 0's lanes,
// a row each, after lane 0 has told the stage's mbarrier `bar` how many bytes to count in).
__device__ __forceinline__ void wg_stage_u(const float* __restrict__ u, float* su, int mc, int k, int tid,
                                           unsigned long long* bar) {
  const float* slice = u + ((long long)mc * WG_CHUNKS + k) * WG_P * WG_USLICE;
  if constexpr (WG_BULK_U) {
    if (tid < 32) {
      if (tid == 0) wg_bulk_expect(bar, WG_P * WG_USLICE * 4);
      __syncwarp();                     // the count is set before any copy can land
      for (int p = tid; p < WG_P; p += 32) wg_bulk_copy(su + p * WG_US, slice + p * WG_USLICE, WG_USLICE * 4, bar);
    }
    return;
  }
  constexpr int VEC = WG_COPY16_U ? 4 : 1, ROWV = WG_USLICE / VEC, COUNT = WG_P * ROWV;
#pragma unroll 1
  for (int e = tid; e < COUNT; e += WG_THREADS) {   // row p of the slice to row p of su, pitch WG_US
    float* dst = su + (e / ROWV) * WG_US + (e % ROWV) * VEC;
    if (VEC == 4) wg_copy16(dst, slice + e * VEC, true);
    else wg_copy4(dst, slice + e, true);
  }
}

// Stage chunk k's input rows into `raw` (copies in flight): 16-byte copies where x's rows are
// 16-byte aligned (a view into a larger array may not be).
__device__ __forceinline__ void wg_stage_x(const float* __restrict__ x, float* raw, int n, int trow0, int k, int tid) {
  if (WG_COPY16_X && (reinterpret_cast<unsigned long long>(x) & 15) == 0)
    wg_stage_rows<4>(x, raw, n, trow0, k * WG_CK, tid);
  else
    wg_stage_rows<1>(x, raw, n, trow0, k * WG_CK, tid);
}

// Column ss of B^T d for a patch whose value at row rr, column ss is read(rr, ss).
template <class Read>
__device__ __forceinline__ void wg_patch_column(const Read& read, int ss, float (&col)[WG_A]) {
  float d[WG_A];
#pragma unroll
  for (int rr = 0; rr < WG_A; ++rr) d[rr] = read(rr, ss);
  wg_bt(d, col);
}

// V = B^T d B of one item's patch (read as above) into `out`, its WG_P slots of V (WG_VS apart).
template <class Read>
__device__ __forceinline__ void wg_transform_patch(const Read& read, float* out) {
  if constexpr (WG_F == 2) {
    float bt[WG_A][WG_A];                                  // B^T d, a column at a time
#pragma unroll
    for (int ss = 0; ss < WG_A; ++ss) {
      float col[WG_A];
      wg_patch_column(read, ss, col);
#pragma unroll
      for (int rr = 0; rr < WG_A; ++rr) bt[rr][ss] = col[rr];
    }
#pragma unroll
    for (int rr = 0; rr < WG_A; ++rr) {                    // (B^T d) B, a row at a time
      float row[WG_A];
      wg_bt(bt[rr], row);
#pragma unroll
      for (int ss = 0; ss < WG_A; ++ss) out[(rr * WG_A + ss) * WG_VS] = row[ss];
    }
  } else {
    // 6x6: B^T d held in registers would be 36 more values beside the GEMM's sums, which the
    // compiler then spills.  So the column pass parks B^T d in the item's own slots of V, and the
    // row pass transforms them in place (the same thread writes and reads them: no barrier).  The
    // loops stay rolled, so that the compiler does not hoist all 36 loads ahead of their use.
#pragma unroll 1
    for (int ss = 0; ss < WG_A; ++ss) {
      float col[WG_A];
      wg_patch_column(read, ss, col);
#pragma unroll
      for (int rr = 0; rr < WG_A; ++rr) out[(rr * WG_A + ss) * WG_VS] = col[rr];
    }
#pragma unroll 1
    for (int rr = 0; rr < WG_A; ++rr) {
      float bt[WG_A], row[WG_A];
#pragma unroll
      for (int ss = 0; ss < WG_A; ++ss) bt[ss] = out[(rr * WG_A + ss) * WG_VS];
      wg_bt(bt, row);
#pragma unroll
      for (int ss = 0; ss < WG_A; ++ss) out[(rr * WG_A + ss) * WG_VS] = row[ss];
    }
  }
}

// body(e) for this thread's items e = tid, tid + WG_THREADS, ... below COUNT.  Where a thread has few
// (WG_UNROLL_ITEMS or fewer), the loop is unrolled, so that the loads of all of them can be in
// flight at once (on the H100 within a few percent either way of the rolled loop).
constexpr int WG_UNROLL_ITEMS = 4;
template <int COUNT, class Body>
__device__ __forceinline__ void wg_items(int tid, const Body& body) {
  constexpr int PER = (COUNT + WG_THREADS - 1) / WG_THREADS;
  if constexpr (PER <= WG_UNROLL_ITEMS) {
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int e = tid + i * WG_THREADS;
      if (COUNT % WG_THREADS == 0 || e < COUNT) body(e);
    }
  } else {
#pragma unroll 1
    for (int e = tid; e < COUNT; e += WG_THREADS) body(e);
  }
}

// V = B^T d B of a chunk's staged rows `raw` into `sv` ([WG_P][WG_VS]: V[xi][c][t]): one thread per
// (channel, tile), WG_P values each.
__device__ __forceinline__ void wg_transform(const float* raw, float* sv, int trow0, int tid) {
#pragma unroll 1
  for (int e = tid; e < WG_CK * WG_TBP; e += WG_THREADS) {
    const int cc = e / WG_TBP, t = e % WG_TBP;
    const int tr = t / WG_TW, tj = t % WG_TW;
    const bool live = t < WG_TB && trow0 + tr < WG_TH;   // padded tiles multiply zeros
    // the patch's first row and column (F tj - 1) in the staged rows
    const float* rows = raw + (cc * WG_RROWS + WG_F * tr) * WG_RAWP + WG_RAW0 + WG_F * tj - 1;
    wg_transform_patch([&](int rr, int ss) { return live ? rows[rr * WG_RAWP + ss] : 0.0f; }, sv + cc * WG_TBP + t);
  }
}

// The same for all C channels of the block's WG_TBP tiles (locate as for wg_output), the patches read
// straight from x (zeros outside the plane).
template <class Locate>
__device__ __forceinline__ void wg_transform_x(const float* __restrict__ x, float* sv, int tid, const Locate& locate) {
  wg_items<WG_C * WG_TBP>(tid, [&](int e) {
    const int cc = e / WG_TBP, t = e % WG_TBP;
    int n, ti, tj;
    const bool live = locate(t, n, ti, tj);
    const int h0 = WG_F * ti - 1, w0 = WG_F * tj - 1;   // the patch's first row and column
    const float* xc = x + ((long long)n * WG_C + cc) * WG_H * WG_W;
    wg_transform_patch([&](int rr, int ss) {
      const int h = h0 + rr, w = w0 + ss;
      return live && h >= 0 && h < WG_H && w >= 0 && w < WG_W ? xc[h * WG_W + w] : 0.0f;
    }, sv + cc * WG_TBP + t);
  });
}

// The chunk's GEMM at position xi: this thread's WG_RM x WG_RT block of Mx[xi] from V (`vx`, the
// position's slice) and U (`ux`).
__device__ __forceinline__ void wg_gemm(const float* vx, const float* ux, int mg, int tg,
                                        float (&acc)[WG_RM][WG_RT]) {
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

// The block's U slice (P x C x WG_MB), transformed from wt by the block itself (WG_ONE_CHUNK).
__device__ __forceinline__ void wg_fuse_u(const float* __restrict__ wt, float* su, int m0, int tid) {
  wg_items<WG_C * WG_MB>(tid, [&](int e) {
    const int c = e / WG_MB, mm = e % WG_MB;
    float uu[WG_P];
    wg_filter(wt, c, m0 + mm, uu);
#pragma unroll
    for (int xi = 0; xi < WG_P; ++xi) su[xi * WG_US + c * WG_MB + mm] = uu[xi];
  });
}

// The output transform of the block's TILES tiles from their sums `ss` ([WG_P][WG_SS]), the epilogue
// and the stores; locate(t, n, ti, tj) says where tile t is (image, tile row and column), false for
// none.
template <int TILES, class Locate>
__device__ __forceinline__ void wg_output(const float* ss, const float* __restrict__ b, const float* __restrict__ addend,
                                          const float* __restrict__ gate, float* __restrict__ y, int m0, int relu,
                                          int tid, const Locate& locate) {
  wg_items<WG_MB * TILES>(tid, [&](int e) {
    const int t = e % TILES, mm = e / TILES;
    int n, ti, tj;
    if (!locate(t, n, ti, tj)) return;
    float am[WG_F][WG_A];                                     // A^T Mx, a column at a time
#pragma unroll
    for (int sc = 0; sc < WG_A; ++sc) {
      float mx[WG_A], col[WG_F];
#pragma unroll
      for (int rr = 0; rr < WG_A; ++rr) mx[rr] = ss[(rr * WG_A + sc) * WG_SS + mm * WG_TBP + t];
      wg_at(mx, col);
#pragma unroll
      for (int r = 0; r < WG_F; ++r) am[r][sc] = col[r];
    }
    const int m = m0 + mm;
    const long long plane = ((long long)n * WG_M + m) * WG_H * WG_W;   // then offsets within it
#pragma unroll
    for (int r = 0; r < WG_F; ++r) {
      const int h = WG_F * ti + r;
      if (h >= WG_H) break;
      float outs[WG_F];                                       // (A^T Mx) A
      wg_at(am[r], outs);
#pragma unroll
      for (int s = 0; s < WG_F; ++s) {
        const int w = WG_F * tj + s;
        if (w >= WG_W) break;
        const long long idx = plane + h * WG_W + w;
        float v = outs[s];
#if WG_BIAS
        v += b[m];
#endif
#if WG_ADD
        v += addend[idx];
#endif
        // As conv_small.cu's epilogue: NaN survives the ReLU, and a NaN gate passes the gradient.
        if (relu) v = v < 0.0f ? 0.0f : v;
#if WG_GATE
        if (gate[idx] <= 0.0f) v = 0.0f;
#endif
        y[idx] = v;
      }
    }
  });
}

// The sums of this thread's WG_RM x WG_RT block of Mx[xi] into the sums' slices `ss`, for the output
// transform, which needs a tile's P positions (P groups hold them); the registers are zeroed for the
// next run of tiles.
__device__ __forceinline__ void wg_park_sums(float* ss, int xi, int mg, int tg, float (&acc)[WG_RM][WG_RT]) {
#pragma unroll
  for (int i = 0; i < WG_RM; ++i)
#pragma unroll
    for (int j = 0; j < WG_RT; ++j) {
      ss[xi * WG_SS + wg_spread<WG_RM, WG_MG>(i, mg) * WG_TBP + wg_spread<WG_RT, WG_TG>(j, tg)] = acc[i][j];
      acc[i][j] = 0.0f;
    }
}

// u: U (winograd_weights' output), or where C is a single chunk the layer's weights wt, which the
// block transforms itself; runs: how many runs of tiles a block walks (where C is a single chunk).
extern "C" __global__ void __launch_bounds__(WG_THREADS, WG_MINB) winograd_conv(
    const float* __restrict__ x, const float* __restrict__ u, const float* __restrict__ b,
    const float* __restrict__ addend, const float* __restrict__ gate, float* __restrict__ y, int N, int relu,
    int runs) {
  extern __shared__ __align__(16) float smem[];
  constexpr int MCHUNKS = WG_MCHUNKS, CHUNKS = WG_CHUNKS;
  const int mc = blockIdx.x % MCHUNKS, m0 = mc * WG_MB;
  const int tid = threadIdx.x;
  const int xi = tid / WG_G, r = tid % WG_G, mg = r % WG_MG, tg = r / WG_MG;
  float acc[WG_RM][WG_RT];
#pragma unroll
  for (int i = 0; i < WG_RM; ++i)
#pragma unroll
    for (int j = 0; j < WG_RT; ++j) acc[i][j] = 0.0f;

  if constexpr (WG_ONE_CHUNK) {
    // U once, then per run: the transform, the GEMMs, the sums over V's space, the output transform.
    constexpr int PLANE_TILES = WG_TH * WG_TW;
    const int tiles = N * PLANE_TILES;
    const int q0 = (blockIdx.x / MCHUNKS) * runs, q1 = min(q0 + runs, (tiles + WG_TBP - 1) / WG_TBP);
    if (q0 >= q1) return;
    wg_fuse_u(u, smem + WG_U_AT, m0, tid);
    for (int q = q0; q < q1; ++q) {
      // tile t of run q: the batch's tile q * WG_TBP + t
      const auto locate = [&](int t, int& n, int& ti, int& tj) {
        const int g = q * WG_TBP + t, p = g % PLANE_TILES;
        n = g / PLANE_TILES, ti = p / WG_TW, tj = p % WG_TW;
        return g < tiles;
      };
      if (q > q0) __syncthreads();     // the last run's output transform is done with the sums
      wg_transform_x(x, smem + WG_V_AT, tid, locate);
      __syncthreads();
      wg_gemm(smem + WG_V_AT + xi * WG_VS, smem + WG_U_AT + xi * WG_US, mg, tg, acc);
      __syncthreads();                 // every GEMM is done with V
      wg_park_sums(smem + WG_SUM_AT, xi, mg, tg, acc);
      __syncthreads();
      wg_output<WG_TBP>(smem + WG_SUM_AT, b, addend, gate, y, m0, relu, tid, locate);
    }
    return;
  }

  // A band of WG_TR rows of tiles of one image.
  const int band = blockIdx.x / MCHUNKS;
  const int n = band / WG_BANDS, trow0 = band % WG_BANDS * WG_TR;
  if (n >= N) return;
  // The rows' zero columns, in both stages, before any copy lands beside them.
  for (int e = tid; e < WG_STAGES * WG_CK * WG_RROWS * (WG_RAWP - WG_W); e += WG_THREADS) {
    const int row = e / (WG_RAWP - WG_W), col = e % (WG_RAWP - WG_W);
    smem[WG_RAW_AT + row * WG_RAWP + (col < WG_RAW0 ? col : col + WG_W)] = 0.0f;
  }
  // Three chunks in flight between one barrier and the next: chunk k's GEMMs, chunk k + 1's transform
  // (and its U copies), chunk k + 2's row copies; two stages each of the rows, U and V.  A warp done
  // with its share of the transform goes on to its GEMMs, and the copies land while both run.
  unsigned long long* bars = reinterpret_cast<unsigned long long*>(smem + WG_MBAR_AT);   // U's stages
  if (WG_BULK_U && tid == 0) {        // by the thread that issues U's copies, before any other waits
    wg_bulk_init(bars);
    wg_bulk_init(bars + 1);
  }
  wg_stage_x(x, smem + WG_RAW_AT, n, trow0, 0, tid);
  wg_copies_wait();
  __syncthreads();
  for (int k = -1; k < CHUNKS; ++k) {
    if (k + 2 < CHUNKS)                // that stage was last read by chunk k's transform, before the barrier
      wg_stage_x(x, smem + WG_RAW_AT + wg_stage_of(k) * WG_RAW_FLOATS, n, trow0, k + 2, tid);
    if (k + 1 < CHUNKS) {              // U's and V's stages were last read by chunk k - 1's GEMMs
      const int s = wg_stage_of(k + 1);
      wg_stage_u(u, smem + WG_U_AT + s * WG_P * WG_US, mc, k + 1, tid, bars + s);
      wg_transform(smem + WG_RAW_AT + s * WG_RAW_FLOATS, smem + WG_V_AT + s * WG_P * WG_VS, trow0, tid);
    }
    if (k >= 0) {
      // chunk k's U: the (k / stages)-th fill of its stage, so that phase's parity
      if constexpr (WG_BULK_U) wg_bulk_wait(bars + wg_stage_of(k), (k / WG_STAGES) & 1);
      wg_gemm(smem + WG_V_AT + wg_stage_of(k) * WG_P * WG_VS + xi * WG_VS,
              smem + WG_U_AT + wg_stage_of(k) * WG_P * WG_US + xi * WG_US, mg, tg, acc);
    }
    wg_copies_wait();
    __syncthreads();
  }
  // The sums through shared memory (free again: the loop's last barrier followed the last GEMM).
  wg_park_sums(smem + WG_SUM_AT, xi, mg, tg, acc);
  __syncthreads();
  wg_output<WG_TB>(smem + WG_SUM_AT, b, addend, gate, y, m0, relu, tid, [&](int t, int& tn, int& ti, int& tj) {
    tn = n, ti = trow0 + t / WG_TW, tj = t % WG_TW;
    return ti < WG_TH;
  });
}
