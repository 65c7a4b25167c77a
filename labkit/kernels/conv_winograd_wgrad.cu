// conv_winograd_wgrad.cu -- the weight gradient of a 3x3 convolution (stride 1, zero padding 1) by
// Winograd's F(3x3, 2x2): 16 multiplications per (image tile, input channel, output channel) where
// the direct method takes 36, 2.25x fewer.
//
// The forward pass makes each 2x2 output tile as y = A^T [ (G g G^T) . (B^T d B) ] A (d: the tile's
// 4x4 input patch, g: a 3x3 filter, "." elementwise; see conv_winograd.cu).  Differentiating it:
//   dL/dg = G^T [ (A dy A^T) . (B^T d B) ] G           dy: the tile's 2x2 block of output gradients
// and summed over every tile of every image:
//   dw[m][c] = G^T Mx[m][c] G,   Mx[xi][m][c] = sum over (image, tile) of Y[xi][m][t] * V[xi][c][t]
// with V = B^T d B (the forward's input transform) and Y = A dy A^T (4x4 from 2x2).  Mx is 16 GEMMs,
// M x (tiles) by (tiles) x C, whose inner dimension is the batch's N * ceil(H/2) * ceil(W/2) tiles:
// 200,704 at batch 1,024 on 28x28, against 64 x 64 outputs.  So the tiles are split into slices,
// each block sums one slice's tiles, and a second kernel adds the slices in a fixed order and
// applies G^T . G.  G^T Mx G is linear: it may wait until the slices are added.
//   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], A^T = [1 1 1 0; 0 1 -1 -1],
//   G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1].
// The bias gradient db[m] (the sum of dy) rides along: Y[5] = A dy A^T at (1, 1) is the tile's sum.
//
// winograd_wgrad(x, dy, ws, wsdb, N, slices)   a block owns WW_MB output by WW_CB input channels
//   and one slice of the units (one image's WW_TR rows of tiles each).  Per unit:
//   * the unit's input rows (2 * WW_TR + 2 of each of its channels, zeros outside the plane) and
//     output-gradient rows (2 * WW_TR) travel to shared memory with cp.async (on the CPU executor a
//     copy is a plain load and store);
//   * a thread per (channel, tile) turns its 4x4 input patch into V and its 2x2 gradient block into Y
//     (16 slices, one per transform position xi, channels side by side);
//   * the 16 GEMMs: 16 groups of WW_MG * WW_CG threads, one group per position xi; each thread holds
//     a WW_RM x WW_RC block of Mx[xi] (output by input channels) in registers and per tile loads
//     WW_RM + WW_RC values (runs of 4: 16-byte loads) for WW_RM * WW_RC multiply-adds.
//   The three run as a pipeline, one barrier a unit: while unit k's GEMMs run, unit k + 1 is
//   transformed and unit k + 2's copies are in flight (two stages each of the rows and of V and Y).
//   At the end each thread writes its sums to ws[slice][xi][m][c]; the blocks of the first input
//   channels write the slice's db to wsdb[slice][m].
//   Grid (slices * M / WW_MB * C / WW_CB,), block (WW_THREADS,), dynamic shared memory
//   WW_SHARED_FLOATS * 4 bytes.
// winograd_wgrad_reduce(ws, wsdb, dw, db, slices, wt)   the slices added in order (the same bits on
//   every run: no atomics), G^T Mx G, dw in the (C*9, M) layout (wt = 1) or (M, C, 3, 3); db.
//   Grid (ceil(M * C / 16),), block (256,).
// x (N, C, H, W), dy (N, M, H, W), float32, C-contiguous; ws (slices, 16, M, C), wsdb (slices, M).
// Compile-time parameters: WW_C, WW_M, WW_H, WW_W and the tile (WW_MB, WW_CB, WW_RM, WW_RC, WW_TR).

#ifndef WW_C
#define WW_C 16
#endif
#ifndef WW_M
#define WW_M 16
#endif
#ifndef WW_H
#define WW_H 28
#endif
#ifndef WW_W
#define WW_W 28
#endif
#ifndef WW_MB
#define WW_MB 16
#endif
#ifndef WW_CB
#define WW_CB 16
#endif
#ifndef WW_RM
#define WW_RM 4
#endif
#ifndef WW_RC
#define WW_RC 4
#endif
#ifndef WW_TR
#define WW_TR 1
#endif

