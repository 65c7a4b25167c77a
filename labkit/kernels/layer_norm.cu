// layer_norm.cu -- layer normalization over the last axis (ONNX's LayerNormalization, PyTorch's
// F.layer_norm): each row of an (R, D) array, the trailing dimensions of a tensor flattened into D.
//
//   y[r, j] = (x[r, j] - mean_r) / sqrt(var_r + eps) * g[j] + b[j],
//   mean_r = sum_j x[r, j] / D,   var_r = sum_j (x[r, j] - mean_r)^2 / D   (biased, as PyTorch's)
//
// ConvNeXt normalizes each pixel's channels this way (its activations permuted to channels-last).
// One warp per row: the lanes read neighbouring values (coalesced), and a butterfly of shuffles
// leaves the row's sum in every lane, as in softmax_rows.  The variance is the mean of the squared
// deviations from the mean, in a second pass over the row (the row is short and cached): summing
// x^2 - mean^2 instead would cancel to nothing, or below zero, when the mean is large against the
// spread.  A NaN in a row makes that row NaN, as in PyTorch.
//
// layer_norm_rows(x, g, b, y, R, D, eps): x, y (R, D); g, b (D,).  Launch (Python:
// labkit.ops.layer_norm): grid (ceil(R / 8),), block (256,) = 8 warps, 8 rows.

extern "C" __global__ void layer_norm_rows(const float* __restrict__ x, const float* __restrict__ g,
                                           const float* __restrict__ b, float* __restrict__ y, long long R, int D,
                                           float eps) {
  const int lane = threadIdx.x % 32;
  const long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= R) return;  // the whole warp leaves together: the shuffles below stay full-warp
  const float* xr = x + row * D;
  float sum = 0.0f;
  for (int j = lane; j < D; j += 32) sum += xr[j];
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  const float mean = sum / D;
  float sq = 0.0f;
  for (int j = lane; j < D; j += 32) {
    const float d = xr[j] - mean;
    sq += d * d;
  }
  for (int off = 16; off > 0; off /= 2) sq += __shfl_xor_sync(0xffffffffu, sq, off);
  const float inv = rsqrtf(sq / D + eps);
  float* yr = y + row * D;
  for (int j = lane; j < D; j += 32) yr[j] = (xr[j] - mean) * inv * g[j] + b[j];
}
