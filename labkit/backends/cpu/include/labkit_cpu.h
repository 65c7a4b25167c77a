// labkit_cpu.h -- the CUDA execution model on a CPU, for labkit's CPU executor.
//
// A kernel source (*.cu) is compiled by the host C++ compiler with this header
// in front of it.  The header turns the CUDA C vocabulary into plain C++:
//
//   * a grid runs block by block; blocks are spread over worker threads
//     (one per core), each worker runs one block at a time; a cooperative launch's blocks are all
//     resident (a worker puts each aside at a grid sync and runs its next: "Cooperative launches");
//   * the threads of a block are fibers: each has its own small stack and runs
//     until it reaches a barrier (__syncthreads, __syncwarp, a shuffle, a vote)
//     or returns; then the next fiber runs.  A switch saves six registers and
//     the stack pointer (no system call), so it costs a few nanoseconds;
//   * __shared__ variables are `static thread_local`: one copy per worker,
//     hence one per running block (heap blocks under the memory check); dynamic shared memory is a per-worker buffer;
//   * __constant__ and __device__ variables are ordinary globals, which the
//     Python side finds by name (as CuPy's RawModule.get_global does).
//   * a thread waiting for a phase of a cuda::barrier (labkit_barrier.h) is a
//     fiber switched out until the phase's last arrival; the copies of
//     memcpy_async (labkit_pipeline.h, cuda_pipeline.h) wait, pending, for
//     that arrival or the pipeline's wait, and are made then.
//
// Checking modes (chosen per launch): a barrier check that reports a
// __syncthreads() reached by part of a block, and a shuffled schedule that runs
// the threads of a block in a random order between barriers.  Bounds checking
// of memory is done by building the same source with AddressSanitizer and
// running it in a separate process (see labkit/backends/cpu/runner.cpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <cfenv>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif
#include <cmath>
#include <limits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <chrono>
#include <condition_variable>
#include <csetjmp>
#include <csignal>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define LABKIT_ASAN 1
#else
#define LABKIT_ASAN 0
#endif
// LABKIT_INTERLEAVE: the shuffled schedule's build.  It is compiled with ThreadSanitizer's
// instrumentation but without its runtime: the hooks at every memory access are the executor's own
// (below), and may switch to another thread of the block there, as a GPU interleaves warps.
// LABKIT_COUNT: the counting build (labkit.counters), with the same instrumentation (and the
// compiler's basic-block hook): the hooks record each access of a kernel thread (labkit_count.h).
#if defined(LABKIT_INTERLEAVE)
#define LABKIT_TSAN 0
#define LABKIT_PREEMPT 1
#elif defined(LABKIT_COUNT)
#define LABKIT_TSAN 0
#elif defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define LABKIT_TSAN 1
extern "C" {
void AnnotateIgnoreReadsBegin(const char* file, int line);
void AnnotateIgnoreReadsEnd(const char* file, int line);
void AnnotateIgnoreWritesBegin(const char* file, int line);
void AnnotateIgnoreWritesEnd(const char* file, int line);
}
#else
#define LABKIT_TSAN 0
#endif
#ifndef LABKIT_PREEMPT
#define LABKIT_PREEMPT 0
#endif
#ifndef LABKIT_COUNT
#define LABKIT_COUNT 0
#endif
// Atomics are relaxed, as on a GPU; under the race check they order memory (see "Atomics" below).
#if LABKIT_TSAN
#define LABKIT_MO __ATOMIC_SEQ_CST
#else
#define LABKIT_MO __ATOMIC_RELAXED
#endif

// The executor's own code in a kernel's translation unit that each thread runs (unpacking the
// launch's arguments): without the access and basic-block hooks of the builds that have them.  Its
// reads are not the kernel's, and in the counting build each cost a hook's full search for an array.
#if defined(__clang__)
#define LABKIT_UNINSTRUMENTED __attribute__((no_sanitize("thread", "coverage")))
#elif __GNUC__ >= 12
#define LABKIT_UNINSTRUMENTED __attribute__((no_sanitize("thread"), no_sanitize_coverage))
#else
#define LABKIT_UNINSTRUMENTED __attribute__((no_sanitize("thread")))
#endif

// ---------------------------------------------------------------------------
// Qualifiers and attributes
// ---------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __constant__
#define __shared__ static thread_local
#define __managed__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __grid_constant__

// ---------------------------------------------------------------------------
// Vector types
// ---------------------------------------------------------------------------
struct uint3 { unsigned int x, y, z; };
struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

#define LABKIT_VEC1(T, N) struct __attribute__((aligned(sizeof(T)))) N { T x; }; \
  static inline N make_##N(T x) { return N{x}; }
#define LABKIT_VEC2(T, N, A) struct __attribute__((aligned(A))) N { T x, y; }; \
  static inline N make_##N(T x, T y) { return N{x, y}; }
#define LABKIT_VEC3(T, N) struct N { T x, y, z; }; \
  static inline N make_##N(T x, T y, T z) { return N{x, y, z}; }
#define LABKIT_VEC4(T, N, A) struct __attribute__((aligned(A))) N { T x, y, z, w; }; \
  static inline N make_##N(T x, T y, T z, T w) { return N{x, y, z, w}; }
// CUDA's vector types, with vector_types.h's alignments (a 2- or 4-vector is aligned to its size, up
// to 16 bytes; a 1- or 3-vector to its element's).
#define LABKIT_VECS(T, N, A2, A4) LABKIT_VEC1(T, N##1) LABKIT_VEC2(T, N##2, A2) LABKIT_VEC3(T, N##3) \
  LABKIT_VEC4(T, N##4, A4)
LABKIT_VECS(signed char, char, 2, 4)
LABKIT_VECS(unsigned char, uchar, 2, 4)
LABKIT_VECS(short, short, 4, 8)
LABKIT_VECS(unsigned short, ushort, 4, 8)
LABKIT_VECS(int, int, 8, 16)
LABKIT_VEC1(unsigned int, uint1)
LABKIT_VEC2(unsigned int, uint2, 8)
LABKIT_VEC4(unsigned int, uint4, 16)
LABKIT_VECS(long, long, 2 * sizeof(long), 16)
LABKIT_VECS(unsigned long, ulong, 2 * sizeof(long), 16)
LABKIT_VECS(long long, longlong, 16, 16)
LABKIT_VECS(unsigned long long, ulonglong, 16, 16)
LABKIT_VECS(float, float, 8, 16)
LABKIT_VECS(double, double, 16, 16)
// CUDA 13's names for the 32-byte vectors and their 16-byte-aligned forms.
LABKIT_VEC4(long, long4_16a, 16)
LABKIT_VEC4(long, long4_32a, 32)
LABKIT_VEC4(unsigned long, ulong4_16a, 16)
LABKIT_VEC4(unsigned long, ulong4_32a, 32)
LABKIT_VEC4(long long, longlong4_16a, 16)
LABKIT_VEC4(long long, longlong4_32a, 32)
LABKIT_VEC4(unsigned long long, ulonglong4_16a, 16)
LABKIT_VEC4(unsigned long long, ulonglong4_32a, 32)
LABKIT_VEC4(double, double4_16a, 16)
LABKIT_VEC4(double, double4_32a, 32)
static inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return uint3{x, y, z}; }

// ---------------------------------------------------------------------------
// Where the runtime is compiled
// ---------------------------------------------------------------------------
// The executor's runtime (the scheduler, barriers, the launch, the signal handlers) is most of the
// code this header generates, the same for every kernel.  The CPU executor compiles it once per
// build (runtime.cpp, with LABKIT_RUNTIME_IMPL) into an object that it links into every kernel
// module; a kernel's own translation unit (LABKIT_RUNTIME_LINKED) sees only the declarations of what
// it calls.  Linked statically, each module still has its own copy of the runtime and its state.
// With neither macro (where that object could not be built) the header defines all of it inline,
// in the kernel's translation unit.
#if defined(LABKIT_RUNTIME_LINKED) && defined(LABKIT_RUNTIME_IMPL)
#error "LABKIT_RUNTIME_LINKED (a kernel) and LABKIT_RUNTIME_IMPL (the runtime) exclude each other"
#endif
#if defined(LABKIT_RUNTIME_LINKED) || defined(LABKIT_RUNTIME_IMPL)
#define LABKIT_RUNTIME_FN          // one definition, in the runtime's object
#else
#define LABKIT_RUNTIME_FN inline   // defined in every translation unit that includes this header
#endif

// ---------------------------------------------------------------------------
// Fiber switch: save callee-saved registers on the current stack, store the
// stack pointer in *save, load `load` as the stack pointer, restore, return.
// Only the runtime switches; a kernel's translation unit must not define it a second time.
// ---------------------------------------------------------------------------
extern "C" void labkit_fiber_switch(void** save, void* load);

#if defined(__APPLE__)
#define LABKIT_SYM(s) "_" #s
#define LABKIT_FN_BEGIN(s) ".globl " LABKIT_SYM(s) "\n.private_extern " LABKIT_SYM(s) "\n.p2align 4\n" LABKIT_SYM(s) ":\n"
#define LABKIT_FN_END(s) ""
#else
#define LABKIT_SYM(s) #s
#define LABKIT_FN_BEGIN(s) ".globl " #s "\n.hidden " #s "\n.type " #s ",@function\n.p2align 4\n" #s ":\n"
#define LABKIT_FN_END(s) ".size " #s ",.-" #s "\n"
#endif

