// cuda_fp16.h for labkit's CPU executor: __half and __half2 (IEEE binary16 storage), the conversions,
// the arithmetic and comparison intrinsics and the operators cuda_fp16.hpp gives device code.  Plain
// C++, so host and device code of a program share it, as they do on a GPU.
//
// Rounding.  A GPU computes each half operation in fp16 with one rounding to nearest even (fma: one
// rounding of a*b+c).  Here each is computed in double and the result rounded once to half, which
// gives the correctly rounded half in every case:
//  - add, sub, mul, div: double's 53 bits are at least 2*11+1, so rounding to double and then to half
//    is the same as rounding once (Figueroa, "When is double rounding innocuous?", 1995); add, sub
//    and mul of two halves are even exact in double (a sum spans at most 40 bits, a product 22).
//  - fma: a*b is exact in double (22 bits), and a*b + c is rounded to odd in double (sum_to_odd in
//    labkit_half_round.h) before it is rounded to half: rounding to odd with 2 bits or more to spare
//    makes the second rounding the one correct rounding.  Rounded to nearest instead, the sum can land
//    on a midpoint between two halves that it is not: in float, (2^-11 (1 + 2^-10)) (1 - 2^-10) +
//    (1 + 2^-10) = 1 + 3 * 2^-11 - 2^-31 becomes 1 + 3 * 2^-11, which ties to even (0x3c02) where the
//    fma gives 0x3c01.
// Conversions from float or double go straight to half (not through float, which could round twice).
#pragma once
#include <cmath>
#include "labkit_half_round.h"

struct __half_raw { unsigned short x; };
struct __half2_raw { unsigned short x, y; };

struct __half {
  unsigned short __x;
  __half() = default;
  __half(const __half_raw& r) : __x(r.x) {}
  __half(float f) : __x(::labkit::fp16::round_double<10, 15>(f)) {}
  __half(double d) : __x(::labkit::fp16::round_double<10, 15>(d)) {}
  __half(int i) : __x(::labkit::fp16::round_double<10, 15>(i)) {}
  __half(unsigned i) : __x(::labkit::fp16::round_double<10, 15>(i)) {}
  __half(long long i) : __x(::labkit::fp16::round_double<10, 15>(double(i))) {}
  __half(unsigned long long i) : __x(::labkit::fp16::round_double<10, 15>(double(i))) {}
  __half(short i) : __x(::labkit::fp16::round_double<10, 15>(i)) {}
  __half(unsigned short i) : __x(::labkit::fp16::round_double<10, 15>(i)) {}
  operator __half_raw() const { return __half_raw{__x}; }
  operator float() const { return static_cast<float>(::labkit::fp16::widen<10, 15>(__x)); }
};

struct __half2 {
  __half x, y;
  __half2() = default;
  __half2(const __half& a, const __half& b) : x(a), y(b) {}
  __half2(const __half2_raw& r) { x.__x = r.x; y.__x = r.y; }
  operator __half2_raw() const { return __half2_raw{x.__x, y.__x}; }
};

typedef __half half;
typedef __half2 half2;

namespace labkit {
namespace fp16 {
template <> inline __half make<__half>(double v) { __half h; h.__x = round_double<10, 15>(v); return h; }
inline double d(__half h) { return widen<10, 15>(h.__x); }
}  // namespace fp16
}  // namespace labkit

// Conversions (host and device).
inline __half __float2half(float f) { return ::labkit::fp16::make<__half>(f); }
inline __half __float2half_rn(float f) { return ::labkit::fp16::make<__half>(f); }
inline __half __double2half(double v) { return ::labkit::fp16::make<__half>(v); }
inline float __half2float(__half h) { return static_cast<float>(::labkit::fp16::d(h)); }
inline __half2 __float2half2_rn(float f) { __half h = __float2half_rn(f); return __half2(h, h); }
inline __half2 __floats2half2_rn(float a, float b) { return __half2(__float2half_rn(a), __float2half_rn(b)); }
inline __half2 __float22half2_rn(float2 v) { return __half2(__float2half_rn(v.x), __float2half_rn(v.y)); }
inline float2 __half22float2(__half2 h) { return float2{__half2float(h.x), __half2float(h.y)}; }
inline __half __low2half(__half2 h) { return h.x; }
inline __half __high2half(__half2 h) { return h.y; }
inline __half2 __halves2half2(__half lo, __half hi) { return __half2(lo, hi); }
inline __half2 __half2half2(__half h) { return __half2(h, h); }
inline short __half_as_short(__half h) { return static_cast<short>(h.__x); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __short_as_half(short s) { __half h; h.__x = static_cast<unsigned short>(s); return h; }
inline __half __ushort_as_half(unsigned short s) { __half h; h.__x = s; return h; }
inline int __half2int_rz(__half h) { return static_cast<int>(__half2float(h)); }
inline __half __int2half_rn(int i) { return ::labkit::fp16::make<__half>(i); }

#define LABKIT_H __half
#define LABKIT_H2 __half2
#include "labkit_half_ops.h"
#undef LABKIT_H
#undef LABKIT_H2
