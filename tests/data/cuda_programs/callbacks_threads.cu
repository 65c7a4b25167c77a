// Host threads that each issue work to a stream of their own, a stream callback that reads what the
// stream copied back, and a kernel that waits a number of SM clock cycles (clock()).
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

__global__ void add_one(int* d, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) d[i] += 1;
}
// clock() is the low 32 bits of the SM's counter: differences are taken modulo 2^32, so that a wait
// across the counter's wrap (every 2.2 s at 1.98 GHz) ends too.
__global__ void wait_cycles(long long cycles, long long* spent) {
  const unsigned start = (unsigned)clock();
  unsigned elapsed = 0;
  while ((long long)elapsed < cycles) elapsed = (unsigned)clock() - start;
  *spent = (long long)elapsed;
}

struct Work { int id; int* h; int* d; cudaStream_t s; int sum; };
const int N = 1000;

void CUDART_CB summed(cudaStream_t, cudaError_t status, void* p) {
  Work* w = static_cast<Work*>(p);
  w->sum = 0;
  for (int i = 0; i < N; ++i) w->sum += w->h[i];   // the stream's copy has finished
}

int main() {
  std::vector<Work> work(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t, &work] {
      Work& w = work[t];
      w.id = t;
      cudaStreamCreate(&w.s);
      cudaMallocHost(&w.h, N * sizeof(int));
      cudaMalloc(&w.d, N * sizeof(int));
      for (int i = 0; i < N; ++i) w.h[i] = t;
      cudaMemcpyAsync(w.d, w.h, N * sizeof(int), cudaMemcpyHostToDevice, w.s);
      add_one<<<(N + 255) / 256, 256, 0, w.s>>>(w.d, N);
      cudaMemcpyAsync(w.h, w.d, N * sizeof(int), cudaMemcpyDeviceToHost, w.s);
      cudaStreamAddCallback(w.s, summed, &w, 0);
    });
  for (auto& th : threads) th.join();
  int bad = 0;
  for (auto& w : work) {
    printf("stream %d: sum %d\n", w.id, w.sum);
    bad += w.sum != (w.id + 1) * N;
    cudaStreamDestroy(w.s);
    cudaFreeHost(w.h);
    cudaFree(w.d);
  }
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  long long* spent;
  cudaMallocManaged(&spent, sizeof *spent);
  auto t0 = std::chrono::steady_clock::now();
  wait_cycles<<<1, 1>>>(20LL * khz, spent);   // 20 ms of the device's clock
  cudaDeviceSynchronize();
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  bool timed = *spent >= 20LL * khz && ms >= 19 && ms < 2000;
  printf("waited 20 ms of cycles: %s\n", timed ? "yes" : "no");
  bad += !timed;
  printf(bad ? "FAILED\n" : "PASSED\n");
  return bad;
}
