// cublasLt.h for labkit's CPU executor: cuBLASLt's matrix multiply, computed on the host when it is
// called (as cublas_v2.h's routines are), on device or managed memory.
//
// Provided: the handle; matmul descriptors (compute and scale type, pointer mode, transposes, and
// every epilogue: bias, ReLU and GELU (the tanh approximation, as cuBLASLt's), their auxiliary
// outputs (GELU's input; ReLU's bit mask, one bit per element of D in column order, ld bits apart),
// their gradients DRELU and DGELU from such an auxiliary input, and the bias gradients BGRADA,
// BGRADB and DRELU_BGRAD / DGELU_BGRAD);
// matrix layouts (type, row or column order, rows, cols, leading dimension, batch count and strided
// batch offset); preferences and the heuristic (one algorithm, no workspace); cublasLtMatmul.  The
// types and compute types are GemmEx's (cublas_v2.h).  An attribute or epilogue not provided is
// reported in words and its call returns CUBLAS_STATUS_NOT_SUPPORTED; a routine not declared here is
// refused by name before the program is compiled (program_source.py reads the names from this file).
#pragma once

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>
#include "cublas_v2.h"

#define CUBLASLT_VERSION CUBLAS_VERSION

struct cublasLtContext {};
typedef cublasLtContext* cublasLtHandle_t;

enum cublasLtOrder_t { CUBLASLT_ORDER_COL = 0, CUBLASLT_ORDER_ROW = 1, CUBLASLT_ORDER_COL32 = 2,
                       CUBLASLT_ORDER_COL4_4R2_8C = 3, CUBLASLT_ORDER_COL32_2R_4R4 = 4 };
enum cublasLtPointerMode_t {
  CUBLASLT_POINTER_MODE_HOST = 0, CUBLASLT_POINTER_MODE_DEVICE = 1, CUBLASLT_POINTER_MODE_DEVICE_VECTOR = 2,
  CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO = 3, CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST = 4
};
enum cublasLtEpilogue_t {
  CUBLASLT_EPILOGUE_DEFAULT = 1, CUBLASLT_EPILOGUE_RELU = 2, CUBLASLT_EPILOGUE_RELU_AUX = 130,
  CUBLASLT_EPILOGUE_BIAS = 4, CUBLASLT_EPILOGUE_RELU_BIAS = 6, CUBLASLT_EPILOGUE_RELU_AUX_BIAS = 134,
  CUBLASLT_EPILOGUE_DRELU = 136, CUBLASLT_EPILOGUE_DRELU_BGRAD = 152, CUBLASLT_EPILOGUE_GELU = 32,
  CUBLASLT_EPILOGUE_GELU_AUX = 160, CUBLASLT_EPILOGUE_GELU_BIAS = 36, CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164,
  CUBLASLT_EPILOGUE_DGELU = 192, CUBLASLT_EPILOGUE_DGELU_BGRAD = 208, CUBLASLT_EPILOGUE_BGRADA = 256,
  CUBLASLT_EPILOGUE_BGRADB = 512
};
enum cublasLtMatrixLayoutAttribute_t {
  CUBLASLT_MATRIX_LAYOUT_TYPE = 0, CUBLASLT_MATRIX_LAYOUT_ORDER = 1, CUBLASLT_MATRIX_LAYOUT_ROWS = 2,
  CUBLASLT_MATRIX_LAYOUT_COLS = 3, CUBLASLT_MATRIX_LAYOUT_LD = 4, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,
  CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6, CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET = 7
};
enum cublasLtMatmulDescAttributes_t {
  CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0, CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1, CUBLASLT_MATMUL_DESC_POINTER_MODE = 2,
  CUBLASLT_MATMUL_DESC_TRANSA = 3, CUBLASLT_MATMUL_DESC_TRANSB = 4, CUBLASLT_MATMUL_DESC_TRANSC = 5,
  CUBLASLT_MATMUL_DESC_FILL_MODE = 6, CUBLASLT_MATMUL_DESC_EPILOGUE = 7, CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
  CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE = 10, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE = 13,
  CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE = 14, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET = 15,
  CUBLASLT_MATMUL_DESC_A_SCALE_POINTER = 17, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER = 18,
  CUBLASLT_MATMUL_DESC_C_SCALE_POINTER = 19, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER = 20,
  CUBLASLT_MATMUL_DESC_AMAX_D_POINTER = 21, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE = 22,
  CUBLASLT_MATMUL_DESC_FAST_ACCUM = 25, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26
};
enum cublasLtMatmulPreferenceAttributes_t {
  CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
  CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 3, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8, CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT = 9,
  CUBLASLT_MATMUL_PREF_IMPL_MASK = 12
};

