// conv_constant.cu -- the tiled convolution with its weights and bias in constant memory.
//
// Versions (the ladder: conv_naive.cu, conv_tiled.cu, this file):
//   conv_constant   conv_tiled, but the filter bank and the bias are read from __constant__ memory,
//                   copied there from the host before the launch
//
// The layer, sizes and mapping are conv_tiled.cu's: valid convolution, stride 1, no padding,
// x (N, C, H, W), y (N, M, Ho, Wo); grid (N, M, H_grid * W_grid), block (TILE_WIDTH, TILE_WIDTH),
// shared_mem = (TILE_WIDTH + K - 1)^2 * 4 bytes; act 0 none, 1 tanh, 2 ReLU.  The weights
// (M, C, K, K) MCKK and bias (M,) are not arguments: they live in c_weights and c_bias.
//
// Launch (Python): labkit.conv2d(x, w, b, variant="constant"), or by hand
//   mod = labkit.load("conv_constant", defines={"TILE_WIDTH": 16})
//   labkit.set_constant(mod, "c_weights", w.ravel()); labkit.set_constant(mod, "c_bias", b)
//   mod.get_function("conv_constant")(grid, block, (x, y, N, C, H, W, M, K, act),  # numpy.int32s
//                                     shared_mem=(16 + K - 1) ** 2 * 4)
//
// Why constant memory suits the weights: all the threads of a block work on the same output
// channel m and walk c, p, q in step, so at each step every thread of a warp reads the same weight.
// The constant cache serves such a broadcast read with one access for the whole warp, and it is a
// cache of its own, so the weight reads do not compete with the input loads.  (Threads of one warp
// reading different constant addresses would be served one address at a time: constant memory is
// for uniform reads.)
// The price: 64 KiB of constant memory in all, so only layers whose M*C*K*K weights fit can use it.

#ifndef TILE_WIDTH
#define TILE_WIDTH 16
#endif

// 15872 weights + 256 biases = 16128 floats = 64,512 bytes: just under the 64 KiB (65,536 bytes)
// of constant memory.  Larger layers need variant "tiled", which reads weights from global memory.
#ifndef CONST_WEIGHT_FLOATS
#define CONST_WEIGHT_FLOATS 15872
#endif
#ifndef CONST_BIAS_FLOATS
#define CONST_BIAS_FLOATS 256
#endif

__constant__ float c_weights[CONST_WEIGHT_FLOATS];  // (M, C, K, K) MCKK, the first M*C*K*K floats
__constant__ float c_bias[CONST_BIAS_FLOATS];       // (M,), the first M floats

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
#define k4d(m, c, p, q) c_weights[(((m) * C + (c)) * K + (p)) * K + (q)]
#define tile2d(i, j) tile[(i) * X_TILE + (j)]

// Version 3: conv_tiled with k4d and the bias read from constant memory (broadcast reads).
extern "C" __global__ void conv_constant(const float* __restrict__ x, float* __restrict__ y,
                                         int N, int C, int H, int W, int M, int K, int act) {
  extern __shared__ float tile[];  // X_TILE * X_TILE floats, sized by the launch (shared_mem)
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
  // No early return: every thread loads its share of the tile and reaches each barrier.
  const bool writes = n < N && h < Ho && w < Wo;

  float acc = writes ? c_bias[m] : 0.0f;
  for (int c = 0; c < C; ++c) {
    // Block-stride loop: the tile (halo included) has more elements than the block has threads.
    for (int i = ty * TILE_WIDTH + tx; i < X_TILE * X_TILE; i += TILE_WIDTH * TILE_WIDTH) {
      const int r = i / X_TILE, s = i % X_TILE;
      tile2d(r, s) = (n < N && h0 + r < H && w0 + s < W) ? x4d(n, c, h0 + r, w0 + s) : 0.0f;
    }
    __syncthreads();  // the whole tile is written before anyone reads a neighbour's element
    if (writes)
      for (int p = 0; p < K; ++p)
        for (int q = 0; q < K; ++q)
          acc += tile2d(ty + p, tx + q) * k4d(m, c, p, q);  // one weight for the whole warp
    __syncthreads();  // everyone is done with channel c before the next load overwrites the tile
  }
  if (writes) y4d(n, m, h, w) = activate(acc, act);
}
