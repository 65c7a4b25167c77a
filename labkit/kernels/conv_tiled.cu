// conv_tiled.cu -- the convolution with its input tile staged in shared memory.
//
// Versions (the ladder: conv_naive.cu, this file, conv_constant.cu):
//   conv_tiled   conv_naive's mapping, but the block first copies the input tile it needs, halo
//                included, into shared memory, one input channel at a time, and computes from there
//
// The layer, sizes and mapping are conv_naive.cu's: valid convolution, stride 1, no padding,
// x (N, C, H, W), k (M, C, K, K), b (M,), y (N, M, Ho, Wo); grid (N, M, H_grid * W_grid),
// block (TILE_WIDTH, TILE_WIDTH); act 0 none, 1 tanh, 2 ReLU.
//
// Launch (Python): labkit.conv2d(x, w, b, variant="tiled"), or by hand with dynamic shared
// memory for one channel's input tile:
//   X_TILE = TILE_WIDTH + K - 1
//   mod.get_function("conv_tiled")(grid, block, (x, w, b, y, N, C, H, W, M, K, act),  # numpy.int32s
//                                  shared_mem=X_TILE * X_TILE * 4)
//
// Why it helps: over the whole layer each input element is used K*K*M times (by the K*K outputs
// whose windows cover it, in each of the M output channels).  conv_naive fetches it from global
// memory (at best from L1/L2) for every one of those uses.  Here a block fetches it once and its
// threads read it K*K times from shared memory, so global traffic drops from K*K*M to about M
// loads per element (one per output-channel block), times the halo overhead
// (X_TILE / TILE_WIDTH)^2: 1.56 for a 16-wide tile and K = 5.
//
// Why it can hurt: the halo is a large share of a small tile, the two barriers per channel stall
// the block, and the tile grid is only as good as its fit to the plane.  Layer 2 of the seed network
// (6 -> 16 channels, 22x22 input, 18x18 output) needs 2x2 tiles of 16x16 = 1024 threads for 324
// outputs: 68% of the threads only help to load, then wait at the barriers.  On planes that small
// L1 already catches most of conv_naive's reuse, so staging saves little; TILE_WIDTH 8 (3x3 tiles,
// 576 threads) fits better.

#ifndef TILE_WIDTH
#define TILE_WIDTH 16
#endif

#define ACT_NONE 0
#define ACT_TANH 1
#define ACT_RELU 2

// `act` is the same for every thread of a launch, so this branch never diverges within a warp.
// ReLU as a compare and select, not fmaxf: fmaxf(NaN, 0) is 0, and a NaN must reach the output (as
// in PyTorch's relu), not vanish into a plausible number.
__device__ __forceinline__ float activate(float v, int act) {
  if (act == ACT_TANH) return tanhf(v);
  if (act == ACT_RELU) return v < 0.0f ? 0.0f : v;
  return v;
}

#define y4d(n, m, h, w) y[(((n) * M + (m)) * Ho + (h)) * Wo + (w)]
#define x4d(n, c, h, w) x[(((n) * C + (c)) * H + (h)) * W + (w)]
#define k4d(m, c, p, q) k[(((m) * C + (c)) * K + (p)) * K + (q)]
// One channel's input tile in shared memory: X_TILE x X_TILE, row-major.
#define tile2d(i, j) tile[(i) * X_TILE + (j)]

// Version 2: stage the input tile (TILE_WIDTH + K - 1 square, halo included) in shared memory.
// One channel at a time rather than all C at once: the buffer then stays X_TILE^2 floats whatever C
// is (1.6 KB for TILE_WIDTH 16 and K 5; all 16 channels of a deeper layer would take 25.6 KB and
// limit how many blocks fit on an SM), and each step reads as the math does: load channel c,
// accumulate its K x K window, move on.
extern "C" __global__ void conv_tiled(const float* __restrict__ x, const float* __restrict__ k,
                                      const float* __restrict__ b, float* __restrict__ y,
                                      int N, int C, int H, int W, int M, int K, int act) {
  extern __shared__ float tile[];  // X_TILE * X_TILE floats, sized by the launch (shared_mem)
  const int Ho = H - K + 1;
  const int Wo = W - K + 1;
  const int X_TILE = TILE_WIDTH + K - 1;
  const int W_grid = (Wo + TILE_WIDTH - 1) / TILE_WIDTH;
  const int n = blockIdx.x;
  const int m = blockIdx.y;
  const int h0 = (blockIdx.z / W_grid) * TILE_WIDTH;  // the tile's first output row and column,
  const int w0 = (blockIdx.z % W_grid) * TILE_WIDTH;  // which is also its input tile's corner
  const int ty = threadIdx.y, tx = threadIdx.x;
  const int h = h0 + ty, w = w0 + tx;
  // Threads past the edge of the plane must not return early: they load their share of the tile
  // and every thread of the block has to reach each __syncthreads().
  const bool writes = n < N && h < Ho && w < Wo;

  float acc = writes ? b[m] : 0.0f;
  for (int c = 0; c < C; ++c) {
    // The tile has more elements than the block has threads (X_TILE^2 > TILE_WIDTH^2 for K > 1):
    // a block-stride loop over it.  Consecutive threads take consecutive columns of a row, so the
    // global reads coalesce.  Elements past the input's edge are set to 0: only outputs that are
    // themselves past the edge would read them, and it keeps every load in bounds.
    for (int i = ty * TILE_WIDTH + tx; i < X_TILE * X_TILE; i += TILE_WIDTH * TILE_WIDTH) {
      const int r = i / X_TILE, s = i % X_TILE;
      tile2d(r, s) = (n < N && h0 + r < H && w0 + s < W) ? x4d(n, c, h0 + r, w0 + s) : 0.0f;
    }
    __syncthreads();  // the whole tile is written before anyone reads a neighbour's element
    if (writes)
      for (int p = 0; p < K; ++p)
        for (int q = 0; q < K; ++q)
          acc += tile2d(ty + p, tx + q) * k4d(m, c, p, q);
    __syncthreads();  // everyone is done with channel c before the next load overwrites the tile
  }
  if (writes) y4d(n, m, h, w) = activate(acc, act);
}
