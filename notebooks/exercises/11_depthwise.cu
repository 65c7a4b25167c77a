// Exercise (notebook 11): the depthwise 3x3 convolution, one output per thread, written by you.
//
// The layer: y[n, c, oh, ow] = act(b[c] + sum over kh, kw of w[c, kh, kw] * x[n, c, oh*S - 1 + kh, ow*S - 1 + kw]),
// zero padding 1 (an input position outside the plane reads as 0), stride S (1 or 2),
// x (N, C, H, W), w (C, 3, 3), b (C,), y (N, C, HO, WO) with HO = (H - 1) / S + 1, WO = (W - 1) / S + 1.
// act: 0 none, 2 ReLU, 3 ReLU6.  NC = N * C planes.
// The launch (the check makes it): grid (ceil(NC * HO * WO / 128),), block (128,): thread o of the
// grid computes the o-th element of y in memory order (so a warp's 32 threads write 32 neighbours).
//
// Your part: from o, the plane (n * C + c), the channel c and the output position (oh, ow); then the
// bias plus the 3x3 sum into acc, skipping the taps that fall in the padding.

__device__ __forceinline__ float activate(float v, int act) {
  if (act == 2) return fmaxf(v, 0.0f);
  if (act == 3) return fminf(fmaxf(v, 0.0f), 6.0f);
  return v;
}

extern "C" __global__ void depthwise_exercise(const float* __restrict__ x, const float* __restrict__ w,
                                              const float* __restrict__ b, float* __restrict__ y,
                                              int NC, int C, int H, int W, int S, int act) {
  const int HO = (H - 1) / S + 1, WO = (W - 1) / S + 1;
  const long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= (long long)NC * HO * WO) return;     // past the end of y: nothing to write
  float acc = 0.0f;
  // BEGIN SOLUTION
  const int ow = (int)(o % WO), oh = (int)((o / WO) % HO);
  const long long plane = o / ((long long)HO * WO);
  const int c = (int)(plane % C);
  acc = b[c];
  for (int kh = 0; kh < 3; ++kh) {
    const int ih = oh * S - 1 + kh;
    if (ih < 0 || ih >= H) continue;            // a row of padding
    for (int kw = 0; kw < 3; ++kw) {
      const int iw = ow * S - 1 + kw;
      if (iw >= 0 && iw < W) acc += w[c * 9 + kh * 3 + kw] * x[(plane * H + ih) * W + iw];
    }
  }
  // END SOLUTION
  y[o] = activate(acc, act);
}
