// cufft.h for labkit's CPU executor: cuFFT's plans and transforms, computed on the host when executed
// (as labkit's cuBLAS computes when called), on device or managed memory.
//
// Provided: plans of rank 1, 2 and 3 (cufftPlan1d/2d/3d, cufftPlanMany with its advanced layouts,
// cufftCreate with the cufftMakePlan forms, their work-size queries: no work area is needed here),
// cufftDestroy, cufftSetStream, cufftSetAutoAllocation, cufftSetWorkArea, cufftGetVersion; the
// transforms C2C, R2C, C2R and their double forms Z2Z, D2Z, Z2D, unnormalised as cuFFT's (an inverse
// after a forward transform multiplies by the number of points).  Each transform is computed in double
// (a radix-2 FFT for sizes that are powers of two, the direct sum otherwise) and rounded once to the
// data's type: a GPU's cuFFT rounds along the way, so results differ in the last bits.  Before a
// transform, its input and output are checked as device memory within their allocations.  A routine
// not declared here (callbacks, cufftXt on several GPUs) is refused by name before the program is
// compiled (program_source.py reads the names from this file).
#pragma once

#include <cmath>
#include <complex>
#include <cstring>
#include <map>
#include <type_traits>
#include <vector>
#include "cuda_runtime.h"
#include "cuComplex.h"

#define CUFFT_VER_MAJOR 11
#define CUFFT_VER_MINOR 2
#define CUFFT_VER_PATCH 1
#define CUFFT_VERSION (CUFFT_VER_MAJOR * 1000 + CUFFT_VER_MINOR * 100 + CUFFT_VER_PATCH)
#define CUFFT_FORWARD -1
#define CUFFT_INVERSE 1
#define CUFFTAPI

enum cufftResult {
  CUFFT_SUCCESS = 0, CUFFT_INVALID_PLAN = 1, CUFFT_ALLOC_FAILED = 2, CUFFT_INVALID_TYPE = 3, CUFFT_INVALID_VALUE = 4,
  CUFFT_INTERNAL_ERROR = 5, CUFFT_EXEC_FAILED = 6, CUFFT_SETUP_FAILED = 7, CUFFT_INVALID_SIZE = 8,
  CUFFT_UNALIGNED_DATA = 9, CUFFT_INCOMPLETE_PARAMETER_LIST = 10, CUFFT_INVALID_DEVICE = 11, CUFFT_PARSE_ERROR = 12,
  CUFFT_NO_WORKSPACE = 13, CUFFT_NOT_IMPLEMENTED = 14, CUFFT_LICENSE_ERROR = 15, CUFFT_NOT_SUPPORTED = 16
};
typedef cufftResult cufftResult_t;
enum cufftType {
  CUFFT_R2C = 0x2a, CUFFT_C2R = 0x2c, CUFFT_C2C = 0x29, CUFFT_D2Z = 0x6a, CUFFT_Z2D = 0x6c, CUFFT_Z2Z = 0x69
};
typedef cufftType cufftType_t;
typedef int cufftHandle;
typedef float cufftReal;
typedef double cufftDoubleReal;
typedef cuComplex cufftComplex;
typedef cuDoubleComplex cufftDoubleComplex;

// helper_cuda.h's checkCudaErrors names a cuFFT result with this.
inline const char* _cudaGetErrorEnum(cufftResult r) {
  switch (r) {
#define LABKIT_R(n) case n: return #n;
    LABKIT_R(CUFFT_SUCCESS) LABKIT_R(CUFFT_INVALID_PLAN) LABKIT_R(CUFFT_ALLOC_FAILED) LABKIT_R(CUFFT_INVALID_TYPE)
    LABKIT_R(CUFFT_INVALID_VALUE) LABKIT_R(CUFFT_INTERNAL_ERROR) LABKIT_R(CUFFT_EXEC_FAILED)
    LABKIT_R(CUFFT_SETUP_FAILED) LABKIT_R(CUFFT_INVALID_SIZE) LABKIT_R(CUFFT_UNALIGNED_DATA)
    LABKIT_R(CUFFT_INCOMPLETE_PARAMETER_LIST) LABKIT_R(CUFFT_INVALID_DEVICE) LABKIT_R(CUFFT_PARSE_ERROR)
    LABKIT_R(CUFFT_NO_WORKSPACE) LABKIT_R(CUFFT_NOT_IMPLEMENTED) LABKIT_R(CUFFT_LICENSE_ERROR)
    LABKIT_R(CUFFT_NOT_SUPPORTED)
#undef LABKIT_R
  }
  return "<unknown>";
}

