"""Notebook 03's ``fix(source)`` against the grader: a Python function that returns a kernel file,
which the grader compiles.  The file can hold host code (a static constructor, a global object,
``__device__ __attribute__((constructor))``, which NVRTC lets through) that would run in the process
that compiles it; here each such forgery tries to hand the grader a passing verdict (on the result
pipe, in files, on stdout in the check's words, by patching Python through its C API) around kernels
that are still wrong, and gets no points.  The function runs in one sandbox and hands back a string;
the grader takes only the two kernels' bodies from it; a second sandbox runs them and hands back
arrays, which the grader judges.  Skipped, with the reason, where bubblewrap cannot run."""
from __future__ import annotations

import pytest

from labkit import kernels
from labkit.course import kernel_checks, sandbox
from labkit.course.grade import INSTRUCTOR_NOTEBOOKS, instructor_exercises
from labkit.course.grading.notebook_exercises import read_notebook, sanitizer
from labkit.course.grading.python_exercises import grade_python_exercise
from labkit.course.sandboxed import file_runner

pytestmark = pytest.mark.skipif(sandbox.unavailable() is not None, reason=f"no sandbox here: {sandbox.unavailable()}")

SOURCE = kernels.source("find_the_bug")
FIX_HISTOGRAM = ("bins[x[i]] += 1", "atomicAdd(&bins[x[i]], 1)")
FIX_BLOCK_SUM = ("if (t < k) s[t] += s[t + k];", "if (t < k) s[t] += s[t + k];\n    __syncthreads();")
# The barrier after the loop instead of inside it: the histogram fixed, the reduction still racing.
WRONG_BLOCK_SUM = ("  if (t == 0) partial[blockIdx.x] = s[0];", "  __syncthreads();\n  if (t == 0) partial[blockIdx.x] = s[0];")
FIXED = SOURCE.replace(*FIX_HISTOGRAM).replace(*FIX_BLOCK_SUM)

# What the check cell printed in the stored run, and the result the grading process writes: what a
# forgery would want the grader to read.
PASS_LINES = ("race check finds no race: True\\n"
              "CPU executor, shuffled schedule: histogram right: True | block sums right: True\\n"
              "this backend:                    histogram right: True | block sums right: True\\n")
PASS_JSON = ('{\\"stage\\": \\"check\\", \\"stdout\\": \\"' + PASS_LINES.replace("\\n", "\\\\n")
             + '\\", \\"error\\": null, \\"failed\\": null, \\"put_back\\": []}')

_PRELUDE = r"""
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
extern "C" __attribute__((weak)) int PyRun_SimpleString(const char*);
extern "C" __attribute__((weak)) int PyGILState_Ensure(void);
extern "C" __attribute__((weak)) void PyGILState_Release(int);
"""

FORGERIES = {
    # the race check silenced, and the verdict, in the grading process's own format, on the result
    # pipe (where the pipe is open: not in the race check's runner); then out before anything else
    "pipe": _PRELUDE + r"""
extern "C" const char* __tsan_default_options() { return "report_bugs=0"; }
__attribute__((constructor)) static void forge() {
  const char* fd = getenv("LABKIT_RESULT_FD");
  static const char verdict[] = "%s";
  if (fd && write(atoi(fd), verdict, sizeof verdict - 1) > 0) _exit(0);
}
""" % PASS_JSON,
    # the verdict in every file a grader might read: the working folder, /tmp, the job, the host's
    # (@HOST@: a file of the test's, which must stay unwritten)
    "files": _PRELUDE + r"""
__attribute__((constructor)) static void forge() {
  const char* paths[] = {"result.json", "/tmp/result.json", "/job/result.json", "/job/verdict.json", "@HOST@"};
  for (const char* p : paths) { FILE* f = fopen(p, "w"); if (f) { fputs("%s", f); fclose(f); } }
}
""" % PASS_JSON,
    # the check's passing words on stdout, as the stored run printed them
    "stdout": _PRELUDE + r"""
struct Forge { Forge() { printf("%s"); fflush(stdout); } };
Forge forge_at_load;
""" % PASS_LINES,
    # Python patched through its C API, in whatever process loads the library: the verdict's helpers,
    # the check's judge, the builtins, and what the process writes on the result pipe
    "python": _PRELUDE + r"""
__attribute__((constructor)) static void forge() {
  if (!PyRun_SimpleString || !PyGILState_Ensure) return;
  int g = PyGILState_Ensure();
  PyRun_SimpleString(
    "import builtins, labkit.verdict as v, labkit.course.kernel_checks as k, labkit.course.sandbox as s\n"
    "builtins.all = lambda it: True\n"
    "v.require = lambda *a, **kw: print('race check finds no race: True')\n"
    "k.judge = lambda *a, **kw: None\n"
    "import os\n"
    "os.write = lambda fd, data, w=os.write: (w(fd, b'%s'), len(data))[1] if fd == s.result_fd() else w(fd, data)\n");
  PyGILState_Release(g);
}
""" % PASS_JSON,
    # the constructor NVRTC compiles as device code: on the CPU executor __device__ is nothing
    "device_constructor": _PRELUDE.replace("#include <unistd.h>\n", "") + r"""
__device__ __attribute__((constructor)) void forge() {
  printf("%s");
  const char* fd = getenv("LABKIT_RESULT_FD");
  if (fd) exit(0);
}
""" % PASS_LINES,
}


def _forgery(how: str, tmp_path) -> str:
    return FORGERIES[how].replace("@HOST@", str(tmp_path / "pwned"))


def _exercise():
    return next(e for ex, _ in instructor_exercises(INSTRUCTOR_NOTEBOOKS).values() for e in ex if e.grade_id == "03_fix")


