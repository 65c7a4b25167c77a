"""Every kernel source also compiles for the GPU, on machines without one.

The CPU executor accepts some C++ that NVRTC would refuse (its header is plain C++), and nvcc
accepts what NVRTC refuses too (nvcc includes the CUDA runtime headers, so `INFINITY` or
`printf` compile there and not in CuPy).  So every source goes through NVRTC, the compiler CuPy
uses (a library: no GPU needed), and through nvcc to PTX.  Each check is skipped, with the
reason, where its compiler is not installed.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from labkit.backends import nvrtc_check

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "labkit" / "kernels").glob("*.cu")) + sorted((ROOT / "tests" / "cuda").glob("*.cu"))
NVCC = shutil.which("nvcc")


@pytest.mark.skipif(nvrtc_check.library() is None, reason="NVRTC is not installed (pip install nvidia-cuda-nvrtc)")
@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_kernel_source_compiles_with_nvrtc(path):
    code = path.read_text()
    if "#include <cooperative_groups" in code and not nvrtc_check.cuda_include_dirs():
        pytest.skip("includes CUDA's cooperative_groups.h: NVRTC needs a CUDA toolkit's headers, and this "
                    "machine has none (CuPy passes them on a GPU)")
    ok, log = nvrtc_check.compile_source(code, path.name)
    assert ok, f"NVRTC (CuPy's compiler) refused {path.name}:\n{log}"


def test_nvrtc_check_can_fail():
    if nvrtc_check.library() is None:
        pytest.skip("NVRTC is not installed (pip install nvidia-cuda-nvrtc)")
    ok, log = nvrtc_check.compile_source('extern "C" __global__ void k(float* y) { y[0] = INFINITY; }')
    assert not ok and "INFINITY" in log


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed on this machine")
@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_kernel_source_compiles_with_nvcc(path, tmp_path):
    res = subprocess.run([NVCC, "-std=c++17", "-arch=sm_90", "--ptx", "-o", str(tmp_path / "k.ptx"),
                          str(path)], capture_output=True, text=True)
    assert res.returncode == 0, f"nvcc refused {path.name}:\n{res.stderr}"
