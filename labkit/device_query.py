"""What the code runs on: a deviceQuery of the GPU (or the CPU executor) and its measured ceilings.

    dev = labkit.device()        # Device: backend, name, SMs, memory, shared memory, ...
    print(dev.summary())         # a deviceQuery-like table
    ceil = dev.ceilings()        # Ceilings: copy GB/s and FP32 TFLOP/s, measured once, cached
    batches = labkit.sizes(gpu=[100, 1000, 10000], cpu=[10, 100])

The ceilings are the denominators of every "percent of floor" in the series: a
device-to-device copy (bytes read + bytes written) and an FP32 GEMM.  They are
measured, not read off a data sheet, and cached per device name in
``$LABKIT_CACHE_DIR/ceilings.json`` (default ``~/.cache/labkit``).
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import sys

import warnings
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence, TypeVar

from . import backends
from .backends.clock import times_ms
from .backends.limits import CONSTANT_MEMORY, MAX_THREADS_PER_BLOCK, SHARED_MEM_PER_BLOCK, WARP_SIZE

CPU_LABEL = "CPU executor (not GPU timings)"
CACHE_ENV = "LABKIT_CACHE_DIR"
CEILINGS_FILE = "ceilings.json"

# CUDA runtime attribute numbers (cudaDeviceAttr), stable since CUDA 5; used where
# cudaDeviceProp lost a field (CUDA 13 removed clockRate and memoryClockRate).
_ATTR = {
    "clockRate": 13,
    "memoryClockRate": 36,
    "memoryBusWidth": 37,
    "l2CacheSize": 38,
    "sharedMemPerBlockOptin": 97,
}

T = TypeVar("T")


@dataclass
class Ceilings:
    """Measured ceilings of one device.

    copy_GBps: device-to-device copy, (bytes read + bytes written) / time, in 1e9 B/s.
    fp32_TFLOPs: FP32 GEMM (2*n^3 / time), in 1e12 FLOP/s; plain FP32, never TF32.
    h2d_pageable_GBps, h2d_pinned_GBps: host-to-device copies (GPU only; None on the CPU executor).
    """
    copy_GBps: float
    fp32_TFLOPs: float
    h2d_pageable_GBps: float | None = None
    h2d_pinned_GBps: float | None = None
    device: str = ""
    backend: str = ""
    date: str = ""
    measured_with: dict = field(default_factory=dict)

    def summary(self) -> str:
        """The ceilings as a few fixed-width lines."""
        def fmt(v, unit):
            if v is None:
                return "n/a (GPU only)"
            return f"{v:,.1f} {unit}" if v >= 10 else f"{v:.3g} {unit}"
        rows = [("device-to-device copy", fmt(self.copy_GBps, "GB/s")),
                ("FP32 GEMM", fmt(self.fp32_TFLOPs, "TFLOP/s")),
                ("host-to-device, pageable", fmt(self.h2d_pageable_GBps, "GB/s")),
                ("host-to-device, pinned", fmt(self.h2d_pinned_GBps, "GB/s")),
                ("measured", self.date)]
        return "\n".join(f"  {k:<28s} {v}" for k, v in rows)

    @classmethod
    def from_dict(cls, d: dict) -> "Ceilings":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclass(frozen=True)
class Device:
    """The device kernels run on, as deviceQuery reports it; None where the backend has no such thing."""
    backend: str
    name: str
    sm_count: int | None = None
    total_memory_bytes: int | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    mem_bus_width_bits: int | None = None
    shared_mem_per_block: int | None = None
    shared_mem_per_block_optin: int | None = None
    constant_memory_bytes: int | None = None
    warp_size: int | None = None
    l2_cache_bytes: int | None = None
    max_threads_per_block: int | None = None
    registers_per_block: int | None = None
    compute_capability: tuple[int, int] | None = None

    @property
    def is_gpu(self) -> bool:
        return self.backend == "cuda"

    @property
    def label(self) -> str:
        """Short name for plots: the GPU's name, or 'CPU executor (not GPU timings)'."""
        return self.name if self.is_gpu else CPU_LABEL

    @property
    def theoretical_bandwidth_GBps(self) -> float | None:
        """Data-sheet DRAM bandwidth, 2 transfers per memory clock times the bus width (GPU only)."""
        if not self.mem_clock_mhz or not self.mem_bus_width_bits:
            return None
        return 2 * self.mem_clock_mhz * 1e6 * self.mem_bus_width_bits / 8 / 1e9

    def summary(self) -> str:
        """A deviceQuery-like table, fixed width, one property a line."""
        def b(v, unit=1, suffix="bytes"):
            return None if v is None else f"{v // unit:,} {suffix}"

        cc = None if self.compute_capability is None else "%d.%d" % self.compute_capability
        bw = self.theoretical_bandwidth_GBps
        rows = [
            ("backend", self.backend),
            ("compute capability", cc),
            ("multiprocessors" if self.is_gpu else "workers (cores)", self.sm_count),
            ("global memory" if self.is_gpu else "global memory (host RAM)",
             b(self.total_memory_bytes, 2**20, "MiB")),
            ("SM clock", None if self.sm_clock_mhz is None else f"{self.sm_clock_mhz:,.0f} MHz"),
            ("memory clock", None if self.mem_clock_mhz is None else f"{self.mem_clock_mhz:,.0f} MHz"),
            ("memory bus width", None if self.mem_bus_width_bits is None else f"{self.mem_bus_width_bits} bits"),
            ("theoretical DRAM bandwidth", None if bw is None else f"{bw:,.0f} GB/s"),
            ("L2 cache", b(self.l2_cache_bytes)),
            ("shared memory per block", b(self.shared_mem_per_block)),
            ("shared memory per block (opt-in)", b(self.shared_mem_per_block_optin)),
            ("constant memory", b(self.constant_memory_bytes)),
            ("registers per block", self.registers_per_block),
            ("warp size", self.warp_size),
            ("max threads per block", self.max_threads_per_block),
        ]
        lines = [self.name, "-" * min(len(self.name), 78)]
        lines += [f"  {k:<34s} {'n/a' if v is None else v}" for k, v in rows]
        return "\n".join(lines)

    def ceilings(self, refresh: bool = False) -> Ceilings:
        """This device's ceilings: from the cache, or measured (and cached) when absent or refresh=True."""
        entry = _read_cache().get(self.name)
        if not refresh and isinstance(entry, dict):
            try:
                return Ceilings.from_dict(entry)
            except TypeError:
                pass  # an entry missing a field: measure again
        c = _measure_gpu(self) if self.is_gpu else _measure_cpu(self)
        cache = _read_cache()  # re-read: another process may have written meanwhile
        cache[self.name] = asdict(c)
        _write_cache(cache)
        return c


