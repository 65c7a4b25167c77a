// Conditional graph nodes: if/else and switch nodes choose a body graph by the value a kernel set
// (cudaGraphSetConditional); a while node, built by capture into its body graph, runs the body until a
// kernel sets 0.  Each body kernel appends its tag to a log in device memory.
#include <cstdio>
__device__ int log_len;
__device__ char log_text[64];
__global__ void decide(const int* x, cudaGraphConditionalHandle h) { cudaGraphSetConditional(h, *x); }
__global__ void tag(char c) { log_text[log_len++] = c; }
__global__ void count_down(int* x, cudaGraphConditionalHandle h) {
  log_text[log_len++] = char('0' + *x);
  cudaGraphSetConditional(h, --*x > 0);
}
static void add_tag(cudaGraph_t g, char c) {
  cudaGraphNodeParams p = {cudaGraphNodeTypeKernel};
  void* args[] = {&c};
  p.kernel.func = (void*)tag;
  p.kernel.gridDim = dim3(1);
  p.kernel.blockDim = dim3(1);
  p.kernel.kernelParams = args;
  cudaGraphNode_t n;
  cudaGraphAddNode(&n, g, nullptr, nullptr, 0, &p);
}
// decide(x) -> a conditional node of the type and size given, whose body i logs 'A' + i.
static cudaGraphExec_t chooser(int* x, cudaGraphConditionalNodeType type, unsigned size) {
  cudaGraph_t g;
  cudaGraphCreate(&g, 0);
  cudaGraphConditionalHandle h;
  cudaGraphConditionalHandleCreate(&h, g, 0, cudaGraphCondAssignDefault);
  cudaGraphNodeParams p = {cudaGraphNodeTypeKernel};
  void* args[] = {&x, &h};
  p.kernel.func = (void*)decide;
  p.kernel.gridDim = dim3(1);
  p.kernel.blockDim = dim3(1);
  p.kernel.kernelParams = args;
  cudaGraphNode_t k, c;
  cudaGraphAddNode(&k, g, nullptr, nullptr, 0, &p);
  cudaGraphNodeParams cp = {cudaGraphNodeTypeConditional};
  cp.conditional.handle = h;
  cp.conditional.type = type;
  cp.conditional.size = size;
  cudaGraphAddNode(&c, g, &k, nullptr, 1, &cp);
  for (unsigned i = 0; i < size; ++i) add_tag(cp.conditional.phGraph_out[i], char('A' + i));
  cudaGraphExec_t e;
  cudaGraphInstantiate(&e, g, nullptr, nullptr, 0);
  cudaGraphDestroy(g);
  return e;
}
static void show(const char* what) {
  char text[65] = {};
  int n = 0;
  cudaDeviceSynchronize();
  cudaMemcpyFromSymbol(&n, log_len, sizeof n);
  cudaMemcpyFromSymbol(text, log_text, n);
  printf("%s: %s\n", what, text);
  n = 0;
  cudaMemcpyToSymbol(log_len, &n, sizeof n);
}
int main() {
  int* x;
  cudaMallocManaged(&x, sizeof(int));
  cudaGraphExec_t if_else = chooser(x, cudaGraphCondTypeIf, 2), sw = chooser(x, cudaGraphCondTypeSwitch, 3);
  for (int v : {0, 5}) *x = v, cudaGraphLaunch(if_else, 0);
  show("if/else with 0, 5");
  for (int v : {2, 0, 7, 1}) *x = v, cudaGraphLaunch(sw, 0);
  show("switch with 2, 0, 7, 1");
  // while: count_down, then a while node whose body (captured into it) is count_down again, then 'Z'.
  cudaStream_t s;
  cudaStreamCreate(&s);
  cudaGraph_t g;
  cudaStreamCaptureStatus status;
  const cudaGraphNode_t* deps;
  size_t ndeps;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
  cudaStreamGetCaptureInfo(s, &status, nullptr, &g, &deps, nullptr, &ndeps);
  cudaGraphConditionalHandle h;
  cudaGraphConditionalHandleCreate(&h, g);
  count_down<<<1, 1, 0, s>>>(x, h);
  cudaStreamGetCaptureInfo(s, &status, nullptr, &g, &deps, nullptr, &ndeps);
  cudaGraphNodeParams cp = {cudaGraphNodeTypeConditional};
  cp.conditional.handle = h;
  cp.conditional.type = cudaGraphCondTypeWhile;
  cp.conditional.size = 1;
  cudaGraphNode_t loop;
  cudaGraphAddNode(&loop, g, deps, nullptr, ndeps, &cp);
  cudaStreamUpdateCaptureDependencies(s, &loop, nullptr, 1, cudaStreamSetCaptureDependencies);
  tag<<<1, 1, 0, s>>>('Z');
  cudaStreamEndCapture(s, &g);
  cudaStream_t b;
  cudaStreamCreate(&b);
  cudaStreamBeginCaptureToGraph(b, cp.conditional.phGraph_out[0], nullptr, nullptr, 0, cudaStreamCaptureModeGlobal);
  count_down<<<1, 1, 0, b>>>(x, h);
  cudaStreamEndCapture(b, nullptr);
  cudaGraphExec_t e;
  cudaGraphInstantiate(&e, g, nullptr, nullptr, 0);
  *x = 4;
  cudaGraphLaunch(e, s);
  show("while from 4");
  printf("%s\n", cudaGetErrorName(cudaGetLastError()));
  return 0;
}
