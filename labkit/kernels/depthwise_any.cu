// depthwise_any.cu -- depthwise convolution of any geometry: every channel is convolved with a KH x KW
// filter of its own and with no other channel (a grouped convolution with groups = channels, weights
// (C, 1, KH, KW)), with any stride, zero padding (wider than the kernel too, as PyTorch allows) and
// dilation, each per axis.  With a channel multiplier (DWA_MULT = M / C > 1, weights (M, 1, KH, KW)),
// output channel m filters input channel m / DWA_MULT: the M/C outputs of a channel read the same plane.
//
//   y[n, m, oh, ow] = act(b[m] + sum over kh, kw of w[m, kh, kw] * x[n, m / MULT, oh*SH - PH + kh*DH, ow*SW - PW + kw*DW])
//   x outside the image reads as 0; HO = (H + 2*PH - DH*(KH-1) - 1) / SH + 1 (PyTorch's), WO likewise.
//   act: 0 none, 2 ReLU, 3 ReLU6, written as comparisons so that NaN goes through as NaN (PyTorch keeps
//   it; fmaxf(NaN, 0) would give 0).  The bias b[c]: none (has_bias 0) or from b (1).
//
// Why it is memory-bound: an output costs KH*KW multiply-adds and, at the least, its 4 bytes written
// and 4*SH*SW bytes of input read once.  A 3x3 at stride 1 does 18 flops per 8 bytes, a 7x7 98: an
// H100 does ~20 FP32 flops per byte of HBM bandwidth (~67 TFLOP/s, 3.35 TB/s), so up to 7x7 the floor
// is the time to read x once and write y once.  The game is to read each input value from memory once
// and to keep the rest of the work per output (shared-memory reads, FMAs) under that time: a 7x7 at
// stride 1 needs about 60% of the FP32 pipes just for its FMAs at the floor, so no instruction is to spare.
//
// depthwise_any: a block computes a tile of TY*RY output rows x TX*RX output columns of DWA_PLANES
// (n, c) planes (more planes a block for small planes, tiles along both axes for large ones).
//   1. The block's input tile -- every row and column its outputs read, the halo included -- is
//      copied once into shared memory: consecutive threads on consecutive floats of a row (coalesced),
//      each thread issuing a batch of loads before it stores any (a memory-bound kernel needs many
//      bytes in flight), cells outside the image written as zeros (no bounds checks after this).
//   2. Each thread computes RY x RX outputs (RY rows, RX neighbouring columns) in registers.  It walks
//      down the ROWS_IN input rows its windows cover; each row's segment (the RX windows' columns side
//      by side) is read from shared memory once, as float4s where the segments start 16-byte aligned
//      (float2s, floats), and feeds every output row whose windows have that row: RX*KW multiply-adds
//      each.  The weights are in registers (DWA_WSHARED: in shared memory, for kernels too large for
//      registers); every loop unrolls at compile time.
//   3. Bias and activation are applied in registers before the one store of each output: a thread's
//      row of RX outputs as float4s (float2s) where y's rows allow, else one float at a time.
//
// depthwise_any(x, w, b, y, NC, M, has_bias, act)
//   x (N, C, H, W), w (M, KH*KW) (the (M, 1, KH, KW) weights), b (M,) (read only when has_bias == 1),
//   y (N, M, HO, WO); NC = N * M output planes, output plane q reading input plane q / DWA_MULT (the
//   planes of one input channel are neighbours: a block's copies of it meet in L2).  Float32,
//   C-contiguous.  A plane's offset is 64-bit (N*C*H*W may pass 2^31), offsets within a plane 32-bit.
// Launch (labkit.ops.depthwise_any): grid (ceil(NC / DWA_PLANES) * ceil(HO / (DWA_TY*DWA_RY)) *
//   ceil(WO / (DWA_TX*DWA_RX)),), block (DWA_TX * DWA_TY * DWA_PLANES,), dynamic shared memory
//   (DWA_PLANES * PS + DWA_WSHARED * DWA_PLANES * KH * KW) * 4 bytes (PS: DWA_PS, or its default below).
//   Blocks go through a plane's tiles row by row, then the next planes: the halo rows and columns that
//   neighbouring tiles share were read by blocks that ran just before, and come from L2, not memory.
// Compile-time parameters: the geometry DWA_H, DWA_W, DWA_KH, DWA_KW, DWA_SH, DWA_SW, DWA_PH, DWA_PW,
//   DWA_DH, DWA_DW (a width's parameter defaults to its height twin): one module per geometry, so that
//   every division is by a constant and every loop bound is known.  The tile: DWA_RX, DWA_RY (outputs
//   a thread), DWA_TX, DWA_TY (threads a plane, along the width and the height), DWA_PLANES,
//   DWA_WSHARED.  Its layout in shared memory: DWA_PITCH (floats a tile row), DWA_PS (floats a
//   plane's tile); the host chooses them against bank conflicts (labkit.ops.depthwise_any.Tiling.layout)
//   and the kernel checks them; 0 (the default) packs the tile.

