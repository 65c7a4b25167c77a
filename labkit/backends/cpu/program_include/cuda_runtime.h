// cuda_runtime.h for labkit's CPU executor: the CUDA runtime API a whole program uses
// (labkit_runtime_api.h), on top of the execution model (labkit_cpu.h, included first).
#pragma once
#include "labkit_cpu.h"
#include "labkit_runtime_api.h"
