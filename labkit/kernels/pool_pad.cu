// pool_pad.cu -- pooling of any window, stride, dilation and (asymmetric) padding, and the copies a
// graph of layers needs around its convolutions: constant padding, concatenation, slices, transposes.
//
//   pool_any(x, y, NC, H, W, Ho, Wo, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, mode, include_pad)
//       one thread per output element.  The window of output (oh, ow) starts at (oh*sh - pt,
//       ow*sw - pl) of x.  mode 0: the largest value inside x (padding never wins; a NaN in the
//       window wins, as in PyTorch).  mode 1: the mean, over the taps inside x, or with include_pad
//       over the taps inside the padded input [-pt, H + pb) x [-pl, W + pr) (ONNX's
//       count_include_pad, as ONNX Runtime and PyTorch count it: taps that ceil_mode adds past the
//       padding are never counted).
//   pad4(x, y, total, d1, d2, d3, x0, x1, x2, x3, p0, p1, p2, p3, value)
//       y (4 dims, d0 implied by total) is x shifted by the leading pads p and surrounded by value.
//   concat_copy(x, y, total, inner_x, inner_y, offset)
//       x viewed as (outer, inner_x) copied into y viewed as (outer, inner_y) at column offset: one
//       input of a concatenation (Concat on an axis k: inner = that axis times the ones after it).
//   slice_copy(x, y, total, inner_x, inner_y, offset)
//       its inverse: columns [offset, offset + inner_y) of x viewed as (outer, inner_x) into y viewed as
//       (outer, inner_y) (Slice on one axis with step 1; each output of a Split).
//   permute(x, r, y, total, d0..d5, s0..s5, add)
//       y (6 dims d0..d5, unused leading ones 1) is x with its axes reordered: element (i0, ..., i5)
//       of y is x[i0*s0 + ... + i5*s5], s the strides of x's axes in y's order (Transpose); with add,
//       plus r's element at the same place of y (a residual added in the copy: ConvNeXt's skip).
//   gather_axis(x, idx, y, total, count, n, inner)
//       Gather along one axis: x viewed as (outer, n, inner), y as (outer, count, inner),
//       y[o][j][k] = x[o][idx[j]][k], idx (count,) int64 positions 0 .. n-1 (checked on the host).
//   transpose_tiles(x, r, y, rows, cols, add)
//       the permutations that are a batch of 2-D transposes (NCHW <-> NHWC among them): x viewed as
//       (batch, rows, cols), y as (batch, cols, rows), y[b][c][r] = x[b][r][c] (+ r[b][c][r] with add).  A block moves a
//       32 x 32 tile through shared memory, so that both its reads of x and its writes of y are
//       coalesced rows (permute reads x 4 bytes at a time with a stride: about a quarter of the
//       copy bandwidth); the tile's 33-float rows keep its column reads free of bank conflicts.
//       Grid (ceil(cols / 32), ceil(rows / 32), batch), block (32, 8).
//   channels_last(x, y, C, HW, C4) and channels_last_narrow(x, y, C, HW, C4)
//       x (N, C, HW) -> y (N, HW, C4), C4 = C rounded up to a multiple of 4, channels C .. C4-1 zero:
//       the channels-last copy whose 16-byte groups of 4 channels conv_implicit_tf32.cu's NHWC
//       gather reads.  channels_last moves 32 x 32 tiles as transpose_tiles does (grid
//       (ceil(HW / 32), ceil(C4 / 32), N), block (32, 8)).  With few channels (C4 <= 8: an RGB
//       image) its warps would write 4 or 8 floats a row; channels_last_narrow gives each thread a
//       pixel instead, which reads its C values (the warp's reads coalesced along the plane) and
//       writes C4 / 4 float4s (coalesced for C4 = 4): grid (ceil(HW / 256), N), block (256,).
//
// Launch (Python: labkit.ops.pool_pad): grid (ceil(total / 256),), block (256,), transpose_tiles and
// the channels-last copies aside.

extern "C" __global__ void pool_any(const float* __restrict__ x, float* __restrict__ y, int NC, int H, int W,
                                    int Ho, int Wo, int kh, int kw, int sh, int sw, int dh, int dw, int pt, int pl,
                                    int pb, int pr, int mode, int include_pad) {
  const int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= NC * Ho * Wo) return;
  const int ow = o % Wo;
  const int oh = (o / Wo) % Ho;
  const int plane = o / (Wo * Ho);
  const float* xp = x + (long long)plane * H * W;
  const int h0 = oh * sh - pt, w0 = ow * sw - pl;
  float best = 0.0f, sum = 0.0f;
  int seen = 0, padded = 0;
  for (int p = 0; p < kh; ++p) {
    const int h = h0 + p * dh;
    for (int q = 0; q < kw; ++q) {
      const int w = w0 + q * dw;
      if (h >= 0 && h < H && w >= 0 && w < W) {
        const float v = xp[h * W + w];
        best = (seen == 0 || v > best || v != v) ? v : best;
        sum += v;
        ++seen;
      }
      if (h >= -pt && h < H + pb && w >= -pl && w < W + pr) ++padded;
    }
  }
  if (mode == 0) {
    y[o] = best;   // the caller's output sizes give every window at least one tap inside x
  } else {
    const int count = include_pad ? padded : seen;
    y[o] = count > 0 ? sum / count : 0.0f;
  }
}

