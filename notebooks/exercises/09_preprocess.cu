// Exercise (notebook 09): AlexNet's input preprocessing on the device, with a grid-stride loop,
// written by you.
//
// Photos arrive as uint8 RGB pixels, (N, H, W, 3) channels last.  AlexNet takes float32 (N, 3, H, W),
// channels first in BGR order, with the mean of each channel subtracted (0-255 scale):
//   y[n, c, h, w] = x[n, h, w, 2 - c] - mean[c]        (c = 0 blue, 1 green, 2 red)
// Copying the uint8 pixels over PCIe and converting them on the GPU moves a quarter of the bytes
// that copying the float32 input would.
// The arrays: x uint8 (N, H, W, 3); mean float32 (3,), BGR; y float32 (N, 3, H, W); total = N*3*H*W.
// The launch (the check makes it): block (128,) and a grid that need not match the work: smaller
// than total / 128 blocks (each thread then converts several elements), or larger (some threads
// convert none).  A grid-stride loop covers any total with any grid: thread t of the grid takes
// elements t, t + S, t + 2S, ... below total, S = gridDim.x * blockDim.x the threads of the grid.
// Element i is y's i-th in memory order, so a warp's 32 threads write 32 neighbours (coalesced).
//
// Your part: the grid-stride loop over i, and in it, from i, the position (n, c, h, w) of y's
// element, the pixel of x it reads, and the store.

extern "C" __global__ void preprocess_exercise(const unsigned char* __restrict__ x, const float* __restrict__ mean,
                                               float* __restrict__ y, int N, int H, int W) {
  const long long total = (long long)N * 3 * H * W;
  // BEGIN SOLUTION
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int w = (int)(i % W);
    const int h = (int)((i / W) % H);
    const int c = (int)((i / ((long long)W * H)) % 3);
    const long long n = i / ((long long)W * H * 3);
    y[i] = (float)x[((n * H + h) * W + w) * 3 + (2 - c)] - mean[c];
  }
  // END SOLUTION
}
