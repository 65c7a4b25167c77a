// gemm.cu -- the matrix-multiply ladder: C = act(A @ B + bias), one idea per version.
//
// Versions (each builds on the one before; siboehm's "How to optimize a CUDA matmul kernel"
// follows the same road):
//   gemm_naive    one thread computes one element C[m, n], reading A and B from global memory
//   gemm_tiled    a block stages GEMM_TILE x GEMM_TILE tiles of A and B in shared memory, so each
//                 value loaded from global memory feeds GEMM_TILE multiply-adds
//   gemm_regtile  2-D block tiling: a block computes a GEMM_BM x GEMM_BN tile of C, stepping through
//                 K GEMM_BK at a time; each thread computes GEMM_TM x GEMM_TN outputs in registers,
//                 so each value read from shared memory feeds TN (or TM) multiply-adds
//   gemm_vec      gemm_regtile with 16-byte (float4) loads from global memory where the rows allow
//                 it, and the A tile stored transposed in shared memory so that the inner loop
//                 reads A and B with float4 as well; a thread's outputs are groups of 4 x 4 spread
//                 across the block tile, so that those float4 reads are free of bank conflicts
//   gemm_dbuf     gemm_vec with two shared-memory stages: the next tile's global loads are in
//                 flight while the current tile is computed; gemm_dbuf_splitk + gemm_splitk_reduce
//                 share its main loop among blocks that each take a slice of K (few rows of C); one __syncthreads per tile;
//                 gemm_dbuf_batched runs it over a batch of products (Winograd's, conv_winograd_gemm.cu)
//
// Beside the ladder, gemm_few_rows: for 1-16 rows (a dense layer at a small batch), where the
// product is bound by reading B once; warps stream B's rows with float4 loads, K split among blocks.
//
// The operation: A (M, K), B (K, N), C (M, N), all float32 row-major (C-contiguous), any M, N, K
// (the tiles need not divide them: every load and store is guarded).
//   C[m, n] = act(sum over k of A[m, k] * B[k, n]  (+ bias[n] if has_bias == 1, + bias[m] if 2))
//   act: 0 none, 1 tanh, 2 ReLU, 4 GELU, 5 GELU by tanh (NaN kept by each).  has_bias: 0 none
//   (`bias` is not read: pass any float array), 1 one bias per column, `bias` (N,) (a dense layer:
//   x @ W + b), 2 one bias per row, `bias` (M,) (a convolution as W @ columns, whose rows are the
//   output channels).
//
// Every kernel: (A, B, bias, C, M, N, K, has_bias, act), with int sizes and flags.
//
// Launch (Python): labkit.ops.gemm.gemm(a, b, bias, variant="regtile"), which also gives the launch
// configuration (labkit.ops.gemm.gemm_launch_config):
//   gemm_naive, gemm_tiled   grid (ceil(N / T), ceil(M / T)), block (T, T), T = GEMM_TILE
//   the other three          grid (ceil(N / BN), ceil(M / BM)), block ((BM/TM) * (BN/TN),)
// All shared memory is static (no shared_mem at launch).
//
// Compile-time parameters (labkit.load("gemm", defines={...})):
//   GEMM_TILE   the tile width of gemm_naive's block and gemm_tiled's tiles (default 16)
//   GEMM_BM, GEMM_BN, GEMM_BK   the block tile of C and its step along K (defaults 64, 64, 8)
//   GEMM_TM, GEMM_TN            outputs per thread (default 4 x 4: 256 threads to a block)
// TM, TN and BK must be multiples of 4 (the float4 versions read rows of 4), TM must divide BM and
// TN divide BN.
//   GEMM_TUNED_ONLY             defined: only gemm_dbuf (and its split-K), gemm_few_rows and the
//                               reduce are compiled.  The dense layers and the autotuner run only
//                               those; leaving the four teaching versions out makes each build
//                               about a third cheaper (a search compiles one module per tile size).

