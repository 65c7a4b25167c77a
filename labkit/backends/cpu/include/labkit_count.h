// labkit_count.h -- the counting build (labkit.counters): the memory instructions of a launch as a
// GPU's warps issue them, and the basic blocks its threads run (for FP32 instruction counts).
//
// The kernel is compiled with ThreadSanitizer's instrumentation (a hook before every access,
// labkit_interleave.h) and GCC's -fsanitize-coverage=trace-pc (a hook at the start of every basic
// block), linked without either runtime: the hooks below are the executor's own.
//
// Why a log and a flush: the executor runs the threads of a block one after another, each until a
// barrier, so the 32 accesses that one warp instruction makes arrive far apart.  Each thread logs
// (instruction site, address, size); once every thread has reached the same point (a completed
// __syncthreads, the block's end: count_flush) the lanes of each warp are matched: the k-th
// execution of a site by each lane is one warp instruction, executed by the lanes that reached it.
// The site is the hook's return address, one per access instruction of the compiled kernel.
//
// What one warp instruction costs, as Nsight Compute counts it on an H100:
//   * global: one request; its sectors are the distinct 32-byte sectors its lanes touch, counted
//     from the start of the array's allocation (a GPU's allocations are 256-byte aligned);
//   * shared: 32 banks of 4 bytes.  Lanes reading one 32-bit word share it (a broadcast); distinct
//     words in one bank are served one per wavefront.  A 64-bit access is served in two phases of
//     16 lanes, a 128-bit one in four of 8 lanes (each phase moves at most 128 bytes); each active
//     phase costs as many wavefronts as its most loaded bank has distinct words.  Bank conflicts are
//     the wavefronts beyond one per active phase.
//   * DRAM: each distinct sector the launch reads is read once, each it writes is written once
//     (compulsory traffic: an L2 large enough for the launch's data, cold at its start).
// Accesses outside the launch's arrays, its __device__ variables and shared memory (a thread's own
// stack, __constant__ memory, the executor's bookkeeping) are not counted.
#pragma once

#include <dlfcn.h>

#include <unordered_map>

