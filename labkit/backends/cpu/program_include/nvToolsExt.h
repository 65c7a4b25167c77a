// nvToolsExt.h (the older path of NVTX): labkit provides NVTX 3 (nvtx3/nvToolsExt.h).
#pragma once
#include "nvtx3/nvToolsExt.h"
