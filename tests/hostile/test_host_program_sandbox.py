"""Forged and hostile whole programs against the grader (notebook 02b's host-code exercise,
labkit.course.host_program through labkit.course.sandboxed.sandboxed_program_runner): the program is
built and run in the sandbox, y is judged by the grader against its own float64 answer, and nothing
the program prints or writes is a verdict.  Skipped, with the reason, where bubblewrap cannot run."""
from __future__ import annotations

from pathlib import Path

import pytest

from labkit.course import sandbox
from labkit.course.grade import INSTRUCTOR_NOTEBOOKS, grade_file

pytestmark = pytest.mark.skipif(sandbox.unavailable() is not None, reason=f"no sandbox here: {sandbox.unavailable()}")

INSTRUCTOR = INSTRUCTOR_NOTEBOOKS / "exercises" / "02_host_code.cu"
SOURCE = INSTRUCTOR.read_text()
BEGIN, END = "  // BEGIN SOLUTION\n", "  // END SOLUTION"
SOLUTION = SOURCE[SOURCE.index(BEGIN) + len(BEGIN):SOURCE.index(END)]


def student(tmp_path, region: str, prefix: str = "") -> Path:
    """The student's file: the instructor's with ``region`` between the markers (``prefix``: lines put
    before everything, outside the regions)."""
    p = tmp_path / "02_host_code.cu"
    p.write_text(prefix + SOURCE[:SOURCE.index(BEGIN)] + "  // BEGIN YOUR CODE\n" + region
                 + "  // END YOUR CODE" + SOURCE[SOURCE.index(END) + len(END):])
    return p


def grade(path: Path) -> dict:
    return grade_file("02_host_code", path, timeout=90, seed=11)


def test_the_instructors_program_gets_full_points_in_the_sandbox(tmp_path):
    row = grade(student(tmp_path, SOLUTION))
    assert row["ok"] and row["points"] == row["max_points"] == 2, row["message"]


def test_printing_the_verdict_and_writing_verdict_files_gains_nothing(tmp_path):
    """No device work: it prints a right one's words and a passing verdict, and writes verdict and
    result files where a careless grader might look; y stays the NaN the program put there."""
    forged = """  std::printf("kernel: 0.012 ms\\n02_host_code.cu: built and ran ... errors checked, time printed: True\\n");
  for (const char* name : {"verdict.json", "/tmp/verdict.json", "result.npz", "/tmp/result.npz"}) {
    FILE* f = std::fopen(name, "w");
    if (f) { std::fputs("{\\"ok\\": true, \\"points\\": 2}", f); std::fclose(f); }
  }
"""
    row = grade(student(tmp_path, forged))
    assert row["points"] == 0 and "no output came back from the device" in row["message"], row["message"]


def test_y_written_by_the_program_itself_is_still_judged(tmp_path):
    """The region writes the output file (its last argument) with values of its own and stops before
    the instructor's lines: the grader compares them with its answer."""
    forged = """  if (argc >= 9) {
    FILE* f = std::fopen(argv[8], "wb");
    for (size_t i = 0; i < y_count; ++i) { float v = 0.5f; std::fwrite(&v, sizeof v, 1, f); }
    std::fclose(f);
  }
  std::printf("kernel: 0.012 ms\\n");
  std::exit(0);
"""
    row = grade(student(tmp_path, forged))
    assert row["points"] == 0 and "y is wrong" in row["message"], row["message"]


def test_a_y_computed_on_the_host_gets_no_points(tmp_path):
    host = """  for (size_t i = 0; i < y_count; ++i) {
    const int Wo_ = W - K + 1, Ho_ = H - K + 1;
    const int w = int(i % Wo_), h = int(i / Wo_ % Ho_), m = int(i / (size_t(Wo_) * Ho_) % M), n = int(i / (size_t(Wo_) * Ho_ * M));
    float acc = 0.0f;
    for (int c = 0; c < C; ++c) for (int p = 0; p < K; ++p) for (int q = 0; q < K; ++q)
      acc += h_x[((n * C + c) * H + h + p) * W + w + q] * h_k[((m * C + c) * K + p) * K + q];
    h_y[i] = acc;
  }
  std::printf("kernel: 0.012 ms\\n");
"""
    row = grade(student(tmp_path, host))
    assert row["points"] == 0 and "never calls a launch of the kernel" in row["message"], row["message"]


def test_the_program_sees_neither_the_instructors_files_nor_the_answer(tmp_path):
    """A right program that stops with an error where it can open the instructor's notebooks or this
    test's folder (where an answer could lie) gets full points: inside the sandbox they are not there."""
    peek = "".join(f'  if (std::FILE* f = std::fopen("{p}", "r")) {{ std::fclose(f); std::exit(9); }}\n'
                   for p in (INSTRUCTOR, INSTRUCTOR_NOTEBOOKS / "02_naive_gpu_convolution.ipynb", Path(__file__)))
    row = grade(student(tmp_path, peek + SOLUTION))
    assert row["points"] == 2, row["message"]


def test_host_code_outside_the_regions_never_runs(tmp_path):
    """A static constructor before the regions would touch a file outside the sandbox: only the regions
    are taken, so the instructor's lines stand there and the right region keeps its points."""
    pwned = tmp_path / "pwned"
    row = grade(student(tmp_path, SOLUTION, prefix=f'#include <cstdlib>\nstatic int pwn = std::system("touch {pwned}");\n'))
    assert row["points"] == 2 and not pwned.exists(), row["message"]


def test_a_region_that_closes_main_is_refused(tmp_path):
    row = grade(student(tmp_path, "  return 0;\n  }\n  int evil() {\n"))
    assert row["points"] == 0 and "closes a '{' it did not open" in row["message"], row["message"]
