"""Close to the limit: every step of the course's networks beside its roofline floor.

    python benchmarks/roofline.py [--out benchmarks/results] [--nets fashion alexnet alexnet_auto resnet mobilenet
                                  mobilenet_auto]
                                  [--quick] [--repeat 10] [--warmup 2]

For each network, precision and batch size (GPU defaults; ``--quick``: smaller batches):

    fashion    FashionNet (fused layer 1), FP32, batch 10,000
    alexnet    AlexNet FP32 and TF32, batch 1,024 and 64 (synthetic weights unless $LABKIT_ALEXNET_WEIGHTS)
    alexnet_auto  the same FP32 AlexNet with convs="auto": each convolution on labkit.conv2d's autotuned
               choice (Winograd F(2x2, r) as GEMMs, where it wins); its FLOPs stay the direct
               convolution's, so such a step can pass 100% of its floor
    resnet     the small ResNet's training step, 64 channels, batch 1,024, 28x28: forward, loss, backward
               (data and weight of every convolution), SGD, kernel by kernel (ResNetSmall.step_list)
    mobilenet  MobileNetV2 FP32, batch 256 (synthetic weights, seeded)
    mobilenet_auto  the same with depthwise="auto": each depthwise layer on the autotuner's choice of
               depthwise.cu's tiled kernel or depthwise_any.cu

on a GPU each case is tuned first (labkit.tune; the ResNet by one training step with the autotuner
searching), its decisions' sources recorded in the rows; then each step of the network's plan
(``model.plan(N).steps``; the ResNet's ``step_list``) is timed alone by labkit.measure.breakdown
(CUDA events around each step, the median of ``--repeat`` runs after ``--warmup``), and set beside
its cost (``model.step_costs(N)``: FLOPs, and the least bytes, each input, weight and bias read once
and the output written once) and its floor: the larger of bytes at the
measured copy bandwidth and FLOPs at the measured GEMM peak of the precision the step runs in (the
device's ceilings, ``labkit.device().ceilings()``; TF32: cuBLAS's float32 GEMM with CUPY_TF32=1, timed
in a child process so that this one stays in plain FP32).  In a TF32 network only the convolutions
run on the tensor cores: the dense layers, pooling, LRN and softmax keep plain FP32, and their floors
use the FP32 peak (each row's ``floor_precision``).

Writes roofline_<gpu>.json (every row), roofline_<gpu>.md (the tables) and roofline_<gpu>.png (% of
floor per step, grouped by network).  On the CPU executor it runs tiny sizes (batch 1-4, MobileNetV2
on 32x32, the ResNet at 4 channels), FP32 only: the times are the executor's, not a GPU's.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from datetime import datetime, timezone

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import labkit  # noqa: E402
from labkit import measure, plots  # noqa: E402
from labkit.ladder.floors import NETS, build_case, case_label, floor_rows  # noqa: E402

# (precision, batch) per network: the sizes, --quick's, and the CPU executor's.
GPU_CASES = {"fashion": [("fp32", 10000)], "alexnet": [("fp32", 1024), ("fp32", 64), ("tf32", 1024), ("tf32", 64)],
             "alexnet_auto": [("fp32", 1024), ("fp32", 64)], "resnet": [("fp32", 1024)], "mobilenet": [("fp32", 256)],
             "mobilenet_auto": [("fp32", 256)]}
QUICK_CASES = {"fashion": [("fp32", 1000)], "alexnet": [("fp32", 64), ("tf32", 64)], "alexnet_auto": [("fp32", 64)],
               "resnet": [("fp32", 64)], "mobilenet": [("fp32", 32)], "mobilenet_auto": [("fp32", 32)]}
CPU_CASES = {"fashion": [("fp32", 4)], "alexnet": [("fp32", 1)], "alexnet_auto": [("fp32", 1)], "resnet": [("fp32", 4)],
             "mobilenet": [("fp32", 2)], "mobilenet_auto": [("fp32", 2)]}

# The TF32 ceiling, measured in a child process: CuPy reads CUPY_TF32 (documented among its environment
# variables) for float32 matmul, and this process must keep plain FP32.  The product of two 512x512
# matrices is compared with float64 too: TF32's 10-bit mantissa shows as a relative error near 1e-4
# or more, FP32's near 1e-6, so the row says whether tensor cores did run.
_TF32_CHILD = r"""
import json, sys
import numpy as np
import cupy
from labkit import measure
n = int(sys.argv[1])
a = cupy.random.rand(n, n, dtype=cupy.float32); b = cupy.random.rand(n, n, dtype=cupy.float32)
c = cupy.empty((n, n), cupy.float32)
ms = measure.time_fn(lambda: cupy.matmul(a, b, out=c), warmup=3, repeat=10).median_ms
rng = np.random.default_rng(0)
x, y = rng.standard_normal((2, 512, 512)).astype(np.float32)
z = cupy.asnumpy(cupy.asarray(x) @ cupy.asarray(y))
ref = x.astype(np.float64) @ y.astype(np.float64)
err = float(np.abs(z - ref).max() / np.abs(ref).max())
print(json.dumps({"tf32_TFLOPs": 2 * n ** 3 / (ms * 1e-3) / 1e12, "n": n, "ms": ms, "rel_error_512": err}))
"""


def measure_tf32(n: int = 8192) -> dict:
    """cuBLAS's float32 GEMM of n^3 with TF32 allowed (CUPY_TF32=1), in a child process."""
    env = dict(os.environ, CUPY_TF32="1", PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                                                  os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-c", _TF32_CHILD, str(n)], env=env, capture_output=True, text=True,
                         timeout=300)
    if out.returncode:
        raise RuntimeError(f"measuring the TF32 GEMM failed:\n{out.stderr[-2000:]}")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    r["how"] = f"cupy.matmul float32 {n}^3 (cuBLAS) with CUPY_TF32=1, CUDA events, median of 10 after 3"
    return r


