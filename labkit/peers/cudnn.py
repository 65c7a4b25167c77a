"""cuDNN's own algorithm table for a convolution: every algorithm of the forward, backward-data and
backward-filter passes, timed by cuDNN's find API (``cudnnFind*AlgorithmEx``), with its workspace,
in FP32 (FMA math) and TF32 (tensor-op math).  CuPy has no cuDNN bindings any more; this calls
libcudnn's legacy convolution API through ctypes.

    table = find_algorithms(ConvLayer(16, 28, 28, 16, 3, 1, 1), 256)    # {"fp32": {"fwd": [...], ...}, ...}
    stored = stored_table()        # the H100's, from benchmarks/results/cudnn_find_h100.json

On a machine without cuDNN (the CPU executor) ``find_algorithms`` raises RuntimeError and a notebook
shows the stored table, saying so.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import json
import time
from pathlib import Path

from .. import backends
from ..measure.sweep import progress_bar
from ..results import SHIPPED_DIR
from ..shapes import ConvLayer

__all__ = ["find_algorithms", "handle_create_ms", "stored_table", "STORED", "PASS_NAMES", "ALGOS", "load_cudnn"]

STORED = SHIPPED_DIR / "cudnn_find_h100.json"
PASS_NAMES = ("fwd", "bwd_data", "bwd_filter")
ALGOS = {
    "fwd": ("IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING", "WINOGRAD",
            "WINOGRAD_NONFUSED"),
    "bwd_data": ("ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"),
    "bwd_filter": ("ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"),
}
MATH = {"fp32": 3, "tf32": 1}          # CUDNN_FMA_MATH; CUDNN_TENSOR_OP_MATH (TF32 for float data)
WORKSPACE = 512 << 20                  # bytes offered to the algorithms that want some


class _Perf(ctypes.Structure):
    # cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t: the three have this one layout.
    _fields_ = [("algo", ctypes.c_int), ("status", ctypes.c_int), ("time", ctypes.c_float),
                ("memory", ctypes.c_size_t), ("determinism", ctypes.c_int), ("mathType", ctypes.c_int),
                ("reserved", ctypes.c_int * 3)]


def load_cudnn():
    """libcudnn through ctypes, or None where there is none."""
    for name in ("libcudnn.so.9", "libcudnn.so.8", ctypes.util.find_library("cudnn")):
        if name:
            try:
                return ctypes.CDLL(name)
            except OSError:
                continue
    return None


def _ok(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what} returned cuDNN status {status}")


def handle_create_ms(lib) -> dict:
    """ms of cudnnCreate: the first in this process (it loads cuDNN's kernels), then a second."""
    out = {}
    for label in ("first", "second"):
        h = ctypes.c_void_p()
        t0 = time.perf_counter()
        _ok(lib.cudnnCreate(ctypes.byref(h)), "cudnnCreate")
        out[f"cudnnCreate {label} ms"] = (time.perf_counter() - t0) * 1e3
        lib.cudnnDestroy(h)
    return out


def _descriptors(lib, layer: ConvLayer, N: int, math: int):
    ho, wo = layer.out_hw
    x, y, w, conv = (ctypes.c_void_p() for _ in range(4))
    _ok(lib.cudnnCreateTensorDescriptor(ctypes.byref(x)), "cudnnCreateTensorDescriptor")
    _ok(lib.cudnnCreateTensorDescriptor(ctypes.byref(y)), "cudnnCreateTensorDescriptor")
    _ok(lib.cudnnCreateFilterDescriptor(ctypes.byref(w)), "cudnnCreateFilterDescriptor")
    _ok(lib.cudnnCreateConvolutionDescriptor(ctypes.byref(conv)), "cudnnCreateConvolutionDescriptor")
    NCHW, FLOAT, CROSS_CORRELATION = 0, 0, 1
    _ok(lib.cudnnSetTensor4dDescriptor(x, NCHW, FLOAT, N, layer.C, layer.H, layer.W), "set x")
    _ok(lib.cudnnSetTensor4dDescriptor(y, NCHW, FLOAT, N, layer.M, ho, wo), "set y")
    _ok(lib.cudnnSetFilter4dDescriptor(w, FLOAT, NCHW, layer.M, layer.C // layer.groups, layer.K, layer.K), "set w")
    _ok(lib.cudnnSetConvolution2dDescriptor(conv, layer.pad, layer.pad, layer.stride, layer.stride, 1, 1,
                                            CROSS_CORRELATION, FLOAT), "set conv")
    _ok(lib.cudnnSetConvolutionGroupCount(conv, layer.groups), "set groups")
    _ok(lib.cudnnSetConvolutionMathType(conv, math), "set math")
    return x, y, w, conv


def find_algorithms(layer: ConvLayer, N: int, maths=("fp32", "tf32"), lib=None, progress: bool = True) -> dict:
    """Every algorithm cuDNN has for the three passes of ``layer`` at batch N, fastest first:
    {math: {pass: [{"algo", "ms", "workspace_MiB", "math"}]}}; algorithms that fail (or want more
    than WORKSPACE) are left out.  Needs a GPU with libcudnn.  A bar over each math's passes (cuDNN
    times every algorithm of a pass: about a second each) shows progress unless ``progress=False``."""
    lib = lib or load_cudnn()
    if lib is None or backends.current() != "cuda":
        raise RuntimeError("cuDNN's find API needs a GPU and libcudnn; stored_table() holds an H100's table")
    import cupy as cp
    layer = ConvLayer(*layer)
    layer.require_square("cuDNN's algorithm table")
    ho, wo = layer.out_hw
    x = cp.random.standard_normal((N, layer.C, layer.H, layer.W), dtype=cp.float32)
    w = cp.random.standard_normal((layer.M, layer.C // layer.groups, layer.K, layer.K), dtype=cp.float32)
    y = cp.empty((N, layer.M, ho, wo), dtype=cp.float32)
    dy = cp.random.standard_normal(y.shape, dtype=cp.float32)
    dx, dw = cp.empty_like(x), cp.empty_like(w)
    ws = cp.empty(WORKSPACE, dtype=cp.uint8)
    h = ctypes.c_void_p()
    _ok(lib.cudnnCreate(ctypes.byref(h)), "cudnnCreate")
    _ok(lib.cudnnSetStream(h, ctypes.c_void_p(cp.cuda.get_current_stream().ptr)), "cudnnSetStream")
    ptr = lambda a: ctypes.c_void_p(a.data.ptr)  # noqa: E731
    out = {}
    try:
        for math in maths:
            xd, yd, wd, conv = _descriptors(lib, layer, N, MATH[math])
            rows = {}
            for name in progress_bar(PASS_NAMES, desc=f"cuDNN's algorithms, {math}, batch {N}", show=progress):
                perf = (_Perf * 16)()
                count = ctypes.c_int()
                if name == "fwd":
                    args = (xd, ptr(x), wd, ptr(w), conv, yd, ptr(y))
                    fn = lib.cudnnFindConvolutionForwardAlgorithmEx
                elif name == "bwd_data":
                    args = (wd, ptr(w), yd, ptr(dy), conv, xd, ptr(dx))
                    fn = lib.cudnnFindConvolutionBackwardDataAlgorithmEx
                else:
                    args = (xd, ptr(x), yd, ptr(dy), conv, wd, ptr(dw))
                    fn = lib.cudnnFindConvolutionBackwardFilterAlgorithmEx
                _ok(fn(h, *args, 16, ctypes.byref(count), perf, ptr(ws), ctypes.c_size_t(WORKSPACE)), name)
                rows[name] = sorted(({"algo": ALGOS[name][p.algo] if p.algo < len(ALGOS[name]) else str(p.algo),
                                      "ms": round(float(p.time), 4), "workspace_MiB": round(p.memory / 2**20, 2),
                                      "math": int(p.mathType)}
                                     for p in perf[:count.value] if p.status == 0 and p.time >= 0),
                                    key=lambda r: r["ms"])
            for d in (xd, yd):
                lib.cudnnDestroyTensorDescriptor(d)
            lib.cudnnDestroyFilterDescriptor(wd)
            lib.cudnnDestroyConvolutionDescriptor(conv)
            out[math] = rows
    finally:
        lib.cudnnDestroy(h)
    return out


def stored_table(path: Path = STORED) -> dict:
    """The table measured on an H100 by benchmarks/cudnn_find.py: save_rows' document, a row per layer
    ({"layer", "batch", "fp32": {pass: rows}, "tf32": ..., "labkit_ms": {pass: ms}})."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise ValueError(f"{path} is not a cuDNN algorithm table (no 'rows')")
    return data
