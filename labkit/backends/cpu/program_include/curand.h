// curand.h for labkit's CPU executor: cuRAND's host API (a generator that fills device memory).
//
// The generators: CURAND_RNG_PSEUDO_DEFAULT and _XORWOW (XORWOW), CURAND_RNG_PSEUDO_PHILOX4_32_10, and
// CURAND_RNG_QUASI_DEFAULT, _SOBOL32, _SOBOL64 (Sobol, Joe and Kuo's direction numbers, up to
// LABKIT_SOBOL_DIMENSIONS dimensions).  The others (MRG32k3a, MTGP32, MT19937, the scrambled Sobol
// sequences) are refused before the program is compiled.  Generation is done when it is called (the
// executor's model of a stream), into device memory; a pointer that is not device memory is reported.
//
// A pseudo-random generator's 32-bit numbers (curandGenerate, curandGenerateUniform) come in
// cuRAND's own order, measured on an H200 against its device API bit for bit: the number at position
// p (counted from the seed across calls, the offset included) is, for XORWOW, number p / 4096 of
// subsequence p % 4096 (curand_init(seed, p % 4096, 0)), and for Philox4_32_10, with q = p / 4,
// number 4 (q / 65536) + p % 4 of subsequence q % 65536.  Its normal and double-precision numbers are made from one sequence of the
// engine (subsequence 0 from the offset): as random, but not the numbers NVIDIA's library gives.  A quasi-random generator's output is ordered as
// CURAND_ORDERING_QUASI_DEFAULT documents: n / dimensions numbers of the first dimension, then of the
// second, and so on.
#pragma once

#include <cstdio>
#include <cstring>
#include <vector>
#include "cuda_runtime.h"
#include "labkit_curand.h"

#define CURAND_H_ 1
#define CURAND_VER_MAJOR 10
#define CURAND_VER_MINOR 3
#define CURAND_VER_PATCH 5
#define CURAND_VERSION (CURAND_VER_MAJOR * 1000 + CURAND_VER_MINOR * 100 + CURAND_VER_PATCH)
#define CURANDAPI

enum curandStatus {
  CURAND_STATUS_SUCCESS = 0, CURAND_STATUS_VERSION_MISMATCH = 100, CURAND_STATUS_NOT_INITIALIZED = 101,
  CURAND_STATUS_ALLOCATION_FAILED = 102, CURAND_STATUS_TYPE_ERROR = 103, CURAND_STATUS_OUT_OF_RANGE = 104,
  CURAND_STATUS_LENGTH_NOT_MULTIPLE = 105, CURAND_STATUS_DOUBLE_PRECISION_REQUIRED = 106,
  CURAND_STATUS_LAUNCH_FAILURE = 201, CURAND_STATUS_PREEXISTING_FAILURE = 202,
  CURAND_STATUS_INITIALIZATION_FAILED = 203, CURAND_STATUS_ARCH_MISMATCH = 204, CURAND_STATUS_INTERNAL_ERROR = 999
};
typedef enum curandStatus curandStatus_t;

enum curandRngType {
  CURAND_RNG_TEST = 0, CURAND_RNG_PSEUDO_DEFAULT = 100, CURAND_RNG_PSEUDO_XORWOW = 101,
  CURAND_RNG_PSEUDO_MRG32K3A = 121, CURAND_RNG_PSEUDO_MTGP32 = 141, CURAND_RNG_PSEUDO_MT19937 = 142,
  CURAND_RNG_PSEUDO_PHILOX4_32_10 = 161, CURAND_RNG_QUASI_DEFAULT = 200, CURAND_RNG_QUASI_SOBOL32 = 201,
  CURAND_RNG_QUASI_SCRAMBLED_SOBOL32 = 202, CURAND_RNG_QUASI_SOBOL64 = 203, CURAND_RNG_QUASI_SCRAMBLED_SOBOL64 = 204
};
typedef enum curandRngType curandRngType_t;

