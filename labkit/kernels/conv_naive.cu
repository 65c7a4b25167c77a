// conv_naive.cu -- the first convolution of the series: one thread per output element.
//
// Versions (one idea each; the ladder continues in conv_tiled.cu and conv_constant.cu):
//   conv_naive   one thread computes one output element y[n, m, h, w], reading every input and
//                weight it needs straight from global memory
//
// The layer: valid convolution, stride 1, no padding, then bias and an optional activation.
//   x (N, C, H, W) float32 NCHW,  k (M, C, K, K) float32 MCKK (the filter bank, `w` in Python),
//   b (M,) float32,  y (N, M, Ho, Wo) float32 with Ho = H - K + 1, Wo = W - K + 1
//   y[n, m, h, w] = act(b[m] + sum over c, p, q of x[n, c, h + p, w + q] * k[m, c, p, q])
//   act: 0 none, 1 tanh, 2 ReLU
//
// Mapping (as in the ECE408 project): grid (N, M, H_grid * W_grid), block (TILE_WIDTH, TILE_WIDTH).
// Each block covers one TILE_WIDTH x TILE_WIDTH tile of one output plane (n, m); blockIdx.z
// numbers the tiles of the plane row by row, W_grid = ceil(Wo / TILE_WIDTH) tiles to a row.
// The batch is on x because only x may exceed 65535 blocks (a whole test set in one launch).
//
// Launch (Python): labkit.conv2d(x, w, b, variant="naive"), or by hand
//   mod = labkit.load("conv_naive", defines={"TILE_WIDTH": 16})
//   mod.get_function("conv_naive")(grid, block, (x, w, b, y, numpy.int32(N), numpy.int32(C),
//       numpy.int32(H), numpy.int32(W), numpy.int32(M), numpy.int32(K), numpy.int32(act)))

// A compile-time tile width lets the compiler fold the index arithmetic; labkit.load's
// defines={"TILE_WIDTH": 8} builds another version for a sweep.
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

// Index macros that read like the math (they use the sizes in scope where they are expanded).
#define y4d(n, m, h, w) y[(((n) * M + (m)) * Ho + (h)) * Wo + (w)]
#define x4d(n, c, h, w) x[(((n) * C + (c)) * H + (h)) * W + (w)]
#define k4d(m, c, p, q) k[(((m) * C + (c)) * K + (p)) * K + (q)]

// Version 1: one thread, one output element, global memory only.  Every input element is
// read K*K*M times (once for each output that covers it with its window) and every weight once
// per output position; the caches absorb some of that, the tiled version removes most of it.
extern "C" __global__ void conv_naive(const float* __restrict__ x, const float* __restrict__ k,
                                      const float* __restrict__ b, float* __restrict__ y,
                                      int N, int C, int H, int W, int M, int K, int act) {
  const int Ho = H - K + 1;
  const int Wo = W - K + 1;
  const int W_grid = (Wo + TILE_WIDTH - 1) / TILE_WIDTH;
  const int n = blockIdx.x;
  const int m = blockIdx.y;
  const int h = (blockIdx.z / W_grid) * TILE_WIDTH + threadIdx.y;
  // threadIdx.x is the column, so the 32 threads of a warp read and write consecutive addresses
  // (coalesced) along a row of the plane.
  const int w = (blockIdx.z % W_grid) * TILE_WIDTH + threadIdx.x;
  // Tiles at the right and bottom edges hang over the plane when TILE_WIDTH does not divide it.
  if (n >= N || h >= Ho || w >= Wo) return;

  float acc = b[m];
  for (int c = 0; c < C; ++c)
    for (int p = 0; p < K; ++p)
      for (int q = 0; q < K; ++q)
        acc += x4d(n, c, h + p, w + q) * k4d(m, c, p, q);
  y4d(n, m, h, w) = activate(acc, act);
}
