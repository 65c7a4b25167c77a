// labkit_graphs.h -- CUDA graphs, 3D copies and launches of a kernel by its address, for the runtime API
// of a whole program (labkit_runtime_api.h includes it at its end).
//
// A graph is built by stream capture (cudaStreamBeginCapture ... cudaStreamEndCapture: the work issued
// to the capturing stream, and to the streams that wait for its events, becomes nodes instead of being
// done) or node by node (cudaGraphAddKernelNode, ...MemcpyNode, ...MemsetNode, ...HostNode,
// ...EmptyNode, cudaGraphAddDependencies).  cudaGraphInstantiate orders the nodes by their dependencies
// (the order they were added in where it is free); cudaGraphLaunch does their work in that order, one
// valid schedule of the graph, as a launch does its grid at once.  A kernel node names its kernel by
// address (void*): the launch rewrite registers every kernel a program defines that is not a template
// (program_source.py), so that its parameters' types are known; a template kernel's instance cannot
// be a kernel node here, and is reported by name.
//
// Memory nodes (cudaGraphAddMemAllocNode, cudaGraphAddMemFreeNode, cudaMallocAsync and cudaFreeAsync in a
// capturing stream) allocate at a fixed address when a launch reaches them.  Conditional nodes (if, while,
// switch) run their body graphs by the value kernels set.  Not modelled (refused before compiling,
// program_source.py): event and child-graph nodes, device-side graph launches.
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <string>

// --- Kernels by address --------------------------------------------------------------------------
namespace labkit {
namespace rt {
using MakeLaunch = std::function<cudaError_t(cudaStream_t)> (*)(const void* k, dim3 grid, dim3 block, size_t shared,
                                                              void** args, const char* name, bool cooperative);
struct RegisteredKernel { const char* name; MakeLaunch make; };
inline std::map<const void*, RegisteredKernel>& kernels() {
  static auto* m = new std::map<const void*, RegisteredKernel>();
  return *m;
}
// A launch of k with the parameters' values read now, for any stream later.
template <class... P>
inline std::function<cudaError_t(cudaStream_t)> make_launch(const void* k, dim3 grid, dim3 block, size_t shared,
                                                            void** args, const char* name, bool cooperative) {
  auto fn = reinterpret_cast<void (*)(P...)>(const_cast<void*>(k));
  auto values = read_args<P...>(args, std::index_sequence_for<P...>{});
  return [fn, values, grid, block, shared, name, cooperative](cudaStream_t s) {
    return launch_values(fn, LaunchSpec{name, grid, block, shared, s, "", 0, cooperative}, values);
  };
}
template <class... P> inline bool register_kernel(void (*k)(P...), const char* name) {
  kernels()[reinterpret_cast<const void*>(k)] = RegisteredKernel{name, &make_launch<P...>};
  return true;
}
inline const RegisteredKernel* registered(const void* k, const char* call) {
  auto it = kernels().find(k);
  if (it != kernels().end()) return &it->second;
  say("%s: %p is not the address of a kernel the program defines (a template kernel's instance, such as "
      "(void*)kernel<float>, cannot be launched by its address on the CPU executor: launch it with <<<>>>)", call, k);
  fail(cudaErrorInvalidDeviceFunction);
  return nullptr;
}
}  // namespace rt
}  // namespace labkit

namespace labkit {
namespace rt {
// A launch of a kernel given by its address (``call`` names the API function in errors): recorded
// into the stream's graph while it captures, else run.
inline cudaError_t launch_by_address(const void* k, dim3 grid, dim3 block, void** args, size_t shared,
                                     cudaStream_t stream, const char* call, bool cooperative) {
  const auto* r = registered(k, call);
  if (!r) return cudaErrorInvalidDeviceFunction;
  auto launch = r->make(k, grid, block, shared, args, r->name, cooperative);
  if (record(stream, cudaGraphNodeTypeKernel, [=] { return launch(stream); })) return cudaSuccess;
  return launch(stream);
}
}  // namespace rt
}  // namespace labkit

// cudaLaunchKernel((void*)kernel, grid, block, args, shared, stream): the kernel by its address.
inline cudaError_t cudaLaunchKernel(const void* k, dim3 grid, dim3 block, void** args, size_t shared = 0,
                                    cudaStream_t stream = 0) {
  LABKIT_STICKY();
  return ::labkit::rt::launch_by_address(k, grid, block, args, shared, stream, "cudaLaunchKernel", false);
}
// cudaLaunchCooperativeKernel((void*)kernel, ...): the same, every block resident at once (grid syncs).
inline cudaError_t cudaLaunchCooperativeKernel(const void* k, dim3 grid, dim3 block, void** args, size_t shared = 0,
                                               cudaStream_t stream = 0) {
  LABKIT_STICKY();
  return ::labkit::rt::launch_by_address(k, grid, block, args, shared, stream, "cudaLaunchCooperativeKernel", true);
}

