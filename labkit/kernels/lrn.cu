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
// of one image with a few thousand threads for the whole GPU: this version has C times more.
// Launch (Python: labkit.ops.lrn.lrn): grid (ceil(N*C*HW / 256),), block (256,).

extern "C" __global__ void lrn_across_channels(const float* __restrict__ x, float* __restrict__ y, int N, int C,
                                               int HW, int r, float bias, float alpha, float beta) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)N * C * HW) return;
  const int pix = (int)(i % HW);
  const int c = (int)((i / HW) % C);
  const float* plane0 = x + (i / ((long long)C * HW)) * C * HW + pix;  // channel 0 of this pixel
  float sum = 0.0f;
  for (int d = max(c - r, 0); d <= min(c + r, C - 1); ++d) {
    const float v = plane0[(long long)d * HW];
    sum += v * v;
  }
  y[i] = x[i] * powf(bias + alpha * sum, -beta);
}
