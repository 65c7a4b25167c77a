// cuda.h for labkit's CPU executor.  The driver API (cu* calls) is not modelled: a program that calls
// it is refused before it is compiled, naming the call.  Programs that include cuda.h only for its
// version macro or its types get the runtime API's declarations.
#pragma once
#include "cuda_runtime.h"
