// pool_softmax.cu -- the small layers around the convolutions and matrix multiplies.
//
// Versions:
//   max_pool2d   one thread per output element: the largest of its window (k x k, stride s,
//                no padding; NaN if the window holds one), NCHW in and out
//   softmax_rows one warp per row of an (N, D) matrix: the row's max and sum of exponentials by
//                warp shuffles, then exp(x - max) / sum; numerically safe for any logits, and a
//                NaN in a row makes the whole row NaN (as in PyTorch)
//   softmax_rows_held  the same, a group of SM_G lanes per row, the row held in registers: read
//                once, one exponential per element (rows of at most 32 * SM_G values)
//   global_avg_pool  a group of AVG_G lanes per (image, channel) plane: its mean, (N, C, H, W) -> (N, C)
//
// Launch (Python: labkit.ops.pool_softmax.max_pool2d, softmax, global_avg_pool):
//   max_pool2d(x, y, NC, H, W, PH, PW, k, s):  grid (ceil(NC*PH*PW / 256),), block (256,)
//   softmax_rows(x, y, N, D):                 grid (ceil(N / 8),), block (256,) = 8 warps, 8 rows
//   softmax_rows_held(x, y, N, D):            grid (ceil(N / (256 / SM_G)),), block (256,)
//   global_avg_pool(x, y, NC, HW):            grid (ceil(NC / (256 / AVG_G)),), block (256,)

// Version 1: max-pooling, one output per thread.  Consecutive threads take consecutive outputs of
// a row, so their window reads (stride s apart) stay close together in memory.  The flat index is
// decoded in 32 bits wherever the output has fewer than 2^32 elements: a 64-bit division is a
// subroutine of some 70 instructions, and three of them per output were most of what this kernel
// issued (AlexNet's pool5 at 54% of its memory floor on an H200).  POOL_INDEX32_BELOW (2^32) is
// where the 64-bit decode takes over; a test sets it to 0 to check that path on small tensors.
#ifndef POOL_INDEX32_BELOW
#define POOL_INDEX32_BELOW 0x100000000LL
#endif

// The larger of a and b, NaN if either is.  Not fmaxf, which returns the other operand when one is
// NaN: a NaN in the window must reach the output (as in the reference and PyTorch), not vanish into a
// plausible number.  One max.NaN instruction on sm_80 and later (the comparison and select take
// three); the executor takes the comparison.
__device__ __forceinline__ float max_nan(float a, float b) {
#if defined(LABKIT_CUDA_ARCH)
  return (b > a || b != b) ? b : a;
#elif __CUDA_ARCH__ >= 800
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return (b > a || b != b) ? b : a;
#endif
}
//
// MP_H, MP_W, MP_K, MP_S (all four, or none): the layer's plane, window and stride fixed when the
// module is compiled (labkit.ops.pool_softmax compiles one module per pooling geometry).  Then the
// decode's divisions are by constants (a multiply and a shift each) and the window's loops unroll into
// k*k loads with immediate offsets, all in flight at once: with run-time sizes the SMs spent most of
// their issue slots on index arithmetic while the memory sat at half its rate (ncu, H200, pool5).
// The arguments H .. s are then not read.
#if defined(MP_H) && defined(MP_W) && defined(MP_K) && defined(MP_S)
#define MP_FIXED 1
#else
#define MP_FIXED 0
#endif
extern "C" __global__ void max_pool2d(const float* __restrict__ x, float* __restrict__ y, int NC, int H_arg,
                                      int W_arg, int PH_arg, int PW_arg, int k_arg, int s_arg) {
#if MP_FIXED
  constexpr int H = MP_H, W = MP_W, k = MP_K, s = MP_S, PH = (MP_H - MP_K) / MP_S + 1,
                PW = (MP_W - MP_K) / MP_S + 1;
#else
  const int H = H_arg, W = W_arg, k = k_arg, s = s_arg, PH = PH_arg, PW = PW_arg;
#endif
  const long long total = (long long)NC * PH * PW;
  const long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= total) return;
  int pw, ph;
  long long plane;
  if (total < POOL_INDEX32_BELOW) {   // the same for every thread: no divergence
    const unsigned u = (unsigned)o, row = u / (unsigned)PW;
    pw = (int)(u - row * (unsigned)PW);
    ph = (int)(row % (unsigned)PH);
    plane = row / (unsigned)PH;
  } else {
    pw = (int)(o % PW);
    ph = (int)((o / PW) % PH);
    plane = o / ((long long)PH * PW);
  }
  const float* xp = x + plane * H * W + (long long)(ph * s) * W + pw * s;
  float best = xp[0];
