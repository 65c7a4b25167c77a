// cuda_bf16.h for labkit's CPU executor: __nv_bfloat16 and __nv_bfloat162 (bfloat16 storage: float's
// sign and 8-bit exponent, 7 significand bits), their conversions, and the intrinsics and operators
// that share cuda_fp16.h's names (__hadd, __hfma2, ...).  Each operation is computed in double and
// rounded once to bfloat16, to nearest even: the GPU's one rounding, for the reasons cuda_fp16.h gives
// (add, sub, mul and div need 2*8+1 bits of double's 53; fma rounds a*b + c to odd first, since
// rounded to nearest, 1.5 * (1 + 2^-7) - 2^-100 would become a midpoint and tie to the wrong side).
#pragma once
#include <cmath>
#include "labkit_half_round.h"

struct __nv_bfloat16_raw { unsigned short x; };
struct __nv_bfloat162_raw { unsigned short x, y; };

struct __nv_bfloat16 {
  unsigned short __x;
  __nv_bfloat16() = default;
  __nv_bfloat16(const __nv_bfloat16_raw& r) : __x(r.x) {}
  __nv_bfloat16(float f) : __x(::labkit::fp16::round_double<7, 127>(f)) {}
  __nv_bfloat16(double d) : __x(::labkit::fp16::round_double<7, 127>(d)) {}
  __nv_bfloat16(int i) : __x(::labkit::fp16::round_double<7, 127>(i)) {}
  __nv_bfloat16(unsigned i) : __x(::labkit::fp16::round_double<7, 127>(i)) {}
  __nv_bfloat16(long long i) : __x(::labkit::fp16::round_double<7, 127>(double(i))) {}
  __nv_bfloat16(unsigned long long i) : __x(::labkit::fp16::round_double<7, 127>(double(i))) {}
  __nv_bfloat16(short i) : __x(::labkit::fp16::round_double<7, 127>(i)) {}
  __nv_bfloat16(unsigned short i) : __x(::labkit::fp16::round_double<7, 127>(i)) {}
  operator __nv_bfloat16_raw() const { return __nv_bfloat16_raw{__x}; }
  operator float() const { return static_cast<float>(::labkit::fp16::widen<7, 127>(__x)); }
};

struct __nv_bfloat162 {
  __nv_bfloat16 x, y;
  __nv_bfloat162() = default;
  __nv_bfloat162(const __nv_bfloat16& a, const __nv_bfloat16& b) : x(a), y(b) {}
  __nv_bfloat162(const __nv_bfloat162_raw& r) { x.__x = r.x; y.__x = r.y; }
  operator __nv_bfloat162_raw() const { return __nv_bfloat162_raw{x.__x, y.__x}; }
};

typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;

namespace labkit {
namespace fp16 {
template <> inline __nv_bfloat16 make<__nv_bfloat16>(double v) {
  __nv_bfloat16 h;
  h.__x = round_double<7, 127>(v);
  return h;
}
inline double d(__nv_bfloat16 h) { return widen<7, 127>(h.__x); }
}  // namespace fp16
}  // namespace labkit

// Conversions (host and device).
inline __nv_bfloat16 __float2bfloat16(float f) { return ::labkit::fp16::make<__nv_bfloat16>(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return ::labkit::fp16::make<__nv_bfloat16>(f); }
inline __nv_bfloat16 __double2bfloat16(double v) { return ::labkit::fp16::make<__nv_bfloat16>(v); }
inline float __bfloat162float(__nv_bfloat16 h) { return static_cast<float>(::labkit::fp16::d(h)); }
inline __nv_bfloat162 __float2bfloat162_rn(float f) {
  __nv_bfloat16 h = __float2bfloat16_rn(f);
  return __nv_bfloat162(h, h);
}
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
  return __nv_bfloat162(__float2bfloat16_rn(a), __float2bfloat16_rn(b));
}
inline __nv_bfloat162 __float22bfloat162_rn(float2 v) {
  return __nv_bfloat162(__float2bfloat16_rn(v.x), __float2bfloat16_rn(v.y));
}
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return float2{__bfloat162float(h.x), __bfloat162float(h.y)}; }
inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 h) { return h.x; }
inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 h) { return h.y; }
inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 lo, __nv_bfloat16 hi) { return __nv_bfloat162(lo, hi); }
inline __nv_bfloat162 __bfloat162bfloat162(__nv_bfloat16 h) { return __nv_bfloat162(h, h); }
inline short __bfloat16_as_short(__nv_bfloat16 h) { return static_cast<short>(h.__x); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __short_as_bfloat16(short s) { __nv_bfloat16 h; h.__x = static_cast<unsigned short>(s); return h; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short s) { __nv_bfloat16 h; h.__x = s; return h; }

#define LABKIT_H __nv_bfloat16
#define LABKIT_H2 __nv_bfloat162
#include "labkit_half_ops.h"
#undef LABKIT_H
#undef LABKIT_H2
