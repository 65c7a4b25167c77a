"""The kernel-exercise grader (python -m labkit.grade): synthetic submissions -- correct, a wrong index,
a missing barrier, an out-of-bounds write, an endless loop, the untouched student copy, nothing
submitted -- graded to the expected points, each check in its own process with a time limit."""
from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import pytest

from labkit import grade
from labkit.exercises import strip_cu_solutions
from labkit.grade import EXERCISES, grade_folder

EXERCISES_DIR = Path(__file__).resolve().parent.parent / "notebooks" / "exercises"


def source(name: str) -> str:
    return (EXERCISES_DIR / EXERCISES[name].file).read_text()


def submit(root: Path, student: str, name: str, text: str) -> None:
    d = root / student / "exercises"
    d.mkdir(parents=True, exist_ok=True)
    (d / EXERCISES[name].file).write_text(text)


def changed(name: str, old: str, new: str) -> str:
    src = source(name)
    assert old in src
    return src.replace(old, new)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("submissions")
    subs = root / "in"
    submit(subs, "correct", "02_conv_naive", source("02_conv_naive"))
    submit(subs, "correct", "11_depthwise", source("11_depthwise"))
    submit(subs, "wrong_index", "02_conv_naive", changed("02_conv_naive", "m = blockIdx.y;", "m = 0;"))
    submit(subs, "wrong_index", "11_depthwise", changed("11_depthwise", "const int c = (int)(plane % C);",
                                                        "const int c = 0;"))
    submit(subs, "out_of_bounds", "02_conv_naive",
           changed("02_conv_naive", "  if (n >= N || h >= Ho || w >= Wo) return;", ""))
    submit(subs, "endless_loop", "02_conv_naive",
           changed("02_conv_naive", "  n = blockIdx.x;", "  for (volatile int spin = 0; spin >= 0;) {}\n  n = blockIdx.x;"))
    submit(subs, "unattempted", "02_conv_naive", strip_cu_solutions(source("02_conv_naive"))[0])
    submit(subs, "unattempted", "11_depthwise", strip_cu_solutions(source("11_depthwise"))[0])
    (subs / "nothing").mkdir()
    rows = grade_folder(subs, root / "grades", exercises=["02_conv_naive", "11_depthwise"], timeout=45)
    return {r["student"]: r for r in rows}, root / "grades"


@pytest.mark.parametrize("student,points", [("correct", 4), ("wrong_index", 0), ("out_of_bounds", 0),
                                            ("endless_loop", 0), ("unattempted", 0), ("nothing", 0)])
def test_points(graded, student, points):
    rows, _ = graded
    assert rows[student]["points"] == points, json.dumps(rows[student], indent=1)
    assert rows[student]["max_points"] == 4


def test_the_reasons_are_given(graded):
    rows, _ = graded
    msg = lambda s, n: rows[s]["exercises"][n]["message"]   # noqa: E731
    assert msg("correct", "02_conv_naive").endswith(": True")
    assert "wrong" in msg("wrong_index", "11_depthwise")
    assert "did not finish within 45 s" in msg("endless_loop", "02_conv_naive")
    assert "KernelMemoryError" in msg("out_of_bounds", "02_conv_naive") or "crash" in msg("out_of_bounds", "02_conv_naive")
    assert "NaN (never written" in msg("unattempted", "02_conv_naive")
    assert msg("nothing", "11_depthwise") == "11_depthwise.cu: not submitted"


def test_gradebook_and_feedback_are_written(graded):
    _, out = graded
    with open(out / "gradebook.csv") as f:
        table = {r["student"]: r for r in csv.DictReader(f)}
    assert table["correct"]["total"] == "4" and table["correct"]["02_conv_naive"] == "2"
    assert len(json.loads((out / "gradebook.json").read_text())) == 6
    fb = (out / "feedback" / "endless_loop.md").read_text()
    assert "0 of 4 points" in fb and "did not finish" in fb


def test_a_missing_barrier_fails_the_tiled_exercise(tmp_path):
    subs = tmp_path / "in"
    src = source("03_conv_tiled")
    first = src.index("__syncthreads();")
    submit(subs, "no_barrier", "03_conv_tiled", src[:first] + src[first + len("__syncthreads();"):])
    rows = grade_folder(subs, tmp_path / "grades", exercises=["03_conv_tiled"], timeout=90)
    e = rows[0]["exercises"]["03_conv_tiled"]
    assert e["points"] == 0 and not e["ok"] and "KernelRaceError" in e["message"], e["message"]


def test_the_checks_run_on_the_backend_asked_for(monkeypatch):
    """The child process gets LABKIT_BACKEND: the CPU executor by default (its memory, barrier and race
    checks), also where the instructor's machine has a GPU; an unknown backend is refused."""
    seen = {}

    def fake_run(cmd, **kw):
        seen.update(kw["env"])
        return subprocess.CompletedProcess(cmd, 0, stdout='{"ok": true, "message": "fine"}\n', stderr="")
    monkeypatch.setattr(grade.subprocess, "run", fake_run)
    assert grade.grade_file("02_conv_naive", "x.cu")["points"] == 2 and seen["LABKIT_BACKEND"] == "cpu"
    grade.grade_file("02_conv_naive", "x.cu", backend="cuda")
    assert seen["LABKIT_BACKEND"] == "cuda"
    with pytest.raises(ValueError, match="backend must be one of"):
        grade.grade_file("02_conv_naive", "x.cu", backend="gpu")
