// labkit_curand.h -- the generators of cuRAND's device API (curand_kernel.h) for labkit's CPU executor,
// also the engines of its host API (curand.h).
//
//   * XORWOW (curandState_t, curandStateXORWOW_t): Marsaglia's xorshift with a Weyl sequence, seeded and
//     stepped as cuRAND documents it; curand_init(seed, subsequence, offset) jumps 2^67 numbers per
//     subsequence, by powers of the generator's linear map (over GF(2)) computed once;
//   * Philox4x32-10 (curandStatePhilox4_32_10_t): the counter-based generator of Salmon et al.;
//   * Sobol (curandStateSobol32_t, curandStateSobol64_t): the Gray-code sequence of direction vectors from
//     Joe and Kuo's numbers (labkit_sobol_table.inc), curand_init(direction_vectors, offset).
//
// The conversions follow cuRAND's documented ones: a uniform float is x * 2^-32 + 2^-33 (in (0, 1]),
// a normal pair from two numbers by Box-Muller (the second one kept for the next call), a quasi-random
// normal by the inverse of the normal distribution function.  These follow cuRAND's documentation; that
// the device API's streams (after curand_init with a subsequence and an offset) equal NVIDIA's cuRAND
// bit for bit has not been checked on a GPU yet.  A float normal would differ in its last bits anyway
// (the GPU's sinf, cosf and logf are not the C library's), a quasi-random normal more (another inverse
// of the distribution function).  The host API's pseudo-random generators are not NVIDIA's layout
// (curand.h).  So a program that checks statistics (an estimate of pi, an option's price within its
// tolerance) passes; one that compares with numbers stored from a GPU run may not.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>

#define CURAND_2POW32_INV (2.3283064e-10f)
#define CURAND_2POW32_INV_DOUBLE (2.3283064365386963e-10)
#define CURAND_2POW53_INV_DOUBLE (1.1102230246251565e-16)
#define CURAND_2POW64_INV_DOUBLE (5.4210108624275222e-20)
#define CURAND_2POW32_INV_2PI (2.3283064e-10f * 6.2831855f)
#define CURAND_2PI (6.2831855f)
#define CURAND_PI_DOUBLE (3.1415926535897932)

typedef unsigned int curandDirectionVectors32_t[32];
typedef unsigned long long curandDirectionVectors64_t[64];

struct curandStateXORWOW {
  unsigned int d, v[5];
  int boxmuller_flag, boxmuller_flag_double;
  float boxmuller_extra;
  double boxmuller_extra_double;
};
typedef curandStateXORWOW curandStateXORWOW_t;
typedef curandStateXORWOW curandState_t;
typedef curandStateXORWOW curandState;

struct curandStatePhilox4_32_10 {
  uint4 ctr, output;
  uint2 key;
  unsigned int STATE;
  int boxmuller_flag, boxmuller_flag_double;
  float boxmuller_extra;
  double boxmuller_extra_double;
};
typedef curandStatePhilox4_32_10 curandStatePhilox4_32_10_t;

struct curandStateSobol32 { unsigned int i, x, c; unsigned int direction_vectors[32]; };
typedef curandStateSobol32 curandStateSobol32_t;
struct curandStateSobol64 { unsigned long long i, x, c; unsigned long long direction_vectors[64]; };
typedef curandStateSobol64 curandStateSobol64_t;

