// labkit_simd.h -- CUDA's SIMD intrinsics on 32-bit words (two 16-bit lanes: the ...2 names; four
// 8-bit lanes: the ...4 names), the dot products of byte and halfword lanes (__dp4a, __dp2a_lo/hi) and
// Hopper's DPX instructions (__vimax3_s32, __viaddmax_u16x2, ...),
// lane by lane, for labkit_cpu.h.  Each lane is read as signed or unsigned as the name says (s or u;
// plain add, sub and neg wrap around either way); saturating forms (ss, us) clamp to the lane's
// range; comparisons give a lane of all ones (__vcmp...) or the value 1 (__vset...) where they hold;
// __vsads and __vsadu return the sum of the lanes' absolute differences; the signed rounded average
// rounds halves away from zero, the unsigned one up.
#pragma once

namespace labkit {
namespace simd {
template <int B> constexpr unsigned lane_mask() { return B == 32 ? 0xffffffffu : (1u << B) - 1u; }
template <int B> inline long long lane(unsigned x, int i, bool is_signed) {
  const long long v = (x >> (B * i)) & lane_mask<B>();
  return is_signed && v >= (1ll << (B - 1)) ? v - (1ll << B) : v;
}
inline long long clamp(long long v, long long lo, long long hi) { return v < lo ? lo : v > hi ? hi : v; }
template <int B> constexpr long long smin() { return -(1ll << (B - 1)); }
template <int B> constexpr long long smax() { return (1ll << (B - 1)) - 1; }
template <int B> constexpr long long umax() { return (1ll << B) - 1; }
// The word whose lane i is f(lane i of a, lane i of b), the lanes read signed or not.
template <int B, class F> inline unsigned map(unsigned a, unsigned b, bool is_signed, F f) {
  unsigned r = 0;
  for (int i = 0; i < 32 / B; ++i)
    r |= (unsigned(f(lane<B>(a, i, is_signed), lane<B>(b, i, is_signed))) & lane_mask<B>()) << (B * i);
  return r;
}
template <int B, class F> inline unsigned map3(unsigned a, unsigned b, unsigned c, bool is_signed, F f) {
  unsigned r = 0;
  for (int i = 0; i < 32 / B; ++i)
    r |= (unsigned(f(lane<B>(a, i, is_signed), lane<B>(b, i, is_signed), lane<B>(c, i, is_signed))) &
          lane_mask<B>()) << (B * i);
  return r;
}
template <int B> inline unsigned sad(unsigned a, unsigned b, bool is_signed) {
  long long s = 0;
  for (int i = 0; i < 32 / B; ++i) {
    const long long d = lane<B>(a, i, is_signed) - lane<B>(b, i, is_signed);
    s += d < 0 ? -d : d;
  }
  return unsigned(s);
}
inline long long avg_signed(long long x, long long y) {   // halves away from zero
  const long long s = x + y;
  return s < 0 ? -((-s + 1) / 2) : (s + 1) / 2;
}
}  // namespace simd
}  // namespace labkit