def cases(nets, quick: bool, gpu: bool) -> list[tuple[str, str, int]]:
    table = (QUICK_CASES if quick else GPU_CASES) if gpu else CPU_CASES
    return [(net, prec, n) for net in nets for prec, n in table[net]]


def markdown(rows: list[dict], doc_head: dict) -> str:
    lines = [f"# Roofline of every step: {doc_head['device']}", "",
             f"{doc_head['note']}", "",
             f"Ceilings: copy {doc_head['copy_GBps']:,.0f} GB/s, FP32 GEMM {doc_head['fp32_TFLOPs']:.4g} TFLOP/s"
             + (f", TF32 GEMM {doc_head['tf32_TFLOPs']:.4g} TFLOP/s" if doc_head.get("tf32_TFLOPs") else "")
             + ".  Floor = max(bytes / copy bandwidth, FLOPs / peak of the precision); % of floor = floor / "
               "measured.", ""]
    for label in dict.fromkeys(case_label(r) for r in rows):
        sel = [r for r in rows if case_label(r) == label]
        floor, ms = sum(r["floor_ms"] for r in sel), sum(r["measured_ms"] for r in sel)
        earlier = sel[0].get("run_date") not in (None, doc_head.get("date"))
        lines += [f"## {label}", ""] + ([f"From an earlier run ({sel[0]['run_date']}), against that run's ceilings "
                                         "(meta.earlier_runs in the JSON).", ""] if earlier else []) + [
                  "| step | GFLOP | MB | floor ms | bound | measured ms | % of floor |",
                  "|---|---:|---:|---:|---|---:|---:|"]
        lines += [f"| {r['step']} | {r['flops'] / 1e9:.4g} | {r['bytes'] / 1e6:.4g} | {r['floor_ms']:.4g} | "
                  f"{r['bound']}{' (TF32)' if r['floor_precision'] == 'tf32' else ''} | "
                  f"{r['measured_ms']:.4g} | {r['percent_of_floor']:.3g} |" for r in sel]
        lines += [f"| **all steps** | {sum(r['flops'] for r in sel) / 1e9:.4g} | "
                  f"{sum(r['bytes'] for r in sel) / 1e6:.4g} | {floor:.4g} | | {ms:.4g} | {100 * floor / ms:.3g} |", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--nets", nargs="+", default=list(NETS), choices=NETS)
    ap.add_argument("--quick", action="store_true", help="smaller batches (GPU): a check that it all runs")
    ap.add_argument("--repeat", type=int, default=None, help="timed runs per step (default 10 on a GPU, 2 on CPU)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed runs first (default 2 on a GPU, 1 on CPU)")
    ap.add_argument("--merge", action="store_true",
                    help="keep the rows of the networks not run now from this device's file in --out (each row "
                         "names the run it came from: run_date, and meta.earlier_runs that run's ceilings)")
    args = ap.parse_args()
    dev = labkit.device()
    gpu = dev.is_gpu
    repeat = args.repeat or (10 if gpu else 2)
    warmup = args.warmup if args.warmup is not None else (2 if gpu else 1)
    if repeat < 1 or warmup < 0:
        ap.error("--repeat must be at least 1 and --warmup at least 0")
    todo = cases(args.nets, args.quick, gpu)
    c = dev.ceilings()
    ceil = {"copy_GBps": c.copy_GBps, "fp32_TFLOPs": c.fp32_TFLOPs}
    tf32 = None
    if any(p == "tf32" for _, p, _ in todo):
        tf32 = measure_tf32()
        ceil["tf32_TFLOPs"] = tf32["tf32_TFLOPs"]
        print(f"TF32 GEMM: {tf32['tf32_TFLOPs']:.1f} TFLOP/s (FP32 {c.fp32_TFLOPs:.1f}); "
              f"relative error of a 512^2 product {tf32['rel_error_512']:.1e}", flush=True)
    print(f"{dev.label}: copy {c.copy_GBps:,.0f} GB/s, FP32 GEMM {c.fp32_TFLOPs:.2f} TFLOP/s", flush=True)
    rng = np.random.default_rng(0)
    rows = []
    for net, precision, N in todo:
        steps, costs, notes, model = build_case(net, precision, N, rng)
        bd = measure.breakdown([(name, "kernel", fn) for name, fn in steps], warmup=warmup, repeat=repeat)
        case = floor_rows(net, precision, N, steps, costs, ceil, bd, notes)
        rows += case
        floor, ms = sum(r["floor_ms"] for r in case), sum(r["measured_ms"] for r in case)
        print(f"{case_label(case[0])}: {len(case)} steps, {ms:.3f} ms measured, floor {floor:.3f} ms "
              f"({100 * floor / ms:.1f}%)", flush=True)
        if hasattr(model, "clear_plans"):
            model.clear_plans()
        del steps, model
        measure.release_gpu_memory()
    note = ("Times from CUDA events, each step alone." if gpu else
            "CPU executor: these times are the executor's on the host, not a GPU's; tiny sizes, FP32 only.")
    meta = {"benchmark": "roofline", "ceilings": ceil, "ceilings_measured": c.date,
            "ceilings_measured_with": c.measured_with, "tf32_ceiling": tf32, "repeat": repeat, "warmup": warmup,
            "quick": args.quick, "statistic": "median of the repeats, each step timed alone (labkit.measure.breakdown)",
            "note": note,
            "steps": "the network's plan steps (model.plan(N).steps), each one layer's call: mostly one kernel "
                     "launch; a split-K layer adds its reduction, a Winograd layer its weight transform or "
                     "reduction, within the same step; kernel names are not recorded (null)",
            "resnet": "the training step kernel by kernel (ResNetSmall.step_list, the 'small' rung): each "
                      "convolution's forward, backward data (the ReLU's gate, and the skip's gradient, fused) and "
                      "backward weight (with the bias gradient), the pooling, dense layer, loss and ReLU backward "
                      "kernels, and the SGD update; convolution FLOPs are the direct convolution's, whichever "
                      "kernel (direct or Winograd) runs it",
            "bytes": "the least: each input, weight and bias read once, each output written once (float32)",
            "flops": "multiply-adds as 2; one per element for pooling, sums and element-wise maps; fused bias "
                     "and activations not counted"}
    out = Path(args.out)
    tag = measure.device_tag()
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    rows = [{**r, "run_date": stamp} for r in rows]
    if args.merge and (out / f"roofline_{tag}.json").exists():
        old = measure.load_results(out / f"roofline_{tag}.json")
        kept = [{**r, "run_date": r.get("run_date", old["date"])} for r in old["rows"] if r["network"] not in args.nets]
        earlier = {**old["meta"].get("earlier_runs", {}), old["date"]: old["meta"].get("ceilings")}
        meta["earlier_runs"] = {d: c for d, c in earlier.items() if any(r["run_date"] == d for r in kept)}
        rows = kept + rows
    path = measure.save_rows(rows, out / f"roofline_{tag}.json", meta=meta)
    head = {"device": dev.label, "note": note, "date": stamp, **ceil}
    (out / f"roofline_{tag}.md").write_text(markdown(rows, head) + "\n")
    import matplotlib
    matplotlib.use("Agg")
    groups: dict[str, dict[str, float]] = {}
    for r in rows:
        groups.setdefault(case_label(r), {})[f"{r['step']} "] = r["percent_of_floor"]
    fig = plots.grouped_hbars(groups, title="% of the roofline floor, each step alone", xlabel="% of floor (log)",
                              log=True, ref=100.0, device=dev.label)
    png = plots.save_figure(fig, out / f"roofline_{tag}.png")
    print(f"wrote {path}, {out / f'roofline_{tag}.md'} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