#ifndef GEMM_TILE
#define GEMM_TILE 16
#endif
#ifndef GEMM_BM
#define GEMM_BM 64
#endif
#ifndef GEMM_BN
#define GEMM_BN 64
#endif
#ifndef GEMM_BK
#define GEMM_BK 8
#endif
#ifndef GEMM_TM
#define GEMM_TM 4
#endif
#ifndef GEMM_TN
#define GEMM_TN 4
#endif

#define ACT_NONE 0
#define ACT_TANH 1
#define ACT_RELU 2
#define ACT_GELU 4        // v/2 (1 + erf(v / sqrt 2)), as pointwise.cu's code 9 (the exact GELU)
#define ACT_GELU_TANH 5   // v/2 (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))), as pointwise.cu's code 10

namespace gemm {
constexpr int T = GEMM_TILE;
constexpr int BM = GEMM_BM, BN = GEMM_BN, BK = GEMM_BK, TM = GEMM_TM, TN = GEMM_TN;
constexpr int THREADS = (BM / TM) * (BN / TN);   // threads per block of the register-tiled versions
constexpr int A_GROUPS = BM * BK / 4;             // float4 groups in one A tile (BM rows of BK)
constexpr int B_GROUPS = BK * BN / 4;             // float4 groups in one B tile (BK rows of BN)
// The float4 versions give a thread TMV x TNV groups of 4 x 4 outputs, ROW_STEP rows and COL_STEP
// columns apart (see fma_tile); with TM = TN = 4 that is one group, the layout of gemm_regtile.
constexpr int TMV = TM / 4, TNV = TN / 4;
constexpr int ROW_STEP = BM / TMV, COL_STEP = BN / TNV;
static_assert(T >= 1 && T <= 32, "GEMM_TILE must be 1 to 32 (a block of T*T threads holds at most 1024)");
static_assert(BM % TM == 0 && BN % TN == 0, "GEMM_TM must divide GEMM_BM and GEMM_TN divide GEMM_BN");
static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0,
              "GEMM_TM, GEMM_TN and GEMM_BK must be multiples of 4 (gemm_vec reads float4 rows)");
static_assert(THREADS <= 1024, "(BM/TM) * (BN/TN) threads: a block holds at most 1024");
static_assert(2 * (BM + BN) * BK * 4 <= 48 * 1024, "gemm_dbuf's two stages exceed 48 KiB of shared memory");
}  // namespace gemm

// `act` and `has_bias` are the same for every thread of a launch: these branches never diverge.
__device__ __forceinline__ float epilogue(float acc, const float* __restrict__ bias, int has_bias, int m,
                                          int n, int act) {
  if (has_bias == 1) acc += bias[n];
  else if (has_bias == 2) acc += bias[m];
  if (act == ACT_TANH) return tanhf(acc);
  // Not fmaxf: fmaxf(NaN, 0) is 0, and a NaN must reach C, as PyTorch's relu keeps it.
  if (act == ACT_RELU) return acc < 0.0f ? 0.0f : acc;
  // A transformer MLP's first layer (ConvNeXt's): its GELU here saves a pass over its 4x-wide output.
  if (act == ACT_GELU) return 0.5f * acc * (1.0f + erff(acc * 0.70710678118654752f));
  if (act == ACT_GELU_TANH)
    return 0.5f * acc * (1.0f + tanhf(0.79788456080286536f * (acc + 0.044715f * acc * acc * acc)));
  return acc;
}

#ifndef GEMM_TUNED_ONLY
// Version 1: one thread, one element of C.  threadIdx.x runs along a row of C, so a warp reads
// consecutive elements of B's row and writes consecutive elements of C (coalesced), and all of it
// reads the same A[m, k] (a broadcast).  Each element of A is read N times, each of B M times:
// two global loads per multiply-add, the caches absorb what they can.
extern "C" __global__ void gemm_naive(const float* __restrict__ A, const float* __restrict__ B,
                                      const float* __restrict__ bias, float* __restrict__ C,
                                      int M, int N, int K, int has_bias, int act) {
  const int m = blockIdx.y * blockDim.y + threadIdx.y;
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (m >= M || n >= N) return;
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) acc += A[(size_t)m * K + k] * B[(size_t)k * N + n];
  C[(size_t)m * N + n] = epilogue(acc, bias, has_bias, m, n, act);
}
#endif  // GEMM_TUNED_ONLY

