// thrust_with_kernels.cu -- Thrust next to kernels of one's own: a device_vector filled and sorted by
// Thrust, handed to a kernel through thrust::raw_pointer_cast, a transform with a __host__ __device__
// functor, a reduction, and memory from thrust::device_malloc that a kernel writes.
#include <cstdio>
#include <thrust/device_malloc.h>
#include <thrust/device_free.h>
#include <thrust/device_vector.h>
#include <thrust/host_vector.h>
#include <thrust/reduce.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>
#include <thrust/transform.h>
#include <cuda/std/functional>

struct square {
  __host__ __device__ int operator()(int v) const { return v * v; }
};

__global__ void add_index(int* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += i;
}

int main() {
  const int n = 1000;
  thrust::host_vector<int> h(n);
  for (int i = 0; i < n; ++i) h[i] = (i * 7919) % n;      // a permutation of 0 .. n-1
  thrust::device_vector<int> d = h;
  thrust::sort(d.begin(), d.end());                        // 0 .. n-1
  add_index<<<(n + 127) / 128, 128>>>(thrust::raw_pointer_cast(d.data()), n);   // 2i
  cudaError_t e = cudaDeviceSynchronize();
  thrust::device_vector<int> sq(n);
  thrust::transform(d.begin(), d.end(), sq.begin(), square());      // 4i^2
  long long total = thrust::reduce(sq.begin(), sq.end(), 0LL, cuda::std::plus<long long>());
  thrust::device_ptr<int> m = thrust::device_malloc<int>(n);
  thrust::sequence(m, m + n, 5);                                         // 5 + i
  add_index<<<(n + 127) / 128, 128>>>(thrust::raw_pointer_cast(m), n);   // 5 + 2i
  int last = m[n - 1];
  thrust::device_free(m);
  long long want = 0;
  for (long long i = 0; i < n; ++i) want += 4 * i * i;
  const bool ok = e == cudaSuccess && d[n - 1] == 2 * (n - 1) && total == want && last == 5 + 2 * (n - 1);
  printf("%s d[%d] = %d, sum of squares %lld, last %d\n%s\n", cudaGetErrorString(e), n - 1, (int)d[n - 1], total,
         last, ok ? "PASSED" : "FAILED");
  return ok ? 0 : 1;
}
