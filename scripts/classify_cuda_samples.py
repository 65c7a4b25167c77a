"""Runs NVIDIA's cuda-samples, unchanged, on the CPU executor (labkit.cuda) and classifies each one.

    python scripts/classify_cuda_samples.py path/to/cuda-samples/Samples [--timeout 150] [--only a,b]
        [folders ...]    (default: 0_Introduction 1_Utilities 2_Concepts_and_Techniques 3_CUDA_Features
                          6_Performance)
    python scripts/classify_cuda_samples.py --each-file path/to/llm.c/dev/cuda [--timeout 300]
                         (each .cu file of the folder one program, sharing the folder's headers)

One line per sample: PASS, FAIL (it ran: a non-zero exit status or a failure message), REFUSED (the
executor names what it does not model, before compiling), COMPILE_FAIL, or TOO_SLOW (stopped after the
timeout, or one of its launches after the executor's limit per launch); then the count of each among the
samples in scope.  Out of scope are samples that need what
a CPU cannot stand in for at all: graphics (OpenGL, EGL, Direct3D, Vulkan), textures and surfaces,
the driver API (cu* calls, NVRTC), several GPUs or processes (peer access, IPC, MPI) -- recognised by
the executor's refusal.

A sample passes when it exits with 0, prints none of the failure words, and prints its own pass line
(Test passed, PASSED, Result = PASS, ...) -- or, where its source has no such line (the Monte Carlo
samples print their error against a tolerance and report a miss in words), exits with 0 and prints
no failure words.  A program stopped for time after it printed its pass line and no failure words
is PASS_STOPPED: its checks passed, and what it went on to do (llm.c's dev/cuda programs time each
kernel a thousand times at full size, a GPU's benchmark) did not end within the timeout.
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from labkit.cuda import run_program  # noqa: E402
from labkit.errors import KernelCompileError, UnsupportedOnCPU  # noqa: E402

FOLDERS = ["0_Introduction", "1_Utilities", "2_Concepts_and_Techniques", "3_CUDA_Features", "6_Performance"]
OUT_OF_SCOPE = re.compile(r"graphics interop|GL/|EGL|textures|the CUDA driver API|peer access|inter-process|"
                          r"several GPUs|"
                          r"<mpi\.h>|<nvrtc|[Vv]ulkan|[Dd]3[Dd]")
# Samples about textures, several GPUs or processes, whatever the first thing refused in them is.
OUT_OF_SCOPE_NAMES = re.compile(r"Texture|P2P|IPC|MPI|MGPU")
PASS_WORDS = re.compile(r"\b[Aa]ll results match\b|"
                        r"\b[Pp]assed\b|\bPASSED\b|Result = PASS|returned OK|\b[Ss]uccess\b|\b0 Failures\b|\bPASS\b")
FAIL_WORDS = re.compile(r"[Tt]est [Ff]ailed|\bFAILED\b|does not match|Result = FAIL|\b[Mm]ismatch\b|\b(?:waived|WAIVED)\b")


def source_has_pass_line(folder: Path) -> bool:
    files = [folder] if folder.is_file() else \
        [p for p in folder.rglob("*") if p.suffix in (".cu", ".cpp", ".h", ".cuh")]
    text = "".join(p.read_text(errors="replace") for p in files)
    return any(PASS_WORDS.search(lit) for lit in re.findall(r'"(?:[^"\\\n]|\\.)*"', text))


def classify(folder: Path, timeout: float) -> tuple[str, str]:
    t = time.time()
    try:
        rc, out, err = run_program(folder, timeout=timeout, cwd=folder.parent if folder.is_file() else folder)
    except UnsupportedOnCPU as e:
        what = re.sub(r"^\S+?:\d+:? ", "", str(e)).split(", which")[0].split(" that the CPU")[0]
        out = OUT_OF_SCOPE.search(str(e)) or OUT_OF_SCOPE_NAMES.search(folder.name)
        return ("OUT_OF_SCOPE" if out else "REFUSED"), what[:100]
    except KernelCompileError as e:
        first = next((ln for ln in str(e).splitlines() if "error" in ln), str(e).splitlines()[0] if str(e) else "")
        return "COMPILE_FAIL", first.strip()[:160]
    except (FileNotFoundError, ValueError) as e:
        return "COMPILE_FAIL", str(e)[:160]
    dt = time.time() - t
    if rc == 124:
        if PASS_WORDS.search(out) and not FAIL_WORDS.search(out):
            return "PASS_STOPPED", f"its pass line, then stopped after {timeout:g} s"
        return "TOO_SLOW", f"stopped after {timeout:g} s"
    text = out + err
    if rc != 0 and re.search(r"watchdog: kernel '\w+' ran longer than", err):
        return "TOO_SLOW", "one launch ran past the executor's limit per launch (LABKIT_CPU_TIMEOUT_S)"
    if rc != 0 or FAIL_WORDS.search(out):
        tail = " / ".join(ln.strip() for ln in text.strip().splitlines()[-2:])
        return "FAIL", f"exit {rc}: {tail[:160]}"
    if PASS_WORDS.search(out) or not source_has_pass_line(folder):
        return "PASS", f"{dt:.0f} s"
    return "FAIL", "exit 0 without its pass line"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("samples", type=Path)
    ap.add_argument("--each-file", action="store_true", help="each .cu file of the folder given is a program")
    ap.add_argument("folders", nargs="*", default=FOLDERS)
    ap.add_argument("--timeout", type=float, default=150)
    ap.add_argument("--only", default="", help="sample names, separated by commas")
    ns = ap.parse_args()
    only = {s for s in ns.only.split(",") if s}
    counts: dict[str, int] = {}
    groups = [] if ns.each_file else ns.folders
    if ns.each_file:
        for f in sorted(ns.samples.glob("*.cu")):
            if only and f.stem not in only:
                continue
            verdict, why = classify(f, ns.timeout)
            counts[verdict] = counts.get(verdict, 0) + 1
            print(f"{verdict} {f.name} | {why}", flush=True)
    for group in groups:
        for folder in sorted(p for p in (ns.samples / group).iterdir() if p.is_dir()):
            if only and folder.name not in only:
                continue
            verdict, why = classify(folder, ns.timeout)
            counts[verdict] = counts.get(verdict, 0) + 1
            print(f"{verdict} {folder.name} | {why}", flush=True)
    scope = sum(n for v, n in counts.items() if v != "OUT_OF_SCOPE")
    print(f"in scope: {scope}; " + ", ".join(f"{v} {n}" for v, n in sorted(counts.items())), flush=True)


if __name__ == "__main__":
    main()
