// cusparse.h for labkit's CPU executor: cuSPARSE's sparse matrix-vector product through its generic
// API, computed on the host when it is called (as labkit's cuBLAS is), on device or managed memory.
//
// Provided: the handle (create, destroy, stream, pointer mode, version, status names); the legacy
// matrix descriptor (type, index base, fill mode, diagonal type: kept, read by nothing here); sparse
// matrices in CSR and COO form with 32- or 64-bit indices and float or double values; dense vectors;
// cusparseSpMV (y = alpha op(A) x + beta y, op N or T) and its buffer size (none needed).  Before a
// product, every array is checked as device memory within its allocation, and every row offset and
// column index as in range: a GPU would read past the arrays.  A routine not declared here is refused
// by name before the program is compiled (program_source.py reads the names from this file).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>
#include "cuda_runtime.h"
#include "library_types.h"

#define CUSPARSEAPI
#define CUSPARSE_VER_MAJOR 12
#define CUSPARSE_VER_MINOR 3
#define CUSPARSE_VER_PATCH 0
#define CUSPARSE_VERSION (CUSPARSE_VER_MAJOR * 1000 + CUSPARSE_VER_MINOR * 100 + CUSPARSE_VER_PATCH)

enum cusparseStatus_t {
  CUSPARSE_STATUS_SUCCESS = 0, CUSPARSE_STATUS_NOT_INITIALIZED = 1, CUSPARSE_STATUS_ALLOC_FAILED = 2,
  CUSPARSE_STATUS_INVALID_VALUE = 3, CUSPARSE_STATUS_ARCH_MISMATCH = 4, CUSPARSE_STATUS_MAPPING_ERROR = 5,
  CUSPARSE_STATUS_EXECUTION_FAILED = 6, CUSPARSE_STATUS_INTERNAL_ERROR = 7,
  CUSPARSE_STATUS_MATRIX_TYPE_NOT_SUPPORTED = 8, CUSPARSE_STATUS_ZERO_PIVOT = 9, CUSPARSE_STATUS_NOT_SUPPORTED = 10,
  CUSPARSE_STATUS_INSUFFICIENT_RESOURCES = 11
};
enum cusparsePointerMode_t { CUSPARSE_POINTER_MODE_HOST = 0, CUSPARSE_POINTER_MODE_DEVICE = 1 };
enum cusparseOperation_t {
  CUSPARSE_OPERATION_NON_TRANSPOSE = 0, CUSPARSE_OPERATION_TRANSPOSE = 1, CUSPARSE_OPERATION_CONJUGATE_TRANSPOSE = 2
};
enum cusparseIndexBase_t { CUSPARSE_INDEX_BASE_ZERO = 0, CUSPARSE_INDEX_BASE_ONE = 1 };
enum cusparseMatrixType_t {
  CUSPARSE_MATRIX_TYPE_GENERAL = 0, CUSPARSE_MATRIX_TYPE_SYMMETRIC = 1, CUSPARSE_MATRIX_TYPE_HERMITIAN = 2,
  CUSPARSE_MATRIX_TYPE_TRIANGULAR = 3
};
enum cusparseFillMode_t { CUSPARSE_FILL_MODE_LOWER = 0, CUSPARSE_FILL_MODE_UPPER = 1 };
enum cusparseDiagType_t { CUSPARSE_DIAG_TYPE_NON_UNIT = 0, CUSPARSE_DIAG_TYPE_UNIT = 1 };
enum cusparseIndexType_t { CUSPARSE_INDEX_16U = 1, CUSPARSE_INDEX_32I = 2, CUSPARSE_INDEX_64I = 3 };
enum cusparseFormat_t { CUSPARSE_FORMAT_CSR = 1, CUSPARSE_FORMAT_CSC = 2, CUSPARSE_FORMAT_COO = 3 };
// Every algorithm computes the same sums here (each row's in index order).
enum cusparseSpMVAlg_t {
  CUSPARSE_SPMV_ALG_DEFAULT = 0, CUSPARSE_SPMV_COO_ALG1 = 1, CUSPARSE_SPMV_CSR_ALG1 = 2, CUSPARSE_SPMV_CSR_ALG2 = 3,
  CUSPARSE_SPMV_COO_ALG2 = 4, CUSPARSE_SPMV_SELL_ALG1 = 5,
  CUSPARSE_MV_ALG_DEFAULT = 0, CUSPARSE_COOMV_ALG = 1, CUSPARSE_CSRMV_ALG1 = 2, CUSPARSE_CSRMV_ALG2 = 3
};