#pragma unroll
  for (int p = 0; p < k; ++p)
#pragma unroll
    for (int q = 0; q < k; ++q) best = max_nan(best, xp[p * W + q]);
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

// Version 2b: softmax with the row held in registers.  A group of SM_G lanes (a power of two, at
// most 32) takes a row, each lane SM_VPL of its values (columns g, g + SM_G, ...), all loaded at once:
// the row is read from memory once and each exponential computed once, where softmax_rows reads it
// three times and exponentiates twice, each pass a loop whose loads wait for the one before.  Short
// rows (FashionNet's 10 classes) take a group of a few lanes, so a warp holds several rows.  With
// SM_G = 32 a lane's sums add the same terms in the same order as softmax_rows: the same results,
// bit for bit.  Lanes past the row (or past the last row) take -infinity, which the max ignores and
// whose exponential adds 0.
#ifndef SM_G
#define SM_G 32
#endif
#ifndef SM_VPL
#define SM_VPL 32
#endif
extern "C" __global__ void softmax_rows_held(const float* __restrict__ x, float* __restrict__ y, int N, int D) {
  const int g = threadIdx.x % SM_G;
  const long long row = (long long)blockIdx.x * (blockDim.x / SM_G) + threadIdx.x / SM_G;
  const bool live = row < N;          // every lane stays for the shuffles below
  const float* xr = x + row * D;
  const float minus_inf = __uint_as_float(0xff800000u);
  float v[SM_VPL];
#pragma unroll
  for (int j = 0; j < SM_VPL; ++j) {
    const int c = g + j * SM_G;
    v[j] = live && c < D ? xr[c] : minus_inf;
  }
  float mx = v[0];
#pragma unroll
  for (int j = 1; j < SM_VPL; ++j) mx = fmaxf(mx, v[j]);   // a NaN skipped here still reaches the sum
#pragma unroll
  for (int off = SM_G / 2; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off, SM_G));
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < SM_VPL; ++j) {
    v[j] = expf(v[j] - mx);
    if (g + j * SM_G < D) sum += v[j];
  }
#pragma unroll
  for (int off = SM_G / 2; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off, SM_G);
  if (!live) return;
#pragma unroll
  for (int j = 0; j < SM_VPL; ++j) {
    const int c = g + j * SM_G;
    if (c < D) y[row * D + c] = v[j] / sum;
  }
}

// Version 3: the mean of each plane (a network's head: MobileNetV2's 7x7 planes, ResNet's), a group
// of AVG_G lanes per plane (a power of two, at most 32: labkit.ops.pool_softmax.lane_group picks about
// a quarter of the plane, so a 7x7 plane takes 16 lanes, 4 values each, and a warp two planes; a warp
// per 49-value plane had left 15 of its lanes idle in the second of two rounds).  The lanes of a
// group read neighbouring floats (coalesced), then a butterfly within the group sums their partial
// sums, as in softmax_rows.  AVG_G is fixed when the module is compiled: a loop of constant stride
// unrolls, with several loads in flight (a stride known only at run time had cost ResNet's 28x28
// planes 11%).  AVG_HW (optional; labkit.ops.pool_softmax compiles one module per plane size) fixes
// the plane's size too: the loop unrolls completely and a lane issues all of its loads before the
// first add.  On an H200 (ncu) the kernel had waited on memory at a third of its rate; with the size
// fixed, 1,024 x 256 planes of 14 x 14 went from 68% to 97% of the copy rate, and 1,024 x 512 of 7 x 7
// from 42% to 73%.
#ifndef AVG_G
#define AVG_G 32
#endif
extern "C" __global__ void global_avg_pool(const float* __restrict__ x, float* __restrict__ y, int NC, int HW) {
  const int g = threadIdx.x % AVG_G;
  const long long plane = (long long)blockIdx.x * (blockDim.x / AVG_G) + threadIdx.x / AVG_G;
  const bool live = plane < NC;       // every lane stays for the shuffles below
  const float* xp = x + plane * HW;
#ifdef AVG_HW
  constexpr int n = AVG_HW;   // the plane's size fixed at compile time: the loop unrolls, a lane's loads all in flight
#else
  const int n = HW;
#endif
  float sum = 0.0f;
  if (live)
#pragma unroll
    for (int i = g; i < n; i += AVG_G) sum += xp[i];
#pragma unroll
  for (int off = AVG_G / 2; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off, AVG_G);
  if (live && g == 0) y[plane] = sum / n;
}