enum curandOrdering {
  CURAND_ORDERING_PSEUDO_BEST = 100, CURAND_ORDERING_PSEUDO_DEFAULT = 101, CURAND_ORDERING_PSEUDO_SEEDED = 102,
  CURAND_ORDERING_PSEUDO_LEGACY = 103, CURAND_ORDERING_PSEUDO_DYNAMIC = 104, CURAND_ORDERING_QUASI_DEFAULT = 201
};
typedef enum curandOrdering curandOrdering_t;

enum curandDirectionVectorSet {
  CURAND_DIRECTION_VECTORS_32_JOEKUO6 = 101, CURAND_SCRAMBLED_DIRECTION_VECTORS_32_JOEKUO6 = 102,
  CURAND_DIRECTION_VECTORS_64_JOEKUO6 = 103, CURAND_SCRAMBLED_DIRECTION_VECTORS_64_JOEKUO6 = 104
};
typedef enum curandDirectionVectorSet curandDirectionVectorSet_t;

struct curandGenerator_st {
  curandRngType_t type;
  unsigned long long seed, offset;
  unsigned int dimensions;
  bool host;                         // curandCreateGeneratorHost: fills host memory
  cudaStream_t stream;
  // XORWOW's 4096 subsequences as far as this generator has drawn from them (made at the first
  // draw): lane t's state and the index of its next number.
  std::vector<curandStateXORWOW_t> lanes;
  std::vector<unsigned long long> lane_next;
};
typedef curandGenerator_st* curandGenerator_t;