struct cusparseContext {
  cudaStream_t stream = nullptr;
  cusparsePointerMode_t pointer_mode = CUSPARSE_POINTER_MODE_HOST;
};
typedef cusparseContext* cusparseHandle_t;
struct cusparseMatDescr {
  cusparseMatrixType_t type = CUSPARSE_MATRIX_TYPE_GENERAL;
  cusparseIndexBase_t base = CUSPARSE_INDEX_BASE_ZERO;
  cusparseFillMode_t fill = CUSPARSE_FILL_MODE_LOWER;
  cusparseDiagType_t diag = CUSPARSE_DIAG_TYPE_NON_UNIT;
};
typedef cusparseMatDescr* cusparseMatDescr_t;
struct cusparseSpMatDescr {
  cusparseFormat_t format;
  int64_t rows, cols, nnz;
  void* row;        // CSR: the rows + 1 offsets; COO: each entry's row
  void* col;        // each entry's column
  void* values;
  cusparseIndexType_t row_type, col_type;
  cusparseIndexBase_t base;
  cudaDataType_t value_type;
};
typedef cusparseSpMatDescr* cusparseSpMatDescr_t;
typedef const cusparseSpMatDescr* cusparseConstSpMatDescr_t;
struct cusparseDnVecDescr {
  int64_t size;
  void* values;
  cudaDataType_t type;
};
typedef cusparseDnVecDescr* cusparseDnVecDescr_t;
typedef const cusparseDnVecDescr* cusparseConstDnVecDescr_t;

inline const char* cusparseGetErrorName(cusparseStatus_t s) {
  switch (s) {
#define LABKIT_S(n) case n: return #n;
    LABKIT_S(CUSPARSE_STATUS_SUCCESS) LABKIT_S(CUSPARSE_STATUS_NOT_INITIALIZED) LABKIT_S(CUSPARSE_STATUS_ALLOC_FAILED)
    LABKIT_S(CUSPARSE_STATUS_INVALID_VALUE) LABKIT_S(CUSPARSE_STATUS_ARCH_MISMATCH)
    LABKIT_S(CUSPARSE_STATUS_MAPPING_ERROR) LABKIT_S(CUSPARSE_STATUS_EXECUTION_FAILED)
    LABKIT_S(CUSPARSE_STATUS_INTERNAL_ERROR) LABKIT_S(CUSPARSE_STATUS_MATRIX_TYPE_NOT_SUPPORTED)
    LABKIT_S(CUSPARSE_STATUS_ZERO_PIVOT) LABKIT_S(CUSPARSE_STATUS_NOT_SUPPORTED)
    LABKIT_S(CUSPARSE_STATUS_INSUFFICIENT_RESOURCES)
#undef LABKIT_S
  }
  return "CUSPARSE_STATUS_UNKNOWN";
}
inline const char* cusparseGetErrorString(cusparseStatus_t s) { return cusparseGetErrorName(s); }
// helper_cuda.h's checkCudaErrors names a cuSPARSE status with this.
inline const char* _cudaGetErrorEnum(cusparseStatus_t s) { return cusparseGetErrorName(s); }

