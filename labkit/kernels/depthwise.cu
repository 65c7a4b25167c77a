// depthwise.cu -- depthwise 3x3 convolution (MobileNetV2): every channel is convolved with a 3x3
// filter of its own and with no other channel (a grouped convolution with groups = channels).
//
//   y[n, c, oh, ow] = act(b[c] + sum over kh, kw of w[c, kh, kw] * x[n, c, oh*S - 1 + kh, ow*S - 1 + kw])
//   zero padding 1, stride S = 1 or 2, act: 0 none, 2 ReLU, 3 ReLU6 (min(max(v, 0), 6)); both keep
//   a NaN, as PyTorch's do.
//   The bias b[c]: none (has_bias 0), from b in global memory (1), or from constant memory (2),
//   dw_bias[bias_at + c]: as in the seed, a layer's bias is uploaded there once.  A warp's threads
//   work on one channel or a few, so a bias read is a broadcast (or a few) from the constant cache.
//   One module serves every layer of a plane size: each layer has its own run of dw_bias
//   (labkit.ops.constant_slots hands them out) and falls back to global memory when no run is free.
//
// Why it is memory-bound: an output costs 9 multiply-adds and, at the least, its 4 bytes written
// and 4 * S * S bytes of input read once.  18 flops per 8 bytes (stride 1) is 2.25 flop/byte; an
// H100 does ~20 FP32 flops per byte of HBM bandwidth.  So the floor of this kernel is the time to
// read x once and write y once, and the whole game is not to read x more than once from memory
// (nor to wait on anything else).  Each (image, channel) plane is an independent 2D problem.
//
// Versions:
//   depthwise_naive   one thread per output: 9 global loads.  Neighbouring threads read the same
//                     input values; the L1/L2 caches catch most of that, at the cost of 9 load
//                     instructions (and 9 bounds checks) per output.
//   depthwise_tiled   a block copies a tile of DW_PLANES planes x (the input rows of DW_ROWS output
//                     rows, halo included) into shared memory, once, with coalesced loads, the
//                     zero padding written there as zeros (so the compute loop has no bounds
//                     checks).  Each thread keeps its channel's 9 weights and bias in registers and
//                     walks down a column of DW_RPT outputs: each new output row needs 3 new input
//                     values from shared memory, the other 6 are the previous row's (a sliding
//                     window in registers).  Bias and activation are applied before the one store.
//
// depthwise_naive(x, w, b, y, NC, C, has_bias, act, bias_at)
// depthwise_tiled(x, w, b, y, NC, C, has_bias, act, bias_at)
//   x (N, C, H, W), w (C, 9) (the (C, 1, 3, 3) weights), b (C,) (read only when has_bias == 1),
//   y (N, C, HO, WO); NC = N * C planes.  Float32, C-contiguous.
// Launch (labkit.ops.depthwise): naive grid (ceil(NC * HO * WO / 256),), block (256,);
//   tiled grid (ceil(HO / DW_ROWS), ceil(NC / DW_PLANES)), block (DW_THREADS,), dynamic shared
//   memory DW_PLANES * (IN_ROWS * (W + 2) + 31) * 4 bytes, IN_ROWS = (DW_ROWS - 1) * S + 3, plus
//   DW_PLANES * HO * WO * 4 with DW_STAGE (the staged outputs follow the tiles, rounded up to 16 bytes).
// Compile-time parameters: DW_H, DW_W (the input plane), DW_S (stride), and for the tiled kernel
// DW_ROWS, DW_PLANES, DW_RPT (output rows per thread), DW_THREADS.  The plane's geometry is fixed
// so that its divisions compile to multiplications; channels and batch are arguments, so one
// module serves every layer of a plane size.  DW_STAGE: outputs staged in shared memory (below);
// DW_SKEW (default 1): the planes' tiles skewed against bank conflicts (below); DW_CONST_FLOATS: the
// size of dw_bias (floats).

#ifndef DW_H
#define DW_H 14
#endif
#ifndef DW_W
#define DW_W 14
#endif
#ifndef DW_S
#define DW_S 1
#endif
#ifndef DW_ROWS
#define DW_ROWS 14
#endif
#ifndef DW_PLANES
#define DW_PLANES 4
#endif
#ifndef DW_RPT
#define DW_RPT 7
#endif
#ifndef DW_THREADS
#define DW_THREADS 256
#endif
#ifndef DW_STAGE
#define DW_STAGE 0
#endif
#ifndef DW_SKEW
#define DW_SKEW 1
#endif
#ifndef DW_CONST_FLOATS
#define DW_CONST_FLOATS 8192
#endif

