"""The grader (python -m labkit.grade) on synthetic submissions -- correct, the untouched student
version, a wrong index, a missing barrier, an out-of-bounds write, an endless loop, check cells
deleted, skipped and re-ordered (a zip), outputs forged (a .tar.gz) -- graded to the expected points,
kernel and Python exercises alike, every exercise in a process of its own with time and memory
limits; hostile archives and notebooks; the Slurm array job run task by task."""
from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

import labkit
from labkit.course import grade, kernel_checks
from labkit.course.grade import EXERCISES, INSTRUCTOR_NOTEBOOKS, grade_folder, instructor_exercises
from labkit.course.grading import submissions, synthetic
from labkit.course.grading.limits import run_limited
from labkit.course.grading.notebook_exercises import exercises_of, read_notebook, sanitizer
from labkit.course.grading.python_exercises import grade_python_exercise

REPO = Path(__file__).resolve().parent.parent

# A subset that keeps CI short and still meets every synthetic mistake (python -m labkit.grade
# --synthetic DIR grades all of them: see notebooks/INSTRUCTORS.md); 08_lrn and 02_naive_grid are
# graded by the leaderboard's and the hostile notebooks' tests below.
KERNELS = ["02_conv_naive", "03_conv_tiled"]
PYTHON = ["01_conv2d_einsum", "05_count_loads_and_fmas"]
PYTHON_POINTS = {e.grade_id: e.points for ex, _ in instructor_exercises(INSTRUCTOR_NOTEBOOKS).values() for e in ex}
POINTS = {**{k: EXERCISES[k].points for k in KERNELS}, **{k: PYTHON_POINTS[k] for k in PYTHON}}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("synthetic")
    synthetic.write_synthetic(root, INSTRUCTOR_NOTEBOOKS, EXERCISES, PYTHON_POINTS)
    (root / "submissions" / "nothing").mkdir()
    rows = grade_folder(root / "submissions", root / "grades", exercises=KERNELS + PYTHON, timeout=60,
                        notebook_timeout=30)
    return {r["student"]: r for r in rows}, root / "grades"


@pytest.mark.parametrize("student", synthetic.STUDENTS + ["nothing"])
def test_points(graded, student):
    rows, _ = graded
    want = 0 if student == "nothing" else synthetic.expected_points(student, POINTS)
    assert rows[student]["points"] == want, json.dumps(rows[student], indent=1)
    assert rows[student]["max_points"] == sum(POINTS.values())


def test_the_reasons_are_given(graded):
    rows, _ = graded
    msg = lambda s, n: rows[s]["exercises"][n]["message"]   # noqa: E731
    assert msg("correct", "02_conv_naive").endswith(": True")
    assert msg("correct", "01_conv2d_einsum").endswith("conv2d_einsum matches reference: True")
    assert "wrong on the layer" in msg("wrong_index", "02_conv_naive")
    # A wrong answer makes the check raise (labkit.verdict.require): its words, no traceback.
    assert "the check fails:\nconv2d_einsum matches reference: False" in msg("wrong_index", "01_conv2d_einsum")
    assert "Traceback" not in msg("wrong_index", "01_conv2d_einsum")
    # The executor's watchdog stops the kernel inside the sandbox before the sandbox's own time is up.
    assert "did not finish within 60 s" in msg("endless_loop", "02_conv_naive") or \
        "a spin-wait never lets the others run" in msg("endless_loop", "02_conv_naive")
    assert "did not finish within 30 s" in msg("endless_loop", "05_count_loads_and_fmas")
    assert "KernelMemoryError" in msg("out_of_bounds", "02_conv_naive")
    assert "KernelRaceError" in msg("missing_barrier", "03_conv_tiled")
    assert "NaN (never written" in msg("unattempted", "02_conv_naive")
    assert "not attempted" in msg("unattempted", "01_conv2d_einsum")
    assert msg("nothing", "03_conv_tiled") == "03_conv_tiled.cu: not submitted"
    assert "not submitted" in msg("nothing", "05_count_loads_and_fmas")