# --- the device query ------------------------------------------------------------------------

_devices: dict[str, Device] = {}


def device() -> Device:
    """The device of the backend in use (``labkit.backends.current()``), queried once per backend."""
    backend = backends.current()
    dev = _devices.get(backend)
    if dev is None:
        dev = _query_gpu() if backend == "cuda" else _query_cpu()
        _devices[backend] = dev
    return dev


def gpu_sm_count() -> int:
    """The GPU's SM count, for grids that must fill it; 0 on the CPU executor (nothing to fill)."""
    dev = device()
    return dev.sm_count if dev.is_gpu and dev.sm_count else 0


def sizes(gpu: Sequence[T], cpu: Sequence[T]) -> list[T]:
    """``gpu`` on a GPU, ``cpu`` on the CPU executor: problem sizes that keep a notebook short on both."""
    return list(gpu) if backends.current() == "cuda" else list(cpu)


def cpu_model() -> str:
    """The host CPU's model name (from /proc/cpuinfo where there is one)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _host_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def _query_cpu() -> Device:
    # The limits the CPU executor enforces or models (labkit/backends/cpu): a 48 KiB
    # dynamic shared-memory default, 64 KiB of __constant__ memory, 1024 threads a block,
    # warps of 32 lanes; its workers (one per core) play the role of SMs.
    n = os.cpu_count() or 1
    return Device(
        backend="cpu",
        name=f"CPU executor ({cpu_model()}, {n} cores) — timings are not GPU timings",
        sm_count=n,
        total_memory_bytes=_host_memory(),
        shared_mem_per_block=SHARED_MEM_PER_BLOCK,
        constant_memory_bytes=CONSTANT_MEMORY,
        warp_size=WARP_SIZE,
        max_threads_per_block=MAX_THREADS_PER_BLOCK,
    )


def _query_gpu(dev_id: int | None = None) -> Device:
    import cupy
    rt = cupy.cuda.runtime
    if dev_id is None:
        dev_id = cupy.cuda.Device().id
    props = rt.getDeviceProperties(dev_id)

    def prop(key: str):
        # A field cudaDeviceProp no longer has (CUDA 13) is read as a device attribute.
        v = props.get(key)
        if v is None and key in _ATTR:
            try:
                v = rt.deviceGetAttribute(_ATTR[key], dev_id)
            except Exception:
                v = None
        return v

    name = props.get("name", b"") or props.get(b"name", b"")
    if isinstance(name, bytes):
        name = name.decode(errors="replace")
    name = name.strip("\x00 ").strip() or f"CUDA device {dev_id}"
    clock, mem_clock = prop("clockRate"), prop("memoryClockRate")  # kHz
    major, minor = props.get("major"), props.get("minor")
    return Device(
        backend="cuda",
        name=name,
        sm_count=props.get("multiProcessorCount"),
        total_memory_bytes=props.get("totalGlobalMem"),
        sm_clock_mhz=clock / 1000 if clock else None,
        mem_clock_mhz=mem_clock / 1000 if mem_clock else None,
        mem_bus_width_bits=prop("memoryBusWidth"),
        shared_mem_per_block=props.get("sharedMemPerBlock"),
        shared_mem_per_block_optin=prop("sharedMemPerBlockOptin"),
        constant_memory_bytes=props.get("totalConstMem"),
        warp_size=props.get("warpSize"),
        l2_cache_bytes=prop("l2CacheSize"),
        max_threads_per_block=props.get("maxThreadsPerBlock"),
        registers_per_block=props.get("regsPerBlock"),
        compute_capability=None if major is None else (int(major), int(minor or 0)),
    )


# --- versions and the cache ----------------------------------------------------------------

def versions() -> dict:
    """Versions that shape a measurement: python, numpy, and on a GPU cupy, CUDA runtime and driver."""
    import numpy
    v = {"python": platform.python_version(), "numpy": numpy.__version__}
    if "cupy" in sys.modules or backends.current() == "cuda":
        try:
            import cupy
            v["cupy"] = cupy.__version__
            v["cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
            v["cuda_driver"] = cupy.cuda.runtime.driverGetVersion()
        except Exception:
            pass
    return v


def cache_dir() -> Path:
    """``$LABKIT_CACHE_DIR``, or ``~/.cache/labkit``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "labkit"