__constant__ float dw_bias[DW_CONST_FLOATS];  // runs of layers' biases (has_bias == 2)

namespace dw {
constexpr int H = DW_H, W = DW_W, S = DW_S;
constexpr int HO = (H + 2 - 3) / S + 1, WO = (W + 2 - 3) / S + 1;
constexpr int ROWS = DW_ROWS, PLANES = DW_PLANES, RPT = DW_RPT, THREADS = DW_THREADS;
constexpr int IN_ROWS = (ROWS - 1) * S + 3;   // input rows a tile of ROWS output rows reads
constexpr int SW = W + 2;                      // a shared row: the padding columns included
constexpr int TILE = IN_ROWS * SW;             // floats of one plane's tile
constexpr int TPP = THREADS / PLANES;          // threads per plane
constexpr int GROUPS = (ROWS + RPT - 1) / RPT; // row groups of a tile's column
// DW_STAGE (whole planes only): the outputs are gathered in shared memory and written out as one
// flat run of float4s per block, rather than each thread storing its own scattered outputs.
constexpr bool STAGE = DW_STAGE && ROWS == HO;

// The planes' tiles sit PS floats apart in shared memory, PS = TILE plus a skew of 0-31 floats
// chosen so that a warp's first window read hits as few addresses per bank as possible.  Without
// it, small planes conflict: 7x7 planes (TILE = 81 floats, 7 threads a plane) put lanes of planes 0
// and 2 on the same banks, and every read of the window is 2-3 shared-memory wavefronts instead of
// one.  (The host allots PLANES * (TILE + 31) floats: it need not know the skew.)
// Lane `lane`'s address in a warp's first access, planes ps floats apart.
__host__ __device__ constexpr int lane_address(int lane, int ps, int row_step, int col_step) {
  const int item = lane % TPP;
  return (lane / TPP) * ps + (item / WO) * RPT * row_step + (item % WO) * col_step;
}
// The most distinct addresses on one bank in that access (its shared-memory wavefronts).
__host__ __device__ constexpr int bank_conflicts(int ps, int row_step, int col_step) {
  int per_bank[32] = {}, worst = 0;
  const int lanes = THREADS < 32 ? THREADS : 32;
  for (int l = 0; l < lanes; ++l) {
    const int a = lane_address(l, ps, row_step, col_step);
    bool seen = false;  // lanes reading one address are served by one broadcast
    for (int m = 0; m < l; ++m) seen = seen || lane_address(m, ps, row_step, col_step) == a;
    if (!seen && ++per_bank[a % 32] > worst) worst = per_bank[a % 32];
  }
  return worst;
}
// The plane stride of floats + 0-31 with the fewest conflicts.
__host__ __device__ constexpr int skewed(int floats, int row_step, int col_step) {
  int best = floats, fewest = bank_conflicts(floats, row_step, col_step);
  for (int ps = floats + 1; ps < floats + 32; ++ps) {
    const int n = bank_conflicts(ps, row_step, col_step);
    if (n < fewest) best = ps, fewest = n;
  }
  return DW_SKEW ? best : floats;
}
constexpr int PS = skewed(TILE, S * SW, S);   // the window moves S rows, S columns
constexpr int STAGE_AT = (PLANES * (TILE + 31) + 3) / 4 * 4;  // the staged outputs: after the tiles, float4-aligned
static_assert(S == 1 || S == 2, "DW_S must be 1 or 2");
static_assert(THREADS % PLANES == 0 && THREADS <= 1024, "DW_THREADS: at most 1024, a multiple of DW_PLANES");
static_assert(ROWS >= 1 && ROWS <= HO && RPT >= 1 && RPT <= ROWS, "1 <= DW_RPT <= DW_ROWS <= HO");
}  // namespace dw

__device__ __forceinline__ float bias_of(const float* __restrict__ b, int c, int has_bias, int bias_at) {
  if (has_bias == 2) return dw_bias[bias_at + c];
  return has_bias ? b[c] : 0.0f;
}

