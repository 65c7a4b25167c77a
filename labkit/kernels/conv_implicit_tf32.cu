// conv_implicit_tf32.cu -- the implicit-GEMM convolution of conv_implicit.cu on the tensor cores,
// in TF32: each warp multiplies 16x8x8 tiles with one `mma.sync` instruction.
// labkit: requires-gpu tensor-core mma.sync (TF32) has no CPU executor model
//
// The GEMM is the same: Y_g (MG, P) = W_g (MG, KG) @ X_g (KG, P), one column per output pixel of
// the batch, X_g gathered from NCHW x with the padding read as zeros.  What changes is who
// multiplies, and how the tiles travel:
//   * A block of TC_WM x TC_WN warps owns a TC_BM x TC_BN tile of Y; each warp a (BM/WM) x (BN/WN)
//     piece of it, as MT x NT tiles of 16 x 8 (the shape of one mma.m16n8k8), kept in registers.
//   * Per step of 8 along k, a warp loads MT fragments of A (4 values per thread) and NT of B
//     (2 per thread) from shared memory and issues MT * NT mma instructions, each 16*8*8 FMAs.
//   * TF32 keeps float32's exponent and 10 of its 23 mantissa bits; products are accumulated in
//     FP32.  The relative error is about 1e-3 of the output's size instead of FP32's 1e-7: cuDNN's
//     "TF32" mode, which PyTorch enables for convolutions by default.
//   * The weights are packed on the host, once per layer, in the order the fragments want them
//     (labkit.ops.implicit.pack_weights_tf32): for each block row and k-tile one contiguous BK x BM
//     chunk, zero-padded to whole tiles and rounded to TF32, in which the 4 values a thread needs
//     for one A fragment sit next to each other.  A tile then travels as plain 16-byte copies with
//     no bounds checks, and a fragment is one 16-byte shared load instead of four.
//   * The B tile's rows are padded by 8 floats: a fragment's 32 loads (4 rows k x 8 columns) then
//     fall in 32 different banks.
//   * The tiles travel with cp.async (Ampere and later): global-to-shared copies that need no
//     registers and complete in the background, TC_STAGES tiles deep.  While tile t is multiplied,
//     the copies of tiles t+1 .. t+STAGES-1 are in flight: enough bytes in flight to cover the
//     memory latency that one register-staged tile (gemm_dbuf) could not.  A copy of size 0
//     writes zeros: that is how the padding and the ragged edges are filled, with no branch
//     around the copy.  The inputs arrive as FP32; the tensor cores read only their TF32 bits (the
//     low 13 mantissa bits are ignored: rounding toward zero).  TC_ROUND=1 rounds them to nearest
//     instead (cvt.rna) as B fragments are loaded: less error, one more instruction per value.
//   * Decoding row k of X_g into (c, kh, kw) takes a dozen integer instructions, for every value
//     gathered: more than the mma work.  The decoding is done once per layer instead, on the host,
//     into the table k_taps in constant memory (k -> offset in x, kh * DH, kw * DW: the tap's
//     dilated position in the window).  All threads of a warp
//     gather the same row k, so each lookup is one broadcast read of the constant cache.
//   * Channels last (TC_NHWC=1).  Gathered from NCHW, each value of the B tile is a copy of its own
//     (4 bytes, a bounds test, a table lookup): with the mma work as fast as it is, those integer
//     instructions are what the SM issues most.  From a channels-last copy of x (N, H, W, C4), C4 =
//     C rounded up to 4 with zero channels (pool_pad.cu's channels_last, one pass before the GEMM),
//     X_g's rows are ordered (kh, kw, c) and 4 neighbouring rows of one column are 16 neighbouring
//     bytes: one copy moves 4 values, and a thread's copies of one k-tile share one table lookup
//     (k_taps then holds one entry per 4 rows).  The weights are packed in the same row order.
//     The B tile is stored column by column (Bs[j * LDK + k], LDK = BK + 4 floats), so a column's
//     4 values land in one 16-byte store; the 4-float pad keeps both the stores of 8 neighbouring
//     columns and the fragment loads (rows tig, tig+4 of columns gid) free of bank conflicts.  (Taking
//     the rows in the order 0, 4, 1, 5, ... so that one 8-byte load fetches both of a fragment's
//     values did not pay on an H200: 0-8% slower on AlexNet's convolutions.)
//     Groups need C/G a multiple of 4 (a group's channels then start on a 16-byte boundary).
//
// conv_implicit_tf32(x, wp, bias, y, N, has_bias, act, res, has_res): the arguments of conv_implicit
//   (y = act(conv + bias + res), act 0 none, 1 tanh, 2 ReLU, 3 ReLU6), but the
//   weights packed: wp (G, MB, KT, BK * BM), MB = ceil(MG / BM) block rows, KT = ceil(KG / BK).
// Split-K, for small batches whose grid would leave SMs idle (as in conv_implicit.cu):
//   conv_implicit_tf32_splitk(x, wp, P, N, splits), grid z G * splits, each block one slice of the
//   k-tiles, raw FP32 sums to the workspace P (splits, N, M, Ho, Wo); then conv_implicit.cu's
//   conv_implicit_reduce adds the slices, the bias and the activation.
// Launch: grid (ceil(N*Ho*Wo / TC_BN), ceil(MG / TC_BM), G), block (32 * TC_WM * TC_WN,),
//   dynamic shared memory TC_STAGES * TC_BK * (TC_BM + TC_BN + 8) * 4 bytes (over 48 KiB needs
//   the kernel's max_dynamic_shared_size_bytes raised first; labkit.ops.implicit does it).
// Compile-time parameters: LAYER_* as in conv_implicit.cu; TC_BM, TC_BN, TC_BK (a multiple of 8),
// TC_WM, TC_WN (warps along m and along p), TC_STAGES (>= 2), TC_MINB (blocks per SM the register
// budget must allow: __launch_bounds__'s second argument), TC_ROUND (0 or 1, see above), TC_NHWC (0:
// x is NCHW; 1: x is the channels-last copy (N, H, W, C4), the weights packed in its row order).
// Before the first launch, k_taps must hold labkit.ops.implicit.k_taps(layer, TC_BK, nhwc) (set_constant).

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
#ifndef TC_BM
#define TC_BM 128
#endif
#ifndef TC_BN
#define TC_BN 128
#endif
#ifndef TC_BK
#define TC_BK 16
#endif
#ifndef TC_WM
#define TC_WM 2
#endif
#ifndef TC_WN
#define TC_WN 4
#endif
#ifndef TC_STAGES
#define TC_STAGES 3
#endif
#ifndef TC_MINB
#define TC_MINB 1
#endif
#ifndef TC_ROUND
#define TC_ROUND 0
#endif
#ifndef TC_NHWC
#define TC_NHWC 0
#endif

