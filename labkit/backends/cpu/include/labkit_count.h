// labkit_count.h -- the counting build (labkit.counters): the memory instructions of a launch as a
// GPU's warps issue them, and the basic blocks its threads run (for FP32 instruction counts).
//
// The kernel is compiled with ThreadSanitizer's instrumentation (a hook before every access,
// labkit_interleave.h) and GCC's -fsanitize-coverage=trace-pc (a hook at the start of every basic
// block), linked without either runtime: the hooks below are the executor's own.  The build is loaded
// with the block hook silenced in blocks with nothing to count, and in blocks whose runs the calls
// of an access hook in them count (counting.lean_build, labkit_count_sites).
//
// Why a log and a flush: the executor runs the threads of a block one after another, each until a
// barrier, so the 32 accesses that one warp instruction makes arrive far apart.  Each thread logs
// (instruction site, address, size); once every lane of a warp has made all its accesses up to the
// same point (a completed __syncthreads, the block's end: count_flush; all its lanes returned:
// count_warp_done) its lanes are matched: the k-th execution of a site by each lane is one warp
// instruction, executed by the lanes that reached it (lanes that skip an access, or loop fewer times,
// are inactive in it, as on a GPU).  The site is the hook's return address, one per access
// instruction of the compiled kernel.
//
// What one warp instruction costs, as Nsight Compute counts it on an H100:
//   * global: one request; its sectors are the distinct 32-byte sectors its lanes touch, counted
//     from the start of the array's allocation (a GPU's allocations are 256-byte aligned);
//   * shared: 32 banks of 4 bytes.  Lanes reading one 32-bit word share it (a broadcast); distinct
//     words in one bank are served one per wavefront (128 bytes).  A 32-bit access is one phase of
//     32 lanes, a 64- or 128-bit one two phases of 16 lanes (half-warps: a float4 that each
//     half-warp reads as one broadcast costs 2 wavefronts on an H100, not the 4 that quarter-warp
//     phases would make); each active phase costs as many wavefronts as its most loaded bank has
//     distinct words.  Bank conflicts are the wavefronts beyond the fewest that could move the
//     phase's distinct words (one per 32 of them).  A thread's 32-bit loads of neighbouring words
//     count as the one vector load nvcc makes of them (merge_vector_loads).
//   * DRAM: each distinct sector the launch reads is read once, each it writes is written once
//     (compulsory traffic: an L2 large enough for the launch's data, cold at its start).
// Accesses outside the launch's arrays, its __device__ variables and shared memory (a thread's own
// stack, __constant__ memory, the executor's bookkeeping) are not counted, nor are atomics (Nsight
// Compute counts them apart from loads and stores).
#pragma once

#include <dlfcn.h>
#include <link.h>

#include <array>
#include <cstring>

// Hidden: the hooks reach these directly, not through the library's global offset table.
#pragma GCC visibility push(hidden)
namespace labkit {
namespace count {

enum Kind : unsigned char { GLOBAL_LD, GLOBAL_ST, SHARED_LD, SHARED_ST };
// Keep in step with counting.py (TOTALS).
enum Metric { REQ_LD, SEC_LD, REQ_ST, SEC_ST, WF_LD, BC_LD, WF_ST, BC_ST, NMETRICS };

// 16 bytes: a block's log is most of what counting moves through memory.  The site is the low half
// of the instruction's address (two instructions of one library never share it).
constexpr unsigned MAX_REGIONS = 255;
// A shared access's array: the dynamic buffer, a __shared__ array (1 + its index), or one past the
// ones an access can name (its alignment then read from its address).
constexpr uint8_t SHARED_DYN = 0, SHARED_UNNAMED = 255;
struct Access {
  uintptr_t addr;
  uint32_t site;
  uint16_t size;        // bytes; a larger copy (a struct) is counted as its first 65535
  uint8_t region;       // which of the launch's arrays (global); shared: SHARED_DYN or 1 + which array
  Kind kind;
};
static_assert(sizeof(Access) == 16, "an access is two 8-byte words");

// One thread's accesses since the last flush.  The hook appends with two 8-byte stores and a pointer
// bump (std::vector's emplace_back zeroes the element first, then stores field by field and reads
// its end pointer back: half of the hook's time); it grows, rarely, out of line.
class ThreadLog {
 public:
  ThreadLog() = default;
  ThreadLog(const ThreadLog&) = delete;
  ThreadLog& operator=(const ThreadLog&) = delete;
  ThreadLog(ThreadLog&& o) noexcept : b_(o.b_), e_(o.e_), cap_(o.cap_) { o.b_ = o.e_ = o.cap_ = nullptr; }
  ~ThreadLog() { std::free(b_); }
  __attribute__((always_inline)) void push(uintptr_t addr, uint64_t rest) {
    if (__builtin_expect(full(), 0)) grow();
    push_into_room(addr, rest);
  }
  bool full() const { return e_ == cap_; }
  __attribute__((always_inline)) void push_into_room(uintptr_t addr, uint64_t rest) {   // not full()
    char* w = reinterpret_cast<char*>(e_);
    std::memcpy(w, &addr, 8);
    std::memcpy(w + 8, &rest, 8);
    ++e_;
  }
  size_t size() const { return size_t(e_ - b_); }
  bool empty() const { return e_ == b_; }
  void clear() { e_ = b_; }
  void resize(size_t n) { e_ = b_ + n; }      // shrinks only (merge_vector_loads)
  Access* data() { return b_; }
  const Access* data() const { return b_; }
  Access* begin() { return b_; }
  Access* end() { return e_; }
  const Access* begin() const { return b_; }
  const Access* end() const { return e_; }
  Access& operator[](size_t i) { return b_[i]; }
  const Access& operator[](size_t i) const { return b_[i]; }