// A block's n staged floats (16-byte aligned in shared memory) to dst: float4 stores where dst is
// 16-byte aligned too, the ragged end (or an unaligned dst) one float at a time.
__device__ __forceinline__ void store_run(const float* staged, float* __restrict__ dst, int n) {
  if ((reinterpret_cast<size_t>(dst) & 15) == 0) {
    for (int i = threadIdx.x; i < n / 4; i += blockDim.x)
      reinterpret_cast<float4*>(dst)[i] = reinterpret_cast<const float4*>(staged)[i];
    for (int i = n / 4 * 4 + threadIdx.x; i < n; i += blockDim.x) dst[i] = staged[i];
  } else {
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = staged[i];
  }
}

// Compares and selects, not fmaxf and fminf, which return the other operand for a NaN: a NaN must
// reach the output, as PyTorch's relu and relu6 keep it.
__device__ __forceinline__ float activate(float v, int act) {
  if (act == 2) return v < 0.0f ? 0.0f : v;
  if (act == 3) return v < 0.0f ? 0.0f : (v > 6.0f ? 6.0f : v);
  return v;
}

// Version 1: one output per thread, straight from global memory.
extern "C" __global__ void depthwise_naive(const float* __restrict__ x, const float* __restrict__ w,
                                           const float* __restrict__ b, float* __restrict__ y, int NC, int C,
                                           int has_bias, int act, int bias_at) {
  using namespace dw;
  const long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= (long long)NC * HO * WO) return;
  const int ow = (int)(o % WO), oh = (int)((o / WO) % HO);
  const long long plane = o / (HO * WO);
  const int c = (int)(plane % C);
  const float* xp = x + plane * H * W;
  float acc = bias_of(b, c, has_bias, bias_at);
  for (int kh = 0; kh < 3; ++kh) {
    const int ih = oh * S - 1 + kh;
    if (ih < 0 || ih >= H) continue;
    for (int kw = 0; kw < 3; ++kw) {
      const int iw = ow * S - 1 + kw;
      if (iw >= 0 && iw < W) acc += w[c * 9 + kh * 3 + kw] * xp[ih * W + iw];
    }
  }
  y[o] = activate(acc, act);
}

// The tile's interior, for depthwise_tiled, as flat runs of x: consecutive threads on consecutive
// floats (V = 4: float4s, 16-byte aligned), each thread issuing BATCH loads into registers before it
// stores any (BATCH loads in flight per thread).  Two shapes of run:
//   FULL  (the tile holds whole planes, DW_ROWS == HO): the block's `planes` planes are one run of
//         `count` = planes * H * W floats from `first`; V = 4 needs DW_PLANES * H * W % 4 == 0.
//   strip (DW_ROWS < HO): plane p's rows inside the image are a run of `count` floats from
//         first + p * H * W, going to tile rows r_lo, ...; V = 4 needs W % 4 == 0.
// Each float lands at its own (plane, row, column) of the tile: compile-time divisors, cheap.
template <int V, bool FULL>
__device__ __forceinline__ void copy_tile(const float* __restrict__ x, float* tile, long long first, int count,
                                          int r_lo, int planes) {
  using namespace dw;
  constexpr int RUNS = FULL ? 1 : PLANES;                                  // runs per block
  constexpr int PER = FULL ? (PLANES * H * W + V - 1) / V : IN_ROWS * W / V;  // most V-groups per run
  constexpr int LOADS = (RUNS * PER + THREADS - 1) / THREADS;
  constexpr int BATCH = LOADS < 8 ? LOADS : 8;
  for (int l0 = 0; l0 < LOADS; l0 += BATCH) {
    float v[BATCH][V];
#pragma unroll
    for (int b = 0; b < BATCH; ++b) {
      const int i = threadIdx.x + (l0 + b) * THREADS, p = i / PER, q = i % PER;
      const bool live = l0 + b < LOADS && i < RUNS * PER && (FULL || p < planes);
      const long long at = first + (long long)p * H * W + q * V;
      if constexpr (V == 4) {
        if (live && q * V + V <= count) {
          const float4 f = *reinterpret_cast<const float4*>(x + at);
          v[b][0] = f.x, v[b][1] = f.y, v[b][2] = f.z, v[b][3] = f.w;
        } else {  // the run's ragged end (or nothing): one float at a time, never past it
#pragma unroll
          for (int k = 0; k < V; ++k) v[b][k] = live && q * V + k < count ? x[at + k] : 0.0f;
        }
      } else {
        v[b][0] = live && q < count ? x[at] : 0.0f;
      }
    }
#pragma unroll
    for (int b = 0; b < BATCH; ++b) {
      const int i = threadIdx.x + (l0 + b) * THREADS, p = i / PER, q = i % PER;
      if (!(l0 + b < LOADS && i < RUNS * PER && (FULL || p < planes))) continue;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const int e = q * V + k;  // the float's place in its run
        if (e >= count) break;
        const int pp = FULL ? e / (H * W) : p;
        const int rem = FULL ? e % (H * W) : e;
        tile[pp * PS + (r_lo + rem / W) * SW + rem % W + 1] = v[b][k];
      }
    }
  }
}

