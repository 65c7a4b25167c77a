// Deliberately broken kernels: each checking mode of the CPU executor must catch one.

// Off by one: thread n writes one element past the end of y.  (memory check)
extern "C" __global__ void off_by_one(const float* __restrict__ x, float* __restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) y[i] = 2.0f * x[i < n ? i : 0];
}

// Threads past the end return early, then the rest wait at a barrier.  (barrier check)
extern "C" __global__ void early_return_barrier(const float* __restrict__ x, float* __restrict__ y, int n) {
  __shared__ float s[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  s[threadIdx.x] = x[i];
  __syncthreads();
  y[i] = s[threadIdx.x] + s[threadIdx.x ^ 1];
}

// Even and odd threads wait at two different barriers.  (barrier check)
extern "C" __global__ void divergent_barrier(float* __restrict__ y) {
  if (threadIdx.x % 2 == 0) {
    __syncthreads();
    y[threadIdx.x] = 1.0f;
  } else {
    __syncthreads();
    y[threadIdx.x] = 2.0f;
  }
}

// Each thread reads its left neighbour's shared element without a barrier between the
// write and the read.  Run in thread order it happens to work; in any other order it
// does not.  (shuffled schedule)
extern "C" __global__ void shift_missing_barrier(const float* __restrict__ x, float* __restrict__ y, int n) {
  __shared__ float s[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? x[i] : 0.0f;
  // missing: __syncthreads();
  if (i < n) y[i] = threadIdx.x > 0 ? s[threadIdx.x - 1] : 0.0f;
}

// Lane 0 waits at __syncthreads while the rest of its warp waits for it in __syncwarp:
// nobody can go on.  (a deadlock: reported, never a hang)
extern "C" __global__ void deadlock(float* __restrict__ y) {
  if (threadIdx.x == 0) {
    __syncthreads();
  } else {
    __syncwarp();
  }
  y[threadIdx.x] = 1.0f;
}
