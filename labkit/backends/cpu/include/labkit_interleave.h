// labkit_interleave.h -- the hooks at every memory access: the switch points of the CPU executor's
// shuffled schedule, and what the counting build records (labkit_count.h).
//
// Those builds are compiled with -fsanitize=thread but linked without ThreadSanitizer's runtime:
// the compiler then calls the functions below before every memory access and atomic of the kernel,
// and they are the executor's own.  Each calls LABKIT_ON_ACCESS (an access) or LABKIT_ON_ATOMIC
// (an atomic) -- by default a switch point: another thread of the block may run first
// (labkit::preempt_point) -- then does what the atomic asks.  None is instrumented itself.
#pragma once

#ifndef LABKIT_ON_ACCESS
#define LABKIT_ON_ACCESS(p, n, write) ::labkit::preempt_point()
#define LABKIT_ON_ATOMIC() ::labkit::preempt_point()
#endif

#define LABKIT_HOOK extern "C" __attribute__((no_sanitize_thread, visibility("hidden")))

LABKIT_HOOK void __tsan_init() {}
LABKIT_HOOK void __tsan_func_entry(void*) {}
LABKIT_HOOK void __tsan_func_exit() {}
LABKIT_HOOK void __tsan_ignore_thread_begin() {}
LABKIT_HOOK void __tsan_ignore_thread_end() {}

#define LABKIT_ACCESS(N)                                                                      \
  LABKIT_HOOK void __tsan_read##N(void* p) { LABKIT_ON_ACCESS(p, N, false); }                \
  LABKIT_HOOK void __tsan_write##N(void* p) { LABKIT_ON_ACCESS(p, N, true); }                \
  LABKIT_HOOK void __tsan_unaligned_read##N(void* p) { LABKIT_ON_ACCESS(p, N, false); }      \
  LABKIT_HOOK void __tsan_unaligned_write##N(void* p) { LABKIT_ON_ACCESS(p, N, true); }      \
  LABKIT_HOOK void __tsan_volatile_read##N(void* p) { LABKIT_ON_ACCESS(p, N, false); }       \
  LABKIT_HOOK void __tsan_volatile_write##N(void* p) { LABKIT_ON_ACCESS(p, N, true); }
LABKIT_ACCESS(1)
LABKIT_ACCESS(2)
LABKIT_ACCESS(4)
LABKIT_ACCESS(8)
LABKIT_ACCESS(16)
#undef LABKIT_ACCESS
LABKIT_HOOK void __tsan_read_range(void* p, unsigned long n) { LABKIT_ON_ACCESS(p, n, false); }
LABKIT_HOOK void __tsan_write_range(void* p, unsigned long n) { LABKIT_ON_ACCESS(p, n, true); }
LABKIT_HOOK void __tsan_vptr_update(void**, void*) {}
LABKIT_HOOK void __tsan_vptr_read(void**) {}

// Atomics: a switch point, then the operation itself (sequentially consistent: the order a kernel
// asked for, or a stronger one).
#define LABKIT_ATOMICS(N, T)                                                                             \
  LABKIT_HOOK T __tsan_atomic##N##_load(const volatile T* a, int) {                                     \
    LABKIT_ON_ATOMIC();                                                                                  \
    return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                                         \
  }                                                                                                      \
  LABKIT_HOOK void __tsan_atomic##N##_store(volatile T* a, T v, int) {                                  \
    LABKIT_ON_ATOMIC();                                                                                  \
    __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                            \
  }                                                                                                      \
  LABKIT_HOOK T __tsan_atomic##N##_exchange(volatile T* a, T v, int) {                                  \
    LABKIT_ON_ATOMIC();                                                                                  \
    return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                                  \
  }                                                                                                      \
  LABKIT_HOOK T __tsan_atomic##N##_fetch_add(volatile T* a, T v, int) {                                 \
    LABKIT_ON_ATOMIC();                                                                                  \
    return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                                   \
  }                                                                                                      \
  LABKIT_HOOK T __tsan_atomic##N##_fetch_sub(volatile T* a, T v, int) {                                 \
    LABKIT_ON_ATOMIC();                                                                                  \
    return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);                                                   \
  }                                                                                                      \
  LABKIT_HOOK T __tsan_atomic##N##_fetch_and(volatile T* a, T v, int) {                                 \
    LABKIT_ON_ATOMIC();                                                                                  \
    return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST);                                                   \
  }                                                                                                      \
  LABKIT_HOOK T __tsan_atomic##N##_fetch_or(volatile T* a, T v, int) {                                  \
    LABKIT_ON_ATOMIC();                                                                                  \
    return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);                                                    \
  }                                                                                                      \
  LABKIT_HOOK T __tsan_atomic##N##_fetch_xor(volatile T* a, T v, int) {                                 \
    LABKIT_ON_ATOMIC();                                                                                  \
    return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST);                                                   \
  }                                                                                                      \
  LABKIT_HOOK T __tsan_atomic##N##_fetch_nand(volatile T* a, T v, int) {                                \
    LABKIT_ON_ATOMIC();                                                                                  \
    return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST);                                                  \
  }                                                                                                      \
  LABKIT_HOOK int __tsan_atomic##N##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {     \
    LABKIT_ON_ATOMIC();                                                                                  \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);              \
  }                                                                                                      \
  LABKIT_HOOK int __tsan_atomic##N##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {       \
    LABKIT_ON_ATOMIC();                                                                                  \
    return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);               \
  }                                                                                                      \
  LABKIT_HOOK T __tsan_atomic##N##_compare_exchange_val(volatile T* a, T c, T v, int, int) {           \
    LABKIT_ON_ATOMIC();                                                                                  \
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                    \
    return c;                                                                                            \
  }
LABKIT_ATOMICS(8, unsigned char)
LABKIT_ATOMICS(16, unsigned short)
LABKIT_ATOMICS(32, unsigned int)
LABKIT_ATOMICS(64, unsigned long long)
#undef LABKIT_ATOMICS
LABKIT_HOOK void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
LABKIT_HOOK void __tsan_atomic_signal_fence(int) {}
#undef LABKIT_HOOK
