// cublas_v2.h for labkit's CPU executor: a part of cuBLAS, computed on the host when it is called (the
// executor's model of a stream), on device or managed memory.
//
// Provided, for float (S) and double (D): the level-1 routines axpy, scal, copy, swap, dot, nrm2,
// asum, iamax; gemv; gemm, gemmBatched, gemmStridedBatched; the batched LU routines getrfBatched,
// getrsBatched and getriBatched.  GemmEx, GemmStridedBatchedEx and GemmBatchedEx over float, double,
// half, bfloat16 and int8 matrices (library_types.h's cudaDataType_t).
// The handle (create, destroy, stream, pointer mode, math mode, version) and the vector and matrix
// copies (cublasSetVector, ...GetMatrix).  Matrices are column-major with leading dimensions, as in
// cuBLAS.  A sum is made in the routine's type in index order: a GPU's cuBLAS adds in an order of its
// own, so results may differ from it in the last bits.  An operand that is not device or managed
// memory, or that runs past its allocation, is reported in words and the call returns
// CUBLAS_STATUS_EXECUTION_FAILED (a GPU would fault).  The rest of cuBLAS (complex types, the other
// routines) is not declared: a program that calls it is refused by name before it is compiled
// (program_source.py reads the routines' names from this file and cublasLt.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>
#include "cuda_runtime.h"
#include "cuda_fp16.h"
#include "cuda_bf16.h"
#include "library_types.h"

#define CUBLAS_API_H_ 1
#define CUBLAS_V2_H_ 1
#define CUBLAS_VER_MAJOR 12
#define CUBLAS_VER_MINOR 4
#define CUBLAS_VER_PATCH 5
#define CUBLAS_VERSION (CUBLAS_VER_MAJOR * 10000 + CUBLAS_VER_MINOR * 100 + CUBLAS_VER_PATCH)
#define CUBLASAPI

enum cublasStatus_t {
  CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1, CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7, CUBLAS_STATUS_ARCH_MISMATCH = 8, CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13, CUBLAS_STATUS_INTERNAL_ERROR = 14, CUBLAS_STATUS_NOT_SUPPORTED = 15,
  CUBLAS_STATUS_LICENSE_ERROR = 16
};
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 };
// The precision a GemmEx sums in, and the type of its alpha and beta (the FAST and PEDANTIC kinds sum
// in float here: a GPU's TF32, FP16 or BF16 tensor cores round the operands first, so its results
// differ from these beyond float's last bits).
enum cublasComputeType_t {
  CUBLAS_COMPUTE_16F = 64, CUBLAS_COMPUTE_16F_PEDANTIC = 65, CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_PEDANTIC = 69,
  CUBLAS_COMPUTE_32F_FAST_16F = 74, CUBLAS_COMPUTE_32F_FAST_16BF = 75, CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
  CUBLAS_COMPUTE_64F = 70, CUBLAS_COMPUTE_64F_PEDANTIC = 71, CUBLAS_COMPUTE_32I = 72, CUBLAS_COMPUTE_32I_PEDANTIC = 73
};
// An algorithm choice: every one computes the same sums here.
enum cublasGemmAlgo_t {
  CUBLAS_GEMM_DFALT = -1, CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_ALGO0 = 0, CUBLAS_GEMM_ALGO1, CUBLAS_GEMM_ALGO2,
  CUBLAS_GEMM_ALGO3, CUBLAS_GEMM_ALGO4, CUBLAS_GEMM_ALGO5, CUBLAS_GEMM_ALGO6, CUBLAS_GEMM_ALGO7, CUBLAS_GEMM_ALGO8,
  CUBLAS_GEMM_ALGO9, CUBLAS_GEMM_ALGO10, CUBLAS_GEMM_ALGO11, CUBLAS_GEMM_ALGO12, CUBLAS_GEMM_ALGO13,
  CUBLAS_GEMM_ALGO14, CUBLAS_GEMM_ALGO15, CUBLAS_GEMM_ALGO16, CUBLAS_GEMM_ALGO17, CUBLAS_GEMM_ALGO18,
  CUBLAS_GEMM_ALGO19, CUBLAS_GEMM_ALGO20, CUBLAS_GEMM_ALGO21, CUBLAS_GEMM_ALGO22, CUBLAS_GEMM_ALGO23,
  CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99, CUBLAS_GEMM_DFALT_TENSOR_OP = 99, CUBLAS_GEMM_ALGO0_TENSOR_OP = 100,
  CUBLAS_GEMM_ALGO1_TENSOR_OP, CUBLAS_GEMM_ALGO2_TENSOR_OP, CUBLAS_GEMM_ALGO3_TENSOR_OP, CUBLAS_GEMM_ALGO4_TENSOR_OP,
  CUBLAS_GEMM_ALGO5_TENSOR_OP, CUBLAS_GEMM_ALGO6_TENSOR_OP, CUBLAS_GEMM_ALGO7_TENSOR_OP, CUBLAS_GEMM_ALGO8_TENSOR_OP,
  CUBLAS_GEMM_ALGO9_TENSOR_OP, CUBLAS_GEMM_ALGO10_TENSOR_OP, CUBLAS_GEMM_ALGO11_TENSOR_OP,
  CUBLAS_GEMM_ALGO12_TENSOR_OP, CUBLAS_GEMM_ALGO13_TENSOR_OP, CUBLAS_GEMM_ALGO14_TENSOR_OP,
  CUBLAS_GEMM_ALGO15_TENSOR_OP
};
enum cublasPointerMode_t { CUBLAS_POINTER_MODE_HOST = 0, CUBLAS_POINTER_MODE_DEVICE = 1 };
enum cublasMath_t { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TENSOR_OP_MATH = 1, CUBLAS_PEDANTIC_MATH = 2,
                    CUBLAS_TF32_TENSOR_OP_MATH = 3 };
struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};
typedef cublasContext* cublasHandle_t;