def test_deleting_skipping_or_forging_checks_gains_nothing(graded):
    """The Python exercises of checks_deleted (a zip) and outputs_forged (a .tar.gz) score as
    wrong_index's: the same wrong answers, whatever their notebooks did to the check cells."""
    rows, _ = graded
    for student in ("checks_deleted", "outputs_forged"):
        for name in PYTHON:
            assert rows[student]["exercises"][name]["points"] == rows["wrong_index"]["exercises"][name]["points"]
        assert rows[student]["problem"] is None


def test_gradebook_and_feedback_are_written(graded):
    _, out = graded
    with open(out / "gradebook.csv") as f:
        table = {r["student"]: r for r in csv.DictReader(f)}
    assert table["correct"]["points"] == str(sum(POINTS.values())) and table["correct"]["02_conv_naive"] == "2"
    assert set(table) == set(synthetic.STUDENTS) | {"nothing"}
    assert len(json.loads((out / "gradebook.json").read_text())) == len(synthetic.STUDENTS) + 1
    fb = (out / "feedback" / "endless_loop.md").read_text()
    assert "did not finish" in fb and "## 05_count_loads_and_fmas: 0 / 1 (not passed)" in fb


@pytest.mark.check
@pytest.mark.parametrize("check, where, choices", [
    ("check_conv_kernel", lambda L: L["K"], kernel_checks.KS),
    ("check_constant_kernel", lambda L: L["K"], kernel_checks.KS),
    ("check_rows_kernel", lambda c: c[5], kernel_checks.KS),
    ("check_conv_pool_kernel", lambda c: c[5], kernel_checks.KS),
    ("check_im2col_kernel", lambda c: c[4], (1, 3, 5, 7)),
    ("check_im2col_kernel", lambda c: c[5], (1, 2, 3, 4)),
    ("check_depthwise_kernel", lambda c: c[4], (1, 2)),
    ("check_conv_kernel", lambda L: L["C"] > 1, (False, True)),
    ("check_conv_kernel", lambda L: L["M"] > 1, (False, True)),
    ("check_constant_kernel", lambda L: L["C"] > 1, (False, True)),
    ("check_constant_kernel", lambda L: L["M"] > 1, (False, True)),
    ("check_depthwise_kernel", lambda c: c[1] > 1, (False, True)),
])
def test_every_students_shapes_take_each_kernel_size_and_stride(check, where, choices):
    """A student's fresh shapes (drawn from the student's seed) take every kernel size and stride the
    exercise names, one channel and several: a draw of only 1x1 kernels passed a tiled kernel without
    its first barrier (each thread reads only the element it wrote), one of only one output channel a
    kernel that computes channel 0 alone."""
    for seed in range(300):
        options = kernel_checks.fresh_options(check, np.random.default_rng(seed))
        cases = options.get("layers") or options["cases"]
        assert {where(c) for c in cases} == set(choices), (seed, cases)
        assert len({repr(c) for c in cases}) == len(cases)


def _einsum():
    return next(e for e in exercises_of(INSTRUCTOR_NOTEBOOKS / "01_cpu_reference_convolution.ipynb")
                if e.grade_id == "01_conv2d_einsum")


def _with_solution(ex, text: str) -> dict:
    nb = read_notebook(INSTRUCTOR_NOTEBOOKS / ex.notebook)
    cell = next(c for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == ex.grade_id)
    cell["source"] = text
    return nb


@pytest.mark.check
def test_the_grading_process_puts_back_what_a_solution_changed(tmp_path):
    """The process that runs one Python exercise (run_cells): the setup, solution and check cells in one
    shell; what the solution rebinds beyond its own names, a NumPy function or a notebook name, is put
    back before the check runs."""
    program = {"setup": ["import numpy as np", "scale = 2"],
               "solution": "np.allclose = lambda *a, **k: True\nscale = 3\nanswer = scale * 21",
               "check": "print(answer, scale, np.allclose(1, 2))", "allowed": ["answer"]}
    (tmp_path / "program.json").write_text(json.dumps(program))
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-m", "labkit.course.grading.run_cells", "program.json", "result.json"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    r = json.loads((tmp_path / "result.json").read_text())
    assert r["stage"] == "check" and r["error"] is None and r["stdout"] == "63 2 False\n", r
    assert {"numpy.allclose", "scale"} <= set(r["put_back"]), r["put_back"]