#if defined(LABKIT_RUNTIME_LINKED)
// (in the runtime's object)
#elif defined(__x86_64__)
// The floating-point control state (MXCSR, the x87 control word) is not switched, as on AArch64: every
// thread of a kernel runs in the default modes (a rounding mode of its own is set and restored within
// one operation, labkit::rounded, with no switch between), and storing and loading it cost four times
// the rest of a switch.  The frame keeps an 8-byte slot (LABKIT_FRAME_BYTES), unused.
asm(".text\n" LABKIT_FN_BEGIN(labkit_fiber_switch)
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  subq $8, %rsp\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  addq $8, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n" LABKIT_FN_END(labkit_fiber_switch));
#define LABKIT_FRAME_BYTES 64  // 8 (an unused slot) + 6 registers + return address
#elif defined(__aarch64__)
asm(".text\n" LABKIT_FN_BEGIN(labkit_fiber_switch)
    "  sub sp, sp, #160\n"
    "  stp x19, x20, [sp, #0]\n  stp x21, x22, [sp, #16]\n  stp x23, x24, [sp, #32]\n"
    "  stp x25, x26, [sp, #48]\n  stp x27, x28, [sp, #64]\n  stp x29, x30, [sp, #80]\n"
    "  stp d8, d9, [sp, #96]\n  stp d10, d11, [sp, #112]\n  stp d12, d13, [sp, #128]\n"
    "  stp d14, d15, [sp, #144]\n"
    "  mov x9, sp\n  str x9, [x0]\n  mov sp, x1\n"
    "  ldp x19, x20, [sp, #0]\n  ldp x21, x22, [sp, #16]\n  ldp x23, x24, [sp, #32]\n"
    "  ldp x25, x26, [sp, #48]\n  ldp x27, x28, [sp, #64]\n  ldp x29, x30, [sp, #80]\n"
    "  ldp d8, d9, [sp, #96]\n  ldp d10, d11, [sp, #112]\n  ldp d12, d13, [sp, #128]\n"
    "  ldp d14, d15, [sp, #144]\n"
    "  add sp, sp, #160\n  ret\n" LABKIT_FN_END(labkit_fiber_switch));
#define LABKIT_FRAME_BYTES 160
#else
#error "labkit's CPU executor has fiber switching for x86-64 and AArch64 only"
#endif

// The runtime's state and functions are the module's own: hidden, so that no module's calls or
// thread-locals bind to another module's copy, whatever the loader's scope.
#pragma GCC visibility push(hidden)
namespace labkit {

// ---------------------------------------------------------------------------
// Launch state
// ---------------------------------------------------------------------------
enum CheckFlags : unsigned { CHECK_BARRIER = 1u, CHECK_SHUFFLE = 2u };
// A cooperative launch (cudaLaunchCooperativeKernel): every block of the grid is resident at once, so
// that its threads may wait at a grid-wide sync (see "Cooperative launches" below).  A flag of `flags`.
enum LaunchFlags : unsigned { LAUNCH_COOPERATIVE = 4u };

// Shared with Python (ctypes): keep the layout in step with cpu/module.py.  Of default visibility:
// the entry points Python calls take it, and a hidden parameter type would hide them too.
struct __attribute__((visibility("default"))) LaunchConfig {
  unsigned grid[3];
  unsigned block[3];
  unsigned long long shared_mem;
  unsigned flags;
  unsigned workers;           // 0: one per core
  unsigned long long seed;    // for the shuffled schedule
  unsigned long long stack_bytes;
  unsigned long long timeout_ms;  // the watchdog: a launch running longer is stopped (0: never)
};

// Race check: the blocks one worker runs in turn use two sets of everything a block's threads touch
// that the worker keeps (the checker's fibers, stacks, shared memory, sync objects), in turn, so that
// two consecutive blocks are as unordered as on a GPU (see begin_block).  One set elsewhere.
constexpr unsigned RACE_SETS = LABKIT_TSAN ? 2u : 1u;

enum class St : unsigned char { Ready, BlockBar, WarpBar, TileBar, GridBar, CoalBar, AwBar, Done };

// A split arrive/wait barrier (libcu++'s cuda::barrier, <cuda/barrier>): plain data, so that it may
// live in __shared__ memory, which starts undefined (filled with 0xff bytes for each block); init()
// sets `magic`, and an arrival at a barrier without it is reported rather than counted.
struct AwBarrier {
  unsigned magic;
  unsigned expected;          // arrivals that complete a phase (arrive_and_drop lowers it)
  unsigned pending;           // arrivals the current phase still waits for
  unsigned long long phase;   // phases completed
  char race_sync[2];          // race check: sync objects, by the parity of the phase
};
constexpr unsigned AW_MAGIC = 0x6c61776bu;

// A copy of memcpy_async (<cuda/pipeline>, <cuda_pipeline.h>), kept pending until what completes it:
// the phase `tag` of the barrier `key`, or the batch `tag` of a pipeline.  Copied only then, so that
// a kernel reading the destination before it waits reads shared memory's undefined bytes (NaN), not
// the data, as it might on a GPU.
struct AsyncCopy {
  const void* key;
  unsigned long long tag;
  void* dst;
  const void* src;
  size_t n;                   // bytes copied from src
  size_t fill;                // bytes after them set to zero (__pipeline_memcpy_async's zfill)
};


struct Fiber {
  void* sp = nullptr;
  uint3 tid{0, 0, 0};
  unsigned linear = 0, lane = 0, warp = 0;
  St state = St::Ready;
  int line = 0;               // source line of the barrier it waits at
  char* stack_lo = nullptr;   // lowest usable byte of its stack
  size_t stack_size = 0;
  unsigned count_phase = 0;   // __syncthreads_count/and/or calls made: which accumulator is next
  unsigned bar_gen = 0;       // __syncthreads() passed: the race check alternates two sync objects
  void* race = nullptr;       // race check: this thread's ThreadSanitizer fiber
  int race_quiet = 0;         // race check: Bookkeeping scopes open while it was switched out
  int quiet = 0;              // shuffled schedule: > 0 inside the executor's own code (no switch there)
  unsigned grid_gen = 0;      // grid syncs passed: the race check alternates two sync objects
  unsigned coal_mask = 0;     // coalesced_threads(): the lanes of its warp that arrived with it
  const char* coal_file = nullptr;   // coalesced_threads(): where it waits (lanes that arrive at
  int coal_line = 0;                 // one place together form one group)
  const AwBarrier* aw = nullptr;  // the cuda::barrier it waits at (state AwBar)
  unsigned long long pipe_commits = 0;  // __pipeline_commit() calls: the C-style pipeline's batches
};

struct WarpState {
  unsigned live = 0;          // lanes that exist and have not returned
  unsigned arrived = 0;       // lanes waiting at a warp barrier
  unsigned lane_mask[32];     // the mask each waiting lane's barrier names: lanes that wait with the same
                              // mask are one group (tiles of one warp synchronise apart, as on a GPU)
  unsigned long long slot[32];  // the values a shuffle or vote exchanges
  // A shuffle: the lane each waiting lane reads (+1; 0: the lane waits at no shuffle), and what it
  // reads, taken from the slots when the group is released (release_group), so that a lane that goes
  // on to its next shuffle may overwrite its slot before the others have read theirs.
  unsigned char shfl_src[32];
  unsigned long long shfl_result[32];
  unsigned gen[32];           // group barriers released, by the group's lowest lane (race check)
  char race_sync[RACE_SETS][32][2];   // race check: sync objects of __syncwarp, by set, lowest lane and parity
  int collective_line[32];    // the line of the wmma operation each waiting lane called (0: none; mma.h)
  unsigned collective_calls[32];  // wmma operations each lane has entered (mma.h)
  // mma.h: the last product one of the warp's lanes computed, by its inputs' bytes (the largest tiles:
  // 32x16 half or 16x8 tf32 inputs, 32x8 float accumulators), which other lanes holding the same tiles take.
  const void* mma_instance = nullptr;
  unsigned char mma_flag = 0;
  alignas(16) unsigned char mma_key[3 * 1024];
  alignas(16) unsigned char mma_result[1024];
};

struct Launch {
  LaunchConfig cfg;
  dim3 grid, block;
  unsigned nthreads = 0;
  void (*body)(void*) = nullptr;  // runs the kernel for the current fiber
  void* ctx = nullptr;
  const char* kernel = "";
  std::atomic<unsigned long long> next_block{0};
  unsigned long long nblocks = 0;
  std::atomic<int> failed{0};
  std::atomic<unsigned long long> switches{0};
  std::atomic<int> cancel{0};            // why the launch was stopped: 1 watchdog, 2 Ctrl-C, 3 stack overflow
  // A cooperative launch's grid-wide sync: the workers meet once each has brought every block it runs
  // to the sync (or to its end); `grid_parked` counts the blocks that wait there.
  std::mutex grid_mu;
  std::condition_variable grid_cv;
  unsigned grid_workers = 0, grid_arrived = 0;
  unsigned long long grid_round = 0, grid_parked = 0, grid_waiting = 0;
  std::atomic<int> grid_line{0};          // the line of the grid sync last reached (for the reports)
  char race_grid[2] = {0, 0};             // race check: the sync objects of grid syncs (alternating)
  std::vector<pthread_t> thread_ids;     // the workers' threads, for the signals that stop them
  unsigned race_fibers = 0;              // race check: ThreadSanitizer fibers per worker and set (race_fiber_count)
  std::mutex err_mu;
  std::string error;
  void fail(const std::string& msg) {
    std::lock_guard<std::mutex> g(err_mu);
    if (!failed.exchange(1)) error = msg;
  }
};

struct Worker {
  Launch* L = nullptr;
  void* sched_sp = nullptr;
  const void* sched_bottom = nullptr;  // for AddressSanitizer's fiber annotations
  size_t sched_size = 0;
  std::vector<Fiber> fibers;
  std::vector<unsigned> order;
  std::vector<WarpState> warps;
  uint3 block_idx{0, 0, 0};
  unsigned live = 0, at_bar = 0;
  unsigned tile_n = 0;            // the size of the multi-warp tiles the block's threads last synchronised
  int bar_line = 0;
  unsigned at_grid = 0;           // threads of the running block waiting at a grid sync
  int grid_line = 0;
  unsigned coal_waiting = 0;      // threads of the running block waiting in coalesced_threads()
  unsigned index = 0;             // which worker of the launch (a cooperative launch's blocks are dealt out)
  unsigned long long bar_count[2] = {0, 0}, bar_seen[2] = {0, 0};  // __syncthreads_count's sums
  bool aborted = false;
  unsigned long long switches = 0;
  char* stacks = nullptr;
  size_t stacks_bytes = 0, stack_size = 0;
  unsigned nstacks = 0;
  unsigned char* dyn = nullptr;   // dynamic shared memory of the running block (in dyn_base)
  unsigned char* dyn_base = nullptr;   // the worker's dynamic shared memory, RACE_SETS buffers
  size_t dyn_stride = 0;
  std::vector<AsyncCopy> async_copies;   // memcpy_async copies of the running block not yet done
  std::vector<std::pair<void*, size_t>> shared_regions;  // this worker's __shared__ arrays
  struct SharedCopy { void* storage; unsigned set; void* block; };
  std::vector<SharedCopy> shared_heap;   // memory and race checks: storage (and set) -> its heap block
  std::mt19937_64 rng;
  unsigned long long preempt_state = 1;   // shuffled schedule: a xorshift for the switch points
  // Stopping a block from a signal handler: the handler jumps back to the scheduler's loop (the
  // fiber it interrupted is abandoned; its block fails).
  sigjmp_buf escape;
  volatile sig_atomic_t escape_ready = 0;
  volatile int overflow_fiber = -1;      // the fiber whose stack ran into its guard page
  // Race check: the sync objects of __syncthreads (two, alternating) and of a block's start and end.
  void* race_sched = nullptr;
  // Each of these by set (RACE_SETS); race_bar also by parity.
  char race_bar[2 * RACE_SETS] = {}, race_block_start[RACE_SETS] = {}, race_block_end[RACE_SETS] = {};
  unsigned race_set = 0;                 // the set of the running block
  unsigned long long blocks_begun = 0;   // blocks this worker has begun in this launch (sets alternate)
  std::vector<void*> race_fibers;        // the ThreadSanitizer fibers that the block's threads share
  std::vector<int> race_named;           // which thread (linear index) each is named for now

  ~Worker() {
    if (stacks) munmap(stacks, stacks_bytes);
    std::free(dyn_base);
#if LABKIT_TSAN
    for (void* r : race_fibers) __tsan_destroy_fiber(r);
#endif
  }
};

inline thread_local Worker* tl_worker = nullptr;
inline thread_local Fiber* tl_fiber = nullptr;
inline thread_local bool tl_in_fiber = false;   // shuffled schedule: running a kernel thread, not the scheduler
inline Launch* g_launch = nullptr;  // one launch at a time per module (Python holds a lock)

inline void* dyn_shared() { return tl_worker->dyn; }

// --- the race check's view of execution (ThreadSanitizer builds; nothing in the others) ---------
// Every CUDA thread is a ThreadSanitizer fiber, switched to without synchronisation, so two threads'
// accesses are unordered unless something orders them as on a GPU: a barrier (a release by each
// thread that arrives, an acquire by each that leaves), an atomic, the start or end of a block.
// The executor's own bookkeeping (barrier counts, the warp's exchange slots, the scheduler) is not
// kernel memory: its accesses are ignored.
#if LABKIT_TSAN
// ThreadSanitizer keeps "ignore accesses" per fiber, and several threads of a block may share one
// (race_fiber_count): switch_to hands a thread's open Bookkeeping scopes over when it switches it out
// and back in, so that the next thread on the same fiber is checked.
inline void race_ignore_begin() { AnnotateIgnoreReadsBegin(__FILE__, __LINE__); AnnotateIgnoreWritesBegin(__FILE__, __LINE__); }
inline void race_ignore_end() { AnnotateIgnoreWritesEnd(__FILE__, __LINE__); AnnotateIgnoreReadsEnd(__FILE__, __LINE__); }
inline int& race_quiet_depth() {
  static thread_local int depth = 0;   // Bookkeeping scopes open in the code running on this OS thread
  return depth;
}
#endif
// The shuffled schedule switches at no memory access while one is alive, and the race check still
// sees those accesses (unlike Bookkeeping): for the executor's steps made of the kernel's accesses,
// such as the copies that complete a barrier's phase.
struct NoSwitch {
#if LABKIT_PREEMPT
  Fiber* f = tl_in_fiber ? tl_fiber : nullptr;
  NoSwitch() { if (f) ++f->quiet; }
  ~NoSwitch() { if (f) --f->quiet; }
  NoSwitch(const NoSwitch&) = delete;
#endif
};
struct Bookkeeping {
#if LABKIT_PREEMPT   // the shuffled schedule never switches threads inside the executor's own code
  Fiber* f = tl_in_fiber ? tl_fiber : nullptr;
  Bookkeeping() { if (f) ++f->quiet; }
  ~Bookkeeping() { if (f) --f->quiet; }
  Bookkeeping(const Bookkeeping&) = delete;
#endif
#if LABKIT_TSAN
  Bookkeeping() { race_ignore_begin(); ++race_quiet_depth(); }
  ~Bookkeeping() { --race_quiet_depth(); race_ignore_end(); }
  Bookkeeping(const Bookkeeping&) = delete;
#endif
};
inline void race_release(void* sync) {
#if LABKIT_TSAN
  __tsan_release(sync);
#else
  (void)sync;
#endif
}
inline void race_acquire(void* sync) {
#if LABKIT_TSAN
  __tsan_acquire(sync);
#else
  (void)sync;
#endif
}

// --- what kernels and the generated entry points call in the runtime (see "Where the runtime is
// compiled"); the definitions follow below.
LABKIT_RUNTIME_FN void shared_register(void* p, size_t n);
LABKIT_RUNTIME_FN std::string block_name(const Worker* W);
[[noreturn]] LABKIT_RUNTIME_FN void fail_from_fiber(const std::string& msg);
[[noreturn]] LABKIT_RUNTIME_FN void assert_from_fiber(const std::string& msg);
LABKIT_RUNTIME_FN void syncthreads(int line);
LABKIT_RUNTIME_FN void warp_sync(unsigned mask, bool orders_memory = false);
LABKIT_RUNTIME_FN void tile_sync(unsigned n);
LABKIT_RUNTIME_FN void grid_sync(int line);
LABKIT_RUNTIME_FN void let_others_run();   // a kernel thread steps aside for the others of its block
LABKIT_RUNTIME_FN unsigned coalesce(const char* file, int line);
LABKIT_RUNTIME_FN void release_workers();
LABKIT_RUNTIME_FN std::string& last_error();
LABKIT_RUNTIME_FN unsigned long long& last_switches();
LABKIT_RUNTIME_FN int run_grid(const LaunchConfig* cfg, const char* kernel, void (*body)(void*), void* ctx);
// cuda::barrier (labkit_barrier.h): init, an arrival of n (returns the phase it arrived in; the last
// arrival completes the phase: its pending copies are made and its waiters released), the drop of one
// expected arrival, and a wait until phase `phase` has completed (or, parity_only, the phase of that
// parity).
LABKIT_RUNTIME_FN void aw_init(AwBarrier* b, long long expected, int line);
LABKIT_RUNTIME_FN unsigned long long aw_arrive(AwBarrier* b, long long n, bool drop, int line);
LABKIT_RUNTIME_FN void aw_wait(AwBarrier* b, unsigned long long phase, bool parity_only, int line);

// Make the pending copies that `done` selects, in the order they were issued, and forget them.  The
// list is the executor's (taken apart with no switch to another thread and unseen by the race check);
// the copies are the kernel's accesses, which the checks see.
template <class Done> inline void finish_copies(std::vector<AsyncCopy>& copies, Done done) {
  AsyncCopy few[8];                 // a wait's copies: most often a few (no allocation then)
  size_t nfew = 0;
  std::vector<AsyncCopy> more;
  {
    Bookkeeping quiet;
    size_t keep = 0;
    for (size_t i = 0; i < copies.size(); ++i) {
      if (!done(copies[i])) copies[keep++] = copies[i];
      else if (nfew < 8) few[nfew++] = copies[i];
      else more.push_back(copies[i]);
    }
    copies.resize(keep);
  }
  auto make = [](const AsyncCopy& c) {
    std::memcpy(c.dst, c.src, c.n);
    if (c.fill) std::memset(static_cast<char*>(c.dst) + c.n, 0, c.fill);
  };
  for (size_t i = 0; i < nfew; ++i) make(few[i]);
  for (const AsyncCopy& c : more) make(c);
  if (!more.empty()) {
    Bookkeeping quiet;
    std::vector<AsyncCopy>().swap(more);
  }
}
// Queue a copy (an AsyncCopy) on `copies`: the executor's own list.
inline void add_copy(std::vector<AsyncCopy>& copies, const AsyncCopy& c) {
  Bookkeeping quiet;
  copies.push_back(c);
}
// Queue a copy that the current phase of barrier `b` completes (its phase read with no switch between).
inline void add_barrier_copy(AwBarrier* b, void* dst, const void* src, size_t n) {
  Bookkeeping quiet;
  tl_worker->async_copies.push_back({b, b->phase, dst, src, n, 0});
}
#if LABKIT_COUNT
// Counting: every thread of the block has made all its accesses up to here (a completed barrier, the
// block's end); group them into warp instructions (labkit_count.h).
LABKIT_RUNTIME_FN void count_flush(Worker* W);
LABKIT_RUNTIME_FN void count_attach(Worker* W);   // a worker's stacks are ready for this launch
LABKIT_RUNTIME_FN void count_warp_done(Worker* W, unsigned warp);   // every lane of `warp` has returned
LABKIT_RUNTIME_FN void count_enter(Worker* W, unsigned thread);      // `thread` of the block runs next
LABKIT_RUNTIME_FN void count_release();   // the workers are given back: so is what counting kept for them
#else
inline void count_enter(Worker*, unsigned) {}
inline void count_release() {}
inline void count_flush(Worker*) {}
inline void count_attach(Worker*) {}
inline void count_warp_done(Worker*, unsigned) {}
#endif

// A __shared__ variable: the rewrite keeps its storage under another name and binds the variable's
// name to what this returns.  Normally the storage itself (thread_local: one copy per worker, hence
// per running block).  Under the memory check, a heap block of exactly its size instead, which
// AddressSanitizer surrounds with poisoned bytes, so an index past a shared array is reported with
// its line (thread-local storage has no such guard); the race check names it in its reports.
template <class T> inline T& shared_var(T& storage, const char* name) {
  Bookkeeping quiet;
  void* key = (void*)&storage;   // (void*): drops a volatile qualifier
#if LABKIT_ASAN || LABKIT_TSAN   // the race check names shared arrays in its report the same way
  Worker* W = tl_worker;
  for (auto& r : W->shared_heap)
    if (r.storage == key && r.set == W->race_set) return *static_cast<T*>(r.block);
  void* block = nullptr;
  if (posix_memalign(&block, std::max(alignof(T), sizeof(void*)), sizeof(T)) != 0) std::abort();
  W->shared_heap.push_back(Worker::SharedCopy{key, W->race_set, block});
  std::fprintf(stderr, "LABKIT-SHARED %s %p %zu\n", name, block, sizeof(T));   // for the report
  shared_register(block, sizeof(T));
  return *static_cast<T*>(block);
#else
  (void)name;
  shared_register(key, sizeof(T));
  return storage;
#endif
}

// ---------------------------------------------------------------------------
// The runtime (not in a kernel's translation unit where the runtime is linked)
// ---------------------------------------------------------------------------
#if !defined(LABKIT_RUNTIME_LINKED)

// Called after each __shared__ declaration (the Python side adds the call): the first
// time a worker meets an array, it is filled with NaN bytes; run_block refills it for
// every block, since shared memory starts undefined.
LABKIT_RUNTIME_FN void shared_register(void* p, size_t n) {
  Worker* W = tl_worker;
  for (auto& r : W->shared_regions)
    if (r.first == p) return;
  W->shared_regions.emplace_back(p, n);
  std::memset(p, 0xff, n);
}

#if LABKIT_PREEMPT
#define LABKIT_UNINSTRUMENTED __attribute__((no_sanitize_thread))
// A switch that keeps tl_in_fiber true exactly while a kernel thread runs (the scheduler's stack
// pointer is the one place a fiber switches to).  Not instrumented: no switch point inside a switch.
LABKIT_UNINSTRUMENTED inline void raw_switch(void** save, void* load) {
  const bool to_fiber = load != tl_worker->sched_sp;
  tl_in_fiber = to_fiber;
  labkit_fiber_switch(save, load);
  tl_in_fiber = !to_fiber;             // back where we were
}
// A switch point: before a memory access of a kernel thread, now and then, let the scheduler run
// another thread of the block (this one stays ready and goes on later), so that a read-modify-write
// such as y[0] += 1 can lose updates, and a missing barrier can show, as on a GPU.
LABKIT_UNINSTRUMENTED inline void preempt_point() {
  if (!tl_in_fiber) return;
  Fiber* f = tl_fiber;
  if (f->quiet) return;
  Worker* W = tl_worker;
  unsigned long long x = W->preempt_state;
  x ^= x << 13; x ^= x >> 7; x ^= x << 17;
  W->preempt_state = x;
  if ((x & 7) != 0) return;            // about one access in eight
  ++W->switches;
  raw_switch(&f->sp, W->sched_sp);
}
#endif

// --- switching, with AddressSanitizer told about stack changes in checked builds
inline void switch_to(void** save, void* load, const void* bottom, size_t size, bool dying = false,
                      void* race_to = nullptr) {
#if LABKIT_TSAN
  // Leaving a kernel thread for the scheduler: its open Bookkeeping scopes leave the fiber with it.
  // (The hand-over's own accesses are the executor's: made inside one more ignored scope.)
  Fiber* leaving = tl_worker && race_to == tl_worker->race_sched ? tl_fiber : nullptr;
  if (leaving) {
    race_ignore_begin();
    const int depth = race_quiet_depth();
    leaving->race_quiet = depth;
    race_quiet_depth() = 0;
    for (int k = 0; k <= depth; ++k) race_ignore_end();
  }
  __tsan_switch_to_fiber(race_to, __tsan_switch_to_fiber_no_sync);
  labkit_fiber_switch(save, load);
  if (leaving) {                     // back in that thread (on its fiber): its scopes again
    race_ignore_begin();
    const int depth = leaving->race_quiet;
    race_quiet_depth() = depth;
    for (int k = 0; k < depth; ++k) race_ignore_begin();
    race_ignore_end();
  }
  (void)bottom; (void)size; (void)dying;
#elif LABKIT_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(dying ? nullptr : &fake, bottom, size);
  labkit_fiber_switch(save, load);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#elif LABKIT_PREEMPT
  (void)bottom; (void)size; (void)dying; (void)race_to;
  raw_switch(save, load);
#else
  (void)bottom; (void)size; (void)dying; (void)race_to;
  labkit_fiber_switch(save, load);
#endif
}

inline void yield_to_scheduler() {
  Worker* W = tl_worker;
  Fiber* f = tl_fiber;
  switch_to(&f->sp, W->sched_sp, W->sched_bottom, W->sched_size, false, W->race_sched);
}

LABKIT_RUNTIME_FN void let_others_run() {
  if (tl_fiber && tl_worker) yield_to_scheduler();   // still ready: the scheduler comes back to it in turn
}

LABKIT_RUNTIME_FN std::string block_name(const Worker* W) {
  return "(" + std::to_string(W->block_idx.x) + "," + std::to_string(W->block_idx.y) + "," +
         std::to_string(W->block_idx.z) + ")";
}

// Abort the block from inside a fiber: record the error and never run again.
[[noreturn]] LABKIT_RUNTIME_FN void fail_from_fiber(const std::string& msg) {
  Worker* W = tl_worker;
  W->L->fail(msg);
  W->aborted = true;
  tl_fiber->state = St::Done;
  switch_to(&tl_fiber->sp, W->sched_sp, W->sched_bottom, W->sched_size, true, W->race_sched);
  __builtin_unreachable();
}

inline void release_block_barrier(Worker* W) {
  for (auto& f : W->fibers)
    if (f.state == St::BlockBar) f.state = St::Ready;
  W->at_bar = 0;
}

// The group of lanes waiting with `mask` is complete once every live lane it names has arrived with
// that same mask: release them (all but `self`, which goes on without waiting).  True if released.
inline bool release_group(Worker* W, WarpState& ws, unsigned warp, unsigned mask, unsigned self = 32) {
  unsigned need = mask & ws.live;
  if ((ws.arrived & need) != need) return false;
  for (unsigned lane = 0; lane < 32; ++lane)
    if (((need >> lane) & 1u) && ws.lane_mask[lane] != mask) return false;
  for (unsigned lane = 0; lane < 32; ++lane) {
    if (!((need >> lane) & 1u)) continue;
    if (ws.shfl_src[lane]) {
      ws.shfl_result[lane] = ws.slot[ws.shfl_src[lane] - 1];
      ws.shfl_src[lane] = 0;
    }
    unsigned i = warp * 32 + lane;
    if (lane != self && i < W->fibers.size() && W->fibers[i].state == St::WarpBar) W->fibers[i].state = St::Ready;
  }
  ws.arrived &= ~need;
  if (mask) ++ws.gen[__builtin_ctz(mask)];
  return true;
}

// After a lane returns: any group that was waiting only for it is complete now.
inline void try_release_warp(Worker* W, WarpState& ws, unsigned warp) {
  // Only the waiting lanes, in order (a release only clears bits): every thread's exit passes here.
  for (unsigned m = ws.arrived; m; m &= m - 1) {
    const unsigned lane = unsigned(__builtin_ctz(m));
    if ((ws.arrived >> lane) & 1u) release_group(W, ws, warp, ws.lane_mask[lane]);
  }
}

// __syncthreads(): wait until every live thread of the block has arrived.
LABKIT_RUNTIME_FN void syncthreads(int line) {
  Bookkeeping quiet;
  Worker* W = tl_worker;
  Fiber* f = tl_fiber;
  const bool check = W->L->cfg.flags & CHECK_BARRIER;
  if (check) {
    if (W->at_bar == 0) W->bar_line = line;
    else if (W->bar_line != line)
      fail_from_fiber("barrier check: in kernel '" + std::string(W->L->kernel) + "', block " +
                      block_name(W) + ", threads wait at two different __syncthreads() (lines " +
                      std::to_string(W->bar_line) + " and " + std::to_string(line) +
                      "): a barrier inside divergent code");
    if (W->live < W->L->nthreads)
      fail_from_fiber("barrier check: in kernel '" + std::string(W->L->kernel) + "', block " +
                      block_name(W) + ", __syncthreads() at line " + std::to_string(line) +
                      " is reached by only " + std::to_string(W->live) + " of " +
                      std::to_string(W->L->nthreads) +
                      " threads: the others returned before it (a barrier inside divergent code)");
  }
  // Race check: two sync objects in turn, so that a thread already past this barrier (and on its way
  // to the next) cannot order its new accesses before those of a thread still leaving this one.
  void* sync = &W->race_bar[2 * W->race_set + (f->bar_gen++ & 1u)];
  race_release(sync);
  if (++W->at_bar == W->live) {  // last to arrive: everyone may go on
    count_flush(W);
    release_block_barrier(W);
    race_acquire(sync);
    return;
  }
  f->state = St::BlockBar;
  f->line = line;
  yield_to_scheduler();
  race_acquire(sync);
}

// A warp-level barrier over the lanes in `mask` (used by __syncwarp, shuffles, votes).
// `orders_memory`: __syncwarp and a tile's sync() order the lanes' memory accesses (the race check
// sees a release and an acquire); shuffles and votes exchange values and order nothing.
LABKIT_RUNTIME_FN void warp_sync(unsigned mask, bool orders_memory) {
  Bookkeeping quiet;
  Worker* W = tl_worker;
  Fiber* f = tl_fiber;
  WarpState& ws = W->warps[f->warp];
  if (W->L->cfg.flags & CHECK_BARRIER) {
    // Lanes that do not exist (a partial last warp) are not missing; lanes that returned are.
    unsigned exist = 0;
    for (unsigned l = 0; l < 32; ++l)
      if (f->warp * 32 + l < W->L->nthreads) exist |= 1u << l;
    if (mask & exist & ~ws.live) {
      char buf[16];
      snprintf(buf, sizeof buf, "0x%08x", mask);
      fail_from_fiber("barrier check: in kernel '" + std::string(W->L->kernel) + "', block " +
                      block_name(W) + ", warp " + std::to_string(f->warp) +
                      ": a warp operation with mask " + buf +
                      " names lanes that have already returned");
    }
  }
  // The group's sync object: by its lowest lane and the parity of the group barriers it has passed.
  void* sync = mask ? &ws.race_sync[W->race_set][__builtin_ctz(mask)][ws.gen[__builtin_ctz(mask)] & 1u] : nullptr;
  if (orders_memory && sync) race_release(sync);
  ws.arrived |= 1u << f->lane;
  ws.lane_mask[f->lane] = mask;
  if (!release_group(W, ws, f->warp, mask, f->lane)) {
    f->state = St::WarpBar;
    yield_to_scheduler();
  }
  if (orders_memory && sync) race_acquire(sync);
}

// A tile of n threads, a multiple of a warp (cooperative_groups' thread_block_tile<64> ... <1024>): the
// threads of linear ranks [lo, lo + n) wait until every one of them that has not returned has arrived.
// True if the tile was complete and its waiting threads are released.
inline bool release_tile(Worker* W, unsigned lo, unsigned n) {
  const unsigned hi = std::min<unsigned>(lo + n, unsigned(W->fibers.size()));
  unsigned waiting = 0;
  for (unsigned i = lo; i < hi; ++i) {
    if (W->fibers[i].state == St::TileBar) ++waiting;
    else if (W->fibers[i].state != St::Done) return false;
  }
  if (!waiting) return false;
  for (unsigned i = lo; i < hi; ++i)
    if (W->fibers[i].state == St::TileBar) W->fibers[i].state = St::Ready;
  ++W->warps[lo / 32].gen[0];
  return true;
}
LABKIT_RUNTIME_FN void tile_sync(unsigned n) {
  Bookkeeping quiet;
  Worker* W = tl_worker;
  Fiber* f = tl_fiber;
  W->tile_n = n;
  const unsigned lo = f->linear / n * n;
  // The race check's sync object: the tile's first warp's, by the parity of the barriers it passed.
  WarpState& first = W->warps[lo / 32];
  void* sync = &first.race_sync[W->race_set][0][first.gen[0] & 1u];
  race_release(sync);
  f->state = St::TileBar;
  if (!release_tile(W, lo, n)) yield_to_scheduler();
  race_acquire(sync);
}

// A grid-wide sync (cooperative_groups' grid.sync()): only in a cooperative launch, where every block
// is resident.  The thread waits (GridBar); once every live thread of its block waits, the worker puts
// the block aside and runs its next one; once every block of the grid waits, the workers meet and all
// go on (cooperative_blocks).  The meeting is a mutex: everything written before the sync, by any
// block, is visible after it, as on a GPU.
LABKIT_RUNTIME_FN void grid_sync(int line) {
  Bookkeeping quiet;
  Worker* W = tl_worker;
  Fiber* f = tl_fiber;
  Launch& L = *W->L;
  if (!(L.cfg.flags & LAUNCH_COOPERATIVE))
    fail_from_fiber("in kernel '" + std::string(L.kernel) + "', block " + block_name(W) +
                    ": a grid-wide sync (grid.sync()) at line " + std::to_string(line) +
                    " in a launch that is not cooperative: it needs every block of the grid resident at once, "
                    "which only cudaLaunchCooperativeKernel guarantees (a <<<>>> launch fails or hangs on a GPU); "
                    "launch the kernel with cudaLaunchCooperativeKernel");
  if (L.cfg.flags & CHECK_BARRIER) {
    if (W->at_grid == 0) W->grid_line = line;
    else if (W->grid_line != line)
      fail_from_fiber("barrier check: in kernel '" + std::string(L.kernel) + "', block " + block_name(W) +
                      ", threads wait at two different grid syncs (lines " + std::to_string(W->grid_line) +
                      " and " + std::to_string(line) + "): a grid sync inside divergent code");
    if (W->live < L.nthreads)
      fail_from_fiber("barrier check: in kernel '" + std::string(L.kernel) + "', block " + block_name(W) +
                      ", the grid sync at line " + std::to_string(line) + " is reached by only " +
                      std::to_string(W->live) + " of " + std::to_string(L.nthreads) +
                      " threads: the others returned before it (a grid sync inside divergent code)");
  }
  L.grid_line.store(line, std::memory_order_relaxed);
  // Race check: released by every thread that arrives, acquired by each that leaves; two objects in
  // turn (as for __syncthreads).  The block's end and start objects (of its set) order it before the
  // worker's next block of the same set, which reuses its stacks and shared memory (RACE_SETS).
  void* sync = &L.race_grid[f->grid_gen++ & 1u];
  race_release(sync);
  race_release(&W->race_block_end[W->race_set]);
  f->state = St::GridBar;
  f->line = line;
  ++W->at_grid;
  yield_to_scheduler();
  race_acquire(&W->race_block_start[W->race_set]);
  race_acquire(sync);
}

// coalesced_threads(): the thread waits (CoalBar) until no lane of its warp can run any more (each
// waits somewhere or has returned); then the lanes that wait here, at this same call, are the group:
// the threads of the warp that reached the call together (form_coalesced, in the scheduler).
LABKIT_RUNTIME_FN unsigned coalesce(const char* file, int line) {
  Bookkeeping quiet;
  Worker* W = tl_worker;
  Fiber* f = tl_fiber;
  f->coal_file = file;
  f->coal_line = line;
  f->coal_mask = 0;
  f->state = St::CoalBar;
  ++W->coal_waiting;
  yield_to_scheduler();
  return f->coal_mask;
}

// --- cuda::barrier ------------------------------------------------------------------------------
inline std::string aw_where(const Worker* W, int line) {
  return "in kernel '" + std::string(W->L->kernel) + "', block " + block_name(W) + ", a cuda::barrier at line " +
         std::to_string(line);
}
LABKIT_RUNTIME_FN void aw_init(AwBarrier* b, long long expected, int line) {
  Bookkeeping quiet;
  if (expected < 0 || expected > (1ll << 30))
    fail_from_fiber("barrier check: " + aw_where(tl_worker, line) + " is initialised with " +
                    std::to_string(expected) + " expected arrivals (0 to 2^30 are allowed)");
  b->magic = AW_MAGIC;
  b->expected = b->pending = unsigned(expected);
  b->phase = 0;
  b->race_sync[0] = b->race_sync[1] = 0;
}
LABKIT_RUNTIME_FN unsigned long long aw_arrive(AwBarrier* b, long long n, bool drop, int line) {
  // One step of the shuffled schedule: no other thread runs between this arrival and, if it is the
  // last, the phase's copies and the release of its waiters.
  NoSwitch hold;
  Worker* W = tl_worker;
  {
    Bookkeeping quiet;
    if (b->magic != AW_MAGIC)
      fail_from_fiber("barrier check: " + aw_where(W, line) + " is used before init(&bar, count) "
                      "(a __shared__ barrier is undefined until one thread initialises it, and the others "
                      "must wait for that, e.g. at a __syncthreads())");
    if (n < 1 || (unsigned long long)n > b->pending)
      fail_from_fiber("barrier check: " + aw_where(W, line) + " gets " + std::to_string(n) +
                      " arrival(s) in a phase that waits for only " + std::to_string(b->pending) +
                      " more (of " + std::to_string(b->expected) + "): more threads arrive than init() counted");
    if (drop) --b->expected;
  }
  race_release(&b->race_sync[b->phase & 1u]);   // what this thread wrote is seen by those who wait
  const unsigned long long phase = b->phase;
  bool complete;
  {
    Bookkeeping quiet;
    b->pending -= unsigned(n);
    complete = b->pending == 0;
  }
  if (!complete) return phase;
  // The last arrival: the phase's copies are made (the race check sees them released with the
  // arrivals), then the next phase begins and everyone waiting on this one may go on.
  finish_copies(W->async_copies, [&](const AsyncCopy& c) { return c.key == b && c.tag == phase; });
  race_release(&b->race_sync[phase & 1u]);
  Bookkeeping quiet;
  b->pending = b->expected;
  ++b->phase;
  for (auto& f : W->fibers)
    if (f.state == St::AwBar && f.aw == b) f.state = St::Ready;
  race_acquire(&b->race_sync[phase & 1u]);
  return phase;
}
LABKIT_RUNTIME_FN void aw_wait(AwBarrier* b, unsigned long long phase, bool parity_only, int line) {
  Bookkeeping quiet;
  Fiber* f = tl_fiber;
  if (b->magic != AW_MAGIC)
    fail_from_fiber("barrier check: " + aw_where(tl_worker, line) + " is waited on before init(&bar, count)");
  auto waiting = [&] { return parity_only ? ((b->phase ^ phase) & 1u) == 0 : b->phase == phase; };
  while (waiting()) {
    f->state = St::AwBar;
    f->aw = b;
    f->line = line;
    yield_to_scheduler();
  }
  f->aw = nullptr;
  race_acquire(&b->race_sync[phase & 1u]);
}

// Called when a fiber's kernel body returns.
inline void thread_exit() {
  Bookkeeping quiet;
  Worker* W = tl_worker;
  Fiber* f = tl_fiber;
  // Race check: a thread that has returned counts as arrived at every later barrier (as on a GPU).
  // It releases into the next barrier's object only: the other one is what threads still leaving
  // the last barrier acquire, and they must not be ordered after this thread's accesses since then.
  // Later barriers see it through those who pass the next one; the block's end orders its accesses
  // before the next block of its set on this worker (RACE_SETS).
  race_release(&W->race_bar[2 * W->race_set + (f->bar_gen & 1u)]);
  race_release(&W->race_block_end[W->race_set]);
  f->state = St::Done;
  --W->live;
  WarpState& ws = W->warps[f->warp];
  ws.live &= ~(1u << f->lane);
  ws.arrived &= ~(1u << f->lane);
  if (ws.live == 0) count_warp_done(W, f->warp);
  // Hardware does not wait for threads that have exited: release barriers they complete.
  if (W->at_bar > 0 && W->at_bar == W->live) {
    if (W->L->cfg.flags & CHECK_BARRIER) {
      W->L->fail("barrier check: in kernel '" + std::string(W->L->kernel) + "', block " +
                 block_name(W) + ", __syncthreads() at line " + std::to_string(W->bar_line) +
                 " is reached by only " + std::to_string(W->at_bar) + " of " +
                 std::to_string(W->L->nthreads) +
                 " threads: the others returned before it (a barrier inside divergent code)");
      W->aborted = true;
    }
    count_flush(W);
    release_block_barrier(W);
  }
  try_release_warp(W, ws, f->warp);
  // Nor does a multi-warp tile's barrier wait for them.
  if (W->tile_n) release_tile(W, f->linear / W->tile_n * W->tile_n, W->tile_n);
  // A grid sync that the rest of the block waits at: the barrier check reports it, as for __syncthreads.
  if (W->at_grid > 0 && W->at_grid == W->live && (W->L->cfg.flags & CHECK_BARRIER)) {
    W->L->fail("barrier check: in kernel '" + std::string(W->L->kernel) + "', block " + block_name(W) +
               ", the grid sync at line " + std::to_string(W->grid_line) + " is reached by only " +
               std::to_string(W->at_grid) + " of " + std::to_string(W->L->nthreads) +
               " threads: the others returned before it (a grid sync inside divergent code)");
    W->aborted = true;
  }
}

// A failed assert() in a kernel: the launch fails with the first one (a GPU's trap ends the grid and
// no further block starts), and this thread ends as if it had returned, so that the rest of its block
// runs on and every thread that fails an assertion there prints its line too, as on a GPU.
[[noreturn]] LABKIT_RUNTIME_FN void assert_from_fiber(const std::string& msg) {
  Worker* W = tl_worker;
  W->L->fail(msg);
  thread_exit();
  Bookkeeping quiet;
  Fiber* f = tl_fiber;
  switch_to(&f->sp, W->sched_sp, W->sched_bottom, W->sched_size, true, W->race_sched);
  __builtin_unreachable();
}

inline void fiber_main() {
#if LABKIT_TSAN
  // The one read of the worker thread's thread-local storage before this fiber is ordered after the
  // scheduler (race_block_start, below, needs it): a later launch's new worker thread may have its
  // storage where an earlier one's was, and the race check would report the executor's own read.
  AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
#endif
  Worker* W = tl_worker;
#if LABKIT_TSAN
  AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
#endif
#if LABKIT_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &W->sched_bottom, &W->sched_size);
#endif
  race_acquire(&W->race_block_start[W->race_set]);
  W->L->body(W->L->ctx);
  thread_exit();
  Bookkeeping quiet;   // done: no switch point on the way out
  Fiber* f = tl_fiber;
  switch_to(&f->sp, W->sched_sp, W->sched_bottom, W->sched_size, true, W->race_sched);
  __builtin_unreachable();
}

// Lay out a fresh stack so that the first switch into it "returns" into fiber_main.
inline void* initial_stack(char* lo, size_t size) {
  uintptr_t top = (reinterpret_cast<uintptr_t>(lo) + size) & ~uintptr_t(15);
#if defined(__x86_64__)
  // After the switch pops 8 + 48 bytes and `ret` pops fiber_main's address, the
  // stack pointer must be 8 mod 16, as at any function's entry.
  uintptr_t sp = top - 72;
  auto* p = reinterpret_cast<uint64_t*>(sp);
  p[0] = 0;                                     // the slot the switch skips
  for (int i = 1; i <= 6; ++i) p[i] = 0;       // r15 r14 r13 r12 rbx rbp
  p[7] = reinterpret_cast<uint64_t>(&fiber_main);
  p[8] = 0;                                     // fiber_main never returns
  return reinterpret_cast<void*>(sp);
#else
  uintptr_t sp = top - LABKIT_FRAME_BYTES;
  auto* p = reinterpret_cast<uint64_t*>(sp);
  std::memset(p, 0, LABKIT_FRAME_BYTES);
  p[11] = reinterpret_cast<uint64_t>(&fiber_main);  // x30, the link register
  return reinterpret_cast<void*>(sp);
#endif
}

// Race check: how many ThreadSanitizer fibers each of nw workers gets for each of its RACE_SETS sets.  GCC 13's ThreadSanitizer (and
// LLVM's since 14) gives at most 255 threads and fibers a vector-clock slot each; one more takes over
// another's slot and counts as coming after everything that one did, hiding races.  So a block's
// threads share fewer fibers: thread i runs as fiber i mod F.  F is prime: threads a power of two apart
// (a reduction's partners, a warp's lanes) never share one; threads that do are not checked
// against each other.  The runner prints F for the report (LABKIT-RACE-FIBERS).
inline unsigned race_fiber_count(unsigned nw) {
  static const unsigned primes[] = {233, 113, 73, 53, 43, 37, 31, 23, 19, 13, 11, 7, 5, 3, 2};
  // the main thread and the workers have slots too; each worker has RACE_SETS sets of fibers
  const unsigned room = (240 - 1 - nw) / std::max(1u, nw * RACE_SETS);
  for (unsigned p : primes)
    if (p <= room) return p;
  return 1;
}

inline void prepare_worker(Worker& W, Launch& L) {
  W.L = &L;
  const unsigned n = L.nthreads;
  size_t page = size_t(sysconf(_SC_PAGESIZE));
  size_t want = (L.cfg.stack_bytes + page - 1) / page * page;
  if (W.nstacks < n * RACE_SETS || W.stack_size != want + page) {
    if (W.stacks) munmap(W.stacks, W.stacks_bytes);
    W.stack_size = want + page;  // one guard page below each stack
    W.stacks_bytes = W.stack_size * n * RACE_SETS;
    void* m = mmap(nullptr, W.stacks_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) { W.stacks = nullptr; W.nstacks = 0; L.fail("cannot map fiber stacks"); return; }
    W.stacks = static_cast<char*>(m);
    W.nstacks = n * RACE_SETS;
    for (unsigned i = 0; i < n * RACE_SETS; ++i) mprotect(W.stacks + i * W.stack_size, page, PROT_NONE);
  }
  W.fibers.assign(n, Fiber{});
  W.order.resize(n);
  W.warps.assign((n + 31) / 32, WarpState{});
  for (unsigned i = 0; i < n; ++i) {
    Fiber& f = W.fibers[i];
    f.linear = i;
    f.tid = uint3{i % L.block.x, (i / L.block.x) % L.block.y, i / (L.block.x * L.block.y)};
    f.lane = i % 32;
    f.warp = i / 32;
    f.stack_lo = W.stacks + i * W.stack_size + page;
    f.stack_size = want;
  }
  // Exactly the bytes asked for (so that AddressSanitizer sees an overrun), 16-byte aligned,
  // NaN-filled: shared memory starts undefined.
  // (Under the race check, one buffer per set, one after the other.)
  std::free(W.dyn_base);
  W.dyn = W.dyn_base = nullptr;
  W.dyn_stride = (L.cfg.shared_mem + 15) / 16 * 16;
  if (posix_memalign(reinterpret_cast<void**>(&W.dyn_base), 16,
                     std::max<size_t>((RACE_SETS - 1) * W.dyn_stride + L.cfg.shared_mem, 1)) != 0) {
    L.fail("cannot allocate dynamic shared memory");
    return;
  }
  W.dyn = W.dyn_base;
  std::memset(W.dyn_base, 0xff, (RACE_SETS - 1) * W.dyn_stride + L.cfg.shared_mem);
#if LABKIT_ASAN || LABKIT_TSAN
  for (unsigned set = 0; set < RACE_SETS && L.cfg.shared_mem; ++set)
    std::fprintf(stderr, "LABKIT-SHARED (dynamic) %p %llu\n", (void*)(W.dyn_base + set * W.dyn_stride),
                 L.cfg.shared_mem);
#endif
  W.blocks_begun = 0;
  W.rng.seed(L.cfg.seed ^ (0x9e3779b97f4a7c15ull * (reinterpret_cast<uintptr_t>(&W) >> 4)));
  W.preempt_state = W.rng() | 1;
  count_attach(&W);
}

inline void begin_block(Worker& W, unsigned long long b) {
  Launch& L = *W.L;
  W.block_idx = uint3{unsigned(b % L.grid.x), unsigned((b / L.grid.x) % L.grid.y),
                      unsigned(b / (unsigned long long)(L.grid.x) / L.grid.y)};
  const unsigned n = L.nthreads;
  // The race check's set: consecutive blocks of this worker alternate, each set's last block ordered
  // before its next (the same fibers, stacks and shared memory), but two consecutive blocks not.
  const unsigned set = unsigned(W.blocks_begun++ % RACE_SETS);
  W.race_set = set;
  W.dyn = W.dyn_base + set * W.dyn_stride;
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  for (unsigned i = 0; i < n; ++i) {
    Fiber& f = W.fibers[i];
    f.state = St::Ready;
    f.stack_lo = W.stacks + (size_t(set) * n + i) * W.stack_size + page;
    f.grid_gen = 0;            // every block of the grid starts at the first grid sync's object
#if LABKIT_ASAN
    // The last block's threads left this stack by a switch, not by returning: their frames' redzones
    // are still poisoned, and a new frame laid out over them would be reported.
    __asan_unpoison_memory_region(f.stack_lo, f.stack_size);
#endif
    f.sp = initial_stack(f.stack_lo, f.stack_size);
    W.order[i] = i;
  }
  for (unsigned w = 0; w < W.warps.size(); ++w) {
    unsigned lanes = std::min(32u, n - w * 32);
    W.warps[w].live = lanes == 32 ? ~0u : ((1u << lanes) - 1);
    W.warps[w].arrived = 0;
  }
  race_acquire(&W.race_block_end[set]);      // the threads of this set's previous block, all done
  std::memset(W.dyn, 0xff, L.cfg.shared_mem);
  for (auto& r : W.shared_regions) std::memset(r.first, 0xff, r.second);
#if LABKIT_TSAN
  // Thread i runs as ThreadSanitizer fiber i mod race_fibers of the block's set (see race_fiber_count);
  // the fibers are made here, on the worker's own thread, and kept for the set's later blocks (a
  // block's end orders them before the set's next block).
  const unsigned nf = std::min(n, L.race_fibers);
  while (W.race_fibers.size() < RACE_SETS * nf) W.race_fibers.push_back(__tsan_create_fiber(0));
  for (unsigned i = 0; i < n; ++i) W.fibers[i].race = W.race_fibers[set * nf + i % nf];
  W.race_named.assign(RACE_SETS * nf, -1);                    // named anew for this block
#endif
  race_release(&W.race_block_start[set]);
  W.live = n;
  W.at_bar = 0;
  W.at_grid = 0;
  W.coal_waiting = 0;
  W.tile_n = 0;
  W.aborted = false;
  W.bar_count[0] = W.bar_count[1] = W.bar_seen[0] = W.bar_seen[1] = 0;
  W.async_copies.clear();
}

// The groups of coalesced_threads(): in each warp none of whose lanes can run, the lanes waiting at
// one call are one group.  True if any group was formed (its lanes are ready again).
inline bool form_coalesced(Worker& W) {
  bool formed = false;
  const unsigned n = unsigned(W.fibers.size());
  for (unsigned w = 0; w < W.warps.size(); ++w) {
    unsigned waiting = 0;
    bool ready = false;
    for (unsigned lane = 0; lane < 32 && w * 32 + lane < n; ++lane) {
      const St st = W.fibers[w * 32 + lane].state;
      ready |= st == St::Ready;
      if (st == St::CoalBar) waiting |= 1u << lane;
    }
    if (ready) continue;
    while (waiting) {
      const Fiber& first = W.fibers[w * 32 + __builtin_ctz(waiting)];
      unsigned group = 0;
      for (unsigned lane = 0; lane < 32; ++lane) {
        const Fiber& f = W.fibers[w * 32 + lane < n ? w * 32 + lane : 0];
        if (((waiting >> lane) & 1u) && f.coal_line == first.coal_line && f.coal_file == first.coal_file)
          group |= 1u << lane;
      }
      for (unsigned lane = 0; lane < 32; ++lane)
        if ((group >> lane) & 1u) {
          W.fibers[w * 32 + lane].coal_mask = group;
          W.fibers[w * 32 + lane].state = St::Ready;
        }
      W.coal_waiting -= unsigned(__builtin_popcount(group));
      waiting &= ~group;
      formed = true;
    }
  }
  return formed;
}

// Run the block's threads until all have returned (false) or every live one waits at a grid sync
// (true: a cooperative launch's block, put aside until the whole grid is there).
inline bool run_fibers(Worker& W) {
  Launch& L = *W.L;
  const unsigned n = L.nthreads;
  const bool shuffle = L.cfg.flags & CHECK_SHUFFLE;
  while (W.live > 0 && !W.aborted) {
    if (shuffle) std::shuffle(W.order.begin(), W.order.end(), W.rng);
    bool ran = false;
    for (unsigned k = 0; k < n && !W.aborted; ++k) {
      Fiber& f = W.fibers[W.order[k]];
      if (f.state != St::Ready) continue;
      tl_fiber = &f;
      ++W.switches;
#if LABKIT_TSAN
      // A report names the thread its fiber ran last: name the fiber for the thread it runs now.
      int& named = W.race_named[W.race_set * (W.race_named.size() / RACE_SETS) +
                                f.linear % (W.race_named.size() / RACE_SETS)];
      if (named != int(f.linear)) {
        named = int(f.linear);
        char name[96];
        snprintf(name, sizeof name, "block (%u,%u,%u) thread (%u,%u,%u)", W.block_idx.x, W.block_idx.y,
                 W.block_idx.z, f.tid.x, f.tid.y, f.tid.z);
        __tsan_set_fiber_name(f.race, name);
      }
#endif
      count_enter(&W, f.linear);
      switch_to(&W.sched_sp, f.sp, f.stack_lo, f.stack_size, false, f.race);
      ran = true;
    }
    if (W.coal_waiting && !W.aborted && form_coalesced(W)) continue;
    if (!ran && W.live > 0 && !W.aborted) {
      if (W.at_grid == W.live) {
        count_flush(&W);
        return true;
      }
      unsigned at_block = 0, at_warp = 0, at_tile = 0, at_grid = 0, at_aw = 0;
      const Fiber* aw = nullptr;   // one thread waiting at a cuda::barrier, to name it
      for (auto& f : W.fibers) {
        at_block += f.state == St::BlockBar;
        at_warp += f.state == St::WarpBar;
        at_tile += f.state == St::TileBar;
        at_grid += f.state == St::GridBar;
        if (f.state == St::AwBar) { ++at_aw; if (!aw) aw = &f; }
      }
      std::string aw_words;
      if (aw)
        aw_words = ", " + std::to_string(at_aw) + " at a cuda::barrier (line " + std::to_string(aw->line) +
                   ") whose phase still waits for " + std::to_string(aw->aw->pending) + " of its " +
                   std::to_string(aw->aw->expected) + " expected arrivals";
      L.fail("deadlock in kernel '" + std::string(L.kernel) + "', block " + block_name(&W) + ": " +
             std::to_string(at_block) + " threads wait at __syncthreads(), " + std::to_string(at_warp) +
             " at a warp barrier (shuffle, vote or __syncwarp)" +
             (at_tile ? ", " + std::to_string(at_tile) + " at a tile's sync()" : std::string()) +
             (at_grid ? ", " + std::to_string(at_grid) + " at a grid sync" : std::string()) + aw_words +
             " that the others never reach");
      W.aborted = true;
    }
  }
  count_flush(&W);
  return false;
}

inline void run_block(Worker& W, unsigned long long b) {
  begin_block(W, b);
  run_fibers(W);   // a plain launch: a grid sync has failed its block already
}

// --- stopping a launch: the watchdog, Ctrl-C, a fiber's stack overflow --------------------------
// A signal of labkit's own tells a worker thread to jump out of its fiber back to the scheduler.
inline int stop_signal() { return SIGRTMIN + 5; }
inline std::atomic<Launch*>& active_launch() {
  static std::atomic<Launch*> a{nullptr};
  return a;
}
inline void stop_workers(Launch* L, int why) {   // async-signal-safe
  int none = 0;
  L->cancel.compare_exchange_strong(none, why);
  for (pthread_t t : L->thread_ids) pthread_kill(t, stop_signal());
}
inline void on_stop_signal(int) {
  Worker* W = tl_worker;
  if (W && W->escape_ready) {
    W->escape_ready = 0;
    siglongjmp(W->escape, 1);
  }
}
inline void on_sigint(int) {
  if (Launch* L = active_launch().load()) stop_workers(L, 2);
}
inline struct sigaction& old_segv() {
  static struct sigaction a;
  return a;
}
inline void on_segv(int sig, siginfo_t* si, void*) {
  Worker* W = tl_worker;
  if (W && W->escape_ready && W->stacks) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    char* a = static_cast<char*>(si->si_addr);
    if (a >= W->stacks && a < W->stacks + W->stacks_bytes) {
      size_t i = size_t(a - W->stacks) / W->stack_size;
      if (size_t(a - W->stacks) - i * W->stack_size < page) {   // fiber i's guard page
        W->overflow_fiber = int(i);
        int none = 0;
        W->L->cancel.compare_exchange_strong(none, 3);
        W->escape_ready = 0;
        siglongjmp(W->escape, 1);
      }
    }
  }
  sigaction(sig, &old_segv(), nullptr);   // not a fiber's stack: the fault's usual handling
}
// The stack-overflow handler cannot run on the stack that overflowed: give each worker thread an
// alternate signal stack, unless one is there already (AddressSanitizer installs its own, and frees
// it at thread exit; replacing it would make that free fail).
struct SignalStack {
  std::vector<char> mem;
  ~SignalStack() {
    if (mem.empty()) return;
    stack_t off{};
    off.ss_flags = SS_DISABLE;
    sigaltstack(&off, nullptr);        // never leave the kernel pointing at freed memory
  }
};

inline void ensure_signal_stack() {
  static thread_local SignalStack alt;
  static thread_local bool checked = false;
  if (checked) return;
  checked = true;
  stack_t cur{};
  if (sigaltstack(nullptr, &cur) == 0 && !(cur.ss_flags & SS_DISABLE)) return;
  alt.mem.resize(std::max<size_t>(64 * 1024, size_t(SIGSTKSZ)));
  stack_t ss{};
  ss.ss_sp = alt.mem.data();
  ss.ss_size = alt.mem.size();
  sigaltstack(&ss, nullptr);
}

// A block stopped by a signal (watchdog, Ctrl-C, stack overflow): what the launch reports.
inline void stopped_by_signal(Worker& W) {
  Launch& L = *W.L;
  W.aborted = true;
  if (W.overflow_fiber >= 0) {
    const Fiber& f = W.fibers[size_t(W.overflow_fiber)];
    L.fail("stack overflow in kernel '" + std::string(L.kernel) + "', block " + block_name(&W) + ", thread (" +
           std::to_string(f.tid.x) + "," + std::to_string(f.tid.y) + "," + std::to_string(f.tid.z) +
           "): its locals (arrays declared in the kernel) need more than the " +
           std::to_string((W.stack_size - size_t(sysconf(_SC_PAGESIZE))) / 1024) +
           " KiB each thread has here; a GPU gives a thread far more local memory. Set "
           "LABKIT_CPU_STACK_KIB higher (or keep large arrays in shared or global memory)");
    W.overflow_fiber = -1;
  }
}

// --- Cooperative launches ------------------------------------------------------------------------
// Every block is resident at once: worker w runs blocks w, w + workers, ...  It runs each until its
// threads all wait at the grid sync (or have returned), then puts it aside: its threads' stacks (the
// bytes in use, from each one's stack pointer up), their state, and its shared memory are copied out,
// so that the same fibers run the worker's next block.  Once every block of the grid waits, each
// worker copies its blocks back in turn, at the same addresses, and runs them on to the next sync.
struct ParkedBlock {
  unsigned long long b = 0;
  bool started = false, finished = false;
  unsigned race_set = 0;
  uint3 block_idx{0, 0, 0};
  std::vector<Fiber> fibers;
  std::vector<WarpState> warps;
  unsigned live = 0, tile_n = 0;
  unsigned long long bar_count[2] = {0, 0}, bar_seen[2] = {0, 0};
  std::vector<size_t> stack_at;             // fiber i's bytes: stack[stack_at[i], stack_at[i + 1])
  std::vector<unsigned char> stack;
  std::vector<std::pair<void*, std::vector<unsigned char>>> shared;
  std::vector<unsigned char> dyn;
};

inline char* stack_top(const Fiber& f) { return f.stack_lo + f.stack_size; }

inline void stack_copy(void* to, const void* from, size_t n) {
#if LABKIT_ASAN   // the frames' redzones are poisoned: the bytes are copied whole, and unchecked after
  __asan_unpoison_memory_region(to, n);
  __asan_unpoison_memory_region(from, n);
#endif
  std::memcpy(to, from, n);
}

inline void park_block(Worker& W, ParkedBlock& p) {
  Launch& L = *W.L;
  p.block_idx = W.block_idx;
  p.race_set = W.race_set;
  p.fibers = W.fibers;
  p.warps = W.warps;
  p.live = W.live;
  p.tile_n = W.tile_n;
  std::copy(W.bar_count, W.bar_count + 2, p.bar_count);
  std::copy(W.bar_seen, W.bar_seen + 2, p.bar_seen);
  p.stack_at.assign(W.fibers.size() + 1, 0);
  size_t total = 0;
  for (size_t i = 0; i < W.fibers.size(); ++i) {
    const Fiber& f = W.fibers[i];
    p.stack_at[i] = total;
    if (f.state != St::Done) total += size_t(stack_top(f) - static_cast<char*>(f.sp));
  }
  p.stack_at[W.fibers.size()] = total;
  p.stack.resize(total);
  for (size_t i = 0; i < W.fibers.size(); ++i)
    if (W.fibers[i].state != St::Done)
      stack_copy(p.stack.data() + p.stack_at[i], W.fibers[i].sp, p.stack_at[i + 1] - p.stack_at[i]);
  p.shared.clear();
  for (auto& r : W.shared_regions) {
    const auto* bytes = static_cast<const unsigned char*>(r.first);
    p.shared.emplace_back(r.first, std::vector<unsigned char>(bytes, bytes + r.second));
  }
  p.dyn.assign(W.dyn, W.dyn + L.cfg.shared_mem);
}

inline void resume_block(Worker& W, ParkedBlock& p) {
  Launch& L = *W.L;
  W.race_set = p.race_set;
  W.dyn = W.dyn_base + p.race_set * W.dyn_stride;
  race_acquire(&W.race_block_end[p.race_set]);   // this set's block that ran before, all waiting or done
  W.block_idx = p.block_idx;
  std::copy(p.fibers.begin(), p.fibers.end(), W.fibers.begin());   // the same addresses: a waiting
  std::copy(p.warps.begin(), p.warps.end(), W.warps.begin());      // frame may hold a pointer to them
  for (size_t i = 0; i < W.fibers.size(); ++i)
    if (W.fibers[i].state != St::Done)
      stack_copy(W.fibers[i].sp, p.stack.data() + p.stack_at[i], p.stack_at[i + 1] - p.stack_at[i]);
  for (auto& r : W.shared_regions) {   // an array first declared by a later block: undefined again
    auto it = std::find_if(p.shared.begin(), p.shared.end(), [&](const auto& s) { return s.first == r.first; });
    if (it != p.shared.end()) std::memcpy(r.first, it->second.data(), r.second);
    else std::memset(r.first, 0xff, r.second);
  }
  std::memcpy(W.dyn, p.dyn.data(), L.cfg.shared_mem);
  W.live = p.live;
  W.tile_n = p.tile_n;
  std::copy(p.bar_count, p.bar_count + 2, W.bar_count);
  std::copy(p.bar_seen, p.bar_seen + 2, W.bar_seen);
  W.at_bar = 0;
  W.at_grid = 0;
  W.coal_waiting = 0;
  W.aborted = false;
  for (auto& f : W.fibers)
    if (f.state == St::GridBar) f.state = St::Ready;
#if LABKIT_TSAN
  W.race_named.assign(W.race_named.size(), -1);
#endif
  race_release(&W.race_block_start[p.race_set]);
  // Its memory is in the heap now: the parked copy is not needed until the block waits again.
  p.stack = std::vector<unsigned char>();
  p.shared.clear();
}

// The workers meet at a grid sync: `parked` of this worker's blocks wait there.  True when every
// block of the grid waits (all go on); false when the launch is over, has failed, or some blocks
// returned without reaching the sync, which a GPU would wait for forever (reported).
inline bool grid_meet(Launch& L, unsigned long long parked) {
  std::unique_lock<std::mutex> g(L.grid_mu);
  L.grid_parked += parked;
  const unsigned long long round = L.grid_round;
  if (++L.grid_arrived == L.grid_workers) {
    const unsigned long long waiting = L.grid_parked;
    if (waiting > 0 && waiting < L.nblocks)
      L.fail("deadlock in kernel '" + std::string(L.kernel) + "': " + std::to_string(waiting) + " of " +
             std::to_string(L.nblocks) + " blocks wait at the grid sync at line " +
             std::to_string(L.grid_line.load()) + "; the others returned without reaching it (every block "
             "of the grid must reach each grid sync: a grid sync inside divergent code)");
    L.grid_waiting = waiting;
    L.grid_parked = 0;
    L.grid_arrived = 0;
    ++L.grid_round;
    L.grid_cv.notify_all();
  } else {
    while (round == L.grid_round) {
      if (L.failed.load() || L.cancel.load()) return false;
      L.grid_cv.wait_for(g, std::chrono::milliseconds(20));
    }
  }
  return L.grid_waiting > 0 && !L.failed.load() && !L.cancel.load();
}

inline void cooperative_blocks(Worker& W) {
  Launch& L = *W.L;
  std::vector<ParkedBlock> mine;
  for (unsigned long long b = W.index; b < L.nblocks; b += L.grid_workers) {
    mine.emplace_back();
    mine.back().b = b;
  }
  for (;;) {
    unsigned long long parked = 0;
    for (auto& p : mine) {
      if (p.finished) continue;
      if (L.failed.load(std::memory_order_relaxed) || L.cancel.load(std::memory_order_relaxed)) return;
      bool waits = false;
      if (sigsetjmp(W.escape, 1) == 0) {
        W.escape_ready = 1;
        if (p.started) resume_block(W, p);
        else begin_block(W, p.b);
        p.started = true;
        waits = run_fibers(W);
        W.escape_ready = 0;
      } else {
        stopped_by_signal(W);
        return;
      }
      if (W.aborted) return;
      if (waits) {
        park_block(W, p);
        ++parked;
      } else {
        p.finished = true;
      }
    }
    if (!grid_meet(L, parked)) return;
  }
}

inline void worker_loop(Worker& W) {
#if LABKIT_TSAN
  // The scheduler's own accesses are bookkeeping; the kernel's threads run as fibers of their own.
  W.race_sched = __tsan_get_current_fiber();
  AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
  AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
#endif
  tl_worker = &W;
  ensure_signal_stack();
  // __shared__ arrays are thread_local: a launch may run on other OS threads than the last.
  W.shared_regions.clear();
  for (auto& h : W.shared_heap) std::free(h.block);
  W.shared_heap.clear();
  Launch& L = *W.L;
  if (L.cfg.flags & LAUNCH_COOPERATIVE) cooperative_blocks(W);
  for (;;) {
    if (L.cfg.flags & LAUNCH_COOPERATIVE) break;
    if (L.failed.load(std::memory_order_relaxed) || L.cancel.load(std::memory_order_relaxed)) break;
    unsigned long long b = L.next_block.fetch_add(1);
    if (b >= L.nblocks) break;
    if (sigsetjmp(W.escape, 1) == 0) {
      W.escape_ready = 1;
      run_block(W, b);
      W.escape_ready = 0;
    } else {          // a signal stopped the block (watchdog, Ctrl-C, stack overflow)
      stopped_by_signal(W);
      break;
    }
  }
  L.switches += 2 * W.switches;  // each run of a fiber is a switch in and a switch out
  W.switches = 0;
  tl_worker = nullptr;
  tl_fiber = nullptr;
#if LABKIT_TSAN
  AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
  AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
#endif
  for (unsigned set = 0; set < RACE_SETS; ++set)
    race_acquire(&W.race_block_end[set]);   // whoever reads the results after the launch comes after them
}

// Workers (and their stacks) are kept between launches of a module, until the Python side calls
// labkit_release (it keeps the stacks of the few modules launched last: each fiber stack and its
// guard page are two memory mappings, and a process may hold only ~65,000 of them).
inline std::vector<Worker*>& worker_pool() {
  static std::vector<Worker*> pool;
  return pool;
}

LABKIT_RUNTIME_FN void release_workers() {
  for (Worker* w : worker_pool()) delete w;
  worker_pool().clear();
  count_release();
}

LABKIT_RUNTIME_FN std::string& last_error() {
  static std::string e;
  return e;
}
LABKIT_RUNTIME_FN unsigned long long& last_switches() {
  static unsigned long long s = 0;
  return s;
}

LABKIT_RUNTIME_FN int run_grid(const LaunchConfig* cfg, const char* kernel, void (*body)(void*), void* ctx) {
  Launch L;
  L.cfg = *cfg;
  L.grid = dim3(cfg->grid[0], cfg->grid[1], cfg->grid[2]);
  L.block = dim3(cfg->block[0], cfg->block[1], cfg->block[2]);
  L.nthreads = cfg->block[0] * cfg->block[1] * cfg->block[2];
  L.nblocks = (unsigned long long)cfg->grid[0] * cfg->grid[1] * cfg->grid[2];
  L.body = body;
  L.ctx = ctx;
  L.kernel = kernel;
  g_launch = &L;
  unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  unsigned nw = cfg->workers ? cfg->workers : hw;
  if ((unsigned long long)nw > L.nblocks) nw = unsigned(std::max(1ull, L.nblocks));
  auto& pool = worker_pool();
  while (pool.size() < nw) pool.push_back(new Worker());
  L.race_fibers = race_fiber_count(nw);
  L.grid_workers = nw;
  for (unsigned w = 0; w < nw; ++w) pool[w]->index = w;
#if LABKIT_TSAN
  std::fprintf(stderr, "LABKIT-RACE-FIBERS %u %u %u %u\n", L.race_fibers, L.nthreads, L.block.x,
               L.block.y);
#endif
  for (unsigned w = 0; w < nw; ++w) prepare_worker(*pool[w], L);
  // The signals that stop a launch: Ctrl-C, the watchdog's, a fault in a fiber's guard page.
  struct sigaction stop{}, intr{}, segv{}, old_stop{}, old_intr{}, old_bus{};
  stop.sa_handler = on_stop_signal;
  // On the worker's alternate stack: the handler leaves by siglongjmp, and glibc's checked longjmp
  // (_FORTIFY_SOURCE, on by default in some distributions' compilers) aborts a jump from a fiber's
  // stack to a frame lower in memory, but allows any jump out of the alternate stack.
  stop.sa_flags = SA_ONSTACK;
  sigemptyset(&stop.sa_mask);
  intr.sa_handler = on_sigint;
  sigemptyset(&intr.sa_mask);
  segv.sa_sigaction = on_segv;
  segv.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&segv.sa_mask);
  L.thread_ids.reserve(nw);
  // Under the race check (a process of its own) none: ThreadSanitizer defers signals to points of its
  // choosing, and the Python side ends the process when its time is up or on Ctrl-C.
  constexpr bool handle_signals = !LABKIT_TSAN;
  if (handle_signals) {
    sigaction(stop_signal(), &stop, &old_stop);
    sigaction(SIGINT, &intr, &old_intr);
#if !LABKIT_ASAN   // AddressSanitizer reports overflows itself
    sigaction(SIGSEGV, &segv, &old_segv());
    sigaction(SIGBUS, &segv, &old_bus);
#endif
  }
  active_launch().store(&L);
  std::mutex wd_mu;
  std::condition_variable wd_cv;
  bool done = false;
  std::thread watchdog;
  if (cfg->timeout_ms && handle_signals)
    watchdog = std::thread([&] {
      std::unique_lock<std::mutex> g(wd_mu);
      if (!wd_cv.wait_for(g, std::chrono::milliseconds(cfg->timeout_ms), [&] { return done; })) stop_workers(&L, 1);
    });
  if (!L.failed) {
    if (nw == 1) {
      L.thread_ids.push_back(pthread_self());
      worker_loop(*pool[0]);
    } else {
      std::vector<std::thread> threads;
      for (unsigned w = 0; w < nw; ++w) {
        threads.emplace_back(worker_loop, std::ref(*pool[w]));
        L.thread_ids.push_back(threads.back().native_handle());
      }
      for (auto& t : threads) t.join();
    }
  }
  {
    std::lock_guard<std::mutex> g(wd_mu);
    done = true;
  }
  wd_cv.notify_all();
  if (watchdog.joinable()) watchdog.join();
  active_launch().store(nullptr);
  if (handle_signals) {
    sigaction(stop_signal(), &old_stop, nullptr);
    sigaction(SIGINT, &old_intr, nullptr);
#if !LABKIT_ASAN
    sigaction(SIGSEGV, &old_segv(), nullptr);
    sigaction(SIGBUS, &old_bus, nullptr);
#endif
  }
  g_launch = nullptr;
  last_switches() = L.switches.load();
  const int why = L.cancel.load();
  char limit[32];
  snprintf(limit, sizeof limit, "%g", cfg->timeout_ms / 1000.0);
  if (why == 1)
    L.error = "watchdog: kernel '" + std::string(L.kernel) + "' ran longer than " + limit +
              " s and was stopped (LABKIT_CPU_TIMEOUT_S sets the limit): an endless loop, or a thread waiting "
              "for a flag that another block or warp never sets (the executor runs a block's threads one at a "
              "time, each until it reaches a barrier, so a spin-wait never lets the others run)";
  else if (why == 2)
    L.error = "interrupted (Ctrl-C) while kernel '" + std::string(L.kernel) + "' ran";
  last_error() = L.error;
  return why == 2 ? 2 : (L.failed || why ? 1 : 0);
}