#ifndef DWA_H
#define DWA_H 16
#endif
#ifndef DWA_MULT
#define DWA_MULT 1
#endif
#ifndef DWA_W
#define DWA_W 16
#endif
#ifndef DWA_KH
#define DWA_KH 3
#endif
#ifndef DWA_KW
#define DWA_KW DWA_KH
#endif
#ifndef DWA_SH
#define DWA_SH 1
#endif
#ifndef DWA_SW
#define DWA_SW DWA_SH
#endif
#ifndef DWA_PH
#define DWA_PH 1
#endif
#ifndef DWA_PW
#define DWA_PW DWA_PH
#endif
#ifndef DWA_DH
#define DWA_DH 1
#endif
#ifndef DWA_DW
#define DWA_DW DWA_DH
#endif
#ifndef DWA_RX
#define DWA_RX 4
#endif
#ifndef DWA_RY
#define DWA_RY 4
#endif
#ifndef DWA_TX
#define DWA_TX 4
#endif
#ifndef DWA_TY
#define DWA_TY 4
#endif
#ifndef DWA_PLANES
#define DWA_PLANES 1
#endif
#ifndef DWA_WSHARED
#define DWA_WSHARED 0
#endif
#ifndef DWA_PITCH
#define DWA_PITCH 0
#endif
#ifndef DWA_PS
#define DWA_PS 0
#endif