struct cublasLtMatmulDescOpaque_t {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasLtPointerMode_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  cudaDataType_t bias_type;
  bool bias_type_set = false;
  long long bias_batch_stride = 0;
  void* aux = nullptr;
  int64_t aux_ld = 0, aux_batch_stride = 0;
  cudaDataType_t aux_type;
  bool aux_type_set = false;
};
typedef cublasLtMatmulDescOpaque_t* cublasLtMatmulDesc_t;
struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
  cublasLtOrder_t order = CUBLASLT_ORDER_COL;
  int32_t batch = 1;
  int64_t batch_stride = 0;
};
typedef cublasLtMatrixLayoutOpaque_t* cublasLtMatrixLayout_t;
struct cublasLtMatmulPreferenceOpaque_t {
  uint64_t max_workspace = 0;
};
typedef cublasLtMatmulPreferenceOpaque_t* cublasLtMatmulPreference_t;
struct cublasLtMatmulAlgo_t {
  uint64_t data[8];
};
struct cublasLtMatmulHeuristicResult_t {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
};

inline cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  if (!h) return CUBLAS_STATUS_INVALID_VALUE;
  *h = new cublasLtContext();
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
inline size_t cublasLtGetVersion() { return CUBLASLT_VERSION; }
inline const char* cublasLtGetStatusName(cublasStatus_t s) { return cublasGetStatusName(s); }
inline const char* cublasLtGetStatusString(cublasStatus_t s) { return cublasGetStatusString(s); }

