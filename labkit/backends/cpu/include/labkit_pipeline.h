// <cuda/pipeline> for the CPU executor: cuda::memcpy_async into a pipeline, the thread's own pipeline
// (cuda::pipeline<cuda::thread_scope_thread>, cuda::make_pipeline()) and a block's shared one
// (cuda::pipeline_shared_state<cuda::thread_scope_block, stages>, make_pipeline(group, &state[, role]))
// with producer_acquire / producer_commit / consumer_wait / consumer_release, and
// cuda::pipeline_consumer_wait_prior<N>.
//
// A copy is kept pending (labkit::AsyncCopy) and made when the program waits for it: a thread's
// pipeline at consumer_wait (its oldest batch) or pipeline_consumer_wait_prior<N> (all but the newest
// N batches), a block's pipeline when the last producer commits the stage (a phase of the stage's
// barrier).  A kernel that reads a destination before it waits reads shared memory's undefined bytes
// (NaN), so that the missing wait shows in the results, and the race check sees the copy where it is
// made.  A block's pipeline is built as libcu++ builds it: two barriers per stage, one the producers
// arrive at (the stage is full), one the consumers arrive at (the stage may be refilled).
#pragma once
#include "labkit_barrier.h"

namespace cuda {

enum class pipeline_role { producer, consumer };

template <thread_scope Scope> class pipeline;

// The thread's own pipeline: batches of copies, one per producer_commit, waited for oldest first.
template <> class pipeline<thread_scope_thread> {
 public:
  pipeline() = default;
  pipeline(pipeline&&) = default;
  pipeline(const pipeline&) = delete;
  pipeline& operator=(const pipeline&) = delete;

  void producer_acquire() {}    // a thread's pipeline has room for any number of batches here
  void producer_commit() { ++committed_; }
  void consumer_wait() { finish_([&](unsigned long long batch) { return batch <= released_; }); }
  template <class Rep, class Period> bool consumer_wait_for(const ::std::chrono::duration<Rep, Period>&) {
    consumer_wait();
    return true;
  }
  void consumer_release() { ++released_; }
  bool quit() { return true; }

  void add_(void* dst, const void* src, ::std::size_t n) {
    ::labkit::add_copy(copies_, {this, committed_, dst, src, n, 0});
  }
  // All but the newest n committed batches (pipeline_consumer_wait_prior).
  void wait_prior_(unsigned n) {
    finish_([&](unsigned long long batch) { return batch + n < committed_; });
  }

 private:
  template <class Done> void finish_(Done done) {
    ::labkit::finish_copies(copies_, [&](const ::labkit::AsyncCopy& c) { return done(c.tag); });
  }
  ::std::vector<::labkit::AsyncCopy> copies_;
  unsigned long long committed_ = 0;   // batches committed (the one being filled has this number)
  unsigned long long released_ = 0;    // batches released by the consumer
};

inline pipeline<thread_scope_thread> make_pipeline() { return pipeline<thread_scope_thread>(); }

template <unsigned char Prior> inline void pipeline_consumer_wait_prior(pipeline<thread_scope_thread>& pipe) {
  pipe.wait_prior_(Prior);
}

// The stages of a block's pipeline, in __shared__ memory (undefined until make_pipeline sets them up).
template <thread_scope Scope, unsigned char Stages> struct pipeline_shared_state {
  static_assert(Scope == thread_scope_block, "the CPU executor models pipelines shared by one block");
  static_assert(Stages >= 1, "a pipeline has at least one stage");
  pipeline_shared_state() = default;
  pipeline_shared_state(const pipeline_shared_state&) = delete;
  barrier<thread_scope_block> consumed[Stages];   // arrived at by consumers: the stage may be refilled
  barrier<thread_scope_block> produced[Stages];   // arrived at by producers: the stage is full
  unsigned producers;
};

template <> class pipeline<thread_scope_block> {
 public:
  pipeline(barrier<thread_scope_block>* consumed, barrier<thread_scope_block>* produced, unsigned char stages)
      : consumed_(consumed), produced_(produced), stages_(stages) {}
  pipeline(pipeline&&) = default;
  pipeline(const pipeline&) = delete;
  pipeline& operator=(const pipeline&) = delete;

  // Waits until the consumers have released the stage about to be filled (its previous round).
  void producer_acquire(int line = __builtin_LINE()) { consumed_[head_].wait_parity(consumed_parity_, line); }
  void producer_commit(int line = __builtin_LINE()) {
    (void)produced_[head_].arrive(1, line);
    if (++head_ == stages_) { head_ = 0; consumed_parity_ = !consumed_parity_; }
  }
  void consumer_wait(int line = __builtin_LINE()) { produced_[tail_].wait_parity(produced_parity_, line); }
  void consumer_release(int line = __builtin_LINE()) {
    (void)consumed_[tail_].arrive(1, line);
    if (++tail_ == stages_) { tail_ = 0; produced_parity_ = !produced_parity_; }
  }
  bool quit() { return true; }

  // A copy into the stage being filled: made when its last producer commits.
  void add_(void* dst, const void* src, ::std::size_t n) {
    ::labkit::add_barrier_copy(produced_[head_].state(), dst, src, n);
  }

 private:
  barrier<thread_scope_block>* consumed_;
  barrier<thread_scope_block>* produced_;
  unsigned char stages_, head_ = 0, tail_ = 0;
  bool consumed_parity_ = true, produced_parity_ = false;   // libcu++'s: the first acquire does not wait
};

// Every thread of the group both produces and consumes.
template <class Group, thread_scope Scope, unsigned char Stages>
inline pipeline<thread_scope_block> make_pipeline(const Group& group, pipeline_shared_state<Scope, Stages>* state) {
  if (group.thread_rank() == 0)
    for (unsigned s = 0; s < Stages; ++s) {
      init(&state->consumed[s], ::std::ptrdiff_t(group.size()));
      init(&state->produced[s], ::std::ptrdiff_t(group.size()));
    }
  group.sync();
  return pipeline<thread_scope_block>(state->consumed, state->produced, Stages);
}

// Each thread of the group is a producer or a consumer: the stages' barriers count each kind.
template <class Group, thread_scope Scope, unsigned char Stages>
inline pipeline<thread_scope_block> make_pipeline(const Group& group, pipeline_shared_state<Scope, Stages>* state,
                                                  pipeline_role role) {
  if (group.thread_rank() == 0) state->producers = 0;
  group.sync();
  if (role == pipeline_role::producer) __atomic_fetch_add(&state->producers, 1u, LABKIT_MO);
  group.sync();
  if (group.thread_rank() == 0) {
    const unsigned producers = __atomic_load_n(&state->producers, LABKIT_MO);
    for (unsigned s = 0; s < Stages; ++s) {
      init(&state->consumed[s], ::std::ptrdiff_t(group.size() - producers));
      init(&state->produced[s], ::std::ptrdiff_t(producers));
    }
  }
  group.sync();
  return pipeline<thread_scope_block>(state->consumed, state->produced, Stages);
}

template <class Size, thread_scope Scope>
inline void memcpy_async(void* dst, const void* src, Size size, pipeline<Scope>& pipe, int line = __builtin_LINE()) {
  ::labkit::check_copy_alignment(dst, src, ::labkit::copy_alignment(size), line);
  pipe.add_(dst, src, ::std::size_t(size));
}
// The group's copy: made once, by the group's first thread, for all of them.
template <class Group, class Size, thread_scope Scope>
inline void memcpy_async(const Group& group, void* dst, const void* src, Size size, pipeline<Scope>& pipe,
                         int line = __builtin_LINE()) {
  if (group.thread_rank() == 0) memcpy_async(dst, src, size, pipe, line);
}

}  // namespace cuda