#define LABKIT_SIMD(N, B)                                                                                         \
  inline unsigned __vabs##N(unsigned a) { return ::labkit::simd::map<B>(a, 0, true, [](long long x, long long) { return x < 0 ? -x : x; }); } \
  inline unsigned __vabsss##N(unsigned a) {                                                                       \
    return ::labkit::simd::map<B>(a, 0, true, [](long long x, long long) {                                       \
      return ::labkit::simd::clamp(x < 0 ? -x : x, 0, ::labkit::simd::smax<B>()); });                            \
  }                                                                                                               \
  inline unsigned __vneg##N(unsigned a) { return ::labkit::simd::map<B>(a, 0, true, [](long long x, long long) { return -x; }); } \
  inline unsigned __vnegss##N(unsigned a) {                                                                       \
    return ::labkit::simd::map<B>(a, 0, true, [](long long x, long long) {                                       \
      return ::labkit::simd::clamp(-x, ::labkit::simd::smin<B>(), ::labkit::simd::smax<B>()); });               \
  }                                                                                                               \
  inline unsigned __vabsdiffs##N(unsigned a, unsigned b) {                                                        \
    return ::labkit::simd::map<B>(a, b, true, [](long long x, long long y) { return x > y ? x - y : y - x; });   \
  }                                                                                                               \
  inline unsigned __vabsdiffu##N(unsigned a, unsigned b) {                                                        \
    return ::labkit::simd::map<B>(a, b, false, [](long long x, long long y) { return x > y ? x - y : y - x; });  \
  }                                                                                                               \
  inline unsigned __vadd##N(unsigned a, unsigned b) { return ::labkit::simd::map<B>(a, b, false, [](long long x, long long y) { return x + y; }); } \
  inline unsigned __vsub##N(unsigned a, unsigned b) { return ::labkit::simd::map<B>(a, b, false, [](long long x, long long y) { return x - y; }); } \
  inline unsigned __vaddss##N(unsigned a, unsigned b) {                                                           \
    return ::labkit::simd::map<B>(a, b, true, [](long long x, long long y) {                                     \
      return ::labkit::simd::clamp(x + y, ::labkit::simd::smin<B>(), ::labkit::simd::smax<B>()); });            \
  }                                                                                                               \
  inline unsigned __vsubss##N(unsigned a, unsigned b) {                                                           \
    return ::labkit::simd::map<B>(a, b, true, [](long long x, long long y) {                                     \
      return ::labkit::simd::clamp(x - y, ::labkit::simd::smin<B>(), ::labkit::simd::smax<B>()); });            \
  }                                                                                                               \
  inline unsigned __vaddus##N(unsigned a, unsigned b) {                                                           \
    return ::labkit::simd::map<B>(a, b, false, [](long long x, long long y) {                                    \
      return ::labkit::simd::clamp(x + y, 0, ::labkit::simd::umax<B>()); });                                      \
  }                                                                                                               \
  inline unsigned __vsubus##N(unsigned a, unsigned b) {                                                           \
    return ::labkit::simd::map<B>(a, b, false, [](long long x, long long y) {                                    \
      return ::labkit::simd::clamp(x - y, 0, ::labkit::simd::umax<B>()); });                                      \
  }                                                                                                               \
  inline unsigned __vavgs##N(unsigned a, unsigned b) { return ::labkit::simd::map<B>(a, b, true, ::labkit::simd::avg_signed); } \
  inline unsigned __vavgu##N(unsigned a, unsigned b) { return ::labkit::simd::map<B>(a, b, false, [](long long x, long long y) { return (x + y + 1) / 2; }); } \
  inline unsigned __vhaddu##N(unsigned a, unsigned b) { return ::labkit::simd::map<B>(a, b, false, [](long long x, long long y) { return (x + y) / 2; }); } \
  inline unsigned __vmaxs##N(unsigned a, unsigned b) { return ::labkit::simd::map<B>(a, b, true, [](long long x, long long y) { return x > y ? x : y; }); } \
  inline unsigned __vmaxu##N(unsigned a, unsigned b) { return ::labkit::simd::map<B>(a, b, false, [](long long x, long long y) { return x > y ? x : y; }); } \
  inline unsigned __vmins##N(unsigned a, unsigned b) { return ::labkit::simd::map<B>(a, b, true, [](long long x, long long y) { return x < y ? x : y; }); } \
  inline unsigned __vminu##N(unsigned a, unsigned b) { return ::labkit::simd::map<B>(a, b, false, [](long long x, long long y) { return x < y ? x : y; }); } \
  inline unsigned __vsads##N(unsigned a, unsigned b) { return ::labkit::simd::sad<B>(a, b, true); }               \
  inline unsigned __vsadu##N(unsigned a, unsigned b) { return ::labkit::simd::sad<B>(a, b, false); }              \
  LABKIT_SIMD_CMP(N, B, eq, false, ==) LABKIT_SIMD_CMP(N, B, ne, false, !=)                                       \
  LABKIT_SIMD_CMP(N, B, ges, true, >=) LABKIT_SIMD_CMP(N, B, geu, false, >=)                                      \
  LABKIT_SIMD_CMP(N, B, gts, true, >) LABKIT_SIMD_CMP(N, B, gtu, false, >)                                        \
  LABKIT_SIMD_CMP(N, B, les, true, <=) LABKIT_SIMD_CMP(N, B, leu, false, <=)                                      \
  LABKIT_SIMD_CMP(N, B, lts, true, <) LABKIT_SIMD_CMP(N, B, ltu, false, <)