 private:
  __attribute__((noinline, cold)) void grow() {
    const size_t n = size(), cap = std::max<size_t>(256, 2 * size_t(cap_ - b_));
    Access* b = static_cast<Access*>(std::realloc(b_, cap * sizeof(Access)));
    if (b == nullptr) std::abort();
    b_ = b, e_ = b + n, cap_ = b + cap;
  }
  Access *b_ = nullptr, *e_ = nullptr, *cap_ = nullptr;
};
// The second word of an access as the hook stores it (little-endian: site, size, region, kind).
__attribute__((always_inline)) inline uint64_t access_word(uint32_t site, size_t size, unsigned region, Kind kind) {
  return uint64_t(site) | uint64_t(size < 65535 ? size : 65535) << 32 | uint64_t(region) << 48 | uint64_t(kind) << 56;
}
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "access_word's layout");

// An array of the launch as the hook tests it: [lo, lo + span).
struct Span {
  uintptr_t lo, span;
};

// An array of the launch (an argument, a __device__ variable): [lo, hi), its sectors counted from
// `origin`; which of them the launch read and wrote.
struct Region {
  uintptr_t lo, hi, origin;
  std::vector<unsigned char> read, written;
  size_t first_sector() const { return (lo - origin) >> 5; }
};

// Where a site's accesses went last: each access instruction reads one array, nearly always, so the
// hook tests that array's bounds first, and logs the access with the array and kind found before,
// not searching shared memory and the launch's arrays again.  A miss (another array, a site whose
// entry another site took) takes the search, which fills the entry.  Kept per worker (shared memory
// is per worker), emptied at each launch's start; the arrays of a launch stay where they are through
// it (a __shared__ array, once registered, too).
struct SiteMemo {
  uint32_t site;
  uint8_t flags;        // 0 (an array of the launch), SHARED_LOAD, DROPPED or DROPPED_SPAN
  uintptr_t lo, span;   // the array: [lo, lo + span)
  uint64_t word;        // access_word's region and kind bits
};
// A shared load (merge_vector_loads looks for 32-bit ones); an address in none of the launch's
// arrays, nor a stack (the executor's own data: a thread's blockIdx), which stays so through the
// launch: lo is that address (an access there again, no wider, is dropped); a __constant__
// variable or the worker's fibers' records, [lo, lo + span) (any access within it is dropped).
constexpr uint8_t SHARED_LOAD = 1, DROPPED = 2, DROPPED_SPAN = 4;
constexpr unsigned SITE_MEMO = 1024;   // entries, by the site's low bits (sites lie 5 bytes apart or more)

// One per worker (the blocks it runs), merged when Python asks.
struct State {
  Worker* W = nullptr;
  uintptr_t stacks = 0, stacks_end = 0;   // its fibers' stacks
  uintptr_t dyn = 0, dyn_bytes = 0;   // the worker's dynamic shared memory (its address and the launch's size)
  std::vector<unsigned long long> hits;   // runs of each basic block, by (address - g_text_lo) / 4
  unsigned long long* hit = nullptr;      // hits' data and size, as the block hook reads them
  size_t nhits = 0;
  // What this worker writes, on cache lines of its own: every hook of every worker reads the fields
  // above (here()), and a line that another core keeps writing would travel between cores each time.
  alignas(64) unsigned index = 0;   // in g_states, g_stacks
  SiteMemo memo[SITE_MEMO];         // written by the hook on a miss only
  bool loads32 = false;            // a 32-bit shared load logged since the last flush (merge_vector_loads)
  bool tracing = false;            // flushing the traced warp (g_trace_warp)
  unsigned long long m[NMETRICS] = {};
  std::vector<ThreadLog> log;   // per thread of the running block, since the last flush
  ThreadLog* running = nullptr;      // the log of the thread running now (count_enter)
  std::vector<unsigned long long> scratch;
  std::vector<unsigned long long> site_calls;   // calls of each counted site (labkit_count_sites' order)
  // Matching a warp's lanes (flush_warp), kept from warp to warp so that it allocates nothing.
  std::vector<std::pair<unsigned, const Access*>> group;   // one instruction's (lane, access)
  std::vector<uint32_t> site_of, stamp;   // an open-addressing table: site -> its ordinal in the warp
  // The same, indexed by the site's distance from the start of this library's code (g_code_lo): a
  // load, no search.
  std::vector<uint32_t> direct_stamp, direct_ordinal;
  std::vector<unsigned long long> run_of;   // flush_warp: whose executions runs[o] counts (stamp, thread)
  std::vector<unsigned> ordinal_of, runs, most, first_bucket, site_runs, start;
  // Merging vector loads (merge_vector_loads), kept from warp to warp likewise.
  std::vector<unsigned char> taken, vector_ok;
  std::vector<std::array<uint32_t, 3>> vector_partner;
  unsigned warp_stamp = 0;
  std::vector<unsigned char> by_lanes;   // global_by_lanes: which instructions it left to instruction()
  std::vector<uint32_t> class_pos;  // flush_warp: each bucket's place in each kept lane's sequence
};

inline std::vector<Region>& regions() { static std::vector<Region> r; return r; }
inline Region* g_regions = nullptr;   // regions()' elements, as the flush reads them (no static's guard)
inline unsigned g_nregions = 0;
inline Span g_spans[MAX_REGIONS];      // regions()' bounds, as the hook tests them: 16 bytes each
// Which of the launch's arrays overlap no other (two arguments that view one buffer do): only for
// those is an address's array the same whichever array the hook tests first, and a site's memo serves.
inline bool g_region_alone[MAX_REGIONS];
// The module's __constant__ variables, [lo, lo + span): not counted (labkit_count_constant).
inline std::vector<Span> g_constants;
// The workers' states, as a plain array: the hooks read it at every access and every basic block,
// and a function-local static would add a check that it is constructed.
constexpr unsigned MAX_WORKERS = 4096;
inline State* g_states[MAX_WORKERS];
// Each state's fiber stacks, [lo, lo + span), side by side: a hook finds its worker reading these
// alone, not each state's fields in turn.  A worker's Busy writes its span, which every hook of every
// worker reads (relaxed atomics).
struct Stacks {
  uintptr_t lo, span;
};
inline Stacks g_stacks[MAX_WORKERS];
inline unsigned g_nstates = 0;
// The addresses of the kernel's basic blocks, [g_text_lo, g_text_hi): one counter per 4 bytes (a
// call is longer: no two blocks share one), so that the hook at every block costs an increment, not
// a lookup.
inline uintptr_t g_text_lo = 0, g_text_hi = 0;

// This library's code, where every site lies (the hooks' callers are its instrumented functions):
// the low halves of its bounds (sites are), and its size.  Set by labkit_count_begin; a span of 0
// (not found) leaves every site to the hash table.
inline uint32_t g_code_lo = 0, g_code_span = 0;

// The access hook calls whose count is a block's runs (counting.sited_blocks: the block's own hook
// is silenced): each site's index, in an open-addressing table by its low 32 bits.  Every call of
// such a hook is counted once, on a worker's fiber outside the counter's own code, as the block hook
// counts a run: where the access is logged, when its warp instruction is counted (instruction(),
// global_by_lanes, or merged into a vector load); where it is not (a thread's own array, __constant__
// memory), in the hook.
inline std::vector<uint32_t> g_site_key;
inline std::vector<int32_t> g_site_index;   // -1: an empty slot
inline unsigned g_nsites = 0;
// The same sites as bits, by distance from g_code_lo: most calls are of no such site, and this says
// so with one load, no search.
inline std::vector<uint64_t> g_site_bits;

inline int site_index(uint32_t site) {
  const size_t mask = g_site_key.size() - 1;
  for (size_t j = (site * 2654435761u) & mask;; j = (j + 1) & mask) {
    if (g_site_index[j] < 0) return -1;
    if (g_site_key[j] == site) return g_site_index[j];
  }
}
// Whether `site` may be one of them (g_nsites > 0).
__attribute__((always_inline)) inline bool may_count(uint32_t site) {
  const uint32_t j = site - g_code_lo;
  return j >= g_code_span || (g_site_bits[j >> 6] >> (j & 63) & 1);
}
// `n` more calls of the hook at `site`, where it is one that counts a block's runs.
inline void count_site(State& S, uint32_t site, unsigned long long n) {
  if (g_nsites == 0 || !may_count(site)) return;
  const int i = site_index(site);
  if (i >= 0) S.site_calls[size_t(i)] += n;
}
// Fill the memo entry of `site`.
__attribute__((always_inline)) inline void remember(State& S, uint32_t site, uint8_t flags, uintptr_t lo,
                                                    uintptr_t span, uint64_t word) {
  S.memo[site % SITE_MEMO] = {site, flags, lo, span, word};
}

// One warp's accesses, kept for a picture (labkit.measure.warp_trace): the warp g_trace_warp of the
// block g_trace_block, each lane's part of each of its warp instructions, as matched for counting
// (at most MAX_TRACED).  Only the worker running that block writes them.
struct Traced {
  uint64_t offset;     // bytes from the start of its array (global: the allocation; shared: the array)
  uint32_t instr;      // which warp instruction of the warp, in the order they were counted
  uint16_t size;       // bytes (a merged vector load's width)
  uint8_t lane, kind, region;
};
constexpr size_t MAX_TRACED = 1 << 16;
inline bool g_trace_on = false;
inline unsigned g_trace_block[3] = {0, 0, 0}, g_trace_warp = 0, g_trace_instr = 0;
inline std::vector<Traced>& traced() { static std::vector<Traced> t; return t; }

// Which worker is running: found from the stack the hook runs on (each worker's fibers have stacks
// of their own), not from thread-local variables, which cost a call into the dynamic loader from a
// library loaded at run time -- at every access and every basic block.  Code on no fiber's stack is
// the scheduler's, and so is the counter's own code (Busy: its worker's stacks are then left out).
// Which of its threads: the one the scheduler last switched to (count_enter).
__attribute__((always_inline)) inline uintptr_t stack_pointer() {
#if defined(__x86_64__)
  uintptr_t sp;   // the stack pointer as it is: a frame pointer would cost the hooks a frame
  asm("mov %%rsp, %0" : "=r"(sp));
  return sp;
#else
  return reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
#endif
}
// The index of the running worker's state (g_states), or g_nstates where none runs a kernel thread;
// `stacks`: its stacks.
__attribute__((always_inline)) inline unsigned running_index(Stacks& stacks) {
  const uintptr_t sp = stack_pointer();
  unsigned i = 0;
  for (const unsigned n = g_nstates; i < n; ++i) {
    stacks = {g_stacks[i].lo, __atomic_load_n(&g_stacks[i].span, __ATOMIC_RELAXED)};
    if (sp - stacks.lo < stacks.span) break;
  }
  return i;
}
__attribute__((always_inline)) inline State* here() {
  Stacks stacks;
  const unsigned i = running_index(stacks);
  return i < g_nstates ? g_states[i] : nullptr;
}

// The counter's own code: its accesses are not the kernel's (where the runtime is compiled into the
// instrumented kernel itself, they reach the hooks too).  Its worker's stacks are left out of
// g_stacks meanwhile, so that the hooks find no worker: one test fewer in each hook.
struct Busy {
  Stacks& stacks;
  const uintptr_t span;
  explicit Busy(State& s) : stacks(g_stacks[s.index]), span(stacks.span) {
    __atomic_store_n(&stacks.span, uintptr_t(0), __ATOMIC_RELAXED);
  }
  ~Busy() { __atomic_store_n(&stacks.span, span, __ATOMIC_RELAXED); }
};

// The workers' states stay from launch to launch (their logs' buffers with them: a launch's threads
// would otherwise grow them again from nothing); begin() zeroes what a launch counts.
inline void begin() {
  // Every state's counts, also those of a worker that this launch does not use (fewer blocks than
  // workers): the totals sum them all.
  for (unsigned i = 0; i < g_nstates; ++i) {
    State& S = *g_states[i];
    std::fill(S.m, S.m + NMETRICS, 0ull);
    std::fill(S.hits.begin(), S.hits.end(), 0ull);
    S.site_calls.clear();
    S.W = nullptr;
    S.stacks = S.stacks_end = 0;
    g_stacks[i] = {0, 0};
  }
  regions().clear();
  g_regions = nullptr;
  g_nregions = 0;
  g_site_key.clear(), g_site_index.clear(), g_nsites = 0;
  g_constants.clear();
}

inline void attach(Worker* W) {   // before the launch's workers start: no other thread reads g_states
  State* S = nullptr;
  unsigned at = 0;
  for (; at < g_nstates && S == nullptr; ++at)
    if (g_states[at]->W == nullptr || g_states[at]->W == W) S = g_states[at];
  if (S == nullptr) {
    if (g_nstates == MAX_WORKERS) return;   // more workers than any machine has cores: not counted
    S = g_states[g_nstates++] = new State;
    at = g_nstates;
  }
  S->W = W;
  S->index = at - 1;
  S->stacks = reinterpret_cast<uintptr_t>(W->stacks);
  S->stacks_end = S->stacks + W->stacks_bytes;
  g_stacks[at - 1] = {S->stacks, S->stacks_end - S->stacks};
  S->dyn = reinterpret_cast<uintptr_t>(W->dyn);
  S->dyn_bytes = W->L->cfg.shared_mem;
  if (S->log.size() < W->L->nthreads) S->log.resize(W->L->nthreads);
  for (auto& l : S->log) l.clear();
  S->loads32 = false;
  for (SiteMemo& e : S->memo) e = {0, 0, 0, 0, 0};   // a span of 0: no access hits
  S->site_calls.assign(g_nsites, 0);
  S->hits.assign((g_text_hi - g_text_lo) / 4 + 1, 0);
  S->hit = S->hits.data(), S->nhits = S->hits.size();
}

// An access in none of the launch's arrays, nor a stack, nor __constant__ memory: the executor's own
// data.  Such a site most often reads one address (a thread's blockIdx), or one field of each
// thread's record (its threadIdx: the worker's fibers): the next access there is dropped at once.
__attribute__((noinline)) inline void elsewhere(State* S, uintptr_t a, size_t size, uint32_t at) {
  const uintptr_t fibers = reinterpret_cast<uintptr_t>(S->W->fibers.data());
  const uintptr_t fibers_span = S->W->fibers.size() * sizeof(Fiber);
  if (a - fibers < fibers_span)
    remember(*S, at, DROPPED_SPAN, fibers, fibers_span, 0);
  else
    remember(*S, at, DROPPED, a, size, 0);
  count_site(*S, at, 1);
}

// The search for an access's array (on_access): __constant__ variables, the dynamic and __shared__
// arrays, the launch's arrays in turn.  Fills the site's memo with what it finds.  Inline: where a
// kernel has more access instructions than the memo holds (fully unrolled loops), it runs at most
// accesses.
__attribute__((always_inline)) inline void classify(State* S, uintptr_t a, size_t size, bool write, uint32_t at) {
  if (size == 0) {
    count_site(*S, at, 1);
    return;
  }
  for (const Span& c : g_constants)   // a __constant__ variable (a filter's weights): read again
    if (a - c.lo < c.span) {
      remember(*S, at, DROPPED_SPAN, c.lo, c.span, 0);
      count_site(*S, at, 1);
      return;
    }
  ThreadLog& log = *S->running;
  const Kind shared_kind = write ? SHARED_ST : SHARED_LD;
  const uint8_t shared_flags = write ? 0 : SHARED_LOAD;
  if (a - S->dyn < S->dyn_bytes) {
    S->loads32 = S->loads32 || (!write && size == 4);
    const uint64_t word = access_word(0, 0, SHARED_DYN, shared_kind);
    remember(*S, at, shared_flags, S->dyn, S->dyn_bytes, word);
    log.push(a, word | access_word(at, size, 0, Kind(0)));
    return;
  }
  Worker* W = S->W;
  const size_t nshared = W->shared_regions.size();
  for (size_t i = 0; i < nshared; ++i) {
    const uintptr_t lo = reinterpret_cast<uintptr_t>(W->shared_regions[i].first);
    if (a - lo < W->shared_regions[i].second) {
      S->loads32 = S->loads32 || (!write && size == 4);
      const unsigned region = i + 1 < SHARED_UNNAMED ? unsigned(i + 1) : SHARED_UNNAMED;
      const uint64_t word = access_word(0, 0, region, shared_kind);
      remember(*S, at, shared_flags, lo, W->shared_regions[i].second, word);
      log.push(a, word | access_word(at, size, 0, Kind(0)));
      return;
    }
  }
  const unsigned n = g_nregions;
  for (unsigned r = 0; r < n; ++r)
    if (a - g_spans[r].lo < g_spans[r].span) {
      const uint64_t word = access_word(0, 0, r, write ? GLOBAL_ST : GLOBAL_LD);
      if (g_region_alone[r]) remember(*S, at, 0, g_spans[r].lo, g_spans[r].span, word);
      log.push(a, word | access_word(at, size, 0, Kind(0)));
      return;
    }
  elsewhere(S, a, size, at);
}

// The hook's less common paths, out of line and each called last (a tail call): its common one then
// saves no register and makes no frame.
__attribute__((noinline)) inline void push_grown(ThreadLog& log, uintptr_t a, uint64_t word) { log.push(a, word); }
__attribute__((noinline)) inline void count_site_call(State* S, uint32_t at) { count_site(*S, at, 1); }
__attribute__((noinline)) inline void classify_call(State* S, uintptr_t a, size_t size, bool write, uint32_t at) {
  classify(S, a, size, write, at);
}

// Inlined into each of the access hooks (labkit_interleave.h), which are not instrumented: nothing
// here reaches a hook, so it needs no Busy of its own (a log's rare growth calls only the allocator).
__attribute__((always_inline)) inline void on_access(void* p, size_t size, bool write, void* site) {
  Stacks stacks;
  const unsigned i = running_index(stacks);
  if (i >= g_nstates) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uint32_t at = uint32_t(reinterpret_cast<uintptr_t>(site));
  State* S = g_states[i];
  if (a - stacks.lo < stacks.span) {   // a thread's own array (registers on a GPU)
    if (g_nsites && may_count(at)) count_site_call(S, at);
    return;
  }
  const SiteMemo& e = S->memo[at % SITE_MEMO];
  if (__builtin_expect(e.site == at && a - e.lo < e.span && size != 0, 1)) {   // the array this site read last
    if (__builtin_expect(e.flags <= SHARED_LOAD, 1)) {
      if (e.flags == SHARED_LOAD && size == 4) S->loads32 = true;
      ThreadLog& log = *S->running;
      const uint64_t word = e.word | access_word(at, size, 0, Kind(0));
      if (__builtin_expect(log.full(), 0)) {
        push_grown(log, a, word);
        return;
      }
      log.push_into_room(a, word);
      return;
    }
    if (e.flags == DROPPED_SPAN ? a + size - e.lo <= e.span : a == e.lo && size <= e.span) {
      if (g_nsites && may_count(at)) count_site_call(S, at);   // in no array, as before
      return;
    }
  }
  classify_call(S, a, size, write, at);
}

// Other workers mark too: a byte already set is only read, so that the cache line it lies on is not
// written back and forth between cores for sectors that every block reads (a filter's weights).
inline void mark(std::vector<unsigned char>& bits, size_t i) {
  if (i < bits.size() && !__atomic_load_n(&bits[i], __ATOMIC_RELAXED)) __atomic_store_n(&bits[i], 1, __ATOMIC_RELAXED);
}

// The distinct values of one warp instruction's sectors or words, in a buffer on the stack while
// they fit (a warp touches few), in `spill` beyond.  Lanes mostly repeat the last value or go up
// through memory: a repeat is dropped as it comes, and a rising sequence needs no sort.
class Distinct {
 public:
  explicit Distinct(std::vector<unsigned long long>& spill) : spill_(spill) {}
  __attribute__((always_inline)) void add(unsigned long long v) {
    if (n_ && v == last_) return;
    sorted_ = sorted_ && (n_ == 0 || v > last_);
    last_ = v;
    if (__builtin_expect(n_ < N, 1)) {
      buf_[n_++] = v;
      return;
    }
    if (n_ == N) spill_.assign(buf_, buf_ + N);
    spill_.push_back(v);
    ++n_;
  }
  bool empty() const { return n_ == 0; }
  // The distinct values, ascending: where they start, how many.
  std::pair<const unsigned long long*, size_t> values() {
    unsigned long long* p = n_ <= N ? buf_ : spill_.data();
    if (!sorted_) {
      std::sort(p, p + n_);
      n_ = size_t(std::unique(p, p + n_) - p);
      sorted_ = true;
    }
    return {p, n_};
  }

