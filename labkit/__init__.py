"""labkit: CUDA C kernels for CNN inference, and the tools to check and measure them.

    import labkit
    dev = labkit.device()                 # the GPU, or the CPU executor; its ceilings
    mod = labkit.load("conv_naive")       # labkit/kernels/conv_naive.cu for this backend
    xp = labkit.xp                        # cupy on a GPU, numpy on the CPU executor
    y = labkit.conv2d(x, w, b, stride=2, pad=(1, 2), dilation=1, groups=1)   # the fastest kernel for the shape
    y = labkit.conv2d(x, w, b, variant="tiled")   # any rung of the ladder
    y = labkit.conv_transpose2d(x, w, b, stride=2, pad=1, output_padding=1)   # PyTorch's, on the implicit GEMM
    labkit.counters(fn, *args)            # Nsight Compute's counters of each launch fn makes (CPU executor)
    labkit.RUNGS                          # the rungs in order: name, kernel, idea, notebook
    model = labkit.import_onnx("resnet18.onnx")   # any CNN of the supported ops; model(x), plan(N), describe()

What is where, lowest first (each imports only from those above it):

    errors, results, verdict   exceptions; where things are (the repository, data/, results/); a
                          check's verdict in words
    backends              the GPU (CuPy) and the CPU executor; limits, clock, CUDA graphs
    kernels               the CUDA C sources, one family per file
    shapes, reference, data
    loader, device_query, checks, tuned
    measure, plots        timers, sweeps, breakdowns, roofline floors, curves (generic)
    autotune              autotuning on first use: search, check, time, a disk cache per GPU
    ops                   one module per kernel family: plans made once per shape, then launches
    layers, models        every layer object; the networks, eager or as one CUDA graph; training
    pipeline              pinned host memory; sub-batches on streams and GPUs; timelines (any model)
    peers                 PyTorch's twins (cuDNN / cuBLAS) and cuDNN's algorithm table, same run
    ladder                the studies: check, then time, compare, sweep, tune
    course                the kernel checks, student copies, the grader, the series runner

The backend is the GPU when CuPy sees one, the CPU executor otherwise;
LABKIT_BACKEND=cuda or LABKIT_BACKEND=cpu forces either.
"""
from __future__ import annotations

import importlib

from . import backends, errors
from .device_query import device, sizes
from .loader import load, load_source, reload, set_constant
from .measure.counters import counters
from .ops.conv_transpose import conv_transpose2d
from .ops.rungs import RUNG_NAMES, RUNGS, conv2d

__version__ = "0.1.0"

# Submodules imported when first used (matplotlib, the studies and the models take a moment to
# import), but listed by dir() and tab completion like the rest.
SUBMODULES = ("backends", "errors", "verdict", "kernels", "shapes", "reference", "data", "results", "checks", "tuned",
              "measure", "autotune", "plots", "ops", "layers", "models", "pipeline", "peers", "ladder", "course")


def tune(model, batch_sizes, *, progress: bool = True):
    """Autotune ``model`` (FashionNet, AlexNet, MobileNetV2: a network with plan(N)) for these batch
    sizes on this GPU, ahead of time: labkit.models.autotuning.tune."""
    from .models.autotuning import tune as tune_model
    return tune_model(model, batch_sizes, progress=progress)


def import_onnx(path, *, input_shape=None, **options):
    """A network from an ONNX file on labkit's kernels, with the built-in models' interface:
    labkit.models.onnx_import.import_onnx (read safely; an op or attribute labkit cannot run is
    refused, naming the node, before any launch)."""
    from .models.onnx_import import import_onnx as read
    return read(path, input_shape=input_shape, **options)


def backend() -> str:
    """'cuda' or 'cpu': which backend runs kernels now."""
    return backends.current()


def __getattr__(name: str):
    # `labkit.xp` follows the backend (an environment variable may change it between calls).
    if name == "xp":
        return backends.xp()
    if name in SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'labkit' has no attribute {name!r}")


__all__ = ["backend", "tune", "import_onnx", "device", "sizes", "load", "load_source", "reload", "set_constant", "xp",
           "conv2d", "counters",
           "conv_transpose2d",
           "RUNGS", "RUNG_NAMES", *SUBMODULES]


def __dir__() -> list[str]:
    return sorted(set(__all__) | set(SUBMODULES) | {"__version__"})
