// train.cu -- the small kernels of a training step besides the convolutions: the backward pass of
// ReLU, of the residual add, of global average pooling and of the dense layer; the softmax
// cross-entropy loss and its gradient in one kernel; and SGD with momentum and weight decay over
// every parameter in one launch.
//
//   relu_backward(y, dy, dx, n)           dx = 0 where y <= 0, else dy (y: the ReLU's output; a NaN y
//                                         passes dy, as PyTorch's threshold_backward)
//   add(a, b, out, n)                     out = a + b (a residual block's two gradient paths)
//   gap_backward(dy, dx, NC, HW)          dx[p, :] = dy[p] / HW for each of the NC planes
//   gap_relu_backward(y, dg, dx, NC, HW)  both in one pass, where the pooling's input came out of a
//   gap_relu_backward4(...)               ReLU y: dx = 0 where y <= 0, else dg[p] / HW.  Apart, the
//                                         plane-sized dL/dy is written and read back; here only y
//                                         is read.  The scalar kernel's grid names the plane (y and
//                                         z: more planes than one grid dimension holds) and the
//                                         position in it (x), so no index is divided.  The 4 variant
//                                         (HW a multiple of 4, 16-byte aligned arrays, fewer than 2^31
//                                         float4s) moves float4s, four per thread, its plane found by a
//                                         32-bit division: a quarter of the instructions, 64 bytes in
//                                         flight per thread.
//   dense_forward(x, w, b, y, N, I, O)    y (N, O) = x (N, I) . w (I, O) + b: a thread per output,
//                                         reading w as it is now (a training loop changes it)
//   dense_backward_data(dy, w, dx, N, I, O)      dx (N, I) = dy (N, O) . w (I, O)^T
//   dense_backward_weight(x, dy, dw, db, N, I, O) dw (I, O) = x^T . dy; db (O,) = sum over rows of dy
//   softmax_xent(z, labels, row_loss, dz, N, D)  one warp per row: row_loss[r] = logsumexp(z_r) -
//                                                z_r[label], dz_r = (softmax(z_r) - onehot) / N
//   mean(v, out, n)                       out[0] = the mean of v (one block: a fixed order of sums,
//                                         so the loss is the same number on every run)
//   sgd_momentum(p, g, v, n, hyper)       PyTorch's SGD: g' = g + wd p; v = momentum v + g';
//                                         p -= lr v.  One launch for all parameters: they live in
//                                         one flat buffer (labkit.models.resnet_small.Parameters), so
//                                         do g and v.  hyper = {lr, momentum, wd} in device memory,
//                                         read at each launch: a CUDA graph of the whole step then
//                                         follows a learning-rate schedule (the host writes hyper
//                                         between replays) where values passed as arguments would
//                                         be frozen into the graph.
// Launch: the elementwise kernels grid (ceil(n / 256),), block (256,); gap_relu_backward grid
// (ceil(HW / T), min(NC, 65535), ceil(NC / 65535)), block (T,), T <= 256; gap_relu_backward4 grid
// (ceil(n / 4 / 1024),), block (256,); dense_backward_data one thread
// per dx element, dense_backward_weight one thread per dw element (and db on the first I*O threads'
// neighbours: threads I*O .. I*O+O-1); softmax_xent grid (ceil(N / 8),), block (256,); mean grid (1,),
// block (TR_THREADS,).  Float32 (labels int32), C-contiguous.
//
// The loss is stable for any logits: the row max is subtracted before exp, and the log of the sum
// is taken of numbers in (0, D].  A NaN logit makes its row's loss and gradient NaN, hence the mean.

#ifndef TR_THREADS
#define TR_THREADS 256
#endif

extern "C" __global__ void relu_backward(const float* __restrict__ y, const float* __restrict__ dy,
                                         float* __restrict__ dx, long long n) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  // PyTorch's threshold_backward: 0 where y <= 0, else dy.  Where y is NaN the comparison is false
  // and dy passes (a NaN in the forward is not hidden from the gradient).
  if (i < n) dx[i] = y[i] <= 0.0f ? 0.0f : dy[i];
}

extern "C" __global__ void add(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out,
                               long long n) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

extern "C" __global__ void gap_backward(const float* __restrict__ dy, float* __restrict__ dx, int NC, int HW) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < (long long)NC * HW) dx[i] = dy[i / HW] * (1.0f / HW);
}

extern "C" __global__ void gap_relu_backward(const float* __restrict__ y, const float* __restrict__ dg,
                                             float* __restrict__ dx, long long NC, int HW) {
  const long long plane = (long long)blockIdx.z * gridDim.y + blockIdx.y;
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (plane >= NC || j >= HW) return;
  const float g = dg[plane] * (1.0f / HW);           // as gap_backward, then relu_backward's test
  const long long i = plane * HW + j;
  dx[i] = y[i] <= 0.0f ? 0.0f : g;
}