#endif  // !LABKIT_RUNTIME_LINKED: the runtime

// --- argument unpacking: args[i] points at the value of parameter i (as for cuLaunchKernel)
template <class... A, size_t... I>
LABKIT_UNINSTRUMENTED inline void call_kernel(void (*k)(A...), void** args, std::index_sequence<I...>) {
  k(*static_cast<std::remove_cv_t<std::remove_reference_t<A>>*>(args[I])...);
}

template <class... A>
inline int launch(void (*k)(A...), const char* name, const LaunchConfig* cfg, void** args) {
  struct Ctx { void (*k)(A...); void** args; } ctx{k, args};
  auto body = [](void* p) LABKIT_UNINSTRUMENTED {
    auto* c = static_cast<Ctx*>(p);
    call_kernel(c->k, c->args, std::index_sequence_for<A...>{});
  };
  return run_grid(cfg, name, +body, &ctx);
}

// --- parameter types, as text for Python's argument checks
template <class T> inline std::string scalar_code() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, void>) return "void";
  else if constexpr (std::is_same_v<U, bool>) return "bool";
  else if constexpr (std::is_floating_point_v<U>) return "f" + std::to_string(8 * sizeof(U));
  else if constexpr (std::is_integral_v<U> && std::is_signed_v<U>) return "i" + std::to_string(8 * sizeof(U));
  else if constexpr (std::is_integral_v<U>) return "u" + std::to_string(8 * sizeof(U));
  else return "bytes" + std::to_string(sizeof(U));
}
template <class T> inline std::string param_code() {
  using U = std::remove_cv_t<std::remove_reference_t<T>>;
  if constexpr (std::is_pointer_v<U>)
    return (std::is_const_v<std::remove_pointer_t<U>> ? "cptr:" : "ptr:") +
           scalar_code<std::remove_pointer_t<U>>();
  else return scalar_code<U>();
}
template <class... A> inline const char* signature(void (*)(A...)) {
  static std::string s = [] {
    std::string r;
    ((r += param_code<A>() + ","), ...);
    if (!r.empty()) r.pop_back();
    return r;
  }();
  return s.c_str();
}

}  // namespace labkit
#pragma GCC visibility pop

