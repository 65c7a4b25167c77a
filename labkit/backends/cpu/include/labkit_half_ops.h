// The arithmetic, comparisons and operators of cuda_fp16.h and cuda_bf16.h, which share their names
// (__hadd, __hfma2, ...): included once per type, with LABKIT_H the scalar type and LABKIT_H2 the pair
// (x, y members), after ::labkit::fp16::make<LABKIT_H> and d(LABKIT_H) are declared.  No include guard:
// each inclusion is for one type.
#include <cmath>

inline float __low2float(LABKIT_H2 h) { return static_cast<float>(::labkit::fp16::d(h.x)); }
inline float __high2float(LABKIT_H2 h) { return static_cast<float>(::labkit::fp16::d(h.y)); }
inline LABKIT_H2 __lows2half2(LABKIT_H2 a, LABKIT_H2 b) { return LABKIT_H2(a.x, b.x); }
inline LABKIT_H2 __highs2half2(LABKIT_H2 a, LABKIT_H2 b) { return LABKIT_H2(a.y, b.y); }
inline LABKIT_H2 __lowhigh2highlow(LABKIT_H2 h) { return LABKIT_H2(h.y, h.x); }

// Arithmetic: computed in double, one rounding to half (see the top of this file).
inline LABKIT_H __hadd(LABKIT_H a, LABKIT_H b) { return ::labkit::fp16::make<LABKIT_H>(::labkit::fp16::d(a) + ::labkit::fp16::d(b)); }
inline LABKIT_H __hsub(LABKIT_H a, LABKIT_H b) { return ::labkit::fp16::make<LABKIT_H>(::labkit::fp16::d(a) - ::labkit::fp16::d(b)); }
inline LABKIT_H __hmul(LABKIT_H a, LABKIT_H b) { return ::labkit::fp16::make<LABKIT_H>(::labkit::fp16::d(a) * ::labkit::fp16::d(b)); }
inline LABKIT_H __hdiv(LABKIT_H a, LABKIT_H b) { return ::labkit::fp16::make<LABKIT_H>(::labkit::fp16::d(a) / ::labkit::fp16::d(b)); }
inline LABKIT_H __hfma(LABKIT_H a, LABKIT_H b, LABKIT_H c) {
  return ::labkit::fp16::make<LABKIT_H>(::labkit::fp16::sum_to_odd(::labkit::fp16::d(a) * ::labkit::fp16::d(b),
                                                                   ::labkit::fp16::d(c)));
}
inline LABKIT_H __hneg(LABKIT_H a) { a.__x ^= 0x8000; return a; }
inline LABKIT_H __habs(LABKIT_H a) { a.__x &= 0x7fff; return a; }
inline bool __hisnan(LABKIT_H a) { return std::isnan(::labkit::fp16::d(a)); }
inline bool __hisinf(LABKIT_H a) { return std::isinf(::labkit::fp16::d(a)); }

// Comparisons: ordered (false where either is NaN) and the unordered __h..u forms (true there).
inline bool __heq(LABKIT_H a, LABKIT_H b) { return ::labkit::fp16::d(a) == ::labkit::fp16::d(b); }
inline bool __hne(LABKIT_H a, LABKIT_H b) { return !__hisnan(a) && !__hisnan(b) && ::labkit::fp16::d(a) != ::labkit::fp16::d(b); }
inline bool __hlt(LABKIT_H a, LABKIT_H b) { return ::labkit::fp16::d(a) < ::labkit::fp16::d(b); }
inline bool __hle(LABKIT_H a, LABKIT_H b) { return ::labkit::fp16::d(a) <= ::labkit::fp16::d(b); }
inline bool __hgt(LABKIT_H a, LABKIT_H b) { return ::labkit::fp16::d(a) > ::labkit::fp16::d(b); }
inline bool __hge(LABKIT_H a, LABKIT_H b) { return ::labkit::fp16::d(a) >= ::labkit::fp16::d(b); }
inline bool __hequ(LABKIT_H a, LABKIT_H b) { return !(::labkit::fp16::d(a) != ::labkit::fp16::d(b)) || __hisnan(a) || __hisnan(b); }
inline bool __hneu(LABKIT_H a, LABKIT_H b) { return ::labkit::fp16::d(a) != ::labkit::fp16::d(b); }
inline bool __hltu(LABKIT_H a, LABKIT_H b) { return !(::labkit::fp16::d(a) >= ::labkit::fp16::d(b)); }
inline bool __hleu(LABKIT_H a, LABKIT_H b) { return !(::labkit::fp16::d(a) > ::labkit::fp16::d(b)); }
inline bool __hgtu(LABKIT_H a, LABKIT_H b) { return !(::labkit::fp16::d(a) <= ::labkit::fp16::d(b)); }
inline bool __hgeu(LABKIT_H a, LABKIT_H b) { return !(::labkit::fp16::d(a) < ::labkit::fp16::d(b)); }
inline LABKIT_H __hmax(LABKIT_H a, LABKIT_H b) {   // the other where one is NaN, as the GPU's max.f16
  if (__hisnan(a)) return b;
  if (__hisnan(b)) return a;
  return __hgt(a, b) ? a : b;
}
inline LABKIT_H __hmin(LABKIT_H a, LABKIT_H b) {
  if (__hisnan(a)) return b;
  if (__hisnan(b)) return a;
  return __hlt(a, b) ? a : b;
}