static_assert(WW_M % WW_MB == 0 && WW_C % WW_CB == 0 && WW_MB % WW_RM == 0 && WW_CB % WW_RC == 0,
              "WW_MB must divide WW_M, WW_CB WW_C, WW_RM WW_MB and WW_RC WW_CB");

constexpr int WW_TW = (WW_W + 1) / 2, WW_TH = (WW_H + 1) / 2;   // tiles across and down a plane
constexpr int WW_BANDS = (WW_TH + WW_TR - 1) / WW_TR;            // units of an image
constexpr int WW_TK = WW_TR * WW_TW;                             // tiles a unit
constexpr int WW_MG = WW_MB / WW_RM, WW_CG = WW_CB / WW_RC;
constexpr int WW_G = WW_MG * WW_CG;                              // threads per transform position
constexpr int WW_THREADS = 16 * WW_G;
static_assert(WW_THREADS <= 1024, "WW_THREADS: at most 1024 (fewer channels a block or more a thread)");
static_assert(WW_THREADS % WW_MB == 0, "a thread's output channel in the Y transform stays the same: "
              "WW_MB must divide WW_THREADS");
constexpr int WW_MBLOCKS = WW_M / WW_MB, WW_CBLOCKS = WW_C / WW_CB;
// Staged planes: input rows 2 * r0 - 1 .. 2 * (r0 + WW_TR), columns -1 .. 2 * WW_TW; output-gradient
// rows 2 * r0 .. 2 * (r0 + WW_TR) - 1, columns 0 .. 2 * WW_TW - 1.  Odd plane pitches: the transform's
// threads take neighbouring channels, whose reads then fall in different banks.
constexpr int WW_XROWS = 2 * WW_TR + 2, WW_XCOLS = 2 * WW_TW + 2, WW_XPLANE = (WW_XROWS * WW_XCOLS) | 1;
constexpr int WW_DROWS = 2 * WW_TR, WW_DCOLS = 2 * WW_TW, WW_DPLANE = (WW_DROWS * WW_DCOLS) | 1;
// A position's slice of V ([tile][channel]) and of Y: where a quarter-warp reads two positions
// (groups of fewer than 8 threads), 4 more than a multiple of 32 floats, so that they fall in
// different banks; else a multiple of 4 (16-byte loads).
__host__ __device__ constexpr int ww_up4(int n) { return (n + 3) / 4 * 4; }
__host__ __device__ constexpr int ww_pitch(int n) { return WW_G >= 8 ? ww_up4(n) : n + (36 - n % 32) % 32; }
constexpr int WW_VS = ww_pitch(WW_TK * WW_CB), WW_YS = ww_pitch(WW_TK * WW_MB);
// Shared memory: two stages of staged rows (input rows, then gradient rows), two of V and Y.
constexpr int WW_STAGE = ww_up4(WW_CB * WW_XPLANE) + ww_up4(WW_MB * WW_DPLANE);
constexpr int WW_VY = 16 * (WW_VS + WW_YS);
constexpr int WW_SHARED_FLOATS = 2 * WW_STAGE + 2 * WW_VY;
constexpr bool WW_VEC_M = WW_RM % 4 == 0, WW_VEC_C = WW_RC % 4 == 0;   // 16-byte register loads
#ifndef WW_MINB
#define WW_MINB (WW_THREADS >= 512 ? 1 : 512 / WW_THREADS)
#endif

// Global-to-shared copies of 4 bytes that complete in the background (cp.async, sm_80 and later); a
// copy whose `read` is false writes a zero.  ww_copies_wait: every copy this thread issued has landed.
#if defined(LABKIT_CUDA_ARCH)
__device__ __forceinline__ void ww_copy4(float* dst, const float* src, bool read) { *dst = read ? *src : 0.0f; }
__device__ __forceinline__ void ww_copies_wait() {}
#else
__device__ __forceinline__ void ww_copy4(float* dst, const float* src, bool read) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(read ? 4 : 0));
}
__device__ __forceinline__ void ww_copies_wait() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
#endif