// ---------------------------------------------------------------------------
// Built-in variables
// ---------------------------------------------------------------------------
// Kernels are device code: __CUDA_ARCH__ is defined, as NVRTC defines it, to the architecture the
// executor stands for.  Branches for sm_80 and older take their path here; newer ones (sm_90's
// thread-block clusters, say) are not modelled.
// A whole program (LABKIT_PROGRAM: labkit.cuda run) is host and device code in one pass, as nvcc's
// host pass sees it: there __CUDA_ARCH__ stays undefined, so host-only branches are the ones compiled.
#if !defined(__CUDA_ARCH__) && !defined(LABKIT_PROGRAM)
#define __CUDA_ARCH__ 800
#endif
#define LABKIT_CUDA_ARCH 800

#if defined(LABKIT_PROGRAM)
// A whole program may time its kernels (or wait a while) with the SM cycle counter: here it counts the
// host's steady clock in cycles of the modelled device's clock rate (1.98 GHz, cudaDeviceProp::clockRate),
// so that a kernel spinning for `ms * clockRate` cycles waits that many milliseconds.  clock() in device
// code is this counter's low bits (the launch rewrite calls labkit::device_clock there); on the host
// it stays the C library's.  A kernel compiled on its own is refused instead, since its results would
// depend on the count.  A kernel thread that reads the counter lets the other threads of its block run
// first: threads that wait until the count has advanced (a delay, clock_block) then wait together, as a
// GPU's threads of a block do, not one after another (a block of 512 such threads waits once, not 512
// times).
inline long long clock64() {
  ::labkit::let_others_run();
  long long ns = (long long)std::chrono::steady_clock::now().time_since_epoch().count();
  return ns / 50 * 99 + ns % 50 * 99 / 50;   // ns * 1.98 without overflow
}
namespace labkit { inline long device_clock() { return long((unsigned int)clock64()); } }
#endif
#define threadIdx (::labkit::tl_fiber->tid)
#define blockIdx (::labkit::tl_worker->block_idx)
#define blockDim (::labkit::g_launch->block)
#define gridDim (::labkit::g_launch->grid)
constexpr int warpSize = 32;

