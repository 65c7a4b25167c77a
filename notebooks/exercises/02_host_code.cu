// Exercise (notebook 02b): the host side of the naive convolution, written by you.
//
//     02_host_code [SEED N C H W M K [OUT_FILE]]
//
// A whole CUDA program: the kernel below is given (one thread per output element), and so are the
// inputs, made on the host from SEED by a small generator that the check makes again in Python.
// y[n, m, h, w] = sum over c, p, q of x[n, c, h + p, w + q] * k[m, c, p, q],
// x (N, C, H, W), k (M, C, K, K), y (N, M, Ho, Wo) with Ho = H - K + 1, Wo = W - K + 1.
//
// Your part, in main(): everything the host does around the kernel.
//   1. cudaMalloc the device arrays d_x, d_k, d_y (sizes in bytes: elements * sizeof(float));
//   2. cudaMemcpy h_x and h_k to the device;
//   3. launch conv_naive with a block of 256 threads and enough blocks to cover every output
//      (the sizes come from the command line: compute the grid from them);
//   4. check the launch: CHECK(cudaGetLastError()) right after it (a bad configuration is reported
//      there and only there), then CHECK(cudaDeviceSynchronize()) (an error while the kernel ran);
//   5. time the launch with two events (cudaEventRecord before and after, cudaEventSynchronize,
//      cudaEventElapsedTime) and print "kernel: <time> ms";
//   6. cudaMemcpy d_y back into h_y, then cudaFree the device arrays and destroy the events.
// Every runtime call goes through CHECK.
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

// A runtime call that fails stops the program with the call, its line and the error's words.
#define CHECK(call)                                                                              \
  do {                                                                                           \
    cudaError_t err_ = (call);                                                                   \
    if (err_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "CUDA error at %s:%d: %s: %s\n", __FILE__, __LINE__, #call,           \
                   cudaGetErrorString(err_));                                                    \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

// Given: the naive convolution, one thread per output element, numbered n, m, h, w (w fastest).
__global__ void conv_naive(const float* x, const float* k, float* y, int N, int C, int H, int W, int M, int K) {
  const int Ho = H - K + 1, Wo = W - K + 1;
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)N * M * Ho * Wo) return;
  const int w = int(i % Wo), h = int(i / Wo % Ho), m = int(i / ((long long)Wo * Ho) % M);
  const int n = int(i / ((long long)Wo * Ho * M));
  float acc = 0.0f;
  for (int c = 0; c < C; ++c)
    for (int p = 0; p < K; ++p)
      for (int q = 0; q < K; ++q)
        acc += x[((n * C + c) * H + h + p) * W + w + q] * k[((m * C + c) * K + p) * K + q];
  y[i] = acc;
}

// The inputs' generator (labkit.course.host_program makes the same values): a 32-bit linear
// congruential generator, each value a multiple of 1/32768 in [-1, 1), exact in float32.
static unsigned int generator_state;
static float next_value() {
  generator_state = generator_state * 1664525u + 1013904223u;
  return float((generator_state >> 9) & 0xFFFFu) / 32768.0f - 1.0f;
}

int main(int argc, char** argv) {
  unsigned int seed = 1;
  int N = 3, C = 2, H = 13, W = 13, M = 5, K = 3;
  if (argc >= 8) {
    seed = unsigned(std::strtoul(argv[1], nullptr, 10));
    N = std::atoi(argv[2]); C = std::atoi(argv[3]); H = std::atoi(argv[4]); W = std::atoi(argv[5]);
    M = std::atoi(argv[6]); K = std::atoi(argv[7]);
  }
  if (N < 1 || C < 1 || M < 1 || K < 1 || H < K || W < K) {
    std::fprintf(stderr, "usage: %s [SEED N C H W M K [OUT_FILE]] with H and W at least K\n", argv[0]);
    return 2;
  }
  const int Ho = H - K + 1, Wo = W - K + 1;
  const size_t x_count = size_t(N) * C * H * W, k_count = size_t(M) * C * K * K;
  const size_t y_count = size_t(N) * M * Ho * Wo;
  std::vector<float> h_x(x_count), h_k(k_count), h_y(y_count, std::numeric_limits<float>::quiet_NaN());
  generator_state = seed;
  for (auto& v : h_x) v = next_value();
  for (auto& v : h_k) v = next_value();

  float* d_x = nullptr;
  float* d_k = nullptr;
  float* d_y = nullptr;
  // BEGIN SOLUTION
  CHECK(cudaMalloc(&d_x, x_count * sizeof(float)));
  CHECK(cudaMalloc(&d_k, k_count * sizeof(float)));
  CHECK(cudaMalloc(&d_y, y_count * sizeof(float)));
  CHECK(cudaMemcpy(d_x, h_x.data(), x_count * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_k, h_k.data(), k_count * sizeof(float), cudaMemcpyHostToDevice));

  const int threads = 256;
  const int blocks = int((y_count + threads - 1) / threads);   // the last block runs past the end: the kernel's test
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  CHECK(cudaEventRecord(start));
  conv_naive<<<blocks, threads>>>(d_x, d_k, d_y, N, C, H, W, M, K);
  CHECK(cudaGetLastError());           // the launch itself: a bad configuration is reported here
  CHECK(cudaEventRecord(stop));
  CHECK(cudaDeviceSynchronize());      // the kernel's run: an error while it ran is reported here
  float ms = 0.0f;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  std::printf("kernel: %.3f ms\n", ms);

  CHECK(cudaMemcpy(h_y.data(), d_y, y_count * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  CHECK(cudaFree(d_x));
  CHECK(cudaFree(d_k));
  CHECK(cudaFree(d_y));
  // END SOLUTION

  double total = 0.0;
  for (float v : h_y) total += v;
  std::printf("y has %zu elements; y[0..3] = %.4f %.4f %.4f %.4f; their sum %.4f\n", y_count, h_y[0],
              h_y[y_count > 1 ? 1 : 0], h_y[y_count > 2 ? 2 : 0], h_y[y_count > 3 ? 3 : 0], total);
  if (argc >= 9) {     // the check's copy of y, to compare with its own float64 answer
    FILE* f = std::fopen(argv[8], "wb");
    if (!f || std::fwrite(h_y.data(), sizeof(float), y_count, f) != y_count || std::fclose(f) != 0) {
      std::fprintf(stderr, "could not write %s\n", argv[8]);
      return 3;
    }
  }
  return 0;
}
