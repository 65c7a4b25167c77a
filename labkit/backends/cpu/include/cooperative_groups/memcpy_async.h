// <cooperative_groups/memcpy_async.h> for the CPU executor: cg::memcpy_async(group, dst, src, bytes)
// (or element counts: dst, dst_count, src, src_count), a collective of the group, and cg::wait(group)
// and cg::wait_prior<N>(group).  As in CUDA, each thread's part is a batch of its own pipeline
// (<cuda_pipeline.h>): here the group's first thread queues the whole copy and every thread commits
// a batch; a wait makes the first thread's copies older than the newest N batches, then synchronises
// the group, so that all of it sees them.
#pragma once
#include "../cooperative_groups.h"
#include "../cuda_pipeline.h"
#include "../labkit_barrier.h"

namespace cooperative_groups {

template <class Group, class T, class Size>
inline void memcpy_async(const Group& group, T* dst, const T* src, const Size& bytes, int line = __builtin_LINE()) {
  ::labkit::check_copy_alignment(dst, src, ::labkit::copy_alignment(bytes), line);
  ::labkit::Fiber* f = ::labkit::tl_fiber;
  if (group.thread_rank() == 0)
    ::labkit::add_copy(::labkit::tl_worker->async_copies, {f, f->pipe_commits, dst, src, ::std::size_t(bytes), 0});
  __pipeline_commit();
}
// Copies min(dst_count, src_count) elements.
template <class Group, class T, class DstCount, class SrcCount>
inline void memcpy_async(const Group& group, T* dst, const DstCount& dst_count, const T* src, const SrcCount& src_count,
                         int line = __builtin_LINE()) {
  const ::std::size_t n = ::std::min<::std::size_t>(::std::size_t(dst_count), ::std::size_t(src_count));
  memcpy_async(group, dst, src, n * sizeof(T), line);
}

template <unsigned N, class Group> inline void wait_prior(const Group& group) {
  __pipeline_wait_prior(N);
  group.sync();
}
template <class Group> inline void wait(const Group& group) { wait_prior<0>(group); }

}  // namespace cooperative_groups