// --- 3D copies (linear memory) -------------------------------------------------------------------------
struct cudaArray;
typedef cudaArray* cudaArray_t;
struct cudaPos { size_t x, y, z; };
struct cudaExtent { size_t width, height, depth; };
struct cudaPitchedPtr { void* ptr; size_t pitch, xsize, ysize; };
struct cudaMemcpy3DParms {
  cudaArray_t srcArray; cudaPos srcPos; cudaPitchedPtr srcPtr;
  cudaArray_t dstArray; cudaPos dstPos; cudaPitchedPtr dstPtr;
  cudaExtent extent; cudaMemcpyKind kind;
};
inline cudaPos make_cudaPos(size_t x, size_t y, size_t z) { return cudaPos{x, y, z}; }
inline cudaExtent make_cudaExtent(size_t w, size_t h, size_t d) { return cudaExtent{w, h, d}; }
inline cudaPitchedPtr make_cudaPitchedPtr(void* d, size_t p, size_t xsz, size_t ysz) { return cudaPitchedPtr{d, p, xsz, ysz}; }

inline cudaError_t cudaMalloc3D(cudaPitchedPtr* p, cudaExtent e, LABKIT_SITE) {
  size_t pitch = 0;
  cudaError_t r = cudaMallocPitch(&p->ptr, &pitch, e.width, std::max<size_t>(e.height, 1) * std::max<size_t>(e.depth, 1),
                                  labkit_file, labkit_line);
  p->pitch = pitch;
  p->xsize = e.width;
  p->ysize = e.height;
  return r;
}
// Row by row: each row is a copy of extent.width bytes, checked as cudaMemcpy checks one.
inline cudaError_t cudaMemcpy3D(const cudaMemcpy3DParms* p, LABKIT_SITE) {
  LABKIT_STICKY();
  if (p->srcArray || p->dstArray) {
    ::labkit::rt::say("%s:%d: cudaMemcpy3D: CUDA arrays are not modelled; copy between pitched pointers", labkit_file,
                      labkit_line);
    return ::labkit::rt::fail(cudaErrorInvalidValue);
  }
  const cudaExtent e = p->extent;
  for (size_t z = 0; z < std::max<size_t>(e.depth, 1); ++z)
    for (size_t y = 0; y < std::max<size_t>(e.height, 1); ++y) {
      char* dst = static_cast<char*>(p->dstPtr.ptr) +
                  ((p->dstPos.z + z) * p->dstPtr.ysize + p->dstPos.y + y) * p->dstPtr.pitch + p->dstPos.x;
      const char* src = static_cast<const char*>(p->srcPtr.ptr) +
                        ((p->srcPos.z + z) * p->srcPtr.ysize + p->srcPos.y + y) * p->srcPtr.pitch + p->srcPos.x;
      cudaError_t r = ::labkit::rt::copy(dst, src, e.width, p->kind, "cudaMemcpy3D", labkit_file, labkit_line);
      if (r != cudaSuccess) return r;
    }
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy3DAsync(const cudaMemcpy3DParms* p, cudaStream_t s = 0, LABKIT_SITE) {
  cudaMemcpy3DParms copy = *p;
  if (::labkit::rt::record(s, cudaGraphNodeTypeMemcpy, [=] { return cudaMemcpy3D(&copy, labkit_file, labkit_line); }))
    return cudaSuccess;
  return cudaMemcpy3D(p, labkit_file, labkit_line);
}
// Slice by slice, row by row: each row's extent.width bytes set as cudaMemset sets them.
inline cudaError_t cudaMemset3D(cudaPitchedPtr p, int v, cudaExtent e, LABKIT_SITE) {
  for (size_t z = 0; z < e.depth; ++z) {
    cudaError_t r = cudaMemset2D(static_cast<char*>(p.ptr) + z * p.ysize * p.pitch, p.pitch, v, e.width, e.height,
                                 labkit_file, labkit_line);
    if (r != cudaSuccess) return r;
  }
  return cudaSuccess;
}
inline cudaError_t cudaMemset3DAsync(cudaPitchedPtr p, int v, cudaExtent e, cudaStream_t s = 0, LABKIT_SITE) {
  if (::labkit::rt::record(s, cudaGraphNodeTypeMemset, [=] { return cudaMemset3D(p, v, e, labkit_file, labkit_line); }))
    return cudaSuccess;
  return cudaMemset3D(p, v, e, labkit_file, labkit_line);
}

// --- Graphs ------------------------------------------------------------------------------------------
// gridDim and blockDim are labkit_gridDim and labkit_blockDim here: the launch rewrite renames a member
// access `params.gridDim` so, since the names are the executor's macros for kernels.
struct cudaKernelNodeParams {
  void* func;
  dim3 labkit_gridDim, labkit_blockDim;
  unsigned int sharedMemBytes;
  void** kernelParams;
  void** extra;
};
struct cudaMemsetParams { void* dst; size_t pitch; unsigned int value, elementSize; size_t width, height; };
struct cudaHostNodeParams { cudaHostFn_t fn; void* userData; };
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal = 0, cudaStreamCaptureModeThreadLocal = 1,
                             cudaStreamCaptureModeRelaxed = 2 };