 private:
  static constexpr size_t N = 128;
  std::vector<unsigned long long>& spill_;
  unsigned long long buf_[N], last_ = 0;
  size_t n_ = 0;
  bool sorted_ = true;
};

// The distinct words of one phase of a shared access, by bank: each bank's words in a list through
// fixed arrays, so that a word already there (a broadcast) is found among its bank's few, with no
// sort.  A key is a word, or, where every lane's access is aligned to its width (8 or 16 bytes), the
// aligned 2 or 4 words it covers: these lie in as many neighbouring banks, which then hold the same
// count, kept once for the group (1/4 of the work for a float4).  False where a phase has more
// distinct keys than it holds (wide struct copies).
class Banks {
 public:
  Banks() { std::memset(head_, 0xff, sizeof head_); }
  __attribute__((always_inline)) bool add(unsigned long long key, unsigned bank) {
    for (unsigned i = head_[bank]; i != NONE; i = next_[i])
      if (key_[i] == key) return true;
    if (n_ == CAP) return false;
    key_[n_] = key, next_[n_] = head_[bank], head_[bank] = uint8_t(n_++);
    shared_bank_ |= count_[bank]++;
    return true;
  }
  unsigned keys() const { return n_; }
  unsigned most() const {   // the busiest bank's distinct keys: 1 unless two keys share a bank
    if (!shared_bank_) return n_ ? 1 : 0;
    unsigned m = 0;
    for (unsigned b = 0; b < 32; ++b) m = std::max(m, unsigned(count_[b]));
    return m;
  }