namespace labkit {
namespace fft {
using cd = std::complex<double>;
// A plan: the transform's sizes (row-major, the last varying fastest), its type, its batches and the
// advanced layout of its input and output (embed sizes, stride, distance between batches).
struct Plan {
  std::vector<long long> n, inembed, onembed;
  long long istride = 1, idist = 0, ostride = 1, odist = 0;
  cufftType type = CUFFT_C2C;
  int batch = 1;
  bool made = false;
  cudaStream_t stream = nullptr;
};
inline std::map<int, Plan>& plans() {
  static std::map<int, Plan>* p = new std::map<int, Plan>();   // never destroyed: atexit order
  return *p;
}
inline int& next_handle() {
  static int h = 1;
  return h;
}
inline bool is_real_input(cufftType t) { return t == CUFFT_R2C || t == CUFFT_D2Z; }
inline bool is_real_output(cufftType t) { return t == CUFFT_C2R || t == CUFFT_Z2D; }
inline bool is_double(cufftType t) { return t == CUFFT_D2Z || t == CUFFT_Z2D || t == CUFFT_Z2Z; }
inline bool known_type(cufftType t) {
  return t == CUFFT_R2C || t == CUFFT_C2R || t == CUFFT_C2C || t == CUFFT_D2Z || t == CUFFT_Z2D || t == CUFFT_Z2Z;
}

// out[k] = sum_j in[j] e^(sign 2 pi i j k / n): radix 2 where n is a power of two, else the direct sum.
inline void dft(std::vector<cd>& v, int sign) {
  const size_t n = v.size();
  if (n <= 1) return;
  const double pi = 3.14159265358979323846;
  if ((n & (n - 1)) == 0) {
    for (size_t i = 1, j = 0; i < n; ++i) {    // bit reversal
      size_t bit = n >> 1;
      for (; j & bit; bit >>= 1) j ^= bit;
      j ^= bit;
      if (i < j) std::swap(v[i], v[j]);
    }
    for (size_t len = 2; len <= n; len <<= 1) {
      for (size_t i = 0; i < n; i += len)
        for (size_t k = 0; k < len / 2; ++k) {
          const double a = sign * 2 * pi * double(k) / double(len);
          const cd w(std::cos(a), std::sin(a)), u = v[i + k], t = w * v[i + k + len / 2];
          v[i + k] = u + t;
          v[i + k + len / 2] = u - t;
        }
    }
    return;
  }
  std::vector<cd> out(n);
  for (size_t k = 0; k < n; ++k) {
    cd s = 0;
    for (size_t j = 0; j < n; ++j) {
      const double a = sign * 2 * pi * double((j * k) % n) / double(n);
      s += v[j] * cd(std::cos(a), std::sin(a));
    }
    out[k] = s;
  }
  v.swap(out);
}
// Transforms a dense row-major array of dims (batch-free) along each axis in `axes` (complex, in place).
inline void along_axes(std::vector<cd>& a, const std::vector<long long>& dims, int sign, size_t axes) {
  long long total = 1;
  for (long long d : dims) total *= d;
  for (size_t ax = 0; ax < axes; ++ax) {
    long long inner = 1;
    for (size_t j = ax + 1; j < dims.size(); ++j) inner *= dims[j];
    const long long n = dims[ax], outer = total / (n * inner);
    std::vector<cd> line(static_cast<size_t>(n));
    for (long long o = 0; o < outer; ++o)
      for (long long i = 0; i < inner; ++i) {
        const long long base = o * n * inner + i;
        for (long long k = 0; k < n; ++k) line[size_t(k)] = a[size_t(base + k * inner)];
        dft(line, sign);
        for (long long k = 0; k < n; ++k) a[size_t(base + k * inner)] = line[size_t(k)];
      }
  }
}
// Where element `flat` of a dense array of `dims` sits in an advanced layout (embed sizes, stride).
inline long long placed(long long flat, const std::vector<long long>& dims, const std::vector<long long>& embed,
                        long long stride) {
  long long at = 0, scale = 1;
  for (size_t j = dims.size(); j-- > 0;) {
    const long long idx = flat % dims[j];
    flat /= dims[j];
    at += idx * scale;
    scale *= embed.empty() ? dims[j] : embed[j];
  }
  return at * stride;
}
inline long long span_of(const std::vector<long long>& dims, const std::vector<long long>& embed, long long stride,
                         long long dist, int batch) {
  long long count = 1;
  for (long long d : dims) count *= d;
  if (count == 0 || batch == 0) return 0;
  return (batch - 1) * dist + placed(count - 1, dims, embed, stride) + 1;
}
inline bool operand(const void* p, size_t bytes, const char* call, const char* what) {
  return ::labkit::rt::library_operand(p, bytes, call, what, "cuFFT");
}
template <class I>
inline cufftResult make(int h, int rank, const I* n, const I* inembed, long long istride, long long idist,
                        const I* onembed, long long ostride, long long odist, cufftType type, long long batch) {
  auto it = plans().find(h);
  if (it == plans().end()) return CUFFT_INVALID_PLAN;
  if (rank < 1 || rank > 3 || !n || batch < 1) return CUFFT_INVALID_SIZE;
  if (!known_type(type)) return CUFFT_INVALID_TYPE;
  Plan p;
  long long count = 1;
  for (int j = 0; j < rank; ++j) {
    if (n[j] < 1) return CUFFT_INVALID_SIZE;
    p.n.push_back(n[j]);
    count *= n[j];
  }
  if (count > (1ll << 28) || batch > (1ll << 31) || batch * count > (1ll << 31)) return CUFFT_INVALID_SIZE;
  // The complex side of a real transform holds n/2 + 1 points along the last axis.
  std::vector<long long> in_dims = p.n, out_dims = p.n;
  if (is_real_input(type)) out_dims.back() = out_dims.back() / 2 + 1;
  if (is_real_output(type)) in_dims.back() = in_dims.back() / 2 + 1;
  auto dense = [](const std::vector<long long>& d) {
    long long c = 1;
    for (long long v : d) c *= v;
    return c;
  };
  if (inembed && onembed) {
    for (int j = 0; j < rank; ++j) {
      p.inembed.push_back(inembed[j]);
      p.onembed.push_back(onembed[j]);
      if (j > 0 && (inembed[j] < in_dims[size_t(j)] || onembed[j] < out_dims[size_t(j)])) return CUFFT_INVALID_VALUE;
    }
    if (istride < 1 || ostride < 1 || idist < 0 || odist < 0) return CUFFT_INVALID_VALUE;
    p.istride = istride;
    p.ostride = ostride;
    p.idist = idist;
    p.odist = odist;
  } else {
    p.idist = dense(in_dims);
    p.odist = dense(out_dims);
  }
  p.type = type;
  p.batch = int(batch);
  p.made = true;
  p.stream = it->second.stream;
  it->second = p;
  return CUFFT_SUCCESS;
}
// Runs plan h's transform of `want` type: input and output of the given element types.
template <class In, class Out>
inline cufftResult exec(int h, const In* in, Out* out, int sign, cufftType want, const char* call) {
  auto it = plans().find(h);
  if (it == plans().end() || !it->second.made) return CUFFT_INVALID_PLAN;
  const Plan& p = it->second;
  if (p.type != want) {
    ::labkit::rt::say("%s: the plan was made for another transform type", call);
    return CUFFT_INVALID_TYPE;
  }
  if (sign != CUFFT_FORWARD && sign != CUFFT_INVERSE) return CUFFT_INVALID_VALUE;
  std::vector<long long> in_dims = p.n, out_dims = p.n;
  if (is_real_input(p.type)) out_dims.back() = out_dims.back() / 2 + 1;
  if (is_real_output(p.type)) in_dims.back() = in_dims.back() / 2 + 1;
  if (!operand(in, size_t(span_of(in_dims, p.inembed, p.istride, p.idist, p.batch)) * sizeof(In), call, "input") ||
      !operand(out, size_t(span_of(out_dims, p.onembed, p.ostride, p.odist, p.batch)) * sizeof(Out), call, "output"))
    return CUFFT_EXEC_FAILED;
  // The work: done now, or recorded into the graph the plan's stream is being captured into.
  const Plan plan = p;
  return ::labkit::rt::library_work(plan.stream, CUFFT_SUCCESS, [=]() -> cufftResult {
    const Plan& p = plan;
    long long in_count = 1, out_count = 1, full = 1;
    for (long long d : in_dims) in_count *= d;
    for (long long d : out_dims) out_count *= d;
    for (long long d : p.n) full *= d;
    const size_t rank = p.n.size();
    // Read every batch first: an in-place transform overwrites its input.
    std::vector<std::vector<cd>> work(size_t(p.batch));
    for (int b = 0; b < p.batch; ++b) {
      std::vector<cd>& a = work[size_t(b)];
      a.resize(size_t(in_count));
      for (long long f = 0; f < in_count; ++f) {
        const In& v = in[b * p.idist + placed(f, in_dims, p.inembed, p.istride)];
        if constexpr (std::is_arithmetic<In>::value) a[size_t(f)] = cd(double(v), 0);
        else a[size_t(f)] = cd(double(v.x), double(v.y));
      }
    }
    for (int b = 0; b < p.batch; ++b) {
      std::vector<cd>& a = work[size_t(b)];
      if (is_real_output(p.type)) {
        // The half spectrum: inverse along every axis but the last, then each line of the last axis
        // extended by Hermitian symmetry (its DC and Nyquist terms' imaginary parts ignored).
        along_axes(a, in_dims, sign, rank - 1);
        const long long h2 = in_dims.back(), nl = p.n.back(), lines = in_count / h2;
        std::vector<cd> res(static_cast<size_t>(full));
        std::vector<cd> line(static_cast<size_t>(nl));
        for (long long l = 0; l < lines; ++l) {
          for (long long k = 0; k < nl; ++k)
            line[size_t(k)] = k < h2 ? a[size_t(l * h2 + k)] : std::conj(a[size_t(l * h2 + (nl - k))]);
          line[0] = cd(line[0].real(), 0);
          if (nl % 2 == 0) line[size_t(nl / 2)] = cd(line[size_t(nl / 2)].real(), 0);
          dft(line, sign);
          for (long long k = 0; k < nl; ++k) res[size_t(l * nl + k)] = line[size_t(k)];
        }
        a.swap(res);
      } else {
        along_axes(a, p.n, sign, rank);
        if (is_real_input(p.type)) {    // keep n/2 + 1 points of the last axis
          const long long nl = p.n.back(), h2 = out_dims.back(), lines = full / nl;
          std::vector<cd> half(static_cast<size_t>(out_count));
          for (long long l = 0; l < lines; ++l)
            for (long long k = 0; k < h2; ++k) half[size_t(l * h2 + k)] = a[size_t(l * nl + k)];
          a.swap(half);
        }
      }
    }
    for (int b = 0; b < p.batch; ++b) {
      const std::vector<cd>& a = work[size_t(b)];
      for (long long f = 0; f < out_count; ++f) {
        Out& v = out[b * p.odist + placed(f, out_dims, p.onembed, p.ostride)];
        if constexpr (std::is_arithmetic<Out>::value) v = Out(a[size_t(f)].real());
        else {
          v.x = decltype(v.x)(a[size_t(f)].real());
          v.y = decltype(v.y)(a[size_t(f)].imag());
        }
      }
    }
    return CUFFT_SUCCESS;
  });
}
}  // namespace fft
}  // namespace labkit