enum cudaStreamCaptureStatus { cudaStreamCaptureStatusNone = 0, cudaStreamCaptureStatusActive = 1,
                               cudaStreamCaptureStatusInvalidated = 2 };
enum cudaGraphExecUpdateResult { cudaGraphExecUpdateSuccess = 0, cudaGraphExecUpdateError = 1,
                                 cudaGraphExecUpdateErrorTopologyChanged = 2, cudaGraphExecUpdateErrorNodeTypeChanged = 3,
                                 cudaGraphExecUpdateErrorFunctionChanged = 4, cudaGraphExecUpdateErrorParametersChanged = 5,
                                 cudaGraphExecUpdateErrorNotSupported = 6 };
struct cudaGraphExecUpdateResultInfo { cudaGraphExecUpdateResult result; cudaGraphNode_t errorNode, errorFromNode; };
#define cudaGraphInstantiateFlagAutoFreeOnLaunch 1
#define cudaGraphInstantiateFlagUpload 2
#define cudaGraphInstantiateFlagUseNodePriority 8

// An instantiated graph: its nodes' work in an order their dependencies allow.  Each step keeps the
// node it came from (only compared: the graph may be destroyed once instantiated), for the calls that
// change one node's parameters, and its type.
struct CUgraphExec_st {
  struct Step { CUgraphNode_st* node; cudaGraphNodeType type; std::function<cudaError_t()> run; };
  std::vector<Step> steps;
  std::vector<unsigned long long> conditions;   // the graph's conditional handles, set to their defaults at each launch
};
typedef CUgraphExec_st* cudaGraphExec_t;
struct cudaGraphEdgeData { unsigned char from_port, to_port, type, reserved[5]; };   // only the default edge here

namespace labkit {
namespace rt {
inline std::vector<CUgraphNode_st*> deps_of(const cudaGraphNode_t* deps, size_t n) {
  return deps ? std::vector<CUgraphNode_st*>(deps, deps + n) : std::vector<CUgraphNode_st*>();
}
inline std::function<cudaError_t()> kernel_work(const cudaKernelNodeParams* p, const char* call) {
  const RegisteredKernel* r = registered(p->func, call);
  if (!r) return nullptr;
  auto launch = r->make(p->func, p->labkit_gridDim, p->labkit_blockDim, p->sharedMemBytes, p->kernelParams, r->name,
                        false);
  return [launch] { return launch(nullptr); };
}
inline cudaError_t memset_elements(const cudaMemsetParams p) {
  LABKIT_STICKY();
  if (p.elementSize != 1 && p.elementSize != 2 && p.elementSize != 4) {
    say("a memset node's elementSize is 1, 2 or 4 bytes, not %u", p.elementSize);
    return fail(cudaErrorInvalidValue);
  }
  const size_t rows = std::max<size_t>(p.height, 1), row_bytes = p.width * p.elementSize;
  for (size_t y = 0; y < rows; ++y) {
    char* row = static_cast<char*>(p.dst) + y * p.pitch;
    if (row_bytes && check_device_range(row, row_bytes, "a memset node", "destination", "", 0) != cudaSuccess)
      return st().last;
    unguard_all();
    for (size_t x = 0; x < p.width; ++x) std::memcpy(row + x * p.elementSize, &p.value, p.elementSize);
  }
  return cudaSuccess;
}
// The nodes in an order their dependencies allow, the order they were added in where it is free.
inline bool ordered(const CUgraph_st* g, std::vector<CUgraphNode_st*>& out) {
  std::vector<CUgraphNode_st*> done;
  out.clear();
  while (out.size() < g->nodes.size()) {
    bool progress = false;
    for (CUgraphNode_st* n : g->nodes) {
      if (std::find(out.begin(), out.end(), n) != out.end()) continue;
      bool ready = true;
      for (CUgraphNode_st* d : n->deps) ready = ready && std::find(out.begin(), out.end(), d) != out.end();
      if (ready) { out.push_back(n); progress = true; }
    }
    if (!progress) return false;
  }
  return true;
}
}  // namespace rt
}  // namespace labkit