// Stage unit (n, rows of tiles from r0) into `st`: its input rows, zeros outside the plane (the
// convolution's padding), and its gradient rows, zeros past an odd H or W (tiles that reach past the
// plane have no outputs there: they add nothing).  32 threads a row, a copy each per column; the
// column loops have a fixed count (one pass for rows of up to 32), so they unroll without a test.
constexpr int WW_XPASSES = (WW_XCOLS + 31) / 32, WW_DPASSES = (WW_DCOLS + 31) / 32;
__device__ __forceinline__ void ww_stage(const float* __restrict__ x, const float* __restrict__ dy, float* st,
                                         int n, int r0, int c0, int m0, int tid) {
#pragma unroll 1
  for (int i = tid; i < WW_CB * WW_XROWS * 32; i += WW_THREADS) {
    const int row = i / 32, lane = i % 32, c = row / WW_XROWS, r = row % WW_XROWS, gy = 2 * r0 - 1 + r;
    const bool inside = gy >= 0 && gy < WW_H;
    const float* src = x + (((long long)n * WW_C + c0 + c) * WW_H + (inside ? gy : 0)) * WW_W;
    float* dst = st + c * WW_XPLANE + r * WW_XCOLS;
#pragma unroll
    for (int k = 0; k < WW_XPASSES; ++k) {
      const int col = lane + 32 * k;
      const bool read = inside && col >= 1 && col <= WW_W;
      if (col < WW_XCOLS) ww_copy4(dst + col, read ? src + (col - 1) : x, read);
    }
  }
  float* ds = st + ww_up4(WW_CB * WW_XPLANE);
#pragma unroll 1
  for (int i = tid; i < WW_MB * WW_DROWS * 32; i += WW_THREADS) {
    const int row = i / 32, lane = i % 32, m = row / WW_DROWS, r = row % WW_DROWS, gy = 2 * r0 + r;
    const bool inside = gy < WW_H;
    const float* src = dy + (((long long)n * WW_M + m0 + m) * WW_H + (inside ? gy : 0)) * WW_W;
    float* dst = ds + m * WW_DPLANE + r * WW_DCOLS;
#pragma unroll
    for (int k = 0; k < WW_DPASSES; ++k) {
      const int col = lane + 32 * k;
      const bool read = inside && col < WW_W;
      if (col < WW_DCOLS) ww_copy4(dst + col, read ? src + col : dy, read);
    }
  }
}

// n values from p[0 ..) into r: 16-byte loads where VEC (p 16-byte aligned).
template <int n, bool VEC>
__device__ __forceinline__ void ww_load(float (&r)[n], const float* p) {
  if (VEC) {
#pragma unroll
    for (int i = 0; i < n; i += 4) {
      const float4 q = *reinterpret_cast<const float4*>(p + i);
      r[i] = q.x; r[i + 1] = q.y; r[i + 2] = q.z; r[i + 3] = q.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < n; ++i) r[i] = p[i];
  }
}

// V = B^T d B of the staged input rows `st` and Y = A dy A^T of its gradient rows into `vy`.
__device__ __forceinline__ void ww_transform(const float* st, float* vy, int tid, float& dbsum) {
  const float* xs = st;
  const float* ds = st + ww_up4(WW_CB * WW_XPLANE);
  float* vs = vy;
  float* ys = vy + 16 * WW_VS;
  // V = B^T d B, a thread per (input channel, tile), channels fastest.
#pragma unroll 1
  for (int i = tid; i < WW_CB * WW_TK; i += WW_THREADS) {
    const int c = i % WW_CB, t = i / WW_CB;
    const float* p = xs + c * WW_XPLANE + 2 * (t / WW_TW) * WW_XCOLS + 2 * (t % WW_TW);
    float d[4][4], e[4][4];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int s = 0; s < 4; ++s) d[r][s] = p[r * WW_XCOLS + s];
#pragma unroll
    for (int s = 0; s < 4; ++s) {     // B^T d: rows
      e[0][s] = d[0][s] - d[2][s];
      e[1][s] = d[1][s] + d[2][s];
      e[2][s] = d[2][s] - d[1][s];
      e[3][s] = d[1][s] - d[3][s];
    }
    float* v = vs + t * WW_CB + c;
#pragma unroll
    for (int r = 0; r < 4; ++r) {     // (B^T d) B: columns
      v[(r * 4 + 0) * WW_VS] = e[r][0] - e[r][2];
      v[(r * 4 + 1) * WW_VS] = e[r][1] + e[r][2];
      v[(r * 4 + 2) * WW_VS] = e[r][2] - e[r][1];
      v[(r * 4 + 3) * WW_VS] = e[r][1] - e[r][3];
    }
  }
  // Y = A dy A^T, a thread per (output channel, tile); the thread's channel is the same at every
  // step (WW_MB divides WW_THREADS), so it adds up that channel's db as it goes.
