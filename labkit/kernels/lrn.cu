// lrn.cu -- local response normalization across channels (AlexNet), TensorFlow's semantics:
//
//   y[n, c, h, w] = x[n, c, h, w] / (bias + alpha * sum_{c' = c-r .. c+r, 0 <= c' < C} x[n, c', h, w]^2)^beta
//
// (TensorFlow's alpha multiplies the plain sum; Caffe's is divided by the window size 2r+1.)
//
// lrn_across_channels(x, y, N, C, HW, chunk, bias, alpha, beta), the radius r = LRN_R fixed when the
// module is compiled (labkit.ops.lrn compiles one module per radius): a thread per pixel and chunk of
// `chunk` channels.  It reads its chunk's values, and r more on each side, once each, down the
// channel planes (its warp's neighbours read the neighbouring pixels: every read a contiguous row
// segment), keeps the last 2r+1 of them in registers, and for each channel adds the window's
// squares afresh.  A thread per output instead reads each value 2r+1 times, from different blocks
// (through L2, not L1): at AlexNet's sizes that held it under half of the memory's speed.  A running
// sum that subtracted the square leaving the window would save the adds but keep a NaN (or a large
// value's rounding) in every later channel.  The chunk trades the halo's re-reads (2r per chunk)
// against threads: labkit.ops.lrn takes 4 channels where that leaves enough threads to fill the GPU,
// else 2.
// The grid names the element: blockIdx.z the image, blockIdx.y the chunk, the x dimension the pixel
// (no 64-bit division or remainder decodes a flat index).  beta = 0.75, AlexNet's, takes two
// reciprocal square roots instead of powf: v^-0.75 = rsqrt(v) * rsqrt(sqrt(v)), within a few ulp.
// Launch (Python: labkit.ops.lrn.lrn): grid (ceil(HW / 256), ceil(C / chunk), N), block (256,).

#ifndef LRN_R
#define LRN_R 2
#endif

extern "C" __global__ void lrn_across_channels(const float* __restrict__ x, float* __restrict__ y, int N, int C,
                                               int HW, int chunk, float bias, float alpha, float beta) {
  const int pix = blockIdx.x * blockDim.x + threadIdx.x;
  if (pix >= HW) return;
  const int c0 = blockIdx.y * chunk, c1 = min(C, c0 + chunk);
  const float* xp = x + (size_t)blockIdx.z * C * HW + pix;   // channel 0 of this pixel
  float* yp = y + (size_t)blockIdx.z * C * HW + pix;
  constexpr int WIN = 2 * LRN_R + 1;
  // v[j]: channel c - r + j of this pixel, 0 outside [0, C) (its square adds nothing).
  float v[WIN];
  v[0] = 0.0f;
#pragma unroll
  for (int j = 0; j < WIN - 1; ++j) {
    const int d = c0 - LRN_R + j;
    v[j + 1] = d >= 0 && d < C ? xp[(size_t)d * HW] : 0.0f;
  }
  for (int c = c0; c < c1; ++c) {
#pragma unroll
    for (int j = 0; j < WIN - 1; ++j) v[j] = v[j + 1];
    const int d = c + LRN_R;
    v[WIN - 1] = d < C ? xp[(size_t)d * HW] : 0.0f;
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < WIN; ++j) sum += v[j] * v[j];
    const float base = bias + alpha * sum;
    const float scale = beta == 0.75f ? rsqrtf(base) * rsqrtf(sqrtf(base)) : powf(base, -beta);
    yp[(size_t)c * HW] = v[LRN_R] * scale;
  }
}
