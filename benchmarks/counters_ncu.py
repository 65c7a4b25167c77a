"""Nsight Compute's counters beside labkit.counters' (the CPU executor's), launch by launch.

    python benchmarks/counters_ncu.py                 # on a GPU machine with ncu: counters_h100.json
    python benchmarks/counters_ncu.py --dry-run       # anywhere: the executor's side, the ncu commands
    python benchmarks/counters_ncu.py --recount benchmarks/results/counters_h100.json
                                                      # anywhere: stored ncu values vs the executor now
    python benchmarks/counters_ncu.py --cases ladder/naive gemm/tiled

For every case (the ladder's rungs on the seed model's second layer, the GEMM ladder, layer kernels,
the exercise kernels) the executor counts each launch the case makes (labkit.counters), then ncu
profiles the same launches on the GPU with exactly labkit.counters' metrics: the case runs once
unprofiled (compilation, autotuning, caches), then once between cudaProfilerStart and Stop, which
ncu alone profiles (--profile-from-start off).  Writes, in --out:

    counters_<device>.json            device, ncu's version, per launch: the executor's and ncu's values
    counters_<device>_comparison.md   and .json: per metric, executor vs ncu, within 10%?, and why not

--dry-run runs everything but ncu (the executor's counts, the comparison with ncu's values missing)
and prints the ncu command of each case; its files are named counters_dry_run*.

Both sides must run the same launches: the shipped tables of tuned configurations and autotuning are
off on both (SAME_LAUNCHES; the GPU's side with an empty autotuning cache), so every op takes its
default configuration.  A launch whose grid or block still differs is flagged, not compared.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import labkit  # noqa: E402
from labkit.measure.counters import METRICS  # noqa: E402
from labkit.measure.counters import DRAM_READ, DRAM_WRITE  # noqa: E402
from labkit.shapes import SEED_LAYERS, ConvLayer  # noqa: E402

HERE = Path(__file__).resolve().parent
# No per-GPU tuned configuration on either side: the executor's machine is not the GPU.
SAME_LAUNCHES = {"LABKIT_SHIPPED_TABLES": "0", "LABKIT_AUTOTUNE": "0"}
TOLERANCE = 0.10
BATCH = 2
# Why the executor's model and the hardware may differ, per metric family (the comparison quotes it
# where a value is off by more than TOLERANCE).  Longest prefix first.
WHY = {
    "l1tex__t_": "the executor's code is the host compiler's, not nvcc's: an access nvcc merges (a vector load) "
                 "or splits, or a load it keeps in a register across a loop, changes the requests",
    "l1tex__data_": "the same accesses as global ones, and shared loads merged into vector loads as the executor "
                    "sees the alignment at run time, where nvcc must prove it at compile time",
    "smsp__sass_": "the host compiler's arithmetic, not nvcc's: the maths GPU_EXPANSION models (division, sqrtf, "
                   "expf, logf, __expf, __fdividef) counts as nvcc's sequences for a normal argument; other maths "
                   "calls are not counted (the record's notes say how many ran)",
    "dram__bytes_read": "the executor counts compulsory reads of the kernel's arrays (each sector once); ncu flushes "
                        "the caches before each profiled launch (--cache-control all, its default), so the GPU also "
                        "reads from DRAM what the executor does not count: the kernel's code, its parameters and "
                        "__constant__ data",
    "dram__bytes_write": "the executor counts compulsory writes, what reaches DRAM in the end; ncu counts the "
                         "launch's own: its writes stay in the L2 (write-back) and reach DRAM after it, where the "
                         "footprint fits (the L2-resident column)",
}
# What the analysis of each remaining difference found (case, metric prefix or a tuple of prefixes, as
# str.startswith takes them): quoted on its rows.
KNOWN = {
    ("ladder/tiled", "l1tex__t_"): (
        "lanes matched by execution, not by loop iteration: in the tile-loading loop, lanes whose first element "
        "is past the input's edge skip that load, and the executor pairs their second iteration's load with the "
        "others' first (a simulation of the loop gives ncu's counts when matched by iteration)"),
    ("ladder/constant", "l1tex__t_"): (
        "lanes matched by execution, not by loop iteration: in the tile-loading loop, lanes whose first element "
        "is past the input's edge skip that load, and the executor pairs their second iteration's load with the "
        "others' first (a simulation of the loop matched by iteration gives ncu's 6528 requests, 24384 sectors)"),
    ("ladder/constant", ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st",
                         "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st")): (
        "not the addresses: each store instruction's lanes write consecutive words (conflict-free, as on "
        "conv_tiled, whose identical stores ncu counts without it), and the hardware's count changes from run "
        "to run of the same launch: three more H200 runs gave 0, 1 and 3 store conflicts (9984-9987 "
        "wavefronts), conv_tiled's 0 each time"),
    ("ladder/tuned", "dram__bytes_read"): (
        "the rungs' largest excess over the compulsory reads (137 KB; the others' 3-37 KB): conv_tuned_const is "
        "unrolled completely (4800 FFMAs a thread, each a 16-byte instruction with a __constant__ operand: some "
        "80 KB of code, an estimate from the source, the SASS not measured) and reads 9.6 KB of __constant__ "
        "weights, all of it from DRAM after ncu's cache flush"),
    ("ladder/implicit", ("l1tex__t_requests_pipe_lsu_mem_global_op_st",
                         "l1tex__t_sectors_pipe_lsu_mem_global_op_st")): (
        "nvcc splits the epilogue's float4 store into four 4-byte stores (its PTX for sm_90 has st.global.f32 "
        "at +0, +4, +8, +12 and no st.global.v4: the selects of the epilogue scalarize the vector), where the "
        "host compiler keeps one 16-byte store: 4x the requests, and the sectors of each counted 4 times. A "
        "trial with the store written as __stwb (one st.global.v4) gave ncu's 88 and 1392 exactly, but ran "
        "MobileNetV2's 1x1 layers 0-44% slower (most 2-20%) in its one roofline run (tiles searched afresh), "
        "so it is not in the kernel"),
    ("layer/max_pool2d", ("l1tex__t_requests_pipe_lsu_mem_global_op_ld",
                          "l1tex__t_sectors_pipe_lsu_mem_global_op_ld")): (
        "the H100's values are of the kernel before the layer's sizes were compiled in, which loaded each "
        "window's first element twice (5 loads a 2x2 window); the H200's, of the kernel now, are 4 a window, as "
        "the executor counts"),
    ("layer/softmax_held", "smsp__sass_thread_inst_executed_op_fadd"): (
        "not traced: the SASS of softmax_rows_held (SM_G 4, SM_VPL 3) that nvcc 13 makes offline for sm_90 "
        "has 42 FADDs a row of this case, what the executor counts (2688 for 64 rows), and ncu counted 54 a "
        "row; the profiled code was NVRTC's (CuPy), not compared instruction by instruction yet"),
    ("layer/softmax", "smsp__sass_"): (
        "the kernel's 1280 expf and 640 divisions count as nvcc's sequences (FFMA and FMUL exact); the 128 FADDs "
        "more (1%) are not traced to an instruction"),
}
# The L2 of the GPU each device name has (bytes): the L2-resident model's size.
L2_BYTES = {"H100": 50 * 2**20, "H200": 50 * 2**20}
DRAM = (DRAM_READ, DRAM_WRITE)


def _rng_arrays(*shapes):
    rng = np.random.default_rng(0)
    return [labkit.xp.asarray(rng.standard_normal(s, dtype=np.float32)) for s in shapes]


def _ladder(variant: str):
    L = SEED_LAYERS["layer 2"]

    def case():
        x, w, b = _rng_arrays((BATCH, L["C"], L["H"], L["W"]), (L["M"], L["C"], L["K"], L["K"]), (L["M"],))
        if variant == "implicit":
            # The default tiles and one slice of K on both sides: on a GPU the layer would take smaller
            # tiles and split K among blocks where its tiles make few blocks (tiles_at and splits_at count
            # the GPU's SMs), and the executor has no SMs to count.
            layer = ConvLayer(L["C"], L["H"], L["W"], L["M"], L["K"])
            tiles = labkit.ops.implicit.ImplicitConv2d(w, b, layer).tiles
            labkit.ops.implicit.ImplicitConv2d(w, b, layer, tiles=tiles)(x, splits=1)
        else:
            labkit.conv2d(x, w, b, variant=variant)
    return case


def _gemm(variant: str):
    def case():
        a, b = _rng_arrays((96, 80), (80, 112))
        labkit.ops.gemm.gemm(a, b, variant=variant)
    return case


def _max_pool():
    x, = _rng_arrays((BATCH, 16, 18, 18))
    labkit.ops.pool_softmax.max_pool2d(x, 2)


def _softmax():
    # softmax_rows, the warp-per-row loop, launched by name: labkit.ops.pool_softmax.softmax now runs rows
    # of up to MAX_HELD_ROW values on softmax_rows_held, and this case's ncu counts (counters_h100.json)
    # are softmax_rows'.  softmax_rows_held is the next case's.
    x, = _rng_arrays((64, 10))
    y = labkit.xp.empty_like(x)
    labkit.load("pool_softmax").get_function("softmax_rows")((8,), (256,), (x, y, np.int32(64), np.int32(10)))


def _softmax_held():
    # softmax_rows_held: a row's values held in registers by a group of lanes (rows of up to MAX_HELD_ROW).
    x, = _rng_arrays((64, 10))
    labkit.ops.pool_softmax.softmax(x)


def _vector_add():
    n = 10_000
    x, y = _rng_arrays((n,), (n,))
    f = labkit.load("vector_add").get_function("vector_add")
    f(((n + 255) // 256,), (256,), (x, y, np.float32(2.0), np.int32(n)))


def _block_sum():
    n = 4096
    x, partial = _rng_arrays((n,), (n // 256,))
    labkit.load("find_the_bug").get_function("block_sum")((n // 256,), (256,), (x, partial, np.int32(n)))


CASES = {**{f"ladder/{v}": _ladder(v) for v in ("naive", "tiled", "constant", "tuned", "unrolled", "implicit")},
         **{f"gemm/{v}": _gemm(v) for v in labkit.ops.gemm.VARIANTS},
         "layer/max_pool2d": _max_pool, "layer/softmax": _softmax, "layer/softmax_held": _softmax_held,
         "exercise/vector_add": _vector_add, "exercise/block_sum": _block_sum}


def same_launches():
    """SAME_LAUNCHES set in this process while inside (and as they were afterwards)."""
    return mock.patch.dict(os.environ, SAME_LAUNCHES)


def executor_counts(name: str) -> list[dict]:
    """labkit.counters' records of one case (the CPU executor, whatever the machine)."""
    with same_launches():
        return [{k: v for k, v in r.items() if k != "notes"} for r in labkit.counters(CASES[name])]


