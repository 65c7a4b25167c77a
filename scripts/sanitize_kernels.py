"""Launch every kernel of the series once on small odd-sized inputs, for compute-sanitizer.

    compute-sanitizer --tool memcheck python3 scripts/sanitize_kernels.py
    compute-sanitizer --tool racecheck python3 scripts/sanitize_kernels.py

The executor's feature kernels are launched through the cases of the GPU parity test.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import cupy as cp  # noqa: E402

from labkit.backends.cuda import CUDAModule  # noqa: E402
import test_executor_parity as parity  # noqa: E402


def main() -> int:
    code = parity.FEATURES.read_text()
    mod = CUDAModule(code, path=str(parity.FEATURES), name_expressions=parity.EXPR)
    n = 0
    for name, grid, block, make, _outs, shmem in parity._cases():
        args = [cp.asarray(a) if isinstance(a, np.ndarray) else a for a in make()]
        mod.get_function(name)(grid, block, args, shared_mem=shmem)
        n += 1
    cp.cuda.Device().synchronize()
    print(f"launched {n} kernels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
