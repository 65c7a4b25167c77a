// Small kernels that exercise each feature of the CUDA execution model the CPU
// executor must reproduce.  The same file runs through CuPy on a GPU; the tests
// check both against NumPy, and against each other (tests/test_executor_parity.py).

// --- map: one thread per element, grid-stride loop --------------------------------------
extern "C" __global__ void saxpy(const float* __restrict__ x, float* __restrict__ y, float a, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    y[i] = a * x[i] + y[i];
}

// --- shared-memory tree reduction: one partial sum per block -------------------------------
extern "C" __global__ void block_sum(const float* __restrict__ x, float* __restrict__ partial, int n) {
  __shared__ float s[256];
  unsigned t = threadIdx.x;
  unsigned i = blockIdx.x * blockDim.x + t;
  s[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (t < stride) s[t] += s[t + stride];
    __syncthreads();
  }
  if (t == 0) partial[blockIdx.x] = s[0];
}

// --- tiled matrix multiply C = A B (n x n), 16 x 16 tiles, any n -----------------------------
#define TILE 16
extern "C" __global__ void matmul_tiled(const float* __restrict__ A, const float* __restrict__ B,
                                        float* __restrict__ C, int n) {
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE];
  int row = blockIdx.y * TILE + threadIdx.y;
  int col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0.0f;
  for (int t = 0; t < (n + TILE - 1) / TILE; ++t) {
    int ac = t * TILE + threadIdx.x, br = t * TILE + threadIdx.y;
    As[threadIdx.y][threadIdx.x] = (row < n && ac < n) ? A[row * n + ac] : 0.0f;
    Bs[threadIdx.y][threadIdx.x] = (br < n && col < n) ? B[br * n + col] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  if (row < n && col < n) C[row * n + col] = acc;
}

// --- warp shuffles: down (reduction), up (inclusive scan), xor (butterfly), plain (broadcast)
extern "C" __global__ void warp_ops(const int* __restrict__ x, int* __restrict__ sum,
                                    int* __restrict__ scan, int* __restrict__ bfly,
                                    int* __restrict__ bcast, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int lane = threadIdx.x & 31;
  int v = i < n ? x[i] : 0;
  int s = v;
  for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
  int p = v;
  for (int o = 1; o < 32; o <<= 1) {
    int up = __shfl_up_sync(0xffffffffu, p, o);
    if (lane >= o) p += up;
  }
  int b = v;
  for (int o = 1; o < 32; o <<= 1) b = max(b, __shfl_xor_sync(0xffffffffu, b, o));
  int first = __shfl_sync(0xffffffffu, v, 0);
  if (i < n) {
    scan[i] = p;
    bfly[i] = b;
    bcast[i] = first;
    if (lane == 0) sum[i / 32] = s;
  }
}

// --- votes --------------------------------------------------------------------------------
extern "C" __global__ void warp_votes(const int* __restrict__ x, unsigned* __restrict__ ballot,
                                      int* __restrict__ any_all, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int pred = i < n && x[i] > 0;
  unsigned b = __ballot_sync(0xffffffffu, pred);
  int a = __any_sync(0xffffffffu, pred);
  int l = __all_sync(0xffffffffu, pred);
  if ((threadIdx.x & 31) == 0) {
    ballot[i / 32] = b;
    any_all[2 * (i / 32)] = a;
    any_all[2 * (i / 32) + 1] = l;
  }
}

// --- atomics: a histogram in shared memory, merged into global memory -----------------------
extern "C" __global__ void histogram(const int* __restrict__ x, unsigned* __restrict__ bins, int n,
                                     int nbins) {
  __shared__ unsigned local[64];
  for (int b = threadIdx.x; b < nbins; b += blockDim.x) local[b] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    atomicAdd(&local[x[i]], 1u);
  __syncthreads();
  for (int b = threadIdx.x; b < nbins; b += blockDim.x) atomicAdd(&bins[b], local[b]);
}

// CUDA has no atomicMax on float: the usual idiom, a compare-and-swap loop on the bits.
__device__ float atomic_max_float(float* addr, float v) {
  int* bits = reinterpret_cast<int*>(addr);
  int old = *bits;
  while (__int_as_float(old) < v) {
    int assumed = old;
    old = atomicCAS(bits, assumed, __float_as_int(v));
    if (old == assumed) break;
  }
  return __int_as_float(old);
}

// out: [max, min, count of CAS successes, last exchanged]; fout: [sum, max, last exchanged]
extern "C" __global__ void atomic_misc(const int* __restrict__ x, const float* __restrict__ f,
                                       int* __restrict__ out, float* __restrict__ fout, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  atomicMax(&out[0], x[i]);
  atomicMin(&out[1], x[i]);
  int old = out[2];
  while (true) {  // a counter built from compare-and-swap
    int seen = atomicCAS(&out[2], old, old + 1);
    if (seen == old) break;
    old = seen;
  }
  atomicExch(&out[3], 7);
  atomicAdd(&fout[0], f[i]);
  atomic_max_float(&fout[1], f[i]);
  atomicExch(&fout[2], 0.5f);
}

// --- constant memory: a polynomial whose coefficients all threads read ---------------------
__constant__ float coeffs[8];
extern "C" __global__ void poly(const float* __restrict__ x, float* __restrict__ y, int n, int degree) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float acc = 0.0f;
  for (int k = degree; k >= 0; --k) acc = acc * x[i] + coeffs[k];
  y[i] = acc;
}

// --- dynamic shared memory: reverse each block's chunk -------------------------------------
extern "C" __global__ void reverse_blocks(const float* __restrict__ x, float* __restrict__ y, int n) {
  extern __shared__ float buf[];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  buf[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  int j = blockIdx.x * blockDim.x + (blockDim.x - 1 - threadIdx.x);
  if (j < n) y[j] = buf[threadIdx.x];
}

// --- 3-D grid of 3-D blocks: every element records its own coordinates ----------------------
extern "C" __global__ void coords3d(int* __restrict__ out, int nx, int ny, int nz) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  int z = blockIdx.z * blockDim.z + threadIdx.z;
  if (x < nx && y < ny && z < nz) out[(z * ny + y) * nx + x] = x + 1000 * y + 1000000 * z;
}

// --- templates, instantiated by name (CuPy's name_expressions) ------------------------------
template <int FACTOR, typename T>
__global__ void scale_by(const T* __restrict__ x, T* __restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * T(FACTOR);
}

// --- math functions kernels use -------------------------------------------------------------
extern "C" __global__ void math_fns(const float* __restrict__ x, float* __restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  y[8 * i + 0] = expf(v);
  y[8 * i + 1] = tanhf(v);
  y[8 * i + 2] = fmaxf(v, 0.25f) + fminf(v, 0.75f);
  y[8 * i + 3] = rsqrtf(v + 1.0f);
  y[8 * i + 4] = powf(v + 1.0f, 0.75f);
  y[8 * i + 5] = __fdividef(v, v + 2.0f);
  y[8 * i + 6] = (float)max(min(i, 5), 2);
  y[8 * i + 7] = __expf(-v) + sqrtf(v) + logf(v + 1.0f);
}

// --- vector types: float4 loads and stores --------------------------------------------------
extern "C" __global__ void add_float4(const float4* __restrict__ a, const float4* __restrict__ b,
                                      float4* __restrict__ c, int n4) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n4) return;
  float4 u = a[i], v = b[i];
  c[i] = make_float4(u.x + v.x, u.y + v.y, u.z + v.z, u.w + v.w);
}