namespace labkit {
namespace rand {
inline bool is_quasi(curandRngType_t t) { return t >= CURAND_RNG_QUASI_DEFAULT; }
inline curandStatus_t say_status(curandStatus_t s, const char* fmt, const char* call, unsigned long long a = 0,
                                 unsigned long long b = 0) {
  std::fflush(stdout);
  std::fprintf(stderr, "labkit: %s: ", call);
  std::fprintf(stderr, fmt, a, b);
  std::fputc('\n', stderr);
  return s;
}
inline curandStatus_t check_output(curandGenerator_t g, const void* out, size_t bytes, const char* call) {
  if (!g) return CURAND_STATUS_NOT_INITIALIZED;
  if (g->host) return out ? CURAND_STATUS_SUCCESS : CURAND_STATUS_LAUNCH_FAILURE;
  if (::labkit::rt::check_device_range(out, bytes, call, "output", "", 0) != cudaSuccess)
    return CURAND_STATUS_LAUNCH_FAILURE;
  ::labkit::rt::unguard_all();
  return CURAND_STATUS_SUCCESS;
}
// Calls emit(i, a, b) for each of n numbers: raw 32-bit draws a, b of a pseudo generator (b for
// double precision), or of a quasi generator's dimension i / (n / dimensions).
template <class Emit> inline void generate32(curandGenerator_t g, size_t n, unsigned per, Emit emit) {
  if (g->type == CURAND_RNG_PSEUDO_PHILOX4_32_10) {
    curandStatePhilox4_32_10_t s;
    curand_init(g->seed, 0, g->offset, &s);
    for (size_t i = 0; i < n; ++i) { unsigned a = curand(&s), b = per > 1 ? curand(&s) : 0u; emit(i, a, b); }
  } else {
    curandStateXORWOW_t s;
    curand_init(g->seed, 0, g->offset, &s);
    for (size_t i = 0; i < n; ++i) { unsigned a = curand(&s), b = per > 1 ? curand(&s) : 0u; emit(i, a, b); }
  }
  g->offset += n * per;
}
// emit(i, a) for n 32-bit numbers in cuRAND's order (see the top of this file).
template <class Emit> inline void generate_ordered(curandGenerator_t g, size_t n, Emit emit) {
  const unsigned long long p0 = g->offset;
  if (g->type == CURAND_RNG_PSEUDO_PHILOX4_32_10) {
    for (size_t i = 0; i < n;) {
      const unsigned long long p = p0 + i, quad = p / 4;
      curandStatePhilox4_32_10_t s;
      curand_init(g->seed, quad % 65536, 4 * (quad / 65536), &s);
      const uint4 v = curand4(&s);
      const unsigned w[4] = {v.x, v.y, v.z, v.w};
      for (unsigned j = unsigned(p % 4); j < 4 && i < n; ++j, ++i) emit(i, w[j]);
    }
  } else {
    constexpr unsigned T = 4096;
    if (g->lanes.empty()) {
      g->lanes.resize(T);
      g->lane_next.assign(T, 0);
      for (unsigned t = 0; t < T; ++t) curand_init(g->seed, t, 0, &g->lanes[t]);
    }
    for (size_t i = 0; i < n; ++i) {
      const unsigned long long p = p0 + i, j = p / T;
      const unsigned t = unsigned(p % T);
      curandStateXORWOW_t& s = g->lanes[t];
      if (j < g->lane_next[t]) {   // an offset set back: the lane starts again
        curand_init(g->seed, t, 0, &s);
        g->lane_next[t] = 0;
      }
      if (j > g->lane_next[t]) skipahead(j - g->lane_next[t], &s);
      emit(i, curand(&s));
      g->lane_next[t] = j + 1;
    }
  }
  g->offset += n;
}
// emit(i, x) for each point coordinate, x the 64-bit Sobol value (a 32-bit one in its high half).
template <class Emit> inline void generate_sobol(curandGenerator_t g, size_t n, Emit emit) {
  const size_t per_dim = n / g->dimensions;
  for (unsigned d = 0; d < g->dimensions; ++d) {
    if (g->type == CURAND_RNG_QUASI_SOBOL64) {
      curandStateSobol64_t s;
      curand_init(sobol64_vectors()[d], g->offset, &s);
      for (size_t i = 0; i < per_dim; ++i) emit(d * per_dim + i, curand(&s));
    } else {
      curandStateSobol32_t s;
      curand_init(sobol32_vectors()[d], unsigned(g->offset), &s);
      for (size_t i = 0; i < per_dim; ++i) emit(d * per_dim + i, (unsigned long long)curand(&s) << 32);
    }
  }
  g->offset += per_dim;
}
inline curandStatus_t check_quasi_length(curandGenerator_t g, size_t n, const char* call) {
  if (is_quasi(g->type) && n % g->dimensions)
    return say_status(CURAND_STATUS_LENGTH_NOT_MULTIPLE, "%llu numbers of a %llu-dimensional quasi-random "
                      "generator: the count must be a multiple of the dimensions", call, n, g->dimensions);
  return CURAND_STATUS_SUCCESS;
}
}  // namespace rand
}  // namespace labkit