namespace tc {
constexpr int C = LAYER_C, H = LAYER_H, W = LAYER_W, M = LAYER_M, G = LAYER_G;
constexpr int KH = LAYER_K, KW = LAYER_KW, SH = LAYER_S, SW = LAYER_SW, PH = LAYER_P, PW = LAYER_PW;
constexpr int DH = LAYER_DH, DW = LAYER_DW;
constexpr int CG = C / G, MG = M / G, KG = CG * KH * KW;
constexpr int HO = (H + 2 * PH - DH * (KH - 1) - 1) / SH + 1, WO = (W + 2 * PW - DW * (KW - 1) - 1) / SW + 1;
constexpr int HWO = HO * WO;
constexpr int BM = TC_BM, BN = TC_BN, BK = TC_BK, WM = TC_WM, WN = TC_WN, STAGES = TC_STAGES;
constexpr int THREADS = 32 * WM * WN;
constexpr bool NHWC = TC_NHWC;
constexpr int C4 = (C + 3) / 4 * 4;          // channels of the channels-last copy (NHWC)
constexpr int KGX = NHWC ? KH * KW * ((CG + 3) / 4 * 4) : KG;  // rows of X_g as gathered (NHWC: per tap, CG rounded up to 4)
constexpr int WTM = BM / WM, WTN = BN / WN;  // one warp's piece of the block tile
constexpr int MT = WTM / 16, NT = WTN / 8;   // its mma tiles
constexpr int LDB = BN + 8;                  // NCHW: the B tile's padded rows (see above)
constexpr int LDK = BK + 4;                  // NHWC: the B tile's padded columns
constexpr int STAGE_FLOATS = BK * BM + (NHWC ? BN * LDK : BK * LDB); // one stage: the packed A tile, then the B tile
constexpr int MB = (MG + BM - 1) / BM;        // block rows of a group's output
constexpr int KT = (KGX + BK - 1) / BK;       // k-tiles
constexpr int QUADS = BK / 4;                 // NHWC: 16-byte copies down one column of a B tile
constexpr int COLS = NHWC ? BN * QUADS / THREADS : 1;  // NHWC: the columns a thread copies, THREADS / QUADS apart
constexpr int A_GROUPS = BK * BM / 4;
constexpr int A_LOADS = (A_GROUPS + THREADS - 1) / THREADS;
constexpr int B_ROWS = THREADS / BN;
constexpr int B_LOADS = (BK + B_ROWS - 1) / B_ROWS;
static_assert(C % G == 0 && M % G == 0, "LAYER_G must divide LAYER_C and LAYER_M");
static_assert(HO >= 1 && WO >= 1, "the dilated window does not fit the padded input");
static_assert(BM % (16 * WM) == 0 && BN % (8 * WN) == 0, "a warp's piece must be whole 16x8 tiles");
static_assert(BK % 8 == 0, "TC_BK must be a multiple of 8");
static_assert(NHWC || THREADS % BN == 0, "32*TC_WM*TC_WN threads must be a multiple of TC_BN (one column each)");
static_assert(!NHWC || (THREADS % QUADS == 0 && (BN * QUADS) % THREADS == 0),
              "NHWC: the threads must split a B tile's BN x BK/4 copies evenly");
static_assert(!NHWC || G == 1 || CG % 4 == 0, "NHWC with groups needs C/G a multiple of 4");
constexpr int TAPS = KT * BK / (NHWC ? 4 : 1);  // entries of k_taps: rows of X_g (NHWC: groups of 4), whole tiles
static_assert(STAGES >= 2, "TC_STAGES must be at least 2");
static_assert(TAPS * 8 <= 60 * 1024, "the k_taps table exceeds constant memory");
}  // namespace tc

