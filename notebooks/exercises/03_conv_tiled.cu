// Exercise (notebook 03): the tiled convolution's halo load and its barriers, written by you.
//
// The layer and the launch are conv_naive's: grid (N, M, H_grid * W_grid), block (TILE_WIDTH,
// TILE_WIDTH), and now X_TILE * X_TILE floats of dynamic shared memory, X_TILE = TILE_WIDTH + K - 1:
// one input channel's tile, halo included, whose corner is the output tile's corner (h0, w0).
//
// Your part, for each input channel c: the block's threads together copy the X_TILE x X_TILE input
// tile of channel c into `tile` (more elements than threads: each thread copies several; elements
// past the input's edge get 0), and the barriers that make the loop safe: nobody reads the tile
// before all of it is written, and nobody overwrites it with the next channel while others still
// read this one.
#ifndef TILE_WIDTH
#define TILE_WIDTH 16
#endif

#define y4d(n, m, h, w) y[(((n) * M + (m)) * Ho + (h)) * Wo + (w)]
#define x4d(n, c, h, w) x[(((n) * C + (c)) * H + (h)) * W + (w)]
#define k4d(m, c, p, q) k[(((m) * C + (c)) * K + (p)) * K + (q)]
#define tile2d(r, s) tile[(r) * X_TILE + (s)]

__device__ __forceinline__ float activate(float v, int act) {
  if (act == 1) return tanhf(v);
  if (act == 2) return fmaxf(v, 0.0f);
  return v;
}

extern "C" __global__ void conv_tiled_exercise(const float* __restrict__ x, const float* __restrict__ k,
                                               const float* __restrict__ b, float* __restrict__ y,
                                               int N, int C, int H, int W, int M, int K, int act) {
  extern __shared__ float tile[];
  const int Ho = H - K + 1;
  const int Wo = W - K + 1;
  const int X_TILE = TILE_WIDTH + K - 1;
  const int W_grid = (Wo + TILE_WIDTH - 1) / TILE_WIDTH;
  const int n = blockIdx.x;
  const int m = blockIdx.y;
  const int h0 = (blockIdx.z / W_grid) * TILE_WIDTH;
  const int w0 = (blockIdx.z % W_grid) * TILE_WIDTH;
  const int ty = threadIdx.y, tx = threadIdx.x;
  const int h = h0 + ty, w = w0 + tx;
  const bool writes = n < N && h < Ho && w < Wo;   // threads past the edge still help to load

  float acc = writes ? b[m] : 0.0f;
  for (int c = 0; c < C; ++c) {
    // BEGIN SOLUTION
    for (int i = ty * TILE_WIDTH + tx; i < X_TILE * X_TILE; i += TILE_WIDTH * TILE_WIDTH) {
      const int r = i / X_TILE, s = i % X_TILE;
      tile2d(r, s) = (n < N && h0 + r < H && w0 + s < W) ? x4d(n, c, h0 + r, w0 + s) : 0.0f;
    }
    __syncthreads();
    // END SOLUTION
    if (writes)
      for (int p = 0; p < K; ++p)
        for (int q = 0; q < K; ++q)
          acc += tile2d(ty + p, tx + q) * k4d(m, c, p, q);
    // BEGIN SOLUTION
    __syncthreads();
    // END SOLUTION
  }
  if (writes) y4d(n, m, h, w) = activate(acc, act);
}
