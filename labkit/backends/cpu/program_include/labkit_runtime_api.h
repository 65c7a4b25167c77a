// labkit_runtime_api.h -- the CUDA runtime API of a whole program, on labkit's CPU executor.
//
// A program compiled for the executor (labkit.cuda run) includes this through <cuda_runtime.h>.
// Device memory is host memory that the executor registers (cudaMalloc): every call that takes a
// device pointer looks it up, so that a copy past the end of an allocation, a pointer used after
// cudaFree, or a host pointer handed to a kernel is reported in words ("labkit: ...") before the
// call fails with the error code a GPU gives.  Work is done when it is issued: a launch or an
// asynchronous copy has finished when its call returns, which is one valid schedule of a CUDA
// program.  A program that reads pinned memory that an asynchronous copy writes before it
// synchronises is still caught (see "Asynchronous copies" below).
//
// The device the program sees: one, modelled on an NVIDIA H100 SXM (compute capability 9.0, 132
// SMs, 80 GB); its name says that it is the CPU executor, and cudaDeviceProp has one more field,
// labkitCpuExecutor (1), for a program that wants to know.
#pragma once

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#define __CUDA_RUNTIME_H__ 1
#define __DRIVER_TYPES_H__ 1
#define __CUDA_RUNTIME_API_H__ 1
#define CUDART_VERSION 12040
#define __CUDART_API_VERSION 12040
#define CUDA_VERSION 12040
#define cudaHostAllocDefault 0x00
#define cudaHostAllocPortable 0x01
#define cudaHostAllocMapped 0x02
#define cudaHostAllocWriteCombined 0x04
#define cudaHostRegisterDefault 0x00
#define cudaHostRegisterPortable 0x01
#define cudaHostRegisterMapped 0x02
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaEventInterprocess 0x04
#define cudaDeviceScheduleAuto 0x00
#define cudaDeviceScheduleSpin 0x01
#define cudaDeviceScheduleYield 0x02
#define cudaDeviceScheduleBlockingSync 0x04
#define cudaDeviceBlockingSync 0x04
#define cudaDeviceMapHost 0x08
#define cudaDeviceLmemResizeToMax 0x10
#define cudaMemAttachGlobal 0x01
#define cudaMemAttachHost 0x02
#define cudaMemAttachSingle 0x04
#define CUDART_CB
#define CUDARTAPI
#define cudaCpuDeviceId (-1)
#define cudaInvalidDeviceId (-2)

enum cudaError {
  cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorInitializationError = 3,
  cudaErrorCudartUnloading = 4, cudaErrorInvalidConfiguration = 9, cudaErrorInvalidPitchValue = 12,
  cudaErrorInvalidSymbol = 13, cudaErrorInvalidHostPointer = 16, cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21, cudaErrorInvalidDeviceFunction = 98, cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101, cudaErrorInvalidKernelImage = 200, cudaErrorLaunchMaxDepthExceeded = 210, cudaErrorUnsupportedLimit = 215,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600, cudaErrorIllegalAddress = 700, cudaErrorLaunchOutOfResources = 701, cudaErrorCooperativeLaunchTooLarge = 720,
  cudaErrorLaunchTimeout = 702, cudaErrorSetOnActiveProcess = 708, cudaErrorAssert = 710,
  cudaErrorHostMemoryAlreadyRegistered = 712, cudaErrorHostMemoryNotRegistered = 713,
  cudaErrorLaunchFailure = 719, cudaErrorNotPermitted = 800, cudaErrorNotSupported = 801,
  cudaErrorIllegalState = 401, cudaErrorStreamCaptureUnsupported = 900, cudaErrorStreamCaptureUnmatched = 903,
  cudaErrorGraphExecUpdateFailure = 910, cudaErrorUnknown = 999
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
                      cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4 };
enum cudaFuncCache { cudaFuncCachePreferNone = 0, cudaFuncCachePreferShared = 1, cudaFuncCachePreferL1 = 2,
                     cudaFuncCachePreferEqual = 3 };
enum cudaSharedMemConfig { cudaSharedMemBankSizeDefault = 0, cudaSharedMemBankSizeFourByte = 1,
                           cudaSharedMemBankSizeEightByte = 2 };
enum cudaComputeMode { cudaComputeModeDefault = 0, cudaComputeModeExclusive = 1, cudaComputeModeProhibited = 2,
                       cudaComputeModeExclusiveProcess = 3 };
enum cudaMemoryType { cudaMemoryTypeUnregistered = 0, cudaMemoryTypeHost = 1, cudaMemoryTypeDevice = 2,
                      cudaMemoryTypeManaged = 3 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
                         cudaFuncAttributePreferredSharedMemoryCarveout = 9 };
enum cudaLimit { cudaLimitStackSize = 0, cudaLimitPrintfFifoSize = 1, cudaLimitMallocHeapSize = 2,
                 cudaLimitDevRuntimeSyncDepth = 3, cudaLimitDevRuntimePendingLaunchCount = 4,
                 cudaLimitMaxL2FetchGranularity = 5, cudaLimitPersistingL2CacheSize = 6 };
// L2 persistence hints: accepted, and without effect (the executor has no cache to steer).
enum cudaAccessProperty { cudaAccessPropertyNormal = 0, cudaAccessPropertyStreaming = 1, cudaAccessPropertyPersisting = 2 };
struct cudaAccessPolicyWindow { void* base_ptr; size_t num_bytes; float hitRatio; cudaAccessProperty hitProp, missProp; };
enum cudaStreamAttrID { cudaStreamAttributeAccessPolicyWindow = 1, cudaStreamAttributeSynchronizationPolicy = 3 };
union cudaStreamAttrValue { cudaAccessPolicyWindow accessPolicyWindow; int syncPolicy; };
enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1, cudaDevAttrMaxBlockDimX = 2, cudaDevAttrMaxBlockDimY = 3,
  cudaDevAttrMaxBlockDimZ = 4, cudaDevAttrMaxGridDimX = 5, cudaDevAttrMaxGridDimY = 6, cudaDevAttrMaxGridDimZ = 7,
  cudaDevAttrMaxSharedMemoryPerBlock = 8, cudaDevAttrTotalConstantMemory = 9, cudaDevAttrWarpSize = 10,
  cudaDevAttrMaxPitch = 11, cudaDevAttrMaxRegistersPerBlock = 12, cudaDevAttrClockRate = 13,
  cudaDevAttrTextureAlignment = 14, cudaDevAttrGpuOverlap = 15, cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrKernelExecTimeout = 17, cudaDevAttrIntegrated = 18, cudaDevAttrCanMapHostMemory = 19,
  cudaDevAttrComputeMode = 20, cudaDevAttrConcurrentKernels = 31, cudaDevAttrEccEnabled = 32,
  cudaDevAttrPciBusId = 33, cudaDevAttrPciDeviceId = 34, cudaDevAttrTccDriver = 35, cudaDevAttrMemoryClockRate = 36,
  cudaDevAttrGlobalMemoryBusWidth = 37, cudaDevAttrL2CacheSize = 38, cudaDevAttrMaxThreadsPerMultiProcessor = 39,
  cudaDevAttrAsyncEngineCount = 40, cudaDevAttrUnifiedAddressing = 41, cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76, cudaDevAttrStreamPrioritiesSupported = 78,
  cudaDevAttrGlobalL1CacheSupported = 79, cudaDevAttrLocalL1CacheSupported = 80,
  cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81, cudaDevAttrMaxRegistersPerMultiprocessor = 82,
  cudaDevAttrManagedMemory = 83, cudaDevAttrIsMultiGpuBoard = 84, cudaDevAttrHostNativeAtomicSupported = 86,
  cudaDevAttrPageableMemoryAccess = 88, cudaDevAttrConcurrentManagedAccess = 89,
  cudaDevAttrComputePreemptionSupported = 90, cudaDevAttrCooperativeLaunch = 95,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97, cudaDevAttrMaxBlocksPerMultiprocessor = 106,
  cudaDevAttrMemoryPoolsSupported = 115
};

struct cudaDeviceProp {
  char name[256];
  struct { char bytes[16]; } uuid;
  size_t totalGlobalMem, sharedMemPerBlock;
  int regsPerBlock, warpSize;
  size_t memPitch;
  int maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3], clockRate;
  size_t totalConstMem;
  int major, minor;
  size_t textureAlignment, texturePitchAlignment;
  int deviceOverlap, multiProcessorCount, kernelExecTimeoutEnabled, integrated, canMapHostMemory, computeMode;
  int concurrentKernels, ECCEnabled, pciBusID, pciDeviceID, pciDomainID, tccDriver, asyncEngineCount;
  int unifiedAddressing, memoryClockRate, memoryBusWidth, l2CacheSize, persistingL2CacheMaxSize;
  int maxThreadsPerMultiProcessor, streamPrioritiesSupported, globalL1CacheSupported, localL1CacheSupported;
  size_t sharedMemPerMultiprocessor;
  int regsPerMultiprocessor, managedMemory, isMultiGpuBoard, multiGpuBoardGroupID;
  int hostNativeAtomicSupported, singleToDoublePrecisionPerfRatio, pageableMemoryAccess, concurrentManagedAccess;
  int computePreemptionSupported, canUseHostPointerForRegisteredMem, cooperativeLaunch, cooperativeMultiDeviceLaunch;
  size_t sharedMemPerBlockOptin;
  int pageableMemoryAccessUsesHostPageTables, directManagedMemAccessFromHost, maxBlocksPerMultiProcessor;
  int accessPolicyMaxWindowSize;
  size_t reservedSharedMemPerBlock;
  // The modelled GPU's texture limits (textures are not modelled: a program that uses them is refused).
  int maxTexture1D, maxTexture1DMipmap, maxTexture1DLinear, maxTexture2D[2], maxTexture2DMipmap[2];
  int maxTexture2DLinear[3], maxTexture2DGather[2], maxTexture3D[3], maxTexture3DAlt[3], maxTextureCubemap;
  int maxTexture1DLayered[2], maxTexture2DLayered[3], maxTextureCubemapLayered[2], maxSurface1D, maxSurface2D[2];
  int maxSurface3D[3], maxSurface1DLayered[2], maxSurface2DLayered[3], maxSurfaceCubemap, maxSurfaceCubemapLayered[2];
  size_t surfaceAlignment;
  int labkitCpuExecutor;   // 1: this device is labkit's CPU executor (not a field of CUDA's)
};

struct cudaFuncAttributes {
  size_t sharedSizeBytes, constSizeBytes, localSizeBytes;
  int maxThreadsPerBlock, numRegs, ptxVersion, binaryVersion, cacheModeCA, maxDynamicSharedSizeBytes;
  int preferredShmemCarveout;
};
struct cudaPointerAttributes { enum cudaMemoryType type; int device; void* devicePointer; void* hostPointer; };

struct CUstream_st;
struct CUevent_st;
typedef CUstream_st* cudaStream_t;
typedef CUevent_st* cudaEvent_t;
typedef void (*cudaHostFn_t)(void* userData);
typedef void (*cudaStreamCallback_t)(cudaStream_t stream, cudaError_t status, void* userData);
// A CUDA graph (labkit_graphs.h): nodes that each do one piece of stream work, and the nodes each
// waits for.  Declared here: a stream being captured records its work as nodes (rt::capture).
enum cudaGraphNodeType { cudaGraphNodeTypeKernel = 0, cudaGraphNodeTypeMemcpy = 1, cudaGraphNodeTypeMemset = 2,
                         cudaGraphNodeTypeHost = 3, cudaGraphNodeTypeGraph = 4, cudaGraphNodeTypeEmpty = 5,
                         cudaGraphNodeTypeMemAlloc = 10, cudaGraphNodeTypeMemFree = 11,
                         cudaGraphNodeTypeConditional = 13 };