def _read_cache() -> dict:
    p = cache_dir() / CEILINGS_FILE
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_cache(data: dict) -> None:
    d = cache_dir()
    d.mkdir(parents=True, exist_ok=True)
    # Write then rename, so a reader never sees half a file.
    tmp = d / f".{CEILINGS_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, d / CEILINGS_FILE)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# --- measuring ---------------------------------------------------------------------------

def _median_perf(fn, warmup: int, repeat: int) -> float:
    """Median seconds of fn() by the monotonic clock, after warm-up."""
    return statistics.median(times_ms(fn, warmup=warmup, repeat=repeat, sync=True, on_gpu=False)) / 1e3


def _measure_cpu(dev: Device) -> Ceilings:
    """numpy on the host: a 256 MiB copy and a float32 matmul sized to take about 0.1 s (~3 s in all)."""
    import numpy as np
    nbytes = 256 * 2**20
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    t_copy = _median_perf(lambda: np.copyto(dst, src), warmup=1, repeat=5)
    copy_GBps = 2 * nbytes / t_copy / 1e9  # read + write
    del src, dst

    rng = np.random.default_rng(0)
    n = 1024
    while True:
        a = rng.standard_normal((n, n), dtype=np.float32)
        bm = rng.standard_normal((n, n), dtype=np.float32)
        t = times_ms(lambda: a @ bm, warmup=0, repeat=1, sync=True, on_gpu=False)[0] / 1e3
        # Grow until one product takes at least 25 ms, so the BLAS is measured, not the call overhead.
        if t >= 0.025 or n >= 4096:
            break
        n *= 2
    t_mm = _median_perf(lambda: a @ bm, warmup=1, repeat=3)
    tflops = 2 * n**3 / t_mm / 1e12
    return Ceilings(copy_GBps=copy_GBps, fp32_TFLOPs=tflops, device=dev.name, backend="cpu",
                    date=_now(), measured_with={**versions(), "clock": "time.perf_counter",
                                                "copy": f"np.copyto, {nbytes // 2**20} MiB",
                                                "gemm": f"numpy float32 matmul {n}^3",
                                                "statistic": "median of 5 (copy), 3 (gemm) after warm-up"})


