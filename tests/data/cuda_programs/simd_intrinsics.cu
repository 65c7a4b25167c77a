// simd_intrinsics.cu -- every SIMD intrinsic (two 16-bit or four 8-bit lanes) and DPX function on
// words drawn to hit each lane's edges; tests/test_cuda_simd.py checks each result lane by lane.
#include <cstdio>

constexpr int T = 256;

__global__ void all(const unsigned* x, unsigned* out) {
  const unsigned a = x[3 * threadIdx.x], b = x[3 * threadIdx.x + 1], c = x[3 * threadIdx.x + 2];
  unsigned* o = out + threadIdx.x * 118;
  int k = 0;
  o[k++] = __vabs2(a);
  o[k++] = __vabsss2(a);
  o[k++] = __vneg2(a);
  o[k++] = __vnegss2(a);
  o[k++] = __vabs4(a);
  o[k++] = __vabsss4(a);
  o[k++] = __vneg4(a);
  o[k++] = __vnegss4(a);
  o[k++] = __vabsdiffs2(a, b);
  o[k++] = __vabsdiffu2(a, b);
  o[k++] = __vadd2(a, b);
  o[k++] = __vsub2(a, b);
  o[k++] = __vaddss2(a, b);
  o[k++] = __vsubss2(a, b);
  o[k++] = __vaddus2(a, b);
  o[k++] = __vsubus2(a, b);
  o[k++] = __vavgs2(a, b);
  o[k++] = __vavgu2(a, b);
  o[k++] = __vhaddu2(a, b);
  o[k++] = __vmaxs2(a, b);
  o[k++] = __vmaxu2(a, b);
  o[k++] = __vmins2(a, b);
  o[k++] = __vminu2(a, b);
  o[k++] = __vsads2(a, b);
  o[k++] = __vsadu2(a, b);
  o[k++] = __vabsdiffs4(a, b);
  o[k++] = __vabsdiffu4(a, b);
  o[k++] = __vadd4(a, b);
  o[k++] = __vsub4(a, b);
  o[k++] = __vaddss4(a, b);
  o[k++] = __vsubss4(a, b);
  o[k++] = __vaddus4(a, b);
  o[k++] = __vsubus4(a, b);
  o[k++] = __vavgs4(a, b);
  o[k++] = __vavgu4(a, b);
  o[k++] = __vhaddu4(a, b);
  o[k++] = __vmaxs4(a, b);
  o[k++] = __vmaxu4(a, b);
  o[k++] = __vmins4(a, b);
  o[k++] = __vminu4(a, b);
  o[k++] = __vsads4(a, b);
  o[k++] = __vsadu4(a, b);
  o[k++] = __vcmpeq2(a, b);
  o[k++] = __vcmpne2(a, b);
  o[k++] = __vcmpges2(a, b);
  o[k++] = __vcmpgeu2(a, b);
  o[k++] = __vcmpgts2(a, b);
  o[k++] = __vcmpgtu2(a, b);
  o[k++] = __vcmples2(a, b);
  o[k++] = __vcmpleu2(a, b);
  o[k++] = __vcmplts2(a, b);
  o[k++] = __vcmpltu2(a, b);
  o[k++] = __vseteq2(a, b);
  o[k++] = __vsetne2(a, b);
  o[k++] = __vsetges2(a, b);
  o[k++] = __vsetgeu2(a, b);
  o[k++] = __vsetgts2(a, b);
  o[k++] = __vsetgtu2(a, b);
  o[k++] = __vsetles2(a, b);
  o[k++] = __vsetleu2(a, b);
  o[k++] = __vsetlts2(a, b);
  o[k++] = __vsetltu2(a, b);
  o[k++] = __vcmpeq4(a, b);
  o[k++] = __vcmpne4(a, b);
  o[k++] = __vcmpges4(a, b);
  o[k++] = __vcmpgeu4(a, b);
  o[k++] = __vcmpgts4(a, b);
  o[k++] = __vcmpgtu4(a, b);
  o[k++] = __vcmples4(a, b);
  o[k++] = __vcmpleu4(a, b);
  o[k++] = __vcmplts4(a, b);
  o[k++] = __vcmpltu4(a, b);
  o[k++] = __vseteq4(a, b);
  o[k++] = __vsetne4(a, b);
  o[k++] = __vsetges4(a, b);
  o[k++] = __vsetgeu4(a, b);
  o[k++] = __vsetgts4(a, b);
  o[k++] = __vsetgtu4(a, b);
  o[k++] = __vsetles4(a, b);
  o[k++] = __vsetleu4(a, b);
  o[k++] = __vsetlts4(a, b);
  o[k++] = __vsetltu4(a, b);
  o[k++] = (unsigned)__vimax3_s32((int)a, (int)b, (int)c);
  o[k++] = (unsigned)__vimax3_u32(a, b, c);
  o[k++] = (unsigned)__vimax3_s32_relu((int)a, (int)b, (int)c);
  o[k++] = (unsigned)__vimax3_s16x2(a, b, c);
  o[k++] = (unsigned)__vimax3_u16x2(a, b, c);
  o[k++] = (unsigned)__vimax3_s16x2_relu(a, b, c);
  o[k++] = (unsigned)__vimin3_s32((int)a, (int)b, (int)c);
  o[k++] = (unsigned)__vimin3_u32(a, b, c);
  o[k++] = (unsigned)__vimin3_s32_relu((int)a, (int)b, (int)c);
  o[k++] = (unsigned)__vimin3_s16x2(a, b, c);
  o[k++] = (unsigned)__vimin3_u16x2(a, b, c);
  o[k++] = (unsigned)__vimin3_s16x2_relu(a, b, c);
  o[k++] = (unsigned)__viaddmax_s32((int)a, (int)b, (int)c);
  o[k++] = (unsigned)__viaddmax_u32(a, b, c);
  o[k++] = (unsigned)__viaddmax_s32_relu((int)a, (int)b, (int)c);
  o[k++] = (unsigned)__viaddmax_s16x2(a, b, c);
  o[k++] = (unsigned)__viaddmax_u16x2(a, b, c);
  o[k++] = (unsigned)__viaddmax_s16x2_relu(a, b, c);
  o[k++] = (unsigned)__viaddmin_s32((int)a, (int)b, (int)c);
  o[k++] = (unsigned)__viaddmin_u32(a, b, c);
  o[k++] = (unsigned)__viaddmin_s32_relu((int)a, (int)b, (int)c);
  o[k++] = (unsigned)__viaddmin_s16x2(a, b, c);
  o[k++] = (unsigned)__viaddmin_u16x2(a, b, c);
  o[k++] = (unsigned)__viaddmin_s16x2_relu(a, b, c);
  o[k++] = (unsigned)__vimax_s32_relu((int)a, (int)b);
  o[k++] = (unsigned)__vimin_s32_relu((int)a, (int)b);
  o[k++] = (unsigned)__vimax_s16x2_relu(a, b);
  o[k++] = (unsigned)__vimin_s16x2_relu(a, b);
  bool p, q;
  o[k++] = (unsigned)__vibmax_s32((int)a, (int)b, &p); o[k++] = p;
  o[k++] = __vibmin_u32(a, b, &p); o[k++] = p;
  o[k++] = __vibmax_s16x2(a, b, &p, &q); o[k++] = p * 2 + q;
  o[k++] = __vibmin_u16x2(a, b, &p, &q); o[k++] = p * 2 + q;
}

