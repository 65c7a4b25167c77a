// Half precision (cuda_fp16.h): conversions on the host, and on the device the arithmetic of __half and
// __half2, comparisons, conversions from float and a warp sum of __half2 by shuffles.
//   half_precision IN OUT
// IN holds n 16-bit halves a, b, c and n float bits f; OUT receives, each n long: a+b, a-b, a*b, a/b,
// fma(a, b, c) by the scalar intrinsics, the same five by the __half2 intrinsics and operators, the
// halves of f, and a byte of comparison bits per pair.  The test checks them against numpy's float16.
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <vector>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

__global__ void scalar_ops(const __half* a, const __half* b, const __half* c, const float* f, __half* out,
                           unsigned char* cmp, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[0 * n + i] = __hadd(a[i], b[i]);
  out[1 * n + i] = __hsub(a[i], b[i]);
  out[2 * n + i] = __hmul(a[i], b[i]);
  out[3 * n + i] = __hdiv(a[i], b[i]);
  out[4 * n + i] = __hfma(a[i], b[i], c[i]);
  out[10 * n + i] = __float2half_rn(f[i]);
  cmp[i] = __heq(a[i], b[i]) | __hlt(a[i], b[i]) << 1 | __hle(a[i], b[i]) << 2 | __hgt(a[i], b[i]) << 3 |
           __hge(a[i], b[i]) << 4 | __hneu(a[i], b[i]) << 5 | (a[i] < b[i]) << 6 | (a[i] != b[i]) << 7;
}

// The same operations on pairs: the intrinsics for + - and fma, the operators for * and /.
__global__ void pair_ops(const __half2* a, const __half2* b, const __half2* c, __half2* out, int pairs) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= pairs) return;
  out[0 * pairs + i] = __hadd2(a[i], b[i]);
  out[1 * pairs + i] = __hsub2(a[i], b[i]);
  out[2 * pairs + i] = a[i] * b[i];
  out[3 * pairs + i] = a[i] / b[i];
  out[4 * pairs + i] = __hfma2(a[i], b[i], c[i]);
}

// Each warp sums its lanes' (lane, -2 * lane) by shuffles: (496, -992), exact in half.
__global__ void warp_sum(float2* out) {
  __half2 v = __floats2half2_rn(float(threadIdx.x), -2.0f * threadIdx.x);
  for (int d = 16; d > 0; d /= 2) v = __hadd2(v, __shfl_down_sync(0xffffffffu, v, d));
  __half lo = __shfl_sync(0xffffffffu, __low2half(v), 0);
  if (threadIdx.x == 0) out[0] = make_float2(__half2float(lo), __high2float(v));
}

static int check(const char* what, unsigned got, unsigned want) {
  std::printf("%s: 0x%04x %s\n", what, got, got == want ? "ok" : "WRONG");
  return got == want ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc != 3) { std::fprintf(stderr, "usage: half_precision IN OUT\n"); return 2; }
  // Conversions on the host: exact values, the largest half, subnormals, ties to even, inf and NaN.
  int bad = 0;
  bad += check("1.0", __half_as_ushort(__float2half(1.0f)), 0x3c00);
  bad += check("65504", __half_as_ushort(__float2half(65504.0f)), 0x7bff);
  bad += check("65519", __half_as_ushort(__float2half(65519.0f)), 0x7bff);
  bad += check("65520", __half_as_ushort(__float2half(65520.0f)), 0x7c00);
  bad += check("2^-24", __half_as_ushort(__float2half(0x1p-24f)), 0x0001);
  bad += check("2^-25", __half_as_ushort(__float2half(0x1p-25f)), 0x0000);        // a tie: to even, zero
  bad += check("3*2^-25", __half_as_ushort(__float2half(0x3p-25f)), 0x0002);      // a tie: to even, two
  bad += check("1+2^-11", __half_as_ushort(__float2half(1.0f + 0x1p-11f)), 0x3c00);
  bad += check("1+3*2^-11", __half_as_ushort(__float2half(1.0f + 0x3p-11f)), 0x3c02);
  bad += check("-0", __half_as_ushort(__float2half(-0.0f)), 0x8000);
  bad += check("-inf", __half_as_ushort(__float2half(-INFINITY)), 0xfc00);
  bad += check("nan is nan", __hisnan(__float2half(NAN)), 1);
  bad += check("2^-24 back", __half2float(__ushort_as_half(0x0001)) == 0x1p-24f, 1);
  bad += check("0x7bff back", __half2float(__ushort_as_half(0x7bff)) == 65504.0f, 1);
  bad += check("nan != nan", __ushort_as_half(0x7e00) != __ushort_as_half(0x7e00), 1);
  __half h = 2.5f;                                   // host operators
  h = h * __half(2.0f) - __half(1.0f);
  bad += check("2.5*2-1", __half_as_ushort(h), 0x4400);

  FILE* in = std::fopen(argv[1], "rb");
  if (!in) { std::perror(argv[1]); return 2; }
  std::fseek(in, 0, SEEK_END);
  long bytes = std::ftell(in);
  std::fseek(in, 0, SEEK_SET);
  int n = int(bytes / 10);                           // three halves and a float per element
  if (n % 2) { std::fprintf(stderr, "n must be even\n"); return 2; }
  std::vector<__half> abc(3 * n);
  std::vector<float> f(n);
  if (std::fread(abc.data(), 2, 3 * n, in) != size_t(3 * n) || std::fread(f.data(), 4, n, in) != size_t(n)) return 2;
  std::fclose(in);

  __half *d_abc, *d_out;
  float* d_f;
  unsigned char* d_cmp;
  float2* d_sum;
  cudaMalloc(&d_abc, 3 * n * sizeof(__half));
  cudaMalloc(&d_out, 11 * n * sizeof(__half));
  cudaMalloc(&d_f, n * sizeof(float));
  cudaMalloc(&d_cmp, n);
  cudaMalloc(&d_sum, sizeof(float2));
  cudaMemcpy(d_abc, abc.data(), 3 * n * sizeof(__half), cudaMemcpyHostToDevice);
  cudaMemcpy(d_f, f.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  scalar_ops<<<(n + 127) / 128, 128>>>(d_abc, d_abc + n, d_abc + 2 * n, d_f, d_out, d_cmp, n);
  pair_ops<<<(n / 2 + 127) / 128, 128>>>((const __half2*)d_abc, (const __half2*)(d_abc + n),
                                         (const __half2*)(d_abc + 2 * n), (__half2*)(d_out + 5 * n), n / 2);
  warp_sum<<<1, 32>>>(d_sum);
  std::vector<__half> out(11 * n);
  std::vector<unsigned char> cmp(n);
  float2 sum;
  cudaMemcpy(out.data(), d_out, out.size() * sizeof(__half), cudaMemcpyDeviceToHost);
  cudaMemcpy(cmp.data(), d_cmp, n, cudaMemcpyDeviceToHost);
  cudaMemcpy(&sum, d_sum, sizeof sum, cudaMemcpyDeviceToHost);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) { std::fprintf(stderr, "%s\n", cudaGetErrorString(err)); return 1; }
  std::printf("warp sum: %g %g\n", sum.x, sum.y);

  FILE* o = std::fopen(argv[2], "wb");
  if (!o) { std::perror(argv[2]); return 2; }
  std::fwrite(out.data(), 2, out.size(), o);
  std::fwrite(cmp.data(), 1, n, o);
  std::fclose(o);
  std::printf("%s\n", bad ? "FAILED" : "PASSED");
  return bad ? 1 : 0;
}