struct CUgraphNode_st;
struct CUgraph_st {
  std::vector<CUgraphNode_st*> nodes;
  std::vector<unsigned long long> conditions;   // the conditional handles made for it (labkit_graphs.h)
};
struct CUgraphNode_st {
  cudaGraphNodeType type;
  std::function<cudaError_t()> run;
  std::vector<CUgraphNode_st*> deps;
  CUgraph_st* graph;
  // A conditional node's work as its graph's instantiation fixes it (its body graphs as they are then).
  std::function<std::function<cudaError_t()>()> instantiate = nullptr;
};
typedef CUgraph_st* cudaGraph_t;
typedef CUgraphNode_st* cudaGraphNode_t;
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)
// The streams of a launch from device code (dynamic parallelism): after the launching grid, or on its own.
#define cudaStreamTailLaunch ((cudaStream_t)0x3)
#define cudaStreamFireAndForget ((cudaStream_t)0x4)

namespace labkit {
namespace rt {

enum class Mem { Device, Pinned, Managed, Symbol, Registered };
inline const char* mem_word(Mem k) {
  switch (k) {
    case Mem::Device: return "cudaMalloc";
    case Mem::Pinned: return "cudaMallocHost";
    case Mem::Managed: return "cudaMallocManaged";
    case Mem::Symbol: return "a __device__ symbol";
    default: return "cudaHostRegister";
  }
}
// graph: the storage of a graph's allocation node, kept for the graph's next launch when it is freed.
struct Alloc { size_t size; Mem kind; const char* file; int line; size_t mapped; bool graph = false; };
struct Pending { uintptr_t lo, hi; cudaStream_t stream; const char* file; int line; };

struct State {
  std::recursive_mutex mu;
  std::map<uintptr_t, Alloc> live, freed;
  cudaError_t last = cudaSuccess, sticky = cudaSuccess;
  size_t allocated = 0;
  std::vector<Pending> pending;   // pinned ranges an asynchronous copy writes, not yet synchronised
  struct sigaction old_segv {};
  bool handler = false;
  std::map<const void*, int> max_dynamic_shared;   // cudaFuncSetAttribute's opt-in, by kernel
  // Stream capture: the graph being recorded, the streams recording into it (the one that began the
  // capture and those that joined it by waiting for one of its events), the last node recorded.
  CUgraph_st* capture = nullptr;
  std::vector<cudaStream_t> capture_streams;
  CUgraphNode_st* capture_last = nullptr;
  // Graph memory: every allocation node's address and size; which of them hold memory for their graphs
  // (from the first launch that allocates them until a trim finds them freed), their bytes and the peak.
  std::map<uintptr_t, Alloc> graph_storage;
  std::map<uintptr_t, unsigned> host_flags;   // cudaHostAlloc's flags, by address (cudaHostGetFlags)
  std::map<uintptr_t, bool> graph_backed;
  size_t graph_used = 0, graph_used_high = 0;
};
inline State& st() { static State* s = new State(); return *s; }   // never destroyed: atexit order

// A kernel's printf output, as a GPU keeps it: in a buffer that the host shows at the CUDA runtime's
// synchronizing calls (cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize, a
// blocking cudaMemcpy, cudaDeviceReset), never at the program's exit: what none of them showed is
// reported instead of printed.  (A GPU flushes at a launch's start too, but only what kernels that
// have finished by then printed; as an H200 showed, host lines printed between two launches come
// before the first kernel's lines.)
struct DeviceOutput {
  std::mutex mu;
  std::vector<std::pair<FILE*, std::string>> text;   // in the order printed: printf's to stdout, assert's to stderr
  size_t lines = 0;
  bool watching = false;
};
inline DeviceOutput& device_output() { static DeviceOutput* d = new DeviceOutput(); return *d; }
inline void flush_device_output() {
  DeviceOutput& d = device_output();
  std::vector<std::pair<FILE*, std::string>> text;
  {
    std::lock_guard<std::mutex> g(d.mu);
    text.swap(d.text);
    d.lines = 0;
  }
  for (const auto& [to, chunk] : text) {
    std::fwrite(chunk.data(), 1, chunk.size(), to);
    std::fflush(to);
  }
}
inline void report_unflushed_output() {
  DeviceOutput& d = device_output();
  if (d.lines == 0 && d.text.empty()) return;
  std::fflush(stdout);
  std::fprintf(stderr, "labkit: %zu line%s that kernels printed never showed: a GPU shows a kernel's printf at "
               "a synchronizing call (cudaDeviceSynchronize, a blocking cudaMemcpy, cudaDeviceReset ...) and drops "
               "what is left when the program exits\n", d.lines + (d.text.back().second.back() != '\n'),
               d.lines == 1 ? "" : "s");
}
// Text a kernel printed (to stderr: an assert's line), kept for the next flush point.
inline int keep_device_output(const char* text, int n, FILE* to = stdout) {
  if (n <= 0) return n;
  DeviceOutput& d = device_output();
  std::lock_guard<std::mutex> g(d.mu);
  if (!d.watching) {
    d.watching = true;
    std::atexit(report_unflushed_output);
  }
  if (d.text.empty() || d.text.back().first != to) d.text.emplace_back(to, std::string());
  d.text.back().second.append(text, size_t(n));
  for (int i = 0; i < n; ++i) d.lines += text[i] == '\n';
  return n;
}
inline int device_vprintf(const char* fmt, va_list ap) {
  char small[512];
  va_list again;
  va_copy(again, ap);
  int n = std::vsnprintf(small, sizeof small, fmt, ap);
  if (n < int(sizeof small)) {
    va_end(again);
    return keep_device_output(small, n);
  }
  std::string big(size_t(n) + 1, '\0');
  std::vsnprintf(&big[0], big.size(), fmt, again);
  va_end(again);
  return keep_device_output(big.data(), n);
}

// A program's standard output goes out line by line, as it does to a terminal, also into a pipe: a
// program stopped for time (labkit.cuda run --timeout) has shown every line it finished, its pass line
// too, where a pipe's buffer would have held the last 4 KiB back.  Set before main (a static
// initializer), once per program (an inline variable).
inline const bool stdout_line_buffered = std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ) == 0;

inline void say(const char* fmt, ...) {
  std::fflush(stdout);
  std::fputs("labkit: ", stderr);
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fputc('\n', stderr);
  std::fflush(stderr);
}

inline cudaError_t fail(cudaError_t e) {
  st().last = e;
  return e;
}
inline cudaError_t fail_sticky(cudaError_t e) {
  st().sticky = e;
  st().last = e;
  return e;
}
#define LABKIT_STICKY() do { if (::labkit::rt::st().sticky != cudaSuccess) return ::labkit::rt::fail(::labkit::rt::st().sticky); } while (0)

// The allocation holding p: (base, allocation), or nullptr.
inline const Alloc* find(const std::map<uintptr_t, Alloc>& m, const void* p, uintptr_t* base) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = m.upper_bound(a);
  if (it == m.begin()) return nullptr;
  --it;
  if (a >= it->first && a < it->first + std::max<size_t>(it->second.size, 1)) {
    if (base) *base = it->first;
    return &it->second;
  }
  return nullptr;
}
inline void add(void* p, size_t n, Mem kind, const char* file, int line, size_t mapped = 0, bool graph = false) {
  auto& s = st();
  std::lock_guard<std::recursive_mutex> g(s.mu);
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  // The address may be reused: forget freed allocations it overlaps.
  for (auto it = s.freed.lower_bound(a > (1u << 30) ? a - (1u << 30) : 0); it != s.freed.end() && it->first < a + n;)
    it = it->first + it->second.size > a ? s.freed.erase(it) : std::next(it);
  s.live[a] = Alloc{n, kind, file, line, mapped, graph};
  if (kind == Mem::Device || kind == Mem::Managed) s.allocated += n;
}

inline std::string where(const Alloc& a) {
  const std::string what = a.graph ? "a graph's allocation node" : mem_word(a.kind);
  // Line 0: an allocation made for the program by a library (a thrust::device_vector), named by the file.
  const std::string line = a.line > 0 ? ":" + std::to_string(a.line) : "";
  return a.file && *a.file ? " (" + what + " at " + a.file + line + ")" : " (" + what + ")";
}

// Checks a range [p, p+n) that a call reads or writes in device memory ("what" names it in messages).
// cudaSuccess, or the error the call returns after saying why.
inline cudaError_t check_device_range(const void* p, size_t n, const char* call, const char* what, const char* file,
                                      int line) {
  auto& s = st();
  std::lock_guard<std::recursive_mutex> g(s.mu);
  uintptr_t base = 0;
  if (const Alloc* a = find(s.live, p, &base)) {
    uintptr_t off = reinterpret_cast<uintptr_t>(p) - base;
    if (off + n > a->size) {
      say("%s:%d: %s of %zu bytes: its %s starts %zu bytes into a %zu-byte allocation%s and runs %zu bytes past "
          "its end", file, line, call, n, what, size_t(off), a->size, where(*a).c_str(), size_t(off + n - a->size));
      return fail(cudaErrorInvalidValue);
    }
    return cudaSuccess;
  }
  if (const Alloc* a = find(s.freed, p, &base)) {
    say("%s:%d: %s: its %s points into a %zu-byte allocation%s that cudaFree already released (use after free)",
        file, line, call, what, a->size, where(*a).c_str());
    return fail(cudaErrorInvalidValue);
  }
  if (p == nullptr && n > 0) {
    say("%s:%d: %s: its %s is a null pointer", file, line, call, what);
    return fail(cudaErrorInvalidValue);
  }
  say("%s:%d: %s: its %s (%p) is not device memory: it was not allocated with cudaMalloc (a host pointer, or "
      "the wrong cudaMemcpyKind?)", file, line, call, what, p);
  return fail(cudaErrorInvalidValue);
}
inline bool is_registered(const void* p) {
  std::lock_guard<std::recursive_mutex> g(st().mu);
  return find(st().live, p, nullptr) != nullptr;
}
inline bool is_device_side(const void* p) {
  std::lock_guard<std::recursive_mutex> g(st().mu);
  const Alloc* a = find(st().live, p, nullptr);
  return a && (a->kind == Mem::Device || a->kind == Mem::Managed || a->kind == Mem::Symbol);
}

// --- Asynchronous copies into pinned memory ---------------------------------------------------
// The copy is made at once, and the pinned pages it wrote are made inaccessible until the program
// synchronises with its stream (a stream, event or device synchronisation, a successful query).  A
// host read of them before that is a read of data a GPU may not have written yet: the fault is
// reported here, with the copy's line, instead of a silent wrong answer on the GPU.
inline void release(cudaStream_t stream, bool all) {
  auto& s = st();
  std::lock_guard<std::recursive_mutex> g(s.mu);
  for (auto it = s.pending.begin(); it != s.pending.end();) {
    if (all || it->stream == stream) {
      mprotect(reinterpret_cast<void*>(it->lo), it->hi - it->lo, PROT_READ | PROT_WRITE);
      it = s.pending.erase(it);
    } else {
      ++it;
    }
  }
}
inline void on_segv(int sig, siginfo_t* info, void* ctx) {
  uintptr_t a = reinterpret_cast<uintptr_t>(info->si_addr);
  auto& s = st();
  for (auto& p : s.pending)
    if (a >= p.lo && a < p.hi) {
      char buf[512];
      int n = snprintf(buf, sizeof buf,
                       "labkit: the host touched pinned memory at %p that cudaMemcpyAsync at %s:%d is still "
                       "writing: a GPU may not have copied it yet. Synchronise first (cudaStreamSynchronize, "
                       "cudaEventSynchronize or cudaDeviceSynchronize)\n", info->si_addr, p.file, p.line);
      fflush(stdout);
      if (write(2, buf, size_t(n)) < 0) {}
      _exit(77);
    }
  // Not ours: whatever handled it before (or the default action).
  if (s.old_segv.sa_flags & SA_SIGINFO) {
    if (s.old_segv.sa_sigaction) return s.old_segv.sa_sigaction(sig, info, ctx);
  } else if (s.old_segv.sa_handler != SIG_DFL && s.old_segv.sa_handler != SIG_IGN) {
    return s.old_segv.sa_handler(sig);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}
inline void guard_async(void* dst, size_t n, cudaStream_t stream, const char* file, int line) {
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  auto& s = st();
  std::lock_guard<std::recursive_mutex> g(s.mu);
  uintptr_t base = 0;
  const Alloc* a = find(s.live, dst, &base);
  if (!a || a->kind != Mem::Pinned || !a->mapped || n == 0) return;
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  uintptr_t lo = reinterpret_cast<uintptr_t>(dst) & ~(page - 1);
  uintptr_t hi = (reinterpret_cast<uintptr_t>(dst) + n + page - 1) & ~(page - 1);
  if (!s.handler) {
    struct sigaction sa {};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &s.old_segv);
    s.handler = true;
  }
  if (mprotect(reinterpret_cast<void*>(lo), hi - lo, PROT_NONE) == 0) s.pending.push_back({lo, hi, stream, file, line});
#else
  (void)dst; (void)n; (void)stream; (void)file; (void)line;
#endif
}
// The executor's own accesses to host memory (a copy, a kernel) may touch guarded pages: they are
// made accessible first (the stream order makes them legal on a GPU).
inline void unguard_all() { if (!st().pending.empty()) release(nullptr, true); }

