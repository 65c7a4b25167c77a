"""Moving batches between host and GPU, and hiding the moves behind the kernels (notebook 09).

    from labkit.pipeline import pinned_empty, copy_bandwidth, SubBatchPipeline, Timeline, plot_timeline
    x = pinned_empty((N,) + net.plan(1).x.shape[1:])           # page-locked host memory
    pipe = SubBatchPipeline(net, streams=4, sub_batch=128)      # any labkit model with plans
    probs = pipe.run(x)                                          # sub-batches overlapped on 4 streams
    pipe = SubBatchPipeline(net, devices="all")                  # ... and over every GPU of the host

``host_memory``: pinned buffers and host<->device bandwidth; ``timeline``: per-stage CUDA events as a
Gantt chart; ``sub_batch``: the pipeline itself (streams, graphs, several GPUs).  It uses a model
only through its plans (``new_plan``, ``replica``): any labkit model runs through it.
"""
from __future__ import annotations

from .host_memory import copy_bandwidth, copy_in, copy_out, host_pointer, is_pinned, pinned_empty
from .sub_batch import SubBatchPipeline, split_batch
from .timeline import STAGE_COLOURS, Timeline, overlap_ms, plot_timeline

__all__ = ["pinned_empty", "copy_in", "copy_out", "is_pinned", "host_pointer", "copy_bandwidth", "SubBatchPipeline", "split_batch",
           "Timeline", "plot_timeline", "overlap_ms", "STAGE_COLOURS"]