def test_a_solution_cannot_change_the_checks_helpers():
    """A wrong answer that also rebinds the check's helpers (a notebook name, a NumPy function) still
    fails: they are put back before the check runs, and the feedback says so."""
    ex = _einsum()
    cheat = ex.solution.replace(" + b[None, :, None, None]", "") + \
        "\nrel_err = lambda a, b: 0.0\nnp.linalg.norm = lambda *a, **k: 0.0\n"
    r = grade_python_exercise(ex, _with_solution(ex, cheat), clean=sanitizer(None), timeout=60)
    assert r["points"] == 0 and "rel_err" in r["message"] and "numpy.linalg.norm" in r["message"], r["message"]
    fine = ex.solution + "\ndef my_helper():\n    return 1\n"        # new names of its own are its business
    assert grade_python_exercise(ex, _with_solution(ex, fine), clean=sanitizer(None), timeout=60)["ok"]


def test_a_solution_that_eats_memory_is_stopped():
    ex = _einsum()
    hog = "import numpy\nhog = numpy.ones(3 << 28)\n" + ex.solution          # 2 GiB, written
    r = grade_python_exercise(ex, _with_solution(ex, hog), clean=sanitizer(None), timeout=60, memory_gib=1.0)
    assert r["points"] == 0 and "more than the 1 GiB" in r["message"], r["message"]


def test_hostile_notebooks_fail_that_notebook_only(tmp_path):
    (tmp_path / "in" / "garbled").mkdir(parents=True)
    (tmp_path / "in" / "garbled" / "01_cpu_reference_convolution.ipynb").write_text('{"cells": 5')
    (tmp_path / "in" / "garbled" / "02_naive_gpu_convolution.ipynb").write_text(
        (INSTRUCTOR_NOTEBOOKS / "02_naive_gpu_convolution.ipynb").read_text())
    rows = grade_folder(tmp_path / "in", tmp_path / "out", exercises=["01_conv2d_einsum", "02_naive_grid"], timeout=60)
    e = rows[0]["exercises"]
    assert "not a notebook" in e["01_conv2d_einsum"]["message"] and e["02_naive_grid"]["ok"]


def _zip(path: Path, members: dict, links=()) -> None:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
        for name in links:
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o120777 << 16)
            z.writestr(info, "/etc/passwd")


@pytest.mark.check
@pytest.mark.parametrize("kind", ["traversal", "absolute", "link", "garbage", "too_big", "tar_link"])
def test_hostile_archives_are_refused_before_anything_runs(tmp_path, monkeypatch, kind):
    archive = tmp_path / ("bad.tar" if kind == "tar_link" else "bad.zip")
    if kind == "traversal":
        _zip(archive, {"../../escaped.cu": "x"})
    elif kind == "absolute":
        _zip(archive, {"/tmp/escaped.cu": "x"})
    elif kind == "link":
        _zip(archive, {}, links=["exercises/02_conv_naive.cu"])
    elif kind == "garbage":
        archive.write_bytes(os.urandom(1000))
    elif kind == "too_big":
        monkeypatch.setattr(submissions, "MAX_BYTES", 1000)
        _zip(archive, {"a.cu": "x" * 800, "b.cu": "y" * 800})
    else:
        with tarfile.open(archive, "w") as t:
            info = tarfile.TarInfo("exercises/02_conv_naive.cu")
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            t.addfile(info)
    dest = tmp_path / "out"
    dest.mkdir()
    with pytest.raises(ValueError):
        submissions.unpack(archive, dest)
    assert not any(dest.rglob("*.cu")) and not (tmp_path / "escaped.cu").exists()


@pytest.mark.check
def test_an_archive_takes_only_notebooks_and_kernels(tmp_path):
    _zip(tmp_path / "ann.zip", {"ann/exercises/02_conv_naive.cu": "k", "ann/run_me.py": "import os",
                                "ann/01_cpu_reference_convolution.ipynb": "{}"})
    (found,) = submissions.students_in(tmp_path, tmp_path / "work")
    assert found.name == "ann" and found.problem is None
    assert sorted(p.name for p in found.folder.rglob("*") if p.is_file()) == \
        ["01_cpu_reference_convolution.ipynb", "02_conv_naive.cu"]
    assert submissions.find_file(found.folder, "02_conv_naive.cu").read_text() == "k"


