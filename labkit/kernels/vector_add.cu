// vector_add.cu -- the first kernel of the series: y = a*x + y, one thread per element.
//
// Versions:
//   vector_add        one thread per element; the grid covers n exactly once (rounded up),
//                     so threads past the end must not touch memory
//   vector_add_grid   a grid-stride loop: any grid size covers any n
//
// Launch (Python): fn((blocks,), (threads,), (x, y, numpy.float32(a), numpy.int32(n)))

// Version 1: one thread, one element.  The `if` matters: the last block usually
// has threads whose index i is past the end of the arrays.
extern "C" __global__ void vector_add(const float* __restrict__ x, float* __restrict__ y,
                                      float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// Version 2: a grid-stride loop.  Each thread handles i, i + (total threads), ...,
// so a grid sized to the GPU (a few blocks per SM) covers an array of any length.
extern "C" __global__ void vector_add_grid(const float* __restrict__ x, float* __restrict__ y,
                                           float a, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    y[i] = a * x[i] + y[i];
}
