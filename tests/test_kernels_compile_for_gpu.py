"""Every kernel source also compiles for the GPU (nvcc to PTX, sm_90), on machines without one.

The CPU executor accepts some C++ that NVRTC would refuse (its header is plain
C++); this keeps a kernel that only the CPU could run from reaching a student.
Skipped, with the reason, where nvcc is not installed.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "labkit" / "kernels").glob("*.cu")) + sorted((ROOT / "tests" / "cuda").glob("*.cu"))
NVCC = shutil.which("nvcc")


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed on this machine")
@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_kernel_source_compiles_with_nvcc(path, tmp_path):
    res = subprocess.run([NVCC, "-std=c++17", "-arch=sm_90", "--ptx", "-o", str(tmp_path / "k.ptx"),
                          str(path)], capture_output=True, text=True)
    assert res.returncode == 0, f"nvcc refused {path.name}:\n{res.stderr}"