@pytest.mark.check
def test_a_link_in_a_student_folder_is_not_followed(tmp_path):
    (tmp_path / "eve" / "exercises").mkdir(parents=True)
    os.symlink(INSTRUCTOR_NOTEBOOKS / "exercises" / "02_conv_naive.cu", tmp_path / "eve" / "exercises" / "02_conv_naive.cu")
    os.symlink(INSTRUCTOR_NOTEBOOKS, tmp_path / "eve" / "linked")
    assert submissions.find_file(tmp_path / "eve", "02_conv_naive.cu") is None
    assert submissions.find_file(tmp_path / "eve", "01_cpu_reference_convolution.ipynb") is None


def test_the_slurm_array_job_grades_as_the_local_run(tmp_path):
    """The array job's tasks (run here one by one with bash, as Slurm would with SLURM_ARRAY_TASK_ID),
    then its merge step, give the gradebook of a local run."""
    synthetic.write_synthetic(tmp_path, INSTRUCTOR_NOTEBOOKS, EXERCISES, PYTHON_POINTS,
                              students=["correct", "wrong_index", "checks_deleted"])
    names = ["02_naive_grid", "05_count_loads_and_fmas"]
    assert grade.main([str(tmp_path / "submissions"), "--slurm", "--out", str(tmp_path / "grades"),
                       "--exercises", *names, "--notebook-timeout", "60"]) == 0
    slurm = tmp_path / "grades" / "slurm"
    script = (slurm / "grade_array.sbatch").read_text()
    assert "#SBATCH --array=0-2" in script and (slurm / "students.txt").read_text().split() == \
        ["checks_deleted", "correct", "wrong_index"]
    assert "afterany" in (slurm / "submit.sh").read_text()
    for i in range(3):
        subprocess.run(["bash", str(slurm / "grade_array.sbatch")], check=True, capture_output=True,
                       env={**os.environ, "SLURM_ARRAY_TASK_ID": str(i)})
    subprocess.run(["bash", str(slurm / "merge.sbatch")], check=True, capture_output=True)
    merged = {r["student"]: r["points"] for r in json.loads((tmp_path / "grades" / "gradebook.json").read_text())}
    local = grade_folder(tmp_path / "submissions", tmp_path / "local", exercises=names, notebook_timeout=60)
    assert merged == {r["student"]: r["points"] for r in local} == {"checks_deleted": 1, "correct": 2, "wrong_index": 1}


@pytest.mark.check
def test_the_points_come_from_the_sandbox_and_a_gpu_run_can_only_take_them(monkeypatch, tmp_path):
    """The points' check runs in the sandbox on the CPU executor (its memory, barrier and race checks),
    also with --backend cuda, which then runs a passing kernel again on the GPU, in a child process of
    the grader's on the spliced file (device code only): a wrong answer there costs the points, a
    crash there only the leaderboard entry; an unknown backend is refused."""
    from labkit.verdict import Verdict
    backends, gpu = [], {"verdict": '{"ok": true, "message": "fine"}', "code": 0}
    monkeypatch.setattr(grade, "sandboxed_runner", lambda instructor, limits: (
        lambda path, kernel, cases, **kw: backends.append("sandbox") or Verdict(True, "fine")))
    spliced = []
    monkeypatch.setattr(grade, "spliced_source", lambda instructor, path: spliced.append(path) or "// spliced\n")

    def fake_run(cmd, **kw):
        backends.append(kw["env"]["LABKIT_BACKEND"])
        assert Path(cmd[5]).read_text() == "// spliced\n"          # the GPU child gets the spliced file
        Path(cmd[6]).write_text(gpu["verdict"])
        return run_limited(["python3", "-c", f'print(\'{{"ok": false}}\'); raise SystemExit({gpu["code"]})'],
                           timeout=10)
    monkeypatch.setattr(grade, "run_limited", fake_run)
    assert grade.grade_file("02_conv_naive", "x.cu")["points"] == 2 and backends == ["sandbox"]
    backends.clear()
    assert grade.grade_file("02_conv_naive", "x.cu", backend="cuda")["points"] == 2 and backends == ["sandbox", "cuda"]
    gpu["verdict"] = '{"ok": false, "message": "12 outputs wrong"}'
    row = grade.grade_file("02_conv_naive", "x.cu", backend="cuda")
    assert row["points"] == 0 and "but on the cuda backend: 12 outputs wrong" in row["message"], row
    gpu["code"] = 3
    row = grade.grade_file("02_conv_naive", "x.cu", backend="cuda")
    assert row["points"] == 2 and "not run on the cuda backend" in row["message"], row
    with pytest.raises(ValueError, match="backend must be one of"):
        grade.grade_file("02_conv_naive", "x.cu", backend="gpu")
    with pytest.raises(ValueError, match="the leaderboard times kernels on a GPU"):
        grade.grade_file("02_conv_naive", "x.cu", time_it=True)