namespace labkit {
namespace count {

enum Kind : unsigned char { GLOBAL_LD, GLOBAL_ST, SHARED_LD, SHARED_ST };
// Keep in step with counting.py (TOTALS).
enum Metric { REQ_LD, SEC_LD, REQ_ST, SEC_ST, WF_LD, BC_LD, WF_ST, BC_ST, NMETRICS };

struct Access {
  uintptr_t site, addr;
  unsigned size, region;
  Kind kind;
};

// An array of the launch (an argument, a __device__ variable): [lo, hi), its sectors counted from
// `origin`; which of them the launch read and wrote.
struct Region {
  uintptr_t lo, hi, origin;
  std::vector<unsigned char> read, written;
  size_t first_sector() const { return (lo - origin) >> 5; }
};

// One per worker thread (the blocks it runs), merged when Python asks.
struct State {
  unsigned long long m[NMETRICS] = {};
  std::vector<std::vector<Access>> log;   // per thread of the running block, since the last flush
  std::vector<uintptr_t> pcs;             // basic blocks run: an open-addressing table by address
  std::vector<unsigned long long> hits;
  size_t used = 0;
  std::vector<unsigned long long> scratch;
  State() : pcs(1u << 12, 0), hits(1u << 12, 0) {}
};

inline std::vector<Region>& regions() { static std::vector<Region> r; return r; }
inline std::vector<State*>& states() { static std::vector<State*> s; return s; }
inline std::mutex& states_mu() { static std::mutex m; return m; }
inline unsigned& generation() { static unsigned g = 1; return g; }   // a new one per launch
inline thread_local State* tl_state = nullptr;
inline thread_local unsigned tl_gen = 0;
inline thread_local bool tl_busy = false;   // inside the counter's own code: its accesses are not the kernel's

// The counter's own code: its accesses are not the kernel's (where the runtime is compiled into the
// instrumented kernel itself, they reach the hooks too).
struct Busy {
  bool was = tl_busy;
  Busy() { tl_busy = true; }
  ~Busy() { tl_busy = was; }
};

inline State* state() {
  if (tl_state == nullptr || tl_gen != generation()) {   // workers are new threads at each launch
    std::lock_guard<std::mutex> g(states_mu());
    tl_state = new State;
    states().push_back(tl_state);
    tl_gen = generation();
  }
  return tl_state;
}

inline void begin() {
  std::lock_guard<std::mutex> g(states_mu());
  for (State* s : states()) delete s;
  states().clear();
  regions().clear();
  ++generation();
}

inline void on_access(void* p, size_t size, bool write, void* site) {
  if (!tl_in_fiber || tl_busy || size == 0) return;
  Busy busy;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  Worker* W = tl_worker;
  Kind kind;
  unsigned region = 0;
  const uintptr_t dyn = reinterpret_cast<uintptr_t>(W->dyn);
  bool shared = a >= dyn && a < dyn + W->L->cfg.shared_mem;
  for (size_t i = 0; !shared && i < W->shared_regions.size(); ++i) {
    const uintptr_t lo = reinterpret_cast<uintptr_t>(W->shared_regions[i].first);
    shared = a >= lo && a < lo + W->shared_regions[i].second;
  }
  if (shared) {
    kind = write ? SHARED_ST : SHARED_LD;
  } else {
    const auto& rs = regions();
    while (region < rs.size() && !(a >= rs[region].lo && a < rs[region].hi)) ++region;
    if (region == rs.size()) return;      // a stack, __constant__ memory, the executor's own data
    kind = write ? GLOBAL_ST : GLOBAL_LD;
  }
  State* S = state();
  if (S->log.size() < W->L->nthreads) S->log.resize(W->L->nthreads);
  S->log[tl_fiber->linear].push_back(Access{reinterpret_cast<uintptr_t>(site), a, unsigned(size), region, kind});
}

inline void mark(std::vector<unsigned char>& bits, size_t i) {
  if (i < bits.size()) __atomic_store_n(&bits[i], 1, __ATOMIC_RELAXED);   // other workers mark too
}

// One warp instruction: the accesses of the lanes that executed it (lane, access).
inline void instruction(State& S, const std::pair<unsigned, const Access*>* acc, size_t n) {
  const Kind kind = acc[0].second->kind;
  auto& ids = S.scratch;
  ids.clear();
  if (kind == GLOBAL_LD || kind == GLOBAL_ST) {
    for (size_t i = 0; i < n; ++i) {
      const Access& x = *acc[i].second;
      Region& r = regions()[x.region];
      for (size_t s = (x.addr - r.origin) >> 5; s <= (x.addr + x.size - 1 - r.origin) >> 5; ++s) {
        ids.push_back((static_cast<unsigned long long>(x.region) << 48) | s);
        mark(kind == GLOBAL_LD ? r.read : r.written, s - r.first_sector());
      }
    }
    std::sort(ids.begin(), ids.end());
    const size_t sectors = size_t(std::unique(ids.begin(), ids.end()) - ids.begin());
    S.m[kind == GLOBAL_LD ? REQ_LD : REQ_ST] += 1;
    S.m[kind == GLOBAL_LD ? SEC_LD : SEC_ST] += sectors;
    return;
  }
  // Shared memory: phases of 32, 16 or 8 lanes (accesses of 4, 8 or 16 bytes).
  const unsigned size = acc[0].second->size;
  const unsigned lanes_per_phase = size == 8 ? 16 : size == 16 ? 8 : 32;
  unsigned long long wavefronts = 0, phases = 0;
  for (unsigned phase = 0; phase < 32 / lanes_per_phase; ++phase) {
    ids.clear();
    for (size_t i = 0; i < n; ++i) {
      if (acc[i].first / lanes_per_phase != phase) continue;
      const Access& x = *acc[i].second;
      for (uintptr_t w = x.addr >> 2; w <= (x.addr + x.size - 1) >> 2; ++w) ids.push_back(w);
    }
    if (ids.empty()) continue;
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());   // one word read by many: a broadcast
    unsigned per_bank[32] = {};
    unsigned most = 0;
    for (unsigned long long w : ids) most = std::max(most, ++per_bank[w & 31]);
    wavefronts += most;
    phases += 1;
  }
  S.m[kind == SHARED_LD ? WF_LD : WF_ST] += wavefronts;
  S.m[kind == SHARED_LD ? BC_LD : BC_ST] += wavefronts - phases;
}

inline bool same_sites(const std::vector<Access>& a, const std::vector<Access>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].site != b[i].site) return false;
  return true;
}

// The lanes of one warp: where every lane that made accesses made the same sequence of sites (no
// divergence), the k-th access of each is one instruction; otherwise the k-th execution of each site.
inline void flush_warp(State& S, unsigned first, unsigned last) {
  std::vector<std::pair<unsigned, const Access*>> group;
  int lead = -1;
  bool same = true;
  for (unsigned t = first; t < last; ++t) {
    if (S.log[t].empty()) continue;
    if (lead < 0) lead = int(t);
    else same = same && same_sites(S.log[t], S.log[unsigned(lead)]);
  }
  if (lead < 0) return;
  if (same) {
    for (size_t k = 0; k < S.log[unsigned(lead)].size(); ++k) {
      group.clear();
      for (unsigned t = first; t < last; ++t)
        if (!S.log[t].empty()) group.emplace_back(t - first, &S.log[t][k]);
      instruction(S, group.data(), group.size());
    }
    return;
  }
  struct Key { uintptr_t site; unsigned occurrence, lane; const Access* a; };
  std::vector<Key> keys;
  std::unordered_map<uintptr_t, unsigned> seen;
  for (unsigned t = first; t < last; ++t) {
    seen.clear();
    for (const Access& x : S.log[t]) keys.push_back(Key{x.site, seen[x.site]++, t - first, &x});
  }
  std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
    return a.site != b.site ? a.site < b.site : a.occurrence != b.occurrence ? a.occurrence < b.occurrence : a.lane < b.lane;
  });
  for (size_t i = 0; i < keys.size();) {
    group.clear();
    size_t j = i;
    for (; j < keys.size() && keys[j].site == keys[i].site && keys[j].occurrence == keys[i].occurrence; ++j)
      group.emplace_back(keys[j].lane, keys[j].a);
    instruction(S, group.data(), group.size());
    i = j;
  }
}