 private:
  static constexpr unsigned CAP = 160, NONE = 0xff;   // 32 lanes' 32-bit words, or 16 lanes' 16 bytes, unaligned
  unsigned long long key_[CAP];
  uint8_t next_[CAP], head_[32], count_[32] = {};
  unsigned n_ = 0, shared_bank_ = 0;   // nonzero once a bank holds two keys
};

// One warp instruction: the accesses of its n lanes, lane i being lane_of(i) and its access at(i);
// `width` bytes from each lane's address (its own access's size, or the vector load it is the first
// part of: merged).
inline uintptr_t shared_offset(const State& S, const Access& x);
template <class LaneOf, class At>
inline void instruction(State& S, size_t n, LaneOf lane_of, At at, unsigned width) {
  const Kind kind = at(0).kind;
  count_site(S, at(0).site, n);
  if (__builtin_expect(S.tracing, 0)) {
    for (size_t i = 0; i < n && traced().size() < MAX_TRACED; ++i) {
      const Access& x = at(i);
      const bool global = kind == GLOBAL_LD || kind == GLOBAL_ST;
      const uint64_t off = global ? x.addr - g_regions[x.region].origin : shared_offset(S, x);
      traced().push_back({off, g_trace_instr, uint16_t(global ? x.size : width),
                          uint8_t(lane_of(i)), uint8_t(kind), x.region});
    }
    ++g_trace_instr;
  }
  if (kind == GLOBAL_LD || kind == GLOBAL_ST) {
    Distinct ids(S.scratch);   // (region << 48) | sector
    unsigned region = ~0u;
    uintptr_t origin = 0;
    for (size_t i = 0; i < n; ++i) {
      const Access& x = at(i);
      if (x.region != region) region = x.region, origin = g_regions[region].origin;
      const unsigned long long tag = static_cast<unsigned long long>(region) << 48;
      const size_t s0 = (x.addr - origin) >> 5, s1 = (x.addr + x.size - 1 - origin) >> 5;
      ids.add(tag | s0);
      for (size_t s = s0 + 1; s <= s1; ++s) ids.add(tag | s);
    }
    const auto [id, sectors] = ids.values();
    for (size_t i = 0; i < sectors; ++i) {
      Region& r = g_regions[id[i] >> 48];
      mark(kind == GLOBAL_LD ? r.read : r.written, (id[i] & ((1ull << 48) - 1)) - r.first_sector());
    }
    S.m[kind == GLOBAL_LD ? REQ_LD : REQ_ST] += 1;
    S.m[kind == GLOBAL_LD ? SEC_LD : SEC_ST] += sectors;
    return;
  }
  // Shared memory: 32-bit accesses in one phase of 32 lanes, 64- and 128-bit ones in two of 16
  // (Nsight Compute's counts on an H100: a 128-bit load that two half-warps each read as one
  // broadcast costs 2 wavefronts, which phases of 8 lanes would make 4).
  const unsigned phase_shift = width > 4 ? 4 : 5, phases = 32u >> phase_shift;   // lanes per phase: 16 or 32
  unsigned long long wavefronts = 0, ideal = 0;
  // Keys: aligned units of `width` bytes where each lane's access is one (4, 8, 16), else words.
  unsigned unit_shift = width == 16 ? 4 : width == 8 ? 3 : width == 4 ? 2 : 0;
  for (size_t i = 0; unit_shift && i < n; ++i)
    if (at(i).addr & (width - 1)) unit_shift = 0;
  const unsigned per_unit = unit_shift ? width / 4 : 1, groups = 32 / per_unit;   // words per key; bank groups
  Banks banks[2];   // one word read by many lanes: a broadcast
  bool held = true;
  uintptr_t last[2] = {0, 0};   // each phase's last address: a lane with the same adds no word
  for (size_t i = 0; i < n && held; ++i) {
    const unsigned phase = lane_of(i) >> phase_shift;
    const Access& x = at(i);
    if (x.addr == last[phase]) continue;
    last[phase] = x.addr;
    if (unit_shift) {
      const uintptr_t u = x.addr >> unit_shift;
      held = banks[phase].add(u, unsigned(u & (groups - 1)));
      continue;
    }
    for (uintptr_t w = x.addr >> 2; held && w <= (x.addr + width - 1) >> 2; ++w) held = banks[phase].add(w, unsigned(w & 31));
  }
  for (unsigned phase = 0; phase < phases; ++phase) {
    if (held) {
      wavefronts += banks[phase].most();
      ideal += (banks[phase].keys() * per_unit + 31) / 32;   // a wavefront moves one word of each bank: 128 bytes
      continue;
    }
    Distinct ids(S.scratch);   // more words than Banks holds: sorted, then counted bank by bank
    for (size_t i = 0; i < n; ++i) {
      if (lane_of(i) >> phase_shift != phase) continue;
      const Access& x = at(i);
      for (uintptr_t w = x.addr >> 2; w <= (x.addr + width - 1) >> 2; ++w) ids.add(w);
    }
    const auto [word, words] = ids.values();
    unsigned per_bank[32] = {};
    unsigned most = 0;
    for (size_t k = 0; k < words; ++k) most = std::max(most, ++per_bank[word[k] & 31]);
    wavefronts += most;
    ideal += (words + 31) / 32;
  }
  S.m[kind == SHARED_LD ? WF_LD : WF_ST] += wavefronts;
  S.m[kind == SHARED_LD ? BC_LD : BC_ST] += wavefronts - ideal;
}

inline bool same_sites(const ThreadLog& a, const ThreadLog& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].site != b[i].site) return false;
  return true;
}