#ifndef GEMM_TUNED_ONLY
// Version 2: shared-memory tiles.  The block loads a T x T tile of A and one of B (one element
// per thread, coalesced), waits, and every thread then takes T multiply-adds from shared memory:
// global traffic falls by a factor T.  Threads past the edge of C still load (zeros outside the
// matrices) and reach every __syncthreads; they only skip the final store.
extern "C" __global__ void gemm_tiled(const float* __restrict__ A, const float* __restrict__ B,
                                      const float* __restrict__ bias, float* __restrict__ C,
                                      int M, int N, int K, int has_bias, int act) {
  using gemm::T;
  __shared__ float As[T][T];  // As[ty][k] = A[m, k0 + k]: read as a broadcast along a warp
  __shared__ float Bs[T][T];  // Bs[k][tx] = B[k0 + k, n]: consecutive threads, consecutive banks
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int m = blockIdx.y * T + ty;
  const int n = blockIdx.x * T + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += T) {
    // The zeros past K make the last tile's extra products vanish.
    As[ty][tx] = (m < M && k0 + tx < K) ? A[(size_t)m * K + k0 + tx] : 0.0f;
    Bs[ty][tx] = (k0 + ty < K && n < N) ? B[(size_t)(k0 + ty) * N + n] : 0.0f;
    __syncthreads();  // the tiles are complete
#pragma unroll
    for (int k = 0; k < T; ++k) acc += As[ty][k] * Bs[k][tx];
    __syncthreads();  // everyone is done with them before the next tile overwrites them
  }
  if (m < M && n < N) C[(size_t)m * N + n] = epilogue(acc, bias, has_bias, m, n, act);
}
#endif  // GEMM_TUNED_ONLY

// The thread's TM x TN outputs, rows m0.., columns n0.. (register-tiled versions).
__device__ __forceinline__ void store_tile(float* __restrict__ C, const float (&acc)[gemm::TM][gemm::TN],
                                           const float* __restrict__ bias, int has_bias, int M, int N,
                                           int m0, int n0, int act) {
  using namespace gemm;
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    if (m0 + i >= M) break;
#pragma unroll
    for (int j = 0; j < TN; ++j)
      if (n0 + j < N) C[(size_t)(m0 + i) * N + n0 + j] = epilogue(acc[i][j], bias, has_bias, m0 + i, n0 + j, act);
  }
}

#ifndef GEMM_TUNED_ONLY
// Version 3: 2-D block tiling (siboehm's kernel 5).  A block of THREADS threads owns a BM x BN tile
// of C; thread (tr, tc) owns the TM x TN outputs at rows tr*TM.., columns tc*TN.. of it.  For each
// step k of a BK-wide slice, it copies TM values of A's column and TN values of B's row from
// shared memory to registers and does TM*TN multiply-adds with them: 2 shared loads per 2 FMAs in
// gemm_tiled become TM + TN loads per TM*TN FMAs (8 per 16 with 4x4).
extern "C" __global__ void gemm_regtile(const float* __restrict__ A, const float* __restrict__ B,
                                        const float* __restrict__ bias, float* __restrict__ C,
                                        int M, int N, int K, int has_bias, int act) {
  using namespace gemm;
  __shared__ float As[BM * BK];  // the A tile as stored: As[r * BK + k] = A[m0 + r, k0 + k]
  __shared__ float Bs[BK * BN];  // Bs[k * BN + c] = B[k0 + k, n0 + c]
  const int tid = threadIdx.x;
  const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
  const int tr = tid / (BN / TN), tc = tid % (BN / TN);
  float acc[TM][TN] = {};
  float regM[TM], regN[TN];
  for (int k0 = 0; k0 < K; k0 += BK) {
    // Consecutive threads take consecutive elements of a tile row: coalesced where rows are long.
    for (int i = tid; i < BM * BK; i += THREADS) {
      const int r = i / BK, k = i % BK;
      As[i] = (bm + r < M && k0 + k < K) ? A[(size_t)(bm + r) * K + k0 + k] : 0.0f;
    }
    for (int i = tid; i < BK * BN; i += THREADS) {
      const int k = i / BN, c = i % BN;
      Bs[i] = (k0 + k < K && bn + c < N) ? B[(size_t)(k0 + k) * N + bn + c] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
#pragma unroll
      for (int i = 0; i < TM; ++i) regM[i] = As[(tr * TM + i) * BK + k];
#pragma unroll
      for (int j = 0; j < TN; ++j) regN[j] = Bs[k * BN + tc * TN + j];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] += regM[i] * regN[j];
    }
    __syncthreads();
  }
  store_tile(C, acc, bias, has_bias, M, N, bm + tr * TM, bn + tc * TN, act);
}
#endif  // GEMM_TUNED_ONLY

