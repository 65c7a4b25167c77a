// lrn.cu -- local response normalization across channels (AlexNet), TensorFlow's semantics:
//
//   y[n, c, h, w] = x[n, c, h, w] / (bias + alpha * sum_{c' = c-r .. c+r, 0 <= c' < C} x[n, c', h, w]^2)^beta
//
// (TensorFlow's alpha multiplies the plain sum; Caffe's is divided by the window size 2r+1.)
//
// lrn_across_channels(x, y, N, C, HW, r, bias, alpha, beta): one thread per pixel (n, h, w) walks
// down the channels with a running window sum: each input is read once to enter the window and
// once to leave it, instead of 2r+1 times.  Neighbouring threads take neighbouring pixels of one
// channel plane, so every read and write of a warp is one contiguous row segment (coalesced).
// The window sum is kept in float: it adds at most 2r+1 squares, each non-negative.
// Launch (Python: labkit.layers.lrn): grid (ceil(N*HW / 256),), block (256,).

extern "C" __global__ void lrn_across_channels(const float* __restrict__ x, float* __restrict__ y, int N, int C,
                                               int HW, int r, float bias, float alpha, float beta) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)N * HW) return;
  const long long n = i / HW, pix = i % HW;
  const float* xp = x + n * C * HW + pix;  // channel c of this pixel: xp[c * HW]
  float* yp = y + n * C * HW + pix;
  float sum = 0.0f;
  for (int c = 0; c < r && c < C; ++c) sum += xp[(long long)c * HW] * xp[(long long)c * HW];
  for (int c = 0; c < C; ++c) {
    if (c + r < C) {  // channel c+r enters the window
      const float v = xp[(long long)(c + r) * HW];
      sum += v * v;
    }
    if (c - r - 1 >= 0) {  // channel c-r-1 leaves it
      const float v = xp[(long long)(c - r - 1) * HW];
      sum -= v * v;
    }
    const float v = xp[(long long)c * HW];
    yp[(long long)c * HW] = v * powf(bias + alpha * fmaxf(sum, 0.0f), -beta);
  }
}
