// CUDA graphs: one built by stream capture (a fork into a second stream and a join), one built node
// by node (memset, 3D copy, kernel and host nodes), launched several times; a kernel node's
// parameters changed in the instance; a kernel launched by its address.
#include <cstdio>

__global__ void scale(float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
__global__ void add(float* x, const float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += y[i];
}
void CUDART_CB count(void* p) { ++*static_cast<int*>(p); }

int main() {
  const int n = 1000;
  float h[n], *x, *y;
  cudaMalloc(&x, n * sizeof(float));
  cudaMalloc(&y, n * sizeof(float));
  for (int i = 0; i < n; ++i) h[i] = float(i);
  int calls = 0, bad = 0;

  // Capture: x = i; y = 1 (in the second stream); x = 2 * x + y.
  cudaStream_t s1, s2;
  cudaStreamCreate(&s1);
  cudaStreamCreate(&s2);
  cudaEvent_t fork, join;
  cudaEventCreate(&fork);
  cudaEventCreate(&join);
  cudaGraph_t g;
  cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal);
  cudaEventRecord(fork, s1);
  cudaStreamWaitEvent(s2, fork, 0);
  cudaMemcpyAsync(x, h, n * sizeof(float), cudaMemcpyHostToDevice, s1);
  cudaMemsetAsync(y, 0, n * sizeof(float), s2);
  scale<<<4, 256, 0, s2>>>(y, 0.f, n);
  cudaEventRecord(join, s2);
  scale<<<4, 256, 0, s1>>>(x, 2.f, n);
  cudaStreamWaitEvent(s1, join, 0);
  add<<<4, 256, 0, s1>>>(x, y, n);
  cudaLaunchHostFunc(s1, count, &calls);
  cudaStreamEndCapture(s1, &g);
  size_t nodes = 0;
  cudaGraphGetNodes(g, nullptr, &nodes);
  printf("captured %zu nodes, host function called %d times before a launch\n", nodes, calls);
  cudaGraphExec_t e;
  cudaGraphInstantiate(&e, g, nullptr, nullptr, 0);
  for (int k = 0; k < 3; ++k) cudaGraphLaunch(e, s1);
  cudaStreamSynchronize(s1);
  float out[n];
  cudaMemcpy(out, x, sizeof out, cudaMemcpyDeviceToHost);
  printf("after 3 launches: x[10] = %g, host function called %d times\n", out[10], calls);
  bad += out[10] != 20.f || calls != 3 || nodes != 6;

  // Node by node: y = 3 (memset of 4-byte elements), x = i (3D copy), x *= 0.5, a host node.
  cudaGraph_t m;
  cudaGraphCreate(&m, 0);
  float three = 3.f;
  cudaMemsetParams ms = {0};
  ms.dst = y; ms.value = *reinterpret_cast<unsigned*>(&three); ms.elementSize = 4; ms.width = n; ms.height = 1;
  cudaMemcpy3DParms cp = {0};
  cp.srcPtr = make_cudaPitchedPtr(h, n * sizeof(float), n, 1);
  cp.dstPtr = make_cudaPitchedPtr(x, n * sizeof(float), n, 1);
  cp.extent = make_cudaExtent(n * sizeof(float), 1, 1);
  cp.kind = cudaMemcpyHostToDevice;
  cudaGraphNode_t set, copy, kern, host;
  cudaGraphAddMemsetNode(&set, m, nullptr, 0, &ms);
  cudaGraphAddMemcpyNode(&copy, m, nullptr, 0, &cp);
  float half = 0.5f;
  int count_n = n;
  void* args[] = {&x, &half, &count_n};
  cudaKernelNodeParams kp = {0};
  kp.func = (void*)scale; kp.gridDim = dim3(4); kp.blockDim = dim3(256); kp.kernelParams = args;
  cudaGraphAddKernelNode(&kern, m, &copy, 1, &kp);
  cudaHostNodeParams hp = {count, &calls};
  cudaGraphNode_t before_host[] = {set, kern};
  cudaGraphAddHostNode(&host, m, before_host, 2, &hp);
  cudaGraphExec_t me;
  cudaGraphInstantiate(&me, m, 0);
  cudaGraphLaunch(me, 0);
  cudaMemcpy(out, x, sizeof out, cudaMemcpyDeviceToHost);
  float ys[n];
  cudaMemcpy(ys, y, sizeof ys, cudaMemcpyDeviceToHost);
  printf("built graph: x[10] = %g, y[999] = %g\n", out[10], ys[999]);
  bad += out[10] != 5.f || ys[999] != 3.f || calls != 4;
  float ten = 10.f;
  void* args10[] = {&x, &ten, &count_n};
  kp.kernelParams = args10;
  cudaGraphExecKernelNodeSetParams(me, kern, &kp);
  cudaGraphLaunch(me, 0);
  cudaMemcpy(out, x, sizeof out, cudaMemcpyDeviceToHost);
  printf("with the kernel node's scale set to 10: x[10] = %g\n", out[10]);
  bad += out[10] != 100.f;

  // A kernel by its address.
  void* args2[] = {&x, &y, &count_n};
  cudaLaunchKernel((const void*)add, dim3(4), dim3(256), args2, 0, 0);
  cudaMemcpy(out, x, sizeof out, cudaMemcpyDeviceToHost);
  printf("cudaLaunchKernel by address: x[10] = %g\n", out[10]);
  bad += out[10] != 103.f;

  cudaGraphExecDestroy(e);
  cudaGraphExecDestroy(me);
  cudaGraphDestroy(g);
  cudaGraphDestroy(m);
  cudaFree(x);
  cudaFree(y);
  printf(bad ? "FAILED\n" : "PASSED\n");
  return bad;
}
