"""Measuring kernels: timers, batch-size sweeps, and roofline floors.

    from labkit.measure import time_fn, sweep, conv2d_cost, floor_ms, percent_of_floor
    from labkit.measure import conv_breakdown      # kernels vs copies, nvprof-style

On a GPU, times come from CUDA events after warm-up (the median of the runs); on
the CPU executor from the monotonic clock, and are labelled as not GPU timings.
"""
from __future__ import annotations

from .breakdown import Breakdown, Part, breakdown, conv_breakdown
from .roofline import (Cost, achieved, bound, conv2d_cost, dense_cost, floor_ms, gemm_cost, out_size,
                       percent_of_floor)
from .sweep import ROW_KEYS, load_results, load_rows, save_rows, sweep
from .timer import Timing, time_fn, time_region

__all__ = [
    "Breakdown", "Part", "breakdown", "conv_breakdown",
    "Timing", "time_fn", "time_region",
    "sweep", "save_rows", "load_rows", "load_results", "ROW_KEYS",
    "Cost", "conv2d_cost", "dense_cost", "gemm_cost", "out_size",
    "floor_ms", "bound", "percent_of_floor", "achieved",
]