// Start numbering the sites of a warp (site_ordinal): every earlier entry of either table is
// forgotten (a new stamp).
inline void open_sites(State& S) {
  if (++S.warp_stamp == 0) {                 // stamps wrapped: forget every entry
    std::fill(S.stamp.begin(), S.stamp.end(), 0u);
    std::fill(S.direct_stamp.begin(), S.direct_stamp.end(), 0u);
    S.warp_stamp = 1;
  }
  if (S.direct_stamp.size() < g_code_span) S.direct_stamp.resize(g_code_span, 0), S.direct_ordinal.resize(g_code_span);
}

inline unsigned hashed_ordinal(State& S, uint32_t site, unsigned& sites);
// The ordinal of `site` among the sites of the warp being matched (a new one: the next free).
__attribute__((always_inline)) inline unsigned site_ordinal(State& S, uint32_t site, unsigned& sites) {
  const uint32_t j = site - g_code_lo;
  if (__builtin_expect(j >= g_code_span, 0)) return hashed_ordinal(S, site, sites);
  if (S.direct_stamp[j] != S.warp_stamp) S.direct_stamp[j] = S.warp_stamp, S.direct_ordinal[j] = sites++;
  return S.direct_ordinal[j];
}

__attribute__((noinline)) inline unsigned hashed_ordinal(State& S, uint32_t site, unsigned& sites) {
  if (2 * (sites + 1) > S.site_of.size()) {       // keep the table at most half full
    std::vector<uint32_t> old_site(std::move(S.site_of)), old_stamp(std::move(S.stamp));
    std::vector<unsigned> old_ordinal(std::move(S.ordinal_of));
    const size_t n = std::max<size_t>(1024, 2 * old_site.size());
    S.site_of.assign(n, 0);
    S.stamp.assign(n, 0);
    S.ordinal_of.assign(n, 0);
    for (size_t i = 0; i < old_site.size(); ++i)
      if (old_stamp[i] == S.warp_stamp) {
        size_t j = (old_site[i] * 2654435761u) & (n - 1);
        while (S.stamp[j] == S.warp_stamp) j = (j + 1) & (n - 1);
        S.site_of[j] = old_site[i], S.stamp[j] = S.warp_stamp, S.ordinal_of[j] = old_ordinal[i];
      }
  }
  const size_t mask = S.site_of.size() - 1;
  size_t j = (site * 2654435761u) & mask;
  while (S.stamp[j] == S.warp_stamp && S.site_of[j] != site) j = (j + 1) & mask;
  if (S.stamp[j] != S.warp_stamp) S.site_of[j] = site, S.stamp[j] = S.warp_stamp, S.ordinal_of[j] = sites++;
  return S.ordinal_of[j];
}

// Where a shared access lies in its array: nvcc aligns a shared array to 16 bytes (the dynamic
// buffer more), the executor's storage is aligned as the host's types are.
inline uintptr_t shared_offset(const State& S, const Access& x) {
  if (x.region == SHARED_DYN) return x.addr - reinterpret_cast<uintptr_t>(S.W->dyn);
  if (x.region == SHARED_UNNAMED || x.region > S.W->shared_regions.size()) return x.addr;
  return x.addr - reinterpret_cast<uintptr_t>(S.W->shared_regions[x.region - 1].first);
}

// nvcc merges a thread's 32-bit shared loads of neighbouring words into one 64- or 128-bit load
// (LDS.64, LDS.128) where it can prove them adjacent and aligned: a row a thread reads into
// registers in an unrolled loop (xr[j] = xs[j], regN[j] = Bs[k * BN + j]).  g++ keeps them apart, so
// the counting build sees them one by one; they are merged here, before the lanes are matched, as
// the hardware then serves them.  nvcc decides per instruction, for every execution alike, so this
// does too, per site over the warp: a site's load starts a vector of 2 (4) words where, in every
// execution by every lane, its word is 8- (16-) byte aligned in its array and the lane's next 1 (3)
// loads of the following words come later in the same stretch (no shared store between, within
// LOOKAHEAD accesses), each from one other site -- never its own (that is the next iteration of a
// loop nvcc does not unroll either).
constexpr size_t LOOKAHEAD = 64;
constexpr unsigned MAX_PARTS = 4;

// Where in log[i + 1 ..] the loads of the words after log[i]'s are (up to parts - 1 of them, none
// already `taken` into another vector); how many were found.
inline unsigned next_words(const ThreadLog& log, size_t i, unsigned parts, size_t* at,
                           const unsigned char* taken = nullptr) {
  const Access& x = log[i];
  unsigned got = 1;
  for (size_t j = i + 1; j < log.size() && j <= i + LOOKAHEAD && got < parts; ++j) {
    const Access& y = log[j];
    if (y.kind == SHARED_ST) break;     // a store between: nvcc moves no load across it
    if (y.kind == SHARED_LD && y.size == 4 && y.site != x.site && y.addr == x.addr + 4 * got &&
        !(taken && taken[j]))
      at[got++] = j;
  }
  return got;
}