inline cudaError_t cudaGraphCreate(cudaGraph_t* g, unsigned int = 0) { *g = new CUgraph_st(); return cudaSuccess; }
inline cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t* node, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n,
                                          const cudaKernelNodeParams* p) {
  auto work = ::labkit::rt::kernel_work(p, "cudaGraphAddKernelNode");
  if (!work) return cudaErrorInvalidDeviceFunction;
  *node = ::labkit::rt::add_node(g, cudaGraphNodeTypeKernel, work, ::labkit::rt::deps_of(deps, n));
  return cudaSuccess;
}
inline cudaError_t cudaGraphKernelNodeSetParams(cudaGraphNode_t node, const cudaKernelNodeParams* p) {
  auto work = ::labkit::rt::kernel_work(p, "cudaGraphKernelNodeSetParams");
  if (!work) return cudaErrorInvalidDeviceFunction;
  node->run = work;
  return cudaSuccess;
}
inline cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t* node, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n,
                                          const cudaMemcpy3DParms* p, LABKIT_SITE) {
  cudaMemcpy3DParms copy = *p;
  *node = ::labkit::rt::add_node(g, cudaGraphNodeTypeMemcpy, [=] { return cudaMemcpy3D(&copy, labkit_file, labkit_line); },
                                 ::labkit::rt::deps_of(deps, n));
  return cudaSuccess;
}
inline cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t* node, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n,
                                            void* dst, const void* src, size_t count, cudaMemcpyKind kind, LABKIT_SITE) {
  *node = ::labkit::rt::add_node(g, cudaGraphNodeTypeMemcpy, [=] {
    return ::labkit::rt::copy(dst, src, count, kind, "a memcpy node", labkit_file, labkit_line); },
    ::labkit::rt::deps_of(deps, n));
  return cudaSuccess;
}
inline cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t* node, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n,
                                          const cudaMemsetParams* p) {
  cudaMemsetParams copy = *p;
  *node = ::labkit::rt::add_node(g, cudaGraphNodeTypeMemset, [=] { return ::labkit::rt::memset_elements(copy); },
                                 ::labkit::rt::deps_of(deps, n));
  return cudaSuccess;
}
inline cudaError_t cudaGraphAddHostNode(cudaGraphNode_t* node, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n,
                                        const cudaHostNodeParams* p) {
  cudaHostNodeParams copy = *p;
  *node = ::labkit::rt::add_node(g, cudaGraphNodeTypeHost, [=] { copy.fn(copy.userData); return cudaSuccess; },
                                 ::labkit::rt::deps_of(deps, n));
  return cudaSuccess;
}
// Memory nodes (see graph_reserve in labkit_runtime_api.h): the address is the node's from its making.
enum cudaMemAllocationType { cudaMemAllocationTypeInvalid = 0, cudaMemAllocationTypePinned = 1 };
enum cudaMemAllocationHandleType { cudaMemHandleTypeNone = 0, cudaMemHandleTypePosixFileDescriptor = 1,
                                   cudaMemHandleTypeWin32 = 2, cudaMemHandleTypeWin32Kmt = 4, cudaMemHandleTypeFabric = 8 };
struct cudaMemPoolProps {
  cudaMemAllocationType allocType; cudaMemAllocationHandleType handleTypes; cudaMemLocation location;
  void* win32SecurityAttributes; size_t maxSize; unsigned short usage; unsigned char reserved[54];
};
enum cudaMemAccessFlags { cudaMemAccessFlagsProtNone = 0, cudaMemAccessFlagsProtRead = 1, cudaMemAccessFlagsProtReadWrite = 3 };
struct cudaMemAccessDesc { cudaMemLocation location; cudaMemAccessFlags flags; };
struct cudaMemAllocNodeParams {
  cudaMemPoolProps poolProps; const cudaMemAccessDesc* accessDescs; size_t accessDescCount; size_t bytesize; void* dptr;
};
enum cudaGraphMemAttributeType { cudaGraphMemAttrUsedMemCurrent = 0, cudaGraphMemAttrUsedMemHigh = 1,
                                 cudaGraphMemAttrReservedMemCurrent = 2, cudaGraphMemAttrReservedMemHigh = 3 };