extern "C" __global__ void pad4(const float* __restrict__ x, float* __restrict__ y, int total, int d1, int d2, int d3,
                                int x0, int x1, int x2, int x3, int p0, int p1, int p2, int p3, float value) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int j3 = i % d3 - p3;
  const int j2 = (i / d3) % d2 - p2;
  const int j1 = (i / (d3 * d2)) % d1 - p1;
  const int j0 = i / (d3 * d2 * d1) - p0;
  const bool inside = j0 >= 0 && j0 < x0 && j1 >= 0 && j1 < x1 && j2 >= 0 && j2 < x2 && j3 >= 0 && j3 < x3;
  y[i] = inside ? x[((j0 * x1 + j1) * x2 + j2) * x3 + j3] : value;
}

extern "C" __global__ void concat_copy(const float* __restrict__ x, float* __restrict__ y, int total, int inner_x,
                                       int inner_y, int offset) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= total) return;
  y[(long long)(i / inner_x) * inner_y + offset + i % inner_x] = x[i];
}

extern "C" __global__ void slice_copy(const float* __restrict__ x, float* __restrict__ y, int total, int inner_x,
                                      int inner_y, int offset) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= total) return;
  y[i] = x[(long long)(i / inner_y) * inner_x + offset + i % inner_y];
}

extern "C" __global__ void gather_axis(const float* __restrict__ x, const long long* __restrict__ idx,
                                       float* __restrict__ y, long long total, int count, int n, int inner) {
  const long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= total) return;
  const long long k = o % inner, t = o / inner;
  const long long j = t % count, outer = t / count;
  y[o] = x[(outer * n + idx[j]) * inner + k];
}

// One thread per element of y: consecutive threads write consecutive elements (coalesced stores); the
// reads gather from x along whichever axis became the last.
extern "C" __global__ void permute(const float* __restrict__ x, const float* __restrict__ r, float* __restrict__ y,
                                   int total, int d0, int d1, int d2, int d3, int d4, int d5, int s0, int s1, int s2,
                                   int s3, int s4, int s5, int add) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int o = i;
  long long src = (long long)(i % d5) * s5;
  i /= d5;
  src += (long long)(i % d4) * s4;
  i /= d4;
  src += (long long)(i % d3) * s3;
  i /= d3;
  src += (long long)(i % d2) * s2;
  i /= d2;
  src += (long long)(i % d1) * s1;
  i /= d1;
  src += (long long)(i % d0) * s0;
  float v = x[src];
  if (add) v += r[o];
  y[o] = v;
}

extern "C" __global__ void transpose_tiles(const float* __restrict__ x, const float* __restrict__ r,
                                           float* __restrict__ y, int rows, int cols, int add) {
  __shared__ float tile[32][33];
  const size_t plane = (size_t)blockIdx.z * rows * cols;
  const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
  for (int i = threadIdx.y; i < 32; i += 8) {           // rows of x: a warp reads 32 neighbours
    const int q = r0 + i, c = c0 + threadIdx.x;
    if (q < rows && c < cols) tile[i][threadIdx.x] = x[plane + (size_t)q * cols + c];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += 8) {           // rows of y: a warp writes 32 neighbours
    const int c = c0 + i, q = r0 + threadIdx.x;
    if (c < cols && q < rows) {
      const size_t at = plane + (size_t)c * rows + q;
      y[at] = add ? tile[threadIdx.x][i] + r[at] : tile[threadIdx.x][i];
    }
  }
}

extern "C" __global__ void channels_last(const float* __restrict__ x, float* __restrict__ y, int C, int HW, int C4) {
  __shared__ float tile[32][33];
  const size_t n = blockIdx.z;
  const int p0 = blockIdx.x * 32, c0 = blockIdx.y * 32;
  for (int i = threadIdx.y; i < 32; i += 8) {           // channels of x: a warp reads 32 neighbouring pixels
    const int c = c0 + i, p = p0 + threadIdx.x;
    tile[i][threadIdx.x] = c < C && p < HW ? x[(n * C + c) * HW + p] : 0.0f;   // the padding channels: zeros
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += 8) {           // pixels of y: a warp writes 32 neighbouring channels
    const int p = p0 + i, c = c0 + threadIdx.x;
    if (p < HW && c < C4) y[(n * HW + p) * C4 + c] = tile[threadIdx.x][i];
  }
}

extern "C" __global__ void channels_last_narrow(const float* __restrict__ x, float* __restrict__ y, int C, int HW,
                                                int C4) {
  const int p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= HW) return;
  const size_t n = blockIdx.y;
  const float* xp = x + n * C * HW + p;
  float4* yp = reinterpret_cast<float4*>(y + (n * HW + p) * C4);
  for (int q = 0; q < C4 / 4; ++q) {
    const int c = 4 * q;
    yp[q] = make_float4(c < C ? xp[(size_t)c * HW] : 0.0f, c + 1 < C ? xp[(size_t)(c + 1) * HW] : 0.0f,
                        c + 2 < C ? xp[(size_t)(c + 2) * HW] : 0.0f, c + 3 < C ? xp[(size_t)(c + 3) * HW] : 0.0f);
  }
}