inline cusparseStatus_t cusparseCreate(cusparseHandle_t* h) {
  if (!h) return CUSPARSE_STATUS_INVALID_VALUE;
  *h = new cusparseContext();
  return CUSPARSE_STATUS_SUCCESS;
}
inline cusparseStatus_t cusparseDestroy(cusparseHandle_t h) {
  if (!h) return CUSPARSE_STATUS_NOT_INITIALIZED;
  delete h;
  return CUSPARSE_STATUS_SUCCESS;
}
inline cusparseStatus_t cusparseGetVersion(cusparseHandle_t, int* v) {
  *v = CUSPARSE_VERSION;
  return CUSPARSE_STATUS_SUCCESS;
}
inline cusparseStatus_t cusparseSetStream(cusparseHandle_t h, cudaStream_t s) {
  if (!h) return CUSPARSE_STATUS_NOT_INITIALIZED;
  h->stream = s;
  return CUSPARSE_STATUS_SUCCESS;
}
inline cusparseStatus_t cusparseGetStream(cusparseHandle_t h, cudaStream_t* s) {
  if (!h) return CUSPARSE_STATUS_NOT_INITIALIZED;
  *s = h->stream;
  return CUSPARSE_STATUS_SUCCESS;
}
inline cusparseStatus_t cusparseSetPointerMode(cusparseHandle_t h, cusparsePointerMode_t m) {
  if (!h) return CUSPARSE_STATUS_NOT_INITIALIZED;
  h->pointer_mode = m;
  return CUSPARSE_STATUS_SUCCESS;
}
inline cusparseStatus_t cusparseGetPointerMode(cusparseHandle_t h, cusparsePointerMode_t* m) {
  if (!h) return CUSPARSE_STATUS_NOT_INITIALIZED;
  *m = h->pointer_mode;
  return CUSPARSE_STATUS_SUCCESS;
}

inline cusparseStatus_t cusparseCreateMatDescr(cusparseMatDescr_t* d) {
  if (!d) return CUSPARSE_STATUS_INVALID_VALUE;
  *d = new cusparseMatDescr();
  return CUSPARSE_STATUS_SUCCESS;
}
inline cusparseStatus_t cusparseDestroyMatDescr(cusparseMatDescr_t d) {
  delete d;
  return CUSPARSE_STATUS_SUCCESS;
}
inline cusparseStatus_t cusparseSetMatType(cusparseMatDescr_t d, cusparseMatrixType_t t) {
  if (!d) return CUSPARSE_STATUS_INVALID_VALUE;
  d->type = t;
  return CUSPARSE_STATUS_SUCCESS;
}
inline cusparseMatrixType_t cusparseGetMatType(const cusparseMatDescr_t d) { return d->type; }
inline cusparseStatus_t cusparseSetMatIndexBase(cusparseMatDescr_t d, cusparseIndexBase_t b) {
  if (!d) return CUSPARSE_STATUS_INVALID_VALUE;
  d->base = b;
  return CUSPARSE_STATUS_SUCCESS;
}
inline cusparseIndexBase_t cusparseGetMatIndexBase(const cusparseMatDescr_t d) { return d->base; }
inline cusparseStatus_t cusparseSetMatFillMode(cusparseMatDescr_t d, cusparseFillMode_t f) {
  if (!d) return CUSPARSE_STATUS_INVALID_VALUE;
  d->fill = f;
  return CUSPARSE_STATUS_SUCCESS;
}
inline cusparseStatus_t cusparseSetMatDiagType(cusparseMatDescr_t d, cusparseDiagType_t t) {
  if (!d) return CUSPARSE_STATUS_INVALID_VALUE;
  d->diag = t;
  return CUSPARSE_STATUS_SUCCESS;
}

