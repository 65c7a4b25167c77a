"""The host-code exercise of notebook 02b (notebooks/exercises/02_host_code.cu) and its check
(labkit.course.host_program): the instructor's program passes, each host-side mistake a student makes
is named in words, and the verdict comes from y compared outside the program, never from what the
program says.  Each case builds one program for the CPU executor (a few seconds)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from labkit.course import host_program
from labkit.course.host_program import CASES, check_host_program, fresh_cases, inputs, required_calls_missing
from labkit.course.student_copy import strip_cu_solutions

PROGRAM = Path(__file__).resolve().parent.parent / "notebooks" / "exercises" / "02_host_code.cu"
SOURCE = PROGRAM.read_text()
ONE = [(5, 2, 3, 9, 11, 4, 3)]          # 504 outputs: two blocks of 256, the second cut short


def variant(tmp_path, old: str, new: str) -> Path:
    assert old in SOURCE, old
    p = tmp_path / "02_host_code.cu"
    p.write_text(SOURCE.replace(old, new))
    return p


def test_the_instructors_program_passes_on_the_notebooks_cases():
    v = check_host_program(PROGRAM)
    assert v.ok, v.message
    assert v.message.endswith(": True") and f"on {len(CASES)} sizes" in v.message


def test_the_inputs_are_the_programs(tmp_path):
    """The generator made again in Python gives the program's own values: the program prints y[0..3]."""
    from labkit.cuda import run_program
    rc, out, err = run_program(PROGRAM, [str(v) for v in ONE[0]])
    assert rc == 0, err
    y = host_program.answer(ONE[0]).reshape(-1)
    assert f"y[0..3] = {y[0]:.4f} {y[1]:.4f} {y[2]:.4f} {y[3]:.4f}" in out, out
    x, k = inputs(*ONE[0])
    assert x.shape == (2, 3, 9, 11) and k.shape == (4, 3, 3, 3) and x.dtype == np.float32
    assert np.all(np.abs(x) <= 1) and len(np.unique(x)) > 100       # values spread over [-1, 1)


MISTAKES = [
    ("a host pointer given to the kernel", "conv_naive<<<blocks, threads>>>(d_x,", "conv_naive<<<blocks, threads>>>(h_x.data(),",
     ["is a host pointer", "give it the pointers cudaMalloc returned"]),
    ("sizeof(float) left out of a cudaMalloc", "cudaMalloc(&d_x, x_count * sizeof(float))", "cudaMalloc(&d_x, x_count)",
     ["cudaMemcpy of 2376 bytes", "a 594-byte allocation", "runs 1782 bytes past its end", "was sizeof(float) left out of a cudaMalloc?"]),
    ("no copy back", "  CHECK(cudaMemcpy(h_y.data(), d_y, y_count * sizeof(float), cudaMemcpyDeviceToHost));\n", "",
     ["no output came back from the device", "still holds the NaN"]),
    ("a copy back of y_count bytes", "CHECK(cudaMemcpy(h_y.data(), d_y, y_count * sizeof(float)",
     "CHECK(cudaMemcpy(h_y.data(), d_y, y_count", ["only the first 126 of 504 elements", "not y_count"]),
    ("too few blocks", "const int blocks = int((y_count + threads - 1) / threads);",
     "const int blocks = int(y_count / threads);", ["the last 248 of 504 elements of y were never written",
                                                    "cover only the first 256", "round the number of blocks up"]),
    ("a failed launch not checked", "conv_naive<<<blocks, threads>>>(d_x, d_k, d_y, N, C, H, W, M, K);\n  CHECK(cudaGetLastError());",
     "conv_naive<<<blocks, 2048>>>(d_x, d_k, d_y, N, C, H, W, M, K);",
     ["the launch failed", "2048 threads", "did not check cudaGetLastError()"]),
    ("a failed launch checked", "conv_naive<<<blocks, threads>>>", "conv_naive<<<blocks, 2048>>>",
     ["the launch failed", "the program's check caught it", "02_host_code.cu:", "fix the launch's configuration"]),
    ("a double free", "  CHECK(cudaFree(d_y));\n", "  CHECK(cudaFree(d_y));\n  CHECK(cudaFree(d_y));\n",
     ["was already freed (a double free)", "free each device array once"]),
    ("no time printed", '  std::printf("kernel: %.3f ms\\n", ms);\n', "", ["y is right, but the program printed no time"]),
    ("no cudaFree", "  CHECK(cudaFree(d_x));\n  CHECK(cudaFree(d_k));\n  CHECK(cudaFree(d_y));\n", "",
     ["y is right, but your code never calls cudaFree"]),
    ("a syntax error", "const int threads = 256;", "const int threads = 256",
     ["does not compile", "02_host_code.cu:", "error: expected"]),
]


