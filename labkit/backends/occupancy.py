"""Theoretical occupancy of a kernel on the current GPU, from its resource use.

Resident blocks per SM are limited by threads, registers, shared memory and a
block count; occupancy is the resident warps over the SM's maximum.  This is the
CUDA occupancy calculator's arithmetic, with the limits read off the device.
"""
from __future__ import annotations


def _device_limits() -> dict:
    import cupy
    dev = cupy.cuda.Device()
    attr = dev.attributes
    return {
        "max_threads_per_sm": attr["MaxThreadsPerMultiProcessor"],
        "max_blocks_per_sm": attr.get("MaxBlocksPerMultiprocessor", 32),
        "regs_per_sm": attr["MaxRegistersPerMultiprocessor"],
        "shared_per_sm": attr["MaxSharedMemoryPerMultiprocessor"],
        "warp_size": attr["WarpSize"],
    }


def theoretical_occupancy(*, block_threads: int, regs_per_thread: int, shared_per_block: int,
                          limits: dict | None = None) -> dict:
    """Blocks per SM, the limiting resource, and occupancy (0..1)."""
    lim = limits or _device_limits()
    ws = lim["warp_size"]
    warps_per_block = -(-block_threads // ws)
    # Registers are allocated per warp in units of 256.
    regs_per_warp = -(-max(regs_per_thread, 1) * ws // 256) * 256
    by = {
        "threads": lim["max_threads_per_sm"] // (warps_per_block * ws),
        "blocks": lim["max_blocks_per_sm"],
        "registers": lim["regs_per_sm"] // (regs_per_warp * warps_per_block),
        "shared memory": (lim["shared_per_sm"] // shared_per_block) if shared_per_block else 10**9,
    }
    blocks = max(0, min(by.values()))
    limiter = min(by, key=by.get)
    occ = blocks * warps_per_block * ws / lim["max_threads_per_sm"]
    return {"blocks_per_sm": blocks, "limited_by": limiter, "occupancy": occ}
