// cuda_fp16.h for labkit's CPU executor: __half and __half2 (IEEE binary16 storage), the conversions,
// the arithmetic and comparison intrinsics and the operators cuda_fp16.hpp gives device code.  Plain
// C++, so host and device code of a program share it, as they do on a GPU.
//
// Rounding.  A GPU computes each half operation in fp16 with one rounding to nearest even (fma: one
// rounding of a*b+c).  Here each is computed in double and the result rounded once to half.  That
// double rounding (exact result -> double -> half) gives the correctly rounded half in every case:
//  - add, sub, mul, div: double's 53 bits are at least 2*11+1, so rounding to double and then to half
//    is the same as rounding once (Figueroa, "When is double rounding innocuous?", 1995); add, sub
//    and mul of two halves are even exact in double (a sum spans at most 40 bits, a product 22).
//  - fma: a*b is exact in double (22 bits).  Rounding twice goes wrong only where the exact x = a*b+c
//    rounds to double exactly onto a midpoint between two halves without being one: x = mid + d with
//    0 < |d| <= 2^(e-53) where |x| is about 2^e (a double's half ulp), so a*b = (mid - c) + d.  Midpoints
//    are odd multiples of 2^(e-11).  If c has no bits below 2^(e-11), mid - c is a nonzero multiple of
//    2^(e-11) and a*b would span from 2^(e-11) down to d, over 40 bits.  If c has bits below 2^(e-11),
//    |c| < 2^(e-1), so |mid - c| > 2^(e-2) and a*b would span over 50 bits.  A product of two halves
//    spans 22 at most: rounding the double to half is the one correct rounding.  (Below 2^-14, x is
//    a multiple of 2^-48 of at most 35 bits, exact in double.)
// Float would not do for fma: (2^-11 (1 + 2^-10)) (1 - 2^-10) + (1 + 2^-10) = 1 + 3 * 2^-11 - 2^-31 rounds to
// the midpoint 1 + 3 * 2^-11 in float, which ties to even (0x3c02) where the fma gives 0x3c01.
// Conversions from float or double go straight to half (not through float, which could round twice).
#pragma once
#include <cmath>
#include <cstring>

struct __half_raw { unsigned short x; };
struct __half2_raw { unsigned short x, y; };

namespace labkit {
namespace fp16 {
// Round a double to the nearest binary16, ties to even, with subnormals, overflow to infinity and NaN.
inline unsigned short from_double(double v) {
  unsigned short sign = std::signbit(v) ? 0x8000 : 0;
  if (std::isnan(v)) return 0x7fff;          // the canonical NaN a GPU's conversion gives
  double a = std::fabs(v);
  if (a >= 65520.0) return sign | 0x7c00;    // 65520 is the midpoint of 65504 and 2^16: ties to even -> inf
  if (a < 0x1p-14) {                          // subnormal (or zero): multiples of 2^-24
    // a * 2^24 is exact; nearbyint rounds ties to even in the default rounding mode.  1024 is the
    // smallest normal's bits, as it should be.
    return sign | static_cast<unsigned short>(std::nearbyint(a * 0x1p24));
  }
  int k;
  std::frexp(a, &k);                          // a = m * 2^k, m in [0.5, 1)
  double r = std::nearbyint(std::ldexp(a, 11 - k));   // the 11-bit significand, in [1024, 2048]
  if (r == 2048.0) { r = 1024.0; ++k; }
  unsigned e = static_cast<unsigned>(k - 1 + 15);
  return sign | static_cast<unsigned short>((e << 10) | (static_cast<unsigned>(r) - 1024u));
}
inline double to_double(unsigned short h) {
  unsigned e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 0x1f) return m ? NAN : s * INFINITY;
  if (e == 0) return s * std::ldexp(double(m), -24);
  return s * std::ldexp(double(m | 0x400), int(e) - 25);
}
}  // namespace fp16
}  // namespace labkit