namespace labkit {
namespace blaslt {
// An attribute's value copied in or out: its size must be the attribute's own.
template <class T> inline bool put(T& field, const void* buf, size_t n, const char* call, const char* name) {
  if (!buf || n != sizeof(T)) {
    ::labkit::rt::say("%s: %s takes %zu bytes, got %zu", call, name, sizeof(T), n);
    return false;
  }
  std::memcpy(&field, buf, sizeof(T));
  return true;
}
template <class T> inline cublasStatus_t get(const T& field, void* buf, size_t n, size_t* written) {
  if (written) *written = sizeof(T);
  if (n == 0 && written) return CUBLAS_STATUS_SUCCESS;   // a query of the size
  if (!buf || n < sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(buf, &field, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t not_provided(const char* call, const char* what, int value) {
  ::labkit::rt::say("%s: %s (%d) is not one labkit's cuBLASLt provides", call, what, value);
  return CUBLAS_STATUS_NOT_SUPPORTED;
}
// What an epilogue reads and writes besides A, B, C and D (cuBLASLt's epilogue bits: 4 a bias, 2
// ReLU, 32 GELU, 128 an auxiliary output or input, 8/64 its gradient, 16/256/512 a bias gradient).
inline bool known_epilogue(int e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: case CUBLASLT_EPILOGUE_RELU: case CUBLASLT_EPILOGUE_RELU_AUX:
    case CUBLASLT_EPILOGUE_BIAS: case CUBLASLT_EPILOGUE_RELU_BIAS: case CUBLASLT_EPILOGUE_RELU_AUX_BIAS:
    case CUBLASLT_EPILOGUE_DRELU: case CUBLASLT_EPILOGUE_DRELU_BGRAD: case CUBLASLT_EPILOGUE_GELU:
    case CUBLASLT_EPILOGUE_GELU_AUX: case CUBLASLT_EPILOGUE_GELU_BIAS: case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
    case CUBLASLT_EPILOGUE_DGELU: case CUBLASLT_EPILOGUE_DGELU_BGRAD: case CUBLASLT_EPILOGUE_BGRADA:
    case CUBLASLT_EPILOGUE_BGRADB: return true;
  }
  return false;
}
inline bool has_bias(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
         e == CUBLASLT_EPILOGUE_RELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
inline bool is_relu(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_RELU || e == CUBLASLT_EPILOGUE_RELU_BIAS || e == CUBLASLT_EPILOGUE_RELU_AUX ||
         e == CUBLASLT_EPILOGUE_RELU_AUX_BIAS;
}
inline bool is_gelu(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX ||
         e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
inline bool writes_aux(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_RELU_AUX || e == CUBLASLT_EPILOGUE_RELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX ||
         e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
inline bool reads_aux(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_DRELU || e == CUBLASLT_EPILOGUE_DRELU_BGRAD || e == CUBLASLT_EPILOGUE_DGELU ||
         e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}
// ReLU's auxiliary data is a bit mask; GELU's holds values (its input).
inline bool aux_is_mask(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_RELU_AUX || e == CUBLASLT_EPILOGUE_RELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DRELU ||
         e == CUBLASLT_EPILOGUE_DRELU_BGRAD;
}
// The bias gradient's length: D's rows (m) or columns (n); 0 where the epilogue writes none.
inline int bias_grad_length(cublasLtEpilogue_t e, int m, int n) {
  if (e == CUBLASLT_EPILOGUE_DRELU_BGRAD || e == CUBLASLT_EPILOGUE_DGELU_BGRAD || e == CUBLASLT_EPILOGUE_BGRADA)
    return m;
  return e == CUBLASLT_EPILOGUE_BGRADB ? n : 0;
}
// Whether the epilogue reads or writes the bias pointer (a bias, or a bias gradient), and an
// auxiliary matrix.
inline bool uses_bias(cublasLtEpilogue_t e) { return has_bias(e) || bias_grad_length(e, 1, 1) > 0; }
inline bool uses_aux(cublasLtEpilogue_t e) { return writes_aux(e) || reads_aux(e); }
// The auxiliary matrix's leading dimension: D's rows where none was set.
inline int64_t aux_ld(const cublasLtMatmulDescOpaque_t& d, int m) { return d.aux_ld ? d.aux_ld : m; }
// cuBLASLt's GELU: the tanh approximation, and its derivative for DGELU.
template <class Acc> inline Acc gelu(Acc x) {
  const double v = double(x);
  return Acc(0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))));
}
template <class Acc> inline Acc gelu_grad(Acc x) {
  const double v = double(x), t = std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v));
  return Acc(0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3 * 0.044715 * v * v));
}
// One batch's epilogue, applied to each element of D as it is computed (i its row, j its column).
template <class Acc> struct Epilogue {
  cublasLtEpilogue_t kind;
  const void* bias;
  cudaDataType_t bias_type;
  void* aux;           // this batch's auxiliary output or input, or null
  cudaDataType_t aux_type;
  long long aux_ld;
  Acc* row_sums;       // DRELU_BGRAD / DGELU_BGRAD: D's rows summed, or null
  Acc operator()(Acc v, int i, int j) const {
    if (bias) v += ::labkit::blas::load<Acc>(bias, bias_type, size_t(i));
    const size_t at = size_t(i) + size_t(j) * size_t(aux_ld);
    if (aux && writes_aux(kind)) {
      if (aux_is_mask(kind)) {
        unsigned char& byte = static_cast<unsigned char*>(aux)[at / 8];
        byte = (v > Acc(0)) ? (byte | (1u << (at % 8))) : (byte & ~(1u << (at % 8)));
      } else {
        ::labkit::blas::store<Acc>(aux, aux_type, at, v);
      }
    }
    if (is_relu(kind)) v = v > Acc(0) ? v : Acc(0);
    else if (is_gelu(kind)) v = gelu(v);
    else if (kind == CUBLASLT_EPILOGUE_DRELU || kind == CUBLASLT_EPILOGUE_DRELU_BGRAD)
      v = (static_cast<const unsigned char*>(aux)[at / 8] >> (at % 8)) & 1u ? v : Acc(0);
    else if (kind == CUBLASLT_EPILOGUE_DGELU || kind == CUBLASLT_EPILOGUE_DGELU_BGRAD)
      v = v * gelu_grad(::labkit::blas::load<Acc>(aux, aux_type, at));
    if (row_sums) row_sums[i] += v;
    return v;
  }
};
inline ::labkit::blas::Operand operand_of(const void* p, const cublasLtMatrixLayoutOpaque_t& l, bool transposed) {
  return {p, l.type, l.ld, l.order == CUBLASLT_ORDER_ROW, transposed};
}
// The matmul: its operands checked now, its work done now or recorded into the graph its stream is
// being captured into (alpha and beta read when the work runs where they are device pointers).
template <class Acc, class S>
inline cublasStatus_t matmul_as(const cublasLtMatmulDescOpaque_t& d, const void* alpha, const void* a,
                                const cublasLtMatrixLayoutOpaque_t& la, const void* b,
                                const cublasLtMatrixLayoutOpaque_t& lb, const void* beta, const void* c,
                                const cublasLtMatrixLayoutOpaque_t& lc, void* out,
                                const cublasLtMatrixLayoutOpaque_t& ld, int m, int n, int k, cudaStream_t stream,
                                const char* call) {
  using ::labkit::blas::Operand;
  const bool device_scalars = d.pointer_mode == CUBLASLT_POINTER_MODE_DEVICE;
  for (const void* s : {alpha, beta}) {
    if (!s) {
      ::labkit::rt::say("%s: a null alpha or beta", call);
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (device_scalars && !::labkit::blas::operand(s, sizeof(S), call, "alpha or beta"))
      return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  const ::labkit::blas::Scalar<S> al{static_cast<const S*>(alpha), device_scalars ? S() : *static_cast<const S*>(alpha),
                                     device_scalars};
  const ::labkit::blas::Scalar<S> be{static_cast<const S*>(beta), device_scalars ? S() : *static_cast<const S*>(beta),
                                     device_scalars};
  const bool reads_c = device_scalars || Acc(be.value) != Acc(0);
  const int batch = ld.batch;   // every layout's batch count is D's (checked by shapes)
  const cublasLtEpilogue_t kind = d.epilogue;
  const cudaDataType_t bias_type = d.bias_type_set ? d.bias_type : ld.type;
  const cudaDataType_t aux_type = d.aux_type_set ? d.aux_type : ld.type;
  const size_t bias_size = ::labkit::blas::type_size(bias_type);
  const int grad_length = bias_grad_length(kind, m, n);
  const bool with_bias = uses_bias(kind), with_aux = uses_aux(kind);
  const bool mask = aux_is_mask(kind);
  // The auxiliary matrix's bytes: m x n elements ld apart, one bit each for ReLU's mask.
  const long long aux_stride = aux_ld(d, m);
  const size_t aux_elems = n > 0 ? size_t(n - 1) * size_t(aux_stride) + size_t(m) : 0;
  const size_t aux_bytes = mask ? (aux_elems + 7) / 8 : aux_elems * ::labkit::blas::type_size(aux_type);
  auto batch_of = [](const void* p, const cublasLtMatrixLayoutOpaque_t& l, bool transposed, int q) {
    return operand_of(static_cast<const char*>(p) + q * l.batch_stride * (long long)::labkit::blas::type_size(l.type),
                      l, transposed);
  };
  struct Batch {
    Operand A, B, C, D;
    void* bias;   // the bias read, or the bias gradient written
    void* aux;
  };
  std::vector<Batch> batches;
  for (int q = 0; q < batch; ++q) {
    void* bias = with_bias ? static_cast<char*>(const_cast<void*>(d.bias)) + q * d.bias_batch_stride * bias_size
                           : nullptr;
    if (bias && !::labkit::blas::operand(bias, size_t(grad_length ? grad_length : m) * bias_size, call,
                                         grad_length ? "bias gradient" : "bias vector"))
      return CUBLAS_STATUS_EXECUTION_FAILED;
    void* aux = nullptr;
    if (with_aux) {
      const long long step = mask ? q * d.aux_batch_stride / 8
                                  : q * d.aux_batch_stride * (long long)::labkit::blas::type_size(aux_type);
      aux = static_cast<char*>(d.aux) + step;
      if (!::labkit::blas::operand(aux, aux_bytes, call, "epilogue's auxiliary matrix"))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    Batch one{batch_of(a, la, d.transa != CUBLAS_OP_N, q), batch_of(b, lb, d.transb != CUBLAS_OP_N, q),
              batch_of(c, lc, false, q), batch_of(out, ld, false, q), bias, aux};
    if (!::labkit::blas::batch_operands(m, n, k, one.A, 0, one.B, 0, reads_c, one.C, 0, one.D, 0, 1, call))
      return CUBLAS_STATUS_EXECUTION_FAILED;
    batches.push_back(one);
  }
  return ::labkit::rt::library_work(stream, CUBLAS_STATUS_SUCCESS, [=] {
    for (const Batch& one : batches) {
      std::vector<Acc> sums(size_t(grad_length), Acc(0));
      const bool row_sums = kind == CUBLASLT_EPILOGUE_DRELU_BGRAD || kind == CUBLASLT_EPILOGUE_DGELU_BGRAD;
      ::labkit::blas::batch_products<Acc>(m, n, k, Acc(al.get()), one.A, 0, one.B, 0, Acc(be.get()), one.C, 0, one.D,
                                          0, 1, Epilogue<Acc>{kind, has_bias(kind) ? one.bias : nullptr, bias_type,
                                                              one.aux, aux_type, aux_stride,
                                                              row_sums ? sums.data() : nullptr});
      // BGRADA sums each row of op(A) over k, BGRADB each column of op(B).
      if (kind == CUBLASLT_EPILOGUE_BGRADA)
        for (int i = 0; i < m; ++i)
          for (int p = 0; p < k; ++p)
            sums[i] += ::labkit::blas::load<Acc>(one.A.p, one.A.type, ::labkit::blas::index(one.A, i, p));
      if (kind == CUBLASLT_EPILOGUE_BGRADB)
        for (int j = 0; j < n; ++j)
          for (int p = 0; p < k; ++p)
            sums[j] += ::labkit::blas::load<Acc>(one.B.p, one.B.type, ::labkit::blas::index(one.B, p, j));
      for (int i = 0; i < grad_length; ++i) ::labkit::blas::store<Acc>(one.bias, bias_type, size_t(i), sums[i]);
    }
    return CUBLAS_STATUS_SUCCESS;
  });
}
// The epilogue's own rules, as cuBLASLt checks them in the heuristic and the matmul (measured on an
// H200 with cuBLASLt 13; the matmul checks the pointers between the two): BGRADA only with op(A) = A,
// BGRADB only with op(B) = B^T (NOT_SUPPORTED), before the pointers; then an auxiliary matrix's
// leading dimension, where one is set, at least D's rows and a multiple of 128 for ReLU's bit mask
// (INVALID_VALUE), DRELU_BGRAD / DGELU_BGRAD only with a workspace (NOT_SUPPORTED), and that leading
// dimension not 1 (INVALID_VALUE).
inline cublasStatus_t epilogue_transposes(const cublasLtMatmulDescOpaque_t& d, const char** why) {
  *why = nullptr;
  if (d.epilogue == CUBLASLT_EPILOGUE_BGRADA && d.transa != CUBLAS_OP_N) *why = "BGRADA needs op(A) = A (transa N)";
  else if (d.epilogue == CUBLASLT_EPILOGUE_BGRADB && d.transb == CUBLAS_OP_N)
    *why = "BGRADB needs op(B) = B^T (transb T)";
  return *why ? CUBLAS_STATUS_NOT_SUPPORTED : CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t epilogue_rules(const cublasLtMatmulDescOpaque_t& d, int m, size_t workspace, const char** why) {
  const cublasLtEpilogue_t e = d.epilogue;
  const int64_t ld = uses_aux(e) ? d.aux_ld : 0;
  *why = nullptr;
  if (ld && (ld < m || (aux_is_mask(e) && ld % 128)))
    *why = aux_is_mask(e) ? "a ReLU bit mask's leading dimension (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD) must be a "
                            "multiple of 128 and at least D's rows"
                          : "the auxiliary matrix's leading dimension (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD) is below "
                            "D's rows";
  if (*why) return CUBLAS_STATUS_INVALID_VALUE;
  if ((e == CUBLASLT_EPILOGUE_DRELU_BGRAD || e == CUBLASLT_EPILOGUE_DGELU_BGRAD) && workspace == 0) {
    *why = "DRELU_BGRAD and DGELU_BGRAD need a workspace (the preference's maximum, the matmul's workspaceSize)";
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (ld == 1) *why = "the auxiliary matrix's leading dimension is 1 (cuBLASLt wants at least 2)";
  return *why ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_SUCCESS;
}
// The pointers the epilogue reads or writes, checked when the matmul is called (cuBLASLt's heuristic
// does not look at them), with cuBLASLt's answers (measured on an H200): INVALID_VALUE for a missing
// bias, bias gradient or auxiliary input, and for a bias pointer set where the epilogue uses none;
// NOT_SUPPORTED for a missing auxiliary output, and for an auxiliary pointer set beside a ReLU or
// GELU that keeps no auxiliary matrix.
inline cublasStatus_t epilogue_pointers(const cublasLtMatmulDescOpaque_t& d, const char** why) {
  const cublasLtEpilogue_t e = d.epilogue;
  *why = nullptr;
  if (uses_bias(e) && !d.bias)
    *why = has_bias(e) ? "the epilogue adds a bias, and no bias pointer was set"
                       : "the epilogue writes a bias gradient, and no bias pointer was set";
  else if (!uses_bias(e) && d.bias) *why = "a bias pointer is set, and the epilogue uses no bias";
  else if (reads_aux(e) && !d.aux) *why = "the epilogue reads an auxiliary matrix, and no aux pointer was set";
  if (*why) return CUBLAS_STATUS_INVALID_VALUE;
  if (writes_aux(e) && !d.aux) *why = "the epilogue writes an auxiliary matrix, and no aux pointer was set";
  else if ((is_relu(e) || is_gelu(e)) && !writes_aux(e) && d.aux)
    *why = "an aux pointer is set beside a ReLU or GELU that keeps no auxiliary matrix (use its _AUX epilogue)";
  return *why ? CUBLAS_STATUS_NOT_SUPPORTED : CUBLAS_STATUS_SUCCESS;
}
}  // namespace blaslt
}  // namespace labkit

inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute,
                                               cudaDataType_t scale) {
  if (!d) return CUBLAS_STATUS_INVALID_VALUE;
  *d = new cublasLtMatmulDescOpaque_t();
  (*d)->compute = compute;
  (*d)->scale = scale;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                                     const void* buf, size_t n) {
  using ::labkit::blaslt::put;
  const char* call = "cublasLtMatmulDescSetAttribute";
  if (!d) return CUBLAS_STATUS_NOT_INITIALIZED;
  bool ok = true;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      ok = put(d->compute, buf, n, call, "CUBLASLT_MATMUL_DESC_COMPUTE_TYPE");
      break;
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: ok = put(d->scale, buf, n, call, "CUBLASLT_MATMUL_DESC_SCALE_TYPE"); break;
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: {
      int32_t mode;
      ok = put(mode, buf, n, call, "CUBLASLT_MATMUL_DESC_POINTER_MODE");
      if (ok && mode != CUBLASLT_POINTER_MODE_HOST && mode != CUBLASLT_POINTER_MODE_DEVICE)
        return ::labkit::blaslt::not_provided(call, "the pointer mode", mode);
      if (ok) d->pointer_mode = cublasLtPointerMode_t(mode);
      break;
    }
    case CUBLASLT_MATMUL_DESC_TRANSA: ok = put(d->transa, buf, n, call, "CUBLASLT_MATMUL_DESC_TRANSA"); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: ok = put(d->transb, buf, n, call, "CUBLASLT_MATMUL_DESC_TRANSB"); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: {
      cublasLtEpilogue_t e;
      ok = put(e, buf, n, call, "CUBLASLT_MATMUL_DESC_EPILOGUE");
      if (ok && !::labkit::blaslt::known_epilogue(int(e)))
        return ::labkit::blaslt::not_provided(call, "the epilogue", int(e));
      if (ok) d->epilogue = e;
      break;
    }
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: ok = put(d->bias, buf, n, call, "CUBLASLT_MATMUL_DESC_BIAS_POINTER"); break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      ok = put(d->bias_type, buf, n, call, "CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE");
      d->bias_type_set = ok;
      break;
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
      ok = put(d->bias_batch_stride, buf, n, call, "CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE");
      break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      ok = put(d->aux, buf, n, call, "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER");
      break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: ok = put(d->aux_ld, buf, n, call, "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD"); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE:
      ok = put(d->aux_batch_stride, buf, n, call, "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE");
      break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
      ok = put(d->aux_type, buf, n, call, "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE");
      d->aux_type_set = ok;
      break;
    case CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET: case CUBLASLT_MATMUL_DESC_FAST_ACCUM: break;   // a GPU's tuning
    default: return ::labkit::blaslt::not_provided(call, "the matmul attribute", int(attr));
  }
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}
inline cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                                     void* buf, size_t n, size_t* written) {
  using ::labkit::blaslt::get;
  if (!d) return CUBLAS_STATUS_NOT_INITIALIZED;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return get(d->compute, buf, n, written);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return get(d->scale, buf, n, written);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return get(int32_t(d->pointer_mode), buf, n, written);
    case CUBLASLT_MATMUL_DESC_TRANSA: return get(d->transa, buf, n, written);
    case CUBLASLT_MATMUL_DESC_TRANSB: return get(d->transb, buf, n, written);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return get(d->epilogue, buf, n, written);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return get(d->bias, buf, n, written);
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: return get(d->bias_batch_stride, buf, n, written);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return get(d->aux, buf, n, written);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return get(d->aux_ld, buf, n, written);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE: return get(d->aux_batch_stride, buf, n, written);
    default: return ::labkit::blaslt::not_provided("cublasLtMatmulDescGetAttribute", "the matmul attribute", int(attr));
  }
}

inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType_t type, uint64_t rows,
                                                 uint64_t cols, int64_t ld) {
  if (!l) return CUBLAS_STATUS_INVALID_VALUE;
  *l = new cublasLtMatrixLayoutOpaque_t();
  (*l)->type = type;
  (*l)->rows = rows;
  (*l)->cols = cols;
  (*l)->ld = ld;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                       const void* buf, size_t n) {
  using ::labkit::blaslt::put;
  const char* call = "cublasLtMatrixLayoutSetAttribute";
  if (!l) return CUBLAS_STATUS_NOT_INITIALIZED;
  bool ok = true;
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: ok = put(l->type, buf, n, call, "CUBLASLT_MATRIX_LAYOUT_TYPE"); break;
    case CUBLASLT_MATRIX_LAYOUT_ORDER: {
      int32_t order;
      ok = put(order, buf, n, call, "CUBLASLT_MATRIX_LAYOUT_ORDER");
      if (ok && order != CUBLASLT_ORDER_COL && order != CUBLASLT_ORDER_ROW)
        return ::labkit::blaslt::not_provided(call, "the order (a tensor-core tiling)", order);
      if (ok) l->order = cublasLtOrder_t(order);
      break;
    }
    case CUBLASLT_MATRIX_LAYOUT_ROWS: ok = put(l->rows, buf, n, call, "CUBLASLT_MATRIX_LAYOUT_ROWS"); break;
    case CUBLASLT_MATRIX_LAYOUT_COLS: ok = put(l->cols, buf, n, call, "CUBLASLT_MATRIX_LAYOUT_COLS"); break;
    case CUBLASLT_MATRIX_LAYOUT_LD: ok = put(l->ld, buf, n, call, "CUBLASLT_MATRIX_LAYOUT_LD"); break;
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      ok = put(l->batch, buf, n, call, "CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT");
      break;
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      ok = put(l->batch_stride, buf, n, call, "CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET");
      break;
    default: return ::labkit::blaslt::not_provided(call, "the layout attribute", int(attr));
  }
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  if (!p) return CUBLAS_STATUS_INVALID_VALUE;
  *p = new cublasLtMatmulPreferenceOpaque_t();
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
// Every preference is a GPU's search hint: the one algorithm here needs no workspace.
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                           cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                           size_t n) {
  if (!p) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES)
    return ::labkit::blaslt::put(p->max_workspace, buf, n, "cublasLtMatmulPreferenceSetAttribute",
                                 "CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES") ? CUBLAS_STATUS_SUCCESS
                                                                             : CUBLAS_STATUS_INVALID_VALUE;
  return buf ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

