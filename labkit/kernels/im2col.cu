// im2col.cu -- unrolling a convolution's input windows into the columns of a matrix, and back.
//
// Versions:
//   im2col   one thread per element of the column matrix: it copies the input element its window
//            position meets, or 0 where the window hangs over the padding (the padding is never
//            materialised: no padded copy of the input)
//   col2im   the adjoint: every element of a column matrix is added back onto the input position
//            it came from, with atomicAdd, since up to K*K column elements share one input element
//            (the backward pass of a convolution needs it: notebook 10)
//
// Layouts: x (N, C, H, W) NCHW; cols (N, C*K*K, Ho*Wo): for image n, row (c*K + p)*K + q and
// column oh*Wo + ow hold x[n, c, oh*s - pad + p, ow*s - pad + q] (0 outside the input), with
// Ho = (H + 2 pad - K) / s + 1 and Wo likewise.  For one image the convolution is then the product
//   y[n] (M, Ho*Wo) = w (M, C*K*K) @ cols[n] (C*K*K, Ho*Wo)
// which is exactly y[n] in NCHW.  With G groups, group g's rows of cols are the contiguous block
// g*(C/G)*K*K .. (g+1)*(C/G)*K*K, and its product is w[g] @ that block.
//
// Launch (Python: labkit.ops.unroll.im2col / col2im): grid (ceil(N*C*K*K*Ho*Wo / 256),), block (256,);
//   im2col(x, cols, N, C, H, W, K, stride, pad, Ho, Wo)
//   col2im(cols, dx, N, C, H, W, K, stride, pad, Ho, Wo)     dx zeroed first: it accumulates

// Where element i of the column matrix comes from: its image n, channel c, and input row and column
// (ih, iw), which lie outside the input where the window hangs over the padding.
struct ColSource {
  int n, c, ih, iw;
};

__device__ __forceinline__ ColSource col_source(long long i, long long per_image, int K, int stride,
                                                int pad, int Ho, int Wo) {
  const int n = (int)(i / per_image);
  const long long r = i - n * per_image;
  const int ow = (int)(r % Wo);
  const int oh = (int)((r / Wo) % Ho);
  const int row = (int)(r / ((long long)Ho * Wo));   // (c * K + p) * K + q
  const int q = row % K, p = (row / K) % K, c = row / (K * K);
  return ColSource{n, c, oh * stride - pad + p, ow * stride - pad + q};
}

// Version 1: im2col.  Consecutive threads write consecutive columns (ow), so the writes coalesce;
// their reads are `stride` floats apart along a row of x.
extern "C" __global__ void im2col(const float* __restrict__ x, float* __restrict__ cols, int N, int C,
                                  int H, int W, int K, int stride, int pad, int Ho, int Wo) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long per_image = (long long)C * K * K * Ho * Wo;
  if (i >= N * per_image) return;
  const ColSource s = col_source(i, per_image, K, stride, pad, Ho, Wo);
  const bool inside = s.ih >= 0 && s.ih < H && s.iw >= 0 && s.iw < W;
  cols[i] = inside ? x[(((long long)s.n * C + s.c) * H + s.ih) * W + s.iw] : 0.0f;
}

// Version 2: col2im.  The same element-to-input map, with the copy reversed into an atomic sum.
extern "C" __global__ void col2im(const float* __restrict__ cols, float* __restrict__ dx, int N, int C,
                                  int H, int W, int K, int stride, int pad, int Ho, int Wo) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long per_image = (long long)C * K * K * Ho * Wo;
  if (i >= N * per_image) return;
  const ColSource s = col_source(i, per_image, K, stride, pad, Ho, Wo);
  if (s.ih >= 0 && s.ih < H && s.iw >= 0 && s.iw < W)
    atomicAdd(&dx[(((long long)s.n * C + s.c) * H + s.ih) * W + s.iw], cols[i]);
}