struct __half {
  unsigned short __x;
  __half() = default;
  __half(const __half_raw& r) : __x(r.x) {}
  __half(float f) : __x(::labkit::fp16::from_double(f)) {}
  __half(double d) : __x(::labkit::fp16::from_double(d)) {}
  __half(int i) : __x(::labkit::fp16::from_double(i)) {}
  __half(unsigned i) : __x(::labkit::fp16::from_double(i)) {}
  __half(long long i) : __x(::labkit::fp16::from_double(double(i))) {}
  __half(unsigned long long i) : __x(::labkit::fp16::from_double(double(i))) {}
  __half(short i) : __x(::labkit::fp16::from_double(i)) {}
  __half(unsigned short i) : __x(::labkit::fp16::from_double(i)) {}
  operator __half_raw() const { return __half_raw{__x}; }
  operator float() const { return static_cast<float>(::labkit::fp16::to_double(__x)); }
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
inline __half make(double v) { __half h; h.__x = from_double(v); return h; }
inline double d(__half h) { return to_double(h.__x); }
}  // namespace fp16
}  // namespace labkit

// Conversions (host and device).
inline __half __float2half(float f) { return ::labkit::fp16::make(f); }
inline __half __float2half_rn(float f) { return ::labkit::fp16::make(f); }
inline __half __double2half(double v) { return ::labkit::fp16::make(v); }
inline float __half2float(__half h) { return static_cast<float>(::labkit::fp16::d(h)); }
inline __half2 __float2half2_rn(float f) { __half h = __float2half_rn(f); return __half2(h, h); }
inline __half2 __floats2half2_rn(float a, float b) { return __half2(__float2half_rn(a), __float2half_rn(b)); }
inline __half2 __float22half2_rn(float2 v) { return __half2(__float2half_rn(v.x), __float2half_rn(v.y)); }
inline float2 __half22float2(__half2 h) { return float2{__half2float(h.x), __half2float(h.y)}; }
inline float __low2float(__half2 h) { return __half2float(h.x); }
inline float __high2float(__half2 h) { return __half2float(h.y); }
inline __half __low2half(__half2 h) { return h.x; }
inline __half __high2half(__half2 h) { return h.y; }
inline __half2 __halves2half2(__half lo, __half hi) { return __half2(lo, hi); }
inline __half2 __half2half2(__half h) { return __half2(h, h); }
inline __half2 __lows2half2(__half2 a, __half2 b) { return __half2(a.x, b.x); }
inline __half2 __highs2half2(__half2 a, __half2 b) { return __half2(a.y, b.y); }
inline __half2 __lowhigh2highlow(__half2 h) { return __half2(h.y, h.x); }
inline short __half_as_short(__half h) { return static_cast<short>(h.__x); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __short_as_half(short s) { __half h; h.__x = static_cast<unsigned short>(s); return h; }
inline __half __ushort_as_half(unsigned short s) { __half h; h.__x = s; return h; }
inline int __half2int_rz(__half h) { return static_cast<int>(__half2float(h)); }
inline __half __int2half_rn(int i) { return ::labkit::fp16::make(i); }

// Arithmetic: computed in double, one rounding to half (see the top of this file).
inline __half __hadd(__half a, __half b) { return ::labkit::fp16::make(::labkit::fp16::d(a) + ::labkit::fp16::d(b)); }
inline __half __hsub(__half a, __half b) { return ::labkit::fp16::make(::labkit::fp16::d(a) - ::labkit::fp16::d(b)); }
inline __half __hmul(__half a, __half b) { return ::labkit::fp16::make(::labkit::fp16::d(a) * ::labkit::fp16::d(b)); }
inline __half __hdiv(__half a, __half b) { return ::labkit::fp16::make(::labkit::fp16::d(a) / ::labkit::fp16::d(b)); }
inline __half __hfma(__half a, __half b, __half c) {
  return ::labkit::fp16::make(::labkit::fp16::d(a) * ::labkit::fp16::d(b) + ::labkit::fp16::d(c));
}
inline __half __hneg(__half a) { a.__x ^= 0x8000; return a; }
inline __half __habs(__half a) { a.__x &= 0x7fff; return a; }
inline bool __hisnan(__half a) { return (a.__x & 0x7fff) > 0x7c00; }
inline bool __hisinf(__half a) { return (a.__x & 0x7fff) == 0x7c00; }

// Comparisons: ordered (false where either is NaN) and the unordered __h..u forms (true there).
inline bool __heq(__half a, __half b) { return ::labkit::fp16::d(a) == ::labkit::fp16::d(b); }
inline bool __hne(__half a, __half b) { return !__hisnan(a) && !__hisnan(b) && ::labkit::fp16::d(a) != ::labkit::fp16::d(b); }
inline bool __hlt(__half a, __half b) { return ::labkit::fp16::d(a) < ::labkit::fp16::d(b); }
inline bool __hle(__half a, __half b) { return ::labkit::fp16::d(a) <= ::labkit::fp16::d(b); }
inline bool __hgt(__half a, __half b) { return ::labkit::fp16::d(a) > ::labkit::fp16::d(b); }
inline bool __hge(__half a, __half b) { return ::labkit::fp16::d(a) >= ::labkit::fp16::d(b); }
inline bool __hequ(__half a, __half b) { return !(::labkit::fp16::d(a) != ::labkit::fp16::d(b)) || __hisnan(a) || __hisnan(b); }
inline bool __hneu(__half a, __half b) { return ::labkit::fp16::d(a) != ::labkit::fp16::d(b); }
inline bool __hltu(__half a, __half b) { return !(::labkit::fp16::d(a) >= ::labkit::fp16::d(b)); }
inline bool __hleu(__half a, __half b) { return !(::labkit::fp16::d(a) > ::labkit::fp16::d(b)); }
inline bool __hgtu(__half a, __half b) { return !(::labkit::fp16::d(a) <= ::labkit::fp16::d(b)); }
inline bool __hgeu(__half a, __half b) { return !(::labkit::fp16::d(a) < ::labkit::fp16::d(b)); }
inline __half __hmax(__half a, __half b) {   // the other where one is NaN, as the GPU's max.f16
  if (__hisnan(a)) return b;
  if (__hisnan(b)) return a;
  return __hgt(a, b) ? a : b;
}
inline __half __hmin(__half a, __half b) {
  if (__hisnan(a)) return b;
  if (__hisnan(b)) return a;
  return __hlt(a, b) ? a : b;
}

// The half2 forms: each half on its own.
inline __half2 __hadd2(__half2 a, __half2 b) { return __half2(__hadd(a.x, b.x), __hadd(a.y, b.y)); }
inline __half2 __hsub2(__half2 a, __half2 b) { return __half2(__hsub(a.x, b.x), __hsub(a.y, b.y)); }
inline __half2 __hmul2(__half2 a, __half2 b) { return __half2(__hmul(a.x, b.x), __hmul(a.y, b.y)); }
inline __half2 __h2div(__half2 a, __half2 b) { return __half2(__hdiv(a.x, b.x), __hdiv(a.y, b.y)); }
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) {
  return __half2(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y));
}
inline __half2 __hneg2(__half2 a) { return __half2(__hneg(a.x), __hneg(a.y)); }
inline __half2 __habs2(__half2 a) { return __half2(__habs(a.x), __habs(a.y)); }
inline __half2 __hmax2(__half2 a, __half2 b) { return __half2(__hmax(a.x, b.x), __hmax(a.y, b.y)); }
inline __half2 __hmin2(__half2 a, __half2 b) { return __half2(__hmin(a.x, b.x), __hmin(a.y, b.y)); }
// Comparisons of half2: 1.0 or 0.0 in each half (__heq2 ...), or true where both hold (__hbeq2 ...).
#define LABKIT_HALF2_PAIR(op)                                                                       \
  inline __half2 __h##op##2(__half2 a, __half2 b) {                                                 \
    return __half2(__half(__h##op(a.x, b.x) ? 1.0f : 0.0f), __half(__h##op(a.y, b.y) ? 1.0f : 0.0f)); \
  }                                                                                                 \
  inline bool __hb##op##2(__half2 a, __half2 b) { return __h##op(a.x, b.x) && __h##op(a.y, b.y); }
LABKIT_HALF2_PAIR(eq) LABKIT_HALF2_PAIR(ne) LABKIT_HALF2_PAIR(lt) LABKIT_HALF2_PAIR(le)
LABKIT_HALF2_PAIR(gt) LABKIT_HALF2_PAIR(ge)
#undef LABKIT_HALF2_PAIR
inline __half2 __hisnan2(__half2 a) {
  return __half2(__half(__hisnan(a.x) ? 1.0f : 0.0f), __half(__hisnan(a.y) ? 1.0f : 0.0f));
}

// Operators, as cuda_fp16.hpp gives them.
inline __half operator+(const __half& a, const __half& b) { return __hadd(a, b); }
inline __half operator-(const __half& a, const __half& b) { return __hsub(a, b); }
inline __half operator*(const __half& a, const __half& b) { return __hmul(a, b); }
inline __half operator/(const __half& a, const __half& b) { return __hdiv(a, b); }
inline __half& operator+=(__half& a, const __half& b) { return a = __hadd(a, b); }
inline __half& operator-=(__half& a, const __half& b) { return a = __hsub(a, b); }
inline __half& operator*=(__half& a, const __half& b) { return a = __hmul(a, b); }
inline __half& operator/=(__half& a, const __half& b) { return a = __hdiv(a, b); }
inline __half operator+(const __half& a) { return a; }
inline __half operator-(const __half& a) { return __hneg(a); }
inline __half& operator++(__half& a) { return a = __hadd(a, __half(1.0f)); }
inline __half& operator--(__half& a) { return a = __hsub(a, __half(1.0f)); }
inline __half operator++(__half& a, int) { __half r = a; ++a; return r; }
inline __half operator--(__half& a, int) { __half r = a; --a; return r; }
inline bool operator==(const __half& a, const __half& b) { return __heq(a, b); }
inline bool operator!=(const __half& a, const __half& b) { return __hneu(a, b); }
inline bool operator<(const __half& a, const __half& b) { return __hlt(a, b); }
inline bool operator<=(const __half& a, const __half& b) { return __hle(a, b); }
inline bool operator>(const __half& a, const __half& b) { return __hgt(a, b); }
inline bool operator>=(const __half& a, const __half& b) { return __hge(a, b); }

inline __half2 operator+(const __half2& a, const __half2& b) { return __hadd2(a, b); }
inline __half2 operator-(const __half2& a, const __half2& b) { return __hsub2(a, b); }
inline __half2 operator*(const __half2& a, const __half2& b) { return __hmul2(a, b); }
inline __half2 operator/(const __half2& a, const __half2& b) { return __h2div(a, b); }
inline __half2& operator+=(__half2& a, const __half2& b) { return a = __hadd2(a, b); }
inline __half2& operator-=(__half2& a, const __half2& b) { return a = __hsub2(a, b); }
inline __half2& operator*=(__half2& a, const __half2& b) { return a = __hmul2(a, b); }
inline __half2& operator/=(__half2& a, const __half2& b) { return a = __h2div(a, b); }
inline __half2 operator+(const __half2& a) { return a; }
inline __half2 operator-(const __half2& a) { return __hneg2(a); }
inline bool operator==(const __half2& a, const __half2& b) { return __hbeq2(a, b); }
inline bool operator!=(const __half2& a, const __half2& b) { return __hbne2(a, b); }
inline bool operator<(const __half2& a, const __half2& b) { return __hblt2(a, b); }
inline bool operator<=(const __half2& a, const __half2& b) { return __hble2(a, b); }
inline bool operator>(const __half2& a, const __half2& b) { return __hbgt2(a, b); }
inline bool operator>=(const __half2& a, const __half2& b) { return __hbge2(a, b); }