inline cufftResult cufftCreate(cufftHandle* h) {
  if (!h) return CUFFT_INVALID_VALUE;
  *h = ::labkit::fft::next_handle()++;
  ::labkit::fft::plans()[*h] = ::labkit::fft::Plan();
  return CUFFT_SUCCESS;
}
inline cufftResult cufftDestroy(cufftHandle h) {
  return ::labkit::fft::plans().erase(h) ? CUFFT_SUCCESS : CUFFT_INVALID_PLAN;
}
inline cufftResult cufftGetVersion(int* v) {
  if (!v) return CUFFT_INVALID_VALUE;
  *v = CUFFT_VERSION;
  return CUFFT_SUCCESS;
}
inline cufftResult cufftSetStream(cufftHandle h, cudaStream_t s) {
  auto it = ::labkit::fft::plans().find(h);
  if (it == ::labkit::fft::plans().end()) return CUFFT_INVALID_PLAN;
  it->second.stream = s;
  return CUFFT_SUCCESS;
}
// A plan's work area: none is needed here, so these only check the plan.
inline cufftResult cufftSetAutoAllocation(cufftHandle h, int) {
  return ::labkit::fft::plans().count(h) ? CUFFT_SUCCESS : CUFFT_INVALID_PLAN;
}
inline cufftResult cufftSetWorkArea(cufftHandle h, void*) {
  return ::labkit::fft::plans().count(h) ? CUFFT_SUCCESS : CUFFT_INVALID_PLAN;
}
inline cufftResult cufftGetSize(cufftHandle h, size_t* size) {
  if (!size) return CUFFT_INVALID_VALUE;
  *size = 0;
  return ::labkit::fft::plans().count(h) ? CUFFT_SUCCESS : CUFFT_INVALID_PLAN;
}
inline cufftResult cufftMakePlanMany(cufftHandle h, int rank, int* n, int* inembed, int istride, int idist,
                                     int* onembed, int ostride, int odist, cufftType type, int batch, size_t* size) {
  if (size) *size = 0;
  return ::labkit::fft::make(h, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch);
}
inline cufftResult cufftMakePlanMany64(cufftHandle h, int rank, long long* n, long long* inembed, long long istride,
                                       long long idist, long long* onembed, long long ostride, long long odist,
                                       cufftType type, long long batch, size_t* size) {
  if (size) *size = 0;
  return ::labkit::fft::make(h, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch);
}
inline cufftResult cufftMakePlan1d(cufftHandle h, int nx, cufftType type, int batch, size_t* size) {
  return cufftMakePlanMany(h, 1, &nx, nullptr, 1, 0, nullptr, 1, 0, type, batch, size);
}
inline cufftResult cufftMakePlan2d(cufftHandle h, int nx, int ny, cufftType type, size_t* size) {
  int n[2] = {nx, ny};
  return cufftMakePlanMany(h, 2, n, nullptr, 1, 0, nullptr, 1, 0, type, 1, size);
}
inline cufftResult cufftMakePlan3d(cufftHandle h, int nx, int ny, int nz, cufftType type, size_t* size) {
  int n[3] = {nx, ny, nz};
  return cufftMakePlanMany(h, 3, n, nullptr, 1, 0, nullptr, 1, 0, type, 1, size);
}
inline cufftResult cufftPlanMany(cufftHandle* h, int rank, int* n, int* inembed, int istride, int idist, int* onembed,
                                 int ostride, int odist, cufftType type, int batch) {
  if (auto r = cufftCreate(h)) return r;
  const cufftResult r = cufftMakePlanMany(*h, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch,
                                          nullptr);
  if (r) cufftDestroy(*h);
  return r;
}
inline cufftResult cufftPlan1d(cufftHandle* h, int nx, cufftType type, int batch) {
  return cufftPlanMany(h, 1, &nx, nullptr, 1, 0, nullptr, 1, 0, type, batch);
}
inline cufftResult cufftPlan2d(cufftHandle* h, int nx, int ny, cufftType type) {
  int n[2] = {nx, ny};
  return cufftPlanMany(h, 2, n, nullptr, 1, 0, nullptr, 1, 0, type, 1);
}
inline cufftResult cufftPlan3d(cufftHandle* h, int nx, int ny, int nz, cufftType type) {
  int n[3] = {nx, ny, nz};
  return cufftPlanMany(h, 3, n, nullptr, 1, 0, nullptr, 1, 0, type, 1);
}
inline cufftResult cufftEstimate1d(int, cufftType, int, size_t* size) {
  if (!size) return CUFFT_INVALID_VALUE;
  *size = 0;
  return CUFFT_SUCCESS;
}

