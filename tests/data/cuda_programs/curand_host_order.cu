// cuRAND's host API in cuRAND's own order: chosen numbers of XORWOW (2^21 of them, then 8,192 more from
// the same generator, then 8,192 from a generator at offset 5) and of Philox4_32_10 (2^20), seed 1234.
// curand_host_order.h200.txt holds what cuRAND gave for the same calls on an H200;
// tests/test_cuda_random.py wants the CPU executor to print those lines.
#include <cstdio>
#include <curand.h>

static unsigned* h;
static void show(const char* name, unsigned* d, size_t n, const size_t* at, int count) {
  cudaMemcpy(h, d, n * sizeof(unsigned), cudaMemcpyDeviceToHost);
  for (int i = 0; i < count; ++i) printf("%s %zu %u\n", name, at[i], h[at[i]]);
}

int main() {
  const size_t N = 1 << 21;
  unsigned* d;
  cudaMalloc(&d, N * sizeof(unsigned));
  h = new unsigned[N];
  curandGenerator_t g;
  curandCreateGenerator(&g, CURAND_RNG_PSEUDO_DEFAULT);
  curandSetPseudoRandomGeneratorSeed(g, 1234ULL);
  curandGenerate(g, d, N);
  const size_t xorwow[] = {0, 1, 4095, 4096, 4097, 8191, 123457, 1000003, N - 1};
  show("xorwow", d, N, xorwow, 9);
  curandGenerate(g, d, 8192);
  const size_t next[] = {0, 4095, 4096, 8191};
  show("xorwow_next", d, 8192, next, 4);
  curandDestroyGenerator(g);
  curandCreateGenerator(&g, CURAND_RNG_PSEUDO_DEFAULT);
  curandSetPseudoRandomGeneratorSeed(g, 1234ULL);
  curandSetGeneratorOffset(g, 5);
  curandGenerate(g, d, 8192);
  const size_t offset5[] = {0, 4090, 4091, 8191};
  show("xorwow_offset5", d, 8192, offset5, 4);
  curandDestroyGenerator(g);
  curandCreateGenerator(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10);
  curandSetPseudoRandomGeneratorSeed(g, 1234ULL);
  curandGenerate(g, d, 1 << 20);
  const size_t philox[] = {0, 3, 4, 262143, 262144, 262147, 524289, 1048575};
  show("philox", d, 1 << 20, philox, 8);
  curandDestroyGenerator(g);
  return 0;
}