def ncu_command(name: str) -> list[str]:
    """The ncu command that profiles case `name`'s launches (this script, --launch-case, on the GPU)."""
    return ["ncu", "--metrics", ",".join(METRICS), "--csv", "--print-units", "base", "--profile-from-start", "off",
            "--target-processes", "all", sys.executable, str(Path(__file__).resolve()), "--launch-case", name]


def launch_case(name: str) -> None:
    """Run case `name` on the GPU twice, the second time between cudaProfilerStart and Stop (ncu's child)."""
    import cupy
    os.environ[labkit.backends.ENV_VAR] = "cuda"    # ncu's child: SAME_LAUNCHES come with its environment
    CASES[name]()
    cupy.cuda.runtime.deviceSynchronize()
    cupy.cuda.profiler.start()
    CASES[name]()
    cupy.cuda.runtime.deviceSynchronize()
    cupy.cuda.profiler.stop()


def parse_ncu_csv(text: str) -> list[dict]:
    """ncu's --csv report as one dict per profiled launch, in launch order: kernel, grid, block, metrics."""
    start = text.find('"ID"')
    if start < 0:
        raise RuntimeError("ncu wrote no metrics (no kernel was profiled?):\n" + text[-2000:])
    launches: dict[str, dict] = {}
    for row in csv.DictReader(io.StringIO(text[start:])):
        rec = launches.setdefault(row["ID"], {"kernel": row["Kernel Name"],
                                               "grid": row.get("Grid Size", ""), "block": row.get("Block Size", "")})
        value = row["Metric Value"].replace(",", "")
        try:
            rec[row["Metric Name"]] = float(value) if "." in value else int(value)
        except ValueError:
            rec[row["Metric Name"]] = None
    return [launches[k] for k in sorted(launches, key=int)]