inline curandStatus_t curandGetVersion(int* v) { *v = CURAND_VERSION; return CURAND_STATUS_SUCCESS; }
inline curandStatus_t curandCreateGenerator(curandGenerator_t* g, curandRngType_t type) {
  switch (type) {
    case CURAND_RNG_PSEUDO_DEFAULT: case CURAND_RNG_PSEUDO_XORWOW: case CURAND_RNG_PSEUDO_PHILOX4_32_10:
    case CURAND_RNG_QUASI_DEFAULT: case CURAND_RNG_QUASI_SOBOL32: case CURAND_RNG_QUASI_SOBOL64:
      break;
    default:
      return ::labkit::rand::say_status(CURAND_STATUS_TYPE_ERROR, "generator type %llu is not one the CPU executor "
                                        "provides (XORWOW, Philox4_32_10, Sobol32, Sobol64)", "curandCreateGenerator",
                                        (unsigned long long)type);
  }
  *g = new curandGenerator_st{type == CURAND_RNG_QUASI_DEFAULT ? CURAND_RNG_QUASI_SOBOL32 : type, 0ull, 0ull, 1u,
                              false, nullptr};
  return CURAND_STATUS_SUCCESS;
}
inline curandStatus_t curandCreateGeneratorHost(curandGenerator_t* g, curandRngType_t type) {
  curandStatus_t s = curandCreateGenerator(g, type);
  if (s == CURAND_STATUS_SUCCESS) (*g)->host = true;
  return s;
}
inline curandStatus_t curandDestroyGenerator(curandGenerator_t g) {
  if (!g) return CURAND_STATUS_NOT_INITIALIZED;
  delete g;
  return CURAND_STATUS_SUCCESS;
}
inline curandStatus_t curandSetStream(curandGenerator_t g, cudaStream_t s) {
  if (!g) return CURAND_STATUS_NOT_INITIALIZED;
  g->stream = s;
  return CURAND_STATUS_SUCCESS;
}
inline curandStatus_t curandSetPseudoRandomGeneratorSeed(curandGenerator_t g, unsigned long long seed) {
  if (!g) return CURAND_STATUS_NOT_INITIALIZED;
  if (::labkit::rand::is_quasi(g->type)) return CURAND_STATUS_TYPE_ERROR;
  g->seed = seed;
  g->offset = 0;
  g->lanes.clear();
  return CURAND_STATUS_SUCCESS;
}
inline curandStatus_t curandSetGeneratorOffset(curandGenerator_t g, unsigned long long offset) {
  if (!g) return CURAND_STATUS_NOT_INITIALIZED;
  g->offset = offset;
  return CURAND_STATUS_SUCCESS;
}
inline curandStatus_t curandSetGeneratorOrdering(curandGenerator_t g, curandOrdering_t o) {
  if (!g) return CURAND_STATUS_NOT_INITIALIZED;
  bool quasi = ::labkit::rand::is_quasi(g->type);
  if (quasi != (o == CURAND_ORDERING_QUASI_DEFAULT)) return CURAND_STATUS_OUT_OF_RANGE;
  return CURAND_STATUS_SUCCESS;
}
inline curandStatus_t curandSetQuasiRandomGeneratorDimensions(curandGenerator_t g, unsigned int dims) {
  if (!g) return CURAND_STATUS_NOT_INITIALIZED;
  if (!::labkit::rand::is_quasi(g->type)) return CURAND_STATUS_TYPE_ERROR;
  if (dims < 1 || dims > LABKIT_SOBOL_DIMENSIONS)
    return ::labkit::rand::say_status(CURAND_STATUS_OUT_OF_RANGE, "%llu dimensions: the CPU executor's Sobol "
                                      "generators have 1 to %llu", "curandSetQuasiRandomGeneratorDimensions", dims,
                                      LABKIT_SOBOL_DIMENSIONS);
  g->dimensions = dims;
  g->offset = 0;
  return CURAND_STATUS_SUCCESS;
}
inline curandStatus_t curandGenerateSeeds(curandGenerator_t g) { return g ? CURAND_STATUS_SUCCESS : CURAND_STATUS_NOT_INITIALIZED; }