// --- helpers of the float4 versions -----------------------------------------------------------
// Four neighbours row[col .. col+3] of a row `len` floats long, zeros past its end.  `vec`: the
// row starts 16-byte aligned and len % 4 == 0 (and col % 4 == 0), so one float4 load reads all
// four, or none of them is in the row.  Otherwise four guarded scalar loads.
__device__ __forceinline__ float4 load4(const float* __restrict__ row, int col, int len, bool vec) {
  if (vec) return col < len ? *reinterpret_cast<const float4*>(row + col) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  return make_float4(col < len ? row[col] : 0.0f, col + 1 < len ? row[col + 1] : 0.0f,
                     col + 2 < len ? row[col + 2] : 0.0f, col + 3 < len ? row[col + 3] : 0.0f);
}

// Group g of the A tile at (bm, k0): row g / (BK/4), columns 4 * (g % (BK/4)) .. +3.
__device__ __forceinline__ float4 load_a4(const float* __restrict__ A, int M, int K, int bm, int k0, int g,
                                          bool vec) {
  using namespace gemm;
  const int r = g / (BK / 4), k = (g % (BK / 4)) * 4;
  if (bm + r >= M) return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  return load4(A + (size_t)(bm + r) * K, k0 + k, K, vec);
}

// ... stored transposed, As[k * BM + r]: the inner loop then finds a thread's TM rows of one k
// next to each other (a float4 read).  The four scalar stores go to four different k rows.
__device__ __forceinline__ void store_a4(float* As, int g, float4 v) {
  using namespace gemm;
  const int r = g / (BK / 4), k = (g % (BK / 4)) * 4;
  As[(k + 0) * BM + r] = v.x;
  As[(k + 1) * BM + r] = v.y;
  As[(k + 2) * BM + r] = v.z;
  As[(k + 3) * BM + r] = v.w;
}

// Group g of the B tile at (k0, bn): row g / (BN/4), columns 4 * (g % (BN/4)) .. +3; stored as is.
__device__ __forceinline__ float4 load_b4(const float* __restrict__ B, int N, int K, int k0, int bn, int g,
                                          bool vec) {
  using namespace gemm;
  const int k = g / (BN / 4), c = (g % (BN / 4)) * 4;
  if (k0 + k >= K) return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  return load4(B + (size_t)(k0 + k) * N, bn + c, N, vec);
}

__device__ __forceinline__ void store_b4(float* Bs, int g, float4 v) {
  *reinterpret_cast<float4*>(Bs + g * 4) = v;  // group g sits at g * 4 in the row-major tile
}