inline cudaError_t cudaGraphAddMemAllocNode(cudaGraphNode_t* node, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n,
                                            cudaMemAllocNodeParams* p, LABKIT_SITE) {
  if (!p || p->bytesize == 0 || p->poolProps.location.type != cudaMemLocationTypeDevice ||
      p->poolProps.location.id != 0) {
    ::labkit::rt::say("%s:%d: cudaGraphAddMemAllocNode: the parameters name no bytes, or a location other than device 0 "
                      "(the CPU executor models one device)", labkit_file, labkit_line);
    return ::labkit::rt::fail(cudaErrorInvalidValue);
  }
  const size_t bytes = p->bytesize;
  void* m = ::labkit::rt::graph_reserve(bytes);
  if (!m) return ::labkit::rt::fail(cudaErrorMemoryAllocation);
  p->dptr = m;
  const char* file = labkit_file;
  const int line = labkit_line;
  *node = ::labkit::rt::add_node(g, cudaGraphNodeTypeMemAlloc, [=] { return ::labkit::rt::graph_allocate(m, bytes, file, line); },
                                 ::labkit::rt::deps_of(deps, n));
  return cudaSuccess;
}
inline cudaError_t cudaGraphAddMemFreeNode(cudaGraphNode_t* node, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n,
                                           void* p, LABKIT_SITE) {
  *node = ::labkit::rt::add_node(g, cudaGraphNodeTypeMemFree, [=] { return cudaFree(p, labkit_file, labkit_line); },
                                 ::labkit::rt::deps_of(deps, n));
  return cudaSuccess;
}
inline cudaError_t cudaDeviceGetGraphMemAttribute(int device, cudaGraphMemAttributeType a, void* v) {
  if (device != 0) return ::labkit::rt::fail(cudaErrorInvalidDevice);
  auto& s = ::labkit::rt::st();
  std::lock_guard<std::recursive_mutex> g(s.mu);
  // What the graphs use is what is reserved for them here.
  const size_t values[] = {s.graph_used, s.graph_used_high, s.graph_used, s.graph_used_high};
  if (unsigned(a) > 3u) return ::labkit::rt::fail(cudaErrorInvalidValue);
  *static_cast<unsigned long long*>(v) = values[a];
  return cudaSuccess;
}
// Only the peaks may be set, and only to 0: they restart from the amounts now.
inline cudaError_t cudaDeviceSetGraphMemAttribute(int device, cudaGraphMemAttributeType a, void* v) {
  if (device != 0) return ::labkit::rt::fail(cudaErrorInvalidDevice);
  if ((a != cudaGraphMemAttrUsedMemHigh && a != cudaGraphMemAttrReservedMemHigh) || *static_cast<unsigned long long*>(v))
    return ::labkit::rt::fail(cudaErrorInvalidValue);
  auto& s = ::labkit::rt::st();
  std::lock_guard<std::recursive_mutex> g(s.mu);
  s.graph_used_high = s.graph_used;
  return cudaSuccess;
}
// The memory of allocation nodes that are freed now stops counting as the graphs' (a later launch
// allocates it again, at the same address).
inline cudaError_t cudaDeviceGraphMemTrim(int device) {
  if (device != 0) return ::labkit::rt::fail(cudaErrorInvalidDevice);
  auto& s = ::labkit::rt::st();
  std::lock_guard<std::recursive_mutex> g(s.mu);
  for (auto& b : s.graph_backed)
    if (b.second && !::labkit::rt::find(s.live, reinterpret_cast<const void*>(b.first), nullptr)) {
      b.second = false;
      s.graph_used -= s.graph_storage[b.first].size;
    }
  return cudaSuccess;
}
inline cudaError_t cudaGraphAddEmptyNode(cudaGraphNode_t* node, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n);
// --- Conditional nodes -------------------------------------------------------------------------------
// A handle names a value that kernels set (cudaGraphSetConditional) and a conditional node reads when
// its turn comes: an if node runs its first body graph when the value is not 0 (else its second, if
// it has two), a while node runs its body while the value is not 0 (checked before each run), a switch
// node runs body number `value` if there is one.  With cudaGraphCondAssignDefault the value is reset to
// the handle's default at the start of each launch of its graph; otherwise it keeps the last value set.
typedef unsigned long long cudaGraphConditionalHandle;
enum cudaGraphConditionalNodeType { cudaGraphCondTypeIf = 0, cudaGraphCondTypeWhile = 1, cudaGraphCondTypeSwitch = 2 };
#define cudaGraphCondAssignDefault 1
struct cudaConditionalNodeParams {
  cudaGraphConditionalHandle handle; cudaGraphConditionalNodeType type; unsigned int size; cudaGraph_t* phGraph_out;
  void* ctx;
};
namespace labkit {
namespace rt {
struct Condition { std::atomic<unsigned> value{0}; unsigned dflt = 0; bool assign_default = false; };
inline std::deque<Condition>& conditions() { static auto* c = new std::deque<Condition>(); return *c; }
inline Condition* condition(cudaGraphConditionalHandle h) {
  auto& c = conditions();
  return h >= 1 && h <= c.size() ? &c[h - 1] : nullptr;
}
inline void reset_conditions(const std::vector<unsigned long long>& handles) {
  for (auto h : handles)
    if (Condition* c = condition(h))
      if (c->assign_default) c->value = c->dflt;
}
// A graph's nodes as one piece of work, in an order their dependencies allow, fixed now.
inline std::function<cudaError_t()> instantiate_body(CUgraph_st* g) {
  std::vector<CUgraphNode_st*> order;
  std::vector<std::function<cudaError_t()>> steps;
  if (!ordered(g, order)) return [] { say("a conditional node's body graph: its dependencies form a cycle"); return fail(cudaErrorInvalidValue); };
  for (auto* n : order) steps.push_back(n->instantiate ? n->instantiate() : n->run);
  return [steps] {
    for (auto& step : steps) {
      cudaError_t e = step();
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  };
}
}  // namespace rt
}  // namespace labkit
inline cudaError_t cudaGraphConditionalHandleCreate(cudaGraphConditionalHandle* h, cudaGraph_t g,
                                                    unsigned int default_value = 0, unsigned int flags = 0) {
  auto& c = ::labkit::rt::conditions();
  c.emplace_back();
  c.back().value = default_value;
  c.back().dflt = default_value;
  c.back().assign_default = flags & cudaGraphCondAssignDefault;
  *h = c.size();
  g->conditions.push_back(*h);
  return cudaSuccess;
}
// Called by a kernel (device code): the value the conditional nodes of the handle read next.
inline void cudaGraphSetConditional(cudaGraphConditionalHandle h, unsigned int value) {
  if (auto* c = ::labkit::rt::condition(h)) c->value = value;
  else ::labkit::fail_from_fiber("cudaGraphSetConditional: " + std::to_string(h) + " is not a conditional handle "
                                 "(cudaGraphConditionalHandleCreate)");
}
inline cudaError_t labkit_add_conditional_node(cudaGraphNode_t* node, cudaGraph_t g, const cudaGraphNode_t* deps,
                                               size_t n, cudaConditionalNodeParams* p) {
  const unsigned most = p->type == cudaGraphCondTypeIf ? 2 : p->type == cudaGraphCondTypeWhile ? 1 : 0xffffffffu;
  if (!::labkit::rt::condition(p->handle) || p->size < 1 || p->size > most) {
    ::labkit::rt::say("cudaGraphAddNode: a conditional node needs a handle from cudaGraphConditionalHandleCreate and a "
                      "size of 1 (while), 1 or 2 (if), or at least 1 (switch); got handle %llu, size %u",
                      p->handle, p->size);
    return ::labkit::rt::fail(cudaErrorInvalidValue);
  }
  auto* bodies = new cudaGraph_t[p->size];   // the node's own graphs, as CUDA keeps them with the node
  for (unsigned i = 0; i < p->size; ++i) bodies[i] = new CUgraph_st();
  p->phGraph_out = bodies;
  const auto type = p->type;
  const auto handle = p->handle;
  const unsigned size = p->size;
  *node = ::labkit::rt::add_node(g, cudaGraphNodeTypeConditional, [] { return cudaSuccess; }, ::labkit::rt::deps_of(deps, n));
  (*node)->instantiate = [=]() -> std::function<cudaError_t()> {
    std::vector<std::function<cudaError_t()>> body;
    for (unsigned i = 0; i < size; ++i) body.push_back(::labkit::rt::instantiate_body(bodies[i]));
    return [=]() -> cudaError_t {
      ::labkit::rt::Condition* c = ::labkit::rt::condition(handle);
      if (type == cudaGraphCondTypeWhile) {
        while (c->value != 0) {
          cudaError_t e = body[0]();
          if (e != cudaSuccess) return e;
        }
        return cudaSuccess;
      }
      const unsigned v = c->value;
      if (type == cudaGraphCondTypeIf) return v != 0 ? body[0]() : size == 2 ? body[1]() : cudaSuccess;
      return v < size ? body[v]() : cudaSuccess;
    };
  };
  return cudaSuccess;
}
// cudaGraphAddNode's parameters: one member per kind of node (a union in CUDA; members of their own here).
struct cudaGraphNodeParams {
  cudaGraphNodeType type;
  int reserved0[3];
  cudaKernelNodeParams kernel;
  cudaMemsetParams memset;
  cudaHostNodeParams host;
  cudaMemAllocNodeParams alloc;
  struct { void* dptr; } free;
  cudaConditionalNodeParams conditional;
  long long reserved2;
};
inline cudaError_t cudaGraphAddNode(cudaGraphNode_t* node, cudaGraph_t g, const cudaGraphNode_t* deps,
                                    const cudaGraphEdgeData*, size_t n, cudaGraphNodeParams* p) {
  switch (p->type) {
    case cudaGraphNodeTypeKernel: return cudaGraphAddKernelNode(node, g, deps, n, &p->kernel);
    case cudaGraphNodeTypeMemset: return cudaGraphAddMemsetNode(node, g, deps, n, &p->memset);
    case cudaGraphNodeTypeHost: return cudaGraphAddHostNode(node, g, deps, n, &p->host);
    case cudaGraphNodeTypeEmpty: return cudaGraphAddEmptyNode(node, g, deps, n);
    case cudaGraphNodeTypeMemAlloc: return cudaGraphAddMemAllocNode(node, g, deps, n, &p->alloc);
    case cudaGraphNodeTypeMemFree: return cudaGraphAddMemFreeNode(node, g, deps, n, p->free.dptr);
    case cudaGraphNodeTypeConditional: return labkit_add_conditional_node(node, g, deps, n, &p->conditional);
    default:
      ::labkit::rt::say("cudaGraphAddNode: nodes of type %d are not modelled by the CPU executor (kernel, memset, host, "
                        "empty, memory and conditional nodes are)", int(p->type));
      return ::labkit::rt::fail(cudaErrorNotSupported);
  }
}
inline cudaError_t cudaGraphAddNode(cudaGraphNode_t* node, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n,
                                    cudaGraphNodeParams* p) {
  return cudaGraphAddNode(node, g, deps, nullptr, n, p);
}
inline cudaError_t cudaGraphAddEmptyNode(cudaGraphNode_t* node, cudaGraph_t g, const cudaGraphNode_t* deps, size_t n) {
  *node = ::labkit::rt::add_node(g, cudaGraphNodeTypeEmpty, [] { return cudaSuccess; }, ::labkit::rt::deps_of(deps, n));
  return cudaSuccess;
}
inline cudaError_t cudaGraphAddDependencies(cudaGraph_t, const cudaGraphNode_t* from, const cudaGraphNode_t* to,
                                            size_t n) {
  for (size_t i = 0; i < n; ++i) to[i]->deps.push_back(from[i]);
  return cudaSuccess;
}
inline cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t* nodes, size_t* n) {
  if (!nodes) { *n = g->nodes.size(); return cudaSuccess; }
  *n = std::min(*n, g->nodes.size());
  for (size_t i = 0; i < *n; ++i) nodes[i] = g->nodes[i];
  return cudaSuccess;
}
inline cudaError_t cudaGraphGetRootNodes(cudaGraph_t g, cudaGraphNode_t* nodes, size_t* n) {
  std::vector<CUgraphNode_st*> roots;
  for (auto* x : g->nodes)
    if (x->deps.empty()) roots.push_back(x);
  if (!nodes) { *n = roots.size(); return cudaSuccess; }
  *n = std::min(*n, roots.size());
  for (size_t i = 0; i < *n; ++i) nodes[i] = roots[i];
  return cudaSuccess;
}
inline cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* t) { *t = node->type; return cudaSuccess; }
inline cudaError_t cudaGraphClone(cudaGraph_t* out, cudaGraph_t g) {
  auto* c = new CUgraph_st();
  std::map<CUgraphNode_st*, CUgraphNode_st*> twin;
  for (auto* n : g->nodes) twin[n] = ::labkit::rt::add_node(c, n->type, n->run, {});
  for (auto* n : g->nodes)
    for (auto* d : n->deps) twin[n]->deps.push_back(twin[d]);
  *out = c;
  return cudaSuccess;
}
inline cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  if (!g) return ::labkit::rt::fail(cudaErrorInvalidResourceHandle);
  for (auto* n : g->nodes) delete n;
  delete g;
  return cudaSuccess;
}
inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t g, unsigned long long = 0) {
  std::vector<CUgraphNode_st*> order;
  if (!::labkit::rt::ordered(g, order)) {
    ::labkit::rt::say("cudaGraphInstantiate: the graph's dependencies form a cycle");
    return ::labkit::rt::fail(cudaErrorInvalidValue);
  }
  auto* e = new CUgraphExec_st();
  for (auto* n : order) e->steps.push_back({n, n->type, n->instantiate ? n->instantiate() : n->run});
  e->conditions = g->conditions;
  *exec = e;
  return cudaSuccess;
}
inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t g, cudaGraphNode_t* error_node, char* log,
                                        size_t log_size) {
  if (error_node) *error_node = nullptr;
  if (log && log_size) log[0] = 0;
  return cudaGraphInstantiate(exec, g, 0ull);
}
inline cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t g, unsigned long long f = 0) {
  return cudaGraphInstantiate(exec, g, f);
}
inline cudaError_t cudaGraphUpload(cudaGraphExec_t, cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  LABKIT_STICKY();
  if (!exec) return ::labkit::rt::fail(cudaErrorInvalidResourceHandle);
  auto steps = exec->steps;
  auto conditions = exec->conditions;
  auto run = [steps, conditions] {
    ::labkit::rt::reset_conditions(conditions);
    for (auto& step : steps) {
      cudaError_t r = step.run();
      if (r != cudaSuccess) return r;
    }
    return cudaSuccess;
  };
  if (::labkit::rt::record(s, cudaGraphNodeTypeGraph, run)) return cudaSuccess;
  return run();
}
inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) { delete exec; return cudaSuccess; }
inline cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                    const cudaKernelNodeParams* p) {
  for (auto& step : exec->steps)
    if (step.node == node) {
      auto work = ::labkit::rt::kernel_work(p, "cudaGraphExecKernelNodeSetParams");
      if (!work) return cudaErrorInvalidDeviceFunction;
      step.run = work;
      return cudaSuccess;
    }
  return ::labkit::rt::fail(cudaErrorInvalidValue);
}
// The graph's work replaces the instance's where the two have the same nodes, of the same types, in the
// same order; otherwise the update fails (the program instantiates the graph anew).
inline cudaGraphExecUpdateResult labkit_graph_exec_update(cudaGraphExec_t exec, cudaGraph_t g) {
  std::vector<CUgraphNode_st*> order;
  if (!::labkit::rt::ordered(g, order) || order.size() != exec->steps.size())
    return cudaGraphExecUpdateErrorTopologyChanged;
  for (size_t i = 0; i < order.size(); ++i)
    if (order[i]->type != exec->steps[i].type) return cudaGraphExecUpdateErrorNodeTypeChanged;
  for (size_t i = 0; i < order.size(); ++i) exec->steps[i] = {order[i], order[i]->type, order[i]->run};
  return cudaGraphExecUpdateSuccess;
}
inline cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t g, cudaGraphNode_t* error_node,
                                       cudaGraphExecUpdateResult* result) {
  cudaGraphExecUpdateResult r = labkit_graph_exec_update(exec, g);
  if (error_node) *error_node = nullptr;
  if (result) *result = r;
  return r == cudaGraphExecUpdateSuccess ? cudaSuccess : ::labkit::rt::fail(cudaErrorGraphExecUpdateFailure);
}
inline cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t g, cudaGraphExecUpdateResultInfo* info) {
  cudaGraphExecUpdateResult r = labkit_graph_exec_update(exec, g);
  if (info) *info = cudaGraphExecUpdateResultInfo{r, nullptr, nullptr};
  return r == cudaGraphExecUpdateSuccess ? cudaSuccess : ::labkit::rt::fail(cudaErrorGraphExecUpdateFailure);
}