namespace dwa {
__host__ __device__ constexpr int cdiv(int a, int b) { return (a + b - 1) / b; }

constexpr int H = DWA_H, W = DWA_W, MULT = DWA_MULT;
constexpr int KH = DWA_KH, KW = DWA_KW, SH = DWA_SH, SW = DWA_SW, PH = DWA_PH, PW = DWA_PW, DH = DWA_DH,
              DW = DWA_DW;
constexpr int HO = (H + 2 * PH - DH * (KH - 1) - 1) / SH + 1;
constexpr int WO = (W + 2 * PW - DW * (KW - 1) - 1) / SW + 1;
constexpr int TAPS = KH * KW;
constexpr int RX = DWA_RX, RY = DWA_RY, TX = DWA_TX, TY = DWA_TY, PLANES = DWA_PLANES;
constexpr bool WSHARED = DWA_WSHARED;
constexpr int THREADS = TX * TY * PLANES;
constexpr int TILE_H = TY * RY, TILE_W = TX * RX;  // a block's outputs of each plane
constexpr int TILES_X = cdiv(WO, TILE_W), TILES = cdiv(HO, TILE_H) * TILES_X;
// A thread's input: ROWS_IN rows (its RY windows' rows), SPAN columns of each (its RX windows').
constexpr int ROWS_IN = (RY - 1) * SH + (KH - 1) * DH + 1;
constexpr int SPAN = (RX - 1) * SW + (KW - 1) * DW + 1;
// The threads' segments start RX*SW floats apart: read as float4s where that is a multiple of 4 (so
// every segment starts 16-byte aligned), float2s where it is even, else floats.  A segment is SEG
// floats: SPAN rounded up to whole vectors (the few floats past SPAN are read, never used).
constexpr int VEC = RX * SW % 4 == 0 ? 4 : RX * SW % 2 == 0 ? 2 : 1;
constexpr int SEG = cdiv(SPAN, VEC) * VEC;
// The block's input tile of a plane: IN_ROWS x IN_COLS (the last thread's whole segment included),
// rows PITCH floats apart, planes PS floats apart.
constexpr int IN_ROWS = (TILE_H - 1) * SH + (KH - 1) * DH + 1;
constexpr int IN_COLS = (TX - 1) * RX * SW + SEG;
constexpr int PITCH = DWA_PITCH ? DWA_PITCH : cdiv(IN_COLS, VEC) * VEC;
constexpr int PS = DWA_PS ? DWA_PS : IN_ROWS * PITCH;
// The copy of the input tiles: groups of G threads (a tile row's width rounded up to a power of two, at
// most a warp and at most the block), a row at a time; COPIES loads a thread, BATCH of them in flight;
// its loops unroll unless a thread has many loads (tiny blocks of wide dilated windows).
__host__ __device__ constexpr int group_width() {
  int g = 1;
  while (g < IN_COLS && g < 32) g *= 2;
  return g < THREADS ? g : THREADS;
}
constexpr int G = group_width(), GROUPS = THREADS / G, CHUNKS = cdiv(IN_COLS, G);
constexpr int COPIES = cdiv(PLANES * IN_ROWS, GROUPS) * CHUNKS;
constexpr int BATCH = COPIES < 16 ? COPIES : 16;
constexpr int COPY_UNROLL = COPIES <= 256 ? cdiv(COPIES, BATCH) : 1;
// y's rows as float4s (float2s) where a thread's RX outputs are whole vectors at aligned columns.
constexpr int OUT_VEC = RX % 4 == 0 && WO % 4 == 0 ? 4 : RX % 2 == 0 && WO % 2 == 0 ? 2 : 1;

static_assert(HO >= 1 && WO >= 1, "the padded input must hold one dilated window");
static_assert(RX >= 1 && RY >= 1 && TX >= 1 && TY >= 1 && PLANES >= 1, "tile sizes are at least 1");
static_assert(THREADS <= 1024, "DWA_TX * DWA_TY * DWA_PLANES: at most 1024 threads a block");
static_assert(PITCH >= IN_COLS && PITCH % VEC == 0, "DWA_PITCH: at least the tile's columns, in whole vectors");
static_assert(PS >= IN_ROWS * PITCH && PS % VEC == 0, "DWA_PS: at least a plane's tile, in whole vectors");
static_assert((long long)H * W < 2147483648LL && (long long)HO * WO < 2147483648LL,
              "offsets within a plane are 32-bit");

// Row `row` of the block's stacked input tiles: its plane, and its row in that plane's tile.
__device__ __forceinline__ int plane_of(int row) { return PLANES == 1 ? 0 : row / IN_ROWS; }
__device__ __forceinline__ int row_of(int row) { return PLANES == 1 ? row : row % IN_ROWS; }

// ReLU and ReLU6 as comparisons: NaN is neither below 0 nor above 6, so it goes through as NaN.
__device__ __forceinline__ float activate(float v, int act) {
  if (act == 2) return v < 0.0f ? 0.0f : v;
  if (act == 3) return v < 0.0f ? 0.0f : (v > 6.0f ? 6.0f : v);
  return v;
}

// One segment of a tile row into registers, VEC floats at a time (s is VEC-aligned).
__device__ __forceinline__ void read_segment(const float* s, float (&seg)[SEG]) {
#pragma unroll
  for (int q = 0; q < SEG / VEC; ++q) {
    if constexpr (VEC == 4) {
      const float4 f = reinterpret_cast<const float4*>(s)[q];
      seg[4 * q] = f.x, seg[4 * q + 1] = f.y, seg[4 * q + 2] = f.z, seg[4 * q + 3] = f.w;
    } else if constexpr (VEC == 2) {
      const float2 f = reinterpret_cast<const float2*>(s)[q];
      seg[2 * q] = f.x, seg[2 * q + 1] = f.y;
    } else {
      seg[q] = s[q];
    }
  }
}

// A thread's RX outputs of one row, from column ox of the row yrow: whole vectors where OUT_VEC > 1 and
// y is aligned for them (then ox is a multiple of OUT_VEC, and a vector starting inside the row ends
// inside it), else one float at a time; columns past WO (the last tile's) are not stored.
__device__ __forceinline__ void store_row(float* __restrict__ yrow, const float (&v)[RX], int ox, bool vectors) {
  if constexpr (OUT_VEC == 4) {
    if (vectors) {
#pragma unroll
      for (int q = 0; q < RX / 4; ++q)
        if (ox + 4 * q < WO)
          reinterpret_cast<float4*>(yrow)[q] = make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
      return;
    }
  } else if constexpr (OUT_VEC == 2) {
    if (vectors) {
#pragma unroll
      for (int q = 0; q < RX / 2; ++q)
        if (ox + 2 * q < WO) reinterpret_cast<float2*>(yrow)[q] = make_float2(v[2 * q], v[2 * q + 1]);
      return;
    }
  }
#pragma unroll
  for (int j = 0; j < RX; ++j)
    if (ox + j < WO) yrow[j] = v[j];
}
}  // namespace dwa

