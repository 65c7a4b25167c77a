// lrn.cu -- local response normalization across channels (AlexNet), TensorFlow's semantics:
//
//   y[n, c, h, w] = x[n, c, h, w] / (bias + alpha * sum_{c' = c-r .. c+r, 0 <= c' < C} x[n, c', h, w]^2)^beta
//
// (TensorFlow's alpha multiplies the plain sum; Caffe's is divided by the window size 2r+1.)
//
// lrn_across_channels(x, y, N, C, HW, r, bias, alpha, beta): one thread per output element.  Its
// 2r+1 reads are the same pixel in neighbouring channel planes; the neighbouring threads of its
// warp read the neighbouring pixels, so every read is a contiguous row segment (coalesced), and a
// value read by the 2r+1 threads that need it comes from the L1/L2 caches after the first.  One
// thread per pixel walking down the channels with a running sum reads less, but leaves a batch
// of one image with a few thousand threads for the whole GPU, and a running sum that subtracts the
// square leaving the window would keep a NaN (or a large value's rounding) in every later channel.
//
// The grid names the element: blockIdx.z the image, blockIdx.y the channel, the x dimension the
// pixel.  No 64-bit division or remainder decodes a flat index (each costs dozens of instructions
// on a GPU: with three of them per output, the decoding outweighed the memory traffic).
// beta = 0.75, AlexNet's, takes two reciprocal square roots instead of powf: v^-0.75 =
// rsqrt(v) * rsqrt(sqrt(v)), within a few ulp.
// Launch (Python: labkit.ops.lrn.lrn): grid (ceil(HW / 256), C, N), block (256,).

extern "C" __global__ void lrn_across_channels(const float* __restrict__ x, float* __restrict__ y, int N, int C,
                                               int HW, int r, float bias, float alpha, float beta) {
  const int pix = blockIdx.x * blockDim.x + threadIdx.x;
  if (pix >= HW) return;
  const int c = blockIdx.y;
  const float* plane0 = x + (size_t)blockIdx.z * C * HW + pix;  // channel 0 of this pixel
  float sum = 0.0f;
  for (int d = max(c - r, 0); d <= min(c + r, C - 1); ++d) {
    const float v = plane0[(size_t)d * HW];
    sum += v * v;
  }
  const float base = bias + alpha * sum;
  const float scale = beta == 0.75f ? rsqrtf(base) * rsqrtf(sqrtf(base)) : powf(base, -beta);
  const size_t i = ((size_t)blockIdx.z * C + c) * HW + pix;
  y[i] = x[i] * scale;
}