// One BK slice of the thread's TM x TN outputs from the shared tiles (As transposed), reading
// A's column and B's row four floats at a time.
// Which outputs: not TM neighbouring rows and TN neighbouring columns (gemm_regtile's layout) but
// TMV x TNV groups of 4 x 4, ROW_STEP rows and COL_STEP columns apart (CUTLASS's layout).  Why:
// with TN = 8 neighbouring columns, thread tc reads B at tc * 8 and tc * 8 + 4, so the float4
// reads of 8 neighbouring threads (one shared-memory wavefront) span 256 bytes and hit each bank
// twice.  Groups of 4 make them read tc * 4: 128 neighbouring bytes, every bank once.
__device__ __forceinline__ void fma_tile(const float* As, const float* Bs, float (&acc)[gemm::TM][gemm::TN],
                                         int tr, int tc) {
  using namespace gemm;
  float regM[TM], regN[TN];
#pragma unroll
  for (int k = 0; k < BK; ++k) {
#pragma unroll
    for (int q = 0; q < TMV; ++q) {
      const float4 a = *reinterpret_cast<const float4*>(As + k * BM + q * ROW_STEP + tr * 4);
      regM[4 * q] = a.x, regM[4 * q + 1] = a.y, regM[4 * q + 2] = a.z, regM[4 * q + 3] = a.w;
    }
#pragma unroll
    for (int q = 0; q < TNV; ++q) {
      const float4 b = *reinterpret_cast<const float4*>(Bs + k * BN + q * COL_STEP + tc * 4);
      regN[4 * q] = b.x, regN[4 * q + 1] = b.y, regN[4 * q + 2] = b.z, regN[4 * q + 3] = b.w;
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] += regM[i] * regN[j];
  }
}

// fma_tile's outputs to C: acc[i][j] is row bm + (i / 4) * ROW_STEP + tr * 4 + i % 4, column
// bn + (j / 4) * COL_STEP + tc * 4 + j % 4.  A warp's stores of one row cover (BN / TN) * 4
// neighbouring columns.
__device__ __forceinline__ void store_groups(float* __restrict__ C, const float (&acc)[gemm::TM][gemm::TN],
                                             const float* __restrict__ bias, int has_bias, int M, int N,
                                             int bm, int bn, int tr, int tc, int act) {
  using namespace gemm;
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int m = bm + (i / 4) * ROW_STEP + tr * 4 + i % 4;
    if (m >= M) continue;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int n = bn + (j / 4) * COL_STEP + tc * 4 + j % 4;
      if (n < N) C[(size_t)m * N + n] = epilogue(acc[i][j], bias, has_bias, m, n, act);
    }
  }
}

#ifndef GEMM_TUNED_ONLY
// Version 4: gemm_regtile with float4.  A quarter of the global load instructions where a row's
// length is a multiple of 4 and the matrix starts 16-byte aligned (checked here at run time, the
// same answer for the whole launch; a view that starts mid-allocation may not be aligned), and
// the inner loop reads shared memory with float4 too, thanks to the transposed A tile.
// The shared tiles are declared float4 so that they are 16-byte aligned on every compiler.
extern "C" __global__ void gemm_vec(const float* __restrict__ A, const float* __restrict__ B,
                                    const float* __restrict__ bias, float* __restrict__ C,
                                    int M, int N, int K, int has_bias, int act) {
  using namespace gemm;
  __shared__ float4 As4[BK * BM / 4];  // As[k * BM + r] = A[bm + r, k0 + k] (transposed)
  __shared__ float4 Bs4[BK * BN / 4];  // Bs[k * BN + c] = B[k0 + k, bn + c]
  float* As = reinterpret_cast<float*>(As4);
  float* Bs = reinterpret_cast<float*>(Bs4);
  const bool a_vec = K % 4 == 0 && (reinterpret_cast<size_t>(A) & 15) == 0;
  const bool b_vec = N % 4 == 0 && (reinterpret_cast<size_t>(B) & 15) == 0;
  const int tid = threadIdx.x;
  const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
  const int tr = tid / (BN / TN), tc = tid % (BN / TN);
  float acc[TM][TN] = {};
  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int g = tid; g < A_GROUPS; g += THREADS) store_a4(As, g, load_a4(A, M, K, bm, k0, g, a_vec));
    for (int g = tid; g < B_GROUPS; g += THREADS) store_b4(Bs, g, load_b4(B, N, K, k0, bn, g, b_vec));
    __syncthreads();
    fma_tile(As, Bs, acc, tr, tc);
    __syncthreads();
  }
  store_groups(C, acc, bias, has_bias, M, N, bm, bn, tr, tc, act);
}
#endif  // GEMM_TUNED_ONLY