// ---------------------------------------------------------------------------
// Barriers, warp operations
// ---------------------------------------------------------------------------
#define __syncthreads() ::labkit::syncthreads(__LINE__)
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::labkit::warp_sync(mask, true); }
inline unsigned __activemask() {
  ::labkit::Bookkeeping quiet;
  return ::labkit::tl_worker->warps[::labkit::tl_fiber->warp].live;
}

// The special registers that inline PTX reads (`asm("mov.u32 %0, %%laneid;" : "=r"(x))`): the kernel
// source's rewrite (kernel_source.rewrite_special_registers) turns such a statement into a call of one
// of these.  Where a GPU's value depends on where the hardware put the block, a value it could have is
// given: %warpid is the warp's index in its block, %smid the block's linear index modulo %nsmid, the
// modelled device's SM count (cudaDeviceProp::multiProcessorCount).
namespace labkit {
namespace sreg {
inline unsigned laneid() { return tl_fiber->lane; }
inline unsigned warpid() { return tl_fiber->warp; }
inline unsigned nwarpid() { return 64; }
inline unsigned nsmid() { return 132; }
inline unsigned smid() {
  const auto& g = g_launch->grid;
  const auto& b = tl_worker->block_idx;
  return unsigned((b.x + (unsigned long long)g.x * (b.y + (unsigned long long)g.y * b.z)) % nsmid());
}
inline unsigned lanemask_eq() { return 1u << tl_fiber->lane; }
inline unsigned lanemask_lt() { return lanemask_eq() - 1u; }
inline unsigned lanemask_le() { return lanemask_lt() | lanemask_eq(); }
inline unsigned lanemask_ge() { return ~lanemask_lt(); }
inline unsigned lanemask_gt() { return ~lanemask_le(); }
#if defined(LABKIT_PROGRAM)
inline unsigned clock() { return unsigned(::clock64()); }
inline unsigned long long clock64() { return (unsigned long long)::clock64(); }
inline unsigned long long globaltimer() {   // nanoseconds, as the GPU's global timer counts them
  return (unsigned long long)std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::system_clock::now().time_since_epoch()).count();
}
#endif
}  // namespace sreg
}  // namespace labkit