inline void merge_vector_loads(State& S, unsigned first, unsigned last) {
  open_sites(S);
  unsigned sites = 0;
  auto& ok = S.vector_ok;              // per site ordinal: bit 0, a 2-word vector fits; bit 1, a 4-word one
  auto& partner = S.vector_partner;    // per site ordinal: the sites of its words 2..4 (0: none seen yet)
  size_t at[MAX_PARTS];
  // Pass 1: which sites start a vector, over every execution by every lane.
  for (unsigned t = first; t < last; ++t) {
    const ThreadLog& log = S.log[t];
    for (size_t i = 0; i < log.size(); ++i) {
      const Access& x = log[i];
      if (x.kind != SHARED_LD || x.size != 4) continue;
      const unsigned seen = sites, o = site_ordinal(S, x.site, sites);
      if (sites > seen) {
        if (ok.size() < sites) ok.resize(sites), partner.resize(sites);
        ok[o] = 3, partner[o] = {};
      }
      if (ok[o] == 0) continue;
      const uintptr_t offset = shared_offset(S, x);
      const unsigned got = next_words(log, i, offset % 16 == 0 ? 4 : 2, at);
      for (unsigned bit = 0, parts = 2; bit < 2; ++bit, parts *= 2) {
        bool fits = (ok[o] >> bit & 1) && offset % (4 * parts) == 0 && got >= parts;
        for (unsigned g = 1; fits && g < parts; ++g) {
          uint32_t& p = partner[o][g - 1];
          if (p == 0) p = log[at[g]].site;
          fits = p == log[at[g]].site;
        }
        if (!fits) ok[o] &= ~(1u << bit);
      }
    }
  }
  if (std::find_if(ok.begin(), ok.begin() + sites, [](unsigned char v) { return v != 0; }) == ok.begin() + sites)
    return;
  // Pass 2, lane by lane: each vector's first load takes its width; the others leave the log.
  for (unsigned t = first; t < last; ++t) {
    ThreadLog& log = S.log[t];
    S.taken.assign(log.size(), 0);
    size_t out = 0;
    for (size_t i = 0; i < log.size(); ++i) {
      if (S.taken[i]) continue;
      Access x = log[i];
      if (x.kind == SHARED_LD && x.size == 4) {
        const unsigned o = site_ordinal(S, x.site, sites);
        const unsigned parts = ok[o] & 2 ? 4 : ok[o] & 1 ? 2 : 1;
        if (parts > 1 && next_words(log, i, parts, at, S.taken.data()) >= parts) {
          for (unsigned g = 1; g < parts; ++g) S.taken[at[g]] = 1, count_site(S, log[at[g]].site, 1);
          x.size = uint16_t(4 * parts);
        }
      }
      log[out++] = x;
    }
    log.resize(out);
  }
}

// The lanes of one warp: where every lane that made accesses made the same sequence of sites (no
// divergence), the k-th access of each is one instruction; otherwise the k-th execution of each site
// (a bucket per site and execution, filled by a counting sort: no comparison sort, no allocation).
// The global accesses of a warp whose lanes made the same sequence of sites, instruction by
// instruction, its lanes in lane order, with what the instruction has counted so far in registers:
// where each lane's sectors start at or after the last sector counted so far (lanes going up
// through memory, or repeating), the sectors it adds are counted as they come, as instruction()
// would count them.  Elsewhere the instruction is marked `unsorted`, for instruction() to count
// (its sectors marked here are marked again: no matter); so is one whose lanes differ from its
// first lane in array, size or kind.  A lane's access that is its warp's first lane's, byte for
// byte (an address every lane reads: a weight, a bias), adds nothing, and is passed over at the
// cost of a comparison.  Shared accesses are left to instruction() (marked unsorted).  False, and
// nothing counted, where a lane's sites differ from the first lane's (a divergent warp; what it
// marked is marked again).
inline bool global_by_lanes(State& S, const Access* const* log, const unsigned* lane, unsigned first,
                            unsigned lanes, size_t n) {
  for (unsigned i = 1; i < lanes; ++i)
    if (S.log[first + lane[i]].size() != n) return false;
  auto& unsorted = S.by_lanes;
  if (unsorted.size() < n) unsorted.resize(n);
  const auto word = [](const Access& x) {
    uint64_t w;
    std::memcpy(&w, reinterpret_cast<const char*>(&x) + 8, 8);
    return w;
  };
  unsigned long long requests[2] = {0, 0}, sectors_of[2] = {0, 0};   // loads, stores
  for (size_t k = 0; k < n; ++k) {
    const Access& l = log[0][k];
    const uint64_t lw = word(l);
    if (l.kind == SHARED_LD || l.kind == SHARED_ST) {
      for (unsigned i = 1; i < lanes; ++i)
        if (log[i][k].site != l.site) return false;
      unsorted[k] = true;
      continue;
    }
    Region& r = g_regions[l.region];
    std::vector<unsigned char>& bits = l.kind == GLOBAL_LD ? r.read : r.written;
    const size_t first_sector = r.first_sector();
    // A lane's sectors: (addr - origin) >> 5 to (addr - last) >> 5, its size being the first lane's.
    const uintptr_t origin = r.origin, last = origin - (l.size - 1);
    unsigned long long next = (l.addr - last) >> 5;   // one past the highest sector counted so far
    unsigned long long sectors = 0;
    for (unsigned long long s = (l.addr - origin) >> 5; s <= next; ++s) mark(bits, s - first_sector), ++sectors;
    ++next;
    bool sorted = true;
    for (unsigned i = 1; i < lanes; ++i) {
      const Access& a = log[i][k];
      if (__builtin_expect(word(a) != lw, 0)) {   // site, size, array and kind: the first lane's?
        if (a.site != l.site) return false;
        sorted = false;
        continue;
      }
      if (a.addr == l.addr || !sorted) continue;
      const unsigned long long s0 = (a.addr - origin) >> 5, s1 = (a.addr - last) >> 5;
      if (s0 + 1 < next) {               // it starts below the last sector counted
        sorted = false;
        continue;
      }
      if (s1 < next) continue;           // within the last sector counted
      for (unsigned long long s = std::max(s0, next); s <= s1; ++s) mark(bits, s - first_sector);
      sectors += s1 + 1 - std::max(s0, next);
      next = s1 + 1;
    }
    unsorted[k] = !sorted;
    if (sorted) {
      const unsigned st = l.kind == GLOBAL_ST;
      ++requests[st], sectors_of[st] += sectors;
    }
  }
  S.m[REQ_LD] += requests[0], S.m[SEC_LD] += sectors_of[0];
  S.m[REQ_ST] += requests[1], S.m[SEC_ST] += sectors_of[1];
  if (g_nsites)
    for (size_t k = 0; k < n; ++k)
      if (!unsorted[k]) count_site(S, log[0][k].site, lanes);
  return true;
}

