"""The host side of a CUDA program as an exercise: notebook 02b's ``exercises/02_host_code.cu``.

    v = check_host_program("exercises/02_host_code.cu")      # a Verdict, in words that teach

The program is whole (host and device code): the naive convolution is given, and the student writes
what the host does around it (cudaMalloc, cudaMemcpy, the launch and its grid, cudaGetLastError and
cudaDeviceSynchronize through a CHECK macro, two events around the launch, the copy back, cudaFree).
The check builds it for the CPU executor (labkit.cuda, on every machine: whole programs run there),
runs it under the memory check on a few sizes and seeds, and judges each run here, never inside it:

* the program makes its inputs from the seed on its command line with a small generator that
  ``inputs`` makes again, and writes y, raw float32, to the file its last argument names; this
  process computes the float64 answer (labkit.reference) and compares, so a program that only prints
  "PASS", or a right-looking sum, gets nothing;
* what went wrong is said in words: the compiler's message, a host pointer given to the kernel, a copy
  past an allocation, a use after cudaFree, a launch that failed and was not checked, an output never
  copied back (still the NaN the program put there), the first wrong element, no time printed;
* last, the student's code must make the calls the exercise is about (a launch of the kernel,
  cudaGetLastError, cudaDeviceSynchronize, cudaEventElapsedTime, cudaFree): a y computed on the host
  is right, and still not the exercise.

A grader hands the check a runner that builds and runs the program in its sandbox
(labkit.course.sandboxed.sandboxed_program_runner, labkit.course.program_runner); what comes back is
plain data (exit status, what was printed, the output's bytes) that this process judges.
"""
from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import cuda
from ..errors import KernelCompileError, UnsupportedOnCPU
from ..reference.layers import conv2d
from ..verdict import Verdict, describe_mismatch
from .regions import RegionError, regions

__all__ = ["KERNEL", "CASES", "ProgramRun", "ProgramOutcome", "inputs", "answer", "case_args", "run_cases",
           "judge_outcome", "check_host_program", "fresh_cases", "required_calls_missing"]

KERNEL = "conv_naive"
# (seed, N, C, H, W, M, K): the program's own default first, then odd sizes, one of them one block short
# of a whole number of blocks of 256 and one with a single output channel.
CASES = [(1, 3, 2, 13, 13, 5, 3), (7, 2, 3, 9, 11, 4, 3), (12345, 1, 4, 16, 21, 1, 5)]
# Each, with the words a student reads when the code never makes it (comments left out).
REQUIRED_CALLS = (
    (r"\b{kernel}\s*<<<", "a launch of the kernel ({kernel}<<<blocks, threads>>>(...)): y must come from the device"),
    (r"\bcudaMalloc\s*\(", "cudaMalloc (the device arrays)"),
    (r"\bcudaMemcpy\s*\(", "cudaMemcpy (the inputs in, y back)"),
    (r"\bcuda(?:GetLastError|PeekAtLastError)\s*\(",
     "cudaGetLastError right after the launch (a bad launch configuration is reported there and only there)"),
    (r"\bcudaDeviceSynchronize\s*\(", "cudaDeviceSynchronize (an error while the kernel ran is reported there)"),
    (r"\bcudaEventElapsedTime\s*\(", "cudaEventElapsedTime (the kernel's time, between two recorded events)"),
    (r"\bcudaFree\s*\(", "cudaFree (each device array, once, after its last use)"),
)
TIME_PRINTED = re.compile(r"\d(?:\.\d*)?\s*ms\b")
LAUNCH_REFUSED = re.compile(r"^labkit: kernel '[^']*': (?:launch with grid|a block of|grid \(|\d+ bytes of dynamic)")


@dataclass
class ProgramRun:
    """One run of the program: exit status, what it printed, and the bytes of y it wrote (None: none)."""
    returncode: int
    stdout: str
    stderr: str
    output: bytes | None


@dataclass
class ProgramOutcome:
    """A build (``compile_error``: the compiler's words, or None) and the runs, in the order of the cases;
    ``file_name``: the name the program was built under (the compiler's and the runtime's words use it)."""
    compile_error: str | None = None
    runs: list = field(default_factory=list)
    file_name: str | None = None


def _values(seed: int, n: int) -> np.ndarray:
    """The program's generator (next_value in 02_host_code.cu): n float32 values from ``seed``."""
    out = np.empty(n, np.float32)
    s = int(seed) & 0xFFFFFFFF
    for i in range(n):
        s = (s * 1664525 + 1013904223) & 0xFFFFFFFF
        out[i] = ((s >> 9) & 0xFFFF) / 32768.0 - 1.0
    return out


