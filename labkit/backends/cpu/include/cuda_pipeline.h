// <cuda_pipeline.h> for the CPU executor: the C-style primitives of a thread's own pipeline,
// __pipeline_memcpy_async (4, 8 or 16 bytes, with zero fill), __pipeline_commit and
// __pipeline_wait_prior(N).  As with <cuda/pipeline> (labkit_pipeline.h), a copy is kept pending and
// made when the thread waits for its batch; reading the destination sooner reads undefined bytes.
#pragma once
#include "labkit_cpu.h"

inline void __pipeline_memcpy_async(void* dst, const void* src, size_t size_and_align, size_t zfill = 0,
                                    int line = __builtin_LINE()) {
  using namespace ::labkit;
  if ((size_and_align != 4 && size_and_align != 8 && size_and_align != 16) || zfill > size_and_align)
    fail_from_fiber("__pipeline_memcpy_async at line " + std::to_string(line) + " in kernel '" +
                    std::string(tl_worker->L->kernel) + "': copies 4, 8 or 16 bytes (got " +
                    std::to_string(size_and_align) + ", zero fill " + std::to_string(zfill) + ")");
  if ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & (size_and_align - 1))
    fail_from_fiber("__pipeline_memcpy_async at line " + std::to_string(line) + " in kernel '" +
                    std::string(tl_worker->L->kernel) + "': the pointers must be aligned to the " +
                    std::to_string(size_and_align) + " bytes copied");
  Fiber* f = tl_fiber;
  ::labkit::add_copy(tl_worker->async_copies, {f, f->pipe_commits, dst, src, size_and_align - zfill, zfill});
}
inline void __pipeline_commit() { ++::labkit::tl_fiber->pipe_commits; }
// Waits until at most `prior` of the thread's committed batches are still in flight.
inline void __pipeline_wait_prior(size_t prior) {
  using namespace ::labkit;
  Fiber* f = tl_fiber;
  finish_copies(tl_worker->async_copies,
                [&](const AsyncCopy& c) { return c.key == f && c.tag + prior < f->pipe_commits; });
}
