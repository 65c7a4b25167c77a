"""CPUModule and CPUFunction: CuPy's RawModule call shape, run by the CPU executor.

    mod = CPUModule(code=source, path="labkit/kernels/x.cu", name_expressions=("k<16>",))
    fn = mod.get_function("k")
    fn((grid_x,), (block_x,), (x, y, np.int32(n)), shared_mem=0)
    mod.get_global("weights").copy_from_host(w)

Arguments are NumPy arrays (passed by address) and NumPy scalars (passed by
value).  Unlike CuPy, the executor knows each parameter's C type, so it refuses
arguments that would be misread ("n is int: pass numpy.int32(n)").
"""
from __future__ import annotations

import collections
import ctypes
import os
import random
import threading
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from ...errors import BarrierError, ConstantMemoryError, LaunchError
from .. import kernel_source as source
from ..limits import (CONSTANT_MEMORY, MAX_BLOCK, MAX_GRID, MAX_THREADS_PER_BLOCK,
                      SHARED_MEM_PER_BLOCK)
from . import compiler, counting, memcheck, racecheck, sanitized

# One launch at a time in this process; the workers of a launch use every core.
_LAUNCH_LOCK = threading.Lock()
# The modules whose workers keep their fiber stacks between launches, last launched at the end.
# Beyond KEEP_STACKS, the oldest gives its stacks back (labkit_release): a test run that loads
# hundreds of modules would otherwise exhaust the process's memory mappings (vm.max_map_count).
_HOLDING: "collections.OrderedDict[int, ctypes.CDLL]" = collections.OrderedDict()
KEEP_STACKS = 8


def _held(lib: ctypes.CDLL) -> None:
    """Mark ``lib`` as last launched; release the stacks of the oldest beyond KEEP_STACKS (under _LAUNCH_LOCK)."""
    _HOLDING[id(lib)] = lib
    _HOLDING.move_to_end(id(lib))
    while len(_HOLDING) > KEEP_STACKS:
        _, old = _HOLDING.popitem(last=False)
        old.labkit_release()

CHECKS = ("memory", "barrier", "shuffle", "race")
CHECK_ENV = "LABKIT_CHECK"
TIMEOUT_ENV = "LABKIT_CPU_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 300.0     # generous: the slowest launch of the series takes seconds here


class _LaunchConfig(ctypes.Structure):
    # Keep in step with labkit::LaunchConfig in include/labkit_cpu.h.
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("shared_mem", ctypes.c_ulonglong), ("flags", ctypes.c_uint),
                ("workers", ctypes.c_uint), ("seed", ctypes.c_ulonglong),
                ("stack_bytes", ctypes.c_ulonglong), ("timeout_ms", ctypes.c_ulonglong)]


def parse_checks(check: str | Iterable[str] | None) -> frozenset[str]:
    """Checking modes from an argument, or else from $LABKIT_CHECK ('memory,barrier,shuffle' or 'all')."""
    if check is None:
        check = os.environ.get(CHECK_ENV, "")
    if isinstance(check, str):
        check = [c.strip() for c in check.replace("+", ",").split(",") if c.strip()]
    out = set()
    for c in check:
        c = c.lower()
        if c == "all":
            out.update(CHECKS)
        elif c in ("", "none", "off"):
            continue
        elif c in CHECKS:
            out.add(c)
        else:
            raise ValueError(f"unknown check {c!r}: use any of {', '.join(CHECKS)}, or 'all'")
    return frozenset(out)


def env_number(name: str, default, *, low, high, kind=int, what: str = ""):
    """A number setting from the environment (``default`` when unset or empty), or a LaunchError that
    names the variable and what it accepts (``what``; by default "an integer from low to high")."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        v = kind(raw)
    except ValueError:
        v = None
    if v is None or not low <= v <= high:
        raise LaunchError(f"{name}={raw!r}: must be {what or f'an integer from {low} to {high}'} "
                          f"(unset it for {default:g})")
    return v


def stack_budget() -> int:
    """Bytes the fiber stacks of one launch may occupy: half the machine's memory.  Stacks are mapped
    lazily, but a kernel with large local arrays touches every page of every thread's stack."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError):
        return 4 << 30


