// cuda_profiler_api.h for labkit's CPU executor: there is no profiler to start or stop.
#pragma once
#include "cuda_runtime.h"
inline cudaError_t cudaProfilerStart() { return cudaSuccess; }
inline cudaError_t cudaProfilerStop() { return cudaSuccess; }