namespace labkit {
namespace rand {

// --- XORWOW ---------------------------------------------------------------------------------------
inline void xorwow_step(unsigned int v[5]) {
  unsigned int t = v[0] ^ (v[0] >> 2);
  v[0] = v[1]; v[1] = v[2]; v[2] = v[3]; v[3] = v[4];
  v[4] = (v[4] ^ (v[4] << 4)) ^ (t ^ (t << 1));
}
// The step's linear map on the 160 state bits, as 160 columns (the image of each unit vector), and
// its powers 2^k, k < 131: enough for an offset below 2^64 and a subsequence below 2^64 (2^67 apart).
struct Matrix { unsigned int col[160][5]; };
inline void apply(const Matrix& m, unsigned int v[5]) {
  unsigned int out[5] = {0, 0, 0, 0, 0};
  for (int j = 0; j < 160; ++j)
    if (v[j / 32] >> (j % 32) & 1u)
      for (int w = 0; w < 5; ++w) out[w] ^= m.col[j][w];
  std::memcpy(v, out, sizeof out);
}
constexpr int XORWOW_POWERS = 131;
inline const Matrix* xorwow_powers() {
  static Matrix* powers = [] {
    Matrix* p = new Matrix[XORWOW_POWERS];
    for (int j = 0; j < 160; ++j) {
      unsigned int v[5] = {0, 0, 0, 0, 0};
      v[j / 32] = 1u << (j % 32);
      xorwow_step(v);
      std::memcpy(p[0].col[j], v, sizeof v);
    }
    for (int k = 1; k < XORWOW_POWERS; ++k)
      for (int j = 0; j < 160; ++j) {
        std::memcpy(p[k].col[j], p[k - 1].col[j], sizeof p[k].col[j]);
        apply(p[k - 1], p[k].col[j]);
      }
    return p;
  }();
  return powers;
}
inline void xorwow_skip(unsigned long long n, int first_power, unsigned int v[5]) {
  const Matrix* p = xorwow_powers();
  for (int b = 0; b < 64 && n; ++b, n >>= 1)
    if (n & 1) apply(p[first_power + b], v);
}

// --- Philox4x32-10 --------------------------------------------------------------------------------
inline uint4 philox_rounds(uint4 c, uint2 k) {
  for (int r = 0; r < 10; ++r) {
    unsigned long long p0 = 0xD2511F53ull * c.x, p1 = 0xCD9E8D57ull * c.z;
    unsigned int hi0 = unsigned(p0 >> 32), lo0 = unsigned(p0), hi1 = unsigned(p1 >> 32), lo1 = unsigned(p1);
    c = uint4{hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0};
    k.x += 0x9E3779B9u;
    k.y += 0xBB67AE85u;
  }
  return c;
}
inline void philox_add(uint4& c, unsigned long long n) {
  unsigned long long lo = (unsigned long long)c.x | ((unsigned long long)c.y << 32);
  unsigned long long sum = lo + n;
  unsigned long long carry = sum < lo;
  c.x = unsigned(sum); c.y = unsigned(sum >> 32);
  if (carry) { if (++c.z == 0) ++c.w; }
}

// --- Sobol direction vectors (Joe and Kuo), for dimensions below LABKIT_SOBOL_DIMENSIONS ----------
#include "labkit_sobol_table.inc"
// m_1..m_bits of a dimension (0-based) by the recurrence of its primitive polynomial.
inline void sobol_m(int dim, int bits, unsigned long long* m) {
  if (dim == 0) { for (int k = 0; k < bits; ++k) m[k] = 1; return; }
  const unsigned short* row = labkit_sobol_table[dim];
  unsigned poly = row[0];
  int s = 0;
  while ((poly >> (s + 1)) != 0) ++s;
  for (int k = 0; k < s && k < bits; ++k) m[k] = row[1 + k];
  for (int k = s; k < bits; ++k) {
    unsigned long long v = m[k - s] ^ (m[k - s] << s);
    for (int i = 1; i < s; ++i)
      if (poly >> (s - i) & 1u) v ^= m[k - i] << i;
    m[k] = v;
  }
}
inline const curandDirectionVectors32_t* sobol32_vectors() {
  static curandDirectionVectors32_t* v = [] {
    auto* out = new curandDirectionVectors32_t[LABKIT_SOBOL_DIMENSIONS];
    unsigned long long m[64];
    for (int d = 0; d < LABKIT_SOBOL_DIMENSIONS; ++d) {
      sobol_m(d, 32, m);
      for (int k = 0; k < 32; ++k) out[d][k] = unsigned(m[k] << (31 - k));
    }
    return out;
  }();
  return v;
}
inline const curandDirectionVectors64_t* sobol64_vectors() {
  static curandDirectionVectors64_t* v = [] {
    auto* out = new curandDirectionVectors64_t[LABKIT_SOBOL_DIMENSIONS];
    unsigned long long m[64];
    for (int d = 0; d < LABKIT_SOBOL_DIMENSIONS; ++d) {
      sobol_m(d, 64, m);
      for (int k = 0; k < 64; ++k) out[d][k] = m[k] << (63 - k);
    }
    return out;
  }();
  return v;
}

// --- Conversions ----------------------------------------------------------------------------------
inline float uniform(unsigned int x) { return x * CURAND_2POW32_INV + (CURAND_2POW32_INV / 2.0f); }
inline double uniform_double(unsigned long long x) {
  return double(x) * CURAND_2POW64_INV_DOUBLE + (CURAND_2POW64_INV_DOUBLE / 2.0);
}
inline double uniform_double_hq(unsigned int x, unsigned int y) {
  unsigned long long z = (unsigned long long)x ^ ((unsigned long long)y << (53 - 32));
  return double(z) * CURAND_2POW53_INV_DOUBLE + (CURAND_2POW53_INV_DOUBLE / 2.0);
}
inline float2 box_muller(unsigned int x, unsigned int y) {
  float u = x * CURAND_2POW32_INV + (CURAND_2POW32_INV / 2);
  float v = y * CURAND_2POW32_INV_2PI + (CURAND_2POW32_INV_2PI / 2);
  float s = std::sqrt(-2.0f * std::log(u));
  return float2{std::sin(v) * s, std::cos(v) * s};
}
inline double2 box_muller_double(unsigned int x0, unsigned int x1, unsigned int y0, unsigned int y1) {
  double u = uniform_double_hq(x0, x1), v = uniform_double_hq(y0, y1) * 2.0 * CURAND_PI_DOUBLE;
  double s = std::sqrt(-2.0 * std::log(u));
  return double2{std::sin(v) * s, std::cos(v) * s};
}
// The inverse of the standard normal distribution function (Acklam's rational approximation, then one
// Halley step on erfc, which brings it to double precision) for the quasi-random normals.
inline double normal_icdf(double p) {
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                             1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01, -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                             3.754408661907416e+00};
  double x;
  if (p < 0.02425) {
    double q = std::sqrt(-2 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else if (p <= 1 - 0.02425) {
    double q = p - 0.5, r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  } else {
    double q = std::sqrt(-2 * std::log(1 - p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  double e = 0.5 * std::erfc(-x / std::sqrt(2.0)) - p;
  double u = e * std::sqrt(2 * CURAND_PI_DOUBLE) * std::exp(x * x / 2);
  return x - u / (1 + x * u / 2);
}

}  // namespace rand
}  // namespace labkit

// --- The device API -----------------------------------------------------------------------------------
// XORWOW: cuRAND's seeding of the five words and the Weyl counter from a 64-bit seed.
inline void curand_init(unsigned long long seed, unsigned long long subsequence, unsigned long long offset,
                        curandStateXORWOW_t* state) {
  unsigned int s0 = unsigned(seed) ^ 0xaad26b49u, s1 = unsigned(seed >> 32) ^ 0xf7dcefddu;
  unsigned int t0 = 1099087573u * s0, t1 = 2591861531u * s1;
  state->d = 6615241u + t1 + t0;
  state->v[0] = 123456789u + t0;
  state->v[1] = 362436069u ^ t0;
  state->v[2] = 521288629u + t1;
  state->v[3] = 88675123u ^ t1;
  state->v[4] = 5783321u + t0;
  ::labkit::rand::xorwow_skip(subsequence, 67, state->v);
  ::labkit::rand::xorwow_skip(offset, 0, state->v);
  state->d += unsigned(offset) * 362437u;
  state->boxmuller_flag = state->boxmuller_flag_double = 0;
  state->boxmuller_extra = 0.f;
  state->boxmuller_extra_double = 0.;
}
inline unsigned int curand(curandStateXORWOW_t* state) {
  ::labkit::rand::xorwow_step(state->v);
  state->d += 362437u;
  return state->v[4] + state->d;
}
inline void skipahead(unsigned long long n, curandStateXORWOW_t* state) {
  ::labkit::rand::xorwow_skip(n, 0, state->v);
  state->d += unsigned(n) * 362437u;
}
inline void skipahead_sequence(unsigned long long n, curandStateXORWOW_t* state) {
  ::labkit::rand::xorwow_skip(n, 67, state->v);
}

// Philox4x32-10: key from the seed, counter from the subsequence (high half) and the offset (low half).
inline void skipahead(unsigned long long n, curandStatePhilox4_32_10_t* state) {
  state->STATE += unsigned(n & 3);
  n /= 4;
  if (state->STATE > 3) { n += 1; state->STATE -= 4; }
  ::labkit::rand::philox_add(state->ctr, n);
  state->output = ::labkit::rand::philox_rounds(state->ctr, state->key);
}
inline void skipahead_sequence(unsigned long long n, curandStatePhilox4_32_10_t* state) {
  unsigned long long hi = (unsigned long long)state->ctr.z | ((unsigned long long)state->ctr.w << 32);
  hi += n;
  state->ctr.z = unsigned(hi); state->ctr.w = unsigned(hi >> 32);
  state->output = ::labkit::rand::philox_rounds(state->ctr, state->key);
}
inline void curand_init(unsigned long long seed, unsigned long long subsequence, unsigned long long offset,
                        curandStatePhilox4_32_10_t* state) {
  state->ctr = uint4{0, 0, 0, 0};
  state->key = uint2{unsigned(seed), unsigned(seed >> 32)};
  state->STATE = 0;
  state->boxmuller_flag = state->boxmuller_flag_double = 0;
  state->boxmuller_extra = 0.f;
  state->boxmuller_extra_double = 0.;
  state->ctr.z = unsigned(subsequence); state->ctr.w = unsigned(subsequence >> 32);
  state->output = ::labkit::rand::philox_rounds(state->ctr, state->key);
  skipahead(offset, state);
}
inline unsigned int curand(curandStatePhilox4_32_10_t* state) {
  unsigned int r = state->STATE == 0 ? state->output.x : state->STATE == 1 ? state->output.y
                 : state->STATE == 2 ? state->output.z : state->output.w;
  if (++state->STATE == 4) {
    state->STATE = 0;
    ::labkit::rand::philox_add(state->ctr, 1);
    state->output = ::labkit::rand::philox_rounds(state->ctr, state->key);
  }
  return r;
}
inline uint4 curand4(curandStatePhilox4_32_10_t* state) {
  uint4 r;
  r.x = curand(state); r.y = curand(state); r.z = curand(state); r.w = curand(state);
  return r;
}

// Sobol: the point of index offset (its Gray code's direction vectors), then one vector per step.
inline void skipahead(unsigned int n, curandStateSobol32_t* state) {
  state->x = state->c;
  state->i += n;
  unsigned int g = state->i ^ (state->i >> 1);
  for (int k = 0; k < 32; ++k)
    if (g >> k & 1u) state->x ^= state->direction_vectors[k];
}
inline void curand_init(const unsigned int* direction_vectors, unsigned int offset, curandStateSobol32_t* state) {
  state->i = 0;
  state->c = 0;
  std::memcpy(state->direction_vectors, direction_vectors, sizeof state->direction_vectors);
  skipahead(offset, state);
}
inline unsigned int curand(curandStateSobol32_t* state) {
  unsigned int r = state->x;
  state->x ^= state->direction_vectors[__builtin_ctz(~state->i)];
  state->i++;
  return r;
}
inline void skipahead(unsigned long long n, curandStateSobol64_t* state) {
  state->x = state->c;
  state->i += n;
  unsigned long long g = state->i ^ (state->i >> 1);
  for (int k = 0; k < 64; ++k)
    if (g >> k & 1ull) state->x ^= state->direction_vectors[k];
}
inline void curand_init(const unsigned long long* direction_vectors, unsigned long long offset,
                        curandStateSobol64_t* state) {
  state->i = 0;
  state->c = 0;
  std::memcpy(state->direction_vectors, direction_vectors, sizeof state->direction_vectors);
  skipahead(offset, state);
}
inline unsigned long long curand(curandStateSobol64_t* state) {
  unsigned long long r = state->x;
  state->x ^= state->direction_vectors[__builtin_ctzll(~state->i)];
  state->i++;
  return r;
}

// Uniform and normal numbers of the pseudo-random generators (XORWOW, Philox).
template <class S> struct labkit_curand_pseudo : std::false_type {};
template <> struct labkit_curand_pseudo<curandStateXORWOW_t> : std::true_type {};
template <> struct labkit_curand_pseudo<curandStatePhilox4_32_10_t> : std::true_type {};

template <class S, class = std::enable_if_t<labkit_curand_pseudo<S>::value>>
inline float curand_uniform(S* state) { return ::labkit::rand::uniform(curand(state)); }
template <class S, class = std::enable_if_t<labkit_curand_pseudo<S>::value>>
inline double curand_uniform_double(S* state) {
  unsigned int x = curand(state), y = curand(state);
  return ::labkit::rand::uniform_double_hq(x, y);
}
template <class S, class = std::enable_if_t<labkit_curand_pseudo<S>::value>>
inline float curand_normal(S* state) {
  if (state->boxmuller_flag != 1) {
    unsigned int x = curand(state), y = curand(state);
    float2 v = ::labkit::rand::box_muller(x, y);
    state->boxmuller_extra = v.y;
    state->boxmuller_flag = 1;
    return v.x;
  }
  state->boxmuller_flag = 0;
  return state->boxmuller_extra;
}
template <class S, class = std::enable_if_t<labkit_curand_pseudo<S>::value>>
inline double curand_normal_double(S* state) {
  if (state->boxmuller_flag_double != 1) {
    unsigned int x0 = curand(state), x1 = curand(state), y0 = curand(state), y1 = curand(state);
    double2 v = ::labkit::rand::box_muller_double(x0, x1, y0, y1);
    state->boxmuller_extra_double = v.y;
    state->boxmuller_flag_double = 1;
    return v.x;
  }
  state->boxmuller_flag_double = 0;
  return state->boxmuller_extra_double;
}
template <class S, class = std::enable_if_t<labkit_curand_pseudo<S>::value>>
inline float2 curand_normal2(S* state) {
  unsigned int x = curand(state), y = curand(state);
  return ::labkit::rand::box_muller(x, y);
}
template <class S, class = std::enable_if_t<labkit_curand_pseudo<S>::value>>
inline double2 curand_normal2_double(S* state) {
  unsigned int x0 = curand(state), x1 = curand(state), y0 = curand(state), y1 = curand(state);
  return ::labkit::rand::box_muller_double(x0, x1, y0, y1);
}
inline float4 curand_uniform4(curandStatePhilox4_32_10_t* state) {
  uint4 r = curand4(state);
  return float4{::labkit::rand::uniform(r.x), ::labkit::rand::uniform(r.y), ::labkit::rand::uniform(r.z),
                ::labkit::rand::uniform(r.w)};
}
inline float4 curand_normal4(curandStatePhilox4_32_10_t* state) {
  float2 a = curand_normal2(state), b = curand_normal2(state);
  return float4{a.x, a.y, b.x, b.y};
}

// Sobol: uniform numbers from the point's bits, normal ones by the inverse distribution function.
inline float curand_uniform(curandStateSobol32_t* state) { return ::labkit::rand::uniform(curand(state)); }
inline double curand_uniform_double(curandStateSobol32_t* state) {
  return double(curand(state)) * CURAND_2POW32_INV_DOUBLE + CURAND_2POW32_INV_DOUBLE / 2.0;
}
inline float curand_uniform(curandStateSobol64_t* state) { return ::labkit::rand::uniform(unsigned(curand(state) >> 32)); }
inline double curand_uniform_double(curandStateSobol64_t* state) { return ::labkit::rand::uniform_double(curand(state)); }
inline float curand_normal(curandStateSobol32_t* state) { return float(::labkit::rand::normal_icdf(curand_uniform_double(state))); }
inline double curand_normal_double(curandStateSobol32_t* state) { return ::labkit::rand::normal_icdf(curand_uniform_double(state)); }
inline float curand_normal(curandStateSobol64_t* state) { return float(::labkit::rand::normal_icdf(curand_uniform_double(state))); }
inline double curand_normal_double(curandStateSobol64_t* state) { return ::labkit::rand::normal_icdf(curand_uniform_double(state)); }

template <class S> inline float curand_log_normal(S* state, float mean, float stddev) {
  return std::exp(mean + stddev * curand_normal(state));
}
template <class S> inline double curand_log_normal_double(S* state, double mean, double stddev) {
  return std::exp(mean + stddev * curand_normal_double(state));
}
