"""labkit.counters: what a GPU's profiler would count for each launch, from the CPU executor.

    records = labkit.counters(fn, x, w)     # runs fn(x, w); one record per kernel launch it made
    records[0]["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"]

Hardware counters need permissions that many machines deny, and a GPU; the executor runs every
access of every thread, so it counts them itself (labkit/backends/cpu/counting.py says how, and each
record's ``notes`` what each number models).  Keys are Nsight Compute's metric names, so a record
sits beside ``ncu --metrics ...`` output (benchmarks/counters_ncu.py).
"""
from __future__ import annotations

from .. import backends
from ..backends.cpu import counting
from ..errors import LaunchError

METRICS = counting.METRICS


def counters(fn, *args, **kwargs) -> list[dict]:
    """Run ``fn(*args, **kwargs)`` on the CPU executor, counting every kernel launch it makes; return
    one record per launch: ``kernel``, ``grid``, ``block``, ``shared_mem``, the metrics of ``METRICS``
    by name, and ``notes``.  On a GPU machine too: fn runs on the executor (its arrays must be NumPy
    arrays, labkit.xp inside fn gives them)."""
    if not callable(fn):
        raise TypeError(f"labkit.counters(fn, *args): fn must be callable (a function that launches kernels), "
                        f"got {type(fn).__name__}")
    with backends.use("cpu"), counting.session() as records:
        fn(*args, **kwargs)
    if not records:
        raise LaunchError(
            "labkit.counters: the function launched no kernel on the CPU executor, so there is nothing to "
            "count.  Counting needs the CPU executor: launch inside the function, with modules loaded "
            "there (labkit.load, labkit.load_source) -- a module loaded earlier on the GPU launches "
            "uncounted")
    return records
