"""labkit.counters: what a GPU's profiler would count for each launch, from the CPU executor.

    records = labkit.counters(fn, x, w)     # runs fn(x, w); one record per kernel launch it made
    records[0]["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"]

Hardware counters need permissions that many machines deny, and a GPU; the executor runs every
access of every thread, so it counts them itself (labkit/backends/cpu/counting.py says how, and each
record's ``notes`` what each number models).  Keys are Nsight Compute's metric names, so a record
sits beside ``ncu --metrics ...`` output (benchmarks/counters_ncu.py).

    labkit.measure.counters.l2_resident(records[0], l2_bytes=50 * 2**20)   # DRAM during the launch
    rows = labkit.measure.counters.warp_accesses(fn, x, w, block=(0, 0, 0), warp=0)   # one warp's accesses

A record's DRAM bytes are compulsory traffic, what the launch's data costs in the end; a profiler
counts what moves while the launch runs, and a GPU's L2 (write-back, 50 MB on an H100) keeps a
small launch's writes until later: ``l2_resident`` says what that leaves for the launch itself.
"""
from __future__ import annotations

from .. import backends
from ..backends.cpu import counting
from ..errors import LaunchError

METRICS = counting.METRICS
DRAM_READ, DRAM_WRITE = counting.DRAM


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


def l2_resident(record: dict, l2_bytes: int) -> dict:
    """The DRAM bytes a launch moves while it runs, by a GPU whose L2 holds ``l2_bytes`` (an H100's:
    50 MiB), cold at the launch's start (as Nsight Compute flushes it before each profiled launch):
    reads, the compulsory ones (each sector once); writes, only the dirty sectors the L2 cannot keep
    (written bytes beyond its size; none where they fit -- written back after the launch).  Both are
    lower bounds: a GPU also reads the kernel's code and constants, and an L2 evicts before it is
    full.  Keys: Nsight Compute's DRAM metric names."""
    if not isinstance(l2_bytes, int) or l2_bytes <= 0:
        raise ValueError(f"l2_resident: l2_bytes must be a positive int (an H100's L2: 50 * 2**20), got {l2_bytes!r}")
    missing = [k for k in (DRAM_READ, DRAM_WRITE) if not isinstance(record.get(k), int)]
    if missing:
        raise ValueError(f"l2_resident: the record has no {', '.join(missing)} (a labkit.counters record needed)")
    return {DRAM_READ: record[DRAM_READ], DRAM_WRITE: max(0, record[DRAM_WRITE] - l2_bytes)}


def warp_accesses(fn, *args, launch: int = 0, block=(0, 0, 0), warp: int = 0, **kwargs) -> list[dict]:
    """The accesses one warp makes: run ``fn(*args, **kwargs)`` as ``counters`` does, keeping, for
    launch number ``launch`` (0: the first fn makes), the accesses of warp ``warp`` (threads 32·warp
    to 32·warp + 31 in linear thread index) of block ``block`` (x, y, z).  One row per lane per warp
    instruction, as counting matched them: ``instruction`` (0, 1, ... in the order counted),
    ``lane``, ``kind`` ("global load", "global store", "shared load", "shared store"), ``array``
    ("argument i" of the kernel, a __device__ variable, or "shared"), ``offset`` (bytes from the
    array's start: a global array's allocation, a shared array's first byte) and ``size`` (bytes; a
    shared vector load nvcc would make, merged).  Sectors are offset // 32; banks (offset // 4) % 32
    (labkit.measure.warp.warp_instructions groups them).  fn's own keyword arguments cannot be named
    launch, block or warp: pass a lambda then."""
    if not callable(fn):
        raise TypeError(f"warp_accesses(fn, *args): fn must be callable, got {type(fn).__name__}")
    b = tuple(block) if isinstance(block, (tuple, list)) else ()
    if len(b) != 3 or not all(isinstance(v, int) and v >= 0 for v in b):
        raise ValueError(f"warp_accesses: block must be three non-negative ints (x, y, z), got {block!r}")
    for name, v in (("launch", launch), ("warp", warp)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ValueError(f"warp_accesses: {name} must be a non-negative int, got {v!r}")
    with backends.use("cpu"), counting.session(trace={"launch": launch, "block": b, "warp": warp}) as records:
        fn(*args, **kwargs)
    if len(records) <= launch:
        raise LaunchError(f"warp_accesses: fn made {len(records)} launch(es) on the CPU executor; there is no "
                          f"launch {launch} (counted from 0)")
    rec = records[launch]
    threads = rec["block"][0] * rec["block"][1] * rec["block"][2]
    if any(v >= g for v, g in zip(b, rec["grid"])) or 32 * warp >= threads:
        raise ValueError(f"warp_accesses: launch {launch} ({rec['kernel']}) has grid {tuple(rec['grid'])} and "
                         f"{threads} threads a block ({(threads + 31) // 32} warps): no block {b}, warp {warp}")
    return rec["warp_accesses"]