def workers_for(stack_bytes: int, nthreads: int, requested: int, kernel: str) -> int:
    """The worker threads a launch may use (0: one per core) so that their stacks, one per thread of
    a block each, fit in ``stack_budget()``; an error where even one block's stacks do not fit."""
    per_worker = stack_bytes * nthreads
    fits = stack_budget() // per_worker
    if fits < 1:
        raise LaunchError(
            f"kernel '{kernel}': {nthreads} threads x {stack_bytes // 1024} KiB of stack each (its local "
            f"arrays) need {per_worker / 2**30:.1f} GiB, more than half this machine's memory; keep "
            "large arrays in global or shared memory, or launch fewer threads per block")
    cores = requested or os.cpu_count() or 1
    return requested if cores <= fits else int(fits)


def timeout_s() -> float:
    """The watchdog's limit for one launch, in seconds: $LABKIT_CPU_TIMEOUT_S (0: none), default 300."""
    return env_number(TIMEOUT_ENV, DEFAULT_TIMEOUT_S, low=0, high=7 * 24 * 3600, kind=float,
                      what="a number of seconds from 0 (no limit) to a week")


def _dim3(v, what: str) -> tuple[int, int, int]:
    if isinstance(v, (int, np.integer)):
        v = (int(v),)
    try:
        t = tuple(int(x) for x in v)
    except TypeError:
        raise LaunchError(f"{what} must be an int or a tuple of 1 to 3 ints, got {v!r}") from None
    if not 1 <= len(t) <= 3 or any(x < 1 for x in t):
        raise LaunchError(f"{what} must be 1 to 3 positive ints, got {v!r}")
    return t + (1,) * (3 - len(t))


@dataclass
class Symbol:
    """A __constant__ or __device__ variable: its host address and size.

    ``copy_from_host`` and ``copy_to_host`` take a NumPy array (or an address
    and a byte count, as CuPy's MemoryPointer methods do).
    """
    name: str
    ptr: int
    nbytes: int
    constant: bool

    def _check_fit(self, nbytes: int) -> None:
        if nbytes > self.nbytes:
            kind = "__constant__" if self.constant else "__device__"
            raise ConstantMemoryError(
                f"{nbytes} bytes do not fit {kind} symbol '{self.name}' ({self.nbytes} bytes): "
                "make the array in the kernel source larger, or pass less data")

    def copy_from_host(self, src, nbytes: int | None = None) -> None:
        if isinstance(src, np.ndarray):
            src = np.ascontiguousarray(src)
            nbytes = src.nbytes if nbytes is None else nbytes
            self._check_fit(nbytes)
            ctypes.memmove(self.ptr, src.ctypes.data, nbytes)
        else:
            if nbytes is None:
                raise TypeError("copy_from_host(address, nbytes): give the byte count")
            self._check_fit(nbytes)
            ctypes.memmove(self.ptr, int(src), nbytes)

    def copy_to_host(self, dst, nbytes: int | None = None) -> None:
        if isinstance(dst, np.ndarray):
            if not dst.flags.c_contiguous:
                raise ValueError("copy_to_host needs a C-contiguous array")
            nbytes = dst.nbytes if nbytes is None else nbytes
            self._check_fit(nbytes)
            ctypes.memmove(dst.ctypes.data, self.ptr, nbytes)
        else:
            if nbytes is None:
                raise TypeError("copy_to_host(address, nbytes): give the byte count")
            self._check_fit(nbytes)
            ctypes.memmove(int(dst), self.ptr, nbytes)

    def view(self, dtype=np.float32) -> np.ndarray:
        """The symbol's memory as a NumPy array (no copy)."""
        n = self.nbytes // np.dtype(dtype).itemsize
        buf = (ctypes.c_char * self.nbytes).from_address(self.ptr)
        return np.frombuffer(buf, dtype=dtype, count=n)


