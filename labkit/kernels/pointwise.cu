// pointwise.cu -- the element-wise layers a network read from a file may hold, beside the ones fused
// into the convolutions' epilogues: activations, a per-channel affine map (batch normalization not
// folded into a convolution), and Add/Mul of two tensors with broadcasting.
//
// Every kernel takes one thread per output element; consecutive threads write consecutive outputs
// (coalesced).  An activation is chosen by a code, so that one compiled module serves them all:
//
//   0 none   1 relu   2 clip(a, b)   3 leaky relu (slope a)   4 sigmoid   5 tanh
//   6 hard sigmoid max(0, min(1, a*v + b))   7 hard swish v * max(0, min(1, v/6 + 1/2))
//   8 erf   9 gelu v/2 (1 + erf(v / sqrt 2))   10 gelu by tanh v/2 (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3)))
//
// NaN stays NaN through every one (as in PyTorch and ONNX Runtime): comparisons are written so
// that a NaN input fails them and is passed on.
//
// Launch (Python: labkit.ops.pointwise): grid (ceil(total / 256),), block (256,).
//   unary(x, y, total, act, a, b)
//   channel_affine(x, s, t, y, total, C, HW, act, a, b)      y = act(x * s[c] + t[c]), x NCHW
//   binary_bcast(p, q, y, total, d1, d2, d3, sp0..sp3, sq0..sq3, op, act, a, b)
//       y = act(p op q) on the output's 4 dims (d0 implied by total), p and q read with strides
//       (0 along a broadcast dimension); op 0 adds, 1 multiplies, 2 subtracts q, 3 divides by q.

__device__ __forceinline__ float activate(float v, int act, float a, float b) {
  switch (act) {
    case 1: return v < 0.0f ? 0.0f : v;
    case 2: { const float w = v < a ? a : v; return w > b ? b : w; }   // min(max(v, a), b), as ONNX's Clip
    case 3: return v < 0.0f ? a * v : v;
    case 4: return 1.0f / (1.0f + expf(-v));
    case 5: return tanhf(v);
    case 6: { const float h = a * v + b; return h < 0.0f ? 0.0f : (h > 1.0f ? 1.0f : h); }
    case 7: { const float h = v / 6.0f + 0.5f; return v * (h < 0.0f ? 0.0f : (h > 1.0f ? 1.0f : h)); }
    case 8: return erff(v);
    case 9: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    case 10: return 0.5f * v * (1.0f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
    default: return v;
  }
}

extern "C" __global__ void unary(const float* __restrict__ x, float* __restrict__ y, int total, int act, float a,
                                 float b) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < total) y[i] = activate(x[i], act, a, b);
}

// Batch normalization that no convolution precedes (DenseNet's pre-activation blocks): the scale s
// and shift t were computed once from gamma, beta, mean and variance when the model was loaded.
extern "C" __global__ void channel_affine(const float* __restrict__ x, const float* __restrict__ s,
                                          const float* __restrict__ t, float* __restrict__ y, int total, int C,
                                          int HW, int act, float a, float b) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int c = (i / HW) % C;
  y[i] = activate(x[i] * s[c] + t[c], act, a, b);
}

// Broadcasting as NumPy and ONNX define it, for up to 4 dimensions (the caller pads the shapes on
// the left with ones): each output index is split into its 4 coordinates, and each operand is read
// at the dot product of the coordinates with its strides, a stride of 0 repeating it along that axis.
extern "C" __global__ void binary_bcast(const float* __restrict__ p, const float* __restrict__ q,
                                        float* __restrict__ y, int total, int d1, int d2, int d3, int sp0, int sp1,
                                        int sp2, int sp3, int sq0, int sq1, int sq2, int sq3, int op, int act,
                                        float a, float b) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int i3 = i % d3;
  const int i2 = (i / d3) % d2;
  const int i1 = (i / (d3 * d2)) % d1;
  const int i0 = i / (d3 * d2 * d1);
  const float u = p[i0 * sp0 + i1 * sp1 + i2 * sp2 + i3 * sp3];
  const float v = q[i0 * sq0 + i1 * sq1 + i2 * sq2 + i3 * sq3];
  const float r = op == 0 ? u + v : op == 1 ? u * v : op == 2 ? u - v : u / v;
  y[i] = activate(r, act, a, b);
}
