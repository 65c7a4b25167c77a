// pool_softmax.cu -- the small layers around the convolutions and matrix multiplies.
//
// Versions:
//   max_pool2d   one thread per output element: the largest of its window (k x k, stride s,
//                no padding; NaN if the window holds one), NCHW in and out
//   softmax_rows one warp per row of an (N, D) matrix: the row's max and sum of exponentials by
//                warp shuffles, then exp(x - max) / sum; numerically safe for any logits, and a
//                NaN in a row makes the whole row NaN (as in PyTorch)
//   global_avg_pool  one warp per (image, channel) plane: its mean, (N, C, H, W) -> (N, C)
//
// Launch (Python: labkit.ops.pool_softmax.max_pool2d, softmax):
//   max_pool2d(x, y, NC, H, W, PH, PW, k, s):  grid (ceil(NC*PH*PW / 256),), block (256,)
//   softmax_rows(x, y, N, D):                 grid (ceil(N / 8),), block (256,) = 8 warps, 8 rows
//   global_avg_pool(x, y, NC, HW):            grid (ceil(NC / 8),), block (256,) = 8 warps, 8 planes

// Version 1: max-pooling, one output per thread.  Consecutive threads take consecutive outputs of
// a row, so their window reads (stride s apart) stay close together in memory.
extern "C" __global__ void max_pool2d(const float* __restrict__ x, float* __restrict__ y, int NC, int H,
                                      int W, int PH, int PW, int k, int s) {
  const long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= (long long)NC * PH * PW) return;
  const int pw = (int)(o % PW);
  const int ph = (int)((o / PW) % PH);
  const long long plane = o / ((long long)PH * PW);
  const float* xp = x + plane * H * W + (long long)(ph * s) * W + pw * s;
  float best = xp[0];
  for (int p = 0; p < k; ++p)
    for (int q = 0; q < k; ++q) {
      const float v = xp[p * W + q];
      // Not fmaxf, which returns the other operand when one is NaN: a NaN in the window must reach
      // the output (as in the reference and PyTorch), not vanish into a plausible number.
      best = (v > best || v != v) ? v : best;
    }
  y[o] = best;
}

// Version 2: softmax over each row, one warp per row.  Each lane takes columns lane, lane + 32, ...;
// a butterfly of __shfl_xor_sync leaves the row's max (then its sum) in every lane, with no shared
// memory and no __syncthreads.  Subtracting the max first keeps exp() from overflowing.
extern "C" __global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int N, int D) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;  // the whole warp leaves together: the shuffles below stay full-warp
  const float* xr = x + (long long)row * D;
  float mx = xr[0];  // any element of the row starts the max (NVRTC has no INFINITY)
  // fmaxf skips a NaN here, which is harmless: the max only keeps exp() in range, and the NaN itself
  // enters the sum below (exp(NaN - mx) is NaN), so every output of its row is NaN.
  for (int c = lane; c < D; c += 32) mx = fmaxf(mx, xr[c]);
  for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  float sum = 0.0f;
  for (int c = lane; c < D; c += 32) sum += expf(xr[c] - mx);
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  for (int c = lane; c < D; c += 32) y[(long long)row * D + c] = expf(xr[c] - mx) / sum;
}

// Version 3: the mean of each plane (a network's head: MobileNetV2's 7x7 planes, ResNet's), one warp
// per plane.  The lanes read neighbouring floats (coalesced), then a butterfly sums the 32 partial
// sums, as in softmax_rows.
extern "C" __global__ void global_avg_pool(const float* __restrict__ x, float* __restrict__ y, int NC, int HW) {
  const int lane = threadIdx.x % 32;
  const long long plane = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (plane >= NC) return;  // the whole warp leaves together
  const float* xp = x + plane * HW;
  float sum = 0.0f;
  for (int i = lane; i < HW; i += 32) sum += xp[i];
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) y[plane] = sum / HW;
}
