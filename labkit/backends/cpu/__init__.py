"""The CPU executor: labkit's CUDA C kernels, unchanged, on a machine without a GPU.

The threads of a block run as fibers that switch at barriers, blocks are spread
over the cores, ``__shared__`` memory exists once per running block and
``__constant__`` memory is written from Python as on a GPU.  It is slow but
exact, and it can check what a GPU cannot check cheaply: out-of-bounds memory
accesses (``check="memory"``), barriers that only part of a block reaches
(``check="barrier"``), and missing barriers, by running the threads of a block in
a random order (``check="shuffle"``).
"""
from ...errors import (BarrierError, ConstantMemoryError, KernelCompileError, KernelMemoryError, LaunchError,
                      UnsupportedOnCPU)
from .module import CPUFunction, CPUModule, Symbol, parse_checks

__all__ = ["CPUModule", "CPUFunction", "Symbol", "KernelCompileError", "KernelMemoryError",
           "BarrierError", "ConstantMemoryError", "LaunchError", "UnsupportedOnCPU", "parse_checks"]
