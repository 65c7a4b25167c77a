"""Timing GPU work: CUDA events on a GPU, the monotonic clock on the CPU executor.

    t = time_fn(lambda: fn(grid, block, args))      # Timing: median_ms, min_ms, times_ms, ...
    per_launch_ms(lambda: layer(x, y))               # one launch's GPU time, 20 launches in a graph
    with time_region() as r:                         # one region, timed once
        y = model(x)
    print(r.ms)

Every timing carries the device label and backend, so a number is never read
without knowing what it was measured on.  Nothing here asserts on time.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

from ..errors import check_int
from .. import backends
from ..backends.clock import times_ms
from ..backends.graph import Graph
from ..device_query import device


def _device_label() -> str:
    return device().label


@dataclass
class Timing:
    """Times of repeated calls, in milliseconds, and what they were measured on."""
    median_ms: float
    min_ms: float
    times_ms: list[float] = field(repr=False)
    repeat: int
    device: str
    backend: str

    def __str__(self) -> str:
        return (f"{self.median_ms:.3f} ms median, {self.min_ms:.3f} ms min "
                f"({self.repeat} runs, {self.device})")


def time_fn(fn: Callable[[], object], *, warmup: int = 3, repeat: int = 20, sync: bool = True) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeat`` timed ones; the median and minimum.

    On a GPU each call is bracketed by CUDA events recorded on the current stream, so the
    time is what the GPU spent from the first to the last piece of work ``fn`` queued there
    (work ``fn`` queues on another stream is not waited for).  With ``sync=True`` the stream
    is drained after each call, so every call starts on an idle GPU; with ``sync=False`` the
    calls are queued back to back and the events read at the end, which hides the gaps a
    slow host would leave between launches.  On the CPU executor launches are synchronous
    and the monotonic clock (time.perf_counter) is used; ``sync`` changes nothing there.
    """
    backend = backends.current()
    times = times_ms(fn, warmup=warmup, repeat=repeat, sync=sync, on_gpu=backend == "cuda")
    return Timing(median_ms=float(statistics.median(times)), min_ms=float(min(times)),
                  times_ms=[float(t) for t in times], repeat=repeat, device=_device_label(),
                  backend=backend)


# Launches per graph in per_launch_ms: enough that the graph's own launch (a few µs) is a small part.
LAUNCHES = 20


def per_launch_ms(launch: Callable[[], object], *, repeat: int = 10, launches: int = LAUNCHES,
                  capture: Callable[[Callable[[], object]], Callable[[], object]] | None = None) -> float:
    """GPU ms of one ``launch()``: ``launches`` of them captured as one CUDA graph, the graph's median
    time (``time_fn``, queued back to back) divided by ``launches``.  A layer's input then stays in L2
    between launches where it fits (50 MB on an H100), as in a network where the previous layer has
    just written it, and the host's launch cost is out of the number.  ``capture(many)`` makes the
    replay of ``many`` (all the launches, in order) for work labkit's Graph cannot hold, such as a
    PyTorch callable (``peers.torch_capture``).  On the CPU executor: the launches one by one."""
    check_int(launches, "launches")
    if capture is None:
        replay = Graph([launch] * launches).launch
    else:
        replay = capture(lambda: [launch() for _ in range(launches)][-1])
    return time_fn(replay, repeat=repeat, sync=False).median_ms / launches


class time_region:
    """Time one region: ``with time_region() as r: ...``; ``r.ms`` is set when the region exits.

    On a GPU, events are recorded on the current stream at entry and exit and the exit
    waits for the GPU, so ``r.ms`` covers the GPU work queued inside the region (and any
    host time between launches).  On the CPU executor it is the monotonic clock.  If the
    region raises, ``r.ms`` stays None.
    """

    def __init__(self) -> None:
        self.ms: float | None = None
        self.backend = backends.current()
        self.device = _device_label()
        self._start = None
        self._stream = None

    def __enter__(self) -> "time_region":
        if self.backend == "cuda":
            import cupy
            self._stream = cupy.cuda.get_current_stream()
            self._start = cupy.cuda.Event()
            self._start.record(self._stream)
        else:
            self._start = time.perf_counter()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None:
            return False
        if self.backend == "cuda":
            import cupy
            end = cupy.cuda.Event()
            end.record(self._stream)
            end.synchronize()
            self.ms = float(cupy.cuda.get_elapsed_time(self._start, end))
        else:
            self.ms = (time.perf_counter() - self._start) * 1e3
        return False

    def __repr__(self) -> str:
        shown = "running" if self.ms is None else f"{self.ms:.3f} ms"
        return f"time_region({shown}, {self.device})"
