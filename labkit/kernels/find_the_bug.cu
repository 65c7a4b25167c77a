// find_the_bug.cu -- two kernels for an exercise: each has one synchronisation bug.
//
// Neither bug is a wrong index: every access is in bounds, and on the CPU executor's default
// schedule (each thread runs until its next barrier) one of them even gives the right answer.
// Run them with check="race" (the CPU executor's race check, on any machine): it names the
// memory, the two threads and the two lines that nothing orders.  Then fix them.
//
// Versions:
//   histogram   counts how many values fall in each of `nbins` bins, one thread per value
//   block_sum   one partial sum per block of 256 values, a tree reduction in shared memory
//
// Launch (Python):
//   histogram(x, bins, n, nbins):  grid (ceil(n / 256),), block (256,); x int32 in [0, nbins)
//   block_sum(x, partial, n):      grid (ceil(n / 256),), block (256,); partial has one float per block

extern "C" __global__ void histogram(const int* __restrict__ x, int* __restrict__ bins, int n, int nbins) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && x[i] >= 0 && x[i] < nbins) bins[x[i]] += 1;
}

extern "C" __global__ void block_sum(const float* __restrict__ x, float* __restrict__ partial, int n) {
  __shared__ float s[256];
  const int t = threadIdx.x;
  const int i = blockIdx.x * 256 + t;
  s[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  // Halve the number of active threads each step: s[t] takes s[t + k] into its sum.
  for (int k = 128; k > 0; k /= 2) {
    if (t < k) s[t] += s[t + k];
  }
  if (t == 0) partial[blockIdx.x] = s[0];
}
