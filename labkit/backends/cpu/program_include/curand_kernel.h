// curand_kernel.h for labkit's CPU executor: cuRAND's device API (curand_init, curand, curand_uniform,
// curand_normal ... on XORWOW, Philox4_32_10 and Sobol states), in labkit_curand.h; with the host API,
// as NVIDIA's curand_kernel.h includes curand.h.
#pragma once
#include "curand.h"
#include "labkit_curand.h"