// --- Stream capture ----------------------------------------------------------------------------
inline bool capturing(cudaStream_t s) {
  auto& c = st();
  if (!c.capture) return false;
  for (cudaStream_t x : c.capture_streams)
    if (x == s) return true;
  return false;
}
inline CUgraphNode_st* add_node(CUgraph_st* g, cudaGraphNodeType type, std::function<cudaError_t()> run,
                                const std::vector<CUgraphNode_st*>& deps) {
  auto* n = new CUgraphNode_st{type, std::move(run), deps, g};
  g->nodes.push_back(n);
  return n;
}
// Work issued to a capturing stream becomes a node of the graph (after the one recorded before it: the
// order work was issued in is one its dependencies allow) instead of being done.  True if recorded.
inline bool record(cudaStream_t s, cudaGraphNodeType type, std::function<cudaError_t()> run) {
  if (!capturing(s)) return false;
  auto& c = st();
  std::vector<CUgraphNode_st*> deps;
  if (c.capture_last) deps.push_back(c.capture_last);
  c.capture_last = add_node(c.capture, type, std::move(run), deps);
  return true;
}

// An operand a library routine (labkit's cuBLAS, cuSPARSE, cuFFT) reads or writes: device or managed
// memory, within its allocation, as the GPU library needs it; else said in words (`library`: whose).
inline bool library_operand(const void* p, size_t bytes, const char* call, const char* what, const char* library) {
  if (bytes == 0) return true;
  if (!is_device_side(p)) {
    say("%s: the %s (%p) is not device or managed memory: %s reads and writes its operands on the GPU (cudaMalloc "
        "them and copy with cudaMemcpy)", call, what, p, library);
    return false;
  }
  return check_device_range(p, bytes, call, what, "", 0) == cudaSuccess;
}

// A kernel's body entered outside any launch: host code called the __global__ function itself (through
// a pointer, as a benchmark helper taking the kernel as an argument may), with no <<<>>> configuration.
// A GPU's generated stub finds no configuration and launches nothing; so does the executor, and says
// so once per kernel.
inline bool unlaunched(const char* kernel) {
  if (::labkit::tl_worker) return false;
  static std::mutex mu;
  static std::set<std::string>* said = new std::set<std::string>();   // never destroyed: atexit order
  std::lock_guard<std::mutex> g(mu);
  if (said->insert(kernel).second)
    say("kernel '%s' was called from host code without a launch configuration (<<<grid, block>>>): a GPU "
        "launches nothing for such a call, and neither does the executor", kernel);
  return true;
}

// A library routine's work (labkit's cuBLAS, cuBLASLt, cuSPARSE, cuFFT): done when it is called, or, on
// a stream being captured into a CUDA graph, recorded as a kernel node of the graph that does it each
// time the graph runs (a GPU's libraries launch kernels, which the capture records).  `ok` is the
// routine's success status; a failure while the graph runs fails its launch.
template <class Status, class Work> inline Status library_work(cudaStream_t s, Status ok, Work work) {
  if (record(s, cudaGraphNodeTypeKernel, [ok, work]() -> cudaError_t {
        unguard_all();   // the work reads and writes memory when it runs, as a GPU's kernels would
        return work() == ok ? cudaSuccess : cudaErrorLaunchFailure;
      }))
    return ok;
  unguard_all();
  return work();
}

// --- Launches ----------------------------------------------------------------------------------
inline unsigned long long env_ull(const char* name, unsigned long long dflt) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : dflt;
}
inline unsigned check_flags() {
  const char* v = std::getenv("LABKIT_CHECK");
  unsigned f = 0;
  if (v && std::strstr(v, "barrier")) f |= ::labkit::CHECK_BARRIER;
  if (v && std::strstr(v, "shuffle")) f |= ::labkit::CHECK_SHUFFLE;
  return f;
}

struct LaunchSpec {
  const char* name; dim3 grid, block; size_t shared; cudaStream_t stream; const char* file; int line;
  bool cooperative = false;   // cudaLaunchCooperativeKernel: every block resident at once (grid syncs)
};

// A pointer argument must point at memory a kernel can read: device, managed or pinned memory.
template <class T> inline bool check_pointer_arg(const LaunchSpec& L, unsigned i, const T& v) {
  const char* kernel = L.name;
  if constexpr (std::is_pointer_v<T>) {
    if (v == nullptr) return true;
    auto& s = st();
    std::lock_guard<std::recursive_mutex> g(s.mu);
    if (find(s.live, (const void*)v, nullptr)) return true;
    uintptr_t base = 0;
    // A launch captured into a graph after an allocation node: the memory is there when the graph runs.
    if (capturing(L.stream) && find(s.graph_storage, (const void*)v, nullptr)) return true;
    if (const Alloc* a = find(s.freed, (const void*)v, &base)) {
      say("%s:%d: kernel '%s': argument %u (%p) points into a %zu-byte allocation%s that cudaFree already released "
          "(use after free); the launch is refused, as a GPU would fault on it", L.file, L.line, kernel, i, (const void*)v,
          a->size, where(*a).c_str());
      return false;
    }
    say("%s:%d: kernel '%s': argument %u (%p) is a host pointer (malloc, new, or a host variable), not device "
        "memory: a kernel cannot read it on a GPU (an illegal memory access). Allocate with cudaMalloc and copy "
        "with cudaMemcpy, or use cudaMallocManaged / cudaMallocHost", L.file, L.line, kernel, i, (const void*)v);
    return false;
  }
  return true;
}


