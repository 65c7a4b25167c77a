// Exercise (notebook 07): the convolution fused with its bias, tanh and 2x2 max-pool, written by you:
// only the pooled output is written.
//
// The layer: valid convolution, stride 1, bias, tanh, then max-pool 2x2 with stride 2:
//   z[n, m, h, w] = b[m] + sum over c, p, q of x[n, c, h + p, w + q] * k[m, c, p, q]   (never stored)
//   y[n, m, i, j] = tanh(max over dy, dx in {0, 1} of z[n, m, 2i + dy, 2j + dx])
// x (N, C, H, W), k (M, C, K, K), b (M,), y (N, M, PH, PW) with PH = (H - K + 1) / 2 and
// PW = (W - K + 1) / 2: where the convolution's output has an odd number of rows (or columns), its
// last row (or column) belongs to no pooling window and is never computed.
// tanh is monotonic, so the max of the four tanh's is the tanh of the max: one tanh per output.
// The launch (the check makes it): grid (ceil(N * M * PH * PW / 128),), block (128,): thread o of the
// grid computes the o-th element of y in memory order.
//
// Your part: from o, the pooled position (n, m, i, j); the four convolution outputs of its 2x2
// window (each the bias plus C * K * K multiply-adds), the largest of them (all four can be
// negative), and tanhf of it into y.

#define x4d(n, c, h, w) x[(((long long)(n) * C + (c)) * H + (h)) * W + (w)]
#define k4d(m, c, p, q) k[(((m) * C + (c)) * K + (p)) * K + (q)]

extern "C" __global__ void conv_pool_exercise(const float* __restrict__ x, const float* __restrict__ k,
                                              const float* __restrict__ b, float* __restrict__ y,
                                              int N, int C, int H, int W, int M, int K) {
  const int PH = (H - K + 1) / 2;
  const int PW = (W - K + 1) / 2;
  const long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= (long long)N * M * PH * PW) return;    // past the end of y: nothing to write
  // BEGIN SOLUTION
  const int j = (int)(o % PW);
  const int i = (int)((o / PW) % PH);
  const int m = (int)((o / ((long long)PW * PH)) % M);
  const int n = (int)(o / ((long long)PW * PH * M));
  float best = 0.0f;
  for (int d = 0; d < 4; ++d) {                   // the 2x2 window: (dy, dx) = (d / 2, d % 2)
    const int h = 2 * i + d / 2, w = 2 * j + d % 2;
    float acc = b[m];
    for (int c = 0; c < C; ++c)
      for (int p = 0; p < K; ++p)
        for (int q = 0; q < K; ++q)
          acc += x4d(n, c, h + p, w + q) * k4d(m, c, p, q);
    best = d == 0 ? acc : fmaxf(best, acc);
  }
  y[o] = tanhf(best);
  // END SOLUTION
}
