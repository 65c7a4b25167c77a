// helper_cuda.h for labkit's CPU executor: the error checks and device selection of NVIDIA's
// cuda-samples (checkCudaErrors, getLastCudaError, findCudaDevice ...), labkit's own implementation of
// what the samples call.  The device found is the executor's one (cudaGetDeviceProperties).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include "cuda_runtime.h"
#include "helper_string.h"

#ifndef EXIT_WAIVED
#define EXIT_WAIVED 2
#endif
#ifndef MAX
#define MAX(a, b) (a > b ? a : b)
#endif
#ifndef MIN
#define MIN(a, b) (a < b ? a : b)
#endif

inline const char* _cudaGetErrorEnum(cudaError_t error) { return cudaGetErrorName(error); }

template <typename T> void check(T result, char const* const func, const char* const file, int const line) {
  if (result) {
    fprintf(stderr, "CUDA error at %s:%d code=%d(%s) \"%s\" \n", file, line, static_cast<unsigned int>(result),
            _cudaGetErrorEnum(result), func);
    exit(EXIT_FAILURE);
  }
}
#define checkCudaErrors(val) check((val), #val, __FILE__, __LINE__)
#define getLastCudaError(msg) __getLastCudaError(msg, __FILE__, __LINE__)
inline void __getLastCudaError(const char* errorMessage, const char* file, const int line) {
  cudaError_t err = cudaGetLastError();
  if (cudaSuccess != err) {
    fprintf(stderr, "%s(%i) : getLastCudaError() CUDA error : %s : (%d) %s.\n", file, line, errorMessage,
            static_cast<int>(err), cudaGetErrorString(err));
    exit(EXIT_FAILURE);
  }
}
#define printLastCudaError(msg) __printLastCudaError(msg, __FILE__, __LINE__)
inline void __printLastCudaError(const char* errorMessage, const char* file, const int line) {
  cudaError_t err = cudaGetLastError();
  if (cudaSuccess != err)
    fprintf(stderr, "%s(%i) : getLastCudaError() CUDA error : %s : (%d) %s.\n", file, line, errorMessage,
            static_cast<int>(err), cudaGetErrorString(err));
}
inline int ftoi(float value) { return value >= 0 ? int(value + 0.5f) : int(value - 0.5f); }

// FP32 cores per SM and architecture names, by compute capability (as NVIDIA publishes them).
inline int _ConvertSMVer2Cores(int major, int minor) {
  struct { int sm, cores; } t[] = {{0x30, 192}, {0x32, 192}, {0x35, 192}, {0x37, 192}, {0x50, 128}, {0x52, 128},
                                   {0x53, 128}, {0x60, 64},  {0x61, 128}, {0x62, 128}, {0x70, 64},  {0x72, 64},
                                   {0x75, 64},  {0x80, 64},  {0x86, 128}, {0x87, 128}, {0x89, 128}, {0x90, 128}};
  for (auto& e : t)
    if (e.sm == ((major << 4) + minor)) return e.cores;
  return 128;
}
inline const char* _ConvertSMVer2ArchName(int major, int minor) {
  switch ((major << 4) + minor) {
    case 0x50: case 0x52: case 0x53: return "Maxwell";
    case 0x60: case 0x61: case 0x62: return "Pascal";
    case 0x70: case 0x72: return "Volta";
    case 0x75: return "Turing";
    case 0x80: case 0x86: case 0x87: return "Ampere";
    case 0x89: return "Ada";
    case 0x90: return "Hopper";
    default: return "Hopper";
  }
}
inline int gpuDeviceInit(int devID) {
  int count = 0;
  checkCudaErrors(cudaGetDeviceCount(&count));
  if (devID < 0) devID = 0;
  if (devID > count - 1) {
    fprintf(stderr, "\n>> %d CUDA capable GPU device(s) detected. <<\n", count);
    fprintf(stderr, ">> gpuDeviceInit (-device=%d) is not a valid GPU device. <<\n\n", devID);
    return -devID;
  }
  cudaDeviceProp p;
  checkCudaErrors(cudaGetDeviceProperties(&p, devID));
  checkCudaErrors(cudaSetDevice(devID));
  printf("gpuDeviceInit() CUDA Device [%d]: \"%s\n", devID, _ConvertSMVer2ArchName(p.major, p.minor));
  return devID;
}
inline int gpuGetMaxGflopsDeviceId() { return 0; }
inline int findCudaDevice(int argc, const char** argv) {
  int devID = 0;
  if (checkCmdLineFlag(argc, argv, "device")) {
    devID = getCmdLineArgumentInt(argc, argv, "device=");
    if (devID < 0) {
      printf("Invalid command line parameter\n ");
      exit(EXIT_FAILURE);
    }
    devID = gpuDeviceInit(devID);
    if (devID < 0) {
      printf("exiting...\n");
      exit(EXIT_FAILURE);
    }
  } else {
    devID = gpuGetMaxGflopsDeviceId();
    checkCudaErrors(cudaSetDevice(devID));
    cudaDeviceProp p;
    checkCudaErrors(cudaGetDeviceProperties(&p, devID));
    printf("GPU Device %d: \"%s\" with compute capability %d.%d\n\n", devID, _ConvertSMVer2ArchName(p.major, p.minor),
           p.major, p.minor);
  }
  return devID;
}
inline int findCudaDevice(int argc, char** argv) { return findCudaDevice(argc, const_cast<const char**>(argv)); }
inline int findIntegratedGPU() { return -1; }
inline bool checkCudaCapabilities(int major_version, int minor_version) {
  cudaDeviceProp p;
  checkCudaErrors(cudaGetDeviceProperties(&p, 0));
  if (p.major > major_version || (p.major == major_version && p.minor >= minor_version)) {
    printf("  Device %d: <%16s >, Compute SM %d.%d detected\n", 0, p.name, p.major, p.minor);
    return true;
  }
  printf("  No GPU device was found that can support CUDA compute capability %d.%d.\n", major_version, minor_version);
  return false;
}