inline const char* cublasGetStatusName(cublasStatus_t s) {
  switch (s) {
#define LABKIT_S(n) case n: return #n;
    LABKIT_S(CUBLAS_STATUS_SUCCESS) LABKIT_S(CUBLAS_STATUS_NOT_INITIALIZED) LABKIT_S(CUBLAS_STATUS_ALLOC_FAILED)
    LABKIT_S(CUBLAS_STATUS_INVALID_VALUE) LABKIT_S(CUBLAS_STATUS_ARCH_MISMATCH) LABKIT_S(CUBLAS_STATUS_MAPPING_ERROR)
    LABKIT_S(CUBLAS_STATUS_EXECUTION_FAILED) LABKIT_S(CUBLAS_STATUS_INTERNAL_ERROR)
    LABKIT_S(CUBLAS_STATUS_NOT_SUPPORTED) LABKIT_S(CUBLAS_STATUS_LICENSE_ERROR)
#undef LABKIT_S
  }
  return "CUBLAS_STATUS_UNKNOWN";
}
inline const char* cublasGetStatusString(cublasStatus_t s) { return cublasGetStatusName(s); }
// helper_cuda.h's checkCudaErrors names a cuBLAS status with this.
inline const char* _cudaGetErrorEnum(cublasStatus_t s) { return cublasGetStatusName(s); }