#define LABKIT_SIMD_CMP(N, B, name, is_signed, op)                                                               \
  inline unsigned __vcmp##name##N(unsigned a, unsigned b) {                                                       \
    return ::labkit::simd::map<B>(a, b, is_signed, [](long long x, long long y) { return x op y ? -1ll : 0ll; }); \
  }                                                                                                               \
  inline unsigned __vset##name##N(unsigned a, unsigned b) {                                                       \
    return ::labkit::simd::map<B>(a, b, is_signed, [](long long x, long long y) { return x op y ? 1ll : 0ll; });  \
  }
LABKIT_SIMD(2, 16)
LABKIT_SIMD(4, 8)
#undef LABKIT_SIMD
#undef LABKIT_SIMD_CMP

// DPX (sm_90): max and min of two or three values, of a sum and a value (the sum wraps around in its
// lane, as the instruction's does), each also with ReLU (then max with 0) for signed lanes, and max and
// min that also say which operand won (__vibmax: true where a >= b; __vibmin: where a <= b); on 32-bit
// ints (s32, u32) or on the two 16-bit lanes of a word (s16x2, u16x2).
namespace labkit {
namespace simd {
inline long long mx(long long x, long long y) { return x > y ? x : y; }
inline long long mn(long long x, long long y) { return x < y ? x : y; }
template <int B> inline long long wrap(long long v, bool is_signed) {
  const long long m = (long long)lane_mask<B>();
  v &= m;
  return is_signed && v > m / 2 ? v - m - 1 : v;
}
}  // namespace simd
}  // namespace labkit
#define LABKIT_DPX3(name, expr)                                                                                   \
  inline int __vi##name##_s32(int a, int b, int c) {                                                              \
    constexpr bool S = true; constexpr int W = 32; const long long x = a, y = b, z = c; return int(expr);        \
  }                                                                                                               \
  inline unsigned __vi##name##_u32(unsigned a, unsigned b, unsigned c) {                                          \
    constexpr bool S = false; constexpr int W = 32; const long long x = a, y = b, z = c; return unsigned(expr);  \
  }                                                                                                               \
  inline int __vi##name##_s32_relu(int a, int b, int c) {                                                         \
    constexpr bool S = true; constexpr int W = 32; const long long x = a, y = b, z = c;                           \
    return int(::labkit::simd::mx(expr, 0));                                                                      \
  }                                                                                                               \
  inline unsigned __vi##name##_s16x2(unsigned a, unsigned b, unsigned c) {                                        \
    return ::labkit::simd::map3<16>(a, b, c, true, [](long long x, long long y, long long z) {                   \
      constexpr bool S = true; constexpr int W = 16; return expr; });                                              \
  }                                                                                                               \
  inline unsigned __vi##name##_u16x2(unsigned a, unsigned b, unsigned c) {                                        \
    return ::labkit::simd::map3<16>(a, b, c, false, [](long long x, long long y, long long z) {                  \
      constexpr bool S = false; constexpr int W = 16; return expr; });                                             \
  }                                                                                                               \
  inline unsigned __vi##name##_s16x2_relu(unsigned a, unsigned b, unsigned c) {                                   \
    return ::labkit::simd::map3<16>(a, b, c, true, [](long long x, long long y, long long z) {                   \
      constexpr bool S = true; constexpr int W = 16; return ::labkit::simd::mx(expr, 0); });                       \
  }
