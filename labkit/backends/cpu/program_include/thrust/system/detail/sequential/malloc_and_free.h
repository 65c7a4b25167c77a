// labkit: thrust::malloc and thrust::device_malloc of Thrust's C++ system, which stands in for its CUDA
// system on the CPU executor, return the executor's device memory (cudaMalloc): found before CCCL's
// header of this name.  A kernel may read what they return.
#pragma once

#include <thrust/detail/config.h>

#include <thrust/detail/raw_pointer_cast.h>
#include <thrust/system/detail/sequential/execution_policy.h>

#include <cuda_runtime.h>

THRUST_NAMESPACE_BEGIN
namespace system::detail::sequential
{
template <typename DerivedPolicy>
inline void* malloc(execution_policy<DerivedPolicy>&, std::size_t n)
{
  void* p = nullptr;
  if (cudaMalloc(&p, n, "thrust::malloc", 0) != cudaSuccess)
  {
    cudaGetLastError();
    return nullptr;   // as std::malloc's failure: the caller (thrust::malloc) throws bad_alloc
  }
  return p;
}

template <typename DerivedPolicy, typename Pointer>
inline void free(sequential::execution_policy<DerivedPolicy>&, Pointer ptr)
{
  cudaFree(thrust::raw_pointer_cast(ptr));
}
} // namespace system::detail::sequential
THRUST_NAMESPACE_END