def inputs(seed: int, N: int, C: int, H: int, W: int, M: int, K: int) -> tuple[np.ndarray, np.ndarray]:
    """(x, k) as the program makes them from ``seed``: x (N, C, H, W), then k (M, C, K, K)."""
    nx, nk = N * C * H * W, M * C * K * K
    v = _values(seed, nx + nk)
    return v[:nx].reshape(N, C, H, W), v[nx:].reshape(M, C, K, K)


def answer(case: tuple) -> np.ndarray:
    """The float64 y of a case (seed, N, C, H, W, M, K)."""
    x, k = inputs(*case)
    return conv2d(x, k)


def case_args(case: tuple) -> list[str]:
    """The program's arguments for a case, less the output file's path."""
    return [str(int(v)) for v in case]


def _what(case: tuple) -> str:
    seed, N, C, H, W, M, K = case
    return f"run with seed {seed}, N={N} C={C} H={H} W={W} M={M} K={K}"


def run_cases(path: str | Path, cases, out_dir: str | Path, *, timeout: float = 120.0) -> ProgramOutcome:
    """Build ``path`` for the CPU executor (memory check) and run it on each case, y written into
    ``out_dir``: the outcome as plain data.  A run that fails still lets the next one run; a build that
    fails stops everything (the compiler's words)."""
    outcome = ProgramOutcome(file_name=Path(path).name)
    for i, case in enumerate(cases):
        out = Path(out_dir) / f"y{i}.bin"
        try:
            rc, stdout, stderr = cuda.run_program(path, case_args(case) + [str(out)], check="memory", timeout=timeout)
        except (KernelCompileError, UnsupportedOnCPU) as exc:
            outcome.compile_error = str(exc)
            return outcome
        expected = 4 * _y_count(case)
        data = None
        if out.is_file() and not out.is_symlink():
            with open(out, "rb") as f:
                data = f.read(expected + 1)      # one byte more: a file too long says so
        outcome.runs.append(ProgramRun(rc, stdout[-8000:], stderr[-8000:], data))
    return outcome


def _y_count(case: tuple) -> int:
    _, N, C, H, W, M, K = case
    return N * M * (H - K + 1) * (W - K + 1)


def _compiler_words(text: str, file_name: str) -> str:
    """The compiler's message, trimmed to the lines about the student's file (its errors first, each once)."""
    lines = [ln for ln in text.splitlines() if file_name in ln or ln.startswith((" ", "\t"))]
    errors = [ln for ln in lines if "error" in ln]
    keep = list(dict.fromkeys(errors or lines or text.splitlines()))[:12]
    return "\n".join(keep)


def _file_named(text: str, file_name: str) -> str:
    """``text`` with every path to the program's file cut to its name (a sandbox's or a temporary folder's)."""
    return re.sub(r"(?:[\w.+-]*/)+" + re.escape(file_name), file_name, text)


def _hint(labkit_line: str) -> str:
    if "is a host pointer" in labkit_line or "is not device memory" in labkit_line:
        return ("a kernel reads and writes device memory: give it the pointers cudaMalloc returned (d_x, d_k, d_y), "
                "and give cudaMemcpy the device pointer on its device side")
    if "bytes past" in labkit_line:
        return ("a cudaMemcpy copies bytes: elements * sizeof(float), and no more than the cudaMalloc of that array "
                "holds (was sizeof(float) left out of a cudaMalloc?)")
    if "already freed" in labkit_line or "already released" in labkit_line:
        return "free each device array once, after its last use (after y is copied back)"
    if "the kind says" in labkit_line:
        return "cudaMemcpy's last argument says which way: cudaMemcpyHostToDevice in, cudaMemcpyDeviceToHost back"
    if "ran longer than" in labkit_line:
        return "a loop that never ends? (a launch is waited for at the next synchronising call)"
    if "segmentation fault" in labkit_line:
        return "the host dereferenced a pointer it must not: a device pointer (d_y[i] on the host) or one past an array"
    if "never recorded" in labkit_line:
        return "record both events (cudaEventRecord(start) before the launch, cudaEventRecord(stop) after)"
    return ""