inline cudaError_t check_config(const LaunchSpec& L, const void* key) {
  const unsigned long long threads = (unsigned long long)L.block.x * L.block.y * L.block.z;
  if (!L.grid.x || !L.grid.y || !L.grid.z || !L.block.x || !L.block.y || !L.block.z) {
    say("kernel '%s': launch with grid (%u,%u,%u) and block (%u,%u,%u): every dimension must be at least 1",
        L.name, L.grid.x, L.grid.y, L.grid.z, L.block.x, L.block.y, L.block.z);
    return fail(cudaErrorInvalidConfiguration);
  }
  if (threads > 1024 || L.block.x > 1024 || L.block.y > 1024 || L.block.z > 64) {
    say("kernel '%s': a block of (%u,%u,%u) = %llu threads: a block holds at most 1024 (x, y <= 1024, z <= 64)",
        L.name, L.block.x, L.block.y, L.block.z, threads);
    return fail(cudaErrorInvalidConfiguration);
  }
  if (L.grid.x > 2147483647u || L.grid.y > 65535 || L.grid.z > 65535) {
    say("kernel '%s': grid (%u,%u,%u) is too large (x < 2^31, y and z <= 65535)", L.name, L.grid.x, L.grid.y,
        L.grid.z);
    return fail(cudaErrorInvalidConfiguration);
  }
  // The opt-in of cudaFuncSetAttribute: a launch by <<<>>> does not name its kernel's address here,
  // so the largest any kernel opted into is the limit.
  size_t limit = 48 * 1024;
  (void)key;
  for (auto& kv : st().max_dynamic_shared) limit = std::max(limit, size_t(kv.second));
  if (L.shared > limit) {
    say("kernel '%s': %zu bytes of dynamic shared memory; a block may have %zu (more than 48 KiB needs "
        "cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), up to 227 KiB)",
        L.name, L.shared, limit);
    return fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

// Dynamic parallelism.  A grid launched from device code runs after the grid that launched it has
// finished, before that grid counts as complete (before a host synchronisation, a later launch in its
// stream or an event returns): CUDA guarantees a child grid neither concurrency with its parent nor any
// start before the parent's end, and since CUDA 12 a parent cannot wait for its children
// (cudaDeviceSynchronize in device code is gone), so this is one order a GPU may run them in -- the
// order of cudaStreamTailLaunch.  The children run in the order they were launched, each with its own
// descendants before the next (children in one stream run in order on a GPU too).  A child sees what
// its parent wrote to global memory before the launch; its arguments are copied at the launch.
struct DeviceLaunches {
  std::mutex mu;
  std::vector<std::function<cudaError_t()>> queue;   // launched by the grid running now, not yet run
  int depth = 0;                                      // nesting of the grid running now (0: from the host)
};
inline DeviceLaunches& device_launches() { static auto* d = new DeviceLaunches(); return *d; }
constexpr int MAX_LAUNCH_DEPTH = 24;   // CUDA's limit on the nesting of device launches

inline bool in_device_code() { return ::labkit::tl_worker != nullptr; }

inline void launch_from_device(const LaunchSpec& L, std::function<cudaError_t()> child) {
  auto& d = device_launches();
  if (d.depth + 1 >= MAX_LAUNCH_DEPTH) {
    say("%s:%d: kernel '%s' launched from device code at nesting depth %d: CUDA allows %d levels "
        "(cudaErrorLaunchMaxDepthExceeded); the launch is dropped", L.file, L.line, L.name, d.depth + 1,
        MAX_LAUNCH_DEPTH);
    fail(cudaErrorLaunchMaxDepthExceeded);
    return;
  }
  std::lock_guard<std::mutex> g(d.mu);
  d.queue.push_back(std::move(child));
}

inline cudaError_t run_children(std::vector<std::function<cudaError_t()>>& children) {
  cudaError_t first = cudaSuccess;
  auto& d = device_launches();
  for (auto& child : children) {
    ++d.depth;
    cudaError_t e = child();
    --d.depth;
    if (e != cudaSuccess && first == cudaSuccess) first = e;
  }
  return first;
}

inline cudaError_t run(const LaunchSpec& L, void (*body)(void*), void* ctx) {
  ::labkit::LaunchConfig cfg{};
  cfg.grid[0] = L.grid.x; cfg.grid[1] = L.grid.y; cfg.grid[2] = L.grid.z;
  cfg.block[0] = L.block.x; cfg.block[1] = L.block.y; cfg.block[2] = L.block.z;
  cfg.shared_mem = L.shared;
  cfg.flags = check_flags() | (L.cooperative ? ::labkit::LAUNCH_COOPERATIVE : 0u);
  cfg.workers = unsigned(env_ull("LABKIT_CPU_WORKERS", 0));
  cfg.seed = env_ull("LABKIT_CPU_SEED", (unsigned long long)std::chrono::steady_clock::now().time_since_epoch().count());
  cfg.stack_bytes = std::max(env_ull("LABKIT_CPU_STACK_KIB", 128) * 1024, env_ull("LABKIT_CPU_STACK_NEED", 0));
  cfg.timeout_ms = (unsigned long long)(1000 * std::atof(std::getenv("LABKIT_CPU_TIMEOUT_S") ? std::getenv("LABKIT_CPU_TIMEOUT_S") : "300"));
  // The executor runs one grid at a time (its workers serve one launch): launches from several host
  // threads (OpenMP, pthreads, a callback's thread) take turns, one valid order of concurrent streams.
  static std::mutex one_grid;
  std::vector<std::function<cudaError_t()>> children;
  {
    std::lock_guard<std::mutex> turn(one_grid);
    unguard_all();
    std::fflush(stdout);
    int rc = ::labkit::run_grid(&cfg, L.name, body, ctx);
    std::fflush(stdout);
    children.swap(device_launches().queue);   // the grids this one launched (one grid runs at a time)
    if (rc == 2) { say("%s", ::labkit::last_error().c_str()); std::exit(130); }
    if (rc != 0) {
      const std::string& e = ::labkit::last_error();
      if (e.find("Assertion") == std::string::npos) say("%s", e.c_str());   // an assert printed its own line
      return fail_sticky(e.find("watchdog") != std::string::npos ? cudaErrorLaunchTimeout
                         : e.find("Assertion") != std::string::npos ? cudaErrorAssert : cudaErrorLaunchFailure);
    }
  }
  return run_children(children);
}

// k<<<grid, block, shared, stream>>>(args): the launch's source rewrite (program_source.py) calls the
// kernel through `call`, a lambda that calls it by name, so that template kernels are deduced from
// the arguments as the CUDA compiler deduces them.
template <class Call> struct KernelCall {
  Call call;
  LaunchSpec spec;
  template <class... A> void operator()(A&&... a) const {
    auto& s = st();
    if (s.sticky != cudaSuccess) { fail(s.sticky); return; }
    if (check_config(spec, nullptr) != cudaSuccess) return;
    std::tuple<std::decay_t<A>...> values(std::forward<A>(a)...);
    if (in_device_code()) {   // a launch from a kernel: after this grid (see launch_from_device)
      launch_from_device(spec, [call = call, spec = spec, values]() { return launch(call, spec, values); });
      return;
    }
    if (spec.stream == cudaStreamTailLaunch || spec.stream == cudaStreamFireAndForget) {
      say("%s:%d: kernel '%s' is launched from host code into cudaStreamTailLaunch or cudaStreamFireAndForget, "
          "streams that only device code may launch into", spec.file, spec.line, spec.name);
      fail(cudaErrorInvalidResourceHandle);
      return;
    }
    bool ok = std::apply([&](auto&... v) {
      unsigned i = 0;
      bool good = true;
      ((good = check_pointer_arg(spec, i++, v) && good), ...);
      return good;
    }, values);
    if (!ok) { fail_sticky(cudaErrorIllegalAddress); return; }
    using Values = std::tuple<std::decay_t<A>...>;
    if (record(spec.stream, cudaGraphNodeTypeKernel, [call = call, spec = spec, values]() {
          return launch(call, spec, values);
        }))
      return;
    launch(call, spec, values);
  }
  template <class Values> static cudaError_t launch(const Call& call, const LaunchSpec& spec, const Values& values) {
    struct Ctx { const Call* call; const Values* args; } ctx{&call, &values};
    auto body = [](void* p) {
      auto* c = static_cast<Ctx*>(p);
      // Each thread's own copies of the arguments, as each GPU thread reads its parameters.
      Values mine = *c->args;
      std::apply(*c->call, mine);
    };
    return run(spec, +body, &ctx);
  }
};

}  // namespace rt

template <class Call>
inline rt::KernelCall<Call> kernel_call(Call call, const char* name, dim3 grid, dim3 block, size_t shared = 0,
                                        cudaStream_t stream = 0, const char* file = __builtin_FILE(),
                                        int line = __builtin_LINE()) {
  return rt::KernelCall<Call>{call, rt::LaunchSpec{name, grid, block, shared, stream, file, line}};
}
}  // namespace labkit

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------
inline const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
#define LABKIT_E(n) case n: return #n;
    LABKIT_E(cudaSuccess) LABKIT_E(cudaErrorInvalidValue) LABKIT_E(cudaErrorMemoryAllocation)
    LABKIT_E(cudaErrorInitializationError) LABKIT_E(cudaErrorCudartUnloading) LABKIT_E(cudaErrorInvalidConfiguration)
    LABKIT_E(cudaErrorInvalidPitchValue) LABKIT_E(cudaErrorInvalidSymbol) LABKIT_E(cudaErrorInvalidHostPointer)
    LABKIT_E(cudaErrorInvalidDevicePointer) LABKIT_E(cudaErrorInvalidMemcpyDirection)
    LABKIT_E(cudaErrorInvalidDeviceFunction) LABKIT_E(cudaErrorNoDevice) LABKIT_E(cudaErrorInvalidDevice)
    LABKIT_E(cudaErrorInvalidKernelImage) LABKIT_E(cudaErrorInvalidResourceHandle) LABKIT_E(cudaErrorNotReady)
    LABKIT_E(cudaErrorIllegalAddress) LABKIT_E(cudaErrorLaunchOutOfResources) LABKIT_E(cudaErrorLaunchTimeout)
    LABKIT_E(cudaErrorSetOnActiveProcess) LABKIT_E(cudaErrorAssert) LABKIT_E(cudaErrorHostMemoryAlreadyRegistered)
    LABKIT_E(cudaErrorHostMemoryNotRegistered) LABKIT_E(cudaErrorLaunchFailure) LABKIT_E(cudaErrorNotPermitted)
    LABKIT_E(cudaErrorIllegalState) LABKIT_E(cudaErrorStreamCaptureUnsupported)
    LABKIT_E(cudaErrorStreamCaptureUnmatched) LABKIT_E(cudaErrorGraphExecUpdateFailure)
    LABKIT_E(cudaErrorCooperativeLaunchTooLarge) LABKIT_E(cudaErrorLaunchMaxDepthExceeded)
    LABKIT_E(cudaErrorNotSupported) LABKIT_E(cudaErrorUnsupportedLimit) LABKIT_E(cudaErrorUnknown)
#undef LABKIT_E
  }
  return "cudaErrorUnknown";
}
inline const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidPitchValue: return "invalid pitch argument";
    case cudaErrorInvalidSymbol: return "invalid device symbol";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorCooperativeLaunchTooLarge: return "too many blocks in cooperative launch";
    case cudaErrorLaunchTimeout: return "the launch timed out and was terminated";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorUnsupportedLimit: return "limit is not supported on this architecture";
    case cudaErrorAssert: return "device-side assert triggered";
    case cudaErrorCudartUnloading: return "driver shutting down";
    case cudaErrorInvalidHostPointer: return "invalid host pointer";
    case cudaErrorInvalidKernelImage: return "device kernel image is invalid";
    case cudaErrorSetOnActiveProcess: return "cannot set while device is active in this process";
    case cudaErrorHostMemoryAlreadyRegistered: return "part or all of the requested memory range is already mapped";
    case cudaErrorHostMemoryNotRegistered: return "pointer does not correspond to a registered memory region";
    case cudaErrorNotPermitted: return "operation not permitted";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorUnknown: return "unknown error";
    default: return cudaGetErrorName(e);
  }
}
inline cudaError_t cudaGetLastError() {
  auto& s = ::labkit::rt::st();
  cudaError_t e = s.last;
  s.last = s.sticky;
  return e;
}
inline cudaError_t cudaPeekAtLastError() { return ::labkit::rt::st().last; }

// ---------------------------------------------------------------------------------------------
// Device
// ---------------------------------------------------------------------------------------------
inline cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
inline cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
inline cudaError_t cudaSetDevice(int d) {
  if (d != 0) {
    ::labkit::rt::say("cudaSetDevice(%d): the CPU executor models one device, device 0", d);
    return ::labkit::rt::fail(cudaErrorInvalidDevice);
  }
  return cudaSuccess;
}
inline cudaError_t cudaInitDevice(int d, unsigned = 0, unsigned = 0) { return cudaSetDevice(d); }
inline cudaError_t cudaSetDeviceFlags(unsigned) { return cudaSuccess; }
inline cudaError_t cudaGetDeviceFlags(unsigned* f) { *f = 0; return cudaSuccess; }
inline cudaError_t cudaSetValidDevices(int*, int) { return cudaSuccess; }
inline cudaError_t cudaDeviceSetCacheConfig(cudaFuncCache) { return cudaSuccess; }
inline cudaError_t cudaDeviceGetCacheConfig(cudaFuncCache* c) { *c = cudaFuncCachePreferNone; return cudaSuccess; }
inline cudaError_t cudaDeviceSetSharedMemConfig(cudaSharedMemConfig) { return cudaSuccess; }
inline cudaError_t cudaDeviceSetLimit(cudaLimit, size_t) { return cudaSuccess; }
inline cudaError_t cudaDeviceGetLimit(size_t* v, cudaLimit l) {
  // CUDA's defaults (the executor is bound by none of them: device launches wait in a queue of any length).
  switch (l) {
    case cudaLimitStackSize: *v = 1024; break;
    case cudaLimitPrintfFifoSize: *v = 1u << 20; break;
    case cudaLimitMallocHeapSize: *v = 8u << 20; break;
    case cudaLimitDevRuntimeSyncDepth: *v = 2; break;
    case cudaLimitDevRuntimePendingLaunchCount: *v = 2048; break;
    case cudaLimitMaxL2FetchGranularity: *v = 64; break;
    case cudaLimitPersistingL2CacheSize: *v = 0; break;
    default: *v = 0; return ::labkit::rt::fail(cudaErrorUnsupportedLimit);
  }
  return cudaSuccess;
}
inline cudaError_t cudaDriverGetVersion(int* v) { *v = CUDART_VERSION; return cudaSuccess; }
inline cudaError_t cudaRuntimeGetVersion(int* v) { *v = CUDART_VERSION; return cudaSuccess; }

inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  if (d != 0) return ::labkit::rt::fail(cudaErrorInvalidDevice);
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "NVIDIA H100 80GB HBM3 (labkit CPU executor)");
  p->totalGlobalMem = 85520809984ull;
  p->sharedMemPerBlock = 49152;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->memPitch = 2147483647;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024; p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647; p->maxGridSize[1] = 65535; p->maxGridSize[2] = 65535;
  p->clockRate = 1980000;
  p->totalConstMem = 65536;
  p->major = 9; p->minor = 0;
  p->textureAlignment = 512; p->texturePitchAlignment = 32;
  p->deviceOverlap = 1; p->multiProcessorCount = 132;
  p->canMapHostMemory = 1; p->concurrentKernels = 1; p->ECCEnabled = 1;
  p->pciBusID = 0; p->asyncEngineCount = 3; p->unifiedAddressing = 1;
  p->memoryClockRate = 2619000; p->memoryBusWidth = 5120; p->l2CacheSize = 52428800;
  p->persistingL2CacheMaxSize = 34078720;
  p->maxThreadsPerMultiProcessor = 2048; p->streamPrioritiesSupported = 1;
  p->globalL1CacheSupported = 1; p->localL1CacheSupported = 1;
  p->sharedMemPerMultiprocessor = 233472; p->regsPerMultiprocessor = 65536; p->managedMemory = 1;
  p->hostNativeAtomicSupported = 0; p->singleToDoublePrecisionPerfRatio = 2;
  p->concurrentManagedAccess = 1; p->computePreemptionSupported = 1;
  p->cooperativeLaunch = 1; p->sharedMemPerBlockOptin = 232448; p->maxBlocksPerMultiProcessor = 32;
  p->accessPolicyMaxWindowSize = 134213632; p->reservedSharedMemPerBlock = 1024;
  p->maxTexture1D = 131072; p->maxTexture2D[0] = 131072; p->maxTexture2D[1] = 65536;
  p->maxTexture3D[0] = p->maxTexture3D[1] = p->maxTexture3D[2] = 16384;
  p->maxTexture1DLayered[0] = 32768; p->maxTexture1DLayered[1] = 2048;
  p->maxTexture2DLayered[0] = p->maxTexture2DLayered[1] = 32768; p->maxTexture2DLayered[2] = 2048;
  p->surfaceAlignment = 512;
  p->labkitCpuExecutor = 1;
  return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int d) {
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, d) != cudaSuccess) return cudaErrorInvalidDevice;
  switch (a) {
    case cudaDevAttrMaxThreadsPerBlock: *v = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: *v = p.maxThreadsDim[0]; break;
    case cudaDevAttrMaxBlockDimY: *v = p.maxThreadsDim[1]; break;
    case cudaDevAttrMaxBlockDimZ: *v = p.maxThreadsDim[2]; break;
    case cudaDevAttrMaxGridDimX: *v = p.maxGridSize[0]; break;
    case cudaDevAttrMaxGridDimY: *v = p.maxGridSize[1]; break;
    case cudaDevAttrMaxGridDimZ: *v = p.maxGridSize[2]; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = int(p.sharedMemPerBlock); break;
    case cudaDevAttrTotalConstantMemory: *v = int(p.totalConstMem); break;
    case cudaDevAttrWarpSize: *v = 32; break;
    case cudaDevAttrMaxPitch: *v = int(p.memPitch); break;
    case cudaDevAttrMaxRegistersPerBlock: *v = p.regsPerBlock; break;
    case cudaDevAttrClockRate: *v = p.clockRate; break;
    case cudaDevAttrTextureAlignment: *v = int(p.textureAlignment); break;
    case cudaDevAttrGpuOverlap: *v = 1; break;
    case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; break;
    case cudaDevAttrCanMapHostMemory: *v = 1; break;
    case cudaDevAttrConcurrentKernels: *v = 1; break;
    case cudaDevAttrEccEnabled: *v = 1; break;
    case cudaDevAttrMemoryClockRate: *v = p.memoryClockRate; break;
    case cudaDevAttrGlobalMemoryBusWidth: *v = p.memoryBusWidth; break;
    case cudaDevAttrL2CacheSize: *v = p.l2CacheSize; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *v = p.maxThreadsPerMultiProcessor; break;
    case cudaDevAttrAsyncEngineCount: *v = p.asyncEngineCount; break;
    case cudaDevAttrUnifiedAddressing: *v = 1; break;
    case cudaDevAttrComputeCapabilityMajor: *v = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *v = p.minor; break;
    case cudaDevAttrStreamPrioritiesSupported: *v = 1; break;
    case cudaDevAttrGlobalL1CacheSupported: case cudaDevAttrLocalL1CacheSupported: *v = 1; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = int(p.sharedMemPerMultiprocessor); break;
    case cudaDevAttrMaxRegistersPerMultiprocessor: *v = p.regsPerMultiprocessor; break;
    case cudaDevAttrManagedMemory: *v = 1; break;
    case cudaDevAttrConcurrentManagedAccess: *v = 1; break;
    case cudaDevAttrComputePreemptionSupported: *v = 1; break;
    case cudaDevAttrCooperativeLaunch: *v = 1; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = int(p.sharedMemPerBlockOptin); break;
    case cudaDevAttrMaxBlocksPerMultiprocessor: *v = p.maxBlocksPerMultiProcessor; break;
    case cudaDevAttrMemoryPoolsSupported: *v = 1; break;
    default: *v = 0; break;
  }
  return cudaSuccess;
}
// One device: no peer to access (a program that asks falls back, as on a machine with one GPU).
inline cudaError_t cudaDeviceCanAccessPeer(int* can, int, int) { *can = 0; return cudaSuccess; }
enum cudaDeviceP2PAttr { cudaDevP2PAttrPerformanceRank = 1, cudaDevP2PAttrAccessSupported = 2,
                         cudaDevP2PAttrNativeAtomicSupported = 3, cudaDevP2PAttrCudaArrayAccessSupported = 4 };
inline cudaError_t cudaDeviceGetP2PAttribute(int* v, cudaDeviceP2PAttr, int, int) { *v = 0; return cudaSuccess; }
inline cudaError_t cudaChooseDevice(int* d, const cudaDeviceProp*) { *d = 0; return cudaSuccess; }
inline cudaError_t cudaDeviceSynchronize() {
  ::labkit::rt::release(nullptr, true);
  ::labkit::rt::flush_device_output();
  LABKIT_STICKY();
  return cudaSuccess;
}
inline cudaError_t cudaThreadSynchronize() { return cudaDeviceSynchronize(); }
inline cudaError_t cudaDeviceReset() {
  ::labkit::rt::release(nullptr, true);
  ::labkit::rt::flush_device_output();
  ::labkit::rt::st().sticky = cudaSuccess;
  ::labkit::rt::st().last = cudaSuccess;
  return cudaSuccess;
}
inline cudaError_t cudaThreadExit() { return cudaDeviceReset(); }

// ---------------------------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------------------------
#define LABKIT_SITE const char* labkit_file = __builtin_FILE(), int labkit_line = __builtin_LINE()

inline cudaError_t cudaMalloc(void** p, size_t n, LABKIT_SITE) {
  LABKIT_STICKY();
  if (!p) return ::labkit::rt::fail(cudaErrorInvalidValue);
  if (n > 85520809984ull - ::labkit::rt::st().allocated) {
    *p = nullptr;
    ::labkit::rt::say("%s:%d: cudaMalloc of %zu bytes: more than the modelled device's 80 GB holds", labkit_file,
                      labkit_line, n);
    return ::labkit::rt::fail(cudaErrorMemoryAllocation);
  }
  // Aligned as cudaMalloc's memory is (256 bytes; samples assert 128), and a heap block of exactly n
  // bytes, whose edges the memory check guards.
  void* m = nullptr;
  if (posix_memalign(&m, 256, n ? n : 1) != 0) m = nullptr;
  if (!m) { *p = nullptr; return ::labkit::rt::fail(cudaErrorMemoryAllocation); }
  // Device memory starts undefined: all-ones bytes (NaN as floats), so that a result read before any
  // kernel wrote it shows, as the executor fills shared memory.
  std::memset(m, 0xff, n);
  ::labkit::rt::add(m, n, ::labkit::rt::Mem::Device, labkit_file, labkit_line);
#if defined(__SANITIZE_ADDRESS__)
  // For the memory check's report: which allocation an address past a heap block belongs to.
  std::fprintf(stderr, "LABKIT-ALLOC %p %zu %s:%d\n", m, n, labkit_file, labkit_line);
#endif
  *p = m;
  return cudaSuccess;
}
template <class T> inline cudaError_t cudaMalloc(T** p, size_t n, LABKIT_SITE) {
  return cudaMalloc(reinterpret_cast<void**>(p), n, labkit_file, labkit_line);
}
inline cudaError_t cudaMallocPitch(void** p, size_t* pitch, size_t width, size_t height, LABKIT_SITE) {
  *pitch = (width + 511) / 512 * 512;
  return cudaMalloc(p, *pitch * height, labkit_file, labkit_line);
}
template <class T> inline cudaError_t cudaMallocPitch(T** p, size_t* pitch, size_t w, size_t h, LABKIT_SITE) {
  return cudaMallocPitch(reinterpret_cast<void**>(p), pitch, w, h, labkit_file, labkit_line);
}
inline cudaError_t cudaMallocManaged(void** p, size_t n, unsigned = cudaMemAttachGlobal, LABKIT_SITE) {
  LABKIT_STICKY();
  void* m = nullptr;   // aligned as cudaMalloc's
  if (posix_memalign(&m, 256, n ? n : 1) != 0) m = nullptr;
  if (!m) return ::labkit::rt::fail(cudaErrorMemoryAllocation);
  std::memset(m, 0, n ? n : 1);
  ::labkit::rt::add(m, n, ::labkit::rt::Mem::Managed, labkit_file, labkit_line);
  *p = m;
  return cudaSuccess;
}
template <class T> inline cudaError_t cudaMallocManaged(T** p, size_t n, unsigned f = cudaMemAttachGlobal, LABKIT_SITE) {
  return cudaMallocManaged(reinterpret_cast<void**>(p), n, f, labkit_file, labkit_line);
}
inline cudaError_t cudaMallocHost(void** p, size_t n, LABKIT_SITE) {
  LABKIT_STICKY();
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // Under the memory check, a heap block that AddressSanitizer guards at its edges.
  void* m = std::malloc(n ? n : 1);
  size_t mapped = 0;
#else
  // Pages of its own, so that an asynchronous copy can guard them (guard_async).
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  size_t mapped = (std::max<size_t>(n, 1) + page - 1) / page * page;
  void* m = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) m = nullptr;
#endif
  if (!m) return ::labkit::rt::fail(cudaErrorMemoryAllocation);
  ::labkit::rt::add(m, n, ::labkit::rt::Mem::Pinned, labkit_file, labkit_line, mapped);
  *p = m;
  return cudaSuccess;
}
template <class T> inline cudaError_t cudaMallocHost(T** p, size_t n, LABKIT_SITE) {
  return cudaMallocHost(reinterpret_cast<void**>(p), n, labkit_file, labkit_line);
}
inline cudaError_t cudaHostAlloc(void** p, size_t n, unsigned flags, LABKIT_SITE) {
  cudaError_t e = cudaMallocHost(p, n, labkit_file, labkit_line);
  if (e == cudaSuccess) {
    std::lock_guard<std::recursive_mutex> lock(::labkit::rt::st().mu);
    ::labkit::rt::st().host_flags[uintptr_t(*p)] = flags;
  }
  return e;
}
// The flags it was allocated with; every pinned allocation is mapped, as on a 64-bit system (unified
// addressing), where cudaHostGetFlags reports cudaHostAllocMapped for cudaMallocHost's memory too.
inline cudaError_t cudaHostGetFlags(unsigned* f, void* h) {
  auto& st = ::labkit::rt::st();
  std::lock_guard<std::recursive_mutex> lock(st.mu);
  uintptr_t base = 0;
  const auto* a = ::labkit::rt::find(st.live, h, &base);
  if (!a || a->kind != ::labkit::rt::Mem::Pinned) return ::labkit::rt::fail(cudaErrorInvalidValue);
  auto it = st.host_flags.find(base);
  *f = (it == st.host_flags.end() ? 0u : it->second) | cudaHostAllocMapped;
  return cudaSuccess;
}
template <class T> inline cudaError_t cudaHostAlloc(T** p, size_t n, unsigned f, LABKIT_SITE) {
  return cudaHostAlloc(reinterpret_cast<void**>(p), n, f, labkit_file, labkit_line);
}
inline cudaError_t cudaMallocHost(void** p, size_t n, unsigned, LABKIT_SITE) { return cudaMallocHost(p, n, labkit_file, labkit_line); }
inline cudaError_t cudaHostGetDevicePointer(void** d, void* h, unsigned) {
  if (!::labkit::rt::is_registered(h)) return ::labkit::rt::fail(cudaErrorInvalidValue);
  *d = h;
  return cudaSuccess;
}
template <class T> inline cudaError_t cudaHostGetDevicePointer(T** d, void* h, unsigned f) {
  return cudaHostGetDevicePointer(reinterpret_cast<void**>(d), h, f);
}
inline cudaError_t cudaHostRegister(void* p, size_t n, unsigned, LABKIT_SITE) {
  if (::labkit::rt::is_registered(p)) return ::labkit::rt::fail(cudaErrorHostMemoryAlreadyRegistered);
  ::labkit::rt::add(p, n, ::labkit::rt::Mem::Registered, labkit_file, labkit_line);
  return cudaSuccess;
}
inline cudaError_t cudaHostUnregister(void* p) {
  auto& s = ::labkit::rt::st();
  std::lock_guard<std::recursive_mutex> g(s.mu);
  auto it = s.live.find(reinterpret_cast<uintptr_t>(p));
  if (it == s.live.end() || it->second.kind != ::labkit::rt::Mem::Registered)
    return ::labkit::rt::fail(cudaErrorHostMemoryNotRegistered);
  s.live.erase(it);
  return cudaSuccess;
}

