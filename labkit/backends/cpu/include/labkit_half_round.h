// Rounding of doubles to the 16-bit floating-point formats of cuda_fp16.h (binary16: 10 significand
// bits, bias 15) and cuda_bf16.h (bfloat16: 7 bits, bias 127): to nearest, ties to even, with
// subnormals, overflow to infinity and NaN.  Why computing in double and rounding once gives what a GPU
// gives is argued in cuda_fp16.h.
#pragma once
#include <cmath>
#include <cstring>

namespace labkit {
namespace fp16 {
template <int M, int BIAS> inline unsigned short round_double(double v) {
  unsigned short sign = std::signbit(v) ? 0x8000 : 0;
  if (std::isnan(v)) return 0x7fff;          // the canonical NaN a GPU's conversion gives
  double a = std::fabs(v);
  const unsigned short inf = static_cast<unsigned short>((2 * BIAS + 1) << M);
  // The midpoint of the largest finite value and 2^(BIAS+1) ties to even, which is infinity
  // (65520 for binary16).
  if (a >= std::ldexp(2.0 - std::ldexp(1.0, -(M + 1)), BIAS)) return sign | inf;
  if (a < std::ldexp(1.0, 1 - BIAS)) {       // subnormal (or zero): multiples of 2^(1-BIAS-M)
    // The scaling is exact; nearbyint rounds ties to even in the default rounding mode.  2^M is the
    // smallest normal's bits, as it should be.
    return sign | static_cast<unsigned short>(std::nearbyint(std::ldexp(a, BIAS - 1 + M)));
  }
  int k;
  std::frexp(a, &k);                          // a = m * 2^k, m in [0.5, 1)
  double r = std::nearbyint(std::ldexp(a, M + 1 - k));   // the significand, in [2^M, 2^(M+1)]
  if (r == std::ldexp(1.0, M + 1)) { r = std::ldexp(1.0, M); ++k; }
  unsigned e = static_cast<unsigned>(k - 1 + BIAS);
  return sign | static_cast<unsigned short>((e << M) | (static_cast<unsigned>(r) - (1u << M)));
}
constexpr double pow2(int k) { return k == 0 ? 1.0 : k > 0 ? 2.0 * pow2(k - 1) : 0.5 * pow2(k + 1); }
// The value of a 16-bit float, exact in double: its fields moved into a double's (a subnormal scaled by
// a constant power of two), without ldexp, since tensor-core and half loops widen every element.
template <int M, int BIAS> inline double widen(unsigned short h) {
  const unsigned e = (h >> M) & ((2u * BIAS) + 1), m = h & ((1u << M) - 1);
  if (e == 0) {
    const double v = double(m) * pow2(1 - BIAS - M);
    return (h & 0x8000) ? -v : v;
  }
  if (e == 2u * BIAS + 1 && m) return NAN;
  const unsigned long long biased = e == 2u * BIAS + 1 ? 0x7ffull : (unsigned long long)(int(e) - BIAS + 1023);
  const unsigned long long bits = ((unsigned long long)(h >> 15) << 63) | (biased << 52) |
                                  ((unsigned long long)m << (52 - M));
  double r;
  std::memcpy(&r, &bits, sizeof r);
  return r;
}
// p + c rounded to odd in double: where the sum is not exact, the double next to it whose last bit is
// 1.  Rounding that to a format of 2 or more bits fewer (half, bfloat16) is the one correct rounding of
// the exact sum (Boldo and Melquiond, "Emulation of FMA and correctly rounded sums", 2008): an inexact
// sum can never land on a midpoint between two halves, which have a 0 last bit in double.
inline double sum_to_odd(double p, double c) {
  double s = p + c;
  double pp = s - c;                                   // Knuth's TwoSum: t = (p + c) - s exactly
  double t = (p - pp) + (c - (s - pp));
  if (t != 0 && std::isfinite(s)) {
    unsigned long long bits;
    std::memcpy(&bits, &s, sizeof bits);
    if ((bits & 1) == 0) s = std::nextafter(s, t > 0 ? INFINITY : -INFINITY);
  }
  return s;
}
// make<H>(v): v rounded to the type H; d(h): h's value.  Each header adds its type's pair.
template <class H> H make(double v);
}  // namespace fp16
}  // namespace labkit