def _graded(solution: str, seed: int = 3, timeout: float = 120) -> dict:
    ex = _exercise()
    nb = read_notebook(INSTRUCTOR_NOTEBOOKS / ex.notebook)
    cell = next(c for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "03_fix")
    cell["source"] = solution
    return grade_python_exercise(ex, nb, clean=sanitizer(INSTRUCTOR_NOTEBOOKS / "nbval_sanitize.cfg"),
                                 timeout=timeout, seed=seed)


def _returning(text: str, fixes=()) -> str:
    """A solution cell whose fix(source) applies ``fixes`` (str.replace pairs) and puts ``text`` (host
    code) before the result."""
    body = "".join(f"    source = source.replace({a!r}, {b!r})\n" for a, b in fixes)
    return f"FORGE = {text!r}\n\ndef fix(source):\n{body}    return FORGE + source\n"


@pytest.mark.parametrize("how", sorted(FORGERIES))
def test_host_code_around_unfixed_kernels_forges_nothing(how, tmp_path):
    row = _graded(_returning(_forgery(how, tmp_path)))
    assert row["points"] == 0 and not row["ok"], row["message"]
    # The kernels' own fault is what the student reads, and the host code was never compiled.
    assert "KernelRaceError" in row["message"] and "was left out" in row["message"], row["message"]
    assert not (tmp_path / "pwned").exists()


def test_a_wrong_fix_whose_constructor_forges_gets_no_points():
    row = _graded(_returning(FORGERIES["pipe"], [FIX_HISTOGRAM, WRONG_BLOCK_SUM]))
    assert row["points"] == 0 and "block_sum" in row["message"] and "KernelRaceError" in row["message"], row["message"]


def test_a_right_fix_gets_its_point_with_or_without_host_code_around_it():
    ex = _exercise()
    plain = _graded(ex.solution)
    assert plain["ok"] and plain["points"] == ex.points and plain["message"].endswith(": True"), plain["message"]
    wrapped = _graded(_returning(FORGERIES["pipe"], [FIX_HISTOGRAM, FIX_BLOCK_SUM]))
    assert wrapped["ok"] and wrapped["points"] == ex.points, wrapped["message"]
    assert "was left out" in wrapped["message"]          # the student is told the host code was dropped


@pytest.mark.parametrize("returns, words", [
    ("42", "returned int (42), not the file's text (a str)"),
    ("None", "returned NoneType (None), not the file's text"),
    ("source.encode()", "returned what cannot be graded"),               # bytes do not cross
    ("type('Text', (str,), {})(source)", "returned what cannot be graded"),   # nor a str of the student's class
    ("source + '//' + 'x' * (300 << 10)", "over the 256 KiB a kernel file may have"),
    ("'x' * (64 << 20)", "cannot be taken (a message of"),               # refused from its length, unread
    ("source.replace('int n', 'int\\0 n', 1)", "holding a NUL character"),
    ("source + '\\ud800'", "not UTF-8"),
    ("source.replace('bins[x[i]] += 1;', '{ __device__ long write(int, const void*, unsigned long); "
     "write(3, \"x\", 1); }')", "uses '__device__'"),
    ("source.replace('bins[x[i]] += 1;', 'atomicAdd(&bins[x[i]], 1); }\\nstatic int pwn = system(\"true\");\\n"
     "void more() {')", "KernelRaceError"),           # the body ends at its own brace; the rest is dropped
    ("source.replace('histogram', 'hist')", "has no kernel 'histogram'"),
])
def test_what_fix_returns_must_be_a_kernel_file(returns, words):
    row = _graded(f"def fix(source):\n    return {returns}\n")
    assert row["points"] == 0 and words in row["message"], row["message"]
    assert "Traceback" not in row["message"]


@pytest.mark.parametrize("solution, words", [
    ("def fix(source):\n    raise NotImplementedError()\n", "not attempted"),
    ("def fix(source):\n    return source.nope()\n", "fix(source) raised:"),
    ("def repair(source):\n    return source\n", "defines no fix()"),
    ("def fix(source):\n    while True:\n        pass\n", "did not finish within"),
])
def test_a_fix_that_fails_says_why(solution, words):
    # An endless fix() meets the student's side's time limit: a short one keeps the test short.
    row = _graded(solution, timeout=20 if "while True" in solution else 120)
    assert row["points"] == 0 and words in row["message"], row["message"]


@pytest.mark.parametrize("how, words", [("pipe", "could not be read"), ("python", "could not be read"),
                                        ("stdout", "block_sum: wrong on"), ("files", "block_sum: wrong on")])
def test_host_code_that_does_run_in_the_kernel_sandbox_hands_back_no_verdict(how, words, tmp_path, monkeypatch):
    """Below the bodies' splice: the forged file compiled whole (NVRTC off), so its host code runs in
    the kernel check's sandbox, in the process that hands back the outputs (the default schedule
    alone: the library is loaded there, not in the race check's runner).  What that sandbox writes is
    read as arrays and judged here: a verdict written on the pipe, words printed, files written or a
    patched Python change nothing, and the unfixed block_sum is wrong (histogram fixed)."""
    monkeypatch.setattr(kernel_checks, "FIND_THE_BUG_MODES", (("", "under the default schedule"),))
    path = tmp_path / "find_the_bug.cu"
    # histogram fixed: its unfixed race is between blocks, which the workers may or may not overlap
    path.write_text(_forgery(how, tmp_path) + SOURCE.replace(*FIX_HISTOGRAM))
    v = kernel_checks.check_find_the_bug_fix(path, cases=[(700, 3)], runner=file_runner(
        limits=sandbox.Limits(seconds=90, memory_gib=4.0), nvrtc=False))
    assert not v.ok and words in v.message, v.message
    assert not (tmp_path / "pwned").exists()