// Version 5: gemm_vec with double buffering.  Each thread first issues the global loads of tile
// t+1 into registers, then computes tile t from shared stage t % 2 (the loads' latency hides
// behind those FMAs), then writes its registers into the other stage.  That stage was last read
// while computing tile t-1, which every thread finished before the previous __syncthreads, so one
// barrier per tile is enough: it publishes tile t+1 and frees stage t % 2 at once.
// The main loop runs over the k-tiles [t_begin, t_end): all of them in gemm_dbuf, a slice of them
// in gemm_dbuf_splitk.
__device__ __forceinline__ void dbuf_mainloop(const float* __restrict__ A, const float* __restrict__ B, int M,
                                              int N, int K, int t_begin, int t_end,
                                              float (&acc)[gemm::TM][gemm::TN]) {
  using namespace gemm;
  constexpr int A_LOADS = (A_GROUPS + THREADS - 1) / THREADS;  // float4 groups per thread per tile
  constexpr int B_LOADS = (B_GROUPS + THREADS - 1) / THREADS;
  __shared__ float4 As4[2][BK * BM / 4];  // two stages of gemm_vec's tiles
  __shared__ float4 Bs4[2][BK * BN / 4];
  const bool a_vec = K % 4 == 0 && (reinterpret_cast<size_t>(A) & 15) == 0;
  const bool b_vec = N % 4 == 0 && (reinterpret_cast<size_t>(B) & 15) == 0;
  const int tid = threadIdx.x;
  const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
  const int tr = tid / (BN / TN), tc = tid % (BN / TN);
  float4 ra[A_LOADS], rb[B_LOADS];  // the next tile, on its way from global memory
  if (t_begin >= t_end) return;     // the same for the whole block: no barrier is skipped by a part of it

  // Prologue: tile t_begin into stage 0.
  for (int l = 0; l < A_LOADS; ++l) {
    const int g = tid + l * THREADS;
    if (g < A_GROUPS) store_a4(reinterpret_cast<float*>(As4[0]), g, load_a4(A, M, K, bm, t_begin * BK, g, a_vec));
  }
  for (int l = 0; l < B_LOADS; ++l) {
    const int g = tid + l * THREADS;
    if (g < B_GROUPS) store_b4(reinterpret_cast<float*>(Bs4[0]), g, load_b4(B, N, K, t_begin * BK, bn, g, b_vec));
  }
  __syncthreads();

  for (int t = t_begin; t < t_end; ++t) {
    const int cur = (t - t_begin) & 1;
    const bool more = t + 1 < t_end;  // the same for the whole block: the barrier below is uniform
    if (more) {
      const int k0 = (t + 1) * BK;
#pragma unroll
      for (int l = 0; l < A_LOADS; ++l) {
        const int g = tid + l * THREADS;
        if (g < A_GROUPS) ra[l] = load_a4(A, M, K, bm, k0, g, a_vec);
      }
#pragma unroll
      for (int l = 0; l < B_LOADS; ++l) {
        const int g = tid + l * THREADS;
        if (g < B_GROUPS) rb[l] = load_b4(B, N, K, k0, bn, g, b_vec);
      }
    }
    fma_tile(reinterpret_cast<const float*>(As4[cur]), reinterpret_cast<const float*>(Bs4[cur]), acc, tr, tc);
    if (more) {
#pragma unroll
      for (int l = 0; l < A_LOADS; ++l) {
        const int g = tid + l * THREADS;
        if (g < A_GROUPS) store_a4(reinterpret_cast<float*>(As4[cur ^ 1]), g, ra[l]);
      }
#pragma unroll
      for (int l = 0; l < B_LOADS; ++l) {
        const int g = tid + l * THREADS;
        if (g < B_GROUPS) store_b4(reinterpret_cast<float*>(Bs4[cur ^ 1]), g, rb[l]);
      }
      __syncthreads();
    }
  }
}