extern "C" __global__ void gap_relu_backward4(const float4* __restrict__ y, const float* __restrict__ dg,
                                              float4* __restrict__ dx, unsigned n4, unsigned HW4) {
  // Flat over the float4s (fewer than 2^31: the host checks), four per thread a blockDim apart, all
  // four loads issued before any is used; a float4 never straddles planes (HW a multiple of 4).
  const unsigned i0 = blockIdx.x * (blockDim.x * 4) + threadIdx.x;
  const float scale = 1.0f / (HW4 * 4);
  float4 v[4];
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const unsigned i = i0 + u * blockDim.x;
    if (i < n4) v[u] = y[i];
  }
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const unsigned i = i0 + u * blockDim.x;
    if (i < n4) {
      const float g = dg[i / HW4] * scale;
      float4 o;
      o.x = v[u].x <= 0.0f ? 0.0f : g;
      o.y = v[u].y <= 0.0f ? 0.0f : g;
      o.z = v[u].z <= 0.0f ? 0.0f : g;
      o.w = v[u].w <= 0.0f ? 0.0f : g;
      dx[i] = o;
    }
  }
}

extern "C" __global__ void dense_forward(const float* __restrict__ x, const float* __restrict__ w,
                                         const float* __restrict__ b, float* __restrict__ y, int N, int I, int O) {
  const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= (long long)N * O) return;
  const int o = (int)(e % O), n = (int)(e / O);
  float acc = b[o];
  for (int i = 0; i < I; ++i) acc += x[(long long)n * I + i] * w[(long long)i * O + o];
  y[e] = acc;
}

extern "C" __global__ void dense_backward_data(const float* __restrict__ dy, const float* __restrict__ w,
                                               float* __restrict__ dx, int N, int I, int O) {
  const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= (long long)N * I) return;
  const int i = (int)(e % I), n = (int)(e / I);
  float acc = 0.0f;
  for (int o = 0; o < O; ++o) acc += dy[(long long)n * O + o] * w[(long long)i * O + o];
  dx[e] = acc;
}

extern "C" __global__ void dense_backward_weight(const float* __restrict__ x, const float* __restrict__ dy,
                                                 float* __restrict__ dw, float* __restrict__ db, int N, int I, int O) {
  const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (e < (long long)I * O) {
    const int o = (int)(e % O), i = (int)(e / O);
    float acc = 0.0f;
    for (int n = 0; n < N; ++n) acc += x[(long long)n * I + i] * dy[(long long)n * O + o];
    dw[e] = acc;
  } else if (e < (long long)I * O + O) {
    const int o = (int)(e - (long long)I * O);
    float acc = 0.0f;
    for (int n = 0; n < N; ++n) acc += dy[(long long)n * O + o];
    db[o] = acc;
  }
}

extern "C" __global__ void softmax_xent(const float* __restrict__ z, const int* __restrict__ labels,
                                        float* __restrict__ row_loss, float* __restrict__ dz, int N, int D) {
  const int lane = threadIdx.x % 32;
  const int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (r >= N) return;  // a whole warp leaves together: the shuffles below see all 32 lanes
  const float* zr = z + (long long)r * D;
  float mx = __int_as_float(0xff800000);  // -infinity (NVRTC has no INFINITY without headers)
  // fmaxf skips a NaN logit, which is harmless: the max only keeps exp() in range, and the NaN enters
  // the sum below, so the row's loss and every dz of the row are NaN (as in PyTorch).
  for (int j = lane; j < D; j += 32) mx = fmaxf(mx, zr[j]);
  for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  float sum = 0.0f;
  for (int j = lane; j < D; j += 32) sum += expf(zr[j] - mx);
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  const int label = labels[r];
  if (label < 0 || label >= D) {  // not a class: NaN for the row, never a read outside it
    const float nan = __int_as_float(0x7fc00000);
    for (int j = lane; j < D; j += 32) dz[(long long)r * D + j] = nan;
    if (lane == 0) row_loss[r] = nan;
    return;
  }
  const float inv = 1.0f / sum, scale = 1.0f / N;
  for (int j = lane; j < D; j += 32)
    dz[(long long)r * D + j] = (expf(zr[j] - mx) * inv - (j == label ? 1.0f : 0.0f)) * scale;
  if (lane == 0) row_loss[r] = logf(sum) - (zr[label] - mx);
}

extern "C" __global__ void __launch_bounds__(TR_THREADS) mean(const float* __restrict__ v, float* __restrict__ out,
                                                               int n) {
  __shared__ float part[TR_THREADS];
  float acc = 0.0f;
  for (int i = threadIdx.x; i < n; i += TR_THREADS) acc += v[i];
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int half = TR_THREADS / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = part[0] / n;
}

extern "C" __global__ void sgd_momentum(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ v,
                                        long long n, const float* __restrict__ hyper) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float lr = hyper[0], momentum = hyper[1], weight_decay = hyper[2];
  const float vi = momentum * v[i] + g[i] + weight_decay * p[i];
  v[i] = vi;
  p[i] -= lr * vi;
}
