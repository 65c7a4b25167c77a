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
// Rung 2, backward weight as a tiled GEMM (conv_bwd_weight_tiled): dW (C*K*K x M) = col(x) . dY^T,
// the sum running over the R = N*HO*WO output pixels.  A block owns a tile of CB_J rows (c, kh, kw)
// by CB_M columns (m) of dW and a slice of R; it stages CB_R pixels at a time, dY's CB_M x CB_R and
// the gathered x's CB_J x CB_R, in shared memory, and each thread accumulates its CB_J*CB_M/THREADS
// outputs from there: every x and dy value loaded once per tile instead of once per output.  R is
// long (200,704 pixels at batch 256 on 28x28) and dW small (144 x 16), so R is split over the grid's
// z (split-K): slice s writes its partial sums to ws[s], and conv_bwd_weight_reduce adds the slices
// in a fixed order (the same bits on every run, where atomics would not be).
//
// Rung 2, backward data at stride 1 as the forward convolution it is: dx = conv(dy, w') with w' the
// filters turned 180 degrees and C and M swapped, padding K - 1 - P; labkit.ops.conv_backward runs it on
// the implicit GEMM's forward kernel (tuned, fused), after flip_weights lays w' out from w each step:
//   flip_weights(wt, wf, C, M, K)   wf[(m, K-1-kh, K-1-kw), c] = wt[(c, kh, kw), m]; grid (ceil(C*K*K*M / 256),)
//
// conv_bwd_data_direct(dy, w, dx, N, C, H, W, M, K, S, P, HO, WO, wt)   grid (ceil(N*C*H*W / 256),), block (256,)
// conv_bwd_weight_direct(x, dy, dw, N, C, H, W, M, K, S, P, HO, WO, wt) grid (M*C*K*K,), block (CB_THREADS,)
// conv_bwd_bias(dy, db, N, M, HOWO)                                     grid (M,), block (CB_THREADS,)
// conv_bwd_weight_tiled(x, dy, ws, N, C, H, W, M, K, S, P, HO, WO, per_slice)
//     grid (ceil(C*K*K / CB_J), ceil(M / CB_M), slices), block (CB_THREADS,); ws (slices, C*K*K, M)
// conv_bwd_weight_reduce(ws, dw, slices, count, M, wt)   grid (ceil(count / 256),), block (256,):
//     dw = the sum of the slices, count = C*K*K*M, in the (C*K*K, M) layout or (wt = 0) (M, C, K, K)
//   x, dx (N, C, H, W); dy (N, M, HO, WO); db (M,); w, dw (M, C, K, K), or with wt = 1 (C*K*K, M):
//   the transposed layout the implicit GEMM's forward kernel reads, in which a training loop keeps
//   its weights (the forward, the gradient and SGD's update then need no transpose).  Float32,
//   C-contiguous.

#ifndef CB_THREADS
#define CB_THREADS 256
#endif
#ifndef CB_J
#define CB_J 64    // rows (c, kh, kw) of dW a block owns
#endif
#ifndef CB_M
#define CB_M 16    // columns (m) of dW a block owns
#endif
#ifndef CB_R
#define CB_R 32    // output pixels staged at a time
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

extern "C" __global__ void __launch_bounds__(CB_THREADS) conv_bwd_weight_tiled(const float* __restrict__ x,
    const float* __restrict__ dy, float* __restrict__ ws, int N, int C, int H, int W, int M, int K, int S, int P,
    int HO, int WO, int per_slice) {
  constexpr int PER = CB_J * CB_M / CB_THREADS;  // outputs per thread: a column m, PER rows j
  static_assert(CB_J * CB_M % CB_THREADS == 0 && CB_THREADS % CB_M == 0, "CB_J, CB_M, CB_THREADS");
  __shared__ float xs[CB_R][CB_J + 1];   // the gathered x: pixel r, row j (+1: no bank conflicts)
  __shared__ float ds[CB_R][CB_M + 1];   // dy: pixel r, column m
  const int J = C * K * K, HOWO = HO * WO;
  const long long R = (long long)N * HOWO;
  const int j0 = blockIdx.x * CB_J, m0 = blockIdx.y * CB_M;
  const long long r_begin = (long long)blockIdx.z * per_slice;
  const long long r_end = r_begin + per_slice < R ? r_begin + per_slice : R;
  const int tm = threadIdx.x % CB_M, tj = threadIdx.x / CB_M;   // column tm; rows tj + k * JSTEP
  constexpr int JSTEP = CB_THREADS / CB_M;
  float acc[PER];
#pragma unroll
  for (int k = 0; k < PER; ++k) acc[k] = 0.0f;
  for (long long r0 = r_begin; r0 < r_end; r0 += CB_R) {
    // Stage: consecutive threads take consecutive pixels (coalesced reads of a row of x and of dy).
    for (int e = threadIdx.x; e < CB_R * CB_J; e += CB_THREADS) {
      const int r = e % CB_R, j = e / CB_R;
      const long long rr = r0 + r;
      float v = 0.0f;
      if (rr < r_end && j0 + j < J) {
        const int n = (int)(rr / HOWO), q = (int)(rr % HOWO), oh = q / WO, ow = q % WO;
        const int jj = j0 + j, kw = jj % K, kh = (jj / K) % K, c = jj / (K * K);
        const int ih = oh * S - P + kh, iw = ow * S - P + kw;
        if (ih >= 0 && ih < H && iw >= 0 && iw < W) v = x[(((long long)n * C + c) * H + ih) * W + iw];
      }
      xs[r][j] = v;
    }
    for (int e = threadIdx.x; e < CB_R * CB_M; e += CB_THREADS) {
      const int r = e % CB_R, m = e / CB_R;
      const long long rr = r0 + r;
      float v = 0.0f;
      if (rr < r_end && m0 + m < M) {
        const int n = (int)(rr / HOWO), q = (int)(rr % HOWO);
        v = dy[((long long)n * M + m0 + m) * HOWO + q];
      }
      ds[r][m] = v;
    }
    __syncthreads();
#pragma unroll 8
    for (int r = 0; r < CB_R; ++r) {
      const float d = ds[r][tm];
#pragma unroll
      for (int k = 0; k < PER; ++k) acc[k] += xs[r][tj + k * JSTEP] * d;
    }
    __syncthreads();
  }
  float* out = ws + (long long)blockIdx.z * J * M;
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    const int j = j0 + tj + k * JSTEP, m = m0 + tm;
    if (j < J && m < M) out[(long long)j * M + m] = acc[k];
  }
}

extern "C" __global__ void conv_bwd_weight_reduce(const float* __restrict__ ws, float* __restrict__ dw, int slices,
                                                  int count, int M, int wt) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;   // an element of the (C*K*K, M) layout
  if (i >= count) return;
  float sum = 0.0f;
  for (int s = 0; s < slices; ++s) sum += ws[(long long)s * count + i];
  const int J = count / M, j = i / M, m = i % M;
  dw[wt ? i : m * J + j] = sum;
}

extern "C" __global__ void flip_weights(const float* __restrict__ wt, float* __restrict__ wf, int C, int M, int K) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;   // an element of wt: (c, kh, kw) row, m column
  if (i >= C * K * K * M) return;
  const int m = i % M, tap = i / M, kw = tap % K, kh = (tap / K) % K, c = tap / (K * K);
  wf[((long long)(m * K + (K - 1 - kh)) * K + (K - 1 - kw)) * C + c] = wt[i];
}