#pragma unroll 1
  for (int i = tid; i < WW_MB * WW_TK; i += WW_THREADS) {
    const int m = i % WW_MB, t = i / WW_MB;
    const float* p = ds + m * WW_DPLANE + 2 * (t / WW_TW) * WW_DCOLS + 2 * (t % WW_TW);
    const float a = p[0], b = p[1], c = p[WW_DCOLS], d = p[WW_DCOLS + 1];
    const float rows[4][2] = {{a, b}, {a + c, b + d}, {a - c, b - d}, {-c, -d}};   // A dy
    float* y = ys + t * WW_MB + m;
#pragma unroll
    for (int r = 0; r < 4; ++r) {     // (A dy) A^T
      y[(r * 4 + 0) * WW_YS] = rows[r][0];
      y[(r * 4 + 1) * WW_YS] = rows[r][0] + rows[r][1];
      y[(r * 4 + 2) * WW_YS] = rows[r][0] - rows[r][1];
      y[(r * 4 + 3) * WW_YS] = -rows[r][1];
    }
    dbsum += rows[1][0] + rows[1][1];
  }
}

// The 16 GEMMs over a unit's tiles: this thread's WW_RM x WW_RC block of position xi's sums.
__device__ __forceinline__ void ww_gemm(const float* vy, int xi, int gm, int gc, float (&acc)[WW_RM][WW_RC]) {
  const float* vs = vy;
  const float* ys = vy + 16 * WW_VS;
  const float* yp = ys + xi * WW_YS + gm * WW_RM;
  const float* vp = vs + xi * WW_VS + gc * WW_RC;
#pragma unroll 2
  for (int t = 0; t < WW_TK; ++t) {
    float ym[WW_RM], vc[WW_RC];
    ww_load<WW_RM, WW_VEC_M>(ym, yp + t * WW_MB);
    ww_load<WW_RC, WW_VEC_C>(vc, vp + t * WW_CB);
#pragma unroll
    for (int i = 0; i < WW_RM; ++i)
#pragma unroll
      for (int j = 0; j < WW_RC; ++j) acc[i][j] = fmaf(ym[i], vc[j], acc[i][j]);
  }
}

