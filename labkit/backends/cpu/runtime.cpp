// runtime.cpp -- the CPU executor's runtime, compiled once per build flavour (compiler.build_runtime)
// into an object that every kernel module of that flavour links in: the header's scheduler, barriers,
// launch and signal handlers, defined here once (LABKIT_RUNTIME_IMPL) instead of in each kernel's
// translation unit, which declares them only (LABKIT_RUNTIME_LINKED).  In the shuffled schedule's
// build, the switch-point hooks live here too (labkit_interleave.h).
#define LABKIT_RUNTIME_IMPL 1
#include "labkit_cpu.h"