// Version 2: shared-memory tiles, weights in registers, a sliding window down each column.
extern "C" __global__ void __launch_bounds__(DW_THREADS) depthwise_tiled(const float* __restrict__ x,
    const float* __restrict__ w, const float* __restrict__ b, float* __restrict__ y, int NC, int C, int has_bias,
    int act, int bias_at) {
  using namespace dw;
  extern __shared__ float tile[];  // [PLANES][PS]: a plane's [IN_ROWS][SW], then the skew
  const int plane0 = blockIdx.y * PLANES;
  const int oh0 = blockIdx.x * ROWS;       // the tile's first output row
  const int ih0 = oh0 * S - 1;             // ... and its first input row (-1: the top padding)

  // 0. This thread's plane and channel, and the channel's 9 weights and bias into registers: loaded
  //    first, so that their trip to memory overlaps the tile's instead of following the barrier.
  const int p = threadIdx.x / TPP, lane = threadIdx.x % TPP;
  const int plane = plane0 + p;
  const int c = (plane < NC ? plane : 0) % C;
  float k[9];
#pragma unroll
  for (int i = 0; i < 9; ++i) k[i] = w[c * 9 + i];
  const float bias = bias_of(b, c, has_bias, bias_at);

  // 1. The tile, copied once.  (a) Padding cells -- the two padding columns of every tile row, whole
  //    rows above or below the image, planes past NC -- are zeros.  (b) The rows inside the image
  //    are, per plane, one contiguous run of x: a flat copy, consecutive threads on consecutive
  //    floats (float4s when a row is a multiple of 4 floats), each thread issuing a batch of loads
  //    before it stores any (copy_tile).  A memory-bound kernel needs many bytes in flight per SM
  //    (about bandwidth x latency / SMs, ~14 KB on an H100): one load at a time per thread, waiting
  //    for each, would leave most of the bandwidth unused.  (a) and (b) write different cells, so
  //    one barrier after both suffices.
  for (int i = threadIdx.x; i < PLANES * IN_ROWS; i += THREADS) {
    const int p = i / IN_ROWS, r = i % IN_ROWS, ih = ih0 + r;
    float* row = tile + p * PS + r * SW;
    row[0] = 0.0f;
    row[SW - 1] = 0.0f;
    if (ih < 0 || ih >= H || plane0 + p >= NC)
      for (int c = 1; c <= W; ++c) row[c] = 0.0f;
  }
  const int r_lo = max(0, -ih0), r_hi = min(IN_ROWS, H - ih0);  // the tile rows inside the image
  const long long first = (long long)plane0 * H * W + (long long)(ih0 + r_lo) * W;  // plane0's first float
  const int planes = min(PLANES, NC - plane0);
  const bool aligned = (reinterpret_cast<size_t>(x) & 15) == 0;
  if constexpr (ROWS == HO) {  // whole planes: one run per block
    if constexpr (PLANES * H * W % 4 == 0) {  // (only then is the float4 copy compiled at all)
      if (aligned) copy_tile<4, true>(x, tile, first, planes * H * W, r_lo, planes);
      else copy_tile<1, true>(x, tile, first, planes * H * W, r_lo, planes);
    } else {
      copy_tile<1, true>(x, tile, first, planes * H * W, r_lo, planes);
    }
  } else if constexpr (W % 4 == 0) {
    if (aligned) copy_tile<4, false>(x, tile, first, (r_hi - r_lo) * W, r_lo, planes);
    else copy_tile<1, false>(x, tile, first, (r_hi - r_lo) * W, r_lo, planes);
  } else {
    copy_tile<1, false>(x, tile, first, (r_hi - r_lo) * W, r_lo, planes);
  }
  __syncthreads();

  // 2. Each thread: columns of RPT outputs of its plane, sliding the 3x3 window down.
  if (!STAGE && plane >= NC) return;  // no barrier follows
  const float* t = tile + p * PS;
  float* yp = STAGE ? tile + STAGE_AT + p * HO * WO : y + (long long)plane * HO * WO;
  for (int item = lane; item < (plane < NC ? GROUPS * WO : 0); item += TPP) {
    const int ow = item % WO, g = item / WO;
    const int r0 = g * RPT;                       // first output row of this item, in the tile
    const float* col = t + ow * S;                // the window's left column in the shared row
    float a0 = col[(r0 * S) * SW], a1 = col[(r0 * S) * SW + 1], a2 = col[(r0 * S) * SW + 2];
    float m0 = col[(r0 * S + 1) * SW], m1 = col[(r0 * S + 1) * SW + 1], m2 = col[(r0 * S + 1) * SW + 2];
#pragma unroll
    for (int j = 0; j < RPT; ++j) {
      const int r = r0 + j;
      if (r >= ROWS || oh0 + r >= HO) break;
      const float* low = col + (r * S + 2) * SW;
      const float z0 = low[0], z1 = low[1], z2 = low[2];
      float v = bias;
      v += k[0] * a0 + k[1] * a1 + k[2] * a2;
      v += k[3] * m0 + k[4] * m1 + k[5] * m2;
      v += k[6] * z0 + k[7] * z1 + k[8] * z2;
      yp[(oh0 + r) * WO + ow] = activate(v, act);
      if (S == 1) {  // slide one row: the middle becomes the top, the bottom the middle
        a0 = m0, a1 = m1, a2 = m2;
        m0 = z0, m1 = z1, m2 = z2;
      } else {       // slide two rows: the bottom becomes the top, a new middle row is read
        a0 = z0, a1 = z1, a2 = z2;
        const float* mid = col + (r * S + 3) * SW;
        if (j + 1 < RPT && r + 1 < ROWS) m0 = mid[0], m1 = mid[1], m2 = mid[2];
      }
    }
  }
  if constexpr (STAGE) {  // 3. the block's planes are one run of y: flat stores, float4s where aligned
    __syncthreads();
    store_run(tile + STAGE_AT, y + (long long)plane0 * HO * WO, planes * HO * WO);
  }
}