namespace labkit {
namespace blaslt {
// The m, n, k of a matmul from its layouts, and whether they agree: CUBLAS_STATUS_SUCCESS, else
// INVALID_VALUE (shapes that do not agree, batch counts that differ) or NOT_SUPPORTED (types, sizes
// past int), with the reason in *why, as cuBLASLt answers them.  A batch count of 0 passes here: the
// heuristic finds an algorithm for it, and the matmul fails (cublasLtMatmul).
inline cublasStatus_t shapes(const cublasLtMatmulDescOpaque_t& d, const cublasLtMatrixLayoutOpaque_t& a,
                             const cublasLtMatrixLayoutOpaque_t& b, const cublasLtMatrixLayoutOpaque_t& c,
                             const cublasLtMatrixLayoutOpaque_t& dl, int* m, int* n, int* k, const char** why) {
  const bool ta = d.transa != CUBLAS_OP_N, tb = d.transb != CUBLAS_OP_N;
  *why = nullptr;
  for (const auto* l : {&a, &b, &c, &dl})
    if (l->batch < 0 || l->batch_stride < 0) {
      *why = "a negative batch count or batch offset";
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  for (const auto* l : {&a, &b, &c, &dl})
    if (l->rows > uint64_t(INT32_MAX) || l->cols > uint64_t(INT32_MAX)) {
      *why = "a layout's rows or columns over 2^31 - 1";
      return CUBLAS_STATUS_NOT_SUPPORTED;
    }
  *m = int(dl.rows);
  *n = int(dl.cols);
  *k = int(ta ? a.rows : a.cols);
  if ((ta ? a.cols : a.rows) != dl.rows) *why = "op(A)'s rows are not D's rows";
  else if ((tb ? b.rows : b.cols) != dl.cols) *why = "op(B)'s columns are not D's columns";
  else if ((tb ? b.cols : b.rows) != uint64_t(*k)) *why = "op(A)'s columns are not op(B)'s rows";
  else if (c.rows != dl.rows || c.cols != dl.cols) *why = "C's shape is not D's";
  else if (c.type != dl.type) *why = "C's type is not D's";
  for (const auto* l : {&a, &b, &c, &dl})
    if (!*why && (l->ld < int64_t(l->order == CUBLASLT_ORDER_ROW ? l->cols : l->rows) || l->ld < 1))
      *why = "a leading dimension is smaller than its matrix";
  for (const auto* l : {&a, &b, &c})
    if (!*why && l->batch != dl.batch)
      *why = "the layouts' batch counts differ (an operand shared by every batch has D's count and offset 0)";
  if (*why) return CUBLAS_STATUS_INVALID_VALUE;
  const char kind = ::labkit::blas::ex_kind(d.compute, a.type, b.type, dl.type);
  if (!kind) *why = "the types are not a combination provided (64F; 32F over 32F, 16F, 16BF or 8I; 16F; 32I over 8I)";
  else if (kind == 'f' && d.scale != CUDA_R_32F) *why = "the scale type of a 32F compute type is not CUDA_R_32F";
  else if (kind == 'i' && d.epilogue != CUBLASLT_EPILOGUE_DEFAULT) *why = "an epilogue on an integer matmul";
  return *why ? CUBLAS_STATUS_NOT_SUPPORTED : CUBLAS_STATUS_SUCCESS;
}
}  // namespace blaslt
}  // namespace labkit

inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                                     cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                     cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dl,
                                                     cublasLtMatmulPreference_t pref, int requested,
                                                     cublasLtMatmulHeuristicResult_t results[], int* returned) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!d || !a || !b || !c || !dl || !results || !returned || requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  int m, n, k;
  const char* why;
  auto s = ::labkit::blaslt::shapes(*d, *a, *b, *c, *dl, &m, &n, &k, &why);
  if (!s) s = ::labkit::blaslt::epilogue_transposes(*d, &why);
  if (!s) s = ::labkit::blaslt::epilogue_rules(*d, m, pref ? pref->max_workspace : 0, &why);
  if (s) {
    ::labkit::rt::say("cublasLtMatmulAlgoGetHeuristic: %s", why);
    *returned = 0;
    return s;
  }
  std::memset(&results[0], 0, sizeof(results[0]));
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void* alpha, const void* a,
                                     cublasLtMatrixLayout_t la, const void* b, cublasLtMatrixLayout_t lb,
                                     const void* beta, const void* c, cublasLtMatrixLayout_t lc, void* out,
                                     cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t*, void*,
                                     size_t workspace_size, cudaStream_t stream) {
  const char* call = "cublasLtMatmul";
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!d || !la || !lb || !lc || !ld) return CUBLAS_STATUS_INVALID_VALUE;
  int m, n, k;
  const char* why;
  if (auto s = ::labkit::blaslt::shapes(*d, *la, *lb, *lc, *ld, &m, &n, &k, &why)) {
    ::labkit::rt::say("%s: %s", call, why);
    return s;
  }
  if (auto s = ::labkit::blaslt::epilogue_transposes(*d, &why)) {
    ::labkit::rt::say("%s: %s", call, why);
    return s;
  }
  if (auto s = ::labkit::blaslt::epilogue_pointers(*d, &why)) {
    ::labkit::rt::say("%s: %s", call, why);
    return s;
  }
  if (auto s = ::labkit::blaslt::epilogue_rules(*d, m, workspace_size, &why)) {
    ::labkit::rt::say("%s: %s", call, why);
    return s;
  }
  if (ld->batch == 0) {   // what cuBLASLt answers for a batch count of 0
    ::labkit::rt::say("%s: a batch count of 0 (cuBLASLt's matmul fails for it: CUBLAS_STATUS_EXECUTION_FAILED)", call);
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  using ::labkit::blaslt::matmul_as;
  switch (::labkit::blas::ex_kind(d->compute, la->type, lb->type, ld->type)) {
    case 'd':
      return matmul_as<double, double>(*d, alpha, a, *la, b, *lb, beta, c, *lc, out, *ld, m, n, k, stream, call);
    case 'h': return matmul_as<float, __half>(*d, alpha, a, *la, b, *lb, beta, c, *lc, out, *ld, m, n, k, stream, call);
    case 'i':
      return matmul_as<int32_t, int32_t>(*d, alpha, a, *la, b, *lb, beta, c, *lc, out, *ld, m, n, k, stream, call);
    default: return matmul_as<float, float>(*d, alpha, a, *la, b, *lb, beta, c, *lc, out, *ld, m, n, k, stream, call);
  }
}