inline void flush_warp(State& S, unsigned first, unsigned last) {
  S.tracing = g_trace_on && first / 32 == g_trace_warp && S.W->block_idx.x == g_trace_block[0] &&
              S.W->block_idx.y == g_trace_block[1] && S.W->block_idx.z == g_trace_block[2];
  if (S.loads32) merge_vector_loads(S, first, last);   // nothing to merge without them
  auto& group = S.group;
  // The lanes that made accesses; where each made the same sequence of sites (no divergence), the
  // k-th access of each is one instruction.  global_by_lanes checks that as it counts.
  unsigned lanes = 0, lane[32];
  const Access* log[32];
  for (unsigned t = first; t < last; ++t)
    if (!S.log[t].empty()) lane[lanes] = t - first, log[lanes++] = S.log[t].data();
  if (lanes == 0) return;
  const size_t n = S.log[first + lane[0]].size();
  bool same = !S.tracing && global_by_lanes(S, log, lane, first, lanes, n);
  if (S.tracing) {
    same = true;
    for (unsigned i = 1; i < lanes && same; ++i) same = same_sites(S.log[first + lane[i]], S.log[first + lane[0]]);
  }
  if (same) {
    for (size_t k = 0; k < n; ++k)
      if (S.tracing || S.by_lanes[k])
        instruction(S, lanes, [&](size_t i) { return lane[i]; }, [&](size_t i) -> const Access& { return log[i][k]; },
                    log[0][k].size);
    return;
  }
  open_sites(S);
  unsigned sites = 0;
  size_t total = 0;
  for (unsigned t = first; t < last; ++t) total += S.log[t].size();
  S.site_runs.resize(2 * total);
  // Pass 1: each access's site ordinal and which execution of that site by its lane it is (pairs,
  // in `site_runs`); the most executions of each site by one lane.
  // A lane whose sites are those of an earlier lane (most lanes, in a warp where a few skip an
  // access) has its pairs: they are copied from the first such lane, one of up to REPS kept.
  constexpr unsigned REPS = 4;
  unsigned* const pairs = S.site_runs.data();
  unsigned* pair = pairs;
  struct Rep { size_t at; unsigned t; } reps[REPS];
  unsigned nreps = 0;
  constexpr uint8_t EMPTY = 0xfe, ALONE = 0xff;   // a lane without accesses; a lane like no kept one
  uint8_t cls[32];                                // each lane's: the kept lane it is like, or those
  bool classed = true;                            // every lane with accesses is like a kept lane
  for (unsigned t = first; t < last; ++t) {
    const ThreadLog& log = S.log[t];
    if (log.empty()) {
      cls[t - first] = EMPTY;
      continue;
    }
    unsigned r = 0;
    while (r < nreps && !same_sites(log, S.log[reps[r].t])) ++r;
    if (r < nreps) {
      cls[t - first] = uint8_t(r);
      std::memcpy(pair, pairs + reps[r].at, 2 * log.size() * sizeof(unsigned));
      pair += 2 * log.size();
      continue;
    }
    if (nreps < REPS) {
      cls[t - first] = uint8_t(nreps);
      reps[nreps++] = {size_t(pair - pairs), t};
    } else {
      cls[t - first] = ALONE;
      classed = false;
    }
    const unsigned long long who = static_cast<unsigned long long>(S.warp_stamp) << 32 | t;
    for (const Access& x : log) {
      const unsigned seen = sites, o = site_ordinal(S, x.site, sites);
      if (sites != seen) {   // a new site: its entries start afresh
        if (S.most.size() < sites) S.most.resize(sites), S.runs.resize(sites), S.run_of.resize(sites);
        S.most[o] = 0, S.run_of[o] = ~0ull;
      }
      if (S.run_of[o] != who) S.run_of[o] = who, S.runs[o] = 0;
      *pair++ = o;
      *pair++ = S.runs[o]++;
      S.most[o] = std::max(S.most[o], S.runs[o]);
    }
  }
  // Buckets: site o's k-th execution is bucket first_bucket[o] + k.
  S.first_bucket.assign(sites + 1, 0);
  for (unsigned o = 0; o < sites; ++o) S.first_bucket[o + 1] = S.first_bucket[o] + S.most[o];
  const unsigned buckets = S.first_bucket[sites];
  if (classed) {
    // Where each bucket lies in each kept lane's sequence; then, bucket by bucket, the lanes like a
    // kept lane that has it, in lane order (as pass 2 below would place them, without placing).
    constexpr uint32_t NONE = ~0u;
    auto& pos = S.class_pos;
    pos.assign(size_t(nreps) * buckets, NONE);
    for (unsigned c = 0; c < nreps; ++c) {
      const unsigned* p = pairs + reps[c].at;
      uint32_t* row = pos.data() + size_t(c) * buckets;
      for (size_t k = 0, len = S.log[reps[c].t].size(); k < len; ++k) row[S.first_bucket[p[2 * k]] + p[2 * k + 1]] = uint32_t(k);
    }
    // Each lane's log and kept lane (REPS: none, its log empty), read once for the warp; each
    // bucket's place in the kept lanes' sequences, once per bucket.
    unsigned lane[32];
    const Access* acc[32];
    const Access* base[32];
    uint8_t like[32];
    const unsigned width = last - first;
    for (unsigned i = 0; i < width; ++i)
      like[i] = cls[i] == EMPTY ? uint8_t(REPS) : cls[i], base[i] = S.log[first + i].data();
    uint32_t at[REPS + 1];
    at[REPS] = NONE;
    for (unsigned b = 0; b < buckets; ++b) {
      for (unsigned c = 0; c < REPS; ++c) at[c] = c < nreps ? pos[size_t(c) * buckets + b] : NONE;
      unsigned n = 0;
      for (unsigned i = 0; i < width; ++i) {
        const uint32_t k = at[like[i]];
        if (k != NONE) lane[n] = i, acc[n++] = base[i] + k;
      }
      instruction(S, n, [&](size_t j) { return lane[j]; }, [&](size_t j) -> const Access& { return *acc[j]; },
                  acc[0]->size);
    }
    return;
  }
  S.start.assign(buckets + 1, 0);
  for (size_t i = 0; i < S.site_runs.size(); i += 2)
    ++S.start[S.first_bucket[S.site_runs[i]] + S.site_runs[i + 1] + 1];
  for (unsigned b = 0; b < buckets; ++b) S.start[b + 1] += S.start[b];
  // Pass 2: each access into its bucket, lanes in order.
  group.resize(S.site_runs.size() / 2);
  size_t i = 0;
  for (unsigned t = first; t < last; ++t)
    for (const Access& x : S.log[t]) {
      const unsigned b = S.first_bucket[S.site_runs[i]] + S.site_runs[i + 1];
      group[S.start[b]++] = {t - first, &x};
      i += 2;
    }
  // start[b] is now where bucket b + 1 begins.
  for (unsigned b = 0, from = 0; b < buckets; from = S.start[b], ++b)
    if (S.start[b] > from) {
      const std::pair<unsigned, const Access*>* acc = group.data() + from;
      instruction(S, S.start[b] - from, [acc](size_t i) { return acc[i].first; },
                  [acc](size_t i) -> const Access& { return *acc[i].second; }, acc[0].second->size);
    }
}

// A basic block starts (its address after the hook's call): one more run of it.
inline void on_block(uintptr_t pc) {
  State* S = here();
  if (S == nullptr) return;
  const size_t i = (pc - g_text_lo) / 4;
  if (i < S->nhits) ++S->hit[i];
}

}  // namespace count

LABKIT_RUNTIME_FN void count_attach(Worker* W) { count::attach(W); }

namespace count {
inline State* of(Worker* W) {
  for (unsigned i = 0; i < g_nstates; ++i)
    if (g_states[i]->W == W) return g_states[i];
  return nullptr;
}
}  // namespace count

// The workers' states (their logs, their tables) kept from launch to launch go with the workers.
LABKIT_RUNTIME_FN void count_release() {
  for (unsigned i = 0; i < count::g_nstates; ++i) delete count::g_states[i];
  count::g_nstates = 0;
}

// The scheduler switches to `thread`: the hooks append to its log from now on.
LABKIT_RUNTIME_FN void count_enter(Worker* W, unsigned thread) {
  count::State* S = count::of(W);
  if (S != nullptr && thread < S->log.size()) S->running = &S->log[thread];
}

// A warp whose lanes have all returned is complete: counted now, so that a block without barriers
// keeps one warp's log at a time, not the whole block's.
LABKIT_RUNTIME_FN void count_warp_done(Worker* W, unsigned warp) {
  count::State* S = count::of(W);
  if (S == nullptr) return;
  count::Busy busy(*S);
  const unsigned first = warp * 32, last = std::min<unsigned>(first + 32, W->L->nthreads);
  if (first >= last) return;
  count::flush_warp(*S, first, last);
  for (unsigned t = first; t < last; ++t) S->log[t].clear();
}

LABKIT_RUNTIME_FN void count_flush(Worker* W) {
  count::State* found = count::of(W);
  if (found == nullptr) return;
  count::State& S = *found;
  count::Busy busy(S);
  const unsigned n = std::min<unsigned>(W->L->nthreads, unsigned(S.log.size()));
  for (unsigned first = 0; first < n; first += 32) count::flush_warp(S, first, std::min(n, first + 32));
  for (auto& l : S.log) l.clear();
  S.loads32 = false;
}

}  // namespace labkit
#pragma GCC visibility pop