class CPUModule:
    """A kernel source compiled for the CPU executor (CuPy RawModule's interface)."""

    backend = "cpu"

    def __init__(self, code: str, *, path: str = "<string>", name_expressions: Sequence[str] = (),
                 options: Sequence[str] = (), check: str | Iterable[str] | None = None):
        source.check_supported(code, path)
        self.code = code
        self.path = path
        self.checks = parse_checks(check)
        self.info = source.scan(code)
        entries, self._names = compiler.entry_points(self.info, tuple(name_expressions))
        self._tu = compiler.translation_unit(source.rewrite(code), path, entries)
        self._options = tuple(options)
        so = compiler.build(self._tu, path)
        self._lib = compiler.load_private(so, rebuild=lambda: compiler.build(self._tu, path, fresh=True))
        self.stack_need = compiler.stack_need(so)   # bytes of stack the kernels' frames need
        self._lib.labkit_error.restype = ctypes.c_char_p
        self._lib.labkit_switches.restype = ctypes.c_ulonglong
        self.symbols: dict[str, Symbol] = {}
        sym_names = self.info.constants + self.info.globals
        for i, name in enumerate(sym_names):
            addr_fn = getattr(self._lib, f"labkit_sym_{i}")
            addr_fn.restype = ctypes.c_void_p
            size_fn = getattr(self._lib, f"labkit_symsize_{i}")
            size_fn.restype = ctypes.c_ulonglong
            self.symbols[name] = Symbol(name, addr_fn(), int(size_fn()),
                                         constant=name in self.info.constants)
        total = sum(s.nbytes for s in self.symbols.values() if s.constant)
        if total > CONSTANT_MEMORY:
            raise ConstantMemoryError(
                f"{path} declares {total} bytes of __constant__ memory; a GPU has 64 KiB "
                f"({CONSTANT_MEMORY} bytes). Keep only small, broadcast-read data (weights "
                "of a small layer, biases) in constant memory and the rest in global memory.")
        self._functions: dict[str, CPUFunction] = {}
        self._sanitized: dict[str, tuple] = {}
        self._counting: tuple | None = None

    @property
    def kernel_names(self) -> list[str]:
        return list(self._names)

    def get_function(self, name: str) -> "CPUFunction":
        if name not in self._functions:
            if name not in self._names:
                known = ", ".join(self._names) or "none"
                raise LaunchError(
                    f"{self.path} has no kernel {name!r} (known: {known}). Kernels must be "
                    'declared extern "C" __global__, or templates named in name_expressions.')
            self._functions[name] = CPUFunction(self, name, self._names.index(name))
        return self._functions[name]

    def get_global(self, name: str) -> Symbol:
        try:
            return self.symbols[name]
        except KeyError:
            known = ", ".join(self.symbols) or "none"
            raise LaunchError(f"{self.path} has no __constant__ or __device__ variable {name!r} "
                              f"(known: {known})") from None

    def sanitized_build(self, sanitizer: str):
        """The build under a sanitizer ('address': memory check, 'thread': race check) and the runner
        that runs it, made on first use of the check."""
        if sanitizer not in self._sanitized:
            self._sanitized[sanitizer] = (compiler.build(self._tu, self.path, sanitizer=sanitizer),
                                          compiler.build_runner(sanitizer))
        return self._sanitized[sanitizer]

    def counting_build(self) -> tuple[str, ctypes.CDLL]:
        """The counting build (labkit.counters; counting.py) and its library, loaded on first use:
        a copy of its own, with its own __constant__ and __device__ variables."""
        if self._counting is None:
            tu = counting.unrolled_as_nvcc(self._tu)
            so = compiler.build(tu, self.path, sanitizer="count")
            # Loaded without the block hooks that count nothing, or whose blocks' runs an access
            # hook's calls count (counting.lean_build); the disassembly that says what each block
            # counts is the build's own.
            lean = counting.lean_build(str(so))
            lib = compiler.load_private(lean or so,
                                        rebuild=lambda: compiler.build(tu, self.path, sanitizer="count", fresh=True))
            self._counting = (str(so), lib)
        return self._counting


