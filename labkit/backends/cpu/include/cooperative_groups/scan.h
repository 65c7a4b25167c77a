// cooperative_groups/scan.h for the CPU executor: cg::inclusive_scan and exclusive_scan are in
// cooperative_groups.h.
#pragma once
#include "../cooperative_groups.h"
