// Exercise (notebook 12): the transposed convolution as a gather, one thread per output, written by you.
//
// The layer (PyTorch's conv_transpose2d, one group): every input pixel scatters its window,
//   y[n, m, ih*SH - PH + kh*DH, iw*SW - PW + kw*DW] += x[n, c, ih, iw] * w[c, m, kh, kw]
// over every input channel c, input pixel (ih, iw) and tap (kh, kw); then y = b[m] + that sum.
// x (N, C, H, W), w (C, M, KH, KW) (ConvTranspose2d's layout: input channel first), b (M,),
// y (N, M, HO, WO) with HO = (H - 1)*SH - 2*PH + DH*(KH - 1) + OPH + 1 (WO likewise): the check
// passes HO and WO, output padding included.  Every stride, padding and dilation is per axis.
//
// Seen from output row oh, tap kh arrives from input row ih where ih*SH - PH + kh*DH = oh, that is
//   ih = (oh + PH - kh*DH) / SH, and only when SH divides oh + PH - kh*DH exactly
// and the row it names lies in the input (0 <= ih < H); columns alike.  Every other tap misses
// this output: the scatter's zeros, never multiplied.  Careful: in C, / and % round towards zero,
// so (-1) % 2 is -1 and (-2) / 2 is -1: decide what a negative oh + PH - kh*DH means before dividing.
// A tap no input reaches leaves the output at the bias alone.
//
// The launch (the check makes it): grid (ceil(N * M * HO * WO / 128),), block (128,): thread o of the
// grid computes the o-th element of y in memory order.  Each output has exactly one writer: no atomics.
//
// Your part: from o, the output's (n, m, oh, ow); then the bias plus the sum into acc, over the taps
// that reach (oh, ow) and every input channel.

extern "C" __global__ void conv_transpose_exercise(const float* __restrict__ x, const float* __restrict__ w,
                                                   const float* __restrict__ b, float* __restrict__ y,
                                                   int N, int C, int H, int W, int M, int KH, int KW,
                                                   int SH, int SW, int PH, int PW, int DH, int DW, int HO, int WO) {
  const long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= (long long)N * M * HO * WO) return;     // past the end of y: nothing to write
  float acc = 0.0f;
  // BEGIN SOLUTION
  const int ow = (int)(o % WO), oh = (int)((o / WO) % HO);
  const int m = (int)((o / ((long long)HO * WO)) % M);
  const long long n = o / ((long long)M * HO * WO);
  acc = b[m];
  for (int kh = 0; kh < KH; ++kh) {
    const int th = oh + PH - kh * DH;              // = ih * SH for the input row that reaches oh
    if (th < 0 || th % SH != 0) continue;          // before the first row, or between two rows
    const int ih = th / SH;
    if (ih >= H) continue;                         // past the last row
    for (int kw = 0; kw < KW; ++kw) {
      const int tw = ow + PW - kw * DW;
      if (tw < 0 || tw % SW != 0) continue;
      const int iw = tw / SW;
      if (iw >= W) continue;
      for (int c = 0; c < C; ++c)
        acc += x[((n * C + c) * H + ih) * W + iw] * w[((c * M + m) * KH + kh) * KW + kw];
    }
  }
  // END SOLUTION
  y[o] = acc;
}