namespace labkit { namespace rt {
inline cudaError_t free_as(void* p, Mem want, const char* call, const char* file, int line) {
  if (p == nullptr) return cudaSuccess;
  auto& s = st();
  std::lock_guard<std::recursive_mutex> g(s.mu);
  auto it = s.live.find(reinterpret_cast<uintptr_t>(p));
  if (it == s.live.end() || !(it->second.kind == want || (want == Mem::Device && it->second.kind == Mem::Managed))) {
    uintptr_t base = 0;
    if (const Alloc* a = find(s.freed, p, &base)) {
      say("%s:%d: %s(%p): this %zu-byte allocation%s was already freed (a double free)", file, line, call, p, a->size,
          where(*a).c_str());
    } else if (const Alloc* a = find(s.live, p, &base)) {
      say("%s:%d: %s(%p): this is %s memory%s; free it with %s", file, line, call, p, mem_word(a->kind),
          base != reinterpret_cast<uintptr_t>(p) ? " (and not the start of its allocation)" : "",
          a->kind == Mem::Pinned ? "cudaFreeHost" : "cudaFree");
    } else {
      say("%s:%d: %s(%p): not a pointer that %s returned", file, line, call, p, mem_word(want));
    }
    return fail(cudaErrorInvalidValue);
  }
  Alloc a = it->second;
  s.live.erase(it);
  if (a.kind == Mem::Device || a.kind == Mem::Managed) s.allocated -= a.size;
  release(nullptr, true);
  if (a.graph) {
    // the storage stays: the graph's next launch allocates it at the same address
  } else if (a.mapped) {
    munmap(p, a.mapped);
  } else {
    std::free(p);
  }
  s.freed[reinterpret_cast<uintptr_t>(p)] = a;
  return cudaSuccess;
}
}}  // namespace labkit::rt
inline cudaError_t cudaFree(void* p, LABKIT_SITE) {
  LABKIT_STICKY();
  return ::labkit::rt::free_as(p, ::labkit::rt::Mem::Device, "cudaFree", labkit_file, labkit_line);
}
inline cudaError_t cudaFreeHost(void* p, LABKIT_SITE) {
  {
    std::lock_guard<std::recursive_mutex> lock(::labkit::rt::st().mu);
    ::labkit::rt::st().host_flags.erase(uintptr_t(p));
  }
  return ::labkit::rt::free_as(p, ::labkit::rt::Mem::Pinned, "cudaFreeHost", labkit_file, labkit_line);
}
inline cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  *total = 85520809984ull;
  *free_bytes = *total - ::labkit::rt::st().allocated;
  return cudaSuccess;
}
inline cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  auto& s = ::labkit::rt::st();
  std::lock_guard<std::recursive_mutex> g(s.mu);
  const ::labkit::rt::Alloc* al = ::labkit::rt::find(s.live, p, nullptr);
  a->device = 0;
  a->devicePointer = const_cast<void*>(p);
  a->hostPointer = const_cast<void*>(p);
  if (!al) { a->type = cudaMemoryTypeUnregistered; a->devicePointer = nullptr; }
  else if (al->kind == ::labkit::rt::Mem::Device || al->kind == ::labkit::rt::Mem::Symbol) { a->type = cudaMemoryTypeDevice; a->hostPointer = nullptr; }
  else if (al->kind == ::labkit::rt::Mem::Managed) a->type = cudaMemoryTypeManaged;
  else a->type = cudaMemoryTypeHost;
  return cudaSuccess;
}

namespace labkit { namespace rt {
// The sides of a copy that are device memory, by its kind (cudaMemcpyDefault: by where the pointers are).
inline cudaError_t copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, const char* call, const char* file,
                        int line) {
  if (st().sticky != cudaSuccess) return fail(st().sticky);
  if (n == 0) return cudaSuccess;
  bool dst_dev = false, src_dev = false;
  switch (kind) {
    case cudaMemcpyHostToHost: break;
    case cudaMemcpyHostToDevice: dst_dev = true; break;
    case cudaMemcpyDeviceToHost: src_dev = true; break;
    case cudaMemcpyDeviceToDevice: dst_dev = src_dev = true; break;
    case cudaMemcpyDefault: dst_dev = is_device_side(dst); src_dev = is_device_side(src); break;
    default:
      say("%s:%d: %s: %d is not a cudaMemcpyKind", file, line, call, int(kind));
      return fail(cudaErrorInvalidMemcpyDirection);
  }
  if (dst_dev && check_device_range(dst, n, call, "destination", file, line) != cudaSuccess) return st().last;
  if (src_dev && check_device_range(src, n, call, "source", file, line) != cudaSuccess) return st().last;
  // A host side that is device memory: the wrong kind (a GPU fails, or copies garbage).
  if (!dst_dev && kind != cudaMemcpyDefault && is_device_side(dst) && find(st().live, dst, nullptr)->kind == Mem::Device) {
    say("%s:%d: %s: the destination is device memory (cudaMalloc), but the kind says host: use %s", file, line, call,
        src_dev ? "cudaMemcpyDeviceToDevice" : "cudaMemcpyHostToDevice");
    return fail(cudaErrorInvalidValue);
  }
  if (!src_dev && kind != cudaMemcpyDefault && is_device_side(src) && find(st().live, src, nullptr)->kind == Mem::Device) {
    say("%s:%d: %s: the source is device memory (cudaMalloc), but the kind says host: use %s", file, line, call,
        dst_dev ? "cudaMemcpyDeviceToDevice" : "cudaMemcpyDeviceToHost");
    return fail(cudaErrorInvalidValue);
  }
  unguard_all();
  std::memmove(dst, src, n);
  return cudaSuccess;
}
}}  // namespace labkit::rt

inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, LABKIT_SITE) {
  cudaError_t e = ::labkit::rt::copy(dst, src, n, kind, "cudaMemcpy", labkit_file, labkit_line);
  ::labkit::rt::release(nullptr, true);   // a blocking copy waits for the work before it
  ::labkit::rt::flush_device_output();
  return e;
}
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t s = 0,
                                   LABKIT_SITE) {
  if (::labkit::rt::record(s, cudaGraphNodeTypeMemcpy, [=] {
        return ::labkit::rt::copy(dst, src, n, kind, "cudaMemcpyAsync", labkit_file, labkit_line); }))
    return cudaSuccess;
  cudaError_t e = ::labkit::rt::copy(dst, src, n, kind, "cudaMemcpyAsync", labkit_file, labkit_line);
  if (e == cudaSuccess && (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDefault))
    ::labkit::rt::guard_async(dst, n, s, labkit_file, labkit_line);
  return e;
}
inline cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                                cudaMemcpyKind kind, LABKIT_SITE) {
  if (width > dpitch || width > spitch) return ::labkit::rt::fail(cudaErrorInvalidPitchValue);
  for (size_t r = 0; r < height; ++r) {
    cudaError_t e = ::labkit::rt::copy(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch,
                                       width, kind, "cudaMemcpy2D", labkit_file, labkit_line);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                     size_t height, cudaMemcpyKind kind, cudaStream_t s = 0, LABKIT_SITE) {
  if (::labkit::rt::record(s, cudaGraphNodeTypeMemcpy, [=] {
        return cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind, labkit_file, labkit_line); }))
    return cudaSuccess;
  return cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind, labkit_file, labkit_line);
}
inline cudaError_t cudaMemset(void* p, int v, size_t n, LABKIT_SITE) {
  LABKIT_STICKY();
  if (n && ::labkit::rt::check_device_range(p, n, "cudaMemset", "destination", labkit_file, labkit_line) != cudaSuccess)
    return ::labkit::rt::st().last;
  ::labkit::rt::unguard_all();
  std::memset(p, v, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t s = 0, LABKIT_SITE) {
  if (::labkit::rt::record(s, cudaGraphNodeTypeMemset, [=] { return cudaMemset(p, v, n, labkit_file, labkit_line); }))
    return cudaSuccess;
  return cudaMemset(p, v, n, labkit_file, labkit_line);
}
inline cudaError_t cudaMemset2D(void* p, size_t pitch, int v, size_t width, size_t height, LABKIT_SITE) {
  for (size_t r = 0; r < height; ++r) {
    cudaError_t e = cudaMemset(static_cast<char*>(p) + r * pitch, v, width, labkit_file, labkit_line);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

inline cudaError_t cudaMemset2DAsync(void* p, size_t pitch, int v, size_t width, size_t height, cudaStream_t s = 0,
                                     LABKIT_SITE) {
  if (::labkit::rt::record(s, cudaGraphNodeTypeMemset,
                           [=] { return cudaMemset2D(p, pitch, v, width, height, labkit_file, labkit_line); }))
    return cudaSuccess;
  return cudaMemset2D(p, pitch, v, width, height, labkit_file, labkit_line);
}

// __constant__ and __device__ variables are ordinary globals here: a symbol is the variable itself.
namespace labkit { namespace rt {
inline cudaError_t symbol_range(size_t size, size_t n, size_t offset, const char* call, const char* file, int line) {
  if (offset + n > size) {
    say("%s:%d: %s of %zu bytes at offset %zu: the symbol holds %zu bytes", file, line, call, n, offset, size);
    return fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}
}}  // namespace labkit::rt
template <class T>
inline cudaError_t cudaMemcpyToSymbol(const T& symbol, const void* src, size_t n, size_t offset = 0,
                                      cudaMemcpyKind kind = cudaMemcpyHostToDevice, LABKIT_SITE) {
  LABKIT_STICKY();
  if (::labkit::rt::symbol_range(sizeof(T), n, offset, "cudaMemcpyToSymbol", labkit_file, labkit_line) != cudaSuccess)
    return cudaErrorInvalidValue;
  if (kind == cudaMemcpyDeviceToDevice &&
      ::labkit::rt::check_device_range(src, n, "cudaMemcpyToSymbol", "source", labkit_file, labkit_line) != cudaSuccess)
    return cudaErrorInvalidValue;
  ::labkit::rt::unguard_all();
  std::memcpy(reinterpret_cast<char*>(const_cast<T*>(&symbol)) + offset, src, n);
  return cudaSuccess;
}
template <class T>
inline cudaError_t cudaMemcpyFromSymbol(void* dst, const T& symbol, size_t n, size_t offset = 0,
                                        cudaMemcpyKind kind = cudaMemcpyDeviceToHost, LABKIT_SITE) {
  LABKIT_STICKY();
  if (::labkit::rt::symbol_range(sizeof(T), n, offset, "cudaMemcpyFromSymbol", labkit_file, labkit_line) != cudaSuccess)
    return cudaErrorInvalidValue;
  if (kind == cudaMemcpyDeviceToDevice &&
      ::labkit::rt::check_device_range(dst, n, "cudaMemcpyFromSymbol", "destination", labkit_file, labkit_line) != cudaSuccess)
    return cudaErrorInvalidValue;
  ::labkit::rt::unguard_all();
  std::memcpy(dst, reinterpret_cast<const char*>(&symbol) + offset, n);
  return cudaSuccess;
}
template <class T>
inline cudaError_t cudaMemcpyToSymbolAsync(const T& symbol, const void* src, size_t n, size_t offset = 0,
                                           cudaMemcpyKind kind = cudaMemcpyHostToDevice, cudaStream_t = 0, LABKIT_SITE) {
  return cudaMemcpyToSymbol(symbol, src, n, offset, kind, labkit_file, labkit_line);
}
template <class T>
inline cudaError_t cudaMemcpyFromSymbolAsync(void* dst, const T& symbol, size_t n, size_t offset = 0,
                                             cudaMemcpyKind kind = cudaMemcpyDeviceToHost, cudaStream_t = 0, LABKIT_SITE) {
  return cudaMemcpyFromSymbol(dst, symbol, n, offset, kind, labkit_file, labkit_line);
}
template <class T> inline cudaError_t cudaGetSymbolAddress(void** p, const T& symbol) {
  *p = const_cast<void*>(static_cast<const void*>(&symbol));
  if (!::labkit::rt::is_registered(*p)) ::labkit::rt::add(*p, sizeof(T), ::labkit::rt::Mem::Symbol, "", 0);
  return cudaSuccess;
}
template <class T> inline cudaError_t cudaGetSymbolSize(size_t* n, const T&) { *n = sizeof(T); return cudaSuccess; }

// ---------------------------------------------------------------------------------------------
// Streams and events: work is done when issued, so a stream is a name, and an event the time
// its record was issued at.
// ---------------------------------------------------------------------------------------------
struct CUstream_st { unsigned flags; int priority; };
struct CUevent_st {
  std::chrono::steady_clock::time_point t;
  bool recorded;
  unsigned flags;
  cudaStream_t stream;
  bool captured = false;   // recorded in a capturing stream
};
inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  if (e && e->captured && ::labkit::rt::st().capture && !::labkit::rt::capturing(s))
    ::labkit::rt::st().capture_streams.push_back(s);
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreate(cudaStream_t* s) { *s = new CUstream_st{0, 0}; return cudaSuccess; }
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned f) { *s = new CUstream_st{f, 0}; return cudaSuccess; }
inline cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned f, int p) { *s = new CUstream_st{f, p}; return cudaSuccess; }
inline cudaError_t cudaStreamGetFlags(cudaStream_t s, unsigned* f) {
  *f = (s && s != cudaStreamLegacy && s != cudaStreamPerThread) ? s->flags : 0u;
  return cudaSuccess;
}
inline cudaError_t cudaStreamGetPriority(cudaStream_t s, int* p) {
  *p = (s && s != cudaStreamLegacy && s != cudaStreamPerThread) ? s->priority : 0;
  return cudaSuccess;
}
inline cudaError_t cudaStreamGetDevice(cudaStream_t, int* d) { *d = 0; return cudaSuccess; }
inline cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
  ::labkit::rt::release(s, false);
  if (s && s != cudaStreamLegacy && s != cudaStreamPerThread) delete s;
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  // The legacy default stream waits for every blocking stream: release everything then.
  ::labkit::rt::release(s, s == nullptr || s == cudaStreamLegacy);
  ::labkit::rt::flush_device_output();
  LABKIT_STICKY();
  return cudaSuccess;
}
inline cudaError_t cudaStreamQuery(cudaStream_t s) { return cudaStreamSynchronize(s); }
inline cudaError_t cudaStreamSetAttribute(cudaStream_t, cudaStreamAttrID, const cudaStreamAttrValue*) { return cudaSuccess; }
inline cudaError_t cudaStreamGetAttribute(cudaStream_t, cudaStreamAttrID, cudaStreamAttrValue* v) {
  std::memset(v, 0, sizeof *v);
  return cudaSuccess;
}
inline cudaError_t cudaCtxResetPersistingL2Cache() { return cudaSuccess; }
// Work is done when issued, so a wait is already over; under capture, a stream that waits for an event
// recorded in a capturing stream joins the capture (as CUDA's fork of a captured stream does).
inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned = 0);
// A callback runs once the stream's work before it is done: here at once, with that work's pinned
// memory released first (the callback, or a thread it starts, may read what the stream copied).
inline cudaError_t cudaStreamAddCallback(cudaStream_t s, cudaStreamCallback_t cb, void* data, unsigned) {
  if (::labkit::rt::record(s, cudaGraphNodeTypeHost, [=] { cb(s, ::labkit::rt::st().sticky, data); return cudaSuccess; }))
    return cudaSuccess;
  ::labkit::rt::release(s, s == nullptr || s == cudaStreamLegacy);
  cb(s, ::labkit::rt::st().sticky, data);
  return cudaSuccess;
}
inline cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void* data) {
  if (::labkit::rt::record(s, cudaGraphNodeTypeHost, [=] { fn(data); return cudaSuccess; })) return cudaSuccess;
  ::labkit::rt::release(s, s == nullptr || s == cudaStreamLegacy);
  fn(data);
  return cudaSuccess;
}
inline cudaError_t cudaStreamAttachMemAsync(cudaStream_t, void*, size_t = 0, unsigned = cudaMemAttachSingle) {
  return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new CUevent_st{std::chrono::steady_clock::now(), false, 0, nullptr};
  return cudaSuccess;
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned f) {
  *e = new CUevent_st{std::chrono::steady_clock::now(), false, f, nullptr};
  return cudaSuccess;
}
// The C++ form with flags (cuda_runtime.h's overload).
inline cudaError_t cudaEventCreate(cudaEvent_t* e, unsigned f) { return cudaEventCreateWithFlags(e, f); }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0) {
  if (!e) return ::labkit::rt::fail(cudaErrorInvalidResourceHandle);
  e->captured = ::labkit::rt::capturing(s);
  if (e->captured) return cudaSuccess;
  e->t = std::chrono::steady_clock::now();
  e->recorded = true;
  e->stream = s;
  return cudaSuccess;
}
inline cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s = 0, unsigned = 0) { return cudaEventRecord(e, s); }
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (!e) return ::labkit::rt::fail(cudaErrorInvalidResourceHandle);
  ::labkit::rt::release(e->stream, e->stream == nullptr);
  ::labkit::rt::flush_device_output();
  LABKIT_STICKY();
  return cudaSuccess;
}
inline cudaError_t cudaEventQuery(cudaEvent_t e) { return cudaEventSynchronize(e); }
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  if (!a || !b) return ::labkit::rt::fail(cudaErrorInvalidResourceHandle);
  if (!a->recorded || !b->recorded) {
    ::labkit::rt::say("cudaEventElapsedTime: an event that was never recorded (cudaEventRecord) has no time");
    return ::labkit::rt::fail(cudaErrorInvalidResourceHandle);
  }
  if ((a->flags | b->flags) & cudaEventDisableTiming) return ::labkit::rt::fail(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(b->t - a->t).count();
  return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------
// Kernels as functions: attributes, occupancy, cudaLaunchKernel
// ---------------------------------------------------------------------------------------------
template <class... P> inline cudaError_t cudaFuncSetAttribute(void (*k)(P...), cudaFuncAttribute a, int v) {
  if (a == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (v < 0 || v > 232448 - 1024) {
      ::labkit::rt::say("cudaFuncSetAttribute: %d bytes of dynamic shared memory; a block may opt into 227 KiB", v);
      return ::labkit::rt::fail(cudaErrorInvalidValue);
    }
    ::labkit::rt::st().max_dynamic_shared[reinterpret_cast<const void*>(k)] = v;
  }
  return cudaSuccess;
}
template <class F> inline cudaError_t cudaFuncSetCacheConfig(F*, cudaFuncCache) { return cudaSuccess; }
template <class F> inline cudaError_t cudaFuncSetSharedMemConfig(F*, cudaSharedMemConfig) { return cudaSuccess; }
template <class F> inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, F*) {
  std::memset(a, 0, sizeof *a);
  a->maxThreadsPerBlock = 1024;
  a->numRegs = 32;
  a->ptxVersion = 90;
  a->binaryVersion = 90;
  a->maxDynamicSharedSizeBytes = 49152;
  return cudaSuccess;
}
// Occupancy as a GPU of the modelled device's size would have it, from threads and shared memory only
// (the executor has no registers to count).
template <class F> inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, F*, int block, size_t shared) {
  if (block <= 0) return ::labkit::rt::fail(cudaErrorInvalidValue);
  int by_threads = 2048 / ((block + 31) / 32 * 32);
  int by_shared = shared ? int(233472 / (shared + 1024)) : 32;
  *n = std::max(0, std::min({32, by_threads, by_shared}));
  return cudaSuccess;
}
template <class F> inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* n, F* f, int block,
                                                                                           size_t shared, unsigned) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, f, block, shared);
}
// The dynamic shared memory each of numBlocks blocks of blockSize threads may have with all of them on
// one SM (228 KiB per SM, 1 KiB reserved per block, 227 KiB at most per block).
template <class F> inline cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t* bytes, F*, int blocks, int block) {
  if (blocks <= 0 || block <= 0 || block > 1024) return ::labkit::rt::fail(cudaErrorInvalidValue);
  if (blocks * ((block + 31) / 32 * 32) > 2048 || blocks > 32) { *bytes = 0; return cudaSuccess; }
  const size_t per_block = 233472 / size_t(blocks);
  *bytes = per_block > 1024 ? std::min<size_t>(per_block - 1024, 232448) : 0;
  return cudaSuccess;
}
// The block size that keeps the most threads resident on an SM (the larger on a tie), with the dynamic
// shared memory a block of each size needs, and the grid that fills the modelled device with it.
template <class F, class S> inline cudaError_t cudaOccupancyMaxPotentialBlockSizeVariableSMem(
    int* min_grid, int* block, F* f, S shared_of_block_size, int limit = 0) {
  int best = 32, best_active = 0;
  for (int b = 32; b <= (limit > 0 ? std::min(limit, 1024) : 1024); b += 32) {
    int n = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, b, size_t(shared_of_block_size(b)));
    if (n * b >= best_active) { best_active = n * b; best = b; }
  }
  int n = 0;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, best, size_t(shared_of_block_size(best)));
  *block = best;
  *min_grid = n * 132;
  return cudaSuccess;
}
template <class F> inline cudaError_t cudaOccupancyMaxPotentialBlockSize(int* min_grid, int* block, F* f,
                                                                         size_t shared = 0, int limit = 0) {
  return cudaOccupancyMaxPotentialBlockSizeVariableSMem(min_grid, block, f, [shared](int) { return shared; }, limit);
}
// cudaLaunchKernel(kernel, grid, block, args, shared, stream): args[i] points at parameter i.
// The parameters' values are read when the call is made (CUDA copies them then), so that a captured
// launch or a graph's kernel node runs with the values of that moment.
namespace labkit {
namespace rt {
template <class... P> using ArgValues = std::tuple<std::remove_cv_t<std::remove_reference_t<P>>...>;
template <class... P, size_t... I> inline ArgValues<P...> read_args(void** args, std::index_sequence<I...>) {
  return ArgValues<P...>(*static_cast<std::tuple_element_t<I, ArgValues<P...>>*>(args[I])...);
}
// A cooperative launch's grid must fit on the device at once: as many blocks per multiprocessor as the
// occupancy calculation gives (threads and dynamic shared memory), times its 132 multiprocessors.
template <class F> inline cudaError_t check_resident(const LaunchSpec& spec, F* k) {
  const unsigned long long threads = (unsigned long long)spec.block.x * spec.block.y * spec.block.z;
  const unsigned long long blocks = (unsigned long long)spec.grid.x * spec.grid.y * spec.grid.z;
  int per_sm = 0;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, int(threads), spec.shared);
  const unsigned long long most = (unsigned long long)per_sm * 132;
  if (blocks > most) {
    say("kernel '%s': a cooperative launch of %llu blocks of %llu threads (%zu bytes of dynamic shared memory): "
        "the device holds at most %d such blocks per multiprocessor, %llu in all (132 multiprocessors), and every "
        "block of a cooperative launch must be resident at once (cudaOccupancyMaxActiveBlocksPerMultiprocessor "
        "times multiProcessorCount is the largest grid)", spec.name, blocks, threads, spec.shared, per_sm, most);
    return fail(cudaErrorCooperativeLaunchTooLarge);
  }
  return cudaSuccess;
}
template <class... P>
inline cudaError_t launch_values(void (*k)(P...), const LaunchSpec& spec, const ArgValues<P...>& values) {
  LABKIT_STICKY();
  if (check_config(spec, reinterpret_cast<const void*>(k)) != cudaSuccess) return cudaErrorInvalidConfiguration;
  if (spec.cooperative && check_resident(spec, k) != cudaSuccess) return cudaErrorCooperativeLaunchTooLarge;
  struct Ctx { void (*k)(P...); const ArgValues<P...>* values; } ctx{k, &values};
  auto body = [](void* p) {
    auto* c = static_cast<Ctx*>(p);
    ArgValues<P...> mine = *c->values;
    std::apply([c](auto&... v) { c->k(v...); }, mine);
  };
  return run(spec, +body, &ctx);
}
}  // namespace rt
}  // namespace labkit
template <class... P>
inline cudaError_t cudaLaunchKernel(void (*k)(P...), dim3 grid, dim3 block, void** args, size_t shared = 0,
                                    cudaStream_t stream = 0) {
  LABKIT_STICKY();
  ::labkit::rt::LaunchSpec spec{"(cudaLaunchKernel)", grid, block, shared, stream, "", 0};
  auto values = ::labkit::rt::read_args<P...>(args, std::index_sequence_for<P...>{});
  if (::labkit::rt::record(stream, cudaGraphNodeTypeKernel,
                           [=] { return ::labkit::rt::launch_values(k, spec, values); }))
    return cudaSuccess;
  return ::labkit::rt::launch_values(k, spec, values);
}
// cudaLaunchCooperativeKernel: as cudaLaunchKernel, with every block of the grid resident at once, so
// that its threads may sync the whole grid (cg::this_grid().sync()).  A grid larger than the device
// holds at once is refused (cudaErrorCooperativeLaunchTooLarge), as on a GPU.
template <class... P>
inline cudaError_t cudaLaunchCooperativeKernel(void (*k)(P...), dim3 grid, dim3 block, void** args, size_t shared = 0,
                                               cudaStream_t stream = 0) {
  LABKIT_STICKY();
  ::labkit::rt::LaunchSpec spec{"(cudaLaunchCooperativeKernel)", grid, block, shared, stream, "", 0, true};
  auto values = ::labkit::rt::read_args<P...>(args, std::index_sequence_for<P...>{});
  if (::labkit::rt::record(stream, cudaGraphNodeTypeKernel,
                           [=] { return ::labkit::rt::launch_values(k, spec, values); }))
    return cudaSuccess;
  return ::labkit::rt::launch_values(k, spec, values);
}