extern "C" __global__ void gemm_dbuf(const float* __restrict__ A, const float* __restrict__ B,
                                     const float* __restrict__ bias, float* __restrict__ C,
                                     int M, int N, int K, int has_bias, int act) {
  using namespace gemm;
  const int tr = threadIdx.x / (BN / TN), tc = threadIdx.x % (BN / TN);
  float acc[TM][TN] = {};
  dbuf_mainloop(A, B, M, N, K, 0, (K + BK - 1) / BK, acc);
  store_groups(C, acc, bias, has_bias, M, N, blockIdx.y * BM, blockIdx.x * BN, tr, tc, act);
}

// Split-K (for products with few rows: a dense layer at a small batch).  A (1 x 9216) @ (9216 x 4096)
// product is 32 blocks of gemm_dbuf, a quarter of an H100's SMs, each walking all of K alone.  Here
// blockIdx.z takes a slice of `tiles_per_split` k-tiles and writes its partial products to
// P[z] (M x N); gemm_splitk_reduce then adds the slices, the bias and the activation.
// Launch: grid (ceil(N / BN), ceil(M / BM), splits), block ((BM/TM) * (BN/TN),); P (splits, M, N).
extern "C" __global__ void gemm_dbuf_splitk(const float* __restrict__ A, const float* __restrict__ B,
                                            float* __restrict__ P, int M, int N, int K, int tiles_per_split) {
  using namespace gemm;
  const int tr = threadIdx.x / (BN / TN), tc = threadIdx.x % (BN / TN);
  const int tiles = (K + BK - 1) / BK, t0 = blockIdx.z * tiles_per_split;
  float acc[TM][TN] = {};
  dbuf_mainloop(A, B, M, N, K, t0, min(tiles, t0 + tiles_per_split), acc);
  store_groups(P + (size_t)blockIdx.z * M * N, acc, nullptr, 0, M, N, blockIdx.y * BM, blockIdx.x * BN, tr,
               tc, 0);
}

// Batched (P independent products of one shape, each its own A, B and C: the GEMMs of a Winograd
// convolution, one per transform position).  blockIdx.z takes product z: A + z * sa, B + z * sb,
// C + z * sc (strides in floats); no bias, no activation (the caller's epilogue does them).
// Launch: grid (ceil(N / BN), ceil(M / BM), batch), block ((BM/TM) * (BN/TN),).
extern "C" __global__ void gemm_dbuf_batched(const float* __restrict__ A, const float* __restrict__ B,
                                             float* __restrict__ C, int M, int N, int K, long long sa,
                                             long long sb, long long sc) {
  using namespace gemm;
  const int tr = threadIdx.x / (BN / TN), tc = threadIdx.x % (BN / TN);
  const size_t z = blockIdx.z;
  float acc[TM][TN] = {};
  dbuf_mainloop(A + z * sa, B + z * sb, M, N, K, 0, (K + BK - 1) / BK, acc);
  store_groups(C + z * sc, acc, nullptr, 0, M, N, blockIdx.y * BM, blockIdx.x * BN, tr, tc, 0);
}

// C[m, n] = act(sum over z of P[z, m, n] + bias): one thread per element, a fixed order of the
// slices (the result does not depend on which block finished first).
// Launch: grid (ceil(M * N / 256),), block (256,).
extern "C" __global__ void gemm_splitk_reduce(const float* __restrict__ P, const float* __restrict__ bias,
                                              float* __restrict__ C, int M, int N, int splits, int has_bias,
                                              int act) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)M * N) return;
  float s = 0.0f;
  for (int z = 0; z < splits; ++z) s += P[(size_t)z * M * N + i];
  C[i] = epilogue(s, bias, has_bias, (int)(i / N), (int)(i % N), act);
}

