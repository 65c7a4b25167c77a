// math_functions.cu -- the CUDA Math API's functions that C++ lacks (sinpi, erfinv, normcdfinv, ...),
// conversions with a rounding mode and their clamping, and atomicAdd of half pairs, computed in a
// kernel and printed with 17 digits; tests/test_cuda_math_functions.py checks each value.
#include <cmath>
#include <cstdio>
#include <cuda_fp16.h>

constexpr int N = 64;

__global__ void math(const double* x, double* out) {
  const int i = threadIdx.x;
  const double v = x[i];
  double* o = out + i * 24;
  o[0] = sinpi(v);
  o[1] = cospi(v);
  o[2] = sinpif((float)v);
  o[3] = cospif((float)v);
  o[4] = erfinv(v / 10.0);            // in (-1, 1) for |v| < 10
  o[5] = erfcinv(1.0 + v / 10.0);     // in (0, 2)
  o[6] = erfcx(v);
  o[7] = normcdf(v);
  o[8] = normcdfinv(0.5 + v / 20.0);  // in (0, 1)
  o[9] = rcbrt(v);
  o[10] = rhypot(v, 2.0);
  o[11] = norm3d(v, 2.0, -3.0);
  o[12] = rnorm4d(v, 1.0, 2.0, 3.0);
  o[13] = cyl_bessel_i0(v);
  o[14] = cyl_bessel_i1(v);
  o[15] = erfinvf((float)(v / 10.0));
  o[16] = normcdff((float)v);
  double s, c;
  sincospi(v, &s, &c);
  o[17] = s - sinpi(v) + c - cospi(v);   // 0
  o[18] = isnan(v) + 2 * isinf(v) + 4 * signbit(v);
  o[19] = 0;
}

__global__ void conversions(const float* f, const double* d, const long long* l, long long* out) {
  const int i = threadIdx.x;
  long long* o = out + i * 16;
  o[0] = __float2int_rn(f[i]);
  o[1] = __float2int_rz(f[i]);
  o[2] = __float2int_ru(f[i]);
  o[3] = __float2int_rd(f[i]);
  o[4] = __float2uint_rn(f[i]);
  o[5] = __float2ll_rd(f[i]);
  o[6] = (long long)__float2ull_ru(f[i]);
  o[7] = __double2int_rn(d[i]);
  o[8] = __double2ll_rz(d[i]);
  // the floating results as their bits
  o[9] = __float_as_uint(__int2float_rz((int)l[i]));
  o[10] = __float_as_uint(__int2float_ru((int)l[i]));
  o[11] = __float_as_uint(__ll2float_rd(l[i]));
  o[12] = __float_as_uint(__double2float_rd(d[i]));
  o[13] = __float_as_uint(__double2float_ru(d[i]));
  o[14] = __double_as_longlong(__ull2double_rz((unsigned long long)l[i]));
  o[15] = 0;
}

__global__ void half_pairs(__half2* acc, __half* one) {
  atomicAdd(acc, __floats2half2_rn(0.5f, 1.0f));
  atomicAdd(one, __float2half(0.25f));
}

int main() {
  double hx[N];
  for (int i = 0; i < N; ++i) hx[i] = -7.75 + 0.25 * i;      // -7.75 .. 8.0: integers and halves among them
  double *x, *out;
  cudaMalloc(&x, sizeof hx);
  cudaMalloc(&out, N * 24 * sizeof(double));
  cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice);
  math<<<1, N>>>(x, out);
  static double h[N * 24];
  cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost);
  for (int i = 0; i < N; ++i) {
    printf("math %.17g", hx[i]);
    for (int k = 0; k < 19; ++k) printf(" %.17g", h[i * 24 + k]);
    printf("\n");
  }
  const int M = 12;
  float hf[M] = {2.5f, -2.5f, 3.5f, -0.5f, 0.49999997f, 3e9f, -3e9f, 1e20f, -1.0f, 16777216.0f, 0.0f, 0.0f};
  hf[10] = NAN;                                          // a quiet NaN (0x7fc00000)
  hf[11] = -0.0f;
  double hd[M] = {2.5, -3.5, 0.1, -0.1, 1e300, -1e300, 2147483647.5, 1.0 / 3.0, 16777217.0, 1e-50, -1e-50, 0.0};
  long long hl[M] = {16777217, -16777217, 2147483647, -2147483647 - 1, 9007199254740993LL, 3, -3, 1, 0, 33554435,
                     -33554435, 123456789};
  float* f; double* d; long long *l, *co;
  cudaMalloc(&f, sizeof hf); cudaMalloc(&d, sizeof hd); cudaMalloc(&l, sizeof hl); cudaMalloc(&co, M * 16 * 8);
  cudaMemcpy(f, hf, sizeof hf, cudaMemcpyHostToDevice);
  cudaMemcpy(d, hd, sizeof hd, cudaMemcpyHostToDevice);
  cudaMemcpy(l, hl, sizeof hl, cudaMemcpyHostToDevice);
  conversions<<<1, M>>>(f, d, l, co);
  long long hc[M * 16];
  cudaMemcpy(hc, co, sizeof hc, cudaMemcpyDeviceToHost);
  for (int i = 0; i < M; ++i) {
    printf("cvt");
    for (int k = 0; k < 15; ++k) printf(" %lld", hc[i * 16 + k]);
    printf("\n");
  }
  __half2* acc; __half* one;
  cudaMallocManaged(&acc, sizeof(__half2)); cudaMallocManaged(&one, sizeof(__half));
  *acc = __floats2half2_rn(0.0f, 0.0f); *one = __float2half(0.0f);
  half_pairs<<<4, 64>>>(acc, one);
  cudaDeviceSynchronize();
  printf("half %g %g %g\n", __low2float(*acc), __high2float(*acc), __half2float(*one));
  return 0;
}
