// Exercise (notebook 02): the naive convolution's index math, written by you.
//
// The layer: y[n, m, h, w] = act(b[m] + sum over c, p, q of x[n, c, h + p, w + q] * k[m, c, p, q]),
// x (N, C, H, W), k (M, C, K, K), b (M,), y (N, M, Ho, Wo) with Ho = H - K + 1, Wo = W - K + 1.
// The launch (the check makes it): grid (N, M, H_grid * W_grid), block (TILE_WIDTH, TILE_WIDTH),
// blockIdx.z numbering the TILE_WIDTH x TILE_WIDTH tiles of an output plane row by row.
//
// Your part: from blockIdx and threadIdx, the output element (n, m, h, w) this thread computes, with
// threadIdx.x the column (so that a warp's 32 threads touch consecutive addresses); the threads of
// the tiles that hang over the plane's right and bottom edges must write nothing.
#ifndef TILE_WIDTH
#define TILE_WIDTH 16
#endif

#define y4d(n, m, h, w) y[(((n) * M + (m)) * Ho + (h)) * Wo + (w)]
#define x4d(n, c, h, w) x[(((n) * C + (c)) * H + (h)) * W + (w)]
#define k4d(m, c, p, q) k[(((m) * C + (c)) * K + (p)) * K + (q)]

__device__ __forceinline__ float activate(float v, int act) {
  if (act == 1) return tanhf(v);
  if (act == 2) return fmaxf(v, 0.0f);
  return v;
}

extern "C" __global__ void conv_naive_exercise(const float* __restrict__ x, const float* __restrict__ k,
                                               const float* __restrict__ b, float* __restrict__ y,
                                               int N, int C, int H, int W, int M, int K, int act) {
  const int Ho = H - K + 1;
  const int Wo = W - K + 1;
  int n = 0, m = 0, h = 0, w = 0;
  // BEGIN SOLUTION
  const int W_grid = (Wo + TILE_WIDTH - 1) / TILE_WIDTH;   // tiles in a row of the output plane
  n = blockIdx.x;
  m = blockIdx.y;
  h = (blockIdx.z / W_grid) * TILE_WIDTH + threadIdx.y;
  w = (blockIdx.z % W_grid) * TILE_WIDTH + threadIdx.x;
  if (n >= N || h >= Ho || w >= Wo) return;                // a thread of an overhanging tile
  // END SOLUTION

  float acc = b[m];
  for (int c = 0; c < C; ++c)
    for (int p = 0; p < K; ++p)
      for (int q = 0; q < K; ++q)
        acc += x4d(n, c, h + p, w + q) * k4d(m, c, p, q);
  y4d(n, m, h, w) = activate(acc, act);
}