namespace labkit {
template <class T>
inline T shfl_exchange(unsigned mask, T v, int src_of_lane, int line = 0) {
  static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes");
  Bookkeeping quiet;
  Worker* W = tl_worker;
  Fiber* f = tl_fiber;
  const unsigned src = unsigned(src_of_lane) & 31u;
  if (src != f->lane && !((mask >> src) & 1u)) {
    char buf[16];
    snprintf(buf, sizeof buf, "0x%08x", mask);
    fail_from_fiber("in kernel '" + std::string(W->L->kernel) + "', block " + block_name(W) + ", lane " +
                    std::to_string(f->lane) + " of warp " + std::to_string(f->warp) + ": the shuffle at line " +
                    std::to_string(line) + " reads lane " + std::to_string(src) + ", outside its mask " + buf +
                    ": undefined on a GPU (put every lane it reads in the mask)");
  }
  WarpState& ws = W->warps[f->warp];
  std::memcpy(&ws.slot[f->lane], &v, sizeof(T));
  ws.shfl_src[f->lane] = static_cast<unsigned char>(src + 1);
  warp_sync(mask);   // its release reads each lane's value (release_group): one barrier per shuffle
  T r;
  std::memcpy(&r, &ws.shfl_result[f->lane], sizeof(T));
  return r;
}
// A vote: the ballot of `pred` over the lanes in `mask`, and which lanes took part
// (read between the two barriers, while every participant is still waiting).
inline unsigned ballot(unsigned mask, int pred, unsigned* participants = nullptr) {
  Bookkeeping quiet;
  Worker* W = tl_worker;
  Fiber* f = tl_fiber;
  WarpState& ws = W->warps[f->warp];
  ws.slot[f->lane] = pred ? 1 : 0;
  warp_sync(mask);
  unsigned r = 0, who = mask & ws.live;
  for (unsigned l = 0; l < 32; ++l)
    if ((who >> l) & 1u) r |= (ws.slot[l] ? 1u : 0u) << l;
  if (participants) *participants = who;
  warp_sync(mask);
  return r;
}
}  // namespace labkit

// Each takes the caller's line (a default argument), for the error of a shuffle outside its mask.
template <class T> inline T __shfl_sync(unsigned mask, T v, int src, int width = 32, int line = __builtin_LINE()) {
  unsigned lane = ::labkit::tl_fiber->lane;
  int base = int(lane) & ~(width - 1);
  return ::labkit::shfl_exchange(mask, v, base + (src & (width - 1)), line);
}
template <class T> inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32,
                                             int line = __builtin_LINE()) {
  unsigned lane = ::labkit::tl_fiber->lane;
  int in_seg = int(lane) & (width - 1);
  int src = in_seg + int(delta) < width ? int(lane + delta) : int(lane);
  return ::labkit::shfl_exchange(mask, v, src, line);
}
template <class T> inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32,
                                           int line = __builtin_LINE()) {
  unsigned lane = ::labkit::tl_fiber->lane;
  int in_seg = int(lane) & (width - 1);
  int src = in_seg >= int(delta) ? int(lane - delta) : int(lane);
  return ::labkit::shfl_exchange(mask, v, src, line);
}
template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32,
                                            int line = __builtin_LINE()) {
  unsigned lane = ::labkit::tl_fiber->lane;
  int src = int(lane) ^ lane_mask;
  if ((src & ~(width - 1)) != (int(lane) & ~(width - 1))) src = int(lane);
  return ::labkit::shfl_exchange(mask, v, src, line);
}
inline unsigned __ballot_sync(unsigned mask, int pred) { return ::labkit::ballot(mask, pred); }
inline int __any_sync(unsigned mask, int pred) { return ::labkit::ballot(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) {
  unsigned who = 0;
  unsigned b = ::labkit::ballot(mask, pred, &who);
  return b == who;
}

// Every participating lane's value of a warp operation (reductions, matches), and which lanes took part.
namespace labkit {
template <class T> inline unsigned gather(unsigned mask, T v, T (&all)[32]) {
  Bookkeeping quiet;
  Worker* W = tl_worker;
  Fiber* f = tl_fiber;
  WarpState& ws = W->warps[f->warp];
  std::memcpy(&ws.slot[f->lane], &v, sizeof(T));
  warp_sync(mask);
  unsigned who = mask & ws.live;
  for (unsigned l = 0; l < 32; ++l)
    if ((who >> l) & 1u) std::memcpy(&all[l], &ws.slot[l], sizeof(T));
  warp_sync(mask);
  return who;
}
template <class T, class Op> inline T warp_reduce(unsigned mask, T v, Op op) {
  T all[32];
  unsigned who = gather(mask, v, all);
  bool first = true;
  T r{};
  for (unsigned l = 0; l < 32; ++l)
    if ((who >> l) & 1u) { r = first ? all[l] : op(r, all[l]); first = false; }
  return r;
}
template <class T> inline unsigned match(unsigned mask, T v, unsigned* who_out = nullptr) {
  T all[32];
  unsigned who = gather(mask, v, all), m = 0;
  for (unsigned l = 0; l < 32; ++l)
    if (((who >> l) & 1u) && std::memcmp(&all[l], &v, sizeof(T)) == 0) m |= 1u << l;
  if (who_out) *who_out = who;
  return m;
}
// __syncthreads_count and friends: every thread adds its predicate to this call's accumulator (the
// fibers of a block take turns on one core: no race), a barrier, everyone reads, a barrier, then
// thread 0 clears it for the call after next.
inline unsigned long long syncthreads_count(int pred, int line, unsigned long long* seen = nullptr) {
  Bookkeeping quiet;
  Worker* W = tl_worker;
  Fiber* f = tl_fiber;
  const unsigned k = f->count_phase++ & 1u;
  W->bar_count[k] += pred ? 1 : 0;
  W->bar_seen[k] += 1;
  syncthreads(line);
  const unsigned long long r = W->bar_count[k];
  if (seen) *seen = W->bar_seen[k];
  syncthreads(line);
  if (f->linear == 0) W->bar_count[k] = W->bar_seen[k] = 0;
  return r;
}
}  // namespace labkit

#define __syncthreads_count(p) int(::labkit::syncthreads_count((p), __LINE__))
inline int labkit_syncthreads_and(int p, int line) {
  unsigned long long seen = 0;
  return ::labkit::syncthreads_count(p, line, &seen) == seen;
}
#define __syncthreads_and(p) labkit_syncthreads_and((p), __LINE__)
#define __syncthreads_or(p) int(::labkit::syncthreads_count((p), __LINE__) != 0)

inline unsigned __reduce_add_sync(unsigned mask, unsigned v) { return ::labkit::warp_reduce(mask, v, [](unsigned a, unsigned b) { return a + b; }); }
inline int __reduce_add_sync(unsigned mask, int v) { return ::labkit::warp_reduce(mask, v, [](int a, int b) { return int(unsigned(a) + unsigned(b)); }); }
inline unsigned __reduce_min_sync(unsigned mask, unsigned v) { return ::labkit::warp_reduce(mask, v, [](unsigned a, unsigned b) { return a < b ? a : b; }); }
inline int __reduce_min_sync(unsigned mask, int v) { return ::labkit::warp_reduce(mask, v, [](int a, int b) { return a < b ? a : b; }); }
inline unsigned __reduce_max_sync(unsigned mask, unsigned v) { return ::labkit::warp_reduce(mask, v, [](unsigned a, unsigned b) { return a > b ? a : b; }); }
inline int __reduce_max_sync(unsigned mask, int v) { return ::labkit::warp_reduce(mask, v, [](int a, int b) { return a > b ? a : b; }); }
inline unsigned __reduce_and_sync(unsigned mask, unsigned v) { return ::labkit::warp_reduce(mask, v, [](unsigned a, unsigned b) { return a & b; }); }
inline unsigned __reduce_or_sync(unsigned mask, unsigned v) { return ::labkit::warp_reduce(mask, v, [](unsigned a, unsigned b) { return a | b; }); }
inline unsigned __reduce_xor_sync(unsigned mask, unsigned v) { return ::labkit::warp_reduce(mask, v, [](unsigned a, unsigned b) { return a ^ b; }); }
template <class T> inline unsigned __match_any_sync(unsigned mask, T v) { return ::labkit::match(mask, v); }
template <class T> inline unsigned __match_all_sync(unsigned mask, T v, int* pred) {
  unsigned who = 0;
  unsigned m = ::labkit::match(mask, v, &who);
  *pred = m == who;
  return m == who ? m : 0u;
}

// ---------------------------------------------------------------------------
// Atomics: fibers of one worker never interleave inside a call, so these need
// to be atomic only across workers (other cores).  Relaxed, as a GPU's; under the
// race check sequentially consistent, so that the pattern "write, __threadfence(),
// atomic flag; another block sees the flag, reads" is ordered as on a GPU (the
// checker does not model fences).
// ---------------------------------------------------------------------------
#define LABKIT_ATOMIC_INT(T)                                                                         \
  inline T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, LABKIT_MO); }                      \
  inline T atomicSub(T* p, T v) { return __atomic_fetch_sub(p, v, LABKIT_MO); }                      \
  inline T atomicAnd(T* p, T v) { return __atomic_fetch_and(p, v, LABKIT_MO); }                      \
  inline T atomicOr(T* p, T v) { return __atomic_fetch_or(p, v, LABKIT_MO); }                        \
  inline T atomicXor(T* p, T v) { return __atomic_fetch_xor(p, v, LABKIT_MO); }                      \
  inline T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, LABKIT_MO); }                    \
  inline T atomicCAS(T* p, T cmp, T v) {                                                             \
    __atomic_compare_exchange_n(p, &cmp, v, false, LABKIT_MO, LABKIT_MO);                            \
    return cmp;                                                                                      \
  }                                                                                                  \
  inline T atomicMax(T* p, T v) {                                                                    \
    T old = __atomic_load_n(p, LABKIT_MO);                                                           \
    while (old < v && !__atomic_compare_exchange_n(p, &old, v, true, LABKIT_MO, LABKIT_MO)) {}       \
    return old;                                                                                      \
  }                                                                                                  \
  inline T atomicMin(T* p, T v) {                                                                    \
    T old = __atomic_load_n(p, LABKIT_MO);                                                           \
    while (old > v && !__atomic_compare_exchange_n(p, &old, v, true, LABKIT_MO, LABKIT_MO)) {}       \
    return old;                                                                                      \
  }
