"""cuFFT on the CPU executor (labkit/backends/cpu/program_include/cufft.h): plans of rank 1 to 3, the
C2C, R2C, C2R and double transforms, advanced layouts, checked against numpy.fft; routines not provided
refused by name."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from labkit.backends.cpu import program_source
from labkit.cuda import run_program
from labkit.errors import UnsupportedOnCPU

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the CPU executor needs g++")

PROGRAM = r"""
#include <cstdio>
#include <cufft.h>
static double value(int i, int salt) { return ((i * 37 + salt * 11) % 17 - 8) / 8.0; }
template <class T> static void show(const char* name, int status, const T* p, int n) {
  cudaDeviceSynchronize();
  printf("%s %d", name, status);
  for (int i = 0; i < n; ++i) printf(" %.17g", double(p[i]));
  printf("\n");
}
int main() {
  {  // C2C 1-D of 12 (not a power of two) and 16, two batches, forward then inverse in place
    for (int n : {12, 16}) {
      cufftComplex* d; cudaMallocManaged(&d, 2 * n * sizeof(cufftComplex));
      for (int i = 0; i < 2 * n; ++i) d[i] = make_cuFloatComplex(value(i, 1), value(i, 2));
      cufftHandle p; int s = cufftPlan1d(&p, n, CUFFT_C2C, 2);
      s |= cufftExecC2C(p, d, d, CUFFT_FORWARD);
      show(n == 12 ? "c2c12" : "c2c16", s, (float*)d, 4 * n);
      s = cufftExecC2C(p, d, d, CUFFT_INVERSE);
      show(n == 12 ? "c2c12_back" : "c2c16_back", s, (float*)d, 4 * n);
      cufftDestroy(p);
    }
  }
  {  // R2C then C2R, 2-D 6 x 7 (odd last axis) and 4 x 8, out of place
    for (int ny : {7, 8}) {
      const int nx = ny == 7 ? 6 : 4, h = ny / 2 + 1;
      cufftReal *r, *back; cufftComplex* c;
      cudaMallocManaged(&r, nx * ny * 4); cudaMallocManaged(&back, nx * ny * 4);
      cudaMallocManaged(&c, nx * h * sizeof(cufftComplex));
      for (int i = 0; i < nx * ny; ++i) r[i] = value(i, 3);
      cufftHandle f, b;
      int s = cufftPlan2d(&f, nx, ny, CUFFT_R2C) | cufftPlan2d(&b, nx, ny, CUFFT_C2R);
      s |= cufftExecR2C(f, r, c);
      show(ny == 7 ? "r2c7" : "r2c8", s, (float*)c, 2 * nx * h);
      s = cufftExecC2R(b, c, back);
      show(ny == 7 ? "c2r7" : "c2r8", s, back, nx * ny);
    }
  }
  {  // Z2Z 3-D 3 x 4 x 5
    const int n = 60;
    cufftDoubleComplex *in, *out;
    cudaMallocManaged(&in, n * 16); cudaMallocManaged(&out, n * 16);
    for (int i = 0; i < n; ++i) in[i] = make_cuDoubleComplex(value(i, 4), value(i, 5));
    cufftHandle p; int s = cufftPlan3d(&p, 3, 4, 5, CUFFT_Z2Z);
    s |= cufftExecZ2Z(p, in, out, CUFFT_FORWARD);
    show("z2z", s, (double*)out, 2 * n);
  }
  {  // PlanMany, 1-D of 8 over every other element (stride 2), batches 20 apart, into a dense output
    int n = 8, inembed = 16, onembed = 8;
    cufftComplex *in, *out;
    cudaMallocManaged(&in, 3 * 20 * sizeof(cufftComplex)); cudaMallocManaged(&out, 3 * 8 * sizeof(cufftComplex));
    for (int i = 0; i < 60; ++i) in[i] = make_cuFloatComplex(value(i, 6), 0);
    cufftHandle p; int s = cufftPlanMany(&p, 1, &n, &inembed, 2, 20, &onembed, 1, 8, CUFFT_C2C, 3);
    s |= cufftExecC2C(p, in, out, CUFFT_FORWARD);
    show("many", s, (float*)out, 48);
    float* host = new float[8];
    printf("host %d\n", (int)cufftExecC2C(p, (cufftComplex*)host, out, CUFFT_FORWARD));
  }
}
"""


def _v(n: int, salt: int) -> np.ndarray:
    return ((np.arange(n) * 37 + salt * 11) % 17 - 8) / 8.0


def _c(values) -> np.ndarray:
    a = np.asarray(values, float)
    return a[0::2] + 1j * a[1::2]


def test_transforms_match_numpy_fft(tmp_path):
    src = tmp_path / "fft.cu"
    src.write_text(PROGRAM)
    rc, out, err = run_program(src)
    assert rc == 0, err
    got = {ln.split()[0]: (int(ln.split()[1]), [float(v) for v in ln.split()[2:]]) for ln in out.splitlines()}
    assert all(status == 0 for name, (status, _) in got.items() if name != "host")
    for n in (12, 16):
        x = (_v(2 * n, 1) + 1j * _v(2 * n, 2)).reshape(2, n)
        np.testing.assert_allclose(_c(got[f"c2c{n}"][1]), np.fft.fft(x).ravel(), rtol=1e-6, atol=1e-5)
        np.testing.assert_allclose(_c(got[f"c2c{n}_back"][1]), n * x.ravel(), rtol=1e-6, atol=1e-5)   # unnormalised
    for nx, ny in ((6, 7), (4, 8)):
        r = _v(nx * ny, 3).reshape(nx, ny)
        np.testing.assert_allclose(_c(got[f"r2c{ny}"][1]), np.fft.rfft2(r).ravel(), rtol=1e-6, atol=1e-5)
        np.testing.assert_allclose(got[f"c2r{ny}"][1], nx * ny * r.ravel(), rtol=1e-6, atol=1e-5)
    z = (_v(60, 4) + 1j * _v(60, 5)).reshape(3, 4, 5)
    np.testing.assert_allclose(_c(got["z2z"][1]), np.fft.fftn(z).ravel(), rtol=1e-12, atol=1e-12)
    many = _v(60, 6).reshape(3, 20)[:, 0:16:2]
    np.testing.assert_allclose(_c(got["many"][1]), np.fft.fft(many).ravel(), rtol=1e-6, atol=1e-5)
    assert got["host"][0] == 6 and "cufftExecC2C: the input (0x" in err          # CUFFT_EXEC_FAILED, and why


@pytest.mark.check
def test_cufft_routines_not_provided_are_refused_by_name():
    with pytest.raises(UnsupportedOnCPU, match=r"cb.cu:3 calls cufftXtSetCallback, a cuFFT routine that labkit's "
                                               r"cufft.h does not provide"):
        program_source.check_program_supported(
            "#include <cufftXt.h>\nvoid f(cufftHandle p) {\n  cufftXtSetCallback(p, 0, CUFFT_CB_LD_COMPLEX, 0);\n}\n",
            "cb.cu")
    program_source.check_program_supported("#include <cufftXt.h>\nvoid f(cufftHandle* p) { cufftPlan1d(p, 8, "
                                           "CUFFT_C2C, 1); }\n", "ok.cu")