// Row k of X_g: x.x = (c * H + kh) * W + kw, the offset of the tap from the window's corner in
// channel 0; x.y = (kh * DH) << 16 | kw * DW.  Rows past KG have kh = 0x4000: outside every image (zeros).
// NHWC: entry q for rows 4q .. 4q+3 = (kh, kw, c .. c+3): x.x = ((kh * DH) * W + kw * DW) * C4 + c.
__constant__ int2 k_taps[tc::TAPS];

__device__ __forceinline__ unsigned to_tf32(float v) {
#if TC_ROUND
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
  return r;
#else
  return __float_as_uint(v);
#endif
}

// Asynchronous copies global -> shared of `bytes` (4 or 16) of which the first `src_bytes` are
// read and the rest written as zeros.  .ca keeps the input in L1 (neighbouring windows overlap);
// .cg (16-byte copies only) goes around it for the weights, which L2 serves to every block.
__device__ __forceinline__ void copy4(float* dst, const float* src, bool read) {
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(read ? 4 : 0));
}
__device__ __forceinline__ void copy16(float* dst, const float* src, bool read) {
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(read ? 16 : 0));
}
__device__ __forceinline__ void copy16_ca(float* dst, const float* src, bool read) {
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(read ? 16 : 0));
}
__device__ __forceinline__ void copies_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int PENDING>
__device__ __forceinline__ void copies_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING)); }