LABKIT_ATOMIC_INT(int)
LABKIT_ATOMIC_INT(unsigned int)
LABKIT_ATOMIC_INT(unsigned long long)
LABKIT_ATOMIC_INT(long long)
#undef LABKIT_ATOMIC_INT

// Floating-point atomics: a compare-and-swap loop on the bits.
namespace labkit {
template <class F, class Op> inline F atomic_float(F* p, Op op) {
  using B = std::conditional_t<sizeof(F) == 4, unsigned int, unsigned long long>;
  B* bp = reinterpret_cast<B*>(p);
  B old_bits = __atomic_load_n(bp, LABKIT_MO);
  for (;;) {
    F old_val, new_val;
    std::memcpy(&old_val, &old_bits, sizeof(F));
    new_val = op(old_val);
    B new_bits;
    std::memcpy(&new_bits, &new_val, sizeof(F));
    if (__atomic_compare_exchange_n(bp, &old_bits, new_bits, true, LABKIT_MO, LABKIT_MO))
      return old_val;
  }
}
}  // namespace labkit
inline float atomicAdd(float* p, float v) { return ::labkit::atomic_float(p, [v](float o) { return o + v; }); }
inline double atomicAdd(double* p, double v) { return ::labkit::atomic_float(p, [v](double o) { return o + v; }); }
inline float atomicExch(float* p, float v) { return ::labkit::atomic_float(p, [v](float) { return v; }); }
// As in CUDA, there is no atomicMax/atomicMin/atomicCAS on float: a kernel that used
// them here would not compile on a GPU.  Build them from atomicCAS on the bits.
inline unsigned atomicInc(unsigned* p, unsigned val) {   // ((old >= val) ? 0 : old + 1), as CUDA
  unsigned old = __atomic_load_n(p, LABKIT_MO);
  while (!__atomic_compare_exchange_n(p, &old, old >= val ? 0u : old + 1u, true, LABKIT_MO, LABKIT_MO)) {}
  return old;
}
inline unsigned atomicDec(unsigned* p, unsigned val) {   // ((old == 0 || old > val) ? val : old - 1)
  unsigned old = __atomic_load_n(p, LABKIT_MO);
  while (!__atomic_compare_exchange_n(p, &old, (old == 0 || old > val) ? val : old - 1u, true, LABKIT_MO,
                                      LABKIT_MO)) {}
  return old;
}
// The scoped forms (_block: one block sees the update, _system: the host too) are the same
// operations here: every thread of the executor shares one memory.
#define LABKIT_SCOPED(op)                                                                                   \
  template <class T, class V> inline auto op##_block(T* p, V v) -> decltype(op(p, v)) { return op(p, v); }  \
  template <class T, class V> inline auto op##_system(T* p, V v) -> decltype(op(p, v)) { return op(p, v); }
LABKIT_SCOPED(atomicAdd) LABKIT_SCOPED(atomicSub) LABKIT_SCOPED(atomicExch) LABKIT_SCOPED(atomicMin)
LABKIT_SCOPED(atomicMax) LABKIT_SCOPED(atomicInc) LABKIT_SCOPED(atomicDec) LABKIT_SCOPED(atomicAnd)
LABKIT_SCOPED(atomicOr) LABKIT_SCOPED(atomicXor)
#undef LABKIT_SCOPED
template <class T, class V> inline auto atomicCAS_block(T* p, V c, V v) -> decltype(atomicCAS(p, c, v)) { return atomicCAS(p, c, v); }
template <class T, class V> inline auto atomicCAS_system(T* p, V c, V v) -> decltype(atomicCAS(p, c, v)) { return atomicCAS(p, c, v); }
#if LABKIT_TSAN
inline void __threadfence() {}   // the race check's atomics order memory themselves (see above)
#else
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
#endif
inline void __threadfence_block() { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __threadfence(); }
// A pause of about ns nanoseconds in a spin-wait's back-off: the thread steps aside for the other
// threads of its block (the one it waits for may be among them), as a clock wait does; the executor
// keeps no device time to spend.
inline void __nanosleep(unsigned) { ::labkit::let_others_run(); }
// __trap() and __brkpt(): the kernel stops itself; a GPU ends the launch with an error that every later
// call of the runtime returns too (cudaErrorLaunchFailure here, as for any failed launch).
[[noreturn]] inline void __trap() {
  ::labkit::fail_from_fiber("kernel '" + std::string(::labkit::tl_worker->L->kernel) + "' called __trap() in block (" +
                            std::to_string(blockIdx.x) + "," + std::to_string(blockIdx.y) + "," +
                            std::to_string(blockIdx.z) + "), thread (" + std::to_string(threadIdx.x) + "," +
                            std::to_string(threadIdx.y) + "," + std::to_string(threadIdx.z) + "): the launch fails");
}
[[noreturn]] inline void __brkpt() { __trap(); }