// Version 3: small whole planes (7x7, 14x14), one thread per output row.  depthwise_tiled pads its
// tiles (zero columns and rows), so its copy scatters each float4 into four shared cells, and its
// threads, a column each, read and stage with strides that put several lanes on a bank.  Small
// planes spend more of their time there than on memory.  Here the block's planes are copied
// exactly as they lie in x (float4 in, float4 out: no conflicts), each thread slides the 3x3 window
// along an output row, with the zero padding as predicates (the columns' are compile-time after
// unrolling), and the outputs are staged and stored as float4s too.  Lane l reads and writes at
// strides of W and WO floats: odd widths (7) touch every bank once.
// Launch: grid (ceil(NC / DW_PLANES),), block (DW_THREADS,) (DW_PLANES * HO threads: one row each),
// dynamic shared memory (ceil4(DW_PLANES * H * W) + DW_PLANES * HO * WO) * 4 bytes.
// Compiled only for planes up to 32x32 (FITS): its loops unroll along a row, and every module of the
// series would pay to compile a 112-wide one it never launches.
template <bool FITS>
__device__ __forceinline__ void planes_body(const float* __restrict__ x, const float* __restrict__ w,
                                            const float* __restrict__ b, float* __restrict__ y, int NC, int C,
                                            int has_bias, int act, int bias_at) {
  using namespace dw;
  if constexpr (FITS) {
    constexpr int IN = H * W, OUT = HO * WO;
    constexpr int OUT_AT = (PLANES * IN + 3) / 4 * 4;            // the staged outputs, float4-aligned
    constexpr int QUADS = (PLANES * IN / 4 + THREADS - 1) / THREADS + (PLANES * IN < 4);  // >= 1: no empty array
    extern __shared__ float tile[];  // [PLANES][H][W] as in x, then [PLANES][HO][WO] as in y
    const int plane0 = blockIdx.x * PLANES, planes = min(PLANES, NC - plane0);
    // This thread's first row's channel: its weights and bias loaded before the copy, to overlap it.
    int c = (plane0 + min((int)threadIdx.x / HO, planes - 1)) % C;
    float k[9];
#pragma unroll
    for (int i = 0; i < 9; ++i) k[i] = w[c * 9 + i];
    float bias = bias_of(b, c, has_bias, bias_at);

    // 1. The block's planes, one flat run of x: all of a thread's float4 loads issued, then stored.
    const float* src = x + (long long)plane0 * IN;
    const int count = planes * IN;
    if ((reinterpret_cast<size_t>(src) & 15) == 0) {
      float4 v[QUADS];
#pragma unroll
      for (int q = 0; q < QUADS; ++q) {
        const int i = threadIdx.x + q * THREADS;
        if (4 * i + 3 < count) v[q] = reinterpret_cast<const float4*>(src)[i];
      }
#pragma unroll
      for (int q = 0; q < QUADS; ++q) {
        const int i = threadIdx.x + q * THREADS;
        if (4 * i + 3 < count) reinterpret_cast<float4*>(tile)[i] = v[q];
      }
      for (int i = count / 4 * 4 + threadIdx.x; i < count; i += THREADS) tile[i] = src[i];  // the ragged end
    } else {
      for (int i = threadIdx.x; i < count; i += THREADS) tile[i] = src[i];
    }
    __syncthreads();

    // 2. A row of outputs a thread (more when the block has fewer threads than rows): the window's 3
    //    input rows (a row outside the plane reads as zeros), sliding right S columns at a time.
    for (int row = threadIdx.x; row < planes * HO; row += THREADS) {
      const int p = row / HO, oh = row % HO;
      if ((plane0 + p) % C != c) {  // another channel than the last row's
        c = (plane0 + p) % C;
#pragma unroll
        for (int i = 0; i < 9; ++i) k[i] = w[c * 9 + i];
        bias = bias_of(b, c, has_bias, bias_at);
      }
      const float* t = tile + p * IN;
      const int r0 = oh * S - 1;
      const bool top = r0 >= 0, bottom = r0 + 2 < H;
      auto at = [&](int dr, int col) -> float {  // col is a compile-time constant once unrolled
        if (col < 0 || col >= W) return 0.0f;
        if ((dr == 0 && !top) || (dr == 2 && !bottom)) return 0.0f;
        return t[(r0 + dr) * W + col];
      };
      float win[3][3];
#pragma unroll
      for (int dr = 0; dr < 3; ++dr)
#pragma unroll
        for (int dc = 0; dc < 3; ++dc) win[dr][dc] = at(dr, dc - 1);
      float* out = tile + OUT_AT + p * OUT + oh * WO;
#pragma unroll
      for (int ow = 0; ow < WO; ++ow) {
        if (ow > 0) {  // slide: keep the columns this output shares with the last, read the new ones
#pragma unroll
          for (int dr = 0; dr < 3; ++dr) {
            if (S == 1) {
              win[dr][0] = win[dr][1], win[dr][1] = win[dr][2], win[dr][2] = at(dr, ow + 1);
            } else {
              win[dr][0] = win[dr][2], win[dr][1] = at(dr, 2 * ow), win[dr][2] = at(dr, 2 * ow + 1);
            }
          }
        }
        float v = bias;
#pragma unroll
        for (int dr = 0; dr < 3; ++dr)
          v += k[3 * dr] * win[dr][0] + k[3 * dr + 1] * win[dr][1] + k[3 * dr + 2] * win[dr][2];
        out[ow] = activate(v, act);
      }
    }
    __syncthreads();

    // 3. The block's outputs, one flat run of y.
    store_run(tile + OUT_AT, y + (long long)plane0 * OUT, planes * OUT);
  }
}

extern "C" __global__ void __launch_bounds__(DW_THREADS) depthwise_planes(const float* __restrict__ x,
    const float* __restrict__ w, const float* __restrict__ b, float* __restrict__ y, int NC, int C, int has_bias,
    int act, int bias_at) {
  planes_body<(dw::H <= 32 && dw::W <= 32)>(x, w, b, y, NC, C, has_bias, act, bias_at);
}
