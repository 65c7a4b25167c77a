"""The timing clock, in one place: CUDA events on a GPU, the monotonic clock on the CPU executor.

    times = times_ms(fn, warmup=3, repeat=20, sync=True, on_gpu=True)   # one time per call, in ms

Everything that times (labkit.measure, the device query's ceilings) calls this; nothing here
knows about labkit's kernels.
"""
from __future__ import annotations

import time
from typing import Callable

from ..errors import check_int


def times_ms(fn: Callable[[], object], *, warmup: int, repeat: int, sync: bool, on_gpu: bool) -> list[float]:
    """``warmup`` untimed calls of ``fn``, then the time of each of ``repeat`` calls, in ms.

    On a GPU each call is bracketed by CUDA events on the current stream: the time is what the GPU
    spent from the first to the last piece of work ``fn`` queued there.  ``sync=True`` drains the
    stream after each call (each starts on an idle GPU); ``sync=False`` queues the calls back to
    back and reads the events at the end, which hides the gaps a slow host leaves between launches.
    Without a GPU, time.perf_counter around each call (``sync`` changes nothing).
    """
    check_int(repeat, "repeat")
    return _events(fn, warmup, repeat, sync) if on_gpu else _perf_counter(fn, warmup, repeat)


def _perf_counter(fn, warmup: int, repeat: int) -> list[float]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return times


def _events(fn, warmup: int, repeat: int, sync: bool) -> list[float]:
    import cupy
    stream = cupy.cuda.get_current_stream()
    for _ in range(warmup):
        fn()
    stream.synchronize()
    pairs = []
    for _ in range(repeat):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        fn()
        end.record(stream)
        if sync:
            end.synchronize()
        pairs.append((start, end))
    stream.synchronize()
    return [cupy.cuda.get_elapsed_time(s, e) for s, e in pairs]


def host_us(fn: Callable[[], object], *, warmup: int = 100, repeat: int = 1000,
            settle: Callable[[], object] | None = None, every: int = 64) -> list[float]:
    """Host time of each call of ``fn``, in µs, by time.perf_counter: what a launch costs the CPU that
    makes it.  ``settle`` (e.g. a stream synchronize) runs untimed every ``every`` calls, so that a
    queue of launches never fills and blocks the host (which would count GPU time as host time)."""
    for _ in range(warmup):
        fn()
    if settle is not None:
        settle()
    out = []
    clock = time.perf_counter
    for i in range(repeat):
        if settle is not None and i and i % every == 0:
            settle()
        t = clock()
        fn()
        out.append((clock() - t) * 1e6)
    if settle is not None:
        settle()
    return out
