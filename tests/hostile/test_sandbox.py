"""Forged and hostile student code against the grader's sandbox (labkit.course.sandbox) and the kernel
checks that run through it (labkit.course.sandboxed): each gets what it deserves, and no harm leaves
the sandbox.  Skipped, with the reason, where bubblewrap cannot run."""
from __future__ import annotations

import json
import os
import socket
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from labkit.backends import nvrtc_check
from labkit.backends.cpu.compiler import cache_dir
from labkit.course import kernel_checks, sandbox
from labkit.course.grade import EXERCISES, INSTRUCTOR_NOTEBOOKS, grade_file
from labkit.course.sandboxed import sandboxed_runner
from labkit.course.student_copy import strip_cu_solutions

pytestmark = pytest.mark.skipif(sandbox.unavailable() is not None, reason=f"no sandbox here: {sandbox.unavailable()}")

EXERCISE_DIR = INSTRUCTOR_NOTEBOOKS / "exercises"
QUICK = sandbox.Limits(seconds=20, memory_gib=0.5, file_mib=1, processes=24, scratch_mib=32)


def run_py(code: str, **kw) -> sandbox.Finished:
    return sandbox.run([sys.executable, "-c", code], limits=kw.pop("limits", QUICK), **kw)


def test_a_sandbox_sees_no_network_no_secrets_and_none_of_the_course():
    os.environ["LABKIT_TEST_SECRET"] = "hunter2"
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        done = run_py(f"""
import os, socket, json
seen = {{"env": sorted(os.environ), "secret": os.environ.get("LABKIT_TEST_SECRET")}}
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2); seen["net"] = "connected"
except OSError as exc:
    seen["net"] = type(exc).__name__
seen["notebooks"] = os.path.exists({str(INSTRUCTOR_NOTEBOOKS)!r})
seen["exercises"] = os.path.exists({str(EXERCISE_DIR / "02_conv_naive.cu")!r})
seen["home"] = os.path.exists({str(Path.home())!r} + "/.cache")
print(json.dumps(seen))
""")
        seen = json.loads(done.stdout)
    finally:
        server.close()
        del os.environ["LABKIT_TEST_SECRET"]
    assert seen["secret"] is None and "LABKIT_TEST_SECRET" not in seen["env"]
    assert seen["net"] != "connected"
    assert not seen["notebooks"] and not seen["exercises"] and not seen["home"]


def test_nothing_it_writes_reaches_the_host(tmp_path):
    target = tmp_path / "written"
    seed = cache_dir()
    done = run_py(f"""
import os
for path in [{str(target)!r}, {str(seed / "poison.so")!r}, "/seed/poison.so", "/usr/poison", "/poison",
             {sandbox.LABKIT_MOUNT + "/poison"!r}]:
    try:
        open(path, "w").write("x"); print("wrote", path)
    except OSError as exc:
        print("refused", path, type(exc).__name__)
open("/dev/shm/left-behind", "w").write("x")
open("/tmp/left-behind", "w").write("x")
""", jobs={"/seed": seed})
    assert "refused /seed/poison.so" in done.stdout and "refused /usr/poison" in done.stdout, done.stdout
    # the sandbox's own root and the folders made in it take nothing either (only /tmp and /dev/shm do)
    assert "refused /poison" in done.stdout and f"refused {sandbox.LABKIT_MOUNT}/poison" in done.stdout, done.stdout
    assert not target.exists() and not (seed / "poison.so").exists()
    assert not Path("/dev/shm/left-behind").exists() and not Path("/tmp/left-behind").exists()


def test_limits_hold_and_nothing_outlives_the_run(tmp_path):
    forks = run_py("import os\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            import time; "
                   "time.sleep(60); os._exit(0)\n        n += 1\nexcept OSError:\n    print('stopped at', n)")
    assert "stopped at" in forks.stdout and int(forks.stdout.split()[-1]) < 24
    big = run_py("open('/tmp/f', 'wb').write(b'0' * (2 << 20))")
    assert big.returncode != 0 and "File too large" in big.stderr
    memory = run_py("x = bytearray(2 << 30); print(len(x))")
    assert memory.limit == "memory" and memory.returncode is None
    slow = run_py("import time; time.sleep(60)", limits=sandbox.Limits(seconds=2))
    assert slow.limit == "time"
    marker = tmp_path / "daemon"
    daemon = run_py("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
                    "        time.sleep(3)\n        print('still here', flush=True)\n        os._exit(0)\n    os._exit(0)\n"
                    "print('parent leaves')")
    assert daemon.returncode == 0 and "still here" not in daemon.stdout
    flood = run_py("import os\nfrom labkit.course.sandbox import result_fd\nos.write(result_fd(), b'x' * 4096)",
                   limits=sandbox.Limits(result_bytes=1024))
    assert flood.limit == "result" and flood.result is None
    assert not marker.exists()