@pytest.mark.check
def test_every_python_exercise_of_the_series_is_gradable():
    """Each exercise's check printed only text in the stored run (what the grader compares with)."""
    found = {e.grade_id for ex, _ in instructor_exercises(INSTRUCTOR_NOTEBOOKS).values() for e in ex}
    assert {"01_conv2d_einsum", "03_fix", "07_confusion", "10_my_backward_weight"} <= found
    for ex, _ in instructor_exercises(INSTRUCTOR_NOTEBOOKS).values():
        for e in ex:
            assert e.expected.strip() and "False" not in e.expected, (e.grade_id, e.expected)


def _leaderboard_class(tmp_path) -> Path:
    src = (INSTRUCTOR_NOTEBOOKS / "exercises" / "08_lrn.cu").read_text()
    for student, text in [("ann", src), ("bob", src), ("cy", src.replace("sum += v * v;", "sum += v;"))]:
        (tmp_path / "in" / student).mkdir(parents=True)
        (tmp_path / "in" / student / "08_lrn.cu").write_text(text)
    return tmp_path / "in"


@pytest.mark.check
def test_the_leaderboard_is_refused_on_the_cpu_executor(tmp_path):
    """The executor's times are not a GPU's, and a time taken where the student's code runs could be
    forged: a leaderboard is timed by the grader's own process on a GPU, or not at all."""
    with pytest.raises(ValueError, match="the leaderboard times kernels on a GPU"):
        grade_folder(_leaderboard_class(tmp_path), tmp_path / "out", exercises=["08_lrn"], leaderboard=True)


@pytest.mark.gpu
@pytest.mark.skipif(grade.sandbox.unavailable() is not None, reason="the grader needs its sandbox (bubblewrap)")
def test_the_leaderboard_ranks_the_passing_kernels(tmp_path):
    """Each passing kernel is timed on the leaderboard's shape by the grader's child on the GPU (the
    spliced file, compiled by NVRTC); a failing one has no place; the device is the grader's."""
    rows = grade_folder(_leaderboard_class(tmp_path), tmp_path / "out", exercises=["08_lrn"], backend="cuda",
                        timeout=120)
    assert [r["points"] for r in rows] == [2, 2, 0]
    board = json.loads((tmp_path / "out" / "leaderboard.json").read_text())["08_lrn"]
    assert sorted(t["student"] for t in board) == ["ann", "bob"] and board[0]["ms"] <= board[1]["ms"]
    assert all(t["device"] == labkit.device().label for t in board)
    assert "| 1 |" in (tmp_path / "out" / "leaderboard.md").read_text()


@pytest.mark.check
def test_every_leaderboard_shape_names_an_exercise_and_its_checks_options():
    """The leaderboard's shapes run only on a GPU: here, that each names a graded kernel exercise and
    options its check takes (a typo would fail the timing run of every student, not the grading)."""
    import inspect
    from labkit.course import kernel_checks
    for name, options in grade.LEADERBOARD.items():
        assert name in grade.EXERCISES, name
        params = inspect.signature(getattr(kernel_checks, grade.EXERCISES[name].check)).parameters
        assert set(options) <= set(params), (name, options)
        assert all(len(shapes) == 1 for shapes in options.values()), name