def _events_median_ms(fn, warmup: int, repeat: int) -> float:
    """Median ms of fn() between CUDA events on the current stream, after warm-up, each call alone."""
    return statistics.median(times_ms(fn, warmup=warmup, repeat=repeat, sync=True, on_gpu=True))


def _measure_gpu(dev: Device) -> Ceilings:
    """CuPy on the GPU: a 1 GiB D2D copy, an 8192^3 FP32 GEMM (cuBLAS), 256 MiB H2D copies."""
    import ctypes

    import cupy
    import numpy as np
    tf32 = os.environ.get("CUPY_TF32", "0")
    if tf32 not in ("", "0"):
        # CuPy reads CUPY_TF32 for float32 matmul: with it, the "FP32" figure would be TF32 tensor cores.
        warnings.warn(f"CUPY_TF32={tf32}: the FP32 GEMM ceiling is measured with TF32 tensor cores; "
                      "unset CUPY_TF32 for a plain FP32 ceiling", RuntimeWarning, stacklevel=3)
    stream = cupy.cuda.get_current_stream()
    free, _ = cupy.cuda.runtime.memGetInfo()
    pool = cupy.get_default_memory_pool()

    # Device-to-device copy (cudaMemcpyAsync), each buffer up to 1 GiB.
    nbytes = int(min(2**30, free // 8)) // 256 * 256
    src = cupy.ones(nbytes // 4, cupy.float32)
    dst = cupy.empty_like(src)
    ms = _events_median_ms(lambda: dst.data.copy_from_device_async(src.data, nbytes, stream),
                           warmup=3, repeat=20)
    copy_GBps = 2 * nbytes / (ms * 1e-3) / 1e9
    del src, dst

    # FP32 GEMM through cuBLAS: CuPy computes float32 matmul in plain FP32 unless CUPY_TF32=1.
    n = 8192
    while 3 * n * n * 4 > free // 2 and n > 1024:
        n //= 2
    a = cupy.random.rand(n, n, dtype=cupy.float32)
    bm = cupy.random.rand(n, n, dtype=cupy.float32)
    c = cupy.empty((n, n), cupy.float32)
    ms = _events_median_ms(lambda: cupy.matmul(a, bm, out=c), warmup=3, repeat=10)
    tflops = 2 * n**3 / (ms * 1e-3) / 1e12
    del a, bm, c

    # Host-to-device, 256 MiB: from ordinary (pageable) host memory, then from pinned memory.
    hbytes = 256 * 2**20
    d = cupy.empty(hbytes, cupy.uint8)
    h = np.ones(hbytes, np.uint8)
    ms = _events_median_ms(
        lambda: d.data.copy_from_host_async(ctypes.c_void_p(h.ctypes.data), hbytes, stream),
        warmup=2, repeat=10)
    pageable = hbytes / (ms * 1e-3) / 1e9
    pinned_mem = cupy.cuda.alloc_pinned_memory(hbytes)
    hp = np.frombuffer(pinned_mem, np.uint8, hbytes)
    hp[:] = 1
    ms = _events_median_ms(
        lambda: d.data.copy_from_host_async(ctypes.c_void_p(hp.ctypes.data), hbytes, stream),
        warmup=2, repeat=10)
    pinned = hbytes / (ms * 1e-3) / 1e9
    del d, h, hp, pinned_mem
    pool.free_all_blocks()

    return Ceilings(copy_GBps=copy_GBps, fp32_TFLOPs=tflops, h2d_pageable_GBps=pageable,
                    h2d_pinned_GBps=pinned, device=dev.name, backend="cuda", date=_now(),
                    measured_with={**versions(), "clock": "CUDA events",
                                   "copy": f"cudaMemcpyAsync D2D, {nbytes // 2**20} MiB",
                                   "gemm": f"cupy.matmul float32 {n}^3 (cuBLAS)",
                                   "CUPY_TF32": tf32 or "0",
                                   "h2d": f"{hbytes // 2**20} MiB",
                                   "statistic": "median after warm-up"})