// The half2 forms: each half on its own.
inline LABKIT_H2 __hadd2(LABKIT_H2 a, LABKIT_H2 b) { return LABKIT_H2(__hadd(a.x, b.x), __hadd(a.y, b.y)); }
inline LABKIT_H2 __hsub2(LABKIT_H2 a, LABKIT_H2 b) { return LABKIT_H2(__hsub(a.x, b.x), __hsub(a.y, b.y)); }
inline LABKIT_H2 __hmul2(LABKIT_H2 a, LABKIT_H2 b) { return LABKIT_H2(__hmul(a.x, b.x), __hmul(a.y, b.y)); }
inline LABKIT_H2 __h2div(LABKIT_H2 a, LABKIT_H2 b) { return LABKIT_H2(__hdiv(a.x, b.x), __hdiv(a.y, b.y)); }
inline LABKIT_H2 __hfma2(LABKIT_H2 a, LABKIT_H2 b, LABKIT_H2 c) {
  return LABKIT_H2(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y));
}
inline LABKIT_H2 __hneg2(LABKIT_H2 a) { return LABKIT_H2(__hneg(a.x), __hneg(a.y)); }
inline LABKIT_H2 __habs2(LABKIT_H2 a) { return LABKIT_H2(__habs(a.x), __habs(a.y)); }
inline LABKIT_H2 __hmax2(LABKIT_H2 a, LABKIT_H2 b) { return LABKIT_H2(__hmax(a.x, b.x), __hmax(a.y, b.y)); }
inline LABKIT_H2 __hmin2(LABKIT_H2 a, LABKIT_H2 b) { return LABKIT_H2(__hmin(a.x, b.x), __hmin(a.y, b.y)); }
// Comparisons of half2: 1.0 or 0.0 in each half (__heq2 ...), or true where both hold (__hbeq2 ...).
#define LABKIT_HALF2_PAIR(op)                                                                       \
  inline LABKIT_H2 __h##op##2(LABKIT_H2 a, LABKIT_H2 b) {                                                 \
    return LABKIT_H2(LABKIT_H(__h##op(a.x, b.x) ? 1.0f : 0.0f), LABKIT_H(__h##op(a.y, b.y) ? 1.0f : 0.0f)); \
  }                                                                                                 \
  inline bool __hb##op##2(LABKIT_H2 a, LABKIT_H2 b) { return __h##op(a.x, b.x) && __h##op(a.y, b.y); }
LABKIT_HALF2_PAIR(eq) LABKIT_HALF2_PAIR(ne) LABKIT_HALF2_PAIR(lt) LABKIT_HALF2_PAIR(le)
LABKIT_HALF2_PAIR(gt) LABKIT_HALF2_PAIR(ge)
#undef LABKIT_HALF2_PAIR
inline LABKIT_H2 __hisnan2(LABKIT_H2 a) {
  return LABKIT_H2(LABKIT_H(__hisnan(a.x) ? 1.0f : 0.0f), LABKIT_H(__hisnan(a.y) ? 1.0f : 0.0f));
}

// Operators, as cuda_fp16.hpp and cuda_bf16.hpp give them.
inline LABKIT_H operator+(const LABKIT_H& a, const LABKIT_H& b) { return __hadd(a, b); }
inline LABKIT_H operator-(const LABKIT_H& a, const LABKIT_H& b) { return __hsub(a, b); }
inline LABKIT_H operator*(const LABKIT_H& a, const LABKIT_H& b) { return __hmul(a, b); }
inline LABKIT_H operator/(const LABKIT_H& a, const LABKIT_H& b) { return __hdiv(a, b); }
inline LABKIT_H& operator+=(LABKIT_H& a, const LABKIT_H& b) { return a = __hadd(a, b); }
inline LABKIT_H& operator-=(LABKIT_H& a, const LABKIT_H& b) { return a = __hsub(a, b); }
inline LABKIT_H& operator*=(LABKIT_H& a, const LABKIT_H& b) { return a = __hmul(a, b); }
inline LABKIT_H& operator/=(LABKIT_H& a, const LABKIT_H& b) { return a = __hdiv(a, b); }
inline LABKIT_H operator+(const LABKIT_H& a) { return a; }
inline LABKIT_H operator-(const LABKIT_H& a) { return __hneg(a); }
inline LABKIT_H& operator++(LABKIT_H& a) { return a = __hadd(a, LABKIT_H(1.0f)); }
inline LABKIT_H& operator--(LABKIT_H& a) { return a = __hsub(a, LABKIT_H(1.0f)); }
inline LABKIT_H operator++(LABKIT_H& a, int) { LABKIT_H r = a; ++a; return r; }
inline LABKIT_H operator--(LABKIT_H& a, int) { LABKIT_H r = a; --a; return r; }
inline bool operator==(const LABKIT_H& a, const LABKIT_H& b) { return __heq(a, b); }
inline bool operator!=(const LABKIT_H& a, const LABKIT_H& b) { return __hneu(a, b); }
inline bool operator<(const LABKIT_H& a, const LABKIT_H& b) { return __hlt(a, b); }
inline bool operator<=(const LABKIT_H& a, const LABKIT_H& b) { return __hle(a, b); }
inline bool operator>(const LABKIT_H& a, const LABKIT_H& b) { return __hgt(a, b); }
inline bool operator>=(const LABKIT_H& a, const LABKIT_H& b) { return __hge(a, b); }

inline LABKIT_H2 operator+(const LABKIT_H2& a, const LABKIT_H2& b) { return __hadd2(a, b); }
inline LABKIT_H2 operator-(const LABKIT_H2& a, const LABKIT_H2& b) { return __hsub2(a, b); }
inline LABKIT_H2 operator*(const LABKIT_H2& a, const LABKIT_H2& b) { return __hmul2(a, b); }
inline LABKIT_H2 operator/(const LABKIT_H2& a, const LABKIT_H2& b) { return __h2div(a, b); }
inline LABKIT_H2& operator+=(LABKIT_H2& a, const LABKIT_H2& b) { return a = __hadd2(a, b); }
inline LABKIT_H2& operator-=(LABKIT_H2& a, const LABKIT_H2& b) { return a = __hsub2(a, b); }
inline LABKIT_H2& operator*=(LABKIT_H2& a, const LABKIT_H2& b) { return a = __hmul2(a, b); }
inline LABKIT_H2& operator/=(LABKIT_H2& a, const LABKIT_H2& b) { return a = __h2div(a, b); }
inline LABKIT_H2 operator+(const LABKIT_H2& a) { return a; }
inline LABKIT_H2 operator-(const LABKIT_H2& a) { return __hneg2(a); }
inline bool operator==(const LABKIT_H2& a, const LABKIT_H2& b) { return __hbeq2(a, b); }
inline bool operator!=(const LABKIT_H2& a, const LABKIT_H2& b) { return __hbne2(a, b); }
inline bool operator<(const LABKIT_H2& a, const LABKIT_H2& b) { return __hblt2(a, b); }
inline bool operator<=(const LABKIT_H2& a, const LABKIT_H2& b) { return __hble2(a, b); }
inline bool operator>(const LABKIT_H2& a, const LABKIT_H2& b) { return __hbgt2(a, b); }
inline bool operator>=(const LABKIT_H2& a, const LABKIT_H2& b) { return __hbge2(a, b); }

// atomicAdd of one value, or of a pair (each half added on its own, the pair read and written as one
// 32-bit word, as a GPU's red.add.f16x2): a compare-and-swap loop on the bits, each sum rounded once.
inline LABKIT_H atomicAdd(LABKIT_H* p, LABKIT_H v) {
  unsigned short* bits = reinterpret_cast<unsigned short*>(p);
  unsigned short old = __atomic_load_n(bits, LABKIT_MO);
  for (;;) {
    LABKIT_H o;
    o.__x = old;
    const unsigned short sum = __hadd(o, v).__x;
    if (__atomic_compare_exchange_n(bits, &old, sum, true, LABKIT_MO, LABKIT_MO)) return o;
  }
}
inline LABKIT_H2 atomicAdd(LABKIT_H2* p, LABKIT_H2 v) {
  static_assert(sizeof(LABKIT_H2) == 4, "a pair of halves is one 32-bit word");
  unsigned int* bits = reinterpret_cast<unsigned int*>(p);
  unsigned int old = __atomic_load_n(bits, LABKIT_MO);
  for (;;) {
    LABKIT_H2 o;
    std::memcpy(&o, &old, 4);
    const LABKIT_H2 sum(__hadd(o.x, v.x), __hadd(o.y, v.y));
    unsigned int nb;
    std::memcpy(&nb, &sum, 4);
    if (__atomic_compare_exchange_n(bits, &old, nb, true, LABKIT_MO, LABKIT_MO)) return o;
  }
}