@pytest.mark.check
def test_the_command_is_the_course_grader():
    # `python -m labkit.grade`, the command the Slurm job and grade_file run, is labkit.course.grade's.
    import labkit.grade
    assert labkit.grade.main is grade.main


@pytest.mark.check
def test_plain_data_round_trips_and_refuses_what_cannot_cross():
    """What a solution hands its check: numbers, strings, arrays and containers of them come back
    equal; a value that lies in __eq__, a callable, an object array, a lying length do not cross."""
    import numpy as np
    from labkit.course.grading.plain import PlainDataError, decode, encode
    value = {"n": 3, "x": 2.5, "nan": float("nan"), "s": "é", "none": None, "t": (1, [True, np.int32(4)]),
             "a": np.arange(6, dtype=np.float32).reshape(2, 3), "c": 1 - 2j}
    back = decode(encode(value))
    assert back["n"] == 3 and back["s"] == "é" and back["t"] == (1, [True, 4]) and np.isnan(back["nan"])
    assert back["a"].dtype == np.float32 and np.array_equal(back["a"], value["a"]) and back["c"] == 1 - 2j

    class Yes:
        def __eq__(self, other):
            return True
    for bad in (Yes(), print, np.array([object()]), {1: 2}):
        with pytest.raises(PlainDataError):
            encode(bad)
    data = bytearray(encode(np.zeros(4, np.float32)))
    with pytest.raises(PlainDataError, match="declares|after its arrays"):
        decode(bytes(data[:-4]))                     # an array cut short: refused before it is read


@pytest.mark.check
def test_a_conv_layer_crosses_as_its_fields_and_nothing_posing_as_one_does():
    """A check hands 06's x_index a ConvLayer: labkit's own class crosses as its ints and comes back a
    ConvLayer; a subclass (which could carry code), or a forged message with other fields, does not."""
    import json
    import struct
    from labkit.course.grading.plain import PlainDataError, decode, encode
    from labkit.shapes import ConvLayer
    L = ConvLayer.of(4, 7, 6, 2, (3, 5), stride=2, pad=(1, 2), dilation=(1, 2), groups=2)
    back = decode(encode({"layer": L}))["layer"]
    assert type(back) is ConvLayer and back == L and back.out_hw == L.out_hw

    class Sly(ConvLayer):
        @property
        def out_hw(self):
            return (0, 0)
    with pytest.raises(PlainDataError, match="Sly"):
        encode(Sly(*L))

    def forged(tree) -> bytes:
        header = json.dumps({"tree": tree, "arrays": []}).encode()
        return struct.pack("<Q", len(header)) + header
    for fields in ([1, 2, 3], list(L)[:-1] + ["x"], list(L)[:-1] + [2.5], "C4"):
        with pytest.raises(PlainDataError, match="ConvLayer that is not 13 ints"):
            decode(forged({"conv_layer": fields}))


@pytest.mark.check
def test_a_returned_kernel_file_must_be_bounded_utf8_text_without_nul():
    """What a solution's fix(source) hands the grader to compile: a str of at most 256 KiB of UTF-8
    without NUL, or NotAccepted saying which it is not."""
    from labkit.course.grading.source_exercises import NotAccepted, returned_source
    src = labkit.kernels.source("find_the_bug")
    assert returned_source(src, "fix") is src
    for value, words in [(42, "returned int (42), not the file's text (a str)"), (None, "returned NoneType (None)"),
                         (src.encode(), "returned bytes"), (src + "\0", "a NUL character (at character"),
                         (src + "\ud800", "not UTF-8 (a lone surrogate at character"),
                         ("x" * ((256 << 10) + 1), "262,145 bytes, over the 256 KiB")]:
        with pytest.raises(NotAccepted, match=re.escape(words)):
            returned_source(value, "fix")


