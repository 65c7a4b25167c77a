// Which matmuls cuBLASLt accepts with an auxiliary matrix or a bias gradient, by epilogue, D's rows m,
// the auxiliary leading dimension and the transposes: the heuristic's and the matmul's status.
// cublaslt_status_grid.h200.txt is what this program printed under nvcc on an H200 (CUDA 13's
// cuBLASLt); tests/test_cuda_cublas.py runs it on the CPU executor and wants the same lines.
#include <cstdio>
#include <cstdint>
#include <cublasLt.h>
int main() {
  cublasLtHandle_t lt; cublasLtCreate(&lt);
  float *a, *b, *d, *bias, *aux;
  cudaMalloc(&a, 1 << 20); cudaMalloc(&b, 1 << 20); cudaMalloc(&d, 1 << 20); cudaMalloc(&bias, 1 << 16); cudaMalloc(&aux, 1 << 22);
  cudaMemset(a, 0, 1 << 20); cudaMemset(b, 0, 1 << 20); cudaMemset(aux, 0, 1 << 22);
  const float one = 1.f, zero = 0.f;
  const int n = 3, k = 4;
  const cublasLtEpilogue_t eps[] = {CUBLASLT_EPILOGUE_RELU_AUX, CUBLASLT_EPILOGUE_DRELU, CUBLASLT_EPILOGUE_DRELU_BGRAD,
                                    CUBLASLT_EPILOGUE_GELU_AUX, CUBLASLT_EPILOGUE_DGELU, CUBLASLT_EPILOGUE_DGELU_BGRAD,
                                    CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_BGRADA, CUBLASLT_EPILOGUE_BGRADB};
  const int ms[] = {1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 17, 24, 32, 64, 127, 128, 130};
  for (cublasLtEpilogue_t e : eps)
    for (int m : ms) {
      int64_t lds[] = {m, (m + 3) / 4 * 4, (m + 7) / 8 * 8, (m + 127) / 128 * 128, 256, m + 1};
      for (int li = 0; li < 6; ++li) {
        int64_t ldaux = lds[li];
        bool dup = false;
        for (int q = 0; q < li; ++q) dup |= lds[q] == ldaux;
        if (dup) continue;
        for (int t = 0; t < 4; ++t) {
          const bool ta = t & 1, tb = t & 2;
          if ((e != CUBLASLT_EPILOGUE_BGRADA && e != CUBLASLT_EPILOGUE_BGRADB) && t != 1 && t != 0) continue;
          if ((e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB) && li > 0) continue;
          cublasLtMatmulDesc_t op; cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
          cublasOperation_t T = CUBLAS_OP_T;
          if (ta) cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &T, sizeof T);
          if (tb) cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &T, sizeof T);
          cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e);
          cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
          cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
          cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ldaux, sizeof ldaux);
          cublasLtMatrixLayout_t la, lb, ld;
          if (ta) cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, k, m, k); else cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, m, k, m);
          if (tb) cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, n, k, n); else cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, k);
          cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, m);
          cublasLtMatmulPreference_t pref; cublasLtMatmulPreferenceCreate(&pref);
          cublasLtMatmulHeuristicResult_t r; int got = 0;
          int hs = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &r, &got);
          int s = cublasLtMatmul(lt, op, &one, a, la, b, lb, &zero, d, ld, d, ld, nullptr, nullptr, 0, 0);
          cudaError_t err = cudaDeviceSynchronize();
          printf("grid e=%d m=%d ld=%lld t=%c%c heuristic=%d matmul=%d%s\n", int(e), m, (long long)ldaux, ta ? 'T' : 'N',
                 tb ? 'T' : 'N', hs, s, err ? " cuda_error" : "");
        }
      }
    }
  return 0;
}