def ncu_counts(name: str) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="labkit-counters-") as cache:     # no autotuning winners
        env = {**os.environ, **SAME_LAUNCHES, "LABKIT_CACHE_DIR": cache}
        out = subprocess.run(ncu_command(name), capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"ncu failed on {name} (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return parse_ncu_csv(out.stdout)


def _base_name(kernel: str) -> str:
    """A kernel's name without template arguments or parameters (ncu and the executor spell those apart)."""
    return kernel.split("(")[0].split("<")[0].strip()


def pair(executor: list[dict], ncu: list[dict]) -> list[dict]:
    """For each executor launch, ncu's launch of the same kernel that comes next in order ({} where
    none): the GPU run may launch kernels the executor does not count (a library's own)."""
    out, k = [], 0
    for ex in executor:
        j = next((j for j in range(k, len(ncu)) if _base_name(ncu[j]["kernel"]) == _base_name(ex["kernel"])), None)
        out.append({} if j is None else ncu[j])
        k = k if j is None else j + 1
    return out


def _dims(v) -> tuple[int, ...]:
    """A grid or block as ints: the executor's (2, 16, 4) and ncu's "(2, 16, 4)" alike."""
    return tuple(int(d) for d in re.findall(r"\d+", str(v)))


def _why(case: str, metric: str) -> str:
    known = next((w for (c, p), w in KNOWN.items() if c == case and metric.startswith(p)), None)
    return known or next((w for p, w in sorted(WHY.items(), key=lambda kv: -len(kv[0])) if metric.startswith(p)), "")


def l2_bytes_of(device: str) -> int | None:
    return next((b for name, b in L2_BYTES.items() if name in device), None)


def compare(cases: list[dict], l2_bytes: int | None = None) -> list[dict]:
    """One row per launch and metric: the executor's value, ncu's, their relative difference, whether
    it is within TOLERANCE, and why they differ where they do (or where ncu's is missing).  With
    `l2_bytes` (the GPU's L2), DRAM rows also carry the L2-resident model's value (labkit.measure.
    counters.l2_resident) and whether ncu's is within TOLERANCE of it."""
    rows = []
    for case in cases:
        ncu = case.get("ncu") or []
        for i, (ex, hw) in enumerate(zip(case["executor"], pair(case["executor"], ncu))):
            other_launch = bool(hw) and any(k in hw and _dims(hw[k]) and _dims(hw[k]) != _dims(ex[k])
                                            for k in ("grid", "block"))
            l2 = (labkit.measure.counters.l2_resident(ex, l2_bytes)
                  if l2_bytes and all(isinstance(ex.get(m), int) for m in DRAM) else {})
            for metric in METRICS:
                e, n = ex.get(metric), hw.get(metric)
                diff = None if e is None or n is None or other_launch else abs(e - n) / max(abs(n), 1)
                ok = None if diff is None else diff <= TOLERANCE
                why = "" if diff == 0 else _why(case["case"], metric)
                if n is None:
                    why = "no ncu value" + (" (dry run)" if not ncu else "")
                elif e is None:
                    why = "not counted by the executor here (see the record's notes)"
                elif other_launch:
                    why = (f"not the same launch: the GPU ran grid {hw.get('grid')} block {hw.get('block')}, the "
                           f"executor grid {tuple(ex['grid'])} block {tuple(ex['block'])}")
                row = {"case": case["case"], "launch": i, "kernel": ex["kernel"], "metric": metric,
                       "executor": e, "ncu": n, "rel_diff": diff, "within_10pct": ok, "why": why}
                if metric in l2:
                    row["l2_resident"] = l2[metric]
                    row["l2_within_10pct"] = (None if n is None or other_launch
                                              else abs(l2[metric] - n) / max(abs(n), 1) <= TOLERANCE)
                rows.append(row)
    return rows


def summary(rows: list[dict]) -> list[str]:
    """Per metric: compared values, equal, within TOLERANCE (markdown table lines)."""
    lines = ["| metric | compared | equal | within 10% |", "|---|---|---|---|"]
    for metric in METRICS:
        rs = [r for r in rows if r["metric"] == metric and r["within_10pct"] is not None]
        lines.append(f"| `{metric}` | {len(rs)} | {sum(r['rel_diff'] == 0 for r in rs)} | "
                     f"{sum(bool(r['within_10pct']) for r in rs)} |")
    rs = [r for r in rows if r["within_10pct"] is not None]
    lines.append(f"| all | {len(rs)} | {sum(r['rel_diff'] == 0 for r in rs)} | "
                 f"{sum(bool(r['within_10pct']) for r in rs)} |")
    return lines


def markdown(rows: list[dict], device: str, provenance: list[str] = ()) -> str:
    l2 = [r for r in rows if r.get("l2_within_10pct") is not None]
    lines = [f"# labkit.counters (CPU executor) vs Nsight Compute on {device}", "", *provenance,
             f"Within {TOLERANCE:.0%}: {sum(1 for r in rows if r['within_10pct'])} of "
             f"{sum(1 for r in rows if r['within_10pct'] is not None)} compared values.", "", *summary(rows), ""]
    if l2:
        lines += [f"DRAM, the L2-resident model (labkit.measure.counters.l2_resident: compulsory reads; writes "
                  f"only beyond the L2's size) against ncu: {sum(bool(r['l2_within_10pct']) for r in l2)} of "
                  f"{len(l2)} within {TOLERANCE:.0%} (writes: "
                  f"{sum(bool(r['l2_within_10pct']) for r in l2 if r['metric'] == DRAM[1])} of "
                  f"{sum(1 for r in l2 if r['metric'] == DRAM[1])}).", ""]
    lines += ["| case | launch | kernel | metric | executor | ncu | diff | within 10% | L2-resident model | why not equal |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        diff = ("" if r["rel_diff"] is None else "ncu 0" if r["ncu"] == 0 and r["executor"] != 0
                else f"{r['rel_diff']:.1%}")
        ok = {True: "yes", False: "no", None: "-"}[r["within_10pct"]]
        l2v = "" if "l2_resident" not in r else (f"{r['l2_resident']} "
                                                  f"({ {True: 'within 10%', False: 'off', None: '-'}[r['l2_within_10pct']]})")
        lines.append(f"| {r['case']} | {r['launch']} | {r['kernel']} | `{r['metric']}` | {r['executor']} | "
                     f"{'' if r['ncu'] is None else r['ncu']} | {diff} | {ok} | {l2v} | {r['why']} |")
    return "\n".join(lines) + "\n"


def recount(stored: Path, out: Path, names: list[str] | None) -> list[dict]:
    """The comparison again from a stored run's ncu values (`stored`: a counters_<device>.json) and the
    executor's counts made now: after a change to the executor, no GPU needed.  Writes
    <stem>_comparison.json and .md beside `out`, saying which side was counted when."""
    data = json.loads(stored.read_text())
    cases = [{"case": c["case"], "executor": executor_counts(c["case"]), "ncu": c.get("ncu")}
             for c in data["cases"] if not names or c["case"] in names]
    for c in cases:
        print(f"{c['case']}: {len(c['executor'])} launch(es) recounted")
    rows = compare(cases, l2_bytes_of(data["device"]))
    today = time.strftime("%Y-%m-%d")
    host = labkit.backends.cpu.compiler.compiler()[1]
    provenance = [f"ncu side: {stored.name}, profiled on {data.get('date', 'an unrecorded date')} with ncu "
                  f"{data.get('ncu_version')}.  Executor side: recounted on {today}, after that run (the executor's "
                  f"counts in {stored.name} are the ones made beside the profiler then), by benchmarks/"
                  f"counters_ncu.py --recount, compiled by {host}.", ""]
    stem = stored.stem
    out.mkdir(parents=True, exist_ok=True)
    meta = {"device": data["device"], "ncu_version": data.get("ncu_version"), "ncu_date": data.get("date"),
            "executor_recounted": today, "executor_compiler": host, "ncu_source": stored.name}
    (out / f"{stem}_comparison.json").write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")
    (out / f"{stem}_comparison.md").write_text(markdown(rows, data["device"], provenance))
    print(f"wrote {out / stem}_comparison.json and .md")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--cases", nargs="*", help=f"any of {', '.join(CASES)} (default: all)")
    ap.add_argument("--dry-run", action="store_true", help="everything but ncu: the executor's counts, the commands")
    ap.add_argument("--name", default="h100", help="the device part of the file names (default: h100)")
    ap.add_argument("--recount", metavar="JSON", help="no ncu: the comparison again from a stored run's ncu values "
                                                      "(a counters_<device>.json) and the executor's counts now")
    ap.add_argument("--launch-case", help=argparse.SUPPRESS)     # ncu's child: run one case on the GPU
    args = ap.parse_args(argv)
    if args.launch_case:
        launch_case(args.launch_case)
        return 0
    names = args.cases or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    if args.recount:
        stored = Path(args.recount)
        if not stored.is_file():
            ap.error(f"--recount: no such file {stored}")
        recount(stored, Path(args.out), args.cases)
        return 0
    if not args.dry_run:
        if shutil.which("ncu") is None:
            ap.error("ncu (Nsight Compute) is not on PATH: install it, or run with --dry-run")
        if labkit.backends.cuda_unavailable():
            ap.error(f"no GPU: {labkit.backends.cuda_unavailable()}; run with --dry-run")
    device, ncu_version = "dry run (no GPU profiled)", None
    if not args.dry_run:
        with labkit.backends.use("cuda"):
            device = labkit.device().label
        version = subprocess.run(["ncu", "--version"], capture_output=True, text=True).stdout.strip()
        ncu_version = version.splitlines()[-1] if version else "unknown"
    cases = []
    for name in names:
        entry = {"case": name, "executor": executor_counts(name)}
        if args.dry_run:
            print("would run:", " ".join(ncu_command(name)))
        else:
            entry["ncu"] = ncu_counts(name)
        cases.append(entry)
        print(f"{name}: {len(entry['executor'])} launch(es) counted")
    stem = "counters_dry_run" if args.dry_run else f"counters_{args.name}"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = compare(cases, l2_bytes_of(device))
    meta = {"device": device, "ncu_version": ncu_version, "metrics": list(METRICS), "batch": BATCH,
            "environment": SAME_LAUNCHES, "date": time.strftime("%Y-%m-%d")}
    (out / f"{stem}.json").write_text(json.dumps({**meta, "cases": cases}, indent=1, default=list) + "\n")
    (out / f"{stem}_comparison.json").write_text(json.dumps({"device": device, "rows": rows}, indent=1) + "\n")
    (out / f"{stem}_comparison.md").write_text(markdown(rows, device))
    print(f"wrote {out / stem}.json, {stem}_comparison.json and {stem}_comparison.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