int main() {
  static unsigned hx[3 * T];
  unsigned s = 12345u;
  const unsigned edges[] = {0u, 1u, 0x7fu, 0x80u, 0xffu, 0x7fffu, 0x8000u, 0xffffu, 0x7fffffffu, 0x80000000u, 0xffffffffu,
                            0x7f807f80u, 0x80ff7f01u, 0xffff8000u, 0x00017fffu};
  for (int i = 0; i < 3 * T; ++i) {
    s = s * 1664525u + 1013904223u;
    hx[i] = (i % 4 == 0) ? edges[(s >> 8) % 15] : (i % 4 == 1) ? (s ^ (s >> 7)) : (s & 0x80ff80ffu) | ((s >> 3) & 0x7f007f00u);
  }
  unsigned *x, *out;
  const int per = 118;
  cudaMalloc(&x, sizeof hx); cudaMalloc(&out, T * per * sizeof(unsigned));
  cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice);
  all<<<1, T>>>(x, out);
  static unsigned h[T * 256];
  cudaMemcpy(h, out, T * per * sizeof(unsigned), cudaMemcpyDeviceToHost);
  for (int t = 0; t < T; ++t) {
    printf("%u %u %u", hx[3 * t], hx[3 * t + 1], hx[3 * t + 2]);
    for (int k = 0; k < per; ++k) printf(" %u", h[t * per + k]);
    printf("\n");
  }
}