inline cublasStatus_t cublasCreate(cublasHandle_t* h) {
  if (!h) return CUBLAS_STATUS_INVALID_VALUE;
  *h = new cublasContext();
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasDestroy(cublasHandle_t h) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasGetVersion(cublasHandle_t, int* v) { *v = CUBLAS_VERSION; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasGetStream(cublasHandle_t h, cudaStream_t* s) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  *s = h->stream;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetPointerMode(cublasHandle_t h, cublasPointerMode_t m) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->pointer_mode = m;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasGetPointerMode(cublasHandle_t h, cublasPointerMode_t* m) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  *m = h->pointer_mode;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->math = m;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasGetMathMode(cublasHandle_t h, cublasMath_t* m) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  *m = h->math;
  return CUBLAS_STATUS_SUCCESS;
}

namespace labkit {
namespace blas {
// The bytes an operand of n elements spaced inc apart spans; a matrix's: its columns, ld apart.
inline size_t vector_bytes(int n, int inc, size_t elem) { return n <= 0 ? 0 : (size_t(n - 1) * size_t(std::abs(inc)) + 1) * elem; }
inline size_t matrix_bytes(int rows, int cols, int ld, size_t elem) {
  return rows <= 0 || cols <= 0 ? 0 : (size_t(cols - 1) * size_t(ld) + size_t(rows)) * elem;
}
// An operand a GPU's cuBLAS reads or writes: device or managed memory, within its allocation.
inline bool operand(const void* p, size_t bytes, const char* call, const char* what) {
  return ::labkit::rt::library_operand(p, bytes, call, what, "cuBLAS");
}
inline cublasStatus_t ready(cublasHandle_t h, const char*) {
  return h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}
// A routine's work, checked arguments captured by value: done now, or recorded into the graph that
// the handle's stream is being captured into (labkit_runtime_api.h's library_work).
template <class Work> inline cublasStatus_t submit(cublasHandle_t h, Work work) {
  return ::labkit::rt::library_work(h->stream, CUBLAS_STATUS_SUCCESS, work);
}
// alpha or beta as the work reads it: a host pointer's value at the call, a device pointer's when the
// work runs (a graph's replay reads what is there then).
template <class T> struct Scalar {
  const T* p;
  T value;
  bool on_device;
  T get() const { return on_device ? *p : value; }
};
template <class T> inline Scalar<T> scalar_of(cublasHandle_t h, const T* p) {
  const bool dev = h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  return {p, dev ? T() : *p, dev};
}
// A scalar argument (alpha, beta) or result: in host or device memory by the handle's pointer mode.
template <class T> inline bool scalar(cublasHandle_t h, const T* p, const char* call, const char* what) {
  if (!p) {
    ::labkit::rt::say("%s: the %s pointer is null", call, what);
    return false;
  }
  return h->pointer_mode == CUBLAS_POINTER_MODE_HOST || operand(p, sizeof(T), call, what);
}
template <class T> inline T at(const T* x, int i, int inc, int n) {   // element i of a strided vector
  return inc >= 0 ? x[size_t(i) * inc] : x[size_t(n - 1 - i) * size_t(-inc)];
}
template <class T> inline T& at(T* x, int i, int inc, int n) {
  return inc >= 0 ? x[size_t(i) * inc] : x[size_t(n - 1 - i) * size_t(-inc)];
}
template <class T> inline T a_elem(const T* a, int lda, cublasOperation_t op, int i, int j) {   // op(A)[i][j]
  return op == CUBLAS_OP_N ? a[i + size_t(j) * lda] : a[j + size_t(i) * lda];
}

template <class T> inline cublasStatus_t axpy(cublasHandle_t h, int n, const T* alpha, const T* x, int incx, T* y,
                                              int incy, const char* call) {
  if (auto s = ready(h, call)) return s;
  if (!scalar(h, alpha, call, "alpha") || !operand(x, vector_bytes(n, incx, sizeof(T)), call, "vector x") ||
      !operand(y, vector_bytes(n, incy, sizeof(T)), call, "vector y"))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  const Scalar<T> a = scalar_of(h, alpha);
  return submit(h, [=] {
    const T al = a.get();
    for (int i = 0; i < n; ++i) at(y, i, incy, n) += al * at(x, i, incx, n);
    return CUBLAS_STATUS_SUCCESS;
  });
}
template <class T> inline cublasStatus_t scal(cublasHandle_t h, int n, const T* alpha, T* x, int incx, const char* call) {
  if (auto s = ready(h, call)) return s;
  if (incx <= 0) return CUBLAS_STATUS_SUCCESS;   // cuBLAS: nothing to do for a non-positive increment
  if (!scalar(h, alpha, call, "alpha") || !operand(x, vector_bytes(n, incx, sizeof(T)), call, "vector x"))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  const Scalar<T> a = scalar_of(h, alpha);
  return submit(h, [=] {
    const T al = a.get();
    for (int i = 0; i < n; ++i) x[size_t(i) * incx] *= al;
    return CUBLAS_STATUS_SUCCESS;
  });
}
template <class T> inline cublasStatus_t copy(cublasHandle_t h, int n, const T* x, int incx, T* y, int incy,
                                              bool swap, const char* call) {
  if (auto s = ready(h, call)) return s;
  if (!operand(x, vector_bytes(n, incx, sizeof(T)), call, "vector x") ||
      !operand(y, vector_bytes(n, incy, sizeof(T)), call, "vector y"))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  return submit(h, [=] {
    for (int i = 0; i < n; ++i) {
      if (swap) std::swap(at(const_cast<T*>(x), i, incx, n), at(y, i, incy, n));
      else at(y, i, incy, n) = at(x, i, incx, n);
    }
    return CUBLAS_STATUS_SUCCESS;
  });
}
// dot, nrm2, asum, iamax: one result, written where the pointer mode says.
template <class T, class R, class F> inline cublasStatus_t reduce(cublasHandle_t h, int n, const T* x, int incx,
                                                                  const T* y, int incy, R* result, F f,
                                                                  const char* call) {
  if (auto s = ready(h, call)) return s;
  if (!scalar(h, result, call, "result") || !operand(x, vector_bytes(n, incx, sizeof(T)), call, "vector x") ||
      (y && !operand(y, vector_bytes(n, incy, sizeof(T)), call, "vector y")))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  return submit(h, [=] {
    *result = f();
    return CUBLAS_STATUS_SUCCESS;
  });
}
template <class T> inline cublasStatus_t gemv(cublasHandle_t h, cublasOperation_t op, int m, int n, const T* alpha,
                                              const T* a, int lda, const T* x, int incx, const T* beta, T* y, int incy,
                                              const char* call) {
  if (auto s = ready(h, call)) return s;
  if (m < 0 || n < 0 || lda < std::max(1, m) || incx == 0 || incy == 0) return CUBLAS_STATUS_INVALID_VALUE;
  const int lx = op == CUBLAS_OP_N ? n : m, ly = op == CUBLAS_OP_N ? m : n;
  if (!scalar(h, alpha, call, "alpha") || !scalar(h, beta, call, "beta") ||
      !operand(a, matrix_bytes(m, n, lda, sizeof(T)), call, "matrix A") ||
      !operand(x, vector_bytes(lx, incx, sizeof(T)), call, "vector x") ||
      !operand(y, vector_bytes(ly, incy, sizeof(T)), call, "vector y"))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  const Scalar<T> sa = scalar_of(h, alpha), sb = scalar_of(h, beta);
  return submit(h, [=] {
    const T al = sa.get(), be = sb.get();
    for (int i = 0; i < ly; ++i) {
      T sum = 0;
      for (int j = 0; j < lx; ++j) sum += a_elem(a, lda, op, i, j) * at(x, j, incx, lx);
      T& out = at(y, i, incy, ly);
      out = be == T(0) ? al * sum : al * sum + be * out;   // beta 0: y is not read (it may hold NaN)
    }
    return CUBLAS_STATUS_SUCCESS;
  });
}
// A matrix as a routine sees it: its data, element type, leading dimension and storage order, and
// whether the routine reads it transposed.
struct Operand {
  const void* p;
  cudaDataType_t type;
  long long ld;
  bool row_major, transposed;
};
inline size_t type_size(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_8I: return 1;
    case CUDA_R_16F: case CUDA_R_16BF: return 2;
    case CUDA_R_32F: case CUDA_R_32I: return 4;
    case CUDA_R_64F: return 8;
    default: return 0;   // a type the routines here do not read
  }
}
// Where op(X)[i][j] is stored.
inline size_t index(const Operand& o, long long i, long long j) {
  if (o.transposed) std::swap(i, j);
  return size_t(o.row_major ? i * o.ld + j : i + j * o.ld);
}
// The bytes a matrix of rows x cols (as stored, before any transpose) spans.
inline size_t span(const Operand& o, long long rows, long long cols) {
  if (rows <= 0 || cols <= 0) return 0;
  return size_t(o.row_major ? (rows - 1) * o.ld + cols : (cols - 1) * o.ld + rows) * type_size(o.type);
}
template <class Acc> inline Acc load(const void* p, cudaDataType_t t, size_t i) {
  switch (t) {
    case CUDA_R_8I: return Acc(static_cast<const int8_t*>(p)[i]);
    case CUDA_R_16F: return Acc(float(static_cast<const __half*>(p)[i]));
    case CUDA_R_16BF: return Acc(float(static_cast<const __nv_bfloat16*>(p)[i]));
    case CUDA_R_32F: return Acc(static_cast<const float*>(p)[i]);
    case CUDA_R_32I: return Acc(static_cast<const int32_t*>(p)[i]);
    case CUDA_R_64F: return Acc(static_cast<const double*>(p)[i]);
    default: return Acc(0);
  }
}
template <class Acc> inline void store(void* p, cudaDataType_t t, size_t i, Acc v) {
  switch (t) {
    case CUDA_R_16F: static_cast<__half*>(p)[i] = __half(float(v)); break;
    case CUDA_R_16BF: static_cast<__nv_bfloat16*>(p)[i] = __nv_bfloat16(float(v)); break;
    case CUDA_R_32F: static_cast<float*>(p)[i] = float(v); break;
    case CUDA_R_32I: static_cast<int32_t*>(p)[i] = int32_t(v); break;
    case CUDA_R_64F: static_cast<double*>(p)[i] = double(v); break;
    default: break;
  }
}
// d = epilogue(alpha * op(a) op(b) + beta * c, i, j) for an m x n result with k terms: each element one
// sum in Acc in index order (a GPU adds in an order of its own: results may differ in the last bits).
// With beta 0, c is not read (it may hold NaN).  The operands are copied out first, each row of op(a)
// and column of op(b) contiguous, so the sums run over adjacent elements.
template <class Acc, class Epilogue>
inline void gemm_core(int m, int n, int k, Acc alpha, const Operand& a, const Operand& b, Acc beta, const Operand& c,
                      const Operand& d, Epilogue epilogue) {
  std::vector<Acc> ap(size_t(m) * k), bp(size_t(n) * k);
  for (int i = 0; i < m; ++i)
    for (int p = 0; p < k; ++p) ap[size_t(i) * k + p] = load<Acc>(a.p, a.type, index(a, i, p));
  for (int j = 0; j < n; ++j)
    for (int p = 0; p < k; ++p) bp[size_t(j) * k + p] = load<Acc>(b.p, b.type, index(b, p, j));
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      const Acc* x = &ap[size_t(i) * k];
      const Acc* y = &bp[size_t(j) * k];
      Acc sum = 0;
      for (int p = 0; p < k; ++p) sum += x[p] * y[p];
      Acc v = alpha * sum;
      if (beta != Acc(0)) v += beta * load<Acc>(c.p, c.type, index(c, i, j));
      store<Acc>(const_cast<void*>(d.p), d.type, index(d, i, j), epilogue(v, i, j));
    }
}
struct NoEpilogue {
  template <class Acc> Acc operator()(Acc v, int, int) const { return v; }
};
// Operand o of batch q, stride elements apart.
inline Operand of_batch(Operand o, long long stride, int q) {
  o.p = static_cast<const char*>(o.p) + q * stride * (long long)type_size(o.type);
  return o;
}
// The operands of `batch` strided products, each checked as device memory within its allocation (C
// only where the product reads it: beta may be other than 0).  The shapes are checked by the caller.
inline bool batch_operands(int m, int n, int k, const Operand& a, long long sa, const Operand& b, long long sb,
                           bool reads_c, const Operand& c, long long sc, const Operand& d, long long sd, int batch,
                           const char* call) {
  const long long ar = a.transposed ? k : m, ac = a.transposed ? m : k;
  const long long br = b.transposed ? n : k, bc = b.transposed ? k : n;
  for (int q = 0; q < batch; ++q) {
    const Operand A = of_batch(a, sa, q), B = of_batch(b, sb, q), C = of_batch(c, sc, q), D = of_batch(d, sd, q);
    if (!operand(A.p, span(A, ar, ac), call, "matrix A") || !operand(B.p, span(B, br, bc), call, "matrix B") ||
        (reads_c && !operand(C.p, span(C, m, n), call, "matrix C")) ||
        !operand(D.p, span(D, m, n), call, C.p == D.p ? "matrix C" : "matrix D"))
      return false;
  }
  return true;
}
// The `batch` products, their operands checked before (batch_operands).
template <class Acc, class Epilogue = NoEpilogue>
inline void batch_products(int m, int n, int k, Acc alpha, const Operand& a, long long sa, const Operand& b,
                           long long sb, Acc beta, const Operand& c, long long sc, const Operand& d, long long sd,
                           int batch, Epilogue epilogue = {}) {
  for (int q = 0; q < batch; ++q)
    gemm_core<Acc>(m, n, k, alpha, of_batch(a, sa, q), of_batch(b, sb, q), beta, of_batch(c, sc, q),
                   of_batch(d, sd, q), epilogue);
}
template <class T> struct DataType;
template <> struct DataType<float> { static constexpr cudaDataType_t value = CUDA_R_32F; };
template <> struct DataType<double> { static constexpr cudaDataType_t value = CUDA_R_64F; };

template <class T> inline cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                              int n, int k, const T* alpha, const T* a, int lda, long long sa,
                                              const T* b, int ldb, long long sb, const T* beta, T* c, int ldc,
                                              long long sc, int batch, const char* call) {
  if (auto s = ready(h, call)) return s;
  const int ar = ta == CUBLAS_OP_N ? m : k;
  const int br = tb == CUBLAS_OP_N ? k : n;
  if (m < 0 || n < 0 || k < 0 || batch < 0 || lda < std::max(1, ar) || ldb < std::max(1, br) || ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!scalar(h, alpha, call, "alpha") || !scalar(h, beta, call, "beta")) return CUBLAS_STATUS_EXECUTION_FAILED;
  const cudaDataType_t t = DataType<T>::value;
  const Operand C{c, t, ldc, false, false};
  const Operand A{a, t, lda, false, ta != CUBLAS_OP_N}, B{b, t, ldb, false, tb != CUBLAS_OP_N};
  const Scalar<T> al = scalar_of(h, alpha), be = scalar_of(h, beta);
  if (!batch_operands(m, n, k, A, sa, B, sb, be.on_device || be.value != T(0), C, sc, C, sc, batch, call))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  return submit(h, [=] {
    batch_products<T>(m, n, k, al.get(), A, sa, B, sb, be.get(), C, sc, C, sc, batch);
    return CUBLAS_STATUS_SUCCESS;
  });
}
// gemmBatched: the matrices' addresses in arrays that are themselves in device memory.
template <class T> inline cublasStatus_t gemm_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                                      int m, int n, int k, const T* alpha, const T* const* a, int lda,
                                                      const T* const* b, int ldb, const T* beta, T* const* c, int ldc,
                                                      int batch, const char* call) {
  if (auto s = ready(h, call)) return s;
  if (batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  const size_t bytes = size_t(batch) * sizeof(void*);
  if (batch > 0 && (!operand(a, bytes, call, "array of A matrices") || !operand(b, bytes, call, "array of B matrices") ||
                    !operand(c, bytes, call, "array of C matrices")))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  for (int q = 0; q < batch; ++q)
    if (auto s = gemm(h, ta, tb, m, n, k, alpha, a[q], lda, 0, b[q], ldb, 0, beta, c[q], ldc, 0, 1, call)) return s;
  return CUBLAS_STATUS_SUCCESS;
}
// The batched LU routines (getrf, getrs, getri), as LAPACK defines them, on arrays of the n x n
// matrices' addresses in device memory.  Each matrix is checked as a device operand first.
template <class T> inline bool matrices(T* const* a, int lda, int n, int cols, int batch, const char* call,
                                        const char* what) {
  if (batch > 0 && !operand(a, size_t(batch) * sizeof(void*), call, what)) return false;
  for (int q = 0; q < batch; ++q)
    if (!operand(a[q], matrix_bytes(n, cols, lda, sizeof(T)), call, what)) return false;
  return true;
}
// getrf: P A = L U with partial pivoting (none where pivots is null), unblocked and right-looking as
// LAPACK's getf2; pivots 1-based; info[q] the first k (1-based) with U(k, k) exactly 0, else 0.
template <class T> inline cublasStatus_t getrf_batched(cublasHandle_t h, int n, T* const a[], int lda, int* pivots,
                                                       int* info, int batch, const char* call) {
  if (auto s = ready(h, call)) return s;
  if (n < 0 || lda < std::max(1, n) || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (!matrices(a, lda, n, n, batch, call, "matrix A") || !operand(info, size_t(batch) * sizeof(int), call, "info") ||
      (pivots && !operand(pivots, size_t(batch) * n * sizeof(int), call, "pivot array")))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  return submit(h, [=] {
    for (int q = 0; q < batch; ++q) {
      T* A = a[q];
      auto at = [&](int i, int j) -> T& { return A[i + size_t(j) * lda]; };
      info[q] = 0;
      for (int k = 0; k < n; ++k) {
        int p = k;
        if (pivots) {
          for (int i = k + 1; i < n; ++i)
            if (std::fabs(at(i, k)) > std::fabs(at(p, k))) p = i;
          pivots[size_t(q) * n + k] = p + 1;
        }
        if (at(p, k) == T(0)) {
          if (!info[q]) info[q] = k + 1;
          continue;
        }
        if (p != k)
          for (int j = 0; j < n; ++j) std::swap(at(k, j), at(p, j));
        for (int i = k + 1; i < n; ++i) at(i, k) /= at(k, k);
        for (int j = k + 1; j < n; ++j)
          for (int i = k + 1; i < n; ++i) at(i, j) -= at(i, k) * at(k, j);
      }
    }
    return CUBLAS_STATUS_SUCCESS;
  });
}
// Solves op(A) X = B in place in B (n x nrhs) with getrf's factors of A and its pivots (or none).
template <class T> inline void lu_solve(cublasOperation_t op, int n, int nrhs, const T* A, int lda, const int* pivots,
                                        T* B, int ldb) {
  auto lu = [&](int i, int j) { return A[i + size_t(j) * lda]; };
  for (int c = 0; c < nrhs; ++c) {
    T* x = B + size_t(c) * ldb;
    if (op == CUBLAS_OP_N) {
      for (int k = 0; pivots && k < n; ++k) std::swap(x[k], x[pivots[k] - 1]);
      for (int i = 0; i < n; ++i)                 // L y = P b (unit diagonal)
        for (int j = 0; j < i; ++j) x[i] -= lu(i, j) * x[j];
      for (int i = n - 1; i >= 0; --i) {          // U x = y
        for (int j = i + 1; j < n; ++j) x[i] -= lu(i, j) * x[j];
        x[i] /= lu(i, i);
      }
    } else {                                      // A^T x = b: U^T y = b, L^T z = y, x = P^T z
      for (int i = 0; i < n; ++i) {
        for (int j = 0; j < i; ++j) x[i] -= lu(j, i) * x[j];
        x[i] /= lu(i, i);
      }
      for (int i = n - 1; i >= 0; --i)
        for (int j = i + 1; j < n; ++j) x[i] -= lu(j, i) * x[j];
      for (int k = n - 1; pivots && k >= 0; --k) std::swap(x[k], x[pivots[k] - 1]);
    }
  }
}
// getrs: op(A) X = B for each matrix of the batch; info (host memory) names an argument out of range.
template <class T> inline cublasStatus_t getrs_batched(cublasHandle_t h, cublasOperation_t op, int n, int nrhs,
                                                       const T* const a[], int lda, const int* pivots,
                                                       T* const b[], int ldb, int* info, int batch, const char* call) {
  if (auto s = ready(h, call)) return s;
  if (!info) return CUBLAS_STATUS_INVALID_VALUE;
  *info = n < 0 ? -2 : nrhs < 0 ? -3 : lda < std::max(1, n) ? -6 : ldb < std::max(1, n) ? -9 : batch < 0 ? -11 : 0;
  if (*info) return CUBLAS_STATUS_INVALID_VALUE;
  if (!matrices(const_cast<T* const*>(a), lda, n, n, batch, call, "matrix A") ||
      !matrices(b, ldb, n, nrhs, batch, call, "matrix B") ||
      (pivots && !operand(pivots, size_t(batch) * n * sizeof(int), call, "pivot array")))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  return submit(h, [=] {
    for (int q = 0; q < batch; ++q)
      lu_solve(op, n, nrhs, a[q], lda, pivots ? pivots + size_t(q) * n : nullptr, b[q], ldb);
    return CUBLAS_STATUS_SUCCESS;
  });
}
// getri: each C = A^-1 from getrf's factors (out of place, as cuBLAS's getriBatched); info[q] as
// getrf's: the first exactly zero U(k, k), where C is left as it was.
template <class T> inline cublasStatus_t getri_batched(cublasHandle_t h, int n, const T* const a[], int lda,
                                                       const int* pivots, T* const c[], int ldc, int* info,
                                                       int batch, const char* call) {
  if (auto s = ready(h, call)) return s;
  if (n < 0 || lda < std::max(1, n) || ldc < std::max(1, n) || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (!matrices(const_cast<T* const*>(a), lda, n, n, batch, call, "matrix A") ||
      !matrices(c, ldc, n, n, batch, call, "matrix C") || !operand(info, size_t(batch) * sizeof(int), call, "info") ||
      (pivots && !operand(pivots, size_t(batch) * n * sizeof(int), call, "pivot array")))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  return submit(h, [=] {
    for (int q = 0; q < batch; ++q) {
      info[q] = 0;
      for (int k = 0; k < n && !info[q]; ++k)
        if (a[q][k + size_t(k) * lda] == T(0)) info[q] = k + 1;
      if (info[q]) continue;
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < n; ++i) c[q][i + size_t(j) * ldc] = T(i == j);
      lu_solve(CUBLAS_OP_N, n, n, a[q], lda, pivots ? pivots + size_t(q) * n : nullptr, c[q], ldc);
    }
    return CUBLAS_STATUS_SUCCESS;
  });
}
// cublasSetVector / GetVector / SetMatrix / GetMatrix: strided copies between host and device memory.
inline cublasStatus_t copy_matrix(int rows, int cols, int elem, const void* src, int lds, void* dst, int ldd,
                                  bool to_device, const char* call) {
  if (rows < 0 || cols < 0 || elem <= 0 || lds < std::max(1, rows) || ldd < std::max(1, rows))
    return CUBLAS_STATUS_INVALID_VALUE;
  const size_t dev_bytes = matrix_bytes(rows, cols, to_device ? ldd : lds, size_t(elem));
  if (!operand(to_device ? dst : src, dev_bytes, call, to_device ? "destination" : "source"))
    return CUBLAS_STATUS_MAPPING_ERROR;
  ::labkit::rt::unguard_all();
  for (int j = 0; j < cols; ++j)
    std::memcpy(static_cast<char*>(dst) + size_t(j) * ldd * elem, static_cast<const char*>(src) + size_t(j) * lds * elem,
                size_t(rows) * elem);
  return CUBLAS_STATUS_SUCCESS;
}
}  // namespace blas
}  // namespace labkit