inline cufftResult cufftExecC2C(cufftHandle h, cufftComplex* in, cufftComplex* out, int direction) {
  return ::labkit::fft::exec(h, in, out, direction, CUFFT_C2C, "cufftExecC2C");
}
inline cufftResult cufftExecR2C(cufftHandle h, cufftReal* in, cufftComplex* out) {
  return ::labkit::fft::exec(h, in, out, CUFFT_FORWARD, CUFFT_R2C, "cufftExecR2C");
}
inline cufftResult cufftExecC2R(cufftHandle h, cufftComplex* in, cufftReal* out) {
  return ::labkit::fft::exec(h, in, out, CUFFT_INVERSE, CUFFT_C2R, "cufftExecC2R");
}
inline cufftResult cufftExecZ2Z(cufftHandle h, cufftDoubleComplex* in, cufftDoubleComplex* out, int direction) {
  return ::labkit::fft::exec(h, in, out, direction, CUFFT_Z2Z, "cufftExecZ2Z");
}
inline cufftResult cufftExecD2Z(cufftHandle h, cufftDoubleReal* in, cufftDoubleComplex* out) {
  return ::labkit::fft::exec(h, in, out, CUFFT_FORWARD, CUFFT_D2Z, "cufftExecD2Z");
}
inline cufftResult cufftExecZ2D(cufftHandle h, cufftDoubleComplex* in, cufftDoubleReal* out) {
  return ::labkit::fft::exec(h, in, out, CUFFT_INVERSE, CUFFT_Z2D, "cufftExecZ2D");
}