#ifndef GEMM_ROWS
#define GEMM_ROWS 8
#endif
namespace rows {
constexpr int R = GEMM_ROWS;
constexpr int WARPS = R <= 8 ? 8 : 4;  // keeps the shared sums (WARPS * R * 128 floats) at 32 KiB
constexpr int COLS = 128;              // a warp's columns: 32 lanes x 4
static_assert(R >= 1 && R <= 16, "GEMM_ROWS must be 1 to 16");
}  // namespace rows

// Few rows (a dense layer at batch 1-16): C = act(A @ B + bias) with M <= GEMM_ROWS.  Each weight of
// B feeds only M multiply-adds, so the product is bound by reading B once, as fast as memory allows;
// a block tile of 64+ rows would mostly multiply zeros and keep too few loads in flight.  Here a
// warp streams whole rows of B: lane l reads B[k, n0 + 4l .. +3] (one float4; a warp reads 512
// neighbouring bytes), and keeps M x 4 sums.  The block's WARPS warps take interleaved groups of 4 k
// of the block's slice of K (four rows of B in flight per warp); then they add their sums in shared
// memory and the block writes its partial product to P[blockIdx.y] (M x N), which
// gemm_splitk_reduce adds up with the bias and the activation.
// Launch: grid (ceil(N / 128), slices), block (32 * WARPS,); P (slices, M, N).  A's rows are read
// with float4 when K and k_per_slice are multiples of 4 (labkit.ops.gemm rounds k_per_slice so).
extern "C" __global__ void gemm_few_rows(const float* __restrict__ A, const float* __restrict__ B,
                                         float* __restrict__ P, int M, int N, int K, int k_per_slice) {
  using namespace rows;
  __shared__ float sums[WARPS][R * COLS];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n = blockIdx.x * COLS + lane * 4;
  const int k_begin = blockIdx.y * k_per_slice, k_end = min(K, k_begin + k_per_slice);
  const bool vec = N % 4 == 0 && (reinterpret_cast<size_t>(B) & 15) == 0;
  const bool a_vec = K % 4 == 0 && k_per_slice % 4 == 0 && (reinterpret_cast<size_t>(A) & 15) == 0;
  float acc[R][4] = {};
  // Warp w takes k = k0 .. k0+3 with k0 = k_begin + 4w, then k0 + 4 * WARPS, ...: four rows of B
  // (four loads in flight), and A's four values of each row in one float4 (load4 zero-fills past
  // the slice's end, through its length argument).
  for (int k0 = k_begin + 4 * warp; k0 < k_end; k0 += 4 * WARPS) {
    float4 w[4];
#pragma unroll
    for (int u = 0; u < 4; ++u)
      w[u] = k0 + u < k_end ? load4(B + (size_t)(k0 + u) * N, n, N, vec) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r >= M) break;  // the same for the whole launch
      // One address for the whole warp (a broadcast); row r of A from k_begin, k_end - k_begin long.
      const float4 a = load4(A + (size_t)r * K + k_begin, k0 - k_begin, k_end - k_begin, a_vec);
      acc[r][0] += a.x * w[0].x + a.y * w[1].x + a.z * w[2].x + a.w * w[3].x;
      acc[r][1] += a.x * w[0].y + a.y * w[1].y + a.z * w[2].y + a.w * w[3].y;
      acc[r][2] += a.x * w[0].z + a.y * w[1].z + a.z * w[2].z + a.w * w[3].z;
      acc[r][3] += a.x * w[0].w + a.y * w[1].w + a.z * w[2].w + a.w * w[3].w;
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < 4; ++c) sums[warp][r * COLS + lane * 4 + c] = acc[r][c];
  __syncthreads();
  for (int i = threadIdx.x; i < R * COLS; i += 32 * WARPS) {
    const int r = i / COLS, col = blockIdx.x * COLS + i % COLS;
    if (r >= M || col >= N) continue;
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) s += sums[w][i];
    P[((size_t)blockIdx.y * M + r) * N + col] = s;
  }
}
