"""Independent host work in threads: compiling a network's kernels side by side.

    run_parallel([lambda: conv.plan(N) for conv in layers])

A kernel's compile (g++ for the CPU executor, NVRTC for the GPU) spends its time outside Python's
interpreter lock, so several compile at once on several cores.  On the GPU each worker thread first
makes the caller's device current (the current device is per thread in CUDA): a module is loaded
into the context of the device that will run it.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

from . import current

__all__ = ["run_parallel", "on_this_device"]


def run_parallel(tasks: Sequence[Callable[[], object]], workers: int | None = None) -> list:
    """Each task's result, in order; the first exception a task raised, raised here."""
    tasks = list(tasks)
    workers = min(len(tasks), workers or os.cpu_count() or 1)
    if workers <= 1:
        return [t() for t in tasks]
    wrapped = [on_this_device(t) for t in tasks]
    with ThreadPoolExecutor(workers) as pool:
        futures = [pool.submit(t) for t in wrapped]
        return [f.result() for f in futures]


def on_this_device(task: Callable[[], object]) -> Callable[[], object]:
    """``task`` made to run on the caller's GPU in whatever thread runs it (the current device is per
    thread in CUDA); unchanged on the CPU executor."""
    if current() != "cuda":
        return task
    import cupy
    device_id = cupy.cuda.Device().id

    def on_device():
        with cupy.cuda.Device(device_id):
            return task()
    return on_device
