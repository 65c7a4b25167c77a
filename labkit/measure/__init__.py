"""Measuring kernels: timers, batch-size sweeps, and roofline floors.

    from labkit.measure import time_fn, sweep, conv2d_cost, floor_ms, percent_of_floor
    from labkit.measure import breakdown           # kernels vs copies, nvprof-style
    from labkit.measure import host_us             # what a call costs the CPU, in µs
    labkit.measure.counters.warp_accesses(fn)      # one warp's addresses (labkit.measure.warp: its sectors, banks)
    labkit.measure.ncu_stored.stored_case(case)    # ncu's stored H100 counts, beside labkit.counters'

On a GPU, times come from CUDA events after warm-up (the median of the runs); on
the CPU executor from the monotonic clock, and are labelled as not GPU timings.
"""
from __future__ import annotations

from ..backends.clock import host_us
from .breakdown import Breakdown, Part, breakdown
from .roofline import (Cost, achieved, bound, conv2d_backward_data_cost, conv2d_backward_weight_cost, conv2d_cost,
                       dense_backward_cost, dense_cost, elementwise_cost, floor_ms, gemm_cost,
                       global_avg_pool_cost, lrn_cost, lrn_max_pool_cost, out_size, percent_of_floor, pool2d_cost,
                       sgd_momentum_cost, softmax_cost, softmax_cross_entropy_cost)
from .sweep import ROW_KEYS, device_tag, load_results, load_rows, redraw, release_gpu_memory, save_rows, sweep
from .timer import LAUNCHES, Timing, per_launch_ms, time_fn, time_region

__all__ = [
    "Breakdown", "Part", "breakdown",
    "Timing", "time_fn", "time_region", "per_launch_ms", "LAUNCHES", "host_us",
    "sweep", "save_rows", "load_rows", "load_results", "redraw", "device_tag", "ROW_KEYS", "release_gpu_memory",
    "Cost", "conv2d_cost", "dense_cost", "gemm_cost", "out_size", "pool2d_cost", "global_avg_pool_cost",
    "lrn_cost", "lrn_max_pool_cost", "softmax_cost", "elementwise_cost", "conv2d_backward_data_cost", "conv2d_backward_weight_cost",
    "dense_backward_cost", "softmax_cross_entropy_cost", "sgd_momentum_cost",
    "floor_ms", "bound", "percent_of_floor", "achieved",
]

# Names that moved to the studies (labkit.ladder): said here, without importing upward.
_MOVED = {"conv_breakdown": "labkit.ladder.conv_breakdown"}


def __getattr__(name: str):
    if name in _MOVED:
        raise ImportError(f"labkit.measure.{name} moved to {_MOVED[name]}: measure holds generic tools only")
    raise AttributeError(f"module 'labkit.measure' has no attribute {name!r}")