// ---------------------------------------------------------------------------
// Math: the CUDA names that are not already C/C++ names
// ---------------------------------------------------------------------------
#if LABKIT_COUNT
// The counting build (labkit.counters) counts a GPU's FP32 instructions from this code's disassembly
// (counting.py's GPU_EXPANSION).  expf's GPU code ends with an FMUL that nvcc fuses with an add that
// follows (sum += expf(x) is an FFMA): here that multiply is a real one, by a 1 the compiler cannot
// see through, left for the host compiler to fuse the same way.  __expf, __logf and __fdividef are
// MUFU instructions and one FMUL on a GPU: here a call the counting does not see (through a pointer)
// and the multiply.  Every result is the plain build's: x * 1 and fma(x, 1, y) round as x and x + y.
namespace labkit {
inline float opaque_one() {
  float v = 1.0f;
#if defined(__x86_64__)
  __asm__("" : "+x"(v));
#else
  __asm__("" : "+w"(v));
#endif
  return v;
}
inline float (*volatile quiet_expf)(float) = expf;
inline float (*volatile quiet_logf)(float) = logf;
}  // namespace labkit
inline float labkit_counted_expf(float x) { return expf(x) * ::labkit::opaque_one(); }
namespace std { using ::labkit_counted_expf; }
inline float __expf(float x) { return ::labkit::quiet_expf(x) * ::labkit::opaque_one(); }
inline float __logf(float x) { return ::labkit::quiet_logf(x) * ::labkit::opaque_one(); }
// The quotient in double, rounded once to float: the float quotient itself (53 bits hold the exact
// rounding of a float division), in an instruction the counting does not take for a float division.
inline float __fdividef(float a, float b) {
  double q = double(a) / double(b);
#if defined(__x86_64__)
  __asm__("" : "+x"(q));   // the compiler would narrow it back into a float division otherwise
#else
  __asm__("" : "+w"(q));
#endif
  return float(q) * ::labkit::opaque_one();
}
#define expf labkit_counted_expf
#else
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
#endif
inline float __log2f(float x) { return log2f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
// Arithmetic with a rounding mode of its own (_rn nearest, _rz toward zero, _ru up, _rd down), as
// interval arithmetic uses it: the host's rounding mode set around one operation.  The volatile
// result keeps the compiler from computing it elsewhere, in the default mode.  No switch to another
// thread happens in between (NoSwitch, for the shuffled schedule): a fiber switch does not carry the
// rounding mode (labkit_fiber_switch).
namespace labkit {
template <class F> inline auto rounded(int mode, F f) -> decltype(f()) {
  NoSwitch one_operation;
#if defined(__x86_64__)
  // Float and double arithmetic on x86-64 is SSE's, rounded by MXCSR alone (sqrt and fma included):
  // setting just its rounding bits costs a fraction of fesetround, which sets the x87 unit's as well
  // (interval arithmetic spends most of its time here).
  const unsigned saved = _mm_getcsr();
  const unsigned bits = mode == FE_DOWNWARD ? 0x2000u : mode == FE_UPWARD ? 0x4000u : mode == FE_TOWARDZERO ? 0x6000u : 0u;
  _mm_setcsr((saved & ~0x6000u) | bits);
  volatile auto r = f();
  _mm_setcsr(saved);
  return r;
#else
  const int saved = fegetround();
  fesetround(mode);
  volatile auto r = f();
  fesetround(saved);
  return r;
#endif
}
}  // namespace labkit
#define LABKIT_ROUNDED(suffix, mode)                                                                          \
  inline double __dadd_##suffix(double a, double b) { return ::labkit::rounded(mode, [=] { volatile double x = a; return x + b; }); } \
  inline double __dsub_##suffix(double a, double b) { return ::labkit::rounded(mode, [=] { volatile double x = a; return x - b; }); } \
  inline double __dmul_##suffix(double a, double b) { return ::labkit::rounded(mode, [=] { volatile double x = a; return x * b; }); } \
  inline double __ddiv_##suffix(double a, double b) { return ::labkit::rounded(mode, [=] { volatile double x = a; return x / b; }); } \
  inline double __dsqrt_##suffix(double a) { return ::labkit::rounded(mode, [=] { volatile double x = a; return std::sqrt(x); }); } \
  inline double __drcp_##suffix(double a) { return ::labkit::rounded(mode, [=] { volatile double x = a; return 1.0 / x; }); } \
  inline double __fma_##suffix(double a, double b, double c) { return ::labkit::rounded(mode, [=] { volatile double x = a; return std::fma(x, b, c); }); } \
  inline float __fsub_##suffix(float a, float b) { return ::labkit::rounded(mode, [=] { volatile float x = a; return x - b; }); } \
  inline float __fdiv_##suffix(float a, float b) { return ::labkit::rounded(mode, [=] { volatile float x = a; return x / b; }); } \
  inline float __frcp_##suffix##_labkit(float a) { return ::labkit::rounded(mode, [=] { volatile float x = a; return 1.0f / x; }); }
LABKIT_ROUNDED(rn, FE_TONEAREST)
LABKIT_ROUNDED(rz, FE_TOWARDZERO)
LABKIT_ROUNDED(ru, FE_UPWARD)
LABKIT_ROUNDED(rd, FE_DOWNWARD)
#undef LABKIT_ROUNDED
#define LABKIT_ROUNDED_F(suffix, mode)                                                                        \
  inline float __fadd_##suffix(float a, float b) { return ::labkit::rounded(mode, [=] { volatile float x = a; return x + b; }); } \
  inline float __fmul_##suffix(float a, float b) { return ::labkit::rounded(mode, [=] { volatile float x = a; return x * b; }); } \
  inline float __fsqrt_##suffix(float a) { return ::labkit::rounded(mode, [=] { volatile float x = a; return std::sqrt(x); }); } \
  inline float __fmaf_##suffix(float a, float b, float c) { return ::labkit::rounded(mode, [=] { volatile float x = a; return std::fma(x, b, c); }); } \
  inline float __frcp_##suffix(float a) { return __frcp_##suffix##_labkit(a); }
LABKIT_ROUNDED_F(rz, FE_TOWARDZERO)
LABKIT_ROUNDED_F(ru, FE_UPWARD)
LABKIT_ROUNDED_F(rd, FE_DOWNWARD)
#undef LABKIT_ROUNDED_F
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
// The CUDA Math API's functions that C and C++ lack: computed in double (long double for a double's),
// then rounded once.
namespace labkit {
namespace cmath {
inline long double pi() { return 3.141592653589793238462643383279502884L; }
// sin(pi x), cos(pi x) exactly 0 or +-1 at the integers and half-integers, as CUDA's are.
inline long double sinpi(long double x) {
  if (std::isinf(x) || std::isnan(x)) return std::numeric_limits<long double>::quiet_NaN();
  const long double r = std::fmod(x, 2.0L);
  if (r == std::floor(r)) return std::copysign(0.0L, x);
  return std::sin(pi() * r);
}
inline long double cospi(long double x) {
  if (std::isinf(x) || std::isnan(x)) return std::numeric_limits<long double>::quiet_NaN();
  const long double r = std::fmod(std::fabs(x), 2.0L);
  if (r == 0.5L || r == 1.5L) return 0.0L;
  return std::cos(pi() * r);
}
// erfinv by Newton's method on erf from a close start; erfcinv on erfc itself (precise near 0).
inline long double erfinv(long double y) {
  if (y <= -1.0L || y >= 1.0L) return y == -1.0L ? -INFINITY : y == 1.0L ? INFINITY : NAN;
  if (y != y) return y;
  const long double w = -std::log((1.0L - y) * (1.0L + y));
  long double x = w < 5.0L ? y * (0.886226925L + 0.2L * w) : std::copysign(std::sqrt(w), y);
  for (int i = 0; i < 60; ++i) {
    const long double step = (std::erf(x) - y) / (2.0L / std::sqrt(pi()) * std::exp(-x * x));
    x -= step;
    if (std::fabs(step) <= 1e-19L * (1.0L + std::fabs(x))) break;
  }
  return x;
}
inline long double erfcinv(long double y) {
  if (y <= 0.0L || y >= 2.0L) return y == 0.0L ? INFINITY : y == 2.0L ? -INFINITY : NAN;
  if (y != y) return y;
  if (y > 0.5L && y < 1.5L) return erfinv(1.0L - y);
  const bool low = y > 1.0L;
  const long double t = low ? 2.0L - y : y;            // erfcinv(2 - t) = -erfcinv(t)
  long double x = std::sqrt(-std::log(t / 2.0L));
  for (int i = 0; i < 100; ++i) {
    const long double step = (std::erfc(x) - t) / (-2.0L / std::sqrt(pi()) * std::exp(-x * x));
    x -= step;
    if (std::fabs(step) <= 1e-19L * x) break;
  }
  return low ? -x : x;
}
// erfcx(x) = exp(x^2) erfc(x); past the range of erfc, its asymptotic series.
inline long double erfcx(long double x) {
  if (x < 100.0L) return std::exp(x * x) * std::erfc(x);
  long double sum = 1.0L, term = 1.0L;
  for (int k = 1; k < 8; ++k) { term *= -(2.0L * k - 1.0L) / (2.0L * x * x); sum += term; }
  return sum / (x * std::sqrt(pi()));
}
inline long double normcdfinv(long double p) { return -std::sqrt(2.0L) * erfcinv(2.0L * p); }
}  // namespace cmath
}  // namespace labkit
#define LABKIT_CMATH(name, expr)                                                                                \
  inline double name(double x) { return double(expr); }                                                        \
  inline float name##f(float x) { return float(expr); }
LABKIT_CMATH(sinpi, ::labkit::cmath::sinpi(x))
LABKIT_CMATH(cospi, ::labkit::cmath::cospi(x))
LABKIT_CMATH(rcbrt, 1.0L / std::cbrt((long double)x))
LABKIT_CMATH(erfinv, ::labkit::cmath::erfinv(x))
LABKIT_CMATH(erfcinv, ::labkit::cmath::erfcinv(x))
LABKIT_CMATH(erfcx, ::labkit::cmath::erfcx(x))
LABKIT_CMATH(normcdf, 0.5L * std::erfc(-(long double)x / std::sqrt(2.0L)))
LABKIT_CMATH(normcdfinv, ::labkit::cmath::normcdfinv(x))
LABKIT_CMATH(cyl_bessel_i0, std::cyl_bessel_i(0.0L, std::fabs((long double)x)))
LABKIT_CMATH(cyl_bessel_i1, std::copysign(std::cyl_bessel_i(1.0L, std::fabs((long double)x)), (long double)x))
#undef LABKIT_CMATH
inline void sincospi(double x, double* s, double* c) { *s = sinpi(x); *c = cospi(x); }
inline void sincospif(float x, float* s, float* c) { *s = sinpif(x); *c = cospif(x); }
inline double rhypot(double x, double y) { return double(1.0L / std::hypot((long double)x, (long double)y)); }
inline float rhypotf(float x, float y) { return float(1.0L / std::hypot((long double)x, (long double)y)); }
inline double norm3d(double a, double b, double c) { return double(std::sqrt((long double)a * a + (long double)b * b + (long double)c * c)); }
inline float norm3df(float a, float b, float c) { return float(norm3d(a, b, c)); }
inline double rnorm3d(double a, double b, double c) { return double(1.0L / std::sqrt((long double)a * a + (long double)b * b + (long double)c * c)); }
inline float rnorm3df(float a, float b, float c) { return float(rnorm3d(a, b, c)); }
inline double norm4d(double a, double b, double c, double d) {
  return double(std::sqrt((long double)a * a + (long double)b * b + (long double)c * c + (long double)d * d));
}
inline float norm4df(float a, float b, float c, float d) { return float(norm4d(a, b, c, d)); }
inline double rnorm4d(double a, double b, double c, double d) { return 1.0 / norm4d(a, b, c, d); }
inline float rnorm4df(float a, float b, float c, float d) { return float(1.0L / (long double)norm4d(a, b, c, d)); }
inline double norm(int n, const double* v) { long double s = 0; for (int i = 0; i < n; ++i) s += (long double)v[i] * v[i]; return double(std::sqrt(s)); }
inline float normf(int n, const float* v) { long double s = 0; for (int i = 0; i < n; ++i) s += (long double)v[i] * v[i]; return float(std::sqrt(s)); }
inline double rnorm(int n, const double* v) { return double(1.0L / (long double)norm(n, v)); }
inline float rnormf(int n, const float* v) { long double s = 0; for (int i = 0; i < n; ++i) s += (long double)v[i] * v[i]; return float(1.0L / std::sqrt(s)); }
inline float fdividef(float a, float b) { return a / b; }
// CUDA declares these in the global namespace; the C++ library keeps them in std::.
using std::isfinite;
using std::isinf;
using std::isnan;
using std::signbit;
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float exp10f(float x) { return powf(10.f, x); }
// Conversions with a rounding mode, as PTX's cvt makes them: a float to an integer rounded (rn: to
// nearest even, rz: toward zero, ru: up, rd: down), then clamped to the integer's range; NaN to 0 for
// a 32-bit integer and to 0x8000000000000000 for a 64-bit one, signed or not (as an H200 answers); an
// integer or a double to a narrower floating type rounded in the mode.
namespace labkit {
template <class I, class F> inline I to_int(F x, int mode) {
  if (x != x) return sizeof(I) == 8 ? I(1ull << 63) : I(0);
  const F r = mode == FE_TONEAREST ? std::nearbyint(x) : mode == FE_TOWARDZERO ? std::trunc(x)
            : mode == FE_UPWARD ? std::ceil(x) : std::floor(x);
  if (r <= F(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  if (r >= F(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return I(r);
}
}  // namespace labkit
#define LABKIT_CVT(suffix, mode)                                                                               \
  inline int __float2int_##suffix(float x) { return ::labkit::to_int<int>(x, mode); }                           \
  inline unsigned __float2uint_##suffix(float x) { return ::labkit::to_int<unsigned>(x, mode); }                \
  inline long long __float2ll_##suffix(float x) { return ::labkit::to_int<long long>(x, mode); }                \
  inline unsigned long long __float2ull_##suffix(float x) { return ::labkit::to_int<unsigned long long>(x, mode); } \
  inline int __double2int_##suffix(double x) { return ::labkit::to_int<int>(x, mode); }                         \
  inline unsigned __double2uint_##suffix(double x) { return ::labkit::to_int<unsigned>(x, mode); }              \
  inline long long __double2ll_##suffix(double x) { return ::labkit::to_int<long long>(x, mode); }              \
  inline unsigned long long __double2ull_##suffix(double x) { return ::labkit::to_int<unsigned long long>(x, mode); } \
  inline float __int2float_##suffix(int x) { return ::labkit::rounded(mode, [=] { volatile int v = x; return float(v); }); } \
  inline float __uint2float_##suffix(unsigned x) { return ::labkit::rounded(mode, [=] { volatile unsigned v = x; return float(v); }); } \
  inline float __ll2float_##suffix(long long x) { return ::labkit::rounded(mode, [=] { volatile long long v = x; return float(v); }); } \
  inline float __ull2float_##suffix(unsigned long long x) { return ::labkit::rounded(mode, [=] { volatile unsigned long long v = x; return float(v); }); } \
  inline double __ll2double_##suffix(long long x) { return ::labkit::rounded(mode, [=] { volatile long long v = x; return double(v); }); } \
  inline double __ull2double_##suffix(unsigned long long x) { return ::labkit::rounded(mode, [=] { volatile unsigned long long v = x; return double(v); }); } \
  inline float __double2float_##suffix(double x) { return ::labkit::rounded(mode, [=] { volatile double v = x; return float(v); }); }
LABKIT_CVT(rn, FE_TONEAREST)
LABKIT_CVT(rz, FE_TOWARDZERO)
LABKIT_CVT(ru, FE_UPWARD)
LABKIT_CVT(rd, FE_DOWNWARD)
#undef LABKIT_CVT
inline double __int2double_rn(int x) { return double(x); }
inline double __uint2double_rn(unsigned x) { return double(x); }
inline float __frsqrt_rn(float x) { return float(1.0 / std::sqrt(double(x))); }   // correctly rounded
inline float __int_as_float(int x) { float f; std::memcpy(&f, &x, 4); return f; }
inline int __float_as_int(float f) { int x; std::memcpy(&x, &f, 4); return x; }
inline unsigned __float_as_uint(float f) { unsigned x; std::memcpy(&x, &f, 4); return x; }
inline float __uint_as_float(unsigned x) { float f; std::memcpy(&f, &x, 4); return f; }
inline double __longlong_as_double(long long x) { double d; std::memcpy(&d, &x, 8); return d; }
inline long long __double_as_longlong(double d) { long long x; std::memcpy(&x, &d, 8); return x; }
inline double __hiloint2double(int hi, int lo) { return __longlong_as_double((long long)(((unsigned long long)(unsigned)hi << 32) | (unsigned)lo)); }
inline int __double2hiint(double d) { return int((unsigned long long)__double_as_longlong(d) >> 32); }
inline int __double2loint(double d) { return int((unsigned long long)__double_as_longlong(d) & 0xffffffffu); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(unsigned(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline unsigned __brev(unsigned x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  x = ((x >> 8) & 0x00ff00ffu) | ((x & 0x00ff00ffu) << 8);
  return (x >> 16) | (x << 16);
}
inline int __mul24(int a, int b) { return a * b; }
inline unsigned __umul24(unsigned a, unsigned b) { return a * b; }
inline int __mulhi(int a, int b) { return int((long long)a * b >> 32); }
// The rest of CUDA's integer intrinsics, bit for bit as the CUDA Math API defines them.
inline unsigned __umulhi(unsigned a, unsigned b) { return unsigned((unsigned long long)a * b >> 32); }
inline long long __mul64hi(long long a, long long b) { return (long long)((__int128)a * b >> 64); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)((unsigned __int128)a * b >> 64);
}
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned long long __brevll(unsigned long long x) {
  return ((unsigned long long)__brev(unsigned(x)) << 32) | __brev(unsigned(x >> 32));
}
inline unsigned __sad(int x, int y, unsigned z) { return (x > y ? unsigned(x) - unsigned(y) : unsigned(y) - unsigned(x)) + z; }
inline unsigned __usad(unsigned x, unsigned y, unsigned z) { return (x > y ? x - y : y - x) + z; }
inline int __hadd(int x, int y) { return int(((long long)x + y) >> 1); }
inline int __rhadd(int x, int y) { return int(((long long)x + y + 1) >> 1); }
inline unsigned __uhadd(unsigned x, unsigned y) { return unsigned(((unsigned long long)x + y) >> 1); }
inline unsigned __urhadd(unsigned x, unsigned y) { return unsigned(((unsigned long long)x + y + 1) >> 1); }
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const unsigned long long both = ((unsigned long long)y << 32) | x;   // bytes 0-3 of x, 4-7 of y
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= unsigned((both >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return r;
}
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned shift) {
  return unsigned(((((unsigned long long)hi << 32) | lo) << (shift & 31)) >> 32);
}
inline unsigned __funnelshift_lc(unsigned lo, unsigned hi, unsigned shift) {   // shift clamped to 32
  return shift >= 32 ? lo : __funnelshift_l(lo, hi, shift);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned shift) {
  return unsigned((((unsigned long long)hi << 32) | lo) >> (shift & 31));
}
inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned shift) {   // shift clamped to 32
  return shift >= 32 ? hi : __funnelshift_r(lo, hi, shift);
}
// Single PTX instructions that inline asm may hold (kernel_source.rewrite_ptx_instructions turns
// `asm("bfind.u32 %0, %1;" : "=r"(r) : "r"(x))` into a call of one of these), bit for bit as the PTX
// ISA defines them; the others have intrinsics above (popc, clz, brev, shf, mul.hi).
namespace labkit {
namespace ptx {
template <class T> inline unsigned bits() { return 8 * sizeof(T); }
// bfind: the position of the most significant 1 (for a negative signed value, of the most significant
// 0), 0xffffffff where there is none.
template <class T> inline unsigned bfind(T a) {
  using U = typename std::make_unsigned<T>::type;
  U u = std::is_signed<T>::value && a < 0 ? U(~a) : U(a);
  for (int i = int(bits<T>()) - 1; i >= 0; --i)
    if ((u >> i) & 1) return unsigned(i);
  return 0xffffffffu;
}
// bfe: `len` bits of `a` from `pos` (each taken modulo 256), zero-extended, or sign-extended from the
// last bit taken for a signed type.
template <class T> inline T bfe(T a, unsigned pos, unsigned len) {
  using U = typename std::make_unsigned<T>::type;
  const unsigned msb = bits<T>() - 1;
  pos &= 0xff;
  len &= 0xff;
  const U ua = U(a);
  const unsigned top = pos + len - 1 < msb ? pos + len - 1 : msb;
  const U sbit = std::is_signed<T>::value && len > 0 ? (ua >> top) & 1 : 0;
  U d = 0;
  for (unsigned i = 0; i <= msb; ++i) {
    const U bit = (i < len && pos + i <= msb) ? (ua >> (pos + i)) & 1 : sbit;
    d |= bit << i;
  }
  return T(d);
}
// bfi: `b` with its bits from `pos` on, `len` of them (each modulo 256), replaced by the low bits of `a`.
template <class T> inline T bfi(T a, T b, unsigned pos, unsigned len) {
  const unsigned msb = bits<T>() - 1;
  pos &= 0xff;
  len &= 0xff;
  T f = b;
  for (unsigned i = 0; i < len && pos + i <= msb; ++i) f = T((f & ~(T(1) << (pos + i))) | (((a >> i) & 1) << (pos + i)));
  return f;
}
// prmt (its default mode): byte i of the result is the byte of b:a that selector nibble i names with
// its low 3 bits, or, where the nibble's high bit is set, that byte's sign bit in all 8 bits.
inline unsigned prmt(unsigned a, unsigned b, unsigned c) {
  const unsigned long long both = ((unsigned long long)b << 32) | a;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) {
    const unsigned nibble = (c >> (4 * i)) & 15;
    unsigned byte = unsigned(both >> (8 * (nibble & 7))) & 0xff;
    if (nibble & 8) byte = (byte & 0x80) ? 0xff : 0;
    r |= byte << (8 * i);
  }
  return r;
}
}  // namespace ptx
}  // namespace labkit
#include "labkit_simd.h"       // the SIMD intrinsics (__vadd2, __vcmpgtu4, ...) and DPX (__vimax3_s32, ...)
template <class T> inline T __ldg(const T* p) { return *p; }
// Loads and stores with cache hints: the executor has no caches to hint; the values are the same.
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline T __ldcv(const T* p) { return *p; }
template <class T> inline void __stwb(T* p, T v) { *p = v; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }

// min/max as CUDA overloads them (integers and floats; mixed arguments promote).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline unsigned min(int a, unsigned b) { return min(unsigned(a), b); }
inline unsigned min(unsigned a, int b) { return min(a, unsigned(b)); }
inline unsigned max(int a, unsigned b) { return max(unsigned(a), b); }
inline unsigned max(unsigned a, int b) { return max(a, unsigned(b)); }
inline float min(float a, int b) { return fminf(a, float(b)); }
inline float min(int a, float b) { return fminf(float(a), b); }
inline float max(float a, int b) { return fmaxf(a, float(b)); }
inline float max(int a, float b) { return fmaxf(float(a), b); }
inline double min(double a, float b) { return fmin(a, double(b)); }
inline double min(float a, double b) { return fmin(double(a), b); }
inline double max(double a, float b) { return fmax(a, double(b)); }
inline double max(float a, double b) { return fmax(double(a), b); }
// The named forms, for one type each.
inline unsigned umin(unsigned a, unsigned b) { return min(a, b); }
inline unsigned umax(unsigned a, unsigned b) { return max(a, b); }
inline long long llmin(long long a, long long b) { return min(a, b); }
inline long long llmax(long long a, long long b) { return max(a, b); }
inline unsigned long long ullmin(unsigned long long a, unsigned long long b) { return min(a, b); }
inline unsigned long long ullmax(unsigned long long a, unsigned long long b) { return max(a, b); }

#if LABKIT_PREEMPT && !defined(LABKIT_RUNTIME_LINKED)   // the hooks are the runtime's
#include "labkit_interleave.h"
#endif
#if LABKIT_COUNT && !defined(LABKIT_RUNTIME_LINKED)
#include "labkit_count.h"
#endif
