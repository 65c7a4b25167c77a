// Exercise (notebook 06): the im2col gather, one thread per element of the column matrix, written by you.
//
// The column matrix of a convolution's input (K x K windows, stride s, zero padding pad):
//   cols (N, C*K*K, Ho*Wo), for image n, row (c*K + p)*K + q and column oh*Wo + ow, holds
//   x[n, c, oh*s - pad + p, ow*s - pad + q], or 0 where that position lies outside the input
//   (the window hangs over the padding: the padding is never stored anywhere).
// Then, for one image, y[n] (M, Ho*Wo) = w (M, C*K*K) @ cols[n]: the convolution is one GEMM.
//
// The arrays, float32, C-contiguous: x (N, C, H, W); cols (N, C*K*K, Ho*Wo).
// The launch (the check makes it): grid (ceil(N*C*K*K*Ho*Wo / 256),), block (256,): thread i of the
// grid writes the i-th element of cols, in memory order.  Consecutive threads then write
// consecutive columns (ow): the writes coalesce.
//
// Your part: from i, the image n, the row's (c, p, q), the column's (oh, ow), the input position
// (ih, iw) it copies; then the copy, or 0 outside the input.  Every element must be written: the
// check fills cols with NaN before the launch.

extern "C" __global__ void im2col_exercise(const float* __restrict__ x, float* __restrict__ cols, int N, int C,
                                           int H, int W, int K, int stride, int pad, int Ho, int Wo) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long per_image = (long long)C * K * K * Ho * Wo;
  if (i >= N * per_image) return;     // past the end of cols: nothing to write
  // BEGIN SOLUTION
  const int n = (int)(i / per_image);
  const long long r = i - n * per_image;
  const int ow = (int)(r % Wo);
  const int oh = (int)((r / Wo) % Ho);
  const int row = (int)(r / ((long long)Ho * Wo));   // (c * K + p) * K + q
  const int q = row % K, p = (row / K) % K, c = row / (K * K);
  const int ih = oh * stride - pad + p, iw = ow * stride - pad + q;
  const bool inside = ih >= 0 && ih < H && iw >= 0 && iw < W;
  cols[i] = inside ? x[(((long long)n * C + c) * H + ih) * W + iw] : 0.0f;
  // END SOLUTION
}
