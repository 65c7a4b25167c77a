// cooperative_groups/reduce.h for the CPU executor: cg::reduce is in cooperative_groups.h.
#pragma once
#include "../cooperative_groups.h"