def judge_run(file_name: str, case: tuple, run: ProgramRun) -> Verdict | None:
    """None if the run is right, else the Verdict that says what went wrong, in words."""
    here = f"{file_name}: on the {_what(case)}"
    said = [ln for ln in run.stderr.splitlines() if ln.startswith("labkit")]
    refused = next((ln for ln in said if LAUNCH_REFUSED.match(ln)), None)
    caught = next((ln for ln in run.stderr.splitlines() if ln.startswith("CUDA error at")), None)
    if refused is not None:
        words = refused[len("labkit: "):]
        if run.returncode == 0:
            return Verdict(False, f"{here}: the launch failed ({words}), and the program went on as if it had "
                                  "worked: it did not check cudaGetLastError() right after the launch "
                                  "(CHECK(cudaGetLastError())), so y is whatever was there before")
        return Verdict(False, f"{here}: the launch failed ({words}); the program's check caught it"
                              + (f" ({caught})" if caught else "") + ": fix the launch's configuration")
    if said:
        line = said[0]
        if line.startswith("labkit memory check"):
            detail = [ln for ln in run.stderr.splitlines()[1:6] if ln.startswith("  ")]
            return Verdict(False, f"{here}: {line}" + ("\n" + "\n".join(detail) if detail else "")
                           + "\n(a host array read or written past its end: the counts of the copies?)")
        hint = _hint(line)
        return Verdict(False, f"{here}: {line}" + (f"\n{hint}" if hint else ""))
    if run.returncode != 0:
        if caught:
            return Verdict(False, f"{here}: the program stopped at a CHECK: {caught}")
        tail = " / ".join(run.stderr.strip().splitlines()[-3:])
        return Verdict(False, f"{here}: the program exited with status {run.returncode}" + (f": {tail}" if tail else ""))
    expected = 4 * _y_count(case)
    if run.output is None or len(run.output) != expected:
        got = "no" if run.output is None else f"{len(run.output)} bytes of"
        return Verdict(False, f"{here}: the program wrote {got} y, not {expected} bytes")
    y = np.frombuffer(run.output, np.float32).reshape(answer(case).shape)
    ref = answer(case)
    nan = np.isnan(y)
    if nan.all():
        return Verdict(False, f"{here}: no output came back from the device: every element of y still holds the "
                              "NaN the program put there before your code.  Copy d_y back into h_y after the kernel "
                              "(cudaMemcpy(h_y.data(), d_y, y_count * sizeof(float), cudaMemcpyDeviceToHost))")
    flat = nan.reshape(-1)
    first_nan = int(np.argmax(flat)) if flat.any() else None
    if first_nan is not None and flat[first_nan:].all() and not flat[:first_nan].any():
        if flat.size // 4 <= first_nan <= -(-flat.size // 4):
            return Verdict(False, f"{here}: only the first {first_nan} of {flat.size} elements of y came back, the "
                                  "rest is still the program's NaN: the copy back's byte count is "
                                  "y_count * sizeof(float), not y_count")
        return Verdict(False, f"{here}: the last {flat.size - first_nan} of {flat.size} elements of y were never "
                              f"written (still the program's NaN): the grid's threads cover only the first "
                              f"{first_nan}; round the number of blocks up: (y_count + threads - 1) / threads")
    wrong = describe_mismatch(y, ref, index="n, m, h, w")
    if wrong is not None:
        return Verdict(False, f"{here}: y is wrong:\n{wrong}\n(every input copied whole, each count "
                              "elements * sizeof(float)?  the kernel launched over every output?)")
    if not TIME_PRINTED.search(run.stdout):
        return Verdict(False, f"{here}: y is right, but the program printed no time in ms: record an event before "
                              "and after the launch, cudaEventSynchronize(stop), cudaEventElapsedTime(&ms, start, "
                              "stop), and print it (\"kernel: %.3f ms\")")
    return None


def _code_of(text: str) -> str:
    """The student's regions (the whole text where it has none), comments and string literals left out."""
    try:
        found = regions(text, "the program")
    except RegionError:
        found = []
    code = "\n".join("\n".join(lines) for _, lines in found) if found else text
    code = re.sub(r"/\*.*?\*/", " ", code, flags=re.S)
    code = re.sub(r"//[^\n]*", " ", code)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', code)


def _unanswered(text: str) -> bool:
    """Whether the student's regions hold nothing but the student copy's placeholder (comments only)."""
    try:
        found = regions(text, "the program")
    except RegionError:
        return False
    return bool(found) and not _code_of(text).strip()