// One 16x8x8 product on the tensor cores: d += a (16x8, row-major fragment) * b (8x8, column).
__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// The block's work: group g's output tile (blockIdx.x, blockIdx.y) over the k-tiles [t_begin, t_end)
// (all of them in conv_implicit_tf32, a slice in conv_implicit_tf32_splitk).  `partial`: write the raw
// sums (split-K's workspace slice, same layout as y) instead of bias + activation.  Inlined into both
// kernels with constant arguments, so conv_implicit_tf32 compiles as if split-K did not exist.
__device__ __forceinline__ void implicit_tf32(const float* __restrict__ x, const float* __restrict__ wt,
                                              const float* __restrict__ bias, float* __restrict__ y, int N,
                                              int has_bias, int act, const float* __restrict__ res,
                                              int has_res, int g, int t_begin, int t_end,
                                              bool partial) {
  using namespace tc;
  // STAGES stages of: the packed A tile (BK * BM floats), then Bs[k * LDB + j] = X_g[k0 + k, bp + j]
  // (NHWC: Bs[j * LDK + k]).
  extern __shared__ __align__(16) float smem[];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int gid = lane / 4, tig = lane % 4;  // the mma fragments' row group and thread-in-group
  const int wm = warp / WN, wn = warp % WN;
  const int bm = blockIdx.y * BM, bp = blockIdx.x * BN;
  const float* wa = wt + ((size_t)g * MB + blockIdx.y) * KT * (BK * BM);  // this block row's k-tiles

  // The columns this thread gathers for the whole launch, decoded once (NCHW: one, rows my_row,
  // my_row + B_ROWS, ...; NHWC: COLS of them, THREADS / QUADS apart, its group of 4 rows my_quad).
  const int my_col = NHWC ? tid / QUADS : tid % BN, my_row = tid / BN, my_quad = tid % QUADS;
  int ih0[COLS], iw0[COLS], base[COLS];
#pragma unroll
  for (int l = 0; l < COLS; ++l) {
    const int p = bp + my_col + l * (THREADS / QUADS);
    ih0[l] = -(1 << 20), iw0[l] = 0, base[l] = 0;  // past the last pixel: every tap reads as padding
    if (p < N * HWO) {
      const int n = p / HWO, r = p - n * HWO;
      ih0[l] = (r / WO) * SH - PH;
      iw0[l] = (r % WO) * SW - PW;
      base[l] = NHWC ? ((n * H + ih0[l]) * W + iw0[l]) * C4 + g * CG : (n * C + g * CG) * H * W + ih0[l] * W + iw0[l];
    }
  }

  // Start the copies of the slice's i-th tile (k-tile t_begin + i) into stage i % STAGES (any thread
  // may run past KG: those copies write zeros).
  auto issue = [&](int i) {
    float* As = smem + (i % STAGES) * STAGE_FLOATS;
    float* Bs = As + BK * BM;
    const int t = t_begin + i, k0 = t * BK;
#pragma unroll
    for (int l = 0; l < A_LOADS; ++l) {
      const int q = tid + l * THREADS;
      if (q < A_GROUPS) copy16(As + 4 * q, wa + (size_t)t * (BK * BM) + 4 * q, true);
    }
    if (NHWC) {
      const int2 tap = k_taps[k0 / 4 + my_quad];   // one lookup for all this thread's columns
      const int dh = tap.y >> 16, dw = tap.y & 0xffff;
#pragma unroll
      for (int l = 0; l < COLS; ++l) {
        const bool in = (unsigned)(ih0[l] + dh) < (unsigned)H && (unsigned)(iw0[l] + dw) < (unsigned)W;
        copy16_ca(Bs + (my_col + l * (THREADS / QUADS)) * LDK + 4 * my_quad, x + (in ? base[l] + tap.x : 0), in);
      }
    } else {
#pragma unroll
      for (int l = 0; l < B_LOADS; ++l) {
        const int r = my_row + l * B_ROWS;
        if (r >= BK) break;
        const int2 tap = k_taps[k0 + r];
        const bool in = (unsigned)(ih0[0] + (tap.y >> 16)) < (unsigned)H && (unsigned)(iw0[0] + (tap.y & 0xffff)) < (unsigned)W;
        copy4(Bs + r * LDB + my_col, x + (in ? base[0] + tap.x : 0), in);
      }
    }
  };

  float acc[MT][NT][4] = {};
  const int tiles = t_end - t_begin;  // the same for the whole block (an empty last slice writes zeros)
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < tiles) issue(s);
    copies_commit();  // one group per tile, empty ones too: the wait below counts groups
  }
  for (int i = 0; i < tiles; ++i) {
    copies_wait<STAGES - 2>();  // this thread's copies of tile i have landed ...
    __syncthreads();            // ... and everyone's; and every warp is done with tile i-1's stage
    if (i + STAGES - 1 < tiles) issue(i + STAGES - 1);  // into the stage tile i-1 used
    copies_commit();
    const float4* as = reinterpret_cast<const float4*>(smem + (i % STAGES) * STAGE_FLOATS) + lane;
    const float* bs = smem + (i % STAGES) * STAGE_FLOATS + BK * BM + (NHWC ? (wn * WTN + gid) * LDK + tig
                                                                           : wn * WTN + gid + tig * LDB);
#pragma unroll
    for (int kk = 0; kk < BK; kk += 8) {
      unsigned a[MT][4], b[NT][2];
#pragma unroll
      for (int mi = 0; mi < MT; ++mi) {  // fragment (kk/8, m-tile) of the packed tile: 32 lanes x 4 values
        const float4 v = as[((kk / 8) * (BM / 16) + wm * (WTM / 16) + mi) * 32];
        a[mi][0] = __float_as_uint(v.x);   // already TF32: rounded when packed
        a[mi][1] = __float_as_uint(v.y);
        a[mi][2] = __float_as_uint(v.z);
        a[mi][3] = __float_as_uint(v.w);
      }
#pragma unroll
      for (int j = 0; j < NT; ++j) {  // column gid of tile j, rows tig and tig+4
        const float* q = NHWC ? bs + j * 8 * LDK + kk : bs + kk * LDB + j * 8;
        b[j][0] = to_tf32(q[0]);
        b[j][1] = to_tf32(q[NHWC ? 4 : 4 * LDB]);
      }
#pragma unroll
      for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int j = 0; j < NT; ++j) mma_tf32(acc[mi][j], a[mi], b[j]);
    }
  }
  copies_wait<0>();  // no copy may still be writing shared memory when the block exits

  // Epilogue.  Thread (gid, tig) holds rows gid, gid+8 and columns 2*tig, 2*tig+1 of each tile.
