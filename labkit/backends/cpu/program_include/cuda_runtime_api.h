// cuda_runtime_api.h for labkit's CPU executor: its declarations are part of cuda_runtime.h here.
#pragma once
#include "cuda_runtime.h"
