// conv_backward.cu -- the backward pass of a convolution, y = conv2d(x, w, b) (stride S, zero
// padding P, square K x K kernels, groups 1), given dy = dL/dy:
//
//   dx[n, c, h, v]      = sum over m, kh, kw with h = oh*S - P + kh, v = ow*S - P + kw of
//                         dy[n, m, oh, ow] * w[m, c, kh, kw]                    (backward data)
//   dw[m, c, kh, kw]    = sum over n, oh, ow of dy[n, m, oh, ow] * x[n, c, oh*S - P + kh, ow*S - P + kw]
//                                                                                (backward weight)
//   db[m]               = sum over n, oh, ow of dy[n, m, oh, ow]                 (backward bias)
//
// Backward data is a convolution of dy with the filters flipped and transposed (M <-> C); backward
// weight is a correlation of x with dy, reduced over the batch and the output plane.  Both are
// GEMMs in disguise, as the forward pass is (notebook 06): backward data is W^T (C K K x M) times the
// column matrix of dy, scattered back by col2im; backward weight is dY (M x N HO WO) times the
// column matrix of x transposed.
//
// Rung 1, direct (this file): each output element of the backward pass is one thread's sum, or one
// block's.  No atomics, no workspace: the reference the faster rungs are checked and timed against.
//   conv_bwd_data_direct    one thread per dx element ("gather"): it visits the (m, kh, kw) whose
//                           window covers its pixel, about M*K*K/S^2 of them.  Writing dx from the
//                           inputs' side needs no atomics: each dx element has exactly one writer.
//   conv_bwd_weight_direct  one block per dw element: its threads stride over the N*HO*WO products
//                           and a shared-memory tree adds their partial sums.
//   conv_bwd_bias           one block per output channel, the same reduction over dy's plane.
//
// conv_bwd_data_direct(dy, w, dx, N, C, H, W, M, K, S, P, HO, WO, wt)   grid (ceil(N*C*H*W / 256),), block (256,)
// conv_bwd_weight_direct(x, dy, dw, N, C, H, W, M, K, S, P, HO, WO, wt) grid (M*C*K*K,), block (CB_THREADS,)
// conv_bwd_bias(dy, db, N, M, HOWO)                                     grid (M,), block (CB_THREADS,)
//   x, dx (N, C, H, W); dy (N, M, HO, WO); db (M,); w, dw (M, C, K, K), or with wt = 1 (C*K*K, M):
//   the transposed layout the implicit GEMM's forward kernel reads, in which a training loop keeps
//   its weights (the forward, the gradient and SGD's update then need no transpose).  Float32,
//   C-contiguous.

#ifndef CB_THREADS
#define CB_THREADS 256
#endif

// The sum of every thread's `v` in a block of CB_THREADS (a power of two), returned to thread 0.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float part[CB_THREADS];
  part[threadIdx.x] = v;
  __syncthreads();
  for (int half = CB_THREADS / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  return part[0];
}

extern "C" __global__ void conv_bwd_data_direct(const float* __restrict__ dy, const float* __restrict__ w,
                                                float* __restrict__ dx, int N, int C, int H, int W, int M, int K,
                                                int S, int P, int HO, int WO, int wt) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)N * C * H * W) return;
  const int v = (int)(i % W), h = (int)((i / W) % H), c = (int)((i / ((long long)W * H)) % C);
  const int n = (int)(i / ((long long)W * H * C));
  float acc = 0.0f;
  for (int kh = 0; kh < K; ++kh) {
    const int th = h + P - kh;          // = oh * S when output row oh's window puts tap kh on row h
    if (th < 0 || th % S) continue;
    const int oh = th / S;
    if (oh >= HO) continue;
    for (int kw = 0; kw < K; ++kw) {
      const int tw = v + P - kw;
      if (tw < 0 || tw % S) continue;
      const int ow = tw / S;
      if (ow >= WO) continue;
      const float* d = dy + ((long long)n * M * HO + oh) * WO + ow;     // dy[n, 0, oh, ow]
      const long long tap = ((long long)c * K + kh) * K + kw;            // (c, kh, kw) flattened
      const float* f = wt ? w + tap * M : w + tap;                       // w[0, c, kh, kw]
      const long long m_step = wt ? 1 : (long long)C * K * K;
      for (int m = 0; m < M; ++m) acc += d[(long long)m * HO * WO] * f[m * m_step];
    }
  }
  dx[i] = acc;
}

extern "C" __global__ void __launch_bounds__(CB_THREADS) conv_bwd_weight_direct(const float* __restrict__ x,
    const float* __restrict__ dy, float* __restrict__ dw, int N, int C, int H, int W, int M, int K, int S, int P,
    int HO, int WO, int wt) {
  const int e = blockIdx.x;             // the dw element: (m, c, kh, kw)
  const int kw = e % K, kh = (e / K) % K, c = (e / (K * K)) % C, m = e / (K * K * C);
  float acc = 0.0f;
  const long long count = (long long)N * HO * WO;
  for (long long j = threadIdx.x; j < count; j += CB_THREADS) {
    const int ow = (int)(j % WO), oh = (int)((j / WO) % HO), n = (int)(j / ((long long)WO * HO));
    const int ih = oh * S - P + kh, iw = ow * S - P + kw;
    if (ih >= 0 && ih < H && iw >= 0 && iw < W)
      acc += dy[(((long long)n * M + m) * HO + oh) * WO + ow] * x[(((long long)n * C + c) * H + ih) * W + iw];
  }
  const float total = block_sum(acc);
  if (threadIdx.x == 0) dw[wt ? (long long)(e % (C * K * K)) * M + m : e] = total;
}

extern "C" __global__ void __launch_bounds__(CB_THREADS) conv_bwd_bias(const float* __restrict__ dy,
                                                                        float* __restrict__ db, int N, int M,
                                                                        int HOWO) {
  const int m = blockIdx.x;
  float acc = 0.0f;
  for (long long j = threadIdx.x; j < (long long)N * HOWO; j += CB_THREADS) {
    const int n = (int)(j / HOWO), q = (int)(j % HOWO);
    acc += dy[((long long)n * M + m) * HOWO + q];
  }
  const float total = block_sum(acc);
  if (threadIdx.x == 0) db[m] = total;
}