#define LABKIT_ON_ACCESS(p, n, write) ::labkit::count::on_access(p, n, write, __builtin_return_address(0))
#define LABKIT_ON_ATOMIC() ((void)0)   // atomics are neither loads nor stores in Nsight Compute's counts
#include "labkit_interleave.h"

extern "C" __attribute__((visibility("hidden"))) void __sanitizer_cov_trace_pc() {
  ::labkit::count::on_block(reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
}

// What the Python side calls (counting.py).
#define LABKIT_API extern "C" __attribute__((visibility("default")))
LABKIT_API uintptr_t labkit_count_base();
LABKIT_API void labkit_count_begin(uintptr_t text_lo, uintptr_t text_hi) {
  ::labkit::count::begin();
  // This library's executable segment, once: where its code, and so every site, lies.
  static const std::pair<uintptr_t, uintptr_t> code = [] {
    std::pair<uintptr_t, uintptr_t> found{0, 0};
    dl_iterate_phdr([](dl_phdr_info* info, size_t, void* out) {
      const uintptr_t me = reinterpret_cast<uintptr_t>(&labkit_count_base);
      for (int i = 0; i < info->dlpi_phnum; ++i) {
        const ElfW(Phdr)& ph = info->dlpi_phdr[i];
        const uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
        if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X) && me - lo < ph.p_memsz) {
          *static_cast<std::pair<uintptr_t, uintptr_t>*>(out) = {lo, lo + ph.p_memsz};
          return 1;
        }
      }
      return 0;
    }, &found);
    return found;
  }();
  // Sites keep an address's low 32 bits: the table serves where the segment does not cross 4 GiB.
  const bool fits = code.second > code.first && (code.first >> 32) == ((code.second - 1) >> 32) &&
                    code.second - code.first <= (1u << 26);
  ::labkit::count::g_code_lo = uint32_t(code.first);
  ::labkit::count::g_code_span = fits ? uint32_t(code.second - code.first) : 0;
  ::labkit::count::g_text_lo = text_lo;
  ::labkit::count::g_text_hi = text_hi;
}
// A __constant__ variable of the module, [lo, hi): in none of the launch's arrays.
LABKIT_API void labkit_count_constant(uintptr_t lo, uintptr_t hi) {
  if (hi > lo) ::labkit::count::g_constants.push_back({lo, hi - lo});
}
// False where the launch has more arrays than an access can name (MAX_REGIONS).
LABKIT_API bool labkit_count_region(uintptr_t lo, uintptr_t hi, uintptr_t origin) {
  if (::labkit::count::regions().size() == ::labkit::count::MAX_REGIONS) return false;
  const size_t r_new = ::labkit::count::regions().size();
  ::labkit::count::g_region_alone[r_new] = true;
  for (size_t r = 0; r < r_new; ++r) {
    const ::labkit::count::Region& o = ::labkit::count::regions()[r];
    if (lo < o.hi && o.lo < hi) ::labkit::count::g_region_alone[r] = ::labkit::count::g_region_alone[r_new] = false;
  }
  ::labkit::count::Region r{lo, hi, origin, {}, {}};
  const size_t sectors = hi > lo ? ((hi - 1 - origin) >> 5) - r.first_sector() + 1 : 0;
  r.read.assign(sectors, 0);
  r.written.assign(sectors, 0);
  ::labkit::count::g_spans[::labkit::count::regions().size()] = {lo, hi - lo};
  ::labkit::count::regions().push_back(std::move(r));
  ::labkit::count::g_regions = ::labkit::count::regions().data();
  ::labkit::count::g_nregions = unsigned(::labkit::count::regions().size());
  return true;
}
// The totals: the eight metrics (Metric's order), then the sectors read, written, and touched
// either way (DRAM; the launch's footprint).
LABKIT_API void labkit_count_totals(unsigned long long* out) {
  using namespace ::labkit::count;
  for (int i = 0; i < NMETRICS + 3; ++i) out[i] = 0;
  for (unsigned k = 0; k < g_nstates; ++k)
    for (int i = 0; i < NMETRICS; ++i) out[i] += g_states[k]->m[i];
  for (const Region& r : regions())
    for (size_t i = 0; i < r.read.size(); ++i) {
      out[NMETRICS] += r.read[i];
      out[NMETRICS + 1] += r.written[i];
      out[NMETRICS + 2] += r.read[i] | r.written[i];
    }
}
// The access hook calls to count (their sites: the addresses after the calls), for the launch that
// follows; their counts, summed over the workers, in that order (labkit_count_site_calls).
LABKIT_API void labkit_count_sites(const unsigned long long* sites, size_t n) {
  using namespace ::labkit::count;
  size_t size = 16;
  while (size < 4 * n) size *= 2;
  g_site_key.assign(size, 0);
  g_site_index.assign(size, -1);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t site = uint32_t(sites[i]);
    size_t j = (site * 2654435761u) & (size - 1);
    while (g_site_index[j] >= 0 && g_site_key[j] != site) j = (j + 1) & (size - 1);
    g_site_key[j] = site, g_site_index[j] = int32_t(i);
  }
  g_site_bits.assign((size_t(g_code_span) + 63) / 64, 0);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t k = uint32_t(sites[i]) - g_code_lo;
    if (k < g_code_span) g_site_bits[k >> 6] |= 1ull << (k & 63);
  }
  g_nsites = unsigned(n);
}
LABKIT_API void labkit_count_site_calls(unsigned long long* out) {
  using namespace ::labkit::count;
  std::fill(out, out + g_nsites, 0ull);
  for (unsigned k = 0; k < g_nstates; ++k)
    for (size_t i = 0; i < g_nsites && i < g_states[k]->site_calls.size(); ++i) out[i] += g_states[k]->site_calls[i];
}
// How often the basic block at each address from text_lo ran: `hits` has (text_hi - text_lo) / 4 + 1
// counters, the one of address a at (a - text_lo) / 4.
LABKIT_API void labkit_count_blocks(unsigned long long* hits) {
  using namespace ::labkit::count;
  const size_t n = (g_text_hi - g_text_lo) / 4 + 1;
  std::fill(hits, hits + n, 0ull);
  for (unsigned k = 0; k < g_nstates; ++k)
    for (size_t i = 0; i < n && i < g_states[k]->hits.size(); ++i) hits[i] += g_states[k]->hits[i];
}
// Keep the accesses of one warp (block bx, by, bz; warp: its threads 32 * warp ..) of the next launch.
LABKIT_API void labkit_count_trace(unsigned bx, unsigned by, unsigned bz, unsigned warp) {
  using namespace ::labkit::count;
  g_trace_on = true, g_trace_block[0] = bx, g_trace_block[1] = by, g_trace_block[2] = bz;
  g_trace_warp = warp, g_trace_instr = 0;
  traced().clear();
}
// The kept accesses, up to `max` of them, as 6 numbers each: instruction, lane, kind (Kind), region,
// offset, size; how many were kept.  Tracing stops.
LABKIT_API size_t labkit_count_traced(unsigned long long* out, size_t max) {
  using namespace ::labkit::count;
  const auto& t = traced();
  for (size_t i = 0; i < t.size() && i < max; ++i) {
    unsigned long long* o = out + 6 * i;
    o[0] = t[i].instr, o[1] = t[i].lane, o[2] = t[i].kind, o[3] = t[i].region, o[4] = t[i].offset, o[5] = t[i].size;
  }
  g_trace_on = false;
  return t.size();
}
// Where this library is loaded: a basic block's address minus this is its address in the file.
LABKIT_API uintptr_t labkit_count_base() {
  Dl_info info{};
  return dladdr(reinterpret_cast<void*>(&labkit_count_base), &info) ? reinterpret_cast<uintptr_t>(info.dli_fbase) : 0;
}
#undef LABKIT_API