namespace labkit {
namespace sparse {
inline size_t index_size(cusparseIndexType_t t) {
  return t == CUSPARSE_INDEX_64I ? 8 : t == CUSPARSE_INDEX_32I ? 4 : 0;
}
inline size_t value_size(cudaDataType_t t) { return t == CUDA_R_64F ? 8 : t == CUDA_R_32F ? 4 : 0; }
inline int64_t index_at(const void* p, cusparseIndexType_t t, int64_t i) {
  return t == CUSPARSE_INDEX_64I ? static_cast<const int64_t*>(p)[i] : static_cast<const int32_t*>(p)[i];
}
inline double value_at(const void* p, cudaDataType_t t, int64_t i) {
  return t == CUDA_R_64F ? static_cast<const double*>(p)[i] : static_cast<const float*>(p)[i];
}
inline bool operand(const void* p, size_t bytes, const char* call, const char* what) {
  return ::labkit::rt::library_operand(p, bytes, call, what, "cuSPARSE");
}
inline cusparseStatus_t refuse(const char* call, const char* why) {
  ::labkit::rt::say("%s: %s", call, why);
  return CUSPARSE_STATUS_INVALID_VALUE;
}
inline cusparseStatus_t create(cusparseSpMatDescr_t* m, cusparseFormat_t format, int64_t rows, int64_t cols,
                               int64_t nnz, void* row, void* col, void* values, cusparseIndexType_t row_type,
                               cusparseIndexType_t col_type, cusparseIndexBase_t base, cudaDataType_t value_type,
                               const char* call) {
  if (!m || rows < 0 || cols < 0 || nnz < 0) return CUSPARSE_STATUS_INVALID_VALUE;
  if (!index_size(row_type) || !index_size(col_type) || !value_size(value_type))
    return refuse(call, "labkit's cuSPARSE has 32- and 64-bit indices and float or double values");
  *m = new cusparseSpMatDescr{format, rows, cols, nnz, row, col, values, row_type, col_type, base, value_type};
  return CUSPARSE_STATUS_SUCCESS;
}
}  // namespace sparse
}  // namespace labkit

inline cusparseStatus_t cusparseCreateCsr(cusparseSpMatDescr_t* m, int64_t rows, int64_t cols, int64_t nnz,
                                          void* offsets, void* columns, void* values, cusparseIndexType_t offset_type,
                                          cusparseIndexType_t column_type, cusparseIndexBase_t base,
                                          cudaDataType_t value_type) {
  return ::labkit::sparse::create(m, CUSPARSE_FORMAT_CSR, rows, cols, nnz, offsets, columns, values, offset_type,
                                  column_type, base, value_type, "cusparseCreateCsr");
}
inline cusparseStatus_t cusparseCreateCoo(cusparseSpMatDescr_t* m, int64_t rows, int64_t cols, int64_t nnz,
                                          void* row_indices, void* columns, void* values, cusparseIndexType_t type,
                                          cusparseIndexBase_t base, cudaDataType_t value_type) {
  return ::labkit::sparse::create(m, CUSPARSE_FORMAT_COO, rows, cols, nnz, row_indices, columns, values, type, type,
                                  base, value_type, "cusparseCreateCoo");
}
inline cusparseStatus_t cusparseDestroySpMat(cusparseConstSpMatDescr_t m) {
  delete m;
  return CUSPARSE_STATUS_SUCCESS;
}
inline cusparseStatus_t cusparseSpMatGetSize(cusparseConstSpMatDescr_t m, int64_t* rows, int64_t* cols, int64_t* nnz) {
  if (!m) return CUSPARSE_STATUS_INVALID_VALUE;
  *rows = m->rows;
  *cols = m->cols;
  *nnz = m->nnz;
  return CUSPARSE_STATUS_SUCCESS;
}
inline cusparseStatus_t cusparseCreateDnVec(cusparseDnVecDescr_t* v, int64_t size, void* values, cudaDataType_t type) {
  if (!v || size < 0) return CUSPARSE_STATUS_INVALID_VALUE;
  if (!::labkit::sparse::value_size(type))
    return ::labkit::sparse::refuse("cusparseCreateDnVec", "labkit's cuSPARSE has float and double vectors");
  *v = new cusparseDnVecDescr{size, values, type};
  return CUSPARSE_STATUS_SUCCESS;
}
inline cusparseStatus_t cusparseDestroyDnVec(cusparseConstDnVecDescr_t v) {
  delete v;
  return CUSPARSE_STATUS_SUCCESS;
}
inline cusparseStatus_t cusparseDnVecGetValues(cusparseDnVecDescr_t v, void** values) {
  if (!v) return CUSPARSE_STATUS_INVALID_VALUE;
  *values = v->values;
  return CUSPARSE_STATUS_SUCCESS;
}
inline cusparseStatus_t cusparseDnVecSetValues(cusparseDnVecDescr_t v, void* values) {
  if (!v) return CUSPARSE_STATUS_INVALID_VALUE;
  v->values = values;
  return CUSPARSE_STATUS_SUCCESS;
}

