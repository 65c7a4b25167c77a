// Random numbers with cuRAND: the device API (a state per thread, curand_init with the thread's own
// subsequence) and the host API (a generator that fills device memory), checked by their statistics.
#include <cmath>
#include <cstdio>
#include <curand.h>
#include <curand_kernel.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s\n", cudaGetErrorString(e)); return 1; } } while (0)
#define CHECK_RAND(x) do { curandStatus_t s = (x); if (s != CURAND_STATUS_SUCCESS) { printf("curand %d\n", int(s)); return 1; } } while (0)

__global__ void first_numbers(unsigned* out) {
  curandState s;
  curand_init(1234ull, 5, 1000, &s);      // subsequence 5, 1000 numbers in
  for (int i = 0; i < 4; ++i) out[i] = curand(&s);
}

// Each thread draws n uniform and n normal numbers; the block sums them in shared memory.
template <class State>
__global__ void moments(unsigned long long seed, int n, double* sums) {
  __shared__ double part[4][128];
  int tid = blockIdx.x * blockDim.x + threadIdx.x;
  State s;
  curand_init(seed, tid, 0, &s);
  double u = 0, uu = 0, z = 0, zz = 0;
  for (int i = 0; i < n; ++i) {
    float a = curand_uniform(&s), b = curand_normal(&s);
    u += a; uu += a * a; z += b; zz += b * b;
  }
  part[0][threadIdx.x] = u; part[1][threadIdx.x] = uu; part[2][threadIdx.x] = z; part[3][threadIdx.x] = zz;
  __syncthreads();
  if (threadIdx.x < 4) {
    double t = 0;
    for (int i = 0; i < blockDim.x; ++i) t += part[threadIdx.x][i];
    atomicAdd(&sums[threadIdx.x], t);
  }
}

template <class State> int check_moments(const char* name) {
  const int blocks = 4, threads = 128, n = 200;
  double* d;
  CHECK(cudaMalloc(&d, 4 * sizeof(double)));
  CHECK(cudaMemset(d, 0, 4 * sizeof(double)));
  moments<State><<<blocks, threads>>>(42ull, n, d);
  CHECK(cudaGetLastError());
  double h[4];
  CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
  const double N = double(blocks) * threads * n;
  double um = h[0] / N, uv = h[1] / N - um * um, zm = h[2] / N, zv = h[3] / N - zm * zm;
  bool ok = std::fabs(um - 0.5) < 0.01 && std::fabs(uv - 1.0 / 12) < 0.005 && std::fabs(zm) < 0.02 &&
            std::fabs(zv - 1) < 0.03;
  printf("%s: uniform mean %.3f var %.4f, normal mean %.3f var %.3f: %s\n", name, um, uv, zm, zv, ok ? "ok" : "WRONG");
  cudaFree(d);
  return ok ? 0 : 1;
}

int main() {
  int bad = 0;
  unsigned* d_first;
  CHECK(cudaMalloc(&d_first, 4 * sizeof(unsigned)));
  first_numbers<<<1, 1>>>(d_first);
  unsigned first[4];
  CHECK(cudaMemcpy(first, d_first, sizeof first, cudaMemcpyDeviceToHost));
  printf("XORWOW seed 1234, subsequence 5, offset 1000: %u %u %u %u\n", first[0], first[1], first[2], first[3]);
  bad += check_moments<curandState>("XORWOW");
  bad += check_moments<curandStatePhilox4_32_10_t>("Philox");

  // The host API: normal numbers with a mean and a deviation, and a two-dimensional Sobol sequence.
  const size_t n = 100000;
  float* d;
  CHECK(cudaMalloc(&d, n * sizeof(float)));
  curandGenerator_t g;
  CHECK_RAND(curandCreateGenerator(&g, CURAND_RNG_PSEUDO_DEFAULT));
  CHECK_RAND(curandSetPseudoRandomGeneratorSeed(g, 7));
  CHECK_RAND(curandGenerateNormal(g, d, n, 3.0f, 2.0f));
  float* h = new float[n];
  CHECK(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
  double m = 0, v = 0;
  for (size_t i = 0; i < n; ++i) { m += h[i]; v += double(h[i]) * h[i]; }
  m /= n; v = v / n - m * m;
  bool ok = std::fabs(m - 3) < 0.03 && std::fabs(std::sqrt(v) - 2) < 0.03;
  printf("host normal(3, 2): mean %.2f deviation %.2f: %s\n", m, std::sqrt(v), ok ? "ok" : "WRONG");
  bad += !ok;
  printf("odd count: %d\n", int(curandGenerateNormal(g, d, 3, 0.f, 1.f)));
  CHECK_RAND(curandDestroyGenerator(g));

  CHECK_RAND(curandCreateGenerator(&g, CURAND_RNG_QUASI_SOBOL32));
  CHECK_RAND(curandSetQuasiRandomGeneratorDimensions(g, 2));
  CHECK_RAND(curandGenerateUniform(g, d, 8));
  CHECK(cudaMemcpy(h, d, 8 * sizeof(float), cudaMemcpyDeviceToHost));
  printf("Sobol x: %g %g %g %g  y: %g %g %g %g\n", h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
  CHECK_RAND(curandDestroyGenerator(g));
  cudaFree(d);
  delete[] h;
  printf(bad ? "FAILED\n" : "PASSED\n");
  return bad ? 1 : 0;
}
