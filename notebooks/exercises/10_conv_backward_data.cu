// Exercise (notebook 10): the backward data of a 3x3 convolution (stride 1, zero padding 1) as a
// gather, one thread per element of dx, written by you.
//
// The forward layer: y[n, m, h, v] = b[m] + sum over c, kh, kw of w[m, c, kh, kw] * x[n, c, h - 1 + kh, v - 1 + kw]
// (an input position outside the plane reads as 0), x (N, C, H, W), y (N, M, H, W).
// Its backward data: dx[n, c, h, v] = sum of dy[n, m, oh, ow] * w[m, c, kh, kw] over every
// (m, kh, kw) and output position (oh, ow) whose window puts tap (kh, kw) on pixel (h, v):
// oh - 1 + kh = h and ow - 1 + kw = v, with (oh, ow) inside the plane (0 <= oh < H, 0 <= ow < W).
// dx is read from dy's side: each element has exactly one writer, so no atomics are needed.
//
// The arrays, float32, C-contiguous: dy (N, M, H, W) = dL/dy; wt the forward layer's weights in
// the (C*9, M) layout the training loop keeps (row (c, kh, kw) = c * 9 + kh * 3 + kw, column m:
// w[m, c, kh, kw] = wt[(c * 9 + kh * 3 + kw) * M + m]); gate (N, C, H, W), the forward's ReLU output
// at this layer's input; dx (N, C, H, W).
// The launch (the check makes it): grid (ceil(N * C * H * W / 128),), block (128,): thread i of the
// grid computes the i-th element of dx in memory order.  The ReLU's backward rides in the store:
// dx = 0 where gate <= 0 (that line is written for you).
//
// Your part: from i, the position (n, c, h, v) of the element; then the sum into acc, skipping the
// output positions that fall outside the plane.

extern "C" __global__ void conv3x3_bwd_data_exercise(const float* __restrict__ dy, const float* __restrict__ wt,
                                                     const float* __restrict__ gate, float* __restrict__ dx,
                                                     int N, int C, int H, int W, int M) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)N * C * H * W) return;     // past the end of dx: nothing to write
  float acc = 0.0f;
  // BEGIN SOLUTION
  const int v = (int)(i % W), h = (int)((i / W) % H);
  const int c = (int)((i / ((long long)H * W)) % C);
  const long long n = i / ((long long)C * H * W);
  for (int kh = 0; kh < 3; ++kh) {
    const int oh = h + 1 - kh;                   // the output row whose window puts tap kh on row h
    if (oh < 0 || oh >= H) continue;
    for (int kw = 0; kw < 3; ++kw) {
      const int ow = v + 1 - kw;
      if (ow < 0 || ow >= W) continue;
      const float* d = dy + (n * M * H + oh) * W + ow;          // dy[n, 0, oh, ow]
      const float* f = wt + (c * 9 + kh * 3 + kw) * M;          // w[0, c, kh, kw]: M weights side by side
      for (int m = 0; m < M; ++m) acc += d[(long long)m * H * W] * f[m];
    }
  }
  // END SOLUTION
  dx[i] = gate[i] > 0.0f ? acc : 0.0f;
}
