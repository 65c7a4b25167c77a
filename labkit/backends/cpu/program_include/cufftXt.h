// cufftXt.h for labkit's CPU executor: cuFFT (cufft.h) with cuFFTXt's single-GPU plan and execution
// by data type (cufftXtMakePlanMany, cufftXtExec).  cuFFTXt's other routines (transforms across several
// GPUs, load and store callbacks) are not provided: a program that calls one is refused by name before
// it is compiled.
#pragma once
#include "cufft.h"
#include "library_types.h"

namespace labkit {
namespace fft {
// The transform type of an input, output and execution type (all of one precision), or 0.
inline cufftType type_of(cudaDataType_t in, cudaDataType_t out, cudaDataType_t exec) {
  if (in == CUDA_C_32F && out == CUDA_C_32F && exec == CUDA_C_32F) return CUFFT_C2C;
  if (in == CUDA_R_32F && out == CUDA_C_32F && exec == CUDA_C_32F) return CUFFT_R2C;
  if (in == CUDA_C_32F && out == CUDA_R_32F && exec == CUDA_C_32F) return CUFFT_C2R;
  if (in == CUDA_C_64F && out == CUDA_C_64F && exec == CUDA_C_64F) return CUFFT_Z2Z;
  if (in == CUDA_R_64F && out == CUDA_C_64F && exec == CUDA_C_64F) return CUFFT_D2Z;
  if (in == CUDA_C_64F && out == CUDA_R_64F && exec == CUDA_C_64F) return CUFFT_Z2D;
  return cufftType(0);
}
}  // namespace fft
}  // namespace labkit

inline cufftResult cufftXtMakePlanMany(cufftHandle h, int rank, long long* n, long long* inembed, long long istride,
                                       long long idist, cudaDataType_t in_type, long long* onembed,
                                       long long ostride, long long odist, cudaDataType_t out_type, long long batch,
                                       size_t* size, cudaDataType_t exec_type) {
  const cufftType type = ::labkit::fft::type_of(in_type, out_type, exec_type);
  if (!type) {
    ::labkit::rt::say("cufftXtMakePlanMany: labkit's cuFFT has single and double precision C2C, R2C and C2R "
                      "transforms (no half precision, no mixed types)");
    return CUFFT_INVALID_TYPE;
  }
  return cufftMakePlanMany64(h, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch, size);
}
inline cufftResult cufftXtExec(cufftHandle h, void* in, void* out, int direction) {
  auto it = ::labkit::fft::plans().find(h);
  if (it == ::labkit::fft::plans().end() || !it->second.made) return CUFFT_INVALID_PLAN;
  switch (it->second.type) {
    case CUFFT_C2C: return cufftExecC2C(h, static_cast<cufftComplex*>(in), static_cast<cufftComplex*>(out), direction);
    case CUFFT_R2C: return cufftExecR2C(h, static_cast<cufftReal*>(in), static_cast<cufftComplex*>(out));
    case CUFFT_C2R: return cufftExecC2R(h, static_cast<cufftComplex*>(in), static_cast<cufftReal*>(out));
    case CUFFT_Z2Z:
      return cufftExecZ2Z(h, static_cast<cufftDoubleComplex*>(in), static_cast<cufftDoubleComplex*>(out), direction);
    case CUFFT_D2Z: return cufftExecD2Z(h, static_cast<cufftDoubleReal*>(in), static_cast<cufftDoubleComplex*>(out));
    case CUFFT_Z2D: return cufftExecZ2D(h, static_cast<cufftDoubleComplex*>(in), static_cast<cufftDoubleReal*>(out));
  }
  return CUFFT_INVALID_TYPE;
}
