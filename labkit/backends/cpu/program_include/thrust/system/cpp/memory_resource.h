// labkit: Thrust's C++ system, which stands in for its CUDA system on the CPU executor, allocates the
// memory of device_vector (and universal_vector) as the executor's device (and managed) memory: it is
// found before CCCL's header of this name.  A kernel launched with thrust::raw_pointer_cast(v.data())
// reads memory that the launch's check knows, and the memory check guards its edges.
#pragma once

#include <thrust/detail/config.h>

#include <thrust/mr/fancy_pointer_resource.h>
#include <thrust/mr/memory_resource.h>
#include <thrust/system/cpp/pointer.h>
#include <thrust/system/detail/bad_alloc.h>

#include <cuda_runtime.h>

THRUST_NAMESPACE_BEGIN
namespace system::cpp
{
namespace detail
{
// cudaMalloc or cudaMallocManaged, freed with cudaFree; a failure throws as Thrust's CUDA system does.
template <bool Managed>
class labkit_device_resource final : public mr::memory_resource<>
{
public:
  void* do_allocate(std::size_t bytes, std::size_t) override
  {
    void* p = nullptr;
    const cudaError_t e = Managed ? cudaMallocManaged(&p, bytes, cudaMemAttachGlobal, "thrust::universal_vector", 0)
                                  : cudaMalloc(&p, bytes, "thrust::device_vector", 0);
    if (e != cudaSuccess)
    {
      cudaGetLastError();
      throw thrust::system::detail::bad_alloc(cudaGetErrorString(e));
    }
    return p;
  }
  void do_deallocate(void* p, std::size_t, std::size_t) override
  {
    cudaFree(p);
  }
};

using native_resource = thrust::mr::fancy_pointer_resource<labkit_device_resource<false>, thrust::cpp::pointer<void>>;
using universal_native_resource =
  thrust::mr::fancy_pointer_resource<labkit_device_resource<true>, thrust::cpp::universal_pointer<void>>;
} // namespace detail

using memory_resource                       = detail::native_resource;
using universal_memory_resource             = detail::universal_native_resource;
using universal_host_pinned_memory_resource = universal_memory_resource;
} // namespace system::cpp
THRUST_NAMESPACE_END