class CPUFunction:
    """One kernel of a CPUModule; call it as CuPy's RawKernel: fn(grid, block, args, shared_mem=0)."""

    def __init__(self, module: CPUModule, name: str, index: int):
        self.module = module
        self.name = name
        self.index = index
        lib = module._lib
        sig = getattr(lib, f"labkit_sig_{index}")
        sig.restype = ctypes.c_char_p
        text = sig().decode()
        self.param_types: list[str] = text.split(",") if text else []
        names = module.info.params.get(name, [])
        # Types come from the compiler (exact); names from the declaration, where it could be read.
        self.param_names = names if len(names) == len(self.param_types) else \
            [f"arg{i}" for i in range(len(self.param_types))]
        self._launch = getattr(lib, f"labkit_launch_{index}")
        self._launch.argtypes = [ctypes.POINTER(_LaunchConfig), ctypes.POINTER(ctypes.c_void_p)]
        self._launch.restype = ctypes.c_int
        self.max_dynamic_shared_size_bytes = SHARED_MEM_PER_BLOCK
        self.last_switches = 0

    @property
    def attributes(self) -> dict:
        """What the executor can say about the kernel (registers and occupancy are GPU notions)."""
        return {"backend": "cpu", "params": list(zip(self.param_names, self.param_types)),
                "max_dynamic_shared_size_bytes": self.max_dynamic_shared_size_bytes}

    # --- arguments -------------------------------------------------------------------------
    def _pack(self, i: int, value):
        """(ctypes object holding argument i's bytes, the array it points to or None)."""
        source.check_argument(self.name, i, self.param_names, self.param_types, value,
                              array_type=np.ndarray, where="CPU executor")
        code = self.param_types[i]
        if code.startswith(("ptr:", "cptr:")):
            if value is None:
                return ctypes.c_void_p(None), None      # NULL
            return ctypes.c_void_p(value.ctypes.data), value
        if code.startswith("bytes"):
            n = int(code[5:])
            raw = value.tobytes() if isinstance(value, (np.ndarray, np.generic)) else bytes(value)
            if len(raw) != n:
                raise TypeError(f"{source.describe_param(self.name, i, self.param_names, self.param_types)}"
                                f" ({n} bytes); got {len(raw)} bytes")
            return ctypes.create_string_buffer(raw, n), None
        raw = np.asarray(value, dtype=source.NP_DTYPES[code]).tobytes()
        return ctypes.create_string_buffer(raw, len(raw)), None

    # --- launching -------------------------------------------------------------------------
    def launcher(self, grid, block, args, shared_mem: int = 0):
        """``launch(*arrays)``: this kernel with its launch configuration and the arguments that never
        change fixed (``args``, None for each array given per call), as on the GPU backend.  The
        executor keeps every check on each launch: launches are slow here anyway, and the checks
        catch an op that prepared a wrong argument before it reaches a GPU."""
        grid, block, shared, args = tuple(grid), tuple(block), int(shared_mem), tuple(args)
        slots = [i for i, a in enumerate(args) if a is None]

        def launch(*arrays) -> None:
            self(grid, block, source.fill_slots(self.name, args, slots, arrays), shared_mem=shared)
        launch.path = "CPU executor"
        return launch

    def __call__(self, grid, block, args, *, shared_mem: int = 0, stream=None, check=None) -> None:
        grid3 = _dim3(grid, "grid")
        block3 = _dim3(block, "block")
        nthreads = block3[0] * block3[1] * block3[2]
        if nthreads > MAX_THREADS_PER_BLOCK or any(b > m for b, m in zip(block3, MAX_BLOCK)):
            raise LaunchError(f"block {block3} has {nthreads} threads: a block holds at most 1024 "
                              "(x, y <= 1024, z <= 64)")
        if any(g > m for g, m in zip(grid3, MAX_GRID)):
            raise LaunchError(f"grid {grid3} is too large (x < 2**31, y and z <= 65535)")
        shared_mem = int(shared_mem)
        if shared_mem < 0 or shared_mem > self.max_dynamic_shared_size_bytes:
            raise LaunchError(
                f"shared_mem={shared_mem} bytes: a block may ask for at most "
                f"{self.max_dynamic_shared_size_bytes} bytes of dynamic shared memory (48 KiB unless "
                "the kernel's max_dynamic_shared_size_bytes is raised, as on a GPU)")
        args = tuple(args)
        if len(args) != len(self.param_types):
            raise LaunchError(f"kernel '{self.name}' takes {len(self.param_types)} arguments "
                              f"({', '.join(self.param_names)}), got {len(args)}")
        packed = [self._pack(i, a) for i, a in enumerate(args)]
        checks = parse_checks(check) if check is not None else self.module.checks
        cfg = _LaunchConfig()
        cfg.grid[:] = grid3
        cfg.block[:] = block3
        cfg.shared_mem = shared_mem
        cfg.flags = (1 if "barrier" in checks else 0) | (2 if "shuffle" in checks else 0)
        cfg.seed = random.getrandbits(63)
        # Each thread's stack: the setting, or more where the compiler says the kernel's frames need it
        # (a 160 KB local array is legal on a GPU, whose threads have far more local memory).
        cfg.stack_bytes = max(env_number("LABKIT_CPU_STACK_KIB", 128, low=16, high=1 << 20) * 1024,
                              self.module.stack_need)
        cfg.workers = workers_for(cfg.stack_bytes, nthreads, env_number("LABKIT_CPU_WORKERS", 0, low=0, high=4096),
                                  self.name)
        cfg.timeout_ms = int(timeout_s() * 1000)
        if counting.active():     # labkit.counters: counted instead of checked
            so, lib = self.module.counting_build()
            with _LAUNCH_LOCK:
                counting.run(self, cfg, packed, so, lib)
                _held(lib)
            return
        # Checks that run in a process of their own: the race check, the shuffled schedule (with its
        # switch points at memory accesses), the memory check.  The last to run gives the results;
        # the others only look (each runs on copies of the arrays).
        runs = [c for c in ("race", "shuffle", "memory") if c in checks]
        if runs:
            with _LAUNCH_LOCK:
                for c in runs:
                    keep = c == runs[-1]
                    if c == "race":
                        # Two workers: races between blocks show where blocks run side by side (and
                        # between the blocks one worker runs in turn: labkit_cpu.h, RACE_SETS), and
                        # each thread of a running block costs the checker about 1 MB.
                        race_cfg = _LaunchConfig.from_buffer_copy(cfg)
                        race_cfg.workers = 2
                        racecheck.run(self, race_cfg, packed, keep_results=keep)
                    elif c == "shuffle":
                        sanitized.run(self, cfg, packed, sanitizer="interleave", check="shuffled schedule",
                                      keep_results=keep)
                    else:
                        memcheck.run(self, cfg, packed, keep_results=keep)
            return
        ptrs = (ctypes.c_void_p * max(1, len(packed)))(
            *[ctypes.addressof(obj) for obj, _ in packed])
        with _LAUNCH_LOCK:
            rc = self._launch(ctypes.byref(cfg), ptrs)
            err = self.module._lib.labkit_error().decode()
            self.last_switches = int(self.module._lib.labkit_switches())
            _held(self.module._lib)
        if rc == 2:
            raise KeyboardInterrupt(err)
        if rc != 0:
            cls = BarrierError if ("barrier" in err or "deadlock" in err) else LaunchError
            raise cls(err)
