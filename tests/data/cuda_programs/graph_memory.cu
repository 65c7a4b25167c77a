// Graph memory nodes: an allocation node's address is fixed when the node is made and its memory is
// allocated at each launch until a free node (or cudaFree, cudaFreeAsync) frees it.  With arguments:
// a graph whose allocation was not freed launched twice (x), then a use after free (x y).
#include <cstdio>
__global__ void fill(float* a, int n, float v) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] = v * i; }
__global__ void twice(const float* a, float* b, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) b[i] = 2 * a[i]; }
static unsigned long long attr(cudaGraphMemAttributeType t) { unsigned long long v = 0; cudaDeviceGetGraphMemAttribute(0, t, &v); return v; }
int main(int argc, char**) {
  const int n = 1000;
  float* out; cudaMalloc(&out, n * sizeof(float));
  // Explicitly: alloc a -> fill a -> twice a into out -> free a.
  cudaGraph_t g; cudaGraphCreate(&g, 0);
  cudaMemAllocNodeParams ap = {};
  ap.bytesize = n * sizeof(float);
  ap.poolProps.allocType = cudaMemAllocationTypePinned;
  ap.poolProps.location.type = cudaMemLocationTypeDevice;
  ap.poolProps.location.id = 0;
  cudaGraphNode_t alloc, k1, k2, fr;
  cudaGraphAddMemAllocNode(&alloc, g, nullptr, 0, &ap);
  float* a = (float*)ap.dptr;
  float v = 1.5f; int nn = n;
  void* args1[] = {&a, &nn, &v};
  cudaKernelNodeParams kp = {};
  kp.func = (void*)fill; kp.gridDim = dim3(4); kp.blockDim = dim3(256); kp.kernelParams = args1;
  cudaGraphAddKernelNode(&k1, g, &alloc, 1, &kp);
  void* args2[] = {&a, &out, &nn};
  kp.func = (void*)twice; kp.kernelParams = args2;
  cudaGraphAddKernelNode(&k2, g, &k1, 1, &kp);
  cudaGraphAddMemFreeNode(&fr, g, &k2, 1, a);
  cudaGraphExec_t ge; cudaGraphInstantiate(&ge, g, nullptr, nullptr, 0);
  printf("before launch: used %llu reserved %llu\n", attr(cudaGraphMemAttrUsedMemCurrent), attr(cudaGraphMemAttrReservedMemCurrent));
  for (int r = 0; r < 2; ++r) cudaGraphLaunch(ge, 0);
  cudaDeviceSynchronize();
  float h[n]; cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost);
  printf("explicit: out[999] = %g, used %llu, peak %llu: %s\n", h[999], attr(cudaGraphMemAttrUsedMemCurrent),
         attr(cudaGraphMemAttrUsedMemHigh), cudaGetErrorName(cudaGetLastError()));
  // By capture: cudaMallocAsync / cudaFreeAsync become memory nodes; the allocation outlives the graph here.
  cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaGraph_t cg; float* b;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
  cudaMallocAsync(&b, n * sizeof(float), s);
  fill<<<4, 256, 0, s>>>(b, n, 3.0f);
  cudaStreamEndCapture(s, &cg);
  cudaGraphExec_t cge; cudaGraphInstantiate(&cge, cg, nullptr, nullptr, 0);
  cudaGraphLaunch(cge, s);
  cudaStreamSynchronize(s);
  cudaMemcpy(h, b, sizeof h, cudaMemcpyDeviceToHost);
  printf("captured: b[10] = %g, used %llu\n", h[10], attr(cudaGraphMemAttrUsedMemCurrent));
  cudaFreeAsync(b, s);
  cudaStreamSynchronize(s);
  printf("freed: used %llu\n", attr(cudaGraphMemAttrUsedMemCurrent));   // kept for the graphs' next launches
  cudaDeviceGraphMemTrim(0);
  printf("trimmed: used %llu, peak %llu\n", attr(cudaGraphMemAttrUsedMemCurrent), attr(cudaGraphMemAttrUsedMemHigh));
  if (argc > 1) cudaGraphLaunch(cge, s), cudaGraphLaunch(cge, s);   // the second allocates it again, unfreed
  if (argc > 2) { cudaFree(b); fill<<<4, 256>>>(b, n, 1.0f); }        // a use after free
  cudaStreamSynchronize(s);
  printf("end: %s\n", cudaGetErrorName(cudaGetLastError()));
  return 0;
}
