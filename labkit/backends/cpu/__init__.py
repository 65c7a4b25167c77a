"""The CPU executor: labkit's CUDA C kernels, unchanged, on a machine without a GPU.

The threads of a block run as fibers that switch at barriers, blocks are spread
over the cores, ``__shared__`` memory exists once per running block and
``__constant__`` memory is written from Python as on a GPU.  It is slow but
exact, and it can check what a GPU cannot check cheaply: out-of-bounds memory
accesses, global and shared (``check="memory"``, AddressSanitizer), barriers that
only part of a block reaches (``check="barrier"``), data races between threads --
a ``y[0] += v`` from many threads, a missing ``__syncthreads()`` -- with both
threads and both lines (``check="race"``, ThreadSanitizer with one fiber per CUDA
thread), and a shuffled schedule that runs the threads of a block in a random
order and switches between them at memory accesses, as a GPU interleaves warps
(``check="shuffle"``).
"""
from ...errors import (BarrierError, ConstantMemoryError, KernelCompileError, KernelMemoryError, KernelRaceError,
                      LaunchError, UnsupportedOnCPU)
from .module import CPUFunction, CPUModule, Symbol, parse_checks

__all__ = ["CPUModule", "CPUFunction", "Symbol", "KernelCompileError", "KernelMemoryError", "KernelRaceError",
           "BarrierError", "ConstantMemoryError", "LaunchError", "UnsupportedOnCPU", "parse_checks"]