// printf and the forms the compiler makes of it (puts, putchar, the fortified __printf_chk): in a
// kernel thread the text goes to the device's buffer (above) and the thread lets the others of its
// block run, so that the lanes of a warp print each printf in turn, as in lockstep on a GPU; on the
// host, to stdout as always.
// Weak, as __assert_fail below: defined in each of a program's files that include this.
extern "C" __attribute__((weak)) int vprintf(const char* fmt, va_list ap) {
  if (::labkit::tl_fiber && ::labkit::tl_worker) {
    int n = ::labkit::rt::device_vprintf(fmt, ap);
    ::labkit::let_others_run();
    return n;
  }
  return std::vfprintf(stdout, fmt, ap);
}
extern "C" __attribute__((weak)) int printf(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vprintf(fmt, ap);
  va_end(ap);
  return n;
}
extern "C" __attribute__((weak)) int __printf_chk(int, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vprintf(fmt, ap);
  va_end(ap);
  return n;
}
extern "C" __attribute__((weak)) int __vprintf_chk(int, const char* fmt, va_list ap) { return vprintf(fmt, ap); }
extern "C" __attribute__((weak)) int puts(const char* text) {
  if (::labkit::tl_fiber && ::labkit::tl_worker) {
    std::string line = std::string(text) + "\n";
    ::labkit::rt::keep_device_output(line.data(), int(line.size()));
    ::labkit::let_others_run();
    return 1;
  }
  return std::fputs(text, stdout) < 0 || std::fputc('\n', stdout) == EOF ? EOF : 1;
}
extern "C" __attribute__((weak)) int putchar(int c) {
  if (::labkit::tl_fiber && ::labkit::tl_worker) {
    const char one = char(c);
    ::labkit::rt::keep_device_output(&one, 1);
    ::labkit::let_others_run();
    return (unsigned char)c;
  }
  return std::fputc(c, stdout);
}

// assert() in a kernel: as on a GPU, each failing thread's message names its block and thread (on
// stderr, at the next synchronizing call, as printf's lines), the launch stops, and the program sees
// cudaErrorAssert (sticky) instead of being aborted.  On the host,
// assert() aborts as the C library's does.  Weak: defined in each of a program's files that include this.
#include <assert.h>
extern "C" __attribute__((weak, noreturn)) void __assert_fail(const char* expr, const char* file, unsigned line,
                                                              const char* func) noexcept {
  if (::labkit::tl_fiber && ::labkit::tl_worker) {
    const uint3 b = ::labkit::tl_worker->block_idx, t = ::labkit::tl_fiber->tid;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s:%u: %s: block: [%u,%u,%u], thread: [%u,%u,%u] Assertion `%s` failed.", file, line,
             func, b.x, b.y, b.z, t.x, t.y, t.z, expr);
    std::string line = std::string(buf) + "\n";   // shown at the next synchronizing call, as printf's lines
    ::labkit::rt::keep_device_output(line.data(), int(line.size()), stderr);
    ::labkit::assert_from_fiber(buf);
  }
  std::fprintf(stderr, "%s:%u: %s: Assertion `%s' failed.\n", file, line, func, expr);
  std::abort();
}

// ---------------------------------------------------------------------------------------------
// Stream-ordered allocation (the device's default pool) and unified-memory hints.  Work is done when
// issued, so an allocation in stream order is an allocation now; the pool's attributes and the
// hints have nothing to steer here and are accepted.
// ---------------------------------------------------------------------------------------------
struct CUmemPoolHandle_st { int device; };
typedef CUmemPoolHandle_st* cudaMemPool_t;
enum cudaMemPoolAttr { cudaMemPoolReuseFollowEventDependencies = 1, cudaMemPoolReuseAllowOpportunistic = 2,
                       cudaMemPoolReuseAllowInternalDependencies = 3, cudaMemPoolAttrReleaseThreshold = 4,
                       cudaMemPoolAttrReservedMemCurrent = 5, cudaMemPoolAttrReservedMemHigh = 6,
                       cudaMemPoolAttrUsedMemCurrent = 7, cudaMemPoolAttrUsedMemHigh = 8 };
enum cudaMemoryAdvise { cudaMemAdviseSetReadMostly = 1, cudaMemAdviseUnsetReadMostly = 2,
                        cudaMemAdviseSetPreferredLocation = 3, cudaMemAdviseUnsetPreferredLocation = 4,
                        cudaMemAdviseSetAccessedBy = 5, cudaMemAdviseUnsetAccessedBy = 6 };
inline cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  static CUmemPoolHandle_st the_pool{0};
  if (device != 0) return ::labkit::rt::fail(cudaErrorInvalidDevice);
  *pool = &the_pool;
  return cudaSuccess;
}
inline cudaError_t cudaDeviceGetMemPool(cudaMemPool_t* pool, int device) { return cudaDeviceGetDefaultMemPool(pool, device); }
inline cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr, void*) { return cudaSuccess; }
inline cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t, cudaMemPoolAttr a, void* v) {
  if (a >= cudaMemPoolAttrReleaseThreshold) *static_cast<unsigned long long*>(v) = a == cudaMemPoolAttrUsedMemCurrent ? ::labkit::rt::st().allocated : 0;
  else *static_cast<int*>(v) = 1;
  return cudaSuccess;
}
inline cudaError_t cudaMemPoolTrimTo(cudaMemPool_t, size_t) { return cudaSuccess; }
namespace labkit { namespace rt {
// A graph's allocation node: its address is fixed when the node is made (cudaGraphAddMemAllocNode, or
// cudaMallocAsync in a capturing stream) and stays the same at every launch; the memory is allocated
// when a launch runs the node and freed by a free node, cudaFree or cudaFreeAsync -- a use outside
// those times is a use after free, as for any allocation.  The storage itself is kept; it counts as
// the graphs' memory (cudaDeviceGetGraphMemAttribute) from the first launch that allocates it until
// cudaDeviceGraphMemTrim finds it freed, as CUDA keeps freed graph memory for the next launches.
inline void* graph_reserve(size_t n) {
  void* m = nullptr;
  if (posix_memalign(&m, 256, n ? n : 1) != 0) return nullptr;
  auto& s = st();
  std::lock_guard<std::recursive_mutex> g(s.mu);
  s.graph_storage[reinterpret_cast<uintptr_t>(m)] = Alloc{n, Mem::Device, "", 0, 0, true};
  return m;
}
inline cudaError_t graph_allocate(void* m, size_t n, const char* file, int line) {
  auto& s = st();
  std::lock_guard<std::recursive_mutex> g(s.mu);
  uintptr_t base = 0;
  if (find(s.live, m, &base)) {
    say("%s:%d: a graph's allocation node runs again while its memory (%p, %zu bytes) is still allocated: free it "
        "(a free node, cudaFree or cudaFreeAsync) before the graph is launched again", file, line, m, n);
    return fail(cudaErrorInvalidValue);
  }
  std::memset(m, 0xff, n);   // undefined, as cudaMalloc's memory (see cudaMalloc)
  add(m, n, Mem::Device, file, line, 0, true);
  bool& backed = s.graph_backed[reinterpret_cast<uintptr_t>(m)];
  if (!backed) s.graph_used_high = std::max(s.graph_used_high, s.graph_used += n);
  backed = true;
  return cudaSuccess;
}
}}  // namespace labkit::rt
inline cudaError_t cudaMallocAsync(void** p, size_t n, cudaStream_t s = 0, LABKIT_SITE) {
  if (!::labkit::rt::capturing(s)) return cudaMalloc(p, n, labkit_file, labkit_line);
  if (!p) return ::labkit::rt::fail(cudaErrorInvalidValue);
  void* m = ::labkit::rt::graph_reserve(n);
  if (!m) return ::labkit::rt::fail(cudaErrorMemoryAllocation);
  ::labkit::rt::record(s, cudaGraphNodeTypeMemAlloc, [=] { return ::labkit::rt::graph_allocate(m, n, labkit_file, labkit_line); });
  *p = m;
  return cudaSuccess;
}
template <class T> inline cudaError_t cudaMallocAsync(T** p, size_t n, cudaStream_t s = 0, LABKIT_SITE) {
  return cudaMallocAsync(reinterpret_cast<void**>(p), n, s, labkit_file, labkit_line);
}
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t s = 0, LABKIT_SITE) {
  if (::labkit::rt::record(s, cudaGraphNodeTypeMemFree, [=] { return cudaFree(p, labkit_file, labkit_line); }))
    return cudaSuccess;
  return cudaFree(p, labkit_file, labkit_line);
}
inline cudaError_t cudaMemPrefetchAsync(const void*, size_t, int, cudaStream_t = 0) { return cudaSuccess; }
inline cudaError_t cudaMemAdvise(const void*, size_t, cudaMemoryAdvise, int) { return cudaSuccess; }
// The forms that name a location (CUDA 12.2 and later).
enum cudaMemLocationType { cudaMemLocationTypeInvalid = 0, cudaMemLocationTypeDevice = 1, cudaMemLocationTypeHost = 2,
                           cudaMemLocationTypeHostNuma = 3, cudaMemLocationTypeHostNumaCurrent = 4 };
struct cudaMemLocation { cudaMemLocationType type; int id; };
inline cudaError_t cudaMemPrefetchAsync(const void*, size_t, cudaMemLocation, unsigned, cudaStream_t = 0) { return cudaSuccess; }
inline cudaError_t cudaMemAdvise(const void*, size_t, cudaMemoryAdvise, cudaMemLocation) { return cudaSuccess; }

#include "labkit_graphs.h"