inline void on_block(uintptr_t pc) {
  Busy busy;
  State& S = *state();
  if (2 * (S.used + 1) > S.pcs.size()) {   // grow: keep the table at most half full
    std::vector<uintptr_t> pcs(S.pcs.size() * 2, 0);
    std::vector<unsigned long long> hits(pcs.size(), 0);
    for (size_t i = 0; i < S.pcs.size(); ++i) {
      if (!S.pcs[i]) continue;
      size_t j = (S.pcs[i] * 0x9E3779B97F4A7C15ull) & (pcs.size() - 1);
      while (pcs[j]) j = (j + 1) & (pcs.size() - 1);
      pcs[j] = S.pcs[i];
      hits[j] = S.hits[i];
    }
    S.pcs.swap(pcs);
    S.hits.swap(hits);
  }
  size_t j = (pc * 0x9E3779B97F4A7C15ull) & (S.pcs.size() - 1);
  while (S.pcs[j] && S.pcs[j] != pc) j = (j + 1) & (S.pcs.size() - 1);
  if (!S.pcs[j]) { S.pcs[j] = pc; ++S.used; }
  ++S.hits[j];
}

}  // namespace count

LABKIT_RUNTIME_FN void count_flush(Worker* W) {
  if (W->L == nullptr) return;
  count::Busy busy;
  count::State& S = *count::state();
  const unsigned n = std::min<unsigned>(W->L->nthreads, unsigned(S.log.size()));
  for (unsigned first = 0; first < n; first += 32) count::flush_warp(S, first, std::min(n, first + 32));
  for (auto& l : S.log) l.clear();
}

}  // namespace labkit

#define LABKIT_ON_ACCESS(p, n, write) ::labkit::count::on_access(p, n, write, __builtin_return_address(0))
#define LABKIT_ON_ATOMIC() ((void)0)   // atomics are neither loads nor stores in Nsight Compute's counts
#include "labkit_interleave.h"

extern "C" __attribute__((visibility("hidden"))) void __sanitizer_cov_trace_pc() {
  if (!::labkit::tl_in_fiber || ::labkit::count::tl_busy) return;
  ::labkit::count::on_block(reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
}

// What the Python side calls (counting.py).
#define LABKIT_API extern "C" __attribute__((visibility("default")))
LABKIT_API void labkit_count_begin() { ::labkit::count::begin(); }
LABKIT_API void labkit_count_region(uintptr_t lo, uintptr_t hi, uintptr_t origin) {
  ::labkit::count::Region r{lo, hi, origin, {}, {}};
  const size_t sectors = hi > lo ? ((hi - 1 - origin) >> 5) - r.first_sector() + 1 : 0;
  r.read.assign(sectors, 0);
  r.written.assign(sectors, 0);
  ::labkit::count::regions().push_back(std::move(r));
}
// The totals: the eight metrics (Metric's order), then the sectors read and written (DRAM).
LABKIT_API void labkit_count_totals(unsigned long long* out) {
  using namespace ::labkit::count;
  for (int i = 0; i < NMETRICS + 2; ++i) out[i] = 0;
  for (State* s : states())
    for (int i = 0; i < NMETRICS; ++i) out[i] += s->m[i];
  for (const Region& r : regions())
    for (size_t i = 0; i < r.read.size(); ++i) {
      out[NMETRICS] += r.read[i];
      out[NMETRICS + 1] += r.written[i];
    }
}
// The basic blocks run (their addresses after the coverage hook's call) and how often: at most
// `cap` of them; returns how many there are.
LABKIT_API size_t labkit_count_blocks(uintptr_t* pcs, unsigned long long* hits, size_t cap) {
  std::unordered_map<uintptr_t, unsigned long long> all;
  for (::labkit::count::State* s : ::labkit::count::states())
    for (size_t i = 0; i < s->pcs.size(); ++i)
      if (s->pcs[i]) all[s->pcs[i]] += s->hits[i];
  size_t k = 0;
  for (const auto& e : all) {
    if (k < cap) { pcs[k] = e.first; hits[k] = e.second; }
    ++k;
  }
  return k;
}
// Where this library is loaded: a basic block's address minus this is its address in the file.
LABKIT_API uintptr_t labkit_count_base() {
  Dl_info info{};
  return dladdr(reinterpret_cast<void*>(&labkit_count_base), &info) ? reinterpret_cast<uintptr_t>(info.dli_fbase) : 0;
}
#undef LABKIT_API
