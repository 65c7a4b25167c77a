// helper_image.h for labkit's CPU executor: the cuda-samples include it for comparing results
// (compareData, sdkCompareL2fe, in helper_functions.h here).  Image files (PGM/PPM) are not read here.
#pragma once
#include "helper_functions.h"
