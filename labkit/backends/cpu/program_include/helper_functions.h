// helper_functions.h for labkit's CPU executor: the host helpers of NVIDIA's cuda-samples that teaching
// programs use, labkit's own implementation.  As the samples' header, it gathers the others: command-line
// strings and sdkFindFilePath (helper_string.h), timers (helper_timer.h), and comparing results, number
// files and PGM/PPM images (helper_image.h).  Each is guarded by #pragma once, so any of them may be
// included in any order.
#pragma once
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include "helper_string.h"
#include "helper_timer.h"
#include "helper_image.h"

#ifndef EXIT_WAIVED
#define EXIT_WAIVED 2
#endif