LABKIT_DPX3(max3, ((void)S, (void)W, ::labkit::simd::mx(::labkit::simd::mx(x, y), z)))
LABKIT_DPX3(min3, ((void)S, (void)W, ::labkit::simd::mn(::labkit::simd::mn(x, y), z)))
LABKIT_DPX3(addmax, ::labkit::simd::mx(::labkit::simd::wrap<W>(x + y, S), z))
LABKIT_DPX3(addmin, ::labkit::simd::mn(::labkit::simd::wrap<W>(x + y, S), z))
#undef LABKIT_DPX3
inline int __vimax_s32_relu(int a, int b) { return int(::labkit::simd::mx(::labkit::simd::mx(a, b), 0)); }
inline int __vimin_s32_relu(int a, int b) { return int(::labkit::simd::mx(::labkit::simd::mn(a, b), 0)); }
inline unsigned __vimax_s16x2_relu(unsigned a, unsigned b) {
  return ::labkit::simd::map<16>(a, b, true, [](long long x, long long y) { return ::labkit::simd::mx(::labkit::simd::mx(x, y), 0); });
}
inline unsigned __vimin_s16x2_relu(unsigned a, unsigned b) {
  return ::labkit::simd::map<16>(a, b, true, [](long long x, long long y) { return ::labkit::simd::mx(::labkit::simd::mn(x, y), 0); });
}
inline int __vibmax_s32(int a, int b, bool* pred) { *pred = a >= b; return a >= b ? a : b; }
inline int __vibmin_s32(int a, int b, bool* pred) { *pred = a <= b; return a <= b ? a : b; }
inline unsigned __vibmax_u32(unsigned a, unsigned b, bool* pred) { *pred = a >= b; return a >= b ? a : b; }
inline unsigned __vibmin_u32(unsigned a, unsigned b, bool* pred) { *pred = a <= b; return a <= b ? a : b; }
#define LABKIT_DPX_B(name, is_signed, op)                                                                         \
  inline unsigned __vib##name(unsigned a, unsigned b, bool* pred_hi, bool* pred_lo) {                             \
    const long long ah = ::labkit::simd::lane<16>(a, 1, is_signed), bh = ::labkit::simd::lane<16>(b, 1, is_signed); \
    const long long al = ::labkit::simd::lane<16>(a, 0, is_signed), bl = ::labkit::simd::lane<16>(b, 0, is_signed); \
    *pred_hi = ah op bh;                                                                                          \
    *pred_lo = al op bl;                                                                                          \
    return ((unsigned(*pred_hi ? ah : bh) & 0xffffu) << 16) | (unsigned(*pred_lo ? al : bl) & 0xffffu);          \
  }
LABKIT_DPX_B(max_s16x2, true, >=)
LABKIT_DPX_B(max_u16x2, false, >=)
LABKIT_DPX_B(min_s16x2, true, <=)
LABKIT_DPX_B(min_u16x2, false, <=)
#undef LABKIT_DPX_B

// __dp4a: c plus the dot product of a's and b's four bytes (signed for int operands, unsigned for
// unsigned ones); __dp2a_lo / _hi: c plus the dot product of a's two 16-bit halves with b's two low
// (lo) or high (hi) bytes.  Sums wrap around in 32 bits.
namespace labkit {
namespace simd {
template <class R> inline R dp4a(unsigned a, unsigned b, R c, bool is_signed) {
  long long s = (long long)c;
  for (int i = 0; i < 4; ++i) s += lane<8>(a, i, is_signed) * lane<8>(b, i, is_signed);
  return R((unsigned)(s & 0xffffffffll));
}
template <class R> inline R dp2a(unsigned a, unsigned b, R c, bool is_signed, int first_byte) {
  long long s = (long long)c;
  for (int i = 0; i < 2; ++i) s += lane<16>(a, i, is_signed) * lane<8>(b, first_byte + i, is_signed);
  return R((unsigned)(s & 0xffffffffll));
}
}  // namespace simd
}  // namespace labkit
inline int __dp4a(int a, int b, int c) { return ::labkit::simd::dp4a<int>(unsigned(a), unsigned(b), c, true); }
inline unsigned __dp4a(unsigned a, unsigned b, unsigned c) { return ::labkit::simd::dp4a<unsigned>(a, b, c, false); }
inline int __dp4a(char4 a, char4 b, int c) {
  unsigned x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return __dp4a(int(x), int(y), c);
}
inline unsigned __dp4a(uchar4 a, uchar4 b, unsigned c) {
  unsigned x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return __dp4a(x, y, c);
}
inline int __dp2a_lo(int a, int b, int c) { return ::labkit::simd::dp2a<int>(unsigned(a), unsigned(b), c, true, 0); }
inline int __dp2a_hi(int a, int b, int c) { return ::labkit::simd::dp2a<int>(unsigned(a), unsigned(b), c, true, 2); }
inline unsigned __dp2a_lo(unsigned a, unsigned b, unsigned c) { return ::labkit::simd::dp2a<unsigned>(a, b, c, false, 0); }
inline unsigned __dp2a_hi(unsigned a, unsigned b, unsigned c) { return ::labkit::simd::dp2a<unsigned>(a, b, c, false, 2); }
