// reduce_shared.cu -- a block-wise sum in dynamic shared memory (extern __shared__, its qualifiers in the
// order some books write them), the partial sums added on the host.
#include <cstdio>
#include <vector>
#include <helper_cuda.h>

template <class T>
__global__ void blockSum(const T* in, T* out, int n) {
  extern T __shared__ sdata[];          // the type before __shared__: legal, and sized at launch
  unsigned tid = threadIdx.x, i = blockIdx.x * blockDim.x * 2 + threadIdx.x;
  T v = 0;
  if (i < n) v += in[i];
  if (i + blockDim.x < n) v += in[i + blockDim.x];
  sdata[tid] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) sdata[tid] += sdata[tid + s];
    __syncthreads();
  }
  if (tid == 0) out[blockIdx.x] = sdata[0];
}

int main(int argc, char** argv) {
  findCudaDevice(argc, (const char**)argv);
  const int n = 1 << 16, threads = 128, blocks = (n + 2 * threads - 1) / (2 * threads);
  std::vector<int> h(n);
  long long want = 0;
  for (int i = 0; i < n; ++i) { h[i] = (i * 7) % 13 - 6; want += h[i]; }
  int *d_in, *d_part;
  checkCudaErrors(cudaMalloc(&d_in, n * sizeof(int)));
  checkCudaErrors(cudaMalloc(&d_part, blocks * sizeof(int)));
  checkCudaErrors(cudaMemcpy(d_in, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  cudaStream_t s;
  checkCudaErrors(cudaStreamCreate(&s));
  blockSum<<<blocks, threads, threads * sizeof(int), s>>>(d_in, d_part, n);   // deduced: blockSum<int>
  getLastCudaError("blockSum failed");
  std::vector<int> part(blocks);
  checkCudaErrors(cudaMemcpyAsync(part.data(), d_part, blocks * sizeof(int), cudaMemcpyDeviceToHost, s));
  checkCudaErrors(cudaStreamSynchronize(s));
  long long got = 0;
  for (int p : part) got += p;
  printf("sum = %lld (expected %lld)\n", got, want);
  printf(got == want ? "PASSED\n" : "FAILED\n");
  checkCudaErrors(cudaStreamDestroy(s));
  checkCudaErrors(cudaFree(d_in));
  checkCudaErrors(cudaFree(d_part));
  return got == want ? 0 : 1;
}
