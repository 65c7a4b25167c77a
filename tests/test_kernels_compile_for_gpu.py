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


@pytest.mark.check
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


# Compile-time parameters that change what a source instantiates: depthwise.cu at the edges of its
# shapes (1x1 and 2x3 planes, fewer than 4 floats per block, which g++ would take as zero-length
# arrays and NVRTC refuses), a staged whole-plane tile, and the small-plane kernel's own layout.
DEPTHWISE_DEFINES = [
    {"DW_H": 1, "DW_W": 1, "DW_S": 1, "DW_ROWS": 1, "DW_PLANES": 2, "DW_RPT": 1, "DW_THREADS": 2},
    {"DW_H": 2, "DW_W": 3, "DW_S": 2, "DW_ROWS": 1, "DW_PLANES": 1, "DW_RPT": 1, "DW_THREADS": 2},
    {"DW_H": 7, "DW_W": 7, "DW_S": 1, "DW_ROWS": 7, "DW_PLANES": 32, "DW_RPT": 1, "DW_THREADS": 224},
    {"DW_H": 14, "DW_W": 14, "DW_S": 2, "DW_ROWS": 7, "DW_PLANES": 16, "DW_RPT": 7, "DW_THREADS": 112,
     "DW_STAGE": 1},
]


@pytest.mark.skipif(nvrtc_check.library() is None, reason="NVRTC is not installed (pip install nvidia-cuda-nvrtc)")
@pytest.mark.parametrize("defines", DEPTHWISE_DEFINES, ids=lambda d: f"{d['DW_H']}x{d['DW_W']}s{d['DW_S']}")
def test_depthwise_compiles_with_nvrtc_at_its_edges(defines):
    head = "".join(f"#define {k} {v}\n" for k, v in defines.items())
    code = head + (ROOT / "labkit/kernels/depthwise.cu").read_text()
    ok, log = nvrtc_check.compile_source(code, "depthwise.cu")
    assert ok, f"NVRTC refused depthwise.cu with {defines}:\n{log}"


# depthwise_any.cu as labkit.ops.depthwise_any specialises it: float4, float2 and scalar segment reads
# and stores, weights in registers and in shared memory, several planes a block, skewed layouts, a
# 1x1 plane.
def depthwise_any_defines():
    from labkit.ops.depthwise_any import Tiling, default_tiling, depthwise_any_layer, module_defines
    layers_and_tiles = [
        (depthwise_any_layer(64, 1024, 1024, 3, 1, 1), None),
        (depthwise_any_layer(64, 1024, 1024, 3, 2, 1), None),
        (depthwise_any_layer(32, 56, 56, 11, 1, 5), None),
        (depthwise_any_layer(32, 128, 130, (5, 3), (2, 1), (2, 1), 2), Tiling(rx=2, ry=4, tx=16, ty=8)),
        (depthwise_any_layer(8, 64, 64, 7, 1, 3), Tiling(rx=1, ry=8, tx=32, ty=4, wshared=True)),
        (depthwise_any_layer(8, 33, 31, (1, 4), (3, 1), (0, 4), (1, 3)), Tiling(rx=3, ry=2, tx=5, ty=3, planes=3)),
        (depthwise_any_layer(96, 1, 1, 1), None),
    ]
    return [module_defines(L, t or default_tiling(L)) for L, t in layers_and_tiles]


@pytest.mark.skipif(nvrtc_check.library() is None, reason="NVRTC is not installed (pip install nvidia-cuda-nvrtc)")
@pytest.mark.parametrize("defines", depthwise_any_defines(),
                         ids=lambda d: f"{d['DWA_H']}x{d['DWA_W']}k{d['DWA_KH']}x{d['DWA_KW']}s{d['DWA_SH']}x{d['DWA_SW']}"
                                       f"r{d['DWA_RX']}{'ws' if d['DWA_WSHARED'] else ''}")
def test_depthwise_any_compiles_with_nvrtc_as_specialised(defines):
    head = "".join(f"#define {k} {v}\n" for k, v in defines.items())
    code = head + (ROOT / "labkit/kernels/depthwise_any.cu").read_text()
    ok, log = nvrtc_check.compile_source(code, "depthwise_any.cu")
    assert ok, f"NVRTC refused depthwise_any.cu with {defines}:\n{log}"