// --- Stream capture ------------------------------------------------------------------------------------
inline cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode = cudaStreamCaptureModeGlobal) {
  auto& c = ::labkit::rt::st();
  if (s == nullptr || s == cudaStreamLegacy) {
    ::labkit::rt::say("cudaStreamBeginCapture: the legacy default stream cannot be captured; capture a stream of "
                      "your own (cudaStreamCreate)");
    return ::labkit::rt::fail(cudaErrorStreamCaptureUnsupported);
  }
  if (c.capture) {
    ::labkit::rt::say("cudaStreamBeginCapture: another stream is being captured; the CPU executor captures one "
                      "stream (and those that join it) at a time");
    return ::labkit::rt::fail(cudaErrorIllegalState);
  }
  c.capture = new CUgraph_st();
  c.capture_streams.assign(1, s);
  c.capture_last = nullptr;
  return cudaSuccess;
}
namespace labkit {
namespace rt {
// The one node later work in a capture depends on: the node itself, or an empty node joining several.
inline CUgraphNode_st* join(CUgraph_st* g, const cudaGraphNode_t* deps, size_t n) {
  if (n == 0) return nullptr;
  if (n == 1) return deps[0];
  return add_node(g, cudaGraphNodeTypeEmpty, [] { return cudaSuccess; }, deps_of(deps, n));
}
}  // namespace rt
}  // namespace labkit
// Capture into a graph that exists (a conditional node's body), after the nodes named.
inline cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t* deps,
                                                 const cudaGraphEdgeData*, size_t n,
                                                 cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal) {
  cudaError_t e = cudaStreamBeginCapture(s, mode);
  if (e != cudaSuccess) return e;
  auto& c = ::labkit::rt::st();
  delete c.capture;
  c.capture = g;
  c.capture_last = ::labkit::rt::join(g, deps, n);
  return cudaSuccess;
}
inline cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g) {
  auto& c = ::labkit::rt::st();
  if (!c.capture || c.capture_streams.front() != s) {
    ::labkit::rt::say("cudaStreamEndCapture: the stream is not the one whose capture began (cudaStreamBeginCapture)");
    return ::labkit::rt::fail(cudaErrorStreamCaptureUnmatched);
  }
  if (g) *g = c.capture;
  c.capture = nullptr;
  c.capture_streams.clear();
  c.capture_last = nullptr;
  return cudaSuccess;
}
inline cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
  *status = ::labkit::rt::capturing(s) ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