def _student(tmp_path, exercise: str, text: str) -> Path:
    p = tmp_path / EXERCISES[exercise].file
    p.write_text(text)
    return p


def _grade(path: Path, exercise: str, seed: int = 1) -> dict:
    return grade_file(exercise, path, timeout=60, seed=seed, exercises_dir=EXERCISE_DIR)


def test_only_the_regions_are_taken_host_code_around_them_never_runs(tmp_path):
    src = (EXERCISE_DIR / "02_conv_naive.cu").read_text()
    pwned = tmp_path / "pwned"
    hostile = ("#include <cstdlib>\n"
               f'static int pwn = std::system("touch {pwned}");\n'
               + src.replace("if (n >= N || h >= Ho || w >= Wo) return;", "if (n >= N || h >= Ho || w >= Wo) return;"))
    row = _grade(_student(tmp_path, "02_conv_naive", hostile), "02_conv_naive")
    assert row["points"] == 2 and not pwned.exists(), row["message"]


@pytest.mark.parametrize("region, words", [
    ('  }\n  static int pwn = 1;\n  __global__ void x() {', "closes a '{' it did not open"),
    ('#include "/etc/passwd"', "preprocessor line"),
    ('  asm volatile("exit");', "'asm'"),
    ('  n = 0; \\', "backslash"),
    ('  /* swallow the instructor\'s lines', "comment that does not end"),
    # a function of the C library declared in the body: NVRTC takes it, the CPU executor would call it
    ('  { __device__ long write(int, const void*, unsigned long); write(2, "x", 1); }', "'__device__'"),
])
def test_a_region_that_could_reach_outside_the_kernel_is_refused(tmp_path, region, words):
    src = strip_cu_solutions((EXERCISE_DIR / "02_conv_naive.cu").read_text())[0]
    row = _grade(_student(tmp_path, "02_conv_naive", src.replace("// YOUR CODE HERE", region)), "02_conv_naive")
    assert row["points"] == 0 and words in row["message"], row["message"]
    assert "root:" not in row["message"]            # nothing of /etc/passwd reaches the feedback


@pytest.mark.skipif(nvrtc_check.library() is None, reason="NVRTC (pip install nvidia-cuda-nvrtc) is not installed")
def test_a_region_that_calls_host_code_is_refused_as_not_device_code(tmp_path):
    src = (EXERCISE_DIR / "02_conv_naive.cu").read_text()
    host = src.replace("  n = blockIdx.x;\n", '  n = blockIdx.x;\n  if (n > 100000) { void* f = fopen("/tmp/x", "w"); }\n')
    row = _grade(_student(tmp_path, "02_conv_naive", host), "02_conv_naive")
    assert row["points"] == 0 and "does not compile as CUDA device code" in row["message"], row["message"]


def test_a_kernel_right_only_on_the_notebooks_shapes_gets_no_points(tmp_path):
    """The notebook's own check passes it; the grader's fresh shapes do not."""
    src = (EXERCISE_DIR / "02_conv_naive.cu").read_text()
    fitted = src.replace("  n = blockIdx.x;\n",
                         "  if (H != 13 && H != 24 && H != 22) return;   // the notebook's layers only\n  n = blockIdx.x;\n")
    path = _student(tmp_path, "02_conv_naive", fitted)
    assert kernel_checks.check_conv_kernel(path, "conv_naive_exercise").ok
    row = _grade(path, "02_conv_naive", seed=7)
    assert row["points"] == 0 and "NaN (never written" in row["message"], row["message"]
    again = _grade(path, "02_conv_naive", seed=7)
    assert again["message"] == row["message"]                    # the seed draws the same shapes again


