"""Benchmark of the CPU executor: fiber switches per second, and a tiled matmul.

    python benchmarks/cpu_executor.py [--out results/benchmarks]

Writes cpu_executor.json (machine, compiler, figures).  Targets: at least 10
million fiber switches per second on a 2-core machine; a 16x16-tiled 256x256
matmul in under 0.5 s.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from labkit.backends.cpu import CPUModule
from labkit.backends.cpu.compiler import compiler

BARRIERS = r'''
// Each thread does almost nothing between barriers: the time is the switching.
extern "C" __global__ void barrier_loop(float* out, int rounds) {
  float acc = threadIdx.x;
  for (int r = 0; r < rounds; ++r) {
    acc = acc * 0.5f + 1.0f;
    __syncthreads();
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
'''
MATMUL = Path(__file__).resolve().parent.parent / "tests" / "cuda" / "feature_kernels.cu"


def best_of(fn, repeat=5) -> float:
    fn()  # warm-up: stacks mapped, code paged in
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times), float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="results/benchmarks")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = {}
    mod = CPUModule(BARRIERS, path="barrier_loop.cu")
    f = mod.get_function("barrier_loop")
    blocks, threads, rounds = 8, 256, 200
    y = np.zeros(blocks * threads, np.float32)
    for workers in ("1", "0"):
        os.environ["LABKIT_CPU_WORKERS"] = workers
        t_min, t_med = best_of(lambda: f((blocks,), (threads,), (y, np.int32(rounds))))
        switches = f.last_switches
        rows[f"switches_per_s_workers_{'all' if workers == '0' else workers}"] = switches / t_med
        rows["switches_per_launch"] = switches
    os.environ["LABKIT_CPU_WORKERS"] = "0"
    feat = CPUModule(MATMUL.read_text(), path=str(MATMUL))
    mm = feat.get_function("matmul_tiled")
    n = 256
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, n)).astype(np.float32)
    B = rng.standard_normal((n, n)).astype(np.float32)
    C = np.full((n, n), np.nan, np.float32)
    t_min, t_med = best_of(lambda: mm((16, 16), (16, 16), (A, B, C, np.int32(n))))
    err = float(np.linalg.norm(C - A.astype(np.float64) @ B) / np.linalg.norm(A.astype(np.float64) @ B))
    rows["matmul_tiled_256_s"] = t_med
    rows["matmul_tiled_256_rel_err"] = err
    result = {
        "benchmark": "cpu_executor",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "python": platform.python_version(), "compiler": compiler()[1]},
        "note": "CPU executor: these are timings of the executor itself, not GPU timings",
        "targets": {"switches_per_s": 10e6, "matmul_tiled_256_s": 0.5},
        "results": rows,
    }
    (out / "cpu_executor.json").write_text(json.dumps(result, indent=1))
    print(f"fiber switches/s, 1 worker   : {rows['switches_per_s_workers_1'] / 1e6:8.1f} M  (target >= 10 M)")
    print(f"fiber switches/s, all cores  : {rows['switches_per_s_workers_all'] / 1e6:8.1f} M")
    print(f"tiled matmul 256^3 (16x16)   : {t_med * 1e3:8.1f} ms (target < 500 ms), rel err {err:.1e}")
    print(f"wrote {out / 'cpu_executor.json'}")


if __name__ == "__main__":
    main()