inline cusparseStatus_t cusparseSpMV_bufferSize(cusparseHandle_t h, cusparseOperation_t, const void*,
                                                cusparseConstSpMatDescr_t, cusparseConstDnVecDescr_t, const void*,
                                                cusparseDnVecDescr_t, cudaDataType_t, cusparseSpMVAlg_t,
                                                size_t* bytes) {
  if (!h) return CUSPARSE_STATUS_NOT_INITIALIZED;
  if (!bytes) return CUSPARSE_STATUS_INVALID_VALUE;
  *bytes = 0;   // the product here needs no workspace
  return CUSPARSE_STATUS_SUCCESS;
}

// y = alpha op(A) x + beta y: each output one sum, in the compute type, over its row's (or, for op T,
// its column's) entries in storage order; with beta 0, y is not read.
inline cusparseStatus_t cusparseSpMV(cusparseHandle_t h, cusparseOperation_t op, const void* alpha,
                                     cusparseConstSpMatDescr_t a, cusparseConstDnVecDescr_t x, const void* beta,
                                     cusparseDnVecDescr_t y, cudaDataType_t compute, cusparseSpMVAlg_t, void*) {
  using namespace ::labkit::sparse;
  const char* call = "cusparseSpMV";
  if (!h) return CUSPARSE_STATUS_NOT_INITIALIZED;
  if (!a || !x || !y || !alpha || !beta) return CUSPARSE_STATUS_INVALID_VALUE;
  if (op == CUSPARSE_OPERATION_CONJUGATE_TRANSPOSE) op = CUSPARSE_OPERATION_TRANSPOSE;   // real values
  const bool t = op == CUSPARSE_OPERATION_TRANSPOSE;
  if (x->size != (t ? a->rows : a->cols) || y->size != (t ? a->cols : a->rows))
    return refuse(call, "the vectors' sizes do not match op(A)'s columns and rows");
  if (compute != CUDA_R_32F && compute != CUDA_R_64F) return refuse(call, "a compute type other than float or double");
  const size_t v = value_size(a->value_type), r = index_size(a->row_type), c = index_size(a->col_type);
  const int64_t row_entries = a->format == CUSPARSE_FORMAT_CSR ? a->rows + 1 : a->nnz;
  const char* rows_are = a->format == CUSPARSE_FORMAT_CSR ? "row offsets" : "row indices";
  if (!operand(a->row, size_t(row_entries) * r, call, rows_are) ||
      !operand(a->col, size_t(a->nnz) * c, call, "column indices") ||
      !operand(a->values, size_t(a->nnz) * v, call, "values") ||
      !operand(x->values, size_t(x->size) * value_size(x->type), call, "vector x") ||
      !operand(y->values, size_t(y->size) * value_size(y->type), call, "vector y"))
    return CUSPARSE_STATUS_EXECUTION_FAILED;
  if (h->pointer_mode == CUSPARSE_POINTER_MODE_DEVICE &&
      (!operand(alpha, value_size(compute), call, "alpha") || !operand(beta, value_size(compute), call, "beta")))
    return CUSPARSE_STATUS_EXECUTION_FAILED;
  // The work: done now, or recorded into the graph the handle's stream is being captured into; the
  // indices are checked, and device-side scalars read, when it runs.
  const bool host_scalars = h->pointer_mode == CUSPARSE_POINTER_MODE_HOST;
  auto scalar = [compute](const void* p) {
    return compute == CUDA_R_64F ? *static_cast<const double*>(p) : double(*static_cast<const float*>(p));
  };
  const double host_al = host_scalars ? scalar(alpha) : 0, host_be = host_scalars ? scalar(beta) : 0;
  const cusparseSpMatDescr A = *a;
  const cusparseDnVecDescr X = *x, Y = *y;
  return ::labkit::rt::library_work(h->stream, CUSPARSE_STATUS_SUCCESS, [=]() -> cusparseStatus_t {
    const cusparseSpMatDescr* a = &A;
    const cusparseDnVecDescr* x = &X;
    const cusparseDnVecDescr* y = &Y;
    const int64_t base = a->base == CUSPARSE_INDEX_BASE_ONE ? 1 : 0;
    for (int64_t e = 0; e < a->nnz; ++e) {
      const int64_t j = index_at(a->col, a->col_type, e) - base;
      if (j < 0 || j >= a->cols) return refuse(call, "a column index outside the matrix (a GPU would read past x)");
    }
    if (a->format == CUSPARSE_FORMAT_CSR) {
      for (int64_t i = 0; i <= a->rows; ++i) {
        const int64_t o = index_at(a->row, a->row_type, i) - base;
        if (o < 0 || o > a->nnz || (i > 0 && o < index_at(a->row, a->row_type, i - 1) - base) ||
            (i == 0 && o != 0) || (i == a->rows && o != a->nnz))
          return refuse(call, "row offsets that do not rise from 0 to nnz (a GPU would read past the arrays)");
      }
    } else {
      for (int64_t e = 0; e < a->nnz; ++e) {
        const int64_t i = index_at(a->row, a->row_type, e) - base;
        if (i < 0 || i >= a->rows) return refuse(call, "a row index outside the matrix (a GPU would write past y)");
      }
    }
    const double al = host_scalars ? host_al : scalar(alpha), be = host_scalars ? host_be : scalar(beta);
    const bool in_double = compute == CUDA_R_64F;
    std::vector<double> sums(size_t(y->size), 0.0);
    std::vector<float> sums_f(in_double ? 0 : size_t(y->size), 0.0f);
    auto add = [&](int64_t out, int64_t e, int64_t in) {
      const double av = value_at(a->values, a->value_type, e), xv = value_at(x->values, x->type, in);
      if (in_double) sums[size_t(out)] += av * xv;
      else sums_f[size_t(out)] += float(av) * float(xv);
    };
    for (int64_t e = 0, i = 0; e < a->nnz; ++e) {
      if (a->format == CUSPARSE_FORMAT_CSR)
        while (index_at(a->row, a->row_type, i + 1) - base <= e) ++i;
      else
        i = index_at(a->row, a->row_type, e) - base;
      const int64_t j = index_at(a->col, a->col_type, e) - base;
      if (t) add(j, e, i);
      else add(i, e, j);
    }
    for (int64_t i = 0; i < y->size; ++i) {
      const double s = in_double ? sums[size_t(i)] : double(sums_f[size_t(i)]);
      if (y->type == CUDA_R_64F) {
        double& out = static_cast<double*>(y->values)[i];
        out = be == 0 ? al * s : al * s + be * out;
      } else {
        float& out = static_cast<float*>(y->values)[i];
        out = be == 0 ? float(float(al) * float(s)) : float(al) * float(s) + float(be) * out;
      }
    }
    return CUSPARSE_STATUS_SUCCESS;
  });
}