#pragma unroll
  for (int j = 0; j < NT; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int pp = bp + wn * WTN + j * 8 + 2 * tig + h;
      if (pp >= N * HWO) continue;
      const int n = pp / HWO, pix = pp - n * HWO;
#pragma unroll
      for (int mi = 0; mi < MT; ++mi) {
#pragma unroll
        for (int v = 0; v < 2; ++v) {
          const int m = bm + wm * WTM + mi * 16 + gid + 8 * v;
          if (m >= MG) continue;
          const int oc = g * MG + m;
          const size_t at = ((size_t)n * M + oc) * HWO + pix;
          float out = acc[mi][j][2 * v + h];
          if (!partial) {
            out += (has_bias ? bias[oc] : 0.0f) + (has_res ? res[at] : 0.0f);
            if (act == 1) out = tanhf(out);
            else if (act == 2) out = out < 0.0f ? 0.0f : out;   // NaN stays NaN (PyTorch's relu)
            else if (act == 3) out = out < 0.0f ? 0.0f : (out > 6.0f ? 6.0f : out);
          }
          y[at] = out;
        }
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(tc::THREADS, TC_MINB)
conv_implicit_tf32(const float* __restrict__ x, const float* __restrict__ wt, const float* __restrict__ bias,
                   float* __restrict__ y, int N, int has_bias, int act, const float* __restrict__ res,
                   int has_res) {
  implicit_tf32(x, wt, bias, y, N, has_bias, act, res, has_res, blockIdx.z, 0, tc::KT, false);
}

// Split-K's first step: blockIdx.z = g * splits + slice; the block takes its slice of the k-tiles
// and writes raw sums to P[slice], P (splits, N, M, HO, WO).
extern "C" __global__ void __launch_bounds__(tc::THREADS, TC_MINB)
conv_implicit_tf32_splitk(const float* __restrict__ x, const float* __restrict__ wt, float* __restrict__ P,
                          int N, int splits) {
  const int g = blockIdx.z / splits, slice = blockIdx.z % splits;
  const int per_slice = (tc::KT + splits - 1) / splits;
  const int t_begin = slice * per_slice;
  implicit_tf32(x, wt, nullptr, P + (size_t)slice * N * tc::M * tc::HWO, N, 0, 0, nullptr, 0, g, t_begin,
                min(tc::KT, t_begin + per_slice), true);
}
