// <cuda/barrier> for the CPU executor: libcu++'s split arrive/wait barrier of a thread block,
// cuda::barrier<cuda::thread_scope_block> (init by one thread, arrive returning a token, wait,
// arrive_and_wait, arrive_and_drop, wait_parity, a completion function), and cuda::memcpy_async
// completed by a barrier's phase.  The threads of a block are fibers: a thread that waits for a phase
// is switched out until the last arrival completes it; a phase that never completes is reported as a
// deadlock naming the barrier's line and its missing arrivals.  Memory as on a GPU: what a thread
// wrote before it arrived is seen by those who waited for that phase (the race check sees a release
// at each arrival and an acquire after each wait).  Barriers of device or system scope (threads of
// several blocks) are not modelled: blocks do not run together here.
#pragma once
#include "labkit_cpu.h"

namespace cuda {

enum thread_scope { thread_scope_system = 0, thread_scope_device = 1, thread_scope_block = 2, thread_scope_thread = 3 };

// A byte count that promises the alignment Align of both pointers (checked here: a GPU faults).
template <::std::size_t Align> struct aligned_size_t {
  static_assert(Align && (Align & (Align - 1)) == 0, "aligned_size_t's alignment is a power of two");
  static constexpr ::std::size_t align = Align;
  ::std::size_t value;
  constexpr explicit aligned_size_t(::std::size_t size) : value(size) {}
  constexpr operator ::std::size_t() const { return value; }
};

}  // namespace cuda

namespace labkit {
struct no_completion { void operator()() const {} };
template <class Size> constexpr size_t copy_alignment(Size) { return 1; }
template <size_t A> constexpr size_t copy_alignment(cuda::aligned_size_t<A>) { return A; }

// Queue a memcpy_async copy, completed by `key`'s `tag` (AsyncCopy), after checking what a GPU would
// fault on: pointers not aligned as an aligned_size_t promised.
inline void check_copy_alignment(const void* dst, const void* src, size_t align, int line) {
  if ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & (align - 1))
    fail_from_fiber("memcpy_async at line " + std::to_string(line) + " in kernel '" + std::string(tl_worker->L->kernel) +
                    "': aligned_size_t<" + std::to_string(align) + "> promises " + std::to_string(align) +
                    "-byte aligned pointers, but the destination or source is not");
}
}  // namespace labkit

namespace cuda {

template <thread_scope Scope, class Completion = ::labkit::no_completion> class barrier {
  static_assert(Scope == thread_scope_block || Scope == thread_scope_thread,
                "the CPU executor models barriers among the threads of one block (cuda::thread_scope_block)");

 public:
  using arrival_token = unsigned long long;   // the phase the thread arrived in

  barrier() = default;   // trivial: a __shared__ barrier is set up by init()
  explicit barrier(::std::ptrdiff_t expected, Completion completion = Completion(), int line = __builtin_LINE())
      : completion_(completion) {
    ::labkit::aw_init(&state_, expected, line);
  }
  barrier(const barrier&) = delete;
  barrier& operator=(const barrier&) = delete;

  [[nodiscard]] arrival_token arrive(::std::ptrdiff_t n = 1, int line = __builtin_LINE()) {
    return arrive_(n, false, line);
  }
  void wait(arrival_token token, int line = __builtin_LINE()) const {
    ::labkit::aw_wait(state(), token, false, line);
  }
  void arrive_and_wait(int line = __builtin_LINE()) { wait(arrive_(1, false, line), line); }
  // Arrives, and is no longer expected from the next phase on.
  void arrive_and_drop(int line = __builtin_LINE()) { (void)arrive_(1, true, line); }
  // Waits for the completion of the current phase if its parity is `parity` (else returns at once).
  void wait_parity(bool parity, int line = __builtin_LINE()) const {
    ::labkit::aw_wait(state(), parity ? 1u : 0u, true, line);
  }
  bool try_wait(arrival_token token) const { return state_.phase != token; }
  bool try_wait_parity(bool parity) const { return (state_.phase & 1u) != (parity ? 1u : 0u); }
  static constexpr ::std::ptrdiff_t max() { return ::std::ptrdiff_t(1) << 30; }

  friend void init(barrier* b, ::std::ptrdiff_t expected, Completion completion = Completion(),
                   int line = __builtin_LINE()) {
    new (&b->completion_) Completion(completion);
    ::labkit::aw_init(&b->state_, expected, line);
  }

  ::labkit::AwBarrier* state() const { return const_cast<::labkit::AwBarrier*>(&state_); }

 private:
  arrival_token arrive_(::std::ptrdiff_t n, bool drop, int line) {
    const unsigned long long phase = ::labkit::aw_arrive(&state_, n, drop, line);
    // The last arrival runs the completion before any waiting thread goes on (none runs until this
    // thread next waits or returns: the threads are fibers).
    if (state_.phase != phase) completion_();
    return phase;
  }

  ::labkit::AwBarrier state_;
  Completion completion_;
};

// A copy that the barrier's current phase completes: done when its last arrival comes, so that the
// threads which waited for the phase see the data (and those that read it sooner do not).
template <class Size, thread_scope Scope, class Completion>
inline void memcpy_async(void* dst, const void* src, Size size, barrier<Scope, Completion>& bar,
                         int line = __builtin_LINE()) {
  ::labkit::check_copy_alignment(dst, src, ::labkit::copy_alignment(size), line);
  ::labkit::add_barrier_copy(bar.state(), dst, src, ::std::size_t(size));
}
// The group's copy (cooperative_groups): made once, by the group's first thread, for all of them.
template <class Group, class Size, thread_scope Scope, class Completion>
inline void memcpy_async(const Group& group, void* dst, const void* src, Size size, barrier<Scope, Completion>& bar,
                         int line = __builtin_LINE()) {
  if (group.thread_rank() == 0) memcpy_async(dst, src, size, bar, line);
}

}  // namespace cuda