inline curandStatus_t curandGenerate(curandGenerator_t g, unsigned int* out, size_t n) {
  if (auto s = ::labkit::rand::check_output(g, out, n * sizeof *out, "curandGenerate")) return s;
  if (g->type == CURAND_RNG_QUASI_SOBOL64) return CURAND_STATUS_TYPE_ERROR;
  if (auto s = ::labkit::rand::check_quasi_length(g, n, "curandGenerate")) return s;
  if (::labkit::rand::is_quasi(g->type))
    ::labkit::rand::generate_sobol(g, n, [&](size_t i, unsigned long long x) { out[i] = unsigned(x >> 32); });
  else
    ::labkit::rand::generate_ordered(g, n, [&](size_t i, unsigned a) { out[i] = a; });
  return CURAND_STATUS_SUCCESS;
}
inline curandStatus_t curandGenerateLongLong(curandGenerator_t g, unsigned long long* out, size_t n) {
  if (auto s = ::labkit::rand::check_output(g, out, n * sizeof *out, "curandGenerateLongLong")) return s;
  if (g->type != CURAND_RNG_QUASI_SOBOL64) return CURAND_STATUS_TYPE_ERROR;
  if (auto s = ::labkit::rand::check_quasi_length(g, n, "curandGenerateLongLong")) return s;
  ::labkit::rand::generate_sobol(g, n, [&](size_t i, unsigned long long x) { out[i] = x; });
  return CURAND_STATUS_SUCCESS;
}
inline curandStatus_t curandGenerateUniform(curandGenerator_t g, float* out, size_t n) {
  if (auto s = ::labkit::rand::check_output(g, out, n * sizeof *out, "curandGenerateUniform")) return s;
  if (auto s = ::labkit::rand::check_quasi_length(g, n, "curandGenerateUniform")) return s;
  if (::labkit::rand::is_quasi(g->type))
    ::labkit::rand::generate_sobol(g, n, [&](size_t i, unsigned long long x) {
      out[i] = ::labkit::rand::uniform(unsigned(x >> 32)); });
  else
    ::labkit::rand::generate_ordered(g, n, [&](size_t i, unsigned a) { out[i] = ::labkit::rand::uniform(a); });
  return CURAND_STATUS_SUCCESS;
}
inline curandStatus_t curandGenerateUniformDouble(curandGenerator_t g, double* out, size_t n) {
  if (auto s = ::labkit::rand::check_output(g, out, n * sizeof *out, "curandGenerateUniformDouble")) return s;
  if (auto s = ::labkit::rand::check_quasi_length(g, n, "curandGenerateUniformDouble")) return s;
  if (::labkit::rand::is_quasi(g->type))
    ::labkit::rand::generate_sobol(g, n, [&](size_t i, unsigned long long x) {
      out[i] = ::labkit::rand::uniform_double(x); });
  else
    ::labkit::rand::generate32(g, n, 2, [&](size_t i, unsigned a, unsigned b) {
      out[i] = ::labkit::rand::uniform_double_hq(a, b); });
  return CURAND_STATUS_SUCCESS;
}
// Normal numbers: pairs by Box-Muller for a pseudo generator (n must be even, as cuRAND requires), the
// inverse distribution function of each uniform for a quasi one.
template <class T> inline curandStatus_t labkit_curand_normal(curandGenerator_t g, T* out, size_t n, T mean, T stddev,
                                                              bool log, const char* call) {
  if (auto s = ::labkit::rand::check_output(g, out, n * sizeof *out, call)) return s;
  if (auto s = ::labkit::rand::check_quasi_length(g, n, call)) return s;
  auto put = [&](size_t i, double z) { T v = T(mean + stddev * T(z)); out[i] = log ? T(std::exp(v)) : v; };
  if (::labkit::rand::is_quasi(g->type)) {
    ::labkit::rand::generate_sobol(g, n, [&](size_t i, unsigned long long x) {
      put(i, ::labkit::rand::normal_icdf(::labkit::rand::uniform_double(x))); });
    return CURAND_STATUS_SUCCESS;
  }
  if (n % 2)
    return ::labkit::rand::say_status(CURAND_STATUS_LENGTH_NOT_MULTIPLE, "%llu normal numbers: a pseudo-random "
                                      "generator makes them in pairs, so the count must be even", call, n);
  if (sizeof(T) == sizeof(float)) {
    unsigned first = 0;
    ::labkit::rand::generate32(g, n, 1, [&](size_t i, unsigned a, unsigned) {
      if (i % 2 == 0) { first = a; return; }
      float2 z = ::labkit::rand::box_muller(first, a);
      put(i - 1, z.x);
      put(i, z.y);
    });
  } else {
    unsigned a0 = 0, b0 = 0;
    ::labkit::rand::generate32(g, n, 2, [&](size_t i, unsigned a, unsigned b) {
      if (i % 2 == 0) { a0 = a; b0 = b; return; }
      double2 z = ::labkit::rand::box_muller_double(a0, b0, a, b);
      put(i - 1, z.x);
      put(i, z.y);
    });
  }
  return CURAND_STATUS_SUCCESS;
}
inline curandStatus_t curandGenerateNormal(curandGenerator_t g, float* out, size_t n, float mean, float stddev) {
  return labkit_curand_normal(g, out, n, mean, stddev, false, "curandGenerateNormal");
}
inline curandStatus_t curandGenerateNormalDouble(curandGenerator_t g, double* out, size_t n, double mean, double stddev) {
  return labkit_curand_normal(g, out, n, mean, stddev, false, "curandGenerateNormalDouble");
}
inline curandStatus_t curandGenerateLogNormal(curandGenerator_t g, float* out, size_t n, float mean, float stddev) {
  return labkit_curand_normal(g, out, n, mean, stddev, true, "curandGenerateLogNormal");
}
inline curandStatus_t curandGenerateLogNormalDouble(curandGenerator_t g, double* out, size_t n, double mean,
                                                    double stddev) {
  return labkit_curand_normal(g, out, n, mean, stddev, true, "curandGenerateLogNormalDouble");
}
// The direction vectors of the device API's Sobol generators (curand_init(vectors[d], offset, &state)):
// LABKIT_SOBOL_DIMENSIONS sets, one per dimension.
inline curandStatus_t curandGetDirectionVectors32(curandDirectionVectors32_t** v, curandDirectionVectorSet_t set) {
  if (set != CURAND_DIRECTION_VECTORS_32_JOEKUO6) return CURAND_STATUS_OUT_OF_RANGE;
  *v = const_cast<curandDirectionVectors32_t*>(::labkit::rand::sobol32_vectors());
  return CURAND_STATUS_SUCCESS;
}
inline curandStatus_t curandGetDirectionVectors64(curandDirectionVectors64_t** v, curandDirectionVectorSet_t set) {
  if (set != CURAND_DIRECTION_VECTORS_64_JOEKUO6) return CURAND_STATUS_OUT_OF_RANGE;
  *v = const_cast<curandDirectionVectors64_t*>(::labkit::rand::sobol64_vectors());
  return CURAND_STATUS_SUCCESS;
}

