"""The GPU backend: kernel sources compiled by CuPy (RawModule, NVRTC).

``CUDAModule`` has the same small interface as the CPU executor's module:
``get_function(name)`` returns a callable ``fn(grid, block, args, shared_mem=0)``
and ``get_global(name)`` a device pointer to a ``__constant__`` or ``__device__``
variable.  It adds what only a GPU can tell: each kernel's registers, static
shared memory and local memory, and its theoretical occupancy.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from ..errors import ConstantMemoryError, KernelCompileError, LaunchError
from . import kernel_source
from .limits import CONSTANT_MEMORY
from .occupancy import theoretical_occupancy

DEFAULT_OPTIONS = ("-std=c++17",)
CUDALaunchError = LaunchError   # its name before the exceptions had one home (labkit.errors)


def _cupy():
    import cupy
    return cupy


class CUDAModule:
    """A kernel source compiled for the GPU by CuPy."""

    backend = "cuda"

    def __init__(self, code: str, *, path: str = "<string>", name_expressions: Sequence[str] = (),
                 options: Sequence[str] = (), check: str | Iterable[str] | None = None):
        cp = _cupy()
        self.code = code
        self.path = path
        self.info = kernel_source.scan(code)
        # Checking modes are the CPU executor's; on a GPU, compute-sanitizer does that work.
        self.checks = frozenset()
        self._names = list(self.info.kernels) + [e for e in name_expressions
                                                 if e not in self.info.kernels]
        # CuPy's get_global does not report a symbol's size: a small kernel, appended after
        # the file's own text (so its line numbers stay), writes every sizeof() once.
        symbols = self.info.constants + self.info.globals
        probe = ""
        if symbols:
            body = " ".join(f"out[{i}] = sizeof({n});" for i, n in enumerate(symbols))
            probe = ('\nextern "C" __global__ void labkit_symbol_sizes(unsigned long long* out) '
                     f"{{ {body} }}\n")
        self._mod = cp.RawModule(code=code + probe, options=DEFAULT_OPTIONS + tuple(options),
                                 name_expressions=tuple(name_expressions) or None)
        try:
            self._mod.compile()
        except cp.cuda.compiler.CompileException as exc:
            text = str(exc)
            if "constant" in text.lower() and ("too much" in text or "exceed" in text):
                raise ConstantMemoryError(
                    f"{path} declares more __constant__ memory than the GPU's 64 KiB:\n{text}\n"
                    "Keep only small, broadcast-read data in constant memory.") from None
            raise KernelCompileError(f"NVRTC refused {path}:\n{text}") from None
        self.symbol_sizes: dict[str, int] = {}
        if symbols:
            out = cp.zeros(len(symbols), dtype=cp.uint64)
            self._mod.get_function("labkit_symbol_sizes")((1,), (1,), (out,))
            self.symbol_sizes = dict(zip(symbols, (int(v) for v in out.get())))
        total = sum(self.symbol_sizes[n] for n in self.info.constants)
        if total > CONSTANT_MEMORY:
            raise ConstantMemoryError(
                f"{path} declares {total} bytes of __constant__ memory; the GPU has 64 KiB "
                f"({CONSTANT_MEMORY} bytes). Keep only small, broadcast-read data in "
                "constant memory and the rest in global memory.")
        self._functions: dict[str, CUDAFunction] = {}

    @property
    def kernel_names(self) -> list[str]:
        return list(self._names)

    def get_function(self, name: str) -> "CUDAFunction":
        if name not in self._functions:
            if name not in self._names:
                known = ", ".join(self._names) or "none"
                raise LaunchError(
                    f"{self.path} has no kernel {name!r} (known: {known}). Kernels must be "
                    'declared extern "C" __global__, or templates named in name_expressions.')
            self._functions[name] = CUDAFunction(self, name, self._mod.get_function(name))
        return self._functions[name]

    def get_global(self, name: str):
        if name not in self.info.constants and name not in self.info.globals:
            known = ", ".join(self.info.constants + self.info.globals) or "none"
            raise LaunchError(f"{self.path} has no __constant__ or __device__ variable "
                                  f"{name!r} (known: {known})")
        return self._mod.get_global(name)


class CUDAFunction:
    """One kernel: checks its arguments, then launches it through CuPy."""

    def __init__(self, module: CUDAModule, name: str, kernel):
        self.module = module
        self.name = name
        self.kernel = kernel
        self.param_names = module.info.params.get(name, [])
        self.param_types = module.info.param_types.get(name, [])

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        return self.kernel.max_dynamic_shared_size_bytes

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, value: int) -> None:
        self.kernel.max_dynamic_shared_size_bytes = int(value)

    @property
    def attributes(self) -> dict:
        """Registers per thread, static shared and local memory, as the driver reports them."""
        a = dict(self.kernel.attributes)
        a["backend"] = "cuda"
        return a

    def occupancy(self, block_threads: int, shared_mem: int = 0) -> dict:
        """Theoretical occupancy: resident blocks per SM and warps per SM over the maximum."""
        a = self.kernel.attributes
        return theoretical_occupancy(block_threads=block_threads, regs_per_thread=a["num_regs"],
                                     shared_per_block=a["shared_size_bytes"] + shared_mem)

    def __call__(self, grid, block, args, *, shared_mem: int = 0, stream=None, check=None) -> None:
        cp = _cupy()
        args = tuple(args)
        if self.param_types and len(args) != len(self.param_types):
            raise LaunchError(f"kernel '{self.name}' takes {len(self.param_types)} arguments "
                                  f"({', '.join(self.param_names)}), got {len(args)}")
        for i, a in enumerate(args):
            kernel_source.check_argument(self.name, i, self.param_names, self.param_types, a,
                                         array_type=cp.ndarray, where="GPU")
        if stream is not None:
            with stream:
                self.kernel(grid, block, args, shared_mem=shared_mem)
        else:
            self.kernel(grid, block, args, shared_mem=shared_mem)

    def launcher(self, grid, block, shared_mem: int = 0):
        """``launch(args)``: this kernel with its launch configuration fixed, straight to CuPy.

        What ``__call__`` checks on every call (the argument count and each argument's type) is
        checked once, by whoever prepares the arguments: an op builds its scalars as NumPy int32
        once and checks its arrays itself.  A launch then costs what a CuPy RawKernel launch costs.
        """
        grid, block, shared = tuple(grid), tuple(block), int(shared_mem)
        kernel = self.kernel

        def launch(args) -> None:
            kernel(grid, block, args, shared_mem=shared)
        return launch
