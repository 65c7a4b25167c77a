// cuComplex.h for labkit's CPU executor: CUDA's single and double complex numbers, as float2 and
// double2 (x the real part, y the imaginary), with the header's functions.  The quotient scales by
// |re| + |im| of the divisor first and the modulus is hypot's, so that neither overflows where the
// result is representable, as CUDA's header promises.
#pragma once
#include <cmath>

typedef float2 cuFloatComplex;
typedef double2 cuDoubleComplex;
typedef cuFloatComplex cuComplex;

inline float cuCrealf(cuFloatComplex x) { return x.x; }
inline float cuCimagf(cuFloatComplex x) { return x.y; }
inline cuFloatComplex make_cuFloatComplex(float r, float i) { return cuFloatComplex{r, i}; }
inline cuFloatComplex cuConjf(cuFloatComplex x) { return make_cuFloatComplex(x.x, -x.y); }
inline cuFloatComplex cuCaddf(cuFloatComplex x, cuFloatComplex y) { return make_cuFloatComplex(x.x + y.x, x.y + y.y); }
inline cuFloatComplex cuCsubf(cuFloatComplex x, cuFloatComplex y) { return make_cuFloatComplex(x.x - y.x, x.y - y.y); }
inline cuFloatComplex cuCmulf(cuFloatComplex x, cuFloatComplex y) {
  return make_cuFloatComplex(x.x * y.x - x.y * y.y, x.x * y.y + x.y * y.x);
}
inline cuFloatComplex cuCdivf(cuFloatComplex x, cuFloatComplex y) {
  const float s = std::fabs(y.x) + std::fabs(y.y), inv = 1.0f / s;
  const float ar = x.x * inv, ai = x.y * inv, br = y.x * inv, bi = y.y * inv;
  const float d = 1.0f / (br * br + bi * bi);
  return make_cuFloatComplex((ar * br + ai * bi) * d, (ai * br - ar * bi) * d);
}
inline float cuCabsf(cuFloatComplex x) { return std::hypot(x.x, x.y); }

inline double cuCreal(cuDoubleComplex x) { return x.x; }
inline double cuCimag(cuDoubleComplex x) { return x.y; }
inline cuDoubleComplex make_cuDoubleComplex(double r, double i) { return cuDoubleComplex{r, i}; }
inline cuDoubleComplex cuConj(cuDoubleComplex x) { return make_cuDoubleComplex(x.x, -x.y); }
inline cuDoubleComplex cuCadd(cuDoubleComplex x, cuDoubleComplex y) { return make_cuDoubleComplex(x.x + y.x, x.y + y.y); }
inline cuDoubleComplex cuCsub(cuDoubleComplex x, cuDoubleComplex y) { return make_cuDoubleComplex(x.x - y.x, x.y - y.y); }
inline cuDoubleComplex cuCmul(cuDoubleComplex x, cuDoubleComplex y) {
  return make_cuDoubleComplex(x.x * y.x - x.y * y.y, x.x * y.y + x.y * y.x);
}
inline cuDoubleComplex cuCdiv(cuDoubleComplex x, cuDoubleComplex y) {
  const double s = std::fabs(y.x) + std::fabs(y.y), inv = 1.0 / s;
  const double ar = x.x * inv, ai = x.y * inv, br = y.x * inv, bi = y.y * inv;
  const double d = 1.0 / (br * br + bi * bi);
  return make_cuDoubleComplex((ar * br + ai * bi) * d, (ai * br - ar * bi) * d);
}
inline double cuCabs(cuDoubleComplex x) { return std::hypot(x.x, x.y); }

inline cuComplex make_cuComplex(float r, float i) { return make_cuFloatComplex(r, i); }
inline cuDoubleComplex cuComplexFloatToDouble(cuFloatComplex c) { return make_cuDoubleComplex(c.x, c.y); }
inline cuFloatComplex cuComplexDoubleToFloat(cuDoubleComplex c) { return make_cuFloatComplex(float(c.x), float(c.y)); }
// x * y + d, each part with two fused multiply-adds.
inline cuFloatComplex cuCfmaf(cuFloatComplex x, cuFloatComplex y, cuFloatComplex d) {
  return make_cuFloatComplex(std::fma(-x.y, y.y, std::fma(x.x, y.x, d.x)), std::fma(x.y, y.x, std::fma(x.x, y.y, d.y)));
}
inline cuDoubleComplex cuCfma(cuDoubleComplex x, cuDoubleComplex y, cuDoubleComplex d) {
  return make_cuDoubleComplex(std::fma(-x.y, y.y, std::fma(x.x, y.x, d.x)), std::fma(x.y, y.x, std::fma(x.x, y.y, d.y)));
}