def required_calls_missing(text: str, kernel: str = KERNEL) -> list[str]:
    """What the exercise asks for that the student's code never does (``kernel``: the one it launches), in words."""
    code = _code_of(text)
    return [words.replace("{kernel}", kernel) for pattern, words in REQUIRED_CALLS
            if not re.search(pattern.replace("{kernel}", re.escape(kernel)), code)]


def judge_outcome(file_name: str, text: str, cases, outcome: ProgramOutcome, kernel: str = KERNEL) -> Verdict:
    """The verdict on an outcome: the build, each run in order, then the calls the exercise asks for."""
    if outcome.compile_error is not None:
        built = outcome.file_name or file_name
        words = _file_named(_compiler_words(outcome.compile_error, built), built)
        return Verdict(False, f"{file_name}: does not compile:\n{words}")
    cases = list(cases)
    verdict = _judged(file_name, text, cases, outcome, kernel)
    verdict.message = _file_named(_file_named(verdict.message, file_name), outcome.file_name or file_name)
    return verdict


def _judged(file_name: str, text: str, cases: list, outcome: ProgramOutcome, kernel: str) -> Verdict:
    for i, case in enumerate(cases):
        if i >= len(outcome.runs):
            return Verdict(False, f"{file_name}: on the {_what(case)}: the program was not run (a run before it "
                                  "stopped the check)")
        wrong = judge_run(file_name, case, outcome.runs[i])
        if wrong is not None:
            return wrong
    missing = required_calls_missing(text, kernel)
    if missing:
        return Verdict(False, f"{file_name}: y is right, but your code never calls " + "; never calls ".join(missing))
    sizes = f"{len(cases)} sizes" if len(cases) != 1 else "one size"
    return Verdict(True, f"{file_name}: built and ran on the CPU executor under the memory check on {sizes}, "
                         "y right against the float64 reference, errors checked, time printed: True")


def _local_runner(path, cases, *, timeout: float) -> ProgramOutcome:
    with tempfile.TemporaryDirectory(prefix="labkit-host-") as tmp:
        return run_cases(path, cases, tmp, timeout=timeout)


def check_host_program(path: str | Path, kernel: str = KERNEL, *, cases=None, rng=None, runner=None,
                       timeout: float = 120.0) -> Verdict:
    """Build ``path`` (a whole program of 02_host_code.cu's command line) for the CPU executor, run it
    under the memory check on each of ``cases`` ((seed, N, C, H, W, M, K), default CASES; ``rng``: a
    fresh seed for each), and judge every run here against the float64 reference.  ``kernel``: the
    kernel the student's code must launch (the exercise's).  ``runner(path, cases)``: where the program
    is built and run (a grader's sandbox); the default runs it in a child process here."""
    cases = list(CASES if cases is None else cases)
    if rng is not None:
        cases = [(int(rng.integers(1, 2**31)),) + tuple(c[1:]) for c in cases]
    for c in cases:
        if len(c) != 7 or c[-1] < 1 or c[3] < c[-1] or c[4] < c[-1] or min(c[1:]) < 1:
            raise ValueError(f"a case is (seed, N, C, H, W, M, K) with H and W at least K, got {c!r}")
    p = Path(path)
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        return Verdict(False, f"{p.name}: cannot be read ({type(exc).__name__})")
    if _unanswered(text):
        return Verdict(False, f"{p.name}: not attempted: main() still says // YOUR CODE HERE between "
                              "// BEGIN YOUR CODE and // END YOUR CODE.  Write the host code there, then run "
                              "this check again.")
    outcome = runner(p, cases) if runner is not None else _local_runner(p, cases, timeout=timeout)
    if isinstance(outcome, Verdict):           # the runner's own refusal (a region it does not take, a limit)
        return outcome
    return judge_outcome(p.name, text, cases, outcome, kernel)


def _r(rng, lo: int, hi: int) -> int:
    return int(rng.integers(lo, hi + 1))


def fresh_cases(rng) -> list:
    """Three cases for one student, none of CASES: the first with several blocks of 256 outputs and a
    last block cut short, seeds drawn too."""
    out = []
    while len(out) < 3:
        K = int(rng.choice((1, 3, 5)))
        case = (_r(rng, 1, 2**31 - 1), _r(rng, 1, 3), _r(rng, 1, 4), _r(rng, K, K + 17), _r(rng, K, K + 17),
                _r(rng, 1, 6), K)
        n = _y_count(case)
        if case in CASES or case in out or (not out and (n <= 512 or n % 256 == 0)):
            continue
        out.append(case)
    return out