extern "C" __global__ void __launch_bounds__(DWA_TX * DWA_TY * DWA_PLANES) depthwise_any(
    const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b, float* __restrict__ y,
    int NC, int C, int has_bias, int act) {
  using namespace dwa;
  extern __shared__ __align__(16) float tile[];  // [PLANES][PS]: a plane's [IN_ROWS][PITCH]; then the weights
  // The block: planes plane0.., the output tile from (oy0, ox0), its input tile from (ih0, iw0).
  const int plane0 = blockIdx.x / TILES * PLANES, at = blockIdx.x % TILES;
  const int oy0 = at / TILES_X * TILE_H, ox0 = at % TILES_X * TILE_W;
  const int ih0 = oy0 * SH - PH, iw0 = ox0 * SW - PW;
  // The thread: plane p of the block, outputs (ty*RY.., tx*RX..) of the tile.
  const int p = threadIdx.x / (TX * TY), ty = threadIdx.x / TX % TY, tx = threadIdx.x % TX;
  const int plane = plane0 + p;
  const int c = (plane < NC ? plane : 0) % C;

  // 0. The weights and bias, asked for before the tile so that their trip to memory overlaps its.
  float k[TAPS];
  if constexpr (WSHARED) {
    for (int i = threadIdx.x; i < PLANES * TAPS; i += THREADS) {
      const int q = plane0 + i / TAPS;
      tile[PLANES * PS + i] = w[(q < NC ? q : 0) % C * TAPS + i % TAPS];
    }
  } else {
#pragma unroll
    for (int i = 0; i < TAPS; ++i) k[i] = w[c * TAPS + i];
  }
  const float bias = has_bias && plane < NC ? b[c] : 0.0f;

  // 1. The input tile, every cell written once: x where it lies in the image, else 0.  The threads
  //    copy in groups of G lanes: group g takes rows g, g + GROUPS, ... of the block's tiles (one plane's
  //    after another's), its lanes neighbouring columns of each (coalesced), so that once the loops
  //    unroll every offset but a thread's first is a constant.  BATCH loads are in flight before a
  //    thread stores any (the stores wait for the loads, the next loads for the stores: a warp issues
  //    in order).
  const int group = threadIdx.x / G, lane = threadIdx.x % G;
  const bool copies = group < GROUPS;  // threads past the last whole group sit the copy out
#pragma unroll(COPY_UNROLL)
  for (int t0 = 0; t0 < COPIES; t0 += BATCH) {
    float v[BATCH];
#pragma unroll
    for (int i = 0; i < BATCH; ++i) {
      const int t = t0 + i, row = group + t / CHUNKS * GROUPS, col = lane + t % CHUNKS * G;
      const int q = plane_of(row), ih = ih0 + row_of(row), iw = iw0 + col;
      const bool inside = copies && t < COPIES && row < PLANES * IN_ROWS && col < IN_COLS && plane0 + q < NC &&
                          (unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W;
      v[i] = inside ? x[(size_t)((plane0 + q) / MULT) * (H * W) + ih * W + iw] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < BATCH; ++i) {
      const int t = t0 + i, row = group + t / CHUNKS * GROUPS, col = lane + t % CHUNKS * G;
      if (copies && t < COPIES && row < PLANES * IN_ROWS && col < IN_COLS)
        tile[plane_of(row) * PS + row_of(row) * PITCH + col] = v[i];
    }
  }
  __syncthreads();

  // 2. RY x RX outputs: input row r of the thread's ROWS_IN feeds output row i through the kernel's
  //    row kh where r = i*SH + kh*DH (known at compile time once the loops unroll; a row no window
  //    uses is never read).
  const float* wk = tile + PLANES * PS + p * TAPS;  // (DWA_WSHARED) this plane's weights
  const float* src = tile + p * PS + ty * RY * SH * PITCH + tx * RX * SW;
  float acc[RY][RX];
#pragma unroll
  for (int i = 0; i < RY; ++i)
#pragma unroll
    for (int j = 0; j < RX; ++j) acc[i][j] = 0.0f;
#pragma unroll
  for (int r = 0; r < ROWS_IN; ++r) {
    float seg[SEG];
    read_segment(src + r * PITCH, seg);
#pragma unroll
    for (int i = 0; i < RY; ++i) {
      const int d = r - i * SH;  // row r's place in output row i's window
      if (d < 0 || d % DH != 0 || d / DH >= KH) continue;
      const int kh = d / DH;
#pragma unroll
      for (int kw = 0; kw < KW; ++kw) {
        const float wv = WSHARED ? wk[kh * KW + kw] : k[kh * KW + kw];
#pragma unroll
        for (int j = 0; j < RX; ++j) acc[i][j] += wv * seg[j * SW + kw * DW];
      }
    }
  }

  // 3. Bias, activation, one store per output (none for planes past NC, rows and columns past the
  //    plane's: the last tiles').
  const int oy = oy0 + ty * RY, ox = ox0 + tx * RX;
  if (plane >= NC || ox >= WO) return;
  float* yp = y + (size_t)plane * (HO * WO) + ox;
  const bool vectors = (reinterpret_cast<size_t>(y) & (4 * OUT_VEC - 1)) == 0;
#pragma unroll
  for (int i = 0; i < RY; ++i) {
    if (oy + i >= HO) break;
    float v[RX];
#pragma unroll
    for (int j = 0; j < RX; ++j) v[j] = activate(acc[i][j] + bias, act);
    store_row(yp + (oy + i) * WO, v, ox, vectors);
  }
}
