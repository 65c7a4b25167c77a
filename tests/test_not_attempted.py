"""An unanswered exercise in a notebook: its check cell says "not attempted", naming the exercise,
instead of a traceback through the check; any other NotImplementedError keeps IPython's traceback.
The cells run in an IPython shell, as a kernel runs them."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from labkit.course.student_copy import strip_solutions
from labkit.verdict import not_attempted, report_unanswered_exercises

NB02 = Path(__file__).resolve().parent.parent / "notebooks" / "02_naive_gpu_convolution.ipynb"


@pytest.fixture
def shell():
    from IPython.core.interactiveshell import InteractiveShell
    sh = InteractiveShell.instance()
    sh.set_custom_exc((), None)
    assert report_unanswered_exercises()
    yield sh
    sh.set_custom_exc((), None)
    InteractiveShell.clear_instance()


def cell(grade_id: str) -> str:
    nb = json.loads(NB02.read_text())
    return next("".join(c["source"]) for c in nb["cells"]
                if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)


def test_the_student_copy_of_02_reports_its_unanswered_exercise(shell, capsys):
    student, regions = strip_solutions(cell("02_naive_grid"))
    assert regions == 1
    assert shell.run_cell(student).success
    assert shell.run_cell("from labkit.ops.conv import conv_launch_config").success
    result = shell.run_cell(cell("02_naive_grid_check"))
    out = capsys.readouterr().out
    assert isinstance(result.error_in_exec, NotImplementedError)    # the check still fails: no points
    assert out.strip().splitlines() == [
        "NotImplementedError: naive_grid: not attempted: naive_grid() still says # YOUR CODE HERE and raises "
        "NotImplementedError. Write it there, run its cell, then run this check again."]


def test_an_answered_exercise_runs_its_check(shell, capsys):
    assert shell.run_cell(cell("02_naive_grid")).success
    assert shell.run_cell("from labkit.ops.conv import conv_launch_config").success
    assert shell.run_cell(cell("02_naive_grid_check")).success
    assert capsys.readouterr().out.strip() == "naive_grid matches labkit: True"


def test_another_not_implemented_error_keeps_its_traceback(shell, capsys):
    result = shell.run_cell("def later():\n    raise NotImplementedError('a feature for later')\nlater()")
    out = capsys.readouterr().out
    assert isinstance(result.error_in_exec, NotImplementedError)
    assert "Traceback" in out and "a feature for later" in out and "not attempted" not in out


def test_outside_ipython_nothing_is_reported():
    try:
        raise NotImplementedError()
    except NotImplementedError as exc:
        assert not_attempted(exc) is None           # no placeholder line above the raise
    assert not_attempted(ValueError("x")) is None
