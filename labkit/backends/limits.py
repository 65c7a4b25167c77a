"""The hardware limits kernels and launchers are checked against, in one place.

They hold on every NVIDIA GPU since Volta (and the CPU executor enforces the same ones), except the
opt-in shared memory, which depends on the GPU: ``labkit.device().shared_mem_per_block_optin``
gives this GPU's; ``SHARED_MEM_OPTIN_MAX`` is the largest any lets a block have (sm_90).
"""
from __future__ import annotations

SHARED_MEM_PER_BLOCK = 48 * 1024     # static __shared__ a block may declare, and dynamic without opt-in
SHARED_MEM_OPTIN_MAX = 227 * 1024    # dynamic shared memory a block may opt into, at most (H100)
CONSTANT_MEMORY = 64 * 1024          # __constant__ memory of a module, in all
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK = (1024, 1024, 64)         # block dimensions x, y, z
MAX_GRID = (2**31 - 1, 65535, 65535)  # grid dimensions x, y, z
WARP_SIZE = 32
