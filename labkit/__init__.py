"""labkit: CUDA C kernels for CNN inference, and the tools to check and measure them.

    import labkit
    dev = labkit.device()                 # the GPU, or the CPU executor; its ceilings
    mod = labkit.load("conv_naive")       # labkit/kernels/conv_naive.cu for this backend
    xp = labkit.xp                        # cupy on a GPU, numpy on the CPU executor

The backend is the GPU when CuPy sees one, the CPU executor otherwise;
LABKIT_BACKEND=cuda or LABKIT_BACKEND=cpu forces either.
"""
from __future__ import annotations

from . import backends
from .device_query import device, sizes
from .loader import load, load_source, set_constant

__version__ = "0.1.0"


def backend() -> str:
    """'cuda' or 'cpu': which backend runs kernels now."""
    return backends.current()


def __getattr__(name: str):
    # `labkit.xp` follows the backend (an environment variable may change it between calls).
    if name == "xp":
        return backends.xp()
    if name == "conv2d":
        from .conv import conv2d
        return conv2d
    if name in ("reference", "data", "measure", "plots", "kernels", "results", "occupancy", "conv",
                "ladder", "tuning", "peers", "gemm", "layers", "models", "unroll", "implicit"):
        import importlib
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'labkit' has no attribute {name!r}")


__all__ = ["backend", "device", "sizes", "load", "load_source", "set_constant", "xp",
           "reference", "data", "measure", "plots", "kernels", "results", "ladder", "tuning", "peers"]