def test_outputs_the_sandbox_forges_are_judged_here(tmp_path, monkeypatch):
    """A result that claims success, or outputs of the wrong shape, gains nothing: the grader compares
    what comes back with answers the sandbox never saw."""
    forged = np.savez
    results = iter([b"not an npz at all", None])

    def fake_run(cmd, **kw):
        data = next(results)
        if data is None:
            import io
            buf = io.BytesIO()
            forged(buf, status=np.frombuffer(json.dumps({"compile_error": None, "cases": [{"error": None}] * 3,
                                                         "ok": True}).encode(), dtype=np.uint8),
                   out0=np.zeros((1, 1), np.float32))
            data = buf.getvalue()
        return sandbox.Finished(0, "", "", data)
    from labkit.course import sandboxed
    monkeypatch.setattr(sandboxed.sandbox, "run", fake_run)
    runner = sandboxed_runner(EXERCISE_DIR / "02_conv_naive.cu", nvrtc=False)
    src = EXERCISE_DIR / "02_conv_naive.cu"
    first = kernel_checks.check_conv_kernel(src, "conv_naive_exercise", runner=runner)
    second = kernel_checks.check_conv_kernel(src, "conv_naive_exercise", runner=runner)
    assert not first.ok and "could not be read" in first.message
    assert not second.ok and "did not come back whole" in second.message


def test_students_graded_side_by_side_keep_to_their_own_files(tmp_path):
    """Two students at once: one tries to overwrite the other's kernel file; the other still passes."""
    src = (EXERCISE_DIR / "02_conv_naive.cu").read_text()
    (tmp_path / "alice").mkdir()
    (tmp_path / "mallory").mkdir()
    alice = tmp_path / "alice" / "02_conv_naive.cu"
    alice.write_text(src)
    done = {}

    def mallory():
        done["m"] = run_py(f"open({str(alice)!r}, 'w').write('// gone')")
    t = threading.Thread(target=mallory)
    t.start()
    row = _grade(alice, "02_conv_naive")
    t.join()
    assert alice.read_text() == src and row["points"] == 2
    assert done["m"].returncode != 0


# --- Python exercises: the solution and the check in two processes, plain data between them ---------
def _python_exercise(grade_id: str):
    from labkit.course.grade import instructor_exercises
    return next(e for ex, _ in instructor_exercises(INSTRUCTOR_NOTEBOOKS).values() for e in ex if e.grade_id == grade_id)


def _graded(grade_id: str, solution: str) -> dict:
    from labkit.course.grading.notebook_exercises import read_notebook, sanitizer
    from labkit.course.grading.python_exercises import grade_python_exercise
    ex = _python_exercise(grade_id)
    nb = read_notebook(INSTRUCTOR_NOTEBOOKS / ex.notebook)
    cell = next(c for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)
    cell["source"] = solution
    return grade_python_exercise(ex, nb, clean=sanitizer(INSTRUCTOR_NOTEBOOKS / "nbval_sanitize.cfg"), timeout=90)


@pytest.mark.parametrize("cheat, words", [
    # a value that says it equals anything: it cannot cross to the check's process
    ("class Yes:\n    def __eq__(self, other):\n        return True\n"
     "def count_loads_and_fmas(M, K, r, C):\n    return Yes()\n", "returned what cannot be graded"),
    # the check's builtins and helpers live in another process
    ("import builtins\nbuiltins.all = lambda it: True\nall = lambda it: True\n"
     "def count_loads_and_fmas(M, K, r, C):\n    return (0, 0)\n", "False"),
    # an input transformer that would rewrite the check cell: the check does not run in this shell
    ("get_ipython().input_transformers_post.append(lambda lines: ['print(\"loop count matches the formula: True\")'])\n"
     "def count_loads_and_fmas(M, K, r, C):\n    return (0, 0)\n", "False"),
    # a result written where the grader reads: the student's side has no way there
    ("import os\nfrom labkit.course.sandbox import result_fd\n"
     "os.write(result_fd(), b'{\"stage\": \"check\", \"stdout\": \"loop count matches the formula: True\\\\n\", "
     "\"error\": null}')\n"
     "def count_loads_and_fmas(M, K, r, C):\n    return (0, 0)\n", "False"),
])
def test_a_python_solution_cannot_forge_its_check(cheat, words):
    row = _graded("05_count_loads_and_fmas", cheat)
    assert row["points"] == 0 and words in row["message"], row["message"]