@pytest.mark.parametrize("what, old, new, words", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_each_mistake_is_named(tmp_path, what, old, new, words):
    v = check_host_program(variant(tmp_path, old, new), cases=ONE)
    assert not v.ok
    for w in words:
        assert w in v.message, f"{what}: {w!r} not in:\n{v.message}"
    assert str(tmp_path) not in v.message       # the file's name, not where it lies


def test_the_student_copy_is_not_attempted_and_an_empty_main_gets_nothing_back(tmp_path):
    p = tmp_path / "02_host_code.cu"
    p.write_text(strip_cu_solutions(SOURCE)[0])
    v = check_host_program(p, cases=ONE)
    assert not v.ok and "not attempted" in v.message and "// BEGIN YOUR CODE" in v.message, v.message
    p.write_text(strip_cu_solutions(SOURCE)[0].replace("// YOUR CODE HERE", "(void)d_x;"))
    v = check_host_program(p, cases=ONE)
    assert not v.ok and "no output came back from the device" in v.message, v.message


def test_printing_a_pass_is_not_a_pass(tmp_path):
    """A program that prints what a right one prints (a time, a verdict), computing nothing: y is judged here."""
    start = SOURCE.index("  // BEGIN SOLUTION")
    end = SOURCE.index("  // END SOLUTION")
    fake = SOURCE[:start] + ('  std::printf("kernel: 0.010 ms\\n02_host_code.cu: True\\nPASS\\n");\n'
                             '  d_x = d_k = d_y = nullptr;\n') + SOURCE[end:]
    p = tmp_path / "02_host_code.cu"
    p.write_text(fake)
    v = check_host_program(p, cases=ONE)
    assert not v.ok and "no output came back" in v.message, v.message


def test_a_y_computed_on_the_host_is_not_the_exercise(tmp_path):
    start = SOURCE.index("  // BEGIN SOLUTION") + len("  // BEGIN SOLUTION\n")
    end = SOURCE.index("  // END SOLUTION")
    host = """  const int Ho_ = H - K + 1, Wo_ = W - K + 1;
  for (size_t i = 0; i < y_count; ++i) {
    const int w = int(i % Wo_), h = int(i / Wo_ % Ho_), m = int(i / (size_t(Wo_) * Ho_) % M), n = int(i / (size_t(Wo_) * Ho_ * M));
    float acc = 0.0f;
    for (int c = 0; c < C; ++c) for (int p = 0; p < K; ++p) for (int q = 0; q < K; ++q)
      acc += h_x[((n * C + c) * H + h + p) * W + w + q] * h_k[((m * C + c) * K + p) * K + q];
    h_y[i] = acc;
  }
  std::printf("kernel: 0.001 ms\\n");
  // conv_naive<<<1, 1>>> in a comment is no launch; nor is cudaGetLastError() cudaDeviceSynchronize()
"""
    p = tmp_path / "02_host_code.cu"
    p.write_text(SOURCE[:start] + host + SOURCE[end:])
    v = check_host_program(p, cases=ONE)
    assert not v.ok and "y is right, but your code never calls a launch of the kernel" in v.message, v.message
    assert "cudaMalloc" in v.message and "cudaGetLastError" in v.message


def test_the_required_calls_are_read_from_the_regions_without_comments():
    assert required_calls_missing(SOURCE) == []
    assert len(required_calls_missing(strip_cu_solutions(SOURCE)[0])) == 7


def test_fresh_cases_are_a_students_own():
    a, b = fresh_cases(np.random.default_rng(1)), fresh_cases(np.random.default_rng(2))
    assert a != b and len(a) == 3 and not set(a) & set(CASES)
    _, N, C, H, W, M, K = a[0]
    n = N * M * (H - K + 1) * (W - K + 1)
    assert n > 512 and n % 256
    assert fresh_cases(np.random.default_rng(1)) == a


def test_a_bad_case_is_refused_before_anything_is_built():
    with pytest.raises(ValueError, match="H and W at least K"):
        check_host_program(PROGRAM, cases=[(1, 1, 1, 2, 9, 1, 3)])