// The cuda-samples' helper_cuda.h names cuRAND's status in checkCudaErrors.
inline const char* _cudaGetErrorEnum(curandStatus_t s) {
  switch (s) {
    case CURAND_STATUS_SUCCESS: return "CURAND_STATUS_SUCCESS";
    case CURAND_STATUS_VERSION_MISMATCH: return "CURAND_STATUS_VERSION_MISMATCH";
    case CURAND_STATUS_NOT_INITIALIZED: return "CURAND_STATUS_NOT_INITIALIZED";
    case CURAND_STATUS_ALLOCATION_FAILED: return "CURAND_STATUS_ALLOCATION_FAILED";
    case CURAND_STATUS_TYPE_ERROR: return "CURAND_STATUS_TYPE_ERROR";
    case CURAND_STATUS_OUT_OF_RANGE: return "CURAND_STATUS_OUT_OF_RANGE";
    case CURAND_STATUS_LENGTH_NOT_MULTIPLE: return "CURAND_STATUS_LENGTH_NOT_MULTIPLE";
    case CURAND_STATUS_DOUBLE_PRECISION_REQUIRED: return "CURAND_STATUS_DOUBLE_PRECISION_REQUIRED";
    case CURAND_STATUS_LAUNCH_FAILURE: return "CURAND_STATUS_LAUNCH_FAILURE";
    case CURAND_STATUS_PREEXISTING_FAILURE: return "CURAND_STATUS_PREEXISTING_FAILURE";
    case CURAND_STATUS_INITIALIZATION_FAILED: return "CURAND_STATUS_INITIALIZATION_FAILED";
    case CURAND_STATUS_ARCH_MISMATCH: return "CURAND_STATUS_ARCH_MISMATCH";
    default: return "CURAND_STATUS_INTERNAL_ERROR";
  }
}
