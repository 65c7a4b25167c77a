// ptx_instructions.cu -- single PTX instructions in inline asm (bit-field, byte-permute, funnel-shift,
// count and multiply instructions), each on 8 pairs of values; tests/test_cuda_programs.py checks every
// result against the PTX ISA's definition.
#include <cstdio>
__global__ void ops(const unsigned* in, unsigned* out) {
  unsigned a = in[threadIdx.x], b = in[threadIdx.x + 8], r;
  int s = (int)a;
  unsigned long long w = ((unsigned long long)a << 32) | b, rw;
  unsigned* o = out + 16 * threadIdx.x;
  asm("bfind.u32 %0, %1;" : "=r"(r) : "r"(a)); o[0] = r;
  asm volatile("bfind.s32 %0, %1;" : "=r"(r) : "r"(s)); o[1] = r;
  asm("bfe.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b & 63), "r"((b >> 8) & 63)); o[2] = r;
  asm("bfe.s32 %0, %1, 4, 12;" : "=r"(r) : "r"(s)); o[3] = r;
  asm("bfi.b32 %0, %1, %2, %3, %4;" : "=r"(r) : "r"(a), "r"(b), "r"(b & 31), "r"(a & 31)); o[4] = r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(0x73d1u)); o[5] = r;
  asm("popc.b32 %0, %1;" : "=r"(r) : "r"(a)); o[6] = r;
  asm("clz.b32 %0, %1;" : "=r"(r) : "r"(a)); o[7] = r;
  asm("brev.b32 %0, %1;" : "=r"(r) : "r"(a)); o[8] = r;
  asm("shf.l.wrap.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(b)); o[9] = r;
  asm("shf.r.clamp.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(a & 63)); o[10] = r;
  asm("mul.hi.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); o[11] = r;
  asm("mad.lo.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(7)); o[12] = r;
  asm("max.s32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); o[13] = r;
  asm("bfind.u64 %0, %1;" : "=r"(r) : "l"(w)); o[14] = r;
  asm("popc.b64 %0, %1;" : "=r"(r) : "l"(w)); o[15] = r;
}
int main() {
  unsigned h[16] = {0u, 1u, 0x80000000u, 0xffffffffu, 0x12345678u, 0xdeadbeefu, 0x7fffffffu, 0x00f0f000u,
                    0x00000000u, 0x0000ffffu, 0x0a0b0c0du, 0x00001f05u, 0x13141516u, 0xcafebabeu, 0x00000e1fu, 3u};
  unsigned *d, *o, r[128];
  cudaMalloc(&d, sizeof h); cudaMalloc(&o, sizeof r);
  cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
  ops<<<1, 8>>>(d, o);
  cudaMemcpy(r, o, sizeof r, cudaMemcpyDeviceToHost);
  for (int i = 0; i < 128; ++i) printf("%u%c", r[i], i % 16 == 15 ? '\n' : ' ');
}
