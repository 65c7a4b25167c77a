"""The GPU backend: kernel sources compiled by CuPy (RawModule, NVRTC).

``CUDAModule`` has the same small interface as the CPU executor's module:
``get_function(name)`` returns a callable ``fn(grid, block, args, shared_mem=0)``
and ``get_global(name)`` a device pointer to a ``__constant__`` or ``__device__``
variable.  It adds what only a GPU can tell: each kernel's registers, static
shared memory and local memory, and its theoretical occupancy.
"""
from __future__ import annotations

import ctypes
import functools
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


def current_device_id() -> int:
    """The CUDA device current in this thread (a module is loaded into one device's context)."""
    return int(_cupy().cuda.runtime.getDevice())


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

    def launcher(self, grid, block, args, shared_mem: int = 0):
        """``launch(*arrays)``: this kernel with its launch configuration and every argument that
        never changes fixed now; ``args`` holds them, and None for each array given per call (in
        order).  What ``__call__`` checks on every call (count, types) is checked here, once; the
        caller checks its per-call arrays itself (an op does, with labkit.checks).

        Where CuPy exposes the driver's launch (cuLaunchKernel), the parameters live in a block made
        once, and a call writes the per-call pointers into it and launches: less host time than a
        RawKernel call, which converts every argument each time.  Else each call merges the arrays
        into the arguments and calls the RawKernel.  ``launch.path`` says which.
        """
        cp = _cupy()
        grid, block, shared = _dim3(grid), _dim3(block), int(shared_mem)
        args = tuple(args)
        if self.param_types and len(args) != len(self.param_types):
            raise LaunchError(f"kernel '{self.name}' takes {len(self.param_types)} arguments "
                              f"({', '.join(self.param_names)}), got {len(args)}")
        slots = [i for i, a in enumerate(args) if a is None]
        for i, a in enumerate(args):
            if a is not None:
                kernel_source.check_argument(self.name, i, self.param_names, self.param_types, a,
                                             array_type=cp.ndarray, where="GPU")
        block_launch = _parameter_block(self, grid, block, shared, args, slots)
        if block_launch is not None:
            return block_launch
        kernel, name = self.kernel, self.name

        def launch(*arrays) -> None:
            kernel(grid, block, kernel_source.fill_slots(name, args, slots, arrays), shared_mem=shared)
        launch.path = "CuPy RawKernel"
        return launch


def _dim3(v) -> tuple[int, int, int]:
    t = (int(v),) if isinstance(v, int) else tuple(int(x) for x in v)
    return t + (1,) * (3 - len(t))


# ctypes of the scalar parameters a parameter block can hold (kernel_source's type codes).
_SCALARS = {"f32": ctypes.c_float, "f64": ctypes.c_double, "i32": ctypes.c_int32, "u32": ctypes.c_uint32,
            "i64": ctypes.c_int64, "u64": ctypes.c_uint64, "i16": ctypes.c_int16, "u16": ctypes.c_uint16,
            "i8": ctypes.c_int8, "u8": ctypes.c_uint8, "bool": ctypes.c_bool}
_PROBE = r'''extern "C" __global__ void labkit_probe(int* out, const int* in, int add, float scale) {
  out[threadIdx.x] = in[threadIdx.x] + add + (int)scale;
}'''


@functools.lru_cache(maxsize=1)
def _driver():
    """(cuLaunchKernel, current-stream pointer) as CuPy exposes them, proven on a probe kernel; None
    where this CuPy does not expose them as expected (launches then go through RawKernel calls)."""
    try:
        cp = _cupy()
        from cupy.cuda import driver
        from cupy.cuda import stream as stream_module
        launch = driver.launchKernel
        stream_ptr = getattr(stream_module, "get_current_stream_ptr", None) or \
            (lambda: cp.cuda.get_current_stream().ptr)
        fn = cp.RawKernel(_PROBE, "labkit_probe")
        src = cp.arange(32, dtype=cp.int32)
        out = cp.zeros(32, dtype=cp.int32)
        vals = [ctypes.c_void_p(out.data.ptr), ctypes.c_void_p(src.data.ptr), ctypes.c_int32(5), ctypes.c_float(2.0)]
        params = (ctypes.c_void_p * 4)(*[ctypes.addressof(v) for v in vals])
        launch(fn.kernel.ptr, 1, 1, 1, 32, 1, 1, 0, stream_ptr(), ctypes.addressof(params), 0)
        if not bool((out == src + 7).all()):
            return None
        return launch, stream_ptr
    except Exception:
        return None


def _parameter_block(fn: "CUDAFunction", grid, block, shared: int, args: tuple, slots: list[int]):
    """The driver-launch closure of a launcher, or None where it cannot be made (then RawKernel calls)."""
    codes = fn.param_types
    drv = _driver()
    if drv is None or not codes or any(c is None for c in codes) or \
            any(not codes[i].startswith(("ptr:", "cptr:")) for i in slots):
        return None
    vals = []
    for code, a in zip(codes, args):
        if code.startswith(("ptr:", "cptr:")):
            vals.append(ctypes.c_void_p(None if a is None else a.data.ptr))
        elif code in _SCALARS:
            vals.append(_SCALARS[code](a.item() if hasattr(a, "item") else a))
        else:
            return None   # a struct passed by value (float4, ...): RawKernel knows how
    params = (ctypes.c_void_p * max(1, len(vals)))(*[ctypes.addressof(v) for v in vals])
    launch_kernel, stream_ptr = drv
    fptr, addr = fn.kernel.kernel.ptr, ctypes.addressof(params)
    (gx, gy, gz), (bx, by, bz) = grid, block
    slot_vals, n = [vals[i] for i in slots], len(slots)
    keep = (args, vals, params)   # the block and the fixed arrays live as long as the launch

    if n == 2:
        s0, s1 = slot_vals

        def launch(a, b) -> None:
            s0.value = a.data.ptr
            s1.value = b.data.ptr
            launch_kernel(fptr, gx, gy, gz, bx, by, bz, shared, stream_ptr(), addr, 0)
    else:
        def launch(*arrays) -> None:
            if len(arrays) != n:
                raise LaunchError(f"kernel '{fn.name}' takes {n} arrays per launch, got {len(arrays)}")
            for v, a in zip(slot_vals, arrays):
                v.value = a.data.ptr
            launch_kernel(fptr, gx, gy, gz, bx, by, bz, shared, stream_ptr(), addr, 0)
    launch.path = "cuLaunchKernel, parameter block"
    launch.keep = keep
    return launch