extern "C" __global__ void __launch_bounds__(WW_THREADS, WW_MINB)
winograd_wgrad(const float* __restrict__ x, const float* __restrict__ dy, float* __restrict__ ws,
               float* __restrict__ wsdb, int N, int slices) {
  extern __shared__ __align__(16) float smem[];
  const int tid = threadIdx.x;
  const int cb = blockIdx.x % WW_CBLOCKS, mb = (blockIdx.x / WW_CBLOCKS) % WW_MBLOCKS;
  const int slice = blockIdx.x / (WW_CBLOCKS * WW_MBLOCKS);
  const int c0 = cb * WW_CB, m0 = mb * WW_MB;
  const long long units = (long long)N * WW_BANDS;
  const long long u_begin = units * slice / slices, u_end = units * (slice + 1) / slices;

  const int xi = tid / WW_G, g = tid % WW_G, gm = g / WW_CG, gc = g % WW_CG;
  float acc[WW_RM][WW_RC];
#pragma unroll
  for (int i = 0; i < WW_RM; ++i)
#pragma unroll
    for (int j = 0; j < WW_RC; ++j) acc[i][j] = 0.0f;
  float dbsum = 0.0f;   // the bias gradient of output channel m0 + tid % WW_MB

  // Three units in flight between the same two barriers: unit k's GEMMs, unit k + 1's transforms,
  // unit k + 2's copies (two stages of staged rows, two of V and Y).  A warp done with its share of
  // the transforms goes on to its GEMMs; the copies land while both run.
  const long long count = u_end - u_begin;
  if (count > 0) ww_stage(x, dy, smem, (int)(u_begin / WW_BANDS), (int)(u_begin % WW_BANDS) * WW_TR, c0, m0, tid);
  ww_copies_wait();
  __syncthreads();
  for (long long k = -1; k < count; ++k) {
    if (k + 2 < count) {
      const long long unit = u_begin + k + 2;
      ww_stage(x, dy, smem + ((k + 2) & 1) * WW_STAGE, (int)(unit / WW_BANDS), (int)(unit % WW_BANDS) * WW_TR,
               c0, m0, tid);
    }
    if (k + 1 < count)
      ww_transform(smem + ((k + 1) & 1) * WW_STAGE, smem + 2 * WW_STAGE + ((k + 1) & 1) * WW_VY, tid, dbsum);
    if (k >= 0) ww_gemm(smem + 2 * WW_STAGE + (k & 1) * WW_VY, xi, gm, gc, acc);
    ww_copies_wait();
    __syncthreads();
  }

  float* out = ws + ((long long)slice * 16 + xi) * WW_M * WW_C;
#pragma unroll
  for (int i = 0; i < WW_RM; ++i)
#pragma unroll
    for (int j = 0; j < WW_RC; ++j) out[(m0 + gm * WW_RM + i) * WW_C + c0 + gc * WW_RC + j] = acc[i][j];
  // db of the slice: the threads of one output channel add their sums (in a fixed order).
  __syncthreads();
  smem[tid] = dbsum;
  __syncthreads();
  if (cb == 0 && tid < WW_MB) {
    float s = 0.0f;
    for (int k = tid; k < WW_THREADS; k += WW_MB) s += smem[k];
    wsdb[(long long)slice * WW_M + m0 + tid] = s;
  }
}

// The slices added in a fixed order and the output transform G^T Mx G: a block takes 16 (m, c) pairs,
// a thread per (position, pair) adds the slices, and 144 threads then make the 16 pairs' 9 taps.
extern "C" __global__ void __launch_bounds__(256) winograd_wgrad_reduce(const float* __restrict__ ws,
                                                                        const float* __restrict__ wsdb,
                                                                        float* __restrict__ dw,
                                                                        float* __restrict__ db, int slices, int wt) {
  constexpr int MC = WW_M * WW_C;
  __shared__ float mx[16][17];
  const int xi = threadIdx.x / 16, j = threadIdx.x % 16;
  const int mc = blockIdx.x * 16 + j;
  float s = 0.0f;
  if (mc < MC)
    for (int k = 0; k < slices; ++k) s += ws[((long long)k * 16 + xi) * MC + mc];
  mx[xi][j] = s;
  __syncthreads();
  const float G[4][3] = {{1.0f, 0.0f, 0.0f}, {0.5f, 0.5f, 0.5f}, {0.5f, -0.5f, 0.5f}, {0.0f, 0.0f, 1.0f}};
  if (threadIdx.x < 144) {
    const int pair = threadIdx.x / 9, tap = threadIdx.x % 9, kh = tap / 3, kw = tap % 3;
    const int at = blockIdx.x * 16 + pair;
    if (at < MC) {
      float v = 0.0f;
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) v += G[a][kh] * G[b][kw] * mx[a * 4 + b][pair];
      const int m = at / WW_C, c = at % WW_C;
      dw[wt ? (c * 9 + tap) * WW_M + m : at * 9 + tap] = v;
    }
  }
  if (blockIdx.x == 0)
    for (int m = threadIdx.x; m < WW_M; m += blockDim.x) {
      float t = 0.0f;
      for (int k = 0; k < slices; ++k) t += wsdb[(long long)k * WW_M + m];
      db[m] = t;
    }
}
