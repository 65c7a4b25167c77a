// Exercise (notebook 05): register blocking, written by you: each thread computes OUT_W neighbouring
// outputs of one row, and every input it loads feeds all of them that need it.
//
// The layer: y[n, m, h, w] = act(b[m] + sum over c, p, q of x[n, c, h + p, w + q] * k[m, c, p, q]),
// x (N, C, H, W), k (M, C, K, K), b (M,), y (N, M, Ho, Wo) with Ho = H - K + 1, Wo = W - K + 1.
// A work unit is OUT_W neighbouring outputs of one row: y[n, m, h, w0 .. w0 + OUT_W - 1] with w0 a
// multiple of OUT_W.  A row holds WG = ceil(Wo / OUT_W) units; where OUT_W does not divide Wo, the
// last unit of a row holds fewer outputs: R = min(OUT_W, Wo - w0).
// The launch (the check makes it): grid (ceil(N * M * Ho * WG / 128),), block (128,): thread u of the
// grid computes the u-th unit in memory order (n, m, h, unit of the row); the unit's (n, m, h, w0) is
// decoded for you.  OUT_W is a compile-time constant (the check compiles with OUT_W 4), so acc[OUT_W]
// lives in registers wherever its index is a constant: loops over r unrolled, as below.
//
// Your part: R, then for each input row (c, p) of the unit's window, load each of its R + K - 1
// inputs x[n, c, h + p, w0 + j] once and add it, times the weight of tap q = j - r, into every
// output r of the unit whose window holds it (0 <= j - r < K); then store the R outputs.  One input
// load then feeds up to min(R, K) multiply-adds (the naive kernel: one).  Read nothing past the row's
// R + K - 1 inputs (on the last row of the last plane that would be past the end of x) and write
// nothing past the row's end.

#ifndef OUT_W
#define OUT_W 4
#endif

#define y4d(n, m, h, w) y[(((long long)(n) * M + (m)) * Ho + (h)) * Wo + (w)]
#define x4d(n, c, h, w) x[(((long long)(n) * C + (c)) * H + (h)) * W + (w)]
#define k4d(m, c, p, q) k[(((m) * C + (c)) * K + (p)) * K + (q)]

__device__ __forceinline__ float activate(float v, int act) {
  if (act == 1) return tanhf(v);
  if (act == 2) return fmaxf(v, 0.0f);
  return v;
}

extern "C" __global__ void conv_rows_exercise(const float* __restrict__ x, const float* __restrict__ k,
                                              const float* __restrict__ b, float* __restrict__ y,
                                              int N, int C, int H, int W, int M, int K, int act) {
  const int Ho = H - K + 1;
  const int Wo = W - K + 1;
  const int WG = (Wo + OUT_W - 1) / OUT_W;        // units per row
  const long long u = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (u >= (long long)N * M * Ho * WG) return;    // past the last unit: nothing to compute
  const int w0 = (int)(u % WG) * OUT_W;
  const int h = (int)((u / WG) % Ho);
  const int m = (int)((u / ((long long)WG * Ho)) % M);
  const int n = (int)(u / ((long long)WG * Ho * M));

  float acc[OUT_W];
#pragma unroll
  for (int r = 0; r < OUT_W; ++r) acc[r] = b[m];
  // BEGIN SOLUTION
  const int R = min(OUT_W, Wo - w0);              // outputs of this unit inside the row
  for (int c = 0; c < C; ++c)
    for (int p = 0; p < K; ++p) {
      const float* row = &x4d(n, c, h + p, w0);   // the unit's input row segment: R + K - 1 floats
      for (int j = 0; j < R + K - 1; ++j) {
        const float v = row[j];                   // loaded once ...
#pragma unroll
        for (int r = 0; r < OUT_W; ++r)           // ... used by every output whose window holds it
          if (j - r >= 0 && j - r < K) acc[r] += v * k4d(m, c, p, j - r);
      }
    }
#pragma unroll
  for (int r = 0; r < OUT_W; ++r)
    if (r < R) y4d(n, m, h, w0 + r) = activate(acc[r], act);
  // END SOLUTION
}
