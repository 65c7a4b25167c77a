"""What counting costs: labkit.counters' time over the plain CPU executor's, on the ladder's kernels.

    python benchmarks/counters_cost.py [--batch 2] [--repeat 5] [--out benchmarks/results]

Each rung of the convolution ladder runs on the seed model's second layer, plain and counted, in
turns, --repeat times each after one of each to compile.  Both use every core; the ratio is of the
processor time the process spends (the least of the runs), which other work on a shared machine
disturbs far less than the wall-clock time, also kept (the median).  Writes counters_cost_cpu.json.
Target: counting at most 5x the plain executor's time.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit.shapes import SEED_LAYERS  # noqa: E402

RUNGS = ("naive", "tiled", "constant", "tuned", "unrolled", "implicit")
TARGET = 5.0


def timed(fn) -> tuple[float, float]:
    """(wall-clock seconds, processor seconds of the whole process) of one call."""
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rungs", nargs="*", default=list(RUNGS))
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    args = ap.parse_args(argv)
    L = SEED_LAYERS["layer 2"]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch, L["C"], L["H"], L["W"]), dtype=np.float32)
    w = rng.standard_normal((L["M"], L["C"], L["K"], L["K"]), dtype=np.float32)
    b = rng.standard_normal(L["M"], dtype=np.float32)
    rows = []
    with labkit.backends.use("cpu"):
        device = labkit.device().label
        for rung in args.rungs:
            def plain():
                labkit.conv2d(x, w, b, variant=rung)

            def counted():
                labkit.counters(labkit.conv2d, x, w, b, variant=rung)
            plain(), counted()                       # compile both builds, tune
            runs = [(timed(plain), timed(counted)) for _ in range(args.repeat)]
            wall = [statistics.median(r[k][0] for r in runs) for k in (0, 1)]
            cpu = [min(r[k][1] for r in runs) for k in (0, 1)]
            rows.append({"rung": rung, "plain_wall_ms": 1e3 * wall[0], "counted_wall_ms": 1e3 * wall[1],
                         "plain_cpu_ms": 1e3 * cpu[0], "counted_cpu_ms": 1e3 * cpu[1], "ratio": cpu[1] / cpu[0],
                         "wall_ratio": wall[1] / wall[0]})
            print(f"{rung:>9}: processor time plain {1e3 * cpu[0]:8.2f} ms, counted {1e3 * cpu[1]:8.2f} ms: "
                  f"{cpu[1] / cpu[0]:5.1f}x (wall clock {wall[1] / wall[0]:5.1f}x; target <= {TARGET:g}x)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"benchmark": "counters_cost", "date": time.strftime("%Y-%m-%d"), "labkit": labkit.__version__,
            "device": device, "machine": platform.processor() or platform.machine(),
            "cores": os.cpu_count(), "layer": L, "batch": args.batch, "repeat": args.repeat, "target_ratio": TARGET}
    (out / "counters_cost_cpu.json").write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")
    print(f"wrote {out / 'counters_cost_cpu.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
