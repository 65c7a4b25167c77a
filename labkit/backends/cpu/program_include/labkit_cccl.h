// labkit_cccl.h -- in front of a program's .cu file that uses Thrust or libcu++ (<cuda/std/...>) on the
// CPU executor, after cuda_runtime.h.
//
// The executor compiles a .cu file as host C++ with __CUDACC__ defined, as nvcc would, so that a
// program's own `#ifdef __CUDACC__` branches are the ones a GPU build takes.  CCCL (Thrust, libcu++)
// reads __CUDACC__ once, in its configuration, to decide whether device code is being compiled: it is
// shown a host compilation here, so that Thrust runs its algorithms with its C++ system
// (THRUST_DEVICE_SYSTEM_CPP, set by the build) and libcu++ uses the host's atomics and math.  Device
// memory is the executor's (thrust/system/cpp/memory_resource.h and
// thrust/system/detail/sequential/malloc_and_free.h beside this file): a device_vector's data, handed
// to a kernel through thrust::raw_pointer_cast, is memory that kernel may read.
#pragma once
#pragma push_macro("__CUDACC__")
#pragma push_macro("__NVCC__")
#undef __CUDACC__
#undef __NVCC__
#include <cuda/std/version>
#include <nv/target>        // NV_IF_TARGET: host code only
#pragma pop_macro("__NVCC__")
#pragma pop_macro("__CUDACC__")
// What Thrust's CUDA system brings with every algorithm header and the C++ system does not: its error
// type (a program catches thrust::system_error around its calls), tuples and pairs.
#include <thrust/pair.h>
#include <thrust/system_error.h>
#include <thrust/tuple.h>