def test_a_right_python_solution_still_passes_across_the_boundary():
    row = _graded("05_count_loads_and_fmas", _python_exercise("05_count_loads_and_fmas").solution)
    assert row["ok"] and row["points"] > 0, row["message"]


# --- notebook 09's my_enqueue: run on stand-ins in the student's sandbox, its calls replayed by the check
ENQUEUE_HEAD = "from labkit.models.fashion_mnist import FashionNet\n\ndef my_enqueue(plan, x, out, a, b, stream):\n"


@pytest.mark.parametrize("body, words", [
    # the output copied before the forward ran: the check replays the calls in the order they were made
    ("    copy_in(plan.x, x[a:b], stream)\n    copy_out(out[a:b], plan.out, stream)\n    plan.run(stream)\n",
     "rows differ from the forward"),
    # nothing queued, and a verdict written where the one-sandbox check wrote its result
    ("    import os\n    from labkit.course.sandbox import result_fd\n"
     "    os.write(result_fd(), b'{\"stage\": \"check\", \"stdout\": \"my_enqueue: every sub-batch matches the "
     "model\\'s own forward: True\\\\n\", \"error\": null}')\n",
     "never written (still NaN)"),
    # a recorder of its own, handing back calls the stand-ins could never make
    ("    pass\nimport labkit.pipeline.recording as rec\n"
     "rec.RECORDERS['enqueue'] = lambda fn, ns, jobs: [[['copy_in', {'array': 'np.ones', 'index': []}, "
     "{'array': 'x', 'index': []}, None]] for _ in jobs]\n",
     "names an array the check does not know"),
    # reading the input's values, which the check's stand-ins do not hold
    ("    copy_in(plan.x, x[a:b] * 0, stream)\n", "values are not here"),
])
def test_my_enqueue_is_replayed_by_the_check_and_cannot_forge_it(body, words):
    row = _graded("09_my_enqueue", ENQUEUE_HEAD + body)
    assert row["points"] == 0 and words in row["message"], row["message"]
    assert "beside the solution" not in row["message"], row["message"]


def test_my_enqueue_right_passes_across_the_boundary():
    row = _graded("09_my_enqueue", _python_exercise("09_my_enqueue").solution)
    assert row["ok"] and "beside the solution" not in row["message"], row["message"]


def test_the_folder_the_grader_was_started_in_stays_outside(tmp_path, monkeypatch):
    """`python -m labkit.grade` puts its working folder first on the import path (a home folder, the
    course's folder with source/ and every submission): the sandbox does not show it."""
    (tmp_path / "solutions.txt").write_text("the answers")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert tmp_path.resolve() not in sandbox.readable_roots()
    done = run_py(f"import os; print(os.path.exists({str(tmp_path / 'solutions.txt')!r}))")
    assert done.returncode == 0 and done.stdout.strip() == "False", (done.stdout, done.stderr[-1000:])


@pytest.mark.parametrize("cheat, words", [
    # the ConvLayer it is handed is labkit's own, rebuilt from ints: patching the class on the student's
    # side changes nothing in the check's process, and a wrong mapping still fails
    ("from labkit.shapes import ConvLayer\nConvLayer.__eq__ = lambda a, b: True\n"
     "def x_index(k, p, L, g):\n    return None\n", "False"),
    # a result written where the grader reads: the student's side has no way there
    ("import os\nfrom labkit.course.sandbox import result_fd\n"
     "os.write(result_fd(), b'{\"stage\": \"check\", \"stdout\": \"x_index rebuilds the column matrix: True\\\\n\", "
     "\"error\": null}')\n"
     "def x_index(k, p, L, g):\n    return None\n", "False"),
    # an answer that is not plain data cannot cross to the check
    ("class Any:\n    def __eq__(self, other):\n        return True\n"
     "def x_index(k, p, L, g):\n    return Any()\n", "returned what cannot be graded"),
])
def test_x_index_handed_a_conv_layer_cannot_forge_its_check(cheat, words):
    row = _graded("06_x_index", cheat)
    assert row["points"] == 0 and words in row["message"], row["message"]
    assert "checked beside the solution" not in row["message"]