inline cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, cudaStreamCaptureStatus* status,
                                            unsigned long long* id = nullptr) {
  *status = ::labkit::rt::capturing(s) ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  if (id) *id = 1;
  return cudaSuccess;
}
// The forms that give the graph being captured and the nodes the next work will depend on (one here).
inline cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, cudaStreamCaptureStatus* status, unsigned long long* id,
                                            cudaGraph_t* graph, const cudaGraphNode_t** deps,
                                            const cudaGraphEdgeData** edges, size_t* n) {
  static thread_local cudaGraphNode_t last;
  const bool on = ::labkit::rt::capturing(s);
  auto& c = ::labkit::rt::st();
  if (status) *status = on ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  if (id) *id = 1;
  if (graph) *graph = on ? c.capture : nullptr;
  last = on ? c.capture_last : nullptr;
  if (deps) *deps = &last;
  if (edges) *edges = nullptr;
  if (n) *n = last ? 1 : 0;
  return cudaSuccess;
}
inline cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, cudaStreamCaptureStatus* status, unsigned long long* id,
                                            cudaGraph_t* graph, const cudaGraphNode_t** deps, size_t* n) {
  return cudaStreamGetCaptureInfo(s, status, id, graph, deps, nullptr, n);
}
enum cudaStreamUpdateCaptureDependenciesFlags { cudaStreamAddCaptureDependencies = 0, cudaStreamSetCaptureDependencies = 1 };
inline cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t s, cudaGraphNode_t* deps, const cudaGraphEdgeData*,
                                                       size_t n, unsigned flags) {
  auto& c = ::labkit::rt::st();
  if (!::labkit::rt::capturing(s)) return ::labkit::rt::fail(cudaErrorIllegalState);
  std::vector<cudaGraphNode_t> all(deps, deps + n);
  if (flags == cudaStreamAddCaptureDependencies && c.capture_last) all.push_back(c.capture_last);
  c.capture_last = ::labkit::rt::join(c.capture, all.data(), all.size());
  return cudaSuccess;
}
inline cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t s, cudaGraphNode_t* deps, size_t n, unsigned flags) {
  return cudaStreamUpdateCaptureDependencies(s, deps, nullptr, n, flags);
}
inline cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode*) { return cudaSuccess; }