@pytest.mark.check
def test_only_the_kernels_bodies_are_taken_from_a_returned_file():
    """notebook 03's fix(source) returns a whole file: the grader takes the bodies of histogram and
    block_sum into the original, under the rules of a kernel exercise's regions, and drops the rest."""
    from labkit.course.regions import RegionError, splice_bodies
    src = labkit.kernels.source("find_the_bug")
    kernels = ("histogram", "block_sum")
    fixed = src.replace("bins[x[i]] += 1", "atomicAdd(&bins[x[i]], 1)").replace(
        "if (t < k) s[t] += s[t + k];", "if (t < k) s[t] += s[t + k];\n    __syncthreads();")
    assert splice_bodies(src, fixed, kernels) == (fixed, False)
    assert splice_bodies(src, "  " + fixed.replace("\n", "\n\n"), kernels)[1] is False     # whitespace is no change
    host = '__attribute__((constructor)) static void pwn() { system("touch /tmp/pwned"); }\n'
    assert splice_bodies(src, host + fixed + host, kernels) == (fixed, True)
    # A body that closes its own brace ends there: what it meant to open after it is outside, dropped.
    escape = fixed.replace("atomicAdd(&bins[x[i]], 1);", "atomicAdd(&bins[x[i]], 1); }\n" + host + "void more() {")
    text, changed = splice_bodies(src, escape, kernels)
    assert changed and "pwn" not in text and "atomicAdd(&bins[x[i]], 1);" in text
    for bad, words in [
            (fixed.replace("atomicAdd(&bins[x[i]], 1);", '{ __device__ long write(int, const void*, unsigned long); '
                                                          'write(1, "x", 1); }'), "uses '__device__'"),
            (fixed.replace("  __syncthreads();\n  //", '  #include "/etc/passwd"\n  //'), "preprocessor line"),
            (fixed.replace("const int t = threadIdx.x;", 'const char* q = R"(})"; const int t = threadIdx.x;'),
             "raw string"),
            (fixed.replace("void block_sum", "void block_sum2"), "has no kernel 'block_sum'"),
            (fixed + fixed, "more than one kernel 'histogram'"),
            (fixed.replace("  if (t == 0) partial", "  /* if (t == 0) partial"), "never closed")]:
        with pytest.raises(RegionError, match=re.escape(words)):
            splice_bodies(src, bad, kernels)


@pytest.mark.check
def test_every_check_that_compiles_what_a_solution_returns_is_a_source_exercise():
    """A check cell that compiles kernel code beside its result would run the student's host code
    there: each such exercise is graded as a source exercise (two sandboxes, the verdict made here)."""
    from labkit.course.grading.source_exercises import SOURCE_EXERCISES
    compiles = re.compile(r"\b(?:load_source|CPUModule|RawModule|race_report|compile_source)\(")
    found = {e.grade_id for ex, _ in instructor_exercises(INSTRUCTOR_NOTEBOOKS).values() for e in ex
             if compiles.search(e.check)}
    assert found == set(SOURCE_EXERCISES) == {"03_fix"}, found


def test_without_a_sandbox_the_grader_refuses_unless_told_and_then_says_so(tmp_path, monkeypatch):
    """Where bubblewrap cannot run, grading students' code is refused, naming the way out; with
    --unsafe-no-sandbox it goes on, and every row of the gradebook says the code ran unsandboxed."""
    (tmp_path / "in" / "ann").mkdir(parents=True)
    (tmp_path / "in" / "ann" / "02_conv_naive.cu").write_text((INSTRUCTOR_NOTEBOOKS / "exercises" / "02_conv_naive.cu")
                                                              .read_text())
    monkeypatch.setattr(grade.sandbox, "unavailable", lambda: "bubblewrap (bwrap) is not installed")
    with pytest.raises(RuntimeError, match="--unsafe-no-sandbox"):
        grade_folder(tmp_path / "in", tmp_path / "out", exercises=["02_conv_naive"])
    rows = grade_folder(tmp_path / "in", tmp_path / "out", exercises=["02_conv_naive"], unsafe_no_sandbox=True,
                        timeout=60, seed=3)
    assert rows[0]["points"] == 2 and rows[0]["sandbox"] == grade.UNSAFE_NOTE
    with open(tmp_path / "out" / "gradebook.csv", newline="") as f:
        table = list(csv.reader(f))
    assert table[1][table[0].index("sandbox")].startswith("graded WITHOUT a sandbox")
    assert table[1][table[0].index("seed")] == str(grade.student_seed(3, "ann"))
