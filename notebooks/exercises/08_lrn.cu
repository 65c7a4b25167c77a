// Exercise (notebook 08): local response normalization across channels (AlexNet), written by you.
//
//   y[n, c, h, w] = x[n, c, h, w] / (bias + alpha * sum over c' = c-r .. c+r, 0 <= c' < C, of x[n, c', h, w]^2)^beta
//
// (TensorFlow's semantics: alpha multiplies the plain sum.)  The window of channels is cut at the
// first and the last channel: near them it holds fewer than 2r+1 values.
//
// The arrays, float32, C-contiguous: x and y (N, C, H, W); HW = H * W, the pixels of a plane.
// The launch (the check makes it): grid (ceil(N*C*HW / 256),), block (256,): thread i of the grid
// computes y's i-th element, in memory order.  Neighbouring threads of a warp hold neighbouring
// pixels of one channel plane, so each of the 2r+1 reads of the window is one contiguous row
// segment across the warp (coalesced).
//
// Your part: from i, the pixel, the channel and the image's channel-0 plane; the sum of squares over
// the window, clipped to [0, C-1]; the output.  (powf(v, -beta) is v^-beta.)

extern "C" __global__ void lrn_exercise(const float* __restrict__ x, float* __restrict__ y, int N, int C, int HW,
                                        int r, float bias, float alpha, float beta) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)N * C * HW) return;     // past the end of y: nothing to write
  // BEGIN SOLUTION
  const int pix = (int)(i % HW);
  const int c = (int)((i / HW) % C);
  const float* plane0 = x + (i / ((long long)C * HW)) * C * HW + pix;  // channel 0 of this pixel
  float sum = 0.0f;
  for (int d = max(c - r, 0); d <= min(c + r, C - 1); ++d) {
    const float v = plane0[(long long)d * HW];
    sum += v * v;
  }
  y[i] = x[i] * powf(bias + alpha * sum, -beta);
  // END SOLUTION
}
