// cuBLASLt's answers for each epilogue with or without a bias pointer (an aux pointer always set), a
// workspace, and the heuristic's algorithm.  cublaslt_epilogue_pointers.h200.txt is what this
// program printed under nvcc on an H200 (CUDA 13's cuBLASLt); tests/test_cuda_cublas.py runs it on
// the CPU executor and wants the same lines.
#include <cstdio>
#include <cstdint>
#include <cublasLt.h>
int main() {
  cublasLtHandle_t lt; cublasLtCreate(&lt);
  float *a, *b, *d, *bias, *aux; void* work;
  cudaMalloc(&a, 1 << 16); cudaMalloc(&b, 1 << 16); cudaMalloc(&d, 1 << 16); cudaMalloc(&bias, 1 << 12);
  cudaMalloc(&aux, 1 << 16); cudaMalloc(&work, 1 << 20);
  cudaMemset(a, 0, 1 << 16); cudaMemset(b, 0, 1 << 16); cudaMemset(aux, 0, 1 << 16);
  const float one = 1.f, zero = 0.f;
  const int m = 8, n = 3, k = 4;
  const cublasLtEpilogue_t eps[] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_RELU, CUBLASLT_EPILOGUE_GELU,
      CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_RELU_AUX, CUBLASLT_EPILOGUE_GELU_AUX, CUBLASLT_EPILOGUE_DRELU,
      CUBLASLT_EPILOGUE_DGELU, CUBLASLT_EPILOGUE_DRELU_BGRAD, CUBLASLT_EPILOGUE_DGELU_BGRAD, CUBLASLT_EPILOGUE_BGRADA,
      CUBLASLT_EPILOGUE_BGRADB};
  for (cublasLtEpilogue_t e : eps)
    for (int with_bias = 0; with_bias < 2; ++with_bias)
      for (int ws = 0; ws < 2; ++ws)
        for (int use_algo = 0; use_algo < 2; ++use_algo) {
          const bool mask = e == CUBLASLT_EPILOGUE_RELU_AUX || e == CUBLASLT_EPILOGUE_DRELU || e == CUBLASLT_EPILOGUE_DRELU_BGRAD;
          const bool tb = e == CUBLASLT_EPILOGUE_BGRADB;
          int64_t ldaux = mask ? 128 : 8;
          cublasLtMatmulDesc_t op; cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
          cublasOperation_t T = CUBLAS_OP_T;
          if (tb) cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &T, sizeof T);
          cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e);
          if (with_bias) cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
          cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
          cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ldaux, sizeof ldaux);
          cublasLtMatrixLayout_t la, lb, ld;
          cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, m, k, m);
          if (tb) cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, n, k, n); else cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, k);
          cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, m);
          cublasLtMatmulPreference_t pref; cublasLtMatmulPreferenceCreate(&pref);
          size_t wsz = ws ? (1 << 20) : 0;
          cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, sizeof wsz);
          cublasLtMatmulHeuristicResult_t r; int got = 0;
          int hs = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &r, &got);
          int s = cublasLtMatmul(lt, op, &one, a, la, b, lb, &zero, d, ld, d, ld, use_algo && hs == 0 && got ? &r.algo : nullptr,
                                 ws ? work : nullptr, wsz, 0);
          cudaError_t err = cudaDeviceSynchronize();
          printf("grid2 e=%d bias=%d ws=%d algo=%d heuristic=%d matmul=%d%s\n", int(e), with_bias, ws, use_algo, hs, s,
                 err ? " cuda_error" : "");
        }
  return 0;
}