#define LABKIT_BLAS_REAL(P, p, T)                                                                                      \
  inline cublasStatus_t cublas##P##axpy(cublasHandle_t h, int n, const T* alpha, const T* x, int incx, T* y, int incy) { \
    return ::labkit::blas::axpy(h, n, alpha, x, incx, y, incy, "cublas" #P "axpy");                                    \
  }                                                                                                                    \
  inline cublasStatus_t cublas##P##scal(cublasHandle_t h, int n, const T* alpha, T* x, int incx) {                    \
    return ::labkit::blas::scal(h, n, alpha, x, incx, "cublas" #P "scal");                                             \
  }                                                                                                                    \
  inline cublasStatus_t cublas##P##copy(cublasHandle_t h, int n, const T* x, int incx, T* y, int incy) {              \
    return ::labkit::blas::copy(h, n, x, incx, y, incy, false, "cublas" #P "copy");                                    \
  }                                                                                                                    \
  inline cublasStatus_t cublas##P##swap(cublasHandle_t h, int n, T* x, int incx, T* y, int incy) {                    \
    return ::labkit::blas::copy(h, n, static_cast<const T*>(x), incx, y, incy, true, "cublas" #P "swap");             \
  }                                                                                                                    \
  inline cublasStatus_t cublas##P##dot(cublasHandle_t h, int n, const T* x, int incx, const T* y, int incy, T* r) {   \
    return ::labkit::blas::reduce(h, n, x, incx, y, incy, r, [=] {                                                     \
      T s = 0;                                                                                                         \
      for (int i = 0; i < n; ++i) s += ::labkit::blas::at(x, i, incx, n) * ::labkit::blas::at(y, i, incy, n);         \
      return s;                                                                                                        \
    }, "cublas" #P "dot");                                                                                             \
  }                                                                                                                    \
  inline cublasStatus_t cublas##P##nrm2(cublasHandle_t h, int n, const T* x, int incx, T* r) {                        \
    return ::labkit::blas::reduce(h, n, x, incx, static_cast<const T*>(nullptr), 0, r, [=] {                          \
      T s = 0;                                                                                                         \
      for (int i = 0; incx > 0 && i < n; ++i) s += x[size_t(i) * incx] * x[size_t(i) * incx];                         \
      return T(std::sqrt(s));                                                                                          \
    }, "cublas" #P "nrm2");                                                                                            \
  }                                                                                                                    \
  inline cublasStatus_t cublas##P##asum(cublasHandle_t h, int n, const T* x, int incx, T* r) {                        \
    return ::labkit::blas::reduce(h, n, x, incx, static_cast<const T*>(nullptr), 0, r, [=] {                          \
      T s = 0;                                                                                                         \
      for (int i = 0; incx > 0 && i < n; ++i) s += std::fabs(x[size_t(i) * incx]);                                    \
      return s;                                                                                                        \
    }, "cublas" #P "asum");                                                                                            \
  }                                                                                                                    \
  inline cublasStatus_t cublasI##p##amax(cublasHandle_t h, int n, const T* x, int incx, int* r) {                     \
    return ::labkit::blas::reduce(h, n, x, incx, static_cast<const T*>(nullptr), 0, r, [=] {                          \
      int best = 0; /* 1-based, as in Fortran BLAS; 0 for an empty vector */                                          \
      for (int i = 0; incx > 0 && i < n; ++i)                                                                          \
        if (!best || std::fabs(x[size_t(i) * incx]) > std::fabs(x[size_t(best - 1) * incx])) best = i + 1;            \
      return best;                                                                                                     \
    }, "cublasI" #p "amax");                                                                                           \
  }                                                                                                                    \
  inline cublasStatus_t cublas##P##gemv(cublasHandle_t h, cublasOperation_t op, int m, int n, const T* alpha,         \
                                        const T* a, int lda, const T* x, int incx, const T* beta, T* y, int incy) {    \
    return ::labkit::blas::gemv(h, op, m, n, alpha, a, lda, x, incx, beta, y, incy, "cublas" #P "gemv");              \
  }                                                                                                                    \
  inline cublasStatus_t cublas##P##gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,   \
                                        int k, const T* alpha, const T* a, int lda, const T* b, int ldb,               \
                                        const T* beta, T* c, int ldc) {                                                \
    return ::labkit::blas::gemm(h, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1,                  \
                                "cublas" #P "gemm");                                                                   \
  }                                                                                                                    \
  inline cublasStatus_t cublas##P##gemmStridedBatched(                                                                \
      cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const T* alpha, const T* a,   \
      int lda, long long sa, const T* b, int ldb, long long sb, const T* beta, T* c, int ldc, long long sc,            \
      int batch) {                                                                                                     \
    return ::labkit::blas::gemm(h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, batch,           \
                                "cublas" #P "gemmStridedBatched");                                                     \
  }                                                                                                                    \
  inline cublasStatus_t cublas##P##getrfBatched(cublasHandle_t h, int n, T* const a[], int lda, int* pivots,          \
                                               int* info, int batch) {                                                 \
    return ::labkit::blas::getrf_batched(h, n, a, lda, pivots, info, batch, "cublas" #P "getrfBatched");              \
  }                                                                                                                    \
  inline cublasStatus_t cublas##P##getrsBatched(cublasHandle_t h, cublasOperation_t op, int n, int nrhs,              \
                                               const T* const a[], int lda, const int* pivots, T* const b[], int ldb,  \
                                               int* info, int batch) {                                                 \
    return ::labkit::blas::getrs_batched(h, op, n, nrhs, a, lda, pivots, b, ldb, info, batch,                         \
                                         "cublas" #P "getrsBatched");                                                  \
  }                                                                                                                    \
  inline cublasStatus_t cublas##P##getriBatched(cublasHandle_t h, int n, const T* const a[], int lda,                 \
                                               const int* pivots, T* const c[], int ldc, int* info, int batch) {       \
    return ::labkit::blas::getri_batched(h, n, a, lda, pivots, c, ldc, info, batch, "cublas" #P "getriBatched");      \
  }                                                                                                                    \
  inline cublasStatus_t cublas##P##gemmBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,   \
                                               int n, int k, const T* alpha, const T* const a[], int lda,              \
                                               const T* const b[], int ldb, const T* beta, T* const c[], int ldc,      \
                                               int batch) {                                                            \
    return ::labkit::blas::gemm_batched(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, batch,               \
                                        "cublas" #P "gemmBatched");                                                    \
  }
LABKIT_BLAS_REAL(S, s, float)
LABKIT_BLAS_REAL(D, d, double)
#undef LABKIT_BLAS_REAL

namespace labkit {
namespace blas {
inline const char* type_name(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_8I: return "CUDA_R_8I";
    case CUDA_R_16F: return "CUDA_R_16F";
    case CUDA_R_16BF: return "CUDA_R_16BF";
    case CUDA_R_32F: return "CUDA_R_32F";
    case CUDA_R_32I: return "CUDA_R_32I";
    case CUDA_R_64F: return "CUDA_R_64F";
    default: return "a complex, fp8, 4-bit or unsigned type";
  }
}
// The sum's kind for a compute type and the matrices' types: 'd' (double), 'f' (float), 'i' (int),
// or 0 where cuBLAS has no such combination or this one is not provided.
inline char ex_kind(cublasComputeType_t compute, cudaDataType_t at, cudaDataType_t bt, cudaDataType_t ct) {
  switch (compute) {
    case CUBLAS_COMPUTE_64F: case CUBLAS_COMPUTE_64F_PEDANTIC:
      return at == CUDA_R_64F && bt == CUDA_R_64F && ct == CUDA_R_64F ? 'd' : 0;
    case CUBLAS_COMPUTE_16F: case CUBLAS_COMPUTE_16F_PEDANTIC:
      return at == CUDA_R_16F && bt == CUDA_R_16F && ct == CUDA_R_16F ? 'h' : 0;
    case CUBLAS_COMPUTE_32I: case CUBLAS_COMPUTE_32I_PEDANTIC:
      return at == CUDA_R_8I && bt == CUDA_R_8I && ct == CUDA_R_32I ? 'i' : 0;
    case CUBLAS_COMPUTE_32F: case CUBLAS_COMPUTE_32F_PEDANTIC: case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF: case CUBLAS_COMPUTE_32F_FAST_TF32:
      if (at != bt) return 0;
      if (at == CUDA_R_32F) return ct == CUDA_R_32F ? 'f' : 0;
      if (at == CUDA_R_16F || at == CUDA_R_16BF) return ct == at || ct == CUDA_R_32F ? 'f' : 0;
      return at == CUDA_R_8I && ct == CUDA_R_32F ? 'f' : 0;
  }
  return 0;
}
// GemmEx, its strided batches and its batches of pointers: alpha and beta in the compute type's
// scalar type (half for COMPUTE_16F, int for COMPUTE_32I), the sum in float (double for 64F, int for
// 32I; COMPUTE_16F sums in float and rounds each result to half once).
template <class Acc, class S>
inline cublasStatus_t gemm_ex_as(cublasHandle_t h, int m, int n, int k, const void* alpha, Operand a, long long sa,
                                 Operand b, long long sb, const void* beta, Operand c, long long sc, int batch,
                                 const char* call) {
  if (!scalar(h, static_cast<const S*>(alpha), call, "alpha") || !scalar(h, static_cast<const S*>(beta), call, "beta"))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  const Scalar<S> al = scalar_of(h, static_cast<const S*>(alpha)), be = scalar_of(h, static_cast<const S*>(beta));
  if (!batch_operands(m, n, k, a, sa, b, sb, be.on_device || Acc(be.value) != Acc(0), c, sc, c, sc, batch, call))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  return submit(h, [=] {
    batch_products<Acc>(m, n, k, Acc(al.get()), a, sa, b, sb, Acc(be.get()), c, sc, c, sc, batch);
    return CUBLAS_STATUS_SUCCESS;
  });
}
inline cublasStatus_t gemm_ex(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              const void* alpha, const void* a, cudaDataType_t at, int lda, long long sa, const void* b,
                              cudaDataType_t bt, int ldb, long long sb, const void* beta, void* c, cudaDataType_t ct,
                              int ldc, long long sc, int batch, cublasComputeType_t compute, const char* call) {
  if (auto s = ready(h, call)) return s;
  const int ar = ta == CUBLAS_OP_N ? m : k, br = tb == CUBLAS_OP_N ? k : n;
  if (m < 0 || n < 0 || k < 0 || batch < 0 || lda < std::max(1, ar) || ldb < std::max(1, br) || ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  const char kind = ex_kind(compute, at, bt, ct);
  if (!kind) {
    ::labkit::rt::say("%s: A of %s, B of %s and C of %s with compute type %d is not a combination labkit's cuBLAS "
                      "provides (it has 64F; 32F over 32F, 16F, 16BF or 8I matrices; 16F; 32I over 8I)", call,
                      type_name(at), type_name(bt), type_name(ct), int(compute));
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  // cuBLAS's int8 products (32I) need A and B at 4-byte boundaries, each batch's too, and lda, ldb
  // multiples of 4: it answers NOT_SUPPORTED otherwise.
  const auto aligned = [](const void* p, long long stride) {
    return reinterpret_cast<uintptr_t>(p) % 4 == 0 && stride % 4 == 0;
  };
  if (kind == 'i' && (lda % 4 || ldb % 4 || !aligned(a, sa) || !aligned(b, sb))) {
    ::labkit::rt::say("%s: an int8 product (compute type 32I) needs lda and ldb multiples of 4 and A and B (each "
                      "batch's) at 4-byte boundaries: lda %d, ldb %d", call, lda, ldb);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const Operand A{a, at, lda, false, ta != CUBLAS_OP_N}, B{b, bt, ldb, false, tb != CUBLAS_OP_N};
  const Operand C{c, ct, ldc, false, false};
  switch (kind) {
    case 'd': return gemm_ex_as<double, double>(h, m, n, k, alpha, A, sa, B, sb, beta, C, sc, batch, call);
    case 'h': return gemm_ex_as<float, __half>(h, m, n, k, alpha, A, sa, B, sb, beta, C, sc, batch, call);
    case 'i': return gemm_ex_as<int32_t, int32_t>(h, m, n, k, alpha, A, sa, B, sb, beta, C, sc, batch, call);
    default: return gemm_ex_as<float, float>(h, m, n, k, alpha, A, sa, B, sb, beta, C, sc, batch, call);
  }
}
}  // namespace blas
}  // namespace labkit

inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const void* alpha, const void* a, cudaDataType_t at, int lda, const void* b,
                                   cudaDataType_t bt, int ldb, const void* beta, void* c, cudaDataType_t ct, int ldc,
                                   cublasComputeType_t compute, cublasGemmAlgo_t) {
  return ::labkit::blas::gemm_ex(h, ta, tb, m, n, k, alpha, a, at, lda, 0, b, bt, ldb, 0, beta, c, ct, ldc, 0, 1,
                                 compute, "cublasGemmEx");
}
inline cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                 int n, int k, const void* alpha, const void* a, cudaDataType_t at,
                                                 int lda, long long sa, const void* b, cudaDataType_t bt, int ldb,
                                                 long long sb, const void* beta, void* c, cudaDataType_t ct, int ldc,
                                                 long long sc, int batch, cublasComputeType_t compute,
                                                 cublasGemmAlgo_t) {
  return ::labkit::blas::gemm_ex(h, ta, tb, m, n, k, alpha, a, at, lda, sa, b, bt, ldb, sb, beta, c, ct, ldc, sc,
                                 batch, compute, "cublasGemmStridedBatchedEx");
}
inline cublasStatus_t cublasGemmBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void* alpha, const void* const a[], cudaDataType_t at, int lda,
                                          const void* const b[], cudaDataType_t bt, int ldb, const void* beta,
                                          void* const c[], cudaDataType_t ct, int ldc, int batch,
                                          cublasComputeType_t compute, cublasGemmAlgo_t) {
  const char* call = "cublasGemmBatchedEx";
  if (auto s = ::labkit::blas::ready(h, call)) return s;
  if (batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  const size_t bytes = size_t(batch) * sizeof(void*);
  if (batch > 0 && (!::labkit::blas::operand(a, bytes, call, "array of A matrices") ||
                    !::labkit::blas::operand(b, bytes, call, "array of B matrices") ||
                    !::labkit::blas::operand(c, bytes, call, "array of C matrices")))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  for (int q = 0; q < batch; ++q)
    if (auto s = ::labkit::blas::gemm_ex(h, ta, tb, m, n, k, alpha, a[q], at, lda, 0, b[q], bt, ldb, 0, beta, c[q], ct,
                                         ldc, 0, 1, compute, call))
      return s;
  return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasSetVector(int n, int elem, const void* x, int incx, void* y, int incy) {
  if (incx <= 0 || incy <= 0) return CUBLAS_STATUS_INVALID_VALUE;
  return ::labkit::blas::copy_matrix(1, n, elem, x, incx, y, incy, true, "cublasSetVector");
}
inline cublasStatus_t cublasGetVector(int n, int elem, const void* x, int incx, void* y, int incy) {
  if (incx <= 0 || incy <= 0) return CUBLAS_STATUS_INVALID_VALUE;
  return ::labkit::blas::copy_matrix(1, n, elem, x, incx, y, incy, false, "cublasGetVector");
}
inline cublasStatus_t cublasSetMatrix(int rows, int cols, int elem, const void* a, int lda, void* b, int ldb) {
  return ::labkit::blas::copy_matrix(rows, cols, elem, a, lda, b, ldb, true, "cublasSetMatrix");
}
inline cublasStatus_t cublasGetMatrix(int rows, int cols, int elem, const void* a, int lda, void* b, int ldb) {
  return ::labkit::blas::copy_matrix(rows, cols, elem, a, lda, b, ldb, false, "cublasGetMatrix");
}
